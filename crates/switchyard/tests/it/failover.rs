//! Failover under load: a backend killed mid-run costs clients nothing, comes back after a
//! restart, and a backend answering fast 5xx is taken out by the circuit breaker.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use switchyard_testkit::TestClient;
use tokio::sync::Notify;

/// Poll with real requests until one is served by `backend` (bounded), returning how many it took.
async fn until_served_by(client: &TestClient, gw: &switchyard_gateway::RunningGateway, backend: &str) -> usize {
    for i in 1..=5000 {
        let r = chat(client, gw, "m").await;
        assert_eq!(r.status, 200, "{}", r.text());
        if backend_of(&r) == backend {
            return i;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("{backend} never took traffic again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_backend_under_load_loses_no_request() {
    let a = mock(&["m"]).await;
    let mut b = mock(&["m"]).await;
    let gw = gateway(&[&a, &b], "routing: {strategy: round-robin}").await;
    let client = TestClient::new();
    let done = Arc::new(AtomicUsize::new(0));
    let third = Arc::new(Notify::new());
    let mut workers = tokio::task::JoinSet::new();
    const WORKERS: usize = 8;
    const EACH: usize = 60;
    for _ in 0..WORKERS {
        let (client, url, done, third) = (client.clone(), gw.url(), done.clone(), third.clone());
        workers.spawn(async move {
            let mut failures = Vec::new();
            for _ in 0..EACH {
                let r = client
                    .post_json(&format!("{url}/v1/chat/completions"), chat_body("m", false).as_bytes(), &[])
                    .await;
                match r {
                    Ok(r) if r.status == 200 => {}
                    Ok(r) => failures.push(format!("{} {}", r.status, r.text())),
                    Err(e) => failures.push(e.to_string()),
                }
                if done.fetch_add(1, Relaxed) + 1 == WORKERS * EACH / 3 {
                    third.notify_one();
                }
            }
            failures
        });
    }
    third.notified().await;
    let served_before = b.control().request_count();
    b.kill();
    let mut failures = Vec::new();
    while let Some(f) = workers.join_next().await {
        failures.extend(f.unwrap());
    }
    assert!(served_before > 0, "the killed backend had been taking traffic");
    assert_eq!(failures, Vec::<String>::new(), "client-visible errors");
    assert_eq!(done.load(Relaxed), WORKERS * EACH);

    // Re-admission: restart on the same port; it takes traffic again without any config change.
    b.restart().await.unwrap();
    until_served_by(&client, &gw, "b1").await;
}

#[tokio::test]
async fn fast_5xx_open_the_breaker_and_a_trial_closes_it() {
    let bad = mock(&["m"]).await;
    let good = mock(&["m"]).await;
    let gw = gateway(
        &[&bad, &good],
        "routing: {strategy: round-robin}\nhealth: {failure_threshold: 3, breaker_cooldown: 300ms}",
    )
    .await;
    bad.control().set_fail_rate(1.0);
    let client = TestClient::new();
    for _ in 0..30 {
        let r = chat(&client, &gw, "m").await;
        assert_eq!(r.status, 200, "5xx are retried on the healthy backend: {}", r.text());
        assert_eq!(backend_of(&r), "b1");
    }
    let hits = bad.control().request_count();
    assert_eq!(hits, 3, "the breaker opened after 3 consecutive 5xx");
    let metrics = client.get(&format!("{}/metrics", gw.url())).await.unwrap().text();
    assert!(metrics.contains("switchyard_backend_circuit_open{backend=\"b0\"} 1"), "{metrics}");
    assert!(metrics.contains("switchyard_backend_up{backend=\"b0\"} 1"), "probes still pass: only the breaker is open");

    // Recovered: after the cooldown one trial request gets through and closes the breaker.
    bad.control().set_fail_rate(0.0);
    until_served_by(&client, &gw, "b0").await;
    let metrics = client.get(&format!("{}/metrics", gw.url())).await.unwrap().text();
    assert!(metrics.contains("switchyard_backend_circuit_open{backend=\"b0\"} 0"), "{metrics}");
}

#[tokio::test]
async fn with_no_other_backend_the_upstream_error_is_passed_through() {
    let only = mock(&["m"]).await;
    only.control().set_fail_rate(1.0);
    only.control().set_fail_status(503);
    let gw = gateway(&[&only], "").await;
    let r = chat(&TestClient::new(), &gw, "m").await;
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["error"]["message"], "mock failure", "the backend's own error body");
    assert_eq!(backend_of(&r), "b0");
}

#[tokio::test]
async fn all_backends_down_is_a_503() {
    let only = mock(&["m"]).await;
    let gw = gateway(&[&only], "").await;
    only.kill();
    let client = TestClient::new();
    // The first request finds the backend dead itself; later ones find it already marked down.
    for _ in 0..3 {
        let r = chat(&client, &gw, "m").await;
        assert_eq!(r.status, 503);
        assert_eq!(r.json()["error"]["code"], "no_healthy_backend");
    }
    let ready = client.get(&format!("{}/ready", gw.url())).await.unwrap();
    assert_eq!(ready.status, 503);
}

#[tokio::test]
async fn retries_are_bounded_by_max_attempts() {
    let mocks = [mock(&["m"]).await, mock(&["m"]).await, mock(&["m"]).await];
    for m in &mocks {
        m.control().set_fail_rate(1.0);
    }
    let gw = gateway(&[&mocks[0], &mocks[1], &mocks[2]], "routing: {strategy: round-robin, max_attempts: 2}").await;
    let r = chat(&TestClient::new(), &gw, "m").await;
    assert_eq!(r.status, 503);
    let total: u64 = mocks.iter().map(|m| m.control().request_count()).sum();
    assert_eq!(total, 2);
}
