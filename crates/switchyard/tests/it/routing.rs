//! Routing through the real gateway: each strategy's distribution, aliases, discovery, catalogue.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::time::Duration;

use crate::common::*;
use switchyard_testkit::{MockApi, MockConfig, TestClient};

#[tokio::test]
async fn round_robin_splits_evenly() {
    let (a, b) = (mock(&["m"]).await, mock(&["m"]).await);
    let gw = gateway(&[&a, &b], "routing: {strategy: round-robin}").await;
    let counts = distribution(&gw, "m", 100).await;
    assert_eq!(counts["b0"], 50);
    assert_eq!(counts["b1"], 50);
}

#[tokio::test]
async fn weighted_follows_weights_exactly() {
    let (a, b) = (mock(&["m"]).await, mock(&["m"]).await);
    let yaml = format!(
        "listen: 127.0.0.1:0\nrouting: {{strategy: weighted}}\nbackends:\n  - {{name: heavy, url: '{}', weight: 3}}\n  - {{name: light, url: '{}', weight: 1}}\n",
        a.url(),
        b.url()
    );
    let gw = gateway_yaml(&yaml).await;
    let counts = distribution(&gw, "m", 400).await;
    assert_eq!((counts["heavy"], counts["light"]), (300, 100));
}

#[tokio::test]
async fn priority_uses_the_top_tier_and_falls_back() {
    let (low, mut high) = (mock(&["m"]).await, mock(&["m"]).await);
    let yaml = format!(
        "listen: 127.0.0.1:0\nrouting: {{strategy: priority}}\nbackends:\n  - {{name: low, url: '{}', priority: 10}}\n  - {{name: high, url: '{}', priority: 100}}\n",
        low.url(),
        high.url()
    );
    let gw = gateway_yaml(&yaml).await;
    assert_eq!(distribution(&gw, "m", 20).await.get("high"), Some(&20));
    high.kill();
    let counts = distribution(&gw, "m", 20).await;
    assert_eq!(counts.get("low"), Some(&20), "{counts:?}");
    high.restart().await.unwrap();
}

#[tokio::test]
async fn least_connections_avoids_the_busy_backend() {
    // b1 answers slowly, so it holds connections; least-connections sends most work to b0,
    // where round-robin would split it evenly.
    let fast = mock(&["m"]).await;
    let slow = mock_with(&["m"], MockConfig { latency: Duration::from_millis(100), ..MockConfig::default() }).await;
    let gw = gateway(&[&fast, &slow], "routing: {strategy: least-connections}").await;
    let client = TestClient::new();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let (client, url) = (client.clone(), gw.url());
        workers.spawn(async move {
            let mut slow_hits = 0;
            for _ in 0..10 {
                let r = client
                    .post_json(&format!("{url}/v1/chat/completions"), chat_body("m", false).as_bytes(), &[])
                    .await
                    .unwrap();
                assert_eq!(r.status, 200);
                slow_hits += usize::from(backend_of(&r) == "b1");
            }
            slow_hits
        });
    }
    let mut slow_total = 0;
    while let Some(n) = workers.join_next().await {
        slow_total += n.unwrap();
    }
    assert!(slow_total <= 10, "the slow backend got {slow_total} of 40 requests");
}

#[tokio::test]
async fn alias_is_rewritten_to_the_real_model() {
    let a = mock(&["llama3.2:1b"]).await;
    let gw = gateway(&[&a], "aliases: {fast: 'llama3.2:1b'}").await;
    let r = chat(&TestClient::new(), &gw, "fast").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["model"], "llama3.2:1b", "the backend saw the real model name");
}

#[tokio::test]
async fn models_lists_the_union_once_with_aliases() {
    let (a, b) = (mock(&["x", "y"]).await, mock(&["y", "z"]).await);
    let gw = gateway(&[&a, &b], "aliases: {fast: x, dangling: nowhere}").await;
    let r = TestClient::new().get(&format!("{}/v1/models", gw.url())).await.unwrap();
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["object"], "list");
    let ids: Vec<&str> = v["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, vec!["x", "y", "z", "fast"]);
    assert_eq!(v["data"][1]["backends"], serde_json::json!(["b0", "b1"]));
}

#[tokio::test]
async fn models_drop_out_of_the_catalogue_when_their_backend_dies() {
    let (a, b) = (mock(&["x"]).await, mock(&["y"]).await);
    let gw = gateway(&[&a, &b], "").await;
    b.kill();
    let client = TestClient::new();
    // A request to the dead backend marks it down at once (passive detection).
    let r = chat(&client, &gw, "y").await;
    assert!(r.status.is_server_error());
    let v = client.get(&format!("{}/v1/models", gw.url())).await.unwrap().json();
    let ids: Vec<&str> = v["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, vec!["x"]);
}

#[tokio::test]
async fn unknown_model_is_a_404_in_openai_shape() {
    let a = mock(&["m"]).await;
    let gw = gateway(&[&a], "").await;
    let r = chat(&TestClient::new(), &gw, "gpt-99").await;
    assert_eq!(r.status, 404);
    let v = r.json();
    assert_eq!(v["error"]["code"], "model_not_found");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert_eq!(v["error"]["param"], "model");
}

#[tokio::test]
async fn ollama_backends_are_discovered_through_api_tags() {
    let o = mock_with(&["llama3.2:1b"], MockConfig { api: MockApi::Ollama, ..MockConfig::default() }).await;
    let yaml = format!("listen: 127.0.0.1:0\nbackends:\n  - {{name: local, url: '{}', type: ollama}}\n", o.url());
    let gw = gateway_yaml(&yaml).await;
    let r = chat(&TestClient::new(), &gw, "llama3.2:1b").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(backend_of(&r), "local");
}

#[tokio::test]
async fn static_model_lists_need_no_discovery() {
    let a = mock(&["m"]).await;
    let yaml = format!("listen: 127.0.0.1:0\nbackends:\n  - {{name: s, url: '{}', models: [m]}}\n", a.url());
    let gw = gateway_yaml(&yaml).await;
    assert_eq!(chat(&TestClient::new(), &gw, "m").await.status, 200);
    // The backend also serves nothing else as far as the gateway is concerned.
    assert_eq!(chat(&TestClient::new(), &gw, "other").await.status, 404);
}

#[tokio::test]
async fn completions_and_embeddings_are_proxied() {
    let a = mock(&["m"]).await;
    let gw = gateway(&[&a], "").await;
    let client = TestClient::new();
    let r = client
        .post_json(&format!("{}/v1/completions", gw.url()), br#"{"model":"m","prompt":"hi"}"#, &[])
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["object"], "text_completion");
    let r = client
        .post_json(&format!("{}/v1/embeddings", gw.url()), br#"{"model":"m","input":["a","b"]}"#, &[])
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["data"].as_array().unwrap().len(), 2);
}
