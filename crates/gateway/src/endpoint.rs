//! The client-facing endpoints the gateway serves, as data: each is one row of `TABLE` — its
//! path, metrics label, span route, GenAI operation, where its model is named, and what the
//! pipeline does for it (usage asked for on streams, charged or not, resumable, cacheable). The
//! request path reads the row; it never matches on the endpoint itself. Adding an endpoint is a
//! variant, a row, its wire to backends (`translate::Wire`), and (where the answer reports
//! usage in a new spelling) its extraction in `usage/extract.rs`. The bottom of the pipeline: everything may name an endpoint.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    ChatCompletions,
    Completions,
    Embeddings,
    Models,
    /// OpenAI Responses (`POST /v1/responses`).
    Responses,
    /// Anthropic Messages (`POST /v1/messages`).
    Messages,
    /// Anthropic `POST /v1/messages/count_tokens`.
    CountTokens,
    /// Ollama `POST /api/chat`, `/api/generate`, `/api/embed`.
    OllamaChat,
    OllamaGenerate,
    OllamaEmbed,
    /// Gemini `POST /v1beta/models/{model}:generateContent` (the model is in the path).
    GeminiGenerate,
    /// Gemini `POST /v1beta/models/{model}:streamGenerateContent` (`?alt=sse`).
    GeminiStream,
    /// Gemini `POST /v1beta/models/{model}:countTokens`.
    GeminiCountTokens,
    /// `POST /v1/rerank` (Cohere's and Jina's shape, as vLLM, Infinity and TEI serve it; also
    /// `/v2/rerank`).
    Rerank,
    /// vLLM's `POST /v1/score`.
    Score,
    /// `POST /v1/moderations`.
    Moderations,
    /// `POST /v1/images/generations`.
    ImagesGenerations,
    /// `POST /v1/images/edits`: a multipart upload (the images, a mask), streamed.
    ImagesEdits,
    /// vLLM's and llama.cpp's `POST /tokenize` and `/detokenize`.
    Tokenize,
    Detokenize,
    /// `POST /v1/audio/transcriptions` and `/v1/audio/translations`: multipart uploads, streamed.
    AudioTranscriptions,
    AudioTranslations,
    /// `POST /v1/audio/speech`: the audio streams back.
    AudioSpeech,
    /// `/passthrough/{backend}/{path}`: any request, to one named backend.
    Passthrough,
    /// `GET /v1/realtime?model=…`: a WebSocket session relayed to a realtime backend.
    Realtime,
    Other,
}

/// What a request uses besides tokens, read from its answer and priced by `prices.MODEL`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Units {
    /// Tokens only.
    Tokens,
    /// Images generated (`data`'s length).
    Images,
    /// Search units, where the backend bills them (Cohere's `meta.billed_units`).
    SearchUnits,
    /// Seconds of audio uploaded (the answer's `duration`, else the upload's WAV header).
    AudioSeconds,
    /// Characters of text spoken.
    Characters,
}

/// Where a request names its model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelIn {
    /// The JSON body's `model`.
    Body,
    /// The path (`/v1beta/models/{model}:generateContent`).
    Path,
    /// A multipart form's `model` field (an upload, streamed: `http/multipart.rs`).
    Form,
    /// The query string's `model` (a WebSocket session: `proxy/realtime.rs`).
    Query,
    /// Not a model request.
    Nowhere,
}

/// One endpoint's row: what the pipeline needs to know about it.
#[derive(Debug)]
pub struct Spec {
    pub endpoint: Endpoint,
    /// The path that names it, after `/v1` is stripped (None: matched by its model path).
    pub path: Option<&'static str>,
    /// Its label in metrics and the usage log.
    pub label: &'static str,
    /// The route as clients write it, for span names.
    pub route: Option<&'static str>,
    /// `gen_ai.operation.name`, per the GenAI semantic conventions.
    pub operation: &'static str,
    pub model_in: ModelIn,
    /// A stream's usage is asked for upstream (`stream_options.include_usage`) and the extra
    /// chunk hidden from a client that did not ask for it.
    pub stream_usage: bool,
    /// Requests are billed (token counting is not).
    pub charged: bool,
    /// A broken stream can be carried on by another backend.
    pub resumable: bool,
    /// Answers may be kept in the response cache.
    pub cacheable: bool,
    /// What its answers are priced by besides tokens.
    pub units: Units,
    /// What a backend must serve to take it (`backends[].capabilities`, `/v1/models`).
    pub capability: &'static str,
}

/// What a backend may serve (`backends[].capabilities`): every endpoint needs one of these.
pub const CAPABILITIES: [&str; 9] =
    ["chat", "embeddings", "rerank", "moderations", "images", "audio", "tokenize", "realtime", "none"];

const fn row(endpoint: Endpoint, path: &'static str, label: &'static str, route: &'static str) -> Spec {
    Spec {
        endpoint,
        path: Some(path),
        label,
        route: Some(route),
        operation: "chat",
        model_in: ModelIn::Body,
        stream_usage: false,
        charged: true,
        resumable: true,
        cacheable: true,
        units: Units::Tokens,
        capability: "chat",
    }
}

