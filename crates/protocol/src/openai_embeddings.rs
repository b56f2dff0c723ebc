//! OpenAI Embeddings (`POST /v1/embeddings`) requests and responses to and from the internal
//! embeddings model, float or base64 vectors.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::chat::{Api, Extras};
use crate::embed::{vector_from_base64, vector_to_base64, EmbedRequest, EmbedResponse};
use crate::error::TranslateError;
use crate::json::{self, At, Kind};
use crate::wire::ExtraFields;

pub fn decode_request(body: &[u8]) -> Result<EmbedRequest, TranslateError> {
    let root = At::Root;
    let obj = json::body(body)?;
    let mut req = EmbedRequest { extra: Extras::new(Api::OpenAiChat), ..EmbedRequest::default() };
    req.model = json::required_string(&obj, "model", &root)?.into_owned();
    let input_at = root.key("input");
    let input = obj.require("input", &root)?;
    req.input = json::string_or_strings(input, &input_at).map_err(|_| {
        if json::kind(input) == Kind::Array {
            TranslateError::unsupported("token arrays as embeddings `input`")
        } else {
            TranslateError::invalid("`input` must be a string or an array of strings")
        }
    })?;
    for (name, raw) in obj.fields() {
        if json::kind(raw) == Kind::Null {
            continue;
        }
        let at = root.key(name);
        match name {
            "model" | "input" => {}
            "dimensions" => req.dimensions = Some(json::u64_field(raw, &at)?),
            "encoding_format" => {
                req.base64 = match json::string(raw, &at)?.as_ref() {
                    "float" => false,
                    "base64" => true,
                    other => {
                        return Err(TranslateError::invalid(format!("`{at}` must be float or base64 (got `{other}`)")))
                    }
                }
            }
            "user" => req.user = Some(json::string(raw, &at)?.into_owned()),
            _ => req.extra.keep(name, raw),
        }
    }
    Ok(req)
}

#[derive(Serialize)]
struct WireRequest<'a> {
    model: &'a str,
    input: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    dimensions: Option<u64>,
    /// Always floats from a backend: the gateway re-encodes for the client as it asked.
    encoding_format: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<&'a str>,
    #[serde(flatten)]
    extra: ExtraFields<'a>,
}

pub fn encode_request(req: &EmbedRequest) -> Result<Vec<u8>, TranslateError> {
    let wire = WireRequest {
        model: &req.model,
        input: &req.input,
        dimensions: req.dimensions,
        encoding_format: "float",
        user: req.user.as_deref(),
        extra: ExtraFields::all(req.extra.for_api(Api::OpenAiChat)),
    };
    json::to_vec(&wire)
}

#[derive(Deserialize)]
struct WireResponse<'a> {
    #[serde(default)]
    model: String,
    #[serde(borrow, default)]
    data: Vec<WireEmbedding<'a>>,
    #[serde(default)]
    usage: WireUsage,
}

#[derive(Deserialize)]
struct WireEmbedding<'a> {
    #[serde(default)]
    index: usize,
    #[serde(borrow)]
    embedding: &'a RawValue,
}

#[derive(Deserialize, Serialize, Default)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    total_tokens: u64,
}

pub fn decode_response(body: &[u8]) -> Result<EmbedResponse, TranslateError> {
    let invalid = |e: String| TranslateError::invalid(format!("the backend's embeddings are not valid: {e}"));
    let mut wire: WireResponse<'_> = serde_json::from_slice(body).map_err(|e| invalid(e.to_string()))?;
    wire.data.sort_by_key(|item| item.index);
    let mut embeddings = Vec::with_capacity(wire.data.len());
    for item in wire.data {
        let vector = if json::kind(item.embedding) == Kind::String {
            let text: String = serde_json::from_str(item.embedding.get()).map_err(|e| invalid(e.to_string()))?;
            vector_from_base64(&text).ok_or_else(|| invalid("bad base64 vector".to_owned()))?
        } else {
            serde_json::from_str(item.embedding.get()).map_err(|e| invalid(e.to_string()))?
        };
        embeddings.push(vector);
    }
    Ok(EmbedResponse { model: wire.model, embeddings, prompt_tokens: wire.usage.prompt_tokens })
}

#[derive(Serialize)]
struct WireResponseOut<'a> {
    object: &'static str,
    data: Vec<WireEmbeddingOut>,
    model: &'a str,
    usage: WireUsage,
}

#[derive(Serialize)]
struct WireEmbeddingOut {
    object: &'static str,
    index: usize,
    embedding: WireVector,
}

#[derive(Serialize)]
#[serde(untagged)]
enum WireVector {
    Floats(Vec<f32>),
    Base64(String),
}

/// The response; `base64` as the request's `encoding_format` asked.
pub fn encode_response(response: &EmbedResponse, base64: bool) -> Result<Vec<u8>, TranslateError> {
    let data = response
        .embeddings
        .iter()
        .enumerate()
        .map(|(index, vector)| WireEmbeddingOut {
            object: "embedding",
            index,
            embedding: if base64 {
                WireVector::Base64(vector_to_base64(vector))
            } else {
                WireVector::Floats(vector.clone())
            },
        })
        .collect();
    let usage = WireUsage { prompt_tokens: response.prompt_tokens, total_tokens: response.prompt_tokens };
    json::to_vec(&WireResponseOut { object: "list", data, model: &response.model, usage })
}
