//! A `ChatRequest` as a Gemini `GenerateContentRequest`: the system prompt as
//! `systemInstruction`, turns as `contents` with `user` and `model` roles, tool calls and their
//! results as `functionCall` and `functionResponse` parts, tools as `functionDeclarations` with
//! their JSON Schema (`parametersJsonSchema`), and sampling in `generationConfig`.

use serde::Serialize;
use serde_json::value::RawValue;

use super::API;
use crate::chat::{ChatRequest, Image, Part, ResponseFormat, Role, ToolChoice};
use crate::error::TranslateError;
use crate::json::{self, Kind};
use crate::wire::{arguments_object, empty_schema};

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireRequest<'a> {
    contents: Vec<WireContent<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    system_instruction: Option<WireSystem<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_config: Option<WireToolConfig<'a>>,
    generation_config: WireGenerationConfig<'a>,
}

#[derive(Serialize)]
struct WireSystem<'a> {
    parts: Vec<WirePart<'a>>,
}

#[derive(Serialize)]
struct WireContent<'a> {
    role: &'static str,
    parts: Vec<WirePart<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
enum WirePart<'a> {
    #[serde(rename = "text")]
    Text(&'a str),
    InlineData(WireBlob<'a>),
    FunctionCall(WireFunctionCall<'a>),
    FunctionResponse(WireFunctionResponse<'a>),
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireBlob<'a> {
    mime_type: &'a str,
    data: &'a str,
}

#[derive(Serialize)]
struct WireFunctionCall<'a> {
    id: &'a str,
    name: &'a str,
    args: &'a RawValue,
}

#[derive(Serialize)]
struct WireFunctionResponse<'a> {
    id: &'a str,
    name: &'a str,
    response: Box<RawValue>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireTool<'a> {
    function_declarations: Vec<WireFunctionDeclaration<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireFunctionDeclaration<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    parameters_json_schema: &'a RawValue,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireToolConfig<'a> {
    function_calling_config: WireFunctionCallingConfig<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireFunctionCallingConfig<'a> {
    mode: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    allowed_function_names: Vec<&'a str>,
}

#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct WireGenerationConfig<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    max_output_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_k: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    presence_penalty: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    frequency_penalty: Option<f64>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop_sequences: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    response_mime_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_json_schema: Option<&'a RawValue>,
}

/// `response` of a `functionResponse` must be an object: a result that is one goes as it is,
/// other text as `{"result": ...}` (or `{"error": ...}` for a failed call).
fn function_response(content: &str, is_error: bool) -> Result<Box<RawValue>, TranslateError> {
    if !is_error {
        if let Ok(raw) = serde_json::from_str::<&RawValue>(content.trim()) {
            if json::kind(raw) == Kind::Object {
                return Ok(raw.to_owned());
            }
        }
    }
    let key = if is_error { "error" } else { "result" };
    let text = serde_json::to_string(&serde_json::json!({ key: content }))
        .map_err(|e| TranslateError::invalid(format!("a tool result could not be encoded: {e}")))?;
    RawValue::from_string(text).map_err(|e| TranslateError::invalid(format!("a tool result could not be encoded: {e}")))
}

pub fn encode_request(req: &ChatRequest) -> Result<Vec<u8>, TranslateError> {
    let mut system: Vec<WirePart<'_>> = req.system.iter().map(|s| WirePart::Text(s)).collect();
    let contents = encode_contents(req, &mut system)?;
    let wire = WireRequest {
        contents,
        system_instruction: (!system.is_empty()).then_some(WireSystem { parts: system }),
        tools: encode_tools(req),
        tool_config: req.tool_choice.as_ref().map(encode_tool_choice),
        generation_config: encode_generation_config(req),
    };
    serde_json::to_vec(&wire).map_err(|e| TranslateError::invalid(format!("the request could not be encoded: {e}")))
}

/// The conversation as `contents`. System messages join `system` (Gemini has no system turn).
fn encode_contents<'a>(
    req: &'a ChatRequest,
    system: &mut Vec<WirePart<'a>>,
) -> Result<Vec<WireContent<'a>>, TranslateError> {
    let mut contents: Vec<WireContent<'_>> = Vec::with_capacity(req.messages.len());
    for message in &req.messages {
        if message.role == Role::System {
            system.extend(message.content.iter().filter_map(|p| match p {
                Part::Text(text) => Some(WirePart::Text(text)),
                _ => None,
            }));
            continue;
        }
        let role = if message.role == Role::Assistant { "model" } else { "user" };
        let mut parts = Vec::with_capacity(message.content.len());
        for part in &message.content {
            if let Some(part) = encode_part(req, part)? {
                parts.push(part);
            }
        }
        if parts.is_empty() {
            continue;
        }
        // Consecutive turns of one role (tool results, then the user's text) make one turn.
        match contents.last_mut() {
            Some(last) if last.role == role => last.parts.extend(parts),
            _ => contents.push(WireContent { role, parts }),
        }
    }
    Ok(contents)
}

/// One part of a turn; `None` for empty text, which Gemini refuses.
fn encode_part<'a>(req: &'a ChatRequest, part: &'a Part) -> Result<Option<WirePart<'a>>, TranslateError> {
    Ok(Some(match part {
        Part::Text(text) if text.is_empty() => return Ok(None),
        Part::Text(text) => WirePart::Text(text),
        Part::Image(Image::Base64 { media_type, data }) => {
            WirePart::InlineData(WireBlob { mime_type: media_type, data })
        }
        Part::Image(Image::Url(_)) => {
            return Err(TranslateError::unsupported_by("images by URL (send them inline, as base64)", API))
        }
        Part::ToolCall(call) => {
            WirePart::FunctionCall(WireFunctionCall { id: &call.id, name: &call.name, args: arguments_object(call)? })
        }
        Part::ToolResult(result) => {
            let name = tool_name_of(req, &result.tool_call_id).ok_or_else(|| {
                TranslateError::invalid(format!(
                    "the result of tool call `{}` answers no tool call in the conversation",
                    result.tool_call_id
                ))
            })?;
            let response = function_response(&result.content, result.is_error)?;
            WirePart::FunctionResponse(WireFunctionResponse { id: &result.tool_call_id, name, response })
        }
    }))
}