/// A row for an endpoint passed through as it is to the backends that serve it (no streams to
/// resume, answers not cached).
const fn plain(
    endpoint: Endpoint,
    path: &'static str,
    label: &'static str,
    operation: &'static str,
    capability: &'static str,
) -> Spec {
    Spec { operation, resumable: false, cacheable: false, capability, ..row(endpoint, path, label, "") }
}

/// Every endpoint, in `Endpoint`'s order (a test checks it).
pub static TABLE: [Spec; Endpoint::ALL.len()] = [
    Spec {
        stream_usage: true,
        ..row(Endpoint::ChatCompletions, "/chat/completions", "chat_completions", "/v1/chat/completions")
    },
    Spec {
        operation: "text_completion",
        stream_usage: true,
        resumable: false,
        ..row(Endpoint::Completions, "/completions", "completions", "/v1/completions")
    },
    Spec {
        operation: "embeddings",
        resumable: false,
        capability: "embeddings",
        ..row(Endpoint::Embeddings, "/embeddings", "embeddings", "/v1/embeddings")
    },
    Spec {
        model_in: ModelIn::Nowhere,
        resumable: false,
        cacheable: false,
        capability: "none",
        ..row(Endpoint::Models, "/models", "models", "/v1/models")
    },
    row(Endpoint::Responses, "/responses", "responses", "/v1/responses"),
    row(Endpoint::Messages, "/messages", "messages", "/v1/messages"),
    Spec {
        charged: false,
        resumable: false,
        cacheable: false,
        ..row(Endpoint::CountTokens, "/messages/count_tokens", "count_tokens", "/v1/messages/count_tokens")
    },
    row(Endpoint::OllamaChat, "/api/chat", "ollama_chat", "/api/chat"),
    Spec {
        operation: "text_completion",
        ..row(Endpoint::OllamaGenerate, "/api/generate", "ollama_generate", "/api/generate")
    },
    Spec {
        operation: "embeddings",
        resumable: false,
        capability: "embeddings",
        ..row(Endpoint::OllamaEmbed, "/api/embed", "ollama_embed", "/api/embed")
    },
    Spec {
        path: None,
        model_in: ModelIn::Path,
        resumable: false,
        ..row(Endpoint::GeminiGenerate, "", "gemini_generate", "/v1beta/models/{model}:generateContent")
    },
    Spec {
        path: None,
        model_in: ModelIn::Path,
        resumable: false,
        ..row(Endpoint::GeminiStream, "", "gemini_stream", "/v1beta/models/{model}:streamGenerateContent")
    },
    Spec {
        path: None,
        model_in: ModelIn::Path,
        charged: false,
        resumable: false,
        cacheable: false,
        ..row(Endpoint::GeminiCountTokens, "", "gemini_count_tokens", "/v1beta/models/{model}:countTokens")
    },
    Spec {
        route: Some("/v1/rerank"),
        units: Units::SearchUnits,
        ..plain(Endpoint::Rerank, "/rerank", "rerank", "rerank", "rerank")
    },
    Spec { route: Some("/v1/score"), ..plain(Endpoint::Score, "/score", "score", "score", "rerank") },
    Spec {
        route: Some("/v1/moderations"),
        ..plain(Endpoint::Moderations, "/moderations", "moderations", "moderation", "moderations")
    },
    Spec {
        route: Some("/v1/images/generations"),
        units: Units::Images,
        ..plain(Endpoint::ImagesGenerations, "/images/generations", "images_generations", "image_generation", "images")
    },
    Spec {
        route: Some("/v1/images/edits"),
        model_in: ModelIn::Form,
        units: Units::Images,
        ..plain(Endpoint::ImagesEdits, "/images/edits", "images_edits", "image_edit", "images")
    },
    Spec {
        route: Some("/tokenize"),
        charged: false,
        ..plain(Endpoint::Tokenize, "/tokenize", "tokenize", "tokenize", "tokenize")
    },
    Spec {
        route: Some("/detokenize"),
        charged: false,
        ..plain(Endpoint::Detokenize, "/detokenize", "detokenize", "detokenize", "tokenize")
    },
    Spec {
        route: Some("/v1/audio/transcriptions"),
        model_in: ModelIn::Form,
        units: Units::AudioSeconds,
        ..plain(
            Endpoint::AudioTranscriptions,
            "/audio/transcriptions",
            "audio_transcriptions",
            "transcription",
            "audio",
        )
    },
    Spec {
        route: Some("/v1/audio/translations"),
        model_in: ModelIn::Form,
        units: Units::AudioSeconds,
        ..plain(Endpoint::AudioTranslations, "/audio/translations", "audio_translations", "translation", "audio")
    },
    Spec {
        route: Some("/v1/audio/speech"),
        units: Units::Characters,
        ..plain(Endpoint::AudioSpeech, "/audio/speech", "audio_speech", "speech", "audio")
    },
    Spec {
        path: None,
        route: Some("/passthrough/{backend}/{path}"),
        model_in: ModelIn::Nowhere,
        resumable: false,
        cacheable: false,
        capability: "none",
        ..row(Endpoint::Passthrough, "", "passthrough", "")
    },
    Spec {
        route: Some("/v1/realtime"),
        model_in: ModelIn::Query,
        ..plain(Endpoint::Realtime, "/realtime", "realtime", "realtime", "realtime")
    },
    Spec {
        path: None,
        route: None,
        model_in: ModelIn::Nowhere,
        resumable: false,
        cacheable: false,
        capability: "none",
        ..row(Endpoint::Other, "", "other", "")
    },
];

