//! Organisations end to end: teams, users and memberships through the admin API and the CLI;
//! a key in a team is admitted only within its own limits and its team's (shared by every key
//! of the team), its models intersected with the team's, and its spend rolls up to the team.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use crate::common::*;
use http::Method;
use switchyard_gateway::RunningGateway;
use switchyard_testkit::{TestClient, TestResponse};

const MASTER: &str = "master-key-for-tests";

/// A gateway with a master key; `extra` is more top-level YAML (prices).
async fn org_gateway(mocks: &[&switchyard_testkit::MockServer], dir: &std::path::Path, extra: &str) -> RunningGateway {
    let db = db_url(dir);
    let yaml = format!(
        "listen: 127.0.0.1:0\nstorage: {{url: '{db}', usage_journal_dir: '{0}/usage'}}\nauth: {{master_key: {MASTER}}}\n{extra}backends:\n{1}",
        dir.display(),
        backends_yaml(mocks)
    );
    gateway_yaml(&yaml).await
}

async fn admin(client: &TestClient, gw: &RunningGateway, method: Method, path: &str, body: &str) -> TestResponse {
    admin_as(client, gw, MASTER, method, path, body).await
}

/// POST, expecting 201; the answer's `field`.
async fn create(client: &TestClient, gw: &RunningGateway, path: &str, body: &str, field: &str) -> String {
    let r = admin(client, gw, Method::POST, path, body).await;
    assert_eq!(r.status, 201, "{path} {body}: {}", r.text());
    r.json()[field].as_str().unwrap().to_owned()
}

