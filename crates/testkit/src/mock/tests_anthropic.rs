//! Tests of the mock's Anthropic Messages API: required headers, validation, plain and streamed
//! messages with Anthropic's event sequence, tool use, count_tokens and the model list.

use bytes::Bytes;
use http::StatusCode;
use serde_json::Value;

use super::reply::TOOL_ARGUMENTS;
use super::tests::{parse, start};
use crate::{MockApi, MockConfig, MockServer, TestClient};

const HEADERS: &[(&str, &str)] = &[("x-api-key", "k"), ("anthropic-version", "2023-06-01")];
const PLAIN: &[u8] = br#"{"model":"claude-mock","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}"#;
const TOOLS: &[u8] = br#"{"model":"claude-mock","max_tokens":64,"stream":true,"tools":[{"name":"get_weather","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"Weather in Paris?"}]}"#;

async fn anthropic(cfg: MockConfig) -> MockServer {
    start(MockConfig { api: MockApi::Anthropic, models: vec!["claude-mock".into()], ..cfg }).await
}

/// `(event name, data)` of each SSE event.
fn named_events(frames: &[Bytes]) -> Vec<(String, Value)> {
    let all: Vec<u8> = frames.iter().flat_map(|f| f.iter().copied()).collect();
    String::from_utf8_lossy(&all)
        .split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            let (name, data) = e.split_once('\n').unwrap_or((e, ""));
            (name.trim_start_matches("event: ").to_owned(), parse(data.trim_start_matches("data: ")))
        })
        .collect()
}

fn error_of(v: &Value) -> (&str, &str) {
    assert_eq!(v["type"], "error", "{v}");
    (v["error"]["type"].as_str().unwrap_or(""), v["error"]["message"].as_str().unwrap_or(""))
}

#[tokio::test]
async fn requires_key_and_version_headers() -> Result<(), crate::Error> {
    let mock = anthropic(MockConfig { api_key: Some("secret".into()), ..MockConfig::default() }).await;
    let c = TestClient::new();
    let url = format!("{}/v1/messages", mock.url());
    let r = c.post_json(&url, PLAIN, &[("anthropic-version", "2023-06-01")]).await?;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert_eq!(error_of(&r.json()), ("authentication_error", "x-api-key header is required"));
    let r = c.post_json(&url, PLAIN, HEADERS).await?;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "the configured key only");
    let r = c.post_json(&url, PLAIN, &[("x-api-key", "secret")]).await?;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(error_of(&r.json()), ("invalid_request_error", "anthropic-version: header is required"));
    let ok = [("x-api-key", "secret"), ("anthropic-version", "2023-06-01")];
    assert_eq!(c.post_json(&url, PLAIN, &ok).await?.status, StatusCode::OK);
    let bearer = [("authorization", "Bearer secret"), ("anthropic-version", "2023-06-01")];
    assert_eq!(c.post_json(&url, PLAIN, &bearer).await?.status, StatusCode::OK, "the SDK's way");
    let wrong = [("authorization", "Bearer nope"), ("anthropic-version", "2023-06-01")];
    assert_eq!(c.post_json(&url, PLAIN, &wrong).await?.status, StatusCode::UNAUTHORIZED);
    let both = [("x-api-key", "secret"), ("authorization", "Bearer client-key"), ("anthropic-version", "2023-06-01")];
    assert_eq!(c.post_json(&url, PLAIN, &both).await?.status, StatusCode::UNAUTHORIZED, "a client key leaked upstream");
    // Discovery needs them too, as at Anthropic.
    let models = format!("{}/v1/models", mock.url());
    assert_eq!(c.get(&models).await?.status, StatusCode::UNAUTHORIZED);
    let r = c.request(http::Method::GET, &models, Bytes::new(), &ok).await?;
    assert_eq!(r.status, StatusCode::OK);
    let j = r.json();
    assert_eq!(j["data"][0]["type"], "model");
    assert_eq!(j["data"][0]["id"], "claude-mock");
    assert!(j["data"][0]["display_name"].is_string() && j["data"][0]["created_at"].is_string());
    assert_eq!((j["has_more"].clone(), j["first_id"].clone()), (false.into(), "claude-mock".into()));
    // The OpenAI API is not there.
    let r = c.post_json(&format!("{}/v1/chat/completions", mock.url()), PLAIN, &ok).await?;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(error_of(&r.json()).0, "not_found_error");
    Ok(())
}

