//! OpenAI Chat Completions (`POST /v1/chat/completions`): requests, responses, SSE streams and
//! error bodies, to and from the internal model.

mod request;
mod request_encode;
mod response;
mod stream_decode;
mod stream_encode;

pub use request::decode_request;
pub use request_encode::encode_request;
pub use response::{decode_response, encode_response};
pub use stream_decode::SseDecoder;
pub use stream_encode::SseEncoder;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::chat::StopReason;
use crate::error::{ApiError, ErrorKind};
use crate::json::{self, Text};
use crate::openai::{ErrorBody, ErrorDetail};

/// `finish_reason` for a stop reason.
pub(crate) fn finish_reason(reason: &StopReason) -> &'static str {
    match reason {
        StopReason::MaxTokens => "length",
        StopReason::ToolUse => "tool_calls",
        StopReason::ContentFilter => "content_filter",
        StopReason::EndTurn | StopReason::StopSequence | StopReason::Other(_) => "stop",
    }
}

/// The stop reason a `finish_reason` means, with the stop sequence when the server named it
/// (vLLM's `stop_reason` holds the matched string).
pub(crate) fn stop_reason_of(
    finish_reason: Option<&str>,
    matched_stop: Option<&RawValue>,
    has_tool_calls: bool,
) -> (StopReason, Option<String>) {
    let matched = matched_stop.and_then(|raw| serde_json::from_str::<String>(raw.get()).ok());
    let reason = match finish_reason {
        Some("length") => StopReason::MaxTokens,
        Some("tool_calls" | "function_call") => StopReason::ToolUse,
        Some("content_filter") => StopReason::ContentFilter,
        Some("stop") | None if matched.is_some() => return (StopReason::StopSequence, matched),
        Some("stop") | None => StopReason::EndTurn,
        Some(other) => StopReason::Other(other.to_owned()),
    };
    (reason.or_tool_use(has_tool_calls), None)
}

/// `type` of an error in OpenAI's shape.
pub(crate) fn error_type(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::InvalidRequest | ErrorKind::NotFound | ErrorKind::RequestTooLarge => "invalid_request_error",
        ErrorKind::Authentication => "authentication_error",
        ErrorKind::PermissionDenied => "permission_error",
        ErrorKind::RateLimited => "rate_limit_error",
        ErrorKind::Overloaded | ErrorKind::Timeout | ErrorKind::Server => "server_error",
    }
}

pub(crate) fn error_body(error: &ApiError) -> ErrorBody {
    ErrorBody {
        error: ErrorDetail {
            message: error.message.clone(),
            kind: error_type(error.kind).to_owned(),
            param: error.param.clone(),
            code: error.code.clone().or_else(|| match error.kind {
                ErrorKind::NotFound => Some("not_found".to_owned()),
                ErrorKind::Overloaded => Some("overloaded".to_owned()),
                ErrorKind::Timeout => Some("timeout".to_owned()),
                _ => None,
            }),
        },
    }
}

/// `{"error":{"message","type","param","code"}}`.
pub fn encode_error(error: &ApiError) -> Vec<u8> {
    serde_json::to_vec(&error_body(error)).unwrap_or_default()
}

#[derive(Deserialize)]
struct WireErrorBody<'a> {
    #[serde(borrow)]
    error: Option<&'a RawValue>,
    /// vLLM's older flat shape: `{"object":"error","message":...,"type":...}`.
    #[serde(borrow)]
    object: Option<Text<'a>>,
    #[serde(borrow)]
    message: Option<Text<'a>>,
    #[serde(borrow, rename = "type")]
    kind: Option<Text<'a>>,
}

#[derive(Deserialize)]
pub(crate) struct WireErrorDetail<'a> {
    #[serde(borrow)]
    message: Option<Text<'a>>,
    #[serde(borrow, rename = "type")]
    kind: Option<Text<'a>>,
    #[serde(borrow)]
    param: Option<Text<'a>>,
    /// A string at OpenAI, a number at llama.cpp.
    #[serde(borrow)]
    code: Option<&'a RawValue>,
}

impl WireErrorDetail<'_> {
    pub(crate) fn to_api_error(&self) -> ApiError {
        let code = self
            .code
            .filter(|raw| json::kind(raw) != json::Kind::Null)
            .map(|raw| serde_json::from_str::<String>(raw.get()).unwrap_or_else(|_| raw.get().to_owned()));
        ApiError {
            kind: ErrorKind::from_type_name(self.kind.as_ref().map_or("", Text::as_str)),
            message: self.message.as_ref().map_or_else(String::new, |m| m.as_str().to_owned()),
            param: self.param.as_ref().map(|p| p.as_str().to_owned()),
            code,
            metadata: Vec::new(),
        }
    }
}

/// The error in an OpenAI-shaped body (also vLLM's and llama.cpp's variants); `None` for other shapes.
pub fn decode_error(body: &[u8]) -> Option<ApiError> {
    let wire: WireErrorBody<'_> = serde_json::from_slice(body).ok()?;
    if let Some(raw) = wire.error {
        let detail: WireErrorDetail<'_> = serde_json::from_str(raw.get()).ok()?;
        return Some(detail.to_api_error());
    }
    if wire.object.as_ref().map(Text::as_str) == Some("error") {
        return Some(ApiError::new(
            ErrorKind::from_type_name(wire.kind.as_ref().map_or("", Text::as_str)),
            wire.message.map(Text::into_owned).unwrap_or_default(),
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_error_variants() {
        let openai =
            br#"{"error":{"message":"bad","type":"invalid_request_error","param":"model","code":"model_not_found"}}"#;
        let e = decode_error(openai).unwrap();
        assert_eq!(
            (e.kind, e.message.as_str(), e.code.as_deref()),
            (ErrorKind::InvalidRequest, "bad", Some("model_not_found"))
        );
        let llama = br#"{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}"#;
        assert_eq!(decode_error(llama).unwrap().code.as_deref(), Some("503"));
        let vllm = br#"{"object":"error","message":"no model","type":"NotFoundError","param":null,"code":404}"#;
        assert_eq!(decode_error(vllm).unwrap().kind, ErrorKind::NotFound);
        assert!(decode_error(br#"{"error":"ollama style"}"#).is_none());
    }
}
