//! SSE relay: byte-for-byte, incremental, and failures after the first byte end in an error event.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::time::Duration;

use crate::common::*;
use http::Method;
use http_body_util::BodyExt;
use switchyard_testkit::{MockConfig, TestClient};

fn stream_body() -> String {
    r#"{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"count"}]}"#
        .to_owned()
}

#[tokio::test]
async fn stream_is_relayed_byte_for_byte() {
    let a = mock_with(&["m"], MockConfig { stream_chunks: 12, ..MockConfig::default() }).await;
    let gw = gateway(&[&a], "").await;
    let client = TestClient::new();
    let body = stream_body();
    let (s1, h1, direct) =
        client.post_stream(&format!("{}/v1/chat/completions", a.url()), body.as_bytes(), &[]).await.unwrap();
    let (s2, h2, proxied) =
        client.post_stream(&format!("{}/v1/chat/completions", gw.url()), body.as_bytes(), &[]).await.unwrap();
    assert_eq!((s1.as_u16(), s2.as_u16()), (200, 200));
    assert_eq!(h2["content-type"], h1["content-type"]);
    assert_eq!(h2["x-switchyard-backend"], "b0");
    let (direct, proxied) = (direct.concat(), proxied.concat());
    assert!(direct.ends_with(b"data: [DONE]\n\n"));
    assert!(std::str::from_utf8(&direct).unwrap().contains("\"usage\""));
    assert_eq!(proxied, direct);
}

#[tokio::test]
async fn chunks_are_forwarded_as_they_arrive() {
    let a = mock_with(
        &["m"],
        MockConfig { stream_chunks: 4, chunk_delay: Duration::from_millis(150), ..MockConfig::default() },
    )
    .await;
    let gw = gateway(&[&a], "").await;
    let resp = TestClient::new()
        .send(Method::POST, &format!("{}/v1/chat/completions", gw.url()), stream_body().into(), &[])
        .await
        .unwrap();
    let mut body = resp.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    // If the gateway buffered the stream, the first bytes would already hold the end of it.
    assert!(first.starts_with(b"data: "), "{first:?}");
    assert!(!first.windows(6).any(|w| w == b"[DONE]"), "first frame already had the whole stream");
    let rest = body.collect().await.unwrap().to_bytes();
    assert!(rest.ends_with(b"data: [DONE]\n\n"));
}

#[tokio::test]
async fn a_backend_dying_mid_stream_ends_it_with_an_error_event() {
    let a = mock_with(
        &["m"],
        MockConfig { stream_chunks: 5, chunk_delay: Duration::from_millis(200), ..MockConfig::default() },
    )
    .await;
    let gw = gateway(&[&a], "").await;
    let resp = TestClient::new()
        .send(Method::POST, &format!("{}/v1/chat/completions", gw.url()), stream_body().into(), &[])
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert!(first.starts_with(b"data: "));
    a.kill();
    let rest = body.collect().await.expect("the stream closes cleanly with an error event").to_bytes();
    let text = std::str::from_utf8(&rest).unwrap();
    let last = text.trim_end().rsplit("\n\n").next().unwrap();
    let event: serde_json::Value = serde_json::from_str(last.strip_prefix("data: ").unwrap()).unwrap();
    assert_eq!(event["error"]["type"], "server_error");
    assert_eq!(event["error"]["code"], "stream_aborted");
    assert!(!text.contains("[DONE]"));
}

#[tokio::test]
async fn a_stalled_stream_hits_the_idle_timeout() {
    let a = mock_with(
        &["m"],
        MockConfig { stream_chunks: 3, chunk_delay: Duration::from_secs(5), ..MockConfig::default() },
    )
    .await;
    let gw = gateway(&[&a], "timeouts: {stream_idle: 200ms}").await;
    let (status, _, frames) = TestClient::new()
        .post_stream(&format!("{}/v1/chat/completions", gw.url()), stream_body().as_bytes(), &[])
        .await
        .unwrap();
    assert_eq!(status, 200);
    let text = String::from_utf8(frames.concat()).unwrap();
    assert!(text.contains("\"code\":\"stream_idle_timeout\""), "{text}");
}

#[tokio::test]
async fn a_backend_dying_before_the_first_chunk_is_retried_elsewhere() {
    // b0 takes 300 ms before answering; it is killed meanwhile, so the request moves to b1.
    let slow = mock_with(&["m"], MockConfig { latency: Duration::from_millis(300), ..MockConfig::default() }).await;
    let fast = mock(&["m"]).await;
    let yaml = format!(
        "listen: 127.0.0.1:0\nrouting: {{strategy: priority}}\nbackends:\n  - {{name: b0, url: '{}', priority: 10}}\n  - {{name: b1, url: '{}', priority: 1}}\n",
        slow.url(),
        fast.url()
    );
    let gw = gateway_yaml(&yaml).await;
    let url = format!("{}/v1/chat/completions", gw.url());
    let client = TestClient::new();
    let pending = tokio::spawn({
        let (client, url) = (client.clone(), url.clone());
        async move { client.post_stream(&url, stream_body().as_bytes(), &[]).await.unwrap() }
    });
    // Wait until the slow backend has the request in hand, then kill it.
    tokio::time::timeout(Duration::from_secs(10), async {
        while slow.control().request_count() == 0 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the preferred backend received the request");
    slow.kill();
    let (status, headers, frames) = pending.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(headers["x-switchyard-backend"], "b1");
    assert!(frames.concat().ends_with(b"data: [DONE]\n\n"));
}
