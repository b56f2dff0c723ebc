//! The OpenAI audio endpoints of the mock: transcriptions and translations (a multipart/form-data
//! upload, read whole; the audio's duration from a WAV header or its size) answered in every
//! `response_format` or as an SSE stream of `transcript.text.*` events, and speech (silence as a
//! 24 kHz 16-bit mono WAV, 0.05 s per input character, sent in 8 KiB frames).

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{HeaderMap, Response, StatusCode};
use serde_json::{json, Value};

use super::body::MockBody;
use super::extra_api::{invalid, model, object, required_str};
use super::frames::Frames;
use super::handlers::{gate, Rejection, State};
use super::render;

const SSE: HeaderValue = HeaderValue::from_static("text/event-stream");
const TEXT: HeaderValue = HeaderValue::from_static("text/plain; charset=utf-8");
/// Bytes per second assumed of audio that is not a WAV (16 kHz 16-bit mono).
const FALLBACK_BYTE_RATE: f64 = 32_000.0;
/// Speech: 24 kHz, 16-bit mono, 0.05 s (1200 samples, 2400 bytes) per input character.
const SPEECH_RATE: u32 = 24_000;
const SPEECH_BYTES_PER_CHAR: usize = 2_400;
const SPEECH_MAX_CHARS: usize = 4_096;
/// Speech body frames carry at most this many bytes.
const FRAME_BYTES: usize = 8 * 1024;
static SILENCE: [u8; FRAME_BYTES] = [0; FRAME_BYTES];

/// Transcription (speech to text in its language) or translation (into English).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Task {
    Transcribe,
    Translate,
}

impl Task {
    fn as_str(self) -> &'static str {
        match self {
            Task::Transcribe => "transcribe",
            Task::Translate => "translate",
        }
    }
}

/// The `boundary` of a `multipart/form-data` content type.
pub(super) fn boundary(content_type: &str) -> Option<&str> {
    let mut params = content_type.split(';');
    if !params.next()?.trim().eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    params
        .find_map(|p| {
            let (key, value) = p.split_once('=')?;
            key.trim().eq_ignore_ascii_case("boundary").then(|| value.trim().trim_matches('"'))
        })
        .filter(|b| !b.is_empty())
}

/// One named part of a multipart body.
pub(super) struct Part<'a> {
    pub(super) name: String,
    pub(super) data: &'a [u8],
}

fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    hay.get(from..)?.windows(needle.len()).position(|w| w == needle).map(|p| p + from)
}

/// The `name` of a part's `Content-Disposition: form-data; name="..."` header.
fn part_name(head: &str) -> Option<String> {
    let disposition = head.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim().eq_ignore_ascii_case("content-disposition").then_some(value)
    })?;
    disposition.split(';').find_map(|p| p.trim().strip_prefix("name=").map(|n| n.trim_matches('"').to_owned()))
}

/// The parts of a multipart body (those without a name are skipped); `None` when it is malformed.
pub(super) fn multipart<'a>(body: &'a [u8], boundary: &str) -> Option<Vec<Part<'a>>> {
    let delimiter = format!("--{boundary}").into_bytes();
    let next = format!("\r\n--{boundary}").into_bytes();
    let mut at = find(body, &delimiter, 0)? + delimiter.len();
    let mut parts = Vec::new();
    loop {
        if body.get(at..)?.starts_with(b"--") {
            return Some(parts);
        }
        let head_start = find(body, b"\r\n", at)? + 2;
        let (head, data_start) = if body.get(head_start..)?.starts_with(b"\r\n") {
            ("", head_start + 2)
        } else {
            let head_end = find(body, b"\r\n\r\n", head_start)?;
            (std::str::from_utf8(body.get(head_start..head_end)?).unwrap_or(""), head_end + 4)
        };
        let data_end = find(body, &next, data_start)?;
        if let Some(name) = part_name(head) {
            parts.push(Part { name, data: body.get(data_start..data_end)? });
        }
        at = data_end + next.len();
    }
}

