//! Admission control, black-box: with every backend of a model at its `max_concurrency`,
//! requests wait in a bounded queue and are served as slots free; past `routing.max_queue`, or
//! after `routing.queue_timeout`, a 503 with `Retry-After` comes at once, in the client's API
//! shape, while the backend is still busy with the admitted ones.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::time::Duration;

use crate::common::*;
use switchyard_testkit::{MockConfig, MockServer, TestClient};

async fn slow_backend(latency: Duration) -> MockServer {
    mock_with(&["m"], MockConfig { latency, ..MockConfig::default() }).await
}

async fn capped_gateway(b: &MockServer, routing: &str) -> switchyard_gateway::RunningGateway {
    let yaml = format!(
        "listen: 127.0.0.1:0\nrouting: {{{routing}}}\nbackends:\n  - {{name: b0, url: '{}', max_concurrency: 1}}\n",
        b.url()
    );
    gateway_yaml(&yaml).await
}

/// Wait (bounded) until `n` requests are queued at the gateway.
async fn until_waiting(gw: &switchyard_gateway::RunningGateway, n: usize) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while gw.app.router.admission.waiting() < n {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("requests queued");
}

fn send(
    gw: &switchyard_gateway::RunningGateway,
    path: &'static str,
    body: &'static str,
) -> tokio::task::JoinHandle<switchyard_testkit::TestResponse> {
    let url = format!("{}{path}", gw.url());
    tokio::spawn(async move { TestClient::new().post_json(&url, body.as_bytes(), &[]).await.unwrap() })
}

#[tokio::test]
async fn requests_over_the_cap_wait_their_turn_and_all_succeed() {
    let b = slow_backend(Duration::from_millis(100)).await;
    let gw = capped_gateway(&b, "max_queue: 10").await;
    let first = send(&gw, "/v1/chat/completions", CHAT);
    let queued: Vec<_> = (0..3).map(|_| send(&gw, "/v1/chat/completions", CHAT)).collect();
    until_waiting(&gw, 3).await;
    // The cap holds: one request at the backend, three waiting at the gateway.
    assert_eq!(gw.app.router.backends[0].in_flight(), 1);
    assert_eq!(first.await.unwrap().status, 200);
    for q in queued {
        let r = q.await.unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
    }
    assert_eq!(b.control().request_count(), 4);
    assert_eq!(gw.app.router.admission.waiting(), 0);
}

#[tokio::test]
async fn a_full_queue_answers_503_with_retry_after_at_once() {
    let b = slow_backend(Duration::from_secs(2)).await;
    let gw = capped_gateway(&b, "max_queue: 2").await;
    let busy = send(&gw, "/v1/chat/completions", CHAT);
    let waiting: Vec<_> = (0..2).map(|_| send(&gw, "/v1/chat/completions", CHAT)).collect();
    until_waiting(&gw, 2).await;
    // The queue is full: refused now, in the caller's own API shape.
    let body = r#"{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}"#;
    let r = TestClient::new().post_json(&format!("{}/v1/messages", gw.url()), body.as_bytes(), &[]).await.unwrap();
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(r.json()["type"], "error", "Anthropic's error shape: {}", r.text());
    assert_eq!(gw.app.router.backends[0].in_flight(), 1, "refused while the backend was still busy");
    assert_eq!(gw.app.router.admission.refused_full.load(std::sync::atomic::Ordering::Relaxed), 1);
    drop((busy, waiting));
}

#[tokio::test]
async fn a_request_that_waits_past_queue_timeout_gets_503() {
    let b = slow_backend(Duration::from_secs(3)).await;
    let gw = capped_gateway(&b, "queue_timeout: 150ms").await;
    let busy = send(&gw, "/v1/chat/completions", CHAT);
    tokio::time::timeout(Duration::from_secs(10), async {
        while gw.app.router.backends[0].in_flight() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap();
    let r = send(&gw, "/v1/chat/completions", CHAT).await.unwrap();
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "overloaded");
    assert!(r.header("retry-after").is_some());
    assert_eq!(gw.app.router.backends[0].in_flight(), 1, "timed out while the slot was still taken");
    assert_eq!(gw.app.router.admission.waiting(), 0, "nothing left queued");
    drop(busy);
}

#[tokio::test]
async fn a_busy_key_cannot_starve_another() {
    const MASTER: &str = "sk-master-admission";
    let b = slow_backend(Duration::from_millis(60)).await;
    let dir = scratch_dir();
    let yaml = format!(
        "listen: 127.0.0.1:0\nstorage: {{url: '{}', usage_journal_dir: '{}/usage'}}\nauth: {{master_key: {MASTER}}}\nrouting: {{max_queue: 100}}\nbackends:\n  - {{name: b0, url: '{}', max_concurrency: 1}}\n",
        db_url(&dir),
        dir.display(),
        b.url()
    );
    let gw = gateway_yaml(&yaml).await;
    let client = TestClient::new();
    let mut keys = Vec::new();
    for name in ["busy", "quiet"] {
        let r = client
            .post_json(
                &format!("{}/admin/keys", gw.url()),
                format!(r#"{{"name":"{name}"}}"#).as_bytes(),
                &[("authorization", &format!("Bearer {MASTER}"))],
            )
            .await
            .unwrap();
        assert_eq!(r.status, 201, "{}", r.text());
        keys.push(r.json()["key"].as_str().unwrap().to_owned());
    }
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let send_as = |key: String, who: &'static str| {
        let (url, order) = (format!("{}/v1/chat/completions", gw.url()), order.clone());
        tokio::spawn(async move {
            let auth = format!("Bearer {key}");
            let r = TestClient::new().post_json(&url, CHAT.as_bytes(), &[("authorization", &auth)]).await.unwrap();
            assert_eq!(r.status, 200, "{}", r.text());
            order.lock().unwrap().push(who);
        })
    };
    // The busy key fills the backend and the queue with eight requests...
    let mut tasks: Vec<_> = (0..8).map(|_| send_as(keys[0].clone(), "busy")).collect();
    until_waiting(&gw, 7).await;
    // ...then the quiet key asks once: it is next in line, not ninth.
    tasks.push(send_as(keys[1].clone(), "quiet"));
    until_waiting(&gw, 8).await;
    for t in tasks {
        t.await.unwrap();
    }
    let order = order.lock().unwrap().clone();
    let quiet_at = order.iter().position(|w| *w == "quiet").unwrap();
    assert!(quiet_at <= 2, "the quiet key was served {}th: {order:?}", quiet_at + 1);
}
