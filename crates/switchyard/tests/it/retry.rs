//! Retries that honour the backend's word: a 429 (or a 503 with `Retry-After`) cools the backend
//! down for as long as it asked, other requests go elsewhere meanwhile, and a request whose every
//! backend is cooling waits it out within `routing.retry_after_max` and its deadline — or, past
//! them, gets the answer at once with when to come back.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::time::{Duration, Instant};

use crate::common::*;
use switchyard_testkit::TestClient;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_with_retry_after_is_waited_out_then_served() {
    let backend = mock(&["m"]).await;
    let gw = gateway(&[&backend], "").await;
    let client = TestClient::new();
    let control = backend.control();
    control.set_fail_status(429);
    control.set_fail_headers(&[("retry-after", "2")]);
    control.set_fail_next(1);
    let started = Instant::now();
    let r = chat(&client, &gw, "m").await;
    let took = started.elapsed();
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(took >= Duration::from_secs(2), "the retry came after {took:?}, before the 2 s asked for");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(control.failures.load(std::sync::atomic::Ordering::Relaxed), 1);

    // `retry-after-ms` (OpenAI's, Azure's) is read first; two 429s in a row are each waited out.
    control.set_fail_headers(&[("retry-after", "30"), ("retry-after-ms", "300")]);
    control.set_fail_next(2);
    let started = Instant::now();
    let r = chat(&client, &gw, "m").await;
    let took = started.elapsed();
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(took >= Duration::from_millis(600) && took < Duration::from_secs(5), "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_go_elsewhere_while_a_backend_cools_down() {
    let (a, b) = (mock(&["m"]).await, mock(&["m"]).await);
    let gw = gateway(&[&a, &b], "routing: {strategy: round-robin}").await;
    let client = TestClient::new();
    a.control().set_fail_status(429);
    a.control().set_fail_headers(&[("retry-after", "30")]);
    a.control().set_fail_next(1);
    for i in 0..20 {
        let r = chat(&client, &gw, "m").await;
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
        assert_eq!(backend_of(&r), "b1", "request {i} went to the cooling backend");
    }
    assert_eq!(a.control().failures.load(std::sync::atomic::Ordering::Relaxed), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_past_the_cap_is_not_made_and_the_client_hears_when_to_come_back() {
    let backend = mock(&["m"]).await;
    let gw = gateway(&[&backend], "routing: {retry_after_max: 5s}").await;
    let client = TestClient::new();
    let control = backend.control();
    control.set_fail_status(429);
    control.set_fail_headers(&[("retry-after", "60")]);
    control.set_fail_next(1);
    // The backend's own 429 goes through at once, with its Retry-After.
    let started = Instant::now();
    let r = chat(&client, &gw, "m").await;
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.header("retry-after"), Some("60"));
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    // Meanwhile nothing is sent to it: the gateway answers for it, saying when it is back.
    let r = chat(&client, &gw, "m").await;
    assert_eq!(r.status, 503, "{}", r.text());
    let after: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((55..=60).contains(&after), "retry-after {after}");
    assert_eq!(r.json()["error"]["code"], "backends_cooling", "{}", r.text());
    assert_eq!(control.failures.load(std::sync::atomic::Ordering::Relaxed), 1);
    // The console's backends page shows it cooling down (no master key here: the console is open).
    let page = client.get(&format!("{}/ui/api/backends", gw.url())).await.unwrap();
    assert_eq!(page.status, 200, "{}", page.text());
    let cooling = page.json()["backends"][0]["cooling_ms"].as_u64().unwrap_or(0);
    assert!((50_000..=60_000).contains(&cooling), "cooling_ms {cooling}: {}", page.text());
}

/// A connection error with no other backend and no fallback is not the end: the request waits the
/// backoff for the backend to come back (a restart), then is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_refusing_connections_gets_a_backoff_to_come_back() {
    let mut backend = mock(&["m"]).await;
    let gw = gateway(&[&backend], "routing: {retry_backoff: 1s}").await;
    let client = TestClient::new();
    assert_eq!(chat(&client, &gw, "m").await.status, 200);
    backend.kill();
    let (url, body) = (format!("{}/v1/chat/completions", gw.url()), chat_body("m", false));
    let started = Instant::now();
    let request = tokio::spawn(async move { TestClient::new().post_json(&url, body.as_bytes(), &[]).await.unwrap() });
    // The request has met the refused connection (and is waiting) once the gateway counted it.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let metrics = client.get(&format!("{}/metrics", gw.url())).await.unwrap().text();
        if metrics.contains("switchyard_errors_total{kind=\"upstream_connect\"} 1") {
            break;
        }
        assert!(Instant::now() < deadline, "the request never reached the dead backend");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    backend.restart().await.unwrap();
    let r = request.await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(500), "served after {took:?}: no backoff was waited");
}