/// A WAV's duration in seconds: its `data` chunk's bytes (as far as the file holds them) over the
/// byte rate of its `fmt ` chunk. `None` when `bytes` is not a WAV with both.
pub(super) fn wav_duration(bytes: &[u8]) -> Option<f64> {
    if bytes.get(0..4)? != b"RIFF" || bytes.get(8..12)? != b"WAVE" {
        return None;
    }
    let mut at = 12usize;
    let mut byte_rate = None;
    while let Some(head) = bytes.get(at..at + 8) {
        let (id, size) = head.split_at(4);
        let size = usize::try_from(u32::from_le_bytes(size.try_into().ok()?)).ok()?;
        let start = at + 8;
        match id {
            b"fmt " => byte_rate = Some(u32::from_le_bytes(bytes.get(start + 8..start + 12)?.try_into().ok()?)),
            b"data" => {
                let rate = byte_rate.filter(|r| *r > 0)?;
                let held = size.min(bytes.len().saturating_sub(start));
                return Some(held as f64 / f64::from(rate));
            }
            _ => {}
        }
        // Chunks are padded to an even length.
        at = start.checked_add(size)?.checked_add(size % 2)?;
    }
    None
}

/// The duration of uploaded audio: a WAV's own, else its size at 32000 bytes a second.
pub(super) fn duration(bytes: &[u8]) -> f64 {
    wav_duration(bytes).unwrap_or(bytes.len() as f64 / FALLBACK_BYTE_RATE)
}

/// A subtitle timestamp `HH:MM:SS<sep>mmm`.
fn timestamp(secs: f64, separator: char) -> String {
    let ms = (secs * 1000.0).round() as u64;
    let (h, m, s) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60);
    format!("{h:02}:{m:02}:{s:02}{separator}{:03}", ms % 1000)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Json,
    Text,
    Srt,
    Vtt,
    VerboseJson,
}

fn format(state: &State, field: Option<&[u8]>) -> Result<Format, Rejection> {
    Ok(match field {
        None | Some(b"json") => Format::Json,
        Some(b"text") => Format::Text,
        Some(b"srt") => Format::Srt,
        Some(b"vtt") => Format::Vtt,
        Some(b"verbose_json") => Format::VerboseJson,
        Some(_) => {
            let msg = "`response_format` must be one of json, text, srt, vtt, verbose_json";
            return Err(invalid(state, msg, Some("response_format")));
        }
    })
}

/// A transcription or translation request: `file` and `model` required.
pub(crate) async fn transcribe(
    state: &State,
    headers: &HeaderMap,
    bytes: &[u8],
    task: Task,
) -> Result<Response<MockBody>, Rejection> {
    let boundary = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).and_then(boundary);
    let Some(boundary) = boundary else {
        return Err(invalid(state, "the request must be multipart/form-data with a boundary", None));
    };
    let Some(parts) = multipart(bytes, boundary) else {
        return Err(invalid(state, "the multipart/form-data body is malformed", None));
    };
    let field = |name: &str| parts.iter().find(|p| p.name == name).map(|p| p.data);
    let Some(file) = field("file") else {
        return Err(invalid(state, "you must provide a `file`", Some("file")));
    };
    let Some(name) = field("model") else {
        return Err(invalid(state, "you must provide a `model` parameter", Some("model")));
    };
    model(state, Some(&Value::String(String::from_utf8_lossy(name).into_owned())))?;
    let format = format(state, field("response_format"))?;
    let stream = field("stream") == Some(&b"true"[..]);
    gate(state, render::FAIL_BODY).await?;
    let secs = duration(file);
    let text = format!("mock transcript of {} bytes", file.len());
    let usage = json!({"type": "duration", "seconds": secs.ceil() as u64});
    if stream {
        return Ok(transcript_stream(state, &text, usage));
    }
    let plain = |body: String| state.respond(StatusCode::OK, TEXT, MockBody::full(body));
    Ok(match format {
        Format::Json => state.json(StatusCode::OK, to_vec(&json!({"text": text, "usage": usage}))),
        Format::Text => plain(text),
        Format::Srt => plain(format!("1\n{} --> {}\n{text}\n\n", timestamp(0.0, ','), timestamp(secs, ','))),
        Format::Vtt => plain(format!("WEBVTT\n\n{} --> {}\n{text}\n\n", timestamp(0.0, '.'), timestamp(secs, '.'))),
        Format::VerboseJson => state.json(StatusCode::OK, to_vec(&verbose(task, secs, &text, usage))),
    })
}

fn to_vec(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}

