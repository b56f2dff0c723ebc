//! An attempt at a backend with a key pool (`api_keys`): the key with the most headroom (the
//! fleet's choice, through Redis, when instances share state), and the answer read for what the
//! provider says of that key's limits. A 429 rests the key and a 401 takes it out, and the
//! request goes again at once with another key of the same backend — before any failover to
//! another backend, and unseen by the client while any key has headroom. Without a pool this is
//! `attempt_once`.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use switchyard_keypool::Outcome;

use super::attempt::{attempt_once, AttemptError, Headers};
use crate::app::App;
use crate::route::backend::Backend;
use crate::route::keys::BackendKeys;
use crate::shared::keys as fleet;
use crate::translate::Wire;
use crate::upstream::pool::UpstreamBody;

type Head = (http::response::Parts, UpstreamBody, Option<http_body::Frame<Bytes>>);

/// The key an attempt went with.
pub struct KeyUse {
    pub keys: Arc<BackendKeys>,
    pub key: usize,
}

impl KeyUse {
    /// What counts the request's tokens against its key's `tpm` once they are known.
    pub fn spent_hook(&self, app: &App, backend: &str) -> crate::http::metering::SpentHook {
        let (keys, key, shared, backend) = (self.keys.clone(), self.key, app.shared.clone(), backend.to_owned());
        let clock = app.clock.clone();
        Box::new(move |tokens| {
            let now = u64::try_from(clock.unix_ms()).unwrap_or(0);
            keys.pool.add_tokens(key, tokens, now);
            if let Some(shared) = shared {
                fleet::spent(shared, &backend, keys.name(key), tokens, now);
            }
        })
    }
}

/// One attempt at `backend`: with each of its pool's keys in turn while they are rate-limited
/// or refused, else plainly. The answer, and the key it came with.
pub async fn attempt(
    app: &App,
    backend: &Arc<Backend>,
    wire: Wire,
    body: Bytes,
    headers: Headers<'_>,
    limit: Duration,
) -> (Result<Head, AttemptError>, Option<KeyUse>) {
    let Some(keys) = backend.keys.clone() else {
        return (attempt_once(app, backend, wire, body, headers, limit).await, None);
    };
    let mut tried = Vec::new();
    // The last key's answer, a 429 or 401, stands when no other key is left to try.
    let mut last = None;
    loop {
        let Some(key) = choose(app, backend, &keys, &tried).await else {
            return match last {
                Some((outcome, key)) => (outcome, Some(KeyUse { keys, key })),
                None => (Err(AttemptError::NoKey(back_in(app, &keys))), None),
            };
        };
        tried.push(key);
        keys.sent(key);
        let with_key = Headers { credentials: Some(keys.credentials(key)), ..headers.clone() };
        let outcome = attempt_once(app, backend, wire, body.clone(), with_key, limit).await;
        let again = match &outcome {
            Ok((parts, _, _)) => judge(app, backend, &keys, key, parts),
            Err(_) => false,
        };
        if !again {
            return (outcome, Some(KeyUse { keys, key }));
        }
        last = Some((outcome, key));
    }
}

/// How long until a key may be usable again (None: every key was refused).
fn back_in(app: &App, keys: &BackendKeys) -> Option<Duration> {
    let now = now_ms(app);
    keys.pool.back_ms(now).map(|at| Duration::from_millis(at.saturating_sub(now)))
}

/// A key for the next try: the fleet's shared choice when instances share state (and Redis
/// answers), else this instance's own.
async fn choose(app: &App, backend: &Backend, keys: &BackendKeys, tried: &[usize]) -> Option<usize> {
    let now = now_ms(app);
    if let Some(shared) = &app.shared {
        if let Some(chosen) = fleet::choose(shared, backend.name(), &keys.pool, tried, now).await {
            return chosen;
        }
    }
    keys.pool.take(now, tried)
}

/// What the answer says of the key; true when the request should go again with another key.
fn judge(app: &App, backend: &Backend, keys: &BackendKeys, key: usize, parts: &http::response::Parts) -> bool {
    let now = now_ms(app);
    match keys.pool.observe(key, parts.status.as_u16(), &parts.headers, now) {
        Outcome::Served => false,
        Outcome::RateLimited { until_ms } => {
            keys.rested(key);
            if let Some(shared) = &app.shared {
                fleet::rest(shared.clone(), backend.name(), keys.name(key), until_ms, now);
            }
            tracing::debug!(backend = backend.name(), key = keys.name(key), "pool key rate-limited: resting it");
            parts.status == StatusCode::TOO_MANY_REQUESTS
        }
        Outcome::Refused => {
            if let Some(shared) = &app.shared {
                fleet::refuse(shared.clone(), backend.name(), keys.name(key));
            }
            tracing::warn!(backend = backend.name(), key = keys.name(key), "pool key refused (401): taken out");
            true
        }
    }
}

/// Wall-clock Unix ms, as the pool and the fleet count time.
fn now_ms(app: &App) -> u64 {
    u64::try_from(app.clock.unix_ms()).unwrap_or(0)
}
