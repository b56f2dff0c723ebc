//! What translation costs: per stream chunk (decode one backend frame, encode it for the client)
//! and per request (decode the client's body, encode the backend's). Ignored by default; run
//! `cargo test --release -p switchyard-protocol --test cost -- --ignored --nocapture` for numbers.
//! Unoptimised builds are only checked for staying linear (no re-parsing, no quadratic buffers).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report
#![allow(clippy::too_many_lines)] // test scenarios read top to bottom; splitting them hides the story

mod common;

use std::time::Instant;

use common::{encode_stream, Api};
use switchyard_protocol::chat::StreamEvent;

/// A long stream in `api`'s shape: `deltas` text deltas, then one tool call in `deltas` pieces.
fn long_stream(api: Api, deltas: usize) -> (Vec<u8>, usize) {
    let mut events = vec![StreamEvent::Start { id: "id1".into(), model: "model".into(), created: 1 }];
    for i in 0..deltas {
        events.push(StreamEvent::TextDelta { index: 0, text: format!("word{i} \"quoted\"\n") });
    }
    events.push(StreamEvent::ToolCallStart { index: 1, id: "call_1".into(), name: "search".into() });
    events.push(StreamEvent::ToolCallDelta { index: 1, arguments_fragment: "{\"q\":\"".into() });
    for i in 0..deltas {
        events.push(StreamEvent::ToolCallDelta { index: 1, arguments_fragment: format!("part{i} ") });
    }
    events.push(StreamEvent::ToolCallDelta { index: 1, arguments_fragment: "\"}".into() });
    events.push(StreamEvent::Stop { reason: switchyard_protocol::chat::StopReason::ToolUse, stop_sequence: None });
    events.push(StreamEvent::Usage(switchyard_protocol::chat::Usage::new(10, 20)));
    events.push(StreamEvent::Done);
    let chunks = events.len();
    (encode_stream(api, &events), chunks)
}

/// Nanoseconds per source event to decode `bytes` (fed in 512-byte reads) and encode for `target`.
fn relay_cost(source: Api, target: Api, bytes: &[u8], chunks: usize) -> f64 {
    let start = Instant::now();
    let mut decoder = source.decoder();
    let mut encoder = target.encoder();
    let mut events = Vec::new();
    let mut out = Vec::with_capacity(4096);
    for read in bytes.chunks(512) {
        decoder.feed(read, &mut events).unwrap();
        for event in events.drain(..) {
            encoder.encode(&event, &mut out);
        }
        out.clear();
    }
    decoder.finish(&mut events).unwrap();
    start.elapsed().as_nanos() as f64 / chunks as f64
}

#[test]
fn stream_cost_grows_linearly() {
    for (source, target) in
        [(Api::Anthropic, Api::OpenAiChat), (Api::OpenAiChat, Api::Responses), (Api::Ollama, Api::Anthropic)]
    {
        let (small, small_chunks) = long_stream(source, 200);
        let (large, large_chunks) = long_stream(source, 4000);
        // Warm up, then compare the cost per chunk of a short and a 20× longer stream.
        relay_cost(source, target, &small, small_chunks);
        let per_small = relay_cost(source, target, &small, small_chunks);
        let per_large = relay_cost(source, target, &large, large_chunks);
        assert!(
            per_large < per_small * 4.0 + 2_000.0,
            "{source:?} → {target:?}: {per_small:.0} ns vs {per_large:.0} ns per chunk"
        );
    }
}

#[test]
#[ignore = "a measurement; run in release with --ignored --nocapture"]
fn report_costs() {
    let apis = [Api::OpenAiChat, Api::Anthropic, Api::Responses, Api::Ollama];
    for source in apis {
        let (bytes, chunks) = long_stream(source, 5000);
        for target in apis {
            relay_cost(source, target, &bytes, chunks);
            let best = (0..5).map(|_| relay_cost(source, target, &bytes, chunks)).fold(f64::MAX, f64::min);
            println!("stream {source:?} → {target:?}: {best:.0} ns per chunk");
        }
    }
    let body =
        std::fs::read(format!("{}/tests/fixtures/openai_chat/tools/request.json", env!("CARGO_MANIFEST_DIR"))).unwrap();
    for target in apis {
        let rounds = 20_000;
        let start = Instant::now();
        for _ in 0..rounds {
            let request = Api::OpenAiChat.decode_request(&body).unwrap();
            std::hint::black_box(target.encode_request(&request).unwrap());
        }
        println!(
            "request OpenAiChat → {target:?} ({} bytes): {:.2} µs",
            body.len(),
            start.elapsed().as_secs_f64() * 1e6 / rounds as f64
        );
    }
    let body =
        std::fs::read(format!("{}/tests/fixtures/anthropic/tools/response.json", env!("CARGO_MANIFEST_DIR"))).unwrap();
    for target in apis {
        let rounds = 20_000;
        let start = Instant::now();
        for _ in 0..rounds {
            let response = Api::Anthropic.decode_response(&body).unwrap();
            std::hint::black_box(target.encode_response(&response).unwrap());
        }
        println!("response Anthropic → {target:?}: {:.2} µs", start.elapsed().as_secs_f64() * 1e6 / rounds as f64);
    }
}
