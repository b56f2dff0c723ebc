//! Ollama's native API: the model list the gateway reads from `GET /api/tags`, and `/api/chat`,
//! `/api/generate` and `/api/embed` (requests, responses, NDJSON streams, errors) to and from the
//! internal model.

mod catalog;
mod chat_request;
mod embed;
mod generate;
mod options;
mod response;
mod stream_decode;
mod stream_encode;
mod time;

pub use catalog::{encode_ps, encode_tags, encode_version};
pub use chat_request::{decode_chat_request, encode_chat_request};
pub use embed::{decode_embed_request, decode_embed_response, encode_embed_request, encode_embed_response};
pub use generate::{decode_generate_request, encode_generate_request};
pub use response::{decode_response, encode_response, Endpoint};
pub use stream_decode::NdjsonDecoder;
pub use stream_encode::NdjsonEncoder;

use serde::Deserialize;

use crate::error::{ApiError, ErrorKind};

pub(crate) const API: &str = "Ollama";

#[derive(Debug, Deserialize, Clone, PartialEq)]
pub struct TagList {
    #[serde(default)]
    pub models: Vec<Tag>,
}

#[derive(Debug, Deserialize, Clone, PartialEq)]
pub struct Tag {
    /// Ollama sends both `name` and `model`; older versions only `name`.
    pub name: String,
}

/// `{"error":"..."}`, Ollama's error body. Ollama names no kind of error: the caller knows the
/// HTTP status (see `ErrorKind::status`).
pub fn encode_error(error: &ApiError) -> Vec<u8> {
    let mut out = Vec::with_capacity(error.message.len() + 12);
    out.extend_from_slice(b"{\"error\":");
    crate::json::push_str(&mut out, &error_text(error));
    out.push(b'}');
    out
}

/// The `error` string: a guard's block starts with its code (`content_blocked: blocked by …`),
/// the one place Ollama's shape has for a program to tell it from a malformed request.
pub(crate) fn error_text(error: &ApiError) -> std::borrow::Cow<'_, str> {
    match error.code.as_deref() {
        Some(code @ crate::error::CONTENT_BLOCKED) => format!("{code}: {}", error.message).into(),
        _ => error.message.as_str().into(),
    }
}

#[derive(Deserialize)]
struct WireError<'a> {
    #[serde(borrow)]
    error: crate::json::Text<'a>,
}

/// The message of an Ollama-shaped error body; the kind is `InvalidRequest` until the caller
/// applies the HTTP status (as `ApiError::from_upstream` does).
pub fn decode_error(body: &[u8]) -> Option<ApiError> {
    let wire: WireError<'_> = serde_json::from_slice(body).ok()?;
    Some(ApiError::new(ErrorKind::InvalidRequest, wire.error.into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tags() {
        let t: TagList =
            serde_json::from_str(r#"{"models":[{"name":"llama3.2:1b","model":"llama3.2:1b","size":1}]}"#).unwrap();
        assert_eq!(t.models[0].name, "llama3.2:1b");
    }
}
