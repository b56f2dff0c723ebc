//! Token usage in OpenAI-shaped JSON: read the `usage` object of a response, and ask a streaming
//! backend for one (`stream_options.include_usage`) by splicing the request's bytes.

use std::sync::LazyLock;

use bytes::{Bytes, BytesMut};
use memchr::memmem::{Finder, FinderRev};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::Tokens;
use crate::endpoint::Units;
use crate::records::UsageUnits;

/// The OpenAI `usage` object (chat, completions, embeddings and stream chunks); the
/// `input_tokens`/`output_tokens` spelling of newer APIs is accepted too.
#[derive(Debug, Deserialize)]
pub(crate) struct WireUsage {
    #[serde(default, alias = "input_tokens")]
    prompt_tokens: Option<u64>,
    #[serde(default, alias = "output_tokens")]
    completion_tokens: Option<u64>,
    #[serde(default)]
    total_tokens: Option<u64>,
    /// OpenAI's cached prompt tokens (`input_tokens_details` in the Responses API).
    #[serde(default, alias = "input_tokens_details")]
    prompt_tokens_details: Option<PromptDetails>,
    /// Anthropic counts prompt-cache reads and writes apart from `input_tokens`.
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
    /// Cache writes, as the Responses API (and a translated Anthropic answer) spells them.
    #[serde(default)]
    cache_write_tokens: Option<u64>,
}

impl WireUsage {
    /// `None` when it carries no count at all; a missing total is prompt + completion. Prompt
    /// tokens include cached ones, in every API's spelling.
    pub(crate) fn tokens(&self) -> Option<Tokens> {
        if self.prompt_tokens.is_none() && self.completion_tokens.is_none() && self.total_tokens.is_none() {
            return None;
        }
        let (read, written) =
            (self.cache_read_input_tokens.unwrap_or(0), self.cache_creation_input_tokens.unwrap_or(0));
        // Only a total (vLLM's rerank): it is all input.
        let only_total = self.prompt_tokens.is_none() && self.completion_tokens.is_none();
        let prompt = if only_total { self.total_tokens } else { self.prompt_tokens };
        let prompt = prompt.unwrap_or(0).saturating_add(read).saturating_add(written);
        let completion = self.completion_tokens.unwrap_or(0);
        let cached = self.prompt_tokens_details.as_ref().and_then(|d| d.cached_tokens).unwrap_or(read);
        let total = match self.total_tokens {
            Some(total) if read + written == 0 => total,
            _ => prompt.saturating_add(completion),
        };
        let cache_write = self.prompt_tokens_details.as_ref().and_then(|d| d.cache_write_tokens).unwrap_or(written);
        Some(Tokens { prompt, completion, total, cached, cache_write })
    }
}

/// The token counts of a non-streaming chat.completion, text_completion or embeddings response
/// (embeddings report no completion tokens: 0), an Anthropic message, or an Ollama answer. Only `usage` is deserialised; serde skips the
/// rest, and a body without the bytes `"usage"` is not parsed at all.
pub fn usage_from_response(body: &[u8]) -> Option<Tokens> {
    #[derive(Deserialize)]
    struct Envelope {
        usage: Option<WireUsage>,
        // Ollama's native API counts at the top level.
        prompt_eval_count: Option<u64>,
        eval_count: Option<u64>,
    }
    // Built once: making a searcher per call cost more than searching a typical answer.
    static USAGE: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"usage\""));
    static EVAL_COUNT: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"eval_count\""));
    static GEMINI: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"usageMetadata\""));
    if USAGE.find(body).is_none() && EVAL_COUNT.find(body).is_none() {
        return GEMINI.find(body).and_then(|_| gemini_usage(body));
    }
    if let Some(tokens) = usage_in_place(body) {
        return Some(tokens);
    }
    let envelope = serde_json::from_slice::<Envelope>(body).ok()?;
    match (envelope.usage, envelope.prompt_eval_count, envelope.eval_count) {
        (Some(usage), _, _) => usage.tokens(),
        (None, None, None) => None,
        (None, prompt, completion) => {
            let (prompt, completion) = (prompt.unwrap_or(0), completion.unwrap_or(0));
            Some(Tokens { prompt, completion, total: prompt.saturating_add(completion), cached: 0, cache_write: 0 })
        }
    }
}

