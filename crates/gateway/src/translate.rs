//! Which API each backend is spoken to for each inbound endpoint (`plan`), and translation of
//! requests (`request.rs`), whole responses (`response.rs`) and streams (`stream.rs`) when the
//! client's API and the backend's differ. Same API on both sides is passed through untouched.

pub mod replay;
mod request;
mod response;
mod stream;

pub use request::Decoded;
pub use response::{translate_error, translate_response};
pub use stream::{error_event as stream_error_event, read_emitted, Emitted, StreamTranslator};

use switchyard_protocol::chat::{Api, ApiError};
use switchyard_protocol::{anthropic, gemini, ollama, openai_chat};

use crate::config::BackendKind;
use crate::endpoint::Endpoint;

/// An API as a backend is spoken to: one request/response shape on one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    OpenAiChat,
    OpenAiCompletions,
    OpenAiEmbeddings,
    Anthropic,
    AnthropicCountTokens,
    OllamaChat,
    OllamaGenerate,
    OllamaEmbed,
    /// Gemini's `generateContent` (`streamGenerateContent?alt=sse` for streams); the URL names
    /// the model (`Backend::target_for`).
    Gemini,
    /// Bedrock's `Converse` (`ConverseStream` for streams); the URL names the model
    /// (`Backend::target_for`).
    Bedrock,
    /// Gemini's `countTokens`; the URL names the model.
    GeminiCountTokens,
    /// Endpoints OpenAI-compatible servers (vLLM, llama.cpp, SGLang, Infinity, TEI) serve and
    /// other kinds do not: passed through as they are.
    Rerank,
    Score,
    Moderations,
    ImagesGenerations,
    ImagesEdits,
    Tokenize,
    Detokenize,
    AudioTranscriptions,
    AudioTranslations,
    AudioSpeech,
    /// The realtime API's WebSocket (`ws(s)://…/v1/realtime`).
    Realtime,
}

impl Wire {
    pub const ALL: [Wire; 22] = [
        Wire::OpenAiChat,
        Wire::OpenAiCompletions,
        Wire::OpenAiEmbeddings,
        Wire::Anthropic,
        Wire::AnthropicCountTokens,
        Wire::OllamaChat,
        Wire::OllamaGenerate,
        Wire::OllamaEmbed,
        Wire::Gemini,
        Wire::Bedrock,
        Wire::GeminiCountTokens,
        Wire::Rerank,
        Wire::Score,
        Wire::Moderations,
        Wire::ImagesGenerations,
        Wire::ImagesEdits,
        Wire::Tokenize,
        Wire::Detokenize,
        Wire::AudioTranscriptions,
        Wire::AudioTranslations,
        Wire::AudioSpeech,
        Wire::Realtime,
    ];

