//! Usage accounting end to end: one record per request, exact token counts from the backend
//! (streams included, with the usage chunk the gateway asked for hidden from the client), and
//! no record lost or duplicated when the gateway is SIGKILLed under load.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use switchyard_testkit::{MockConfig, TestClient};

#[tokio::test]
async fn plain_requests_record_the_backends_usage() {
    let a = mock(&["m"]).await;
    let (gw, db) = metered_gateway(&[&a]).await;
    let client = TestClient::new();
    let mut expected = Vec::new();
    for _ in 0..3 {
        let r = chat(&client, &gw, "m").await;
        assert_eq!(r.status, 200);
        let u = &r.json()["usage"];
        expected.push((
            r.header("x-request-id").unwrap().to_owned(),
            u["prompt_tokens"].as_i64().unwrap(),
            u["completion_tokens"].as_i64().unwrap(),
        ));
    }
    assert_eq!(chat(&client, &gw, "unknown").await.status, 404);
    let rows = records(&db, 4).await;
    for (id, prompt, completion) in &expected {
        let row = rows.iter().find(|r| &r.0 == id).expect("a record per request");
        assert_eq!((row.1, row.2, row.3, row.4, row.5), (200, *prompt, *completion, prompt + completion, false));
    }
    assert!(rows.iter().any(|r| r.1 == 404), "failed requests are recorded too");
    // The admin report agrees, and prices turn tokens into cost.
    let report = client.get(&format!("{}/admin/usage?model=m", gw.url())).await.unwrap().json();
    let prompt: i64 = expected.iter().map(|e| e.1).sum();
    let completion: i64 = expected.iter().map(|e| e.2).sum();
    assert_eq!(report["totals"]["requests"], 3);
    assert_eq!(report["totals"]["prompt_tokens"], prompt);
    let cost = report["totals"]["cost_usd"].as_f64().unwrap();
    assert!((cost - (prompt as f64 * 1.0 + completion as f64 * 2.0) / 1e6).abs() < 1e-12, "{cost}");
    let metrics = client.get(&format!("{}/metrics", gw.url())).await.unwrap().text();
    assert!(metrics.contains("switchyard_usage_records_total{state=\"queued\"} 4"), "{metrics}");
}

#[tokio::test]
async fn with_record_usage_off_nothing_is_journaled() {
    let a = mock(&["m"]).await;
    let dir = scratch_dir();
    let yaml = format!(
        "listen: 127.0.0.1:0\nstorage: {{url: 'sqlite://{0}/switchyard.db', usage_journal_dir: '{0}/usage', record_usage: false}}\nbackends:\n{1}",
        dir.display(),
        backends_yaml(&[&a])
    );
    let gw = gateway_yaml(&yaml).await;
    let client = TestClient::new();
    for _ in 0..3 {
        assert_eq!(chat(&client, &gw, "m").await.status, 200);
    }
    assert!(!dir.join("usage").exists(), "no journal is opened");
    let metrics = client.get(&format!("{}/metrics", gw.url())).await.unwrap().text();
    assert!(!metrics.contains("switchyard_usage_records_total"), "{metrics}");
    let report = client.get(&format!("{}/admin/usage", gw.url())).await.unwrap().json();
    assert_eq!(report["totals"]["requests"], 0);
}

fn events(frames: &[bytes::Bytes]) -> Vec<serde_json::Value> {
    let text = String::from_utf8(frames.concat()).unwrap();
    text.split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

#[tokio::test]
async fn streams_record_exact_usage_and_hide_the_chunk_the_client_did_not_ask_for() {
    let a = mock_with(&["m"], MockConfig { stream_chunks: 7, ..MockConfig::default() }).await;
    let (gw, db) = metered_gateway(&[&a]).await;
    let client = TestClient::new();
    let url = format!("{}/v1/chat/completions", gw.url());

    // Not asked: the gateway asks upstream, records it, and strips it.
    let (status, headers, frames) = client.post_stream(&url, chat_body("m", true).as_bytes(), &[]).await.unwrap();
    assert_eq!(status, 200);
    assert!(frames.concat().ends_with(b"data: [DONE]\n\n"));
    let evs = events(&frames);
    assert!(evs.iter().all(|e| e.get("usage").is_none_or(|u| u.is_null())), "no usage chunk reached the client");
    assert_eq!(evs.iter().filter(|e| e["choices"][0]["delta"]["content"].is_string()).count(), 7);
    let silent_id = headers["x-request-id"].to_str().unwrap().to_owned();

    // Asked: the client gets it, and the record matches it exactly.
    let body = r#"{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}"#;
    let (_, headers, frames) = client.post_stream(&url, body.as_bytes(), &[]).await.unwrap();
    let usage = events(&frames).into_iter().find_map(|e| e.get("usage").filter(|u| !u.is_null()).cloned()).unwrap();
    let asked_id = headers["x-request-id"].to_str().unwrap().to_owned();

    let rows = records(&db, 2).await;
    let silent = rows.iter().find(|r| r.0 == silent_id).unwrap();
    assert_eq!((silent.1, silent.3, silent.5), (200, 7, false), "real usage, not an estimate");
    assert!(silent.2 > 0 && silent.4 == silent.2 + silent.3);
    let asked = rows.iter().find(|r| r.0 == asked_id).unwrap();
    assert_eq!(
        (asked.2, asked.3, asked.4, asked.5),
        (
            usage["prompt_tokens"].as_i64().unwrap(),
            usage["completion_tokens"].as_i64().unwrap(),
            usage["total_tokens"].as_i64().unwrap(),
            false
        )
    );
}

/// SIGKILL the real gateway under load, start it again on the same storage: every request whose
/// response completed has exactly one record.
#[test]
fn a_killed_gateway_loses_and_duplicates_no_record() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let a = rt.block_on(mock(&["m"]));
    let dir = scratch_dir();
    let db = db_url(&dir);
    let config = dir.join("gw.yaml");
    std::fs::write(
        &config,
        format!(
            "listen: 127.0.0.1:0\nstorage: {{url: '{db}', usage_journal_dir: '{0}/usage'}}\nbackends:\n  - {{name: a, url: '{1}'}}\n",
            dir.display(),
            a.url()
        ),
    )
    .unwrap();
    let start = || {
        let mut child = Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .args(["serve", "--config"])
            .arg(&config)
            .envs(test_env(&db))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        (child, line.trim().strip_prefix("listening on ").unwrap().to_owned())
    };
    let (mut child, url) = start();
    let completed = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    rt.block_on(async {
        let client = TestClient::new();
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..8 {
            let (client, url, completed, stop) = (client.clone(), url.clone(), completed.clone(), stop.clone());
            workers.spawn(async move {
                while !stop.load(Relaxed) {
                    let r = client
                        .post_json(&format!("{url}/v1/chat/completions"), chat_body("m", false).as_bytes(), &[])
                        .await;
                    match r {
                        Ok(r) if r.status == 200 && r.json()["usage"].is_object() => {
                            completed.lock().unwrap().push(r.header("x-request-id").unwrap().to_owned());
                        }
                        _ => break, // the gateway is gone
                    }
                }
            });
        }
        while completed.lock().unwrap().len() < 300 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        stop.store(true, Relaxed);
        while workers.join_next().await.is_some() {}
    });
    let completed = completed.lock().unwrap().clone();
    assert!(completed.len() >= 300);
    // Restart: the journal is replayed into the database.
    let (mut child, _) = start();
    let rows = rt.block_on(records(&db, completed.len()));
    let mut counts = std::collections::HashMap::new();
    for r in &rows {
        *counts.entry(r.0.clone()).or_insert(0) += 1;
    }
    for id in &completed {
        assert_eq!(counts.get(id), Some(&1), "record {id} stored exactly once");
    }
    assert!(counts.values().all(|&n| n == 1), "no duplicates at all");
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let _ = child.wait();
}

