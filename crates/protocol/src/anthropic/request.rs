//! Anthropic Messages requests (`POST /v1/messages`) to and from a `ChatRequest`.

use serde::Serialize;
use serde_json::value::RawValue;

use super::API;
use crate::chat::{
    Api, CacheAt, CachePoint, ChatRequest, Extras, Image, Message, Part, RawJson, ResponseFormat, Role, Tool, ToolCall,
    ToolChoice, ToolResult,
};
use crate::error::TranslateError;
use crate::json::{self, At, Kind, Object};
use crate::wire::{arguments_object, empty_schema, ExtraFields};

/// `max_tokens` for a request whose client set none: Anthropic requires one, and 4096 is what its
/// own SDK examples use; high enough for ordinary answers, low enough for every Claude model.
pub const DEFAULT_MAX_TOKENS: u64 = 4096;

pub fn decode_request(body: &[u8]) -> Result<ChatRequest, TranslateError> {
    let root = At::Root;
    let obj = json::body(body)?;
    let mut req = ChatRequest { extra: Extras::new(Api::Anthropic), ..ChatRequest::default() };
    req.model = json::required_string(&obj, "model", &root)?.into_owned();
    decode_messages(obj.require("messages", &root)?, &root.key("messages"), &mut req)?;
    for (name, raw) in obj.fields() {
        if json::kind(raw) == Kind::Null {
            continue;
        }
        let at = root.key(name);
        match name {
            "model" | "messages" => {}
            "system" => decode_system(raw, &at, &mut req)?,
            "max_tokens" => req.max_tokens = Some(json::u64_field(raw, &at)?),
            "tools" => decode_tools(raw, &at, &mut req)?,
            "tool_choice" => {
                let choice = json::object(raw, &at)?;
                if json::optional_bool(&choice, "disable_parallel_tool_use", &at)? == Some(true) {
                    req.parallel_tool_calls = Some(false);
                }
                req.tool_choice = Some(match choice.tag().as_ref() {
                    "auto" => ToolChoice::Auto,
                    "any" => ToolChoice::Required,
                    "none" => ToolChoice::None,
                    "tool" => ToolChoice::Tool(json::required_string(&choice, "name", &at)?.into_owned()),
                    other => {
                        return Err(TranslateError::invalid(format!(
                            "`{}` must be auto, any, tool or none (got `{other}`)",
                            at.key("type")
                        )))
                    }
                });
            }
            "stop_sequences" => req.stop = json::string_or_strings(raw, &at)?,
            "temperature" => req.temperature = Some(json::f64_field(raw, &at)?),
            "top_p" => req.top_p = Some(json::f64_field(raw, &at)?),
            "top_k" => req.top_k = Some(json::u64_field(raw, &at)?),
            "stream" => req.stream = json::bool_field(raw, &at)?,
            "metadata" => req.user = json::optional_string(&json::object(raw, &at)?, "user_id", &at)?,
            "output_config" => {
                let config = json::object(raw, &at)?;
                if let Some(format) = config.get("format") {
                    let format_at = at.key("format");
                    let format = json::object(format, &format_at)?;
                    req.response_format = Some(ResponseFormat::JsonSchema {
                        name: None,
                        schema: RawJson::from_raw(format.require("schema", &format_at)?),
                        strict: None,
                    });
                }
                // `effort` is a hint only Claude models take.
            }
            "container" | "mcp_servers" => {
                return Err(TranslateError::unsupported(format!("Anthropic-hosted `{name}`")))
            }
            // `thinking`, `service_tier` and the like: hints, kept for an Anthropic backend.
            _ => req.extra.keep(name, raw),
        }
    }
    Ok(req)
}

fn decode_system(raw: &RawValue, at: &At<'_>, req: &mut ChatRequest) -> Result<(), TranslateError> {
    if json::kind(raw) == Kind::String {
        req.system = vec![json::string(raw, at)?.into_owned()];
        return Ok(());
    }
    for (i, item) in json::array(raw, at)?.into_iter().enumerate() {
        let at = at.index(i);
        let block = json::object(item, &at)?;
        req.system.push(json::required_string(&block, "text", &at)?.into_owned());
        mark_cached(&block, CacheAt::System(req.system.len() - 1), &at, req)?;
    }
    Ok(())
}

