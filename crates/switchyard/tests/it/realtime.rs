//! The realtime API (issue 33), black-box: `GET /v1/realtime?model=…` is refused before the
//! upgrade without a key, accepts a key as a bearer or in the `openai-insecure-api-key.`
//! subprotocol, relays a session's events both ways, records each `response.done`'s usage, and
//! ends a session that sits idle past `realtime.idle_timeout`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use switchyard_gateway::RunningGateway;
use switchyard_testkit::TestClient;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

use crate::common::*;

const MASTER: &str = "realtime-master";

async fn realtime_gateway(extra: &str) -> (RunningGateway, switchyard_testkit::MockServer) {
    let backend = mock(&["rt"]).await;
    let dir = scratch_dir();
    let yaml = format!(
        "listen: 127.0.0.1:0\nstorage: {{url: '{}', usage_journal_dir: '{}/usage'}}\nauth: {{master_key: {MASTER}}}\n{extra}backends:\n{}",
        db_url(&dir),
        dir.display(),
        backends_yaml(&[&backend])
    );
    (gateway_yaml(&yaml).await, backend)
}

type Socket = tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>;

/// Open a session with `headers`; the HTTP status when the gateway refused the upgrade.
async fn open(gw: &RunningGateway, model: &str, headers: &[(&str, &str)]) -> Result<Socket, u16> {
    let url = format!("{}/v1/realtime?model={model}", gw.url().replacen("http", "ws", 1));
    let mut request = url.as_str().into_client_request().unwrap();
    for (name, value) in headers {
        let name = http::HeaderName::from_bytes(name.as_bytes()).unwrap();
        request.headers_mut().insert(name, value.parse().unwrap());
    }
    let tcp = tokio::net::TcpStream::connect(gw.url().trim_start_matches("http://")).await.unwrap();
    match tokio_tungstenite::client_async(request, tcp).await {
        Ok((socket, _)) => Ok(socket),
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => Err(resp.status().as_u16()),
        Err(e) => panic!("{e}"),
    }
}

/// The next event of the session.
async fn event(socket: &mut Socket) -> Value {
    loop {
        match tokio::time::timeout(Duration::from_secs(10), socket.next()).await.unwrap() {
            Some(Ok(Message::Text(text))) => return serde_json::from_str(text.as_str()).unwrap(),
            Some(Ok(_)) => continue,
            other => panic!("the session ended: {other:?}"),
        }
    }
}

