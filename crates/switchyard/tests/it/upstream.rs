//! Upstream connections: kept alive and reused across requests, plain and streamed, OpenAI and
//! Anthropic alike, no more kept idle than `limits.max_idle_upstream_connections` and none past
//! `timeouts.upstream_idle` (backends that drop their connections: failover.rs and resume.rs).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use crate::common::*;
use switchyard_testkit::{MockConfig, TestClient};

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

/// The gateway's idle upstream connections to `b0`, from `/metrics`.
async fn idle_connections(client: &TestClient, gw: &switchyard_gateway::RunningGateway) -> u64 {
    let metrics = client.get(&format!("{}/metrics", gw.url())).await.unwrap().text();
    metric(&metrics, "switchyard_backend_idle_connections{backend=\"b0\"} ")
        .unwrap_or_else(|| panic!("no idle gauge for b0:\n{metrics}"))
}

/// `n` requests at once, each answered after the mock's latency: `n` upstream connections.
async fn at_once(client: &TestClient, gw: &switchyard_gateway::RunningGateway, n: usize) {
    let mut requests = tokio::task::JoinSet::new();
    for _ in 0..n {
        let (client, url) = (client.clone(), format!("{}/v1/chat/completions", gw.url()));
        requests.spawn(async move {
            let r = client.post_json(&url, chat_body("m", false).as_bytes(), &[]).await.unwrap();
            assert_eq!(r.status, 200, "{}", r.text());
        });
    }
    while let Some(done) = requests.join_next().await {
        done.unwrap();
    }
}

#[tokio::test]
async fn idle_upstream_connections_past_the_limit_are_closed() {
    let backend = mock_with(&["m"], MockConfig { latency: Duration::from_millis(300), ..Default::default() }).await;
    let gw = gateway(&[&backend], "limits: {max_idle_upstream_connections: 2}").await;
    let client = TestClient::new();
    at_once(&client, &gw, 6).await;
    let opened = backend.control().connections.load(Relaxed);
    assert!(opened >= 6, "6 requests at once opened {opened} connections");
    assert_eq!(idle_connections(&client, &gw).await, 2, "two kept, four closed");
    // The next six at once find two connections to reuse: four are opened anew.
    at_once(&client, &gw, 6).await;
    let new = backend.control().connections.load(Relaxed) - opened;
    // (A health probe may open one of its own.)
    assert!((4..=5).contains(&new), "{new} new connections: the limit kept {} idle", 6 - new);
}

