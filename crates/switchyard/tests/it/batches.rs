//! Files and batches (issue 33), black-box: a JSONL file uploaded by a key runs as a batch
//! through the gateway itself, its output and error files in OpenAI's format with every
//! `custom_id` once, `request_counts` right, a malformed line in the error file while the rest
//! run; each line one usage record carrying the batch's id, priced at the batch discount; files
//! and batches are seen only by their owner; a cancelled batch stops starting lines; a batch
//! carries on after the gateway is SIGKILLed and restarted with every line exactly once.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Method;
use serde_json::{json, Value};
use switchyard_testkit::{MockConfig, TestClient};

use crate::common::*;

const MASTER: &str = "batches-master";
const BOUNDARY: &str = "batch-form-boundary";

/// `lines` chat requests for model `m`, as a batch input file.
fn input(lines: usize) -> String {
    (0..lines)
        .map(|i| {
            let body = json!({"model": "m", "messages": [{"role": "user", "content": format!("question {i}")}]});
            json!({"custom_id": format!("req-{i}"), "method": "POST", "url": "/v1/chat/completions", "body": body})
                .to_string()
                + "\n"
        })
        .collect()
}

/// A gateway at `url`, as `key`: upload, create, poll, read.
struct Api {
    client: TestClient,
    url: String,
    key: String,
}

impl Api {
    async fn call(&self, method: Method, path: &str, body: Bytes, content_type: &str) -> (u16, Value) {
        let bearer = format!("Bearer {}", self.key);
        let headers = [("authorization", bearer.as_str()), ("content-type", content_type)];
        let r = self.client.request(method, &format!("{}{path}", self.url), body, &headers).await.unwrap();
        (r.status.as_u16(), serde_json::from_slice(r.body.as_ref()).unwrap_or(Value::String(r.text())))
    }

    async fn upload(&self, content: &str) -> (u16, Value) {
        let form = format!(
            "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n\
             --{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n\
             Content-Type: application/jsonl\r\n\r\n{content}\r\n--{BOUNDARY}--\r\n"
        );
        let content_type = format!("multipart/form-data; boundary={BOUNDARY}");
        self.call(Method::POST, "/v1/files", Bytes::from(form), &content_type).await
    }

    async fn create(&self, file: &str) -> (u16, Value) {
        let body = json!({"input_file_id": file, "endpoint": "/v1/chat/completions", "completion_window": "24h"});
        self.call(Method::POST, "/v1/batches", Bytes::from(body.to_string()), "application/json").await
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.call(Method::GET, path, Bytes::new(), "application/json").await
    }

