//! OpenAI Responses requests (`POST /v1/responses`) to and from a `ChatRequest`.

use serde::Serialize;
use serde_json::value::RawValue;

use crate::chat::{
    Api, ChatRequest, Extras, Image, Message, Part, RawJson, ResponseFormat, Role, Tool, ToolCall, ToolChoice,
    ToolResult,
};
use crate::error::TranslateError;
use crate::json::{self, At, Kind, Object};
use crate::wire::{data_url, empty_schema, parse_data_url, ExtraFields};

pub fn decode_request(body: &[u8]) -> Result<ChatRequest, TranslateError> {
    let root = At::Root;
    let obj = json::body(body)?;
    let mut req = ChatRequest { extra: Extras::new(Api::Responses), ..ChatRequest::default() };
    req.model = json::required_string(&obj, "model", &root)?.into_owned();
    let mut safety_identifier = None;
    for (name, raw) in obj.fields() {
        if json::kind(raw) == Kind::Null {
            continue;
        }
        let at = root.key(name);
        match name {
            "model" => {}
            "input" => decode_input(raw, &at, &mut req)?,
            "instructions" => req.system.insert(0, json::string(raw, &at)?.into_owned()),
            "tools" => req.tools = decode_tools(raw, &at)?,
            "tool_choice" => req.tool_choice = Some(decode_tool_choice(raw, &at)?),
            "parallel_tool_calls" => req.parallel_tool_calls = Some(json::bool_field(raw, &at)?),
            "max_output_tokens" => req.max_tokens = Some(json::u64_field(raw, &at)?),
            "temperature" => req.temperature = Some(json::f64_field(raw, &at)?),
            "top_p" => req.top_p = Some(json::f64_field(raw, &at)?),
            "stream" => req.stream = json::bool_field(raw, &at)?,
            "user" => req.user = Some(json::string(raw, &at)?.into_owned()),
            "prompt_cache_key" => req.prompt_cache_key = Some(json::string(raw, &at)?.into_owned()),
            "prompt_cache_retention" => req.prompt_cache_retention = Some(json::string(raw, &at)?.into_owned()),
            "safety_identifier" => safety_identifier = Some(json::string(raw, &at)?.into_owned()),
            "text" => {
                let text = json::object(raw, &at)?;
                if let Some(format) = text.get("format") {
                    req.response_format = decode_format(format, &at.key("format"))?;
                }
                // `verbosity` is a hint.
            }
            "previous_response_id" | "conversation" => {
                return Err(TranslateError::unsupported(format!("conversation state kept by the server (`{name}`)")))
            }
            "prompt" => return Err(TranslateError::unsupported("stored prompts (`prompt`)")),
            "background" => {
                if json::bool_field(raw, &at)? {
                    return Err(TranslateError::unsupported("background responses (`background`)"));
                }
            }
            "max_tool_calls" | "top_logprobs" => return Err(TranslateError::unsupported(format!("`{name}`"))),
            _ => req.extra.keep(name, raw),
        }
    }
    if req.user.is_none() {
        req.user = safety_identifier;
    }
    if obj.get("input").is_none() {
        return Err(TranslateError::invalid("`input` is required"));
    }
    Ok(req)
}

fn decode_input(raw: &RawValue, at: &At<'_>, req: &mut ChatRequest) -> Result<(), TranslateError> {
    if json::kind(raw) == Kind::String {
        let text = json::string(raw, at)?.into_owned();
        req.messages.push(Message { role: Role::User, content: vec![Part::Text(text)] });
        return Ok(());
    }
    for (i, item) in json::array(raw, at)?.into_iter().enumerate() {
        let at = at.index(i);
        let item = json::object(item, &at)?;
        let kind = item.tag();
        match kind.as_ref() {
            "message" | "" => decode_message(&item, &at, req)?,
            "function_call" => {
                let call = Part::ToolCall(ToolCall {
                    id: json::required_string(&item, "call_id", &at)?.into_owned(),
                    name: json::required_string(&item, "name", &at)?.into_owned(),
                    arguments: json::optional_string(&item, "arguments", &at)?.unwrap_or_default(),
                });
                push_part(req, Role::Assistant, call);
            }
            "function_call_output" => {
                let output_at = at.key("output");
                let output = item.require("output", &at)?;
                let content = if json::kind(output) == Kind::String {
                    json::string(output, &output_at)?.into_owned()
                } else {
                    decode_content(output, &output_at, Role::Tool)?
                        .into_iter()
                        .map(|part| match part {
                            Part::Text(text) => Ok(text),
                            _ => Err(TranslateError::unsupported("images in a function_call_output")),
                        })
                        .collect::<Result<String, _>>()?
                };
                let result = ToolResult {
                    tool_call_id: json::required_string(&item, "call_id", &at)?.into_owned(),
                    content,
                    is_error: false,
                };
                req.messages.push(Message { role: Role::Tool, content: vec![Part::ToolResult(result)] });
            }
            // Earlier reasoning only the model that wrote it can use.
            "reasoning" => {}
            other => return Err(TranslateError::unsupported(format!("input items of type `{other}`"))),
        }
    }
    Ok(())
}