#[tokio::test]
async fn an_upstream_connection_idle_past_its_timeout_is_closed() {
    let backend = mock(&["m"]).await;
    let gw = gateway(&[&backend], "timeouts: {upstream_idle: 200ms}\nhealth: {interval: 50ms}").await;
    let client = TestClient::new();
    one(&client, &gw, 0).await;
    assert_eq!(idle_connections(&client, &gw).await, 1);
    let deadline = Instant::now() + Duration::from_secs(10);
    while idle_connections(&client, &gw).await > 0 {
        assert!(Instant::now() < deadline, "the idle connection outlived timeouts.upstream_idle by seconds");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The next request connects anew.
    let before = backend.control().connections.load(Relaxed);
    one(&client, &gw, 0).await;
    assert!(backend.control().connections.load(Relaxed) > before, "the closed connection was reused");
}

/// A backend that closes a kept-alive connection just as a request arrives on it (its keep-alive
/// timeout racing the request), once: the second chat request on a connection is read and the
/// connection closed without an answer. Every other request is answered, keep-alive.
async fn closes_an_idle_connection_under_a_request() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let chats = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let dropped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = chats.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else { return };
            let (chats, dropped) = (seen.clone(), dropped.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut on_this_connection = 0;
                loop {
                    // One request: its head, then its Content-Length of body.
                    let head_end = loop {
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                        let mut chunk = [0u8; 4096];
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
                    let length = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    while buf.len() < head_end + length {
                        let mut chunk = [0u8; 4096];
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    buf.drain(..head_end + length);
                    let body = if head.starts_with("post /v1/chat/completions") {
                        chats.fetch_add(1, Relaxed);
                        on_this_connection += 1;
                        if on_this_connection == 2 && !dropped.swap(true, Relaxed) {
                            return; // closed under the request, nothing answered
                        }
                        r#"{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}"#
                    } else if head.starts_with("get /v1/models") {
                        r#"{"object":"list","data":[{"id":"m","object":"model"}]}"#
                    } else {
                        ""
                    };
                    let status = if body.is_empty() { "404 Not Found" } else { "200 OK" };
                    let answer = format!(
                        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if s.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (url, chats)
}

#[tokio::test]
async fn a_request_on_an_idle_connection_the_backend_closes_goes_again_on_a_new_one() {
    let (url, chats) = closes_an_idle_connection_under_a_request().await;
    let gw =
        gateway_yaml(&format!("listen: 127.0.0.1:0\nbackends:\n  - {{name: b0, url: '{url}', models: [m]}}\n")).await;
    let client = TestClient::new();
    let (url, body) = (format!("{}/v1/chat/completions", gw.url()), chat_body("m", false));
    for _ in 0..3 {
        let r = client.post_json(&url, body.as_bytes(), &[]).await.unwrap();
        assert_eq!(r.status, 200, "{} {:?}", r.text(), r.headers);
    }
    // The second request went out twice: on the closed connection, then on a new one. The backend
    // was never counted as failing, let alone marked down.
    assert_eq!(chats.load(Relaxed), 4);
    let metrics = client.get(&format!("{}/metrics", gw.url())).await.unwrap().text();
    assert!(metrics.contains("switchyard_errors_total{kind=\"upstream_connect\"} 0"), "{metrics}");
    assert!(metrics.contains("switchyard_backend_up{backend=\"b0\"} 1"), "{metrics}");
}

/// A backend that lists one model and has no `/metrics` or `/slots` (a hosted API, a llama.cpp
/// started without them): it is asked for them on the first probes only, not on every probe
/// forever. Each GET's path is counted; every answer closes its connection.
#[tokio::test]
async fn a_backend_that_reports_no_load_is_not_asked_for_it_on_every_probe() {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let asked: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let counts = asked.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let counts = counts.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let line = String::from_utf8_lossy(&head).lines().next().unwrap_or_default().to_owned();
                let path = line.split(' ').nth(1).unwrap_or_default().to_owned();
                *counts.lock().unwrap().entry(path.clone()).or_default() += 1;
                let (status, body) = match path.as_str() {
                    "/v1/models" => ("200 OK", r#"{"object":"list","data":[{"id":"m","object":"model"}]}"#),
                    _ => ("404 Not Found", r#"{"error":"not found"}"#),
                };
                let reply = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(reply.as_bytes()).await;
            });
        }
    });
    let yaml = format!(
        "listen: 127.0.0.1:0\nhealth: {{interval: 30ms}}\nbackends:\n  - {{name: quiet, url: 'http://{addr}'}}\n"
    );
    let _gw = gateway_yaml(&yaml).await;
    let count = |path: &str| asked.lock().unwrap().get(path).copied().unwrap_or(0);
    let deadline = Instant::now() + Duration::from_secs(20);
    while count("/v1/models") < 15 {
        assert!(Instant::now() < deadline, "probes: {:?}", asked.lock().unwrap());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The start-up probe and three more ask for load; none after.
    let seen = asked.lock().unwrap().clone();
    assert!(seen.get("/metrics").copied().unwrap_or(0) <= 4, "{seen:?}");
    assert!(seen.get("/slots").copied().unwrap_or(0) <= 4, "{seen:?}");
    assert!(seen.get("/metrics").copied().unwrap_or(0) >= 1, "{seen:?}");
}
