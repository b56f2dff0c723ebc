//! `switchyard seed-usage` (hidden): fill a database with generated usage records through the
//! gateway's own batch path, for `switchyard bench usage-query`, which then queries them over
//! the admin API and the console like any client. 100 keys, 250 users, 20 teams, 10 models over
//! 30 days ending at a fixed instant (or `--end-ms`), so every run asks the same questions of the
//! same data; one request in a hundred failed (502), as a request log has failures to find.

use std::time::Instant;

use switchyard_gateway::records::UsageRecord;
use switchyard_gateway::store::Store;

const HOUR_MS: i64 = 3_600_000;
const DAYS: i64 = 30;
const BATCH: usize = 5_000;
/// The end of the generated span (unix ms): the bench's "last 7 days" query starts 7 days before.
pub const END_MS: i64 = 1_790_000_000_000;

pub async fn run(url: &str, records: u64, end_ms: i64) -> Result<(), String> {
    let store = Store::connect(url).await.map_err(|e| format!("cannot open {url}: {e}"))?.for_journal("bench");
    let span = DAYS * 24 * HOUR_MS;
    let start_ms = end_ms - span;
    eprintln!(
        "  ▸ writing {records} usage records to {} ({})",
        store.kind(),
        url.split('@').next_back().unwrap_or(url)
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
            status: if i % 100 == 99 { 502 } else { 200 },
            prompt_tokens: 100 + i % 50,
            completion_tokens: 20 + i % 30,
            total_tokens: 120 + i % 50 + i % 30,
            cache_read_tokens: 0,
            cache_write_tokens: 0,
            latency_ms: 120.0,
            ttft_ms: Some(30.0),
            cost_usd: 0.0001,
            estimated: false,
            tool: None,
            response_bytes: None,
            backend_key: None,
            route: (i % 3 == 0).then(|| "cache_aware: 3 of 4 prompt blocks cached on gpu-a".to_owned()),
            bodies: None,
            guardrails: Vec::new(),
            guard_call: None,
            units: None,
            batch_id: None,
            experiment: None,
            variant: None,
            policy: None,
            tags: Vec::new(),
            task_id: None,
            task_state: None,
        });
        if batch.len() == BATCH || i + 1 == records {
            store.write_usage_batch(&batch, i + 1).await.map_err(|e| format!("write: {e}"))?;
            batch.clear();
            if (i + 1) % 1_000_000 == 0 {
                eprintln!("    {} records, {:.0} s", i + 1, filled.elapsed().as_secs_f64());
            }
        }
    }
    store.close().await;
    // The one line the bench reads: how long the fill took.
    println!("seeded {records} records in {:.3} s", filled.elapsed().as_secs_f64());
    Ok(())
}
