//! A `ChatRequest` as an OpenAI Chat Completions request (`POST /v1/chat/completions`).

use serde::Serialize;

use crate::chat::{Api, ChatRequest, Image, Message, Part, RawJson, ResponseFormat, Role, ToolCall, ToolChoice};
use crate::error::TranslateError;
use crate::json;
use crate::wire::{data_url, ExtraFields};

const API: &str = "OpenAI Chat Completions";

#[derive(Serialize)]
struct WireRequest<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parallel_tool_calls: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<WireResponseFormat<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    frequency_penalty: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    presence_penalty: Option<f64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    stop: Vec<&'a str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_cache_key: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_cache_retention: Option<&'a str>,
    #[serde(flatten)]
    extra: ExtraFields<'a>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: WireContent<'a>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<WireToolCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum WireContent<'a> {
    Null,
    Text(String),
    Parts(Vec<WirePart<'a>>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WirePart<'a> {
    Text { text: &'a str },
    ImageUrl { image_url: WireImageUrl },
}

#[derive(Serialize)]
struct WireImageUrl {
    url: String,
}

#[derive(Serialize)]
pub(crate) struct WireToolCall<'a> {
    pub(crate) id: &'a str,
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    pub(crate) function: WireFunctionCall<'a>,
}

#[derive(Serialize)]
pub(crate) struct WireFunctionCall<'a> {
    pub(crate) name: &'a str,
    pub(crate) arguments: &'a str,
}

impl<'a> WireToolCall<'a> {
    pub(crate) fn new(call: &'a ToolCall) -> Self {
        // A call without arguments still needs an arguments object.
        let arguments = if call.arguments.trim().is_empty() { "{}" } else { call.arguments.as_str() };
        WireToolCall { id: &call.id, kind: "function", function: WireFunctionCall { name: &call.name, arguments } }
    }
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    parameters: &'a RawJson,
    #[serde(skip_serializing_if = "Option::is_none")]
    strict: Option<bool>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireResponseFormat<'a> {
    JsonObject,
    JsonSchema { json_schema: WireJsonSchema<'a> },
}

#[derive(Serialize)]
struct WireJsonSchema<'a> {
    name: &'a str,
    schema: &'a RawJson,
    #[serde(skip_serializing_if = "Option::is_none")]
    strict: Option<bool>,
}

pub fn encode_request(req: &ChatRequest) -> Result<Vec<u8>, TranslateError> {
    let mut messages = Vec::with_capacity(req.messages.len() + 1);
    if !req.system.is_empty() {
        messages.push(WireMessage {
            role: "system",
            content: WireContent::Text(req.system.join("\n\n")),
            tool_calls: Vec::new(),
            tool_call_id: None,
        });
    }
    for message in &req.messages {
        encode_message(message, &mut messages)?;
    }
    let wire = WireRequest {
        model: &req.model,
        messages,
        tools: req
            .tools
            .iter()
            .map(|tool| WireTool {
                kind: "function",
                function: WireFunction {
                    name: &tool.name,
                    description: tool.description.as_deref(),
                    parameters: &tool.parameters,
                    strict: tool.strict,
                },
            })
            .collect(),
        tool_choice: req.tool_choice.as_ref().map(|choice| match choice {
            ToolChoice::Auto => "auto".into(),
            ToolChoice::None => "none".into(),
            ToolChoice::Required => "required".into(),
            ToolChoice::Tool(name) => serde_json::json!({"type": "function", "function": {"name": name}}),
        }),
        parallel_tool_calls: if req.tools.is_empty() { None } else { req.parallel_tool_calls },
        response_format: req.response_format.as_ref().map(|format| match format {
            ResponseFormat::JsonObject => WireResponseFormat::JsonObject,
            ResponseFormat::JsonSchema { name, schema, strict } => WireResponseFormat::JsonSchema {
                json_schema: WireJsonSchema { name: name.as_deref().unwrap_or("response"), schema, strict: *strict },
            },
        }),
        // `max_tokens`, not `max_completion_tokens`: every OpenAI-compatible server takes it.
        max_tokens: req.max_tokens,
        temperature: req.temperature,
        top_p: req.top_p,
        seed: req.seed,
        frequency_penalty: req.frequency_penalty,
        presence_penalty: req.presence_penalty,
        stop: req.stop.iter().map(String::as_str).collect(),
        stream: req.stream,
        // Always ask for usage: a translated stream reports it to the client and the gateway counts it.
        stream_options: req.stream.then_some(StreamOptions { include_usage: true }),
        user: req.user.as_deref(),
        prompt_cache_key: req.prompt_cache_key.as_deref(),
        prompt_cache_retention: req.prompt_cache_retention.as_deref(),
        extra: ExtraFields::all(req.extra.for_api(Api::OpenAiChat)),
    };
    json::to_vec(&wire)
}

