//! Bad input and the edges of the API surface: every case is a clear 4xx/5xx in OpenAI's error
//! shape, never a panic or a hang; plus transparency headers, probes, metrics and shutdown.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::time::Duration;

use crate::common::*;
use http::Method;
use switchyard_testkit::{MockConfig, TestClient, TestResponse};

fn assert_openai_error(r: &TestResponse, status: u16, param: Option<&str>) {
    assert_eq!(r.status.as_u16(), status, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    let e = &r.json()["error"];
    assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{}", r.text());
    assert!(e["type"].is_string());
    assert!(e.get("code").is_some() && e.get("param").is_some(), "all four fields present: {}", r.text());
    assert_eq!(e["param"].as_str(), param, "{}", r.text());
    assert!(r.header("x-request-id").is_some());
}

#[tokio::test]
async fn malformed_requests_are_400s() {
    let a = mock(&["m"]).await;
    let gw = gateway(&[&a], "").await;
    let client = TestClient::new();
    let url = format!("{}/v1/chat/completions", gw.url());
    let cases: [(&str, Option<&str>); 9] = [
        ("{not json", None),
        ("", None),
        ("[]", None),
        ("42", None),
        (r#"{"messages":[]}"#, Some("model")),
        (r#"{"model":["m"],"messages":[]}"#, Some("model")),
        (r#"{"model":"m"}"#, Some("messages")),
        (r#"{"model":"m","messages":{"role":"user"}}"#, Some("messages")),
        (r#"{"model":"m","messages":[],"stream":1}"#, Some("stream")),
    ];
    for (body, param) in cases {
        let r = client.post_json(&url, body.as_bytes(), &[]).await.unwrap();
        assert_openai_error(&r, 400, param);
    }
    assert_eq!(a.control().request_count(), 0, "nothing malformed reached the backend");
}

#[tokio::test]
async fn bodies_over_the_limit_are_413s() {
    let a = mock(&["m"]).await;
    let gw = gateway(&[&a], "limits: {max_body_bytes: 1024}").await;
    let big = format!(r#"{{"model":"m","messages":[{{"role":"user","content":"{}"}}]}}"#, "x".repeat(2000));
    let r =
        TestClient::new().post_json(&format!("{}/v1/chat/completions", gw.url()), big.as_bytes(), &[]).await.unwrap();
    assert_openai_error(&r, 413, None);
    assert_eq!(r.json()["error"]["code"], "request_too_large");
}

#[tokio::test]
async fn unknown_routes_and_methods() {
    let a = mock(&["m"]).await;
    let gw = gateway(&[&a], "").await;
    let client = TestClient::new();
    let r = client.get(&format!("{}/v1/nope", gw.url())).await.unwrap();
    assert_openai_error(&r, 404, None);
    assert_eq!(r.json()["error"]["code"], "unknown_url");
    let r = client.get(&format!("{}/v1/chat/completions", gw.url())).await.unwrap();
    assert_openai_error(&r, 405, None);
    let r = client.request(Method::DELETE, &format!("{}/health", gw.url()), Default::default(), &[]).await.unwrap();
    assert_openai_error(&r, 405, None);
}

#[tokio::test]
async fn garbage_never_breaks_the_gateway() {
    let a = mock(&["m"]).await;
    let gw = gateway(&[&a], "").await;
    let client = TestClient::new();
    let url = format!("{}/v1/chat/completions", gw.url());
    let alphabet: &[u8] = b"{}[]\":,model messages\\u0000\xff 0123";
    let mut seed = 0x9e3779b97f4a7c15u64;
    for len in 0..200 {
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                alphabet[(seed % alphabet.len() as u64) as usize]
            })
            .collect();
        let r = client.post_json(&url, &bytes, &[]).await.unwrap();
        assert!(r.status.is_client_error() || r.status == 200 || r.status == 404, "{} for {bytes:?}", r.status);
    }
    assert_eq!(chat(&client, &gw, "m").await.status, 200, "still serving");
}

#[tokio::test]
async fn transparency_headers() {
    let a = mock(&["m"]).await;
    let gw = gateway(&[&a], "").await;
    let client = TestClient::new();
    let url = format!("{}/v1/chat/completions", gw.url());
    let r = client.post_json(&url, chat_body("m", false).as_bytes(), &[("x-request-id", "trace-me-42")]).await.unwrap();
    assert_eq!(r.header("x-request-id"), Some("trace-me-42"));
    assert_eq!(r.header("x-switchyard-backend"), Some("b0"));
    let timing = r.header("server-timing").unwrap();
    let parts: Vec<f64> =
        timing.split(", ").map(|p| p.split_once(";dur=").unwrap().1.parse::<f64>().unwrap()).collect();
    assert!(timing.starts_with("gateway;dur=") && timing.contains(", upstream;dur="), "{timing}");
    assert!(parts.iter().all(|v| *v >= 0.0));
    let a_id = chat(&client, &gw, "m").await.header("x-request-id").unwrap().to_owned();
    let b_id = chat(&client, &gw, "m").await.header("x-request-id").unwrap().to_owned();
    assert_ne!(a_id, b_id, "generated ids are unique");
}

#[tokio::test]
async fn health_ready_and_metrics() {
    let a = mock(&["m"]).await;
    let gw = gateway(&[&a], "").await;
    let client = TestClient::new();
    assert_eq!(client.get(&format!("{}/health", gw.url())).await.unwrap().status, 200);
    let ready = client.get(&format!("{}/ready", gw.url())).await.unwrap();
    assert_eq!(ready.status, 200);
    assert_eq!(ready.json()["backends_up"], 1);
    chat(&client, &gw, "m").await;
    chat(&client, &gw, "nope").await;
    let m = client.get(&format!("{}/metrics", gw.url())).await.unwrap();
    assert!(m.header("content-type").unwrap().starts_with("text/plain"));
    let text = m.text();
    for needle in [
        "switchyard_requests_total{endpoint=\"chat_completions\",code=\"2xx\"} 1",
        "switchyard_requests_total{endpoint=\"chat_completions\",code=\"4xx\"} 1",
        "switchyard_errors_total{kind=\"model_not_found\"} 1",
        "switchyard_overhead_seconds_count 1",
        "switchyard_request_duration_seconds_count 1",
        "switchyard_backend_up{backend=\"b0\"} 1",
        "switchyard_backend_in_flight{backend=\"b0\"} 0",
        "switchyard_backend_requests_total{backend=\"b0\"} 1",
    ] {
        assert!(text.contains(needle), "missing {needle}\n{text}");
    }
}

#[tokio::test]
async fn ready_is_503_without_backends() {
    let gw = gateway_yaml("listen: 127.0.0.1:0").await;
    let client = TestClient::new();
    assert_eq!(client.get(&format!("{}/ready", gw.url())).await.unwrap().status, 503);
    assert_eq!(client.get(&format!("{}/health", gw.url())).await.unwrap().status, 200);
    let r = chat(&client, &gw, "m").await;
    assert_openai_error(&r, 404, Some("model"));
}

#[tokio::test]
async fn a_slow_backend_hits_the_first_byte_timeout() {
    let slow = mock_with(&["m"], MockConfig { latency: Duration::from_secs(5), ..MockConfig::default() }).await;
    let gw = gateway(&[&slow], "timeouts: {first_byte: 200ms}").await;
    let r = chat(&TestClient::new(), &gw, "m").await;
    assert_openai_error(&r, 504, None);
    assert_eq!(r.json()["error"]["code"], "upstream_timeout");
}

#[tokio::test]
async fn shutdown_lets_in_flight_requests_finish() {
    let slow = mock_with(&["m"], MockConfig { latency: Duration::from_millis(300), ..MockConfig::default() }).await;
    let gw = gateway(&[&slow], "").await;
    let url = gw.url();
    let client = TestClient::new();
    let in_flight = tokio::spawn({
        let (client, url) = (client.clone(), url.clone());
        async move { client.post_json(&format!("{url}/v1/chat/completions"), chat_body("m", false).as_bytes(), &[]).await }
    });
    while slow.control().request_count() == 0 {
        tokio::task::yield_now().await;
    }
    gw.shutdown().await;
    let r = in_flight.await.unwrap().unwrap();
    assert_eq!(r.status, 200, "the in-flight request completed");
    assert!(TestClient::new().get(&format!("{url}/health")).await.is_err(), "no longer accepting");
}
