//! The internal model of a chat exchange (request, response, stream event) that every API's
//! translation maps to and from, so a new API needs one pair of mappings, not one per other API.

use std::fmt;

use serde::Serialize;
use serde_json::value::RawValue;

pub use crate::error::{ApiError, ErrorKind, TranslateError};

/// The APIs a chat exchange can be spoken in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Api {
    OpenAiChat,
    Responses,
    Anthropic,
    Ollama,
    Gemini,
}

impl Api {
    /// The name used in error messages.
    pub fn name(self) -> &'static str {
        match self {
            Api::OpenAiChat => "OpenAI Chat Completions",
            Api::Responses => "OpenAI Responses",
            Api::Anthropic => "Anthropic Messages",
            Api::Ollama => "Ollama",
            Api::Gemini => "Gemini",
        }
    }
}

/// JSON text kept exactly as received (a tool's schema, a tool call's arguments object), so what
/// the client wrote reaches the backend byte for byte, key order included.
#[derive(Clone)]
pub struct RawJson(Box<RawValue>);

impl RawJson {
    /// Checks that `text` is JSON and keeps it as is.
    pub fn parse(text: String) -> Result<Self, serde_json::Error> {
        RawValue::from_string(text).map(RawJson)
    }

    pub fn from_raw(raw: &RawValue) -> Self {
        RawJson(raw.to_owned())
    }

    pub fn as_str(&self) -> &str {
        self.0.get()
    }

    pub fn as_raw(&self) -> &RawValue {
        &self.0
    }
}

impl PartialEq for RawJson {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl fmt::Debug for RawJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for RawJson {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

/// A chat request in no particular API's shape.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChatRequest {
    pub model: String,
    /// The system prompt as the segments the client sent (Anthropic's text blocks, OpenAI's
    /// leading system/developer messages, Responses' `instructions`), in order.
    pub system: Vec<String>,
    pub messages: Vec<Message>,
    pub tools: Vec<Tool>,
    pub tool_choice: Option<ToolChoice>,
    /// `Some(false)` when the client asked for at most one tool call per turn.
    pub parallel_tool_calls: Option<bool>,
    pub response_format: Option<ResponseFormat>,
    /// Upper bound on generated tokens.
    pub max_tokens: Option<u64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<u64>,
    pub seed: Option<i64>,
    pub frequency_penalty: Option<f64>,
    pub presence_penalty: Option<f64>,
    pub stop: Vec<String>,
    pub stream: bool,
    /// The client asked for a usage report at the end of a stream (OpenAI's
    /// `stream_options.include_usage`; the other APIs always send one).
    pub include_usage: bool,
    /// An end-user id for abuse tracking (`user`, `metadata.user_id`, `safety_identifier`).
    pub user: Option<String>,
    /// Prompt-cache breakpoints the client set (Anthropic's `cache_control`), in prompt order.
    pub cache_points: Vec<CachePoint>,
    /// OpenAI's prompt-cache routing key and retention (`prompt_cache_key`,
    /// `prompt_cache_retention`), for the OpenAI APIs that take them.
    pub prompt_cache_key: Option<String>,
    pub prompt_cache_retention: Option<String>,
    /// Fields of the client's request that no field above models: harmless hints (features that
    /// change what a request means are refused when decoded instead). Only an encoder for the
    /// same API writes them back.
    pub extra: Extras,
}

/// A prompt-cache breakpoint: the prompt up to and including the block at `at` may be cached and
/// read back by later requests. Anthropic marks the block (`cache_control`), Bedrock's Converse
/// puts a `cachePoint` block after it; backends with no explicit breakpoints (OpenAI-compatible
/// servers, Gemini's implicit caching) cache prefixes by themselves, and their encoders leave
/// breakpoints out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachePoint {
    pub at: CacheAt,
    /// How long the cached prefix lives (`5m`, `1h`) where the client said.
    pub ttl: Option<String>,
}

/// Where a breakpoint is: after a system segment, a message's part, or a tool definition (indices
/// into `ChatRequest::system`, `messages[].content` and `tools`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheAt {
    System(usize),
    Part { message: usize, part: usize },
    Tool(usize),
}

impl ChatRequest {
    /// The breakpoint at `at`, if the client set one there.
    pub fn cache_point(&self, at: CacheAt) -> Option<&CachePoint> {
        self.cache_points.iter().find(|p| p.at == at)
    }
}

/// Request fields the internal model does not model, kept raw with the API they came from.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Extras {
    pub api: Option<Api>,
    pub fields: Vec<(String, RawJson)>,
}

impl Extras {
    pub(crate) fn new(api: Api) -> Self {
        Extras { api: Some(api), fields: Vec::new() }
    }

    /// The fields to write into a request for `api`: all of them if they came from it, else none.
    pub fn for_api(&self, api: Api) -> &[(String, RawJson)] {
        if self.api == Some(api) {
            &self.fields
        } else {
            &[]
        }
    }