/// Gemini's `usageMetadata` (thinking tokens are output; cached content is cached input).
fn gemini_usage(body: &[u8]) -> Option<Tokens> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Metadata {
        #[serde(default)]
        prompt_token_count: u64,
        #[serde(default)]
        candidates_token_count: u64,
        #[serde(default)]
        thoughts_token_count: u64,
        #[serde(default)]
        cached_content_token_count: u64,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Envelope {
        usage_metadata: Option<Metadata>,
    }
    let m = serde_json::from_slice::<Envelope>(body).ok()?.usage_metadata?;
    let (prompt, completion) = (m.prompt_token_count, m.candidates_token_count + m.thoughts_token_count);
    let cached = m.cached_content_token_count;
    Some(Tokens { prompt, completion, total: prompt + completion, cached, cache_write: 0 })
}

/// The `usage` object read where it stands, without parsing the rest of the answer (which took
/// longer than everything else the gateway does to record usage). The bytes `"usage"` are always
/// a key or a string value, never text inside a string (a string's quotes are escaped); the last
/// `"usage": {` is the top-level object in every API served (it comes after the content). Anything
/// else (`"usage": null`, no counts) returns `None` and the caller parses the whole body.
fn usage_in_place(body: &[u8]) -> Option<Tokens> {
    static USAGE_REV: LazyLock<FinderRev<'static>> = LazyLock::new(|| FinderRev::new(b"\"usage\""));
    let at = USAGE_REV.rfind(body)?;
    let rest = &body[at + b"\"usage\"".len()..];
    let skip_ws = |b: &[u8]| b.iter().position(|c| !c.is_ascii_whitespace()).unwrap_or(b.len());
    let rest = &rest[skip_ws(rest)..];
    let rest = rest.strip_prefix(b":")?;
    let rest = &rest[skip_ws(rest)..];
    if !rest.starts_with(b"{") {
        return None;
    }
    WireUsage::deserialize(&mut serde_json::Deserializer::from_slice(rest)).ok()?.tokens()
}

/// Collects a non-streaming response's frames as it is relayed — refcounted `Bytes` clones, no
/// copy — to read its `usage` when the body ends. Bodies over `limit` bytes are not collected
/// (`finish` returns `None`: estimate instead).
#[derive(Debug)]
pub struct BodyUsageTap {
    frames: Vec<Bytes>,
    len: usize,
    limit: usize,
    /// What else to read of the answer (search units, seconds of audio), and what was read.
    units: Units,
    read: Option<UsageUnits>,
}

impl BodyUsageTap {
    pub fn new(limit: usize) -> Self {
        BodyUsageTap { frames: Vec::new(), len: 0, limit, units: Units::Tokens, read: None }
    }

    /// A tap that also reads what the answer says of `units` (`units` after `finish`).
    pub fn with_units(mut self, units: Units) -> Self {
        self.units = units;
        self
    }

    /// What the body said of its units, once `finish` has read it.
    pub fn units(&mut self) -> Option<UsageUnits> {
        self.read.take()
    }

    pub fn push(&mut self, frame: &Bytes) {
        self.len = self.len.saturating_add(frame.len());
        if self.len > self.limit {
            self.frames = Vec::new();
        } else if !frame.is_empty() {
            self.frames.push(frame.clone());
        }
    }

    /// The usage of the whole body (joined only if it came in several frames).
    pub fn finish(&mut self) -> Option<Tokens> {
        let frames = std::mem::take(&mut self.frames);
        let joined;
        let body: &[u8] = match frames.as_slice() {
            [] => return None,
            [one] => one,
            many => {
                joined = many.concat();
                &joined
            }
        };
        self.read = units_from_response(self.units, body);
        usage_from_response(body)
    }
}