fn encode_message<'a>(message: &'a Message, out: &mut Vec<WireMessage<'a>>) -> Result<(), TranslateError> {
    match message.role {
        Role::System => out.push(WireMessage {
            role: "system",
            content: WireContent::Text(texts(&message.content).collect::<Vec<_>>().join("\n\n")),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }),
        Role::Assistant => {
            let mut text = String::new();
            let mut tool_calls = Vec::new();
            for part in &message.content {
                match part {
                    Part::Text(t) => text.push_str(t),
                    Part::ToolCall(call) => tool_calls.push(WireToolCall::new(call)),
                    Part::Image(_) => return Err(TranslateError::unsupported_by("images in assistant messages", API)),
                    Part::ToolResult(_) => {
                        return Err(TranslateError::invalid("tool results cannot be part of an assistant message"))
                    }
                }
            }
            let content =
                if text.is_empty() && !tool_calls.is_empty() { WireContent::Null } else { WireContent::Text(text) };
            out.push(WireMessage { role: "assistant", content, tool_calls, tool_call_id: None });
        }
        Role::User | Role::Tool => {
            // Tool results become `tool` messages; anything else in the same turn follows them as
            // a user message, in the order the client wrote it.
            let mut rest: Vec<&Part> = Vec::new();
            for part in &message.content {
                match part {
                    Part::ToolResult(result) => out.push(WireMessage {
                        role: "tool",
                        content: WireContent::Text(result.content.clone()),
                        tool_calls: Vec::new(),
                        tool_call_id: Some(&result.tool_call_id),
                    }),
                    Part::ToolCall(_) => {
                        return Err(TranslateError::invalid("tool calls can only be made by the assistant"))
                    }
                    other => rest.push(other),
                }
            }
            if !rest.is_empty() || (message.role == Role::User && message.content.is_empty()) {
                out.push(WireMessage {
                    role: "user",
                    content: user_content(&rest),
                    tool_calls: Vec::new(),
                    tool_call_id: None,
                });
            }
        }
    }
    Ok(())
}

fn user_content<'a>(parts: &[&'a Part]) -> WireContent<'a> {
    if let [Part::Text(text)] = parts {
        return WireContent::Text(text.clone());
    }
    if parts.is_empty() {
        return WireContent::Text(String::new());
    }
    WireContent::Parts(
        parts
            .iter()
            .filter_map(|part| match part {
                Part::Text(text) => Some(WirePart::Text { text }),
                Part::Image(Image::Url(url)) => {
                    Some(WirePart::ImageUrl { image_url: WireImageUrl { url: url.clone() } })
                }
                Part::Image(Image::Base64 { media_type, data }) => {
                    Some(WirePart::ImageUrl { image_url: WireImageUrl { url: data_url(media_type, data) } })
                }
                Part::ToolCall(_) | Part::ToolResult(_) => None,
            })
            .collect(),
    )
}

fn texts(parts: &[Part]) -> impl Iterator<Item = &str> {
    parts.iter().filter_map(|part| match part {
        Part::Text(text) => Some(text.as_str()),
        _ => None,
    })
}
