//! Virtual keys end to end: the admin API creates, updates and revokes them; the proxy enforces
//! them (auth, model allow-list, requests/min, parallel); bad input gets clear 4xx errors.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::time::Duration;

use crate::common::*;
use http::Method;
use switchyard_testkit::{MockConfig, TestClient, TestResponse};

const MASTER: &str = "master-key-for-tests";

async fn secured(
    mocks: &[&switchyard_testkit::MockServer],
    dir: &std::path::Path,
) -> switchyard_gateway::RunningGateway {
    let db = db_url(dir);
    let yaml = format!(
        "listen: 127.0.0.1:0\nstorage: {{url: '{db}', usage_journal_dir: '{0}/usage'}}\nauth: {{master_key: {MASTER}}}\nbackends:\n{1}",
        dir.display(),
        backends_yaml(mocks)
    );
    gateway_yaml(&yaml).await
}

async fn admin(
    client: &TestClient,
    gw: &switchyard_gateway::RunningGateway,
    method: Method,
    path: &str,
    body: &str,
) -> TestResponse {
    let auth = format!("Bearer {MASTER}");
    client
        .request(method, &format!("{}{path}", gw.url()), body.to_owned().into(), &[("authorization", &auth)])
        .await
        .unwrap()
}

async fn create_key(client: &TestClient, gw: &switchyard_gateway::RunningGateway, body: &str) -> (String, String) {
    let r = admin(client, gw, Method::POST, "/admin/keys", body).await;
    assert_eq!(r.status, 201, "{}", r.text());
    let v = r.json();
    (v["id"].as_str().unwrap().to_owned(), v["key"].as_str().unwrap().to_owned())
}