/// A block's `cache_control` (`{"type": "ephemeral", "ttl": "1h"}`), kept as a breakpoint at `here`.
fn mark_cached(block: &Object<'_>, here: CacheAt, at: &At<'_>, req: &mut ChatRequest) -> Result<(), TranslateError> {
    let Some(raw) = block.get("cache_control").filter(|raw| json::kind(raw) != Kind::Null) else { return Ok(()) };
    let at = at.key("cache_control");
    let control = json::object(raw, &at)?;
    let ttl = json::optional_string(&control, "ttl", &at)?;
    req.cache_points.push(CachePoint { at: here, ttl });
    Ok(())
}

fn decode_messages(raw: &RawValue, at: &At<'_>, req: &mut ChatRequest) -> Result<(), TranslateError> {
    for (i, item) in json::array(raw, at)?.into_iter().enumerate() {
        let at = at.index(i);
        let message = json::object(item, &at)?;
        let role = match json::required_string(&message, "role", &at)?.as_ref() {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            other => {
                return Err(TranslateError::invalid(format!(
                    "`{}` must be user or assistant (got `{other}`)",
                    at.key("role")
                )))
            }
        };
        let content_at = at.key("content");
        let content = message.require("content", &at)?;
        if json::kind(content) == Kind::String {
            let text = json::string(content, &content_at)?.into_owned();
            req.messages.push(Message { role, content: vec![Part::Text(text)] });
            continue;
        }
        let first = req.messages.len();
        for (j, block) in json::array(content, &content_at)?.into_iter().enumerate() {
            let at = content_at.index(j);
            let block = json::object(block, &at)?;
            let Some(part) = decode_block(&block, role, &at)? else { continue };
            // Tool results go to a tool message of their own, everything else stays in order.
            let part_role = if matches!(part, Part::ToolResult(_)) { Role::Tool } else { role };
            let same_turn = req.messages.len() > first && req.messages.last().map(|m| m.role) == Some(part_role);
            match req.messages.last_mut() {
                Some(last) if same_turn => last.content.push(part),
                _ => req.messages.push(Message { role: part_role, content: vec![part] }),
            }
            let message = req.messages.len() - 1;
            let here = CacheAt::Part { message, part: req.messages[message].content.len() - 1 };
            mark_cached(&block, here, &at, req)?;
        }
    }
    Ok(())
}

/// One content block; `None` for blocks that carry nothing to translate (thinking).
fn decode_block(block: &Object<'_>, role: Role, at: &At<'_>) -> Result<Option<Part>, TranslateError> {
    let part = match (block.tag().as_ref(), role) {
        ("text", _) => Part::Text(json::required_string(block, "text", at)?.into_owned()),
        ("image", Role::User) => Part::Image(decode_image(block, at)?),
        ("tool_use", Role::Assistant) => Part::ToolCall(ToolCall {
            id: json::required_string(block, "id", at)?.into_owned(),
            name: json::required_string(block, "name", at)?.into_owned(),
            arguments: block.require("input", at)?.get().to_owned(),
        }),
        ("tool_result", Role::User) => Part::ToolResult(ToolResult {
            tool_call_id: json::required_string(block, "tool_use_id", at)?.into_owned(),
            content: match block.get("content") {
                Some(content) => decode_tool_result_content(content, &at.key("content"))?,
                None => String::new(),
            },
            is_error: json::optional_bool(block, "is_error", at)?.unwrap_or(false),
        }),
        // Earlier reasoning only the model that wrote it can check; other models do without.
        ("thinking" | "redacted_thinking", Role::Assistant) => return Ok(None),
        (
            kind @ ("document" | "search_result" | "server_tool_use" | "web_search_tool_result" | "container_upload"),
            _,
        ) => return Err(TranslateError::unsupported(format!("`{kind}` content blocks"))),
        (kind, _) => {
            return Err(TranslateError::invalid(format!("`{}` cannot be `{kind}` in this message", at.key("type"))))
        }
    };
    Ok(Some(part))
}

fn decode_image(block: &Object<'_>, at: &At<'_>) -> Result<Image, TranslateError> {
    let source_at = at.key("source");
    let source = json::object(block.require("source", at)?, &source_at)?;
    match source.tag().as_ref() {
        "base64" => Ok(Image::Base64 {
            media_type: json::required_string(&source, "media_type", &source_at)?.into_owned(),
            data: json::required_string(&source, "data", &source_at)?.into_owned(),
        }),
        "url" => Ok(Image::Url(json::required_string(&source, "url", &source_at)?.into_owned())),
        other => Err(TranslateError::unsupported(format!("image sources of type `{other}`"))),
    }
}

