//! JWT client authentication, black-box, against an issuer served here (discovery document and
//! JWKS, which the test can rotate or take down): a token from a trusted issuer is a key of its
//! team (limits, budget, usage under its user and team); every malformed or forged token is a
//! 401 with its own code, never a 500; a provider that cannot be reached is a 503 only when no
//! cached key can check the token.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::common::*;
use http::Method;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde_json::{json, Value};
use switchyard_gateway::RunningGateway;
use switchyard_testkit::{TestClient, TestResponse};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const MASTER: &str = "master-key-for-tests";
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/jwt");

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!("{FIXTURES}/{name}")).unwrap()
}

/// What the issuer serves: its JWKS (None: it answers 503, as a provider that is down), and as
/// an OpenID provider, the token endpoint's next ID token (the last token request is kept).
pub(crate) struct Issuer {
    pub url: String,
    jwks: Arc<Mutex<Option<Vec<u8>>>>,
    fetches: Arc<Mutex<usize>>,
    pub next_id_token: Arc<Mutex<Option<String>>>,
    pub token_requests: Arc<Mutex<Vec<String>>>,
}

/// A request's head and body (by `content-length`), read off `conn`.
async fn read_request(conn: &mut tokio::net::TcpStream) -> String {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = conn.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned()))
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(0);
            if body.len() >= length {
                return text;
            }
        }
    }
    String::from_utf8_lossy(&buf).into_owned()
}

impl Issuer {
    pub async fn start() -> Issuer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let jwks = Arc::new(Mutex::new(Some(fixture("jwks.json"))));
        let fetches = Arc::new(Mutex::new(0));
        let next_id_token = Arc::new(Mutex::new(None::<String>));
        let token_requests = Arc::new(Mutex::new(Vec::new()));
        let (served, counted, base) = (jwks.clone(), fetches.clone(), url.clone());
        let (next, requests) = (next_id_token.clone(), token_requests.clone());
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let (served, counted, base) = (served.clone(), counted.clone(), base.clone());
                let (next, requests) = (next.clone(), requests.clone());
                tokio::spawn(async move {
                    let request = read_request(&mut conn).await;
                    let path = request.split_whitespace().nth(1).unwrap_or("/").to_owned();
                    let body = match path.as_str() {
                        "/.well-known/openid-configuration" => Some(
                            json!({"issuer": base, "jwks_uri": format!("{base}/jwks"),
                                   "authorization_endpoint": format!("{base}/authorize"),
                                   "token_endpoint": format!("{base}/token")})
                            .to_string()
                            .into_bytes(),
                        ),
                        "/jwks" => {
                            *counted.lock().unwrap() += 1;
                            served.lock().unwrap().clone()
                        }
                        "/token" => {
                            requests.lock().unwrap().push(request.clone());
                            let token = next.lock().unwrap().clone();
                            token.map(|t| {
                                json!({"id_token": t, "access_token": "at", "token_type": "Bearer"})
                                    .to_string()
                                    .into_bytes()
                            })
                        }
                        _ => None,
                    };
                    let answer = match body {
                        Some(b) => {
                            let mut a = format!(
                                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                                b.len()
                            )
                            .into_bytes();
                            a.extend(b);
                            a
                        }
                        None => b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                            .to_vec(),
                    };
                    let _ = conn.write_all(&answer).await;
                });
            }
        });
        Issuer { url, jwks, fetches, next_id_token, token_requests }
    }

    pub fn token(&self, alg: Algorithm, kid: &str, key_file: &str, claims: Value) -> String {
        let mut header = Header::new(alg);
        header.kid = Some(kid.to_owned());
        let pem = fixture(key_file);
        let key = match alg {
            Algorithm::ES256 => EncodingKey::from_ec_pem(&pem),
            Algorithm::EdDSA => EncodingKey::from_ed_pem(&pem),
            _ => EncodingKey::from_rsa_pem(&pem),
        }
        .unwrap();
        encode(&header, &claims, &key).unwrap()
    }

    /// Standard claims for `sub` in `team`, valid for an hour; `extra` overrides.
    pub fn claims(&self, sub: &str, team: Option<&str>, extra: Value) -> Value {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
        let mut c = json!({"iss": self.url, "sub": sub, "aud": ["switchyard"], "iat": now, "exp": now + 3600});
        if let Some(team) = team {
            c["groups"] = json!([team]);
        }
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        c
    }
}

async fn gateway_for(
    issuer: &Issuer,
    backend: &switchyard_testkit::MockServer,
    dir: &std::path::Path,
) -> RunningGateway {
    let db = db_url(dir);
    let yaml = format!(
        "listen: 127.0.0.1:0\nstorage: {{url: '{db}', usage_journal_dir: '{0}/usage'}}\n\
         auth: {{master_key: {MASTER}, jwt: [{{issuer: '{1}', audiences: [switchyard], team_claim: groups}}]}}\n\
         backends:\n{2}",
        dir.display(),
        issuer.url,
        backends_yaml(&[backend])
    );
    gateway_yaml(&yaml).await
}

