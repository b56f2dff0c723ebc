//! `usage-query`: fill a database with generated usage records (10 million by default, spread
//! over 30 days, 100 keys, 10 models, 20 teams) through the gateway's own batch path
//! (`switchyard seed-usage`, a child process), then start the gateway on it and time the admin
//! API's usage queries over HTTP, as an operator's dashboard would, then the console's own reads
//! (overview, usage pages, the request log: a request id among millions, filters, a second page),
//! logged in as a browser is. Reports never scan the raw records: they read the hourly rollups; the
//! request log reads raw rows through its indexes, a page at a time.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use switchyard_testkit::TestClient;

use crate::procs::Proc;
use crate::report::Report;
use crate::Pinning;

const MASTER_KEY: &str = "sk-bench-usage-query";
const HOUR_MS: i64 = 3_600_000;

/// `records` 0: query the database `storage` names as it is (filled before, e.g. by
/// `switchyard seed-usage`), taking its record count from the first report.
pub async fn run(records: u64, storage: Option<&str>, pin: &Pinning, report: &mut Report) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("switchyard-usage-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let url = storage.map_or_else(|| format!("sqlite://{}/usage.db", dir.display()), str::to_owned);
    // The span ends at the top of the next hour, so the console's "last 24 hours" holds data.
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
    let end_ms = (now_ms / HOUR_MS + 1) * HOUR_MS;
    let last_7_days_from = humantime::format_rfc3339_seconds(
        std::time::UNIX_EPOCH + Duration::from_secs((end_ms / 1000 - 7 * 86_400).max(0) as u64),
    );
    let mut records = records;
    let fill_secs = if records == 0 { 0.0 } else { seed(&url, records, end_ms)? };
    if records > 0 {
        report.finding("usage-query", "records written", records as f64, "");
        report.finding("usage-query", "write rate through the batch path", records as f64 / fill_secs, "records/s");
    }

    let config = format!(
        "listen: 127.0.0.1:0\nauth: {{master_key: {MASTER_KEY}, secret: '{}'}}\nstorage: {{url: '{url}', usage_journal_dir: '{}/journal'}}\n",
        "b".repeat(32),
        dir.display()
    );
    let path = dir.join("gateway.yaml");
    std::fs::write(&path, config).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    let gateway = Proc::start(
        "gateway",
        &["serve".into(), "--config".into(), path.display().to_string()],
        pin.gateway.as_deref(),
    )?;

    let queries = [
        ("all records, day buckets", "bucket=day"),
        ("all records, hour buckets", "bucket=hour"),
        ("one key, hour buckets", "key_id=key042&bucket=hour"),
        ("one team, one model, day buckets", "team=team07&model=model-3&bucket=day"),
        ("one user, last 7 days", &format!("user=user123&from={last_7_days_from}&bucket=day")),
    ];
    let client = TestClient::new();
    let auth = format!("Bearer {MASTER_KEY}");
    let mut results = Vec::new();
    for (name, query) in queries {
        let mut times = Vec::new();
        let mut requests = 0;
        for _ in 0..7 {
            let t = Instant::now();
            let r = client
                .request(
                    http::Method::GET,
                    &format!("{}/admin/usage?{query}", gateway.url),
                    Default::default(),
                    &[("authorization", &auth)],
                )
                .await
                .map_err(|e| format!("GET /admin/usage?{query}: {e}"))?;
            times.push(t.elapsed());
            if r.status != 200 {
                return Err(format!("GET /admin/usage?{query} answered {}: {}", r.status, r.text()));
            }
            requests = r.json()["totals"]["requests"].as_u64().unwrap_or(0);
        }
        times.sort();
        let (p50, max) = (ms(times[times.len() / 2]), ms(times[times.len() - 1]));
        report.finding("usage-query", format!("{name}: p50 of 7 runs"), p50, "ms");
        report.finding("usage-query", format!("{name}: max"), max, "ms");
        results.push(json!({"query": name, "p50_ms": p50, "max_ms": max, "requests_counted": requests}));
        if name == "all records, day buckets" {
            if records == 0 {
                records = requests;
                report.finding("usage-query", "records found", records as f64, "");
            } else if requests != records {
                return Err(format!("report counted {requests} requests, expected {records}"));
            }
        }
    }
    let console = console_reads(&client, &gateway.url, records, report).await?;
    let kind = if url.starts_with("postgres") { "postgres" } else { "sqlite" };
    report.extra.insert(
        "usage_query".into(),
        json!({"records": records, "storage": kind, "fill_seconds": fill_secs, "over": "HTTP, GET /admin/usage", "queries": results, "console": console}),
    );
    drop(gateway);
    if storage.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(())
}

