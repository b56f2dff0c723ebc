//! Ollama `/api/embed` requests and responses to and from the internal embeddings model.

use serde::{Deserialize, Serialize};

use crate::chat::{Api, Extras};
use crate::embed::{EmbedRequest, EmbedResponse};
use crate::error::TranslateError;
use crate::json::{self, At, Kind};
use crate::wire::ExtraFields;

pub fn decode_embed_request(body: &[u8]) -> Result<EmbedRequest, TranslateError> {
    let root = At::Root;
    let obj = json::body(body)?;
    let mut req = EmbedRequest { extra: Extras::new(Api::Ollama), ..EmbedRequest::default() };
    req.model = json::required_string(&obj, "model", &root)?.into_owned();
    req.input = json::string_or_strings(obj.require("input", &root)?, &root.key("input"))?;
    for (name, raw) in obj.fields() {
        if json::kind(raw) == Kind::Null {
            continue;
        }
        let at = root.key(name);
        match name {
            "model" | "input" => {}
            "dimensions" => req.dimensions = Some(json::u64_field(raw, &at)?),
            "truncate" => req.truncate = Some(json::bool_field(raw, &at)?),
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
    #[serde(skip_serializing_if = "Option::is_none")]
    truncate: Option<bool>,
    #[serde(flatten)]
    extra: ExtraFields<'a>,
}

pub fn encode_embed_request(req: &EmbedRequest) -> Result<Vec<u8>, TranslateError> {
    let wire = WireRequest {
        model: &req.model,
        input: &req.input,
        dimensions: req.dimensions,
        truncate: req.truncate,
        extra: ExtraFields::all(req.extra.for_api(Api::Ollama)),
    };
    json::to_vec(&wire)
}

#[derive(Deserialize)]
struct WireResponse {
    #[serde(default)]
    model: String,
    #[serde(default)]
    embeddings: Vec<Vec<f32>>,
    #[serde(default)]
    prompt_eval_count: u64,
}

pub fn decode_embed_response(body: &[u8]) -> Result<EmbedResponse, TranslateError> {
    let wire: WireResponse = serde_json::from_slice(body)
        .map_err(|e| TranslateError::invalid(format!("the backend's embeddings are not valid: {e}")))?;
    Ok(EmbedResponse { model: wire.model, embeddings: wire.embeddings, prompt_tokens: wire.prompt_eval_count })
}

pub fn encode_embed_response(response: &EmbedResponse) -> Result<Vec<u8>, TranslateError> {
    #[derive(Serialize)]
    struct Out<'a> {
        model: &'a str,
        embeddings: &'a [Vec<f32>],
        total_duration: u64,
        load_duration: u64,
        prompt_eval_count: u64,
    }
    json::to_vec(&Out {
        model: &response.model,
        embeddings: &response.embeddings,
        total_duration: 0,
        load_duration: 0,
        prompt_eval_count: response.prompt_tokens,
    })
}