async fn chat_with(client: &TestClient, gw: &RunningGateway, token: &str) -> TestResponse {
    let auth = format!("Bearer {token}");
    client
        .post_json(
            &format!("{}/v1/chat/completions", gw.url()),
            chat_body("m", false).as_bytes(),
            &[("authorization", &auth)],
        )
        .await
        .unwrap()
}

async fn admin(client: &TestClient, gw: &RunningGateway, method: Method, path: &str, body: &str) -> TestResponse {
    admin_as(client, gw, MASTER, method, path, body).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_token_is_a_key_of_its_team_and_forged_ones_are_refused_with_a_reason() {
    let issuer = Issuer::start().await;
    let backend = mock(&["m"]).await;
    let dir = scratch_dir();
    let gw = gateway_for(&issuer, &backend, &dir).await;
    let client = TestClient::new();
    let made = admin(&client, &gw, Method::POST, "/admin/teams", r#"{"name": "ml", "rpm": 3}"#).await;
    assert_eq!(made.status, 201);

    // RS256, ES256 and EdDSA from the issuer's JWKS (found by discovery); the team's rpm holds
    // across the user's tokens.
    let rs = issuer.token(Algorithm::RS256, "rsa-1", "rsa1.pem", issuer.claims("svc-a", Some("ml"), json!({})));
    let es = issuer.token(Algorithm::ES256, "ec-1", "ec1.pem", issuer.claims("svc-a", Some("ml"), json!({})));
    let ed = issuer.token(Algorithm::EdDSA, "ed-1", "ed1.pem", issuer.claims("svc-a", Some("ml"), json!({})));
    for token in [&rs, &es, &ed] {
        let r = chat_with(&client, &gw, token).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let fourth = chat_with(&client, &gw, &rs).await;
    assert_eq!((fourth.status.as_u16(), fourth.json()["error"]["code"].as_str()), (429, Some("rate_limit_exceeded")));
    assert!(fourth.json()["error"]["message"].as_str().unwrap().contains("team"));
    assert_eq!(*issuer.fetches.lock().unwrap(), 1, "the JWKS is fetched once and kept");
    // Usage is recorded under the token's user and team.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let usage = admin(&client, &gw, Method::GET, "/admin/usage?team=ml&user=svc-a", "").await.json();
        // The three answered (a refusal by a limit is not a request that reached a model).
        if usage["totals"]["requests"].as_u64() == Some(3) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "usage never named the team: {usage}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    // Every forgery or mistake: a 401 with its own code.
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    let unsigned = {
        let b64 = |v: Value| {
            use base64::Engine;
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
        };
        format!("{}.{}.", b64(json!({"alg": "none", "typ": "JWT"})), b64(issuer.claims("x", Some("ml"), json!({}))))
    };
    let hs256_with_public_key = encode(
        &Header { kid: Some("rsa-1".into()), ..Header::new(Algorithm::HS256) },
        &issuer.claims("x", Some("ml"), json!({})),
        &EncodingKey::from_secret(&fixture("rsa1.pub.pem")),
    )
    .unwrap();
    let cases = [
        (
            issuer.token(Algorithm::RS256, "rsa-1", "rsa1.pem", issuer.claims("x", None, json!({"exp": now - 3600}))),
            "token_expired",
        ),
        (
            issuer.token(Algorithm::RS256, "rsa-1", "rsa1.pem", issuer.claims("x", None, json!({"nbf": now + 3600}))),
            "token_not_yet_valid",
        ),
        (
            issuer.token(
                Algorithm::RS256,
                "rsa-1",
                "rsa1.pem",
                issuer.claims("x", None, json!({"aud": "someone-else"})),
            ),
            "invalid_audience",
        ),
        (issuer.token(Algorithm::RS256, "rsa-1", "rsa2.pem", issuer.claims("x", None, json!({}))), "invalid_signature"),
        (issuer.token(Algorithm::RS256, "rsa-9", "rsa1.pem", issuer.claims("x", None, json!({}))), "unknown_key_id"),
        (
            issuer.token(
                Algorithm::RS256,
                "rsa-1",
                "rsa1.pem",
                issuer.claims("x", None, json!({"iss": "https://evil.example"})),
            ),
            "unknown_issuer",
        ),
        (unsigned, "unsupported_token_algorithm"),
        (hs256_with_public_key, "unsupported_token_algorithm"),
        (format!("eyJ{}", "A".repeat(10_000)), "token_too_large"),
        ("eyJhbGciOiJSUzI1NiJ9.bm90IGpzb24.c2ln".to_owned(), "invalid_token"),
    ];
    for (token, code) in &cases {
        let r = chat_with(&client, &gw, token).await;
        assert_eq!((r.status.as_u16(), r.json()["error"]["code"].as_str()), (401, Some(*code)), "{code}: {}", r.text());
    }
    // A team the gateway does not know.
    let stranger = issuer.token(Algorithm::RS256, "rsa-1", "rsa1.pem", issuer.claims("y", Some("nobody"), json!({})));
    let r = chat_with(&client, &gw, &stranger).await;
    assert_eq!((r.status.as_u16(), r.json()["error"]["code"].as_str()), (403, Some("unknown_team")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_keys_are_fetched_and_a_provider_that_is_down_only_fails_what_no_cached_key_checks() {
    let issuer = Issuer::start().await;
    let backend = mock(&["m"]).await;
    let dir = scratch_dir();
    let gw = gateway_for(&issuer, &backend, &dir).await;
    let client = TestClient::new();
    let old = issuer.token(Algorithm::RS256, "rsa-1", "rsa1.pem", issuer.claims("svc", None, json!({})));
    let r = chat_with(&client, &gw, &old).await;
    assert_eq!(r.status, 200, "{}", r.text());
    // The provider rotates in a new key: a token naming it makes the gateway fetch again.
    *issuer.jwks.lock().unwrap() = Some(fixture("jwks-rotated.json"));
    let new = issuer.token(Algorithm::RS256, "rsa-2", "rsa2.pem", issuer.claims("svc", None, json!({})));
    assert_eq!(chat_with(&client, &gw, &new).await.status, 200);
    assert_eq!(*issuer.fetches.lock().unwrap(), 2);
    // Unknown kids do not make it hammer the provider: the first makes it fetch once more, and
    // finding nothing holds fetches off for 30 s.
    for i in 0..5 {
        let forged =
            issuer.token(Algorithm::RS256, &format!("nope-{i}"), "rsa1.pem", issuer.claims("svc", None, json!({})));
        assert_eq!(chat_with(&client, &gw, &forged).await.json()["error"]["code"], "unknown_key_id");
    }
    assert_eq!(*issuer.fetches.lock().unwrap(), 3);
    // The provider goes down: cached keys keep checking tokens, new ones too.
    *issuer.jwks.lock().unwrap() = None;
    let fresh = issuer.token(Algorithm::ES256, "ec-1", "ec1.pem", issuer.claims("svc-2", None, json!({})));
    assert_eq!(chat_with(&client, &gw, &fresh).await.status, 200);

    // A gateway that never reached the provider cannot check anything: 503 with Retry-After.
    let dir = scratch_dir();
    let cold = gateway_for(&issuer, &backend, &dir).await;
    let r = chat_with(&client, &cold, &old).await;
    assert_eq!((r.status.as_u16(), r.json()["error"]["code"].as_str()), (503, Some("identity_unavailable")));
    assert!(r.header("retry-after").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_is_an_oauth_protected_resource_and_a_token_sees_only_its_teams_tools() {
    use switchyard_testkit::{McpMock, McpMockConfig};
    let issuer = Issuer::start().await;
    let files = McpMock::start("127.0.0.1:0".parse().unwrap(), McpMockConfig::default()).await.unwrap();
    let search = McpMock::start("127.0.0.1:0".parse().unwrap(), McpMockConfig::default()).await.unwrap();
    let dir = scratch_dir();
    let db = db_url(&dir);
    let yaml = format!(
        "listen: 127.0.0.1:0\nstorage: {{url: '{db}', usage_journal_dir: '{0}/usage'}}\n\
         auth: {{master_key: {MASTER}, jwt: [{{issuer: '{1}', audiences: [switchyard], team_claim: groups}}]}}\n\
         mcp:\n  servers:\n    - {{name: files, url: '{2}'}}\n    - {{name: search, url: '{3}'}}\n",
        dir.display(),
        issuer.url,
        files.url(),
        search.url()
    );
    let gw = gateway_yaml(&yaml).await;
    let client = TestClient::new();
    let team = r#"{"name": "docs", "mcp_servers": ["files"], "rpm": 2}"#;
    assert_eq!(admin(&client, &gw, Method::POST, "/admin/teams", team).await.status, 201);

    // RFC 9728: where the resource's authorization servers are.
    let meta = client.get(&format!("{}/.well-known/oauth-protected-resource/mcp", gw.url())).await.unwrap();
    assert_eq!(meta.status, 200, "{}", meta.text());
    let host = gw.url().trim_start_matches("http://").to_owned();
    assert_eq!(meta.json()["resource"], format!("http://{host}/mcp"));
    assert_eq!(meta.json()["authorization_servers"], json!([issuer.url]));
    let root = client.get(&format!("{}/.well-known/oauth-protected-resource", gw.url())).await.unwrap();
    assert_eq!(root.json()["resource"], format!("http://{host}/mcp"));

    // Unauthenticated: a 401 that names the metadata.
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let accept = ("accept", "application/json, text/event-stream");
    let bare =
        client.request(Method::POST, &format!("{}/mcp", gw.url()), init.to_string().into(), &[accept]).await.unwrap();
    assert_eq!(bare.status, 401);
    assert_eq!(
        bare.header("www-authenticate"),
        Some(format!(r#"Bearer resource_metadata="http://{host}/.well-known/oauth-protected-resource/mcp""#).as_str())
    );

    // The team's token: only the team's server's tools.
    let token = issuer.token(Algorithm::RS256, "rsa-1", "rsa1.pem", issuer.claims("agent", Some("docs"), json!({})));
    let auth = format!("Bearer {token}");
    let headers = [("authorization", auth.as_str()), accept];
    let url = format!("{}/mcp", gw.url());
    let r = client.request(Method::POST, &url, init.to_string().into(), &headers).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let session = r.header("mcp-session-id").unwrap().to_owned();
    let with_session = [("authorization", auth.as_str()), accept, ("mcp-session-id", session.as_str())];
    let ack = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    client.request(Method::POST, &url, ack.to_string().into(), &with_session).await.unwrap();
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
    let tools = client.request(Method::POST, &url, list.to_string().into(), &with_session).await.unwrap().json();
    let names: Vec<&str> =
        tools["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(!names.is_empty() && names.iter().all(|n| n.starts_with("files__")), "{names:?}");
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "search__echo", "arguments": {"text": "x"}}});
    let refused = client.request(Method::POST, &url, call.to_string().into(), &with_session).await.unwrap().json();
    assert!(refused.get("error").is_some() || refused["result"]["isError"] == true, "{refused}");
    // The team's rpm covers tool calls: the refused call counted nothing, so two go through.
    for id in 3..5 {
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "files__echo", "arguments": {"text": "x"}}});
        let r = client.request(Method::POST, &url, call.to_string().into(), &with_session).await.unwrap().json();
        assert!(r.get("result").is_some(), "{r}");
    }
    let call = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "files__echo", "arguments": {"text": "x"}}});
    let r = client.request(Method::POST, &url, call.to_string().into(), &with_session).await.unwrap().json();
    assert_eq!(r["error"]["data"]["reason"], "rate_limited", "{r}");
}

/// Policy rules read a verified token's claims (`jwt.claims`) and the client's address
/// (`source.ip`), and name the rule that decided (issue 58).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_rules_decide_by_token_claims_and_the_client_address() {
    let issuer = Issuer::start().await;
    let backend = mock(&["m"]).await;
    let dir = scratch_dir();
    let yaml = format!(
        "listen: 127.0.0.1:0\nstorage: {{url: '{}', usage_journal_dir: '{}/usage'}}\n\
         auth: {{master_key: {MASTER}, jwt: [{{issuer: '{}', audiences: [switchyard], team_claim: groups}}]}}\n\
         policies:\n\
         \x20 - {{name: admins, when: \"has(jwt.claims.role) && jwt.claims.role == 'admin'\", then: allow}}\n\
         \x20 - {{name: no-contractors, when: \"jwt.claims.contract == true\", then: deny, message: \"contractors use the other gateway\"}}\n\
         \x20 - {{name: loopback-testers, when: \"source.ip == '127.0.0.1' && jwt.claims.role == 'tester'\", then: allow}}\n\
         \x20 - {{name: elsewhere, when: \"!source.ip.startsWith('127.')\", then: deny}}\n\
         backends:\n{}",
        db_url(&dir),
        dir.display(),
        issuer.url,
        backends_yaml(&[&backend])
    );
    let gw = gateway_yaml(&yaml).await;
    let client = TestClient::new();
    let token = |extra: Value| issuer.token(Algorithm::RS256, "rsa-1", "rsa1.pem", issuer.claims("svc-p", None, extra));
    let rows = [
        (json!({"role": "admin", "contract": true}), 200, Some("admins")),
        (json!({"contract": true}), 403, Some("no-contractors")),
        (json!({"role": "tester"}), 200, Some("loopback-testers")),
        (json!({}), 200, None),
    ];
    for (claims, status, rule) in rows {
        let r = chat_with(&client, &gw, &token(claims.clone())).await;
        assert_eq!((r.status.as_u16(), r.header("x-switchyard-policy")), (status, rule), "{claims}: {}", r.text());
    }
}
