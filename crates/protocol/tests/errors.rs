//! Errors: bad requests are refused with a message naming the field, features another API cannot
//! carry are refused rather than dropped, backend errors are re-rendered in the client's shape,
//! and streams end with an error event in the client's shape.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report
#![allow(clippy::too_many_lines)] // test scenarios read top to bottom; splitting them hides the story

mod common;

use common::{decode_stream, encode_stream, Api};
use serde_json::{json, Value};
use switchyard_protocol::chat::{ApiError, ErrorKind, StreamEvent, TranslateError};
use switchyard_protocol::{anthropic, ollama, openai_chat, responses};

fn message(result: Result<impl std::fmt::Debug, TranslateError>) -> String {
    result.unwrap_err().to_string()
}

#[test]
fn invalid_requests_name_the_field() {
    let cases: [(Api, &str, &str); 8] = [
        (Api::OpenAiChat, r#"{"messages":[]}"#, "`model` is required"),
        (
            Api::OpenAiChat,
            r#"{"model":"m","messages":[{"role":"wizard","content":"x"}]}"#,
            "`messages[0].role` must be one of system, developer, user, assistant, tool (got `wizard`)",
        ),
        (
            Api::OpenAiChat,
            r#"{"model":"m","messages":[],"max_tokens":"lots"}"#,
            "`max_tokens` must be a non-negative integer",
        ),
        (
            Api::Anthropic,
            r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text"}]}]}"#,
            "`messages[0].content[0].text` is required",
        ),
        (
            Api::Anthropic,
            r#"{"model":"m","messages":[{"role":"user","content":5}]}"#,
            "`messages[0].content` must be an array",
        ),
        (Api::Responses, r#"{"model":"m"}"#, "`input` is required"),
        (
            Api::Ollama,
            r#"{"model":"m","messages":[{"role":"user","content":"x","images":["AAAA"]}]}"#,
            "`messages[0].images[0]` is not a base64 PNG, JPEG, GIF or WebP image",
        ),
        (Api::Ollama, r#"not json"#, "the request body is not valid JSON: expected ident at line 1 column 2"),
    ];
    for (api, body, expected) in cases {
        assert_eq!(message(api.decode_request(body.as_bytes())), expected, "{api:?} {body}");
    }
}

#[test]
fn features_another_api_cannot_carry_are_refused() {
    let cases: [(Api, &str, &str); 6] = [
        (Api::OpenAiChat, r#"{"model":"m","messages":[],"n":2}"#, "`n` greater than 1"),
        (
            Api::OpenAiChat,
            r#"{"model":"m","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{}}]}]}"#,
            "audio input",
        ),
        (
            Api::Anthropic,
            r#"{"model":"m","messages":[],"tools":[{"type":"web_search_20250305","name":"web_search"}]}"#,
            "Anthropic-defined tools (`web_search_20250305`)",
        ),
        (
            Api::Responses,
            r#"{"model":"m","input":"x","previous_response_id":"resp_1"}"#,
            "conversation state kept by the server",
        ),
        (Api::Responses, r#"{"model":"m","input":"x","tools":[{"type":"web_search"}]}"#, "tools of type `web_search`"),
        (Api::OllamaGenerate, r#"{"model":"m","prompt":"def f(","suffix":"return 1"}"#, "fill-in-the-middle"),
    ];
    for (api, body, feature) in cases {
        let error = api.decode_request(body.as_bytes()).unwrap_err();
        assert!(matches!(error, TranslateError::Unsupported { .. }), "{api:?} {body}: {error:?}");
        assert!(error.to_string().contains(feature), "{api:?}: {error}");
        let api_error = error.to_api_error();
        assert_eq!((api_error.kind.status(), api_error.code.as_deref()), (400, Some("unsupported_feature")));
    }
    // Refused by the target rather than the source.
    let images = openai_chat::decode_request(
        br#"{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}]}"#,
    )
    .unwrap();
    assert_eq!(
        message(ollama::encode_chat_request(&images)),
        "the Ollama API cannot express images by URL (Ollama takes only inline images)"
    );
    let json_mode =
        openai_chat::decode_request(br#"{"model":"m","messages":[],"response_format":{"type":"json_object"}}"#)
            .unwrap();
    assert!(message(anthropic::encode_request(&json_mode)).contains("`json_object`"));
    let stop = openai_chat::decode_request(br#"{"model":"m","messages":[],"stop":"x"}"#).unwrap();
    assert_eq!(message(responses::encode_request(&stop)), "the OpenAI Responses API cannot express stop sequences");
}

#[test]
fn invalid_tool_arguments_are_refused_not_mangled() {
    let request = openai_chat::decode_request(
        br#"{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{oops"}}]}]}"#,
    )
    .unwrap();
    assert_eq!(
        message(anthropic::encode_request(&request)),
        "the arguments of tool call `c1` (f) are not a JSON object"
    );
    assert_eq!(
        message(ollama::encode_chat_request(&request)),
        "the arguments of tool call `c1` (f) are not a JSON object"
    );
}

#[test]
fn upstream_errors_are_re_rendered_in_the_clients_shape() {
    let anthropic_body = br#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#;
    let error = ApiError::from_upstream(429, anthropic_body);
    assert_eq!((error.kind, error.message.as_str()), (ErrorKind::RateLimited, "slow down"));
    let openai: Value = serde_json::from_slice(&openai_chat::encode_error(&error)).unwrap();
    assert_eq!(
        openai,
        json!({"error": {"message": "slow down", "type": "rate_limit_error", "param": null, "code": null}})
    );
    let ollama_body: Value = serde_json::from_slice(&ollama::encode_error(&error)).unwrap();
    assert_eq!(ollama_body, json!({"error": "slow down"}));

    let ollama_error = ApiError::from_upstream(404, br#"{"error":"model 'x' not found"}"#);
    assert_eq!((ollama_error.kind, ollama_error.kind.status()), (ErrorKind::NotFound, 404));
    let rendered: Value = serde_json::from_slice(&anthropic::encode_error(&ollama_error)).unwrap();
    assert_eq!(
        rendered,
        json!({"type": "error", "error": {"type": "not_found_error", "message": "model 'x' not found"}})
    );

    let html = ApiError::from_upstream(502, b"<html>Bad Gateway</html>");
    assert_eq!(html.kind, ErrorKind::Server);
    assert_eq!(html.message, "the backend answered with HTTP status 502: <html>Bad Gateway</html>");
}

#[test]
fn mid_stream_errors_end_the_stream_in_each_shape() {
    let error = ApiError::new(ErrorKind::Overloaded, "backend overloaded");
    let events = [
        StreamEvent::Start { id: "x".into(), model: "m".into(), created: 1 },
        StreamEvent::TextDelta { index: 0, text: "partial".into() },
        StreamEvent::Error(error),
        StreamEvent::Done,
    ];
    let last_frame = |api: Api| {
        let out = String::from_utf8(encode_stream(api, &events)).unwrap();
        let frame = out.trim_end().rsplit("\n\n").next().unwrap().to_owned();
        let frame = frame.rsplit('\n').next().unwrap().to_owned();
        let data = frame.strip_prefix("data: ").unwrap_or(&frame);
        serde_json::from_str::<Value>(data).unwrap()
    };
    assert_eq!(last_frame(Api::OpenAiChat)["error"]["message"], "backend overloaded");
    assert_eq!(
        last_frame(Api::Anthropic),
        json!({"type":"error","error":{"type":"overloaded_error","message":"backend overloaded"}})
    );
    assert_eq!(last_frame(Api::Responses)["type"], "error");
    assert_eq!(last_frame(Api::Responses)["message"], "backend overloaded");
    assert_eq!(last_frame(Api::Ollama), json!({"error": "backend overloaded"}));

    // And decoders turn each API's error event back into an error event.
    for api in [Api::OpenAiChat, Api::Anthropic, Api::Responses, Api::Ollama] {
        let mut decoder = api.decoder();
        let mut decoded = Vec::new();
        decoder.feed(&encode_stream(api, &events), &mut decoded).unwrap();
        let decoded_error = decoded.iter().find_map(|e| match e {
            StreamEvent::Error(error) => Some(error.message.clone()),
            _ => None,
        });
        assert_eq!(decoded_error.as_deref(), Some("backend overloaded"), "{api:?}");
    }
}

#[test]
fn a_cut_stream_is_reported_not_passed_off_as_complete() {
    for (api, cut) in [
        (Api::OpenAiChat, &br#"data: {"id":"x","choices":[{"index":0,"delta":{"content":"hi"}}]}"#[..]),
        (Api::Anthropic, b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\"}}\n\n"),
        (Api::Ollama, br#"{"model":"m","message":{"role":"assistant","content":"hi"},"done":false}"#),
    ] {
        let error = decode_stream(api, cut, 0).unwrap_err();
        assert!(error.to_string().contains("ended before"), "{api:?}: {error}");
    }
}

#[test]
fn garbage_in_a_stream_is_an_error_not_a_panic() {
    for api in [Api::OpenAiChat, Api::Anthropic, Api::Responses, Api::Ollama] {
        let garbage: &[u8] = if api == Api::Ollama { b"{not json}\n" } else { b"data: {not json}\n\n" };
        assert!(decode_stream(api, garbage, 1).is_err(), "{api:?}");
        // Bytes that are not UTF-8 at all.
        assert!(decode_stream(api, b"data: \xff\xfe\n\n\xff\n", 1).is_err(), "{api:?}");
    }
}
