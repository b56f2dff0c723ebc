//! OpenAI Chat Completions requests (`POST /v1/chat/completions`) into a `ChatRequest`.

use serde_json::value::RawValue;

use crate::chat::{
    Api, ChatRequest, Extras, Image, Message, Part, RawJson, ResponseFormat, Role, Tool, ToolCall, ToolChoice,
    ToolResult,
};
use crate::error::TranslateError;
use crate::json::{self, At, Kind, Object};
use crate::wire::{empty_schema, parse_data_url};

pub fn decode_request(body: &[u8]) -> Result<ChatRequest, TranslateError> {
    let root = At::Root;
    let obj = json::body(body)?;
    let mut req = ChatRequest { extra: Extras::new(Api::OpenAiChat), ..ChatRequest::default() };
    req.model = json::required_string(&obj, "model", &root)?.into_owned();
    decode_messages(obj.require("messages", &root)?, &root.key("messages"), &mut req)?;
    let mut max_tokens = None;
    let mut max_completion_tokens = None;
    for (name, raw) in obj.fields() {
        if json::kind(raw) == Kind::Null {
            continue;
        }
        let at = root.key(name);
        match name {
            "model" | "messages" => {}
            "tools" => req.tools = decode_tools(raw, &at)?,
            "tool_choice" => req.tool_choice = Some(decode_tool_choice(raw, &at)?),
            "parallel_tool_calls" => req.parallel_tool_calls = Some(json::bool_field(raw, &at)?),
            "response_format" => req.response_format = decode_response_format(raw, &at)?,
            "max_tokens" => max_tokens = Some(json::u64_field(raw, &at)?),
            "max_completion_tokens" => max_completion_tokens = Some(json::u64_field(raw, &at)?),
            "temperature" => req.temperature = Some(json::f64_field(raw, &at)?),
            "top_p" => req.top_p = Some(json::f64_field(raw, &at)?),
            // Not OpenAI's, but vLLM, llama.cpp and SGLang take it.
            "top_k" => req.top_k = Some(json::u64_field(raw, &at)?),
            "seed" => req.seed = Some(json::i64_field(raw, &at)?),
            "frequency_penalty" => req.frequency_penalty = Some(json::f64_field(raw, &at)?),
            "presence_penalty" => req.presence_penalty = Some(json::f64_field(raw, &at)?),
            "stop" => req.stop = json::string_or_strings(raw, &at)?,
            "stream" => req.stream = json::bool_field(raw, &at)?,
            "stream_options" => {
                let options = json::object(raw, &at)?;
                req.include_usage = json::optional_bool(&options, "include_usage", &at)?.unwrap_or(false);
            }
            "user" => req.user = Some(json::string(raw, &at)?.into_owned()),
            "prompt_cache_key" => req.prompt_cache_key = Some(json::string(raw, &at)?.into_owned()),
            "prompt_cache_retention" => req.prompt_cache_retention = Some(json::string(raw, &at)?.into_owned()),
            "n" => {
                if json::u64_field(raw, &at)? > 1 {
                    return Err(TranslateError::unsupported("`n` greater than 1 (several choices per request)"));
                }
            }
            "logprobs" => {
                if json::bool_field(raw, &at)? {
                    return Err(TranslateError::unsupported("`logprobs`"));
                }
            }
            "top_logprobs" => return Err(TranslateError::unsupported("`top_logprobs`")),
            "audio" => return Err(TranslateError::unsupported("audio output (`audio`)")),
            "modalities" => {
                if raw.get().contains("\"audio\"") {
                    return Err(TranslateError::unsupported("audio output (`modalities`)"));
                }
            }
            "functions" | "function_call" => {
                return Err(TranslateError::unsupported(format!("the legacy `{name}` field (use `tools`)")))
            }
            "web_search_options" => return Err(TranslateError::unsupported("web search (`web_search_options`)")),
            _ => req.extra.keep(name, raw),
        }
    }
    req.max_tokens = max_completion_tokens.or(max_tokens);
    Ok(req)
}

fn decode_messages(raw: &RawValue, at: &At<'_>, req: &mut ChatRequest) -> Result<(), TranslateError> {
    for (i, item) in json::array(raw, at)?.into_iter().enumerate() {
        let at = at.index(i);
        let message = json::object(item, &at)?;
        let role = json::required_string(&message, "role", &at)?;
        match role.as_ref() {
            "system" | "developer" => {
                let texts = decode_texts(message.require("content", &at)?, &at.key("content"))?;
                if req.messages.is_empty() {
                    req.system.extend(texts);
                } else {
                    req.messages
                        .push(Message { role: Role::System, content: texts.into_iter().map(Part::Text).collect() });
                }
            }
            "user" => {
                let content = decode_user_content(message.require("content", &at)?, &at.key("content"))?;
                req.messages.push(Message { role: Role::User, content });
            }
            "assistant" => req.messages.push(decode_assistant(&message, &at)?),
            "tool" => {
                let tool_call_id = json::required_string(&message, "tool_call_id", &at)?.into_owned();
                let content = match message.get("content") {
                    Some(raw) => decode_texts(raw, &at.key("content"))?.concat(),
                    None => String::new(),
                };
                let result = ToolResult { tool_call_id, content, is_error: false };
                req.messages.push(Message { role: Role::Tool, content: vec![Part::ToolResult(result)] });
            }
            "function" => return Err(TranslateError::unsupported("legacy `function` messages (use `tool`)")),
            other => {
                return Err(TranslateError::invalid(format!(
                    "`{}` must be one of system, developer, user, assistant, tool (got `{other}`)",
                    at.key("role")
                )))
            }
        }
    }
    Ok(())
}