async fn chat_as(client: &TestClient, gw: &switchyard_gateway::RunningGateway, key: &str, model: &str) -> TestResponse {
    let auth = format!("Bearer {key}");
    client
        .post_json(
            &format!("{}/v1/chat/completions", gw.url()),
            chat_body(model, false).as_bytes(),
            &[("authorization", &auth)],
        )
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_the_rpm_limit_passes_under_concurrency() {
    let a = mock(&["m"]).await;
    let dir = scratch_dir();
    let gw = secured(&[&a], &dir).await;
    let client = TestClient::new();
    let (_, key) = create_key(&client, &gw, r#"{"rpm": 50}"#).await;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..200 {
        let (client, url, key) = (client.clone(), gw.url(), key.clone());
        tasks.spawn(async move {
            let auth = format!("Bearer {key}");
            client
                .post_json(
                    &format!("{url}/v1/chat/completions"),
                    chat_body("m", false).as_bytes(),
                    &[("authorization", &auth)],
                )
                .await
                .unwrap()
        });
    }
    let (mut ok, mut limited) = (0, 0);
    while let Some(r) = tasks.join_next().await {
        let r = r.unwrap();
        match r.status.as_u16() {
            200 => {
                ok += 1;
                assert_eq!(r.header("x-ratelimit-limit-requests"), Some("50"));
            }
            429 => {
                limited += 1;
                assert!(r.header("retry-after").unwrap().parse::<u64>().unwrap() >= 1);
                assert_eq!(r.header("x-ratelimit-remaining-requests"), Some("0"));
                assert_eq!(r.json()["error"]["type"], "rate_limit_error");
            }
            other => panic!("unexpected {other}: {}", r.text()),
        }
    }
    assert_eq!((ok, limited), (50, 150));
    assert_eq!(a.control().request_count(), 50, "refused requests never reached the backend");
}

#[tokio::test]
async fn revocation_bites_on_the_next_request() {
    let a = mock(&["m"]).await;
    let dir = scratch_dir();
    let gw = secured(&[&a], &dir).await;
    let client = TestClient::new();
    let (id, key) = create_key(&client, &gw, "{}").await;
    assert_eq!(chat_as(&client, &gw, &key, "m").await.status, 200);
    let r = admin(&client, &gw, Method::DELETE, &format!("/admin/keys/{id}"), "").await;
    assert_eq!(r.status, 200);
    assert!(r.json()["revoked_at"].is_string());
    let r = chat_as(&client, &gw, &key, "m").await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["error"]["code"], "key_revoked");
    // Reinstated with PATCH.
    let r = admin(&client, &gw, Method::PATCH, &format!("/admin/keys/{id}"), r#"{"revoked": false}"#).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(chat_as(&client, &gw, &key, "m").await.status, 200);
}

#[tokio::test]
async fn model_allow_list_expiry_and_parallel() {
    let a = mock_with(&["llama3", "qwen"], MockConfig { latency: Duration::from_millis(200), ..MockConfig::default() })
        .await;
    let dir = scratch_dir();
    let gw = secured(&[&a], &dir).await;
    let client = TestClient::new();
    let (_, key) = create_key(&client, &gw, r#"{"models": ["llama*"], "max_parallel": 1}"#).await;
    let r = chat_as(&client, &gw, &key, "qwen").await;
    assert_eq!(r.status, 403);
    assert_eq!(r.json()["error"]["code"], "model_not_allowed");
    // One in flight at a time.
    let first = tokio::spawn({
        let (client, url, key) = (client.clone(), gw.url(), key.clone());
        async move {
            let auth = format!("Bearer {key}");
            client
                .post_json(
                    &format!("{url}/v1/chat/completions"),
                    chat_body("llama3", false).as_bytes(),
                    &[("authorization", &auth)],
                )
                .await
                .unwrap()
        }
    });
    while a.control().request_count() == 0 {
        tokio::task::yield_now().await;
    }
    let second = chat_as(&client, &gw, &key, "llama3").await;
    assert_eq!(second.status, 429, "{}", second.text());
    assert_eq!(first.await.unwrap().status, 200);
    assert_eq!(chat_as(&client, &gw, &key, "llama3").await.status, 200, "the slot came back");

    let (_, expired) = create_key(&client, &gw, r#"{"expires_at": "2020-01-01T00:00:00Z"}"#).await;
    let r = chat_as(&client, &gw, &expired, "llama3").await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["error"]["code"], "key_expired");
}

#[tokio::test]
async fn bad_keys_and_admin_input_are_clear_4xx() {
    let a = mock(&["m"]).await;
    let dir = scratch_dir();
    let gw = secured(&[&a], &dir).await;
    let client = TestClient::new();
    for key in ["", "sk-something", "sy-0123456789abcdef.00", &format!("sy-0123456789abcdef.{}", "a".repeat(64))] {
        let r = chat_as(&client, &gw, key, "m").await;
        assert_eq!(r.status, 401, "{key}: {}", r.text());
        assert!(r.json()["error"]["message"].is_string());
    }
    let r = client
        .post_json(&format!("{}/v1/chat/completions", gw.url()), chat_body("m", false).as_bytes(), &[])
        .await
        .unwrap();
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["error"]["code"], "missing_api_key");

    // The admin API needs the master key; a virtual key is not enough.
    let (id, key) = create_key(&client, &gw, "{}").await;
    let r = client.get(&format!("{}/admin/keys", gw.url())).await.unwrap();
    assert_eq!(r.status, 401);
    let auth = format!("Bearer {key}");
    let r = client
        .request(Method::GET, &format!("{}/admin/keys", gw.url()), Default::default(), &[("authorization", &auth)])
        .await
        .unwrap();
    assert_eq!(r.status, 401);

    for (body, param) in [
        (r#"{"rpm": "fast"}"#, None),
        (r#"{"unknown": 1}"#, None),
        (r#"{"budget_period": "hourly"}"#, Some("budget_period")),
        (r#"{"expires_at": "tomorrow"}"#, Some("expires_at")),
        (r#"{"rpm": 0}"#, None),
        (r#"{"budget_usd": -1}"#, Some("budget_usd")),
        (r#"{"metadata": {"team": "*"}}"#, Some("metadata")),
        ("not json", None),
    ] {
        let r = admin(&client, &gw, Method::POST, "/admin/keys", body).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        assert_eq!(r.json()["error"]["param"].as_str(), param, "{body}");
    }
    let r = admin(&client, &gw, Method::GET, "/admin/keys/nope", "").await;
    assert_eq!(r.status, 404);
    let r = admin(&client, &gw, Method::GET, &format!("/admin/keys/{id}"), "").await;
    assert_eq!(r.status, 200);
    assert!(r.json().get("key").is_none() && r.json().get("secret_hash").is_none(), "the secret is shown once only");
    let r = admin(&client, &gw, Method::GET, "/admin/usage?bucket=week", "").await;
    assert_eq!(r.status, 400);
    let r = admin(&client, &gw, Method::GET, "/admin/openapi.json", "").await;
    assert_eq!(r.status, 200);
    assert!(r.json()["paths"]["/admin/keys"].is_object());

    // No plaintext secret on disk.
    let secret = key.split('.').nth(1).unwrap();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            let bytes = std::fs::read(&path).unwrap();
            assert!(!bytes.windows(secret.len()).any(|w| w == secret.as_bytes()), "secret found in {}", path.display());
        }
    }
}

#[tokio::test]
async fn the_keys_cli_uses_the_admin_api() {
    let a = mock(&["m"]).await;
    let dir = scratch_dir();
    let gw = secured(&[&a], &dir).await;
    let run = |args: Vec<String>| {
        let url = gw.url();
        async move {
            tokio::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
                .arg("keys")
                .args(["--url", &url, "--master-key", MASTER])
                .args(args)
                .output()
                .await
                .unwrap()
        }
    };
    let out = run(vec!["create".into(), "--rpm".into(), "5".into(), "--team".into(), "infra".into()]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let created: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(created["rpm"], 5);
    assert_eq!(created["metadata"]["team"], "infra");
    let (id, key) = (created["id"].as_str().unwrap().to_owned(), created["key"].as_str().unwrap().to_owned());
    assert_eq!(chat_as(&TestClient::new(), &gw, &key, "m").await.status, 200);
    let out = run(vec!["list".into()]).await;
    assert!(String::from_utf8_lossy(&out.stdout).contains(&id));
    assert!(!String::from_utf8_lossy(&out.stdout).contains(key.split('.').nth(1).unwrap()), "list never shows secrets");
    assert!(run(vec!["revoke".into(), id.clone()]).await.status.success());
    assert_eq!(chat_as(&TestClient::new(), &gw, &key, "m").await.status, 401);
    let out = run(vec!["show".into(), "nope".into()]).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("404"));
}

#[tokio::test]
async fn the_keys_cli_takes_url_and_master_key_after_the_action_too() {
    let a = mock(&["m"]).await;
    let dir = scratch_dir();
    let gw = secured(&[&a], &dir).await;
    let keys = |args: &[&str]| {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        async move {
            tokio::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
                .arg("keys")
                .args(args)
                .output()
                .await
                .unwrap()
        }
    };
    let url = gw.url();
    let out = keys(&["create", "--rpm", "7", "--url", &url, "--master-key", MASTER]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let created: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(created["rpm"], 7);
    let id = created["id"].as_str().unwrap();
    let out = keys(&["show", id, "--master-key", MASTER, "--url", &url]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains(id));
    // Without the master key the admin API refuses, wherever the option would have gone.
    let out = keys(&["list", "--url", &url]).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("401"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// $1 per token in and out, so budgets are easy to reason about.
async fn priced(
    mocks: &[&switchyard_testkit::MockServer],
    dir: &std::path::Path,
) -> switchyard_gateway::RunningGateway {
    let db = db_url(dir);
    let yaml = format!(
        "listen: 127.0.0.1:0\nstorage: {{url: '{db}', usage_journal_dir: '{0}/usage'}}\nauth: {{master_key: {MASTER}}}\nprices: {{m: {{input_per_million: 1000000, output_per_million: 1000000}}}}\nbackends:\n{1}",
        dir.display(),
        backends_yaml(mocks)
    );
    gateway_yaml(&yaml).await
}

const SMALL: &str = r#"{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}"#;

async fn small_as(client: &TestClient, url: &str, key: &str) -> TestResponse {
    let auth = format!("Bearer {key}");
    client
        .post_json(&format!("{url}/v1/chat/completions"), SMALL.as_bytes(), &[("authorization", &auth)])
        .await
        .unwrap()
}

#[tokio::test]
async fn budgets_stop_spending_and_bound_concurrent_overshoot() {
    let a = mock(&["m"]).await;
    let dir = scratch_dir();
    let gw = priced(&[&a], &dir).await;
    let client = TestClient::new();
    // Each request reserves ~$23 (prompt estimate + max_tokens) and really costs ~$25.
    let (_, key) = create_key(&client, &gw, r#"{"budget_usd": 100, "budget_period": "daily"}"#).await;
    let mut admitted = 0;
    let mut spent = 0.0;
    let refusal = loop {
        let r = small_as(&client, &gw.url(), &key).await;
        if r.status != 200 {
            break r;
        }
        admitted += 1;
        spent += r.json()["usage"]["total_tokens"].as_f64().unwrap();
        assert!(admitted < 10, "the budget never stopped spending");
    };
    assert_eq!(refusal.status, 429);
    assert_eq!(refusal.json()["error"]["code"], "budget_exceeded");
    assert!(refusal.header("retry-after").unwrap().parse::<u64>().unwrap() <= 86_400);
    assert!(admitted >= 3, "{admitted}");
    assert!(spent <= 100.0 + 5.0 * f64::from(admitted), "spent {spent}");

    // 20 at once against a fresh $100 budget: only what fits in reservations is admitted.
    let (_, key) = create_key(&client, &gw, r#"{"budget_usd": 100}"#).await;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..20 {
        let (client, url, key) = (client.clone(), gw.url(), key.clone());
        tasks.spawn(async move { small_as(&client, &url, &key).await });
    }
    let mut ok = 0;
    while let Some(r) = tasks.join_next().await {
        let r = r.unwrap();
        match r.status.as_u16() {
            200 => ok += 1,
            429 => assert_eq!(r.json()["error"]["code"], "budget_exceeded"),
            other => panic!("{other}"),
        }
    }
    assert!((1..=4).contains(&ok), "admitted {ok} of 20 against a $100 budget at ~$23 each");
}
