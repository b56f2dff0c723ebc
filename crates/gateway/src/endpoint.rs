//! The client-facing endpoints the gateway serves: which API a path belongs to, and the label
//! it carries in metrics. The bottom of the pipeline: everything may name an endpoint.

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
    Other,
}

impl Endpoint {
    pub const ALL: [Endpoint; 13] = [
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
        Endpoint::Other,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions => "chat_completions",
            Endpoint::Completions => "completions",
            Endpoint::Embeddings => "embeddings",
            Endpoint::Models => "models",
            Endpoint::Responses => "responses",
            Endpoint::Messages => "messages",
            Endpoint::CountTokens => "count_tokens",
            Endpoint::OllamaChat => "ollama_chat",
            Endpoint::OllamaGenerate => "ollama_generate",
            Endpoint::OllamaEmbed => "ollama_embed",
            Endpoint::GeminiGenerate => "gemini_generate",
            Endpoint::GeminiStream => "gemini_stream",
            Endpoint::Other => "other",
        }
    }

    /// The endpoint a request path names. `/v1/...` and the bare paths some clients build from a
    /// base URL without `/v1` are the same endpoint; the caller strips `/v1`.
    pub fn from_path(path: &str) -> Endpoint {
        match path {
            "/chat/completions" => Endpoint::ChatCompletions,
            "/completions" => Endpoint::Completions,
            "/embeddings" => Endpoint::Embeddings,
            "/models" => Endpoint::Models,
            "/responses" => Endpoint::Responses,
            "/messages" => Endpoint::Messages,
            "/messages/count_tokens" => Endpoint::CountTokens,
            "/api/chat" => Endpoint::OllamaChat,
            "/api/generate" => Endpoint::OllamaGenerate,
            "/api/embed" => Endpoint::OllamaEmbed,
            _ => match Endpoint::gemini_model(path) {
                Some((_, true)) => Endpoint::GeminiStream,
                Some((_, false)) => Endpoint::GeminiGenerate,
                None => Endpoint::Other,
            },
        }
    }

    /// The model a Gemini path names (`/v1beta/models/{model}:generateContent`, or
    /// `:streamGenerateContent`; `/v1/models/...` as given without `/v1`), and whether it streams.
    pub fn gemini_model(path: &str) -> Option<(&str, bool)> {
        let rest = ["/v1beta/models/", "/v1/models/", "/models/"].iter().find_map(|p| path.strip_prefix(p))?;
        // The method follows the last colon: model ids may hold colons (`...-v1:0` on Bedrock).
        let (model, method) = rest.rsplit_once(':')?;
        let stream = match method {
            "generateContent" => false,
            "streamGenerateContent" => true,
            _ => return None,
        };
        (!model.is_empty() && !model.contains('/')).then_some((model, stream))
    }

    /// The route as clients write it (`/v1/chat/completions`), for span names; None for `Other`.
    pub fn route(self) -> Option<&'static str> {
        Some(match self {
            Endpoint::ChatCompletions => "/v1/chat/completions",
            Endpoint::Completions => "/v1/completions",
            Endpoint::Embeddings => "/v1/embeddings",
            Endpoint::Models => "/v1/models",
            Endpoint::Responses => "/v1/responses",
            Endpoint::Messages => "/v1/messages",
            Endpoint::CountTokens => "/v1/messages/count_tokens",
            Endpoint::OllamaChat => "/api/chat",
            Endpoint::OllamaGenerate => "/api/generate",
            Endpoint::OllamaEmbed => "/api/embed",
            Endpoint::GeminiGenerate => "/v1beta/models/{model}:generateContent",
            Endpoint::GeminiStream => "/v1beta/models/{model}:streamGenerateContent",
            Endpoint::Other => return None,
        })
    }

    /// `gen_ai.operation.name` of a request here, per the GenAI semantic conventions.
    pub fn operation(self) -> &'static str {
        match self {
            Endpoint::Completions | Endpoint::OllamaGenerate => "text_completion",
            Endpoint::Embeddings | Endpoint::OllamaEmbed => "embeddings",
            _ => "chat",
        }
    }

    /// Whether requests here are forwarded to a backend (a POST with a `model`).
    pub fn is_proxied(self) -> bool {
        !matches!(self, Endpoint::Models | Endpoint::Other)
    }
}
