//! The headers the proxy reads and writes: the session a client names, `server-timing`, which
//! model and backend served an answer and why, and what is never relayed (hop-by-hop).

use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue, Response};

use crate::error::GatewayError;
use crate::http::metering::Meter;
use crate::http::GatewayBody;
use crate::limit::Permit;

pub static BACKEND_HEADER: HeaderName = HeaderName::from_static("x-switchyard-backend");
pub static ROUTE_HEADER: HeaderName = HeaderName::from_static("x-switchyard-route");
pub static MODEL_HEADER: HeaderName = HeaderName::from_static("x-switchyard-model");
pub static SERVER_TIMING: HeaderName = HeaderName::from_static("server-timing");
pub static REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
pub use crate::telemetry::trace::{TRACEPARENT, TRACESTATE};

/// The answer says which model served it (`x-switchyard-model`): the one asked for, what its
/// alias resolved to, or a fallback.
pub fn served_by(
    answer: Result<Response<GatewayBody>, GatewayError>,
    model: &str,
) -> Result<Response<GatewayBody>, GatewayError> {
    answer.map(|mut resp| {
        if let Ok(model) = HeaderValue::try_from(model) {
            resp.headers_mut().insert(&MODEL_HEADER, model);
        }
        resp
    })
}

/// The key's rate-limit state as of admission (`x-ratelimit-*`), from the meter that holds the
/// permit, or from the permit itself when the request is not metered.
pub fn insert_limit_headers(headers: &mut HeaderMap, meter: &Option<Box<Meter>>, permit: &Option<Permit>) {
    match (meter, permit) {
        (Some(m), _) => m.insert_permit_headers(headers),
        (None, Some(p)) => p.snapshot.insert_into(headers),
        (None, None) => {}
    }
}

/// A session key from the headers: `x-session-id`, else any `x-…-session-id` (such as
/// `x-claude-code-session-id`).
pub fn header_session(headers: &HeaderMap) -> Option<&str> {
    fn text(v: &HeaderValue) -> Option<&str> {
        v.to_str().ok().filter(|s| !s.is_empty())
    }
    headers.get("x-session-id").and_then(text).or_else(|| {
        headers
            .iter()
            .find(|(name, _)| name.as_str().starts_with("x-") && name.as_str().ends_with("-session-id"))
            .and_then(|(_, v)| text(v))
    })
}

/// `server-timing: gateway;dur=0.031, upstream;dur=12.204` (milliseconds).
pub fn server_timing(overhead: Duration, upstream: Duration) -> HeaderValue {
    // Written by hand: this runs on every response, and `format!` with its padding cost about a
    // microsecond (float formatting several times more).
    let mut text = Vec::with_capacity(64);
    text.extend_from_slice(b"gateway;dur=");
    push_millis(&mut text, overhead);
    text.extend_from_slice(b", upstream;dur=");
    push_millis(&mut text, upstream);
    HeaderValue::from_maybe_shared(bytes::Bytes::from(text)).unwrap_or_else(|_| HeaderValue::from_static("gateway"))
}

/// `d` in milliseconds with three decimals (`12.345`).
fn push_millis(out: &mut Vec<u8>, d: Duration) {
    let micros = d.as_micros();
    let (whole, frac) = ((micros / 1000).min(u128::from(u64::MAX)) as u64, (micros % 1000) as u16);
    crate::limit::put_decimal(out, whole);
    out.extend_from_slice(&[b'.', b'0' + (frac / 100) as u8, b'0' + (frac / 10 % 10) as u8, b'0' + (frac % 10) as u8]);
}

pub fn is_hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection" | "keep-alive" | "proxy-connection" | "transfer-encoding" | "te" | "trailer" | "upgrade"
    ) || name == REQUEST_ID
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header;

    #[test]
    fn server_timing_is_in_milliseconds() {
        let v = server_timing(Duration::from_micros(31), Duration::from_millis(12));
        assert_eq!(v.to_str().unwrap(), "gateway;dur=0.031, upstream;dur=12.000");
        let v = server_timing(Duration::from_micros(1_234_567), Duration::ZERO);
        assert_eq!(v.to_str().unwrap(), "gateway;dur=1234.567, upstream;dur=0.000");
        let v = server_timing(Duration::from_micros(10_900), Duration::from_nanos(999));
        assert_eq!(v.to_str().unwrap(), "gateway;dur=10.900, upstream;dur=0.000");
    }

    #[test]
    fn hop_by_hop_headers_are_not_relayed() {
        assert!(is_hop_by_hop(&header::TRANSFER_ENCODING));
        assert!(is_hop_by_hop(&header::CONNECTION));
        assert!(!is_hop_by_hop(&header::CONTENT_TYPE));
    }
}
