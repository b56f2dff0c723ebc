//! Google's Gemini API (`models/{model}:generateContent`, and `:streamGenerateContent?alt=sse`),
//! both ways: requests encoded for a Gemini backend and its responses and SSE streams decoded,
//! and a Gemini client's requests decoded and answered (responses, streams, errors). Built from the API reference (`GenerateContentRequest`,
//! `GenerateContentResponse`, `FunctionCall`/`FunctionResponse`, `UsageMetadata`, the `google.rpc`
//! error shape). The model is named in the URL, not in the body.

mod count_tokens;
mod request;
mod request_decode;
mod response;
mod response_encode;
mod stream_decode;
mod stream_encode;

pub use count_tokens::{decode_count_tokens_request, encode_count_tokens_response};
pub use request::encode_request;
pub use request_decode::decode_request;
pub use response::decode_response;
pub use response_encode::{encode_error, encode_response};
pub use stream_decode::SseDecoder;
pub use stream_encode::SseEncoder;

use serde::Deserialize;

use crate::chat::StopReason;
use crate::error::{ApiError, ErrorKind};
use crate::json::Text;

pub(crate) const API: &str = "Gemini";

/// The stop reason a `finishReason` means.
pub(crate) fn stop_reason_of(name: &str, has_tool_calls: bool) -> StopReason {
    match name {
        "STOP" | "FINISH_REASON_UNSPECIFIED" => StopReason::EndTurn.or_tool_use(has_tool_calls),
        "MAX_TOKENS" => StopReason::MaxTokens,
        "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII" | "IMAGE_SAFETY" => {
            StopReason::ContentFilter
        }
        other => StopReason::Other(other.to_ascii_lowercase()),
    }
}

#[derive(Deserialize)]
pub(crate) struct WireErrorIn<'a> {
    #[serde(borrow)]
    error: Option<WireErrorDetail<'a>>,
}

#[derive(Deserialize)]
pub(crate) struct WireErrorDetail<'a> {
    #[serde(borrow)]
    message: Option<Text<'a>>,
    #[serde(borrow)]
    status: Option<Text<'a>>,
}

impl WireErrorDetail<'_> {
    pub(crate) fn to_api_error(&self) -> ApiError {
        let kind = match self.status.as_ref().map_or("", Text::as_str) {
            "UNAUTHENTICATED" => ErrorKind::Authentication,
            "PERMISSION_DENIED" => ErrorKind::PermissionDenied,
            "NOT_FOUND" => ErrorKind::NotFound,
            "RESOURCE_EXHAUSTED" => ErrorKind::RateLimited,
            "UNAVAILABLE" => ErrorKind::Overloaded,
            "DEADLINE_EXCEEDED" => ErrorKind::Timeout,
            "INTERNAL" | "UNKNOWN" | "DATA_LOSS" => ErrorKind::Server,
            _ => ErrorKind::InvalidRequest,
        };
        ApiError::new(kind, self.message.as_ref().map_or("", Text::as_str))
    }
}

/// The error in a Gemini-shaped body (`{"error":{"code","message","status"}}`); `None` for
/// other shapes.
pub fn decode_error(body: &[u8]) -> Option<ApiError> {
    let wire: WireErrorIn<'_> = serde_json::from_slice(body).ok()?;
    let detail = wire.error?;
    detail.status.as_ref()?;
    Some(detail.to_api_error())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_errors() {
        let body = br#"{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED"}}"#;
        let e = decode_error(body).unwrap();
        assert_eq!(
            (e.kind, e.message.as_str()),
            (ErrorKind::RateLimited, "Resource has been exhausted (e.g. check quota).")
        );
        assert_eq!(decode_error(br#"{"error":{"message":"openai"}}"#), None);
    }
}
