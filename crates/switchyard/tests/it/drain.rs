//! Graceful drain, on the real binary: SIGTERM with 100 streams live stops new connections at
//! once, lets every stream finish whole, and exits cleanly.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::*;
use http_body_util::BodyExt;
use switchyard_testkit::{MockConfig, TestClient};

const BIN: &str = env!("CARGO_BIN_EXE_switchyard");
const STREAMS: usize = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_live_streams_finishes_every_one() {
    let chunk_delay = Duration::from_millis(20);
    let mock = mock_with(&["m"], MockConfig { stream_chunks: 40, chunk_delay, ..MockConfig::default() }).await;
    let dir = scratch_dir();
    let config = dir.join("switchyard.yaml");
    std::fs::write(
        &config,
        format!(
            "listen: 127.0.0.1:0\nstorage: {{url: '{}', usage_journal_dir: '{}/usage'}}\nbackends:\n  - {{name: b0, url: '{}'}}\n",
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
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let base = line.trim().strip_prefix("listening on ").expect("the listening line").to_owned();

    // 100 streams, each past its first chunk before the signal.
    let (started_tx, mut started_rx) = tokio::sync::mpsc::channel::<()>(STREAMS);
    let mut streams = tokio::task::JoinSet::new();
    for _ in 0..STREAMS {
        let (url, started) = (format!("{base}/v1/chat/completions"), started_tx.clone());
        streams.spawn(async move {
            let body = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}"#;
            let resp = TestClient::new().send(http::Method::POST, &url, body.into(), &[]).await.unwrap();
            assert_eq!(resp.status(), 200);
            let mut body = resp.into_body();
            let mut text = Vec::new();
            let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
            text.extend_from_slice(&first);
            started.send(()).await.unwrap();
            while let Some(frame) = body.frame().await {
                text.extend_from_slice(&frame.expect("the stream is not cut").into_data().unwrap_or_default());
            }
            String::from_utf8(text).unwrap()
        });
    }
    for _ in 0..STREAMS {
        tokio::time::timeout(Duration::from_secs(20), started_rx.recv()).await.expect("every stream started");
    }
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    // New connections are refused while the live ones drain.
    let refused = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let r = TestClient::new().get(&format!("{base}/health")).await;
            if r.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(refused.is_ok(), "the listener closed on SIGTERM");
    let mut whole = 0;
    while let Some(text) = streams.join_next().await {
        let text = text.unwrap();
        assert!(text.ends_with("data: [DONE]\n\n"), "a stream was cut: {}", &text[text.len().saturating_sub(200)..]);
        assert!(!text.contains("\"error\""), "{text}");
        whole += 1;
    }
    assert_eq!(whole, STREAMS);
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap()).await.unwrap();
    assert!(status.success(), "a clean exit after the drain: {status:?}");
}
