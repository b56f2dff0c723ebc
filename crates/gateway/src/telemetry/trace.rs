//! One request's trace as the pipeline fills it in: ids, the caller's context, timestamps and
//! each upstream attempt. Plain data and clock reads only; spans are built from it on the export
//! task, never on the request path.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use http::{HeaderName, HeaderValue};
use opentelemetry::trace::{SpanId, TraceFlags, TraceId};

use crate::route::backend::Backend;

pub static TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
pub static TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// A W3C `traceparent` the caller sent: its trace, its span (our parent) and its flags.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Parent {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    pub flags: TraceFlags,
}

/// `traceparent` per W3C Trace Context: `00-<32 hex>-<16 hex>-<2 hex>`, lower case, no all-zero
/// ids; a later version may append fields after a `-`. Anything else is ignored (a new trace).
pub fn parse_traceparent(value: &[u8]) -> Option<Parent> {
    let text = std::str::from_utf8(value).ok()?.trim();
    let lower_hex = |s: &str| s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let (version, rest) = text.split_at_checked(2)?;
    if !lower_hex(version) || version == "ff" || (version == "00" && rest.len() != 53) {
        return None;
    }
    let rest = rest.strip_prefix('-')?;
    let (trace, rest) = rest.split_at_checked(32)?;
    let rest = rest.strip_prefix('-')?;
    let (span, rest) = rest.split_at_checked(16)?;
    let rest = rest.strip_prefix('-')?;
    let flags = rest.get(..2)?;
    if rest.len() > 2 && !rest[2..].starts_with('-') {
        return None;
    }
    if !(lower_hex(trace) && lower_hex(span) && lower_hex(flags)) {
        return None;
    }
    let trace_id = TraceId::from_hex(trace).ok().filter(|t| *t != TraceId::INVALID)?;
    let span_id = SpanId::from_hex(span).ok().filter(|s| *s != SpanId::INVALID)?;
    let flags = TraceFlags::new(u8::from_str_radix(flags, 16).ok()? & 1);
    Some(Parent { trace_id, span_id, flags })
}

/// One try at a backend: a client span.
pub struct Attempt {
    pub span_id: SpanId,
    pub backend: Arc<Backend>,
    pub start: Instant,
    pub end: Option<Instant>,
    /// When the answer's status, headers and first body frame had arrived.
    pub first_chunk: Option<Instant>,
    pub status: Option<u16>,
    /// Why the attempt failed (`error.type`), if it did.
    pub error: Option<&'static str>,
}

/// A request's trace being recorded: a server span and its attempts.
pub struct Trace {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    pub parent: Option<Parent>,
    /// The caller's `tracestate`, passed on upstream unchanged.
    pub tracestate: Option<HeaderValue>,
    /// Wall-clock time of `started`, read once: every other time is `started` plus a monotonic offset.
    pub start: SystemTime,
    pub started: Instant,
    pub method: http::Method,
    pub endpoint: crate::endpoint::Endpoint,
    /// The path, kept only where the endpoint does not name the route.
    pub path: Option<String>,
    pub request_id: HeaderValue,
    pub stream: bool,
    pub attempts: Vec<Attempt>,
}

impl Trace {
    /// A new attempt at `backend` begins now; its `traceparent` for the upstream request.
    pub fn attempt(&mut self, backend: &Arc<Backend>, span_id: SpanId) -> HeaderValue {
        self.attempts.push(Attempt {
            span_id,
            backend: backend.clone(),
            start: Instant::now(),
            end: None,
            first_chunk: None,
            status: None,
            error: None,
        });
        self.traceparent(span_id)
    }

    /// The current attempt's answer began (status and first frame in hand).
    pub fn answered(&mut self, status: u16) {
        if let Some(a) = self.attempts.last_mut() {
            a.status = Some(status);
            a.first_chunk = Some(Instant::now());
            if status >= 500 || status == 429 {
                a.end = a.first_chunk;
                a.error = Some(status_error(status));
            }
        }
    }

    /// The current attempt failed with no answer.
    pub fn failed(&mut self, error: &'static str) {
        if let Some(a) = self.attempts.last_mut() {
            a.end = Some(Instant::now());
            a.error = Some(error);
        }
    }