/// Ask for a response; its text, once `response.done` came.
async fn respond(socket: &mut Socket) -> String {
    socket.send(Message::text(json!({"type": "response.create"}).to_string())).await.unwrap();
    let mut text = String::new();
    loop {
        let e = event(socket).await;
        match e["type"].as_str().unwrap() {
            "response.output_text.delta" => text.push_str(e["delta"].as_str().unwrap()),
            "response.done" => return text,
            _ => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_is_relayed_both_ways_and_each_response_is_recorded() {
    let (gw, _backend) = realtime_gateway("").await;
    let client = TestClient::new();
    let created = client
        .post_json(&format!("{}/admin/keys", gw.url()), b"{}", &[("authorization", &format!("Bearer {MASTER}"))])
        .await
        .unwrap();
    let key = created.json()["key"].as_str().unwrap().to_owned();

    assert_eq!(open(&gw, "rt", &[]).await.err(), Some(401), "no key, no upgrade");
    assert_eq!(open(&gw, "rt", &[("authorization", "Bearer sy-nope.nope")]).await.err(), Some(401));
    assert_eq!(open(&gw, "no-such", &[("authorization", &format!("Bearer {key}"))]).await.err(), Some(404));

    let mut socket = open(&gw, "rt", &[("authorization", &format!("Bearer {key}"))]).await.unwrap();
    assert_eq!(event(&mut socket).await["type"], "session.created");
    socket.send(Message::text(json!({"type": "session.update", "session": {}}).to_string())).await.unwrap();
    assert_eq!(event(&mut socket).await["type"], "session.updated");
    assert_eq!(respond(&mut socket).await, "tok0 tok1 tok2 tok3 tok4 ");
    assert_eq!(respond(&mut socket).await, "tok0 tok1 tok2 tok3 tok4 ");
    socket.close(None).await.unwrap();

    // A browser's way: the key in a subprotocol; the gateway answers with `realtime`.
    let protocols = format!("realtime, openai-insecure-api-key.{key}");
    let mut socket = open(&gw, "rt", &[("sec-websocket-protocol", &protocols)]).await.unwrap();
    assert_eq!(event(&mut socket).await["type"], "session.created");
    socket.close(None).await.unwrap();

    let rows = request_log(&client, &gw, MASTER, 2).await;
    assert_eq!(rows.len(), 2, "{rows:?}");
    for row in &rows {
        assert_eq!(
            (&row["route"], &row["prompt_tokens"], &row["completion_tokens"]),
            (&json!("realtime"), &json!(10), &json!(5))
        );
        assert_eq!(row["model_requested"], "rt");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_is_ended() {
    let (gw, _backend) = realtime_gateway("realtime: {idle_timeout: 300ms}\n").await;
    let mut socket = open(&gw, "rt", &[("authorization", &format!("Bearer {MASTER}"))]).await.unwrap();
    assert_eq!(event(&mut socket).await["type"], "session.created");
    let started = Instant::now();
    // Nothing more is sent: the gateway closes the session.
    loop {
        match tokio::time::timeout(Duration::from_secs(5), socket.next()).await.unwrap() {
            Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
            Some(Ok(_)) => {}
        }
    }
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(250) && took < Duration::from_secs(3), "{took:?}");
}

/// A session's responses count against its key's tokens per minute as each completes, not when
/// the session ends: with `tpm: 40` and 15 tokens a response, three responses in an open session
/// leave no room for a chat request with the same key (refused on tokens), while a key of the
/// same limits that ran no session is admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_responses_count_against_tpm_as_they_complete() {
    let (gw, _backend) = realtime_gateway("").await;
    let client = TestClient::new();
    let master = format!("Bearer {MASTER}");
    let new_key = || async {
        let url = format!("{}/admin/keys", gw.url());
        let created = client.post_json(&url, br#"{"tpm": 40}"#, &[("authorization", &master)]).await.unwrap();
        assert_eq!(created.status, 201, "{}", created.text());
        format!("Bearer {}", created.json()["key"].as_str().unwrap())
    };
    let (busy, idle) = (new_key().await, new_key().await);
    let chat = |bearer: String| {
        let (client, url) = (client.clone(), format!("{}/v1/chat/completions", gw.url()));
        let body = json!({"model": "rt", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}).to_string();
        async move { client.post_json(&url, body.as_bytes(), &[("authorization", &bearer)]).await.unwrap() }
    };
    let mut socket = open(&gw, "rt", &[("authorization", &busy)]).await.unwrap();
    assert_eq!(event(&mut socket).await["type"], "session.created");
    for _ in 0..3 {
        respond(&mut socket).await;
    }
    // The session is still open: its 45 tokens are in the window already.
    let refused = chat(busy.clone()).await;
    assert_eq!(refused.status, 429, "{}", refused.text());
    assert!(refused.text().contains("token"), "{}", refused.text());
    assert_eq!(chat(idle).await.status, 200);
    socket.close(None).await.unwrap();
}

/// The same across a fleet: a session's responses on one instance are charged to the key's shared
/// window in Redis as they complete, so another instance refuses the key's chat request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_fleet_a_sessions_responses_count_against_the_shared_tpm() {
    let backend = mock(&["rt"]).await;
    let redis = crate::common::redis::RedisServer::start();
    let dir = scratch_dir();
    let db = db_url(&dir);
    let mut gateways = Vec::new();
    for i in 0..2 {
        let yaml = format!(
            "listen: 127.0.0.1:0\n\
             storage: {{url: '{db}', usage_journal_dir: '{}/usage{i}'}}\n\
             auth: {{master_key: {MASTER}, secret: {TEST_SECRET}}}\n\
             redis: {{url: '{}', timeout: 3s}}\n\
             backends:\n{}",
            dir.display(),
            redis.url(),
            backends_yaml(&[&backend])
        );
        gateways.push(gateway_yaml(&yaml).await);
    }
    let client = TestClient::new();
    let url = format!("{}/admin/keys", gateways[0].url());
    let created =
        client.post_json(&url, br#"{"tpm": 40}"#, &[("authorization", &format!("Bearer {MASTER}"))]).await.unwrap();
    let bearer = format!("Bearer {}", created.json()["key"].as_str().unwrap());
    let chat = |on: usize| {
        let (client, url, bearer) =
            (client.clone(), format!("{}/v1/chat/completions", gateways[on].url()), bearer.clone());
        let body = json!({"model": "rt", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}).to_string();
        async move { client.post_json(&url, body.as_bytes(), &[("authorization", &bearer)]).await.unwrap() }
    };
    let mut socket = open(&gateways[0], "rt", &[("authorization", &bearer)]).await.unwrap();
    assert_eq!(event(&mut socket).await["type"], "session.created");
    for _ in 0..3 {
        respond(&mut socket).await;
    }
    let refused = chat(1).await;
    assert_eq!(refused.status, 429, "{}", refused.text());
    socket.close(None).await.unwrap();
}
