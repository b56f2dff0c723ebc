//! The key and usage store against real databases: every test body runs on SQLite (a temp file) and, when
//! `SWITCHYARD_TEST_POSTGRES_URL` is set (see scripts/postgres), on PostgreSQL in a fresh database of its own.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use switchyard_gateway::records::{KeyRecord, UsageRecord};
use switchyard_gateway::store::{Bucket, GroupBy, Store, StoreError, UsageQuery, UsageReport};

const HOUR: i64 = 3_600_000;
const DAY: i64 = 86_400_000;
/// A UTC midnight (2023-11-15).
const BASE: i64 = 19_676 * DAY;

static COUNTER: AtomicU32 = AtomicU32::new(0);

fn unique(prefix: &str) -> String {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().subsec_nanos();
    format!("{prefix}_{}_{}_{nanos}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// A fresh, empty database for one test body, removed afterwards.
enum Scratch {
    Sqlite(PathBuf),
    Postgres { admin: String, name: String },
}

impl Scratch {
    fn sqlite() -> (Scratch, String) {
        let path = std::env::temp_dir().join(format!("{}.db", unique("sy_store")));
        let url = format!("sqlite://{}", path.display());
        (Scratch::Sqlite(path), url)
    }

    async fn postgres(admin: &str) -> (Scratch, String) {
        let name = unique("sy_test");
        let pool = sqlx::PgPool::connect(admin).await.expect("connect to SWITCHYARD_TEST_POSTGRES_URL");
        sqlx::query(&format!("CREATE DATABASE \"{name}\"")).execute(&pool).await.expect("CREATE DATABASE");
        pool.close().await;
        let url = with_database(admin, &name);
        (Scratch::Postgres { admin: admin.to_string(), name }, url)
    }

    async fn remove(self) {
        match self {
            Scratch::Sqlite(path) => {
                for suffix in ["", "-wal", "-shm"] {
                    let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
                }
            }
            Scratch::Postgres { admin, name } => {
                let pool = sqlx::PgPool::connect(&admin).await.unwrap();
                // FORCE cannot end an autovacuum worker (it belongs to the superuser), which may be
                // busy in a database that just took millions of rows: retry briefly, then leave it.
                let drop = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
                for attempt in 0.. {
                    match sqlx::query(&drop).execute(&pool).await {
                        Ok(_) => break,
                        Err(e) if attempt == 50 => {
                            eprintln!("could not drop scratch database {name}: {e}");
                            break;
                        }
                        Err(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
                    }
                }
                pool.close().await;
            }
        }
    }
}

/// `postgres://u:p@h:5432/db?opts` with `db` replaced by `name`.
fn with_database(url: &str, name: &str) -> String {
    let authority_start = url.find("://").map_or(0, |i| i + 3);
    let (head, tail) = match url[authority_start..].find('/') {
        Some(i) => url.split_at(authority_start + i),
        None => (url, ""),
    };
    let query = tail.find('?').map_or("", |i| &tail[i..]);
    format!("{head}/{name}{query}")
}

/// Runs `body(store, url)` on SQLite, then on PostgreSQL when configured. The body runs in its own task so a
/// failing assertion still lets the scratch database be removed before the panic is passed on.
async fn on_each_backend<F, Fut>(body: F)
where
    F: Fn(Store, String) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut scratches = vec![Scratch::sqlite()];
    if let Some(admin) = std::env::var("SWITCHYARD_TEST_POSTGRES_URL").ok().filter(|u| !u.is_empty()) {
        scratches.push(Scratch::postgres(&admin).await);
    }
    for (scratch, url) in scratches {
        let store = Store::connect(&url).await.unwrap_or_else(|e| panic!("connect {url}: {e}"));
        let kind = store.kind();
        let started = std::time::Instant::now();
        let outcome = tokio::spawn(body(store.clone(), url)).await;
        eprintln!("ran on {kind} in {:?}", started.elapsed());
        store.close().await;
        scratch.remove().await;
        if let Err(err) = outcome {
            eprintln!("store test failed on {kind}");
            std::panic::resume_unwind(err.into_panic());
        }
    }
}

fn key(id: &str, created_at: i64) -> KeyRecord {
    KeyRecord {
        id: id.to_string(),
        secret_hash: vec![7; 32],
        name: Some(format!("key {id}")),
        models: vec!["llama*".into(), "gpt-4o".into()],
        rpm: Some(60),
        tpm: Some(100_000),
        max_parallel: Some(4),
        budget_usd: Some(12.5),
        budget_period: Some("monthly".into()),
        expires_at: Some(1_900_000_000),
        revoked_at: None,
        user: Some("alice".into()),
        team: Some("research".into()),
        tags: vec!["prod".into()],
        created_at,
        mcp_servers: Some(vec!["github".into(), "files-*".into()]),
        mcp_tools: None,
        team_id: None,
        user_id: None,
        guardrails: Vec::new(),
        passthrough: vec!["vllm-*".into()],
        policies: Default::default(),
        agents: Some(vec!["echo".into(), "research/GetTask".into()]),
        owners: Default::default(),
    }
}

fn usage(id: &str, ts_ms: i64, key: Option<&str>, user: Option<&str>, team: Option<&str>, model: &str) -> UsageRecord {
    UsageRecord {
        id: id.to_string(),
        ts_ms,
        key_id: key.map(str::to_string),
        user: user.map(str::to_string),
        team: team.map(str::to_string),
        model_requested: format!("alias-{model}"),
        model_served: model.to_string(),
        backend: Some("b1".into()),
        status: 200,
        prompt_tokens: 10,
        completion_tokens: 5,
        total_tokens: 15,
        cache_read_tokens: 0,
        cache_write_tokens: 0,
        latency_ms: 12.5,
        ttft_ms: Some(3.0),
        cost_usd: 0.5,
        estimated: false,
        tool: None,
        response_bytes: None,
        backend_key: None,
        route: None,
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
    }
}

fn with_cost(mut r: UsageRecord, prompt: u64, completion: u64, cost: f64) -> UsageRecord {
    r.prompt_tokens = prompt;
    r.completion_tokens = completion;
    r.total_tokens = prompt + completion;
    r.cost_usd = cost;
    r
}

/// Five records over two UTC days (costs are exact binary fractions so sums compare exactly).
fn sample() -> Vec<UsageRecord> {
    vec![
        with_cost(usage("r1", BASE + 10 * 60_000, Some("k1"), Some("alice"), Some("t1"), "m1"), 10, 5, 0.5),
        with_cost(usage("r2", BASE + 50 * 60_000, Some("k1"), Some("alice"), Some("t1"), "m2"), 20, 10, 1.0),
        with_cost(usage("r3", BASE + HOUR + 5 * 60_000, Some("k2"), Some("bob"), Some("t1"), "m1"), 30, 15, 1.5),
        with_cost(usage("r4", BASE + DAY + 2 * HOUR, None, None, None, "m1"), 40, 20, 2.0),
        with_cost(usage("r5", BASE + DAY + 2 * HOUR + 60_000, Some("k1"), Some("alice"), Some("t2"), "m1"), 1, 1, 0.25),
    ]
}

/// `(start_ms, requests, cost)` per bucket, for compact assertions.
fn shape(report: &UsageReport) -> Vec<(i64, u64, f64)> {
    report.buckets.iter().map(|b| (b.start_ms, b.totals.requests, b.totals.cost_usd)).collect()
}

async fn report(store: &Store, q: UsageQuery) -> UsageReport {
    store.usage_report(&q).await.unwrap()
}

#[tokio::test]
async fn key_crud_and_conflict() {
    on_each_backend(|store, _| async move {
        assert_eq!(store.get_key("k_missing").await.unwrap(), None);
        let a = key("k_a", 200);
        let mut b = key("k_b", 100);
        b.name = None;
        b.models = vec![];
        b.tags = vec![];
        b.rpm = None;
        b.tpm = None;
        b.max_parallel = None;
        b.budget_usd = None;
        b.budget_period = None;
        b.expires_at = None;
        b.user = None;
        b.team = None;
        let c = key("k_c", 100);
        for k in [&a, &b, &c] {
            store.insert_key(k).await.unwrap();
        }
        assert_eq!(store.get_key("k_a").await.unwrap().as_ref(), Some(&a));
        assert_eq!(store.get_key("k_b").await.unwrap().as_ref(), Some(&b));

        let dup = store.insert_key(&key("k_a", 1)).await.unwrap_err();
        assert!(matches!(dup, StoreError::Conflict), "{dup:?}");

        let ids: Vec<String> = store.list_keys().await.unwrap().into_iter().map(|k| k.id).collect();
        assert_eq!(ids, ["k_b", "k_c", "k_a"], "ordered by created_at, then id");

        let mut a2 = a.clone();
        a2.revoked_at = Some(1_800_000_000);
        a2.tags = vec!["x".into(), "y \"quoted\"".into()];
        a2.tpm = Some(u64::from(u32::MAX) * 4);
        assert!(store.update_key(&a2).await.unwrap());
        assert_eq!(store.get_key("k_a").await.unwrap(), Some(a2));
        assert!(!store.update_key(&key("k_nope", 1)).await.unwrap());

        let mut huge = key("k_huge", 1);
        huge.tpm = Some(u64::MAX);
        assert!(matches!(store.insert_key(&huge).await, Err(StoreError::Invalid(_))));

        assert!(store.delete_key("k_c").await.unwrap());
        assert!(!store.delete_key("k_c").await.unwrap());
        assert_eq!(store.get_key("k_c").await.unwrap(), None);
        assert_eq!(store.list_keys().await.unwrap().len(), 2);
    })
    .await;
}

#[tokio::test]
async fn usage_batches_are_idempotent() {
    on_each_backend(|store, _| async move {
        assert_eq!(store.journal_checkpoint().await.unwrap(), 0);
        let batch = sample();
        assert_eq!(store.write_usage_batch(&batch, 100).await.unwrap(), 5);
        let before = report(&store, UsageQuery::default()).await;
        assert_eq!(before.totals.requests, 5);

        assert_eq!(store.write_usage_batch(&batch, 200).await.unwrap(), 0, "replay adds nothing");
        assert_eq!(report(&store, UsageQuery::default()).await, before, "rollup unchanged by a replay");
        assert_eq!(store.journal_checkpoint().await.unwrap(), 200, "checkpoint still moves");

        // Partial overlap: only r6 is new. A repeated id within one batch counts once (its first occurrence).
        let r6 = with_cost(usage("r6", BASE, Some("k9"), None, None, "m3"), 1, 2, 4.0);
        let r7 = with_cost(usage("r7", BASE, Some("k9"), None, None, "m3"), 1, 1, 8.0);
        let r7_again = with_cost(r7.clone(), 100, 100, 100.0);
        let mixed = vec![batch[4].clone(), r6, r7, r7_again];
        assert_eq!(store.write_usage_batch(&mixed, 300).await.unwrap(), 2);
        let after = report(&store, UsageQuery::default()).await;
        assert_eq!(after.totals.requests, 7);
        assert_eq!(after.totals.cost_usd, before.totals.cost_usd + 12.0);
        assert_eq!(after.totals.total_tokens, before.totals.total_tokens + 5);
        assert_eq!(store.key_spend("k9", 0).await.unwrap(), 12.0);

        // Only new ids, one of them twice: the inserts report a row fewer than sent, so the batch is
        // written again asking first, and the first occurrence is the one counted.
        let r8 = with_cost(usage("r8", BASE, Some("k9"), None, None, "m3"), 1, 1, 16.0);
        let r8_again = with_cost(r8.clone(), 100, 100, 100.0);
        assert_eq!(store.write_usage_batch(&[r8, r8_again], 350).await.unwrap(), 1);
        let last = report(&store, UsageQuery::default()).await;
        assert_eq!(last.totals.requests, 8);
        assert_eq!(last.totals.cost_usd, after.totals.cost_usd + 16.0);
        assert_eq!(store.key_spend("k9", 0).await.unwrap(), 28.0);
        assert_eq!(store.journal_checkpoint().await.unwrap(), 350);

        // An empty batch only moves the checkpoint.
        assert_eq!(store.write_usage_batch(&[], 400).await.unwrap(), 0);
        assert_eq!(store.journal_checkpoint().await.unwrap(), 400);
    })
    .await;
}

#[tokio::test]
async fn report_totals_buckets_and_filters() {
    on_each_backend(|store, _| async move {
        store.write_usage_batch(&sample(), 1).await.unwrap();

        let all = report(&store, UsageQuery::default()).await;
        assert_eq!(shape(&all), [(BASE, 2, 1.5), (BASE + HOUR, 1, 1.5), (BASE + DAY + 2 * HOUR, 2, 2.25)]);
        let t = &all.totals;
        assert_eq!((t.requests, t.prompt_tokens, t.completion_tokens, t.total_tokens), (5, 101, 51, 152));
        assert_eq!(t.cost_usd, 5.25);
        let bucket = &all.buckets[0].totals;
        assert_eq!((bucket.prompt_tokens, bucket.completion_tokens, bucket.total_tokens), (30, 15, 45));

        let days = report(&store, UsageQuery { bucket: Bucket::Day, ..Default::default() }).await;
        assert_eq!(shape(&days), [(BASE, 3, 3.0), (BASE + DAY, 2, 2.25)]);
        assert_eq!(days.totals, all.totals);

        let k1 = report(&store, UsageQuery { key_id: Some("k1".into()), ..Default::default() }).await;
        assert_eq!(shape(&k1), [(BASE, 2, 1.5), (BASE + DAY + 2 * HOUR, 1, 0.25)]);

        let q = UsageQuery { user: Some("alice".into()), team: Some("t1".into()), ..Default::default() };
        assert_eq!(report(&store, q).await.totals.requests, 2);

        let q = UsageQuery { model: Some("m1".into()), bucket: Bucket::Day, ..Default::default() };
        assert_eq!(shape(&report(&store, q).await), [(BASE, 2, 2.0), (BASE + DAY, 2, 2.25)]);

        // from counts from the start of its hour; to is exclusive but includes an hour that starts before it.
        let q = UsageQuery { from_ms: Some(BASE + HOUR + 30 * 60_000), ..Default::default() };
        assert_eq!(report(&store, q).await.totals.requests, 3);
        let q = UsageQuery { to_ms: Some(BASE + DAY), ..Default::default() };
        assert_eq!(report(&store, q).await.totals.requests, 3);
        let q = UsageQuery { from_ms: Some(BASE + HOUR), to_ms: Some(BASE + HOUR + 1), ..Default::default() };
        assert_eq!(shape(&report(&store, q).await), [(BASE + HOUR, 1, 1.5)]);

        let none = report(&store, UsageQuery { team: Some("nobody".into()), ..Default::default() }).await;
        assert_eq!(none, UsageReport::default());
    })
    .await;
}

/// Whole days come from the daily rollup and the ends of a range from the hourly one; both must give the
/// same answers as summing the records themselves, whatever hour the range starts and ends in.
#[tokio::test]
async fn daily_and_hourly_rollups_agree_with_the_records() {
    on_each_backend(|store, _| async move {
        let records: Vec<UsageRecord> = (0..600)
            .map(|i| {
                let key = ["k1", "k2", "k3"][i % 3];
                let model = ["m1", "m2"][i % 2];
                let r = usage(&format!("d{i}"), BASE + i as i64 * 37 * 60_000, Some(key), None, Some("t"), model);
                with_cost(r, i as u64, 1, (i % 7) as f64 * 0.25)
            })
            .collect();
        store.write_usage_batch(&records, 1).await.unwrap();
        let ranges = [
            (BASE, BASE + 10 * DAY),
            (BASE + 90 * 60_000, BASE + 9 * DAY + 5 * HOUR + 1),
            (BASE + 3 * HOUR, BASE + 20 * HOUR),
            (BASE + DAY - HOUR, BASE + 3 * DAY + HOUR),
        ];
        for (from, to) in ranges {
            // Hour semantics: from the start of `from`'s hour, hours that start before `to`.
            let inside: Vec<&UsageRecord> =
                records.iter().filter(|r| r.ts_ms >= from / HOUR * HOUR && r.ts_ms / HOUR * HOUR < to).collect();
            let q = |bucket| UsageQuery { from_ms: Some(from), to_ms: Some(to), bucket, ..Default::default() };
            let by_day = report(&store, q(Bucket::Day)).await;
            let by_hour = report(&store, q(Bucket::Hour)).await;
            assert_eq!(by_day.totals.requests, inside.len() as u64, "{from}..{to}");
            assert_eq!(by_day.totals, by_hour.totals, "{from}..{to}");
            for day in &by_day.buckets {
                let hours: u64 = by_hour
                    .buckets
                    .iter()
                    .filter(|h| h.start_ms / DAY * DAY == day.start_ms)
                    .map(|h| h.totals.requests)
                    .sum();
                assert_eq!(day.totals.requests, hours, "day {} of {from}..{to}", day.start_ms);
            }
            let groups = store.usage_groups(GroupBy::Key, from, to, 10, None).await.unwrap();
            for g in &groups {
                let want: Vec<&&UsageRecord> = inside.iter().filter(|r| r.key_id.as_deref() == Some(&g.name)).collect();
                assert_eq!(g.totals.requests, want.len() as u64, "{} in {from}..{to}", g.name);
                assert_eq!(g.totals.prompt_tokens, want.iter().map(|r| r.prompt_tokens).sum::<u64>());
                let cost: f64 = want.iter().map(|r| r.cost_usd).sum();
                assert!((g.totals.cost_usd - cost).abs() < 1e-9, "{} in {from}..{to}", g.name);
            }
            let models = store.usage_groups(GroupBy::Model, from, to, 10, None).await.unwrap();
            assert_eq!(models.iter().map(|g| g.totals.requests).sum::<u64>(), inside.len() as u64);
        }
    })
    .await;
}

#[tokio::test]
async fn key_spend_since() {
    on_each_backend(|store, _| async move {
        store.write_usage_batch(&sample(), 1).await.unwrap();
        assert_eq!(store.key_spend("k1", 0).await.unwrap(), 1.75);
        assert_eq!(store.key_spend("k1", BASE + 30 * 60_000).await.unwrap(), 1.75, "hour of `since` counts whole");
        assert_eq!(store.key_spend("k1", BASE + HOUR).await.unwrap(), 0.25);
        assert_eq!(store.key_spend("k1", BASE + 2 * DAY).await.unwrap(), 0.0);
        assert_eq!(store.key_spend("k2", 0).await.unwrap(), 1.5);
        assert_eq!(store.key_spend("unknown", 0).await.unwrap(), 0.0);
    })
    .await;
}

#[tokio::test]
async fn data_and_checkpoint_survive_reconnect() {
    on_each_backend(|store, url| async move {
        store.write_usage_batch(&sample(), 4242).await.unwrap();
        store.insert_key(&key("k_keep", 1)).await.unwrap();
        store.close().await;

        let again = Store::connect(&url).await.unwrap(); // migrations already applied: a no-op
        assert_eq!(again.journal_checkpoint().await.unwrap(), 4242);
        assert_eq!(again.usage_report(&UsageQuery::default()).await.unwrap().totals.requests, 5);
        assert!(again.get_key("k_keep").await.unwrap().is_some());
        again.close().await;
    })
    .await;
}

#[tokio::test]
async fn concurrent_writers_add_up() {
    on_each_backend(|store, _| async move {
        let mut tasks = Vec::new();
        for writer in 0..4 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                for batch in 0..5 {
                    let records: Vec<UsageRecord> = (0..100)
                        .map(|i| {
                            let id = format!("w{writer}-b{batch}-{i}");
                            let model = if i % 2 == 0 { "m1" } else { "m2" };
                            usage(&id, BASE + (i % 3) * HOUR, Some("k1"), Some("u"), None, model)
                        })
                        .collect();
                    assert_eq!(store.write_usage_batch(&records, 1).await.unwrap(), 100);
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let r = store.usage_report(&UsageQuery::default()).await.unwrap();
        assert_eq!(r.totals.requests, 2000);
        assert_eq!(r.totals.cost_usd, 1000.0);
        assert_eq!(r.buckets.len(), 3);
    })
    .await;
}

/// 216k records over 30 days (300 an hour): the rollup answers reports with exact totals. (No timing assertions.)
#[tokio::test]
async fn report_at_scale() {
    on_each_backend(|store, _| async move {
        const N: i64 = 216_000;
        const BATCH: i64 = 6_000;
        let step = 30 * DAY / N;
        let keys = ["k1", "k2", "k3"];
        let mut expected_k2 = (0u64, 0u64, 0.0f64);
        let mut expected = (0u64, 0u64);
        for start in (0..N).step_by(BATCH as usize) {
            let records: Vec<UsageRecord> = (start..start + BATCH)
                .map(|i| {
                    let k = keys[(i % 3) as usize];
                    let model = if i % 2 == 0 { "m1" } else { "m2" };
                    let prompt = (i % 100) as u64;
                    let completion = (i % 7) as u64;
                    let cost = (i % 4) as f64 * 0.125;
                    let r = with_cost(
                        usage(&format!("s{i}"), BASE + i * step, Some(k), None, None, model),
                        prompt,
                        completion,
                        cost,
                    );
                    expected.0 += prompt;
                    expected.1 += completion;
                    if k == "k2" {
                        expected_k2.0 += 1;
                        expected_k2.1 += prompt + completion;
                        expected_k2.2 += cost;
                    }
                    r
                })
                .collect();
            assert_eq!(store.write_usage_batch(&records, start as u64).await.unwrap(), BATCH as u64);
        }

        let days = store.usage_report(&UsageQuery { bucket: Bucket::Day, ..Default::default() }).await.unwrap();
        assert_eq!(days.buckets.len(), 30);
        assert_eq!(days.totals.requests, N as u64);
        assert_eq!((days.totals.prompt_tokens, days.totals.completion_tokens), expected);
        assert!(days.buckets.iter().all(|b| b.totals.requests == N as u64 / 30));

        let q = UsageQuery { key_id: Some("k2".into()), ..Default::default() };
        let hours = store.usage_report(&q).await.unwrap();
        assert_eq!(hours.buckets.len(), 30 * 24);
        let t = &hours.totals;
        assert_eq!((t.requests, t.total_tokens), (expected_k2.0, expected_k2.1));
        assert_eq!(t.cost_usd, expected_k2.2);
        assert_eq!(store.key_spend("k2", 0).await.unwrap(), expected_k2.2);

        let q = UsageQuery { from_ms: Some(BASE + 10 * DAY), to_ms: Some(BASE + 20 * DAY), ..Default::default() };
        assert_eq!(store.usage_report(&q).await.unwrap().totals.requests, N as u64 / 3);
    })
    .await;
}

/// `sqlite::memory:` (used by tests elsewhere) is one database shared by the whole pool.
#[tokio::test]
async fn in_memory_sqlite_is_shared_across_the_pool() {
    let store = Store::connect("sqlite::memory:").await.unwrap();
    assert_eq!(store.kind(), "sqlite");
    store.insert_key(&key("k_mem", 1)).await.unwrap();
    let reads = (0..8).map(|_| {
        let store = store.clone();
        tokio::spawn(async move { store.get_key("k_mem").await.unwrap().is_some() })
    });
    for read in reads.collect::<Vec<_>>() {
        assert!(read.await.unwrap());
    }
    // A second in-memory store is a different database.
    let other = Store::connect("sqlite::memory:").await.unwrap();
    assert!(other.list_keys().await.unwrap().is_empty());
}

#[tokio::test]
async fn each_journal_keeps_its_own_checkpoint() {
    on_each_backend(|store, _| async move {
        let (a, b) = (store.for_journal("gateway-a"), store.for_journal("gateway-b"));
        a.write_usage_batch(&[usage("ja-1", BASE, None, None, None, "m")], 11).await.unwrap();
        b.write_usage_batch(&[usage("jb-1", BASE, None, None, None, "m")], 22).await.unwrap();
        assert_eq!(a.journal_checkpoint().await.unwrap(), 11);
        assert_eq!(b.journal_checkpoint().await.unwrap(), 22);
        assert_eq!(store.for_journal("gateway-c").journal_checkpoint().await.unwrap(), 0);
    })
    .await;
}
