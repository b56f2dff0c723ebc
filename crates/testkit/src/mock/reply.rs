//! What the mock answers a chat request, the same whatever API it speaks: its default text, one
//! tool call when the request offers tools, or text quoting a tool result when one comes last.

use serde_json::Value;

use super::render::chunk_text;

/// The arguments of every mock tool call.
pub(crate) const TOOL_ARGUMENTS: &str = r#"{"location":"Paris","unit":"celsius"}"#;
/// [`TOOL_ARGUMENTS`] in two stream fragments, so clients must join pieces (OpenAI, Anthropic).
pub(crate) const TOOL_ARGUMENT_FRAGMENTS: [&str; 2] = [r#"{"location":"Paris","#, r#""unit":"celsius"}"#];
/// [`TOOL_ARGUMENTS`] as a JSON object, for APIs that carry arguments as objects (Anthropic, Ollama).
pub(crate) fn tool_arguments() -> Value {
    serde_json::from_str(TOOL_ARGUMENTS).unwrap_or(Value::Null)
}

/// Where a tool result's echo is cut into stream pieces (and which the echo leaves out).
pub const SPLIT: char = '\u{1f}';

/// A tool result that starts with two unit separators is echoed in pieces of [`FINE_PIECE`]
/// characters: whatever a gateway put into the request (a placeholder) is cut across events.
pub const FINE: &str = "\u{1f}\u{1f}";
const FINE_PIECE: usize = 4;

/// What a reply to a tool result starts with; the result's content follows.
pub(crate) const TOOL_RESULT_PREFIX: &str = "Tool result: ";

/// The content of a reply.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Reply {
    /// Text, as the pieces a stream sends it in.
    Text(Vec<String>),
    /// One call to the named tool with [`TOOL_ARGUMENTS`].
    ToolCall(String),
}

impl Reply {
    /// The default reply: `stream_chunks` pieces `tok0 `, `tok1 `, ...
    pub(crate) fn chunks(chunks: usize) -> Reply {
        Reply::Text(
            (0..chunks)
                .map(|i| {
                    let mut s = String::new();
                    chunk_text(&mut s, i);
                    s
                })
                .collect(),
        )
    }

    /// The reply to a request whose first tool is `tool` and whose last message is the tool
    /// result `result` (either may be absent). Both are read by the per-API functions below.
    pub(crate) fn decide(tool: Option<String>, result: Option<String>, chunks: usize) -> Reply {
        match (result, tool) {
            (Some(result), _) if result.starts_with(FINE) => {
                let chars: Vec<char> = result[FINE.len()..].chars().filter(|c| *c != SPLIT).collect();
                let pieces = chars.chunks(FINE_PIECE).map(|piece| piece.iter().collect::<String>());
                Reply::Text(std::iter::once(TOOL_RESULT_PREFIX.to_owned()).chain(pieces).collect())
            }
            // A unit separator (U+001F) in the result cuts the reply's stream there: a test can
            // put any split into a streamed answer.
            (Some(result), _) => Reply::Text(
                std::iter::once(TOOL_RESULT_PREFIX.to_owned())
                    .chain(result.split(SPLIT).map(str::to_owned))
                    .filter(|s| !s.is_empty())
                    .collect(),
            ),
            (None, Some(tool)) => Reply::ToolCall(tool),
            (None, None) => Reply::chunks(chunks),
        }
    }

    /// The rest of this reply after `prefill`, the start of it the request already carries as a
    /// final assistant message (assistant prefill, as inference servers continue it): the
    /// pieces not yet covered, the first one cut where the prefill ends. A prefill this reply
    /// does not start with changes nothing.
    pub(crate) fn after(self, prefill: &str) -> Reply {
        let Reply::Text(pieces) = self else { return self };
        if prefill.is_empty() || !pieces.concat().starts_with(prefill) {
            return Reply::Text(pieces);
        }
        let mut covered = 0;
        let mut rest = Vec::new();
        for piece in pieces {
            let end = covered + piece.len();
            if end <= prefill.len() {
                covered = end;
                continue;
            }
            let skip = prefill.len().saturating_sub(covered);
            rest.push(piece[skip..].to_owned());
            covered = end;
        }
        Reply::Text(rest)
    }

    /// The reply as the message carrying it back reads to the tokeniser: its text, or the call.
    pub(crate) fn normalised_text(&self) -> String {
        match self {
            Reply::Text(pieces) => pieces.concat(),
            Reply::ToolCall(name) => super::tokens::tool_call_text(name, TOOL_ARGUMENTS),
        }
    }

    /// All the text, concatenated.
    pub(crate) fn text(&self) -> String {
        match self {
            Reply::Text(pieces) => pieces.concat(),
            Reply::ToolCall(_) => String::new(),
        }
    }
}

