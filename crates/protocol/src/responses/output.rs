//! The `response` object of the OpenAI Responses API and its output items, written by hand so the
//! plain response and every lifecycle event of a stream share one writer.

use serde::Serialize;

use crate::chat::{ChatRequest, RawJson, ResponseFormat, StopReason, ToolChoice, Usage};
use crate::json::{push_str, push_u64};
use crate::wire::single_line;

/// The request fields a `response` object repeats (instructions, tools, sampling), as JSON object
/// members written once per request.
#[derive(Debug, Clone, PartialEq)]
pub struct Echo {
    members: Vec<u8>,
}

impl Default for Echo {
    fn default() -> Self {
        Echo::from_request(&ChatRequest::default())
    }
}

#[derive(Serialize)]
struct EchoTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    name: &'a str,
    description: Option<&'a str>,
    parameters: &'a RawJson,
    strict: bool,
}

impl Echo {
    pub fn from_request(request: &ChatRequest) -> Self {
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(b"\"instructions\":");
        if request.system.is_empty() {
            out.extend_from_slice(b"null");
        } else {
            push_str(&mut out, &request.system.join("\n\n"));
        }
        out.extend_from_slice(b",\"max_output_tokens\":");
        push_opt_u64(&mut out, request.max_tokens);
        out.extend_from_slice(b",\"parallel_tool_calls\":");
        out.extend_from_slice(if request.parallel_tool_calls == Some(false) { b"false" } else { b"true" });
        out.extend_from_slice(b",\"temperature\":");
        push_opt_f64(&mut out, request.temperature);
        out.extend_from_slice(b",\"text\":{\"format\":");
        match &request.response_format {
            None => out.extend_from_slice(b"{\"type\":\"text\"}"),
            Some(ResponseFormat::JsonObject) => out.extend_from_slice(b"{\"type\":\"json_object\"}"),
            Some(ResponseFormat::JsonSchema { name, schema, strict }) => {
                out.extend_from_slice(b"{\"type\":\"json_schema\",\"name\":");
                push_str(&mut out, name.as_deref().unwrap_or("response"));
                out.extend_from_slice(b",\"schema\":");
                out.extend_from_slice(schema.as_str().as_bytes());
                out.extend_from_slice(b",\"strict\":");
                out.extend_from_slice(if *strict == Some(true) { b"true" } else { b"false" });
                out.push(b'}');
            }
        }
        out.extend_from_slice(b"},\"tool_choice\":");
        match &request.tool_choice {
            None | Some(ToolChoice::Auto) => out.extend_from_slice(b"\"auto\""),
            Some(ToolChoice::None) => out.extend_from_slice(b"\"none\""),
            Some(ToolChoice::Required) => out.extend_from_slice(b"\"required\""),
            Some(ToolChoice::Tool(name)) => {
                out.extend_from_slice(b"{\"type\":\"function\",\"name\":");
                push_str(&mut out, name);
                out.push(b'}');
            }
        }
        out.extend_from_slice(b",\"tools\":");
        let tools: Vec<EchoTool<'_>> = request
            .tools
            .iter()
            .map(|tool| EchoTool {
                kind: "function",
                name: &tool.name,
                description: tool.description.as_deref(),
                parameters: &tool.parameters,
                strict: tool.strict.unwrap_or(false),
            })
            .collect();
        match serde_json::to_vec(&tools) {
            Ok(json) => out.extend_from_slice(&json),
            Err(_) => out.extend_from_slice(b"[]"),
        }
        out.extend_from_slice(b",\"top_p\":");
        push_opt_f64(&mut out, request.top_p);
        out.extend_from_slice(b",\"user\":");
        match &request.user {
            Some(user) => push_str(&mut out, user),
            None => out.extend_from_slice(b"null"),
        }
        // Schemas are the client's raw JSON; stream events are single `data:` lines.
        if out.contains(&b'\n') || out.contains(&b'\r') {
            out = single_line(&String::from_utf8_lossy(&out)).into_owned().into_bytes();
        }
        Echo { members: out }
    }
}

fn push_opt_u64(out: &mut Vec<u8>, value: Option<u64>) {
    match value {
        Some(n) => push_u64(out, n),
        None => out.extend_from_slice(b"null"),
    }
}

fn push_opt_f64(out: &mut Vec<u8>, value: Option<f64>) {
    match value.and_then(|v| serde_json::to_vec(&v).ok()) {
        Some(json) => out.extend_from_slice(&json),
        None => out.extend_from_slice(b"null"),
    }
}

/// One output item: a message holding one run of text, or a function call.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Item {
    Message { id: String, text: String },
    FunctionCall { id: String, call_id: String, name: String, arguments: String },
}

