//! A backend's key pool as the router holds it: the pool's state (`switchyard-keypool`: which
//! key has the most headroom, which rest or were refused), each key's credentials as the headers
//! its API takes them in, and per-key counters for `/metrics`. Keys are named by their `name`
//! everywhere; the secret is only ever in a sensitive header value.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use http::{HeaderName, HeaderValue};
use switchyard_keypool::{KeyPool, KeySpec, KeyState};

use crate::config::{BackendKind, PoolKeyConfig};

pub struct BackendKeys {
    pub pool: KeyPool,
    credentials: Vec<Vec<(HeaderName, HeaderValue)>>,
    /// Requests sent with each key, and answers that rested it (429, nothing left).
    requests: Vec<AtomicU64>,
    rate_limited: Vec<AtomicU64>,
}

impl BackendKeys {
    pub fn new(kind: BackendKind, keys: &[PoolKeyConfig], backend: &str) -> Result<BackendKeys, String> {
        let credentials = keys
            .iter()
            .map(|k| super::backend::credentials(kind, Some(&k.key), backend))
            .collect::<Result<Vec<_>, _>>()?;
        let specs = keys.iter().map(|k| KeySpec { name: k.name.clone(), rpm: k.rpm, tpm: k.tpm }).collect();
        let counters = || keys.iter().map(|_| AtomicU64::new(0)).collect();
        Ok(BackendKeys { pool: KeyPool::new(specs), credentials, requests: counters(), rate_limited: counters() })
    }

    /// The headers that carry `key`.
    pub fn credentials(&self, key: usize) -> &[(HeaderName, HeaderValue)] {
        &self.credentials[key]
    }

    pub fn name(&self, key: usize) -> &str {
        &self.pool.spec(key).name
    }

    pub fn sent(&self, key: usize) {
        self.requests[key].fetch_add(1, Relaxed);
    }

    pub fn rested(&self, key: usize) {
        self.rate_limited[key].fetch_add(1, Relaxed);
    }

    /// Prometheus lines of each key, one family after the other (`pools`: each backend's name
    /// and pool), so that each family's samples stand together as the text format wants.
    pub fn render(pools: &[(&str, &BackendKeys)], now_ms: u64, out: &mut String) {
        out.push_str(METRICS_HEADER);
        let each = |out: &mut String, line: &dyn Fn(&BackendKeys, usize, &str) -> String| {
            for (backend, keys) in pools {
                for key in 0..keys.pool.len() {
                    let labels = format!("backend=\"{backend}\",key=\"{}\"", keys.name(key));
                    out.push_str(&line(keys, key, &labels));
                }
            }
        };
        each(out, &|keys, key, labels| {
            format!("switchyard_backend_key_requests_total{{{labels}}} {}\n", keys.requests[key].load(Relaxed))
        });
        each(out, &|keys, key, labels| {
            format!("switchyard_backend_key_rate_limited_total{{{labels}}} {}\n", keys.rate_limited[key].load(Relaxed))
        });
        each(out, &|keys, key, labels| {
            let state = match keys.pool.state(key, now_ms) {
                KeyState::Up => "up",
                KeyState::Resting { .. } => "resting",
                KeyState::Refused => "refused",
            };
            let mut lines = String::new();
            for s in ["up", "resting", "refused"] {
                let _ =
                    writeln!(lines, "switchyard_backend_key_state{{{labels},state=\"{s}\"}} {}", u8::from(s == state));
            }
            lines
        });
    }
}

/// HELP and TYPE of the per-key series.
const METRICS_HEADER: &str =
    "# HELP switchyard_backend_key_requests_total Requests sent with each key of a backend's pool.\n\
# TYPE switchyard_backend_key_requests_total counter\n\
# HELP switchyard_backend_key_rate_limited_total Answers that rested a key of a pool (a 429, or nothing left).\n\
# TYPE switchyard_backend_key_rate_limited_total counter\n\
# HELP switchyard_backend_key_state Each pool key's state: up, resting (rate-limited) or refused (401, taken out).\n\
# TYPE switchyard_backend_key_state gauge\n";
