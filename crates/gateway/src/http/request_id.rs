//! Request ids: propagate a sane client-supplied `x-request-id`, else mint one from a per-process
//! random prefix and a counter (unique, cheap, no syscall per request).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;

use http::HeaderValue;

pub const HEADER: &str = "x-request-id";

pub fn from_request(headers: &http::HeaderMap) -> HeaderValue {
    match headers.get(HEADER) {
        Some(v) if !v.is_empty() && v.len() <= 128 && v.to_str().is_ok() => v.clone(),
        _ => generate(),
    }
}

fn generate() -> HeaderValue {
    static PREFIX: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let prefix = *PREFIX.get_or_init(|| {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
        h.write_u32(std::process::id());
        h.finish()
    });
    let id = format!("{prefix:016x}{:016x}", COUNTER.fetch_add(1, Relaxed));
    HeaderValue::from_str(&id).unwrap_or_else(|_| HeaderValue::from_static("unknown"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn propagates_or_generates() {
        let mut h = http::HeaderMap::new();
        let a = from_request(&h);
        let b = from_request(&h);
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
        h.insert(HEADER, HeaderValue::from_static("abc-123"));
        assert_eq!(from_request(&h), "abc-123");
        h.insert(HEADER, HeaderValue::from_static(""));
        assert_eq!(from_request(&h).len(), 32);
    }
}