/// A tool result names its function; the call it answers says which.
fn tool_name_of<'a>(req: &'a ChatRequest, id: &str) -> Option<&'a str> {
    req.messages.iter().flat_map(|m| &m.content).find_map(|p| match p {
        Part::ToolCall(call) if call.id == id => Some(call.name.as_str()),
        _ => None,
    })
}

/// All tools as one `functionDeclarations` tool; none when the request has no tools.
fn encode_tools(req: &ChatRequest) -> Vec<WireTool<'_>> {
    if req.tools.is_empty() {
        return Vec::new();
    }
    let function_declarations = req
        .tools
        .iter()
        .map(|t| WireFunctionDeclaration {
            name: &t.name,
            description: t.description.as_deref(),
            parameters_json_schema: if t.parameters.as_str().trim() == "null" {
                empty_schema()
            } else {
                t.parameters.as_raw()
            },
        })
        .collect();
    vec![WireTool { function_declarations }]
}

fn encode_tool_choice(choice: &ToolChoice) -> WireToolConfig<'_> {
    let (mode, allowed) = match choice {
        ToolChoice::Auto => ("AUTO", Vec::new()),
        ToolChoice::None => ("NONE", Vec::new()),
        ToolChoice::Required => ("ANY", Vec::new()),
        ToolChoice::Tool(name) => ("ANY", vec![name.as_str()]),
    };
    WireToolConfig { function_calling_config: WireFunctionCallingConfig { mode, allowed_function_names: allowed } }
}

fn encode_generation_config(req: &ChatRequest) -> WireGenerationConfig<'_> {
    let (response_mime_type, response_json_schema) = match &req.response_format {
        None => (None, None),
        Some(ResponseFormat::JsonObject) => (Some("application/json"), None),
        Some(ResponseFormat::JsonSchema { schema, .. }) => (Some("application/json"), Some(schema.as_raw())),
    };
    WireGenerationConfig {
        max_output_tokens: req.max_tokens,
        temperature: req.temperature,
        top_p: req.top_p,
        top_k: req.top_k,
        seed: req.seed,
        presence_penalty: req.presence_penalty,
        frequency_penalty: req.frequency_penalty,
        stop_sequences: &req.stop,
        response_mime_type,
        response_json_schema,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::{Message, RawJson, Tool, ToolCall, ToolResult};
    use serde_json::{json, Value};

    #[test]
    fn a_conversation_with_a_tool_round_trip_encodes_as_the_reference_shows() {
        let req = ChatRequest {
            model: "gemini-2.5-flash".into(),
            system: vec!["Be brief.".into()],
            messages: vec![
                Message { role: Role::User, content: vec![Part::Text("Weather in Paris?".into())] },
                Message {
                    role: Role::Assistant,
                    content: vec![Part::ToolCall(ToolCall {
                        id: "call_1".into(),
                        name: "get_weather".into(),
                        arguments: r#"{"location":"Paris"}"#.into(),
                    })],
                },
                Message {
                    role: Role::Tool,
                    content: vec![Part::ToolResult(ToolResult {
                        tool_call_id: "call_1".into(),
                        content: "18C and sunny".into(),
                        is_error: false,
                    })],
                },
            ],
            tools: vec![Tool {
                name: "get_weather".into(),
                description: Some("Current weather".into()),
                parameters: RawJson::parse(r#"{"type":"object","properties":{"location":{"type":"string"}}}"#.into())
                    .unwrap(),
                strict: None,
            }],
            tool_choice: Some(ToolChoice::Tool("get_weather".into())),
            max_tokens: Some(64),
            temperature: Some(0.2),
            stop: vec!["END".into()],
            ..ChatRequest::default()
        };
        let v: Value = serde_json::from_slice(&encode_request(&req).unwrap()).unwrap();
        assert_eq!(
            v,
            json!({
                "contents": [
                    {"role": "user", "parts": [{"text": "Weather in Paris?"}]},
                    {"role": "model", "parts": [{"functionCall": {"id": "call_1", "name": "get_weather", "args": {"location": "Paris"}}}]},
                    {"role": "user", "parts": [{"functionResponse": {"id": "call_1", "name": "get_weather", "response": {"result": "18C and sunny"}}}]}
                ],
                "systemInstruction": {"parts": [{"text": "Be brief."}]},
                "tools": [{"functionDeclarations": [{"name": "get_weather", "description": "Current weather",
                    "parametersJsonSchema": {"type": "object", "properties": {"location": {"type": "string"}}}}]}],
                "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}},
                "generationConfig": {"maxOutputTokens": 64, "temperature": 0.2, "stopSequences": ["END"]}
            })
        );
    }

    #[test]
    fn image_urls_are_refused_and_orphan_results_are_invalid() {
        let mut req = ChatRequest::default();
        req.messages
            .push(Message { role: Role::User, content: vec![Part::Image(Image::Url("https://x/y.png".into()))] });
        assert!(encode_request(&req).is_err());
        req.messages[0].content =
            vec![Part::ToolResult(ToolResult { tool_call_id: "nope".into(), content: "x".into(), is_error: false })];
        assert!(encode_request(&req).is_err());
    }
}
