//! HTTP request handling: the real gateway (its hyper setup, limits and routes) in this process,
//! with a mock backend, fed raw bytes as a client connection.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a fuzz harness, like a test: a panic is the failure report

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use switchyard_gateway::{Config, RunningGateway};
use switchyard_testkit::{MockConfig, MockServer};

/// Longer than any of the gateway's timeouts configured below: a connection still open after
/// this is a hang.
const PATIENCE: Duration = Duration::from_secs(5);
const HTTP2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

struct Harness {
    _runtime: tokio::runtime::Runtime,
    _mock: MockServer,
    _gateway: RunningGateway,
    addr: SocketAddr,
}

/// Set by the panic hook: a panic on one of the gateway's tasks (which tokio would otherwise
/// contain) must fail the input that caused it.
static PANICKED: AtomicBool = AtomicBool::new(false);

fn harness() -> &'static Harness {
    static HARNESS: OnceLock<Harness> = OnceLock::new();
    HARNESS.get_or_init(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICKED.store(true, Ordering::SeqCst);
            previous(info);
        }));
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("a runtime");
        let dir = std::env::temp_dir().join(format!("switchyard-fuzz-http-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        let (mock, gateway) = runtime.block_on(async {
            let cfg = MockConfig { models: vec!["m".to_owned()], ..MockConfig::default() };
            let mock = MockServer::start("127.0.0.1:0".parse().expect("an address"), cfg).await.expect("the mock");
            let yaml = format!(
                "listen: 127.0.0.1:0\n\
                 timeouts: {{header_read: 1s, body_read: 1s, first_byte: 2s, client_write: 1s}}\n\
                 limits: {{max_body_bytes: 65536}}\n\
                 storage: {{url: 'sqlite://{0}/db.sqlite', usage_journal_dir: '{0}/usage'}}\n\
                 backends:\n  - {{name: b0, url: '{1}'}}\n",
                dir.display(),
                mock.url()
            );
            let config = Config::from_yaml(&yaml, &std::collections::HashMap::new()).expect("the config");
            let gateway = switchyard_gateway::start(config, std::future::pending()).await.expect("the gateway");
            (mock, gateway)
        });
        let addr = gateway.addr;
        Harness { _runtime: runtime, _mock: mock, _gateway: gateway, addr }
    })
}

/// Send `request` on a fresh connection, half-closing it when `half_close`, and read until the
/// gateway closes. (A half-closed client is one that went away: the gateway may drop its request
/// unanswered, which is how it cancels upstream work for clients that disconnect.)
fn exchange(addr: SocketAddr, request: &[u8], half_close: bool) -> Vec<u8> {
    let mut stream = TcpStream::connect(addr).expect("the gateway accepts");
    stream.set_read_timeout(Some(PATIENCE)).expect("a read timeout");
    let _ = stream.write_all(request);
    if half_close {
        let _ = stream.shutdown(Shutdown::Write);
    }
    let mut answer = Vec::new();
    match stream.read_to_end(&mut answer) {
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
            panic!("the gateway held a half-closed connection open for {PATIENCE:?}")
        }
        _ => answer,
    }
}

/// Any bytes as one client connection's input: the gateway answers with HTTP (or HTTP/2 frames
/// after the HTTP/2 preface) or just closes; it never panics, never hangs, and still serves a
/// well-formed request afterwards.
pub fn http_requests(data: &[u8]) {
    let h = harness();
    let answer = exchange(h.addr, data, true);
    assert!(!PANICKED.load(Ordering::SeqCst), "the gateway panicked on this input");
    if !answer.is_empty() && !data.starts_with(HTTP2_PREFACE) {
        assert!(answer.starts_with(b"HTTP/1."), "not an HTTP answer: {:?}", String::from_utf8_lossy(&answer));
    }
    let health = exchange(h.addr, b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n", false);

    assert!(health.starts_with(b"HTTP/1.1 200"), "the gateway stopped serving: {:?}", String::from_utf8_lossy(&health));
}
