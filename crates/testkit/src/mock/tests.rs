//! Integration tests of the mock backend driven through [`crate::TestClient`].

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;

use crate::{MockConfig, MockServer, TestClient};

const CHAT: &[u8] = br#"{"model":"mock-model","messages":[{"role":"user","content":"hello there"}]}"#;
const CHAT_STREAM: &[u8] = br#"{"model":"mock-model","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
const CHAT_STREAM_USAGE: &[u8] = br#"{"model":"mock-model","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}"#;

fn any_port() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

pub(super) async fn start(cfg: MockConfig) -> MockServer {
    match MockServer::start(any_port(), cfg).await {
        Ok(s) => s,
        Err(e) => panic!("mock failed to start: {e}"),
    }
}

/// Splits SSE bytes into the payloads of its `data:` events.
pub(super) fn sse_events(frames: &[Bytes]) -> Vec<String> {
    let all: Vec<u8> = frames.iter().flat_map(|f| f.iter().copied()).collect();
    let text = String::from_utf8_lossy(&all).into_owned();
    text.split("\n\n").filter(|e| !e.is_empty()).map(|e| e.strip_prefix("data: ").unwrap_or(e).to_owned()).collect()
}

pub(super) fn parse(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or(Value::Null)
}

#[tokio::test]
async fn models_health_and_unknown_paths() -> Result<(), crate::Error> {
    let cfg = MockConfig { models: vec!["a".into(), "b".into()], ..MockConfig::default() };
    let mock = start(cfg).await;
    let c = TestClient::new();

    let r = c.get(&format!("{}/v1/models", mock.url())).await?;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.header("content-type"), Some("application/json"));
    let port = mock.addr().port().to_string();
    assert_eq!(r.header("x-mock-port"), Some(port.as_str()));
    let j = r.json();
    assert_eq!(j["object"], "list");
    assert_eq!(j["data"][0]["id"], "a");
    assert_eq!(j["data"][1]["id"], "b");
    assert_eq!(j["data"][1]["object"], "model");
    assert_eq!(j["data"][1]["owned_by"], "switchyard-mock");

    let r = c.get(&format!("{}/health", mock.url())).await?;
    assert_eq!((r.status, r.json()["status"].clone()), (StatusCode::OK, "ok".into()));

    let r = c.get(&format!("{}/nope", mock.url())).await?;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    // Ollama's endpoints are not part of the OpenAI API.
    let r = c.get(&format!("{}/api/tags", mock.url())).await?;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    // GETs are not counted.
    assert_eq!(mock.control().request_count(), 0);
    Ok(())
}

#[tokio::test]
async fn chat_non_streaming_shape() -> Result<(), crate::Error> {
    let mock = start(MockConfig::default()).await;
    let c = TestClient::new();
    let url = format!("{}/v1/chat/completions", mock.url());
    let r = c.post_json(&url, CHAT, &[]).await?;
    assert_eq!(r.status, StatusCode::OK);
    let j = r.json();
    assert!(j["id"].as_str().is_some_and(|s| s.starts_with("chatcmpl-mock-")));
    assert_eq!(j["object"], "chat.completion");
    assert_eq!(j["model"], "mock-model");
    assert_eq!(j["choices"][0]["message"]["role"], "assistant");
    assert_eq!(j["choices"][0]["message"]["content"], "tok0 tok1 tok2 tok3 tok4 ");
    assert_eq!(j["choices"][0]["finish_reason"], "stop");
    let prompt = (CHAT.len() / 4) as u64;
    assert_eq!(j["usage"]["prompt_tokens"], prompt);
    assert_eq!(j["usage"]["completion_tokens"], 5);
    assert_eq!(j["usage"]["total_tokens"], prompt + 5);
    // Keep-alive: a second request reuses the connection.
    let r2 = c.post_json(&url, CHAT, &[]).await?;
    assert_eq!(r2.body, r.body, "identical requests give identical bodies");
    assert_eq!(mock.control().connections.load(Ordering::Relaxed), 1);
    assert_eq!(mock.control().request_count(), 2);
    Ok(())
}