#[tokio::test]
async fn a_database_server_down_at_start_up_does_not_stop_the_gateway() {
    let a = mock(&["m"]).await;
    // Nothing listens on port 9 (discard) on loopback: the connection is refused at once.
    let dir = scratch_dir();
    let yaml = format!(
        "listen: 127.0.0.1:0\nauth: {{secret: '{}'}}\nstorage: {{url: 'postgres://u:p@127.0.0.1:9/db', usage_journal_dir: '{}/usage'}}\nbackends:\n{}",
        "s".repeat(32),
        dir.display(),
        backends_yaml(&[&a])
    );
    let gw = gateway_yaml(&yaml).await;
    let client = TestClient::new();
    for _ in 0..3 {
        assert_eq!(chat(&client, &gw, "m").await.status, 200);
    }
    // The records wait in the journal for the database.
    let metrics = client.get(&format!("{}/metrics", gw.url())).await.unwrap().text();
    assert!(metrics.contains("switchyard_usage_records_total{state=\"queued\"} 3\n"), "{metrics}");
    assert!(metrics.contains("switchyard_usage_records_total{state=\"written\"} 0\n"), "{metrics}");
    let journal = std::fs::read_dir(dir.join("usage")).unwrap().count();
    assert!(journal > 0);
}

/// No `prices:`: a hosted model's name finds the shipped price, and the tokens its backend read
/// from its prompt cache are billed at the cached-input price.
#[tokio::test]
async fn hosted_models_are_priced_from_the_shipped_table_with_cached_tokens_at_their_price() {
    let kv = switchyard_testkit::KvCacheConfig { prefill_us_per_token: 0, ..Default::default() };
    let a = mock_with(&["gpt-4o-mini"], MockConfig { kv_cache: Some(kv), ..MockConfig::default() }).await;
    let dir = scratch_dir();
    let db = db_url(&dir);
    let yaml = format!(
        "listen: 127.0.0.1:0\nstorage: {{url: '{db}', usage_journal_dir: '{0}/usage'}}\nbackends:\n{1}",
        dir.display(),
        backends_yaml(&[&a])
    );
    let gw = gateway_yaml(&yaml).await;
    let client = TestClient::new();
    let prompt = "The same long system prompt, read from the cache the second time. ".repeat(30);
    let body = serde_json::json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": prompt}]});
    let mut expected = 0.0;
    let mut cached_seen = 0;
    for _ in 0..2 {
        let r = client.post_json(&format!("{}/v1/chat/completions", gw.url()), body.to_string().as_bytes(), &[]).await;
        let u = r.unwrap().json()["usage"].clone();
        let (p, c) = (u["prompt_tokens"].as_f64().unwrap(), u["completion_tokens"].as_f64().unwrap());
        let cached = u["prompt_tokens_details"]["cached_tokens"].as_f64().unwrap_or(0.0);
        cached_seen += cached as u64;
        // gpt-4o-mini: $0.15 input, $0.075 cached input, $0.60 output per million.
        expected += ((p - cached) * 0.15 + cached * 0.075 + c * 0.60) / 1e6;
    }
    assert!(cached_seen > 0, "the second request read its prompt from the cache");
    records(&db, 2).await;
    let report = client.get(&format!("{}/admin/usage?model=gpt-4o-mini", gw.url())).await.unwrap().json();
    let cost = report["totals"]["cost_usd"].as_f64().unwrap();
    assert!((cost - expected).abs() < 1e-12, "{cost} != {expected}");
}
