//! Upstream connections: kept alive and reused across requests, plain and streamed, OpenAI and
//! Anthropic alike (backends that drop their connections: failover.rs and resume.rs).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::sync::atomic::Ordering::Relaxed;

use crate::common::*;
use switchyard_testkit::TestClient;

const ANTHROPIC: &str = r#"{"model":"m","max_tokens":16,"stream":STREAM,"messages":[{"role":"user","content":"hi"}]}"#;

/// One request: OpenAI Chat or Anthropic Messages, plain or streamed, read to the end.
async fn one(client: &TestClient, gw: &switchyard_gateway::RunningGateway, i: usize) {
    let stream = i % 2 == 1;
    let (path, body) = if i % 4 < 2 {
        ("/v1/chat/completions", chat_body("m", stream))
    } else {
        ("/v1/messages", ANTHROPIC.replace("STREAM", &stream.to_string()))
    };
    let r = client.post_json(&format!("{}{path}", gw.url()), body.as_bytes(), &[]).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(!r.text().is_empty());
}

#[tokio::test]
async fn sequential_requests_reuse_one_upstream_connection() {
    let backend = mock(&["m"]).await;
    let gw = gateway(&[&backend], "").await;
    let client = TestClient::new();
    one(&client, &gw, 0).await;
    backend.control().reset_counters();
    for i in 0..200 {
        one(&client, &gw, i).await;
    }
    assert_eq!(backend.control().request_count(), 200);
    // Every request on the connection the first one opened; at most one more for a health probe
    // (its client keeps its own).
    let opened = backend.control().connections.load(Relaxed);
    assert!(opened <= 1, "200 requests opened {opened} new upstream connections");
    // And the gateway says so: one connection, back in its pool, waiting for the next request.
    let metrics = client.get(&format!("{}/metrics", gw.url())).await.unwrap().text();
    assert!(metrics.contains("switchyard_backend_idle_connections{backend=\"b0\"} 1\n"), "{metrics}");
}

#[tokio::test]
async fn concurrent_requests_open_no_more_connections_than_they_need() {
    let backend = mock(&["m"]).await;
    let gw = gateway(&[&backend], "").await;
    let client = TestClient::new();
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..8 {
        let (client, gw_url) = (client.clone(), gw.url());
        workers.spawn(async move {
            for i in 0..40 {
                let stream = (w + i) % 2 == 1;
                let url = format!("{gw_url}/v1/chat/completions");
                let r = client.post_json(&url, chat_body("m", stream).as_bytes(), &[]).await.unwrap();
                assert_eq!(r.status, 200, "{}", r.text());
            }
        });
    }
    while let Some(done) = workers.join_next().await {
        done.unwrap();
    }
    assert_eq!(backend.control().request_count(), 320);
    let opened = backend.control().connections.load(Relaxed);
    assert!(opened <= 8 + 1, "8 clients at once opened {opened} upstream connections");
}
