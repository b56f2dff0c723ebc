//! Roles, black-box: every admin endpoint called as the master key, an admin, a team admin, a
//! member and a viewer (users presenting their issuer's tokens), each allowed or refused as the
//! role table says, lists filtered to what each may see; and single sign-on to the console
//! against an OpenID provider served here (discovery, PKCE, nonce, just-in-time provisioning,
//! roles and teams following the claims, sessions revoked, refusals audited).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use base64::Engine;
use bytes::Bytes;
use http::Method;
use jsonwebtoken::Algorithm;
use serde_json::{json, Value};
use sha2::Digest;
use switchyard_gateway::RunningGateway;
use switchyard_testkit::{TestClient, TestResponse};

use crate::common::*;
use crate::jwt::Issuer;

const MASTER: &str = "master-key-for-role-tests";

async fn gateway(issuer: &Issuer, extra_auth: &str) -> (RunningGateway, switchyard_testkit::MockServer) {
    let backend = mock(&["m"]).await;
    let dir = scratch_dir();
    let yaml = format!(
        "listen: 127.0.0.1:0\nstorage: {{url: '{}', usage_journal_dir: '{}/usage'}}\n\
         auth: {{master_key: {MASTER}, jwt: [{{issuer: '{}', audiences: [switchyard], user_claim: email}}]{extra_auth}}}\n\
         backends:\n{}",
        db_url(&dir),
        dir.display(),
        issuer.url,
        backends_yaml(&[&backend])
    );
    (gateway_yaml(&yaml).await, backend)
}

async fn call(
    client: &TestClient,
    gw: &RunningGateway,
    m: Method,
    path: &str,
    body: &str,
    h: &[(&str, &str)],
) -> TestResponse {
    client.request(m, &format!("{}{path}", gw.url()), Bytes::from(body.to_owned()), h).await.unwrap()
}

async fn master(client: &TestClient, gw: &RunningGateway, m: Method, path: &str, body: &str) -> Value {
    let r = admin_as(client, gw, MASTER, m, path, body).await;
    assert!(r.status.is_success(), "{path}: {} {}", r.status, r.text());
    r.json()
}

/// The admin API's routes the console serves under `/ui/api` too.
const MIRRORED: [&str; 5] = ["/keys", "/teams", "/users", "/audit", "/experiments"];
const FORM: &str = "application/x-www-form-urlencoded";
const CHAT: &str = r#"{"model": "m", "messages": [{"role": "user", "content": "hi"}]}"#;

/// Who calls, in the order the table runs them (refusals first, so nothing they are refused
/// could have been changed by an earlier caller).
const EXPERIMENT_A: &str = r#"{"name": "exp-a", "team": "a", "model": "m", "shadow": {"model": "m"}}"#;
const EXPERIMENT_B: &str = r#"{"name": "exp-b", "team": "b", "model": "m", "shadow": {"model": "m"}}"#;

