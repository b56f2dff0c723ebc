//! JSON-RPC 2.0 as MCP uses it: one message per POST (batches were dropped in 2025-06-18 and are
//! refused), ids that are strings or numbers and are echoed back verbatim, and the standard
//! error codes. Results pass through as raw JSON: a tool's answer is never re-serialised.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError { code, message: message.into(), data: None }
    }

    pub fn invalid_params(message: impl Into<String>) -> RpcError {
        RpcError::new(INVALID_PARAMS, message)
    }

    pub fn to_value(&self) -> Value {
        let mut v = serde_json::json!({"code": self.code, "message": self.message});
        if let Some(data) = &self.data {
            v["data"] = data.clone();
        }
        v
    }
}

/// A request id exactly as the peer sent it (a JSON string or number).
#[derive(Debug, Clone)]
pub struct Id(pub Box<RawValue>);

impl PartialEq for Id {
    fn eq(&self, other: &Id) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Id {
    pub fn number(n: u64) -> Id {
        Id(RawValue::from_string(n.to_string()).unwrap_or_else(|_| null()))
    }

    pub fn as_str(&self) -> &str {
        self.0.get()
    }

    /// The id as a JSON value (for embedding in other messages, e.g. `notifications/cancelled`).
    pub fn to_value(&self) -> Value {
        serde_json::from_str(self.0.get()).unwrap_or(Value::Null)
    }
}

pub fn null() -> Box<RawValue> {
    RawValue::NULL.to_owned()
}

/// One decoded message.
#[derive(Debug)]
pub enum Message {
    Request { id: Id, method: String, params: Option<Value> },
    Notification { method: String, params: Option<Value> },
    Response { id: Id, outcome: Result<Box<RawValue>, RpcError> },
}

#[derive(Deserialize)]
struct Envelope {
    jsonrpc: Option<String>,
    #[serde(default, deserialize_with = "raw_present")]
    id: Option<Box<RawValue>>,
    method: Option<String>,
    params: Option<Value>,
    result: Option<Box<RawValue>>,
    error: Option<Value>,
}

/// Keep `"id": null` distinguishable from no `id` at all.
fn raw_present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Box<RawValue>>, D::Error> {
    Box::<RawValue>::deserialize(d).map(Some)
}

/// The error object of a refusal, and the id to answer it under when one could be read.
#[derive(Debug)]
pub struct Refusal {
    pub id: Option<Id>,
    pub error: RpcError,
}

/// Decode one message. Malformed JSON is -32700; valid JSON that is not a JSON-RPC 2.0 message
/// (a batch, a missing `method`, a bad id or version) is -32600.
pub fn parse(body: &[u8]) -> Result<Message, Refusal> {
    let refuse = |code, message: String| Refusal { id: None, error: RpcError::new(code, message) };
    if body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        return Err(refuse(INVALID_REQUEST, "batches are not supported: send one JSON-RPC message per request".into()));
    }
    let envelope: Envelope =
        serde_json::from_slice(body).map_err(|e| match serde_json::from_slice::<serde::de::IgnoredAny>(body) {
            Ok(_) => refuse(INVALID_REQUEST, format!("invalid request: {e}")),
            Err(e) => refuse(PARSE_ERROR, format!("parse error: {e}")),
        })?;
    let id = match envelope.id {
        Some(raw) => {
            let first = raw.get().as_bytes().first().copied();
            if !matches!(first, Some(b'"' | b'-' | b'0'..=b'9')) {
                return Err(Refusal {
                    id: None,
                    error: RpcError::new(INVALID_REQUEST, "`id` must be a string or a number"),
                });
            }
            Some(Id(raw))
        }
        None => None,
    };
    if envelope.jsonrpc.as_deref() != Some("2.0") {
        return Err(Refusal { id, error: RpcError::new(INVALID_REQUEST, "`jsonrpc` must be \"2.0\"") });
    }
    if let Some(params) = &envelope.params {
        if !params.is_object() && !params.is_array() {
            return Err(Refusal { id, error: RpcError::new(INVALID_REQUEST, "`params` must be an object") });
        }
    }
    match (id, envelope.method) {
        (Some(id), Some(method)) => Ok(Message::Request { id, method, params: envelope.params }),
        (None, Some(method)) => Ok(Message::Notification { method, params: envelope.params }),
        (Some(id), None) => {
            let outcome = match (envelope.result, envelope.error) {
                (Some(result), None) => Ok(result),
                (None, Some(error)) => Err(rpc_error(&error)),
                _ => {
                    return Err(Refusal {
                        id: Some(id),
                        error: RpcError::new(INVALID_REQUEST, "a response has `result` or `error`"),
                    })
                }
            };
            Ok(Message::Response { id, outcome })
        }
        (None, None) => Err(Refusal { id: None, error: RpcError::new(INVALID_REQUEST, "a request needs a `method`") }),
    }
}

fn rpc_error(error: &Value) -> RpcError {
    RpcError {
        code: error.get("code").and_then(Value::as_i64).unwrap_or(INTERNAL_ERROR),
        message: error.get("message").and_then(Value::as_str).unwrap_or("error").to_owned(),
        data: error.get("data").cloned(),
    }
}

/// `{"jsonrpc":"2.0","id":ID,"result":RESULT}` with `result` written as given.
pub fn result_bytes(id: &Id, result: &RawValue) -> Vec<u8> {
    let mut out = Vec::with_capacity(40 + id.as_str().len() + result.get().len());
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.extend_from_slice(id.as_str().as_bytes());
    out.extend_from_slice(b",\"result\":");
    out.extend_from_slice(result.get().as_bytes());
    out.push(b'}');
    out
}

