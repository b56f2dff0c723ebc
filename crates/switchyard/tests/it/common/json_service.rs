//! A tiny JSON-over-HTTP service on an ephemeral port, for the services a test plays itself
//! (a webhook guard, a classifier model): each POST's JSON body is kept, and answered with what
//! `answer` makes of it after `delay` (a bodiless probe is answered the same, unkept). Any path;
//! one request per connection, and each answer says so (`connection: close`): without it a client
//! could reuse a connection the service had closed, and a discovery read failed now and then.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the service was sent, in order.
pub type Seen = Arc<Mutex<Vec<Value>>>;

pub async fn json_service(
    delay: Duration,
    answer: impl Fn(&Value) -> Value + Send + Sync + 'static,
) -> (SocketAddr, Seen) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Seen = Arc::default();
    let (kept, answer) = (seen.clone(), Arc::new(answer));
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else { return };
            let (kept, answer) = (kept.clone(), answer.clone());
            tokio::spawn(async move {
                let Some(body) = read_body(&mut socket).await else { return };
                let asked: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                // Probes (a GET for the model list, a health check) carry no body and are not kept.
                if !asked.is_null() {
                    kept.lock().unwrap().push(asked.clone());
                }
                tokio::time::sleep(delay).await;
                let answer = answer(&asked).to_string();
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                    answer.len()
                );
                let _ = socket.write_all(reply.as_bytes()).await;
            });
        }
    });
    (addr, seen)
}

/// One request's body (by its content-length); None when the peer went away first.
async fn read_body(socket: &mut tokio::net::TcpStream) -> Option<Vec<u8>> {
    read_request(socket).await.map(|(_, body)| body)
}

/// One request: its head (request line and headers, lower-cased) and its body (by its
/// content-length); None when the peer went away first.
pub async fn read_request(socket: &mut tokio::net::TcpStream) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = socket.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else { continue };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        if buf.len() >= end + 4 + length {
            return Some((head, buf[end + 4..end + 4 + length].to_vec()));
        }
    }
}

/// A webhook guard service: it keeps what it was sent, waits `delay`, and answers by the texts:
/// `forbidden` → block, `code-123` → mask it as `[CODE]` (where `masks` says this call may be
/// masked), else allow. Its URL and what it was sent.
pub async fn webhook_service(delay: Duration, masks: fn(&Value) -> bool) -> (String, Seen) {
    let (addr, seen) = json_service(delay, move |asked| {
        let texts: Vec<&str> = asked["texts"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        if texts.iter().any(|t| t.contains("forbidden")) {
            serde_json::json!({"action": "block", "reason": "policy 7"})
        } else if masks(asked) && texts.iter().any(|t| t.contains("code-123")) {
            let masked = |t: &&str| {
                if t.contains("code-123") {
                    Value::String(t.replace("code-123", "[CODE]"))
                } else {
                    Value::Null
                }
            };
            serde_json::json!({"action": "mask", "replacements": texts.iter().map(masked).collect::<Vec<_>>()})
        } else {
            serde_json::json!({"action": "allow"})
        }
    })
    .await;
    (format!("http://{addr}/check"), seen)
}
