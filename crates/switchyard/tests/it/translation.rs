//! Translation end to end: clients of the Anthropic, Responses and Ollama APIs served by an
//! OpenAI-compatible backend (plain and streamed), errors in each client's own shape, and exact
//! usage recorded for translated streams. The official SDKs run the same matrix in
//! tests/conformance against every backend kind.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use crate::common::*;
use serde_json::{json, Value};
use switchyard_testkit::{MockConfig, TestClient};

const TEXT: &str = "tok0 tok1 tok2 tok3 tok4 ";

async fn post(client: &TestClient, url: String, body: Value) -> (u16, String, String) {
    let (status, headers, frames) = client.post_stream(&url, body.to_string().as_bytes(), &[]).await.unwrap();
    let content_type = headers.get("content-type").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    (status.as_u16(), content_type, String::from_utf8(frames.concat()).unwrap())
}

/// `data:` payloads of an SSE body, with their `event:` names.
fn sse_events(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let name = e.lines().find_map(|l| l.strip_prefix("event: ")).unwrap_or("").to_owned();
            let data = e.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
            (name, serde_json::from_str(data).unwrap())
        })
        .collect()
}

#[tokio::test]
async fn anthropic_messages_on_an_openai_backend() {
    let a = mock_with(&["m"], MockConfig::default()).await;
    let gw = gateway(&[&a], "").await;
    let client = TestClient::new();
    let url = format!("{}/v1/messages", gw.url());
    let request = json!({"model": "m", "max_tokens": 64, "system": "be brief",
        "messages": [{"role": "user", "content": "hello"}]});
    let (status, content_type, body) = post(&client, url.clone(), request.clone()).await;
    assert_eq!((status, content_type.as_str()), (200, "application/json"), "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["type"], "message");
    assert_eq!(v["role"], "assistant");
    assert_eq!(v["content"][0], json!({"type": "text", "text": TEXT}));
    assert_eq!(v["stop_reason"], "end_turn");
    assert_eq!(v["usage"]["output_tokens"], 5);

    let mut streamed = request;
    streamed["stream"] = json!(true);
    let (status, content_type, body) = post(&client, url, streamed).await;
    assert_eq!((status, content_type.as_str()), (200, "text/event-stream"), "{body}");
    let events = sse_events(&body);
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"message_start"));
    assert_eq!(names.last(), Some(&"message_stop"));
    for (name, data) in &events {
        assert_eq!(data["type"].as_str(), Some(name.as_str()), "event name and type agree");
    }
    let text: String = events
        .iter()
        .filter(|(n, _)| n == "content_block_delta")
        .map(|(_, d)| d["delta"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, TEXT);
    let delta = &events.iter().find(|(n, _)| n == "message_delta").unwrap().1;
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
    assert_eq!(delta["usage"]["output_tokens"], 5);
}

#[tokio::test]
async fn responses_api_on_an_openai_backend() {
    let a = mock(&["m"]).await;
    let gw = gateway(&[&a], "").await;
    let client = TestClient::new();
    let url = format!("{}/v1/responses", gw.url());
    let (status, _, body) = post(&client, url.clone(), json!({"model": "m", "input": "hello"})).await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!((v["object"].as_str(), v["status"].as_str()), (Some("response"), Some("completed")));
    assert_eq!(v["output"][0]["content"][0]["text"], TEXT);
    assert_eq!(v["usage"]["output_tokens"], 5);

    let (status, content_type, body) =
        post(&client, url, json!({"model": "m", "input": "hello", "stream": true})).await;
    assert_eq!((status, content_type.as_str()), (200, "text/event-stream"));
    let events = sse_events(&body);
    assert_eq!(events.first().unwrap().0, "response.created");
    let done = &events.last().unwrap();
    assert_eq!(done.0, "response.completed");
    assert_eq!(done.1["response"]["output"][0]["content"][0]["text"], TEXT);
    let seq: Vec<u64> = events.iter().map(|(_, d)| d["sequence_number"].as_u64().unwrap()).collect();
    assert!(seq.windows(2).all(|w| w[1] == w[0] + 1), "sequence numbers count up: {seq:?}");
}