    /// Path under the backend's base URL.
    pub fn path(self) -> &'static str {
        match self {
            Wire::OpenAiChat => "/v1/chat/completions",
            Wire::OpenAiCompletions => "/v1/completions",
            Wire::OpenAiEmbeddings => "/v1/embeddings",
            Wire::Anthropic => "/v1/messages",
            Wire::AnthropicCountTokens => "/v1/messages/count_tokens",
            Wire::OllamaChat => "/api/chat",
            Wire::OllamaGenerate => "/api/generate",
            Wire::OllamaEmbed => "/api/embed",
            Wire::Gemini | Wire::GeminiCountTokens => "/v1beta/models",
            Wire::Bedrock => "/model",
            Wire::Rerank => "/v1/rerank",
            Wire::Score => "/v1/score",
            Wire::Moderations => "/v1/moderations",
            Wire::ImagesGenerations => "/v1/images/generations",
            Wire::ImagesEdits => "/v1/images/edits",
            Wire::Tokenize => "/tokenize",
            Wire::Detokenize => "/detokenize",
            Wire::AudioTranscriptions => "/v1/audio/transcriptions",
            Wire::AudioTranslations => "/v1/audio/translations",
            Wire::AudioSpeech => "/v1/audio/speech",
            Wire::Realtime => "/v1/realtime",
        }
    }

    /// Whether `kind` of backend speaks this wire.
    pub fn spoken_by(self, kind: BackendKind) -> bool {
        match kind {
            BackendKind::OpenAi => matches!(
                self,
                Wire::OpenAiChat
                    | Wire::OpenAiCompletions
                    | Wire::OpenAiEmbeddings
                    | Wire::Rerank
                    | Wire::Score
                    | Wire::Moderations
                    | Wire::ImagesGenerations
                    | Wire::ImagesEdits
                    | Wire::Tokenize
                    | Wire::Detokenize
                    | Wire::AudioTranscriptions
                    | Wire::AudioTranslations
                    | Wire::AudioSpeech
                    | Wire::Realtime
            ),
            BackendKind::Azure => matches!(
                self,
                Wire::OpenAiChat
                    | Wire::OpenAiCompletions
                    | Wire::OpenAiEmbeddings
                    | Wire::Moderations
                    | Wire::ImagesGenerations
                    | Wire::ImagesEdits
                    | Wire::AudioTranscriptions
                    | Wire::AudioTranslations
                    | Wire::AudioSpeech
            ),
            BackendKind::Gemini => matches!(self, Wire::Gemini | Wire::GeminiCountTokens),
            BackendKind::Bedrock => self == Wire::Bedrock,
            // Ollama serves its native API and an OpenAI-compatible one under /v1 (chat,
            // completions, embeddings).
            BackendKind::Ollama => matches!(
                self,
                Wire::OpenAiChat
                    | Wire::OpenAiCompletions
                    | Wire::OpenAiEmbeddings
                    | Wire::OllamaChat
                    | Wire::OllamaGenerate
                    | Wire::OllamaEmbed
            ),
            BackendKind::Anthropic => matches!(self, Wire::Anthropic | Wire::AnthropicCountTokens),
        }
    }

    /// The wire a client of `endpoint` speaks (Responses has none: no backend kind serves it
    /// natively here, so it is always translated).
    pub fn of(endpoint: Endpoint) -> Option<Wire> {
        Some(match endpoint {
            Endpoint::ChatCompletions => Wire::OpenAiChat,
            Endpoint::Completions => Wire::OpenAiCompletions,
            Endpoint::Embeddings => Wire::OpenAiEmbeddings,
            Endpoint::Messages => Wire::Anthropic,
            Endpoint::CountTokens => Wire::AnthropicCountTokens,
            Endpoint::OllamaChat => Wire::OllamaChat,
            Endpoint::OllamaGenerate => Wire::OllamaGenerate,
            Endpoint::OllamaEmbed => Wire::OllamaEmbed,
            Endpoint::GeminiGenerate | Endpoint::GeminiStream => Wire::Gemini,
            Endpoint::GeminiCountTokens => Wire::GeminiCountTokens,
            Endpoint::Rerank => Wire::Rerank,
            Endpoint::Score => Wire::Score,
            Endpoint::Moderations => Wire::Moderations,
            Endpoint::ImagesGenerations => Wire::ImagesGenerations,
            Endpoint::ImagesEdits => Wire::ImagesEdits,
            Endpoint::Tokenize => Wire::Tokenize,
            Endpoint::Detokenize => Wire::Detokenize,
            Endpoint::AudioTranscriptions => Wire::AudioTranscriptions,
            Endpoint::AudioTranslations => Wire::AudioTranslations,
            Endpoint::AudioSpeech => Wire::AudioSpeech,
            Endpoint::Realtime => Wire::Realtime,
            Endpoint::Responses | Endpoint::Models | Endpoint::Passthrough | Endpoint::Other => return None,
        })
    }
}

/// How one request reaches one backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Same API: the client's bytes go as they are.
    Pass(Wire),
    /// Decode the client's request, encode it for this wire, translate the answer back.
    Translate(Wire),
    /// Answered by the gateway itself (token counting on a backend that cannot count).
    Local,
    /// This backend cannot serve the endpoint at all (e.g. embeddings on Anthropic).
    Unsupported(&'static str),
}

