//! What an MCP server asks of its client, through the gateway, black box: a server's sampling,
//! elicitation, roots and ping requests reach the client whose call they belong to on that
//! call's stream (under the gateway's ids), and the client's answers reach the server; a client
//! that did not offer a capability is answered for at once (Code Mode: `code_mode.rs`); log messages and
//! `logging/setLevel` pass through; `initialize` on `/mcp/{server}` is the server's own.

use std::time::Duration;

use bytes::Bytes;
use http::Method;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use switchyard_testkit::{McpMock, McpMockConfig, TestClient};

use crate::common::*;

async fn mcp_mock() -> McpMock {
    McpMock::start("127.0.0.1:0".parse().unwrap(), McpMockConfig::default()).await.unwrap()
}

async fn gateway(servers: &[(&str, &McpMock)], extra: &str) -> switchyard_gateway::RunningGateway {
    gateway_with(servers, extra, "").await
}

/// `server_extra`: more of each server's entry (`, timeout: 1s`).
async fn gateway_with(
    servers: &[(&str, &McpMock)],
    extra: &str,
    server_extra: &str,
) -> switchyard_gateway::RunningGateway {
    let dir = scratch_dir();
    let mut yaml = format!(
        "listen: 127.0.0.1:0\nstorage: {{url: '{}', usage_journal_dir: '{}/usage'}}\n{extra}mcp:\n  servers:\n",
        db_url(&dir),
        dir.display()
    );
    for (name, mock) in servers {
        yaml.push_str(&format!("    - {{name: {name}, url: '{}'{server_extra}}}\n", mock.url()));
    }
    gateway_yaml(&yaml).await
}

/// A session-era client offering `capabilities`, reading each answer's SSE events as they come.
struct Client {
    http: TestClient,
    url: String,
    session: String,
}

impl Client {
    async fn open(gw: &switchyard_gateway::RunningGateway, path: &str, capabilities: Value) -> (Client, Value) {
        let http = TestClient::new();
        let url = format!("{}{path}", gw.url());
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": capabilities, "clientInfo": {"name": "t", "version": "1"}}});
        let headers = [("accept", "application/json, text/event-stream")];
        let r = http.post_json(&url, init.to_string().as_bytes(), &headers).await.unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        let session = r.header("mcp-session-id").unwrap().to_owned();
        let client = Client { http, url, session };
        let ack = client.post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
        assert_eq!(ack.status(), 202);
        (client, r.json())
    }

    async fn post(&self, body: &Value) -> http::Response<Streamed> {
        let headers = [("accept", "application/json, text/event-stream"), ("mcp-session-id", self.session.as_str())];
        let resp = self.http.send(Method::POST, &self.url, Bytes::from(body.to_string()), &headers).await.unwrap();
        resp.map(|b| b.map_err(|e| e.to_string()).boxed_unsync())
    }

    async fn call(&self, id: u64, tool: &str, arguments: Value) -> Events {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}});
        Events::of(self.post(&body).await).await
    }
}

type Streamed = http_body_util::combinators::UnsyncBoxBody<Bytes, String>;

/// An answer's JSON-RPC messages, one at a time (a JSON answer is one message).
struct Events {
    body: Streamed,
    sse: bool,
    buffer: String,
    json: Option<Value>,
}

impl Events {
    async fn of(resp: http::Response<Streamed>) -> Events {
        assert_eq!(resp.status(), 200);
        let sse = resp.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream");
        Events { body: resp.into_body(), sse, buffer: String::new(), json: None }
    }