#[tokio::test]
async fn plain_message() -> Result<(), crate::Error> {
    let mock = anthropic(MockConfig::default()).await;
    let r = TestClient::new().post_json(&format!("{}/v1/messages", mock.url()), PLAIN, HEADERS).await?;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.header("x-mock-port"), Some(mock.addr().port().to_string().as_str()));
    assert!(r.header("request-id").is_some_and(|id| id.starts_with("req_")));
    let j = r.json();
    assert!(j["id"].as_str().is_some_and(|id| id.starts_with("msg_")));
    assert_eq!(
        (j["type"].as_str(), j["role"].as_str(), j["model"].as_str()),
        (Some("message"), Some("assistant"), Some("claude-mock"))
    );
    assert_eq!(j["content"], serde_json::json!([{"type": "text", "text": "tok0 tok1 tok2 tok3 tok4 "}]));
    assert_eq!((j["stop_reason"].as_str(), j["stop_sequence"].clone()), (Some("end_turn"), Value::Null));
    assert_eq!(j["usage"]["input_tokens"], (PLAIN.len() / 4) as u64);
    assert_eq!(j["usage"]["output_tokens"], 5);
    Ok(())
}

#[tokio::test]
async fn validates_like_anthropic() -> Result<(), crate::Error> {
    let mock = anthropic(MockConfig::default()).await;
    let c = TestClient::new();
    let url = format!("{}/v1/messages", mock.url());
    let cases: &[(&[u8], StatusCode, &str)] = &[
        (br#"{"model":"claude-mock","messages":[{"role":"user","content":"hi"}]}"#, StatusCode::BAD_REQUEST, "max_tokens"),
        (br#"{"model":"claude-mock","max_tokens":5,"messages":[]}"#, StatusCode::BAD_REQUEST, "at least one message"),
        (br#"{"model":"claude-mock","max_tokens":5,"messages":[{"role":"system","content":"s"}]}"#, StatusCode::BAD_REQUEST, "role"),
        (br#"{"model":"claude-mock","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"x","content":"r"}]}]}"#, StatusCode::BAD_REQUEST, "tool_use_id"),
        (br#"{"model":"claude-mock","max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"call.1","name":"f","input":{}}]}]}"#, StatusCode::BAD_REQUEST, "pattern"),
        (br#"{"model":"nope","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}"#, StatusCode::NOT_FOUND, "model: nope"),
    ];
    for (body, status, message) in cases {
        let r = c.post_json(&url, body, HEADERS).await?;
        assert_eq!(r.status, *status, "{}", r.text());
        let j = r.json();
        let (kind, text) = error_of(&j);
        assert_eq!(kind, if *status == StatusCode::NOT_FOUND { "not_found_error" } else { "invalid_request_error" });
        assert!(text.contains(message), "{text:?} should mention {message:?}");
    }
    Ok(())
}

#[tokio::test]
async fn stream_has_anthropics_event_sequence() -> Result<(), crate::Error> {
    let mock =
        anthropic(MockConfig { chunk_delay: std::time::Duration::from_millis(1), ..MockConfig::default() }).await;
    let body = br#"{"model":"claude-mock","max_tokens":64,"stream":true,"system":"be brief","messages":[{"role":"user","content":"hi"}]}"#;
    let (status, headers, frames) =
        TestClient::new().post_stream(&format!("{}/v1/messages", mock.url()), body, HEADERS).await?;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers.get("content-type").map(|v| v.as_bytes()), Some(&b"text/event-stream; charset=utf-8"[..]));
    let events = named_events(&frames);
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    let mut expected = vec!["message_start", "content_block_start", "ping"];
    expected.extend(["content_block_delta"; 5]);
    expected.extend(["content_block_stop", "message_delta", "message_stop"]);
    assert_eq!(names, expected);
    for (name, data) in &events {
        assert_eq!(data["type"], name.as_str(), "every event's data names its type");
    }
    let start = &events[0].1["message"];
    assert_eq!((start["content"].clone(), start["stop_reason"].clone()), (serde_json::json!([]), Value::Null));
    assert_eq!(start["usage"]["input_tokens"], (body.len() / 4) as u64);
    assert_eq!(events[1].1["content_block"], serde_json::json!({"type": "text", "text": ""}));
    let text: String = events[3..8].iter().map(|(_, d)| d["delta"]["text"].as_str().unwrap_or("").to_owned()).collect();
    assert_eq!(text, "tok0 tok1 tok2 tok3 tok4 ");
    assert!(events[3..8].iter().all(|(_, d)| d["delta"]["type"] == "text_delta" && d["index"] == 0));
    assert_eq!(events[9].1["delta"]["stop_reason"], "end_turn");
    assert_eq!(events[9].1["usage"]["output_tokens"], 5);
    Ok(())
}

#[tokio::test]
async fn tool_use_then_tool_result() -> Result<(), crate::Error> {
    let mock = anthropic(MockConfig::default()).await;
    let c = TestClient::new();
    let url = format!("{}/v1/messages", mock.url());
    let (_, _, frames) = c.post_stream(&url, TOOLS, HEADERS).await?;
    let events = named_events(&frames);
    let block = &events[1].1["content_block"];
    assert_eq!((block["type"].as_str(), block["name"].as_str()), (Some("tool_use"), Some("get_weather")));
    assert_eq!(block["input"], serde_json::json!({}));
    let id = block["id"].as_str().unwrap_or("").to_owned();
    assert!(id.starts_with("toolu_"));
    let fragments: Vec<&str> = events
        .iter()
        .filter(|(n, _)| n == "content_block_delta")
        .map(|(_, d)| {
            assert_eq!(d["delta"]["type"], "input_json_delta");
            d["delta"]["partial_json"].as_str().unwrap_or("")
        })
        .collect();
    assert!(fragments.len() >= 2);
    assert_eq!(fragments.concat(), TOOL_ARGUMENTS);
    let delta = events.iter().find(|(n, _)| n == "message_delta").map(|(_, d)| d.clone()).unwrap_or_default();
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");

    let plain = String::from_utf8_lossy(TOOLS).replace(r#""stream":true,"#, "");
    let j = c.post_json(&url, plain.as_bytes(), HEADERS).await?.json();
    assert_eq!(j["stop_reason"], "tool_use");
    assert_eq!(j["content"][0]["type"], "tool_use");
    assert_eq!(j["content"][0]["input"], serde_json::json!({"location": "Paris", "unit": "celsius"}));

    let follow_up = format!(
        r#"{{"model":"claude-mock","max_tokens":64,"tools":[{{"name":"get_weather","input_schema":{{"type":"object"}}}}],"messages":[{{"role":"user","content":"Weather?"}},{{"role":"assistant","content":[{{"type":"tool_use","id":"{id}","name":"get_weather","input":{TOOL_ARGUMENTS}}}]}},{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"{id}","content":[{{"type":"text","text":"18C, sunny"}}]}}]}}]}}"#
    );
    let r = c.post_json(&url, follow_up.as_bytes(), HEADERS).await?;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let j = r.json();
    assert_eq!(j["content"][0]["text"], "Tool result: 18C, sunny");
    assert_eq!(j["stop_reason"], "end_turn");
    Ok(())
}

#[tokio::test]
async fn count_tokens_and_failures() -> Result<(), crate::Error> {
    let mock = anthropic(MockConfig::default()).await;
    let c = TestClient::new();
    let url = format!("{}/v1/messages/count_tokens", mock.url());
    let body = br#"{"model":"claude-mock","system":"abc","messages":[{"role":"user","content":"Say hello."}]}"#;
    let r = c.post_json(&url, body, HEADERS).await?;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json(), serde_json::json!({"input_tokens": 13}));
    let r = c.post_json(&url, br#"{"model":"nope","messages":[{"role":"user","content":"x"}]}"#, HEADERS).await?;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(c.post_json(&url, body, &HEADERS[..1]).await?.status, StatusCode::BAD_REQUEST);

    mock.control().set_fail_rate(1.0);
    mock.control().set_fail_status(529);
    let r = c.post_json(&format!("{}/v1/messages", mock.url()), PLAIN, HEADERS).await?;
    assert_eq!(r.status.as_u16(), 529);
    assert_eq!(error_of(&r.json()), ("api_error", "mock failure"));
    Ok(())
}
