//! Amazon Bedrock's Converse API (`/model/{modelId}/converse`, and `/converse-stream` whose answer
//! is an AWS event stream): requests encoded for a Bedrock backend, its answers, event streams and
//! errors decoded. Built from the API reference (`Message`, `ContentBlock`, `ToolConfiguration`,
//! `InferenceConfiguration`, `ConverseStreamOutput` and its exceptions, `TokenUsage`). The model
//! is named in the URL, not in the body.

mod request;
mod response;
mod stream_decode;

pub use request::encode_request;
pub use response::decode_response;
pub use stream_decode::EventStreamDecoder;

use serde::Deserialize;

use crate::chat::{StopReason, Usage};
use crate::error::{ApiError, ErrorKind};
use crate::json::Text;

pub(crate) const API: &str = "Amazon Bedrock Converse";

/// The stop reason a `stopReason` means.
pub(crate) fn stop_reason_of(name: &str) -> StopReason {
    match name {
        "end_turn" => StopReason::EndTurn,
        "tool_use" => StopReason::ToolUse,
        "max_tokens" | "model_context_window_exceeded" => StopReason::MaxTokens,
        "stop_sequence" => StopReason::StopSequence,
        "guardrail_intervened" | "content_filtered" => StopReason::ContentFilter,
        other => StopReason::Other(other.to_owned()),
    }
}

/// `usage` of an answer or of a stream's `metadata` event.
#[derive(Deserialize, Default, Clone, Copy)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WireUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    cache_read_input_tokens: Option<u64>,
    cache_write_input_tokens: Option<u64>,
}

impl WireUsage {
    /// Bedrock counts prompt-cache reads and writes apart from `inputTokens`; the internal model
    /// counts every prompt token in `prompt_tokens`.
    pub(crate) fn to_usage(self) -> Usage {
        let cached = self.cache_read_input_tokens;
        let prompt = self.input_tokens + cached.unwrap_or(0) + self.cache_write_input_tokens.unwrap_or(0);
        Usage {
            cached_prompt_tokens: cached,
            cache_write_tokens: self.cache_write_input_tokens,
            ..Usage::new(prompt, self.output_tokens)
        }
    }
}

/// The kind an exception's name stands for (`ThrottlingException` in an answer's
/// `x-amzn-ErrorType`, `throttlingException` in a stream).
pub fn error_kind_of(exception: &str) -> ErrorKind {
    let name = exception.split(':').next().unwrap_or_default().to_ascii_lowercase();
    match name.trim_end_matches("exception") {
        "throttling" => ErrorKind::RateLimited,
        "accessdenied" => ErrorKind::PermissionDenied,
        "unrecognizedclient" | "invalidsignature" | "expiredtoken" | "missingauthenticationtoken" => {
            ErrorKind::Authentication
        }
        "resourcenotfound" => ErrorKind::NotFound,
        "servicequotaexceeded" => ErrorKind::RateLimited,
        "serviceunavailable" | "modelnotready" => ErrorKind::Overloaded,
        "modeltimeout" => ErrorKind::Timeout,
        "internalserver" | "modelstreamerror" | "modelerror" => ErrorKind::Server,
        _ => ErrorKind::InvalidRequest,
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireError<'a> {
    #[serde(borrow, alias = "Message")]
    message: Text<'a>,
}

/// The error in a Bedrock-shaped body (`{"message": "..."}`, the whole body); `None` for other
/// shapes. The kind comes from the status (or the `x-amzn-ErrorType` header, see `error_kind_of`).
pub fn decode_error(body: &[u8]) -> Option<ApiError> {
    let wire: WireError<'_> = serde_json::from_slice(body).ok()?;
    Some(ApiError::new(ErrorKind::InvalidRequest, wire.message.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_decode_and_exceptions_name_their_kind() {
        let e = decode_error(br#"{"message":"Too many requests, please wait before trying again."}"#).unwrap();
        assert_eq!(e.message, "Too many requests, please wait before trying again.");
        assert!(decode_error(br#"{"error":{"message":"openai"}}"#).is_none());
        assert!(decode_error(br#"{"message":"x","type":"error"}"#).is_none());
        assert_eq!(
            error_kind_of("ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/"),
            ErrorKind::RateLimited
        );
        assert_eq!(error_kind_of("throttlingException"), ErrorKind::RateLimited);
        assert_eq!(error_kind_of("validationException"), ErrorKind::InvalidRequest);
        assert_eq!(error_kind_of("modelStreamErrorException"), ErrorKind::Server);
        assert_eq!(error_kind_of("serviceUnavailableException"), ErrorKind::Overloaded);
        assert_eq!(error_kind_of("AccessDeniedException"), ErrorKind::PermissionDenied);
    }

    #[test]
    fn usage_counts_cache_reads_and_writes_as_prompt_tokens() {
        let wire: WireUsage = serde_json::from_str(
            r#"{"inputTokens":10,"outputTokens":5,"totalTokens":45,"cacheReadInputTokens":20,"cacheWriteInputTokens":10}"#,
        )
        .unwrap();
        assert_eq!(
            wire.to_usage(),
            Usage {
                prompt_tokens: 40,
                completion_tokens: 5,
                total_tokens: 45,
                cached_prompt_tokens: Some(20),
                cache_write_tokens: Some(10)
            }
        );
    }
}
