//! Translations there and back keep what matters byte for byte: a streamed Anthropic tool call
//! through an OpenAI stream and back, tool arguments and schemas through every API.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report
#![allow(clippy::too_many_lines)] // test scenarios read top to bottom; splitting them hides the story

mod common;

use common::{context, decode_stream, encode_stream, Api};
use switchyard_protocol::chat::{StreamDecoder, StreamEncoder, StreamEvent};
use switchyard_protocol::{anthropic, openai_chat, responses};

fn fixture(path: &str) -> Vec<u8> {
    std::fs::read(format!("{}/tests/fixtures/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// Tool calls in an Anthropic stream: (name, the concatenated `partial_json`), read as raw text.
fn anthropic_tool_calls(stream: &[u8]) -> Vec<(String, String)> {
    let text = String::from_utf8(stream.to_vec()).unwrap();
    let mut calls: Vec<(u64, String, String)> = Vec::new();
    for frame in text.split("\n\n").filter(|f| !f.trim().is_empty()) {
        let data = frame.lines().find_map(|line| line.strip_prefix("data: ")).unwrap();
        let event: serde_json::Value = serde_json::from_str(data).unwrap();
        match event["type"].as_str().unwrap() {
            "content_block_start" if event["content_block"]["type"] == "tool_use" => calls.push((
                event["index"].as_u64().unwrap(),
                event["content_block"]["name"].as_str().unwrap().to_owned(),
                String::new(),
            )),
            "content_block_delta" if event["delta"]["type"] == "input_json_delta" => {
                let index = event["index"].as_u64().unwrap();
                let call = calls.iter_mut().find(|(i, _, _)| *i == index).unwrap();
                call.2.push_str(event["delta"]["partial_json"].as_str().unwrap());
            }
            _ => {}
        }
    }
    calls.into_iter().map(|(_, name, arguments)| (name, arguments)).collect()
}

/// Runs bytes through a decoder in pieces and an encoder, as the gateway does.
fn relay(decoder: &mut dyn StreamDecoder, encoder: &mut dyn StreamEncoder, input: &[u8], piece: usize) -> Vec<u8> {
    let mut events = Vec::new();
    let mut out = Vec::new();
    for chunk in input.chunks(piece) {
        decoder.feed(chunk, &mut events).unwrap();
        for event in events.drain(..) {
            encoder.encode(&event, &mut out);
        }
    }
    decoder.finish(&mut events).unwrap();
    for event in events.drain(..) {
        encoder.encode(&event, &mut out);
    }
    encoder.finish(&mut out);
    out
}

#[test]
fn streamed_anthropic_tool_call_survives_openai_and_back() {
    let original = fixture("anthropic/tools/stream.sse");
    let expected = anthropic_tool_calls(&original);
    assert_eq!(expected.len(), 1);
    assert_eq!(expected[0].0, "get_weather");
    for piece in [1, 5, 4096] {
        let mut to_openai = (anthropic::SseDecoder::new(context()), openai_chat::SseEncoder::new(true));
        let openai_stream = relay(&mut to_openai.0, &mut to_openai.1, &original, piece);
        let mut back = (openai_chat::SseDecoder::new(context()), anthropic::SseEncoder::new());
        let anthropic_stream = relay(&mut back.0, &mut back.1, &openai_stream, piece);
        assert_eq!(anthropic_tool_calls(&anthropic_stream), expected, "in {piece}-byte pieces");
        let text = String::from_utf8(anthropic_stream).unwrap();
        assert!(text.contains("\"stop_reason\":\"tool_use\""));
        assert!(text.ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"));
    }
}

#[test]
fn streamed_tool_arguments_arrive_whole_through_every_api() {
    let original = fixture("anthropic/tools/stream.sse");
    let events = decode_stream(Api::Anthropic, &original, 0).unwrap();
    let arguments = |events: &[StreamEvent]| -> String {
        events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::ToolCallDelta { arguments_fragment, .. } => Some(arguments_fragment.as_str()),
                _ => None,
            })
            .collect()
    };
    let expected = arguments(&events);
    for via in [Api::OpenAiChat, Api::Responses, Api::Anthropic] {
        let encoded = encode_stream(via, &events);
        let decoded = decode_stream(via, &encoded, 3).unwrap();
        assert_eq!(arguments(&decoded), expected, "through {via:?}");
    }
    // Ollama carries arguments as an object: the same JSON, reparsed.
    let through_ollama = decode_stream(Api::Ollama, &encode_stream(Api::Ollama, &events), 3).unwrap();
    let parsed = |s: &str| serde_json::from_str::<serde_json::Value>(s).unwrap();
    assert_eq!(parsed(&arguments(&through_ollama)), parsed(&expected));
}

#[test]
fn tool_arguments_and_schemas_keep_their_bytes() {
    let body = br#"{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{"z": 1, "a": [true, null]}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}],"tools":[{"name":"f","input_schema":{"type":"object","properties":{"z":{"type":"number"},"a":{"type":"array"}}}}]}"#;
    let request = anthropic::decode_request(body).unwrap();
    for target in [Api::OpenAiChat, Api::Responses, Api::Anthropic, Api::Ollama] {
        let encoded = String::from_utf8(target.encode_request(&request).unwrap()).unwrap();
        assert!(
            encoded.contains(r#"{"type":"object","properties":{"z":{"type":"number"},"a":{"type":"array"}}}"#),
            "{target:?}: {encoded}"
        );
        let arguments = if matches!(target, Api::OpenAiChat | Api::Responses) {
            r#""{\"z\": 1, \"a\": [true, null]}""#
        } else {
            r#"{"z": 1, "a": [true, null]}"#
        };
        assert!(encoded.contains(arguments), "{target:?}: {encoded}");
        // And back to the internal model, the same schema (Responses spells out `strict: false`).
        let again = target.decode_request(encoded.as_bytes()).unwrap();
        assert_eq!(again.tools[0].parameters, request.tools[0].parameters, "{target:?}");
    }
}

#[test]
fn plain_responses_round_trip_through_each_api() {
    let response = Api::Anthropic.decode_response(&fixture("anthropic/tools/response.json")).unwrap();
    for via in [Api::OpenAiChat, Api::Responses, Api::Anthropic, Api::Ollama] {
        let back = via.decode_response(&via.encode_response(&response).unwrap()).unwrap();
        assert_eq!(back.content, response.content, "{via:?}");
        assert_eq!(back.stop_reason, response.stop_reason, "{via:?}");
        assert_eq!(back.usage.prompt_tokens, response.usage.prompt_tokens, "{via:?}");
        assert_eq!(back.usage.completion_tokens, response.usage.completion_tokens, "{via:?}");
    }
}

#[test]
fn pretty_printed_client_json_keeps_line_framed_streams_intact() {
    use switchyard_protocol::chat::{StopReason, StreamEncoder};
    let events = [
        StreamEvent::Start { id: "x".into(), model: "m".into(), created: 1 },
        StreamEvent::ToolCallStart { index: 0, id: "c1".into(), name: "f".into() },
        StreamEvent::ToolCallDelta { index: 0, arguments_fragment: "{\n  \"a\": \"line\\nbreak\",\n".into() },
        StreamEvent::ToolCallDelta { index: 0, arguments_fragment: "  \"b\": [1, 2]\n}".into() },
        StreamEvent::BlockStop { index: 0 },
        StreamEvent::Stop { reason: StopReason::ToolUse, stop_sequence: None },
        StreamEvent::Done,
    ];
    let ndjson = String::from_utf8(encode_stream(Api::Ollama, &events)).unwrap();
    let lines: Vec<serde_json::Value> = ndjson.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    assert_eq!(
        lines[0]["message"]["tool_calls"][0]["function"]["arguments"],
        serde_json::json!({"a": "line\nbreak", "b": [1, 2]})
    );

    let body = b"{\"model\":\"m\",\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"parameters\":{\n \"type\": \"object\"\n}}]}";
    let echo = responses::Echo::from_request(&responses::decode_request(body).unwrap());
    let mut encoder = responses::SseEncoder::new(echo);
    let mut out = Vec::new();
    for event in &events {
        encoder.encode(event, &mut out);
    }
    let frames = common::frames(common::Format::Sse, &out);
    assert_eq!(frames[0].1["response"]["tools"][0]["parameters"], serde_json::json!({"type": "object"}));
}
