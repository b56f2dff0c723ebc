//! A `ChatRequest` as a Bedrock `Converse` request: the system prompt as `system` blocks, turns
//! as `messages` with `user` and `assistant` roles, tool calls and their results as `toolUse` and
//! `toolResult` blocks, tools as `toolConfig.tools[].toolSpec` with their JSON Schema, sampling in
//! `inferenceConfig` (and `top_k`, which Converse has no field for, in
//! `additionalModelRequestFields`, where Anthropic's models on Bedrock read it).

use serde::Serialize;
use serde_json::value::RawValue;

use super::API;
use crate::chat::{CacheAt, ChatRequest, Image, Part, Role, ToolChoice};
use crate::error::TranslateError;
use crate::json::{self, Kind};
use crate::wire::{arguments_object, empty_schema};

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireRequest<'a> {
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    system: Vec<WireSystem<'a>>,
    inference_config: WireInferenceConfig<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_config: Option<WireToolConfig<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    additional_model_request_fields: Option<WireAdditional>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
enum WireSystem<'a> {
    Text(&'a str),
    CachePoint(WireCachePoint<'a>),
}

/// Converse's prompt-cache breakpoint, a block of its own after the one it caches up to.
#[derive(Serialize)]
struct WireCachePoint<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl: Option<&'a str>,
}

/// The `cachePoint` after the block at `at`, if the client set a breakpoint there.
fn cache_point(req: &ChatRequest, at: CacheAt) -> Option<WireCachePoint<'_>> {
    req.cache_point(at).map(|p| WireCachePoint { kind: "default", ttl: p.ttl.as_deref() })
}

