//! Whole (non-streamed) answers: a backend's response body, or its error body, re-rendered in
//! the client's API.

use switchyard_protocol::chat::{ApiError, ChatResponse, ResponseContext, TranslateError, Usage};
use switchyard_protocol::embed::EmbedResponse;
use switchyard_protocol::{anthropic, bedrock, gemini, ollama, openai_chat, openai_embeddings};

use super::{client_api, encode_error, Decoded, Wire};
use crate::endpoint::Endpoint;

/// The client-shaped body of a successful backend answer, and the usage it reported.
pub fn translate_response(
    endpoint: Endpoint,
    wire: Wire,
    body: &[u8],
    context: &ResponseContext,
    request: &Decoded,
) -> Result<(Vec<u8>, Usage), TranslateError> {
    if matches!(wire, Wire::OpenAiEmbeddings | Wire::OllamaEmbed) {
        let response: EmbedResponse = match wire {
            Wire::OpenAiEmbeddings => openai_embeddings::decode_response(body)?,
            _ => ollama::decode_embed_response(body)?,
        };
        let usage = Usage::new(response.prompt_tokens, 0);
        let out = match endpoint {
            Endpoint::OllamaEmbed => ollama::encode_embed_response(&response)?,
            _ => openai_embeddings::encode_response(&response, request.base64_embeddings())?,
        };
        return Ok((out, usage));
    }
    let response: ChatResponse = match wire {
        Wire::OpenAiChat => openai_chat::decode_response(body, context)?,
        Wire::Anthropic => anthropic::decode_response(body, context)?,
        Wire::OllamaChat | Wire::OllamaGenerate => ollama::decode_response(body, context)?,
        Wire::Gemini => gemini::decode_response(body, context)?,
        Wire::Bedrock => bedrock::decode_response(body, context)?,
        _ => return Err(TranslateError::Invalid("no translation for this answer".to_owned())),
    };
    let out = super::replay::render_whole(endpoint, &response, request)?;
    Ok((out, response.usage))
}

/// A backend's error answer (any API's shape, or plain text) in the client's shape.
pub fn translate_error(endpoint: Endpoint, status: u16, body: &[u8]) -> Vec<u8> {
    encode_error(client_api(endpoint), &ApiError::from_upstream(status, body))
}
