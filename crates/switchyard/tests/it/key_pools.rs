//! Key pools, black-box (issue 53): a backend with several keys (`api_keys`) against a mock
//! provider that limits each key (`x-ratelimit-*` on every answer, a 429 with `retry-after-ms`
//! past the limit) and refuses a revoked one (401). While any key has headroom the client sees no
//! error; the load is spread by what each key has left; a 429 moves the request to another key
//! of the same backend, not to another backend; a refused key is taken out; records and metrics
//! name the key, never the secret; and a fleet sharing Redis keeps every key under its limit.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::json;
use switchyard_testkit::{MockServer, TestClient, TestResponse};

use crate::common::redis::RedisServer;
use crate::common::*;

const MASTER: &str = "master-key-for-key-pools";
const PER_KEY: u64 = 5;

fn minute() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() / 60
}

/// Wait for a fresh minute when this one has too little left for a test's requests, so the
/// provider's windows (calendar minutes) and the gateway's do not turn over mid-test.
async fn a_whole_minute_ahead(needed: Duration) {
    let into = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64 % 60_000;
    if 60_000 - into < needed.as_millis() as u64 {
        tokio::time::sleep(Duration::from_millis(60_000 - into + 50)).await;
    }
}

fn pool_backend(mock: &MockServer, limits: &str) -> String {
    format!(
        "  - {{name: pooled, url: '{}', api_keys: [{{name: alpha, key: k-alpha{limits}}}, {{name: beta, key: k-beta{limits}}}, \
         {{name: gamma, key: k-gamma{limits}}}, {{name: stale, key: k-stale{limits}}}]}}\n",
        mock.url()
    )
}

async fn chat(client: &TestClient, url: &str) -> TestResponse {
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).to_string();
    client
        .post_json(
            &format!("{url}/v1/chat/completions"),
            body.as_bytes(),
            &[("authorization", &format!("Bearer {MASTER}"))],
        )
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_on_one_key_costs_the_client_nothing_while_another_key_has_headroom() {
    let provider = mock(&["m"]).await;
    provider.control().set_key_limits(PER_KEY, Duration::from_secs(60), &["k-stale"]);
    let spare = mock(&["m"]).await;
    let dir = scratch_dir();
    // No limits configured: the gateway learns them from the provider's headers and 429s. A
    // second backend is there to fail over to; a key's 429 must not send requests to it.
    let yaml = format!(
        "listen: 127.0.0.1:0\nstorage: {{url: '{}', usage_journal_dir: '{}/usage'}}\nauth: {{master_key: {MASTER}}}\n\
         routing: {{strategy: priority, retry_after_max: 1ms}}\nbackends:\n{}  - {{name: spare, url: '{}', priority: -1}}\n",
        db_url(&dir),
        dir.display(),
        pool_backend(&provider, ""),
        spare.url()
    );
    let gw = gateway_yaml(&yaml).await;
    let client = TestClient::new();
    a_whole_minute_ahead(Duration::from_secs(20)).await;
    let started = minute();
    // Three good keys of five requests each: fifteen answers, sent a few at a time.
    let mut statuses = Vec::new();
    for _ in 0..5 {
        let mut batch = tokio::task::JoinSet::new();
        for _ in 0..3 {
            let (client, url) = (client.clone(), gw.url());
            batch.spawn(async move { chat(&client, &url).await.status.as_u16() });
        }
        while let Some(s) = batch.join_next().await {
            statuses.push(s.unwrap());
        }
    }
    assert_eq!(statuses, vec![200; 15], "no client-visible error while a key had headroom");
    let (served, _limited) = provider.control().key_usage();
    assert_eq!(spare.control().request_count(), 0, "a key's 429 moved the request to another key, not backend");
    if minute() == started {
        let per_key: HashMap<&str, u64> =
            ["k-alpha", "k-beta", "k-gamma"].iter().map(|k| (*k, served.get(*k).copied().unwrap_or(0))).collect();
        assert_eq!(
            per_key,
            ["k-alpha", "k-beta", "k-gamma"].iter().map(|k| (*k, PER_KEY)).collect(),
            "spread by headroom"
        );
        // Every key is spent: the next request is the provider's 429 (or the spare's answer),
        // never a hang.
        let r = chat(&client, &gw.url()).await;
        assert!(r.status == 429 || r.header("x-switchyard-backend") == Some("spare"), "{} {}", r.status, r.text());
    }
    assert_eq!(served.get("k-stale"), None, "the revoked key served nothing");
    let metrics = client.get(&format!("{}/metrics", gw.url())).await.unwrap().text();
    let line = |name: &str| metrics.lines().find(|l| l.starts_with(name)).map(str::to_owned);
    assert_eq!(
        line("switchyard_backend_key_state{backend=\"pooled\",key=\"stale\",state=\"refused\"}").as_deref(),
        Some("switchyard_backend_key_state{backend=\"pooled\",key=\"stale\",state=\"refused\"} 1"),
        "{metrics}"
    );
    // Taken out at its first 401: only requests already on their way with it (at most one per
    // request in flight at once, three here) were sent with it.
    let stale_sent = line("switchyard_backend_key_requests_total{backend=\"pooled\",key=\"stale\"}")
        .and_then(|l| l.rsplit(' ').next()?.parse::<u32>().ok());
    assert!(stale_sent.is_some_and(|n| (1..=3).contains(&n)), "{metrics}");
    assert!(!metrics.contains("k-alpha") && !metrics.contains("k-stale"), "no secret in the metrics");
    // The records name the key each request went with, never its secret.
    let rows = request_log(&client, &gw, MASTER, 15).await;
    let keys: Vec<&str> = rows.iter().filter_map(|r| r["backend_key"].as_str()).collect();
    assert!(keys.len() >= 15 && keys.iter().all(|k| ["alpha", "beta", "gamma"].contains(k)), "{rows:?}");
    assert!(!serde_json::to_string(&rows).unwrap().contains("k-alpha"));
}

