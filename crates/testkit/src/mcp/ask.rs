//! The mock MCP server's tools that need its client: `sample {prompt}`
//! (`sampling/createMessage`), `elicit {message}` (`elicitation/create`), `roots` (`roots/list`),
//! `ping_client` (`ping`), each answering with what the client said (or the error it got), and
//! `log {level, text}` (a `notifications/message` before the answer). The requests go out on the
//! call's stream (`sample_on_get`: on the session's GET stream, as some SDKs send requests that
//! name no related request); the client's answers come back as POSTed (or written) responses,
//! routed here by id (`answered`). `touch_resource {uri}` announces on GET streams that a resource
//! changed (`notifications/resources/updated`, `notifications/resources/list_changed`).

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use super::{lock, Shared};

/// How long a tool waits for its client's answer.
const WAIT: Duration = Duration::from_secs(30);

pub(crate) fn tools() -> Vec<Value> {
    let obj = |props: Value| json!({"type": "object", "properties": props});
    vec![
        json!({"name": "sample", "description": "Ask the client's model (sampling).", "inputSchema": obj(json!({"prompt": {"type": "string"}}))}),
        json!({"name": "elicit", "description": "Ask the client's user (elicitation).", "inputSchema": obj(json!({"message": {"type": "string"}}))}),
        json!({"name": "roots", "description": "List the client's roots.", "inputSchema": obj(json!({}))}),
        json!({"name": "ping_client", "description": "Ping the client.", "inputSchema": obj(json!({}))}),
        json!({"name": "log", "description": "Send a log message, then answer.", "inputSchema": obj(json!({"level": {"type": "string"}, "text": {"type": "string"}}))}),
        json!({"name": "sample_on_get", "description": "Ask the client's model on the GET stream.", "inputSchema": obj(json!({"prompt": {"type": "string"}}))}),
        json!({"name": "touch_resource", "description": "Announce that a resource changed.", "inputSchema": obj(json!({"uri": {"type": "string"}}))}),
    ]
}

/// Whether a call of `name` needs a stream to its client.
pub(crate) fn needs_stream(msg: &Value) -> bool {
    msg.get("method").and_then(Value::as_str) == Some("tools/call")
        && matches!(
            msg.pointer("/params/name").and_then(Value::as_str),
            Some("sample" | "elicit" | "roots" | "ping_client" | "log")
        )
}

/// A client's response (`{"id", "result" | "error"}`, no `method`): to the tool waiting on it.
pub(crate) fn answered(shared: &Shared, msg: &Value) -> bool {
    if msg.get("method").is_some() || !(msg.get("result").is_some() || msg.get("error").is_some()) {
        return false;
    }
    let id = msg.get("id").map(Value::to_string).unwrap_or_default();
    if let Some(waiting) = lock(&shared.asked).remove(&id) {
        let _ = waiting.send(msg.clone());
    }
    true
}

/// Run one of this file's tools; None when `name` is not one.
pub(crate) async fn call(
    shared: &Shared,
    name: &str,
    args: &Value,
    notes: &mpsc::Sender<Value>,
    session: Option<&str>,
) -> Option<Value> {
    // The calling session's GET stream (any, for a call without a session).
    let on_get: Option<mpsc::Sender<Value>> = {
        let streams = lock(&shared.streams);
        match session {
            Some(session) => streams.get(session).cloned(),
            None => streams.values().next().cloned(),
        }
    };
    let (method, params) = match name {
        "touch_resource" => {
            let uri = args.get("uri").and_then(Value::as_str).unwrap_or("mock://readme");
            let Some(stream) = on_get else { return Some(text_result("error: no GET stream")) };
            let updated =
                json!({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": uri}});
            let _ = stream.send(updated).await;
            let _ = stream.send(json!({"jsonrpc": "2.0", "method": "notifications/resources/list_changed"})).await;
            return Some(text_result("touched"));
        }
        "sample" | "sample_on_get" => {
            let prompt = args.get("prompt").and_then(Value::as_str).unwrap_or("hello");
            let message = json!({"role": "user", "content": {"type": "text", "text": prompt}});
            ("sampling/createMessage", json!({"messages": [message], "maxTokens": 64}))
        }
        "elicit" => {
            let message = args.get("message").and_then(Value::as_str).unwrap_or("Your name?");
            let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]});
            ("elicitation/create", json!({"message": message, "requestedSchema": schema}))
        }
        "roots" => ("roots/list", json!({})),
        "ping_client" => ("ping", json!({})),
        "log" => {
            let level = args.get("level").and_then(Value::as_str).unwrap_or("info");
            let text = args.get("text").and_then(Value::as_str).unwrap_or("a log line");
            let note = json!({"jsonrpc": "2.0", "method": "notifications/message",
                "params": {"level": level, "logger": "mock", "data": text}});
            let _ = notes.send(note).await;
            return Some(text_result("logged"));
        }
        _ => return None,
    };
    let id = format!("m-{}", shared.next_ask.fetch_add(1, Relaxed));
    let (tx, rx) = oneshot::channel();
    lock(&shared.asked).insert(Value::String(id.clone()).to_string(), tx);
    let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let stream = match (name, on_get) {
        ("sample_on_get", Some(stream)) => stream,
        ("sample_on_get", None) => return Some(text_result("error: no GET stream")),
        _ => notes.clone(),
    };
    if stream.send(request).await.is_err() {
        return Some(text_result("error: no stream to the client"));
    }
    let answer = match tokio::time::timeout(WAIT, rx).await {
        Ok(Ok(answer)) => answer,
        _ => return Some(text_result(format!("error: the client did not answer {method}"))),
    };
    Some(match (answer.get("result"), answer.get("error")) {
        (Some(result), _) => text_result(format!("{name}: {}", summary(name, result))),
        (_, Some(error)) => {
            let message = error.get("message").and_then(Value::as_str).unwrap_or("?");
            text_result(format!("error {}: {message}", error.get("code").unwrap_or(&Value::Null)))
        }
        _ => text_result("error: an empty answer"),
    })
}

/// What a client's result says, briefly.
fn summary(name: &str, result: &Value) -> String {
    match name {
        "sample" | "sample_on_get" => result.pointer("/content/text").and_then(Value::as_str).unwrap_or("?").to_owned(),
        "elicit" => format!(
            "{} {}",
            result.get("action").and_then(Value::as_str).unwrap_or("?"),
            result.get("content").unwrap_or(&Value::Null)
        ),
        "roots" => result
            .get("roots")
            .and_then(Value::as_array)
            .map(|roots| {
                roots.iter().filter_map(|r| r.get("uri").and_then(Value::as_str)).collect::<Vec<_>>().join(",")
            })
            .unwrap_or_default(),
        _ => "ok".to_owned(),
    }
}

fn text_result(t: impl Into<String>) -> Value {
    json!({"content": [{"type": "text", "text": t.into()}]})
}
