//! Passthrough (issue 33), black-box: `/passthrough/{backend}/{path}` forwards any request to the
//! named backend with the backend's own credentials, never the client's; a key reaches only the
//! backends its `passthrough` list names, within its rate limit; each request is a usage record
//! with its status, latency and the answer's tokens.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use bytes::Bytes;
use http::Method;
use serde_json::{json, Value};
use switchyard_testkit::{MockConfig, TestClient};

use crate::common::*;

const MASTER: &str = "passthrough-master";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_reaches_the_backends_it_lists_with_the_backends_credentials_and_is_recorded() {
    // The mock refuses anything without its own key: the client's key must not reach it.
    let backend =
        mock_with(&["m"], MockConfig { api_key: Some("upstream-secret".into()), ..MockConfig::default() }).await;
    let dir = scratch_dir();
    let yaml = format!(
        "listen: 127.0.0.1:0\n\
         storage: {{url: '{}', usage_journal_dir: '{}/usage'}}\n\
         auth: {{master_key: {MASTER}}}\n\
         backends:\n  - {{name: b0, url: '{}', api_key: upstream-secret}}\n",
        db_url(&dir),
        dir.display(),
        backend.url(),
    );
    let gw = gateway_yaml(&yaml).await;
    let client = TestClient::new();
    let admin = format!("Bearer {MASTER}");
    let create = |body: Value| {
        let (client, url, admin) = (client.clone(), format!("{}/admin/keys", gw.url()), admin.clone());
        async move {
            let r = client.post_json(&url, body.to_string().as_bytes(), &[("authorization", &admin)]).await.unwrap();
            assert_eq!(r.status, 201, "{}", r.text());
            assert_eq!(r.json()["passthrough"], body.get("passthrough").cloned().unwrap_or(json!([])));
            format!("Bearer {}", r.json()["key"].as_str().unwrap())
        }
    };
    let allowed = create(json!({"passthrough": ["b*"], "rpm": 3})).await;
    let other = create(json!({})).await;
    let send = |method: Method, path: &str, key: &str, body: &str| {
        let (client, url, key, body) = (client.clone(), format!("{}{path}", gw.url()), key.to_owned(), body.to_owned());
        async move {
            let headers = [("authorization", key.as_str()), ("content-type", "application/json"), ("cookie", "c=1")];
            client.request(method, &url, Bytes::from(body), &headers).await.unwrap()
        }
    };

    let chat = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let r = send(Method::POST, "/passthrough/b0/v1/chat/completions", &allowed, &chat).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["object"], "chat.completion");
    let r = send(Method::GET, "/passthrough/b0/v1/models?limit=5", &allowed, "").await;
    assert_eq!((r.status.as_u16(), &r.json()["object"]), (200, &json!("list")), "{}", r.text());
    // The third request in the minute is the key's last; the fourth is refused.
    let r = send(Method::POST, "/passthrough/b0/v1/embeddings", &allowed, r#"{"model": "m", "input": "x"}"#).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = send(Method::GET, "/passthrough/b0/v1/models", &allowed, "").await;
    assert_eq!(r.status, 429, "{}", r.text());

    let r = send(Method::GET, "/passthrough/b0/v1/models", &other, "").await;
    assert_eq!((r.status.as_u16(), &r.json()["error"]["code"]), (403, &json!("passthrough_not_allowed")));
    let r = send(Method::GET, "/passthrough/nope/v1/models", &admin, "").await;
    assert_eq!(r.status, 404);
    let r = send(Method::GET, "/passthrough/b0/v1/models", "Bearer sy-wrong", "").await;
    assert_eq!(r.status, 401);
    // The master key may use any backend.
    let r = send(Method::GET, "/passthrough/b0/v1/models", &admin, "").await;
    assert_eq!(r.status, 200);

    // A record per forwarded request (four), the chat's with its tokens, the model its body named.
    let rows = request_log(&client, &gw, MASTER, 4).await;
    assert_eq!(rows.len(), 4, "{rows:?}");
    let chat_row = rows.iter().find(|r| r["model_requested"] == "m" && r["completion_tokens"].as_u64() > Some(0));
    let chat_row = chat_row.unwrap_or_else(|| panic!("{rows:?}"));
    assert_eq!((&chat_row["backend"], &chat_row["status"]), (&json!("b0"), &json!(200)), "{chat_row}");
    assert_eq!(chat_row["estimated"], false, "the backend's own count: {chat_row}");
    assert!(rows.iter().any(|r| r["model_requested"] == "passthrough/b0"), "{rows:?}");
}
