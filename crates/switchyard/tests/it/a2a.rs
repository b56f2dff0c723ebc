//! A2A agents behind the gateway (issue 59), what the SDK suite (tests/a2a) does not reach: the
//! agent's own headers in place of the client's credentials, the caller's trace continued, the
//! extended card only for keys granted it (and rewritten), a configured card served while the
//! agent is down, the guardrails on a message's text parts, and an agent address off the
//! allow-list refused when the configuration loads. The agent is a raw HTTP service here, so
//! what reaches it can be read back exactly.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::sync::{Arc, Mutex};

use http::Method;
use serde_json::{json, Value};
use switchyard_gateway::{Config, RunningGateway};
use switchyard_testkit::TestClient;
use tokio::io::AsyncWriteExt;

use crate::common::*;

const MASTER: &str = "a2a-master";

/// One request as the agent received it: its head (request line and headers, lower-cased) and body.
pub(crate) type Received = Arc<Mutex<Vec<(String, Value)>>>;

/// A raw A2A agent: its card names `interface` (itself by default), JSON-RPC calls are answered
/// by method (a message `task` is answered with a completed task). One request per connection.
pub(crate) struct MockAgent {
    pub url: String,
    pub received: Received,
}

pub(crate) async fn mock_agent(interface: Option<&str>) -> MockAgent {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let interface = interface.map_or_else(|| format!("{url}/"), str::to_owned);
    let card = json!({"name": "mock", "version": "1", "capabilities": {"extendedAgentCard": true},
                      "supportedInterfaces": [{"url": interface, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]});
    let received: Received = Arc::default();
    let kept = received.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let (kept, card) = (kept.clone(), card.clone());
            tokio::spawn(async move {
                let Some((head, body)) = crate::common::json_service::read_request(&mut socket).await else { return };
                let asked: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                kept.lock().unwrap().push((head.clone(), asked.clone()));
                let answer = if head.starts_with("get ") { card } else { answer(&asked, &card) };
                let answer = answer.to_string();
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                    answer.len()
                );
                let _ = socket.write_all(reply.as_bytes()).await;
            });
        }
    });
    MockAgent { url, received }
}

fn answer(asked: &Value, card: &Value) -> Value {
    let id = asked["id"].clone();
    match asked["method"].as_str() {
        Some("GetExtendedAgentCard") => {
            let mut extended = card.clone();
            extended["skills"] = json!([{"id": "secret", "name": "secret"}]);
            json!({"jsonrpc": "2.0", "id": id, "result": extended})
        }
        Some("SendMessage") if asked.pointer("/params/message/parts/0/text") == Some(&json!("task")) => {
            json!({"jsonrpc": "2.0", "id": id, "result": {"task": {"id": "t-1", "status": {"state": "TASK_STATE_COMPLETED"}}}})
        }
        Some("SendMessage") => {
            let text = asked.pointer("/params/message/parts/0/text").cloned().unwrap_or_default();
            json!({"jsonrpc": "2.0", "id": id, "result": {"message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": text}]}}})
        }
        _ => json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "method not found"}}),
    }
}

async fn gateway_with(agents: &str) -> RunningGateway {
    let dir = scratch_dir();
    let yaml = format!(
        "listen: 127.0.0.1:0\nauth: {{master_key: {MASTER}}}\nstorage: {{url: '{}', usage_journal_dir: '{}/usage'}}\n{agents}",
        db_url(&dir),
        dir.display()
    );
    gateway_yaml(&yaml).await
}

async fn key(client: &TestClient, gw: &RunningGateway, agents: Value) -> String {
    let r = admin_as(client, gw, MASTER, Method::POST, "/admin/keys", &json!({"agents": agents}).to_string()).await;
    assert_eq!(r.status, 201, "{}", r.text());
    r.json()["key"].as_str().unwrap().to_owned()
}

fn rpc(method: &str, text: &str) -> String {
    json!({"jsonrpc": "2.0", "id": 7, "method": method,
           "params": {"message": {"messageId": "u1", "role": "ROLE_USER", "parts": [{"text": text}]}}})
    .to_string()
}

/// The agent gets its configured credentials, never the client's; the A2A version header and the
/// caller's trace (its trace id, a new parent) pass on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_gets_its_own_credentials_and_the_callers_trace() {
    let agent = mock_agent(None).await;
    let agents = format!("agents:\n  a: {{url: '{}', headers: {{authorization: 'Bearer agent-secret'}}}}\n", agent.url);
    let gw = gateway_with(&agents).await;
    let client = TestClient::new();
    let key = key(&client, &gw, json!(["a"])).await;
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent = format!("00-{trace_id}-00f067aa0ba902b7-01");
    let auth = format!("Bearer {key}");
    let headers = [("authorization", auth.as_str()), ("traceparent", parent.as_str()), ("a2a-version", "1.0")];
    let url = format!("{}/a2a/a/", gw.url());
    let r = client.post_json(&url, rpc("SendMessage", "hi").as_bytes(), &headers).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["result"]["message"]["parts"][0]["text"], "hi");
    let received = agent.received.lock().unwrap().clone();
    let (head, _) = received.iter().find(|(h, _)| h.starts_with("post ")).unwrap();
    assert!(head.contains("authorization: bearer agent-secret"), "{head}");
    assert!(!head.contains(&key.to_ascii_lowercase()), "the client's key never reaches the agent: {head}");
    assert!(head.contains("a2a-version: 1.0"), "{head}");
    let sent = head.lines().find_map(|l| l.strip_prefix("traceparent: ")).unwrap();
    assert!(sent.starts_with(&format!("00-{trace_id}-")), "the caller's trace continues: {sent}");
}