const CALLERS: [&str; 5] = ["viewer", "member", "lead", "admin", "master"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_admin_endpoint_answers_each_role_as_the_role_table_says() {
    let issuer = Issuer::start().await;
    let oidc = format!(
        ", oidc: {{issuer: '{}', client_id: console-client, client_secret: client-secret, \
         redirect_url: 'http://127.0.0.1/ui/oidc/callback', roles: {{ops: admin, members: member, viewers: viewer}}}}",
        issuer.url
    );
    let (gw, _backend) = gateway(&issuer, &oidc).await;
    let client = TestClient::new();
    let team_a =
        master(&client, &gw, Method::POST, "/admin/teams", r#"{"name": "a", "rpm": 100, "budget_usd": 10}"#).await;
    let team_b = master(&client, &gw, Method::POST, "/admin/teams", r#"{"name": "b"}"#).await;
    let (a, b) = (team_a["id"].as_str().unwrap().to_owned(), team_b["id"].as_str().unwrap().to_owned());
    let mut users = std::collections::HashMap::new();
    for (who, role) in
        [("admin", "admin"), ("lead", "member"), ("member", "member"), ("viewer", "viewer"), ("spare", "member")]
    {
        let u = master(
            &client,
            &gw,
            Method::POST,
            "/admin/users",
            &format!(r#"{{"email": "{who}@corp.example", "role": "{role}"}}"#),
        )
        .await;
        users.insert(who, u["id"].as_str().unwrap().to_owned());
    }
    // The lead administers team a by membership (their own role is member); the member is in a.
    master(
        &client,
        &gw,
        Method::POST,
        &format!("/admin/teams/{a}/members"),
        &format!(r#"{{"user_id": "{}", "role": "team_admin"}}"#, users["lead"]),
    )
    .await;
    master(
        &client,
        &gw,
        Method::POST,
        &format!("/admin/teams/{a}/members"),
        &format!(r#"{{"user_id": "{}"}}"#, users["member"]),
    )
    .await;
    let key = |body: String| {
        let (client, gw) = (&client, &gw);
        async move { master(client, gw, Method::POST, "/admin/keys", &body).await["id"].as_str().unwrap().to_owned() }
    };
    let service_a = key(format!(r#"{{"team_id": "{a}"}}"#)).await;
    let members_key = key(format!(r#"{{"team_id": "{a}", "user_id": "{}"}}"#, users["member"])).await;
    let key_b = key(format!(r#"{{"team_id": "{b}"}}"#)).await;
    let spare = users["spare"].clone();
    let bearer: std::collections::HashMap<&str, String> = CALLERS
        .iter()
        .map(|who| {
            let token = match *who {
                "master" => MASTER.to_owned(),
                _ => issuer.token(
                    Algorithm::RS256,
                    "rsa-1",
                    "rsa1.pem",
                    issuer.claims(who, None, json!({"email": format!("{who}@corp.example")})),
                ),
            };
            (*who, format!("Bearer {token}"))
        })
        .collect();

    // Each caller signed in to the console too: the users through single sign-on (their groups
    // give the roles they already have), the master key through the login form.
    let mut session = std::collections::HashMap::new();
    for (who, group) in [("viewer", "viewers"), ("member", "members"), ("lead", "members"), ("admin", "ops")] {
        let claims = issuer.claims(who, None, json!({"email": format!("{who}@corp.example"), "groups": [group]}));
        let answer = sign_in(&client, &gw, &issuer, claims, None).await;
        assert_eq!(answer.status, 200, "{who}: {:?}", answer.headers);
        session.insert(who, cookie_named(&answer, "sy_console").unwrap());
    }
    let form = format!("key={MASTER}");
    let login = call(&client, &gw, Method::POST, "/ui/login", &form, &[("content-type", FORM)]).await;
    session.insert("master", cookie_named(&login, "sy_console").unwrap());

    // (method, path, body, who may): everyone else gets a 403. The admin API's rows are walked on
    // both surfaces where the console mirrors them (`/ui/api/{keys,teams,users,audit}`), as each
    // caller's token there and console session here, before the next caller's turn.
    let all = "viewer member lead admin master";
    let writers = "member lead admin master";
    let admins = "admin master";
    let leads = "lead admin master";
    let table: Vec<(Method, String, String, &str)> = vec![
        (Method::GET, "/admin/openapi.json".into(), String::new(), all),
        (Method::GET, "/admin/keys".into(), String::new(), all),
        (Method::POST, "/admin/keys".into(), format!(r#"{{"team_id": "{a}"}}"#), writers),
        (Method::POST, "/admin/keys".into(), format!(r#"{{"team_id": "{b}"}}"#), admins),
        (Method::POST, "/admin/keys".into(), format!(r#"{{"team_id": "{a}", "rpm": 1000}}"#), admins),
        (Method::POST, "/admin/keys".into(), format!(r#"{{"team_id": "{a}", "rpm": 50}}"#), writers),
        (Method::GET, format!("/admin/keys/{members_key}"), String::new(), all),
        (Method::GET, format!("/admin/keys/{service_a}"), String::new(), "viewer lead admin master"),
        (Method::GET, format!("/admin/keys/{key_b}"), String::new(), "viewer admin master"),
        (Method::PATCH, format!("/admin/keys/{members_key}"), r#"{"name": "renamed"}"#.into(), writers),
        (
            Method::PATCH,
            format!("/admin/keys/{members_key}"),
            format!(r#"{{"user_id": "{spare}"}}"#),
            "lead admin master",
        ),
        (Method::PATCH, format!("/admin/keys/{service_a}"), r#"{"name": "svc"}"#.into(), leads),
        (Method::PATCH, format!("/admin/keys/{members_key}"), r#"{"budget_usd": 50}"#.into(), admins),
        (Method::DELETE, format!("/admin/keys/{key_b}"), String::new(), admins),
        (Method::GET, "/admin/usage".into(), String::new(), all),
        (Method::GET, "/admin/usage?team=a".into(), String::new(), "viewer lead admin master"),
        (Method::GET, format!("/admin/usage?team={a}"), String::new(), "viewer lead admin master"),
        (Method::GET, format!("/admin/usage?team={b}"), String::new(), "viewer admin master"),
        (Method::GET, "/admin/usage?team=b".into(), String::new(), "viewer admin master"),
        (Method::GET, "/admin/usage?user=spare@corp.example".into(), String::new(), "viewer admin master"),
        (Method::GET, "/admin/audit".into(), String::new(), admins),
        (Method::POST, "/admin/reload".into(), String::new(), admins),
        (Method::POST, "/admin/teams".into(), r#"{"name": "new-team"}"#.into(), admins),
        (Method::GET, "/admin/teams".into(), String::new(), all),
        (Method::GET, format!("/admin/teams/{a}"), String::new(), all),
        (Method::GET, format!("/admin/teams/{b}"), String::new(), "viewer admin master"),
        (Method::PATCH, format!("/admin/teams/{a}"), r#"{"rpm": 120}"#.into(), admins),
        (Method::DELETE, "/admin/teams/t_none".into(), String::new(), admins),
        (Method::GET, format!("/admin/teams/{a}/members"), String::new(), all),
        (Method::POST, format!("/admin/teams/{a}/members"), format!(r#"{{"user_id": "{spare}"}}"#), leads),
        (Method::DELETE, format!("/admin/teams/{a}/members/{spare}"), String::new(), leads),
        (Method::POST, format!("/admin/teams/{b}/members"), format!(r#"{{"user_id": "{spare}"}}"#), admins),
        (Method::POST, "/admin/users".into(), r#"{"email": "new@corp.example"}"#.into(), admins),
        (Method::GET, "/admin/users".into(), String::new(), leads),
        (Method::GET, format!("/admin/users/{}", users["member"]), String::new(), "member lead admin master"),
        (Method::PATCH, format!("/admin/users/{spare}"), r#"{"name": "Spare"}"#.into(), admins),
        (Method::DELETE, "/admin/users/u_none".into(), String::new(), admins),
        // Experiments: team admins make and remove their own team's, only over models the team
        // may use; everyone reads those of their teams.
        (Method::GET, "/admin/experiments".into(), String::new(), all),
        (Method::POST, "/admin/experiments".into(), EXPERIMENT_A.into(), leads),
        (Method::POST, "/admin/experiments".into(), EXPERIMENT_B.into(), admins),
        (Method::GET, "/admin/experiments/exp-a".into(), String::new(), all),
        (Method::DELETE, "/admin/experiments/exp-b".into(), String::new(), admins),
        // The console's own routes: a team admin reads its team's usage and requests (named by
        // id or by name), never another team's.
        (Method::GET, "/ui/api/me".into(), String::new(), all),
        (Method::GET, "/ui/api/models".into(), String::new(), all),
        (Method::GET, "/ui/api/usage".into(), String::new(), all),
        (Method::GET, format!("/ui/api/usage?team={a}"), String::new(), "viewer lead admin master"),
        (Method::GET, "/ui/api/usage?team=a&by=team".into(), String::new(), "viewer lead admin master"),
        (Method::GET, format!("/ui/api/usage?team={b}"), String::new(), "viewer admin master"),
        (Method::GET, format!("/ui/api/usage.csv?team={a}"), String::new(), "viewer lead admin master"),
        (Method::GET, "/ui/api/usage?user=member@corp.example".into(), String::new(), "viewer member admin master"),
        (Method::GET, format!("/ui/api/requests?team={a}"), String::new(), "viewer lead admin master"),
        (Method::GET, "/ui/api/requests?team=b".into(), String::new(), "viewer admin master"),
        (Method::GET, "/ui/api/requests".into(), String::new(), all),
        (Method::GET, "/ui/api/requests/bodies?id=r_none".into(), String::new(), admins),
        (Method::GET, "/ui/api/overview".into(), String::new(), "viewer admin master"),
        (Method::GET, "/ui/api/backends".into(), String::new(), "viewer admin master"),
        (Method::GET, "/ui/api/mcp".into(), String::new(), "viewer admin master"),
        (Method::GET, "/ui/api/cache".into(), String::new(), "viewer admin master"),
        (Method::POST, "/ui/api/chat/completions".into(), CHAT.into(), writers),
    ];
    for (method, path, body, may) in &table {
        for who in CALLERS {
            let allowed = may.split_whitespace().any(|m| m == who);
            let console = path.strip_prefix("/admin").filter(|p| MIRRORED.iter().any(|m| p.starts_with(m)));
            let surfaces = match (path.starts_with("/ui/api/"), console) {
                (true, _) => vec![(path.clone(), ("cookie", session[who].as_str()))],
                (false, Some(mirrored)) => vec![
                    (path.clone(), ("authorization", bearer[who].as_str())),
                    (format!("/ui/api{mirrored}"), ("cookie", session[who].as_str())),
                ],
                (false, None) => vec![(path.clone(), ("authorization", bearer[who].as_str()))],
            };
            for (path, credential) in surfaces {
                let headers = [credential, ("x-switchyard-console", "1"), ("content-type", "application/json")];
                let r = call(&client, &gw, method.clone(), &path, body, &headers).await;
                let status = r.status.as_u16();
                if allowed {
                    assert!(status != 401 && status != 403, "{who} {method} {path} {body}: {status} {}", r.text());
                } else {
                    assert_eq!(status, 403, "{who} {method} {path} {body}: {}", r.text());
                    assert_eq!(r.json()["error"]["code"], "forbidden", "{who} {method} {path}");
                }
            }
        }
    }
    // A team admin's own team's usage on the console is that team's, named either way.
    let lead_usage = |query: String| {
        let (client, gw, cookie) = (&client, &gw, session["lead"].clone());
        async move {
            let r = call(client, gw, Method::GET, &format!("/ui/api/usage?{query}"), "", &[("cookie", &cookie)]).await;
            assert_eq!(r.status, 200, "{query}: {}", r.text());
            r.json()
        }
    };
    assert_eq!(lead_usage(format!("team={a}&by=team")).await, lead_usage("team=a&by=team".into()).await);

    // Lists hold what each may see.
    let ids = |r: TestResponse| -> Vec<String> {
        r.json()["data"].as_array().unwrap().iter().map(|k| k["id"].as_str().unwrap().to_owned()).collect()
    };
    let get = |who: &'static str, path: &'static str| {
        let (client, gw, auth) = (&client, &gw, bearer[who].clone());
        async move { call(client, gw, Method::GET, path, "", &[("authorization", &auth)]).await }
    };
    let lead_keys = ids(get("lead", "/admin/keys").await);
    assert!(lead_keys.contains(&service_a) && lead_keys.contains(&members_key) && !lead_keys.contains(&key_b));
    let on_console = |who: &'static str, path: &'static str| {
        let (client, gw, cookie) = (&client, &gw, session[who].clone());
        async move { call(client, gw, Method::GET, path, "", &[("cookie", &cookie)]).await }
    };
    assert_eq!(ids(on_console("lead", "/ui/api/keys").await), lead_keys, "the console lists what the API does");
    assert_eq!(ids(on_console("member", "/ui/api/teams").await), vec![a.clone()]);
    let member_keys = ids(get("member", "/admin/keys").await);
    assert!(!member_keys.contains(&service_a) && !member_keys.contains(&key_b), "{member_keys:?}");
    assert_eq!(ids(get("viewer", "/admin/keys").await).len(), ids(get("master", "/admin/keys").await).len());
    assert_eq!(ids(get("member", "/admin/teams").await), vec![a.clone()]);
    // A member's key is theirs and in their team, whatever they named.
    let made = call(&client, &gw, Method::POST, "/admin/keys", "{}", &[("authorization", &bearer["member"])]).await;
    assert_eq!(
        (made.json()["user_id"].as_str(), made.json()["team_id"].as_str()),
        (Some(users["member"].as_str()), Some(a.as_str()))
    );
    // Who did what is in the audit log under their own name.
    let audit = master(&client, &gw, Method::GET, "/admin/audit?limit=1000", "").await;
    assert!(audit["data"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["actor"] == "user:lead@corp.example (token)" && e["action"] == "team.member.put"));

    // Tokens that name no user of the gateway, and bearers that are neither, are refused.
    let stranger = issuer.token(
        Algorithm::RS256,
        "rsa-1",
        "rsa1.pem",
        issuer.claims("x", None, json!({"email": "nobody@corp.example"})),
    );
    let r =
        call(&client, &gw, Method::GET, "/admin/keys", "", &[("authorization", &format!("Bearer {stranger}"))]).await;
    assert_eq!((r.status.as_u16(), r.json()["error"]["code"].as_str()), (403, Some("unknown_user")));
    let r = call(&client, &gw, Method::GET, "/admin/keys", "", &[("authorization", "Bearer sy-nothing.here")]).await;
    assert_eq!(r.status, 401);
}

fn query_param(url: &str, name: &str) -> String {
    let query = url.split_once('?').unwrap().1;
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query).unwrap();
    pairs.into_iter().find(|(k, _)| k == name).unwrap().1
}

fn cookie_named(r: &TestResponse, name: &str) -> Option<String> {
    r.headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|c| c.starts_with(&format!("{name}=")))
        .map(|c| c.split(';').next().unwrap().to_owned())
}

/// One sign-in through the provider, whose ID token carries `claims` (and the flow's nonce
/// unless `nonce` says otherwise): the callback's answer.
async fn sign_in(
    client: &TestClient,
    gw: &RunningGateway,
    issuer: &Issuer,
    claims: Value,
    nonce: Option<&str>,
) -> TestResponse {
    let start = call(client, gw, Method::GET, "/ui/oidc/login", "", &[]).await;
    assert_eq!(start.status, 303, "{}", start.text());
    let to = start.header("location").unwrap().to_owned();
    assert!(to.starts_with(&format!("{}/authorize?", issuer.url)), "{to}");
    assert_eq!(
        (query_param(&to, "code_challenge_method"), query_param(&to, "response_type")),
        ("S256".into(), "code".into())
    );
    let flow = cookie_named(&start, "sy_oidc").unwrap();
    let mut claims = claims;
    claims["nonce"] = json!(nonce.map_or_else(|| query_param(&to, "nonce"), str::to_owned));
    claims["aud"] = json!("console-client");
    *issuer.next_id_token.lock().unwrap() = Some(issuer.token(Algorithm::RS256, "rsa-1", "rsa1.pem", claims));
    let back = format!("/ui/oidc/callback?code=the-code&state={}", query_param(&to, "state"));
    let answer = call(client, gw, Method::GET, &back, "", &[("cookie", &flow)]).await;
    // The code was exchanged with the verifier whose S256 is the challenge sent, and the secret.
    if answer.status == 200 {
        let exchange = issuer.token_requests.lock().unwrap().last().cloned().unwrap();
        let body = exchange.split_once("\r\n\r\n").unwrap().1;
        let verifier = query_param(&format!("?{body}"), "code_verifier");
        let challenge =
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(verifier.as_bytes()));
        assert_eq!(challenge, query_param(&to, "code_challenge"));
        let basic = base64::engine::general_purpose::STANDARD.encode("console-client:client-secret");
        assert!(exchange
            .to_ascii_lowercase()
            .contains(&format!("authorization: basic {}", basic.to_ascii_lowercase())));
    }
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_sign_on_provisions_users_whose_role_and_teams_follow_the_claims() {
    let issuer = Issuer::start().await;
    let oidc = format!(
        ", oidc: {{issuer: '{}', client_id: console-client, client_secret: client-secret, \
         redirect_url: 'http://127.0.0.1/ui/oidc/callback', roles: {{ops: admin, leads: team_admin}}, teams_claim: teams}}",
        issuer.url
    );
    let (gw, _backend) = gateway(&issuer, &oidc).await;
    let client = TestClient::new();
    let a =
        master(&client, &gw, Method::POST, "/admin/teams", r#"{"name": "a"}"#).await["id"].as_str().unwrap().to_owned();
    master(&client, &gw, Method::POST, "/admin/teams", r#"{"name": "b"}"#).await;
    let login_page = call(&client, &gw, Method::GET, "/ui/login", "", &[]).await.text();
    assert!(login_page.contains(r#"data-testid="sso-login">"#), "the single sign-on button is shown");

    // First sign-in: the user is created, a team admin of the team the claim names (an unknown
    // team is skipped).
    let claims = issuer.claims(
        "sub-1",
        None,
        json!({"email": "lead@corp.example", "name": "Lea", "groups": ["leads"], "teams": ["a", "ghost"]}),
    );
    let answer = sign_in(&client, &gw, &issuer, claims.clone(), None).await;
    // A page of the gateway's own moves on to the console (a redirect would lose the new
    // SameSite=Strict cookie on a navigation the provider's site started).
    assert_eq!(answer.status, 200, "{:?}", answer.headers);
    assert!(answer.text().contains(r#"content="0;url=/ui""#), "{}", answer.text());
    let session = cookie_named(&answer, "sy_console").unwrap();
    let me = call(&client, &gw, Method::GET, "/ui/api/me", "", &[("cookie", &session)]).await.json();
    assert_eq!((me["role"].as_str(), me["user"]["email"].as_str()), (Some("team_admin"), Some("lead@corp.example")));
    assert_eq!(
        (me["teams"][0]["id"].as_str(), me["teams"][0]["role"].as_str()),
        (Some(a.as_str()), Some("team_admin"))
    );
    assert_eq!(me["teams"].as_array().unwrap().len(), 1);
    // What the console answers is the role's: their team only, no audit log, no overview.
    let as_lead = |path: &'static str| {
        let (client, gw, session) = (&client, &gw, session.clone());
        async move { call(client, gw, Method::GET, path, "", &[("cookie", &session)]).await }
    };
    assert_eq!(as_lead("/ui/api/teams").await.json()["data"].as_array().unwrap().len(), 1);
    assert_eq!(as_lead("/ui/api/audit").await.status, 403);
    assert_eq!(as_lead("/ui/api/overview").await.status, 403);
    assert_eq!(as_lead("/ui/api/usage").await.status, 200);

    // The next sign-in follows the claims: no mapped group (the default role, viewer), no teams.
    let claims2 = issuer.claims("sub-1", None, json!({"email": "lead@corp.example", "groups": ["other"], "teams": []}));
    let answer = sign_in(&client, &gw, &issuer, claims2, None).await;
    let session2 = cookie_named(&answer, "sy_console").unwrap();
    let me = call(&client, &gw, Method::GET, "/ui/api/me", "", &[("cookie", &session2)]).await.json();
    assert_eq!((me["role"].as_str(), me["teams"].as_array().unwrap().len()), (Some("viewer"), 0));
    let users = master(&client, &gw, Method::GET, "/admin/users", "").await;
    let user = users["data"].as_array().unwrap().iter().find(|u| u["email"] == "lead@corp.example").unwrap().clone();
    assert_eq!((user["role"].as_str(), user["name"].as_str()), (Some("viewer"), Some("Lea")));

    // Revoked: every session of the user ends at once.
    let id = user["id"].as_str().unwrap();
    master(&client, &gw, Method::PATCH, &format!("/admin/users/{id}"), r#"{"revoke_sessions": true}"#).await;
    for s in [&session, &session2] {
        assert_eq!(call(&client, &gw, Method::GET, "/ui/api/me", "", &[("cookie", s)]).await.status, 401);
    }

    // A replayed ID token (another sign-in's nonce), a callback without the flow's cookie or
    // with another state: refused back to the login page, and audited.
    let answer = sign_in(&client, &gw, &issuer, claims.clone(), Some("not-this-flow")).await;
    assert_eq!(answer.header("location"), Some("/ui/login?failed=sso"));
    let r = call(&client, &gw, Method::GET, "/ui/oidc/callback?code=c&state=s", "", &[]).await;
    assert_eq!(r.header("location"), Some("/ui/login?failed=sso"));
    let start = call(&client, &gw, Method::GET, "/ui/oidc/login", "", &[]).await;
    let flow = cookie_named(&start, "sy_oidc").unwrap();
    let r = call(&client, &gw, Method::GET, "/ui/oidc/callback?code=c&state=other", "", &[("cookie", &flow)]).await;
    assert_eq!(r.header("location"), Some("/ui/login?failed=sso"));
    assert!(cookie_named(&r, "sy_console").is_none());
    let audit = master(&client, &gw, Method::GET, "/admin/audit?limit=1000", "").await;
    let actions: Vec<(String, String)> = audit["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["actor"].as_str().unwrap().to_owned(), e["action"].as_str().unwrap().to_owned()))
        .collect();
    for wanted in [
        ("user:lead@corp.example (sso)", "console.login"),
        ("single sign-on", "user.create"),
        ("single sign-on", "team.member.put"),
        ("single sign-on", "team.member.delete"),
        ("unknown (sso)", "console.login_failed"),
    ] {
        assert!(actions.iter().any(|(a, w)| a == wanted.0 && w == wanted.1), "{wanted:?} in {actions:?}");
    }
}
