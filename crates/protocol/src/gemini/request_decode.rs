//! A Gemini `GenerateContentRequest` (from a Gemini client such as `google-genai`) as a
//! `ChatRequest`. Field names are accepted in both spellings the API takes (`systemInstruction`
//! and `system_instruction`). Schemas in Gemini's OpenAPI subset (`"type": "OBJECT"`) are written
//! as JSON Schema (`"object"`). What the internal model cannot carry — several candidates, Google
//! Search or code execution tools, file references other than URLs — is refused by name.

use serde_json::{Map, Value};

use crate::chat::{
    Api, ChatRequest, Extras, Image, Message, Part, RawJson, ResponseFormat, Role, Tool, ToolCall, ToolChoice,
    ToolResult,
};
use crate::error::TranslateError;

fn field<'a>(obj: &'a Map<String, Value>, camel: &str, snake: &str) -> Option<&'a Value> {
    obj.get(camel).or_else(|| obj.get(snake)).filter(|v| !v.is_null())
}

fn invalid(message: String) -> TranslateError {
    TranslateError::invalid(message)
}

fn raw(value: &Value) -> Result<RawJson, TranslateError> {
    RawJson::parse(value.to_string()).map_err(|e| invalid(format!("a value could not be kept: {e}")))
}

/// Gemini's OpenAPI `Type` values are upper case; JSON Schema's are lower case.
fn json_schema(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| match (k.as_str(), v) {
                    ("type", Value::String(t)) => (k.clone(), Value::String(t.to_ascii_lowercase())),
                    _ => (k.clone(), json_schema(v)),
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(json_schema).collect()),
        other => other.clone(),
    }
}

fn text_parts(content: &Value, at: &str) -> Result<Vec<String>, TranslateError> {
    let parts = content
        .get("parts")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid(format!("`{at}.parts` must be an array")))?;
    Ok(parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str).map(str::to_owned)).collect())
}

pub fn decode_request(body: &[u8]) -> Result<ChatRequest, TranslateError> {
    let root: Value =
        serde_json::from_slice(body).map_err(|e| invalid(format!("the request body is not valid JSON: {e}")))?;
    let obj = root.as_object().ok_or_else(|| invalid("the request body must be a JSON object".to_owned()))?;
    let mut req = ChatRequest { extra: Extras::new(Api::Gemini), ..ChatRequest::default() };
    if let Some(system) = field(obj, "systemInstruction", "system_instruction") {
        req.system = text_parts(system, "systemInstruction")?;
    }
    let contents = field(obj, "contents", "contents")
        .and_then(Value::as_array)
        .filter(|c| !c.is_empty())
        .ok_or_else(|| invalid("`contents` must be a non-empty array".to_owned()))?;
    req.messages = decode_contents(contents)?;
    if let Some(tools) = field(obj, "tools", "tools").and_then(Value::as_array) {
        req.tools = decode_tools(tools)?;
    }
    if let Some(config) = field(obj, "toolConfig", "tool_config")
        .and_then(|c| c.get("functionCallingConfig").or_else(|| c.get("function_calling_config")))
    {
        req.tool_choice = Some(decode_tool_choice(config)?);
    }
    if let Some(config) = field(obj, "generationConfig", "generation_config").and_then(Value::as_object) {
        apply_generation_config(config, &mut req)?;
    }
    Ok(req)
}

/// The function calls met so far in `contents`, as (id, name, answered). Calls without ids get
/// one; a response without one answers the earliest unanswered call of its name.
type Calls = Vec<(String, String, bool)>;

/// `contents` as messages: a content's function responses become a tool message of their own,
/// before the message holding the rest of its parts.
fn decode_contents(contents: &[Value]) -> Result<Vec<Message>, TranslateError> {
    let mut messages = Vec::new();
    let mut calls = Calls::new();
    for (i, content) in contents.iter().enumerate() {
        let at = format!("contents[{i}]");
        let role = match content.get("role").and_then(Value::as_str) {
            None | Some("user") => Role::User,
            Some("model") => Role::Assistant,
            Some(other) => return Err(invalid(format!("`{at}.role` must be user or model (got `{other}`)"))),
        };
        let parts = content
            .get("parts")
            .and_then(Value::as_array)
            .ok_or_else(|| invalid(format!("`{at}.parts` must be an array")))?;
        let (mut said, mut results) = (Vec::new(), Vec::new());
        for (j, part) in parts.iter().enumerate() {
            let at = format!("{at}.parts[{j}]");
            let part = part.as_object().ok_or_else(|| invalid(format!("`{at}` must be an object")))?;
            match decode_part(part, &at, &mut calls)? {
                Some(result @ Part::ToolResult(_)) => results.push(result),
                Some(part) => said.push(part),
                None => {}
            }
        }
        if !results.is_empty() {
            messages.push(Message { role: Role::Tool, content: results });
        }
        if !said.is_empty() {
            messages.push(Message { role, content: said });
        }
    }
    Ok(messages)
}

