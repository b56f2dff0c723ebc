//! `GatewayError`, the one error type request handlers return. It knows its HTTP status, the
//! OpenAI error `type`/`code` it renders as, and a short metric-safe kind. Messages are written for
//! clients; internal details stay in logs.

use bytes::Bytes;
use http::StatusCode;
use switchyard_protocol::chat::{Api, ApiError, ErrorKind, TranslateError};
use switchyard_protocol::error::CONTENT_BLOCKED;
use switchyard_protocol::openai::{ErrorBody, ErrorDetail};

const MISDIRECTED: &str = "this gateway does not answer to that Host (security.allowed_hosts)";

#[derive(Debug, Clone, PartialEq)]
pub enum GatewayError {
    /// A backend answered with a body the gateway could not translate for the client.
    BadGateway {
        message: String,
    },
    /// Malformed JSON or a missing/ill-typed field.
    BadRequest {
        message: String,
        param: Option<&'static str>,
    },
    PayloadTooLarge {
        limit: usize,
    },
    /// A guardrail refused the request's content (`guardrails:` with `action: block`): the guard
    /// (empty for the configured guardrails, whose reason names the deciding one) and why — the
    /// kind found, never the matched text.
    ContentBlocked {
        guard: String,
        reason: String,
    },
    /// The client did not send its whole request body within `timeouts.body_read`.
    BodyTimeout,
    /// The request target is longer than `limits.max_uri_bytes`.
    UriTooLong {
        limit: usize,
    },
    RouteNotFound,
    MethodNotAllowed,
    UnsupportedMediaType,
    ModelNotFound {
        model: String,
    },
    /// The model is served, but by no backend that serves this endpoint (`rerank`, `images`...).
    NotServedFor {
        model: String,
        capability: &'static str,
    },
    /// Every backend serving the model is down or its breaker is open.
    NoHealthyBackend {
        model: String,
    },
    /// Every backend serving the model is at its concurrency cap and the queue is full, or the
    /// request waited in it too long.
    Overloaded {
        model: String,
        retry_after_secs: u64,
    },
    /// Every backend serving the model asked for a pause (a 429, or a 503 with `Retry-After`)
    /// longer than the request may wait.
    BackendsCooling {
        model: String,
        retry_after_secs: u64,
    },
    UpstreamTimeout,
    /// The fleet's shared limits (Redis) cannot be reached and their `on_failure` is `closed`.
    LimitsUnavailable,
    /// The key database cannot be reached and this key is not in the cache.
    KeysUnavailable,
    /// A bearer token's issuer cannot be reached and no cached key can check the token.
    IdentityUnavailable,
    /// A webhook guard with `on_error: closed` could not be asked in time.
    GuardrailUnavailable,
    /// A named resource (such as an admin key id) does not exist.
    NotFound {
        message: String,
    },
    /// The change would break a uniqueness rule (a team's name, a user's email).
    Conflict {
        message: String,
    },
    /// Missing, malformed, unknown, revoked or expired key.
    Unauthorized {
        message: String,
        code: &'static str,
    },
    /// A valid key that may not do this (e.g. a model outside its allow-list).
    Forbidden {
        message: String,
        code: &'static str,
    },
    /// A policy rule (`policies:`, a team's or a key's) denied the request.
    PolicyDenied {
        rule: String,
        message: String,
    },
    /// A rate limit or budget refused the request; headers say when to retry.
    RateLimited {
        message: String,
        code: &'static str,
        retry_after_secs: u64,
        headers: Box<http::HeaderMap>,
    },
    /// The request's `Host` is not one this gateway answers to (`security.allowed_hosts`).
    MisdirectedHost,
    /// Something broke inside the gateway (details are in the log, under the request id).
    Internal,
}

