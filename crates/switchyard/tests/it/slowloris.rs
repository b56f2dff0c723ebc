//! Slowloris, on the real binary: 2,000 connections that send half a request head and then
//! nothing stay within a per-connection memory bound, real traffic beside them is served in full,
//! and `timeouts.header_read` closes every one of them.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::*;
use switchyard_testkit::TestClient;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const BIN: &str = env!("CARGO_BIN_EXE_switchyard");
const SLOW: usize = 2_000;
/// The stated bound (RELIABILITY.md, issue 29's bar): what one idle half-open connection may cost
/// the gateway. About 5 KiB measured (the first head is read into a buffer of its own size before
/// hyper's buffers exist: `server/head.rs`); 22.4 KiB before.
const BYTES_PER_CONNECTION: u64 = 12 * 1024;

fn rss_bytes(child: &Child) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

async fn connections_open(base: &str) -> u64 {
    let text = TestClient::new().get(&format!("{base}/metrics")).await.unwrap().text();
    let line = text.lines().find(|l| l.starts_with("switchyard_connections_open ")).expect("the gauge");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// This test holds both ends of 2,000 connections: raise its own open-file limit to allow it.
fn raise_own_fd_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    let want = (SLOW as u64 * 2 + 1024).min(hard);
    if want > soft {
        setrlimit(Resource::RLIMIT_NOFILE, want, hard).unwrap();
    }
    assert!(want >= SLOW as u64 + 512, "the hard open-file limit ({hard}) is too low for this test");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_half_sent_heads_cost_little_and_starve_nobody() {
    raise_own_fd_limit();
    let mock = mock(&["m"]).await;
    let dir = scratch_dir();
    let config = dir.join("switchyard.yaml");
    std::fs::write(
        &config,
        format!(
            "listen: 127.0.0.1:0\ntimeouts: {{header_read: 10s}}\nstorage: {{url: '{}', usage_journal_dir: '{}/usage'}}\nbackends:\n  - {{name: b0, url: '{}'}}\n",
            db_url(&dir),
            dir.display(),
            mock.url()
        ),
    )
    .unwrap();
    let mut child = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&config)
        .env_remove("SWITCHYARD_MASTER_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let base = line.trim().strip_prefix("listening on ").expect("the listening line").to_owned();
    let addr = base.strip_prefix("http://").unwrap().to_owned();

    // Warm the gateway's pools and lazily made state before the baseline.
    let client = TestClient::new();
    for _ in 0..50 {
        assert_eq!(chat(&client, &base).await, 200);
    }
    let baseline = rss_bytes(&child);

    let mut slow = Vec::with_capacity(SLOW);
    for _ in 0..SLOW {
        let mut s = TcpStream::connect(&addr).await.unwrap();
        s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: appl").await.unwrap();
        slow.push(s);
    }
    let open = connections_open(&base).await;
    assert!(open > SLOW as u64, "every slow connection is held open ({open})");
    let held = rss_bytes(&child);
    let per_connection = held.saturating_sub(baseline) / SLOW as u64;
    eprintln!("RSS {} KiB → {} KiB: {} bytes per half-open connection", baseline / 1024, held / 1024, per_connection);
    assert!(per_connection < BYTES_PER_CONNECTION, "{per_connection} bytes per connection");

    // Real traffic beside them: every request is served.
    let mut real = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let base = base.clone();
        real.spawn(async move {
            let client = TestClient::new();
            for _ in 0..50 {
                assert_eq!(chat(&client, &base).await, 200);
            }
        });
    }
    while let Some(done) = real.join_next().await {
        done.unwrap();
    }

    // timeouts.header_read closes every one of them.
    let closed = tokio::time::timeout(Duration::from_secs(30), async {
        for s in &mut slow {
            let mut buf = [0u8; 256];
            loop {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "the gateway closed every slow connection");
    drop(slow);
    let _ = child.kill();
    let _ = child.wait();
}

async fn chat(client: &TestClient, base: &str) -> u16 {
    let r = client.post_json(&format!("{base}/v1/chat/completions"), chat_body("m", false).as_bytes(), &[]).await;
    r.unwrap().status.as_u16()
}
