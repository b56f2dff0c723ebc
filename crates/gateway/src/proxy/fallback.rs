//! Recognising a backend's "the prompt is longer than my context window" among its 400s, so the
//! request can go to a model with a larger window (`context_window_fallbacks:`). Only the answer's
//! first frame is read: error bodies are small and come whole, and nothing is buffered to decide.

/// How servers say it: OpenAI and vLLM (`context_length_exceeded`, "maximum context length"),
/// llama.cpp ("exceeds the available context size"), Anthropic ("prompt is too long"), Gemini
/// ("exceeds the maximum number of tokens"), Bedrock ("Input is too long for requested model"),
/// and the generic phrasings.
const MARKERS: &[&str] = &[
    "context_length_exceeded",
    "maximum context length",
    "context size",
    "context window",
    "context length",
    "prompt is too long",
    "exceeds the maximum number of tokens",
    "exceed_context_size",
    "input is too long",
];

/// Whether an error answer's first bytes say the prompt did not fit the model's context window.
pub fn context_window_exceeded(first: &[u8]) -> bool {
    let head = String::from_utf8_lossy(&first[..first.len().min(4096)]).to_ascii_lowercase();
    MARKERS.iter().any(|m| head.contains(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_servers_wording_is_recognised_and_other_400s_are_not() {
        for body in [
            r#"{"error":{"message":"This model's maximum context length is 4096 tokens. However, you requested 9000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
            r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}}"#,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208000 tokens > 200000 maximum"}}"#,
            r#"{"error":{"code":400,"message":"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}"#,
            r#"{"message":"Input is too long for requested model."}"#,
        ] {
            assert!(context_window_exceeded(body.as_bytes()), "{body}");
        }
        for body in
            [r#"{"error":{"message":"temperature must be at most 2","type":"invalid_request_error"}}"#, "", "\u{0}"]
        {
            assert!(!context_window_exceeded(body.as_bytes()), "{body}");
        }
    }
}
