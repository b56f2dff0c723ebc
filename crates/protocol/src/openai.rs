//! OpenAI wire types the gateway reads or writes: the routing view of a request, error bodies, model lists.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// The few fields of an OpenAI request body that routing needs. Everything else is skipped
/// without being materialised; `model` stays raw so its byte span can be found for a rewrite.
#[derive(Debug, Deserialize)]
pub struct RoutingFields<'a> {
    #[serde(borrow, default)]
    pub model: Option<&'a RawValue>,
    #[serde(default)]
    pub stream: Option<serde_json::Value>,
    #[serde(borrow, default)]
    pub messages: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub prompt: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub input: Option<&'a RawValue>,
    /// Gemini's turns.
    #[serde(borrow, default)]
    pub contents: Option<&'a RawValue>,
    /// Rerank's documents (and `query`, required with them).
    #[serde(borrow, default)]
    pub documents: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub query: Option<&'a RawValue>,
    /// Upper bound of completion tokens, for rate-limit reservations (either spelling).
    #[serde(default)]
    pub max_tokens: Option<serde_json::Value>,
    #[serde(default)]
    pub max_completion_tokens: Option<serde_json::Value>,
    /// The Responses API's spelling.
    #[serde(default)]
    pub max_output_tokens: Option<serde_json::Value>,
    /// Anthropic's (and Ollama generate's) system prompt; the Responses API's `instructions`.
    #[serde(borrow, default)]
    pub system: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub instructions: Option<&'a RawValue>,
    /// Session hints for sticky routing: OpenAI's `prompt_cache_key` and `user`, and
    /// `metadata.session_id` / Anthropic's `metadata.user_id`.
    #[serde(borrow, default)]
    pub prompt_cache_key: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub user: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub metadata: Option<&'a RawValue>,
}

/// `{"error": {...}}`, the error body every OpenAI-compatible client understands.
#[derive(Debug, Serialize, Deserialize, Clone, PartialEq)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, Deserialize, Clone, PartialEq)]
pub struct ErrorDetail {
    pub message: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub param: Option<String>,
    pub code: Option<String>,
}

/// `GET /v1/models` response (Anthropic's list has the same `data[].id`, without `object`).
#[derive(Debug, Serialize, Deserialize, Clone, PartialEq)]
pub struct ModelList {
    #[serde(default)]
    pub object: String,
    pub data: Vec<Model>,
}

#[derive(Debug, Serialize, Deserialize, Clone, PartialEq)]
pub struct Model {
    pub id: String,
    #[serde(default = "model_object")]
    pub object: String,
    #[serde(default)]
    pub created: u64,
    #[serde(default)]
    pub owned_by: String,
}

fn model_object() -> String {
    "model".to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing_fields_skip_the_rest() {
        let body = br#"{"messages":[{"role":"user","content":"hi"}],"model":"m","stream":true,"n":1}"#;
        let f: RoutingFields = serde_json::from_slice(body).unwrap();
        assert_eq!(f.model.unwrap().get(), "\"m\"");
        assert_eq!(f.stream, Some(serde_json::Value::Bool(true)));
        assert!(f.messages.unwrap().get().starts_with('['));
    }

    #[test]
    fn model_list_tolerates_sparse_entries() {
        let l: ModelList = serde_json::from_str(r#"{"object":"list","data":[{"id":"x"}]}"#).unwrap();
        assert_eq!(l.data[0].id, "x");
        assert_eq!(l.data[0].object, "model");
    }
}