    async fn next(&mut self) -> Value {
        if !self.sse {
            if self.json.is_none() {
                let bytes = (&mut self.body).collect().await.unwrap().to_bytes();
                return serde_json::from_slice(&bytes).unwrap();
            }
            panic!("a JSON answer has one message");
        }
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let event: String = self.buffer.drain(..end + 2).collect();
                if let Some(data) = event.lines().find_map(|l| l.strip_prefix("data: ")) {
                    return serde_json::from_str(data).unwrap();
                }
                continue;
            }
            let frame = tokio::time::timeout(Duration::from_secs(10), self.body.frame()).await.unwrap();
            let frame = frame.expect("the stream ended").unwrap();
            if let Ok(data) = frame.into_data() {
                let data: Bytes = data;
                self.buffer.push_str(std::str::from_utf8(&data).unwrap());
            }
        }
    }
}

fn text_of(answer: &Value) -> &str {
    answer["result"]["content"][0]["text"].as_str().unwrap_or_else(|| panic!("no text in {answer}"))
}

const EVERYTHING: &str = r#"{"sampling": {}, "elicitation": {}, "roots": {"listChanged": true}}"#;

#[tokio::test]
async fn a_servers_requests_reach_the_client_and_its_answers_reach_the_server() {
    let (docs, other) = (mcp_mock().await, mcp_mock().await);
    let gw = gateway(&[("docs", &docs), ("other", &other)], "").await;
    for (path, tool) in [("/mcp/docs", "sample"), ("/mcp", "docs__sample"), ("/mcp", "other__sample")] {
        let (client, _) = Client::open(&gw, path, serde_json::from_str(EVERYTHING).unwrap()).await;
        let mut events = client.call(5, tool, json!({"prompt": "Capital of France?"})).await;
        let asked = events.next().await;
        assert_eq!(asked["method"], "sampling/createMessage", "{path}: {asked}");
        assert_eq!(asked["params"]["messages"][0]["content"]["text"], "Capital of France?");
        assert_ne!(asked["id"], json!("m-0"), "the client sees the gateway's id, not the server's");
        // Another session cannot answer it; the one that was asked can.
        let (stranger, _) = Client::open(&gw, path, serde_json::from_str(EVERYTHING).unwrap()).await;
        let answer = json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"role": "assistant",
            "content": {"type": "text", "text": "Paris"}, "model": "client-model"}});
        assert_eq!(stranger.post(&answer).await.status(), 202);
        assert_eq!(client.post(&answer).await.status(), 202);
        let result = events.next().await;
        assert_eq!(result["id"], 5);
        assert_eq!(text_of(&result), "sample: Paris", "{path}");
    }
    let declared = docs.stats().client_capabilities;
    assert!(
        declared.contains(
            &serde_json::from_str(r#"{"sampling": {}, "elicitation": {}, "roots": {"listChanged": false}}"#).unwrap()
        ),
        "{declared:?}"
    );
    let metrics = TestClient::new().get(&format!("{}/metrics", gw.url())).await.unwrap().text();
    let line =
        r#"switchyard_mcp_server_requests_total{server="docs",method="sampling/createMessage",outcome="answered"} 2"#;
    assert!(metrics.contains(line), "{metrics}");

    // Elicitation, roots and ping the same way; an error the client answers reaches the server too.
    let (client, _) = Client::open(&gw, "/mcp/docs", serde_json::from_str(EVERYTHING).unwrap()).await;
    for (tool, reply, said) in [
        (
            "elicit",
            json!({"result": {"action": "accept", "content": {"name": "Ada"}}}),
            r#"elicit: accept {"name":"Ada"}"#,
        ),
        ("roots", json!({"result": {"roots": [{"uri": "file:///work", "name": "work"}]}}), "roots: file:///work"),
        ("ping_client", json!({"result": {}}), "ping_client: ok"),
        (
            "elicit",
            json!({"error": {"code": -1, "message": "the user declined to say"}}),
            "error -1: the user declined to say",
        ),
    ] {
        let mut events = client.call(6, tool, json!({})).await;
        let asked = events.next().await;
        let mut answer = reply.clone();
        answer["jsonrpc"] = json!("2.0");
        answer["id"] = asked["id"].clone();
        assert_eq!(client.post(&answer).await.status(), 202);
        assert_eq!(text_of(&events.next().await), said);
    }
}

