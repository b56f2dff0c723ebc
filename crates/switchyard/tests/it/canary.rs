//! No secret leaks: a canary placed in every header, the query and every body field a client
//! controls (except `model`, which the gateway rightly records and names in errors) must appear
//! in no log line (debug level), no error body and no byte of the database or usage journal.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use crate::common::*;
use switchyard_testkit::TestClient;

const BIN: &str = env!("CARGO_BIN_EXE_switchyard");
const CANARY: &str = "sk-canary-5f0c2a9e71d4";
const MASTER: &str = "sk-master-canary-test";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_secret_reaches_no_log_error_body_or_database_row() {
    let mock = mock(&["m"]).await;
    let dir = scratch_dir();
    let config = dir.join("switchyard.yaml");
    std::fs::write(
        &config,
        format!(
            "listen: 127.0.0.1:0\nstorage: {{url: '{}', usage_journal_dir: '{}/usage'}}\nauth: {{master_key: {MASTER}}}\nbackends:\n  - {{name: b0, url: '{}'}}\n",
            db_url(&dir),
            dir.display(),
            mock.url()
        ),
    )
    .unwrap();
    let log = dir.join("gateway.log");
    let mut child = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&config)
        .env("SWITCHYARD_LOG", "debug")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let base = line.trim().strip_prefix("listening on ").unwrap().to_owned();
    let client = TestClient::new();
    let auth = format!("Bearer {MASTER}");
    let canary_headers = [
        ("x-api-key", CANARY),
        ("cookie", CANARY),
        ("x-custom-secret", CANARY),
        ("openai-organization", CANARY),
        ("x-session-id", CANARY),
    ];
    let body = format!(
        r#"{{"model":"m","user":"{CANARY}","metadata":{{"k":"{CANARY}"}},"messages":[{{"role":"system","content":"{CANARY}"}},{{"role":"user","content":"{CANARY}"}}],"tools":[{{"type":"function","function":{{"name":"t","description":"{CANARY}","parameters":{{"type":"object"}}}}}}],"prompt_cache_key":"{CANARY}","stream":false}}"#
    );
    let mut error_bodies = Vec::new();
    // The canary as the key itself: refused, and not echoed.
    let mut headers: Vec<(&str, &str)> = canary_headers.to_vec();
    let bad_auth = format!("Bearer {CANARY}");
    headers.push(("authorization", &bad_auth));
    let r =
        client.post_json(&format!("{base}/v1/chat/completions?k={CANARY}"), body.as_bytes(), &headers).await.unwrap();
    assert_eq!(r.status, 401);
    error_bodies.push(r.text());
    // A valid key with the canary everywhere else: served, plain and streamed, through several APIs.
    let mut headers: Vec<(&str, &str)> = canary_headers.to_vec();
    headers.push(("authorization", &auth));
    for path in ["/v1/chat/completions", "/v1/messages", "/v1/responses"] {
        let body = if path == "/v1/messages" {
            format!(
                r#"{{"model":"m","max_tokens":5,"system":"{CANARY}","metadata":{{"user_id":"{CANARY}"}},"messages":[{{"role":"user","content":"{CANARY}"}}]}}"#
            )
        } else if path == "/v1/responses" {
            format!(r#"{{"model":"m","instructions":"{CANARY}","input":"{CANARY}","user":"{CANARY}"}}"#)
        } else {
            body.clone()
        };
        let r = client.post_json(&format!("{base}{path}?k={CANARY}"), body.as_bytes(), &headers).await.unwrap();
        assert_eq!(r.status, 200, "{path}: {}", r.text());
    }
    // Errors on a request full of the canary: malformed fields, a revoked-style bad key format.
    let malformed =
        format!(r#"{{"model":"m","stream":"{CANARY}","messages":[{{"role":"user","content":"{CANARY}"}}]}}"#);
    let r = client.post_json(&format!("{base}/v1/chat/completions"), malformed.as_bytes(), &headers).await.unwrap();
    assert_eq!(r.status, 400);
    error_bodies.push(r.text());
    let broken = format!(r#"{{"model":"m","messages":[{{"role":"{CANARY}","content":"x"}}]"#);
    let r = client.post_json(&format!("{base}/v1/chat/completions"), broken.as_bytes(), &headers).await.unwrap();
    assert_eq!(r.status, 400);
    error_bodies.push(r.text());
    let r = client
        .post_json(&format!("{base}/admin/keys"), format!(r#"{{"name":{CANARY}}}"#).as_bytes(), &headers)
        .await
        .unwrap();
    assert_eq!(r.status, 400);
    error_bodies.push(r.text());

    // Stop the gateway (journal flushed to the database), then look everywhere.
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap()).await.unwrap();
    assert!(status.success());
    for body in &error_bodies {
        assert!(!body.contains(CANARY), "an error body has the canary: {body}");
    }
    let logs = std::fs::read_to_string(&log).unwrap();
    assert!(logs.contains("DEBUG") || logs.contains("INFO"), "the log was written");
    assert!(
        !logs.contains(CANARY),
        "a log line has the canary:\n{}",
        logs.lines().filter(|l| l.contains(CANARY)).collect::<Vec<_>>().join("\n")
    );
    let mut files = vec![];
    let mut stack = vec![dir.clone()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path != log && path != config {
                files.push(path);
            }
        }
    }
    assert!(files.iter().any(|f| f.to_string_lossy().contains("db")), "the database is among the files: {files:?}");
    for file in files {
        let bytes = std::fs::read(&file).unwrap();
        assert!(!bytes.windows(CANARY.len()).any(|w| w == CANARY.as_bytes()), "{} holds the canary", file.display());
    }
}
