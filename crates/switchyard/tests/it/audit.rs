//! The audit log, black-box: every change through the admin API and the console, and every
//! console sign-in, is an entry (who, from where, before and after, never a secret);
//! `GET /admin/audit` pages it; `switchyard audit verify` finds the chain whole, and finds it
//! broken once a row is edited or removed behind the gateway's back.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use crate::common::*;
use http::Method;
use switchyard_gateway::RunningGateway;
use switchyard_testkit::{TestClient, TestResponse};

const MASTER: &str = "master-key-for-tests";

async fn admin(client: &TestClient, gw: &RunningGateway, method: Method, path: &str, body: &str) -> TestResponse {
    admin_as(client, gw, MASTER, method, path, body).await
}

/// `switchyard audit verify --config FILE [extra]`: (success, what it printed).
fn verify(config: &std::path::Path, extra: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["audit", "verify", "--config"])
        .arg(config)
        .args(extra)
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// Run one statement on the gateway's database, as someone with access to it could.
async fn tamper(db: &str, sql: &str) {
    if db.starts_with("sqlite:") {
        let pool = sqlx::SqlitePool::connect(db).await.unwrap();
        sqlx::query(sql).execute(&pool).await.unwrap();
        pool.close().await;
    } else {
        let pool = sqlx::PgPool::connect(db).await.unwrap();
        sqlx::query(sql).execute(&pool).await.unwrap();
        pool.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_change_and_sign_in_is_chained_and_verify_finds_any_edit() {
    let backend = mock(&["m"]).await;
    let dir = scratch_dir();
    let db = db_url(&dir);
    let yaml = format!(
        "listen: 127.0.0.1:0\nstorage: {{url: '{db}', usage_journal_dir: '{0}/usage'}}\nauth: {{master_key: {MASTER}}}\nbackends:\n{1}",
        dir.display(),
        backends_yaml(&[&backend])
    );
    let config = dir.join("audit.yaml");
    std::fs::write(&config, format!("storage: {{url: '{db}', usage_journal_dir: '{}/usage-cli'}}\n", dir.display()))
        .unwrap();
    let gw = gateway_yaml(&yaml).await;
    let client = TestClient::new();

    let created = admin(&client, &gw, Method::POST, "/admin/keys", r#"{"rpm": 10}"#).await.json();
    let (key_id, secret) = (created["id"].as_str().unwrap().to_owned(), created["key"].as_str().unwrap().to_owned());
    admin(&client, &gw, Method::PATCH, &format!("/admin/keys/{key_id}"), r#"{"rpm": 20}"#).await;
    admin(&client, &gw, Method::DELETE, &format!("/admin/keys/{key_id}"), "").await;
    let team = admin(&client, &gw, Method::POST, "/admin/teams", r#"{"name": "audited"}"#).await.json();
    let team_id = team["id"].as_str().unwrap().to_owned();
    let user = admin(&client, &gw, Method::POST, "/admin/users", r#"{"email": "eve@example.com"}"#).await.json();
    let user_id = user["id"].as_str().unwrap().to_owned();
    let members = format!("/admin/teams/{team_id}/members");
    admin(&client, &gw, Method::POST, &members, &format!(r#"{{"user_id": "{user_id}"}}"#)).await;
    admin(&client, &gw, Method::PATCH, &format!("/admin/teams/{team_id}"), r#"{"budget_usd": 5}"#).await;
    admin(&client, &gw, Method::DELETE, &format!("{members}/{user_id}"), "").await;
    admin(&client, &gw, Method::PATCH, &format!("/admin/users/{user_id}"), r#"{"role": "viewer"}"#).await;
    admin(&client, &gw, Method::DELETE, &format!("/admin/users/{user_id}"), "").await;
    admin(&client, &gw, Method::DELETE, &format!("/admin/teams/{team_id}"), "").await;
    // Refused changes are not changes: nothing is recorded for them.
    assert_eq!(admin(&client, &gw, Method::POST, "/admin/teams", r#"{"rpm": 0}"#).await.status, 400);
    admin(&client, &gw, Method::POST, "/admin/reload", "").await;
    // Console sign-ins, the failed one too.
    let form = |key: &str| format!("key={key}");
    let ui = format!("{}/ui/login", gw.url());
    let ct = [("content-type", "application/x-www-form-urlencoded")];
    client.request(Method::POST, &ui, form("wrong").into(), &ct).await.unwrap();
    let signed_in = client.request(Method::POST, &ui, form(MASTER).into(), &ct).await.unwrap();
    let cookie = signed_in.header("set-cookie").unwrap().split(';').next().unwrap().to_owned();
    let console_key = client
        .request(
            Method::POST,
            &format!("{}/ui/api/keys", gw.url()),
            r#"{"name": "from the console"}"#.to_owned().into(),
            &[("cookie", &cookie), ("x-switchyard-console", "1")],
        )
        .await
        .unwrap();
    assert_eq!(console_key.status, 201, "{}", console_key.text());

    let page = admin(&client, &gw, Method::GET, "/admin/audit?limit=1000", "").await;
    assert_eq!(page.status, 200);
    let text = page.text();
    assert!(!text.contains(secret.split('.').nth(1).unwrap()), "no secret in the audit log");
    let entries = page.json()["data"].as_array().unwrap().clone();
    let actions: Vec<&str> = entries.iter().rev().map(|e| e["action"].as_str().unwrap()).collect();
    assert_eq!(
        actions,
        [
            "key.create",
            "key.update",
            "key.revoke",
            "team.create",
            "user.create",
            "team.member.put",
            "team.update",
            "team.member.delete",
            "user.update",
            "user.delete",
            "team.delete",
            "config.reload",
            "console.login_failed",
            "console.login",
            "key.create",
        ]
    );
    let update = &entries[entries.len() - 2];
    assert_eq!((update["before"]["rpm"].as_u64(), update["after"]["rpm"].as_u64()), (Some(10), Some(20)));
    assert_eq!((update["actor"].as_str(), update["client"].as_str()), (Some("master key"), Some("127.0.0.1")));
    assert_eq!(update["target"], key_id.as_str());
    assert_eq!(entries[0]["actor"], "master key (console)");
    assert_eq!(entries[2]["actor"], "unknown (wrong key)");
    // Pages: newest first, `next_before` continues.
    let first = admin(&client, &gw, Method::GET, "/admin/audit?limit=2", "").await.json();
    let next = first["next_before"].as_i64().unwrap();
    let second = admin(&client, &gw, Method::GET, &format!("/admin/audit?limit=2&before={next}"), "").await.json();
    assert_eq!(second["data"][0]["seq"].as_i64(), Some(next - 1));
    assert_eq!(admin(&client, &gw, Method::GET, "/admin/audit?limit=0", "").await.status, 400);

    let (ok, said) = verify(&config, &[]);
    assert!(ok && said.contains("intact: 15 entries"), "{said}");
    // An edited entry breaks the chain at that entry.
    tamper(&db, r#"UPDATE audit_log SET after = '{"rpm":999}' WHERE seq = 2"#).await;
    let (ok, said) = verify(&config, &[]);
    assert!(!ok && said.contains("broken at entry 2"), "{said}");
    tamper(&db, &format!("UPDATE audit_log SET after = '{}' WHERE seq = 2", update["after"])).await;
    assert!(verify(&config, &[]).0, "restored exactly, it verifies again");
    // A removed entry breaks it too.
    tamper(&db, "DELETE FROM audit_log WHERE seq = 5").await;
    let (ok, said) = verify(&config, &[]);
    assert!(!ok && said.contains("broken at entry 5"), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_log_reaches_the_export_sinks_once_each_entry_across_an_outage() {
    let backend = mock(&["m"]).await;
    let hook = mock(&[]).await;
    let dir = scratch_dir();
    let db = db_url(&dir);
    let yaml = format!(
        "listen: 127.0.0.1:0\nstorage: {{url: '{}', usage_journal_dir: '{}/usage'}}\nauth: {{master_key: {MASTER}}}\n\
         exports:\n  - {{name: hook, type: webhook, url: '{}/hooks/audit'}}\nbackends:\n{}",
        db,
        dir.display(),
        hook.url(),
        backends_yaml(&[&backend])
    );
    let gw = gateway_yaml(&yaml).await;
    let client = TestClient::new();
    let until = |wanted: Vec<String>| {
        let hook = &hook;
        async move {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            loop {
                let mut stored = hook.control().stored_ids();
                stored.retain(|id| id.starts_with("audit:"));
                if stored == wanted {
                    return;
                }
                assert!(std::time::Instant::now() < deadline, "stored {stored:?}, wanted {wanted:?}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    };
    let seqs = |range: std::ops::RangeInclusive<i64>| range.map(|s| format!("audit:{s}")).collect::<Vec<_>>();
    admin(&client, &gw, Method::POST, "/admin/teams", r#"{"name": "exported"}"#).await;
    admin(&client, &gw, Method::POST, "/admin/keys", "{}").await;
    until(seqs(1..=2)).await;
    // The receiver is down: the entries wait in the database and arrive, in order, once it is up.
    hook.control().set_fail_rate(1.0);
    admin(&client, &gw, Method::POST, "/admin/users", r#"{"email": "x@example.com"}"#).await;
    admin(&client, &gw, Method::POST, "/admin/keys", "{}").await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    hook.control().set_fail_rate(0.0);
    until(seqs(1..=4)).await;
    let entries = admin(&client, &gw, Method::GET, "/admin/audit", "").await.json();
    assert_eq!(entries["data"].as_array().unwrap().len(), 4, "nothing but the changes was logged");

    // What the sinks were given anchors the chain's end: with its newest entries deleted the chain
    // still links up on its own, but not to the sink's mark; and an entry's hash kept from an
    // earlier run (the `--expect` the success line prints) anchors it even with the marks gone.
    let config = dir.join("audit.yaml");
    std::fs::write(&config, format!("storage: {{url: '{db}', usage_journal_dir: '{}/usage-cli'}}\n", dir.display()))
        .unwrap();
    let (ok, said) = verify(&config, &[]);
    assert!(ok && said.contains("intact: 4 entries"), "{said}");
    let anchor = said.split("--expect ").nth(1).unwrap().trim().trim_end_matches(')').to_owned();
    assert!(anchor.starts_with("4:"), "{anchor}");
    tamper(&db, "DELETE FROM audit_log WHERE seq >= 3").await;
    let (ok, said) = verify(&config, &[]);
    assert!(!ok && said.contains("export sink `hook` was given entries up to 4"), "{said}");
    tamper(&db, "DELETE FROM audit_exports").await;
    let (ok, said) = verify(&config, &["--expect", &anchor]);
    assert!(!ok && said.contains("entry 4 is gone"), "{said}");
    let (ok, said) = verify(&config, &["--expect", "2:0000"]);
    assert!(!ok && said.contains("not the entry expected"), "{said}");
}
