//! JSON rendering of the mock's response bodies: precomputed static bodies and cheap per-request formatting.

use std::fmt::Write as _;

use bytes::Bytes;
use serde_json::{json, Value};

/// The fixed `created` timestamp used in every object (keeps bodies deterministic).
pub(crate) const CREATED: u64 = 1_700_000_000;

/// Token usage reported by completion-like endpoints.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Usage {
    pub(crate) prompt: u64,
    pub(crate) completion: u64,
    /// Prompt tokens served from the KV cache, reported (as `prompt_tokens_details.cached_tokens`,
    /// like llama.cpp and vLLM) only by a mock simulating one.
    pub(crate) cached: Option<u64>,
}

impl Usage {
    pub(crate) fn write_json(self, out: &mut String) {
        let _ = write!(
            out,
            r#"{{"prompt_tokens":{},"completion_tokens":{},"total_tokens":{}"#,
            self.prompt,
            self.completion,
            self.prompt + self.completion
        );
        if let Some(cached) = self.cached {
            let _ = write!(out, r#","prompt_tokens_details":{{"cached_tokens":{cached}}}"#);
        }
        out.push('}');
    }
}

/// Prompt token estimate: request bytes / 4, at least 1.
pub(crate) fn prompt_tokens(bytes: usize) -> u64 {
    (bytes as u64 / 4).max(1)
}

/// Deterministic content of streamed chunk `i`.
pub(crate) fn chunk_text(out: &mut String, i: usize) {
    let _ = write!(out, "tok{i} ");
}

/// JSON string literal (with quotes) of `s`.
pub(crate) fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| String::from("\"\""))
}

fn to_bytes(v: &Value) -> Bytes {
    Bytes::from(serde_json::to_vec(v).unwrap_or_default())
}

/// Quoted JSON literal of the full non-streamed content (all chunks concatenated).
pub(crate) fn full_content_json(chunks: usize) -> String {
    let mut s = String::with_capacity(chunks * 6);
    for i in 0..chunks {
        chunk_text(&mut s, i);
    }
    json_str(&s)
}

pub(crate) fn models_body(models: &[String]) -> Bytes {
    let data: Vec<Value> = models
        .iter()
        .map(|m| json!({"id": m, "object": "model", "created": CREATED, "owned_by": "switchyard-mock"}))
        .collect();
    to_bytes(&json!({"object": "list", "data": data}))
}

/// `created` as Anthropic's and Ollama's RFC 3339 time (Ollama's has nanoseconds).
pub(crate) const CREATED_RFC3339: &str = "2023-11-14T22:13:20Z";
pub(crate) const CREATED_RFC3339_NANOS: &str = "2023-11-14T22:13:20.123456789Z";

/// Anthropic's `GET /v1/models` page: every model, no further page.
pub(crate) fn anthropic_models_body(models: &[String]) -> Bytes {
    let data: Vec<Value> = models
        .iter()
        .map(|m| json!({"type": "model", "id": m, "display_name": m, "created_at": CREATED_RFC3339}))
        .collect();
    to_bytes(&json!({"data": data, "has_more": false, "first_id": models.first(), "last_id": models.last()}))
}

/// Ollama's `GET /api/tags`, or with `loaded` its `GET /api/ps` (every model counts as loaded).
pub(crate) fn ollama_tags_body(models: &[String], loaded: bool) -> Bytes {
    let data: Vec<Value> = models
        .iter()
        .map(|m| {
            let mut model = json!({
                "name": m,
                "model": m,
                "modified_at": "2026-01-01T00:00:00Z",
                "size": 1000,
                "digest": "mock",
                "details": {
                    "parent_model": "",
                    "format": "gguf",
                    "family": "mock",
                    "families": ["mock"],
                    "parameter_size": "1B",
                    "quantization_level": "Q4_0"
                }
            });
            if loaded {
                model["expires_at"] = json!("2099-01-01T00:00:00Z");
                model["size_vram"] = json!(1000);
                model["context_length"] = json!(4096);
            }
            model
        })
        .collect();
    to_bytes(&json!({"models": data}))
}

pub(crate) const HEALTH_BODY: &[u8] = br#"{"status":"ok"}"#;
pub(crate) const FAIL_BODY: &[u8] =
    br#"{"error":{"message":"mock failure","type":"server_error","param":null,"code":null}}"#;
