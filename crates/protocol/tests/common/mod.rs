//! The APIs under test behind one interface, so fixture tests can run every source against every
//! target; and golden-file checking (`BLESS=1` rewrites the expected files).

#![allow(dead_code)] // each test file uses a different part
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::path::Path;

use serde_json::Value;
use switchyard_protocol::chat::{
    ApiError, ChatRequest, ChatResponse, ResponseContext, StreamDecoder, StreamEncoder, StreamEvent, TranslateError,
};
use switchyard_protocol::{anthropic, ollama, openai_chat, responses};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    OpenAiChat,
    Anthropic,
    Responses,
    Ollama,
    OllamaGenerate,
}

pub const ALL: [Api; 5] = [Api::OpenAiChat, Api::Anthropic, Api::Responses, Api::Ollama, Api::OllamaGenerate];

pub fn context() -> ResponseContext {
    ResponseContext { created: 1_700_000_000, id: "req123".to_owned(), ..ResponseContext::default() }
}

impl Api {
    pub fn dir(self) -> &'static str {
        match self {
            Api::OpenAiChat => "openai_chat",
            Api::Anthropic => "anthropic",
            Api::Responses => "responses",
            Api::Ollama => "ollama",
            Api::OllamaGenerate => "ollama_generate",
        }
    }

    pub fn stream_ext(self) -> &'static str {
        match self {
            Api::Ollama | Api::OllamaGenerate => "ndjson",
            _ => "sse",
        }
    }

    pub fn decode_request(self, body: &[u8]) -> Result<ChatRequest, TranslateError> {
        match self {
            Api::OpenAiChat => openai_chat::decode_request(body),
            Api::Anthropic => anthropic::decode_request(body),
            Api::Responses => responses::decode_request(body),
            Api::Ollama => ollama::decode_chat_request(body),
            Api::OllamaGenerate => ollama::decode_generate_request(body),
        }
    }

    pub fn encode_request(self, request: &ChatRequest) -> Result<Vec<u8>, TranslateError> {
        match self {
            Api::OpenAiChat => openai_chat::encode_request(request),
            Api::Anthropic => anthropic::encode_request(request),
            Api::Responses => responses::encode_request(request),
            Api::Ollama => ollama::encode_chat_request(request),
            Api::OllamaGenerate => ollama::encode_generate_request(request),
        }
    }

    pub fn decode_response(self, body: &[u8]) -> Result<ChatResponse, TranslateError> {
        let context = context();
        match self {
            Api::OpenAiChat => openai_chat::decode_response(body, &context),
            Api::Anthropic => anthropic::decode_response(body, &context),
            Api::Responses => responses::decode_response(body, &context),
            Api::Ollama | Api::OllamaGenerate => ollama::decode_response(body, &context),
        }
    }

    pub fn encode_response(self, response: &ChatResponse) -> Result<Vec<u8>, TranslateError> {
        match self {
            Api::OpenAiChat => openai_chat::encode_response(response),
            Api::Anthropic => anthropic::encode_response(response),
            Api::Responses => responses::encode_response(response, &responses::Echo::default()),
            Api::Ollama => ollama::encode_response(response, ollama::Endpoint::Chat),
            Api::OllamaGenerate => ollama::encode_response(response, ollama::Endpoint::Generate),
        }
    }

    pub fn decoder(self) -> Box<dyn StreamDecoder> {
        match self {
            Api::OpenAiChat => Box::new(openai_chat::SseDecoder::new(context())),
            Api::Anthropic => Box::new(anthropic::SseDecoder::new(context())),
            Api::Responses => Box::new(responses::SseDecoder::new(context())),
            Api::Ollama | Api::OllamaGenerate => Box::new(ollama::NdjsonDecoder::new(context())),
        }
    }

    pub fn encoder(self) -> Box<dyn StreamEncoder> {
        match self {
            Api::OpenAiChat => Box::new(openai_chat::SseEncoder::new(true)),
            Api::Anthropic => Box::new(anthropic::SseEncoder::new()),
            Api::Responses => Box::new(responses::SseEncoder::new(responses::Echo::default())),
            Api::Ollama => Box::new(ollama::NdjsonEncoder::new(ollama::Endpoint::Chat)),
            Api::OllamaGenerate => Box::new(ollama::NdjsonEncoder::new(ollama::Endpoint::Generate)),
        }
    }

    pub fn decode_error(self, body: &[u8]) -> Option<ApiError> {
        match self {
            Api::OpenAiChat => openai_chat::decode_error(body),
            Api::Anthropic => anthropic::decode_error(body),
            Api::Responses => responses::decode_error(body),
            Api::Ollama | Api::OllamaGenerate => ollama::decode_error(body),
        }
    }

    pub fn encode_error(self, error: &ApiError) -> Vec<u8> {
        match self {
            Api::OpenAiChat => openai_chat::encode_error(error),
            Api::Anthropic => anthropic::encode_error(error),
            Api::Responses => responses::encode_error(error),
            Api::Ollama | Api::OllamaGenerate => ollama::encode_error(error),
        }
    }
}

