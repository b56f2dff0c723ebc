//! Policies as code (issue 58) through the real gateway: a table of rules × requests (keys with
//! tags and teams, headers, the day, models) with the decision each must give and the rule named
//! on every answer; routing by rule (the backend that answered); a quota spent by a cost rule;
//! load-time errors naming the rule and where; team and key rules on the admin API that may only
//! narrow; the deciding rule in the request's record.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::time::{Duration, Instant};

use http::Method;
use serde_json::{json, Value};
use switchyard_gateway::{Config, RunningGateway};
use switchyard_testkit::{TestClient, TestResponse};

use crate::common::*;

const MASTER: &str = "policies-master";

struct Stack {
    gw: RunningGateway,
    db: String,
    client: TestClient,
}

async fn stack(backends: &str, policies: &str) -> Stack {
    let dir = scratch_dir();
    let db = db_url(&dir);
    let yaml = format!(
        "listen: 127.0.0.1:0\nauth: {{master_key: {MASTER}}}\nstorage: {{url: '{db}', usage_journal_dir: '{}/usage'}}\n\
         {policies}\nbackends:\n{backends}",
        dir.display()
    );
    Stack { gw: gateway_yaml(&yaml).await, db, client: TestClient::new() }
}

impl Stack {
    async fn admin(&self, method: Method, path: &str, body: &str) -> TestResponse {
        admin_as(&self.client, &self.gw, MASTER, method, path, body).await
    }

    async fn key(&self, body: Value) -> String {
        let r = self.admin(Method::POST, "/admin/keys", &body.to_string()).await;
        assert_eq!(r.status, 201, "{}", r.text());
        r.json()["key"].as_str().unwrap().to_owned()
    }

    async fn chat(&self, key: &str, model: &str, headers: &[(&str, &str)]) -> TestResponse {
        let body = json!({"model": model, "messages": [{"role": "user", "content": "hello"}]});
        let auth = format!("Bearer {key}");
        let mut all = vec![("authorization", auth.as_str())];
        all.extend_from_slice(headers);
        let url = format!("{}/v1/chat/completions", self.gw.url());
        self.client.post_json(&url, body.to_string().as_bytes(), &all).await.unwrap()
    }

    async fn records(&self) -> Vec<(String, Option<String>, Option<String>)> {
        let sql = "SELECT model_served, policy, tags FROM usage_records ORDER BY ts_ms";
        if self.db.starts_with("sqlite:") {
            let pool = sqlx::SqlitePool::connect(&self.db).await.unwrap();
            return sqlx::query_as(sql).fetch_all(&pool).await.unwrap();
        }
        let pool = sqlx::PgPool::connect(&self.db).await.unwrap();
        sqlx::query_as(sql).fetch_all(&pool).await.unwrap()
    }
}

/// (who, model, headers, status, the named rule, the model that answered)
type Row<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)], u16, &'a str, &'a str);

fn policy(r: &TestResponse) -> &str {
    r.header("x-switchyard-policy").unwrap_or("-")
}

fn backend(r: &TestResponse) -> &str {
    r.header("x-switchyard-backend").unwrap_or("-")
}

