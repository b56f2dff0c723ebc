//! Stream resume: a backend dying after its answer began streaming costs the client nothing —
//! another backend carries the same answer on, spliced into the client's stream in its own API
//! (one start, the text whole and in order, no error, one end), a tool call cut mid-arguments
//! arrives whole once, and usage counts every attempt. Off (`routing.resume_streams: false`),
//! the stream ends with the clean error event it always had.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use crate::common::*;
use serde_json::Value;
use switchyard_testkit::{MockApi, MockConfig, MockServer, TestClient};

const CHUNKS: usize = 8;

/// The whole answer of the mocks: `tok0 tok1 ... tok7 `.
fn whole_text() -> String {
    (0..CHUNKS).map(|i| format!("tok{i} ")).collect()
}

async fn backend(api: MockApi) -> MockServer {
    // Paced, so each event leaves the backend on its own (as a real server's tokens do) and a
    // death lands mid-answer, not before the headers were flushed.
    let chunk_delay = std::time::Duration::from_millis(5);
    mock_with(&["m"], MockConfig { stream_chunks: CHUNKS, api, chunk_delay, ..MockConfig::default() }).await
}

/// `first` is preferred (priority routing); `second` takes over.
/// `extra`: more `routing:` keys; `top`: more top-level YAML.
async fn pair_gateway(
    (first, first_api): (&MockServer, MockApi),
    (second, second_api): (&MockServer, MockApi),
    extra: &str,
    top: &str,
) -> switchyard_gateway::RunningGateway {
    let yaml = format!(
        "listen: 127.0.0.1:0\n{top}\nrouting: {{strategy: priority{extra}}}\nbackends:\n  - {{name: b0, type: {}, url: '{}', priority: 10, api_key: k}}\n  - {{name: b1, type: {}, url: '{}', priority: 1, api_key: k}}\n",
        first_api.as_str(),
        first.url(),
        second_api.as_str(),
        second.url()
    );
    gateway_yaml(&yaml).await
}

/// The JSON payloads of an SSE stream's data lines (`[DONE]` kept as a string).
fn sse_events(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap_or(Value::String(d.to_owned())))
        .collect()
}

async fn stream(gw: &switchyard_gateway::RunningGateway, path: &str, body: &str) -> (http::HeaderMap, String) {
    let (status, headers, frames) =
        TestClient::new().post_stream(&format!("{}{path}", gw.url()), body.as_bytes(), &[]).await.unwrap();
    let text = String::from_utf8(frames.concat()).unwrap();
    assert_eq!(status, 200, "{text}");
    (headers, text)
}

const OPENAI_STREAM: &str = r#"{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"count"}]}"#;

/// An OpenAI chat stream read as a client would: its text, role chunks, finish reasons, usage.
fn read_openai(text: &str) -> (String, usize, usize, Option<Value>) {
    let events = sse_events(text);
    assert_eq!(events.last(), Some(&Value::String("[DONE]".into())), "{text}");
    assert!(!text.contains("\"error\""), "{text}");
    let mut content = String::new();
    let (mut roles, mut finishes, mut usage) = (0, 0, None);
    for e in &events {
        if let Some(choice) = e["choices"].get(0) {
            content.push_str(choice["delta"]["content"].as_str().unwrap_or(""));
            roles += usize::from(choice["delta"].get("role").is_some());
            finishes += usize::from(choice["finish_reason"].is_string());
        }
        if e["usage"].is_object() {
            usage = Some(e["usage"].clone());
        }
    }
    (content, roles, finishes, usage)
}

#[tokio::test]
async fn an_openai_stream_carries_on_at_another_backend() {
    let (a, b) = (backend(MockApi::OpenAi).await, backend(MockApi::OpenAi).await);
    let gw = pair_gateway((&a, MockApi::OpenAi), (&b, MockApi::OpenAi), "", "").await;
    a.control().set_die_after_frames(3);
    let (headers, text) = stream(&gw, "/v1/chat/completions", OPENAI_STREAM).await;
    assert_eq!(headers["x-switchyard-backend"], "b0", "the answer began at b0");
    let (content, roles, finishes, usage) = read_openai(&text);
    assert_eq!(content, whole_text(), "{text}");
    assert_eq!((roles, finishes), (1, 1), "one start and one end: {text}");
    // The usage the client sees is one answer's: every generated token counted once.
    let usage = usage.expect("the usage chunk the client asked for");
    assert!(usage["completion_tokens"].as_u64().unwrap() >= CHUNKS as u64 - 3, "{usage}");
    assert_eq!((a.control().request_count(), b.control().request_count()), (1, 1));
    // Every chunk has the id of the answer's start.
    let ids: std::collections::HashSet<_> =
        sse_events(&text).iter().filter_map(|e| e["id"].as_str().map(str::to_owned)).collect();
    assert_eq!(ids.len(), 1, "{ids:?}");
}

