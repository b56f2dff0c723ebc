//! Connection and input limits, each proven black-box over raw sockets (a limit that is
//! configured but never applied is the classic failure): open connections, header count and
//! size (431), URI length (414), a declared oversized body (413 before it is read), JSON
//! nesting on every path that parses, a backend's endless stream line, the header-read and
//! keep-alive timeouts, an HTTP/2 client gone silent, a slow POST, and a client that stops reading a stream.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::time::Duration;

use crate::common::*;
use switchyard_testkit::{MockConfig, TestClient};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Bounds every wait here: a limit that does not apply shows up as this timeout, not a hang.
const PATIENCE: Duration = Duration::from_secs(10);

async fn connect(gw: &switchyard_gateway::RunningGateway) -> TcpStream {
    TcpStream::connect(gw.addr).await.unwrap()
}

/// Everything the server sends until it closes the connection (or `PATIENCE` runs out).
async fn read_to_close(stream: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(PATIENCE, stream.read_to_end(&mut out)).await.expect("the server closed");
    out
}

/// One response's status line and head (up to the blank line), on a kept-alive connection.
async fn read_head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    tokio::time::timeout(PATIENCE, async {
        while !head.ends_with(b"\r\n\r\n") {
            if stream.read(&mut byte).await.unwrap() == 0 {
                break;
            }
            head.push(byte[0]);
        }
    })
    .await
    .expect("a response head");
    String::from_utf8_lossy(&head).into_owned()
}

