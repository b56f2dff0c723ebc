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

/// A fresh request id (for a request the gateway makes itself).
pub fn generate() -> HeaderValue {
    static PREFIX: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let prefix = *PREFIX.get_or_init(|| {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
        h.write_u32(std::process::id());
        h.finish()
    });
    // 32 lower-case hex digits, written by hand: `format!` with padding cost a microsecond here.
    let mut id = [0u8; 32];
    write_hex(prefix, &mut id[..16]);
    write_hex(COUNTER.fetch_add(1, Relaxed), &mut id[16..]);
    HeaderValue::from_bytes(&id).unwrap_or_else(|_| HeaderValue::from_static("unknown"))
}

/// `n` as `out.len()` lower-case hex digits, zero-padded.
fn write_hex(mut n: u64, out: &mut [u8]) {
    for digit in out.iter_mut().rev() {
        *digit = b"0123456789abcdef"[(n & 15) as usize];
        n >>= 4;
    }
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
        assert!(a.as_bytes().iter().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c)), "{a:?}");
        // The counter is the last 16 digits: consecutive ids differ by one there.
        let n = |v: &HeaderValue| u64::from_str_radix(&v.to_str().unwrap()[16..], 16).unwrap();
        assert_eq!(a.as_bytes()[..16], b.as_bytes()[..16]);
        assert!(n(&b) > n(&a));
        h.insert(HEADER, HeaderValue::from_static("abc-123"));
        assert_eq!(from_request(&h), "abc-123");
        h.insert(HEADER, HeaderValue::from_static(""));
        assert_eq!(from_request(&h).len(), 32);
    }
}
