//! The console's server side, black-box: nothing under `/ui/api` without a login, the session
//! cookie's attributes, logout, the CSRF header on writes, assets gzipped and revalidated, and the
//! request log's lookups, filters and pages over real usage rows. (The browser suite,
//! tests/console, drives the pages themselves.)

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::collections::HashSet;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Method;
use switchyard_gateway::RunningGateway;
use switchyard_testkit::{TestClient, TestResponse};

use crate::common::*;

const MASTER: &str = "console-master-key";
const CSRF: (&str, &str) = ("x-switchyard-console", "1");

async fn console_gateway(extra: &str) -> (RunningGateway, switchyard_testkit::MockServer) {
    let backend = mock(&["m"]).await;
    let dir = scratch_dir();
    let yaml = format!(
        "listen: 127.0.0.1:0\nstorage: {{url: '{}', usage_journal_dir: '{}/usage'}}\nauth: {{master_key: {MASTER}}}\n{extra}backends:\n{}",
        db_url(&dir),
        dir.display(),
        backends_yaml(&[&backend])
    );
    (gateway_yaml(&yaml).await, backend)
}

async fn call(
    client: &TestClient,
    gw: &RunningGateway,
    method: Method,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> TestResponse {
    client.request(method, &format!("{}{path}", gw.url()), Bytes::from(body.to_owned()), headers).await.unwrap()
}

/// One chat request for `model` as `key`: its status and request id.
async fn chat_as(client: &TestClient, gw: &RunningGateway, model: &str, key: &str) -> (u16, String) {
    let bearer = format!("Bearer {key}");
    let r = client
        .post_json(
            &format!("{}/v1/chat/completions", gw.url()),
            chat_body(model, false).as_bytes(),
            &[("authorization", &bearer)],
        )
        .await
        .unwrap();
    (r.status.as_u16(), r.header("x-request-id").unwrap_or_default().to_owned())
}

/// Log in with `key`; the session cookie (`name=value`) when it worked.
async fn login(client: &TestClient, gw: &RunningGateway, key: &str) -> (TestResponse, Option<String>) {
    let form = format!("key={key}");
    let r =
        call(client, gw, Method::POST, "/ui/login", &form, &[("content-type", "application/x-www-form-urlencoded")])
            .await;
    let cookie = r.header("set-cookie").and_then(|c| c.split(';').next()).map(str::to_owned);
    (r, cookie)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_without_a_login_and_the_session_cookie_is_guarded() {
    let (gw, _backend) = console_gateway("").await;
    let client = TestClient::new();

    let r = call(&client, &gw, Method::GET, "/ui", "", &[]).await;
    assert_eq!((r.status.as_u16(), r.header("location")), (303, Some("/ui/login")));
    for path in ["/ui/api/overview", "/ui/api/requests", "/ui/api/keys", "/ui/api/usage", "/ui/api/backends"] {
        let r = call(&client, &gw, Method::GET, path, "", &[]).await;
        assert_eq!(r.status, 401, "{path}: {}", r.text());
        assert!(!r.text().contains("\"data\""), "{path} leaked data");
    }
    let login_page = call(&client, &gw, Method::GET, "/ui/login", "", &[]).await;
    assert_eq!(login_page.status, 200);
    assert!(login_page.text().contains("name=\"key\""));

    let (r, cookie) = login(&client, &gw, "not-the-master-key").await;
    assert_eq!((r.status.as_u16(), r.header("location"), cookie), (303, Some("/ui/login?failed=1"), None));

    let (r, cookie) = login(&client, &gw, MASTER).await;
    assert_eq!((r.status.as_u16(), r.header("location")), (303, Some("/ui")));
    let set = r.header("set-cookie").unwrap();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/ui", "Max-Age=43200"] {
        assert!(set.contains(attribute), "{set}");
    }
    let cookie = cookie.unwrap();
    let with_cookie = [("cookie", cookie.as_str())];

    let page = call(&client, &gw, Method::GET, "/ui", "", &with_cookie).await;
    assert_eq!(page.status, 200);
    assert!(page.header("content-security-policy").unwrap().contains("frame-ancestors 'none'"));
    let overview = call(&client, &gw, Method::GET, "/ui/api/overview", "", &with_cookie).await;
    assert_eq!(overview.status, 200, "{}", overview.text());
    let v = overview.json();
    assert_eq!(v["backends"][0]["name"], "b0", "{v}");
    assert!(v["series"]["t"].is_array() && v["current"].is_object() && v["today"]["requests"].is_u64(), "{v}");

    // Writes need the console's header (a cross-site form cannot send it).
    let body = r#"{"name":"from-the-console","models":["m"]}"#;
    let r = call(&client, &gw, Method::POST, "/ui/api/keys", body, &with_cookie).await;
    assert_eq!(r.status, 403, "{}", r.text());
    let r = call(&client, &gw, Method::POST, "/ui/api/keys", body, &[with_cookie[0], CSRF]).await;
    assert_eq!(r.status, 201, "{}", r.text());
    let secret = r.json()["key"].as_str().unwrap().to_owned();
    let id = r.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(chat_as(&client, &gw, "m", &secret).await.0, 200);
    let r = call(&client, &gw, Method::DELETE, &format!("/ui/api/keys/{id}"), "", &[with_cookie[0], CSRF]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(chat_as(&client, &gw, "m", &secret).await.0, 401, "a revoked key still works");

    // A forged or altered cookie is refused; so is a logged-out one.
    let (expires, _) = cookie.trim_start_matches("sy_console=").split_once('.').unwrap();
    let forged = format!("sy_console={}.{}", expires.parse::<i64>().unwrap() + 1000, "00".repeat(32));
    let r = call(&client, &gw, Method::GET, "/ui/api/overview", "", &[("cookie", &forged)]).await;
    assert_eq!(r.status, 401);
    let r = call(&client, &gw, Method::POST, "/ui/logout", "", &with_cookie).await;
    assert_eq!((r.status.as_u16(), r.header("location")), (303, Some("/ui/login")));
    assert!(r.header("set-cookie").unwrap().contains("Max-Age=0"));
    let r = call(&client, &gw, Method::GET, "/ui/api/overview", "", &with_cookie).await;
    assert_eq!(r.status, 401, "a logged-out session still works");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn assets_are_gzipped_revalidated_and_confined() {
    let (gw, _backend) = console_gateway("").await;
    let client = TestClient::new();
    // A page module (app.js, the entry, is too small for gzip to halve): nested names are served too.
    let entry = call(&client, &gw, Method::GET, "/ui/assets/app.js", "", &[]).await;
    assert_eq!(entry.status, 200);
    assert!(entry.header("content-type").unwrap().starts_with("text/javascript"));
    let plain = call(&client, &gw, Method::GET, "/ui/assets/pages/overview.js", "", &[]).await;
    assert_eq!(plain.status, 200);
    assert!(plain.header("content-type").unwrap().starts_with("text/javascript"));
    let zipped =
        call(&client, &gw, Method::GET, "/ui/assets/pages/overview.js", "", &[("accept-encoding", "br, gzip")]).await;
    assert_eq!(zipped.header("content-encoding"), Some("gzip"));
    assert!(zipped.body.len() < plain.body.len() / 2, "{} vs {}", zipped.body.len(), plain.body.len());
    let etag = plain.header("etag").unwrap().to_owned();
    let again = call(&client, &gw, Method::GET, "/ui/assets/pages/overview.js", "", &[("if-none-match", &etag)]).await;
    assert_eq!(again.status, 304);
    for path in ["/ui/assets/../Cargo.toml", "/ui/assets/%2e%2e/Cargo.toml", "/ui/assets/nothing.js", "/ui/elsewhere"] {
        let r = call(&client, &gw, Method::GET, path, "", &[]).await;
        assert_eq!(r.status, 404, "{path}");
    }
    gw.shutdown().await;

    // `console: {enabled: false}`: no console at all.
    let (gw, _backend) = console_gateway("console: {enabled: false}\n").await;
    for path in ["/ui", "/ui/login", "/ui/assets/app.js"] {
        assert_eq!(call(&client, &gw, Method::GET, path, "", &[]).await.status, 404, "{path}");
    }
    gw.shutdown().await;
}

/// Every id the request log lists for `query`, following its pages.
async fn all_pages(client: &TestClient, gw: &RunningGateway, cookie: &str, query: &str) -> Vec<String> {
    let mut ids = Vec::new();
    let mut before = String::new();
    loop {
        let path = format!("/ui/api/requests?limit=7&{query}{before}");
        let r = call(client, gw, Method::GET, &path, "", &[("cookie", cookie)]).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        ids.extend(v["data"].as_array().unwrap().iter().map(|row| row["id"].as_str().unwrap().to_owned()));
        match v["next"].as_str() {
            Some(next) => before = format!("&before={next}"),
            None => return ids,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_log_finds_filters_and_pages() {
    let (gw, _backend) = console_gateway("").await;
    let client = TestClient::new();
    let (_, cookie) = login(&client, &gw, MASTER).await;
    let cookie = cookie.unwrap();
    let mut ok = Vec::new();
    for _ in 0..20 {
        let (status, id) = chat_as(&client, &gw, "m", MASTER).await;
        assert_eq!(status, 200);
        ok.push(id);
    }
    let mut failed = Vec::new();
    for _ in 0..5 {
        let (status, id) = chat_as(&client, &gw, "no-such-model", MASTER).await;
        assert_eq!(status, 404);
        failed.push(id);
    }
    // The writer batches records into the database: wait (bounded) for all 25.
    let deadline = Instant::now() + Duration::from_secs(20);
    let everything = loop {
        let ids = all_pages(&client, &gw, &cookie, "").await;
        if ids.len() >= 25 {
            break ids;
        }
        assert!(Instant::now() < deadline, "{} of 25 requests in the log", ids.len());
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let unique: HashSet<&String> = everything.iter().collect();
    assert_eq!((everything.len(), unique.len()), (25, 25), "pages overlap or skip");
    let want: HashSet<&String> = ok.iter().chain(&failed).collect();
    assert_eq!(unique, want);

    let one =
        call(&client, &gw, Method::GET, &format!("/ui/api/requests?id={}", ok[3]), "", &[("cookie", &cookie)]).await;
    let rows = one.json()["data"].as_array().unwrap().clone();
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0]["id"].as_str(), rows[0]["status"].as_u64()), (Some(ok[3].as_str()), Some(200)));
    assert_eq!(rows[0]["backend"], "b0");
    assert!(rows[0]["ttft_ms"].is_number() && rows[0]["latency_ms"].is_number(), "{}", rows[0]);
    // Bodies are not kept unless the operator opts in.
    assert_eq!(rows[0]["has_bodies"], false);
    let path = format!("/ui/api/requests/bodies?id={}", ok[3]);
    assert_eq!(call(&client, &gw, Method::GET, &path, "", &[("cookie", &cookie)]).await.status, 404);

    let errors: HashSet<String> = all_pages(&client, &gw, &cookie, "status=error").await.into_iter().collect();
    assert_eq!(errors, failed.iter().cloned().collect());
    assert_eq!(all_pages(&client, &gw, &cookie, "status=4xx").await.len(), 5);
    assert_eq!(all_pages(&client, &gw, &cookie, "status=5xx").await.len(), 0);
    assert_eq!(all_pages(&client, &gw, &cookie, "model=m").await.len(), 20);
    assert_eq!(all_pages(&client, &gw, &cookie, "status=2xx&model=m").await.len(), 20);
    assert_eq!(all_pages(&client, &gw, &cookie, "to=1").await.len(), 0);
    for bad in ["status=teapot", "before=nonsense", "from=yesterday", "sort=id"] {
        let r = call(&client, &gw, Method::GET, &format!("/ui/api/requests?{bad}"), "", &[("cookie", &cookie)]).await;
        assert_eq!(r.status, 400, "{bad}: {}", r.text());
    }

    // Usage by model and its CSV.
    let usage = call(&client, &gw, Method::GET, "/ui/api/usage?range=24h&by=model", "", &[("cookie", &cookie)]).await;
    let v = usage.json();
    let m = v["groups"].as_array().unwrap().iter().find(|g| g["name"] == "m").cloned().unwrap();
    assert_eq!(m["requests"], 20, "{v}");
    let csv = call(&client, &gw, Method::GET, "/ui/api/usage.csv?range=7d&by=model", "", &[("cookie", &cookie)]).await;
    assert!(csv.text().lines().any(|l| l.starts_with("m,m,20,")), "{}", csv.text());
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_playground_streams_through_the_real_pipeline() {
    let (gw, _backend) = console_gateway("").await;
    let client = TestClient::new();
    let (_, cookie) = login(&client, &gw, MASTER).await;
    let cookie = cookie.unwrap();
    let body = r#"{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}"#;
    let (status, headers, frames) = client
        .post_stream(&format!("{}/ui/api/chat/completions", gw.url()), body.as_bytes(), &[("cookie", &cookie), CSRF])
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert_eq!(headers.get("x-switchyard-backend").unwrap(), "b0");
    let text: String = frames.iter().map(|f| String::from_utf8_lossy(f).into_owned()).collect();
    assert!(text.contains("tok0") && text.trim_end().ends_with("data: [DONE]"), "{text}");
    let (status, _, _) =
        client.post_stream(&format!("{}/ui/api/chat/completions", gw.url()), body.as_bytes(), &[CSRF]).await.unwrap();
    assert_eq!(status, 401, "the playground without a login");
    gw.shutdown().await;
}

/// The log row of request `id` once the writer has stored it (bounded wait).
async fn logged(client: &TestClient, gw: &RunningGateway, cookie: &str, id: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = call(client, gw, Method::GET, &format!("/ui/api/requests?id={id}"), "", &[("cookie", cookie)]).await;
        if let Some(row) = r.json()["data"].as_array().and_then(|rows| rows.first().cloned()) {
            return row;
        }
        assert!(Instant::now() < deadline, "request {id} never reached the log");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_kept_on_opt_in_are_redacted_and_cut_at_the_cap() {
    let (gw, _backend) = console_gateway("console: {store_bodies: true, max_stored_body_bytes: 1024}\n").await;
    let client = TestClient::new();
    let (_, cookie) = login(&client, &gw, MASTER).await;
    let cookie = cookie.unwrap();
    let bearer = format!("Bearer {MASTER}");
    let secrets = ["sk-live-canary0123456789abcdef", MASTER, "hunter2-canary-password"];
    let content = format!("my keys: {} and {}.", secrets[0], secrets[1]);
    let body = serde_json::json!({
        "model": "m",
        "messages": [
            {"role": "user", "content": content, "password": secrets[2]},
            {"role": "user", "content": "filler ".repeat(300)},
        ],
    });
    for stream in [false, true] {
        let mut body = body.clone();
        body["stream"] = stream.into();
        let r = client
            .post_json(
                &format!("{}/v1/chat/completions", gw.url()),
                body.to_string().as_bytes(),
                &[("authorization", &bearer)],
            )
            .await
            .unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        let answer = r.text();
        let id = r.header("x-request-id").unwrap().to_owned();
        let row = logged(&client, &gw, &cookie, &id).await;
        assert_eq!(row["has_bodies"], true, "{row}");
        let path = format!("/ui/api/requests/bodies?id={id}");
        let kept = call(&client, &gw, Method::GET, &path, "", &[("cookie", &cookie)]).await;
        assert_eq!(kept.status, 200, "{}", kept.text());
        let kept = kept.json();
        let (request, response) = (kept["request"].as_str().unwrap(), kept["response"].as_str().unwrap());
        for secret in secrets {
            assert!(!request.contains(secret) && !response.contains(secret), "{secret} was stored: {request}");
        }
        assert!(request.contains("my keys: sk-[REDACTED] and [REDACTED]."), "{request}");
        assert!(request.contains(r#""password":"[REDACTED]""#), "{request}");
        assert!(
            request.len() <= 1024 && kept["truncated"] == true,
            "the request body is over the cap: {}",
            request.len()
        );
        // What the client received, as it received it (a stream as its events), up to the cap.
        assert!(answer.starts_with(response) && (response == answer || response.len() > 900), "stream: {stream}");
        if stream {
            assert!(response.starts_with("data: {"), "{response}");
        }
    }
    gw.shutdown().await;
}

/// With guardrails masking, the request log keeps the masked request (what was sent on) and the
/// masked answer (what the client got), never the raw text, and the record names the verdicts
/// (issue 32).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_bodies_hold_the_text_as_guardrails_masked_it() {
    let extra = "console: {store_bodies: true}\n\
                 guardrails:\n  default: [pii]\n  pii: {type: pii, action: mask}\n";
    let (gw, _backend) = console_gateway(extra).await;
    let client = TestClient::new();
    let (_, cookie) = login(&client, &gw, MASTER).await;
    let cookie = cookie.unwrap();
    let bearer = format!("Bearer {MASTER}");
    let body =
        serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "mail jane.doe@example.com"}]});
    let r = client
        .post_json(
            &format!("{}/v1/chat/completions", gw.url()),
            body.to_string().as_bytes(),
            &[("authorization", &bearer)],
        )
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let id = r.header("x-request-id").unwrap().to_owned();
    logged(&client, &gw, &cookie, &id).await;
    let kept =
        call(&client, &gw, Method::GET, &format!("/ui/api/requests/bodies?id={id}"), "", &[("cookie", &cookie)]).await;
    let request = kept.json()["request"].as_str().unwrap().to_owned();
    assert!(request.contains("mail [EMAIL]") && !request.contains("jane.doe"), "{request}");
}
