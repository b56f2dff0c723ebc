//! The fuzz targets, as plain functions of arbitrary bytes: `fuzz/` runs them under libFuzzer
//! (cargo-fuzz, `--sanitizer none` on stable) and `tests/corpora.rs` replays every committed
//! corpus file through them in the test command. Each panics only on a broken property.

mod config;
mod http;
mod journal;

pub use config::config_parsing;
pub use http::http_requests;
pub use journal::journal_recovery;

use switchyard_protocol::chat::{ChatRequest, ResponseContext, StreamDecoder};
use switchyard_protocol::{anthropic, bedrock, gemini, ollama, openai_chat, responses};

/// A fuzz target: the bytes libFuzzer (or a corpus file) gives it.
pub type Target = fn(&[u8]);

/// The fuzz targets by name (a folder of `fuzz/corpus/` each).
pub const TARGETS: [(&str, Target); 6] = [
    ("stream_decoders", stream_decoders),
    ("request_parsers", request_parsers),
    ("http_requests", http_requests),
    ("journal_recovery", journal_recovery),
    ("config_parsing", config_parsing),
    ("redaction", redaction),
];

/// Redaction of kept bodies: any text (the bytes after the first, as lossy UTF-8) with a known
/// secret planted where the first byte says never panics, and the secret never survives it,
/// whatever surrounds it (inside a JSON string, glued to other token characters, escaped quotes).
pub fn redaction(data: &[u8]) {
    const CANARY: &str = "sy-fuzz-canary-0123456789";
    let Some((&at, rest)) = data.split_first() else { return };
    let text = String::from_utf8_lossy(rest);
    let mut cut = usize::from(at) * text.len() / 255;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let planted = format!("{}{CANARY}{}", &text[..cut], &text[cut..]);
    let redactor = switchyard_gateway::redact::Redactor::new([CANARY.to_owned()]);
    let out = redactor.redact(&planted);
    assert!(!out.contains(CANARY), "the planted secret survived: {out:?}");
    let _ = switchyard_gateway::redact::Redactor::default().redact(&text);
}

fn decoders() -> Vec<(&'static str, Box<dyn StreamDecoder>)> {
    let c = ResponseContext { created: 1, id: "fuzz".to_owned(), ..ResponseContext::default() };
    vec![
        ("openai", Box::new(openai_chat::SseDecoder::new(c.clone()))),
        ("anthropic", Box::new(anthropic::SseDecoder::new(c.clone()))),
        ("responses", Box::new(responses::SseDecoder::new(c.clone()))),
        ("ollama", Box::new(ollama::NdjsonDecoder::new(c.clone()))),
        ("gemini", Box::new(gemini::SseDecoder::new(c.clone()))),
        ("bedrock", Box::new(bedrock::EventStreamDecoder::new(c))),
    ]
}

/// Every stream decoder (OpenAI, Anthropic, Responses and Gemini SSE; Ollama NDJSON; Bedrock's AWS
/// event stream) reads the bytes
/// after the first as a stream, whole and cut where the first byte says: any chunking of a
/// stream must decode to the same events and the same outcome, and nothing may panic.
pub fn stream_decoders(data: &[u8]) {
    let Some((&seed, stream)) = data.split_first() else { return };
    let step = usize::from(seed % 17) + 1;
    let whole = decoders();
    let cut = decoders();
    for ((name, mut a), (_, mut b)) in whole.into_iter().zip(cut) {
        let mut one = Vec::new();
        let r1 = a.feed(stream, &mut one).and_then(|()| a.finish(&mut one));
        let mut many = Vec::new();
        let mut r2 = Ok(());
        for chunk in stream.chunks(step) {
            r2 = b.feed(chunk, &mut many);
            if r2.is_err() {
                break;
            }
        }
        if r2.is_ok() {
            r2 = b.finish(&mut many);
        }
        assert_eq!(r1.is_ok(), r2.is_ok(), "{name}: chunking by {step} changed the outcome");
        if r1.is_ok() {
            assert_eq!(one, many, "{name}: chunking by {step} changed the events");
        }
    }
}

