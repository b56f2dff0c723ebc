//! Google's Gemini API, from its reference: `GET /v1beta/models`, and
//! `POST /v1beta/models/{model}:generateContent` / `:streamGenerateContent?alt=sse` with a
//! `GenerateContentRequest` (checked: `contents` with `user`/`model` turns, one field per part,
//! `functionResponse` naming its function, no unknown top-level fields), answered with a
//! `GenerateContentResponse` (the stream: one per token, the last with `finishReason` and
//! `usageMetadata`). Keys travel in `x-goog-api-key`; errors have the `google.rpc` shape.

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::{json, Value};

use super::body::MockBody;
use super::handlers::{body_id, gate, read_logged, State};
use super::reply::TOOL_ARGUMENTS;

const SSE: HeaderValue = HeaderValue::from_static("text/event-stream");
const TOKENS: usize = 5;
const FIELDS: [&str; 7] =
    ["contents", "systemInstruction", "tools", "toolConfig", "generationConfig", "safetySettings", "cachedContent"];

fn error(state: &State, status: StatusCode, message: &str, rpc_status: &str) -> Response<MockBody> {
    let body = json!({"error": {"code": status.as_u16(), "message": message, "status": rpc_status}});
    state.json(status, body.to_string())
}

/// `countTokens`: one token per whitespace-separated word of the text parts (a mock's count, so
/// tests can tell it from the gateway's own estimate).
async fn count_tokens(state: &State, body: Incoming) -> Response<MockBody> {
    let Some(bytes) = read_logged(state, body).await else {
        return error(state, StatusCode::BAD_REQUEST, "could not read the request body", "INVALID_ARGUMENT");
    };
    let Ok(request) = serde_json::from_slice::<Value>(&bytes) else {
        return error(state, StatusCode::BAD_REQUEST, "Invalid JSON payload received.", "INVALID_ARGUMENT");
    };
    let request = request.get("generateContentRequest").unwrap_or(&request);
    let words: usize = request["contents"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c["parts"].as_array().into_iter().flatten())
        .filter_map(|p| p["text"].as_str())
        .map(|t| t.split_whitespace().count())
        .sum();
    state.json(StatusCode::OK, json!({"totalTokens": words}).to_string())
}

pub(crate) async fn handle(state: &State, req: Request<Incoming>) -> Response<MockBody> {
    let (parts, body) = req.into_parts();
    match parts.headers.get("x-goog-api-key").and_then(|v| v.to_str().ok()) {
        None => return error(state, StatusCode::FORBIDDEN, "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.", "PERMISSION_DENIED"),
        Some(key) if state.api_key.as_deref().is_some_and(|k| k != key) => {
            return error(state, StatusCode::BAD_REQUEST, "API key not valid. Please pass a valid API key.", "INVALID_ARGUMENT")
        }
        Some(_) => {}
    }
    let path = parts.uri.path();
    if parts.method == Method::GET && path == "/v1beta/models" {
        let models: Vec<Value> = state
            .models
            .iter()
            .map(|m| json!({"name": format!("models/{}", m.name), "supportedGenerationMethods": ["generateContent", "countTokens"]}))
            .collect();
        return state.json(StatusCode::OK, json!({ "models": models }).to_string());
    }
    let Some((model, method)) = path.strip_prefix("/v1beta/models/").and_then(|rest| rest.split_once(':')) else {
        return error(state, StatusCode::NOT_FOUND, "Not found", "NOT_FOUND");
    };
    let stream = match method {
        "countTokens" if parts.method == Method::POST => return count_tokens(state, body).await,
        "generateContent" => false,
        "streamGenerateContent" if parts.uri.query() == Some("alt=sse") => true,
        "streamGenerateContent" => {
            return error(state, StatusCode::BAD_REQUEST, "this mock streams only with alt=sse", "INVALID_ARGUMENT")
        }
        _ => return error(state, StatusCode::NOT_FOUND, "Not found", "NOT_FOUND"),
    };
    if parts.method != Method::POST {
        return error(state, StatusCode::NOT_FOUND, "Not found", "NOT_FOUND");
    }
    if !state.models.iter().any(|m| m.name == model) {
        let message =
            format!("models/{model} is not found for API version v1beta, or is not supported for generateContent.");
        return error(state, StatusCode::NOT_FOUND, &message, "NOT_FOUND");
    }
    let fail = br#"{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}"#;
    if let Err(resp) = gate(state, fail).await {
        return *resp;
    }
    let Some(bytes) = read_logged(state, body).await else {
        return error(state, StatusCode::BAD_REQUEST, "could not read the request body", "INVALID_ARGUMENT");
    };
    let request: Value = match serde_json::from_slice(&bytes) {
        Ok(Value::Object(m)) => Value::Object(m),
        _ => return error(state, StatusCode::BAD_REQUEST, "Invalid JSON payload received.", "INVALID_ARGUMENT"),
    };
    if let Err(message) = check(&request) {
        return error(state, StatusCode::BAD_REQUEST, &message, "INVALID_ARGUMENT");
    }
    let reply = reply(&request);
    let prompt_tokens = (bytes.len() / 4).max(1) as u64;
    let id = format!("mock-{}", body_id(&bytes));
    let usage = |candidates: usize| {
        json!({"promptTokenCount": prompt_tokens, "candidatesTokenCount": candidates,
               "totalTokenCount": prompt_tokens + candidates as u64})
    };
    let answer = |parts: Value, finish: Option<&str>, candidates: usize| {
        let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
        if let Some(finish) = finish {
            candidate["finishReason"] = json!(finish);
        }
        json!({"candidates": [candidate], "usageMetadata": usage(candidates), "modelVersion": model, "responseId": id})
    };
    match (reply, stream) {
        (Reply::Call(name), false) => {
            let part = json!([{"functionCall": {"name": name, "args": serde_json::from_str::<Value>(TOOL_ARGUMENTS).unwrap_or_default()}}]);
            state.json(StatusCode::OK, answer(part, Some("STOP"), TOKENS).to_string())
        }
        (Reply::Call(name), true) => {
            let part = json!([{"functionCall": {"name": name, "args": serde_json::from_str::<Value>(TOOL_ARGUMENTS).unwrap_or_default()}}]);
            let event = format!("data: {}\r\n\r\n", answer(part, Some("STOP"), TOKENS));
            state.respond(StatusCode::OK, SSE, MockBody::full(Bytes::from(event)))
        }
        (Reply::Text(text), false) => {
            state.json(StatusCode::OK, answer(json!([{ "text": text }]), Some("STOP"), TOKENS).to_string())
        }
        (Reply::Text(text), true) => {
            let words: Vec<String> = text.split_inclusive(' ').map(str::to_owned).collect();
            let mut out = String::new();
            for (i, word) in words.iter().enumerate() {
                let last = i + 1 == words.len();
                let event = answer(json!([{ "text": word }]), last.then_some("STOP"), i + 1);
                out.push_str(&format!("data: {event}\r\n\r\n"));
            }
            state.respond(StatusCode::OK, SSE, MockBody::full(Bytes::from(out)))
        }
    }
}