impl Endpoint {
    pub const ALL: [Endpoint; 26] = [
        Endpoint::ChatCompletions,
        Endpoint::Completions,
        Endpoint::Embeddings,
        Endpoint::Models,
        Endpoint::Responses,
        Endpoint::Messages,
        Endpoint::CountTokens,
        Endpoint::OllamaChat,
        Endpoint::OllamaGenerate,
        Endpoint::OllamaEmbed,
        Endpoint::GeminiGenerate,
        Endpoint::GeminiStream,
        Endpoint::GeminiCountTokens,
        Endpoint::Rerank,
        Endpoint::Score,
        Endpoint::Moderations,
        Endpoint::ImagesGenerations,
        Endpoint::ImagesEdits,
        Endpoint::Tokenize,
        Endpoint::Detokenize,
        Endpoint::AudioTranscriptions,
        Endpoint::AudioTranslations,
        Endpoint::AudioSpeech,
        Endpoint::Passthrough,
        Endpoint::Realtime,
        Endpoint::Other,
    ];

    /// This endpoint's row of `TABLE`.
    pub fn spec(self) -> &'static Spec {
        &TABLE[self as usize]
    }

    pub fn as_str(self) -> &'static str {
        self.spec().label
    }

    /// The endpoint a request path names. `/v1/...` and the bare paths some clients build from a
    /// base URL without `/v1` are the same endpoint; the caller strips `/v1`.
    pub fn from_path(path: &str) -> Endpoint {
        if let Some(spec) = TABLE.iter().find(|s| s.path == Some(path)) {
            return spec.endpoint;
        }
        // Cohere's v2 client names its version in the path.
        if path == "/v2/rerank" {
            return Endpoint::Rerank;
        }
        if path.starts_with("/passthrough/") {
            return Endpoint::Passthrough;
        }
        Endpoint::gemini_model(path).map_or(Endpoint::Other, |(_, endpoint)| endpoint)
    }

    /// The model a Gemini path names (`/v1beta/models/{model}:generateContent`,
    /// `:streamGenerateContent` or `:countTokens`; `/v1/models/...` as given without `/v1`), and
    /// which endpoint its method is.
    pub fn gemini_model(path: &str) -> Option<(&str, Endpoint)> {
        let rest = ["/v1beta/models/", "/v1/models/", "/models/"].iter().find_map(|p| path.strip_prefix(p))?;
        // The method follows the last colon: model ids may hold colons (`...-v1:0` on Bedrock).
        let (model, method) = rest.rsplit_once(':')?;
        let endpoint = match method {
            "generateContent" => Endpoint::GeminiGenerate,
            "streamGenerateContent" => Endpoint::GeminiStream,
            "countTokens" => Endpoint::GeminiCountTokens,
            _ => return None,
        };
        (!model.is_empty() && !model.contains('/')).then_some((model, endpoint))
    }

    /// The route as clients write it (`/v1/chat/completions`), for span names; None for `Other`.
    pub fn route(self) -> Option<&'static str> {
        self.spec().route
    }

    /// `gen_ai.operation.name` of a request here, per the GenAI semantic conventions.
    pub fn operation(self) -> &'static str {
        self.spec().operation
    }

    /// Whether requests here are forwarded to a backend (a POST with a `model`).
    pub fn is_proxied(self) -> bool {
        !matches!(self.spec().model_in, ModelIn::Nowhere | ModelIn::Query)
    }

    /// Whether a backend may be asked for it (a POST's model, or a session's): what the catalogue lists.
    pub fn names_a_model(self) -> bool {
        self.spec().model_in != ModelIn::Nowhere
    }

    /// Whether requests here are multipart uploads, streamed rather than read whole.
    pub fn is_upload(self) -> bool {
        self.spec().model_in == ModelIn::Form
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_in_the_enums_order_and_paths_lead_back() {
        for (i, endpoint) in Endpoint::ALL.into_iter().enumerate() {
            assert_eq!(TABLE[i].endpoint, endpoint);
            if let Some(path) = TABLE[i].path {
                assert_eq!(Endpoint::from_path(path), endpoint);
            }
        }
        assert_eq!(Endpoint::from_path("/v1beta/models/g:streamGenerateContent"), Endpoint::GeminiStream);
        assert_eq!(Endpoint::from_path("/nope"), Endpoint::Other);
        assert_eq!(Endpoint::from_path("/v2/rerank"), Endpoint::Rerank);
        assert_eq!(Endpoint::from_path("/passthrough/b0/metrics"), Endpoint::Passthrough);
    }
}