impl Item {
    /// The item's JSON; a message `in_progress` has no content part yet.
    pub(crate) fn write(&self, out: &mut Vec<u8>, status: &str) {
        match self {
            Item::Message { id, text } => {
                out.extend_from_slice(b"{\"id\":");
                push_str(out, id);
                out.extend_from_slice(b",\"type\":\"message\",\"status\":");
                push_str(out, status);
                out.extend_from_slice(b",\"role\":\"assistant\",\"content\":[");
                if status != "in_progress" {
                    write_text_part(out, text);
                }
                out.extend_from_slice(b"]}");
            }
            Item::FunctionCall { id, call_id, name, arguments } => {
                out.extend_from_slice(b"{\"id\":");
                push_str(out, id);
                out.extend_from_slice(b",\"type\":\"function_call\",\"status\":");
                push_str(out, status);
                out.extend_from_slice(b",\"arguments\":");
                push_str(out, arguments);
                out.extend_from_slice(b",\"call_id\":");
                push_str(out, call_id);
                out.extend_from_slice(b",\"name\":");
                push_str(out, name);
                out.push(b'}');
            }
        }
    }
}

/// An `output_text` content part.
pub(crate) fn write_text_part(out: &mut Vec<u8>, text: &str) {
    out.extend_from_slice(b"{\"type\":\"output_text\",\"text\":");
    push_str(out, text);
    out.extend_from_slice(b",\"annotations\":[],\"logprobs\":[]}");
}

/// A response's `status` and `incomplete_details.reason` for how it stopped.
pub(crate) fn status_of(reason: &StopReason) -> (&'static str, Option<&'static str>) {
    match reason {
        StopReason::MaxTokens => ("incomplete", Some("max_output_tokens")),
        StopReason::ContentFilter => ("incomplete", Some("content_filter")),
        _ => ("completed", None),
    }
}

/// The head of a `response` object: what stays the same through a stream.
pub(crate) struct Head<'a> {
    pub(crate) id: &'a str,
    pub(crate) created: u64,
    pub(crate) model: &'a str,
}

/// A whole `response` object. `usage` is `None` until the response is complete.
pub(crate) fn write_response(
    out: &mut Vec<u8>,
    head: &Head<'_>,
    status: &str,
    incomplete_reason: Option<&str>,
    items: &[Item],
    usage: Option<&Usage>,
    echo: &Echo,
) {
    out.extend_from_slice(b"{\"id\":");
    push_str(out, head.id);
    out.extend_from_slice(b",\"object\":\"response\",\"created_at\":");
    push_u64(out, head.created);
    out.extend_from_slice(b",\"status\":");
    push_str(out, status);
    out.extend_from_slice(b",\"background\":false,\"error\":null,\"incomplete_details\":");
    match incomplete_reason {
        Some(reason) => {
            out.extend_from_slice(b"{\"reason\":");
            push_str(out, reason);
            out.push(b'}');
        }
        None => out.extend_from_slice(b"null"),
    }
    out.push(b',');
    out.extend_from_slice(&echo.members);
    out.extend_from_slice(b",\"metadata\":{},\"model\":");
    push_str(out, head.model);
    out.extend_from_slice(b",\"output\":[");
    let item_status = if status == "in_progress" { "in_progress" } else { "completed" };
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        item.write(out, item_status);
    }
    out.extend_from_slice(b"],\"previous_response_id\":null,\"reasoning\":{\"effort\":null,\"summary\":null},\"store\":false,\"truncation\":\"disabled\",\"usage\":");
    match usage {
        Some(usage) => write_usage(out, usage),
        None => out.extend_from_slice(b"null"),
    }
    out.push(b'}');
}

fn write_usage(out: &mut Vec<u8>, usage: &Usage) {
    out.extend_from_slice(b"{\"input_tokens\":");
    push_u64(out, usage.prompt_tokens);
    out.extend_from_slice(b",\"input_tokens_details\":{\"cache_write_tokens\":");
    push_u64(out, usage.cache_write_tokens.unwrap_or(0));
    out.extend_from_slice(b",\"cached_tokens\":");
    push_u64(out, usage.cached_prompt_tokens.unwrap_or(0));
    out.extend_from_slice(b"},\"output_tokens\":");
    push_u64(out, usage.completion_tokens);
    out.extend_from_slice(b",\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":");
    push_u64(out, usage.total_tokens);
    out.push(b'}');
}

/// Ids of output items, derived from the response id so they are unique per response.
pub(crate) fn item_id(prefix: &str, response_id: &str, n: usize) -> String {
    let base = response_id.strip_prefix("resp_").unwrap_or(response_id);
    format!("{prefix}_{base}_{n}")
}
