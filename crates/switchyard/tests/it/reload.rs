//! Configuration reload on the real binary, without a restart: `POST /admin/reload` and SIGHUP
//! swap in a complete new snapshot (backends added and removed) while a stream in flight
//! finishes on the old one; a bad file keeps the running configuration and says why.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::*;
use http_body_util::BodyExt;
use switchyard_testkit::{MockConfig, MockServer, TestClient};

const BIN: &str = env!("CARGO_BIN_EXE_switchyard");

struct Serving {
    child: Child,
    base: String,
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn config_text(dir: &std::path::Path, backends: &[(&str, &MockServer, i32)], routing: &str) -> String {
    let list: String = backends
        .iter()
        .map(|(name, m, priority)| format!("  - {{name: {name}, url: '{}', priority: {priority}}}\n", m.url()))
        .collect();
    format!(
        "listen: 127.0.0.1:0\nstorage: {{url: '{}', usage_journal_dir: '{}/usage'}}\nrouting: {{{routing}}}\nbackends:\n{list}",
        db_url(dir),
        dir.display()
    )
}

fn serve(config: &std::path::Path) -> Serving {
    let mut child = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(config)
        .env_remove("SWITCHYARD_MASTER_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let base = line.trim().strip_prefix("listening on ").expect("the listening line").to_owned();
    Serving { child, base }
}

async fn served_by(base: &str) -> String {
    let r = TestClient::new()
        .post_json(&format!("{base}/v1/chat/completions"), chat_body("m", false).as_bytes(), &[])
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    r.header("x-switchyard-backend").unwrap().to_owned()
}

async fn reload(base: &str) -> switchyard_testkit::TestResponse {
    TestClient::new().post_json(&format!("{base}/admin/reload"), b"", &[]).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_swaps_backends_while_a_stream_finishes_on_the_old_ones() {
    let chunk_delay = Duration::from_millis(20);
    let a = mock_with(&["m"], MockConfig { stream_chunks: 30, chunk_delay, ..MockConfig::default() }).await;
    let b = mock(&["m"]).await;
    let dir = scratch_dir();
    let file = dir.join("switchyard.yaml");
    std::fs::write(&file, config_text(&dir, &[("old", &a, 1)], "")).unwrap();
    let gw = serve(&file);
    assert_eq!(served_by(&gw.base).await, "old");

    // A stream in flight on the old backend...
    let body = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}"#;
    let resp = TestClient::new()
        .send(http::Method::POST, &format!("{}/v1/chat/completions", gw.base), body.into(), &[])
        .await
        .unwrap();
    let mut stream = resp.into_body();
    let first = stream.frame().await.unwrap().unwrap().into_data().unwrap();
    assert!(first.starts_with(b"data: "));

    // ...while the old backend is removed and a new one added.
    std::fs::write(&file, config_text(&dir, &[("new", &b, 1)], "")).unwrap();
    let r = reload(&gw.base).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["reloaded"], true);
    let served_before = a.control().request_count();
    for _ in 0..5 {
        assert_eq!(served_by(&gw.base).await, "new", "new requests go to the new snapshot");
    }
    assert_eq!(a.control().request_count(), served_before, "the removed backend takes nothing new");
    let rest = stream.collect().await.expect("the old stream is not cut").to_bytes();
    assert!(rest.ends_with(b"data: [DONE]\n\n"), "the stream in flight finished on the old snapshot");

    // A bad file: refused with the reason; the running configuration stays.
    std::fs::write(&file, "backends:\n  - {name: x, url: 'http://127.0.0.1:1', colour: blue}\n").unwrap();
    let r = reload(&gw.base).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("colour"), "the error names the problem: {}", r.text());
    assert_eq!(served_by(&gw.base).await, "new");
    // What cannot change while serving is refused, naming it.
    let moved = config_text(&dir, &[("new", &b, 1)], "").replace(&db_url(&dir), "sqlite::memory:");
    std::fs::write(&file, moved).unwrap();
    let r = reload(&gw.base).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("storage"), "{}", r.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_file() {
    let a = mock(&["m"]).await;
    let b = mock(&["m"]).await;
    let dir = scratch_dir();
    let file = dir.join("switchyard.yaml");
    std::fs::write(&file, config_text(&dir, &[("a", &a, 1)], "strategy: priority")).unwrap();
    let gw = serve(&file);
    assert_eq!(served_by(&gw.base).await, "a");
    std::fs::write(&file, config_text(&dir, &[("a", &a, 1), ("b", &b, 10)], "strategy: priority")).unwrap();
    assert!(Command::new("kill").args(["-HUP", &gw.child.id().to_string()]).status().unwrap().success());
    // The reload lands asynchronously: ask until the new, preferred backend answers.
    let switched = tokio::time::timeout(Duration::from_secs(10), async {
        while served_by(&gw.base).await != "b" {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(switched.is_ok(), "SIGHUP applied the new file");
}

/// `guardrails:` changes apply at a reload: a keyword guard blocks its word, then after the file
/// names another word and is reloaded, the old word passes and the new one is blocked; removing
/// the guardrails lets both through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_applies_new_guardrails() {
    let a = mock(&["m"]).await;
    let dir = scratch_dir();
    let file = dir.join("switchyard.yaml");
    let with_word = |word: &str| {
        format!(
            "{}guardrails:\n  default: [words]\n  words: {{type: keywords, keywords: [{word}], action: block, on: [request]}}\n",
            config_text(&dir, &[("a", &a, 1)], "strategy: priority")
        )
    };
    std::fs::write(&file, with_word("nightingale")).unwrap();
    let gw = serve(&file);
    let status = |word: &'static str| {
        let base = gw.base.clone();
        async move {
            let body =
                serde_json::json!({"model": "m", "messages": [{"role": "user", "content": format!("about {word}")}]});
            let url = format!("{base}/v1/chat/completions");
            let r = TestClient::new().post_json(&url, body.to_string().as_bytes(), &[]).await.unwrap();
            (r.status.as_u16(), r.text())
        }
    };
    assert_eq!(status("nightingale").await.0, 400);
    assert_eq!(status("falcon").await.0, 200);
    std::fs::write(&file, with_word("falcon")).unwrap();
    assert_eq!(reload(&gw.base).await.status, 200);
    assert_eq!(status("nightingale").await.0, 200);
    let (code, text) = status("falcon").await;
    assert!(code == 400 && text.contains("content_blocked"), "{code} {text}");
    std::fs::write(&file, config_text(&dir, &[("a", &a, 1)], "strategy: priority")).unwrap();
    assert_eq!(reload(&gw.base).await.status, 200);
    assert_eq!(status("falcon").await.0, 200);
}

/// Policies reload as one snapshot (issue 58): a stream in flight, decided under the old rules,
/// finishes under them, and a request held at its backend across the reload is answered as the
/// old rules decided; every request after the reload is decided by the new rules; a file whose
/// rule does not check is refused, naming the rule, and the running rules stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_swaps_policies_while_a_request_in_flight_keeps_its_own() {
    let chunk_delay = Duration::from_millis(20);
    let a = mock_with(&["m"], MockConfig { stream_chunks: 30, chunk_delay, ..MockConfig::default() }).await;
    // A backend that holds each answer: a request decided before the reload is answered after it.
    let latency = Duration::from_millis(1500);
    let slow = mock_with(&["slow"], MockConfig { latency, ..MockConfig::default() }).await;
    let dir = scratch_dir();
    let file = dir.join("switchyard.yaml");
    let with = |rules: &str| format!("{}policies:\n{rules}", config_text(&dir, &[("a", &a, 1), ("s", &slow, 1)], ""));
    let v1 = "  - {name: v1-tags, when: \"request.model == 'm'\", then: set, set: {tags: [v1]}}\n  - {name: v1-allow, when: \"true\", then: allow}\n";
    std::fs::write(&file, with(v1)).unwrap();
    let gw = serve(&file);
    let body = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}"#;
    let resp = TestClient::new()
        .send(http::Method::POST, &format!("{}/v1/chat/completions", gw.base), body.into(), &[])
        .await
        .unwrap();
    assert_eq!(resp.headers().get("x-switchyard-policy").unwrap(), "v1-allow");
    let mut stream = resp.into_body();
    stream.frame().await.unwrap().unwrap();
    let held = tokio::spawn({
        let url = format!("{}/v1/chat/completions", gw.base);
        async move { TestClient::new().post_json(&url, chat_body("slow", false).as_bytes(), &[]).await.unwrap() }
    });
    while slow.control().in_flight.load(std::sync::atomic::Ordering::Relaxed) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    let v2 = "  - {name: v2-deny, when: \"request.model in ['m', 'slow']\", then: deny, message: closed}\n";
    std::fs::write(&file, with(v2)).unwrap();
    assert_eq!(reload(&gw.base).await.status, 200);
    let client = TestClient::new();
    let url = format!("{}/v1/chat/completions", gw.base);
    for _ in 0..5 {
        let r = client.post_json(&url, chat_body("m", false).as_bytes(), &[]).await.unwrap();
        assert_eq!((r.status.as_u16(), r.header("x-switchyard-policy")), (403, Some("v2-deny")), "{}", r.text());
    }
    let rest = stream.collect().await.expect("the request in flight is not cut").to_bytes();
    assert!(rest.ends_with(b"data: [DONE]\n\n"), "it finished under the rules it was decided by");
    // The held request was at its backend during the reload: answered, named by the old rule.
    let held = held.await.unwrap();
    assert_eq!((held.status.as_u16(), held.header("x-switchyard-policy")), (200, Some("v1-allow")), "{}", held.text());

    // A rule that does not check: refused with its name and where; the running rules stay.
    std::fs::write(&file, with("  - {name: broken, when: \"request.modle == 'm'\", then: deny}\n")).unwrap();
    let r = reload(&gw.base).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("policies.broken.when") && r.text().contains("request.modle"), "{}", r.text());
    let r = client.post_json(&url, chat_body("m", false).as_bytes(), &[]).await.unwrap();
    assert_eq!(r.header("x-switchyard-policy"), Some("v2-deny"));
}