#[tokio::test]
async fn an_anthropic_stream_carries_on_with_native_prefill() {
    let (a, b) = (backend(MockApi::Anthropic).await, backend(MockApi::Anthropic).await);
    let gw = pair_gateway((&a, MockApi::Anthropic), (&b, MockApi::Anthropic), "", "").await;
    // message_start, content_block_start, ping-free deltas: die three text deltas in.
    a.control().set_die_after_frames(5);
    let body = r#"{"model":"m","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"count"}]}"#;
    let (_, text) = stream(&gw, "/v1/messages", body).await;
    let events = sse_events(&text);
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(kinds.iter().filter(|k| **k == "message_start").count(), 1, "{text}");
    assert_eq!(kinds.iter().filter(|k| **k == "content_block_start").count(), 1, "{text}");
    assert_eq!(kinds.last(), Some(&"message_stop"), "{text}");
    assert!(!kinds.contains(&"error"), "{text}");
    let content: String = events
        .iter()
        .filter(|e| e["type"] == "content_block_delta")
        .map(|e| {
            assert_eq!(e["index"], 0, "{text}");
            e["delta"]["text"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(content, whole_text(), "{text}");
    assert_eq!(b.control().request_count(), 1);
}

#[tokio::test]
async fn an_ollama_stream_carries_on() {
    let (a, b) = (backend(MockApi::Ollama).await, backend(MockApi::Ollama).await);
    let gw = pair_gateway((&a, MockApi::Ollama), (&b, MockApi::Ollama), "", "").await;
    a.control().set_die_after_frames(4);
    let body = r#"{"model":"m","messages":[{"role":"user","content":"count"}]}"#;
    let (_, text) = stream(&gw, "/api/chat", body).await;
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let content: String = lines.iter().map(|l| l["message"]["content"].as_str().unwrap_or("")).collect();
    assert_eq!(content, whole_text(), "{text}");
    assert_eq!(lines.iter().filter(|l| l["done"] == true).count(), 1, "{text}");
    assert_eq!(lines.last().unwrap()["done"], true, "{text}");
    assert!(!text.contains("\"error\""), "{text}");
}

#[tokio::test]
async fn an_openai_stream_carries_on_at_a_backend_of_another_kind() {
    let (a, b) = (backend(MockApi::OpenAi).await, backend(MockApi::Anthropic).await);
    let gw = pair_gateway((&a, MockApi::OpenAi), (&b, MockApi::Anthropic), "", "").await;
    a.control().set_die_after_frames(4);
    let (_, text) = stream(&gw, "/v1/chat/completions", OPENAI_STREAM).await;
    let (content, roles, finishes, usage) = read_openai(&text);
    assert_eq!(content, whole_text(), "{text}");
    assert_eq!((roles, finishes), (1, 1), "{text}");
    assert!(usage.is_some());
}

#[tokio::test]
async fn a_tool_call_cut_mid_arguments_arrives_whole_once() {
    let (a, b) = (backend(MockApi::OpenAi).await, backend(MockApi::OpenAi).await);
    let gw = pair_gateway((&a, MockApi::OpenAi), (&b, MockApi::OpenAi), "", "").await;
    // The call's head and its first arguments fragment, then death.
    a.control().set_die_after_frames(2);
    let body = r#"{"model":"m","stream":true,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}],"messages":[{"role":"user","content":"weather?"}]}"#;
    let (_, text) = stream(&gw, "/v1/chat/completions", body).await;
    assert!(!text.contains("\"error\""), "{text}");
    let events = sse_events(&text);
    let mut calls: Vec<(String, String, String)> = Vec::new();
    for e in &events {
        for call in e["choices"][0]["delta"]["tool_calls"].as_array().into_iter().flatten() {
            if let Some(id) = call["id"].as_str() {
                calls.push((id.to_owned(), call["function"]["name"].as_str().unwrap().to_owned(), String::new()));
            }
            let fragment = call["function"]["arguments"].as_str().unwrap_or("");
            calls.last_mut().expect("arguments after the call's head").2.push_str(fragment);
        }
    }
    assert_eq!(calls.len(), 1, "one tool call: {text}");
    assert_eq!(calls[0].1, "get_weather");
    assert_eq!(calls[0].2, r#"{"location":"Paris","unit":"celsius"}"#, "{text}");
    let finishes: Vec<&str> = events.iter().filter_map(|e| e["choices"][0]["finish_reason"].as_str()).collect();
    assert_eq!(finishes, ["tool_calls"], "{text}");
    assert_eq!(b.control().request_count(), 1);
}

#[tokio::test]
async fn usage_counts_every_attempt_in_one_record() {
    let (a, b) = (backend(MockApi::OpenAi).await, backend(MockApi::OpenAi).await);
    let dir = scratch_dir();
    let db = db_url(&dir);
    let storage = format!("storage: {{url: '{db}', usage_journal_dir: '{}/usage'}}", dir.display());
    let gw = pair_gateway((&a, MockApi::OpenAi), (&b, MockApi::OpenAi), "", &storage).await;
    a.control().set_die_after_frames(3);
    let (headers, text) = stream(&gw, "/v1/chat/completions", OPENAI_STREAM).await;
    let (content, _, _, usage) = read_openai(&text);
    assert_eq!(content, whole_text(), "{text}");
    let rows = records(&db, 1).await;
    assert_eq!(rows.len(), 1, "exactly one record: {rows:?}");
    let (_, status, prompt, completion, _, estimated) = rows[0].clone();
    assert_eq!(status, 200);
    // The continuation generated 5 tokens; the dead attempt generated 3 more (estimated from
    // its text) and read the prompt once more.
    let continuation = usage.unwrap();
    assert!(completion > 5, "completion {completion} counts the dead attempt's tokens too: {continuation}");
    assert!(prompt > continuation["prompt_tokens"].as_u64().unwrap() as i64 - 4, "{prompt} {continuation}");
    assert!(estimated, "part of it is an estimate");
    assert!(headers.contains_key("x-switchyard-backend"));
}

#[tokio::test]
async fn with_resume_off_the_stream_ends_in_an_error_event() {
    let (a, b) = (backend(MockApi::OpenAi).await, backend(MockApi::OpenAi).await);
    let gw = pair_gateway((&a, MockApi::OpenAi), (&b, MockApi::OpenAi), ", resume_streams: false", "").await;
    a.control().set_die_after_frames(3);
    let (_, text) = stream(&gw, "/v1/chat/completions", OPENAI_STREAM).await;
    assert!(text.contains("\"code\":\"stream_aborted\""), "{text}");
    assert!(!text.contains("[DONE]"), "{text}");
    assert_eq!(b.control().request_count(), 0);
}

#[tokio::test]
async fn a_stream_whose_model_has_no_other_backend_carries_on_at_its_fallback_model() {
    let a = backend(MockApi::OpenAi).await;
    let chunk_delay = std::time::Duration::from_millis(5);
    let config = MockConfig { stream_chunks: CHUNKS, api: MockApi::OpenAi, chunk_delay, ..MockConfig::default() };
    let b = mock_with(&["small"], config).await;
    let yaml = format!(
        "listen: 127.0.0.1:0\nfallbacks: {{m: [small]}}\nbackends:\n  - {{name: b0, url: '{}'}}\n  - {{name: b1, url: '{}'}}\n",
        a.url(),
        b.url()
    );
    let gw = gateway_yaml(&yaml).await;
    a.control().set_die_after_frames(3);
    let (headers, text) = stream(&gw, "/v1/chat/completions", OPENAI_STREAM).await;
    assert_eq!(headers["x-switchyard-backend"], "b0", "the answer began at the model's own backend");
    let (content, roles, finishes, _) = read_openai(&text);
    assert_eq!(content, whole_text(), "{text}");
    assert_eq!((roles, finishes), (1, 1), "one start and one end: {text}");
    assert_eq!(b.control().request_count(), 1, "the fallback model's backend carried it on");
    let metrics = TestClient::new().get(&format!("{}/metrics", gw.url())).await.unwrap().text();
    assert!(metrics.contains("switchyard_fallbacks_total{from=\"m\",to=\"small\"} 1"), "{metrics}");
}

#[tokio::test]
async fn a_resume_goes_to_a_backend_holding_the_conversations_prefix() {
    // Three backends of two slots each, cache-aware routing; a prompt long enough to span
    // several of the prefix index's blocks.
    let paced =
        || MockConfig { stream_chunks: 40, chunk_delay: std::time::Duration::from_millis(25), ..MockConfig::default() };
    let mocks = [mock_with(&["m"], paced()).await, mock_with(&["m"], paced()).await, mock_with(&["m"], paced()).await];
    let mut yaml = "listen: 127.0.0.1:0\nrouting: {strategy: cache-aware}\nbackends:\n".to_owned();
    for (i, m) in mocks.iter().enumerate() {
        yaml.push_str(&format!("  - {{name: b{i}, url: '{}', max_concurrency: 2}}\n", m.url()));
    }
    let gw = gateway_yaml(&yaml).await;
    let url = format!("{}/v1/chat/completions", gw.url());
    let words = "the conversation so far, long enough to fill several prefix blocks ".repeat(40);
    let body = |stream: bool| {
        serde_json::json!({"model": "m", "stream": stream, "messages": [{"role": "user", "content": words}]})
            .to_string()
    };
    let index = |name: &str| name.trim_start_matches('b').parse::<usize>().unwrap();
    let open = || async {
        let resp = TestClient::new().send(http::Method::POST, &url, body(true).into(), &[]).await.unwrap();
        let backend = index(resp.headers()["x-switchyard-backend"].to_str().unwrap());
        (resp, backend)
    };

    // The prompt's first request: its backend (`holder`) now has the prefix cached.
    let r = TestClient::new().post_json(&url, body(false).as_bytes(), &[]).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let holder = index(r.header("x-switchyard-backend").unwrap());
    // Streams of the same prompt go there again, and fill both its slots.
    let (busy, first_busy) = open().await;
    let (more_busy, second_busy) = open().await;
    assert_eq!((first_busy, second_busy), (holder, holder));
    // So the next one starts elsewhere, on a backend that will die mid-answer (either other one
    // may be picked: both are set to).
    for (i, m) in mocks.iter().enumerate() {
        if i != holder {
            m.control().set_die_after_frames(8);
        }
    }
    let before: Vec<u64> = mocks.iter().map(|m| m.control().request_count()).collect();
    let streaming = tokio::spawn({
        let (url, body) = (url.clone(), body(true));
        async move { TestClient::new().post_stream(&url, body.as_bytes(), &[]).await.unwrap() }
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while mocks.iter().enumerate().all(|(i, m)| i == holder || m.control().request_count() == before[i]) {
        assert!(std::time::Instant::now() < deadline, "the stream never started");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    // It has started: one of the holder's streams ends (its client goes away), so when the
    // answer breaks the holder has room but one more request in flight than the third backend.
    // By load alone the third one would carry the answer on; by the cache, the holder.
    drop(more_busy);
    let (status, headers, frames) = streaming.await.unwrap();
    let text = String::from_utf8(frames.concat()).unwrap();
    assert_eq!(status, 200, "{text}");
    let first = index(headers["x-switchyard-backend"].to_str().unwrap());
    assert_ne!(first, holder);
    let (content, roles, finishes, _) = read_openai(&text);
    assert_eq!((roles, finishes), (1, 1), "{text}");
    assert!(content.starts_with("tok0 tok1 "), "{content}");
    let third = (0..3).find(|&i| i != holder && i != first).unwrap();
    let after: Vec<u64> = mocks.iter().map(|m| m.control().request_count()).collect();
    assert_eq!(after[holder] - before[holder], 1, "the holder carried the answer on: {before:?} → {after:?}");
    assert_eq!(after[third], before[third], "the backend without the prefix was not asked: {before:?} → {after:?}");
    drop(busy);
}
