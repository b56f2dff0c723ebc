//! The fuzz targets, as plain functions of arbitrary bytes: `fuzz/` runs them under libFuzzer
//! (cargo-fuzz, `--sanitizer none` on stable) and `tests/corpora.rs` replays every committed
//! corpus file through them in the test command. Each panics only on a broken property.

use switchyard_protocol::chat::{ChatRequest, ResponseContext, StreamDecoder};
use switchyard_protocol::{anthropic, ollama, openai_chat, responses};

/// A fuzz target: the bytes libFuzzer (or a corpus file) gives it.
pub type Target = fn(&[u8]);

/// The fuzz targets by name (a folder of `fuzz/corpus/` each).
pub const TARGETS: [(&str, Target); 2] = [("stream_decoders", stream_decoders), ("request_parsers", request_parsers)];

fn decoders() -> Vec<(&'static str, Box<dyn StreamDecoder>)> {
    let c = ResponseContext { created: 1, id: "fuzz".to_owned() };
    vec![
        ("openai", Box::new(openai_chat::SseDecoder::new(c.clone()))),
        ("anthropic", Box::new(anthropic::SseDecoder::new(c.clone()))),
        ("responses", Box::new(responses::SseDecoder::new(c.clone()))),
        ("ollama", Box::new(ollama::NdjsonDecoder::new(c))),
    ]
}

/// Every stream decoder (OpenAI, Anthropic and Responses SSE; Ollama NDJSON) reads the bytes
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

/// Every inbound API's request parser on the bytes: no panic; a request that decodes is a fixed
/// point of encode-then-decode in its own API (roles and contents preserved); its encoding for
/// every other API, when that API can carry it, is read back there without a panic. (Not an
/// error-free read: an image whose bytes are no image passes through OpenAI's data URLs but is
/// refused by Ollama's decoder, which must name its type — the first thing fuzzing found.)
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
    for (name, decode, encode) in apis {
        let Ok(request) = decode(data) else { continue };
        if let Ok(bytes) = encode(&request) {
            let again = decode(&bytes).unwrap_or_else(|e| panic!("{name}: its own encoding does not decode: {e}"));
            let twice = encode(&again).unwrap_or_else(|e| panic!("{name}: re-encoding failed: {e}"));
            let third = decode(&twice).unwrap_or_else(|e| panic!("{name}: second encoding does not decode: {e}"));
            assert_eq!(again, third, "{name}: encode/decode is not a fixed point");
        }
        for (other, other_decode, other_encode) in apis {
            if let Ok(bytes) = other_encode(&request) {
                let _ = (other, other_decode(&bytes));
            }
        }
    }
}
