//! Experiments (issue 57) through the real gateway: stable weighted assignment named by
//! `x-switchyard-variant`; shadows sent after the answer, billed apart, never failing it, kept
//! as pairs; feedback by API and by header; a judge model and a webhook scoring off the request
//! path; results with intervals; a failing variant stopped; adaptive allocation picking the
//! better variant; bad input named.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::collections::HashMap;
use std::time::{Duration, Instant};

use http::Method;
use serde_json::{json, Value};
use switchyard_gateway::{Config, RunningGateway};
use switchyard_testkit::{MockConfig, MockServer, TestClient, TestResponse};

use crate::common::json_service::json_service;
use crate::common::*;

const MASTER: &str = "experiments-master";

struct Stack {
    gw: RunningGateway,
    db: String,
    client: TestClient,
}

/// The gateway over `backends` (YAML list entries) with `experiments` (YAML), a master key and
/// its own SQLite database.
async fn stack(backends: &str, experiments: &str) -> Stack {
    let dir = scratch_dir();
    let db = db_url(&dir);
    let yaml = format!(
        "listen: 127.0.0.1:0\nauth: {{master_key: {MASTER}}}\nstorage: {{url: '{db}', usage_journal_dir: '{}/usage'}}\n\
         experiments:\n{experiments}\nbackends:\n{backends}",
        dir.display()
    );
    Stack { gw: gateway_yaml(&yaml).await, db, client: TestClient::new() }
}

impl Stack {
    async fn admin(&self, method: Method, path: &str, body: &str) -> TestResponse {
        admin_as(&self.client, &self.gw, MASTER, method, path, body).await
    }

    async fn key(&self, body: &str) -> (String, String) {
        let r = self.admin(Method::POST, "/admin/keys", body).await;
        assert_eq!(r.status, 201, "{}", r.text());
        (r.json()["id"].as_str().unwrap().to_owned(), r.json()["key"].as_str().unwrap().to_owned())
    }

    async fn post(&self, path: &str, key: &str, body: &Value, headers: &[(&str, &str)]) -> TestResponse {
        let auth = format!("Bearer {key}");
        let mut all = vec![("authorization", auth.as_str())];
        all.extend_from_slice(headers);
        self.client.post_json(&format!("{}{path}", self.gw.url()), body.to_string().as_bytes(), &all).await.unwrap()
    }

    async fn chat(&self, key: &str, model: &str, user: &str) -> TestResponse {
        let body = json!({"model": model, "user": user, "messages": [{"role": "user", "content": "hello"}]});
        self.post("/v1/chat/completions", key, &body, &[]).await
    }

    /// The results, once `ready` holds of them (they fill as records and scores land).
    async fn results_when(&self, name: &str, ready: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let r = self.admin(Method::GET, &format!("/admin/experiments/{name}"), "").await;
            assert_eq!(r.status, 200, "{}", r.text());
            let results = r.json();
            if ready(&results) {
                return results;
            }
            assert!(Instant::now() < deadline, "results never got there: {results:#}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn rows(&self, sql: &str) -> Vec<(Option<String>, Option<String>, Option<String>)> {
        if self.db.starts_with("sqlite:") {
            let pool = sqlx::SqlitePool::connect(&self.db).await.unwrap();
            return sqlx::query_as(sql).fetch_all(&pool).await.unwrap();
        }
        let pool = sqlx::PgPool::connect(&self.db).await.unwrap();
        sqlx::query_as(sql).fetch_all(&pool).await.unwrap()
    }
}

fn variant(r: &TestResponse) -> String {
    r.header("x-switchyard-variant").unwrap_or("-").to_owned()
}

fn request_id(r: &TestResponse) -> String {
    r.header("x-request-id").unwrap().to_owned()
}

fn stat<'a>(results: &'a Value, variant: &str, metric: &str) -> &'a Value {
    &results["variants"][variant]["metrics"][metric]
}

async fn mocks() -> (MockServer, MockServer, MockServer) {
    (mock(&["m", "m1"]).await, mock(&["m2"]).await, mock(&["m3"]).await)
}