/// One part of a content; `None` for a thought or a part the internal model has no use for.
fn decode_part(part: &Map<String, Value>, at: &str, calls: &mut Calls) -> Result<Option<Part>, TranslateError> {
    if part.get("thought").and_then(Value::as_bool) == Some(true) {
        return Ok(None);
    }
    let decoded = if let Some(text) = part.get("text") {
        Part::Text(text.as_str().ok_or_else(|| invalid(format!("`{at}.text` must be a string")))?.to_owned())
    } else if let Some(blob) = field(part, "inlineData", "inline_data") {
        decode_inline_data(blob, at)?
    } else if let Some(file) = field(part, "fileData", "file_data") {
        let uri = file.get("fileUri").or_else(|| file.get("file_uri")).and_then(Value::as_str);
        Part::Image(Image::Url(uri.ok_or_else(|| invalid(format!("`{at}.fileData` needs fileUri")))?.to_owned()))
    } else if let Some(call) = field(part, "functionCall", "function_call") {
        decode_function_call(call, at, calls)?
    } else if let Some(response) = field(part, "functionResponse", "function_response") {
        decode_function_response(response, at, calls)?
    } else if part.contains_key("executableCode") || part.contains_key("codeExecutionResult") {
        return Err(TranslateError::unsupported("code execution parts"));
    } else {
        return Ok(None);
    };
    Ok(Some(decoded))
}

/// `inlineData`: only images can be carried.
fn decode_inline_data(blob: &Value, at: &str) -> Result<Part, TranslateError> {
    let mime = blob.get("mimeType").or_else(|| blob.get("mime_type")).and_then(Value::as_str);
    let data = blob.get("data").and_then(Value::as_str);
    let (Some(media_type), Some(data)) = (mime, data) else {
        return Err(invalid(format!("`{at}.inlineData` needs mimeType and data")));
    };
    if !media_type.starts_with("image/") {
        return Err(TranslateError::unsupported(format!("inline data of type {media_type} (only images)")));
    }
    Ok(Part::Image(Image::Base64 { media_type: media_type.to_owned(), data: data.to_owned() }))
}

/// `functionCall`, recorded in `calls` so that a later response can find its id.
fn decode_function_call(call: &Value, at: &str, calls: &mut Calls) -> Result<Part, TranslateError> {
    let name = call
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(format!("`{at}.functionCall.name` is required")))?;
    let id = call.get("id").and_then(Value::as_str).map_or_else(|| format!("call_{}", calls.len()), str::to_owned);
    let arguments = call.get("args").map_or_else(|| "{}".to_owned(), Value::to_string);
    calls.push((id.clone(), name.to_owned(), false));
    Ok(Part::ToolCall(ToolCall { id, name: name.to_owned(), arguments }))
}

/// `functionResponse`, matched to the call it answers (by id when it has one, else by name).
fn decode_function_response(response: &Value, at: &str, calls: &mut Calls) -> Result<Part, TranslateError> {
    let name = response
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(format!("`{at}.functionResponse.name` is required")))?;
    let given = response.get("id").and_then(Value::as_str);
    let matched = calls.iter_mut().find(|(id, n, answered)| !answered && given.map_or(n == name, |g| g == id));
    let tool_call_id = match matched {
        Some(call) => {
            call.2 = true;
            call.0.clone()
        }
        None => given.map_or_else(|| format!("call_{name}"), str::to_owned),
    };
    let body = response.get("response").cloned().unwrap_or(Value::Null);
    let is_error = body.get("error").is_some() && body.as_object().is_some_and(|m| m.len() == 1);
    let content = match body.get("result").or_else(|| body.get("output")).or_else(|| body.get("error")) {
        Some(Value::String(s)) if body.as_object().is_some_and(|m| m.len() == 1) => s.clone(),
        _ => body.to_string(),
    };
    Ok(Part::ToolResult(ToolResult { tool_call_id, content, is_error }))
}

/// `tools`: function declarations only; Google Search and code execution are refused.
fn decode_tools(tools: &[Value]) -> Result<Vec<Tool>, TranslateError> {
    let mut decoded = Vec::new();
    for tool in tools {
        let declarations = tool.get("functionDeclarations").or_else(|| tool.get("function_declarations"));
        let Some(declarations) = declarations.and_then(Value::as_array) else {
            return Err(TranslateError::unsupported(
                "tools other than function declarations (Google Search, code execution)",
            ));
        };
        for d in declarations {
            let name = d
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| invalid("a function declaration needs a name".to_owned()))?;
            let schema = d.get("parametersJsonSchema").or_else(|| d.get("parameters_json_schema")).cloned();
            let schema = match schema.or_else(|| d.get("parameters").map(json_schema)) {
                Some(schema) => schema,
                None => serde_json::json!({"type": "object", "properties": {}}),
            };
            decoded.push(Tool {
                name: name.to_owned(),
                description: d.get("description").and_then(Value::as_str).map(str::to_owned),
                parameters: raw(&schema)?,
                strict: None,
            });
        }
    }
    Ok(decoded)
}