/// Appends to the last message when it has the same role (a message and its function calls are
/// one assistant turn), else starts a new one.
fn push_part(req: &mut ChatRequest, role: Role, part: Part) {
    match req.messages.last_mut() {
        Some(last) if last.role == role && role == Role::Assistant => last.content.push(part),
        _ => req.messages.push(Message { role, content: vec![part] }),
    }
}

fn decode_message(item: &Object<'_>, at: &At<'_>, req: &mut ChatRequest) -> Result<(), TranslateError> {
    let role = match json::required_string(item, "role", at)?.as_ref() {
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "system" | "developer" => Role::System,
        other => {
            return Err(TranslateError::invalid(format!(
                "`{}` must be user, assistant, system or developer (got `{other}`)",
                at.key("role")
            )))
        }
    };
    let content_at = at.key("content");
    let content = item.require("content", at)?;
    let parts = if json::kind(content) == Kind::String {
        vec![Part::Text(json::string(content, &content_at)?.into_owned())]
    } else {
        decode_content(content, &content_at, role)?
    };
    if role == Role::System && req.messages.is_empty() {
        req.system.extend(parts.into_iter().filter_map(|part| match part {
            Part::Text(text) => Some(text),
            _ => None,
        }));
        return Ok(());
    }
    if role == Role::Assistant {
        for part in parts {
            push_part(req, role, part);
        }
    } else {
        req.messages.push(Message { role, content: parts });
    }
    Ok(())
}

fn decode_content(raw: &RawValue, at: &At<'_>, role: Role) -> Result<Vec<Part>, TranslateError> {
    let mut parts = Vec::new();
    for (i, item) in json::array(raw, at)?.into_iter().enumerate() {
        let at = at.index(i);
        let part = json::object(item, &at)?;
        match part.tag().as_ref() {
            "input_text" | "output_text" => {
                parts.push(Part::Text(json::required_string(&part, "text", &at)?.into_owned()))
            }
            "refusal" => parts.push(Part::Text(json::required_string(&part, "refusal", &at)?.into_owned())),
            "input_image" if role == Role::User || role == Role::Tool => {
                let Some(url) = json::optional_string(&part, "image_url", &at)? else {
                    return Err(TranslateError::unsupported("images by `file_id`"));
                };
                parts.push(Part::Image(parse_data_url(&url).unwrap_or(Image::Url(url))));
            }
            "input_file" => return Err(TranslateError::unsupported("file input (`input_file`)")),
            "input_audio" => return Err(TranslateError::unsupported("audio input (`input_audio`)")),
            other => return Err(TranslateError::invalid(format!("`{}` cannot be `{other}` here", at.key("type")))),
        }
    }
    Ok(parts)
}

fn decode_tools(raw: &RawValue, at: &At<'_>) -> Result<Vec<Tool>, TranslateError> {
    let mut tools = Vec::new();
    for (i, item) in json::array(raw, at)?.into_iter().enumerate() {
        let at = at.index(i);
        let tool = json::object(item, &at)?;
        let kind = tool.tag();
        if kind != "function" {
            return Err(TranslateError::unsupported(format!("tools of type `{kind}`")));
        }
        tools.push(Tool {
            name: json::required_string(&tool, "name", &at)?.into_owned(),
            description: json::optional_string(&tool, "description", &at)?,
            parameters: RawJson::from_raw(tool.get("parameters").unwrap_or_else(|| empty_schema())),
            strict: json::optional_bool(&tool, "strict", &at)?,
        });
    }
    Ok(tools)
}

fn decode_tool_choice(raw: &RawValue, at: &At<'_>) -> Result<ToolChoice, TranslateError> {
    if json::kind(raw) == Kind::String {
        return match json::string(raw, at)?.as_ref() {
            "auto" => Ok(ToolChoice::Auto),
            "none" => Ok(ToolChoice::None),
            "required" => Ok(ToolChoice::Required),
            other => Err(TranslateError::invalid(format!("`{at}` must be auto, none or required (got `{other}`)"))),
        };
    }
    let choice = json::object(raw, at)?;
    match choice.tag().as_ref() {
        "function" => Ok(ToolChoice::Tool(json::required_string(&choice, "name", at)?.into_owned())),
        other => Err(TranslateError::unsupported(format!("`tool_choice` of type `{other}`"))),
    }
}

fn decode_format(raw: &RawValue, at: &At<'_>) -> Result<Option<ResponseFormat>, TranslateError> {
    let format = json::object(raw, at)?;
    match format.tag().as_ref() {
        "text" => Ok(None),
        "json_object" => Ok(Some(ResponseFormat::JsonObject)),
        "json_schema" => Ok(Some(ResponseFormat::JsonSchema {
            name: json::optional_string(&format, "name", at)?,
            schema: RawJson::from_raw(format.require("schema", at)?),
            strict: json::optional_bool(&format, "strict", at)?,
        })),
        other => Err(TranslateError::invalid(format!(
            "`{}` must be text, json_object or json_schema (got `{other}`)",
            at.key("type")
        ))),
    }
}

