//! The two error types of translation: `TranslateError` (a body could not be translated) and `ApiError`
//! (an error any API can render in its own shape, whichever API it came from).

use std::fmt;

/// Why a body could not be translated. Both variants are the client's (or, for a backend response,
/// the backend's) fault; `to_api_error` renders them as a 400 with a message that names the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TranslateError {
    /// The body is not what its API accepts: "`messages[0].role` must be one of ...".
    Invalid(String),
    /// A feature the other side's API cannot carry; translating it would silently change what the
    /// request means, so it is refused instead.
    Unsupported {
        feature: String,
        /// The API that cannot carry it, when known ("Anthropic Messages"); `None` when the internal
        /// model itself has no place for it, so no other API can receive it.
        api: Option<&'static str>,
    },
}

impl TranslateError {
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        TranslateError::Invalid(message.into())
    }

    /// A feature the internal model cannot carry (so it cannot reach a backend of another API).
    pub(crate) fn unsupported(feature: impl Into<String>) -> Self {
        TranslateError::Unsupported { feature: feature.into(), api: None }
    }

    /// A feature the named target API cannot carry.
    pub(crate) fn unsupported_by(feature: impl Into<String>, api: &'static str) -> Self {
        TranslateError::Unsupported { feature: feature.into(), api: Some(api) }
    }

    /// The error as a client sees it: an invalid-request error (HTTP 400).
    pub fn to_api_error(&self) -> ApiError {
        let code = match self {
            TranslateError::Invalid(_) => None,
            TranslateError::Unsupported { .. } => Some("unsupported_feature".to_owned()),
        };
        ApiError { code, ..ApiError::new(ErrorKind::InvalidRequest, self.to_string()) }
    }
}

impl fmt::Display for TranslateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TranslateError::Invalid(message) => f.write_str(message),
            TranslateError::Unsupported { feature, api: Some(api) } => {
                write!(f, "the {api} API cannot express {feature}")
            }
            TranslateError::Unsupported { feature, api: None } => {
                write!(f, "{feature} cannot be translated to another API")
            }
        }
    }
}

impl std::error::Error for TranslateError {}

/// What went wrong, in the categories every API distinguishes. Each API names them its own way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    InvalidRequest,
    Authentication,
    PermissionDenied,
    NotFound,
    RequestTooLarge,
    RateLimited,
    /// The backend is up but too busy (Anthropic's 529).
    Overloaded,
    Timeout,
    Server,
}

impl ErrorKind {
    /// The HTTP status this kind of error is served with.
    pub fn status(self) -> u16 {
        match self {
            ErrorKind::InvalidRequest => 400,
            ErrorKind::Authentication => 401,
            ErrorKind::PermissionDenied => 403,
            ErrorKind::NotFound => 404,
            ErrorKind::RequestTooLarge => 413,
            ErrorKind::RateLimited => 429,
            ErrorKind::Overloaded => 529,
            ErrorKind::Timeout => 504,
            ErrorKind::Server => 500,
        }
    }

    /// The kind an HTTP status stands for, for error bodies that do not name one (Ollama's).
    pub fn from_status(status: u16) -> Self {
        match status {
            401 => ErrorKind::Authentication,
            403 => ErrorKind::PermissionDenied,
            404 => ErrorKind::NotFound,
            413 => ErrorKind::RequestTooLarge,
            429 => ErrorKind::RateLimited,
            503 | 529 => ErrorKind::Overloaded,
            408 | 504 => ErrorKind::Timeout,
            400..=499 => ErrorKind::InvalidRequest,
            _ => ErrorKind::Server,
        }
    }

    /// The kind an error `type` names, in any API's spelling (`rate_limit_error`,
    /// `overloaded_error`, vLLM's `NotFoundError`, ...).
    pub fn from_type_name(name: &str) -> Self {
        let name = name.to_ascii_lowercase();
        let has = |word: &str| name.contains(word);
        if has("auth") {
            ErrorKind::Authentication
        } else if has("permission") || has("forbidden") {
            ErrorKind::PermissionDenied
        } else if has("not_found") || has("notfound") {
            ErrorKind::NotFound
        } else if has("too_large") {
            ErrorKind::RequestTooLarge
        } else if has("rate_limit") || has("ratelimit") || has("quota") {
            ErrorKind::RateLimited
        } else if has("overloaded") {
            ErrorKind::Overloaded
        } else if has("timeout") {
            ErrorKind::Timeout
        } else if has("server") || has("api_error") || has("internal") {
            ErrorKind::Server
        } else {
            ErrorKind::InvalidRequest
        }
    }
}

/// An error in no particular API's shape: decoded from one backend's body, rendered in the client's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub kind: ErrorKind,
    pub message: String,
    /// The request field at fault, when the source said (OpenAI's `param`).
    pub param: Option<String>,
    /// A machine-readable code, when the source had one (OpenAI's `code`).
    pub code: Option<String>,
    /// What a program reads beside the code, as name/value pairs (a guard's block: the guard and
    /// the kind it found). Shapes with room for it carry it (Gemini's `google.rpc.ErrorInfo`
    /// metadata); the rest keep the code alone.
    pub metadata: Vec<(String, String)>,
}

/// The code of a request or answer a guardrail refused, in every API's shape.
pub const CONTENT_BLOCKED: &str = "content_blocked";

impl ApiError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ApiError { kind, message: message.into(), param: None, code: None, metadata: Vec::new() }
    }

    /// The error a backend's body means: its decoded shape if it has one of the known shapes,
    /// else the status's kind with the body's text (cut short) as the message.
    pub fn from_upstream(status: u16, body: &[u8]) -> Self {
        if let Some(mut decoded) = crate::openai_chat::decode_error(body)
            .or_else(|| crate::anthropic::decode_error(body))
            .or_else(|| crate::ollama::decode_error(body))
            .or_else(|| crate::gemini::decode_error(body))
            .or_else(|| crate::bedrock::decode_error(body))
        {
            // A body's own type is only a hint; the status is what the backend meant.
            if status >= 400 && decoded.kind.status() != status {
                decoded.kind = ErrorKind::from_status(status);
            }
            return decoded;
        }
        let text = String::from_utf8_lossy(body);
        let text = text.trim();
        let message = if text.is_empty() {
            format!("the backend answered with HTTP status {status}")
        } else {
            let cut: String = text.chars().take(500).collect();
            format!("the backend answered with HTTP status {status}: {cut}")
        };
        ApiError::new(ErrorKind::from_status(status), message)
    }
}

impl From<&TranslateError> for ApiError {
    fn from(error: &TranslateError) -> Self {
        error.to_api_error()
    }
}