#[tokio::test]
async fn what_the_client_did_not_offer_is_refused_at_once() {
    let docs = mcp_mock().await;
    let gw = gateway(&[("docs", &docs)], "").await;
    let (client, _) = Client::open(&gw, "/mcp/docs", json!({"roots": {}})).await;
    let mut events = client.call(1, "sample", json!({})).await;
    let answer = events.next().await;
    assert!(text_of(&answer).starts_with("error -32601"), "{answer}");
    assert!(text_of(&answer).contains("did not offer"), "{answer}");
    // Negotiated honestly: the session this client's calls go to offers the server only roots.
    let declared = docs.stats().client_capabilities;
    assert!(declared.contains(&json!({"roots": {"listChanged": false}})), "{declared:?}");
    assert!(declared.iter().all(|c| c.get("sampling").is_none()), "nobody here offered sampling: {declared:?}");
    // A ping needs no capability.
    let mut events = client.call(2, "ping_client", json!({})).await;
    let asked = events.next().await;
    assert_eq!(asked["method"], "ping");
    client.post(&json!({"jsonrpc": "2.0", "id": asked["id"], "result": {}})).await;
    assert_eq!(text_of(&events.next().await), "ping_client: ok");
    // A client that takes no stream cannot be asked either.
    let headers = [("accept", "application/json"), ("mcp-session-id", client.session.as_str())];
    let body = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "roots", "arguments": {}}});
    let r = client.http.post_json(&client.url, body.to_string().as_bytes(), &headers).await.unwrap();
    assert!(text_of(&r.json()).starts_with("error -32601"), "{}", r.text());
    let metrics = TestClient::new().get(&format!("{}/metrics", gw.url())).await.unwrap().text();
    let line =
        r#"switchyard_mcp_server_requests_total{server="docs",method="sampling/createMessage",outcome="refused"} 1"#;
    assert!(metrics.contains(line), "{metrics}");
}

#[tokio::test]
async fn logging_passes_through_and_initialize_is_the_servers_own() {
    let (docs, other) = (mcp_mock().await, mcp_mock().await);
    let gw = gateway(&[("docs", &docs), ("other", &other)], "").await;
    let (client, init) = Client::open(&gw, "/mcp/docs", json!({})).await;
    let result = &init["result"];
    assert_eq!(result["serverInfo"]["name"], "switchyard-mock-mcp", "{init}");
    assert!(result["instructions"].as_str().unwrap().starts_with("The mock MCP server"), "{init}");
    for cap in ["tools", "resources", "prompts", "logging", "completions"] {
        assert!(result["capabilities"].get(cap).is_some(), "{cap} missing: {init}");
    }
    assert_eq!(result["capabilities"]["resources"]["subscribe"], true);

    // logging/setLevel reaches the server; its log messages reach the client before the answer.
    let set = json!({"jsonrpc": "2.0", "id": 1, "method": "logging/setLevel", "params": {"level": "debug"}});
    let answer = Events::of(client.post(&set).await).await.next().await;
    assert_eq!(answer["result"], json!({}), "{answer}");
    assert_eq!(docs.stats().log_level.as_deref(), Some("debug"));
    let mut events = client.call(2, "log", json!({"level": "warning", "text": "disk almost full"})).await;
    let note = events.next().await;
    assert_eq!(note["method"], "notifications/message");
    assert_eq!((note["params"]["level"].as_str(), note["params"]["logger"].as_str()), (Some("warning"), Some("mock")));
    assert_eq!(text_of(&events.next().await), "logged");
    // Completions and subscriptions pass through too.
    let complete = json!({"jsonrpc": "2.0", "id": 3, "method": "completion/complete", "params": {
        "ref": {"type": "ref/prompt", "name": "greet"}, "argument": {"name": "x", "value": "al"}}});
    let answer = Events::of(client.post(&complete).await).await.next().await;
    assert_eq!(answer["result"]["completion"]["values"][0], "alpha", "{answer}");
    let subscribe =
        json!({"jsonrpc": "2.0", "id": 4, "method": "resources/subscribe", "params": {"uri": "mock://readme"}});
    assert_eq!(Events::of(client.post(&subscribe).await).await.next().await["result"], json!({}));

    // The aggregated endpoint advertises logging, tells every server, and names the server in `logger`.
    let (all, init) = Client::open(&gw, "/mcp", json!({})).await;
    assert!(init["result"]["capabilities"].get("logging").is_some(), "{init}");
    let set = json!({"jsonrpc": "2.0", "id": 1, "method": "logging/setLevel", "params": {"level": "error"}});
    assert_eq!(Events::of(all.post(&set).await).await.next().await["result"], json!({}));
    assert_eq!((docs.stats().log_level.as_deref(), other.stats().log_level.as_deref()), (Some("error"), Some("error")));
    let mut events = all.call(2, "other__log", json!({"text": "hello"})).await;
    assert_eq!(events.next().await["params"]["logger"], "other/mock");
}

