//! Tests of the mock's Ollama API: model listings, `/api/chat` and `/api/generate` as NDJSON
//! streams and single objects, tool calls, `/api/embed`, errors, and the OpenAI-compatible `/v1`.

use bytes::Bytes;
use http::StatusCode;
use serde_json::{json, Value};

use super::tests::{parse, start};
use crate::{MockApi, MockConfig, MockServer, TestClient};

const CHAT: &[u8] = br#"{"model":"llama3.2:1b","messages":[{"role":"user","content":"hi"}]}"#;

async fn ollama(cfg: MockConfig) -> MockServer {
    start(MockConfig { api: MockApi::Ollama, models: vec!["llama3.2:1b".into()], ..cfg }).await
}

fn lines(frames: &[Bytes]) -> Vec<Value> {
    let all: Vec<u8> = frames.iter().flat_map(|f| f.iter().copied()).collect();
    assert!(all.ends_with(b"\n"), "every line ends with a newline");
    String::from_utf8_lossy(&all).lines().map(parse).collect()
}

/// Checks the final line of a chat or generate answer and returns it.
fn assert_done(line: &Value, prompt_bytes: usize) {
    assert_eq!(line["done"], true);
    assert_eq!(line["done_reason"], "stop");
    assert_eq!(line["prompt_eval_count"], (prompt_bytes / 4) as u64);
    assert_eq!(line["eval_count"], 5);
    for timing in ["total_duration", "load_duration", "prompt_eval_duration", "eval_duration"] {
        assert!(line[timing].as_u64().is_some_and(|t| t > 0), "{timing}");
    }
}

#[tokio::test]
async fn listings_and_version() -> Result<(), crate::Error> {
    let mock = ollama(MockConfig::default()).await;
    let c = TestClient::new();
    let j = c.get(&format!("{}/api/tags", mock.url())).await?.json();
    assert_eq!(
        (j["models"][0]["name"].as_str(), j["models"][0]["model"].as_str()),
        (Some("llama3.2:1b"), Some("llama3.2:1b"))
    );
    assert_eq!(j["models"][0]["details"]["quantization_level"], "Q4_0");
    assert!(j["models"][0].get("size_vram").is_none());
    let j = c.get(&format!("{}/api/ps", mock.url())).await?.json();
    assert_eq!(j["models"][0]["name"], "llama3.2:1b");
    assert!(j["models"][0]["expires_at"].is_string() && j["models"][0]["size_vram"].is_u64());
    assert_eq!(c.get(&format!("{}/api/version", mock.url())).await?.json()["version"], "0.12.0");
    assert_eq!(c.get(&format!("{}/", mock.url())).await?.text(), "Ollama is running");
    assert_eq!(c.get(&format!("{}/api/nope", mock.url())).await?.status, StatusCode::NOT_FOUND);
    // Its OpenAI-compatible API too.
    assert_eq!(c.get(&format!("{}/v1/models", mock.url())).await?.json()["data"][0]["id"], "llama3.2:1b");
    let r = c.post_json(&format!("{}/v1/chat/completions", mock.url()), CHAT, &[]).await?;
    assert_eq!(r.json()["choices"][0]["message"]["content"], "tok0 tok1 tok2 tok3 tok4 ");
    Ok(())
}

#[tokio::test]
async fn chat_streams_ndjson_by_default() -> Result<(), crate::Error> {
    let mock = ollama(MockConfig { chunk_delay: std::time::Duration::from_millis(1), ..MockConfig::default() }).await;
    let (status, headers, frames) =
        TestClient::new().post_stream(&format!("{}/api/chat", mock.url()), CHAT, &[]).await?;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers.get("content-type").map(|v| v.as_bytes()), Some(&b"application/x-ndjson"[..]));
    let lines = lines(&frames);
    assert_eq!(lines.len(), 6);
    for line in &lines[..5] {
        assert_eq!((line["done"].clone(), line["model"].clone()), (json!(false), json!("llama3.2:1b")));
        assert_eq!(line["message"]["role"], "assistant");
        assert!(line["created_at"].as_str().is_some_and(|t| t.ends_with('Z')));
    }
    let text: String = lines.iter().map(|l| l["message"]["content"].as_str().unwrap_or("").to_owned()).collect();
    assert_eq!(text, "tok0 tok1 tok2 tok3 tok4 ");
    assert_done(&lines[5], CHAT.len());
    assert_eq!(lines[5]["message"]["content"], "");
    Ok(())
}