pub(crate) const ANTHROPIC_FAIL_BODY: &[u8] =
    br#"{"type":"error","error":{"type":"api_error","message":"mock failure"}}"#;
pub(crate) const OLLAMA_FAIL_BODY: &[u8] = br#"{"error":"mock failure"}"#;

/// One SSE event `data: JSON` (OpenAI streams name no event).
pub(crate) fn sse_data(value: &Value) -> Bytes {
    let mut out = b"data: ".to_vec();
    out.extend(serde_json::to_vec(value).unwrap_or_default());
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// One SSE event with its name, as Anthropic sends every event.
pub(crate) fn sse_event(event: &str, value: &Value) -> Bytes {
    let mut out = format!("event: {event}\ndata: ").into_bytes();
    out.extend(serde_json::to_vec(value).unwrap_or_default());
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// One NDJSON line, as Ollama streams.
pub(crate) fn ndjson_line(value: &Value) -> Bytes {
    let mut out = serde_json::to_vec(value).unwrap_or_default();
    out.push(b'\n');
    Bytes::from(out)
}

/// An embeddings `input`: one string or an array of strings.
pub(crate) fn string_or_strings(json: &str) -> Option<Vec<String>> {
    serde_json::from_str::<String>(json).map(|s| vec![s]).or_else(|_| serde_json::from_str::<Vec<String>>(json)).ok()
}

/// OpenAI error shape.
pub(crate) fn error_body(message: &str, kind: &str, param: Option<&str>, code: Option<&str>) -> Bytes {
    to_bytes(&json!({"error": {"message": message, "type": kind, "param": param, "code": code}}))
}

/// Non-streamed `chat.completion` object.
pub(crate) fn chat_completion(id: u64, model_json: &str, content_json: &str, usage: Usage) -> Bytes {
    let mut s = String::with_capacity(320 + model_json.len() + content_json.len());
    let _ = write!(
        s,
        r#"{{"id":"chatcmpl-mock-{id}","object":"chat.completion","created":{CREATED},"model":{model_json},"choices":[{{"index":0,"message":{{"role":"assistant","content":{content_json}}},"logprobs":null,"finish_reason":"stop"}}],"usage":"#
    );
    usage.write_json(&mut s);
    s.push('}');
    Bytes::from(s)
}

/// Non-streamed `text_completion` object.
pub(crate) fn text_completion(id: u64, model_json: &str, content_json: &str, usage: Usage) -> Bytes {
    let mut s = String::with_capacity(300 + model_json.len() + content_json.len());
    let _ = write!(
        s,
        r#"{{"id":"cmpl-mock-{id}","object":"text_completion","created":{CREATED},"model":{model_json},"choices":[{{"text":{content_json},"index":0,"logprobs":null,"finish_reason":"stop"}}],"usage":"#
    );
    usage.write_json(&mut s);
    s.push('}');
    Bytes::from(s)
}

/// Deterministic 8-dimensional embedding of `text`, as a JSON array.
pub(crate) fn embedding(out: &mut String, text: &str) {
    // FNV-1a then splitmix to spread the bits.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    out.push('[');
    for k in 0..8u64 {
        let mut z = h.wrapping_add(k.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        // Map to [-1, 1) with 4 decimals so the text form is stable.
        let v = (z % 20_000) as f64 / 10_000.0 - 1.0;
        if k > 0 {
            out.push(',');
        }
        let _ = write!(out, "{v:.4}");
    }
    out.push(']');
}

/// `embeddings` list response.
pub(crate) fn embeddings(inputs: &[String], model_json: &str, prompt_tokens: u64) -> Bytes {
    let mut s = String::with_capacity(128 + inputs.len() * 120);
    s.push_str(r#"{"object":"list","data":["#);
    for (i, text) in inputs.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(s, r#"{{"object":"embedding","index":{i},"embedding":"#);
        embedding(&mut s, text);
        s.push('}');
    }
    let _ = write!(
        s,
        r#"],"model":{model_json},"usage":{{"prompt_tokens":{prompt_tokens},"total_tokens":{prompt_tokens}}}}}"#
    );
    Bytes::from(s)
}