/// The console's reads over HTTP with a logged-in session, 7 runs each: p50 and max.
async fn console_reads(
    client: &TestClient,
    base: &str,
    records: u64,
    report: &mut Report,
) -> Result<Vec<serde_json::Value>, String> {
    let login = client
        .request(
            http::Method::POST,
            &format!("{base}/ui/login"),
            format!("key={MASTER_KEY}").into(),
            &[("content-type", "application/x-www-form-urlencoded")],
        )
        .await
        .map_err(|e| format!("console login: {e}"))?;
    let cookie = login
        .header("set-cookie")
        .and_then(|c| c.split(';').next())
        .map(str::to_owned)
        .ok_or("the console refused the master key")?;
    // A record in the middle of the span (ids are `bench-{n:010}`), and a second page's cursor.
    let middle = format!("bench-{:010}", records / 2);
    let first = get(client, &format!("{base}/ui/api/requests?model=model-3"), &cookie).await?;
    let cursor = first["next"].as_str().unwrap_or_default().to_owned();
    let reads = [
        ("console overview (one refresh)", "/ui/api/overview".to_owned()),
        ("console usage, 24 h by key", "/ui/api/usage?range=24h&by=key".to_owned()),
        ("console usage, 7 d by model", "/ui/api/usage?range=7d&by=model".to_owned()),
        ("console usage, 30 d by team", "/ui/api/usage?range=30d&by=team".to_owned()),
        ("request log, newest page", "/ui/api/requests".to_owned()),
        ("request log, one request id", format!("/ui/api/requests?id={middle}")),
        ("request log, one key", "/ui/api/requests?key_id=key042".to_owned()),
        ("request log, failures only", "/ui/api/requests?status=error".to_owned()),
        ("request log, one model, second page", format!("/ui/api/requests?model=model-3&before={cursor}")),
        ("request log, one team and 5xx", "/ui/api/requests?team=team07&status=5xx".to_owned()),
    ];
    let mut results = Vec::new();
    for (name, path) in reads {
        let mut times = Vec::new();
        let mut answer = serde_json::Value::Null;
        for _ in 0..7 {
            let t = Instant::now();
            answer = get(client, &format!("{base}{path}"), &cookie).await?;
            times.push(t.elapsed());
        }
        if path.contains("?id=") && answer["data"][0]["id"].as_str() != Some(middle.as_str()) {
            return Err(format!("the request log did not find {middle}: {answer}"));
        }
        times.sort();
        let (p50, max) = (ms(times[times.len() / 2]), ms(times[times.len() - 1]));
        report.finding("usage-query", format!("{name}: p50 of 7 runs"), p50, "ms");
        report.finding("usage-query", format!("{name}: max"), max, "ms");
        results.push(json!({"query": name, "path": path, "p50_ms": p50, "max_ms": max}));
    }
    Ok(results)
}

async fn get(client: &TestClient, url: &str, cookie: &str) -> Result<serde_json::Value, String> {
    let r = client
        .request(http::Method::GET, url, Default::default(), &[("cookie", cookie)])
        .await
        .map_err(|e| format!("GET {url}: {e}"))?;
    if r.status != 200 {
        return Err(format!("GET {url} answered {}: {}", r.status, r.text()));
    }
    Ok(r.json())
}

/// `switchyard seed-usage`, as a child process; returns the fill time.
fn seed(url: &str, records: u64, end_ms: i64) -> Result<f64, String> {
    let exe = crate::procs::gateway_exe()?;
    let out = Command::new(exe)
        .args(["seed-usage", "--storage", url, "--records", &records.to_string(), "--end-ms", &end_ms.to_string()])
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot start seed-usage: {e}"))?;
    let said = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!("seed-usage failed: {}", said.trim()));
    }
    said.split_whitespace()
        .rev()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("seed-usage said {:?}", said.trim()))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