/// `toolConfig.functionCallingConfig`: ANY with one allowed function names that function.
fn decode_tool_choice(config: &Value) -> Result<ToolChoice, TranslateError> {
    let allowed: Vec<&str> = config
        .get("allowedFunctionNames")
        .or_else(|| config.get("allowed_function_names"))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    match config.get("mode").and_then(Value::as_str) {
        Some("NONE") => Ok(ToolChoice::None),
        Some("ANY") if allowed.len() == 1 => Ok(ToolChoice::Tool(allowed[0].to_owned())),
        Some("ANY") => Ok(ToolChoice::Required),
        Some("AUTO" | "VALIDATED") | None => Ok(ToolChoice::Auto),
        Some(other) => {
            Err(invalid(format!("`toolConfig.functionCallingConfig.mode` `{other}` is not AUTO, ANY or NONE")))
        }
    }
}

/// `generationConfig`: sampling, stops, and the response's format; more than one candidate is refused.
fn apply_generation_config(config: &Map<String, Value>, req: &mut ChatRequest) -> Result<(), TranslateError> {
    let num = |camel: &str, snake: &str| field(config, camel, snake).and_then(Value::as_f64);
    let int = |camel: &str, snake: &str| field(config, camel, snake).and_then(Value::as_u64);
    req.max_tokens = int("maxOutputTokens", "max_output_tokens");
    req.temperature = num("temperature", "temperature");
    req.top_p = num("topP", "top_p");
    req.top_k = int("topK", "top_k");
    req.seed = field(config, "seed", "seed").and_then(Value::as_i64);
    req.presence_penalty = num("presencePenalty", "presence_penalty");
    req.frequency_penalty = num("frequencyPenalty", "frequency_penalty");
    if let Some(stops) = field(config, "stopSequences", "stop_sequences").and_then(Value::as_array) {
        req.stop = stops.iter().filter_map(Value::as_str).map(str::to_owned).collect();
    }
    if int("candidateCount", "candidate_count").is_some_and(|n| n > 1) {
        return Err(TranslateError::unsupported("more than one candidate (`candidateCount`)"));
    }
    let schema = field(config, "responseJsonSchema", "response_json_schema")
        .cloned()
        .or_else(|| field(config, "responseSchema", "response_schema").map(json_schema));
    let json =
        field(config, "responseMimeType", "response_mime_type").and_then(Value::as_str) == Some("application/json");
    req.response_format = match (schema, json) {
        (Some(schema), _) => Some(ResponseFormat::JsonSchema { name: None, schema: raw(&schema)?, strict: None }),
        (None, true) => Some(ResponseFormat::JsonObject),
        (None, false) => None,
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_google_genai_request_decodes() {
        let body = br#"{"contents":[
            {"role":"user","parts":[{"text":"Weather in Paris?"}]},
            {"role":"model","parts":[{"functionCall":{"name":"get_weather","args":{"location":"Paris"}}}]},
            {"role":"user","parts":[{"functionResponse":{"name":"get_weather","response":{"result":"18C"}}}]}],
          "systemInstruction":{"parts":[{"text":"Be brief."}]},
          "tools":[{"functionDeclarations":[{"name":"get_weather","description":"Weather","parameters":{"type":"OBJECT","properties":{"location":{"type":"STRING"}}}}]}],
          "toolConfig":{"functionCallingConfig":{"mode":"ANY","allowedFunctionNames":["get_weather"]}},
          "generationConfig":{"maxOutputTokens":64,"temperature":0.5,"stopSequences":["END"]}}"#;
        let req = decode_request(body).unwrap();
        assert_eq!(req.system, vec!["Be brief.".to_owned()]);
        assert_eq!(req.messages.len(), 3);
        assert_eq!(
            req.messages[1].content,
            vec![Part::ToolCall(ToolCall {
                id: "call_0".into(),
                name: "get_weather".into(),
                arguments: r#"{"location":"Paris"}"#.into()
            })]
        );
        assert_eq!(req.messages[2].role, Role::Tool);
        assert_eq!(
            req.messages[2].content,
            vec![Part::ToolResult(ToolResult {
                tool_call_id: "call_0".into(),
                content: "18C".into(),
                is_error: false
            })]
        );
        assert_eq!(
            req.tools[0].parameters.as_str(),
            r#"{"properties":{"location":{"type":"string"}},"type":"object"}"#
        );
        assert_eq!(req.tool_choice, Some(ToolChoice::Tool("get_weather".into())));
        assert_eq!((req.max_tokens, req.temperature, req.stop.clone()), (Some(64), Some(0.5), vec!["END".to_owned()]));
    }

    #[test]
    fn what_cannot_be_carried_is_refused() {
        assert!(decode_request(br#"{"contents":[]}"#).is_err());
        assert!(decode_request(br#"{"contents":[{"role":"system","parts":[{"text":"x"}]}]}"#).is_err());
        assert!(decode_request(br#"{"contents":[{"parts":[{"text":"x"}]}],"tools":[{"googleSearch":{}}]}"#).is_err());
        assert!(decode_request(br#"{"contents":[{"parts":[{"text":"x"}]}],"generationConfig":{"candidateCount":2}}"#)
            .is_err());
    }
}