/// `result_bytes`, with `"resultType":"complete"` added for a stateless-revision client when the
/// result (an upstream's, passed through) has none: that revision requires it, session-era
/// upstreams never send it. Spliced in after the opening brace; the result is not re-serialised.
/// A result mentioning `"resultType"` anywhere is taken as having it.
pub fn result_bytes_for(id: &Id, result: &RawValue, stateless: bool) -> Vec<u8> {
    let text = result.get();
    let body = text.trim_start();
    if !stateless || !body.starts_with('{') || memchr::memmem::find(text.as_bytes(), b"\"resultType\"").is_some() {
        return result_bytes(id, result);
    }
    let inner = &body[1..];
    let sep = if inner.trim_start().starts_with('}') { "" } else { "," };
    let mut out = Vec::with_capacity(64 + id.as_str().len() + text.len());
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.extend_from_slice(id.as_str().as_bytes());
    out.extend_from_slice(b",\"result\":{\"resultType\":\"complete\"");
    out.extend_from_slice(sep.as_bytes());
    out.extend_from_slice(inner.as_bytes());
    out.push(b'}');
    out
}

/// A result built by the gateway itself.
pub fn result_value(id: &Id, result: &Value) -> Vec<u8> {
    let raw = serde_json::value::to_raw_value(result).unwrap_or_else(|_| null());
    result_bytes(id, &raw)
}

/// An error answer; `id` is `null` when the request's id could not be read.
pub fn error_bytes(id: Option<&Id>, error: &RpcError) -> Vec<u8> {
    let id = id.map_or(Value::Null, Id::to_value);
    serde_json::to_vec(&serde_json::json!({"jsonrpc": "2.0", "id": id, "error": error.to_value()})).unwrap_or_default()
}

/// A request the gateway sends upstream.
pub fn request_bytes(id: u64, method: &str, params: &Value) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
        .unwrap_or_default()
}

/// A notification (no id, no answer).
pub fn notification_bytes(method: &str, params: &Value) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({"jsonrpc": "2.0", "method": method, "params": params})).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(body: &str) -> i64 {
        parse(body.as_bytes()).err().map(|r| r.error.code).unwrap_or(0)
    }

    #[test]
    fn each_kind_of_message_and_each_refusal() {
        match parse(br#"{"jsonrpc":"2.0","id":"a-1","method":"tools/list","params":{}}"#).unwrap() {
            Message::Request { id, method, .. } => {
                assert_eq!((id.as_str(), method.as_str()), ("\"a-1\"", "tools/list"))
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).unwrap(),
            Message::Notification { .. }
        ));
        match parse(br#"{"jsonrpc":"2.0","id":7,"result":{"x":[1, 2]}}"#).unwrap() {
            Message::Response { id, outcome } => {
                assert_eq!(id.as_str(), "7");
                assert_eq!(outcome.unwrap().get(), r#"{"x":[1, 2]}"#, "results stay byte for byte");
            }
            other => panic!("{other:?}"),
        }
        match parse(br#"{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"no"}}"#).unwrap() {
            Message::Response { outcome, .. } => assert_eq!(outcome.unwrap_err().code, METHOD_NOT_FOUND),
            other => panic!("{other:?}"),
        }
        assert_eq!(code("{not json"), PARSE_ERROR);
        assert_eq!(code("[]"), INVALID_REQUEST);
        assert_eq!(code(r#"{"jsonrpc":"1.0","id":1,"method":"x"}"#), INVALID_REQUEST);
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":{"a":1},"method":"x"}"#), INVALID_REQUEST);
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":null,"method":"x"}"#), INVALID_REQUEST);
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1,"method":"x","params":3}"#), INVALID_REQUEST);
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1}"#), INVALID_REQUEST);
        assert_eq!(code("17"), INVALID_REQUEST);
    }

    #[test]
    fn stateless_results_gain_a_result_type_once() {
        let id = Id::number(3);
        let raw = |t: &str| RawValue::from_string(t.to_owned()).unwrap();
        let v = |b: Vec<u8>| serde_json::from_slice::<Value>(&b).unwrap()["result"].clone();
        assert_eq!(
            v(result_bytes_for(&id, &raw(r#"{"content":[]}"#), true)),
            serde_json::json!({"resultType":"complete","content":[]})
        );
        assert_eq!(v(result_bytes_for(&id, &raw("{ }"), true)), serde_json::json!({"resultType":"complete"}));
        assert_eq!(
            v(result_bytes_for(&id, &raw(r#"{"resultType":"input_required"}"#), true))["resultType"],
            "input_required"
        );
        assert_eq!(v(result_bytes_for(&id, &raw(r#"{"content":[]}"#), false)), serde_json::json!({"content":[]}));
    }

    #[test]
    fn answers_echo_the_id_verbatim() {
        let id = Id(RawValue::from_string("\"req-9\"".into()).unwrap());
        let raw = RawValue::from_string(r#"{"content":[]}"#.into()).unwrap();
        assert_eq!(result_bytes(&id, &raw), br#"{"jsonrpc":"2.0","id":"req-9","result":{"content":[]}}"#);
        let e: Value = serde_json::from_slice(&error_bytes(None, &RpcError::new(PARSE_ERROR, "bad"))).unwrap();
        assert_eq!(e, serde_json::json!({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"bad"}}));
    }
}
