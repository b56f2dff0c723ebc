//! Cross-model fallbacks (`fallbacks:`): when a model's own backends answer with a status on
//! `routing.fallback_statuses`, are down, or serve it no longer, the request goes on to the next
//! model of its list — streamed or not, through every inbound API, with nothing reaching the client
//! before — and the answer says which model served it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::Value;
use switchyard_testkit::{MockServer, TestClient};

/// (path, body) for `model` in each inbound API, plain and streamed.
fn requests(model: &str) -> Vec<(&'static str, Value)> {
    every_api(model, "hello")
}

/// Every request for `big` answers 200 from `small`, saying so; the body carries no error.
async fn all_served_by_the_fallback(client: &TestClient, gw: &switchyard_gateway::RunningGateway, rounds: usize) {
    all_served_by(client, gw, rounds, "small").await;
}

/// Every request for `big`, in every API, answers 200 from `by`, saying so, with no error inside.
async fn all_served_by(client: &TestClient, gw: &switchyard_gateway::RunningGateway, rounds: usize, by: &str) {
    for round in 0..rounds {
        for (path, body) in requests("big") {
            let r = client.post_json(&format!("{}{path}", gw.url()), body.to_string().as_bytes(), &[]).await.unwrap();
            let what = format!("round {round}, {path}, stream {}", body["stream"]);
            assert_eq!(r.status, 200, "{what}: {}", r.text());
            assert_eq!(r.header("x-switchyard-model"), Some(by), "{what}");
            let text = r.text();
            assert!(text.contains(by), "{what}: the answer names the model that served it: {text}");
            let failed = ["stream_aborted", "\"error\":{", "event: error", "\"type\":\"error\""];
            assert!(!failed.iter().any(|f| text.contains(f)), "{what}: {text}");
        }
    }
}

async fn pair() -> (MockServer, MockServer) {
    (mock(&["big"]).await, mock(&["small"]).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_model_falls_back_in_every_api_streamed_or_not_and_usage_names_both() {
    let (big, small) = pair().await;
    big.control().set_fail_rate(1.0);
    big.control().set_fail_status(500);
    let dir = scratch_dir();
    let gw = gateway(
        &[&big, &small],
        &format!(
            "storage: {{url: '{}', usage_journal_dir: '{}/usage'}}\nfallbacks: {{big: [small]}}",
            db_url(&dir),
            dir.display()
        ),
    )
    .await;
    let client = TestClient::new();
    all_served_by_the_fallback(&client, &gw, 15).await;
    let metrics = client.get(&format!("{}/metrics", gw.url())).await.unwrap().text();
    assert!(metrics.contains("switchyard_fallbacks_total{from=\"big\",to=\"small\"} 120"), "{metrics}");
    // Usage is recorded under the model that served, requested as asked.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = client.get(&format!("{}/admin/usage?model=small", gw.url())).await.unwrap();
        let served = r.json()["totals"]["requests"].as_u64().unwrap_or(0);
        if served == 120 {
            break;
        }
        assert!(Instant::now() < deadline, "{served} of 120 requests recorded as served by small");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let big_usage = client.get(&format!("{}/admin/usage?model=big", gw.url())).await.unwrap();
    assert_eq!(big_usage.json()["totals"]["requests"], 0, "nothing was served by the failing model");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_model_a_rate_limited_one_and_one_gone_from_the_catalogue_fall_back() {
    // Rate limited for longer than a request may wait.
    let (big, small) = pair().await;
    big.control().set_fail_rate(1.0);
    big.control().set_fail_status(429);
    big.control().set_fail_headers(&[("retry-after", "60")]);
    let gw = gateway(&[&big, &small], "fallbacks: {big: [small]}").await;
    let client = TestClient::new();
    all_served_by_the_fallback(&client, &gw, 3).await;
    assert_eq!(big.control().failures.load(std::sync::atomic::Ordering::Relaxed), 1, "cooled down after one 429");
    drop(gw);

    // Its only backend dies: first the requests that find it dead, then the model is gone.
    let (big, small) = pair().await;
    let gw = gateway(&[&big, &small], "fallbacks: {big: [small]}").await;
    let client = TestClient::new();
    let r = chat(&client, &gw, "big").await;
    assert_eq!((r.status.as_u16(), r.header("x-switchyard-model")), (200, Some("big")));
    big.kill();
    all_served_by_the_fallback(&client, &gw, 5).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_listed_statuses_fall_back_and_the_list_is_followed_in_order() {
    let (big, small) = pair().await;
    let medium = mock(&["medium"]).await;
    big.control().set_fail_rate(1.0);
    big.control().set_fail_status(500);
    medium.control().set_fail_rate(1.0);
    medium.control().set_fail_status(503);
    // 500 is not on the list: the backend's own answer goes to the client.
    let gw =
        gateway(&[&big, &medium, &small], "routing: {fallback_statuses: [503]}\nfallbacks: {big: [medium, small]}")
            .await;
    let client = TestClient::new();
    let r = chat(&client, &gw, "big").await;
    assert_eq!(r.status, 500, "{}", r.text());
    drop(gw);
    // With 500 listed, `medium` is tried next (503, listed too), then `small` answers.
    let gw = gateway(&[&big, &medium, &small], "fallbacks: {big: [medium, small]}").await;
    let before = medium.control().failures.load(std::sync::atomic::Ordering::Relaxed);
    let r = chat(&client, &gw, "big").await;
    assert_eq!((r.status.as_u16(), r.header("x-switchyard-model")), (200, Some("small")), "{}", r.text());
    assert!(medium.control().failures.load(std::sync::atomic::Ordering::Relaxed) > before, "medium was tried first");
    // A model without fallbacks still gets its backend's answer.
    let r = chat(&client, &gw, "medium").await;
    assert_eq!(r.status, 503);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_too_long_for_its_window_goes_to_a_larger_one_and_other_400s_do_not() {
    let (big, small) = pair().await;
    let huge = mock(&["huge"]).await;
    big.control().set_fail_rate(1.0);
    big.control().set_fail_status(400);
    big.control().set_fail_body(Some(
        r#"{"error":{"message":"This model's maximum context length is 4096 tokens. However, you requested 9000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
    ));
    let lists = "fallbacks: {big: [small]}\ncontext_window_fallbacks: {big: [huge]}";
    let gw = gateway(&[&big, &small, &huge], lists).await;
    let client = TestClient::new();
    all_served_by(&client, &gw, 3, "huge").await;
    // Without a context list, the model's fallbacks take it.
    drop(gw);
    let gw = gateway(&[&big, &small, &huge], "fallbacks: {big: [small]}").await;
    all_served_by(&client, &gw, 1, "small").await;
    // Any other 400 is the client's to see, fallbacks or not.
    big.control()
        .set_fail_body(Some(r#"{"error":{"message":"temperature must be at most 2","type":"invalid_request_error"}}"#));
    let r = chat(&client, &gw, "big").await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("temperature"), "{}", r.text());
}
