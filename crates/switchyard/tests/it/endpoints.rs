//! The rest of the API (issue 33), black-box: rerank (vLLM's shape and Cohere's `/v2` path),
//! score, moderations, image generation, tokenize and detokenize are routed to the backends that
//! serve them and passed through; each request is one usage record, priced per request, image
//! and search unit as `prices` says; a model whose backends serve other endpoints is a 404
//! `model_not_found` naming the endpoint; `/v1/models` says what each model serves.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::time::Duration;

use serde_json::{json, Value};
use switchyard_gateway::RunningGateway;
use switchyard_testkit::{MockServer, TestClient};

use crate::common::json_service::json_service;
use crate::common::*;

const MASTER: &str = "endpoints-master";

/// A hosted reranker answering in Cohere's shape, billing one search unit per call.
async fn cohere_like() -> String {
    let (addr, _) = json_service(Duration::ZERO, |asked| {
        let n = asked["documents"].as_array().map_or(0, Vec::len);
        let results: Vec<Value> = (0..n).map(|i| json!({"index": i, "relevance_score": 1.0 / (i as f64 + 1.0)})).collect();
        json!({"id": "c1", "results": results, "meta": {"api_version": {"version": "2"}, "billed_units": {"search_units": 1}}})
    })
    .await;
    format!("http://{addr}")
}

async fn gateway_with_prices() -> (RunningGateway, MockServer, MockServer) {
    let backend = mock(&["m", "img"]).await;
    let chat_only = mock(&["chat-only"]).await;
    let dir = scratch_dir();
    let yaml = format!(
        "listen: 127.0.0.1:0\n\
         storage: {{url: '{}', usage_journal_dir: '{}/usage'}}\n\
         auth: {{master_key: {MASTER}}}\n\
         prices:\n  m: {{input_per_million: 1000000, per_request: 0.5}}\n  img: {{per_image: 2.0}}\n  \
         rerank-hosted: {{per_search_unit: 0.25}}\n\
         backends:\n  - {{name: b0, url: '{}'}}\n  - {{name: hosted, url: '{}', models: [rerank-hosted], capabilities: [rerank]}}\n  \
         - {{name: claude, url: 'http://127.0.0.1:9', type: anthropic, models: [claude-x]}}\n  \
         - {{name: chatonly, url: '{}', models: [chat-only], capabilities: [chat]}}\n",
        db_url(&dir),
        dir.display(),
        backend.url(),
        cohere_like().await,
        chat_only.url(),
    );
    (gateway_yaml(&yaml).await, backend, chat_only)
}