impl GatewayError {
    pub fn bad_request(message: impl Into<String>, param: Option<&'static str>) -> Self {
        GatewayError::BadRequest { message: message.into(), param }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            GatewayError::BadRequest { .. } | GatewayError::ContentBlocked { .. } => StatusCode::BAD_REQUEST,
            GatewayError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            GatewayError::UriTooLong { .. } => StatusCode::URI_TOO_LONG,
            GatewayError::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            GatewayError::RouteNotFound | GatewayError::ModelNotFound { .. } | GatewayError::NotServedFor { .. } => {
                StatusCode::NOT_FOUND
            }
            GatewayError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            GatewayError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            GatewayError::NoHealthyBackend { .. }
            | GatewayError::Overloaded { .. }
            | GatewayError::BackendsCooling { .. }
            | GatewayError::LimitsUnavailable
            | GatewayError::KeysUnavailable
            | GatewayError::IdentityUnavailable
            | GatewayError::GuardrailUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            GatewayError::UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
            GatewayError::NotFound { .. } => StatusCode::NOT_FOUND,
            GatewayError::Conflict { .. } => StatusCode::CONFLICT,
            GatewayError::Unauthorized { .. } => StatusCode::UNAUTHORIZED,
            GatewayError::Forbidden { .. } => StatusCode::FORBIDDEN,
            GatewayError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            GatewayError::PolicyDenied { .. } => StatusCode::FORBIDDEN,
            GatewayError::MisdirectedHost => StatusCode::MISDIRECTED_REQUEST,
            GatewayError::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            GatewayError::BadGateway { .. } => StatusCode::BAD_GATEWAY,
        }
    }

    /// Short label for metrics and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            GatewayError::BadRequest { .. } => "bad_request",
            GatewayError::ContentBlocked { .. } => "content_blocked",
            GatewayError::PayloadTooLarge { .. } => "payload_too_large",
            GatewayError::UriTooLong { .. } => "uri_too_long",
            GatewayError::BodyTimeout => "request_body_timeout",
            GatewayError::RouteNotFound => "route_not_found",
            GatewayError::MethodNotAllowed => "method_not_allowed",
            GatewayError::UnsupportedMediaType => "unsupported_media_type",
            GatewayError::ModelNotFound { .. } | GatewayError::NotServedFor { .. } => "model_not_found",
            GatewayError::NoHealthyBackend { .. } => "no_healthy_backend",
            GatewayError::Overloaded { .. } => "overloaded",
            GatewayError::BackendsCooling { .. } => "backends_cooling",
            GatewayError::UpstreamTimeout => "upstream_timeout",
            GatewayError::LimitsUnavailable => "limits_unavailable",
            GatewayError::KeysUnavailable => "keys_unavailable",
            GatewayError::IdentityUnavailable => "identity_unavailable",
            GatewayError::GuardrailUnavailable => "guardrail_unavailable",
            GatewayError::NotFound { .. } => "not_found",
            GatewayError::Conflict { .. } => "conflict",
            GatewayError::Unauthorized { .. } => "unauthorized",
            GatewayError::Forbidden { .. } => "forbidden",
            GatewayError::RateLimited { .. } => "rate_limited",
            GatewayError::PolicyDenied { .. } => "policy_denied",
            GatewayError::MisdirectedHost => "misdirected_host",
            GatewayError::Internal => "internal",
            GatewayError::BadGateway { .. } => "bad_gateway",
        }
    }

    /// What cannot be checked right now, for the 503s that say so.
    fn unavailable(&self) -> &'static str {
        match self {
            GatewayError::KeysUnavailable => {
                "this key cannot be checked right now (the key database is unreachable); retry shortly"
            }
            GatewayError::IdentityUnavailable => {
                "this token cannot be checked right now (its identity provider is unreachable); retry shortly"
            }
            GatewayError::GuardrailUnavailable => {
                "a guardrail this request must pass cannot be reached right now; retry shortly"
            }
            _ => "this key's limits cannot be checked right now (shared state unreachable); retry shortly",
        }
    }

    /// What a model that is not found says: no such model, or none of its backends serves the
    /// endpoint.
    fn not_found(&self) -> String {
        match self {
            GatewayError::NotServedFor { model, capability } => {
                format!("no backend of the model `{model}` serves {capability}")
            }
            GatewayError::ModelNotFound { model } => {
                format!("the model `{model}` does not exist or no backend serves it")
            }
            _ => String::new(),
        }
    }

    pub fn to_body(&self) -> ErrorBody {
        let (message, kind, param, code): (String, &str, Option<&str>, Option<&str>) = match self {
            GatewayError::BadRequest { message, param } => (message.clone(), "invalid_request_error", *param, None),
            GatewayError::ContentBlocked { guard, reason } => {
                (blocked_message(guard, reason), "invalid_request_error", None, Some(CONTENT_BLOCKED))
            }
            GatewayError::PayloadTooLarge { limit } => (
                format!("request body is larger than the {limit}-byte limit"),
                "invalid_request_error",
                None,
                Some("request_too_large"),
            ),
            GatewayError::BodyTimeout => (
                "the request body did not arrive in time".to_owned(),
                "invalid_request_error",
                None,
                Some("request_body_timeout"),
            ),
            GatewayError::UriTooLong { limit } => (
                format!("the request target is longer than the {limit}-byte limit"),
                "invalid_request_error",
                None,
                Some("uri_too_long"),
            ),
            GatewayError::RouteNotFound => {
                ("no such route".to_owned(), "invalid_request_error", None, Some("unknown_url"))
            }
            GatewayError::MethodNotAllowed => {
                ("method not allowed on this route".to_owned(), "invalid_request_error", None, None)
            }
            GatewayError::UnsupportedMediaType => (
                "request body must be JSON (content-type: application/json)".to_owned(),
                "invalid_request_error",
                None,
                None,
            ),
            GatewayError::ModelNotFound { .. } | GatewayError::NotServedFor { .. } => {
                (self.not_found(), "invalid_request_error", Some("model"), Some("model_not_found"))
            }
            GatewayError::Overloaded { model, .. } => (
                format!("every backend serving `{model}` is busy and the queue is full; retry shortly"),
                "server_error",
                None,
                Some("overloaded"),
            ),
            GatewayError::BackendsCooling { model, retry_after_secs } => (
                format!("every backend serving `{model}` asked for a pause; retry in {retry_after_secs} s"),
                "server_error",
                None,
                Some("backends_cooling"),
            ),
            GatewayError::NoHealthyBackend { model } => (
                format!("no healthy backend is serving `{model}` right now; retry shortly"),
                "server_error",
                None,
                Some("no_healthy_backend"),
            ),
            GatewayError::UpstreamTimeout => (
                "the upstream backend did not answer in time".to_owned(),
                "server_error",
                None,
                Some("upstream_timeout"),
            ),
            GatewayError::LimitsUnavailable
            | GatewayError::KeysUnavailable
            | GatewayError::IdentityUnavailable
            | GatewayError::GuardrailUnavailable => {
                (self.unavailable().to_owned(), "server_error", None, Some(self.kind()))
            }
            GatewayError::NotFound { message } => (message.clone(), "invalid_request_error", None, Some("not_found")),
            GatewayError::Conflict { message } => (message.clone(), "invalid_request_error", None, Some("conflict")),
            GatewayError::Unauthorized { message, code } => {
                (message.clone(), "invalid_request_error", None, Some(*code))
            }
            GatewayError::Forbidden { message, code } => (message.clone(), "permission_error", None, Some(*code)),
            GatewayError::RateLimited { message, code, .. } => (message.clone(), "rate_limit_error", None, Some(*code)),
            GatewayError::PolicyDenied { rule, message } => {
                (format!("{message} (policy `{rule}`)"), "permission_error", None, Some("policy_denied"))
            }
            GatewayError::MisdirectedHost => {
                (MISDIRECTED.to_owned(), "invalid_request_error", None, Some("misdirected_host"))
            }
            GatewayError::Internal => (
                "internal error; the gateway log has details under this request's x-request-id".to_owned(),
                "server_error",
                None,
                Some("internal_error"),
            ),
            GatewayError::BadGateway { message } => (message.clone(), "server_error", None, Some("bad_gateway")),
        };
        ErrorBody {
            error: ErrorDetail {
                message,
                kind: kind.to_owned(),
                param: param.map(str::to_owned),
                code: code.map(str::to_owned),
            },
        }
    }

    pub fn to_json(&self) -> Bytes {
        Bytes::from(serde_json::to_vec(&self.to_body()).unwrap_or_default())
    }

    /// The error body in the shape of the client's API (OpenAI's, Anthropic's or Ollama's).
    pub fn render(&self, api: Api) -> Bytes {
        if matches!(api, Api::OpenAiChat | Api::Responses) {
            return self.to_json();
        }
        let error = match self {
            GatewayError::ContentBlocked { guard, reason } => blocked_error(guard, reason),
            _ => {
                let detail = self.to_body().error;
                let mut error = ApiError::new(ErrorKind::from_status(self.status().as_u16()), detail.message);
                error.param = detail.param;
                error.code = detail.code;
                error
            }
        };
        Bytes::from(crate::translate::encode_error(api, &error))
    }

    /// A request the translation refused: a 400 naming the field or the unsupported feature.
    pub fn from_translate(e: &TranslateError) -> Self {
        GatewayError::BadRequest { message: e.to_string(), param: None }
    }
}