/// Content that may only hold text: a string, or an array of text (or refusal) parts.
fn decode_texts(raw: &RawValue, at: &At<'_>) -> Result<Vec<String>, TranslateError> {
    if json::kind(raw) == Kind::String {
        return Ok(vec![json::string(raw, at)?.into_owned()]);
    }
    let mut texts = Vec::new();
    for (i, item) in json::array(raw, at)?.into_iter().enumerate() {
        let at = at.index(i);
        let part = json::object(item, &at)?;
        match part.tag().as_ref() {
            "text" => texts.push(json::required_string(&part, "text", &at)?.into_owned()),
            "refusal" => texts.push(json::required_string(&part, "refusal", &at)?.into_owned()),
            other => {
                return Err(TranslateError::invalid(format!(
                    "`{}` must be `text` here (got `{other}`)",
                    at.key("type")
                )))
            }
        }
    }
    Ok(texts)
}

fn decode_user_content(raw: &RawValue, at: &At<'_>) -> Result<Vec<Part>, TranslateError> {
    if json::kind(raw) == Kind::String {
        return Ok(vec![Part::Text(json::string(raw, at)?.into_owned())]);
    }
    let mut parts = Vec::new();
    for (i, item) in json::array(raw, at)?.into_iter().enumerate() {
        let at = at.index(i);
        let part = json::object(item, &at)?;
        match part.tag().as_ref() {
            "text" => parts.push(Part::Text(json::required_string(&part, "text", &at)?.into_owned())),
            "image_url" => {
                let image_at = at.key("image_url");
                let image = part.require("image_url", &at)?;
                let url = if json::kind(image) == Kind::String {
                    json::string(image, &image_at)?
                } else {
                    json::required_string(&json::object(image, &image_at)?, "url", &image_at)?
                };
                parts.push(Part::Image(parse_data_url(&url).unwrap_or_else(|| Image::Url(url.into_owned()))));
            }
            "input_audio" => return Err(TranslateError::unsupported("audio input (`input_audio` content)")),
            "file" => return Err(TranslateError::unsupported("file input (`file` content)")),
            other => {
                return Err(TranslateError::invalid(format!(
                    "`{}` must be `text` or `image_url` (got `{other}`)",
                    at.key("type")
                )))
            }
        }
    }
    Ok(parts)
}

fn decode_assistant(message: &Object<'_>, at: &At<'_>) -> Result<Message, TranslateError> {
    let mut content = Vec::new();
    if let Some(raw) = message.get("content") {
        content.extend(decode_texts(raw, &at.key("content"))?.into_iter().filter(|t| !t.is_empty()).map(Part::Text));
    }
    if message.get("function_call").is_some() {
        return Err(TranslateError::unsupported("the legacy `function_call` field (use `tool_calls`)"));
    }
    if let Some(raw) = message.get("tool_calls") {
        let calls_at = at.key("tool_calls");
        for (i, item) in json::array(raw, &calls_at)?.into_iter().enumerate() {
            let at = calls_at.index(i);
            let call = json::object(item, &at)?;
            let function_at = at.key("function");
            let function = json::object(call.require("function", &at)?, &function_at)?;
            content.push(Part::ToolCall(ToolCall {
                id: json::required_string(&call, "id", &at)?.into_owned(),
                name: json::required_string(&function, "name", &function_at)?.into_owned(),
                arguments: json::optional_string(&function, "arguments", &function_at)?.unwrap_or_default(),
            }));
        }
    }
    Ok(Message { role: Role::Assistant, content })
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
        let function_at = at.key("function");
        let function = json::object(tool.require("function", &at)?, &function_at)?;
        tools.push(Tool {
            name: json::required_string(&function, "name", &function_at)?.into_owned(),
            description: json::optional_string(&function, "description", &function_at)?,
            parameters: RawJson::from_raw(function.get("parameters").unwrap_or_else(|| empty_schema())),
            strict: json::optional_bool(&function, "strict", &function_at)?,
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
        "function" => {
            let function_at = at.key("function");
            let function = json::object(choice.require("function", at)?, &function_at)?;
            Ok(ToolChoice::Tool(json::required_string(&function, "name", &function_at)?.into_owned()))
        }
        other => Err(TranslateError::unsupported(format!("`tool_choice` of type `{other}`"))),
    }
}

fn decode_response_format(raw: &RawValue, at: &At<'_>) -> Result<Option<ResponseFormat>, TranslateError> {
    let format = json::object(raw, at)?;
    match format.tag().as_ref() {
        "text" => Ok(None),
        "json_object" => Ok(Some(ResponseFormat::JsonObject)),
        "json_schema" => {
            let schema_at = at.key("json_schema");
            let spec = json::object(format.require("json_schema", at)?, &schema_at)?;
            Ok(Some(ResponseFormat::JsonSchema {
                name: json::optional_string(&spec, "name", &schema_at)?,
                schema: RawJson::from_raw(spec.require("schema", &schema_at)?),
                strict: json::optional_bool(&spec, "strict", &schema_at)?,
            }))
        }
        other => Err(TranslateError::invalid(format!(
            "`{}` must be text, json_object or json_schema (got `{other}`)",
            at.key("type")
        ))),
    }
}