fn decode_tool_result_content(raw: &RawValue, at: &At<'_>) -> Result<String, TranslateError> {
    if json::kind(raw) == Kind::String {
        return Ok(json::string(raw, at)?.into_owned());
    }
    let mut text = String::new();
    for (i, item) in json::array(raw, at)?.into_iter().enumerate() {
        let at = at.index(i);
        let block = json::object(item, &at)?;
        match block.tag().as_ref() {
            "text" => text.push_str(&json::required_string(&block, "text", &at)?),
            other => return Err(TranslateError::unsupported(format!("`{other}` blocks inside a tool_result"))),
        }
    }
    Ok(text)
}

fn decode_tools(raw: &RawValue, at: &At<'_>, req: &mut ChatRequest) -> Result<(), TranslateError> {
    for (i, item) in json::array(raw, at)?.into_iter().enumerate() {
        let at = at.index(i);
        let tool = json::object(item, &at)?;
        let kind = tool.tag();
        if !kind.is_empty() && kind != "custom" {
            return Err(TranslateError::unsupported(format!("Anthropic-defined tools (`{kind}`)")));
        }
        req.tools.push(Tool {
            name: json::required_string(&tool, "name", &at)?.into_owned(),
            description: json::optional_string(&tool, "description", &at)?,
            parameters: RawJson::from_raw(tool.get("input_schema").unwrap_or_else(|| empty_schema())),
            strict: json::optional_bool(&tool, "strict", &at)?,
        });
        mark_cached(&tool, CacheAt::Tool(req.tools.len() - 1), &at, req)?;
    }
    Ok(())
}

#[derive(Serialize)]
struct WireRequest<'a> {
    model: &'a str,
    max_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<WireSystem<'a>>,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<WireToolChoice<'a>>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop_sequences: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_k: Option<u64>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<WireMetadata<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_config: Option<WireOutputConfig<'a>>,
    #[serde(flatten)]
    extra: ExtraFields<'a>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum WireSystem<'a> {
    Text(&'a str),
    Blocks(Vec<WireCached<'a>>),
}

#[derive(Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: Vec<WireCached<'a>>,
}

/// A block of a request, with the breakpoint the client set on it.
#[derive(Serialize)]
struct WireCached<'a> {
    #[serde(flatten)]
    block: WireBlock<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<WireCacheControl<'a>>,
}

#[derive(Serialize)]
struct WireCacheControl<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl: Option<&'a str>,
}

/// `cache_control` for the breakpoint at `at`, if there is one.
fn cache_control(req: &ChatRequest, at: CacheAt) -> Option<WireCacheControl<'_>> {
    req.cache_point(at).map(|p| WireCacheControl { kind: "ephemeral", ttl: p.ttl.as_deref() })
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum WireBlock<'a> {
    Text {
        text: &'a str,
    },
    Image {
        source: WireImageSource<'a>,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: &'a RawValue,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: &'a str,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum WireImageSource<'a> {
    Base64 { media_type: &'a str, data: &'a str },
    Url { url: &'a str },
}

#[derive(Serialize)]
struct WireTool<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    input_schema: &'a RawJson,
    #[serde(skip_serializing_if = "Option::is_none")]
    strict: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<WireCacheControl<'a>>,
}

#[derive(Serialize)]
struct WireToolChoice<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    disable_parallel_tool_use: bool,
}

#[derive(Serialize)]
struct WireMetadata<'a> {
    user_id: &'a str,
}

#[derive(Serialize)]
struct WireOutputConfig<'a> {
    format: WireJsonSchemaFormat<'a>,
}

#[derive(Serialize)]
struct WireJsonSchemaFormat<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    schema: &'a RawJson,
}

