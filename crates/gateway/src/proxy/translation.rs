//! The translated side of forwarding: request bodies for each backend wire (the client's
//! request decoded once, encoded once per wire), token counting answered locally, and whole
//! answers (successes and errors) re-rendered in the client's API.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt, Limited};
use switchyard_protocol::anthropic;
use switchyard_protocol::chat::{ResponseContext, TranslateError};

use crate::endpoint::Endpoint;
use crate::error::GatewayError;
use crate::http::{json_response, GatewayBody};
use crate::translate::{translate_error, translate_response, Decoded, Wire};
use crate::upstream::pool::UpstreamBody;

/// Largest backend answer read whole for translation (a streamed one is never read whole).
const MAX_TRANSLATED_BODY: usize = 64 * 1024 * 1024;

/// Why no body could be made for a wire.
pub enum BodyError {
    /// The client's request is invalid, or asks for what no API here can carry: a 400, whatever
    /// the backend.
    Request(TranslateError),
    /// This wire cannot carry a feature of the request; another backend might.
    Wire(TranslateError),
}

/// The client's request as each wire needs it.
pub struct Bodies {
    endpoint: Endpoint,
    /// The client's bytes (model alias already resolved), before any splice for passthrough.
    client: Bytes,
    model: String,
    decoded: Option<Decoded>,
    encoded: Vec<(Wire, Bytes)>,
}

impl Bodies {
    /// For `model` (a fallback model gets a `Bodies` of its own).
    pub fn new(endpoint: Endpoint, client: Bytes, model: String) -> Self {
        Bodies { endpoint, client, model, decoded: None, encoded: Vec::new() }
    }

    /// The model these bodies are for.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The request in the internal model (decoded on first use).
    pub fn decoded(&mut self) -> Result<&Decoded, TranslateError> {
        if self.decoded.is_none() {
            self.decoded = Some(Decoded::decode(self.endpoint, &self.client, &self.model)?);
        }
        self.decoded.as_ref().ok_or_else(|| TranslateError::Invalid("request not decoded".to_owned()))
    }

    /// The body to send on `wire`.
    pub fn encode(&mut self, wire: Wire) -> Result<Bytes, BodyError> {
        if let Some((_, body)) = self.encoded.iter().find(|(w, _)| *w == wire) {
            return Ok(body.clone());
        }
        let decoded = self.decoded().map_err(BodyError::Request)?;
        let body = decoded.encode(wire).map_err(BodyError::Wire)?;
        self.encoded.push((wire, body.clone()));
        Ok(body)
    }
}

/// Values a translated answer uses where the backend gives none (Ollama sends no id, Bedrock no
/// model name).
pub fn response_context(request_id: &HeaderValue, model: &str) -> ResponseContext {
    let created = crate::clock::unix_ms().max(0) as u64 / 1000;
    let id: String =
        request_id.to_str().unwrap_or_default().chars().filter(|c| c.is_ascii_alphanumeric()).take(32).collect();
    ResponseContext { created, id, model: model.to_owned() }
}

/// `POST /v1/messages/count_tokens` for a model no Anthropic backend serves: an estimate.
pub fn count_tokens_locally(bodies: &mut Bodies, endpoint: Endpoint) -> Result<Response<GatewayBody>, GatewayError> {
    let decoded = bodies.decoded().map_err(|e| GatewayError::from_translate(&e))?;
    let request = decoded.chat().ok_or(GatewayError::Internal)?;
    let count = anthropic::estimate_input_tokens(request);
    let body = match endpoint {
        Endpoint::GeminiCountTokens => switchyard_protocol::gemini::encode_count_tokens_response(count),
        _ => anthropic::encode_count_tokens_response(count),
    };
    Ok(json_response(StatusCode::OK, body))
}

/// A translated answer read whole: the client-shaped body and the usage the backend reported.
pub struct WholeAnswer {
    pub status: StatusCode,
    pub body: Bytes,
    pub usage: Option<switchyard_protocol::chat::Usage>,
}

/// Read a backend's whole answer (after its first frame) and re-render it for the client.
#[allow(clippy::too_many_arguments)]
pub async fn translate_whole(
    endpoint: Endpoint,
    wire: Wire,
    status: StatusCode,
    first: Option<Frame<Bytes>>,
    body: UpstreamBody,
    limit: Duration,
    context: &ResponseContext,
    bodies: &mut Bodies,
) -> Result<WholeAnswer, GatewayError> {
    let rest = tokio::time::timeout(limit, Limited::new(body, MAX_TRANSLATED_BODY).collect())
        .await
        .map_err(|_| GatewayError::UpstreamTimeout)?
        .map_err(|_| GatewayError::BadGateway { message: "the backend's answer broke off".to_owned() })?
        .to_bytes();
    let whole = match first.and_then(|f| f.into_data().ok()) {
        Some(first) if rest.is_empty() => first,
        Some(first) => Bytes::from([first, rest].concat()),
        None => rest,
    };
    if !status.is_success() {
        let body = Bytes::from(translate_error(endpoint, status.as_u16(), &whole));
        return Ok(WholeAnswer { status, body, usage: None });
    }
    let request = bodies.decoded().map_err(|e| GatewayError::from_translate(&e))?;
    let (body, usage) = translate_response(endpoint, wire, &whole, context, request).map_err(|e| {
        tracing::warn!(error = %e, "a backend answer could not be translated");
        GatewayError::BadGateway { message: format!("the backend's answer could not be translated: {e}") }
    })?;
    Ok(WholeAnswer { status, body: Bytes::from(body), usage: Some(usage) })
}

/// The content type of a translated answer for a client of `endpoint`.
pub fn content_type(endpoint: Endpoint, stream: bool) -> HeaderValue {
    match (endpoint, stream) {
        (Endpoint::OllamaChat | Endpoint::OllamaGenerate, true) => HeaderValue::from_static("application/x-ndjson"),
        (_, true) => HeaderValue::from_static("text/event-stream"),
        (_, false) => HeaderValue::from_static("application/json"),
    }
}