#[tokio::test]
async fn chat_and_generate_without_streaming() -> Result<(), crate::Error> {
    let mock = ollama(MockConfig::default()).await;
    let c = TestClient::new();
    let body = br#"{"model":"llama3.2:1b","stream":false,"messages":[{"role":"user","content":"hi"}]}"#;
    let r = c.post_json(&format!("{}/api/chat", mock.url()), body, &[]).await?;
    assert_eq!(r.header("content-type"), Some("application/json; charset=utf-8"));
    let j = r.json();
    assert_eq!(j["message"], json!({"role": "assistant", "content": "tok0 tok1 tok2 tok3 tok4 "}));
    assert_done(&j, body.len());

    let url = format!("{}/api/generate", mock.url());
    let body = br#"{"model":"llama3.2:1b","prompt":"hi","stream":false}"#;
    let j = c.post_json(&url, body, &[]).await?.json();
    assert_eq!(j["response"], "tok0 tok1 tok2 tok3 tok4 ");
    assert!(j.get("message").is_none());
    assert_done(&j, body.len());

    let body = br#"{"model":"llama3.2:1b","prompt":"hi"}"#;
    let (_, _, frames) = c.post_stream(&url, body, &[]).await?;
    let lines = lines(&frames);
    assert_eq!(lines.len(), 6);
    assert_eq!(lines[1]["response"], "tok1 ");
    assert_done(&lines[5], body.len());

    // No prompt: Ollama loads the model and says so.
    let j = c.post_json(&url, br#"{"model":"llama3.2:1b"}"#, &[]).await?.json();
    assert_eq!((j["done"].clone(), j["done_reason"].clone()), (json!(true), json!("load")));
    Ok(())
}

#[tokio::test]
async fn chat_tool_call_is_sent_whole() -> Result<(), crate::Error> {
    let mock = ollama(MockConfig::default()).await;
    let c = TestClient::new();
    let url = format!("{}/api/chat", mock.url());
    let body = br#"{"model":"llama3.2:1b","tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}],"messages":[{"role":"user","content":"Weather?"}]}"#;
    let (_, _, frames) = c.post_stream(&url, body, &[]).await?;
    let lines = lines(&frames);
    assert_eq!(lines.len(), 2);
    let call = &lines[0]["message"]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "get_weather");
    assert_eq!(call["arguments"], json!({"location": "Paris", "unit": "celsius"}));
    assert_eq!(lines[0]["done"], false);
    assert_done(&lines[1], body.len());

    let plain = String::from_utf8_lossy(body).replace(r#""tools""#, r#""stream":false,"tools""#);
    let j = c.post_json(&url, plain.as_bytes(), &[]).await?.json();
    assert_eq!(j["message"]["tool_calls"][0]["function"]["name"], "get_weather");
    assert_eq!(j["done_reason"], "stop", "Ollama reports a tool call as a plain stop");

    let follow_up = br#"{"model":"llama3.2:1b","stream":false,"tools":[{"type":"function","function":{"name":"get_weather"}}],"messages":[{"role":"user","content":"Weather?"},{"role":"assistant","content":"","tool_calls":[{"function":{"name":"get_weather","arguments":{"location":"Paris"}}}]},{"role":"tool","tool_name":"get_weather","content":"18C"}]}"#;
    let j = c.post_json(&url, follow_up, &[]).await?.json();
    assert_eq!(j["message"]["content"], "Tool result: 18C");
    Ok(())
}

#[tokio::test]
async fn embed_and_errors() -> Result<(), crate::Error> {
    let mock = ollama(MockConfig::default()).await;
    let c = TestClient::new();
    let url = format!("{}/api/embed", mock.url());
    let j = c.post_json(&url, br#"{"model":"llama3.2:1b","input":["a","b"]}"#, &[]).await?.json();
    assert_eq!(j["model"], "llama3.2:1b");
    assert_eq!(j["embeddings"].as_array().map(Vec::len), Some(2));
    assert_eq!(j["embeddings"][0].as_array().map(Vec::len), Some(8));
    assert!(j["prompt_eval_count"].as_u64().is_some_and(|n| n > 0));
    let single = c.post_json(&url, br#"{"model":"llama3.2:1b","input":"a"}"#, &[]).await?.json();
    assert_eq!(single["embeddings"][0], j["embeddings"][0]);

    let r = c.post_json(&format!("{}/api/chat", mock.url()), br#"{"model":"x","messages":[]}"#, &[]).await?;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.json(), json!({"error": "model \"x\" not found, try pulling it first"}));
    let r = c.post_json(&url, br#"{"input":"a"}"#, &[]).await?;
    assert_eq!((r.status, r.json()), (StatusCode::BAD_REQUEST, json!({"error": "model is required"})));

    mock.control().set_fail_rate(1.0);
    let r = c.post_json(&format!("{}/api/chat", mock.url()), CHAT, &[]).await?;
    assert_eq!((r.status, r.json()), (StatusCode::SERVICE_UNAVAILABLE, json!({"error": "mock failure"})));
    Ok(())
}