/// The text of a content value: a string, or an array of `{"type":"text","text":...}` blocks
/// (OpenAI content parts and Anthropic blocks alike).
fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks.iter().filter_map(|b| b.get("text").and_then(Value::as_str)).collect(),
        _ => String::new(),
    }
}

fn last_message(body: &Value) -> Option<&Value> {
    body.get("messages").and_then(Value::as_array).and_then(|m| m.last())
}

/// Name of the first tool in OpenAI's and Ollama's shape (`{"type":"function","function":{"name":..}}`).
fn first_function_tool(body: &Value) -> Option<String> {
    let tool = body.get("tools")?.as_array()?.first()?;
    tool.get("function").and_then(|f| f.get("name")).and_then(Value::as_str).map(str::to_owned)
}

/// The tool result ending an OpenAI or Ollama conversation (a last message of role `tool`).
fn role_tool_result(body: &Value) -> Option<String> {
    let last = last_message(body)?;
    (last.get("role").and_then(Value::as_str) == Some("tool"))
        .then(|| last.get("content").map(content_text).unwrap_or_default())
}

/// The text of a final assistant message: the prefill a request asks the model to continue.
pub(crate) fn prefill(body: &Value) -> Option<String> {
    let last = last_message(body)?;
    (last.get("role").and_then(Value::as_str) == Some("assistant"))
        .then(|| last.get("content").map(content_text).unwrap_or_default())
}

/// OpenAI Chat Completions request, or Ollama `/api/chat` request: both have function tools and
/// `tool` messages. A final assistant message is continued.
pub(crate) fn openai_or_ollama(body: &Value, chunks: usize) -> Reply {
    let reply = Reply::decide(first_function_tool(body), role_tool_result(body), chunks);
    match prefill(body) {
        Some(prefill) => reply.after(&prefill),
        None => reply,
    }
}

/// Anthropic Messages request: tools are `{"name":..}`; a tool result is a `tool_result` block of
/// the last (user) message.
pub(crate) fn anthropic(body: &Value, chunks: usize) -> Reply {
    let tool = body
        .get("tools")
        .and_then(Value::as_array)
        .and_then(|t| t.first())
        .and_then(|t| t.get("name"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let result = last_message(body).and_then(|m| m.get("content")).and_then(Value::as_array).and_then(|blocks| {
        let results: Vec<&Value> =
            blocks.iter().filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result")).collect();
        (!results.is_empty())
            .then(|| results.iter().map(|b| b.get("content").map(content_text).unwrap_or_default()).collect())
    });
    let reply = Reply::decide(tool, result, chunks);
    match prefill(body) {
        Some(prefill) => reply.after(&prefill),
        None => reply,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn decides_per_api() {
        let plain = json!({"messages":[{"role":"user","content":"hi"}]});
        assert_eq!(openai_or_ollama(&plain, 2), Reply::Text(vec!["tok0 ".into(), "tok1 ".into()]));
        let tools = json!({"tools":[{"type":"function","function":{"name":"get_weather"}}],
            "messages":[{"role":"user","content":"hi"}]});
        assert_eq!(openai_or_ollama(&tools, 2), Reply::ToolCall("get_weather".into()));
        let result = json!({"tools":[{"type":"function","function":{"name":"get_weather"}}],
            "messages":[{"role":"user","content":"hi"},{"role":"tool","content":[{"type":"text","text":"18C"}]}]});
        assert_eq!(openai_or_ollama(&result, 2).text(), "Tool result: 18C");
        let an = json!({"tools":[{"name":"get_weather","input_schema":{}}],
            "messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"18C"}]}]});
        assert_eq!(anthropic(&an, 2).text(), "Tool result: 18C");
        let an_call = json!({"tools":[{"name":"get_weather"}],"messages":[{"role":"user","content":"hi"}]});
        assert_eq!(anthropic(&an_call, 2), Reply::ToolCall("get_weather".into()));
    }

    #[test]
    fn a_final_assistant_message_is_continued() {
        let body = json!({"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"tok0 to"}]});
        assert_eq!(openai_or_ollama(&body, 3), Reply::Text(vec!["k1 ".into(), "tok2 ".into()]));
        let whole = json!({"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"tok0 "}]});
        assert_eq!(openai_or_ollama(&whole, 2), Reply::Text(vec!["tok1 ".into()]));
        let other = json!({"messages":[{"role":"assistant","content":"something else"}]});
        assert_eq!(openai_or_ollama(&other, 1), Reply::Text(vec!["tok0 ".into()]));
        let an = json!({"messages":[{"role":"user","content":"hi"},
            {"role":"assistant","content":[{"type":"text","text":"tok0 tok1"}]}]});
        assert_eq!(anthropic(&an, 3), Reply::Text(vec![" ".into(), "tok2 ".into()]));
    }
}