    /// The batch once its status is one of `states`.
    async fn until(&self, id: &str, states: &[&str], within: Duration) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let (status, batch) = self.get(&format!("/v1/batches/{id}")).await;
            assert_eq!(status, 200, "{batch}");
            if states.contains(&batch["status"].as_str().unwrap_or_default()) {
                return batch;
            }
            assert!(Instant::now() < deadline, "still {batch}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A file's lines, by `custom_id`.
    async fn lines(&self, file: &Value) -> HashMap<String, Value> {
        let (status, _) = self.get(&format!("/v1/files/{}", file.as_str().unwrap())).await;
        assert_eq!(status, 200);
        let bearer = format!("Bearer {}", self.key);
        let url = format!("{}/v1/files/{}/content", self.url, file.as_str().unwrap());
        let r = self.client.request(Method::GET, &url, Bytes::new(), &[("authorization", &bearer)]).await.unwrap();
        let mut out = HashMap::new();
        for line in r.text().lines() {
            let v: Value = serde_json::from_str(line).unwrap();
            let previous = out.insert(v["custom_id"].as_str().unwrap().to_owned(), v);
            assert!(previous.is_none(), "a custom_id twice in {file}");
        }
        out
    }
}

async fn key(client: &TestClient, base: &str) -> String {
    let r = client
        .post_json(&format!("{base}/admin/keys"), b"{}", &[("authorization", &format!("Bearer {MASTER}"))])
        .await
        .unwrap();
    assert_eq!(r.status, 201, "{}", r.text());
    r.json()["key"].as_str().unwrap().to_owned()
}

fn config(dir: &std::path::Path, backends: &str, extra: &str) -> String {
    config_with_db(dir, backends, extra).0
}

/// `config`, and its database's URL.
fn config_with_db(dir: &std::path::Path, backends: &str, extra: &str) -> (String, String) {
    let db = db_url(dir);
    let yaml = format!(
        "listen: 127.0.0.1:0\n\
         storage: {{url: '{}', usage_journal_dir: '{}/usage'}}\n\
         auth: {{master_key: {MASTER}}}\n\
         prices:\n  m: {{input_per_million: 1000000, output_per_million: 1000000, batch_discount: 0.5}}\n\
         {extra}backends:\n{backends}",
        db,
        dir.display(),
    );
    (yaml, db)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_runs_through_the_gateway_and_writes_openais_files() {
    let backend = mock(&["m"]).await;
    let dir = scratch_dir();
    let gw = gateway_yaml(&config(&dir, &backends_yaml(&[&backend]), "")).await;
    let client = TestClient::new();
    let api = Api { client: client.clone(), url: gw.url(), key: key(&client, &gw.url()).await };
    let mut content = input(40);
    content.push_str("{not json\n");
    content.push_str(
        &json!({"custom_id": "wrong-url", "method": "POST", "url": "/v1/embeddings", "body": {}}).to_string(),
    );
    let (status, file) = api.upload(&content).await;
    assert_eq!((status, &file["purpose"], &file["object"]), (200, &json!("batch"), &json!("file")), "{file}");
    let (status, batch) = api.create(file["id"].as_str().unwrap()).await;
    assert_eq!((status, &batch["status"]), (200, &json!("validating")), "{batch}");
    let id = batch["id"].as_str().unwrap().to_owned();
    let done = api.until(&id, &["completed"], Duration::from_secs(30)).await;
    assert_eq!(done["request_counts"], json!({"total": 42, "completed": 40, "failed": 2}), "{done}");
    let output = api.lines(&done["output_file_id"]).await;
    assert_eq!(output.len(), 40);
    let first = &output["req-7"];
    assert_eq!(first["response"]["status_code"], 200, "{first}");
    assert_eq!(first["response"]["body"]["object"], "chat.completion");
    assert!(first["id"].as_str().unwrap().starts_with("batch_req_") && first["error"].is_null());
    let errors = api.lines(&done["error_file_id"]).await;
    assert_eq!(errors["wrong-url"]["error"]["code"], "invalid_url", "{errors:?}");
    assert_eq!(errors["line-41"]["error"]["code"], "invalid_json_line", "{errors:?}");

    // Each line one record, tagged with the batch, at half the price.
    let rows = request_log(&client, &gw, MASTER, 40).await;
    let lines: Vec<&Value> = rows.iter().filter(|r| r["batch_id"] == id.as_str()).collect();
    assert_eq!(lines.len(), 40, "{rows:?}");
    let row = lines[0];
    let tokens = row["total_tokens"].as_f64().unwrap();
    assert!((row["cost_usd"].as_f64().unwrap() - tokens * 0.5).abs() < 1e-6, "{row}");

    // Another key sees none of it.
    let other = Api { client: client.clone(), url: gw.url(), key: key(&client, &gw.url()).await };
    for path in [format!("/v1/files/{}", file["id"].as_str().unwrap()), format!("/v1/batches/{id}")] {
        assert_eq!(other.get(&path).await.0, 404, "{path}");
    }
    let (status, _) = other.create(file["id"].as_str().unwrap()).await;
    assert_eq!(status, 404);
    assert_eq!(other.get("/v1/batches").await.1["data"], json!([]));
    assert_eq!(api.get("/v1/batches").await.1["data"][0]["id"], id.as_str());
}

/// A batch never holds a backend's last slot: with `max_concurrency: 4` and more lines allowed in
/// flight than that, the backend sees at most three at once, and interactive requests sent while
/// the batch runs never wait in the admission queue (the slot left is theirs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_never_takes_a_backends_last_slot() {
    let backend = mock(&["m"]).await;
    backend.control().set_latency(Duration::from_millis(150));
    let dir = scratch_dir();
    let backends = format!("  - {{name: b0, url: '{}', max_concurrency: 4}}\n", backend.url());
    let gw = gateway_yaml(&config(&dir, &backends, "batches: {concurrency: 8}\n")).await;
    let client = TestClient::new();
    let api = Api { client: client.clone(), url: gw.url(), key: key(&client, &gw.url()).await };
    let (_, file) = api.upload(&input(24)).await;
    let (status, batch) = api.create(file["id"].as_str().unwrap()).await;
    assert_eq!(status, 200, "{batch}");
    let id = batch["id"].as_str().unwrap().to_owned();
    // Interactive requests, one after another, while the batch runs.
    let url = format!("{}/v1/chat/completions", gw.url());
    let ask = json!({"model": "m", "messages": [{"role": "user", "content": "now"}]}).to_string();
    let auth = format!("Bearer {}", api.key);
    let mut interactive = 0;
    loop {
        let (_, now) = api.get(&format!("/v1/batches/{id}")).await;
        if now["status"] == "completed" {
            break;
        }
        let r = client.post_json(&url, ask.as_bytes(), &[("authorization", &auth)]).await.unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        interactive += 1;
    }
    let done = api.until(&id, &["completed"], Duration::from_secs(30)).await;
    assert_eq!(done["request_counts"]["completed"], 24, "{done}");
    assert!(interactive >= 3, "the batch ran beside interactive requests ({interactive})");
    let peak = backend.control().peak_in_flight.load(std::sync::atomic::Ordering::Relaxed);
    assert!(peak <= 4, "the cap held: {peak}");
    let metrics = client.get(&format!("{}/metrics", gw.url())).await.unwrap().text();
    let queued = metrics
        .lines()
        .find_map(|l| l.strip_prefix("switchyard_queue_joined_total "))
        .and_then(|v| v.trim().parse::<f64>().ok());
    assert_eq!(queued, Some(0.0), "no interactive request waited for a slot:\n{metrics}");

    // Alone, the batch fills three of the four slots and never the fourth.
    backend.control().peak_in_flight.store(0, std::sync::atomic::Ordering::Relaxed);
    let (_, file) = api.upload(&input(24)).await;
    let (_, batch) = api.create(file["id"].as_str().unwrap()).await;
    api.until(batch["id"].as_str().unwrap(), &["completed"], Duration::from_secs(30)).await;
    let peak = backend.control().peak_in_flight.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(peak, 3, "batch lines in flight at the backend at once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_batch_stops_starting_lines_and_keeps_what_finished() {
    let backend = mock_with(&["m"], MockConfig { latency: Duration::from_millis(30), ..MockConfig::default() }).await;
    let dir = scratch_dir();
    let gw = gateway_yaml(&config(&dir, &backends_yaml(&[&backend]), "batches: {concurrency: 2}\n")).await;
    let client = TestClient::new();
    let api = Api { client: client.clone(), url: gw.url(), key: key(&client, &gw.url()).await };
    let (_, file) = api.upload(&input(300)).await;
    let (_, batch) = api.create(file["id"].as_str().unwrap()).await;
    let id = batch["id"].as_str().unwrap().to_owned();
    api.until(&id, &["in_progress"], Duration::from_secs(10)).await;
    let (status, cancelling) =
        api.call(Method::POST, &format!("/v1/batches/{id}/cancel"), Bytes::new(), "application/json").await;
    assert_eq!((status, &cancelling["status"]), (200, &json!("cancelling")), "{cancelling}");
    let done = api.until(&id, &["cancelled"], Duration::from_secs(20)).await;
    let completed = done["request_counts"]["completed"].as_u64().unwrap();
    assert!(completed < 300, "{done}");
    if completed > 0 {
        assert_eq!(api.lines(&done["output_file_id"]).await.len() as u64, completed);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_batches_get_a_clear_4xx() {
    let backend = mock(&["m"]).await;
    let dir = scratch_dir();
    let gw = gateway_yaml(&config(&dir, &backends_yaml(&[&backend]), "")).await;
    let client = TestClient::new();
    let api = Api { client: client.clone(), url: gw.url(), key: key(&client, &gw.url()).await };
    let (_, file) = api.upload(&input(1)).await;
    let id = file["id"].as_str().unwrap();
    for (body, param) in [
        (json!({"input_file_id": id, "endpoint": "/v1/images/generations", "completion_window": "24h"}), "endpoint"),
        (
            json!({"input_file_id": id, "endpoint": "/v1/chat/completions", "completion_window": "1h"}),
            "completion_window",
        ),
    ] {
        let (status, answer) =
            api.call(Method::POST, "/v1/batches", Bytes::from(body.to_string()), "application/json").await;
        assert_eq!((status, &answer["error"]["param"]), (400, &json!(param)), "{answer}");
    }
    let (status, _) = api.create("file-nope").await;
    assert_eq!(status, 404);
    let form =
        format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--{BOUNDARY}--\r\n");
    let content_type = format!("multipart/form-data; boundary={BOUNDARY}");
    let (status, answer) = api.call(Method::POST, "/v1/files", Bytes::from(form), &content_type).await;
    assert_eq!((status, &answer["error"]["param"]), (400, &json!("file")), "{answer}");
    let (status, deleted) =
        api.call(Method::DELETE, &format!("/v1/files/{id}"), Bytes::new(), "application/json").await;
    assert_eq!((status, &deleted["deleted"]), (200, &json!(true)));
    assert_eq!(api.get(&format!("/v1/files/{id}")).await.0, 404);
}

/// The judged case: a 10,000-line batch over two backends; the gateway is SIGKILLed mid-batch and
/// started again on the same database; the batch completes with every `custom_id` exactly once in
/// the output and exactly one usage record per line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_survives_a_sigkill_with_every_line_exactly_once() {
    const LINES: usize = 10_000;
    let (a, b) = (mock(&["m"]).await, mock(&["m"]).await);
    let dir = scratch_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let (yaml, db) = config_with_db(&dir, &backends_yaml(&[&a, &b]), "batches: {concurrency: 8}\n");
    let path = dir.join("gateway.yaml");
    std::fs::write(&path, yaml).unwrap();
    let (mut first, url) = spawn_gateway(&path);
    let client = TestClient::new();
    let api = Api { client: client.clone(), url: url.clone(), key: key(&client, &url).await };
    let (_, file) = api.upload(&input(LINES)).await;
    let (_, batch) = api.create(file["id"].as_str().unwrap()).await;
    let id = batch["id"].as_str().unwrap().to_owned();
    // Killed once a good part has run.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, now) = api.get(&format!("/v1/batches/{id}")).await;
        if now["request_counts"]["completed"].as_u64().unwrap_or(0) >= 1_500 {
            break;
        }
        assert!(Instant::now() < deadline, "{now}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.kill().unwrap();
    first.wait().unwrap();
    let (mut second, url) = spawn_gateway(&path);
    let api = Api { url, ..api };
    let done = api.until(&id, &["completed"], Duration::from_secs(240)).await;
    assert_eq!(done["request_counts"], json!({"total": LINES, "completed": LINES, "failed": 0}), "{done}");
    let output = api.lines(&done["output_file_id"]).await;
    assert_eq!(output.len(), LINES, "every custom_id once");
    assert!(done["error_file_id"].is_null(), "{done}");
    let rows = records(&db, LINES).await;
    let ids: std::collections::HashSet<&String> = rows.iter().map(|r| &r.0).collect();
    assert_eq!((rows.len(), ids.len()), (LINES, LINES), "one usage record per line");
    assert!(a.control().request_count() > 0 && b.control().request_count() > 0, "both backends ran lines");
    second.kill().unwrap();
    let _ = second.wait();
}

/// A batch still running when its completion window ends: no more lines start, those not run
/// are in the error file as `batch_expired`, what finished is in the output, and the batch is
/// `expired` with every `custom_id` in exactly one of the two files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_past_its_completion_window_expires_with_the_rest_as_batch_expired() {
    const LINES: usize = 200;
    let backend = mock_with(&["m"], MockConfig { latency: Duration::from_millis(40), ..MockConfig::default() }).await;
    let dir = scratch_dir();
    let extra = "batches: {concurrency: 1, completion_window: 2s}\n";
    let gw = gateway_yaml(&config(&dir, &backends_yaml(&[&backend]), extra)).await;
    let client = TestClient::new();
    let api = Api { client: client.clone(), url: gw.url(), key: key(&client, &gw.url()).await };
    let (_, file) = api.upload(&input(LINES)).await;
    let (_, batch) = api.create(file["id"].as_str().unwrap()).await;
    let window = batch["expires_at"].as_i64().unwrap() - batch["created_at"].as_i64().unwrap();
    assert!((1..=2).contains(&window), "{batch}");
    let id = batch["id"].as_str().unwrap().to_owned();
    let done = api.until(&id, &["expired"], Duration::from_secs(30)).await;
    assert!(done["expired_at"].as_i64().unwrap() >= done["expires_at"].as_i64().unwrap(), "{done}");
    let counts = &done["request_counts"];
    let completed = counts["completed"].as_u64().unwrap() as usize;
    assert!(completed > 0 && completed < LINES, "{done}");
    assert_eq!(counts["completed"].as_u64().unwrap() + counts["failed"].as_u64().unwrap(), LINES as u64, "{done}");
    let output = api.lines(&done["output_file_id"]).await;
    let errors = api.lines(&done["error_file_id"]).await;
    assert_eq!((output.len(), errors.len()), (completed, LINES - completed));
    for i in 0..LINES {
        let custom_id = format!("req-{i}");
        assert!(output.contains_key(&custom_id) != errors.contains_key(&custom_id), "{custom_id} in one file");
    }
    assert!(errors.values().all(|e| e["error"]["code"] == "batch_expired"), "{errors:?}");
    // Nothing was sent for the expired lines.
    assert_eq!(backend.control().request_count() as usize, completed);
}

/// Three instances sharing one database, files directory and Redis: one of them runs the batch
/// (it claims it in the database), so each line reaches the backend exactly once, not once per
/// instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_sends_each_line_of_a_batch_once() {
    const LINES: usize = 300;
    // Slow enough (300 lines × 20 ms ≈ 6 s) that every instance looks for work meanwhile.
    let backend = mock_with(&["m"], MockConfig { latency: Duration::from_millis(20), ..MockConfig::default() }).await;
    backend.control().keep_bodies();
    let redis = crate::common::redis::RedisServer::start();
    let dir = scratch_dir();
    let db = db_url(&dir);
    let mut urls = Vec::new();
    let mut gateways = Vec::new();
    for i in 0..3 {
        let yaml = format!(
            "listen: 127.0.0.1:0\n\
             storage: {{url: '{db}', usage_journal_dir: '{d}/usage{i}', files_dir: '{d}/files'}}\n\
             auth: {{master_key: {MASTER}}}\n\
             redis: {{url: '{}', timeout: 3s}}\n\
             batches: {{concurrency: 1}}\n\
             backends:\n{}",
            redis.url(),
            backends_yaml(&[&backend]),
            d = dir.display(),
        );
        let gw = gateway_yaml(&yaml).await;
        urls.push(gw.url());
        gateways.push(gw);
    }
    let client = TestClient::new();
    let api = Api { client: client.clone(), url: urls[0].clone(), key: key(&client, &urls[0]).await };
    let (_, file) = api.upload(&input(LINES)).await;
    let (_, batch) = api.create(file["id"].as_str().unwrap()).await;
    let id = batch["id"].as_str().unwrap().to_owned();
    let elsewhere = Api { url: urls[2].clone(), ..api };
    let done = elsewhere.until(&id, &["completed"], Duration::from_secs(60)).await;
    assert_eq!(done["request_counts"], json!({"total": LINES, "completed": LINES, "failed": 0}), "{done}");
    assert_eq!(elsewhere.lines(&done["output_file_id"]).await.len(), LINES);
    let bodies = backend.control().bodies();
    for i in 0..LINES {
        let needle = format!("\"question {i}\"");
        let sent = bodies.iter().filter(|b| b.contains(&needle)).count();
        assert_eq!(sent, 1, "line {i} sent {sent} times");
    }
}

/// `storage.files` in an S3-compatible bucket (moto): a batch's input, output and error files are
/// objects there, read back whole; a 12 MiB upload goes up in parts and comes back byte for byte;
/// a deleted file's object is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_and_batch_results_live_in_a_bucket_when_storage_files_names_one() {
    let client = TestClient::new();
    let moto = crate::common::moto::moto_with(&client, "files").await;
    let backend = mock(&["m"]).await;
    let dir = scratch_dir();
    let files = format!(
        "files: {{bucket: files, prefix: team-a, endpoint: '{}', region: us-east-1, access_key_id: test, \
         secret_access_key: test}}",
        moto.url()
    );
    let (yaml, _) = config_with_db(&dir, &backends_yaml(&[&backend]), "");
    let yaml = yaml.replace("storage: {url:", &format!("storage: {{{files}, url:"));
    let gw = gateway_yaml(&yaml).await;
    let api = Api { client: client.clone(), url: gw.url(), key: key(&client, &gw.url()).await };
    let mut content = input(20);
    content.push_str("{not json\n");
    let (status, file) = api.upload(&content).await;
    assert_eq!(status, 200, "{file}");
    let (_, batch) = api.create(file["id"].as_str().unwrap()).await;
    let done = api.until(batch["id"].as_str().unwrap(), &["completed"], Duration::from_secs(30)).await;
    assert_eq!(done["request_counts"], json!({"total": 21, "completed": 20, "failed": 1}), "{done}");
    assert_eq!(api.lines(&done["output_file_id"]).await.len(), 20);
    let keys: Vec<String> = moto.keys("files").into_iter().map(|(k, _)| k).collect();
    for id in [&file["id"], &done["output_file_id"], &done["error_file_id"]] {
        let want = format!("team-a/{}", id.as_str().unwrap());
        assert!(keys.contains(&want), "{want} not in {keys:?}");
    }
    assert!(!dir.join("switchyard-files").exists(), "nothing on local disk");

    // A file larger than one part (5 MiB): a multipart upload, streamed back whole.
    let big: String = (0..12 * 1024).map(|i| format!("{i:0>1023}\n")).collect();
    let form = format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nuser_data\r\n\
         --{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big.txt\"\r\n\r\n{big}\r\n\
         --{BOUNDARY}--\r\n"
    );
    let content_type = format!("multipart/form-data; boundary={BOUNDARY}");
    let (status, uploaded) = api.call(Method::POST, "/v1/files", Bytes::from(form), &content_type).await;
    assert_eq!((status, uploaded["bytes"].as_u64()), (200, Some(big.len() as u64)), "{uploaded}");
    let id = uploaded["id"].as_str().unwrap();
    let stored = moto.keys("files").into_iter().find(|(k, _)| k.ends_with(id)).expect("the object");
    assert_eq!(stored.1, big.len() as u64);
    let bearer = format!("Bearer {}", api.key);
    let url = format!("{}/v1/files/{id}/content", api.url);
    let r = client.request(Method::GET, &url, Bytes::new(), &[("authorization", &bearer)]).await.unwrap();
    assert_eq!(r.status, 200);
    assert!(r.body.as_ref() == big.as_bytes(), "the file came back changed ({} bytes)", r.body.len());
    let (status, _) = api.call(Method::DELETE, &format!("/v1/files/{id}"), Bytes::new(), "application/json").await;
    assert_eq!(status, 200);
    assert!(moto.keys("files").iter().all(|(k, _)| !k.ends_with(id)), "the object is deleted");
}

/// `batches.mode: passthrough` (issue 33): a batch for a `provider: openai` backend's model goes
/// whole to that provider's Batch API — here a second gateway, which runs batches itself —
/// and is followed there: the client sees OpenAI's files under this gateway's ids, each line one
/// usage record here at the batch price; a cancel is passed on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_passthrough_mode_a_batch_goes_to_the_providers_batch_api_and_is_followed_there() {
    let backend = mock_with(&["m"], MockConfig { latency: Duration::from_millis(10), ..MockConfig::default() }).await;
    backend.control().keep_bodies();
    let provider_dir = scratch_dir();
    let provider =
        gateway_yaml(&config(&provider_dir, &backends_yaml(&[&backend]), "batches: {concurrency: 2}\n")).await;
    let dir = scratch_dir();
    let hosted =
        format!("  - {{name: hosted, provider: openai, url: '{}', api_key: {MASTER}, models: [m]}}\n", provider.url());
    let gw = gateway_yaml(&config(&dir, &hosted, "batches: {mode: passthrough, poll_interval: 200ms}\n")).await;
    let client = TestClient::new();
    let api = Api { client: client.clone(), url: gw.url(), key: key(&client, &gw.url()).await };
    let mut content = input(40);
    content.push_str(
        &json!({"custom_id": "wrong-url", "method": "POST", "url": "/v1/embeddings", "body": {"model": "m"}})
            .to_string(),
    );
    let (_, file) = api.upload(&content).await;
    let (status, batch) = api.create(file["id"].as_str().unwrap()).await;
    assert_eq!(status, 200, "{batch}");
    let id = batch["id"].as_str().unwrap().to_owned();
    let done = api.until(&id, &["completed"], Duration::from_secs(30)).await;
    assert_eq!(done["request_counts"], json!({"total": 41, "completed": 40, "failed": 1}), "{done}");
    let output = api.lines(&done["output_file_id"]).await;
    assert_eq!(output.len(), 40);
    let line = &output["req-7"];
    assert_eq!(
        (&line["response"]["status_code"], &line["response"]["body"]["object"]),
        (&json!(200), &json!("chat.completion")),
        "{line}"
    );
    assert!(line["id"].as_str().unwrap().starts_with("batch_req_"), "{line}");
    assert_eq!(api.lines(&done["error_file_id"]).await["wrong-url"]["error"]["code"], "invalid_url");
    // The provider ran it (each line once), as a batch that names this one.
    assert_eq!(backend.control().bodies().len(), 40);
    let at_provider = Api { client: client.clone(), url: provider.url(), key: MASTER.to_owned() };
    let theirs = at_provider.get("/v1/batches").await.1;
    assert_eq!(theirs["data"][0]["metadata"]["switchyard_batch"], id.as_str(), "{theirs}");
    // Each line one record here, tagged with the batch, at half the price.
    let rows = request_log(&client, &gw, MASTER, 40).await;
    let lines: Vec<&Value> = rows.iter().filter(|r| r["batch_id"] == id.as_str()).collect();
    assert_eq!(lines.len(), 40, "{rows:?}");
    let tokens = lines[0]["total_tokens"].as_f64().unwrap();
    assert!(tokens > 0.0 && (lines[0]["cost_usd"].as_f64().unwrap() - tokens * 0.5).abs() < 1e-6, "{:?}", lines[0]);
    assert_eq!(lines[0]["backend"], "hosted");

    // A cancel reaches the provider's batch; what finished there comes back.
    let (_, file) = api.upload(&input(400)).await;
    let (_, batch) = api.create(file["id"].as_str().unwrap()).await;
    let id = batch["id"].as_str().unwrap().to_owned();
    api.until(&id, &["in_progress"], Duration::from_secs(10)).await;
    let (status, _) =
        api.call(Method::POST, &format!("/v1/batches/{id}/cancel"), Bytes::new(), "application/json").await;
    assert_eq!(status, 200);
    let done = api.until(&id, &["cancelled"], Duration::from_secs(30)).await;
    let completed = done["request_counts"]["completed"].as_u64().unwrap();
    assert!(completed < 400, "{done}");
    let theirs = at_provider.get("/v1/batches").await.1;
    let ours = theirs["data"].as_array().unwrap().iter().find(|b| b["metadata"]["switchyard_batch"] == id.as_str());
    assert_eq!(ours.map(|b| &b["status"]), Some(&json!("cancelled")), "{theirs}");
}
