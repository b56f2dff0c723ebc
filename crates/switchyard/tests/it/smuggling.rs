//! Request smuggling, over raw sockets: every ambiguous framing is refused (or, where HTTP/1.1
//! allows one reading, read that one way), nothing after an error on a connection is served,
//! and the backend sees exactly the requests it should. The gateway never forwards a client's
//! bytes as they came: each request upstream is one it framed itself.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::time::Duration;

use crate::common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const BODY: &str = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
/// A complete, valid request, smuggled behind the framing under test.
fn inner() -> String {
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{BODY}",
        BODY.len()
    )
}

/// Statuses of every response on one connection, in order, until the server closes it.
async fn statuses(case: &str, addr: std::net::SocketAddr, raw: &[u8]) -> Vec<u16> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(raw).await.unwrap();
    let mut out = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    assert!(read.is_ok(), "{case}: the server closed the connection: {}", String::from_utf8_lossy(&out));
    String::from_utf8_lossy(&out)
        .match_indices("HTTP/1.1 ")
        .filter_map(|(i, _)| String::from_utf8_lossy(&out[i + 9..i + 12]).parse().ok())
        .collect()
}

#[tokio::test]
async fn ambiguous_framing_is_refused_and_nothing_is_smuggled() {
    let a = mock(&["m"]).await;
    let gw = gateway(&[&a], "").await;
    let smuggled = inner();
    let n = BODY.len();
    // (case, raw bytes): each must be refused with nothing reaching the backend.
    let refused: Vec<(&str, String)> = vec![
        (
            "content-length and transfer-encoding",
            format!("POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 4\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n{smuggled}"),
        ),
        (
            "two different content-lengths",
            format!("POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {n}\r\ncontent-length: 0\r\n\r\n{BODY}{smuggled}"),
        ),
        (
            "transfer-encoding not ending in chunked",
            format!("POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked, identity\r\n\r\n0\r\n\r\n{smuggled}"),
        ),
        (
            "an unknown transfer-encoding",
            format!("POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: xchunked\r\n\r\n0\r\n\r\n{smuggled}"),
        ),
        (
            "whitespace before the colon",
            format!("POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding : chunked\r\ncontent-length: 4\r\n\r\n0\r\n\r\n{smuggled}"),
        ),
        (
            "an obs-fold continuation line",
            format!("POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: identity\r\n chunked\r\ncontent-length: 4\r\n\r\n0\r\n\r\n{smuggled}"),
        ),
        (
            "a chunk size that overflows",
            format!("POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\nfffffffffffffffff1\r\n{BODY}\r\n0\r\n\r\n{smuggled}"),
        ),
        (
            "a negative content-length",
            format!("POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: -1\r\n\r\n{smuggled}"),
        ),
    ];
    for (case, raw) in &refused {
        let got = statuses(case, gw.addr, raw.as_bytes()).await;
        assert!(got.len() <= 1, "{case}: one answer at most, then the connection closes: {got:?}");
        assert!(got.iter().all(|s| (400..500).contains(s)), "{case}: refused: {got:?}");
        assert_eq!(a.control().request_count(), 0, "{case}: nothing reached the backend");
    }
    // Pipelining after an early error: the bad request is answered and the connection closed;
    // the valid request behind it is never served.
    let pipelined = format!("GET /health HTTP/1.1\r\nhost: x\r\na header without a colon\r\n\r\n{smuggled}");
    let got = statuses("pipelined", gw.addr, pipelined.as_bytes()).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(a.control().request_count(), 0);
}

#[tokio::test]
async fn valid_framings_each_reach_the_backend_exactly_once() {
    let a = mock(&["m"]).await;
    let gw = gateway(&[&a], "").await;
    let n = BODY.len();
    let cases: Vec<(&str, String, u64)> = vec![
        ("two pipelined requests", format!("{}{}", inner(), inner()), 2),
        (
            "a chunked body",
            format!("POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n{n:x}\r\n{BODY}\r\n0\r\n\r\n"),
            1,
        ),
        (
            "the same content-length twice",
            format!("POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {n}\r\ncontent-length: {n}\r\n\r\n{BODY}"),
            1,
        ),
        (
            // HTTP/1.1 lets a server read bare LF as a line end; it is read one way, here and upstream alike.
            "bare LF line ends",
            format!("POST /v1/chat/completions HTTP/1.1\nhost: x\ncontent-type: application/json\ncontent-length: {n}\n\n{BODY}"),
            1,
        ),
    ];
    for (case, raw, expected) in cases {
        a.control().reset_counters();
        let mut s = TcpStream::connect(gw.addr).await.unwrap();
        s.write_all(raw.as_bytes()).await.unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 8192];
        // Read until every expected answer has come (each ends its JSON body with the usage object).
        let done = tokio::time::timeout(Duration::from_secs(10), async {
            while String::from_utf8_lossy(&seen).matches("\"total_tokens\"").count() < expected as usize {
                let k = s.read(&mut buf).await.unwrap();
                assert!(k > 0, "{case}: closed early: {}", String::from_utf8_lossy(&seen));
                seen.extend_from_slice(&buf[..k]);
            }
        })
        .await;
        assert!(done.is_ok(), "{case}: {}", String::from_utf8_lossy(&seen));
        let text = String::from_utf8_lossy(&seen);
        assert_eq!(text.matches("HTTP/1.1 200").count() as u64, expected, "{case}: {text}");
        assert_eq!(a.control().request_count(), expected, "{case}");
    }
}
