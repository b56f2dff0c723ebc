//! Anthropic Messages (`POST /v1/messages`, `POST /v1/messages/count_tokens`): requests,
//! responses, SSE streams and error bodies, to and from the internal model.

mod count_tokens;
mod request;
mod response;
mod stream_decode;
mod stream_encode;

pub use count_tokens::{decode_count_tokens_request, encode_count_tokens_response, estimate_input_tokens};
pub use request::{decode_request, encode_request, DEFAULT_MAX_TOKENS};
pub use response::{decode_response, encode_response};
pub use stream_decode::SseDecoder;
pub use stream_encode::SseEncoder;

use serde::{Deserialize, Serialize};

use crate::chat::StopReason;
use crate::error::{ApiError, ErrorKind};
use crate::json::Text;

pub(crate) const API: &str = "Anthropic Messages";

/// `stop_reason` for a stop reason.
pub(crate) fn stop_reason_name(reason: &StopReason) -> &str {
    match reason {
        StopReason::EndTurn => "end_turn",
        StopReason::MaxTokens => "max_tokens",
        StopReason::StopSequence => "stop_sequence",
        StopReason::ToolUse => "tool_use",
        StopReason::ContentFilter => "refusal",
        StopReason::Other(other) if other == "pause_turn" => other,
        StopReason::Other(_) => "end_turn",
    }
}

/// The stop reason a `stop_reason` means (and the stop sequence, kept only when one matched).
pub(crate) fn stop_reason_of(name: Option<&str>, stop_sequence: Option<String>) -> (StopReason, Option<String>) {
    let reason = match name {
        Some("end_turn") | None => StopReason::EndTurn,
        Some("max_tokens" | "model_context_window_exceeded") => StopReason::MaxTokens,
        Some("stop_sequence") => return (StopReason::StopSequence, stop_sequence),
        Some("tool_use") => StopReason::ToolUse,
        Some("refusal") => StopReason::ContentFilter,
        Some(other) => StopReason::Other(other.to_owned()),
    };
    (reason, None)
}

/// Anthropic's name for a kind of error.
pub(crate) fn error_type(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::InvalidRequest => "invalid_request_error",
        ErrorKind::Authentication => "authentication_error",
        ErrorKind::PermissionDenied => "permission_error",
        ErrorKind::NotFound => "not_found_error",
        ErrorKind::RequestTooLarge => "request_too_large",
        ErrorKind::RateLimited => "rate_limit_error",
        ErrorKind::Overloaded => "overloaded_error",
        ErrorKind::Timeout => "timeout_error",
        ErrorKind::Server => "api_error",
    }
}

#[derive(Serialize)]
struct WireErrorOut<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    error: WireErrorDetailOut<'a>,
}

#[derive(Serialize)]
struct WireErrorDetailOut<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    message: &'a str,
    /// Beside the type, which stays one Anthropic defines: a code the gateway gives
    /// (`content_blocked`), which the SDKs keep on the error's body.
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<&'a str>,
}

/// `{"type":"error","error":{"type":...,"message":...[,"code":...]}}`: the body of an error
/// answer, and the data of a stream's `error` event.
pub fn encode_error(error: &ApiError) -> Vec<u8> {
    let wire = WireErrorOut {
        kind: "error",
        error: WireErrorDetailOut {
            kind: error_type(error.kind),
            message: &error.message,
            code: error.code.as_deref(),
        },
    };
    serde_json::to_vec(&wire).unwrap_or_default()
}

#[derive(Deserialize)]
struct WireErrorIn<'a> {
    #[serde(borrow, rename = "type")]
    kind: Option<Text<'a>>,
    #[serde(borrow)]
    error: Option<WireErrorDetailIn<'a>>,
}

#[derive(Deserialize)]
pub(crate) struct WireErrorDetailIn<'a> {
    #[serde(borrow, rename = "type")]
    kind: Option<Text<'a>>,
    #[serde(borrow)]
    message: Option<Text<'a>>,
}

impl WireErrorDetailIn<'_> {
    pub(crate) fn to_api_error(&self) -> ApiError {
        ApiError::new(
            ErrorKind::from_type_name(self.kind.as_ref().map_or("", Text::as_str)),
            self.message.as_ref().map_or("", Text::as_str),
        )
    }
}

/// The error in an Anthropic-shaped body; `None` for other shapes.
pub fn decode_error(body: &[u8]) -> Option<ApiError> {
    let wire: WireErrorIn<'_> = serde_json::from_slice(body).ok()?;
    if wire.kind.as_ref().map(Text::as_str) != Some("error") {
        return None;
    }
    wire.error.map(|detail| detail.to_api_error())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_errors() {
        let body = br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"r"}"#;
        assert_eq!(decode_error(body), Some(ApiError::new(ErrorKind::Overloaded, "Overloaded")));
        assert_eq!(decode_error(br#"{"error":{"message":"openai"}}"#), None);
    }

    #[test]
    fn every_kind_round_trips() {
        for kind in [
            ErrorKind::InvalidRequest,
            ErrorKind::Authentication,
            ErrorKind::PermissionDenied,
            ErrorKind::NotFound,
            ErrorKind::RequestTooLarge,
            ErrorKind::RateLimited,
            ErrorKind::Overloaded,
            ErrorKind::Timeout,
            ErrorKind::Server,
        ] {
            let error = ApiError::new(kind, "m");
            assert_eq!(decode_error(&encode_error(&error)), Some(error));
        }
    }
}
