//! Ollama `/api/chat` requests to and from a `ChatRequest`.

use serde::Serialize;
use serde_json::value::RawValue;

use super::options::{decode_format, decode_options, encode_format, WireOptions};
use super::API;
use crate::chat::{
    Api, ChatRequest, Extras, Image, Message, Part, RawJson, Role, Tool, ToolCall, ToolChoice, ToolResult,
};
use crate::error::TranslateError;
use crate::json::{self, At, Kind, Object};
use crate::wire::{arguments_object, empty_schema, parse_data_url, sniff_image_type, ExtraFields};

pub fn decode_chat_request(body: &[u8]) -> Result<ChatRequest, TranslateError> {
    let root = At::Root;
    let obj = json::body(body)?;
    // Ollama streams unless told not to.
    let mut req = ChatRequest { extra: Extras::new(Api::Ollama), stream: true, ..ChatRequest::default() };
    req.model = json::required_string(&obj, "model", &root)?.into_owned();
    for (name, raw) in obj.fields() {
        if json::kind(raw) == Kind::Null {
            continue;
        }
        let at = root.key(name);
        match name {
            "model" => {}
            "messages" => decode_messages(raw, &at, &mut req)?,
            "tools" => req.tools = decode_tools(raw, &at)?,
            "format" => req.response_format = decode_format(raw, &at)?,
            "options" => decode_options(raw, &at, &mut req)?,
            "stream" => req.stream = json::bool_field(raw, &at)?,
            // `keep_alive`, `think` and the like: hints, kept for an Ollama backend.
            _ => req.extra.keep(name, raw),
        }
    }
    Ok(req)
}

/// Ollama's images are bare base64; other APIs need their media type.
pub(crate) fn decode_images(raw: &RawValue, at: &At<'_>) -> Result<Vec<Part>, TranslateError> {
    let mut images = Vec::new();
    for (i, item) in json::array(raw, at)?.into_iter().enumerate() {
        let at = at.index(i);
        let data = json::string(item, &at)?.into_owned();
        let Some(media_type) = sniff_image_type(&data) else {
            return Err(TranslateError::invalid(format!("`{at}` is not a base64 PNG, JPEG, GIF or WebP image")));
        };
        images.push(Part::Image(Image::Base64 { media_type: media_type.to_owned(), data }));
    }
    Ok(images)
}

fn decode_messages(raw: &RawValue, at: &At<'_>, req: &mut ChatRequest) -> Result<(), TranslateError> {
    // Ollama's tool calls have no ids (newer versions add them); results name the tool instead.
    // Calls get ids here, and each result the id of the earliest unanswered call of its tool.
    let mut unanswered: Vec<(String, String)> = Vec::new();
    for (i, item) in json::array(raw, at)?.into_iter().enumerate() {
        let at = at.index(i);
        let message = json::object(item, &at)?;
        let content = json::optional_string(&message, "content", &at)?.unwrap_or_default();
        match json::required_string(&message, "role", &at)?.as_ref() {
            "system" if req.messages.is_empty() => req.system.push(content),
            "system" => req.messages.push(Message { role: Role::System, content: vec![Part::Text(content)] }),
            "user" => {
                let mut parts = Vec::new();
                if !content.is_empty() || message.get("images").is_none() {
                    parts.push(Part::Text(content));
                }
                if let Some(images) = message.get("images") {
                    parts.extend(decode_images(images, &at.key("images"))?);
                }
                req.messages.push(Message { role: Role::User, content: parts });
            }
            "assistant" => {
                let mut parts = Vec::new();
                if !content.is_empty() {
                    parts.push(Part::Text(content));
                }
                if let Some(calls) = message.get("tool_calls") {
                    for call in decode_tool_calls(calls, &at.key("tool_calls"), &format!("call_{i}"))? {
                        unanswered.push((call.id.clone(), call.name.clone()));
                        parts.push(Part::ToolCall(call));
                    }
                }
                req.messages.push(Message { role: Role::Assistant, content: parts });
            }
            "tool" => {
                let id = json::optional_string(&message, "tool_call_id", &at)?;
                let name = json::optional_string(&message, "tool_name", &at)?;
                let position = match (&id, &name) {
                    (Some(id), _) => unanswered.iter().position(|(call_id, _)| call_id == id),
                    (None, Some(name)) => unanswered.iter().position(|(_, call_name)| call_name == name),
                    (None, None) => (!unanswered.is_empty()).then_some(0),
                };
                let answered = position.map(|p| unanswered.remove(p).0);
                let tool_call_id = id.or(answered).unwrap_or_else(|| format!("call_{i}"));
                let result = ToolResult { tool_call_id, content, is_error: false };
                req.messages.push(Message { role: Role::Tool, content: vec![Part::ToolResult(result)] });
            }
            other => {
                return Err(TranslateError::invalid(format!(
                    "`{}` must be one of system, user, assistant, tool (got `{other}`)",
                    at.key("role")
                )))
            }
        }
    }
    Ok(())
}