enum Reply {
    Text(String),
    /// Call the first declared function.
    Call(String),
}

/// What the mock answers: a call to the first declared function, unless the conversation ends
/// with a function's result (then the result, prefixed); else its default five tokens.
fn reply(request: &Value) -> Reply {
    let last = request["contents"].as_array().and_then(|c| c.last());
    let result = last.and_then(|c| c["parts"].as_array()).and_then(|parts| {
        parts.iter().find_map(|p| {
            let response = p.get("functionResponse")?.get("response")?;
            Some(response.get("result").and_then(Value::as_str).map_or_else(|| response.to_string(), str::to_owned))
        })
    });
    if let Some(result) = result {
        return Reply::Text(format!("Tool result: {result}"));
    }
    let declared = request["tools"]
        .as_array()
        .and_then(|tools| tools.iter().find_map(|t| t["functionDeclarations"].as_array()?.first()?["name"].as_str()));
    match declared {
        Some(name) => Reply::Call(name.to_owned()),
        None => Reply::Text((0..TOKENS).map(|i| format!("tok{i} ")).collect()),
    }
}

/// The reference's rules a request breaks, as Gemini words them.
fn check(request: &Value) -> Result<(), String> {
    let fields = request.as_object().map(|m| m.keys().cloned().collect::<Vec<_>>()).unwrap_or_default();
    if let Some(unknown) = fields.iter().find(|f| !FIELDS.contains(&f.as_str())) {
        return Err(format!("Invalid JSON payload received. Unknown name \"{unknown}\": Cannot find field."));
    }
    let contents = request["contents"]
        .as_array()
        .filter(|c| !c.is_empty())
        .ok_or("* GenerateContentRequest.contents: contents is not specified")?;
    for (i, content) in contents.iter().enumerate() {
        match content["role"].as_str() {
            Some("user" | "model") | None => {}
            Some(other) => return Err(format!("Please use a valid role: user, model. (contents[{i}].role: {other})")),
        }
        let parts = content["parts"]
            .as_array()
            .filter(|p| !p.is_empty())
            .ok_or(format!("* GenerateContentRequest.contents[{i}].parts: contents.parts must not be empty."))?;
        for part in parts {
            let kinds = ["text", "inlineData", "fileData", "functionCall", "functionResponse"];
            if kinds.iter().filter(|k| part.get(**k).is_some()).count() != 1 {
                return Err(format!(
                    "* GenerateContentRequest.contents[{i}].parts: a part must have exactly one of {kinds:?}"
                ));
            }
            if let Some(response) = part.get("functionResponse") {
                if response["name"].as_str().is_none_or(str::is_empty) || !response["response"].is_object() {
                    return Err(format!("* GenerateContentRequest.contents[{i}].parts.function_response: name and response are required"));
                }
            }
        }
    }
    Ok(())
}