fn status_of(response: &[u8]) -> u16 {
    let text = String::from_utf8_lossy(response);
    text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// Send `request` on a fresh connection; the status of the answer (0 if none).
async fn exchange(gw: &switchyard_gateway::RunningGateway, request: &[u8]) -> (u16, String) {
    let mut stream = connect(gw).await;
    stream.write_all(request).await.unwrap();
    let _ = stream.shutdown().await;
    let response = read_to_close(&mut stream).await;
    (status_of(&response), String::from_utf8_lossy(&response).into_owned())
}

#[tokio::test]
async fn connections_over_the_limit_are_closed_on_arrival_and_slots_come_back() {
    let a = mock(&["m"]).await;
    let gw = gateway(&[&a], "limits: {max_connections: 4}").await;
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut s = connect(&gw).await;
        s.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
        assert!(read_head(&mut s).await.starts_with("HTTP/1.1 200"), "the first four are served");
        held.push(s);
    }
    let mut fifth = connect(&gw).await;
    let _ = fifth.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n").await;
    let answer = read_to_close(&mut fifth).await;
    assert!(answer.is_empty(), "the fifth connection is closed unanswered: {}", String::from_utf8_lossy(&answer));
    assert_eq!(gw.app.metrics.connections_refused.load(std::sync::atomic::Ordering::Relaxed), 1);
    // A closed connection gives its slot back.
    drop(held.pop());
    let served = tokio::time::timeout(PATIENCE, async {
        loop {
            let mut s = connect(&gw).await;
            let _ = s.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await;
            let answer = read_to_close(&mut s).await;
            if status_of(&answer) == 200 {
                return;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(served.is_ok(), "a slot came back");
}

#[tokio::test]
async fn oversized_heads_are_431_and_long_uris_414() {
    let a = mock(&["m"]).await;
    let gw = gateway(&[&a], "limits: {max_headers: 20, max_header_bytes: 16384, max_uri_bytes: 1024}").await;
    let big_header = format!("GET /health HTTP/1.1\r\nhost: x\r\nx-big: {}\r\n\r\n", "a".repeat(100_000));
    assert_eq!(exchange(&gw, big_header.as_bytes()).await.0, 431);
    let many: String = (0..40).map(|i| format!("x-h{i}: v\r\n")).collect();
    let many_headers = format!("GET /health HTTP/1.1\r\nhost: x\r\n{many}\r\n");
    assert_eq!(exchange(&gw, many_headers.as_bytes()).await.0, 431);
    let long_uri = format!("GET /v1/models?q={} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n", "a".repeat(2000));
    let (status, text) = exchange(&gw, long_uri.as_bytes()).await;
    assert_eq!(status, 414, "{text}");
    assert!(text.contains("uri_too_long"), "{text}");
    // The default cap (100, hyper's own) applies too.
    let defaults = gateway(&[&a], "").await;
    let many: String = (0..150).map(|i| format!("x-h{i}: v\r\n")).collect();
    let too_many = format!("GET /health HTTP/1.1\r\nhost: x\r\n{many}\r\n");
    assert_eq!(exchange(&defaults, too_many.as_bytes()).await.0, 431);
    // Within the limits all is served.
    let fine = format!("GET /v1/models?q={} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n", "a".repeat(500));
    assert_eq!(exchange(&gw, fine.as_bytes()).await.0, 200);
}

#[tokio::test]
async fn a_declared_oversized_body_is_refused_before_it_is_sent() {
    let a = mock(&["m"]).await;
    let gw = gateway(&[&a], "limits: {max_body_bytes: 1024}").await;
    let mut s = connect(&gw).await;
    // Only the head: the answer must come without the body.
    s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100000000\r\n\r\n")
        .await
        .unwrap();
    let head = read_head(&mut s).await;
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    assert_eq!(a.control().request_count(), 0);
}

#[tokio::test]
async fn deep_json_nesting_is_a_400_on_every_path_that_parses() {
    let a = mock(&["m"]).await;
    let gw = gateway(&[&a], "").await;
    let client = TestClient::new();
    let deep = "[".repeat(100_000);
    let bodies = [
        ("/v1/chat/completions", format!(r#"{{"model":"m","messages":{deep}"#)),
        ("/v1/chat/completions", format!(r#"{{"model":"m","messages":[{{"role":"user","content":"x"}}],"x":{deep}"#)),
        ("/v1/messages", format!(r#"{{"model":"m","max_tokens":5,"messages":[],"metadata":{deep}"#)),
        ("/v1/responses", format!(r#"{{"model":"m","input":{deep}"#)),
        ("/api/chat", format!(r#"{{"model":"m","messages":[],"options":{deep}"#)),
        ("/v1/embeddings", format!(r#"{{"model":"m","input":{deep}"#)),
        ("/admin/keys", format!(r#"{{"name":{deep}"#)),
    ];
    for (path, body) in &bodies {
        let r = client.post_json(&format!("{}{path}", gw.url()), body.as_bytes(), &[]).await.unwrap();
        assert_eq!(r.status, 400, "{path}: {}", r.text());
    }
    assert_eq!(a.control().request_count(), 0, "nothing reached the backend");
    // Deep but well-formed nesting in a field a passed-through request's routing never reads is
    // skipped without recursion and goes to the backend untouched (the backend's own parser
    // judges it): no crash, no stack growth here.
    let closed = format!(
        r#"{{"model":"m","messages":[{{"role":"user","content":"x"}}],"x":{}1{}}}"#,
        "[".repeat(50_000),
        "]".repeat(50_000)
    );
    let r = client.post_json(&format!("{}/v1/chat/completions", gw.url()), closed.as_bytes(), &[]).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(chat(&client, &gw, "m").await.status, 200, "and the gateway still serves");
}

/// A backend that answers every POST with an SSE stream whose first line never ends.
async fn endless_line_backend() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let n = s.read(&mut buf).await.unwrap_or(0);
                if buf[..n].starts_with(b"GET") {
                    // The health probe's model list.
                    let models = r#"{"object":"list","data":[{"id":"m","object":"model"}]}"#;
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{models}",
                        models.len()
                    );
                    let _ = s.write_all(answer.as_bytes()).await;
                    return;
                }
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
                if s.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = vec![b'x'; 64 * 1024];
                let mut framed = format!("{:x}\r\n", chunk.len()).into_bytes();
                framed.extend_from_slice(&chunk);
                framed.extend_from_slice(b"\r\n");
                let _ = s.write_all(b"6\r\ndata: \r\n").await;
                // 16 MiB of one line, or until the gateway hangs up.
                for _ in 0..256 {
                    if s.write_all(&framed).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    url
}

#[tokio::test]
async fn a_backend_stream_line_without_end_is_cut_off() {
    let url = endless_line_backend().await;
    let yaml = format!("listen: 127.0.0.1:0\nbackends:\n  - {{name: b0, url: '{url}', models: [m]}}\n");
    let gw = gateway_yaml(&yaml).await;
    // Translated (an Anthropic client, an OpenAI backend): the stream is decoded line by line.
    let body = r#"{"model":"m","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"x"}]}"#;
    let (status, _, frames) = tokio::time::timeout(
        PATIENCE,
        TestClient::new().post_stream(&format!("{}/v1/messages", gw.url()), body.as_bytes(), &[]),
    )
    .await
    .expect("the stream ends")
    .unwrap();
    assert_eq!(status, 200);
    let text = String::from_utf8(frames.concat()).unwrap();
    assert!(text.contains("event: error"), "{text}");
    assert!(text.contains("longer than"), "{text}");
}

#[tokio::test]
async fn slow_heads_and_idle_keep_alives_are_closed() {
    let a = mock(&["m"]).await;
    let gw = gateway(&[&a], "timeouts: {header_read: 300ms}").await;
    // A head that never ends.
    let mut slow = connect(&gw).await;
    slow.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n").await.unwrap();
    let started = std::time::Instant::now();
    read_to_close(&mut slow).await;
    assert!(started.elapsed() < PATIENCE);
    // A kept-alive connection left idle after its request.
    let mut idle = connect(&gw).await;
    idle.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
    assert!(read_head(&mut idle).await.starts_with("HTTP/1.1 200"));
    let rest = read_to_close(&mut idle).await;
    assert!(rest.len() < 200, "only the first response's body came: {}", String::from_utf8_lossy(&rest));
}

#[tokio::test]
async fn an_http2_connection_that_stops_answering_is_pinged_then_closed() {
    let a = mock(&["m"]).await;
    let gw = gateway(&[&a], "timeouts: {header_read: 300ms}").await;
    let mut s = connect(&gw).await;
    // The preface and an empty SETTINGS frame, then silence: no SETTINGS ack, no PING answer.
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0").await.unwrap();
    let started = std::time::Instant::now();
    let sent = read_to_close(&mut s).await;
    assert!(started.elapsed() < PATIENCE);
    // Walk the frames (9-byte headers): the gateway pinged before it gave up.
    let (mut at, mut pinged) = (0, false);
    while at + 9 <= sent.len() {
        let len = (usize::from(sent[at]) << 16) | (usize::from(sent[at + 1]) << 8) | usize::from(sent[at + 2]);
        pinged |= sent[at + 3] == 0x6 && sent[at + 4] & 0x1 == 0;
        at += 9 + len;
    }
    assert!(pinged, "a PING came before the close: {sent:?}");
    // The connection's slot came back.
    let back = tokio::time::timeout(PATIENCE, async {
        while gw.app.metrics.connections_open.load(std::sync::atomic::Ordering::Relaxed) > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(back.is_ok(), "the connection was let go");
}

#[tokio::test]
async fn an_http2_connection_that_answers_pings_but_sends_nothing_is_closed_when_idle() {
    let a = mock(&["m"]).await;
    let gw = gateway(&[&a], "timeouts: {header_read: 200ms, connection_idle: 1s}").await;
    let mut s = connect(&gw).await;
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0").await.unwrap();
    // A live client: acknowledge the server's SETTINGS and answer every PING, send no request.
    let started = std::time::Instant::now();
    let (mut pings, mut goaway) = (0, false);
    let mut buf = Vec::new();
    let closed = tokio::time::timeout(PATIENCE, async {
        let mut chunk = [0u8; 4096];
        loop {
            let n = s.read(&mut chunk).await.unwrap_or(0);
            if n == 0 {
                return;
            }
            buf.extend_from_slice(&chunk[..n]);
            while buf.len() >= 9 {
                let len = (usize::from(buf[0]) << 16) | (usize::from(buf[1]) << 8) | usize::from(buf[2]);
                if buf.len() < 9 + len {
                    break;
                }
                let (kind, flags) = (buf[3], buf[4]);
                let payload = buf[9..9 + len].to_vec();
                buf.drain(..9 + len);
                match kind {
                    0x4 if flags & 0x1 == 0 => {
                        let _ = s.write_all(b"\0\0\0\x04\x01\0\0\0\0").await;
                    }
                    0x6 if flags & 0x1 == 0 => {
                        pings += 1;
                        let mut ack = vec![0, 0, 8, 0x6, 0x1, 0, 0, 0, 0];
                        ack.extend_from_slice(&payload);
                        let _ = s.write_all(&ack).await;
                    }
                    0x7 => goaway = true,
                    _ => {}
                }
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "the idle connection was never closed ({pings} pings answered)");
    assert!(pings >= 2, "it was kept alive by answered pings first: {pings}");
    assert!(goaway, "closed with a GOAWAY");
    assert!(started.elapsed() >= Duration::from_secs(1), "not before connection_idle");
}

#[tokio::test]
async fn a_slow_post_gets_a_408_and_its_connection_back() {
    let a = mock(&["m"]).await;
    let gw = gateway(&[&a], "timeouts: {body_read: 300ms}").await;
    let body = chat_body("m", false);
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let mut slow = connect(&gw).await;
    slow.write_all(head.as_bytes()).await.unwrap();
    // One byte of the body every 100 ms: each read is on time, the whole body never is.
    let started = std::time::Instant::now();
    let trickle = async {
        for b in body.as_bytes() {
            if slow.write_all(std::slice::from_ref(b)).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), trickle).await;
    let answer = read_to_close(&mut slow).await;
    assert_eq!(status_of(&answer), 408, "{}", String::from_utf8_lossy(&answer));
    assert!(String::from_utf8_lossy(&answer).contains("request_body_timeout"));
    assert!(started.elapsed() < PATIENCE);
    assert_eq!(a.control().request_count(), 0, "nothing reached the backend");
    // A body sent at once is not affected.
    let r = TestClient::new().post_json(&format!("{}/v1/chat/completions", gw.url()), body.as_bytes(), &[]).await;
    assert_eq!(r.unwrap().status, 200);
}

#[tokio::test]
async fn a_client_that_stops_reading_is_cut_off_and_the_upstream_cancelled() {
    // An answer far larger than the socket buffers, sent as fast as it can go.
    let a = mock_with(&["m"], MockConfig { stream_chunks: 2_000_000, ..MockConfig::default() }).await;
    let gw = gateway(&[&a], "timeouts: {client_write: 300ms}").await;
    let mut s = connect(&gw).await;
    let body = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}"#;
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(request.as_bytes()).await.unwrap();
    // Never read: the gateway's writes block, then it gives up on this client.
    let metrics = &gw.app.metrics;
    let cut = tokio::time::timeout(PATIENCE, async {
        while metrics.client_write_timeouts.load(std::sync::atomic::Ordering::Relaxed) == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(cut.is_ok(), "the stalled client was cut off");
    // The upstream request ended with it: nothing in flight to the backend.
    let released = tokio::time::timeout(PATIENCE, async {
        while gw.app.router.backends.iter().any(|b| b.in_flight() > 0) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(released.is_ok(), "the upstream was cancelled");
    drop(s);
}