#[tokio::test]
async fn request_errors() -> Result<(), crate::Error> {
    let mock = start(MockConfig::default()).await;
    let c = TestClient::new();
    let url = format!("{}/v1/chat/completions", mock.url());

    let r = c.post_json(&url, br#"{"messages":[]}"#, &[]).await?;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.json()["error"]["param"], "model");
    assert_eq!(r.json()["error"]["code"], Value::Null);

    let r = c.post_json(&url, br#"{"model":42}"#, &[]).await?;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);

    let r = c.post_json(&url, br#"{"model":"gpt-9"}"#, &[]).await?;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.json()["error"]["code"], "model_not_found");

    let r = c.post_json(&url, b"not json", &[]).await?;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);

    let emb = format!("{}/v1/embeddings", mock.url());
    let r = c.post_json(&emb, br#"{"model":"mock-model","input":3}"#, &[]).await?;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.json()["error"]["param"], "input");
    assert_eq!(mock.control().request_count(), 5);
    Ok(())
}

#[tokio::test]
async fn chat_streaming_frames() -> Result<(), crate::Error> {
    let mock = start(MockConfig { chunk_delay: Duration::from_millis(2), ..MockConfig::default() }).await;
    let c = TestClient::new();
    let url = format!("{}/v1/chat/completions", mock.url());

    let (status, headers, frames) = c.post_stream(&url, CHAT_STREAM, &[]).await?;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers.get("content-type").map(|v| v.as_bytes()), Some(&b"text/event-stream"[..]));
    // With a chunk delay every content chunk arrives in its own frame.
    assert!(frames.len() >= 5, "got {} frames", frames.len());
    let events = sse_events(&frames);
    assert_eq!(events.len(), 5 + 2, "{events:?}");
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let first = parse(&events[0]);
    assert_eq!(first["object"], "chat.completion.chunk");
    assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
    let content: String = events[..5]
        .iter()
        .map(|e| parse(e)["choices"][0]["delta"]["content"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(content, "tok0 tok1 tok2 tok3 tok4 ");
    let stop = parse(&events[5]);
    assert_eq!(stop["choices"][0]["finish_reason"], "stop");
    assert!(events.iter().all(|e| !e.contains("\"usage\"")));

    let (_, _, frames) = c.post_stream(&url, CHAT_STREAM_USAGE, &[]).await?;
    let events = sse_events(&frames);
    assert_eq!(events.len(), 5 + 3);
    let usage = parse(&events[6]);
    assert_eq!(usage["choices"], Value::Array(vec![]));
    assert_eq!(usage["usage"]["completion_tokens"], 5);
    assert_eq!(events[7], "[DONE]");

    // Deterministic bytes for identical requests.
    let (_, _, again) = c.post_stream(&url, CHAT_STREAM_USAGE, &[]).await?;
    assert_eq!(sse_events(&again), events);
    Ok(())
}

#[tokio::test]
async fn completions_and_embeddings() -> Result<(), crate::Error> {
    let mock = start(MockConfig { stream_chunks: 3, ..MockConfig::default() }).await;
    let c = TestClient::http2();
    let url = format!("{}/v1/completions", mock.url());
    let j = c.post_json(&url, br#"{"model":"mock-model","prompt":"x"}"#, &[]).await?.json();
    assert_eq!(j["object"], "text_completion");
    assert_eq!(j["choices"][0]["text"], "tok0 tok1 tok2 ");
    assert_eq!(j["usage"]["completion_tokens"], 3);

    let body = br#"{"model":"mock-model","prompt":"x","stream":true}"#;
    let (_, _, frames) = c.post_stream(&url, body, &[]).await?;
    let events = sse_events(&frames);
    assert_eq!(events.len(), 3 + 2);
    assert_eq!(parse(&events[1])["choices"][0]["text"], "tok1 ");
    assert_eq!(parse(&events[3])["choices"][0]["finish_reason"], "stop");

    let url = format!("{}/v1/embeddings", mock.url());
    let r = c.post_json(&url, br#"{"model":"mock-model","input":["a","b"]}"#, &[]).await?;
    let j = r.json();
    assert_eq!(j["object"], "list");
    assert_eq!(j["data"][1]["index"], 1);
    assert_eq!(j["data"][0]["embedding"].as_array().map(Vec::len), Some(8));
    assert_ne!(j["data"][0]["embedding"], j["data"][1]["embedding"]);
    assert_eq!(j["model"], "mock-model");
    let single = c.post_json(&url, br#"{"model":"mock-model","input":"a"}"#, &[]).await?.json();
    assert_eq!(single["data"][0]["embedding"], j["data"][0]["embedding"]);
    Ok(())
}

#[tokio::test]
async fn failure_injection() -> Result<(), crate::Error> {
    let mock = start(MockConfig { fail_rate: 1.0, ..MockConfig::default() }).await;
    let c = TestClient::new();
    let url = format!("{}/v1/chat/completions", mock.url());
    let r = c.post_json(&url, CHAT, &[]).await?;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.json()["error"]["type"], "server_error");
    assert_eq!(r.json()["error"]["message"], "mock failure");

    let ctl = mock.control();
    ctl.set_fail_status(429);
    assert_eq!(c.post_json(&url, CHAT, &[]).await?.status, StatusCode::TOO_MANY_REQUESTS);
    ctl.set_fail_rate(0.0);
    assert_eq!(c.post_json(&url, CHAT, &[]).await?.status, StatusCode::OK);
    assert_eq!(ctl.failures.load(Ordering::Relaxed), 2);

    ctl.set_fail_rate(0.5);
    let mut failed = 0;
    for _ in 0..200 {
        if c.post_json(&url, CHAT, &[]).await?.status != StatusCode::OK {
            failed += 1;
        }
    }
    assert!((50..150).contains(&failed), "failed {failed}/200");
    Ok(())
}

#[tokio::test]
async fn latency_is_applied() -> Result<(), crate::Error> {
    let mock = start(MockConfig::default()).await;
    mock.control().set_latency(Duration::from_millis(30));
    let c = TestClient::new();
    let t = std::time::Instant::now();
    let r = c.post_json(&format!("{}/v1/chat/completions", mock.url()), CHAT, &[]).await?;
    assert_eq!(r.status, StatusCode::OK);
    assert!(t.elapsed() >= Duration::from_millis(30));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_refuses_and_cuts_streams_then_restart_serves() -> Result<(), crate::Error> {
    let mut mock =
        start(MockConfig { stream_chunks: 100, chunk_delay: Duration::from_millis(20), ..MockConfig::default() }).await;
    let addr = mock.addr();
    let c = TestClient::new();
    let url = format!("{}/v1/chat/completions", mock.url());

    // Open a stream and read its first frame, then kill mid-response.
    let resp = c.send(Method::POST, &url, Bytes::from_static(CHAT_STREAM), &[]).await?;
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    let first = body.frame().await;
    assert!(matches!(first, Some(Ok(_))));
    mock.kill();
    mock.kill(); // idempotent
    assert!(!mock.is_running());
    let mut cut = false;
    while let Some(frame) = body.frame().await {
        if frame.is_err() {
            cut = true;
            break;
        }
    }
    assert!(cut, "stream must end with an error, not cleanly");
    let refused = tokio::net::TcpStream::connect(addr).await;
    assert!(refused.is_err(), "port must refuse after kill");

    mock.restart().await?;
    assert_eq!(mock.addr(), addr);
    let fresh = TestClient::new();
    let r = fresh.get(&format!("{}/health", mock.url())).await?;
    assert_eq!(r.status, StatusCode::OK);
    // The control (and its counters) survive the restart.
    assert_eq!(mock.control().request_count(), 1);
    drop(mock);
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    Ok(())
}
