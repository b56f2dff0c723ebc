//! The response cache on the request path: whether a request uses it (`cache.opt_in`, the key's
//! `cache:on`/`cache:off` tag, the request's `x-switchyard-cache: on|off` and `Cache-Control:
//! no-cache, no-store, max-age`), a hit answered without a backend, and what a miss needs to
//! store its answer once relayed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, HeaderMap, HeaderName, HeaderValue, Response, StatusCode};

use super::headers::{insert_limit_headers, server_timing, MODEL_HEADER, SERVER_TIMING};
use crate::app::App;
use crate::auth::Identity;
use crate::cache::{self, Entry, Fill, KeyParts, Source};
use crate::config::CacheNamespace;
use crate::endpoint::Endpoint;
use crate::http::metering::Meter;
use crate::http::GatewayBody;
use crate::limit::Permit;

pub static CACHE_HEADER: HeaderName = HeaderName::from_static("x-switchyard-cache");
static ROUTE_CACHE: HeaderValue = HeaderValue::from_static("cache");

/// A request that uses the cache.
pub struct Cached {
    digest: cache::Digest,
    /// May be answered from the cache (not `no-cache`), with an answer no older than this.
    read: bool,
    max_age: Option<Duration>,
    /// Its answer may be stored (not `no-store`).
    store: bool,
    endpoint: Endpoint,
    stream: bool,
    /// The semantic layer's lookup missed: what stores this request's answer there.
    pub semantic: std::sync::Mutex<Option<crate::cache::semantic::Pending>>,
    /// What `x-switchyard-cache` says of a miss (`miss; similarity=…; rejected=…`).
    pub miss_note: Option<HeaderValue>,
}

/// What a request says about the cache.
#[derive(Debug, Default, PartialEq)]
struct Directives {
    no_cache: bool,
    no_store: bool,
    max_age: Option<Duration>,
    /// `x-switchyard-cache: on` or `off`.
    switch: Option<bool>,
}

impl Directives {
    fn of(headers: &HeaderMap) -> Directives {
        let mut d = Directives::default();
        for value in headers.get_all(header::CACHE_CONTROL) {
            for directive in value.to_str().unwrap_or_default().split(',') {
                let directive = directive.trim();
                let (name, arg) = directive.split_once('=').unwrap_or((directive, ""));
                match name.trim().to_ascii_lowercase().as_str() {
                    "no-cache" => d.no_cache = true,
                    "no-store" => d.no_store = true,
                    "max-age" => d.max_age = arg.trim().trim_matches('"').parse().ok().map(Duration::from_secs),
                    _ => {}
                }
            }
        }
        d.switch = match headers.get(&CACHE_HEADER).map(|v| v.as_bytes().to_ascii_lowercase()).as_deref() {
            Some(b"on" | b"true" | b"1") => Some(true),
            Some(b"off" | b"false" | b"0") => Some(false),
            _ => None,
        };
        d
    }
}

impl Cached {
    /// Whether and how this request uses the cache; None when it does not.
    pub fn of(
        app: &App,
        endpoint: Endpoint,
        headers: &HeaderMap,
        identity: &Identity,
        body: &[u8],
        model: &str,
        stream: bool,
    ) -> Option<Cached> {
        app.cache.as_ref()?;
        let config = &app.config.cache;
        if !endpoint.spec().cacheable {
            return None;
        }
        let d = Directives::of(headers);
        let key = identity.key();
        let tagged = key.and_then(|k| {
            k.tags.iter().find_map(|t| match t.as_str() {
                "cache:on" => Some(true),
                "cache:off" => Some(false),
                _ => None,
            })
        });
        // An operator's `cache:off` and a request's `off` always win; `on` from either opts in.
        let on = match (d.switch, tagged) {
            (Some(false), _) | (_, Some(false)) => false,
            (Some(true), _) | (_, Some(true)) => true,
            _ => !config.opt_in,
        };
        if !on {
            return None;
        }
        let key_ns = || key.map_or_else(|| "key:".to_owned(), |k| format!("key:{}", k.id));
        let namespace = match config.namespace {
            CacheNamespace::Key => key_ns(),
            CacheNamespace::Team => key.and_then(|k| k.team_name()).map_or_else(key_ns, |t| format!("team:{t}")),
            CacheNamespace::Global => String::new(),
        };
        let beta = headers.get("anthropic-beta").map_or(&[][..], HeaderValue::as_bytes);
        let parts = KeyParts { namespace: &namespace, model, endpoint, stream, beta };
        let digest = cache::digest(&parts, body)?;
        let max_age = d.max_age;
        let read = !d.no_cache && max_age != Some(Duration::ZERO);
        let semantic = std::sync::Mutex::new(None);
        Some(Cached { digest, read, max_age, store: !d.no_store, endpoint, stream, semantic, miss_note: None })
    }

    /// Whether a stored answer may be served (not `no-cache`, not `max-age=0`).
    pub fn reads(&self) -> bool {
        self.read
    }

    /// Whether the answer may be stored (not `no-store`).
    pub fn stores(&self) -> bool {
        self.store
    }

    /// The stored answer, when there is one this request may be given.
    pub async fn lookup(&self, app: &App) -> Option<(Arc<Entry>, Source)> {
        let cache = app.cache.as_ref()?;
        if !self.read {
            return None;
        }
        cache.get(&self.digest, self.max_age).await
    }