/// The system blocks (the system prompt, then any later system messages, which Anthropic has no
/// place for but there) and the turns, each block with the breakpoint the client set on it.
fn encode_turns(req: &ChatRequest) -> Result<(Vec<WireCached<'_>>, Vec<WireMessage<'_>>), TranslateError> {
    // Anthropic has one system prompt: later system messages are appended to it.
    let mut system: Vec<WireCached<'_>> = (req.system.iter().enumerate())
        .map(|(i, text)| WireCached {
            block: WireBlock::Text { text },
            cache_control: cache_control(req, CacheAt::System(i)),
        })
        .collect();
    let mut messages: Vec<WireMessage<'_>> = Vec::with_capacity(req.messages.len());
    for (m, message) in req.messages.iter().enumerate() {
        let part_cache = |part| cache_control(req, CacheAt::Part { message: m, part });
        if message.role == Role::System {
            system.extend(message.content.iter().enumerate().filter_map(|(p, part)| match part {
                Part::Text(text) => Some(WireCached { block: WireBlock::Text { text }, cache_control: part_cache(p) }),
                _ => None,
            }));
            continue;
        }
        let role = if message.role == Role::Assistant { "assistant" } else { "user" };
        let mut blocks = Vec::with_capacity(message.content.len());
        for (p, part) in message.content.iter().enumerate() {
            let block = match part {
                // Anthropic refuses empty text blocks.
                Part::Text(text) if text.is_empty() => continue,
                Part::Text(text) => WireBlock::Text { text },
                Part::Image(Image::Base64 { media_type, data }) => {
                    WireBlock::Image { source: WireImageSource::Base64 { media_type, data } }
                }
                Part::Image(Image::Url(url)) => WireBlock::Image { source: WireImageSource::Url { url } },
                Part::ToolCall(call) => {
                    WireBlock::ToolUse { id: &call.id, name: &call.name, input: arguments_object(call)? }
                }
                Part::ToolResult(result) => WireBlock::ToolResult {
                    tool_use_id: &result.tool_call_id,
                    content: &result.content,
                    is_error: result.is_error,
                },
            };
            blocks.push(WireCached { block, cache_control: part_cache(p) });
        }
        if blocks.is_empty() {
            continue;
        }
        // Consecutive turns of one role (tool results, then the user's text) make one message.
        match messages.last_mut() {
            Some(last) if last.role == role => last.content.extend(blocks),
            _ => messages.push(WireMessage { role, content: blocks }),
        }
    }
    Ok((system, messages))
}

pub fn encode_request(req: &ChatRequest) -> Result<Vec<u8>, TranslateError> {
    let (system, messages) = encode_turns(req)?;
    let response_format = match &req.response_format {
        None => None,
        Some(ResponseFormat::JsonSchema { schema, .. }) => {
            Some(WireOutputConfig { format: WireJsonSchemaFormat { kind: "json_schema", schema } })
        }
        Some(ResponseFormat::JsonObject) => {
            return Err(TranslateError::unsupported_by("JSON mode without a schema (`json_object`)", API))
        }
    };
    let disable_parallel = req.parallel_tool_calls == Some(false);
    let tool_choice = match (&req.tool_choice, req.tools.is_empty()) {
        (Some(choice), _) => Some(match choice {
            ToolChoice::Auto => {
                WireToolChoice { kind: "auto", name: None, disable_parallel_tool_use: disable_parallel }
            }
            ToolChoice::None => WireToolChoice { kind: "none", name: None, disable_parallel_tool_use: false },
            ToolChoice::Required => {
                WireToolChoice { kind: "any", name: None, disable_parallel_tool_use: disable_parallel }
            }
            ToolChoice::Tool(name) => {
                WireToolChoice { kind: "tool", name: Some(name), disable_parallel_tool_use: disable_parallel }
            }
        }),
        (None, false) if disable_parallel => {
            Some(WireToolChoice { kind: "auto", name: None, disable_parallel_tool_use: true })
        }
        (None, _) => None,
    };
    let wire = WireRequest {
        model: &req.model,
        max_tokens: req.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
        system: match system.as_slice() {
            [] => None,
            [WireCached { block: WireBlock::Text { text }, cache_control: None }] => Some(WireSystem::Text(text)),
            _ => Some(WireSystem::Blocks(system)),
        },
        messages,
        tools: req
            .tools
            .iter()
            .enumerate()
            .map(|(i, tool)| WireTool {
                name: &tool.name,
                description: tool.description.as_deref(),
                input_schema: &tool.parameters,
                strict: tool.strict,
                cache_control: cache_control(req, CacheAt::Tool(i)),
            })
            .collect(),
        tool_choice,
        stop_sequences: &req.stop,
        // Anthropic's range is 0..=1 where OpenAI's is 0..=2; the top of one is the top of the other.
        temperature: req.temperature.map(|t| t.clamp(0.0, 1.0)),
        // Recent Claude models refuse `temperature` and `top_p` together; temperature wins.
        top_p: if req.temperature.is_some() { None } else { req.top_p },
        top_k: req.top_k,
        stream: req.stream,
        metadata: req.user.as_deref().map(|user_id| WireMetadata { user_id }),
        output_config: response_format,
        extra: ExtraFields::all(req.extra.for_api(Api::Anthropic)),
    };
    json::to_vec(&wire)
}