/// `tool_calls` of a message; calls without an id get `<id_prefix>_<n>`.
pub(crate) fn decode_tool_calls(raw: &RawValue, at: &At<'_>, id_prefix: &str) -> Result<Vec<ToolCall>, TranslateError> {
    let mut calls = Vec::new();
    for (i, item) in json::array(raw, at)?.into_iter().enumerate() {
        let at = at.index(i);
        let call = json::object(item, &at)?;
        let function_at = at.key("function");
        let function: Object<'_> = json::object(call.require("function", &at)?, &function_at)?;
        let arguments = match function.get("arguments") {
            // Some clients send the arguments as a JSON string, as OpenAI does.
            Some(raw) if json::kind(raw) == Kind::String => {
                json::string(raw, &function_at.key("arguments"))?.into_owned()
            }
            Some(raw) => raw.get().to_owned(),
            None => "{}".to_owned(),
        };
        calls.push(ToolCall {
            id: json::optional_string(&call, "id", &at)?.unwrap_or_else(|| format!("{id_prefix}_{i}")),
            name: json::required_string(&function, "name", &function_at)?.into_owned(),
            arguments,
        });
    }
    Ok(calls)
}

fn decode_tools(raw: &RawValue, at: &At<'_>) -> Result<Vec<Tool>, TranslateError> {
    let mut tools = Vec::new();
    for (i, item) in json::array(raw, at)?.into_iter().enumerate() {
        let at = at.index(i);
        let tool = json::object(item, &at)?;
        let function_at = at.key("function");
        let function = json::object(tool.require("function", &at)?, &function_at)?;
        tools.push(Tool {
            name: json::required_string(&function, "name", &function_at)?.into_owned(),
            description: json::optional_string(&function, "description", &function_at)?,
            parameters: RawJson::from_raw(function.get("parameters").unwrap_or_else(|| empty_schema())),
            strict: None,
        });
    }
    Ok(tools)
}

#[derive(Serialize)]
struct WireRequest<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    format: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    options: Option<WireOptions<'a>>,
    /// Always written: Ollama's default is to stream.
    stream: bool,
    #[serde(flatten)]
    extra: ExtraFields<'a>,
}

#[derive(Serialize)]
pub(crate) struct WireMessage<'a> {
    pub(crate) role: &'static str,
    pub(crate) content: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) images: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) tool_calls: Vec<WireToolCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tool_name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tool_call_id: Option<&'a str>,
}

#[derive(Serialize)]
pub(crate) struct WireToolCall<'a> {
    pub(crate) id: &'a str,
    pub(crate) function: WireFunctionCall<'a>,
}

#[derive(Serialize)]
pub(crate) struct WireFunctionCall<'a> {
    pub(crate) index: usize,
    pub(crate) name: &'a str,
    pub(crate) arguments: &'a RawValue,
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
}

/// The message's images as Ollama takes them: bare base64.
pub(crate) fn encode_images(parts: &[Part]) -> Result<Vec<String>, TranslateError> {
    let mut images = Vec::new();
    for part in parts {
        match part {
            Part::Image(Image::Base64 { data, .. }) => images.push(data.clone()),
            Part::Image(Image::Url(url)) => match parse_data_url(url) {
                Some(Image::Base64 { data, .. }) => images.push(data),
                _ => {
                    return Err(TranslateError::unsupported_by("images by URL (Ollama takes only inline images)", API))
                }
            },
            _ => {}
        }
    }
    Ok(images)
}