fn three(a: &MockServer, b: &MockServer, c: &MockServer) -> String {
    format!(
        "  - {{name: b0, url: '{}', models: [m, m1]}}\n  - {{name: b1, url: '{}', models: [m2]}}\n  - {{name: b2, url: '{}', models: [m3]}}\n",
        a.url(),
        b.url(),
        c.url()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_user_keeps_one_variant_and_the_shares_follow_the_weights() {
    let (a, b, c) = mocks().await;
    let s = stack(
        &three(&a, &b, &c),
        "  split: {model: m, unit: user, variants: {a: {model: m1}, b: {model: m2, weight: 20}}}",
    )
    .await;
    let mut seen: HashMap<String, String> = HashMap::new();
    for round in 0..2 {
        for user in 0..500 {
            let r = s.chat(MASTER, "m", &format!("user-{user}")).await;
            assert_eq!(r.status, 200, "{}", r.text());
            let v = variant(&r);
            // The variant's model answered: m1 on b0, m2 on b1.
            let expected_backend = if v == "a" { "b0" } else { "b1" };
            assert_eq!(backend_of(&r), expected_backend, "{v}");
            assert_eq!(r.json()["model"], if v == "a" { "m1" } else { "m2" });
            match round {
                0 => {
                    seen.insert(user.to_string(), v);
                }
                _ => assert_eq!(seen[&user.to_string()], v, "user-{user} changed variant"),
            }
        }
    }
    let b_share = seen.values().filter(|v| *v == "b").count() as f64 / 500.0;
    // 500 users: the hash's split has a standard deviation of 1.8 points; 6 points is over 3 of them.
    assert!((b_share - 0.2).abs() < 0.06, "b got {b_share}");
    // A model no experiment covers is answered as always.
    assert_eq!(variant(&s.chat(MASTER, "m3", "u").await), "-");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feedback_by_api_and_by_header_lands_on_the_request_and_its_variant_with_intervals() {
    let (a, b, c) = mocks().await;
    let s = stack(
        &three(&a, &b, &c),
        "  fb: {model: m, unit: request, metrics: [thumbs], variants: {a: {model: m1}, b: {model: m2}}}",
    )
    .await;
    let (_, key) = s.key(r#"{"name": "app"}"#).await;
    let (_, other) = s.key(r#"{"name": "other"}"#).await;
    let mut by_variant: HashMap<String, Vec<String>> = HashMap::new();
    for i in 0..40 {
        let r = s.chat(&key, "m", &format!("u{i}")).await;
        assert_eq!(r.status, 200);
        by_variant.entry(variant(&r)).or_default().push(request_id(&r));
    }
    assert!(by_variant["a"].len() >= 5 && by_variant["b"].len() >= 5, "{by_variant:?}");
    let feedback = |id: &str, value: Value| json!({"request_id": id, "name": "thumbs", "value": value});
    // By the API: b's answers liked, a's not.
    for (v, ids) in &by_variant {
        for id in ids.iter().skip(2) {
            let value = if v == "b" { 1 } else { 0 };
            let r = s.post("/v1/feedback", &key, &feedback(id, json!(value)), &[]).await;
            assert_eq!(r.status, 200, "{}", r.text());
            assert_eq!((r.json()["variant"].as_str(), r.json()["experiment"].as_str()), (Some(v.as_str()), Some("fb")));
        }
    }
    // By a header on a follow-up request, for the first two of each.
    for (v, ids) in &by_variant {
        for id in ids.iter().take(2) {
            let header = format!("request_id={id}; thumbs={}", if v == "b" { 1 } else { 0 });
            let body = json!({"model": "m3", "messages": [{"role": "user", "content": "thanks"}]});
            let r = s.post("/v1/chat/completions", &key, &body, &[("x-switchyard-feedback", &header)]).await;
            assert_eq!(r.status, 200);
        }
    }
    // Bad feedback: clear errors, and another key's request is not found.
    let id = &by_variant["a"][0];
    let bad = [
        (json!({"request_id": id, "name": "stars", "value": 1}), 400, "name"),
        (json!({"request_id": id, "name": "thumbs", "value": "yes"}), 400, "value"),
        (json!({"request_id": "nope", "name": "thumbs", "value": 1}), 404, ""),
    ];
    for (body, status, param) in bad {
        let r = s.post("/v1/feedback", &key, &body, &[]).await;
        assert_eq!(r.status.as_u16(), status, "{body}: {}", r.text());
        if !param.is_empty() {
            assert_eq!(r.json()["error"]["param"], param, "{}", r.text());
        }
    }
    let r = s.post("/v1/feedback", &other, &feedback(id, json!(1)), &[]).await;
    assert_eq!(r.status, 404, "another key's request: {}", r.text());

    let (na, nb) = (by_variant["a"].len() as u64, by_variant["b"].len() as u64);
    let results = s
        .results_when("fb", |r| {
            stat(r, "a", "thumbs")["count"] == na
                && stat(r, "b", "thumbs")["count"] == nb
                && stat(r, "a", "latency")["count"].as_u64() == Some(na)
        })
        .await;
    assert_eq!(stat(&results, "b", "thumbs")["mean"], 1.0);
    assert_eq!(stat(&results, "a", "thumbs")["mean"], 0.0);
    assert_eq!(stat(&results, "b", "thumbs")["difference"]["mean"], 1.0, "b against the control a");
    for v in ["a", "b"] {
        for m in ["latency", "cost", "errors", "tokens"] {
            let ci = stat(&results, v, m)["ci95"].as_array().unwrap().clone();
            let mean = stat(&results, v, m)["mean"].as_f64().unwrap();
            assert!(ci[0].as_f64().unwrap() <= mean && mean <= ci[1].as_f64().unwrap(), "{v} {m}: {results:#}");
        }
    }
    assert!(stat(&results, "b", "latency")["difference"]["ci95"].is_array());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadows_go_after_the_answer_are_billed_apart_never_fail_it_and_are_kept_as_pairs() {
    let primary = mock(&["m", "mq", "mb"]).await;
    let slow_config = || MockConfig { latency: Duration::from_secs(2), ..MockConfig::default() };
    let slow = mock_with(&["m3"], slow_config()).await;
    let busy = mock_with(&["m5"], slow_config()).await;
    // A shadow backend that is down: nothing listens on its port.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let backends = format!(
        "  - {{name: b0, url: '{}', models: [m, mq, mb]}}\n  - {{name: slow, url: '{}', models: [m3]}}\n  - {{name: down, url: 'http://{closed}', models: [m4]}}\n  - {{name: busy, url: '{}', models: [m5], max_concurrency: 2}}\n",
        primary.url(),
        slow.url(),
        busy.url()
    );
    let s = stack(
        &backends,
        "  mirror: {model: m, shadow: {model: m3, sample: 1.0}}\n  dead: {model: mq, shadow: {model: m4, sample: 1.0}}\n  crowded: {model: mb, shadow: {model: m5}}",
    )
    .await;
    let (key_id, key) = s.key(r#"{"name": "app", "rpm": 1000, "budget_usd": 10}"#).await;
    let mut ids = Vec::new();
    for (path, body) in every_api("m", "what is a shadow") {
        let r = s.post(path, &key, &body, &[]).await;
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        assert_eq!(variant(&r), "control");
        // Its pair is kept once the slow shadow (2 s) answers: not yet, though the client has
        // its whole answer — the primary never waited for its shadow.
        let pairs = s.admin(Method::GET, "/admin/experiments/mirror/pairs", "").await.json();
        assert!(!pairs["data"].as_array().unwrap().iter().any(|p| p["request_id"] == request_id(&r)), "{path}");
        ids.push(request_id(&r));
    }
    let pairs = loop {
        let r = s.admin(Method::GET, "/admin/experiments/mirror/pairs", "").await;
        let pairs = r.json()["data"].as_array().unwrap().clone();
        if pairs.len() == ids.len() {
            break pairs;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for pair in &pairs {
        assert!(ids.contains(&pair["request_id"].as_str().unwrap().to_owned()));
        assert_eq!((pair["primary_model"].as_str(), pair["shadow_model"].as_str()), (Some("m"), Some("m3")));
        assert_eq!(pair["shadow_status"], 200);
        assert!(pair["request"].as_str().unwrap().contains("what is a shadow"), "{pair}");
        assert!(pair["primary_answer"].as_str().unwrap().starts_with("tok0"), "{pair}");
        assert!(pair["shadow_answer"].as_str().unwrap().starts_with("tok0"), "{pair}");
    }
    // The key was charged for its own requests only; the shadows are the experiment's.
    let sql = "SELECT key_id, variant, experiment FROM usage_records WHERE experiment = 'mirror'";
    let deadline = Instant::now() + Duration::from_secs(10);
    let rows = loop {
        let rows = s.rows(sql).await;
        if rows.len() == 2 * ids.len() || Instant::now() > deadline {
            break rows;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mine = rows.iter().filter(|r| r.0.as_deref() == Some(key_id.as_str())).count();
    let shadows: Vec<_> = rows.iter().filter(|r| r.1.as_deref() == Some("shadow")).collect();
    assert_eq!((mine, shadows.len()), (ids.len(), ids.len()), "{rows:?}");
    assert!(shadows.iter().all(|r| r.0.is_none()), "no shadow is billed to the key: {shadows:?}");
    let usage = s.admin(Method::GET, &format!("/admin/usage?key_id={key_id}"), "").await;
    assert_eq!(usage.json()["totals"]["requests"], ids.len(), "{}", usage.text());

    // A shadow whose backend is down costs the client nothing, and its pair says so; what it
    // keeps is redacted as the request log is.
    let secret = "sk-live-0123456789abcdefghij";
    let body = json!({"model": "mq", "messages": [{"role": "user", "content": format!("my key is {secret}")}]});
    let r = s.post("/v1/chat/completions", &key, &body, &[]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let pair = loop {
        let r = s.admin(Method::GET, "/admin/experiments/dead/pairs", "").await;
        if let Some(pair) = r.json()["data"].as_array().unwrap().first() {
            break pair.clone();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(pair["shadow_status"].as_u64().unwrap() >= 500, "{pair}");
    assert!(pair["shadow_answer"].is_null() && pair["primary_answer"].is_string(), "{pair}");
    let kept = pair["request"].as_str().unwrap();
    assert!(kept.contains("my key is") && !kept.contains(secret), "{pair}");
    let results = s.results_when("dead", |r| stat(r, "shadow", "errors")["count"] == 1).await;
    assert_eq!(stat(&results, "shadow", "errors")["mean"], 1.0);

    // Shadows never take a backend's last slot: with two, the first shadow (2 s) takes one and
    // the next two are refused at once, while the primaries are all answered.
    for _ in 0..3 {
        let body = json!({"model": "mb", "messages": [{"role": "user", "content": "hi"}]});
        assert_eq!(s.post("/v1/chat/completions", &key, &body, &[]).await.status, 200);
    }
    let pairs = loop {
        let r = s.admin(Method::GET, "/admin/experiments/crowded/pairs", "").await;
        let pairs = r.json()["data"].as_array().unwrap().clone();
        if pairs.len() == 3 {
            break pairs;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let statuses: Vec<u64> = pairs.iter().map(|p| p["shadow_status"].as_u64().unwrap()).collect();
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 1, "{statuses:?}");
    let text = s.client.get(&format!("{}/metrics", s.gw.url())).await.unwrap().text();
    assert_eq!(
        metric(&text, "switchyard_experiment_shadows_total{experiment=\"crowded\",outcome=\"refused\"} "),
        Some(2),
        "{text}"
    );
    assert_eq!(
        metric(&text, "switchyard_experiment_requests_total{experiment=\"crowded\",variant=\"control\"} "),
        Some(3)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_judge_model_and_a_webhook_score_answers_and_pairs_off_the_request_path() {
    let (a, b, c) = mocks().await;
    // The judge scores by a rule: a pair 0.8 / 0.3, a lone answer 0.9; it takes its time.
    let (judge, judged) = json_service(Duration::from_secs(2), |asked| {
        let task = asked["messages"][1]["content"].as_str().unwrap_or_default();
        let verdict = if task.contains("Answer B:") { r#"{"a": 0.8, "b": 0.3}"# } else { r#"Sure. {"score": 0.9}"# };
        json!({"id": "j", "object": "chat.completion", "created": 0, "model": "judge",
               "choices": [{"index": 0, "message": {"role": "assistant", "content": verdict}, "finish_reason": "stop"}],
               "usage": {"prompt_tokens": 50, "completion_tokens": 5, "total_tokens": 55}})
    })
    .await;
    let (hook, hooked) = json_service(Duration::ZERO, |_| json!({"score": 0.7, "shadow": {"score": 0.4}})).await;
    let backends = format!("{}  - {{name: judge, url: 'http://{judge}', models: [judge]}}\n", three(&a, &b, &c));
    let experiments = format!(
        "  lone: {{model: m, variants: {{a: {{model: m1}}}}, metrics: [judge], judge: {{model: judge, rubric: 'Is it right?'}}, webhook: {{url: 'http://{hook}', headers: {{authorization: 'Bearer eval-token'}}}}}}\n\
         \x20 paired: {{model: m2, shadow: {{model: m3}}, metrics: [judge], judge: {{model: judge, rubric: 'Which is better?'}}, webhook: {{url: 'http://{hook}'}}}}\n\
         health: {{timeout: 10s}}"
    );
    // (The judge's slow answers would fail its health probes at the default 1 s timeout.)
    let s = stack(&backends, &experiments).await;
    for model in ["m", "m2"] {
        for i in 0..3 {
            let r = s.chat(MASTER, model, &format!("u{i}")).await;
            assert_eq!(r.status, 200, "{}", r.text());
        }
    }
    // The client had every answer before any judge's score was stored: the judge takes 2 s to
    // answer, and scoring runs after the answer, off the request path.
    let early = s.admin(Method::GET, "/admin/experiments/lone", "").await.json();
    assert!(stat(&early, "a", "judge").is_null(), "{early:#}");
    let lone =
        s.results_when("lone", |r| stat(r, "a", "judge")["count"] == 3 && stat(r, "a", "webhook")["count"] == 3).await;
    let mean = |r: &Value, v: &str, m: &str| stat(r, v, m)["mean"].as_f64().unwrap();
    let near = |x: f64, y: f64| (x - y).abs() < 1e-9;
    assert!(near(mean(&lone, "a", "judge"), 0.9) && near(mean(&lone, "a", "webhook"), 0.7), "{lone:#}");
    let paired = s
        .results_when("paired", |r| {
            stat(r, "shadow", "judge")["count"] == 3 && stat(r, "shadow", "webhook")["count"] == 3
        })
        .await;
    assert!(near(mean(&paired, "control", "judge"), 0.8), "{paired:#}");
    assert!(near(mean(&paired, "shadow", "judge"), 0.3) && near(mean(&paired, "shadow", "webhook"), 0.4), "{paired:#}");
    // The judge saw the request and both answers; the webhook the shadow's too.
    let asked = judged.lock().unwrap().clone();
    assert!(asked.iter().any(|a| a["messages"][1]["content"].as_str().unwrap().contains("Answer A:\ntok0")));
    assert!(hooked.lock().unwrap().iter().any(|h| h["shadow"]["model"] == "m3" && h["answer"].is_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_variant_whose_error_rate_passes_the_threshold_is_stopped_and_reported() {
    let good = mock(&["m", "m1"]).await;
    let failing = mock_with(&["m2"], MockConfig { fail_rate: 1.0, fail_status: 500, ..MockConfig::default() }).await;
    let backends = format!(
        "  - {{name: b0, url: '{}', models: [m, m1]}}\n  - {{name: b1, url: '{}', models: [m2]}}\n",
        good.url(),
        failing.url()
    );
    let s = stack(
        &backends,
        "  risky: {model: m, unit: request, variants: {a: {model: m1}, b: {model: m2}}, stop: {error_rate: 0.5, min_requests: 5}}",
    )
    .await;
    let mut failed = 0;
    for i in 0..60 {
        let r = s.chat(MASTER, "m", &format!("u{i}")).await;
        failed += usize::from(r.status.as_u16() >= 500);
    }
    assert!(failed >= 5, "b failed {failed} times");
    let results = s.results_when("risky", |r| r["variants"]["b"]["stopped"].is_string()).await;
    assert!(results["variants"]["b"]["stopped"].as_str().unwrap().contains("error rate"), "{results:#}");
    assert!(results["events"].as_array().unwrap().iter().any(|e| e["kind"] == "stopped" && e["variant"] == "b"));
    for i in 0..20 {
        let r = s.chat(MASTER, "m", &format!("after{i}")).await;
        assert_eq!((r.status.as_u16(), variant(&r)), (200, "a".to_owned()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adaptive_allocation_moves_traffic_to_the_better_variant_and_declares_it() {
    let (a, b, c) = mocks().await;
    let s = stack(
        &three(&a, &b, &c),
        "  bandit: {model: m, unit: request, allocation: adaptive, metrics: [thumbs], variants: {a: {model: m1}, b: {model: m2}}}",
    )
    .await;
    let mut served = HashMap::<String, usize>::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut winner = Value::Null;
    while winner.is_null() {
        assert!(Instant::now() < deadline, "no winner: {served:?}");
        for i in 0..50 {
            let r = s.chat(MASTER, "m", &format!("u{i}")).await;
            let v = variant(&r);
            // b's answers always help, a's never.
            let value = if v == "b" { 1 } else { 0 };
            let fb = json!({"request_id": request_id(&r), "name": "thumbs", "value": value});
            assert_eq!(s.post("/v1/feedback", MASTER, &fb, &[]).await.status, 200);
            *served.entry(v).or_default() += 1;
        }
        let r = s.admin(Method::GET, "/admin/experiments/bandit", "").await;
        winner = r.json()["winner"].clone();
        if winner.is_null() {
            // Let a refresh see the scores.
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    assert_eq!(winner, "b", "{served:?}");
    assert!(served["b"] > served["a"], "traffic moved to b: {served:?}");
    for i in 0..10 {
        assert_eq!(variant(&s.chat(MASTER, "m", &format!("w{i}")).await), "b");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_experiments_are_refused_naming_the_field_and_keys_never_reach_a_model_they_may_not_use() {
    let (a, b, c) = mocks().await;
    let base = format!("listen: 127.0.0.1:0\nbackends:\n{}", three(&a, &b, &c));
    let cases = [
        ("e: {model: nope, variants: {a: {model: m1}}}", "experiments.e.model"),
        ("e: {model: m, variants: {a: {model: m9}}}", "experiments.e.variants.a.model"),
        ("e: {model: m, variants: {a: {model: m1, weight: 80}, b: {model: m2, weight: 40}}}", "experiments.e.variants"),
        ("e: {model: m, shadow: {model: m3, sample: 2}}", "experiments.e.shadow.sample"),
        ("e: {model: m, allocation: adaptive, variants: {a: {model: m1}, b: {model: m2}}}", "experiments.e.metrics"),
    ];
    for (experiment, path) in cases {
        let yaml = format!("{base}experiments:\n  {experiment}\n");
        let e = Config::from_yaml(&yaml, &HashMap::new()).expect_err(experiment);
        assert_eq!(e.path, path, "{experiment}: {e}");
    }
    let s = stack(&three(&a, &b, &c), "  fixed: {model: m, variants: {a: {model: m2}}}").await;
    let r = s
        .admin(Method::POST, "/admin/experiments", r#"{"name": "x", "model": "m", "variants": {"a": {"model": "m9"}}}"#)
        .await;
    assert_eq!(r.status, 400);
    assert!(r.text().contains("experiments.x.variants.a.model"), "{}", r.text());
    let r = s.admin(Method::PUT, "/admin/experiments/fixed", r#"{"model": "m", "shadow": {"model": "m3"}}"#).await;
    assert_eq!(r.status, 409, "the configuration's experiment is changed in the file: {}", r.text());
    // Made through the API: live at once, listed, then removed.
    let r = s
        .admin(
            Method::POST,
            "/admin/experiments",
            r#"{"name": "api", "model": "m3", "variants": {"a": {"model": "m1"}}}"#,
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(variant(&s.chat(MASTER, "m3", "u").await), "a");
    let listed = s.admin(Method::GET, "/admin/experiments", "").await.json();
    assert_eq!(listed["data"].as_array().unwrap().len(), 2);
    assert_eq!(s.admin(Method::DELETE, "/admin/experiments/api", "").await.status, 200);
    assert_eq!(variant(&s.chat(MASTER, "m3", "u").await), "-");
    // A team's experiment uses only models the team may use, whoever makes it.
    let r = s.admin(Method::POST, "/admin/teams", r#"{"name": "t1", "models": ["m", "m1"]}"#).await;
    assert_eq!(r.status, 201, "{}", r.text());
    let spec =
        r#"{"name": "t1x", "team": "t1", "model": "m", "variants": {"a": {"model": "m1"}, "b": {"model": "m2"}}}"#;
    let r = s.admin(Method::POST, "/admin/experiments", spec).await;
    assert_eq!(r.status, 400);
    assert!(r.text().contains("experiments.t1x.variants.b.model: team `t1` may not use `m2`"), "{}", r.text());
    // A key allowed only `m` never reaches the variant's m2: it is answered by m, unassigned.
    let (_, narrow) = s.key(r#"{"models": ["m"]}"#).await;
    let r = s.chat(&narrow, "m", "u").await;
    assert_eq!((r.status.as_u16(), variant(&r), r.json()["model"].as_str()), (200, "-".to_owned(), Some("m")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_creates_shows_and_deletes_experiments_and_runs_the_simulation() {
    let (a, b, c) = mocks().await;
    let s = stack(&three(&a, &b, &c), "  {}").await;
    let url = s.gw.url();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .args(args)
            .args(["--url", &url, "--master-key", MASTER])
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let spec = scratch_dir().join("spec.yaml");
    std::fs::write(&spec, "model: m\nunit: request\nvariants: {a: {model: m1}, b: {model: m2, weight: 30}}\n").unwrap();
    let made: Value =
        serde_json::from_str(&run(&["experiments", "create", "cli", "--file", spec.to_str().unwrap()])).unwrap();
    assert_eq!(made["variants"][1]["weight"], 30.0);
    assert_eq!(variant(&s.chat(MASTER, "m", "u").await).len(), 1);
    let shown: Value = serde_json::from_str(&run(&["experiments", "show", "cli"])).unwrap();
    assert_eq!(shown["control"], "a");
    let listed: Value = serde_json::from_str(&run(&["experiments", "list"])).unwrap();
    assert_eq!(listed["data"][0]["name"], "cli");
    run(&["experiments", "delete", "cli"]);
    assert_eq!(variant(&s.chat(MASTER, "m", "u").await), "-");
    let simulated = run(&["experiments", "simulate", "--runs", "3"]);
    assert!(simulated.contains("the best declared 3 times"), "{simulated}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guardrails_apply_to_every_variant_and_the_shadow_is_sent_the_guarded_request() {
    let (a, b, c) = mocks().await;
    let dir = scratch_dir();
    let db = db_url(&dir);
    let yaml = format!(
        "listen: 127.0.0.1:0\nauth: {{master_key: {MASTER}}}\nstorage: {{url: '{db}', usage_journal_dir: '{}/usage'}}\n\
         guardrails:\n  default: [pii, blocker]\n  pii: {{type: pii, action: mask}}\n  blocker: {{type: keywords, keywords: [nightingale], action: block}}\n\
         experiments:\n  g: {{model: m, unit: request, variants: {{a: {{model: m1}}, b: {{model: m2}}}}, shadow: {{model: m3}}}}\n\
         backends:\n{}",
        dir.display(),
        three(&a, &b, &c)
    );
    let s = Stack { gw: gateway_yaml(&yaml).await, db, client: TestClient::new() };
    let ask = |text: &str| json!({"model": "m", "messages": [{"role": "user", "content": text}]});
    let mut variants = std::collections::HashSet::new();
    for i in 0..20 {
        let r = s.post("/v1/chat/completions", MASTER, &ask(&format!("about nightingale {i}")), &[]).await;
        assert_eq!(r.status, 400, "every variant's requests pass the guards: {}", r.text());
        let ok = s.post("/v1/chat/completions", MASTER, &ask(&format!("plain question {i}")), &[]).await;
        variants.insert(variant(&ok));
    }
    assert_eq!(variants.len(), 2, "both variants served the allowed requests: {variants:?}");
    let r = s.post("/v1/chat/completions", MASTER, &ask("mail jane.doe@example.com please"), &[]).await;
    assert_eq!(r.status, 200);
    let id = request_id(&r);
    let pair = loop {
        let r = s.admin(Method::GET, "/admin/experiments/g/pairs", "").await;
        let pairs = r.json()["data"].as_array().unwrap().clone();
        if let Some(pair) = pairs.into_iter().find(|p| p["request_id"] == id.as_str()) {
            break pair;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let kept = pair["request"].as_str().unwrap();
    assert!(
        kept.contains("mail") && !kept.contains("jane.doe@example.com"),
        "the shadow got the masked request: {pair}"
    );
    // Blocked requests sent no shadow: 20 allowed and 1 masked request have pairs, nothing else.
    let all = s.admin(Method::GET, "/admin/experiments/g/pairs", "").await.json();
    assert!(all["data"].as_array().unwrap().len() <= 21, "{all}");
}