#[derive(Serialize)]
struct WireRequest<'a> {
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    instructions: Option<String>,
    input: Vec<WireItem<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parallel_tool_calls: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_output_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_cache_key: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_cache_retention: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<WireText<'a>>,
    #[serde(flatten)]
    extra: ExtraFields<'a>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireItem<'a> {
    Message { role: &'static str, content: Vec<WirePart<'a>> },
    FunctionCall { call_id: &'a str, name: &'a str, arguments: &'a str },
    FunctionCallOutput { call_id: &'a str, output: &'a str },
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WirePart<'a> {
    InputText { text: &'a str },
    OutputText { text: &'a str, annotations: [(); 0] },
    InputImage { image_url: String, detail: &'static str },
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    parameters: &'a RawJson,
    /// Written always: the Responses API defaults to strict, other APIs to not.
    strict: bool,
}

#[derive(Serialize)]
struct WireText<'a> {
    format: WireFormat<'a>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireFormat<'a> {
    JsonObject,
    JsonSchema {
        name: &'a str,
        schema: &'a RawJson,
        #[serde(skip_serializing_if = "Option::is_none")]
        strict: Option<bool>,
    },
}

pub fn encode_request(req: &ChatRequest) -> Result<Vec<u8>, TranslateError> {
    let mut input = Vec::with_capacity(req.messages.len());
    for message in &req.messages {
        encode_message(message, &mut input)?;
    }
    let wire = WireRequest {
        model: &req.model,
        instructions: (!req.system.is_empty()).then(|| req.system.join("\n\n")),
        input,
        tools: req
            .tools
            .iter()
            .map(|tool| WireTool {
                kind: "function",
                name: &tool.name,
                description: tool.description.as_deref(),
                parameters: &tool.parameters,
                strict: tool.strict.unwrap_or(false),
            })
            .collect(),
        tool_choice: req.tool_choice.as_ref().map(|choice| match choice {
            ToolChoice::Auto => "auto".into(),
            ToolChoice::None => "none".into(),
            ToolChoice::Required => "required".into(),
            ToolChoice::Tool(name) => serde_json::json!({"type": "function", "name": name}),
        }),
        parallel_tool_calls: req.parallel_tool_calls,
        max_output_tokens: req.max_tokens,
        temperature: req.temperature,
        top_p: req.top_p,
        stream: req.stream,
        user: req.user.as_deref(),
        prompt_cache_key: req.prompt_cache_key.as_deref(),
        prompt_cache_retention: req.prompt_cache_retention.as_deref(),
        text: req.response_format.as_ref().map(|format| WireText {
            format: match format {
                ResponseFormat::JsonObject => WireFormat::JsonObject,
                ResponseFormat::JsonSchema { name, schema, strict } => {
                    WireFormat::JsonSchema { name: name.as_deref().unwrap_or("response"), schema, strict: *strict }
                }
            },
        }),
        extra: ExtraFields::all(req.extra.for_api(Api::Responses)),
    };
    if !req.stop.is_empty() {
        return Err(TranslateError::unsupported_by("stop sequences", super::API));
    }
    json::to_vec(&wire)
}

fn encode_message<'a>(message: &'a Message, out: &mut Vec<WireItem<'a>>) -> Result<(), TranslateError> {
    let role = match message.role {
        Role::System => "system",
        Role::User | Role::Tool => "user",
        Role::Assistant => "assistant",
    };
    let mut parts = Vec::new();
    let flush = |parts: &mut Vec<WirePart<'a>>, out: &mut Vec<WireItem<'a>>| {
        if !parts.is_empty() {
            out.push(WireItem::Message { role, content: std::mem::take(parts) });
        }
    };
    for part in &message.content {
        match part {
            Part::Text(text) if message.role == Role::Assistant => {
                parts.push(WirePart::OutputText { text, annotations: [] })
            }
            Part::Text(text) => parts.push(WirePart::InputText { text }),
            Part::Image(image) => {
                let image_url = match image {
                    Image::Url(url) => url.clone(),
                    Image::Base64 { media_type, data } => data_url(media_type, data),
                };
                parts.push(WirePart::InputImage { image_url, detail: "auto" });
            }
            Part::ToolCall(call) => {
                flush(&mut parts, out);
                let arguments = if call.arguments.trim().is_empty() { "{}" } else { call.arguments.as_str() };
                out.push(WireItem::FunctionCall { call_id: &call.id, name: &call.name, arguments });
            }
            Part::ToolResult(result) => {
                flush(&mut parts, out);
                out.push(WireItem::FunctionCallOutput { call_id: &result.tool_call_id, output: &result.content });
            }
        }
    }
    flush(&mut parts, out);
    Ok(())
}