pub fn plan(endpoint: Endpoint, kind: BackendKind) -> Plan {
    if let Some(wire) = Wire::of(endpoint).filter(|w| w.spoken_by(kind)) {
        return Plan::Pass(wire);
    }
    let chat = match kind {
        BackendKind::Anthropic => Wire::Anthropic,
        BackendKind::Gemini => Wire::Gemini,
        BackendKind::Bedrock => Wire::Bedrock,
        _ => Wire::OpenAiChat,
    };
    match endpoint {
        Endpoint::ChatCompletions
        | Endpoint::Responses
        | Endpoint::Messages
        | Endpoint::OllamaChat
        | Endpoint::OllamaGenerate
        | Endpoint::GeminiGenerate
        | Endpoint::GeminiStream => Plan::Translate(chat),
        Endpoint::CountTokens | Endpoint::GeminiCountTokens => Plan::Local,
        Endpoint::Embeddings | Endpoint::OllamaEmbed
            if !matches!(kind, BackendKind::Anthropic | BackendKind::Gemini | BackendKind::Bedrock) =>
        {
            Plan::Translate(Wire::OpenAiEmbeddings)
        }
        Endpoint::Embeddings | Endpoint::OllamaEmbed => Plan::Unsupported("embeddings"),
        Endpoint::Completions => Plan::Unsupported("legacy text completions"),
        Endpoint::Rerank
        | Endpoint::Score
        | Endpoint::Moderations
        | Endpoint::ImagesGenerations
        | Endpoint::ImagesEdits
        | Endpoint::Tokenize
        | Endpoint::Detokenize
        | Endpoint::AudioTranscriptions
        | Endpoint::AudioTranslations
        | Endpoint::AudioSpeech
        | Endpoint::Realtime => Plan::Unsupported(endpoint.as_str()),
        Endpoint::Models | Endpoint::Passthrough | Endpoint::Other => Plan::Unsupported("this endpoint"),
    }
}

/// The chat API a client of `endpoint` speaks, for rendering errors and streams in its shape.
pub fn client_api(endpoint: Endpoint) -> Api {
    match endpoint {
        Endpoint::Responses => Api::Responses,
        Endpoint::Messages | Endpoint::CountTokens => Api::Anthropic,
        Endpoint::OllamaChat | Endpoint::OllamaGenerate | Endpoint::OllamaEmbed => Api::Ollama,
        Endpoint::GeminiGenerate | Endpoint::GeminiStream | Endpoint::GeminiCountTokens => Api::Gemini,
        _ => Api::OpenAiChat,
    }
}

/// An error body in the shape of `api`.
pub fn encode_error(api: Api, error: &ApiError) -> Vec<u8> {
    match api {
        Api::OpenAiChat | Api::Responses => openai_chat::encode_error(error),
        Api::Anthropic => anthropic::encode_error(error),
        Api::Ollama => ollama::encode_error(error),
        Api::Gemini => gemini::encode_error(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_api_passes_through_and_others_translate() {
        use BackendKind::*;
        assert_eq!(plan(Endpoint::ChatCompletions, OpenAi), Plan::Pass(Wire::OpenAiChat));
        assert_eq!(plan(Endpoint::ChatCompletions, Ollama), Plan::Pass(Wire::OpenAiChat));
        assert_eq!(plan(Endpoint::ChatCompletions, Anthropic), Plan::Translate(Wire::Anthropic));
        assert_eq!(plan(Endpoint::Messages, Anthropic), Plan::Pass(Wire::Anthropic));
        assert_eq!(plan(Endpoint::Messages, Ollama), Plan::Translate(Wire::OpenAiChat));
        assert_eq!(plan(Endpoint::OllamaChat, Ollama), Plan::Pass(Wire::OllamaChat));
        assert_eq!(plan(Endpoint::OllamaGenerate, OpenAi), Plan::Translate(Wire::OpenAiChat));
        assert_eq!(plan(Endpoint::Responses, OpenAi), Plan::Translate(Wire::OpenAiChat));
        assert_eq!(plan(Endpoint::Responses, Anthropic), Plan::Translate(Wire::Anthropic));
        assert_eq!(plan(Endpoint::CountTokens, Anthropic), Plan::Pass(Wire::AnthropicCountTokens));
        assert_eq!(plan(Endpoint::CountTokens, OpenAi), Plan::Local);
        assert_eq!(plan(Endpoint::OllamaEmbed, OpenAi), Plan::Translate(Wire::OpenAiEmbeddings));
        assert!(matches!(plan(Endpoint::Embeddings, Anthropic), Plan::Unsupported(_)));
        assert!(matches!(plan(Endpoint::Completions, Anthropic), Plan::Unsupported(_)));
        assert_eq!(plan(Endpoint::ChatCompletions, Gemini), Plan::Translate(Wire::Gemini));
        assert_eq!(plan(Endpoint::OllamaChat, Gemini), Plan::Translate(Wire::Gemini));
        assert!(matches!(plan(Endpoint::Embeddings, Gemini), Plan::Unsupported(_)));
    }
}