#[tokio::test]
async fn what_a_server_sends_on_its_get_stream_reaches_the_right_client() {
    let docs = mcp_mock().await;
    let gw = gateway(&[("docs", &docs)], "").await;
    let (client, _) = Client::open(&gw, "/mcp/docs", serde_json::from_str(EVERYTHING).unwrap()).await;
    // A sampling request the server sends on its GET stream (naming no request) while one call
    // is in flight goes to that call's client.
    let mut events = client.call(1, "sample_on_get", json!({"prompt": "via GET"})).await;
    let asked = events.next().await;
    assert_eq!(asked["method"], "sampling/createMessage", "{asked}");
    let answer = json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"role": "assistant",
        "content": {"type": "text", "text": "got it"}, "model": "m"}});
    assert_eq!(client.post(&answer).await.status(), 202);
    assert_eq!(text_of(&events.next().await), "sample_on_get: got it");

    // A resource update outside any call reaches the client's own GET stream.
    let headers = [("accept", "text/event-stream"), ("mcp-session-id", client.session.as_str())];
    let stream = client.http.send(Method::GET, &client.url, Bytes::new(), &headers).await.unwrap();
    assert_eq!(stream.status(), 200);
    let mut listening = Events::of(stream.map(|b| b.map_err(|e| e.to_string()).boxed_unsync())).await;
    let mut events = client.call(2, "touch_resource", json!({"uri": "mock://readme"})).await;
    assert_eq!(text_of(&events.next().await), "touched");
    let updated = listening.next().await;
    assert_eq!(updated["method"], "notifications/resources/updated", "{updated}");
    assert_eq!(updated["params"]["uri"], "mock://readme");
    assert_eq!(listening.next().await["method"], "notifications/resources/list_changed");
}

#[tokio::test]
async fn a_call_waiting_on_its_clients_answer_outlives_the_servers_timeout() {
    let docs = mcp_mock().await;
    let gw = gateway_with(&[("docs", &docs)], "", ", timeout: 1s").await;
    let (client, _) = Client::open(&gw, "/mcp/docs", serde_json::from_str(EVERYTHING).unwrap()).await;
    let mut events = client.call(1, "elicit", json!({"message": "Take your time"})).await;
    let asked = events.next().await;
    assert_eq!(asked["method"], "elicitation/create");
    // A person answering: slower than the server's 1 s timeout, which must not end the call.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let answer =
        json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "accept", "content": {"name": "Slow"}}});
    assert_eq!(client.post(&answer).await.status(), 202);
    assert_eq!(text_of(&events.next().await), r#"elicit: accept {"name":"Slow"}"#);
    // Without a question outstanding, the timeout still holds.
    let mut events = client.call(2, "slow", json!({"ms": 3000})).await;
    let answer = events.next().await;
    assert!(answer["error"]["message"].as_str().unwrap_or_default().contains("timeout"), "{answer}");
}

