//! Crash safety, on the real binary: the gateway is SIGKILLed ten times under load, restarted on
//! the same database and usage journal each time, against a backend that keeps its own ledger of
//! what it was asked. Afterwards every request a client saw complete has exactly one usage record,
//! no record names a request the backend never saw, and the hourly rollup counts each record once.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use http_body_util::BodyExt;
use switchyard_testkit::{MockConfig, TestClient};

const KILLS: usize = 10;
const WORKERS: usize = 8;

fn start(config: &Path) -> (Child, String) {
    spawn_gateway(config)
}

/// One request, streamed or not; `true` when the client received the whole answer.
async fn one(client: &TestClient, base: &str, id: &str, stream: bool) -> bool {
    let body = chat_body("m", stream);
    let sent = client
        .send(http::Method::POST, &format!("{base}/v1/chat/completions"), body.into(), &[("x-request-id", id)])
        .await;
    let Ok(resp) = sent else { return false };
    if resp.status() != 200 {
        return false;
    }
    let Ok(body) = resp.into_body().collect().await else { return false };
    let body = body.to_bytes();
    if stream {
        body.ends_with(b"data: [DONE]\n\n")
    } else {
        serde_json::from_slice::<serde_json::Value>(&body).is_ok_and(|v| v["choices"][0]["message"].is_object())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_under_load_loses_and_doubles_no_usage_record() {
    let mock = mock_with(
        &["m"],
        MockConfig { stream_chunks: 8, chunk_delay: Duration::from_millis(3), ..MockConfig::default() },
    )
    .await;
    mock.control().keep_ledger();
    let dir = scratch_dir();
    let db = db_url(&dir);
    let config = dir.join("switchyard.yaml");
    std::fs::write(
        &config,
        format!(
            "listen: 127.0.0.1:0\nauth: {{secret: {TEST_SECRET}}}\nstorage: {{url: '{db}', usage_journal_dir: '{}/usage'}}\nbackends:\n  - {{name: b0, url: '{}'}}\n",
            dir.display(),
            mock.url()
        ),
    )
    .unwrap();

    let completed: Arc<Mutex<HashSet<String>>> = Arc::default();
    let mut sent = 0usize;
    for round in 0..KILLS {
        let (mut child, base) = start(&config);
        let mut workers = tokio::task::JoinSet::new();
        for w in 0..WORKERS {
            let (base, completed) = (base.clone(), completed.clone());
            workers.spawn(async move {
                let client = TestClient::new();
                let mut n = 0usize;
                loop {
                    let id = format!("crash-{round}-{w}-{n}");
                    if one(&client, &base, &id, n.is_multiple_of(2)).await {
                        completed.lock().unwrap().insert(id);
                    } else if n > 0 {
                        // The gateway is gone (or going): this worker's round is over.
                        return n + 1;
                    }
                    n += 1;
                }
            });
        }
        // Kill at a different moment of the load each round.
        tokio::time::sleep(Duration::from_millis(150 + 37 * round as u64)).await;
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        while let Some(n) = workers.join_next().await {
            sent += n.unwrap();
        }
    }
    // A last start replays what the killed ones journaled; SIGTERM drains the writer to the end.
    let (mut child, base) = start(&config);
    assert_eq!(TestClient::new().get(&format!("{base}/health")).await.unwrap().status, 200);
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    assert!(child.wait().unwrap().success());

    let completed = completed.lock().unwrap().clone();
    assert!(completed.len() > KILLS * WORKERS, "load ran in every round ({} of {sent} completed)", completed.len());
    let ids: Vec<String> = if db.starts_with("sqlite:") {
        let pool = sqlx::SqlitePool::connect(&db).await.unwrap();
        sqlx::query_scalar("SELECT id FROM usage_records").fetch_all(&pool).await.unwrap()
    } else {
        let pool = sqlx::PgPool::connect(&db).await.unwrap();
        sqlx::query_scalar("SELECT id FROM usage_records").fetch_all(&pool).await.unwrap()
    };
    let rollup: i64 = if db.starts_with("sqlite:") {
        let pool = sqlx::SqlitePool::connect(&db).await.unwrap();
        sqlx::query_scalar("SELECT COALESCE(SUM(requests), 0) FROM usage_hourly WHERE key_id = '*'")
            .fetch_one(&pool)
            .await
            .unwrap()
    } else {
        let pool = sqlx::PgPool::connect(&db).await.unwrap();
        sqlx::query_scalar("SELECT COALESCE(SUM(requests), 0)::BIGINT FROM usage_hourly WHERE key_id = '*'")
            .fetch_one(&pool)
            .await
            .unwrap()
    };
    let mut per_id: HashMap<&str, usize> = HashMap::new();
    for id in &ids {
        *per_id.entry(id.as_str()).or_default() += 1;
    }
    let doubled: Vec<_> = per_id.iter().filter(|(_, n)| **n > 1).collect();
    assert!(doubled.is_empty(), "records counted twice: {doubled:?}");
    let lost: Vec<_> = completed.iter().filter(|id| !per_id.contains_key(id.as_str())).collect();
    assert!(
        lost.is_empty(),
        "{} completed requests have no usage record: {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    let ledger: HashSet<String> = mock.control().ledger().into_iter().collect();
    let unseen: Vec<_> = ids.iter().filter(|id| id.starts_with("crash-") && !ledger.contains(*id)).collect();
    assert!(unseen.is_empty(), "records for requests the backend never saw: {unseen:?}");
    assert_eq!(rollup, ids.len() as i64, "the hourly rollup counts each record once");
    eprintln!(
        "{KILLS} kills: {sent} requests sent, {} completed, {} records, {} in the backend's ledger",
        completed.len(),
        ids.len(),
        ledger.len()
    );
}