#[derive(Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: Vec<WireBlock<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
enum WireBlock<'a> {
    Text(&'a str),
    Image(WireImage<'a>),
    ToolUse(WireToolUse<'a>),
    ToolResult(WireToolResult<'a>),
    CachePoint(WireCachePoint<'a>),
}

#[derive(Serialize)]
struct WireImage<'a> {
    format: &'static str,
    source: WireImageSource<'a>,
}

#[derive(Serialize)]
struct WireImageSource<'a> {
    /// Base64 in JSON (the SDKs encode the blob so).
    bytes: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireToolUse<'a> {
    tool_use_id: &'a str,
    name: &'a str,
    input: &'a RawValue,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireToolResult<'a> {
    tool_use_id: &'a str,
    content: Vec<WireToolResultContent<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<&'static str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
enum WireToolResultContent<'a> {
    Text(&'a str),
    Json(&'a RawValue),
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireInferenceConfig<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop_sequences: &'a [String],
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireToolConfig<'a> {
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<WireToolChoice<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
enum WireTool<'a> {
    ToolSpec(WireToolSpec<'a>),
    CachePoint(WireCachePoint<'a>),
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireToolSpec<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    input_schema: WireSchema<'a>,
}

#[derive(Serialize)]
struct WireSchema<'a> {
    json: &'a RawValue,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
enum WireToolChoice<'a> {
    Auto(Empty),
    Any(Empty),
    Tool(WireNamedTool<'a>),
}

#[derive(Serialize)]
struct Empty {}

#[derive(Serialize)]
struct WireNamedTool<'a> {
    name: &'a str,
}

#[derive(Serialize)]
struct WireAdditional {
    top_k: u64,
}

/// Converse's image `format`, from a media type.
fn image_format(media_type: &str) -> Option<&'static str> {
    Some(match media_type.strip_prefix("image/")? {
        "png" => "png",
        "jpeg" | "jpg" => "jpeg",
        "gif" => "gif",
        "webp" => "webp",
        _ => return None,
    })
}

/// A tool result's content: a JSON object as `json`, anything else as `text`.
fn tool_result_content(content: &str) -> Vec<WireToolResultContent<'_>> {
    if let Ok(raw) = serde_json::from_str::<&RawValue>(content.trim()) {
        if json::kind(raw) == Kind::Object {
            return vec![WireToolResultContent::Json(raw)];
        }
    }
    if content.trim().is_empty() {
        // Converse refuses blank text blocks; an empty result is an empty object.
        return vec![WireToolResultContent::Json(crate::wire::empty_object())];
    }
    vec![WireToolResultContent::Text(content)]
}

/// A message part as a Converse block (None: a blank text, which Converse refuses); `uses_tools`
/// is set by tool calls and results.
fn part_block<'a>(part: &'a Part, uses_tools: &mut bool) -> Result<Option<WireBlock<'a>>, TranslateError> {
    Ok(Some(match part {
        Part::Text(text) if text.trim().is_empty() => return Ok(None),
        Part::Text(text) => WireBlock::Text(text),
        Part::Image(Image::Base64 { media_type, data }) => {
            let format = image_format(media_type)
                .ok_or_else(|| TranslateError::unsupported_by(format!("images of type `{media_type}`"), API))?;
            WireBlock::Image(WireImage { format, source: WireImageSource { bytes: data } })
        }
        Part::Image(Image::Url(_)) => {
            return Err(TranslateError::unsupported_by("images by URL (send them inline, as base64)", API))
        }
        Part::ToolCall(call) => {
            *uses_tools = true;
            WireBlock::ToolUse(WireToolUse { tool_use_id: &call.id, name: &call.name, input: arguments_object(call)? })
        }
        Part::ToolResult(result) => {
            *uses_tools = true;
            WireBlock::ToolResult(WireToolResult {
                tool_use_id: &result.tool_call_id,
                content: tool_result_content(&result.content),
                status: result.is_error.then_some("error"),
            })
        }
    }))
}

pub fn encode_request(req: &ChatRequest) -> Result<Vec<u8>, TranslateError> {
    if req.response_format.is_some() {
        return Err(TranslateError::unsupported_by("`response_format` (structured output)", API));
    }
    let mut system: Vec<WireSystem<'_>> = Vec::with_capacity(req.system.len());
    for (i, text) in req.system.iter().enumerate() {
        if !text.trim().is_empty() {
            system.push(WireSystem::Text(text));
        }
        system.extend(cache_point(req, CacheAt::System(i)).map(WireSystem::CachePoint));
    }
    let mut messages: Vec<WireMessage<'_>> = Vec::with_capacity(req.messages.len());
    let mut uses_tools = false;
    for (m, message) in req.messages.iter().enumerate() {
        let part_cache = |part| cache_point(req, CacheAt::Part { message: m, part });
        if message.role == Role::System {
            for (p, part) in message.content.iter().enumerate() {
                if let Part::Text(text) = part {
                    if !text.trim().is_empty() {
                        system.push(WireSystem::Text(text));
                    }
                }
                system.extend(part_cache(p).map(WireSystem::CachePoint));
            }
            continue;
        }
        let role = if message.role == Role::Assistant { "assistant" } else { "user" };
        let mut content = Vec::with_capacity(message.content.len());
        for (p, part) in message.content.iter().enumerate() {
            content.extend(part_block(part, &mut uses_tools)?);
            content.extend(part_cache(p).map(WireBlock::CachePoint));
        }
        if content.is_empty() {
            continue;
        }
        // Consecutive turns of one role (tool results, then the user's text) make one message.
        match messages.last_mut() {
            Some(last) if last.role == role => last.content.extend(content),
            _ => messages.push(WireMessage { role, content }),
        }
    }
    let tool_choice = match &req.tool_choice {
        None | Some(ToolChoice::None) => None,
        Some(ToolChoice::Auto) => Some(WireToolChoice::Auto(Empty {})),
        Some(ToolChoice::Required) => Some(WireToolChoice::Any(Empty {})),
        Some(ToolChoice::Tool(name)) => Some(WireToolChoice::Tool(WireNamedTool { name })),
    };
    let no_tools = req.tool_choice == Some(ToolChoice::None);
    if no_tools && uses_tools {
        // Converse has no "none" choice, and a conversation with tool blocks must declare its tools.
        return Err(TranslateError::unsupported_by("`tool_choice: none` in a conversation that has used tools", API));
    }
    let tool_config = (!req.tools.is_empty() && !no_tools).then(|| WireToolConfig {
        tools: (req.tools.iter().enumerate())
            .flat_map(|(i, t)| {
                let spec = WireToolSpec {
                    name: &t.name,
                    description: t.description.as_deref().filter(|d| !d.is_empty()),
                    input_schema: WireSchema {
                        json: if t.parameters.as_str().trim() == "null" {
                            empty_schema()
                        } else {
                            t.parameters.as_raw()
                        },
                    },
                };
                [Some(WireTool::ToolSpec(spec)), cache_point(req, CacheAt::Tool(i)).map(WireTool::CachePoint)]
            })
            .flatten()
            .collect(),
        tool_choice,
    });
    let wire = WireRequest {
        messages,
        system,
        inference_config: WireInferenceConfig {
            max_tokens: req.max_tokens,
            // Converse's range is 0..=1 where OpenAI's is 0..=2; the top of one is the top of the other.
            temperature: req.temperature.map(|t| t.clamp(0.0, 1.0)),
            top_p: req.top_p,
            stop_sequences: &req.stop,
        },
        tool_config,
        additional_model_request_fields: req.top_k.map(|top_k| WireAdditional { top_k }),
    };
    json::to_vec(&wire)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::{Message, RawJson, ResponseFormat, Tool, ToolCall, ToolResult};
    use serde_json::{json, Value};

    fn weather_tool() -> Tool {
        Tool {
            name: "get_weather".into(),
            description: Some("Current weather".into()),
            parameters: RawJson::parse(r#"{"type":"object","properties":{"location":{"type":"string"}}}"#.into())
                .unwrap(),
            strict: None,
        }
    }

    #[test]
    fn a_conversation_with_a_tool_round_trip_encodes_as_the_reference_shows() {
        let req = ChatRequest {
            model: "anthropic.claude-3-5-sonnet-20240620-v1:0".into(),
            system: vec!["Be brief.".into()],
            messages: vec![
                Message { role: Role::User, content: vec![Part::Text("Weather in Paris?".into())] },
                Message {
                    role: Role::Assistant,
                    content: vec![Part::ToolCall(ToolCall {
                        id: "tooluse_1".into(),
                        name: "get_weather".into(),
                        arguments: r#"{"location":"Paris"}"#.into(),
                    })],
                },
                Message {
                    role: Role::Tool,
                    content: vec![Part::ToolResult(ToolResult {
                        tool_call_id: "tooluse_1".into(),
                        content: "18C and sunny".into(),
                        is_error: false,
                    })],
                },
                Message { role: Role::User, content: vec![Part::Text("And tomorrow?".into())] },
            ],
            tools: vec![weather_tool()],
            tool_choice: Some(ToolChoice::Tool("get_weather".into())),
            max_tokens: Some(64),
            temperature: Some(1.5),
            top_k: Some(40),
            seed: Some(7),
            stop: vec!["END".into()],
            ..ChatRequest::default()
        };
        let v: Value = serde_json::from_slice(&encode_request(&req).unwrap()).unwrap();
        assert_eq!(
            v,
            json!({
                "messages": [
                    {"role": "user", "content": [{"text": "Weather in Paris?"}]},
                    {"role": "assistant", "content": [{"toolUse": {"toolUseId": "tooluse_1", "name": "get_weather", "input": {"location": "Paris"}}}]},
                    {"role": "user", "content": [
                        {"toolResult": {"toolUseId": "tooluse_1", "content": [{"text": "18C and sunny"}]}},
                        {"text": "And tomorrow?"}
                    ]}
                ],
                "system": [{"text": "Be brief."}],
                "inferenceConfig": {"maxTokens": 64, "temperature": 1.0, "stopSequences": ["END"]},
                "toolConfig": {
                    "tools": [{"toolSpec": {"name": "get_weather", "description": "Current weather",
                        "inputSchema": {"json": {"type": "object", "properties": {"location": {"type": "string"}}}}}}],
                    "toolChoice": {"tool": {"name": "get_weather"}}
                },
                "additionalModelRequestFields": {"top_k": 40}
            })
        );
    }

    /// Anthropic's breakpoints (`cache_control` on a system block, a message's block and a tool)
    /// become Converse `cachePoint` blocks right after the blocks they were on, TTL kept.
    #[test]
    fn anthropic_cache_breakpoints_become_cache_points_at_the_same_positions() {
        let anthropic = json!({
            "model": "claude",
            "max_tokens": 64,
            "system": [
                {"type": "text", "text": "Long instructions."},
                {"type": "text", "text": "A big document.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}
            ],
            "tools": [
                {"name": "first", "input_schema": {"type": "object"}},
                {"name": "last", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}}
            ],
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "Earlier turn.", "cache_control": {"type": "ephemeral"}},
                    {"type": "text", "text": "New question?"}
                ]}
            ]
        });
        let req = crate::anthropic::decode_request(anthropic.to_string().as_bytes()).unwrap();
        let out: Value = serde_json::from_slice(&encode_request(&req).unwrap()).unwrap();
        assert_eq!(
            out["system"],
            json!([{"text": "Long instructions."}, {"text": "A big document."}, {"cachePoint": {"type": "default", "ttl": "1h"}}])
        );
        assert_eq!(
            out["messages"][0]["content"],
            json!([{"text": "Earlier turn."}, {"cachePoint": {"type": "default"}}, {"text": "New question?"}])
        );
        let tools = &out["toolConfig"]["tools"];
        assert_eq!(
            (tools[0]["toolSpec"]["name"].as_str(), tools[1]["toolSpec"]["name"].as_str()),
            (Some("first"), Some("last"))
        );
        assert_eq!(tools[2], json!({"cachePoint": {"type": "default"}}));
        assert_eq!(tools.as_array().map(Vec::len), Some(3));
        // Back to Anthropic (a translation path), the breakpoints are where the client set them.
        let back: Value = serde_json::from_slice(&crate::anthropic::encode_request(&req).unwrap()).unwrap();
        assert_eq!(back["system"], anthropic["system"]);
        assert_eq!(back["messages"], anthropic["messages"]);
        assert_eq!(back["tools"][1]["cache_control"], json!({"type": "ephemeral"}));
        assert!(back["tools"][0].get("cache_control").is_none());
    }

    #[test]
    fn images_json_results_and_errors_take_their_converse_shapes() {
        let req = ChatRequest {
            messages: vec![
                Message {
                    role: Role::User,
                    content: vec![
                        Part::Image(Image::Base64 { media_type: "image/jpeg".into(), data: "/9j/AAA=".into() }),
                        Part::Text("  ".into()),
                    ],
                },
                Message {
                    role: Role::Assistant,
                    content: vec![Part::ToolCall(ToolCall {
                        id: "t".into(),
                        name: "f".into(),
                        arguments: String::new(),
                    })],
                },
                Message {
                    role: Role::Tool,
                    content: vec![Part::ToolResult(ToolResult {
                        tool_call_id: "t".into(),
                        content: r#"{"ok":false}"#.into(),
                        is_error: true,
                    })],
                },
            ],
            tools: vec![weather_tool()],
            tool_choice: Some(ToolChoice::Required),
            ..ChatRequest::default()
        };
        let v: Value = serde_json::from_slice(&encode_request(&req).unwrap()).unwrap();
        assert_eq!(
            v["messages"][0]["content"],
            json!([{"image": {"format": "jpeg", "source": {"bytes": "/9j/AAA="}}}])
        );
        assert_eq!(v["messages"][1]["content"][0]["toolUse"]["input"], json!({}));
        assert_eq!(
            v["messages"][2]["content"][0],
            json!({"toolResult": {"toolUseId": "t", "content": [{"json": {"ok": false}}], "status": "error"}})
        );
        assert_eq!(v["toolConfig"]["toolChoice"], json!({"any": {}}));
        assert_eq!(v["inferenceConfig"], json!({}));
    }

    #[test]
    fn what_converse_cannot_carry_is_refused() {
        let mut req = ChatRequest::default();
        req.messages
            .push(Message { role: Role::User, content: vec![Part::Image(Image::Url("https://x/y.png".into()))] });
        assert!(matches!(encode_request(&req), Err(TranslateError::Unsupported { .. })));
        req.messages[0].content =
            vec![Part::Image(Image::Base64 { media_type: "image/tiff".into(), data: "x".into() })];
        assert!(matches!(encode_request(&req), Err(TranslateError::Unsupported { .. })));
        let req = ChatRequest { response_format: Some(ResponseFormat::JsonObject), ..ChatRequest::default() };
        assert!(matches!(encode_request(&req), Err(TranslateError::Unsupported { .. })));
        // `tool_choice: none` drops the tools, unless the conversation already used them.
        let mut req =
            ChatRequest { tools: vec![weather_tool()], tool_choice: Some(ToolChoice::None), ..ChatRequest::default() };
        req.messages.push(Message { role: Role::User, content: vec![Part::Text("hi".into())] });
        let v: Value = serde_json::from_slice(&encode_request(&req).unwrap()).unwrap();
        assert!(v.get("toolConfig").is_none());
        req.messages.push(Message {
            role: Role::Assistant,
            content: vec![Part::ToolCall(ToolCall {
                id: "t".into(),
                name: "get_weather".into(),
                arguments: "{}".into(),
            })],
        });
        assert!(matches!(encode_request(&req), Err(TranslateError::Unsupported { .. })));
    }
}