/// What a block says: the guard and its reason. A guard with no name of its own (the configured
/// guardrails, which are many behind one hook) names the deciding guard in its reason.
pub fn blocked_message(guard: &str, reason: &str) -> String {
    format!("blocked by {}", blocked_why(guard, reason))
}

/// A guard's block as any API renders it: an invalid request with the code `content_blocked` and,
/// for shapes with room for them, the guard and the kind it found (never the matched text).
pub fn blocked_error(guard: &str, reason: &str) -> ApiError {
    let (name, kind) = blocked_parts(guard, reason);
    ApiError {
        code: Some(CONTENT_BLOCKED.to_owned()),
        metadata: vec![("guard".to_owned(), name.to_owned()), ("kind".to_owned(), kind.to_owned())],
        ..ApiError::new(ErrorKind::InvalidRequest, blocked_message(guard, reason))
    }
}

/// A configured guardrail's reason for a block, naming it: "guardrail `NAME` (KIND)", or without
/// a kind. `blocked_parts` reads the two back for the shapes that carry them apart.
pub fn guard_reason(name: &str, kind: Option<&str>) -> String {
    match kind {
        Some(kind) => format!("guardrail `{name}` ({kind})"),
        None => format!("guardrail `{name}`"),
    }
}

/// The guard and the kind of a block: the configured guardrails name the deciding guard in their
/// reason (`guard_reason`; a detector's kind after "found: "); a guard with a name of its own
/// gives the reason alone.
fn blocked_parts<'a>(guard: &'a str, reason: &'a str) -> (&'a str, &'a str) {
    if !guard.is_empty() {
        return (guard, reason);
    }
    let Some((name, rest)) = reason.strip_prefix("guardrail `").and_then(|r| r.split_once('`')) else {
        return ("", reason);
    };
    let kind = rest.trim().strip_prefix('(').and_then(|k| k.strip_suffix(')')).unwrap_or("");
    (name, kind.strip_prefix("found: ").unwrap_or(kind))
}