async fn post(client: &TestClient, gw: &RunningGateway, path: &str, body: Value) -> (u16, Value) {
    let bearer = format!("Bearer {MASTER}");
    let r = client
        .post_json(&format!("{}{path}", gw.url()), body.to_string().as_bytes(), &[("authorization", &bearer)])
        .await
        .unwrap();
    let status = r.status.as_u16();
    (status, serde_json::from_slice(r.body.as_ref()).unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_endpoint_is_routed_passed_through_recorded_and_priced() {
    let (gw, backend, _chat_only) = gateway_with_prices().await;
    let client = TestClient::new();
    let rerank = json!({"model": "m", "query": "red apples", "documents": ["green pears", "red apples are sweet", "blue sky"], "top_n": 2});
    let (status, body) = post(&client, &gw, "/v1/rerank", rerank.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["results"].as_array().unwrap().len(), 2, "{body}");
    assert_eq!(body["results"][0]["index"], 1, "the best match first: {body}");
    // Cohere's v2 client path is the same endpoint.
    let (status, _) = post(&client, &gw, "/v2/rerank", rerank).await;
    assert_eq!(status, 200);
    let (status, body) =
        post(&client, &gw, "/v1/score", json!({"model": "m", "text_1": "a", "text_2": ["a", "b"]})).await;
    assert_eq!((status, body["data"].as_array().map(Vec::len)), (200, Some(2)), "{body}");
    let (status, body) =
        post(&client, &gw, "/v1/moderations", json!({"model": "m", "input": ["hello", "attack them"]})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!((&body["results"][0]["flagged"], &body["results"][1]["flagged"]), (&json!(false), &json!(true)));
    let images = json!({"model": "img", "prompt": "a lighthouse", "n": 2, "size": "1024x1024", "quality": "hd"});
    let (status, body) = post(&client, &gw, "/v1/images/generations", images).await;
    assert_eq!((status, body["data"].as_array().map(Vec::len)), (200, Some(2)), "{body}");
    let (status, body) = post(&client, &gw, "/tokenize", json!({"model": "m", "prompt": "one two three"})).await;
    assert_eq!(status, 200, "{body}");
    assert!(body["count"].as_u64().unwrap() > 0 && body["tokens"].is_array(), "{body}");
    let (status, body) = post(&client, &gw, "/detokenize", json!({"model": "m", "tokens": [1, 2]})).await;
    assert_eq!((status, body["prompt"].is_string()), (200, true), "{body}");
    let (status, body) =
        post(&client, &gw, "/v1/rerank", json!({"model": "rerank-hosted", "query": "q", "documents": ["a", "b"]}))
            .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(backend.control().request_count(), 7, "each reached the backend once");

    // One record each, with what it used and its price.
    let rows = request_log(&client, &gw, MASTER, 8).await;
    let row = |model: &str, n: usize| rows.iter().filter(|r| r["model_requested"] == model).nth(n).cloned().unwrap();
    let image = row("img", 0);
    assert_eq!(image["units"], json!({"images": 2, "image_size": "1024x1024", "image_quality": "hd"}), "{image}");
    assert!((image["cost_usd"].as_f64().unwrap() - 4.0).abs() < 1e-9, "two images at 2.0: {image}");
    let hosted = row("rerank-hosted", 0);
    assert_eq!(hosted["units"], json!({"search_units": 1}), "{hosted}");
    assert!((hosted["cost_usd"].as_f64().unwrap() - 0.25).abs() < 1e-9, "{hosted}");
    // vLLM's rerank reports its tokens as a total: they are input; each request is 0.5 on top.
    let reranked = rows.iter().filter(|r| r["model_requested"] == "m" && r["prompt_tokens"].as_u64() > Some(0)).count();
    assert!(reranked >= 3, "{rows:?}");
    let tokenized = rows.iter().filter(|r| r["model_requested"] == "m" && r["cost_usd"] == 0.0).count();
    assert_eq!(tokenized, 2, "tokenize and detokenize cost nothing: {rows:?}");
    let charged = rows.iter().filter(|r| r["model_requested"] == "m" && r["cost_usd"].as_f64() > Some(0.5)).count();
    assert_eq!(charged, 4, "rerank twice, score, moderations: 0.5 each plus tokens: {rows:?}");
}

/// `/v1/models`, as the master key sees it.
async fn catalogue(client: &TestClient, gw: &RunningGateway) -> Value {
    let bearer = format!("Bearer {MASTER}");
    let url = format!("{}/v1/models", gw.url());
    client.request(http::Method::GET, &url, bytes::Bytes::new(), &[("authorization", &bearer)]).await.unwrap().json()
}

/// What the catalogue says model `id` serves.
fn capabilities_of(models: &Value, id: &str) -> Value {
    models["data"].as_array().unwrap().iter().find(|m| m["id"] == id).unwrap()["capabilities"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_no_backend_serves_the_endpoint_for_is_not_found_and_the_catalogue_says_what_each_serves() {
    let (gw, _backend, _chat_only) = gateway_with_prices().await;
    let client = TestClient::new();
    for (model, path, capability) in [
        ("claude-x", "/v1/rerank", "rerank"),
        ("chat-only", "/v1/rerank", "rerank"),
        ("chat-only", "/v1/images/generations", "images"),
        ("rerank-hosted", "/v1/moderations", "moderations"),
    ] {
        let body = json!({"model": model, "query": "q", "documents": ["d"], "prompt": "p", "input": "i"});
        let (status, body) = post(&client, &gw, path, body).await;
        assert_eq!(status, 404, "{model} {path}: {body}");
        assert_eq!(body["error"]["code"], "model_not_found", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(model) && message.contains(capability), "{message}");
    }
    // A chat-only backend still chats; bad input is a 400 before any backend.
    let (status, _) = post(
        &client,
        &gw,
        "/v1/chat/completions",
        json!({"model": "chat-only", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(status, 200);
    for (body, param) in [
        (json!({"model": "m", "query": "q"}), "documents"),
        (json!({"model": "m", "documents": ["d"]}), "query"),
        (json!({"query": "q", "documents": ["d"]}), "model"),
    ] {
        let (status, answer) = post(&client, &gw, "/v1/rerank", body).await;
        assert_eq!((status, &answer["error"]["param"]), (400, &json!(param)), "{answer}");
    }
    let models = catalogue(&client, &gw).await;
    let served = |id: &str| capabilities_of(&models, id);
    assert_eq!(served("rerank-hosted"), json!(["rerank"]), "{models}");
    assert_eq!(served("chat-only"), json!(["chat"]), "{models}");
    let m = served("m");
    for capability in ["chat", "embeddings", "rerank", "moderations", "images", "tokenize"] {
        assert!(m.as_array().unwrap().contains(&json!(capability)), "{capability}: {m}");
    }
}

/// Image edits are multipart uploads like audio: streamed through, priced by the images the form
/// asks for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_edit_streams_through_and_is_priced_by_its_images() {
    let (gw, _backend, _chat_only) = gateway_with_prices().await;
    let client = TestClient::new();
    let boundary = "edit-boundary";
    let mut form = Vec::new();
    for (name, value) in [("model", "img"), ("prompt", "add a moon"), ("n", "3"), ("size", "512x512")] {
        form.extend_from_slice(
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n").as_bytes(),
        );
    }
    form.extend_from_slice(
        format!("--{boundary}\r\nContent-Disposition: form-data; name=\"image\"; filename=\"a.png\"\r\n\r\n")
            .as_bytes(),
    );
    form.extend_from_slice(&[0x89, b'P', b'N', b'G', 0, 1, 2, 3]);
    form.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let content_type = format!("multipart/form-data; boundary={boundary}");
    let bearer = format!("Bearer {MASTER}");
    let headers = [("content-type", content_type.as_str()), ("authorization", bearer.as_str())];
    let url = format!("{}/v1/images/edits", gw.url());
    let r = client.request(http::Method::POST, &url, bytes::Bytes::from(form), &headers).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["data"].as_array().map(Vec::len), Some(3));
    let rows = request_log(&client, &gw, MASTER, 1).await;
    assert_eq!(rows[0]["units"], json!({"images": 3, "image_size": "512x512"}), "{}", rows[0]);
    assert!((rows[0]["cost_usd"].as_f64().unwrap() - 6.0).abs() < 1e-9, "{}", rows[0]);
}

/// Capabilities discovered from the backend itself (issue 33's catalogue): a vLLM-style server
/// whose OpenAPI document lists only the pooling routes serves embeddings and rerank, not chat;
/// a llama.cpp-style server whose `/props` says `modalities.audio: false` takes no audio. Both
/// services answer every path with one document, as the model list, the OpenAPI document and
/// the props alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_backend_serves_is_discovered_from_its_openapi_document_and_props() {
    let (pooling, _) = json_service(Duration::ZERO, |_| {
        json!({"object": "list", "data": [{"id": "embedder", "object": "model"}],
               "paths": {"/v1/models": {}, "/v1/embeddings": {}, "/rerank": {}, "/v1/score": {}}})
    })
    .await;
    let (llama, _) = json_service(Duration::ZERO, |_| {
        json!({"object": "list", "data": [{"id": "llm", "object": "model"}], "modalities": {"vision": false, "audio": false}})
    })
    .await;
    let yaml = format!(
        "listen: 127.0.0.1:0\nauth: {{master_key: {MASTER}}}\n\
         backends:\n  - {{name: pooling, url: 'http://{pooling}'}}\n  - {{name: llama, url: 'http://{llama}'}}\n"
    );
    let gw = gateway_yaml(&yaml).await;
    let client = TestClient::new();
    let chat = json!({"model": "embedder", "messages": [{"role": "user", "content": "hi"}]});
    let (status, body) = post(&client, &gw, "/v1/chat/completions", chat).await;
    assert_eq!((status, &body["error"]["code"]), (404, &json!("model_not_found")), "{body}");
    let (status, body) = post(&client, &gw, "/v1/embeddings", json!({"model": "embedder", "input": "x"})).await;
    assert_eq!(status, 200, "{body}");
    let models = catalogue(&client, &gw).await;
    let served = |id: &str| capabilities_of(&models, id);
    let embedder = served("embedder");
    assert!(embedder.as_array().unwrap().iter().all(|c| c != "chat" && c != "audio"), "{models}");
    assert!(embedder.as_array().unwrap().iter().any(|c| c == "embeddings"), "{models}");
    let llm = served("llm");
    assert!(llm.as_array().unwrap().iter().any(|c| c == "chat"), "{models}");
    assert!(!llm.as_array().unwrap().iter().any(|c| c == "audio"), "{models}");
}
