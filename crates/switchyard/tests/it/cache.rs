//! The response cache (`cache:`): the same request — keys reordered, numbers rewritten — is
//! answered from the cache byte for byte in every client API, streamed or not, without a
//! backend; what changes the answer (`tools`) misses; `Cache-Control` is obeyed; keys keep
//! their answers to themselves; a fleet shares hits through a real `redis-server`; hits are
//! recorded with no tokens and no cost.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::time::{Duration, Instant};

use crate::common::redis::RedisServer;
use crate::common::*;
use http::Method;
use serde_json::{json, Map, Value};
use switchyard_testkit::{TestClient, TestResponse};

/// (path, body) in each inbound API, plain and streamed; the chat request with a sampling
/// parameter, so rewriting its number is tested too.
fn requests(model: &str, text: &str) -> Vec<(&'static str, Value)> {
    let mut out = every_api(model, text);
    for (path, body) in &mut out {
        if *path == "/v1/chat/completions" {
            body["temperature"] = json!(0.5);
        }
    }
    out
}

/// The same JSON with every object's keys in reverse order and `0.5` written as `5e-1`.
fn reordered(v: &Value) -> String {
    fn walk(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut out = Map::new();
                for (k, v) in m.iter().rev() {
                    out.insert(k.clone(), walk(v));
                }
                Value::Object(out)
            }
            Value::Array(a) => Value::Array(a.iter().map(walk).collect()),
            other => other.clone(),
        }
    }
    // serde_json keeps insertion order only with preserve_order; write the reversed order by hand.
    fn write(v: &Value) -> String {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                keys.reverse();
                let fields: Vec<String> = keys.iter().map(|k| format!("{}: {}", json!(k), write(&m[*k]))).collect();
                format!("{{ {} }}", fields.join(" , "))
            }
            Value::Array(a) => format!("[{}]", a.iter().map(write).collect::<Vec<_>>().join(",")),
            Value::Number(n) if n.as_f64() == Some(0.5) => "5e-1".to_owned(),
            other => other.to_string(),
        }
    }
    write(&walk(v))
}

async fn post(client: &TestClient, url: &str, body: &str, headers: &[(&str, &str)]) -> TestResponse {
    client.post_json(url, body.as_bytes(), headers).await.unwrap()
}