/// Three instances sharing Redis, each key's limit configured: the fleet together never sends a
/// key past it (the provider answers no 429), and spreads the load over the keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_fleet_no_key_goes_over_its_limit() {
    let redis = RedisServer::start();
    let provider = mock(&["m"]).await;
    provider.control().set_key_limits(PER_KEY, Duration::from_secs(60), &["k-stale"]);
    let dir = scratch_dir();
    let db = db_url(&dir);
    let mut gateways = Vec::new();
    for i in 0..3 {
        let yaml = format!(
            "listen: 127.0.0.1:0\nstorage: {{url: '{db}', usage_journal_dir: '{}/usage{i}'}}\n\
             auth: {{master_key: {MASTER}, secret: {TEST_SECRET}}}\nredis: {{url: '{}', timeout: 3s}}\n\
             routing: {{retry_after_max: 1ms}}\nbackends:\n{}",
            dir.display(),
            redis.url(),
            pool_backend(&provider, &format!(", rpm: {PER_KEY}"))
        );
        gateways.push(gateway_yaml(&yaml).await);
    }
    let client = TestClient::new();
    a_whole_minute_ahead(Duration::from_secs(20)).await;
    let started = minute();
    let mut statuses = Vec::new();
    for round in 0..4 {
        let mut burst = tokio::task::JoinSet::new();
        for i in 0..6 {
            let (client, url) = (client.clone(), gateways[(round + i) % 3].url());
            burst.spawn(async move { chat(&client, &url).await.status.as_u16() });
        }
        while let Some(s) = burst.join_next().await {
            statuses.push(s.unwrap());
        }
    }
    let (served, limited) = provider.control().key_usage();
    if minute() == started {
        // Fifteen fit (three good keys of five); the other nine found every key spent.
        assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 15, "{statuses:?}");
        for key in ["k-alpha", "k-beta", "k-gamma"] {
            assert_eq!(served.get(key).copied(), Some(PER_KEY), "{served:?}");
        }
        assert_eq!(limited, 0, "no key was sent past its limit: {served:?}");
    }
    assert_eq!(served.get("k-stale"), None);
}
