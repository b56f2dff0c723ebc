//! Tests of the OpenAI mock's tool calls (plain and streamed in fragments), its replies to tool
//! results, and the `api_key` requirement.

use http::StatusCode;
use serde_json::{json, Value};

use super::reply::TOOL_ARGUMENTS;
use super::tests::{parse, sse_events, start};
use crate::{MockConfig, TestClient};

const TOOLS: &str = r#""tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]"#;

fn chat(extra: &str) -> Vec<u8> {
    format!(r#"{{"model":"mock-model",{TOOLS}{extra},"messages":[{{"role":"user","content":"Weather?"}}]}}"#)
        .into_bytes()
}

#[tokio::test]
async fn tool_call_plain_and_streamed() -> Result<(), crate::Error> {
    let mock = start(MockConfig::default()).await;
    let c = TestClient::new();
    let url = format!("{}/v1/chat/completions", mock.url());
    let body = chat("");
    let j = c.post_json(&url, &body, &[]).await?.json();
    let choice = &j["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["content"], Value::Null);
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!((call["type"].as_str(), call["function"]["name"].as_str()), (Some("function"), Some("get_weather")));
    assert_eq!(call["function"]["arguments"], TOOL_ARGUMENTS);
    assert!(call["id"].as_str().is_some_and(|id| id.starts_with("call_")));
    assert_eq!(j["usage"]["completion_tokens"], 5);
    assert_eq!(j["usage"]["prompt_tokens"], (body.len() / 4) as u64);

    let body = chat(r#","stream":true,"stream_options":{"include_usage":true}"#);
    let (_, _, frames) = c.post_stream(&url, &body, &[]).await?;
    let events = sse_events(&frames);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| parse(e)).collect();
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk"));
    let first = &chunks[0]["choices"][0]["delta"]["tool_calls"][0];
    assert_eq!((first["index"].clone(), first["function"]["name"].clone()), (json!(0), json!("get_weather")));
    let fragments: Vec<&str> = chunks[1..]
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str())
        .collect();
    assert!(fragments.len() >= 2, "{fragments:?}");
    assert_eq!(fragments.concat(), TOOL_ARGUMENTS);
    let finishes: Vec<&Value> =
        chunks.iter().map(|c| &c["choices"][0]["finish_reason"]).filter(|f| !f.is_null()).collect();
    assert_eq!(finishes, [&json!("tool_calls")]);
    let usage = &chunks[chunks.len() - 1];
    assert_eq!((usage["choices"].clone(), usage["usage"]["completion_tokens"].clone()), (json!([]), json!(5)));
    Ok(())
}

#[tokio::test]
async fn tool_result_is_quoted() -> Result<(), crate::Error> {
    let mock = start(MockConfig::default()).await;
    let c = TestClient::new();
    let url = format!("{}/v1/chat/completions", mock.url());
    let messages = r#"[{"role":"user","content":"Weather?"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{}"}}]},{"role":"tool","tool_call_id":"call_1","content":"18C"}]"#;
    let body = format!(r#"{{"model":"mock-model",{TOOLS},"messages":{messages}}}"#);
    let j = c.post_json(&url, body.as_bytes(), &[]).await?.json();
    assert_eq!(j["choices"][0]["message"]["content"], "Tool result: 18C");
    assert_eq!(j["choices"][0]["finish_reason"], "stop");

    // Without tools, a tool result last is quoted all the same; streamed, the text is in pieces.
    let body = format!(r#"{{"model":"mock-model","stream":true,"messages":{messages}}}"#);
    let (_, _, frames) = c.post_stream(&url, body.as_bytes(), &[]).await?;
    let events = sse_events(&frames);
    let text: String = events
        .iter()
        .filter(|e| *e != "[DONE]")
        .map(|e| parse(e)["choices"][0]["delta"]["content"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(text, "Tool result: 18C");
    assert!(events.iter().all(|e| !e.contains("\"usage\"")));
    Ok(())
}

#[tokio::test]
async fn api_key_is_enforced_when_configured() -> Result<(), crate::Error> {
    let mock = start(MockConfig { api_key: Some("sk-test".into()), ..MockConfig::default() }).await;
    let c = TestClient::new();
    let url = format!("{}/v1/chat/completions", mock.url());
    let body = br#"{"model":"mock-model","messages":[{"role":"user","content":"hi"}]}"#;
    let r = c.post_json(&url, body, &[]).await?;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert_eq!(r.json()["error"]["code"], "invalid_api_key");
    assert_eq!(c.post_json(&url, body, &[("authorization", "Bearer nope")]).await?.status, StatusCode::UNAUTHORIZED);
    assert_eq!(c.post_json(&url, body, &[("authorization", "Bearer sk-test")]).await?.status, StatusCode::OK);
    assert_eq!(c.get(&format!("{}/health", mock.url())).await?.status, StatusCode::OK, "health needs no key");
    Ok(())
}
