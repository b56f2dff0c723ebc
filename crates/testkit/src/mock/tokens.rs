//! The KV-cache mock's tokeniser: a chat or completion request body as the token sequence an
//! inference server would process, cheap and deterministic, so the same conversation prefix always
//! gives the same token prefix. Public so the gateway (prefix affinity) and benchmarks can compute
//! exactly the tokens the mock caches.
//!
//! The normalised stream is the top-level `system` prompt (Anthropic, Ollama generate) first, then
//! every message in order: a role separator token, then the message's text (its content: a string
//! or text / `tool_use` / `tool_result` blocks, then each tool call as `name(arguments)`), cut into
//! fixed 4-byte chunks of UTF-8, one token each. Every message starts on a fresh chunk, so appending
//! messages never changes the tokens before them: a continued conversation (previous messages, the
//! assistant's reply, a new user message) extends the previous prompt's tokens. A raw completion
//! (`prompt`, OpenAI `/v1/completions` or Ollama `/api/generate`) is one separator and its text.
//! Tool definitions and sampling parameters are not part of the stream.

use serde_json::Value;

/// UTF-8 bytes per text token.
pub const BYTES_PER_TOKEN: usize = 4;

/// A role separator: first byte 0xFF, which never occurs in UTF-8 text, so a separator never
/// equals a text token.
fn separator(role: &str) -> u32 {
    let id = match role {
        "system" | "developer" => 1,
        "user" => 2,
        "assistant" | "model" => 3,
        "tool" | "function" => 4,
        // The separator of a raw completion prompt.
        "" => 6,
        _ => 5,
    };
    u32::from_le_bytes([0xFF, id, 0, 0])
}

/// Appends `text` as 4-byte little-endian chunks (the last zero-padded).
fn push_text(out: &mut Vec<u32>, text: &str) {
    for chunk in text.as_bytes().chunks(BYTES_PER_TOKEN) {
        let mut bytes = [0u8; BYTES_PER_TOKEN];
        bytes[..chunk.len()].copy_from_slice(chunk);
        out.push(u32::from_le_bytes(bytes));
    }
}

/// Tokens of the prompt a request body carries (see the module docs).
pub fn prompt_tokens(body: &Value) -> Vec<u32> {
    conversation_tokens(body, None)
}

/// Tokens of the prompt followed by `reply` (the assistant's answer, as [`reply_text`] of a message
/// carrying it would read): what a server holds in its slot after answering, and a prefix of the
/// next turn's prompt when the client sends the reply back.
pub fn conversation_tokens(body: &Value, reply: Option<&str>) -> Vec<u32> {
    let mut out = Vec::new();
    if let Some(system) = body.get("system") {
        let text = content_text(system);
        if !text.is_empty() {
            out.push(separator("system"));
            push_text(&mut out, &text);
        }
    }
    if let Some(messages) = body.get("messages").and_then(Value::as_array) {
        for message in messages {
            out.push(separator(message.get("role").and_then(Value::as_str).unwrap_or("user")));
            push_text(&mut out, &message_text(message));
        }
        if let Some(reply) = reply {
            out.push(separator("assistant"));
            push_text(&mut out, reply);
        }
    } else if let Some(prompt) = body.get("prompt") {
        // A continued raw prompt is the previous prompt and its completion as one string, so
        // they are chunked together.
        let mut text = prompt_text(prompt);
        text.push_str(reply.unwrap_or(""));
        out.push(separator(""));
        push_text(&mut out, &text);
    }
    out
}

/// The normalised text of a reply that calls `tool` with `arguments` (a JSON object's text), as
/// the message carrying it back reads in every API.
pub fn tool_call_text(tool: &str, arguments: &str) -> String {
    format!("{tool}({arguments})")
}

/// The text of one message: its content, then each of its tool calls (OpenAI, Ollama).
pub fn message_text(message: &Value) -> String {
    let mut text = message.get("content").map(content_text).unwrap_or_default();
    for call in message.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
        let function = call.get("function").unwrap_or(&Value::Null);
        let name = function.get("name").and_then(Value::as_str).unwrap_or("");
        text.push_str(&tool_call_text(name, &arguments_text(function.get("arguments"))));
    }
    text
}