pub(crate) fn joined_text(parts: &[Part]) -> String {
    let texts: Vec<&str> = parts
        .iter()
        .filter_map(|part| match part {
            Part::Text(text) => Some(text.as_str()),
            _ => None,
        })
        .collect();
    texts.join("\n")
}

pub(crate) fn encode_tool_calls<'a>(parts: &'a [Part]) -> Result<Vec<WireToolCall<'a>>, TranslateError> {
    let calls = parts.iter().filter_map(|part| match part {
        Part::ToolCall(call) => Some(call),
        _ => None,
    });
    calls
        .enumerate()
        .map(|(index, call)| {
            let arguments = arguments_object(call)?;
            Ok(WireToolCall { id: &call.id, function: WireFunctionCall { index, name: &call.name, arguments } })
        })
        .collect()
}

pub fn encode_chat_request(req: &ChatRequest) -> Result<Vec<u8>, TranslateError> {
    let tools_allowed = match &req.tool_choice {
        None | Some(ToolChoice::Auto) => true,
        // No tools offered is how Ollama is told not to call any.
        Some(ToolChoice::None) => false,
        Some(ToolChoice::Required | ToolChoice::Tool(_)) => {
            return Err(TranslateError::unsupported_by("a `tool_choice` that forces a tool call", API))
        }
    };
    let mut messages = Vec::with_capacity(req.messages.len() + 1);
    if !req.system.is_empty() {
        messages.push(text_message("system", req.system.join("\n\n")));
    }
    for (i, message) in req.messages.iter().enumerate() {
        match message.role {
            Role::System => messages.push(text_message("system", joined_text(&message.content))),
            Role::User | Role::Tool => {
                for part in &message.content {
                    if let Part::ToolResult(result) = part {
                        messages.push(WireMessage {
                            tool_name: tool_name(&req.messages[..i], &result.tool_call_id),
                            tool_call_id: Some(&result.tool_call_id),
                            ..text_message("tool", result.content.clone())
                        });
                    }
                }
                let rest = message.content.iter().any(|p| matches!(p, Part::Text(_) | Part::Image(_)));
                if rest || (message.role == Role::User && message.content.is_empty()) {
                    messages.push(WireMessage {
                        images: encode_images(&message.content)?,
                        ..text_message("user", joined_text(&message.content))
                    });
                }
            }
            Role::Assistant => {
                let content: String = message
                    .content
                    .iter()
                    .filter_map(|part| match part {
                        Part::Text(text) => Some(text.as_str()),
                        _ => None,
                    })
                    .collect();
                messages.push(WireMessage {
                    tool_calls: encode_tool_calls(&message.content)?,
                    ..text_message("assistant", content)
                });
            }
        }
    }
    let tools = if tools_allowed { &req.tools[..] } else { &[] };
    let wire = WireRequest {
        model: &req.model,
        messages,
        tools: tools
            .iter()
            .map(|tool| WireTool {
                kind: "function",
                function: WireFunction {
                    name: &tool.name,
                    description: tool.description.as_deref(),
                    parameters: &tool.parameters,
                },
            })
            .collect(),
        format: encode_format(req),
        options: WireOptions::new(req),
        stream: req.stream,
        extra: ExtraFields::except(req.extra.for_api(Api::Ollama), &["options"]),
    };
    json::to_vec(&wire)
}

pub(crate) fn text_message<'a>(role: &'static str, content: String) -> WireMessage<'a> {
    WireMessage { role, content, images: Vec::new(), tool_calls: Vec::new(), tool_name: None, tool_call_id: None }
}

/// The name of the tool a call id belongs to, from the assistant messages before it.
fn tool_name<'a>(earlier: &'a [Message], tool_call_id: &str) -> Option<&'a str> {
    earlier.iter().rev().flat_map(|message| message.content.iter()).find_map(|part| match part {
        Part::ToolCall(call) if call.id == tool_call_id => Some(call.name.as_str()),
        _ => None,
    })
}