/// Two instances on one Redis, sharing the secret that signs sessions: what one relayed, a client
/// may answer through the other (issue 59).
async fn fleet_pair(
    docs: &McpMock,
    redis: &crate::common::redis::RedisServer,
) -> [switchyard_gateway::RunningGateway; 2] {
    let extra =
        format!("auth: {{secret: 'mcp-fleet-secret-mcp-fleet-secret-0123'}}\nredis: {{url: '{}'}}\n", redis.url());
    let a = gateway(&[("docs", docs)], &extra).await;
    let b = gateway(&[("docs", docs)], &extra).await;
    // Tags come from one counter (the first instance's is 2); each listens on its own channel.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while redis.subscribers("switchyard:mcp:00002") + redis.subscribers("switchyard:mcp:00003") < 2 {
        assert!(std::time::Instant::now() < deadline, "the instances never listened for forwarded MCP messages");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    [a, b]
}

/// A session-era client's answer to a server's request, sent to the instance that did not relay
/// it, reaches the server through the one that did; the call completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_sent_to_another_instance_reaches_the_call_waiting_for_it() {
    let redis = crate::common::redis::RedisServer::start();
    let docs = mcp_mock().await;
    let [a, b] = fleet_pair(&docs, &redis).await;
    for (tool, reply, said) in [
        (
            "sample",
            json!({"role": "assistant", "content": {"type": "text", "text": "Paris"}, "model": "m"}),
            "sample: Paris",
        ),
        ("elicit", json!({"action": "accept", "content": {"name": "Ada"}}), r#"elicit: accept {"name":"Ada"}"#),
    ] {
        let (client, _) = Client::open(&a, "/mcp/docs", serde_json::from_str(EVERYTHING).unwrap()).await;
        let mut events = client.call(9, tool, json!({"prompt": "Capital of France?", "message": "name?"})).await;
        let asked = events.next().await;
        assert!(asked["id"].as_u64().unwrap() >> 33 != 0, "the id names the instance that asked: {asked}");
        let through_b =
            Client { http: TestClient::new(), url: format!("{}/mcp/docs", b.url()), session: client.session.clone() };
        let answer = json!({"jsonrpc": "2.0", "id": asked["id"], "result": reply});
        assert_eq!(through_b.post(&answer).await.status(), 202);
        let result = events.next().await;
        assert_eq!(text_of(&result), said, "{tool}");
    }
    let metrics = |gw: &switchyard_gateway::RunningGateway| {
        let url = format!("{}/metrics", gw.url());
        async move { TestClient::new().get(&url).await.unwrap().text() }
    };
    assert!(metrics(&b).await.contains(r#"switchyard_mcp_forwarded_total{kind="answer",outcome="delivered"} 2"#));
    assert!(metrics(&a).await.contains(r#"switchyard_mcp_forwarded_total{kind="answer",outcome="received"} 2"#));
}

/// A stateless-revision call whose server asks something answers `input_required`; the client's
/// retry, sent to the other instance, is forwarded to the one holding the call and its result
/// comes back; a retry naming an instance that is gone is refused at once, as a stale one is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_required_retry_sent_to_another_instance_completes_the_call() {
    let redis = crate::common::redis::RedisServer::start();
    let docs = mcp_mock().await;
    let [a, b] = fleet_pair(&docs, &redis).await;
    let http = TestClient::new();
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientCapabilities": {"sampling": {}}});
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "sample", "arguments": {"prompt": "Capital of Italy?"}, "_meta": meta}});
    let headers = [("accept", "application/json, text/event-stream")];
    let first = http.post_json(&format!("{}/mcp/docs", a.url()), call.to_string().as_bytes(), &headers).await.unwrap();
    let first = first.json();
    assert_eq!(first["result"]["resultType"], "input_required", "{first}");
    let state = first["result"]["requestState"].as_str().unwrap().to_owned();
    let (asked, _) = first["result"]["inputRequests"].as_object().unwrap().iter().next().unwrap();
    let mut retry = call.clone();
    retry["id"] = json!(2);
    retry["params"]["requestState"] = json!(state);
    retry["params"]["inputResponses"] = json!({asked.clone(): {"role": "assistant",
        "content": {"type": "text", "text": "Rome"}, "model": "m"}});
    let done = http.post_json(&format!("{}/mcp/docs", b.url()), retry.to_string().as_bytes(), &headers).await.unwrap();
    let done = done.json();
    assert_eq!(done["id"], 2, "{done}");
    assert_eq!(text_of(&done), "sample: Rome", "{done}");
    // A second retry of the same state: the call is over, refused (by its holder) at once.
    let again = http.post_json(&format!("{}/mcp/docs", b.url()), retry.to_string().as_bytes(), &headers).await.unwrap();
    assert!(again.json()["error"]["message"].as_str().unwrap_or_default().contains("requestState"), "{}", again.text());
    // A state naming an instance no longer there (tag 7): refused at once.
    retry["params"]["requestState"] = json!("00007.0123456789abcdef");
    let gone = http.post_json(&format!("{}/mcp/docs", b.url()), retry.to_string().as_bytes(), &headers).await.unwrap();
    assert!(gone.json()["error"]["message"].as_str().unwrap_or_default().contains("requestState"), "{}", gone.text());
    let metrics = TestClient::new().get(&format!("{}/metrics", b.url())).await.unwrap().text();
    assert!(metrics.contains(r#"switchyard_mcp_forwarded_total{kind="resume",outcome="delivered"} 2"#), "{metrics}");
    assert!(metrics.contains(r#"switchyard_mcp_forwarded_total{kind="resume",outcome="no_holder"} 1"#), "{metrics}");
}

/// Each session-era client is spoken to in an upstream session of its own (issue 59): a sampling
/// request the server sends on that session's GET stream reaches its client even while another
/// client's call is in flight (one shared session could not tell whose it was and refused it);
/// a client's DELETE ends its upstream session too.
#[tokio::test]
async fn a_get_stream_request_reaches_its_client_with_other_clients_calls_in_flight() {
    let docs = mcp_mock().await;
    let gw = gateway(&[("docs", &docs)], "").await;
    let (first, _) = Client::open(&gw, "/mcp/docs", serde_json::from_str(EVERYTHING).unwrap()).await;
    let (second, _) = Client::open(&gw, "/mcp/docs", serde_json::from_str(EVERYTHING).unwrap()).await;
    let mut one = first.call(1, "sample_on_get", json!({"prompt": "first's"})).await;
    let mut two = second.call(1, "sample_on_get", json!({"prompt": "second's"})).await;
    for (client, events, prompt) in [(&first, &mut one, "first's"), (&second, &mut two, "second's")] {
        let asked = events.next().await;
        assert_eq!(asked["method"], "sampling/createMessage", "{asked}");
        assert_eq!(asked["params"]["messages"][0]["content"]["text"], prompt, "each client gets its own question");
        let answer = json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"role": "assistant",
            "content": {"type": "text", "text": format!("{prompt} answer")}, "model": "m"}});
        assert_eq!(client.post(&answer).await.status(), 202);
    }
    assert_eq!(text_of(&one.next().await), "sample_on_get: first's answer");
    assert_eq!(text_of(&two.next().await), "sample_on_get: second's answer");
    // The client ends its session: its upstream session ends with it.
    let sessions = docs.stats().sessions_ended;
    let headers = [("mcp-session-id", first.session.as_str())];
    let ended = first.http.send(Method::DELETE, &first.url, Bytes::new(), &headers).await.unwrap();
    assert_eq!(ended.status(), 200);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while docs.stats().sessions_ended == sessions {
        assert!(std::time::Instant::now() < deadline, "the client's upstream session never ended");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