    /// What stores a relayed answer: only a 200 the backend did not mark `no-store`, when the
    /// request allows it.
    pub fn fill(
        &self,
        app: &App,
        status: StatusCode,
        headers: &HeaderMap,
        content_type: Option<&HeaderValue>,
        model: &str,
    ) -> Option<Box<Fill>> {
        let cache = app.cache.as_ref()?;
        let no_store = headers
            .get_all(header::CACHE_CONTROL)
            .iter()
            .any(|v| v.to_str().is_ok_and(|v| v.contains("no-store") || v.contains("private")));
        if !self.store || status != StatusCode::OK || no_store {
            return None;
        }
        let content_type = content_type
            .map_or_else(|| Bytes::from_static(b"application/json"), |v| Bytes::copy_from_slice(v.as_bytes()));
        let fill =
            Fill::new(cache.clone(), self.digest, self.endpoint, self.stream, &app.config.cache, content_type, model);
        let pending = self.semantic.lock().ok().and_then(|mut p| p.take());
        Some(Box::new(fill.with_semantic(pending)))
    }
}

/// An answer from the cache, in the form the client gets it.
pub struct Stored {
    pub body: Bytes,
    pub content_type: Option<HeaderValue>,
    pub model: Box<str>,
    pub stored_ms: i64,
    /// `x-switchyard-cache`'s value: `exact-hit`, or `semantic-hit; similarity=…; entry=…`.
    pub verdict: HeaderValue,
    pub from_redis: bool,
    /// The tokens its first generation took, recorded as saved.
    pub saved: Option<(u64, u64)>,
}

/// Answer from the exact layer: the stored bytes as the client first received them.
pub fn respond_hit(
    app: &App,
    (entry, source): (Arc<Entry>, Source),
    meter: Option<Box<Meter>>,
    permit: Option<Permit>,
    started: Instant,
) -> Response<GatewayBody> {
    let stored = Stored {
        body: entry.body.clone(),
        content_type: HeaderValue::from_maybe_shared(entry.content_type.clone()).ok(),
        model: entry.model.clone(),
        stored_ms: entry.stored_ms,
        verdict: HeaderValue::from_static("exact-hit"),
        from_redis: source == Source::Shared,
        saved: None,
    };
    respond_stored(app, stored, meter, permit, started)
}

/// Answer from the cache, recorded in usage as served by `cache` with no tokens and no cost
/// (and, when known, what it saved).
pub fn respond_stored(
    app: &App,
    stored: Stored,
    meter: Option<Box<Meter>>,
    permit: Option<Permit>,
    started: Instant,
) -> Response<GatewayBody> {
    let mut resp = Response::new(crate::http::full(stored.body));
    let headers = resp.headers_mut();
    if let Some(ct) = stored.content_type {
        headers.insert(header::CONTENT_TYPE, ct);
    }
    let age = (app.clock.unix_ms() - stored.stored_ms).max(0) / 1000;
    headers.insert(header::AGE, HeaderValue::from(age));
    if let Ok(model) = HeaderValue::try_from(&*stored.model) {
        headers.insert(&MODEL_HEADER, model);
    }
    if stored.from_redis {
        headers.insert("x-switchyard-cache-source", HeaderValue::from_static("redis"));
    }
    insert_limit_headers(headers, &meter, &permit);
    if let Some(mut m) = meter {
        m.cache_verdict(&stored.verdict);
        m.answered("cache", 200, false, false, false);
        m.serve(&stored.model);
        m.route(if stored.verdict == "exact-hit" { &ROUTE_CACHE } else { &stored.verdict });
        match stored.saved {
            Some((prompt, completion)) => _ = m.saved(prompt, completion),
            None => m.uncharged(),
        }
        m.record_now();
    }
    resp.headers_mut().insert(&CACHE_HEADER, stored.verdict);
    if let Some(mut p) = permit {
        p.settle(0);
    }
    let overhead = started.elapsed();
    app.metrics.overhead.observe(overhead);
    app.metrics.duration.observe(overhead);
    resp.headers_mut().insert(&SERVER_TIMING, server_timing(overhead, Duration::ZERO));
    resp
}

/// What `x-switchyard-cache` says of a miss: `miss`, or why the nearest candidate was refused.
pub fn miss_verdict(cached: &Cached) -> HeaderValue {
    cached.miss_note.clone().unwrap_or(HeaderValue::from_static("miss"))
}

/// Tell the client its answer came from a backend (a miss).
pub fn mark_miss(resp: &mut Response<GatewayBody>, cached: &Cached) {
    resp.headers_mut().insert(&CACHE_HEADER, miss_verdict(cached));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn directives(pairs: &[(&str, &str)]) -> Directives {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
        }
        Directives::of(&h)
    }

    #[test]
    fn cache_control_directives_are_read() {
        assert_eq!(directives(&[]), Directives::default());
        let d = directives(&[("cache-control", "No-Cache, max-age=30"), ("cache-control", "no-store")]);
        assert!(d.no_cache && d.no_store);
        assert_eq!(d.max_age, Some(Duration::from_secs(30)));
        assert_eq!(directives(&[("x-switchyard-cache", "OFF")]).switch, Some(false));
        assert_eq!(directives(&[("x-switchyard-cache", "on")]).switch, Some(true));
        assert_eq!(directives(&[("cache-control", "max-age=soon")]).max_age, None);
    }
}