/// `verbose_json`: the whole text as one segment.
fn verbose(task: Task, secs: f64, text: &str, usage: Value) -> Value {
    json!({
        "task": task.as_str(),
        "language": "english",
        "duration": secs,
        "text": text,
        "segments": [{
            "id": 0, "seek": 0, "start": 0.0, "end": secs, "text": text, "tokens": [],
            "temperature": 0.0, "avg_logprob": -0.1, "compression_ratio": 1.0, "no_speech_prob": 0.0,
        }],
        "usage": usage,
    })
}

/// The streamed transcript: a delta per word, then the whole text with usage (no `[DONE]`).
fn transcript_stream(state: &State, text: &str, usage: Value) -> Response<MockBody> {
    let mut frames = Frames::default();
    for word in text.split_inclusive(' ') {
        frames.push_content(render::sse_data(&json!({"type": "transcript.text.delta", "delta": word})));
    }
    frames.push_end(render::sse_data(&json!({"type": "transcript.text.done", "text": text, "usage": usage})));
    state.stream(SSE, frames, state.control.chunk_delay())
}

/// The content type of speech in `format` (the bytes are a WAV whatever the format).
fn speech_type(format: &str) -> Option<HeaderValue> {
    Some(HeaderValue::from_static(match format {
        "mp3" => "audio/mpeg",
        "opus" => "audio/opus",
        "aac" => "audio/aac",
        "flac" => "audio/flac",
        "wav" => "audio/wav",
        "pcm" => "audio/pcm",
        _ => return None,
    }))
}

/// The 44-byte header of a 16-bit mono PCM WAV at `rate` holding `data_len` bytes.
pub(super) fn wav_header(rate: u32, data_len: u32) -> Vec<u8> {
    let mut h = Vec::with_capacity(44);
    h.extend_from_slice(b"RIFF");
    h.extend_from_slice(&data_len.saturating_add(36).to_le_bytes());
    h.extend_from_slice(b"WAVEfmt ");
    h.extend_from_slice(&16u32.to_le_bytes());
    h.extend_from_slice(&1u16.to_le_bytes()); // PCM
    h.extend_from_slice(&1u16.to_le_bytes()); // mono
    h.extend_from_slice(&rate.to_le_bytes());
    h.extend_from_slice(&(rate * 2).to_le_bytes()); // byte rate
    h.extend_from_slice(&2u16.to_le_bytes()); // block align
    h.extend_from_slice(&16u16.to_le_bytes()); // bits per sample
    h.extend_from_slice(b"data");
    h.extend_from_slice(&data_len.to_le_bytes());
    h
}

/// `/v1/audio/speech`: `model`, `input` (1 to 4096 characters) and `voice` required;
/// `response_format` mp3 (the default), opus, aac, flac, wav or pcm.
pub(crate) async fn speech(state: &State, bytes: &[u8]) -> Result<Response<MockBody>, Rejection> {
    let body = object(state, bytes)?;
    model(state, body.get("model"))?;
    let input = required_str(state, &body, "input")?;
    let chars = input.chars().count();
    if chars == 0 || chars > SPEECH_MAX_CHARS {
        return Err(invalid(state, "`input` must be 1 to 4096 characters", Some("input")));
    }
    if body.get("voice").is_none_or(Value::is_null) {
        return Err(invalid(state, "you must provide a `voice`", Some("voice")));
    }
    let content_type = match body.get("response_format") {
        None | Some(Value::Null) => speech_type("mp3"),
        Some(format) => format.as_str().and_then(speech_type),
    };
    let Some(content_type) = content_type else {
        let msg = "`response_format` must be one of mp3, opus, aac, flac, wav, pcm";
        return Err(invalid(state, msg, Some("response_format")));
    };
    gate(state, render::FAIL_BODY).await?;
    let data_len = chars * SPEECH_BYTES_PER_CHAR;
    let mut frames = Frames::default();
    frames.push(wav_header(SPEECH_RATE, u32::try_from(data_len).unwrap_or(u32::MAX)));
    let mut left = data_len;
    while left > 0 {
        let n = left.min(FRAME_BYTES);
        frames.push_content(Bytes::from_static(&SILENCE[..n]));
        left -= n;
    }
    Ok(state.stream(content_type, frames, state.control.chunk_delay()))
}