    /// The stream broke at the current backend and carries on at `backend`.
    pub fn resumed(&mut self, backend: &Arc<Backend>, span_id: SpanId) {
        self.failed("stream_interrupted");
        self.attempt(backend, span_id);
        if let Some(a) = self.attempts.last_mut() {
            a.status = Some(200);
        }
    }

    /// `traceparent` naming `span_id` as the parent, for a request this one makes.
    pub fn traceparent(&self, span_id: SpanId) -> HeaderValue {
        traceparent(self.trace_id, span_id, true)
    }
}

/// `00-<trace id>-<span id>-<flags>`, written by hand (once per attempt; `format!` of the ids'
/// Display cost more than building the rest of the trace).
pub fn traceparent(trace_id: TraceId, span_id: SpanId, sampled: bool) -> HeaderValue {
    let mut text = [0u8; 55];
    text[..3].copy_from_slice(b"00-");
    write_hex(&trace_id.to_bytes(), &mut text[3..35]);
    text[35] = b'-';
    write_hex(&span_id.to_bytes(), &mut text[36..52]);
    text[52..].copy_from_slice(if sampled { b"-01" } else { b"-00" });
    HeaderValue::from_bytes(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// `bytes` as lower-case hex into `out` (twice as long), a byte's two digits at a time: on every
/// request that passes a fresh context on, digit by digit cost more than the rest of that path.
fn write_hex(bytes: &[u8], out: &mut [u8]) {
    static PAIRS: [[u8; 2]; 256] = {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut pairs = [[0u8; 2]; 256];
        let mut i = 0;
        while i < 256 {
            pairs[i] = [DIGITS[i >> 4], DIGITS[i & 15]];
            i += 1;
        }
        pairs
    };
    for (pair, b) in out.chunks_exact_mut(2).zip(bytes) {
        pair.copy_from_slice(&PAIRS[usize::from(*b)]);
    }
}

/// `error.type` for an HTTP status: the code itself, as the HTTP conventions do.
fn status_error(status: u16) -> &'static str {
    match status {
        429 => "429",
        500 => "500",
        502 => "502",
        503 => "503",
        504 => "504",
        _ => "http_error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traceparent_sent_upstream_names_the_trace_and_the_attempt() {
        let trace = Trace {
            trace_id: TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap(),
            span_id: SpanId::from_hex("00f067aa0ba902b7").unwrap(),
            parent: None,
            tracestate: None,
            start: SystemTime::now(),
            started: Instant::now(),
            method: http::Method::POST,
            endpoint: crate::endpoint::Endpoint::ChatCompletions,
            path: None,
            request_id: HeaderValue::from_static("r"),
            stream: false,
            attempts: Vec::new(),
        };
        let attempt = SpanId::from_hex("0a0b0c0d0e0f1011").unwrap();
        let value = trace.traceparent(attempt);
        assert_eq!(value, "00-4bf92f3577b34da6a3ce929d0e0e4736-0a0b0c0d0e0f1011-01");
        let parsed = parse_traceparent(value.as_bytes()).unwrap();
        assert_eq!((parsed.trace_id, parsed.span_id), (trace.trace_id, attempt));
        assert_eq!(
            traceparent(trace.trace_id, attempt, false),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0a0b0c0d0e0f1011-00"
        );
    }

    #[test]
    fn traceparent_follows_the_w3c_rules() {
        let p = parse_traceparent(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        assert_eq!(p.trace_id, TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap());
        assert_eq!(p.span_id, SpanId::from_hex("00f067aa0ba902b7").unwrap());
        assert!(p.flags.is_sampled());
        let unsampled = parse_traceparent(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00").unwrap();
        assert!(!unsampled.flags.is_sampled());
        // A later version may carry more fields.
        assert!(parse_traceparent(b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz").is_some());
        for bad in [
            &b"00-00000000000000000000000000000000-00f067aa0ba902b7-01"[..],
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            b"00-+bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902é7-01".as_bytes(),
            b"",
        ] {
            assert_eq!(parse_traceparent(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }
}
