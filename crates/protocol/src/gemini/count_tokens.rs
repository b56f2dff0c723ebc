//! Gemini `countTokens` (`POST /v1beta/models/{model}:countTokens`): the request names what to
//! count as `contents` (with `systemInstruction`, `tools`) or as a whole `generateContentRequest`;
//! the answer is `{"totalTokens": N}`.

use serde_json::Value;

use crate::chat::ChatRequest;
use crate::error::TranslateError;

/// The request whose tokens are counted, as a `ChatRequest`.
pub fn decode_count_tokens_request(body: &[u8]) -> Result<ChatRequest, TranslateError> {
    let root: Value = serde_json::from_slice(body)
        .map_err(|e| TranslateError::Invalid(format!("the request body is not valid JSON: {e}")))?;
    let inner = root.get("generateContentRequest").or_else(|| root.get("generate_content_request"));
    match inner {
        Some(inner) => super::decode_request(inner.to_string().as_bytes()),
        None => super::decode_request(body),
    }
}

pub fn encode_count_tokens_response(total_tokens: u64) -> Vec<u8> {
    format!("{{\"totalTokens\":{total_tokens}}}").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contents_or_a_whole_request_are_counted() {
        let plain = br#"{"contents": [{"role": "user", "parts": [{"text": "hello there"}]}]}"#;
        assert_eq!(decode_count_tokens_request(plain).unwrap().messages.len(), 1);
        let whole = br#"{"generateContentRequest": {"model": "models/g", "contents": [{"role": "user", "parts": [{"text": "hi"}]}]}}"#;
        assert_eq!(decode_count_tokens_request(whole).unwrap().messages.len(), 1);
        assert!(decode_count_tokens_request(b"{}").is_err());
        assert_eq!(encode_count_tokens_response(7), br#"{"totalTokens":7}"#);
    }
}
