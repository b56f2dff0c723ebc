//! Shared harness for the black-box tests: mock backends and the real gateway on ephemeral ports.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::time::Duration;

use switchyard::{Config, RunningGateway};
use switchyard_testkit::{MockConfig, MockServer, TestClient, TestResponse};

pub const CHAT: &str = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;

pub async fn mock(models: &[&str]) -> MockServer {
    mock_with(models, MockConfig::default()).await
}

pub async fn mock_with(models: &[&str], cfg: MockConfig) -> MockServer {
    let cfg = MockConfig { models: models.iter().map(|m| m.to_string()).collect(), ..cfg };
    MockServer::start("127.0.0.1:0".parse().unwrap(), cfg).await.unwrap()
}

/// `backends:` entries named b0, b1, ... for the given mocks.
pub fn backends_yaml(mocks: &[&MockServer]) -> String {
    mocks.iter().enumerate().map(|(i, m)| format!("  - {{name: b{i}, url: '{}'}}\n", m.url())).collect()
}

/// Start the gateway on an ephemeral port with `extra` YAML (top-level keys) and the mocks as backends.
pub async fn gateway(mocks: &[&MockServer], extra: &str) -> RunningGateway {
    let yaml = format!("listen: 127.0.0.1:0\n{extra}\nbackends:\n{}", backends_yaml(mocks));
    gateway_yaml(&yaml).await
}

/// A fresh directory for one gateway's database and usage journal.
pub fn scratch_dir() -> std::path::PathBuf {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("switchyard-test-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `storage:` pointing into a fresh scratch directory.
pub fn storage_yaml() -> String {
    let dir = scratch_dir();
    format!(
        "storage: {{url: 'sqlite://{}/switchyard.db', usage_journal_dir: '{}/usage'}}\n",
        dir.display(),
        dir.display()
    )
}

pub async fn gateway_yaml(yaml: &str) -> RunningGateway {
    let yaml = if yaml.contains("storage:") { yaml.to_owned() } else { format!("{}{yaml}", storage_yaml()) };
    let config = Config::from_yaml(&yaml, &HashMap::<String, String>::new()).unwrap();
    switchyard::start(config, std::future::pending()).await.unwrap()
}

pub fn chat_body(model: &str, stream: bool) -> String {
    format!(r#"{{"model":"{model}","stream":{stream},"messages":[{{"role":"user","content":"hello there"}}]}}"#)
}

pub async fn chat(client: &TestClient, gw: &RunningGateway, model: &str) -> TestResponse {
    client
        .post_json(&format!("{}/v1/chat/completions", gw.url()), chat_body(model, false).as_bytes(), &[])
        .await
        .unwrap()
}

pub fn backend_of(r: &TestResponse) -> String {
    r.header("x-switchyard-backend").unwrap_or("-").to_owned()
}

/// Count responses per backend over `n` sequential chat requests; all must succeed.
pub async fn distribution(gw: &RunningGateway, model: &str, n: usize) -> HashMap<String, usize> {
    let client = TestClient::new();
    let mut counts = HashMap::new();
    for _ in 0..n {
        let r = chat(&client, gw, model).await;
        assert_eq!(r.status, 200, "{}", r.text());
        *counts.entry(backend_of(&r)).or_insert(0) += 1;
    }
    counts
}

/// (id, status, prompt, completion, total, estimated) rows, once the writer has caught up to `n` rows.
pub async fn records(db: &std::path::Path, n: usize) -> Vec<(String, i64, i64, i64, i64, bool)> {
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", db.display())).await.unwrap();
    for _ in 0..2000 {
        let rows: Vec<(String, i64, i64, i64, i64, bool)> = sqlx::query_as(
            "SELECT id, status, prompt_tokens, completion_tokens, total_tokens, estimated FROM usage_records ORDER BY ts_ms",
        )
        .fetch_all(&pool)
        .await
        .unwrap_or_default();
        if rows.len() >= n {
            return rows;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("usage records never reached {n}");
}

pub async fn metered_gateway(
    mocks: &[&switchyard_testkit::MockServer],
) -> (switchyard::RunningGateway, std::path::PathBuf) {
    let dir = scratch_dir();
    let yaml = format!(
        "listen: 127.0.0.1:0\nstorage: {{url: 'sqlite://{0}/db.sqlite', usage_journal_dir: '{0}/usage'}}\nprices: {{m: {{input_per_million: 1.0, output_per_million: 2.0}}}}\nbackends:\n{1}",
        dir.display(),
        backends_yaml(mocks)
    );
    (gateway_yaml(&yaml).await, dir.join("db.sqlite"))
}