    pub(crate) fn keep(&mut self, name: &str, raw: &RawValue) {
        self.fields.push((name.to_owned(), RawJson::from_raw(raw)));
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A system message after the conversation has begun (APIs that only have a top-level system
    /// prompt get it appended there).
    System,
    User,
    Assistant,
    /// Results of tool calls, and nothing else.
    Tool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub role: Role,
    pub content: Vec<Part>,
}

/// One piece of a message's or a response's content.
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    Text(String),
    Image(Image),
    ToolCall(ToolCall),
    ToolResult(ToolResult),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Image {
    Url(String),
    Base64 { media_type: String, data: String },
}

#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments object as JSON text, exactly as the model produced it.
    pub arguments: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    pub tool_call_id: String,
    pub content: String,
    pub is_error: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    pub name: String,
    pub description: Option<String>,
    /// JSON Schema of the arguments object.
    pub parameters: RawJson,
    pub strict: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    Auto,
    None,
    /// Some tool must be called (OpenAI's `required`, Anthropic's `any`).
    Required,
    /// This tool must be called.
    Tool(String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum ResponseFormat {
    /// Any JSON object.
    JsonObject,
    JsonSchema {
        name: Option<String>,
        schema: RawJson,
        strict: Option<bool>,
    },
}

/// A complete (non-streamed) chat response.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatResponse {
    pub id: String,
    pub model: String,
    /// Unix seconds.
    pub created: u64,
    /// Text and tool calls, in the order the model produced them.
    pub content: Vec<Part>,
    pub stop_reason: StopReason,
    /// The stop sequence that ended generation, when the backend said which.
    pub stop_sequence: Option<String>,
    pub usage: Usage,
}

impl ChatResponse {
    /// All text parts, concatenated (the way a stream of deltas concatenates them).
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(|part| match part {
                Part::Text(text) => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    pub fn tool_calls(&self) -> impl Iterator<Item = &ToolCall> {
        self.content.iter().filter_map(|part| match part {
            Part::ToolCall(call) => Some(call),
            _ => None,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    EndTurn,
    MaxTokens,
    StopSequence,
    ToolUse,
    ContentFilter,
    /// A reason only the source API has (Anthropic's `pause_turn`, Ollama's `unload`).
    Other(String),
}

impl StopReason {
    /// The reason for a response that ended with tool calls but was reported as a plain stop
    /// (Ollama and some OpenAI-compatible servers report it so).
    pub fn or_tool_use(self, has_tool_calls: bool) -> StopReason {
        if has_tool_calls && self == StopReason::EndTurn {
            StopReason::ToolUse
        } else {
            self
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// All prompt tokens, cached ones included.
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    /// How many of the prompt tokens were read from a prompt cache, when known.
    pub cached_prompt_tokens: Option<u64>,
    /// How many of the prompt tokens were written to a prompt cache (Anthropic's and Bedrock's
    /// cache writes, billed above the input price), when known.
    pub cache_write_tokens: Option<u64>,
}

impl Usage {
    pub fn new(prompt_tokens: u64, completion_tokens: u64) -> Self {
        Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
            cached_prompt_tokens: None,
            cache_write_tokens: None,
        }
    }
}

/// One event of a normalised response stream. `index` names a content block (a run of text or
/// one tool call) within the stream; sources number blocks their own way and may skip numbers,
/// so encoders number their output blocks themselves.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    Start {
        id: String,
        model: String,
        /// Unix seconds.
        created: u64,
    },
    TextDelta {
        index: u32,
        text: String,
    },
    ToolCallStart {
        index: u32,
        id: String,
        name: String,
    },
    /// The next piece of a tool call's arguments JSON; the pieces concatenate to the whole.
    ToolCallDelta {
        index: u32,
        arguments_fragment: String,
    },
    /// The block is complete (encoders also close a block when the next one starts).
    BlockStop {
        index: u32,
    },
    Stop {
        reason: StopReason,
        stop_sequence: Option<String>,
    },
    /// Final token counts (cumulative, not an increment).
    Usage(Usage),
    /// The backend reported an error mid-stream.
    Error(ApiError),
    /// The stream ended normally.
    Done,
}

/// Values a decoded response gets where its source API has none: a creation time (Anthropic,
/// Ollama), an id (Ollama responses and tool calls) and a model name (Bedrock).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResponseContext {
    /// Unix seconds, normally now.
    pub created: u64,
    /// Letters, digits, `-` and `_` only (Anthropic accepts no other characters in tool call ids).
    pub id: String,
    /// The model the request went to: what an answer names where the backend's names none
    /// (Bedrock never does; Gemini without `modelVersion`).
    pub model: String,
}

/// Turns a backend's stream bytes, as they arrive, into events.
pub trait StreamDecoder {
    /// Decodes every complete frame in `bytes` (frames may be split anywhere across calls).
    fn feed(&mut self, bytes: &[u8], events: &mut Vec<StreamEvent>) -> Result<(), TranslateError>;
    /// The input has ended: decodes a last frame left without its terminator.
    fn finish(&mut self, events: &mut Vec<StreamEvent>) -> Result<(), TranslateError>;
}

/// Turns events into a client's stream bytes.
pub trait StreamEncoder {
    fn encode(&mut self, event: &StreamEvent, out: &mut Vec<u8>);
    /// Writes whatever closes the stream if `Done` has not been encoded yet (after an `Error`,
    /// or when the backend's stream was cut), so the client sees a well-formed end.
    fn finish(&mut self, out: &mut Vec<u8>);
}
