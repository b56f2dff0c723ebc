//! `POST /v1/messages/count_tokens`: decoding its request and estimating the count when the
//! backend cannot count (characters / 4 over all text, tool schemas included).

use crate::chat::{ChatRequest, Image, Part};
use crate::error::TranslateError;

/// What one image is counted as: about what Anthropic charges for a ~1 megapixel image, since the
/// estimate cannot look at the pixels.
const TOKENS_PER_IMAGE: u64 = 1_600;

/// A count_tokens request: a messages request without `max_tokens`.
pub fn decode_count_tokens_request(body: &[u8]) -> Result<ChatRequest, TranslateError> {
    super::decode_request(body)
}

/// An estimate of a request's input tokens: one token per four characters of every text the
/// model reads (system prompt, messages, tool calls and results, tool names, descriptions and
/// schemas), plus a flat amount per image.
pub fn estimate_input_tokens(request: &ChatRequest) -> u64 {
    let mut chars = 0usize;
    let mut images = 0u64;
    let mut count = |text: &str| chars += text.chars().count();
    for segment in &request.system {
        count(segment);
    }
    for message in &request.messages {
        for part in &message.content {
            match part {
                Part::Text(text) => count(text),
                Part::Image(Image::Url(_) | Image::Base64 { .. }) => images += 1,
                Part::ToolCall(call) => {
                    count(&call.name);
                    count(&call.arguments);
                }
                Part::ToolResult(result) => count(&result.content),
            }
        }
    }
    for tool in &request.tools {
        count(&tool.name);
        count(tool.description.as_deref().unwrap_or(""));
        count(tool.parameters.as_str());
    }
    (chars as u64).div_ceil(4) + images * TOKENS_PER_IMAGE
}

/// `{"input_tokens": N}`.
pub fn encode_count_tokens_response(input_tokens: u64) -> Vec<u8> {
    format!("{{\"input_tokens\":{input_tokens}}}").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_text_schemas_and_images() {
        let body = br#"{"model":"m","system":"abcd","messages":[{"role":"user","content":[{"type":"text","text":"efgh"},{"type":"image","source":{"type":"url","url":"u"}}]}],"tools":[{"name":"ab","input_schema":{"type":"object"}}]}"#;
        let request = decode_count_tokens_request(body).unwrap();
        // 4 + 4 + 2 + 17 characters = 27 → 7 tokens, plus one image.
        assert_eq!(estimate_input_tokens(&request), 7 + TOKENS_PER_IMAGE);
        assert_eq!(encode_count_tokens_response(12), br#"{"input_tokens":12}"#);
    }
}