/// What a translation must carry across APIs whatever their shapes: the system text (top-level
/// segments and system messages, in order), who said each piece of text (assistant or not:
/// consecutive turns of one side may merge), the tool calls by name and the tool results, in
/// order. Whitespace is left out, as APIs join segments differently.
#[derive(Debug, PartialEq)]
struct Gist {
    system: String,
    turns: Vec<(bool, String)>,
    calls: Vec<String>,
    results: Vec<String>,
}

impl Gist {
    fn of(request: &ChatRequest) -> Gist {
        use switchyard_protocol::chat::{Part, Role};
        let squeeze = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<String>();
        let mut gist = Gist { system: String::new(), turns: Vec::new(), calls: Vec::new(), results: Vec::new() };
        for segment in &request.system {
            gist.system.push_str(&squeeze(segment));
        }
        for message in &request.messages {
            for part in &message.content {
                match part {
                    Part::Text(text) if message.role == Role::System => gist.system.push_str(&squeeze(text)),
                    Part::Text(text) => {
                        let (assistant, text) = (message.role == Role::Assistant, squeeze(text));
                        match gist.turns.last_mut() {
                            _ if text.is_empty() => {}
                            Some((side, said)) if *side == assistant => said.push_str(&text),
                            _ => gist.turns.push((assistant, text)),
                        }
                    }
                    Part::ToolCall(call) => gist.calls.push(call.name.clone()),
                    Part::ToolResult(result) => gist.results.push(squeeze(&result.content)),
                    Part::Image(_) => {}
                }
            }
        }
        gist
    }
}

/// Every inbound API's request parser on the bytes: no panic; a request that decodes is a fixed
/// point of encode-then-decode in its own API (roles and contents preserved); its encoding for
/// every other API, when that API can carry it, is read back there without a panic and, when it
/// reads, with the same roles and contents ([`Gist`]). (Not an error-free read: an image whose
/// bytes are no image passes through OpenAI's data URLs but is refused by Ollama's decoder, which
/// must name its type — the first thing fuzzing found.)
pub fn request_parsers(data: &[u8]) {
    type Decode = fn(&[u8]) -> Result<ChatRequest, switchyard_protocol::chat::TranslateError>;
    type Encode = fn(&ChatRequest) -> Result<Vec<u8>, switchyard_protocol::chat::TranslateError>;
    let apis: [(&str, Decode, Encode); 4] = [
        ("openai", openai_chat::decode_request, openai_chat::encode_request),
        ("anthropic", anthropic::decode_request, anthropic::encode_request),
        ("responses", responses::decode_request, responses::encode_request),
        ("ollama", ollama::decode_chat_request, ollama::encode_chat_request),
    ];
    let _ = ollama::decode_generate_request(data);
    // Gemini's decoder is held to not panicking (its model is in the URL, so it has no place in
    // the cross-API round trips below).
    if let Ok(request) = gemini::decode_request(data) {
        let _ = gemini::encode_request(&request);
    }
    for (name, decode, encode) in apis {
        let Ok(request) = decode(data) else { continue };
        if let Ok(bytes) = encode(&request) {
            let again = decode(&bytes).unwrap_or_else(|e| panic!("{name}: its own encoding does not decode: {e}"));
            let twice = encode(&again).unwrap_or_else(|e| panic!("{name}: re-encoding failed: {e}"));
            let third = decode(&twice).unwrap_or_else(|e| panic!("{name}: second encoding does not decode: {e}"));
            assert_eq!(again, third, "{name}: encode/decode is not a fixed point");
        }
        // Bedrock has no inbound API: its encoder is held to not panicking and to writing JSON —
        // by the grammar: a number too large for an f64 (a tool schema's `88e88888`) is still
        // JSON, passed on as the client wrote it, though `serde_json::Value` refuses it.
        if let Ok(bytes) = bedrock::encode_request(&request) {
            let json = serde_json::from_slice::<&serde_json::value::RawValue>(&bytes);
            assert!(json.is_ok(), "{name} → bedrock: not JSON");
        }
        let gist = Gist::of(&request);
        for (other, other_decode, other_encode) in apis {
            let Ok(bytes) = other_encode(&request) else { continue };
            if let Ok(read_back) = other_decode(&bytes) {
                assert_eq!(gist, Gist::of(&read_back), "{name} → {other}: roles or contents changed");
            }
        }
    }
}