/// The extended card is for keys granted it by name; it comes back with the gateway's URLs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_extended_card_goes_only_to_keys_granted_it_rewritten() {
    let agent = mock_agent(None).await;
    let gw = gateway_with(&format!("agents:\n  a: {{url: '{}'}}\n", agent.url)).await;
    let client = TestClient::new();
    let plain = key(&client, &gw, json!(["a"])).await;
    let granted = key(&client, &gw, json!(["a", "a/GetExtendedAgentCard"])).await;
    let url = format!("{}/a2a/a/", gw.url());
    let ask = json!({"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard"}).to_string();
    let r = client.post_json(&url, ask.as_bytes(), &[("authorization", &format!("Bearer {plain}"))]).await.unwrap();
    assert_eq!(r.status, 403, "{}", r.text());
    let r = client.post_json(&url, ask.as_bytes(), &[("authorization", &format!("Bearer {granted}"))]).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let card = r.json()["result"].clone();
    assert_eq!(card["skills"][0]["id"], "secret");
    assert_eq!(card["supportedInterfaces"][0]["url"], format!("{}/a2a/a/", gw.url()));
    assert!(!card.to_string().contains(&agent.url), "{card}");
}

/// A configured card is served as the agent's own would be (rewritten) while the agent is down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_card_is_served_while_the_agent_is_down() {
    let dir = scratch_dir();
    let file = dir.join("card.json");
    let down = "http://127.0.0.1:9";
    let card = json!({"name": "sleepy", "supportedInterfaces": [{"url": format!("{down}/rpc"), "protocolBinding": "JSONRPC"}]});
    std::fs::write(&file, card.to_string()).unwrap();
    let gw = gateway_with(&format!("agents:\n  sleepy: {{url: '{down}', card: '{}'}}\n", file.display())).await;
    let client = TestClient::new();
    let key = key(&client, &gw, json!(["sleepy"])).await;
    let url = format!("{}/a2a/sleepy/.well-known/agent-card.json", gw.url());
    let auth = format!("Bearer {key}");
    let r = client.request(Method::GET, &url, bytes::Bytes::new(), &[("authorization", &auth)]).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["supportedInterfaces"][0]["url"], format!("{}/a2a/sleepy/", gw.url()));
    // A call cannot reach it: a 502, not a hang.
    let r = client
        .post_json(
            &format!("{}/a2a/sleepy/", gw.url()),
            rpc("SendMessage", "x").as_bytes(),
            &[("authorization", &format!("Bearer {key}"))],
        )
        .await
        .unwrap();
    assert_eq!(r.status, 502, "{}", r.text());
}

/// A secret in a message's text is blocked by the guardrails on tool calls before the agent sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guardrails_block_a_secret_in_a_message_before_the_agent() {
    let agent = mock_agent(None).await;
    let agents = format!(
        "guardrails:\n  default: [secrets]\n  secrets: {{type: secrets, action: block, on: [tool_call]}}\nagents:\n  a: {{url: '{}'}}\n",
        agent.url
    );
    let gw = gateway_with(&agents).await;
    let client = TestClient::new();
    let key = key(&client, &gw, json!(["a"])).await;
    let url = format!("{}/a2a/a/", gw.url());
    let auth = [("authorization", format!("Bearer {key}"))];
    let auth: Vec<(&str, &str)> = auth.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let r = client.post_json(&url, rpc("SendMessage", "my key AKIAIOSFODNN7EXAMPLE").as_bytes(), &auth).await.unwrap();
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("secrets") && !r.text().contains("AKIAIOSFODNN7EXAMPLE"), "{}", r.text());
    let reached = agent.received.lock().unwrap().iter().filter(|(h, _)| h.starts_with("post ")).count();
    assert_eq!(reached, 0, "the agent never saw it");
    let r = client.post_json(&url, rpc("SendMessage", "all clear").as_bytes(), &auth).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
}

/// An agent's address must be on `security.agent_hosts` when it is set; a card naming any other
/// host is refused (the SDK suite shows the metadata address); entries are hosts, not URLs.
#[test]
fn agent_addresses_off_the_allow_list_never_load() {
    let base = "listen: 127.0.0.1:0\n";
    let cases = [
        ("security: {agent_hosts: [agents.internal]}\nagents:\n  a: {url: 'http://10.0.0.5:8000'}\n", "agents.a.url"),
        (
            "security: {agent_hosts: ['http://agents.internal/']}\nagents:\n  a: {url: 'http://agents.internal'}\n",
            "security.agent_hosts[0]",
        ),
        ("agents:\n  a: {url: 'not a url'}\n", "agents.a.url"),
        ("agents:\n  'a/b': {url: 'http://x'}\n", "agents.a/b.name"),
    ];
    for (agents, path) in cases {
        let yaml = format!("{base}{agents}");
        let e = Config::from_yaml(&yaml, &test_env(&yaml)).expect_err(agents).to_string();
        assert!(e.contains(path), "{agents}: {e}");
    }
    let ok = format!(
        "{base}security: {{agent_hosts: [agents.internal]}}\nagents:\n  a: {{url: 'https://agents.internal:8443'}}\n"
    );
    assert!(Config::from_yaml(&ok, &test_env(&ok)).is_ok());
}