async fn chat_as(client: &TestClient, gw: &RunningGateway, key: &str, body: &str) -> TestResponse {
    let auth = format!("Bearer {key}");
    client
        .post_json(&format!("{}/v1/chat/completions", gw.url()), body.as_bytes(), &[("authorization", &auth)])
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teams_users_and_members_through_the_admin_api() {
    let backend = mock(&["m"]).await;
    let dir = scratch_dir();
    let gw = org_gateway(&[&backend], &dir, "").await;
    let client = TestClient::new();

    let team = create(&client, &gw, "/admin/teams", r#"{"name": "research", "rpm": 50, "budget_usd": 10, "budget_period": "monthly", "models": ["m*"], "mcp_servers": ["files"]}"#, "id").await;
    assert!(team.starts_with("t_"), "{team}");
    let again = admin(&client, &gw, Method::POST, "/admin/teams", r#"{"name": "research"}"#).await;
    assert_eq!((again.status.as_u16(), again.json()["error"]["code"].as_str()), (409, Some("conflict")));
    for (body, param) in [
        (r#"{}"#, Some("name")),
        (r#"{"name": "x", "rpm": 0}"#, None),
        (r#"{"name": "x", "budget_period": "hourly"}"#, Some("budget_period")),
        (r#"{"name": "x", "colour": "red"}"#, None),
    ] {
        let r = admin(&client, &gw, Method::POST, "/admin/teams", body).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        assert_eq!(r.json()["error"]["param"].as_str(), param, "{body}");
    }

    let user = create(
        &client,
        &gw,
        "/admin/users",
        r#"{"email": "ana@example.com", "name": "Ana", "role": "team_admin"}"#,
        "id",
    )
    .await;
    assert!(user.starts_with("u_"));
    let dup = admin(&client, &gw, Method::POST, "/admin/users", r#"{"email": "ana@example.com"}"#).await;
    assert_eq!(dup.status, 409);
    let bad_role =
        admin(&client, &gw, Method::POST, "/admin/users", r#"{"email": "b@example.com", "role": "owner"}"#).await;
    assert_eq!((bad_role.status.as_u16(), bad_role.json()["error"]["param"].as_str()), (400, Some("role")));

    let members = format!("/admin/teams/{team}/members");
    let added =
        admin(&client, &gw, Method::POST, &members, &format!(r#"{{"user_id": "{user}", "role": "team_admin"}}"#)).await;
    assert_eq!(added.status, 201, "{}", added.text());
    let wrong =
        admin(&client, &gw, Method::POST, &members, &format!(r#"{{"user_id": "{user}", "role": "owner"}}"#)).await;
    assert_eq!(wrong.status, 400);
    let nobody = admin(&client, &gw, Method::POST, &members, r#"{"user_id": "u_nobody"}"#).await;
    assert_eq!(nobody.status, 404);

    let key =
        create(&client, &gw, "/admin/keys", &format!(r#"{{"team_id": "{team}", "user_id": "{user}"}}"#), "id").await;
    let no_team = admin(&client, &gw, Method::POST, "/admin/keys", r#"{"team_id": "t_nope"}"#).await;
    assert_eq!((no_team.status.as_u16(), no_team.json()["error"]["param"].as_str()), (400, Some("team_id")));

    let shown = admin(&client, &gw, Method::GET, &format!("/admin/teams/{team}"), "").await.json();
    assert_eq!(shown["name"], "research");
    assert_eq!(shown["rpm"], 50);
    assert_eq!(shown["members"][0]["user_id"], user.as_str());
    assert_eq!(shown["members"][0]["role"], "team_admin");
    assert_eq!(shown["keys"][0], key.as_str());
    assert_eq!(shown["spend_usd"], 0.0);
    let ana = admin(&client, &gw, Method::GET, &format!("/admin/users/{user}"), "").await.json();
    assert_eq!(
        (ana["email"].as_str(), ana["teams"][0]["team_id"].as_str()),
        (Some("ana@example.com"), Some(team.as_str()))
    );

    let patched =
        admin(&client, &gw, Method::PATCH, &format!("/admin/teams/{team}"), r#"{"rpm": 70, "name": "ml"}"#).await;
    assert_eq!(
        (patched.status.as_u16(), patched.json()["rpm"].as_u64(), patched.json()["name"].as_str()),
        (200, Some(70), Some("ml"))
    );
    // `null` removes a limit; an absent field leaves it.
    let lifted =
        admin(&client, &gw, Method::PATCH, &format!("/admin/teams/{team}"), r#"{"rpm": null, "tpm": 9000}"#).await;
    assert_eq!((lifted.json()["rpm"].as_u64(), lifted.json()["tpm"].as_u64()), (None, Some(9000)));
    let listed = admin(&client, &gw, Method::GET, "/admin/teams", "").await.json();
    assert_eq!(listed["data"].as_array().unwrap().len(), 1);
    let users = admin(&client, &gw, Method::GET, "/admin/users", "").await.json();
    assert_eq!(users["data"][0]["role"], "team_admin");

    let removed = admin(&client, &gw, Method::DELETE, &format!("{members}/{user}"), "").await;
    assert_eq!(removed.status, 200);
    assert_eq!(admin(&client, &gw, Method::DELETE, &format!("{members}/{user}"), "").await.status, 404);
    assert_eq!(admin(&client, &gw, Method::DELETE, &format!("/admin/teams/{team}"), "").await.status, 200);
    assert_eq!(admin(&client, &gw, Method::GET, &format!("/admin/teams/{team}"), "").await.status, 404);
    // The team's keys stay, without a team.
    let k = admin(&client, &gw, Method::GET, &format!("/admin/keys/{key}"), "").await.json();
    assert_eq!((k["team_id"].clone(), k["user_id"].as_str()), (serde_json::Value::Null, Some(user.as_str())));
    assert_eq!(admin(&client, &gw, Method::DELETE, &format!("/admin/users/{user}"), "").await.status, 200);
    assert_eq!(admin(&client, &gw, Method::PUT, "/admin/teams", "").await.status, 405);
    // Malformed input: a clear 400 in OpenAI's shape, nothing stored.
    for (method, path, body) in [
        (Method::POST, "/admin/teams".to_owned(), "{not json"),
        (Method::POST, "/admin/users".to_owned(), r#"{"email": 7}"#),
        (Method::POST, "/admin/users".to_owned(), r#"{"email": "no-at-sign"}"#),
        (Method::POST, "/admin/teams/t_x/members".to_owned(), "{}"),
        (Method::GET, "/admin/audit?limit=abc".to_owned(), ""),
        (Method::POST, "/admin/keys".to_owned(), r#"{"team_id": 5}"#),
    ] {
        let r = admin(&client, &gw, method.clone(), &path, body).await;
        let status = r.status.as_u16();
        assert!(status == 400 || (status == 404 && path.contains("t_x")), "{method} {path} {body}: {}", r.text());
        assert_eq!(r.json()["error"]["type"], "invalid_request_error", "{path}: {}", r.text());
    }
    // The user made above was deleted; the refused ones left nothing behind.
    assert_eq!(admin(&client, &gw, Method::GET, "/admin/users", "").await.json()["data"], serde_json::json!([]));
    let spec = admin(&client, &gw, Method::GET, "/admin/openapi.json", "").await.json();
    for path in ["/admin/teams", "/admin/teams/{id}", "/admin/teams/{id}/members", "/admin/users/{id}"] {
        assert!(spec["paths"][path].is_object(), "{path} is documented");
    }
    assert_eq!(admin(&client, &gw, Method::GET, "/admin/teams/t_x/other", "").await.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_teams_limits_are_shared_by_its_keys_and_its_models_intersect_theirs() {
    let backend = mock(&["m", "other"]).await;
    let dir = scratch_dir();
    let gw = org_gateway(&[&backend], &dir, "").await;
    let client = TestClient::new();
    let team = create(&client, &gw, "/admin/teams", r#"{"name": "ops", "rpm": 5, "models": ["m"]}"#, "id").await;
    let a = create(&client, &gw, "/admin/keys", &format!(r#"{{"team_id": "{team}"}}"#), "key").await;
    let b = create(&client, &gw, "/admin/keys", &format!(r#"{{"team_id": "{team}", "rpm": 2}}"#), "key").await;
    let alone = create(&client, &gw, "/admin/keys", "{}", "key").await;

    // The key's own limit first: b alone may send 2.
    let body = chat_body("m", false);
    let b_answers = [
        chat_as(&client, &gw, &b, &body).await,
        chat_as(&client, &gw, &b, &body).await,
        chat_as(&client, &gw, &b, &body).await,
    ];
    assert_eq!(b_answers.iter().map(|r| r.status.as_u16()).collect::<Vec<_>>(), [200, 200, 429]);
    assert!(b_answers[2].json()["error"]["message"].as_str().unwrap().contains("for this key"));
    // The team's 5 are shared: 3 more for a, then the team refuses.
    let mut statuses = Vec::new();
    let mut last = None;
    for _ in 0..5 {
        let r = chat_as(&client, &gw, &a, &body).await;
        statuses.push(r.status.as_u16());
        last = Some(r);
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429]);
    let refusal = last.unwrap();
    assert_eq!(refusal.json()["error"]["code"], "rate_limit_exceeded");
    assert!(refusal.json()["error"]["message"].as_str().unwrap().contains("for this team"), "{}", refusal.text());
    assert_eq!(refusal.header("x-ratelimit-limit-requests"), Some("5"));
    // A key without a team is its own top level.
    assert_eq!(chat_as(&client, &gw, &alone, &body).await.status, 200);

    // Models: the key's list intersected with the team's.
    let r = chat_as(&client, &gw, &alone, &chat_body("other", false)).await;
    assert_eq!(r.status, 200);
    let other_team = create(&client, &gw, "/admin/teams", r#"{"name": "narrow", "models": ["m"]}"#, "id").await;
    let wide =
        create(&client, &gw, "/admin/keys", &format!(r#"{{"team_id": "{other_team}", "models": ["*"]}}"#), "key").await;
    let r = chat_as(&client, &gw, &wide, &chat_body("other", false)).await;
    assert_eq!((r.status.as_u16(), r.json()["error"]["code"].as_str()), (403, Some("model_not_allowed")));
    assert_eq!(chat_as(&client, &gw, &wide, &chat_body("m", false)).await.status, 200);
    let disjoint =
        create(&client, &gw, "/admin/keys", &format!(r#"{{"team_id": "{other_team}", "models": ["other"]}}"#), "key")
            .await;
    for model in ["m", "other"] {
        assert_eq!(chat_as(&client, &gw, &disjoint, &chat_body(model, false)).await.status, 403, "{model}");
    }
    // A team's change reaches its cached keys at once: lifting its model list lets `other` through.
    let lifted = admin(&client, &gw, Method::PATCH, &format!("/admin/teams/{other_team}"), r#"{"models": []}"#).await;
    assert_eq!(lifted.status, 200);
    assert_eq!(chat_as(&client, &gw, &wide, &chat_body("other", false)).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_teams_budget_is_spent_by_all_its_keys_and_usage_rolls_up_under_its_name() {
    let backend = mock(&["m"]).await;
    let dir = scratch_dir();
    // $1 per token, so a small request costs ~$25 and reserves ~$23.
    let gw = org_gateway(&[&backend], &dir, "prices: {m: {input_per_million: 1000000, output_per_million: 1000000}}\n")
        .await;
    let client = TestClient::new();
    let team =
        create(&client, &gw, "/admin/teams", r#"{"name": "lab", "budget_usd": 100, "budget_period": "daily"}"#, "id")
            .await;
    let user = create(&client, &gw, "/admin/users", r#"{"email": "li@example.com"}"#, "id").await;
    let keys = [
        create(&client, &gw, "/admin/keys", &format!(r#"{{"team_id": "{team}"}}"#), "key").await,
        create(&client, &gw, "/admin/keys", &format!(r#"{{"team_id": "{team}", "user_id": "{user}"}}"#), "key").await,
    ];
    let small = r#"{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}"#;
    let (mut admitted, mut spent) = (0, 0.0);
    let refusal = loop {
        let r = chat_as(&client, &gw, &keys[admitted % 2], small).await;
        if r.status != 200 {
            break r;
        }
        admitted += 1;
        spent += r.json()["usage"]["total_tokens"].as_f64().unwrap();
        assert!(admitted < 10, "the team's budget never stopped its keys");
    };
    assert_eq!((refusal.status.as_u16(), refusal.json()["error"]["code"].as_str()), (429, Some("budget_exceeded")));
    assert!(refusal.json()["error"]["message"].as_str().unwrap().contains("team's budget"), "{}", refusal.text());
    assert!(admitted >= 3, "both keys spent from one budget: {admitted}");
    assert!(spent <= 100.0 + 5.0 * admitted as f64, "spent {spent}");
    // Either key is refused now: the budget is the team's.
    for key in &keys {
        assert_eq!(chat_as(&client, &gw, key, small).await.status, 429);
    }
    // Usage names the team (and the user, by email) and the team's page shows its spend.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let shown = admin(&client, &gw, Method::GET, &format!("/admin/teams/{team}"), "").await.json();
        let usage = admin(&client, &gw, Method::GET, "/admin/usage?team=lab", "").await.json();
        let by_user = admin(&client, &gw, Method::GET, "/admin/usage?user=li%40example.com", "").await.json();
        let team_spend = shown["spend_usd"].as_f64().unwrap();
        let reported = usage["totals"]["requests"].as_u64().unwrap_or(0);
        if team_spend >= spent - 0.001 && reported == admitted as u64 {
            assert!((team_spend - spent).abs() < 0.001, "{team_spend} vs {spent}");
            assert_eq!(by_user["totals"]["requests"].as_u64(), Some((admitted / 2) as u64));
            break;
        }
        assert!(std::time::Instant::now() < deadline, "spend never rolled up: {shown} {usage}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_manages_teams_users_and_members() {
    let backend = mock(&["m"]).await;
    let dir = scratch_dir();
    let gw = org_gateway(&[&backend], &dir, "").await;
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .args(args)
            .args(["--url", &gw.url(), "--master-key", MASTER])
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let team = run(&["teams", "create", "--name", "infra", "--rpm", "10", "--budget-usd", "5"]);
    let team_id = team["id"].as_str().unwrap().to_owned();
    assert_eq!(team["rpm"], 10);
    let user = run(&["users", "create", "--email", "kai@example.com", "--role", "member"]);
    let user_id = user["id"].as_str().unwrap().to_owned();
    run(&["teams", "add-member", &team_id, &user_id, "--role", "team_admin"]);
    let shown = run(&["teams", "show", &team_id]);
    assert_eq!(shown["members"][0]["role"], "team_admin");
    let updated = run(&["teams", "update", &team_id, "--max-parallel", "3"]);
    assert_eq!((updated["max_parallel"].as_u64(), updated["rpm"].as_u64()), (Some(3), Some(10)));
    let key = run(&["keys", "create", "--team-id", &team_id, "--user-id", &user_id]);
    assert_eq!(key["team_id"], team_id.as_str());
    assert_eq!(run(&["users", "list"])["data"][0]["email"], "kai@example.com");
    run(&["teams", "remove-member", &team_id, &user_id]);
    assert_eq!(run(&["users", "show", &user_id])["teams"], serde_json::json!([]));
    run(&["users", "delete", &user_id]);
    run(&["teams", "delete", &team_id]);
    assert_eq!(run(&["teams", "list"])["data"], serde_json::json!([]));
}

/// Guardrails a team or a key adds (issue 32): a key in a team gets the team's guards and its own
/// on top of the configured ones, cannot drop the team's, and names only configured guards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_team_and_a_key_add_guardrails_and_a_key_cannot_drop_its_teams() {
    let backend = mock(&["m"]).await;
    backend.control().keep_bodies();
    let dir = scratch_dir();
    let guards = "guardrails:\n  blocker: {type: keywords, keywords: [nightingale], action: block}\n\
                  \x20 codes: {type: patterns, patterns: {code: 'code-[0-9]+'}, action: mask}\n";
    let gw = org_gateway(&[&backend], &dir, guards).await;
    let client = TestClient::new();
    let team = create(&client, &gw, "/admin/teams", r#"{"name": "guarded", "guardrails": ["blocker"]}"#, "id").await;
    let in_team = create(&client, &gw, "/admin/keys", &format!(r#"{{"team_id": "{team}"}}"#), "key").await;
    let masked = create(&client, &gw, "/admin/keys", r#"{"guardrails": ["codes"]}"#, "key").await;
    let plain = create(&client, &gw, "/admin/keys", "{}", "key").await;
    let ask =
        |text: &str| serde_json::json!({"model": "m", "messages": [{"role": "user", "content": text}]}).to_string();

    let r = chat_as(&client, &gw, &in_team, &ask("about nightingale")).await;
    assert_eq!((r.status.as_u16(), r.json()["error"]["code"].as_str()), (400, Some("content_blocked")), "{}", r.text());
    assert_eq!(chat_as(&client, &gw, &plain, &ask("about nightingale")).await.status, 200);
    assert_eq!(chat_as(&client, &gw, &masked, &ask("my code-77")).await.status, 200);
    assert_eq!(chat_as(&client, &gw, &plain, &ask("my code-78")).await.status, 200);
    let sent = backend.control().bodies();
    assert!(!sent.iter().any(|b| b.contains("code-77")) && sent.iter().any(|b| b.contains("code-78")), "{sent:?}");

    // The key's own list cannot take the team's guard away; only the team's admin can.
    let in_team_id = in_team.strip_prefix("sy-").and_then(|k| k.split('.').next()).unwrap().to_owned();
    let r = admin(&client, &gw, Method::PATCH, &format!("/admin/keys/{in_team_id}"), r#"{"guardrails": []}"#).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(chat_as(&client, &gw, &in_team, &ask("about nightingale")).await.status, 400);
    let r = admin(&client, &gw, Method::PATCH, &format!("/admin/teams/{team}"), r#"{"guardrails": []}"#).await;
    assert_eq!((r.status.as_u16(), &r.json()["guardrails"]), (200, &serde_json::json!([])), "{}", r.text());
    assert_eq!(chat_as(&client, &gw, &in_team, &ask("about nightingale")).await.status, 200);

    // Only configured guards can be named; the lists are shown and kept.
    let r =
        admin(&client, &gw, Method::PATCH, &format!("/admin/keys/{in_team_id}"), r#"{"guardrails": ["nope"]}"#).await;
    assert_eq!((r.status.as_u16(), r.json()["error"]["param"].as_str()), (400, Some("guardrails")), "{}", r.text());
    let r = admin(&client, &gw, Method::POST, "/admin/teams", r#"{"name": "t2", "guardrails": ["nope"]}"#).await;
    assert_eq!(r.status, 400, "{}", r.text());
    let r =
        admin(&client, &gw, Method::PATCH, &format!("/admin/keys/{in_team_id}"), r#"{"guardrails": ["codes"]}"#).await;
    assert_eq!(r.json()["guardrails"], serde_json::json!(["codes"]));
    let shown = admin(&client, &gw, Method::GET, &format!("/admin/keys/{in_team_id}"), "").await.json();
    assert_eq!(shown["guardrails"], serde_json::json!(["codes"]));
}