fn cache_header(r: &TestResponse) -> &str {
    r.header("x-switchyard-cache").unwrap_or("-")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_request_reordered_is_answered_from_the_cache_in_every_api_streamed_or_not() {
    let backend = mock(&["m"]).await;
    let gw = gateway(&[&backend], "cache: {ttl: 10m}").await;
    let client = TestClient::new();
    for (path, body) in requests("m", "hello") {
        let what = format!("{path}, stream {}", body["stream"]);
        let url = format!("{}{path}", gw.url());
        let first = post(&client, &url, &body.to_string(), &[]).await;
        assert_eq!((first.status.as_u16(), cache_header(&first)), (200, "miss"), "{what}: {}", first.text());
        let sent = backend.control().request_count();
        let again = post(&client, &url, &reordered(&body), &[]).await;
        assert_eq!((again.status.as_u16(), cache_header(&again)), (200, "exact-hit"), "{what}");
        assert_eq!(again.text(), first.text(), "{what}: replayed byte for byte");
        assert_eq!(again.header("content-type"), first.header("content-type"), "{what}");
        assert_eq!(again.header("x-switchyard-model"), Some("m"), "{what}");
        assert_eq!(backend.control().request_count(), sent, "{what}: a hit never reaches a backend");
        let timing = again.header("server-timing").unwrap();
        assert!(timing.contains("upstream;dur=0.000"), "{what}: {timing}");

        // What changes the answer changes the key.
        let mut with_tools = body.clone();
        with_tools["tools"] = json!([{"type": "function", "function": {"name": "f", "parameters": {}}}]);
        if path == "/v1/messages" {
            with_tools["tools"] = json!([{"name": "f", "input_schema": {"type": "object"}}]);
        }
        if path == "/v1/responses" {
            with_tools["tools"] = json!([{"type": "function", "name": "f", "parameters": {}}]);
        }
        let other = post(&client, &url, &with_tools.to_string(), &[]).await;
        assert_eq!((other.status.as_u16(), cache_header(&other)), (200, "miss"), "{what} with tools: {}", other.text());
        // The other API's answer is not this API's: the same request through another path misses.
    }
    let streamed_chat = &requests("m", "hello")[4].1;
    let r = post(&client, &format!("{}/v1/chat/completions", gw.url()), &streamed_chat.to_string(), &[]).await;
    assert!(r.text().contains("data: [DONE]"), "a streamed hit is a stream: {}", r.text());
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let metrics = client.get(&format!("{}/metrics", gw.url())).await.unwrap().text();
    assert!(metrics.contains("switchyard_cache_hits_total{source=\"memory\"} 9"), "{metrics}");
    assert!(metrics.contains("switchyard_cache_stores_total 16"), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_control_and_the_switch_header_are_obeyed() {
    let backend = mock(&["m"]).await;
    let gw = gateway(&[&backend], "cache: {}").await;
    let client = TestClient::new();
    let url = format!("{}/v1/chat/completions", gw.url());
    let body = chat_body("m", false);
    let sent = || backend.control().request_count();

    // no-store: answered, not kept.
    let r = post(&client, &url, &body, &[("cache-control", "no-store")]).await;
    assert_eq!(cache_header(&r), "miss");
    let r = post(&client, &url, &body, &[]).await;
    assert_eq!(cache_header(&r), "miss", "a no-store answer was kept");
    let r = post(&client, &url, &body, &[]).await;
    assert_eq!(cache_header(&r), "exact-hit");
    // no-cache and max-age=0: a fresh answer, which replaces the stored one.
    let before = sent();
    for cc in ["no-cache", "max-age=0"] {
        let r = post(&client, &url, &body, &[("cache-control", cc)]).await;
        assert_eq!(cache_header(&r), "miss", "{cc}");
    }
    assert_eq!(sent(), before + 2);
    // max-age: only an answer at most that old.
    let r = post(&client, &url, &body, &[("cache-control", "max-age=60")]).await;
    assert_eq!(cache_header(&r), "exact-hit");
    assert!(r.header("age").unwrap().parse::<u64>().unwrap() <= 60);
    // x-switchyard-cache: off skips the cache both ways.
    let r = post(&client, &url, &body, &[("x-switchyard-cache", "off")]).await;
    assert_eq!(r.header("x-switchyard-cache"), None);
    assert_eq!(sent(), before + 3);

    // Failed answers are never stored.
    let failing = mock(&["f"]).await;
    failing.control().set_fail_rate(1.0);
    failing.control().set_fail_status(500);
    let gw = gateway(&[&failing], "cache: {}\nrouting: {max_attempts: 1}").await;
    let url = format!("{}/v1/chat/completions", gw.url());
    for _ in 0..2 {
        let r = post(&client, &url, &chat_body("f", false), &[]).await;
        assert_eq!((r.status.as_u16(), cache_header(&r)), (500, "miss"));
    }
    // Opt-in mode: only requests that ask.
    let gw = gateway(&[&backend], "cache: {opt_in: true}").await;
    let url = format!("{}/v1/chat/completions", gw.url());
    let r = post(&client, &url, &body, &[]).await;
    assert_eq!(r.header("x-switchyard-cache"), None);
    for expected in ["miss", "exact-hit"] {
        let r = post(&client, &url, &body, &[("x-switchyard-cache", "on")]).await;
        assert_eq!(cache_header(&r), expected);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_keep_their_answers_to_themselves_and_hits_cost_nothing() {
    const MASTER: &str = "master-key-for-cache-tests";
    let backend = mock(&["m"]).await;
    let dir = scratch_dir();
    let db = db_url(&dir);
    let gw = gateway(
        &[&backend],
        &format!(
            "storage: {{url: '{db}', usage_journal_dir: '{}/usage'}}\nauth: {{master_key: {MASTER}}}\ncache: {{}}\nprices: {{m: {{input_per_million: 1.0, output_per_million: 2.0}}}}",
            dir.display()
        ),
    )
    .await;
    let client = TestClient::new();
    let master = format!("Bearer {MASTER}");
    let mut keys = Vec::new();
    for (name, tags) in [("a", "[]"), ("b", "[]"), ("c", "[\"cache:off\"]")] {
        let body = format!(r#"{{"name": "{name}", "metadata": {{"tags": {tags}}}}}"#);
        let url = format!("{}/admin/keys", gw.url());
        let r = client.request(Method::POST, &url, body.into(), &[("authorization", &master)]).await.unwrap();
        assert_eq!(r.status, 201, "{}", r.text());
        keys.push(format!("Bearer {}", r.json()["key"].as_str().unwrap()));
    }
    let url = format!("{}/v1/chat/completions", gw.url());
    let body = chat_body("m", false);
    assert_eq!(cache_header(&post(&client, &url, &body, &[("authorization", &keys[0])]).await), "miss");
    assert_eq!(cache_header(&post(&client, &url, &body, &[("authorization", &keys[0])]).await), "exact-hit");
    assert_eq!(
        cache_header(&post(&client, &url, &body, &[("authorization", &keys[1])]).await),
        "miss",
        "another key's answer was served"
    );
    assert_eq!(cache_header(&post(&client, &url, &body, &[("authorization", &keys[1])]).await), "exact-hit");
    // A key tagged `cache:off` does not use it.
    for _ in 0..2 {
        assert_eq!(post(&client, &url, &body, &[("authorization", &keys[2])]).await.header("x-switchyard-cache"), None);
    }
    // Six requests: two answered by the cache, recorded as such with no tokens and no cost.
    let sql = "SELECT backend, route_reason, total_tokens, cost_usd FROM usage_records ORDER BY ts_ms";
    let pool = sqlx::SqlitePool::connect(&db).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let rows: Vec<(Option<String>, Option<String>, i64, f64)> = loop {
        let rows: Vec<(Option<String>, Option<String>, i64, f64)> =
            sqlx::query_as(sql).fetch_all(&pool).await.unwrap_or_default();
        if rows.len() >= 6 {
            break rows;
        }
        assert!(Instant::now() < deadline, "{} of 6 records written", rows.len());
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let hits: Vec<_> = rows.iter().filter(|r| r.1.as_deref() == Some("cache")).collect();
    assert_eq!(hits.len(), 2, "{rows:?}");
    for hit in hits {
        assert_eq!((hit.0.as_deref(), hit.2, hit.3), (Some("cache"), 0, 0.0), "{rows:?}");
    }
    let misses: Vec<_> = rows.iter().filter(|r| r.1.as_deref() != Some("cache")).collect();
    assert!(misses.iter().all(|r| r.2 > 0 && r.3 > 0.0), "{rows:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_hits_through_redis() {
    let redis = RedisServer::start();
    let backend = mock(&["m"]).await;
    let extra = format!("redis: {{url: '{}'}}\ncache: {{namespace: global}}", redis.url());
    let (a, b) = (gateway(&[&backend], &extra).await, gateway(&[&backend], &extra).await);
    let client = TestClient::new();
    for (path, body) in requests("m", "shared") {
        let what = format!("{path}, stream {}", body["stream"]);
        let first = post(&client, &format!("{}{path}", a.url()), &body.to_string(), &[]).await;
        assert_eq!((first.status.as_u16(), cache_header(&first)), (200, "miss"), "{what}");
        // The store in Redis is in the background: the other instance sees it within moments.
        let deadline = Instant::now() + Duration::from_secs(5);
        let hit = loop {
            let r =
                post(&client, &format!("{}{path}", b.url()), &reordered(&body), &[("cache-control", "no-store")]).await;
            if cache_header(&r) == "exact-hit" {
                break r;
            }
            assert!(Instant::now() < deadline, "{what}: instance b never saw a's answer");
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert_eq!(hit.header("x-switchyard-cache-source"), Some("redis"), "{what}");
        assert_eq!(hit.text(), first.text(), "{what}");
    }
    let stored = redis.command(&["EVAL", "return #redis.call('KEYS', 'switchyard:cache:*')", "0"]);
    assert_eq!(stored.as_deref(), Some(":8"), "one entry per request, stored once");
}

/// A backend that streams one chat answer through `[DONE]` and then holds its body open (the
/// chunked body's end never comes); probes get a model list. One request per connection.
async fn backend_that_lingers_after_done() -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let n = socket.read(&mut buf).await.unwrap_or(0);
                if !buf[..n].starts_with(b"POST") {
                    let list = r#"{"object":"list","data":[{"id":"m","object":"model"}]}"#;
                    let head = format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n", list.len());
                    let _ = socket.write_all(format!("{head}{list}").as_bytes()).await;
                    return;
                }
                let events = [
                    r#"data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"kept"},"finish_reason":null}]}"#,
                    r#"data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
                    "data: [DONE]",
                ];
                let mut out = String::from(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
                );
                for event in events {
                    let event = format!("{event}\n\n");
                    out.push_str(&format!("{:x}\r\n{event}\r\n", event.len()));
                }
                let _ = socket.write_all(out.as_bytes()).await;
                // Never the terminating chunk: hold the connection until the gateway drops it.
                let _ = socket.read(&mut buf).await;
            });
        }
    });
    addr
}

/// A client that stops reading at `[DONE]` and closes, before the backend's body has ended (as
/// the OpenAI SDKs do): the stream passed its terminal event whole, so it is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_read_to_its_terminal_event_is_stored_when_the_client_closes_first() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let backend = backend_that_lingers_after_done().await;
    let gw = gateway_yaml(&format!(
        "listen: 127.0.0.1:0\ncache: {{}}\nbackends:\n  - {{name: b, url: 'http://{backend}', models: [m]}}\n"
    ))
    .await;
    let body = chat_body("m", true);
    let addr = gw.url().trim_start_matches("http://").to_owned();
    let mut socket = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    socket.write_all(request.as_bytes()).await.unwrap();
    let mut read = Vec::new();
    let mut chunk = [0u8; 8192];
    while !String::from_utf8_lossy(&read).contains("data: [DONE]\n\n") {
        let n = tokio::time::timeout(Duration::from_secs(10), socket.read(&mut chunk)).await.unwrap().unwrap();
        assert!(n > 0, "the gateway closed before [DONE]: {}", String::from_utf8_lossy(&read));
        read.extend_from_slice(&chunk[..n]);
    }
    drop(socket);

    let client = TestClient::new();
    let url = format!("{}/v1/chat/completions", gw.url());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = tokio::time::timeout(Duration::from_secs(2), post(&client, &url, &body, &[])).await;
        if let Ok(r) = r.as_ref().map(cache_header) {
            if r == "exact-hit" {
                break;
            }
        }
        assert!(Instant::now() < deadline, "the stream read to [DONE] was never stored");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
