//! `usage-query`: fill a database with generated usage records (10 million by default, spread
//! over 30 days, 100 keys, 10 models, 20 teams) through the same batch path the gateway uses,
//! then time the admin API's usage queries against it. Reports never scan the raw records: they
//! read the hourly rollups, which is what this measures.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::bench::report::Report;
use crate::records::UsageRecord;
use crate::store::{Bucket, Store, UsageQuery};

const HOUR_MS: i64 = 3_600_000;
const DAYS: i64 = 30;
const BATCH: usize = 5_000;

pub async fn run(records: u64, storage: Option<&str>, report: &mut Report) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("switchyard-usage-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let url = storage.map_or_else(|| format!("sqlite://{}/usage.db", dir.display()), str::to_owned);
    let store = Store::connect(&url).await.map_err(|e| format!("cannot open {url}: {e}"))?.for_journal("bench");
    let start_ms = 1_790_000_000_000 - DAYS * 24 * HOUR_MS;
    let span = DAYS * 24 * HOUR_MS;
    eprintln!(
        "  ▸ writing {records} usage records to {} ({})",
        store.kind(),
        url.split('@').next_back().unwrap_or(&url)
    );
    let filled = Instant::now();
    let mut batch = Vec::with_capacity(BATCH);
    for i in 0..records {
        let key = i % 100;
        batch.push(UsageRecord {
            id: format!("bench-{i:010}"),
            ts_ms: start_ms + (i as i64 * 7919) % span,
            key_id: Some(format!("key{key:03}")),
            user: Some(format!("user{:03}", i % 250)),
            team: Some(format!("team{:02}", key % 20)),
            model_requested: format!("model-{}", i % 10),
            model_served: format!("model-{}", i % 10),
            backend: Some("gpu-a".to_owned()),
            status: 200,
            prompt_tokens: 100 + i % 50,
            completion_tokens: 20 + i % 30,
            total_tokens: 120 + i % 50 + i % 30,
            latency_ms: 120.0,
            ttft_ms: Some(30.0),
            cost_usd: 0.0001,
            estimated: false,
        });
        if batch.len() == BATCH || i + 1 == records {
            store.write_usage_batch(&batch, i + 1).await.map_err(|e| format!("write: {e}"))?;
            batch.clear();
            if (i + 1) % 1_000_000 == 0 {
                eprintln!("    {} records, {:.0} s", i + 1, filled.elapsed().as_secs_f64());
            }
        }
    }
    let fill_secs = filled.elapsed().as_secs_f64();
    report.finding("usage-query", "records written", records as f64, "");
    report.finding("usage-query", "write rate through the batch path", records as f64 / fill_secs, "records/s");

    let queries: Vec<(&str, UsageQuery)> = vec![
        ("all records, day buckets", UsageQuery { bucket: Bucket::Day, ..UsageQuery::default() }),
        ("all records, hour buckets", UsageQuery { bucket: Bucket::Hour, ..UsageQuery::default() }),
        ("one key, hour buckets", UsageQuery { key_id: Some("key042".into()), ..UsageQuery::default() }),
        (
            "one team, one model, day buckets",
            UsageQuery {
                team: Some("team07".into()),
                model: Some("model-3".into()),
                bucket: Bucket::Day,
                ..UsageQuery::default()
            },
        ),
        (
            "one user, last 7 days",
            UsageQuery {
                user: Some("user123".into()),
                from_ms: Some(start_ms + span - 7 * 24 * HOUR_MS),
                bucket: Bucket::Day,
                ..UsageQuery::default()
            },
        ),
    ];
    let mut results = Vec::new();
    for (name, q) in &queries {
        let mut times = Vec::new();
        let mut requests = 0;
        for _ in 0..7 {
            let t = Instant::now();
            let r = store.usage_report(q).await.map_err(|e| format!("query: {e}"))?;
            times.push(t.elapsed());
            requests = r.totals.requests;
        }
        times.sort();
        let (p50, max) = (ms(times[times.len() / 2]), ms(times[times.len() - 1]));
        report.finding("usage-query", format!("{name}: p50 of 7 runs"), p50, "ms");
        report.finding("usage-query", format!("{name}: max"), max, "ms");
        results.push(json!({"query": name, "p50_ms": p50, "max_ms": max, "requests_counted": requests}));
        if *name == "all records, day buckets" && requests != records {
            return Err(format!("report counted {requests} requests, expected {records}"));
        }
    }
    report.extra.insert(
        "usage_query".into(),
        json!({"records": records, "storage": store.kind(), "fill_seconds": fill_secs, "queries": results}),
    );
    store.close().await;
    if storage.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
