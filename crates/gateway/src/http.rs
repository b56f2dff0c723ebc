//! The client-facing HTTP mechanics every handler shares: the response body type, JSON and
//! error responses in the caller's API shape, body reading and request parsing (`parse.rs`),
//! the relayed upstream body (`relay.rs`), usage metering (`metering.rs`) and request ids.
//! Handlers (`proxy`, `admin`, `catalog`) sit above this and the route table above them.

pub mod metering;
pub mod multipart;
pub mod parse;
pub mod relay;
pub mod request_id;
pub mod resume;
pub mod sse_events;

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::{Either, Full};
use switchyard_protocol::chat::Api;

use crate::error::GatewayError;
pub use relay::RelayBody;
pub use sse_events::SseEvents;

/// Every response body the gateway sends: a small buffered one, a relayed upstream stream, or
/// events the gateway writes itself (MCP answers streamed as SSE).
pub type GatewayBody = Either<Full<Bytes>, Either<RelayBody, SseEvents>>;

/// A relayed upstream stream as a response body.
pub fn relayed(relay: RelayBody) -> GatewayBody {
    Either::Right(Either::Left(relay))
}

/// Where this gateway is, as its client reached it (`Host`; https when it serves TLS).
pub fn base_url(tls: bool, headers: &http::HeaderMap) -> String {
    let scheme = if tls { "https" } else { "http" };
    let host = headers.get(http::header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("localhost");
    format!("{scheme}://{host}")
}

pub fn full(bytes: impl Into<Bytes>) -> GatewayBody {
    Either::Left(Full::new(bytes.into()))
}

/// A JSON answer of already-encoded bytes.
pub fn json_response(status: StatusCode, body: impl Into<Bytes>) -> Response<GatewayBody> {
    let mut resp = Response::new(full(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

/// A JSON answer of a value.
pub fn json_value(status: StatusCode, value: &serde_json::Value) -> Response<GatewayBody> {
    json_response(status, serde_json::to_vec(value).unwrap_or_default())
}

/// The policy rules that decided a request or routed it (`proxy/policy.rs`).
pub static POLICY_HEADER: http::HeaderName = http::HeaderName::from_static("x-switchyard-policy");

/// An error in OpenAI's shape (the admin API's and the default).
pub fn error_response(e: &GatewayError) -> Response<GatewayBody> {
    error_response_in(e, Api::OpenAiChat)
}

/// An error in the shape of `api`, with the status and headers that go with it.
pub fn error_response_in(e: &GatewayError, api: Api) -> Response<GatewayBody> {
    let mut resp = json_response(e.status(), e.render(api));
    let h = resp.headers_mut();
    if let GatewayError::RateLimited { retry_after_secs, headers, .. } = e {
        if *retry_after_secs > 0 {
            h.insert(header::RETRY_AFTER, HeaderValue::from(*retry_after_secs));
        }
        h.extend((**headers).clone());
    }
    if let GatewayError::Overloaded { retry_after_secs, .. } | GatewayError::BackendsCooling { retry_after_secs, .. } =
        e
    {
        h.insert(header::RETRY_AFTER, HeaderValue::from(*retry_after_secs));
    }
    if let GatewayError::LimitsUnavailable
    | GatewayError::KeysUnavailable
    | GatewayError::IdentityUnavailable
    | GatewayError::GuardrailUnavailable = e
    {
        h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    if let GatewayError::PolicyDenied { rule, .. } = e {
        if let Ok(v) = HeaderValue::from_str(rule) {
            h.insert(POLICY_HEADER.clone(), v);
        }
    }
    if let GatewayError::Unauthorized { .. } = e {
        h.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    resp
}