/// Today's weekday as `time.weekday` counts it (0 = Sunday), from the Unix epoch (a Thursday).
fn weekday_now() -> u64 {
    let days = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() / 86_400;
    (days + 4) % 7
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_decision_table_holds_with_the_deciding_rule_named() {
    let (cloud, onprem) = (mock(&["small", "big", "secret"]).await, mock(&["small", "big"]).await);
    let backends = format!(
        "  - {{name: cloud, url: '{}', models: [small, big, secret]}}\n  - {{name: onprem, url: '{}', models: [small, big]}}\n",
        cloud.url(),
        onprem.url()
    );
    let today = weekday_now();
    let policies = format!(
        r#"quotas: {{metered: {{limit: 3, period: hour}}}}
policies:
  - {{name: admins, when: "'admin' in key.tags", then: allow}}
  - {{name: no-secret, when: "request.model == 'secret'", then: deny, message: "secret is closed"}}
  - {{name: interns-small, when: "'intern' in key.tags && request.model != 'small'", then: route, route: {{model: small}}}}
  - {{name: restricted-onprem, when: "request.headers['x-data-class'] == 'restricted'", then: route, route: {{backends: [onprem]}}}}
  - {{name: closed-today, when: "'weekday-blocked' in key.tags && time.weekday == {today}", then: deny}}
  - {{name: research-tags, when: "key.team == 'research'", then: set, set: {{tags: [research], headers: {{x-cost-centre: r-42}}}}}}
  - {{name: metered, when: "'metered' in key.tags", then: cost, cost: "1", quota: metered}}
"#
    );
    let s = stack(&backends, &policies).await;
    let admin = s.key(json!({"name": "a", "metadata": {"tags": ["admin"]}})).await;
    let intern = s.key(json!({"name": "i", "metadata": {"tags": ["intern"]}})).await;
    let plain = s.key(json!({"name": "p"})).await;
    let blocked = s.key(json!({"name": "b", "metadata": {"tags": ["weekday-blocked"]}})).await;
    let research = s.key(json!({"name": "r", "metadata": {"team": "research"}})).await;
    let metered = s.key(json!({"name": "m", "metadata": {"tags": ["metered"]}})).await;
    let restricted = [("x-data-class", "restricted")];

    let table: Vec<Row> = vec![
        (&admin, "secret", &[], 200, "admins", "secret"),
        (&plain, "secret", &[], 403, "no-secret", "-"),
        (&intern, "secret", &[], 403, "no-secret", "-"),
        (&intern, "big", &[], 200, "interns-small", "small"),
        (&intern, "small", &[], 200, "-", "small"),
        (&plain, "big", &[], 200, "-", "big"),
        (&plain, "big", &restricted, 200, "restricted-onprem", "big"),
        (&blocked, "small", &[], 403, "closed-today", "-"),
        (&research, "small", &[], 200, "-", "small"),
    ];
    for (who, model, headers, status, rule, served) in table {
        let r = s.chat(who, model, headers).await;
        let what = format!("{model} {headers:?} -> {} {}", r.status, r.text());
        assert_eq!((r.status.as_u16(), policy(&r)), (status, rule), "{what}");
        if status == 200 {
            assert_eq!(r.header("x-switchyard-model"), Some(served), "{what}");
        } else {
            let body = r.json();
            assert_eq!(body["error"]["code"], "policy_denied", "{what}");
            assert!(body["error"]["message"].as_str().unwrap().contains(rule), "{what}");
        }
        if !headers.is_empty() {
            assert_eq!(backend(&r), "onprem", "a restricted request goes only on premises: {what}");
        }
    }
    // Restricted requests never leave the premises, whatever the balance would pick.
    for _ in 0..6 {
        assert_eq!(backend(&s.chat(&plain, "small", &restricted).await), "onprem");
    }
    let r = s.chat(&plain, "secret", &[]).await;
    assert!(r.text().contains("secret is closed"), "the rule's message: {}", r.text());

    // A quota of 3 per hour: the fourth metered request is a 429 naming the rule.
    for _ in 0..3 {
        assert_eq!(s.chat(&metered, "small", &[]).await.status, 200);
    }
    let r = s.chat(&metered, "small", &[]).await;
    assert_eq!((r.status.as_u16(), policy(&r)), (429, "metered"), "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "quota_exceeded");
    assert!(r.header("retry-after").is_some());
    assert_eq!(s.chat(&plain, "small", &[]).await.status, 200, "the quota charges only metered keys");

    // The decision is in the record: the deciding rule, and the tags a `set` rule gave.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let rows = s.records().await;
        let routed = rows.iter().any(|r| r.1.as_deref() == Some("interns-small") && r.0 == "small");
        let tagged = rows.iter().any(|r| r.2.as_deref() == Some(r#"["research"]"#));
        let refused = rows.iter().filter(|r| r.1.as_deref() == Some("no-secret")).count() == 3;
        let spent = rows.iter().any(|r| r.1.as_deref() == Some("metered"));
        if routed && tagged && refused && spent {
            break;
        }
        assert!(Instant::now() < deadline, "records: {rows:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let metrics = s.client.get(&format!("{}/metrics", s.gw.url())).await.unwrap().text();
    assert!(metrics.contains(r#"switchyard_policy_decisions_total{rule="no-secret",decision="deny"} 3"#), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_that_cannot_hold_never_load() {
    let base = "listen: 127.0.0.1:0\nbackends:\n  - {name: b, url: 'http://127.0.0.1:9', models: [m]}\nquotas: {q: {limit: 1, period: 1h}}\n";
    let cases = [
        (
            r#"{name: typo, when: "request.modle == 'm'", then: deny}"#,
            "policies.typo.when",
            "unknown attribute `request.modle` (at characters",
        ),
        (
            r#"{name: types, when: "request.size == 'big'", then: deny}"#,
            "policies.types.when",
            "compares int with string",
        ),
        (
            r#"{name: later, when: "mcp.tool == 'x'", then: route, route: {model: m}}"#,
            "policies.later.when",
            "known only in the mcp phase",
        ),
        (r#"{name: nowhere, then: route, route: {model: gone}}"#, "policies.nowhere.route", "no backend serves `gone`"),
        (r#"{name: spend, then: cost, cost: "1", quota: nope}"#, "policies.spend.quota", "no quota `nope`"),
        (r#"{name: mixed, then: cost, cost: "request.size * 0.5", quota: q}"#, "policies.mixed.cost", "use double"),
    ];
    for (rule, path, expected) in cases {
        let yaml = format!("{base}policies:\n  - {rule}\n");
        let e = Config::from_yaml(&yaml, &test_env(&yaml)).expect_err(rule).to_string();
        assert!(e.contains(path) && e.contains(expected), "{rule}: {e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn team_and_key_rules_may_only_narrow() {
    let m = mock(&["small", "big"]).await;
    let backends = format!("  - {{name: b, url: '{}', models: [small, big]}}\n", m.url());
    let org = r#"policies:
  - {name: no-big, when: "request.model == 'big' && !('trusted' in key.tags)", then: deny}
"#;
    let s = stack(&backends, org).await;
    // A team rule that would allow what the organisation denies is refused, naming it.
    let widen = json!({"name": "t1", "policies": [{"name": "let-big", "when": "true", "then": "allow"}]});
    let r = s.admin(Method::POST, "/admin/teams", &widen.to_string()).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("let-big") && r.text().contains("no-big"), "{}", r.text());
    // A rule that does not type-check is refused with where.
    let typo = json!({"name": "t1", "policies": [{"name": "typo", "when": "key.tagz == 1", "then": "deny"}]});
    let r = s.admin(Method::POST, "/admin/teams", &typo.to_string()).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("typo") && r.text().contains("unknown attribute `key.tagz`"), "{}", r.text());
    // A team that narrows: no streams; its key narrows further: no `small` for it.
    let narrow = json!({"name": "t1", "policies": [{"name": "no-streams", "when": "request.stream", "then": "deny"}]});
    let r = s.admin(Method::POST, "/admin/teams", &narrow.to_string()).await;
    assert_eq!(r.status, 201, "{}", r.text());
    let team = r.json()["id"].as_str().unwrap().to_owned();
    let key_rules =
        json!([{"name": "not-small", "when": "request.model == 'small'", "then": "deny", "message": "use big"}]);
    let key =
        s.key(json!({"name": "k", "team_id": team, "metadata": {"tags": ["trusted"]}, "policies": key_rules})).await;
    let r = s.chat(&key, "small", &[]).await;
    assert_eq!((r.status.as_u16(), policy(&r)), (403, "not-small"), "{}", r.text());
    let r = s.chat(&key, "big", &[]).await;
    assert_eq!(r.status, 200, "trusted: the organisation's rule does not hold; {}", r.text());
    let body = json!({"model": "big", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let r = s
        .client
        .post_json(
            &format!("{}/v1/chat/completions", s.gw.url()),
            body.to_string().as_bytes(),
            &[("authorization", &format!("Bearer {key}"))],
        )
        .await
        .unwrap();
    assert_eq!((r.status.as_u16(), policy(&r)), (403, "no-streams"), "the team's rule: {}", r.text());
    // A key's allow under the organisation's deny is refused too.
    let r = s
        .admin(
            Method::POST,
            "/admin/keys",
            &json!({"name": "w", "policies": [{"name": "mine", "then": "allow"}]}).to_string(),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("mine"), "{}", r.text());
    // Every level is listed.
    let r = s.admin(Method::GET, "/admin/policies", "").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let all = r.json();
    assert_eq!(all["organisation"][0]["name"], "no-big");
    assert_eq!(all["teams"][0]["policies"][0]["name"], "no-streams");
    assert_eq!(all["keys"][0]["policies"][0]["name"], "not-small");
}

/// `switchyard policy test` evaluates the rules against a request without serving it: the same
/// decision the gateway gives, the rule named, routes, tags, costs; a tool call by its `mcp`.
#[test]
fn policy_test_explains_a_request_without_serving_it() {
    let dir = scratch_dir();
    let config = dir.join("gateway.yaml");
    std::fs::write(
        &config,
        r#"listen: 127.0.0.1:0
backends:
  - {name: cloud, url: 'http://127.0.0.1:9', models: [small, big]}
quotas: {tokens: {limit: 100000, period: day}}
policies:
  - {name: interns-small, when: "'intern' in key.tags && request.model != 'small'", then: route, route: {model: small}}
  - {name: night, when: "request.model == 'big' && time.now.getHours('Europe/Paris') >= 22", then: deny, message: "big sleeps"}
  - {name: research, when: "key.team == 'research'", then: set, set: {tags: [r], headers: {x-centre: r42}}}
  - {name: charge, then: cost, cost: "double(request.estimated_tokens) * 0.5", quota: tokens}
  - {name: writers, when: "mcp.tool.startsWith('write') && !('admin' in key.tags)", then: deny}
"#,
    )
    .unwrap();
    let run = |request: Value| -> Value {
        let file = dir.join("request.json");
        std::fs::write(&file, request.to_string()).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .args(["policy", "test", "--config"])
            .arg(&config)
            .arg("--request")
            .arg(&file)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    // 2026-05-28T20:26:40Z: 22:26 in Paris.
    let night = run(json!({"request": {"model": "big", "estimated_tokens": 40}, "time": {"unix": 1_780_000_000}}));
    assert_eq!(
        (night["status"].as_u64(), night["x-switchyard-policy"].as_str()),
        (Some(403), Some("night")),
        "{night}"
    );
    let day = run(
        json!({"request": {"model": "big", "estimated_tokens": 40}, "key": {"tags": ["intern"], "team": "research"},
                         "time": {"unix": 1_779_960_000}}),
    );
    assert_eq!(day["status"], 200, "{day}");
    assert_eq!(day["x-switchyard-policy"], "interns-small", "{day}");
    assert_eq!(day["route"]["model"], "small");
    assert_eq!(day["set"]["tags"], json!(["r"]));
    assert_eq!(day["set"]["headers"]["x-centre"], "r42");
    assert_eq!(day["costs"][0], json!({"rule": "charge", "quota": "tokens", "amount": 20.0}));
    let tool = run(json!({"mcp": {"server": "files", "tool": "write_file", "arguments": {}}, "key": {"tags": []}}));
    assert_eq!(
        (tool["phase"].as_str(), tool["x-switchyard-policy"].as_str()),
        (Some("mcp"), Some("writers")),
        "{tool}"
    );
    let key_rule = run(json!({"request": {"model": "small", "stream": true}, "time": {"unix": 1_779_960_000},
                              "key_policies": [{"name": "no-streams", "when": "request.stream", "then": "deny"}]}));
    assert_eq!(key_rule["x-switchyard-policy"], "no-streams", "{key_rule}");
}

/// A cost rule's quota is one counter for the whole fleet: three instances sharing a real
/// `redis-server`, 60 requests at once spread over them, charging 0.1 each against 2.5: exactly
/// 25 are served, the rest are 429s naming the rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_is_exact_across_a_three_instance_fleet() {
    let redis = crate::common::redis::RedisServer::start();
    let backend = mock(&["m"]).await;
    let extra = format!(
        "redis: {{url: '{}'}}\nquotas: {{tenths: {{limit: 2.5, period: day}}}}\npolicies:\n  - {{name: tenth, then: cost, cost: \"0.1\", quota: tenths}}\n",
        redis.url()
    );
    let fleet =
        [gateway(&[&backend], &extra).await, gateway(&[&backend], &extra).await, gateway(&[&backend], &extra).await];
    let client = TestClient::new();
    let sends = (0..60).map(|i| {
        let url = format!("{}/v1/chat/completions", fleet[i % 3].url());
        let client = client.clone();
        async move { client.post_json(&url, chat_body("m", false).as_bytes(), &[]).await.unwrap() }
    });
    let answers = futures_util::future::join_all(sends).await;
    let served = answers.iter().filter(|r| r.status == 200).count();
    let refused: Vec<_> = answers.iter().filter(|r| r.status == 429).collect();
    assert_eq!((served, refused.len()), (25, 35), "exactly 2.5 / 0.1 served");
    assert!(refused.iter().all(|r| r.header("x-switchyard-policy") == Some("tenth")));
    assert_eq!(backend.control().request_count(), 25, "a refused request never reaches a backend");
}

/// A gateway's configuration on the store at `db`, its usage journal in `journal`.
fn shared_yaml(db: &str, journal: &std::path::Path, backends: &str, policies: &str) -> String {
    format!(
        "listen: 127.0.0.1:0\nauth: {{master_key: {MASTER}, secret: policies-secret-policies-secret-0123456789}}\n\
         storage: {{url: '{db}', usage_journal_dir: '{}'}}\n{policies}\nbackends:\n{backends}",
        journal.display()
    )
}

/// Two gateways sharing one store (the same SQLite file, or PostgreSQL in the PostgreSQL run).
async fn shared_pair(backends: &str, policies: &str) -> (Stack, RunningGateway) {
    let dir = scratch_dir();
    let db = db_url(&dir);
    let first = gateway_yaml(&shared_yaml(&db, &dir.join("a"), backends, policies)).await;
    let second = gateway_yaml(&shared_yaml(&db, &dir.join("b"), backends, policies)).await;
    (Stack { gw: first, db, client: TestClient::new() }, second)
}

/// A chat request to `gw` with `key`: its status and the rule named.
async fn decided(client: &TestClient, gw: &RunningGateway, key: &str, model: &str) -> (u16, String) {
    let body = json!({"model": model, "messages": [{"role": "user", "content": "hello"}]});
    let url = format!("{}/v1/chat/completions", gw.url());
    let r = client.post_json(&url, body.to_string().as_bytes(), &[("authorization", &format!("Bearer {key}"))]).await;
    let r = r.unwrap();
    (r.status.as_u16(), policy(&r).to_owned())
}

/// Ask `gw` until it decides `want` (another instance takes a stored change within a second).
async fn until_decided(client: &TestClient, gw: &RunningGateway, key: &str, model: &str, want: (u16, &str)) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = decided(client, gw, key, model).await;
        if (got.0, got.1.as_str()) == want {
            return;
        }
        assert!(Instant::now() < deadline, "still {got:?}, not {want:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The organisation's rules written through `/admin/policies`: type-checked with where, refused
/// where a team's rule would widen them (409 naming both), applied at once by the instance that
/// took the change and within a second by another sharing the store, loaded by an instance
/// started later before its first request, audited, listed after the configuration's (which are
/// read-only there), replaced and removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn organisation_rules_written_through_the_api_apply_across_a_fleet() {
    let m = mock(&["small", "big"]).await;
    let backends = format!("  - {{name: b, url: '{}', models: [small, big]}}\n", m.url());
    let config_rule =
        "policies:\n  - {name: from-file, when: \"request.model == 'small'\", then: set, set: {tags: [file]}}\n";
    let (s, other) = shared_pair(&backends, config_rule).await;
    let intern = s.key(json!({"name": "intern", "metadata": {"tags": ["intern"]}})).await;
    let lead = s.key(json!({"name": "lead"})).await;
    let rule = json!({"name": "interns-no-big", "when": "'intern' in key.tags && request.model == 'big'",
                      "then": "deny", "message": "big is for leads"});

    // Checked as the configuration's rules are: a type error names the rule, field and where.
    let typo = json!({"name": "typo", "when": "key.tags == 'x'", "then": "deny"});
    let r = s.admin(Method::POST, "/admin/policies", &typo.to_string()).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("typo") && r.text().contains("at characters"), "{}", r.text());
    let r = s
        .admin(Method::POST, "/admin/policies", r#"{"name": "q", "then": "cost", "cost": "1", "quota": "none"}"#)
        .await;
    assert_eq!(r.status, 400, "an unknown quota: {}", r.text());
    let r = s.admin(Method::PUT, "/admin/policies/from-file", &json!({"then": "allow"}).to_string()).await;
    assert_eq!(r.status, 409, "the configuration's rule is read-only here: {}", r.text());

    // A team whose `allow` the new deny would make a widening: the organisation's change is refused.
    let team = json!({"name": "t", "policies": [{"name": "t-allow", "when": "request.stream", "then": "allow"}]});
    let r = s.admin(Method::POST, "/admin/teams", &team.to_string()).await;
    assert_eq!(r.status, 201, "{}", r.text());
    let team = r.json()["id"].as_str().unwrap().to_owned();
    let r = s.admin(Method::POST, "/admin/policies", &rule.to_string()).await;
    assert_eq!(r.status, 409, "{}", r.text());
    assert!(r.text().contains("t-allow") && r.text().contains("interns-no-big"), "{}", r.text());
    let r = s.admin(Method::PATCH, &format!("/admin/teams/{team}"), r#"{"policies": []}"#).await;
    assert_eq!(r.status, 200, "{}", r.text());

    // Written: the instance that took it applies it at once, the other within a second.
    let r = s.admin(Method::POST, "/admin/policies", &rule.to_string()).await;
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(r.json()["source"], "api");
    assert_eq!(decided(&s.client, &s.gw, &intern, "big").await, (403, "interns-no-big".to_owned()));
    assert_eq!(decided(&s.client, &s.gw, &lead, "big").await, (200, "-".to_owned()));
    until_decided(&s.client, &other, &intern, "big", (403, "interns-no-big")).await;
    let r = s.admin(Method::POST, "/admin/policies", &rule.to_string()).await;
    assert_eq!(r.status, 409, "a second create of the same name: {}", r.text());
    // Now a team may not allow under it either.
    let widen = json!({"policies": [{"name": "t-allow", "then": "allow"}]});
    let r = s.admin(Method::PATCH, &format!("/admin/teams/{team}"), &widen.to_string()).await;
    assert_eq!(r.status, 400, "{}", r.text());

    // An instance started later has the stored rules before its first request.
    let dir = scratch_dir();
    let yaml = shared_yaml(&s.db, &dir, &backends, config_rule);
    let late = gateway_yaml(&yaml).await;
    assert_eq!(decided(&s.client, &late, &intern, "big").await, (403, "interns-no-big".to_owned()));
    // `switchyard policy test --stored` evaluates them as the gateway does.
    std::fs::write(dir.join("gateway.yaml"), &yaml).unwrap();
    std::fs::write(dir.join("request.json"), r#"{"request": {"model": "big"}, "key": {"tags": ["intern"]}}"#).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["policy", "test", "--stored", "--config"])
        .arg(dir.join("gateway.yaml"))
        .arg("--request")
        .arg(dir.join("request.json"))
        .env("SWITCHYARD_MASTER_KEY", MASTER)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let decision: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(decision["x-switchyard-policy"], "interns-no-big", "{decision}");

    // Listed after the configuration's; one shown alone.
    let all = s.admin(Method::GET, "/admin/policies", "").await.json();
    let names: Vec<(&str, &str)> = all["organisation"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["name"].as_str().unwrap(), r["source"].as_str().unwrap()))
        .collect();
    assert_eq!(names, [("from-file", "config"), ("interns-no-big", "api")]);
    let one = s.admin(Method::GET, "/admin/policies/interns-no-big", "").await;
    assert_eq!((one.status.as_u16(), one.json()["created_by"].is_string()), (200, true), "{}", one.text());

    // Replaced (every model for interns), then removed: each seen by the other instance.
    let wider = json!({"when": "'intern' in key.tags", "then": "deny", "message": "interns wait"});
    let r = s.admin(Method::PUT, "/admin/policies/interns-no-big", &wider.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    until_decided(&s.client, &other, &intern, "small", (403, "interns-no-big")).await;
    let r = s.admin(Method::DELETE, "/admin/policies/interns-no-big", "").await;
    assert_eq!(r.status, 200, "{}", r.text());
    until_decided(&s.client, &other, &intern, "big", (200, "-")).await;
    assert_eq!(s.admin(Method::DELETE, "/admin/policies/interns-no-big", "").await.status, 404);

    // Audited: who made, changed and removed it, with the rule before and after.
    let audit = s.admin(Method::GET, "/admin/audit?limit=100", "").await.json();
    let actions: Vec<&str> = audit["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["target"] == "interns-no-big")
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["policy.delete", "policy.update", "policy.create"], "{audit}");
}