#[tokio::test]
async fn ollama_chat_and_generate_on_an_openai_backend() {
    let a = mock(&["m"]).await;
    let gw = gateway(&[&a], "").await;
    let client = TestClient::new();
    // Ollama streams unless told not to: newline-delimited JSON, the last line `done: true`.
    let (status, content_type, body) = post(
        &client,
        format!("{}/api/chat", gw.url()),
        json!({"model": "m", "messages": [{"role": "user", "content": "hello"}]}),
    )
    .await;
    assert_eq!((status, content_type.as_str()), (200, "application/x-ndjson"), "{body}");
    let lines: Vec<Value> = body.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let text: String = lines.iter().map(|l| l["message"]["content"].as_str().unwrap()).collect();
    assert_eq!(text, TEXT);
    let last = lines.last().unwrap();
    assert_eq!((last["done"].as_bool(), last["done_reason"].as_str()), (Some(true), Some("stop")));
    assert_eq!(last["eval_count"], 5);
    assert!(lines[..lines.len() - 1].iter().all(|l| l["done"] == false));

    let (status, _, body) =
        post(&client, format!("{}/api/generate", gw.url()), json!({"model": "m", "prompt": "hi", "stream": false}))
            .await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!((v["response"].as_str(), v["done"].as_bool()), (Some(TEXT), Some(true)));

    let tags = client.get(&format!("{}/api/tags", gw.url())).await.unwrap();
    assert_eq!(tags.json()["models"][0]["name"], "m");
    let version = client.get(&format!("{}/api/version", gw.url())).await.unwrap();
    assert!(version.json()["version"].is_string());
}

#[tokio::test]
async fn errors_come_in_the_clients_own_shape() {
    let a = mock(&["m"]).await;
    let gw = gateway(&[&a], "").await;
    let client = TestClient::new();
    let (status, _, body) = post(
        &client,
        format!("{}/v1/messages", gw.url()),
        json!({"model": "nope", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}),
    )
    .await;
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (status, v["type"].as_str(), v["error"]["type"].as_str()),
        (404, Some("error"), Some("not_found_error"))
    );

    let (status, _, body) = post(&client, format!("{}/v1/messages", gw.url()), json!({"model": "m"})).await;
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!((status, v["error"]["type"].as_str()), (400, Some("invalid_request_error")), "{body}");
    assert!(v["error"]["message"].as_str().unwrap().contains("messages"));

    let (status, _, body) =
        post(&client, format!("{}/api/chat", gw.url()), json!({"model": "nope", "messages": []})).await;
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status, 404);
    assert!(v["error"].as_str().unwrap().contains("nope"), "Ollama's {{\"error\": \"...\"}}: {body}");

    // A feature the backend's API cannot carry is refused with a 400 naming it, never dropped.
    let document = json!({"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}});
    let (status, _, body) = post(
        &client,
        format!("{}/v1/messages", gw.url()),
        json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [document]}]}),
    )
    .await;
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!((status, v["error"]["type"].as_str()), (400, Some("invalid_request_error")), "{body}");
    assert_eq!(a.control().request_count(), 0, "nothing reached the backend");
}

#[tokio::test]
async fn translated_streams_record_the_backends_exact_usage() {
    let a = mock(&["m"]).await;
    let (gw, db) = metered_gateway(&[&a]).await;
    let client = TestClient::new();
    let (status, _, body) = post(
        &client,
        format!("{}/v1/messages", gw.url()),
        json!({"model": "m", "max_tokens": 64, "stream": true, "messages": [{"role": "user", "content": "hello"}]}),
    )
    .await;
    assert_eq!(status, 200);
    let delta = sse_events(&body).into_iter().find(|(n, _)| n == "message_delta").unwrap().1;
    let (input, output) = (delta["usage"]["input_tokens"].as_i64().unwrap(), delta["usage"]["output_tokens"].as_i64());
    let rows = records(&db, 1).await;
    let (_, status, prompt, completion, total, estimated) = rows[0].clone();
    assert_eq!((status, prompt, Some(completion), total, estimated), (200, input, output, input + 5, false));
}
