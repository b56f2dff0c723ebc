//! `usage-query`: fill a database with generated usage records (10 million by default, spread
//! over 30 days, 100 keys, 10 models, 20 teams) through the gateway's own batch path
//! (`switchyard seed-usage`, a child process), then start the gateway on it and time the admin
//! API's usage queries over HTTP, as an operator's dashboard would. Reports never scan the raw
//! records: they read the hourly rollups, which is what this measures.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use switchyard_testkit::TestClient;

use crate::procs::Proc;
use crate::report::Report;
use crate::Pinning;

const MASTER_KEY: &str = "sk-bench-usage-query";
/// 7 days before the end of the generated span (`seed-usage` ends it at unix 1,790,000,000 s).
const LAST_7_DAYS_FROM: &str = "2026-09-14T14:13:20Z";

pub async fn run(records: u64, storage: Option<&str>, pin: &Pinning, report: &mut Report) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("switchyard-usage-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let url = storage.map_or_else(|| format!("sqlite://{}/usage.db", dir.display()), str::to_owned);
    let fill_secs = seed(&url, records)?;
    report.finding("usage-query", "records written", records as f64, "");
    report.finding("usage-query", "write rate through the batch path", records as f64 / fill_secs, "records/s");

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
        ("one user, last 7 days", &format!("user=user123&from={LAST_7_DAYS_FROM}&bucket=day")),
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
        if name == "all records, day buckets" && requests != records {
            return Err(format!("report counted {requests} requests, expected {records}"));
        }
    }
    let kind = if url.starts_with("postgres") { "postgres" } else { "sqlite" };
    report.extra.insert(
        "usage_query".into(),
        json!({"records": records, "storage": kind, "fill_seconds": fill_secs, "over": "HTTP, GET /admin/usage", "queries": results}),
    );
    drop(gateway);
    if storage.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(())
}

/// `switchyard seed-usage`, as a child process of this same binary; returns the fill time.
fn seed(url: &str, records: u64) -> Result<f64, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find own binary: {e}"))?;
    let out = Command::new(exe)
        .args(["seed-usage", "--storage", url, "--records", &records.to_string()])
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