/// How many characters a speech request's `input` holds.
pub fn speech_request(body: &[u8]) -> UsageUnits {
    #[derive(Deserialize)]
    struct Asked {
        input: Option<String>,
    }
    let characters = serde_json::from_slice::<Asked>(body).ok().and_then(|a| a.input).map_or(0, |i| i.chars().count());
    UsageUnits { characters: characters as u64, ..Default::default() }
}

/// What an image request asks for: `n` images (default 1) of `size` and `quality`.
pub fn image_request(body: &[u8]) -> UsageUnits {
    #[derive(Deserialize)]
    struct Asked {
        n: Option<u64>,
        size: Option<String>,
        quality: Option<String>,
    }
    let asked = serde_json::from_slice::<Asked>(body).ok();
    let asked = asked.unwrap_or(Asked { n: None, size: None, quality: None });
    UsageUnits {
        images: asked.n.unwrap_or(1).clamp(1, 128),
        image_size: asked.size.filter(|s| s.len() <= 32),
        image_quality: asked.quality.filter(|q| q.len() <= 32),
        ..Default::default()
    }
}

/// What an answer says it used besides tokens: the search units a Cohere-style reranker bills,
/// or the seconds of audio a transcription heard (`duration` in `verbose_json`, Whisper's
/// `usage: {"type": "duration", "seconds"}` in `json`).
fn units_from_response(units: Units, body: &[u8]) -> Option<UsageUnits> {
    match units {
        Units::SearchUnits => {
            search_units_from_response(body).map(|search_units| UsageUnits { search_units, ..Default::default() })
        }
        Units::AudioSeconds => {
            audio_seconds_from_response(body).map(|audio_seconds| UsageUnits { audio_seconds, ..Default::default() })
        }
        _ => None,
    }
}

fn audio_seconds_from_response(body: &[u8]) -> Option<f64> {
    #[derive(Deserialize)]
    struct Envelope {
        duration: Option<f64>,
        usage: Option<Duration>,
    }
    #[derive(Deserialize)]
    struct Duration {
        seconds: Option<f64>,
    }
    let envelope = serde_json::from_slice::<Envelope>(body).ok()?;
    let seconds = envelope.duration.or(envelope.usage.and_then(|u| u.seconds))?;
    (seconds.is_finite() && seconds > 0.0).then_some(seconds)
}

/// The search units a Cohere-style rerank answer bills (`meta.billed_units.search_units`).
fn search_units_from_response(body: &[u8]) -> Option<u64> {
    #[derive(Deserialize)]
    struct Envelope {
        meta: Option<Meta>,
    }
    #[derive(Deserialize)]
    struct Meta {
        billed_units: Option<Billed>,
    }
    #[derive(Deserialize)]
    struct Billed {
        search_units: Option<f64>,
    }
    let units = serde_json::from_slice::<Envelope>(body).ok()?.meta?.billed_units?.search_units?;
    (units.is_finite() && units > 0.0).then_some(units.ceil() as u64)
}

/// For a streaming request (`"stream": true`) whose client did not ask for usage, the body with
/// `stream_options.include_usage = true`, so the backend ends the stream with a usage chunk.
///
/// `None` means "forward the body as it is": not streaming, the client already asked (then the
/// client also gets the usage chunk: do not strip it), or a body this cannot edit safely.
/// `Some` means the gateway asked on the client's behalf: relay with `SseUsageTap::new(true)` so
/// the client does not see a chunk it did not ask for.
///
/// A byte splice, never a re-serialisation: without `stream_options`,
/// `,"stream_options":{"include_usage":true}` goes before the closing brace; otherwise only the
/// `stream_options` value's bytes are replaced by a re-serialised copy with the flag set.
pub fn inject_include_usage(body: &[u8]) -> Option<Bytes> {
    #[derive(Deserialize)]
    struct StreamFields<'a> {
        #[serde(default)]
        stream: Option<bool>,
        #[serde(default, borrow, deserialize_with = "raw_keeping_null")]
        stream_options: Option<&'a RawValue>,
    }
    // A JSON array would deserialise as a struct in sequence form; only objects are requests.
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return None;
    }
    let fields: StreamFields = serde_json::from_slice(body).ok()?;
    if fields.stream != Some(true) {
        return None;
    }
    let Some(raw) = fields.stream_options else {
        return append_member(body, br#""stream_options":{"include_usage":true}"#);
    };
    let value = raw.get().as_bytes();
    let start = (value.as_ptr() as usize).wrapping_sub(body.as_ptr() as usize);
    let end = start.wrapping_add(value.len());
    if body.get(start..end) != Some(value) {
        return None; // not borrowed from the body: cannot happen, but never guess
    }
    let replacement = match value.first() {
        Some(b'n') => br#"{"include_usage":true}"#.to_vec(),
        Some(b'{') => {
            let mut options: Map<String, Value> = serde_json::from_str(raw.get()).ok()?;
            if options.get("include_usage") == Some(&Value::Bool(true)) {
                return None;
            }
            options.insert("include_usage".to_owned(), Value::Bool(true));
            serde_json::to_vec(&options).ok()?
        }
        _ => return None,
    };
    Some(splice(body, start, end, &[&replacement]))
}