/// Tool arguments as text: OpenAI sends a JSON string, Ollama and Anthropic an object.
fn arguments_text(arguments: Option<&Value>) -> String {
    match arguments {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// A content value's text: a string, or blocks (`text`, Anthropic `tool_use` and `tool_result`,
/// OpenAI content parts) concatenated; images and other blocks have none.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => {
            let mut out = String::new();
            for block in blocks {
                match block.get("type").and_then(Value::as_str) {
                    Some("tool_use") => {
                        let name = block.get("name").and_then(Value::as_str).unwrap_or("");
                        out.push_str(&tool_call_text(name, &arguments_text(block.get("input"))));
                    }
                    Some("tool_result") => out.push_str(&block.get("content").map(content_text).unwrap_or_default()),
                    _ => out.push_str(block.get("text").and_then(Value::as_str).unwrap_or("")),
                }
            }
            out
        }
        _ => String::new(),
    }
}

/// A raw completion prompt: a string, or an array of strings taken together.
fn prompt_text(prompt: &Value) -> String {
    match prompt {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(Value::as_str).collect(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn chunks_of_four_bytes_with_a_separator_per_message() {
        let body = json!({"messages": [{"role": "user", "content": "hello"}]});
        let tokens = prompt_tokens(&body);
        assert_eq!(tokens.len(), 1 + 2);
        assert_eq!(tokens[0], separator("user"));
        assert_eq!(tokens[1], u32::from_le_bytes(*b"hell"));
        assert_eq!(tokens[2], u32::from_le_bytes([b'o', 0, 0, 0]));
        assert!(!tokens[1..].contains(&separator("assistant")));
    }

    #[test]
    fn a_continued_conversation_extends_the_previous_sequence() {
        let turn1 = json!({"system": "be brief", "messages": [{"role": "user", "content": "hi!"}]});
        let held = conversation_tokens(&turn1, Some("tok0 tok1 "));
        let turn2 = json!({"system": "be brief", "messages": [
            {"role": "user", "content": "hi!"},
            {"role": "assistant", "content": [{"type": "text", "text": "tok0 tok1 "}]},
            {"role": "user", "content": "more"}]});
        let prompt2 = prompt_tokens(&turn2);
        assert!(prompt2.starts_with(&held));
        assert_eq!(prompt2.len(), held.len() + 2);
        // An OpenAI system message reads the same as Anthropic's top-level system prompt.
        let openai =
            json!({"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi!"}]});
        assert_eq!(prompt_tokens(&openai), prompt_tokens(&turn1));
    }

    #[test]
    fn tool_calls_read_alike_in_every_api() {
        let args = r#"{"location":"Paris","unit":"celsius"}"#;
        let expected = tool_call_text("get_weather", args);
        let openai = json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": args}}]});
        let ollama = json!({"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "get_weather", "arguments": {"location": "Paris", "unit": "celsius"}}}]});
        let anthropic = json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": "t", "name": "get_weather", "input": {"location": "Paris", "unit": "celsius"}}]});
        for message in [openai, ollama, anthropic] {
            assert_eq!(message_text(&message), expected);
        }
        let result =
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "18C"}]});
        assert_eq!(message_text(&result), "18C");
    }

    #[test]
    fn raw_prompts_continue_through_the_completion() {
        let first = json!({"prompt": "Once upon"});
        let held = conversation_tokens(&first, Some(" a time,"));
        let next = prompt_tokens(&json!({"prompt": "Once upon a time, there"}));
        // All but the last, partial, chunk of the held sequence match.
        assert!(next.starts_with(&held[..held.len() - 1]));
        assert_ne!(next[held.len() - 1], held[held.len() - 1]);
        assert_ne!(prompt_tokens(&json!({"prompt": "x"})), prompt_tokens(&json!({"messages": []})));
    }
}