/// Decodes a whole stream fed in pieces of `piece` bytes (0: all at once).
pub fn decode_stream(api: Api, bytes: &[u8], piece: usize) -> Result<Vec<StreamEvent>, TranslateError> {
    let mut decoder = api.decoder();
    let mut events = Vec::new();
    if piece == 0 {
        decoder.feed(bytes, &mut events)?;
    } else {
        for chunk in bytes.chunks(piece) {
            decoder.feed(chunk, &mut events)?;
        }
    }
    decoder.finish(&mut events)?;
    Ok(events)
}

pub fn encode_stream(api: Api, events: &[StreamEvent]) -> Vec<u8> {
    let mut encoder = api.encoder();
    let mut out = Vec::new();
    for event in events {
        encoder.encode(event, &mut out);
    }
    encoder.finish(&mut out);
    out
}

/// How a golden file is compared: as JSON values, never as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Sse,
    Ndjson,
}

/// A stream's frames as (event name, data as JSON or as text when it is not JSON).
pub fn frames(format: Format, bytes: &[u8]) -> Vec<(String, Value)> {
    let text = String::from_utf8(bytes.to_vec()).expect("stream is UTF-8");
    match format {
        Format::Json => vec![(String::new(), serde_json::from_str(&text).expect("valid JSON"))],
        Format::Ndjson => text
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(|line| (String::new(), serde_json::from_str(line).unwrap_or_else(|e| panic!("bad line {line}: {e}"))))
            .collect(),
        Format::Sse => {
            assert!(text.is_empty() || text.ends_with("\n\n"), "an SSE stream ends with a blank line");
            text.split("\n\n")
                .filter(|frame| !frame.trim().is_empty())
                .map(|frame| {
                    let mut event = String::new();
                    let mut data = String::new();
                    for line in frame.lines() {
                        if let Some(name) = line.strip_prefix("event: ") {
                            event = name.to_owned();
                        } else if let Some(value) = line.strip_prefix("data: ") {
                            data.push_str(value);
                        } else {
                            panic!("unexpected SSE line {line:?}");
                        }
                    }
                    let value = serde_json::from_str(&data).unwrap_or(Value::String(data));
                    (event, value)
                })
                .collect()
        }
    }
}

/// Checks `actual` against the golden file `dir/name.ext`, or `dir/name.error.txt` when the
/// translation is expected to fail. With `BLESS=1` in the environment, writes the files instead.
/// Returns a description of the mismatch, if any.
pub fn check_golden(dir: &Path, name: &str, format: Format, actual: Result<Vec<u8>, TranslateError>) -> Option<String> {
    let ext = match format {
        Format::Json => "json",
        Format::Sse => "sse",
        Format::Ndjson => "ndjson",
    };
    let ok_path = dir.join(format!("{name}.{ext}"));
    let error_path = dir.join(format!("{name}.error.txt"));
    if std::env::var_os("BLESS").is_some() {
        let _ = std::fs::remove_file(&ok_path);
        let _ = std::fs::remove_file(&error_path);
        match actual {
            Ok(bytes) => {
                let bytes = if format == Format::Json {
                    let value: Value = serde_json::from_slice(&bytes).expect("valid JSON");
                    let mut pretty = serde_json::to_vec_pretty(&value).unwrap();
                    pretty.push(b'\n');
                    pretty
                } else {
                    bytes
                };
                std::fs::write(&ok_path, bytes).unwrap();
            }
            Err(error) => std::fs::write(&error_path, format!("{error}\n")).unwrap(),
        }
        return None;
    }
    let label = ok_path.strip_prefix(env!("CARGO_MANIFEST_DIR")).unwrap_or(&ok_path).display().to_string();
    match (actual, error_path.exists()) {
        (Err(error), true) => {
            let expected = std::fs::read_to_string(&error_path).unwrap();
            (expected.trim() != error.to_string()).then(|| format!("{label}: error {error:?}, expected {expected:?}"))
        }
        (Err(error), false) => Some(format!("{label}: failed with {error}")),
        (Ok(bytes), true) => Some(format!("{label}: expected an error, got {}", String::from_utf8_lossy(&bytes))),
        (Ok(bytes), false) => {
            let Ok(expected) = std::fs::read(&ok_path) else {
                return Some(format!("{label}: golden file missing (run with BLESS=1)"));
            };
            let (expected, actual) = (frames(format, &expected), frames(format, &bytes));
            (expected != actual).then(|| {
                format!(
                    "{label}: differs\n  expected: {}\n  actual:   {}",
                    serde_json::to_string(&expected).unwrap(),
                    serde_json::to_string(&actual).unwrap()
                )
            })
        }
    }
}
