//! Backend faults, each ending within its timeout with nothing leaked: a backend that never
//! answers, one that stalls after its headers, one that stalls mid-stream, one that resets the
//! connection, and a black-holed connect. Each is repeated; afterwards nothing is in flight, no
//! connection is left open, and the process holds no more file descriptors, and no more memory
//! beyond allocator slack, than before.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report
#![allow(clippy::too_many_lines)] // test scenarios read top to bottom; splitting them hides the story

#[path = "it/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::*;
use switchyard_testkit::TestClient;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

const REPEAT: usize = 10;
const MODELS: &str = r#"{"object":"list","data":[{"id":"m","object":"model"}]}"#;

#[derive(Clone, Copy, Debug)]
enum Fault {
    /// Reads the request, never answers.
    NoAnswer,
    /// Sends a 200 and SSE headers, then nothing.
    StallAfterHeaders,
    /// Sends one SSE event, then nothing.
    StallMidStream,
    /// Closes the connection as soon as the request arrived.
    Reset,
}

/// A backend that answers its health probe (GET) and fails every POST as `fault` says.
async fn faulty(fault: Fault) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let n = s.read(&mut buf).await.unwrap_or(0);
                if buf[..n].starts_with(b"GET") {
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{MODELS}",
                        MODELS.len()
                    );
                    let _ = s.write_all(answer.as_bytes()).await;
                    return;
                }
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
                match fault {
                    Fault::NoAnswer => {}
                    Fault::StallAfterHeaders => {
                        let _ = s.write_all(head.as_bytes()).await;
                    }
                    Fault::StallMidStream => {
                        let event = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"hi\"},\"finish_reason\":null}]}\n\n";
                        let _ = s.write_all(format!("{head}{:x}\r\n{event}\r\n", event.len()).as_bytes()).await;
                    }
                    Fault::Reset => return,
                }
                // Hold the connection until the gateway gives up on it.
                let _ = s.read(&mut buf).await;
            });
        }
    });
    url
}

/// This process's resident memory (the gateway runs in it).
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next());
    kib.and_then(|v| v.parse::<u64>().ok()).unwrap_or(0) * 1024
}

/// Memory the repeated faults may leave behind: allocator slack, not a leak per request.
const RSS_SLACK: u64 = 8 << 20;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0)
}

async fn gateway_for(url: &str) -> switchyard_gateway::RunningGateway {
    let yaml = format!(
        "listen: 127.0.0.1:0\ntimeouts: {{connect: 200ms, first_byte: 300ms, stream_idle: 300ms}}\nbackends:\n  - {{name: b0, url: '{url}', models: [m]}}\n"
    );
    gateway_yaml(&yaml).await
}

/// Nothing in flight, no client connection open (bounded wait: the last ones close as we look).
async fn settled(gw: &switchyard_gateway::RunningGateway) {
    let done = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let in_flight: usize = gw.app.router.backends.iter().map(|b| b.in_flight()).sum();
            let open = gw.app.metrics.connections_open.load(std::sync::atomic::Ordering::Relaxed);
            if in_flight == 0 && open == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(done.is_ok(), "requests or connections leaked");
}

#[tokio::test]
async fn each_backend_fault_ends_within_its_timeout_and_leaks_nothing() {
    for fault in [Fault::NoAnswer, Fault::StallAfterHeaders, Fault::StallMidStream, Fault::Reset] {
        let url = faulty(fault).await;
        let gw = gateway_for(&url).await;
        let body = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}"#;
        // Warm up once (pools, lazily made state), then count.
        let _ = TestClient::new().post_stream(&format!("{}/v1/chat/completions", gw.url()), body.as_bytes(), &[]).await;
        settled(&gw).await;
        let (fds, rss) = (open_fds(), rss_bytes());
        for _ in 0..REPEAT {
            let started = Instant::now();
            let client = TestClient::new();
            let (status, _, frames) = tokio::time::timeout(
                Duration::from_secs(10),
                client.post_stream(&format!("{}/v1/chat/completions", gw.url()), body.as_bytes(), &[]),
            )
            .await
            .unwrap_or_else(|_| panic!("{fault:?}: the request hung"))
            .unwrap();
            let text = String::from_utf8_lossy(&frames.concat()).into_owned();
            match fault {
                Fault::NoAnswer | Fault::StallAfterHeaders => {
                    assert_eq!(status, 504, "{fault:?}: {text}");
                    assert!(text.contains("upstream_timeout"), "{fault:?}: {text}");
                }
                Fault::StallMidStream => {
                    assert_eq!(status, 200, "{fault:?}: {text}");
                    assert!(text.contains("stream_idle_timeout"), "{fault:?}: {text}");
                }
                Fault::Reset => assert_eq!(status, 503, "{fault:?}: {text}"),
            }
            assert!(started.elapsed() < Duration::from_secs(5), "{fault:?}: ended within its timeout");
            drop(client);
        }
        settled(&gw).await;
        assert!(open_fds() <= fds + 2, "{fault:?}: file descriptors leaked ({fds} → {})", open_fds());
        let grown = rss_bytes().saturating_sub(rss);
        assert!(grown < RSS_SLACK, "{fault:?}: memory grew by {grown} bytes");
    }
}

#[tokio::test]
async fn a_black_holed_connect_times_out_and_leaks_nothing() {
    // A listener whose accept queue is full: the kernel drops further SYNs, so connecting hangs
    // as it does to a host that never answers.
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(1).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut fillers = Vec::new();
    for _ in 0..4 {
        if let Ok(Ok(s)) = tokio::time::timeout(Duration::from_millis(200), TcpStream::connect(addr)).await {
            fillers.push(s);
        }
    }
    let probe = tokio::time::timeout(Duration::from_millis(300), TcpStream::connect(addr)).await;
    if probe.is_ok() {
        eprintln!("this kernel does not drop SYNs on a full accept queue: no black hole to test against");
        return;
    }
    let url = format!("http://{addr}");
    let gw = gateway_for(&url).await;
    let fds = open_fds();
    for _ in 0..3 {
        let started = Instant::now();
        let r = TestClient::new()
            .post_json(&format!("{}/v1/chat/completions", gw.url()), chat_body("m", false).as_bytes(), &[])
            .await
            .unwrap();
        assert!(matches!(r.status.as_u16(), 503 | 504), "{}: {}", r.status, r.text());
        assert!(started.elapsed() < Duration::from_secs(5), "bounded by timeouts.connect");
    }
    settled(&gw).await;
    assert!(open_fds() <= fds + 2, "file descriptors leaked");
    drop((listener, fillers));
}