/// `Option<&RawValue>` that keeps an explicit `null` as `Some("null")` (serde maps it to `None`).
fn raw_keeping_null<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// Insert `member` (`"key":value`) before the closing brace of the object `body`.
fn append_member(body: &[u8], member: &[u8]) -> Option<Bytes> {
    let close = body.iter().rposition(|b| !b.is_ascii_whitespace()).filter(|&i| body[i] == b'}')?;
    // In a non-empty object the byte before `}` ends a value, so it is never `{`.
    let empty = body[..close].iter().rfind(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    let comma: &[u8] = if empty { b"" } else { b"," };
    Some(splice(body, close, close, &[comma, member]))
}

fn splice(body: &[u8], start: usize, end: usize, replacement: &[&[u8]]) -> Bytes {
    let added: usize = replacement.iter().map(|part| part.len()).sum();
    let mut out = BytesMut::with_capacity(body.len() - (end - start) + added);
    out.extend_from_slice(&body[..start]);
    for part in replacement {
        out.extend_from_slice(part);
    }
    out.extend_from_slice(&body[end..]);
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHAT: &str = r#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m",
        "choices":[{"index":0,"message":{"role":"assistant","content":"the \"usage\" is high"},"finish_reason":"stop"}],
        "usage":{"prompt_tokens":12,"completion_tokens":7,"total_tokens":19}}"#;
    const COMPLETION: &str = r#"{"id":"cmpl-1","object":"text_completion","model":"m","choices":[{"text":"hi","index":0}],
        "usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}"#;
    const EMBEDDINGS: &str = r#"{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1,-0.2]}],
        "model":"e","usage":{"prompt_tokens":8,"total_tokens":8}}"#;

    #[test]
    fn usage_of_chat_completions_and_embeddings() {
        let t = |prompt, completion, total| Some(Tokens { prompt, completion, total, cached: 0, cache_write: 0 });
        assert_eq!(usage_from_response(CHAT.as_bytes()), t(12, 7, 19));
        assert_eq!(usage_from_response(COMPLETION.as_bytes()), t(3, 1, 4));
        assert_eq!(usage_from_response(EMBEDDINGS.as_bytes()), t(8, 0, 8));
        assert_eq!(usage_from_response(br#"{"usage":{"prompt_tokens":2,"completion_tokens":3}}"#), t(2, 3, 5));
        assert_eq!(usage_from_response(br#"{"usage":{"input_tokens":2,"output_tokens":3}}"#), t(2, 3, 5));
        let ollama = br#"{"model":"m","response":"hi","done":true,"prompt_eval_count":9,"eval_count":4}"#;
        assert_eq!(usage_from_response(ollama), t(9, 4, 13));
        assert_eq!(usage_from_response(br#"{"model":"m","embeddings":[[0.1]],"prompt_eval_count":6}"#), t(6, 0, 6));
    }

    #[test]
    fn gemini_usage_metadata_is_read() {
        let body = br#"{"candidates":[],"usageMetadata":{"promptTokenCount":8,"candidatesTokenCount":6,"thoughtsTokenCount":4,"cachedContentTokenCount":2}}"#;
        assert_eq!(
            usage_from_response(body),
            Some(Tokens { prompt: 8, completion: 10, total: 18, cached: 2, cache_write: 0 })
        );
    }

    #[test]
    fn cached_prompt_tokens_are_read_in_each_api_spelling() {
        let cached = |body: &str| usage_from_response(body.as_bytes()).map(|t| (t.prompt, t.cached, t.total));
        let openai = r#"{"usage":{"prompt_tokens":100,"completion_tokens":5,"total_tokens":105,"prompt_tokens_details":{"cached_tokens":64}}}"#;
        assert_eq!(cached(openai), Some((100, 64, 105)));
        let responses =
            r#"{"usage":{"input_tokens":100,"output_tokens":5,"input_tokens_details":{"cached_tokens":32}}}"#;
        assert_eq!(cached(responses), Some((100, 32, 105)));
        // Anthropic counts cache reads and writes apart from input_tokens: the prompt is all three.
        let anthropic = r#"{"usage":{"input_tokens":10,"output_tokens":5,"cache_read_input_tokens":80,"cache_creation_input_tokens":20}}"#;
        assert_eq!(cached(anthropic), Some((110, 80, 115)));
    }

    #[test]
    fn usage_is_read_in_place_and_text_or_odd_values_cannot_fool_it() {
        let t = |prompt, completion, total| Some(Tokens { prompt, completion, total, cached: 0, cache_write: 0 });
        for body in [CHAT, COMPLETION, EMBEDDINGS] {
            assert!(usage_in_place(body.as_bytes()).is_some(), "{body}");
        }
        // The model's text cannot hold the bytes `"usage"`: its quotes are escaped.
        let text = r#"{"choices":[{"message":{"content":"say \"usage\": {\"prompt_tokens\": 99}"}}],
            "usage" : {"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}"#;
        assert_eq!(usage_from_response(text.as_bytes()), t(3, 4, 7));
        assert_eq!(usage_in_place(text.as_bytes()), t(3, 4, 7));
        // A later `"usage"` that is a value, or a null usage: the whole body is parsed instead.
        let value_after = br#"{"usage":{"prompt_tokens":1,"completion_tokens":2},"metadata":{"note":"usage"}}"#;
        assert_eq!(usage_in_place(value_after), None);
        assert_eq!(usage_from_response(value_after), t(1, 2, 3));
        assert_eq!(usage_from_response(br#"{"id":"x","usage":null}"#), None);
    }

    #[test]
    fn usage_of_a_real_llama_server_answer() {
        let body =
            std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/llama-server/response.json")).unwrap();
        assert_eq!(
            usage_from_response(&body),
            Some(Tokens { prompt: 36, completion: 12, total: 48, cached: 0, cache_write: 0 })
        );
    }

    #[test]
    fn body_tap_reads_usage_across_frames_up_to_a_limit() {
        let body = Bytes::from_static(CHAT.as_bytes());
        let mut whole = BodyUsageTap::new(1 << 20);
        [body.slice(..150), body.slice(150..)].iter().for_each(|f| whole.push(f));
        assert_eq!(whole.finish().map(|t| t.total), Some(19));
        let mut small = BodyUsageTap::new(100);
        [body.slice(..50), body.slice(50..)].iter().for_each(|f| small.push(f));
        assert_eq!(small.finish(), None, "over the limit: not collected");
        let mut one = BodyUsageTap::new(1 << 20);
        one.push(&body);
        assert_eq!(one.finish().map(|t| t.prompt), Some(12));
    }

    #[test]
    fn no_usage_is_none() {
        for body in [
            r#"{"choices":[]}"#,
            r#"{"choices":[],"usage":null}"#,
            r#"{"usage":{}}"#,
            r#"{"choices":[{"message":{"content":"\"usage\""}}]}"#,
            r#"{"error":{"message":"x"}}"#,
            "not json \"usage\"",
            "",
        ] {
            assert_eq!(usage_from_response(body.as_bytes()), None, "{body}");
        }
    }

    fn inject(body: &str) -> Option<String> {
        inject_include_usage(body.as_bytes()).map(|b| String::from_utf8(b.to_vec()).unwrap())
    }

    /// The output is valid JSON asking for usage, and equals the input outside the edit.
    fn assert_injected(body: &str, expected: &str) {
        let out = inject(body).unwrap_or_else(|| panic!("not injected: {body}"));
        assert_eq!(out, expected);
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["stream_options"]["include_usage"], Value::Bool(true), "{out}");
        let before: Value = serde_json::from_str(body).unwrap();
        for (k, val) in before.as_object().unwrap() {
            if k != "stream_options" {
                assert_eq!(&v[k], val, "{k} changed");
            }
        }
    }

    #[test]
    fn injects_without_stream_options() {
        assert_injected(
            r#"{"model":"m","messages":[{"role":"user","content":"}"}],"stream":true}"#,
            r#"{"model":"m","messages":[{"role":"user","content":"}"}],"stream":true,"stream_options":{"include_usage":true}}"#,
        );
        assert_injected(
            "{ \"stream\" : true ,\n  \"model\": \"m\"\n}\n\t ",
            "{ \"stream\" : true ,\n  \"model\": \"m\"\n,\"stream_options\":{\"include_usage\":true}}\n\t ",
        );
        assert_injected(
            "  {\"model\":{},\"stream\":true,\"x\":{}}  ",
            "  {\"model\":{},\"stream\":true,\"x\":{},\"stream_options\":{\"include_usage\":true}}  ",
        );
    }

    #[test]
    fn injects_into_existing_stream_options() {
        assert_injected(
            r#"{"stream":true, "stream_options": {"other":1} ,"model":"m"}"#,
            r#"{"stream":true, "stream_options": {"include_usage":true,"other":1} ,"model":"m"}"#,
        );
        assert_injected(
            r#"{"stream":true,"stream_options":{ "include_usage" : false },"model":"m"}"#,
            r#"{"stream":true,"stream_options":{"include_usage":true},"model":"m"}"#,
        );
        assert_injected(
            r#"{"stream_options":{},"model":"m","stream":true}"#,
            r#"{"stream_options":{"include_usage":true},"model":"m","stream":true}"#,
        );
        assert_injected(
            r#"{"stream":true,"stream_options":null,"model":"m"}"#,
            r#"{"stream":true,"stream_options":{"include_usage":true},"model":"m"}"#,
        );
        assert_injected(
            r#"{"stream":true,"stream_options":{"include_usage":null}}"#,
            r#"{"stream":true,"stream_options":{"include_usage":true}}"#,
        );
    }

    #[test]
    fn leaves_alone_when_asked_or_not_streaming() {
        for body in [
            r#"{"model":"m","stream":true,"stream_options":{"include_usage":true}}"#,
            r#"{"model":"m","stream":true,"stream_options":{ "include_usage" :true, "x":1 }}"#,
            r#"{"model":"m","stream":false}"#,
            r#"{"model":"m","stream":null}"#,
            r#"{"model":"m"}"#,
            r#"{}"#,
            r#"{"stream":true,"stream_options":"yes"}"#,
            r#"{"stream":"true"}"#,
            r#"[true]"#,
            r#"{"stream":true"#,
            "",
        ] {
            assert_eq!(inject(body), None, "{body}");
        }
    }

    #[test]
    fn member_goes_before_the_closing_brace() {
        let add =
            |body: &str| append_member(body.as_bytes(), b"\"a\":1").map(|b| String::from_utf8(b.to_vec()).unwrap());
        assert_eq!(add("{}").as_deref(), Some("{\"a\":1}"));
        assert_eq!(add(" { \n} \n").as_deref(), Some(" { \n\"a\":1} \n"));
        assert_eq!(add("{\"b\":{}}\r\n").as_deref(), Some("{\"b\":{},\"a\":1}\r\n"));
        assert_eq!(add("[]"), None);
    }
}
