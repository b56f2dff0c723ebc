//! Shared harness for the black-box tests: mock backends and the real gateway on ephemeral ports.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod cut;
pub mod json_service;
pub mod moto;
pub mod redis;

use std::collections::HashMap;
use std::time::Duration;

use switchyard_gateway::{Config, RunningGateway};
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

/// The server secret every gateway on PostgreSQL needs (instances must hash keys alike).
pub const TEST_SECRET: &str = "test-secret-0123456789abcdef0123456789";

/// Environment for a gateway config: the server secret when it stores on PostgreSQL.
pub fn test_env(yaml: &str) -> HashMap<String, String> {
    let mut env = HashMap::new();
    if yaml.contains("postgres://") {
        env.insert("SWITCHYARD_SECRET".to_owned(), TEST_SECRET.to_owned());
    }
    env
}

/// PostgreSQL to run the suites on instead of SQLite: `SWITCHYARD_TEST_STORAGE=postgres` with
/// `SWITCHYARD_TEST_POSTGRES_URL` (scripts/test runs the key, usage and translation suites both ways).
pub fn postgres_for_suites() -> Option<String> {
    if std::env::var("SWITCHYARD_TEST_STORAGE").ok()? != "postgres" {
        return None;
    }
    Some(
        std::env::var("SWITCHYARD_TEST_POSTGRES_URL")
            .expect("SWITCHYARD_TEST_STORAGE=postgres needs SWITCHYARD_TEST_POSTGRES_URL"),
    )
}

/// The database URL for a gateway whose files live in `dir`: a SQLite file there, or a fresh
/// PostgreSQL schema of its own (so suites running at once never see each other's rows).
pub fn db_url(dir: &std::path::Path) -> String {
    let Some(base) = postgres_for_suites() else { return format!("sqlite://{}/db.sqlite", dir.display()) };
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let schema = format!("t{}_{}", std::process::id(), N.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let (admin, name) = (base.clone(), schema.clone());
    // On a thread of its own: callers may or may not be inside a runtime already.
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let pool = sqlx::PgPool::connect(&admin).await.unwrap();
            sqlx::query(&format!("CREATE SCHEMA {name}")).execute(&pool).await.unwrap();
            pool.close().await;
        })
    })
    .join()
    .unwrap();
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}options=-c%20search_path%3D{schema}")
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
    let config = Config::from_yaml(&yaml, &test_env(&yaml)).unwrap();
    switchyard_gateway::start(config, std::future::pending()).await.unwrap()
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
pub async fn records(db: &str, n: usize) -> Vec<(String, i64, i64, i64, i64, bool)> {
    const SQL: &str =
        "SELECT id, status, prompt_tokens, completion_tokens, total_tokens, estimated FROM usage_records ORDER BY ts_ms";
    let sqlite = if db.starts_with("sqlite:") { Some(sqlx::SqlitePool::connect(db).await.unwrap()) } else { None };
    let postgres = if sqlite.is_none() { Some(sqlx::PgPool::connect(db).await.unwrap()) } else { None };
    for _ in 0..2000 {
        let rows: Vec<(String, i64, i64, i64, i64, bool)> = match (&sqlite, &postgres) {
            (Some(pool), _) => sqlx::query_as(SQL).fetch_all(pool).await.unwrap_or_default(),
            (_, Some(pool)) => sqlx::query_as::<_, (String, i32, i64, i64, i64, bool)>(SQL)
                .fetch_all(pool)
                .await
                .unwrap_or_default()
                .into_iter()
                .map(|(id, status, p, c, t, e)| (id, i64::from(status), p, c, t, e))
                .collect(),
            _ => unreachable!(),
        };
        if rows.len() >= n {
            return rows;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("usage records never reached {n}");
}

pub async fn metered_gateway(
    mocks: &[&switchyard_testkit::MockServer],
) -> (switchyard_gateway::RunningGateway, String) {
    let dir = scratch_dir();
    let db = db_url(&dir);
    let yaml = format!(
        "listen: 127.0.0.1:0\nstorage: {{url: '{db}', usage_journal_dir: '{0}/usage'}}\nprices: {{m: {{input_per_million: 1.0, output_per_million: 2.0}}}}\nbackends:\n{1}",
        dir.display(),
        backends_yaml(mocks)
    );
    (gateway_yaml(&yaml).await, db)
}

/// (path, body) for `model` in each inbound API — OpenAI Chat, Responses, Anthropic Messages,
/// Ollama chat — plain, then streamed, asking `text`.
pub fn every_api(model: &str, text: &str) -> Vec<(&'static str, serde_json::Value)> {
    use serde_json::json;
    let mut out = Vec::new();
    for stream in [false, true] {
        let messages = json!([{"role": "user", "content": text}]);
        out.push(("/v1/chat/completions", json!({"model": model, "stream": stream, "messages": messages})));
        out.push(("/v1/responses", json!({"model": model, "stream": stream, "input": text})));
        out.push(("/v1/messages", json!({"model": model, "stream": stream, "max_tokens": 32, "messages": messages})));
        out.push(("/api/chat", json!({"model": model, "stream": stream, "messages": messages})));
    }
    out
}

/// The value of the `/metrics` line starting with `line_start` (name and labels, then a space).
pub fn metric(text: &str, line_start: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(line_start)).and_then(|v| v.trim().parse().ok())
}

/// The real gateway binary serving `config` (no master key from the environment), as a child
/// process; its base URL from the `listening on` line it prints when ready.
pub fn spawn_gateway(config: &std::path::Path) -> (std::process::Child, String) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["serve", "--config"])
        .arg(config)
        .env_remove("SWITCHYARD_MASTER_KEY")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let base = line.trim().strip_prefix("listening on ").expect("the listening line").to_owned();
    (child, base)
}

/// An admin API call with `master` as Bearer.
pub async fn admin_as(
    client: &TestClient,
    gw: &RunningGateway,
    master: &str,
    method: http::Method,
    path: &str,
    body: &str,
) -> TestResponse {
    let auth = format!("Bearer {master}");
    client
        .request(method, &format!("{}{path}", gw.url()), body.to_owned().into(), &[("authorization", &auth)])
        .await
        .unwrap()
}

/// The request log's rows (newest first, as the console reads them), once it holds `n`; logs in
/// with `master`.
pub async fn request_log(client: &TestClient, gw: &RunningGateway, master: &str, n: usize) -> Vec<serde_json::Value> {
    let form = format!("key={master}");
    let url = |path: &str| format!("{}{path}", gw.url());
    let form_type = [("content-type", "application/x-www-form-urlencoded")];
    let login =
        client.request(http::Method::POST, &url("/ui/login"), bytes::Bytes::from(form), &form_type).await.unwrap();
    let cookie = login.header("set-cookie").and_then(|c| c.split(';').next()).unwrap().to_owned();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let cookie = [("cookie", cookie.as_str())];
        let page =
            client.request(http::Method::GET, &url("/ui/api/requests"), bytes::Bytes::new(), &cookie).await.unwrap();
        let rows = page.json()["data"].as_array().cloned().unwrap_or_default();
        if rows.len() >= n {
            return rows;
        }
        assert!(std::time::Instant::now() < deadline, "{} of {n} records in the log", rows.len());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