/// What follows "blocked by": the guard and its reason (the reason alone for the configured
/// guardrails, whose reason names the deciding guard). MCP refusals put their own "blocked by"
/// before it.
pub fn blocked_why(guard: &str, reason: &str) -> String {
    if guard.is_empty() {
        reason.to_owned()
    } else {
        format!("guardrail `{guard}`: {reason}")
    }
}

impl std::fmt::Display for GatewayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_body().error.message)
    }
}

impl std::error::Error for GatewayError {}

/// A mid-stream failure rendered as a final SSE event in OpenAI error shape.
pub fn sse_error_event(message: &str, code: &str) -> Bytes {
    let body = ErrorBody {
        error: ErrorDetail {
            message: message.to_owned(),
            kind: "server_error".to_owned(),
            param: None,
            code: Some(code.to_owned()),
        },
    };
    let mut out = b"data: ".to_vec();
    out.extend(serde_json::to_vec(&body).unwrap_or_default());
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_openai_shape() {
        let v: serde_json::Value =
            serde_json::from_slice(&GatewayError::ModelNotFound { model: "x".into() }.to_json()).unwrap();
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(v["error"]["param"], "model");
        assert_eq!(v["error"]["code"], "model_not_found");
        assert!(v["error"]["message"].as_str().unwrap().contains('x'));
    }

    #[test]
    fn a_block_names_its_guard_and_kind() {
        let parts = |guard, reason| {
            let e = blocked_error(guard, reason);
            (e.code.unwrap(), e.metadata.into_iter().map(|(_, v)| v).collect::<Vec<_>>())
        };
        let blocked = |g: &str, k: &str| (CONTENT_BLOCKED.to_owned(), vec![g.to_owned(), k.to_owned()]);
        assert_eq!(parts("", "guardrail `blocker` (found: keyword)"), blocked("blocker", "keyword"));
        assert_eq!(parts("", "guardrail `llama` (unsafe: S1, S2)"), blocked("llama", "unsafe: S1, S2"));
        assert_eq!(parts("", "guardrail `hook`"), blocked("hook", ""));
        assert_eq!(parts("custom", "the word"), blocked("custom", "the word"));
    }

    #[test]
    fn sse_event_is_one_data_line() {
        let e = sse_error_event("boom", "upstream_stream_error");
        let s = std::str::from_utf8(&e).unwrap();
        assert!(s.starts_with("data: {\"error\":"));
        assert!(s.ends_with("\n\n"));
    }
}
