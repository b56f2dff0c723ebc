//! The MCP gateway, black box: the real gateway in front of mock MCP servers over Streamable
//! HTTP, spoken to with raw JSON-RPC over HTTP (the official SDKs run in tests/conformance).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use crate::common::*;
use bytes::Bytes;
use http::Method;
use serde_json::{json, Value};
use switchyard_testkit::{McpMock, McpMockConfig, TestClient, TestResponse};

const MASTER: &str = "master-key-for-mcp-tests";

async fn mcp_mock(cfg: McpMockConfig) -> McpMock {
    McpMock::start("127.0.0.1:0".parse().unwrap(), cfg).await.unwrap()
}

/// A gateway with `servers` (name, mock) behind `/mcp`, keys on, usage recorded.
async fn mcp_gateway(servers: &[(&str, &McpMock)], extra: &str) -> (switchyard_gateway::RunningGateway, String) {
    let dir = scratch_dir();
    let db = db_url(&dir);
    let mut yaml = format!(
        "listen: 127.0.0.1:0\nstorage: {{url: '{db}', usage_journal_dir: '{}/usage'}}\nauth: {{master_key: {MASTER}}}\nmcp:\n  servers:\n",
        dir.display()
    );
    for (name, mock) in servers {
        yaml.push_str(&format!(
            "    - {{name: {name}, url: '{}', headers: {{Authorization: 'Bearer upstream-{name}'}}{extra}}}\n",
            mock.url()
        ));
    }
    (gateway_yaml(&yaml).await, db)
}

struct Session<'a> {
    client: TestClient,
    url: String,
    key: &'a str,
    id: Option<String>,
}

impl<'a> Session<'a> {
    fn new(gw: &switchyard_gateway::RunningGateway, path: &str, key: &'a str) -> Session<'a> {
        Session { client: TestClient::new(), url: format!("{}{path}", gw.url()), key, id: None }
    }

    async fn post(&self, body: &Value, extra: &[(&str, &str)]) -> TestResponse {
        self.post_raw(serde_json::to_vec(body).unwrap(), extra).await
    }

    async fn post_raw(&self, body: Vec<u8>, extra: &[(&str, &str)]) -> TestResponse {
        let auth = format!("Bearer {}", self.key);
        let mut headers = vec![("authorization", auth.as_str()), ("accept", "application/json, text/event-stream")];
        if let Some(id) = &self.id {
            headers.push(("mcp-session-id", id.as_str()));
        }
        headers.extend_from_slice(extra);
        self.client.request(Method::POST, &self.url, Bytes::from(body), &headers).await.unwrap()
    }

    async fn initialize(&mut self) -> Value {
        let r = self
            .post(
                &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}),
                &[],
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text());
        self.id = Some(r.header("mcp-session-id").expect("a session id").to_owned());
        let ack = self.post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}), &[]).await;
        assert_eq!(ack.status, 202);
        r.json()
    }

    async fn call(&self, id: u64, method: &str, params: Value) -> Value {
        let r = self.post(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}), &[]).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        assert_eq!(v["id"], id, "answers carry the request's id: {v}");
        v
    }
}

/// Wait for `done` to hold, checking every 2 ms, failing after 5 s.
async fn until(done: impl Fn() -> bool, what: &str) {
    for _ in 0..2500 {
        if done() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    panic!("timed out waiting until {what}");
}

fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[tokio::test]
async fn the_aggregated_endpoint_lists_every_page_of_every_server_and_calls_through() {
    let paged = mcp_mock(McpMockConfig { extra_tools: 95, page_size: 40, ..Default::default() }).await;
    let sse = mcp_mock(McpMockConfig { sse: true, ..Default::default() }).await;
    let (gw, _) = mcp_gateway(&[("files", &paged), ("search", &sse)], "").await;
    let mut s = Session::new(&gw, "/mcp", MASTER);
    let init = s.initialize().await;
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18", "a session revision it knows is kept");
    assert!(init["result"]["capabilities"]["tools"].is_object());

    let list = s.call(1, "tools/list", json!({})).await;
    let names: Vec<&str> =
        list["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names.len(), 2 * 14 + 95, "every upstream page, both servers (14 fixed tools each)");
    assert!(names.iter().all(|n| valid_tool_name(n)), "{names:?}");
    assert!(names.windows(2).all(|w| w[0] < w[1]), "deterministic order");
    assert!(names.contains(&"files__tool_94") && names.contains(&"search__echo"));
    assert!(list["result"].get("nextCursor").is_none(), "one page for clients that never follow cursors");

    // A JSON answer and an SSE answer upstream both come back as the result.
    for tool in ["files__echo", "search__echo"] {
        let r = s.call(2, "tools/call", json!({"name": tool, "arguments": {"text": "hi there"}})).await;
        assert_eq!(r["result"]["content"][0]["text"], "hi there", "{tool}: {r}");
    }
    let r = s.call(3, "tools/call", json!({"name": "files__fail", "arguments": {}})).await;
    assert_eq!(r["result"]["isError"], true, "a tool's own error is a result, not a JSON-RPC error");
    let r = s.call(4, "tools/call", json!({"name": "files__large", "arguments": {"kb": 512}})).await;
    assert_eq!(r["result"]["content"][0]["text"].as_str().unwrap().len(), 512 * 1024);
    assert_eq!(paged.stats().calls["echo"], 1);
    assert_eq!(sse.stats().calls["echo"], 1);
}

#[tokio::test]
async fn one_server_passes_through_under_its_own_names_with_resources_and_prompts() {
    let m = mcp_mock(McpMockConfig::default()).await;
    let (gw, _) = mcp_gateway(&[("files", &m)], ", tools: {deny: ['write_*']}").await;
    let mut s = Session::new(&gw, "/mcp/files", MASTER);
    s.initialize().await;
    let list = s.call(1, "tools/list", json!({})).await;
    let names: Vec<&str> =
        list["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"echo") && !names.contains(&"write_file"), "own names, config deny applied: {names:?}");
    let r = s.call(2, "tools/call", json!({"name": "add", "arguments": {"a": 2, "b": 3}})).await;
    assert_eq!(r["result"]["content"][0]["text"], "5");
    let r = s.call(3, "tools/call", json!({"name": "write_file", "arguments": {"path": "/x"}})).await;
    assert_eq!(r["error"]["code"], -32602, "a denied tool does not exist: {r}");
    assert_eq!(m.stats().calls.get("write_file"), None, "and never reached the upstream");
    assert_eq!(s.call(4, "resources/list", json!({})).await["result"]["resources"][0]["uri"], "mock://readme");
    assert_eq!(s.call(5, "prompts/get", json!({"name": "greet"})).await["result"]["messages"][0]["role"], "user");
    let unknown =
        Session::new(&gw, "/mcp/nope", MASTER).post(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}), &[]).await;
    assert_eq!(unknown.status, 404);
}

#[tokio::test]
async fn sessions_and_json_rpc_errors_follow_the_spec() {
    let m = mcp_mock(McpMockConfig::default()).await;
    let (gw, _) = mcp_gateway(&[("files", &m)], "").await;
    let mut s = Session::new(&gw, "/mcp", MASTER);
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    assert_eq!(s.post(&ping, &[]).await.status, 400, "no session yet");
    s.initialize().await;
    assert_eq!(s.call(1, "ping", json!({})).await["result"], json!({}));
    // Another instance with the same secret accepts the session; a tampered one is unknown: 404.
    let good = s.id.clone().unwrap();
    let flipped = if good.ends_with('0') { '1' } else { '0' };
    s.id = Some(format!("{}{flipped}", &good[..good.len() - 1]));
    assert_eq!(s.post(&ping, &[]).await.status, 404);
    s.id = Some(good);
    let code = |r: TestResponse| r.json()["error"]["code"].as_i64().unwrap();
    assert_eq!(code(s.post_raw(b"{not json".to_vec(), &[]).await), -32700);
    assert_eq!(code(s.post_raw(b"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]".to_vec(), &[]).await), -32600);
    assert_eq!(code(s.post(&json!({"jsonrpc": "2.0", "id": 1, "method": "nope/nope"}), &[]).await), -32601);
    assert_eq!(
        code(s.post(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {}}), &[]).await),
        -32602
    );
    assert_eq!(
        code(
            s.post(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "files__nope"}}), &[])
                .await
        ),
        -32602
    );
    let r = s.post(&ping, &[("mcp-protocol-version", "1999-01-01")]).await;
    assert_eq!(r.status, 400, "an unsupported protocol version header");
    let big = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"pad":"{}"}}}}"#, "x".repeat(11 << 20));
    assert_eq!(s.post_raw(big.into_bytes(), &[]).await.status, 413);
    let auth = format!("Bearer {MASTER}");
    let get = s.client.request(Method::GET, &s.url, Bytes::new(), &[("authorization", &auth)]).await.unwrap();
    assert_eq!(get.status, 405);
    let sid = s.id.clone().unwrap();
    let del = s
        .client
        .request(Method::DELETE, &s.url, Bytes::new(), &[("authorization", &auth), ("mcp-session-id", &sid)])
        .await
        .unwrap();
    assert_eq!(del.status, 200);
}

#[tokio::test]
async fn keys_are_checked_and_their_mcp_permissions_filter_lists_and_calls() {
    let m = mcp_mock(McpMockConfig::default()).await;
    let other = mcp_mock(McpMockConfig::default()).await;
    let (gw, _) = mcp_gateway(&[("files", &m), ("search", &other)], "").await;
    let client = TestClient::new();
    let anonymous = client
        .post_json(&format!("{}/mcp", gw.url()), br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#, &[])
        .await
        .unwrap();
    assert_eq!(anonymous.status, 401, "no key, no MCP");
    let auth = format!("Bearer {MASTER}");
    let created = client
        .post_json(
            &format!("{}/admin/keys", gw.url()),
            br#"{"mcp_servers": ["files"], "mcp_tools": ["files__echo", "files__add"], "rpm": 3}"#,
            &[("authorization", &auth)],
        )
        .await
        .unwrap();
    assert_eq!(created.status, 201, "{}", created.text());
    assert_eq!(created.json()["mcp_servers"], json!(["files"]));
    let key = created.json()["key"].as_str().unwrap().to_owned();
    let mut s = Session::new(&gw, "/mcp", &key);
    s.initialize().await;
    let list = s.call(1, "tools/list", json!({})).await;
    let names: Vec<&str> =
        list["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["files__add", "files__echo"]);
    let r = s.call(2, "tools/call", json!({"name": "files__large", "arguments": {"kb": 1}})).await;
    assert_eq!(r["error"]["code"], -32602);
    assert_eq!(r["error"]["data"]["reason"], "forbidden");
    assert_eq!(m.stats().calls.get("large"), None, "a forbidden call never reaches the upstream");
    // The key's request-rate limit covers tool calls: rpm 3.
    for i in 0..3 {
        let r = s.call(10 + i, "tools/call", json!({"name": "files__echo", "arguments": {"text": "x"}})).await;
        assert!(r.get("result").is_some(), "{r}");
    }
    let r = s.call(20, "tools/call", json!({"name": "files__echo", "arguments": {"text": "x"}})).await;
    assert_eq!(r["error"]["data"]["reason"], "rate_limited", "{r}");
    // A session is bound to its key.
    let mut stolen = Session::new(&gw, "/mcp", MASTER);
    stolen.id = s.id.clone();
    assert_eq!(stolen.post(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}), &[]).await.status, 404);
    // Upstreams see their configured credentials, never the client's key.
    let seen = m.stats().authorizations;
    assert_eq!(seen, ["Bearer upstream-files"], "{seen:?}");
}

#[tokio::test]
async fn progress_is_relayed_and_cancellation_reaches_the_upstream() {
    let m = mcp_mock(McpMockConfig::default()).await;
    let (gw, _) = mcp_gateway(&[("files", &m)], "").await;
    let mut s = Session::new(&gw, "/mcp", MASTER);
    s.initialize().await;
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "files__slow", "arguments": {"ms": 60, "steps": 3}, "_meta": {"progressToken": "p-1"}}});
    let r = s.post(&body, &[]).await;
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let events: Vec<Value> = r
        .text()
        .split("\n\n")
        .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let progress: Vec<&Value> = events.iter().filter(|e| e["method"] == "notifications/progress").collect();
    assert_eq!(progress.len(), 3, "{events:?}");
    assert!(progress.iter().all(|p| p["params"]["progressToken"] == "p-1"), "the client's token comes back");
    assert_eq!(events.last().unwrap()["id"], 7);
    assert_eq!(events.last().unwrap()["result"]["content"][0]["text"], "waited 60 ms");

    // A long call, cancelled by the client while it runs.
    let long = json!({"jsonrpc": "2.0", "id": "c-1", "method": "tools/call",
        "params": {"name": "files__slow", "arguments": {"ms": 5000, "steps": 50}}});
    let s = std::sync::Arc::new(s);
    let caller = {
        let s = s.clone();
        tokio::spawn(async move { s.post(&long, &[]).await })
    };
    until(|| m.stats().calls.get("slow").copied().unwrap_or(0) >= 2, "the long call reached the upstream").await;
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "c-1", "reason": "user"}});
    assert_eq!(s.post(&cancel, &[]).await.status, 202);
    until(|| m.stats().stopped_early >= 1, "the upstream stopped the cancelled call").await;
    assert_eq!(m.stats().cancelled.len(), 1, "the upstream was told, under its own request id");
    let answer = tokio::time::timeout(std::time::Duration::from_secs(2), caller).await.unwrap().unwrap();
    assert_eq!(answer.status, 200, "the cancelled request ends at once");
}

#[tokio::test]
async fn a_restarted_upstream_session_is_reopened_transparently() {
    let m = mcp_mock(McpMockConfig::default()).await;
    let (gw, _) = mcp_gateway(&[("files", &m)], "").await;
    let mut s = Session::new(&gw, "/mcp", MASTER);
    s.initialize().await;
    let echo = json!({"name": "files__echo", "arguments": {"text": "a"}});
    assert_eq!(s.call(1, "tools/call", echo.clone()).await["result"]["content"][0]["text"], "a");
    m.forget_sessions();
    assert_eq!(s.call(2, "tools/call", echo).await["result"]["content"][0]["text"], "a");
    assert_eq!(m.stats().initialized, 2, "the gateway opened a new upstream session after the 404");
}

#[tokio::test]
async fn every_tool_call_gets_a_usage_record_and_metrics() {
    let m = mcp_mock(McpMockConfig::default()).await;
    let (gw, db) = mcp_gateway(&[("files", &m)], "").await;
    let mut s = Session::new(&gw, "/mcp", MASTER);
    s.initialize().await;
    s.call(1, "tools/call", json!({"name": "files__echo", "arguments": {"text": "hello"}})).await;
    s.call(2, "tools/call", json!({"name": "files__fail", "arguments": {}})).await;
    let rows = records(&db, 2).await;
    assert_eq!(rows.len(), 2, "one record per tool call: {rows:?}");
    let detail: Vec<(String, String, Option<String>, Option<i64>)> = {
        let sql = "SELECT backend, model_served, tool, response_bytes FROM usage_records ORDER BY tool";
        if db.starts_with("sqlite:") {
            sqlx::query_as(sql).fetch_all(&sqlx::SqlitePool::connect(&db).await.unwrap()).await.unwrap()
        } else {
            sqlx::query_as(sql).fetch_all(&sqlx::PgPool::connect(&db).await.unwrap()).await.unwrap()
        }
    };
    assert_eq!(detail[0].0, "files");
    assert_eq!(detail[0].1, "mcp:files");
    assert_eq!((detail[0].2.as_deref(), detail[1].2.as_deref()), (Some("echo"), Some("fail")));
    assert!(detail[0].3.unwrap() > 0);
    let metrics = TestClient::new().get(&format!("{}/metrics", gw.url())).await.unwrap().text();
    assert!(
        metrics.contains(r#"switchyard_mcp_tool_calls_total{server="files",tool="echo",status="ok"} 1"#),
        "{metrics}"
    );
    assert!(metrics.contains(r#"switchyard_mcp_tool_calls_total{server="files",tool="fail",status="tool_error"} 1"#));
    assert!(metrics.contains(r#"switchyard_mcp_tool_call_duration_seconds_count{server="files"} 2"#));
    // Names a client makes up do not become label values.
    s.call(3, "tools/call", json!({"name": "files__made_up_by_the_client"})).await;
    let metrics = TestClient::new().get(&format!("{}/metrics", gw.url())).await.unwrap().text();
    assert!(!metrics.contains("made_up_by_the_client"), "{metrics}");
    assert!(metrics.contains(r#"tool="(unknown)",status="unknown_tool"} 1"#), "{metrics}");
}

#[tokio::test]
async fn without_mcp_config_there_is_no_mcp_endpoint() {
    let backend = mock(&["m"]).await;
    let gw = gateway(&[&backend], "").await;
    let r = TestClient::new().post_json(&format!("{}/mcp", gw.url()), b"{}", &[]).await.unwrap();
    assert_eq!(r.status, 404);
}

#[tokio::test]
async fn a_session_opened_on_one_instance_is_accepted_by_another_with_the_same_secret() {
    let m = mcp_mock(McpMockConfig::default()).await;
    let secret = format!(", secret: '{}'", "s".repeat(32));
    let extra_auth =
        |yaml: String| yaml.replace(&format!("master_key: {MASTER}}}"), &format!("master_key: {MASTER}{secret}}}"));
    let start = || async {
        let dir = scratch_dir();
        let yaml = format!(
            "listen: 127.0.0.1:0\nstorage: {{url: 'sqlite://{0}/db.sqlite', usage_journal_dir: '{0}/usage'}}\nauth: {{master_key: {MASTER}}}\nmcp:\n  servers:\n    - {{name: files, url: '{1}'}}\n",
            dir.display(),
            m.url()
        );
        gateway_yaml(&extra_auth(yaml)).await
    };
    let (a, b) = (start().await, start().await);
    let mut on_a = Session::new(&a, "/mcp", MASTER);
    on_a.initialize().await;
    let mut on_b = Session::new(&b, "/mcp", MASTER);
    on_b.id = on_a.id.clone();
    let r = on_b.call(1, "tools/call", json!({"name": "files__echo", "arguments": {"text": "moved"}})).await;
    assert_eq!(r["result"]["content"][0]["text"], "moved", "{r}");
}

/// Running (not exited, not a zombie) per /proc.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
        .unwrap_or(false)
}

fn text_of(answer: &Value) -> String {
    answer["result"]["content"][0]["text"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn a_stdio_server_is_supervised_restarted_when_it_dies_and_gone_after_shutdown() {
    let dir = scratch_dir();
    let yaml = format!(
        "listen: 127.0.0.1:0\nstorage: {{url: 'sqlite://{0}/db.sqlite', usage_journal_dir: '{0}/usage'}}\nauth: {{master_key: {MASTER}}}\nmcp:\n  servers:\n    - {{name: local, command: ['{1}', mock-mcp, --stdio], env: {{MOCK_MODE: test}}}}\n",
        dir.display(),
        env!("CARGO_BIN_EXE_switchyard")
    );
    let gw = gateway_yaml(&yaml).await;
    let mut s = Session::new(&gw, "/mcp", MASTER);
    s.initialize().await;
    let list = s.call(1, "tools/list", json!({})).await;
    let names: Vec<&str> =
        list["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"local__echo") && names.contains(&"local__crash"), "{names:?}");
    assert_eq!(
        text_of(&s.call(2, "tools/call", json!({"name": "local__echo", "arguments": {"text": "over stdio"}})).await),
        "over stdio"
    );
    let first: u32 = text_of(&s.call(3, "tools/call", json!({"name": "local__pid"})).await).parse().unwrap();
    let orphan: u32 = text_of(&s.call(4, "tools/call", json!({"name": "local__spawn_sleeper"})).await).parse().unwrap();
    assert!(alive(first) && alive(orphan));

    // It dies mid-call: the call fails at once, the process group goes, a new process starts.
    let crashed = s.call(5, "tools/call", json!({"name": "local__crash"})).await;
    assert!(crashed.get("error").is_some(), "{crashed}");
    let mut second = first;
    for i in 0..200 {
        let r = s.call(10 + i, "tools/call", json!({"name": "local__pid"})).await;
        if let Ok(pid) = text_of(&r).parse::<u32>() {
            second = pid;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_ne!(second, first, "restarted");
    assert!(!alive(first), "the crashed server is reaped");
    assert!(dies_soon(orphan).await, "what the crashed server left in its process group is killed");

    let orphan2: u32 =
        text_of(&s.call(300, "tools/call", json!({"name": "local__spawn_sleeper"})).await).parse().unwrap();
    gw.shutdown().await;
    assert!(!alive(second), "no server process after shutdown");
    assert!(dies_soon(orphan2).await, "and nothing of its process group");
}

/// Whether `pid` is gone within two seconds. A grandchild is killed by a SIGKILL to its group,
/// which the kernel delivers after `kill` returns, and nobody the gateway can wait on reaps it:
/// so its death is polled for, not assumed the moment shutdown returns.
async fn dies_soon(pid: u32) -> bool {
    for _ in 0..400 {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    !alive(pid)
}

#[tokio::test]
async fn the_stateless_revision_needs_no_session_and_names_its_version_in_meta() {
    let m = mcp_mock(McpMockConfig::default()).await;
    let (gw, _) = mcp_gateway(&[("files", &m)], "").await;
    let s = Session::new(&gw, "/mcp", MASTER);
    let meta = |v: &str| json!({"io.modelcontextprotocol/protocolVersion": v, "io.modelcontextprotocol/clientCapabilities": {}});
    let header = [("mcp-protocol-version", "2026-07-28")];
    let discover = s
        .post(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta("2026-07-28")}}),
            &header,
        )
        .await;
    assert_eq!(discover.status, 200, "{}", discover.text());
    let d = discover.json()["result"].clone();
    assert_eq!(d["supportedVersions"][0], "2026-07-28");
    assert_eq!(d["resultType"], "complete");
    assert_eq!(d["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "switchyard");
    assert!(discover.header("mcp-session-id").is_none(), "no session in the stateless revision");
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "files__echo", "arguments": {"text": "no session"}, "_meta": meta("2026-07-28")}});
    let r = s.post(&call, &header).await.json();
    assert_eq!(r["result"]["content"][0]["text"], "no session");
    assert_eq!(r["result"]["resultType"], "complete", "added for the stateless revision: {r}");
    let list = s
        .post(
            &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"_meta": meta("2026-07-28")}}),
            &header,
        )
        .await
        .json();
    assert_eq!(list["result"]["tools"].as_array().unwrap().len(), 14);
    let unknown = s
        .post(&json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {"_meta": meta("2099-01-01")}}), &[])
        .await;
    assert_eq!(unknown.status, 400);
    assert_eq!(unknown.json()["error"]["code"], -32022);
    assert_eq!(unknown.json()["error"]["data"]["supported"][0], "2026-07-28");
    let mismatch = s
        .post(
            &json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {"_meta": meta("2026-07-28")}}),
            &[("mcp-protocol-version", "2025-06-18")],
        )
        .await;
    assert_eq!(mismatch.status, 400, "the header must agree with _meta");
}

#[tokio::test]
async fn a_server_that_says_its_tools_changed_is_listed_afresh_at_once() {
    let sse = mcp_mock(McpMockConfig { sse: true, ..Default::default() }).await;
    let dir = scratch_dir();
    let yaml = format!(
        "listen: 127.0.0.1:0\nstorage: {{url: 'sqlite://{0}/db.sqlite', usage_journal_dir: '{0}/usage'}}\nauth: {{master_key: {MASTER}}}\nmcp:\n  servers:\n    - {{name: remote, url: '{1}'}}\n    - {{name: local, command: ['{2}', mock-mcp, --stdio]}}\n",
        dir.display(),
        sse.url(),
        env!("CARGO_BIN_EXE_switchyard")
    );
    let gw = gateway_yaml(&yaml).await;
    let mut s = Session::new(&gw, "/mcp", MASTER);
    s.initialize().await;
    let names = |v: Value| -> Vec<String> {
        v["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect()
    };
    let before = names(s.call(1, "tools/list", json!({})).await);
    assert!(!before.iter().any(|n| n.ends_with("__added_tool")), "{before:?}");
    // Both announce notifications/tools/list_changed (over the SSE answer, and on stdout): the
    // gateway forgets the cached lists instead of serving them for their 60 s.
    s.call(2, "tools/call", json!({"name": "remote__change_tools"})).await;
    s.call(3, "tools/call", json!({"name": "local__change_tools"})).await;
    let after = names(s.call(4, "tools/list", json!({})).await);
    assert!(after.contains(&"remote__added_tool".to_owned()), "{after:?}");
    assert!(after.contains(&"local__added_tool".to_owned()), "{after:?}");
    gw.shutdown().await;
}

#[tokio::test]
async fn a_failing_server_trips_its_breaker_and_is_refused_at_once() {
    let m = mcp_mock(McpMockConfig::default()).await;
    let (gw, _) = mcp_gateway(&[("files", &m)], "").await;
    let mut s = Session::new(&gw, "/mcp", MASTER);
    s.initialize().await;
    let echo = json!({"name": "files__echo", "arguments": {"text": "x"}});
    assert!(s.call(1, "tools/call", echo.clone()).await.get("result").is_some());
    drop(m); // the server goes away: connections are refused
    let mut messages = Vec::new();
    for i in 0..6 {
        let r = s.call(10 + i, "tools/call", echo.clone()).await;
        assert_eq!(r["error"]["code"], -32603, "{r}");
        messages.push(r["error"]["message"].as_str().unwrap().to_owned());
    }
    assert!(messages[..5].iter().all(|m| m.contains("unreachable")), "{messages:?}");
    let metrics = TestClient::new().get(&format!("{}/metrics", gw.url())).await.unwrap().text();
    assert!(
        metrics.contains(r#"switchyard_mcp_tool_calls_total{server="files",tool="echo",status="unreachable"} 6"#),
        "{metrics}"
    );
    assert!(gw.app.mcp.as_ref().unwrap().hub().is_down("files"), "five failures in a row open the breaker");
    let listed = s.call(30, "tools/list", json!({})).await;
    assert_eq!(listed["result"]["tools"], json!([]), "a server behind an open breaker is not listed");
}

#[tokio::test]
async fn a_session_client_hears_list_changed_on_its_get_stream() {
    use http_body_util::BodyExt;
    let m = mcp_mock(McpMockConfig { sse: true, ..Default::default() }).await;
    let (gw, _) = mcp_gateway(&[("remote", &m)], "").await;
    let mut s = Session::new(&gw, "/mcp", MASTER);
    s.initialize().await;
    let auth = format!("Bearer {MASTER}");
    let sid = s.id.clone().unwrap();
    let headers = [("authorization", auth.as_str()), ("accept", "text/event-stream"), ("mcp-session-id", sid.as_str())];
    let stream = s.client.send(Method::GET, &s.url, Bytes::new(), &headers).await.unwrap();
    assert_eq!(stream.status(), 200);
    assert_eq!(stream.headers()["content-type"], "text/event-stream");
    let mut body = stream.into_body();
    s.call(1, "tools/call", json!({"name": "remote__change_tools"})).await;
    let frame = tokio::time::timeout(std::time::Duration::from_secs(5), body.frame()).await.unwrap().unwrap().unwrap();
    let text = String::from_utf8(frame.into_data().unwrap().to_vec()).unwrap();
    assert!(text.contains(r#""method":"notifications/tools/list_changed""#), "{text}");
    // Shutting down ends the stream instead of waiting out the grace period on it.
    let started = std::time::Instant::now();
    gw.shutdown().await;
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "shutdown waited on the GET stream");
    assert!(tokio::time::timeout(std::time::Duration::from_secs(5), body.frame())
        .await
        .unwrap()
        .is_none_or(|f| f.is_err()));
}

#[tokio::test]
async fn guardrails_block_a_secret_in_a_tool_call_before_the_server_and_mask_what_a_tool_returns() {
    let files = mcp_mock(McpMockConfig::default()).await;
    let dir = scratch_dir();
    let yaml = format!(
        "listen: 127.0.0.1:0\nstorage: {{url: '{}', usage_journal_dir: '{}/usage'}}\nauth: {{master_key: {MASTER}}}\n\
         guardrails:\n  default: [pii, secrets]\n\
         \x20 pii: {{type: pii, action: mask, on: [tool_result]}}\n\
         \x20 secrets: {{type: secrets, action: block, on: [tool_call]}}\n\
         mcp:\n  servers:\n    - {{name: files, url: '{}'}}\n",
        db_url(&dir),
        dir.display(),
        files.url()
    );
    let gw = gateway_yaml(&yaml).await;
    for path in ["/mcp", "/mcp/files"] {
        let tool = if path == "/mcp" { "files__echo" } else { "echo" };
        let mut s = Session::new(&gw, path, MASTER);
        s.initialize().await;
        let before = files.stats().calls.get("echo").copied().unwrap_or(0);
        // A credential in the arguments: a JSON-RPC error, and the server never sees the call.
        let r = s.call(1, "tools/call", json!({"name": tool, "arguments": {"text": "key AKIAIOSFODNN7EXAMPLE"}})).await;
        let message = r["error"]["message"].as_str().unwrap_or_default().to_owned();
        assert!(message.contains("blocked by guardrail `secrets` (found: aws_access_key)"), "{path}: {r}");
        assert!(!r.to_string().contains("AKIAIOSFODNN7EXAMPLE"), "{path}: {r}");
        assert_eq!(files.stats().calls.get("echo").copied().unwrap_or(0), before, "{path}: the call never left");
        // An email in what the tool returns reaches the client masked.
        let r = s
            .call(2, "tools/call", json!({"name": tool, "arguments": {"text": "write to jane.doe@example.com"}}))
            .await;
        assert_eq!(r["result"]["content"][0]["text"], "write to [EMAIL]", "{path}: {r}");
    }
}

/// Webhook guards watch tools too: one on calls blocks a forbidden call before the server sees
/// it, one on results masks what a tool returns; each is told the direction and the tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_guards_on_tool_calls_and_results_block_and_mask_them() {
    let files = mcp_mock(McpMockConfig::default()).await;
    // It masks results only.
    let (url, seen) = crate::common::json_service::webhook_service(std::time::Duration::ZERO, |asked| {
        asked["direction"] == "tool_result"
    })
    .await;
    let dir = scratch_dir();
    let yaml = format!(
        "listen: 127.0.0.1:0\nstorage: {{url: '{}', usage_journal_dir: '{}/usage'}}\nauth: {{master_key: {MASTER}}}\n\
         guardrails:\n  default: [calls, results]\n\
         \x20 calls: {{type: webhook, url: '{url}', on: [tool_call], action: block}}\n\
         \x20 results: {{type: webhook, url: '{url}', on: [tool_result], action: mask}}\n\
         mcp:\n  servers:\n    - {{name: files, url: '{}'}}\n",
        db_url(&dir),
        dir.display(),
        files.url()
    );
    let gw = gateway_yaml(&yaml).await;
    for path in ["/mcp", "/mcp/files"] {
        let tool = if path == "/mcp" { "files__echo" } else { "echo" };
        let mut s = Session::new(&gw, path, MASTER);
        s.initialize().await;
        let before = files.stats().calls.get("echo").copied().unwrap_or(0);
        let r = s.call(1, "tools/call", json!({"name": tool, "arguments": {"text": "a forbidden thing"}})).await;
        let message = r["error"]["message"].as_str().unwrap_or_default().to_owned();
        assert!(message.contains("guardrail `calls` (policy 7)"), "{path}: {r}");
        assert_eq!(files.stats().calls.get("echo").copied().unwrap_or(0), before, "{path}: the call never left");
        // The result's webhook masks; the call's lets the same text through to the server.
        let r = s.call(2, "tools/call", json!({"name": tool, "arguments": {"text": "my code-123 here"}})).await;
        assert_eq!(r["result"]["content"][0]["text"], "my [CODE] here", "{path}: {r}");
        assert_eq!(files.stats().calls.get("echo").copied().unwrap_or(0), before + 1, "{path}");
    }
    let asked = seen.lock().unwrap().clone();
    // Per path: the blocked call (calls), the allowed call (calls), its result (results).
    assert_eq!(asked.len(), 6, "{asked:?}");
    assert_eq!(
        (&asked[0]["guard"], &asked[0]["direction"], &asked[0]["tool"]),
        (&json!("calls"), &json!("tool_call"), &json!("files/echo"))
    );
    assert_eq!((&asked[2]["guard"], &asked[2]["direction"]), (&json!("results"), &json!("tool_result")));
    assert!(asked[2]["texts"].as_array().unwrap().iter().any(|t| t == "my code-123 here"), "{asked:?}");
}

/// The guards of a tool call share one deadline, the server's timeout: two slow webhooks in a
/// row (0.9 s each, each allowed 5 s) cannot hold a call past the server's 1 s. The second is
/// asked with what is left, fails closed, and the call is refused before the server sees it;
/// without the shared deadline both would answer (1.8 s) and the call would go through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_calls_guards_share_the_servers_timeout_as_one_deadline() {
    let files = mcp_mock(McpMockConfig::default()).await;
    let (url, seen) =
        crate::common::json_service::webhook_service(std::time::Duration::from_millis(900), |_| false).await;
    let dir = scratch_dir();
    let hook =
        format!("{{type: webhook, url: '{url}', timeout: 5s, on_error: closed, on: [tool_call], action: block}}");
    let yaml = format!(
        "listen: 127.0.0.1:0\nstorage: {{url: '{}', usage_journal_dir: '{}/usage'}}\nauth: {{master_key: {MASTER}}}\n\
         guardrails:\n  default: [first, second]\n  first: {hook}\n  second: {hook}\n\
         mcp:\n  servers:\n    - {{name: files, url: '{}', timeout: 1s}}\n",
        db_url(&dir),
        dir.display(),
        files.url()
    );
    let gw = gateway_yaml(&yaml).await;
    let mut s = Session::new(&gw, "/mcp", MASTER);
    s.initialize().await;
    let started = std::time::Instant::now();
    let r = s.call(1, "tools/call", json!({"name": "files__echo", "arguments": {"text": "hello"}})).await;
    let took = started.elapsed();
    let message = r["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("cannot be reached"), "the second guard ran out of time: {r}");
    assert_eq!(files.stats().calls.get("echo"), None, "the refused call never left");
    assert!(took < std::time::Duration::from_millis(1600), "held {took:?}, past the server's 1 s deadline");
    assert_eq!(seen.lock().unwrap().len(), 2, "both guards were asked");
}

/// A key's and its team's own guardrails (issue 32) apply to its tool calls as to its model
/// requests: here the team adds masking of results and the key a block on calls; the master
/// key, which adds none, gets neither.
#[tokio::test]
async fn a_keys_and_its_teams_guardrails_apply_to_its_tool_calls() {
    let files = mcp_mock(McpMockConfig::default()).await;
    let dir = scratch_dir();
    let yaml = format!(
        "listen: 127.0.0.1:0\nstorage: {{url: '{}', usage_journal_dir: '{}/usage'}}\nauth: {{master_key: {MASTER}}}\n\
         guardrails:\n\
         \x20 pii: {{type: pii, action: mask, on: [tool_result]}}\n\
         \x20 blocker: {{type: keywords, keywords: [nightingale], action: block, on: [tool_call]}}\n\
         mcp:\n  servers:\n    - {{name: files, url: '{}'}}\n",
        db_url(&dir),
        dir.display(),
        files.url()
    );
    let gw = gateway_yaml(&yaml).await;
    let client = TestClient::new();
    let auth = format!("Bearer {MASTER}");
    let admin = |path: &str, body: Value| {
        let (client, url, auth) = (client.clone(), format!("{}{path}", gw.url()), auth.clone());
        async move { client.post_json(&url, body.to_string().as_bytes(), &[("authorization", &auth)]).await.unwrap() }
    };
    let team = admin("/admin/teams", json!({"name": "research", "guardrails": ["pii"]})).await;
    assert_eq!(team.status, 201, "{}", team.text());
    let team_id = team.json()["id"].as_str().unwrap().to_owned();
    let key = admin("/admin/keys", json!({"team_id": team_id, "guardrails": ["blocker"]})).await;
    assert_eq!(key.status, 201, "{}", key.text());
    let key = key.json()["key"].as_str().unwrap().to_owned();

    let echo = |text: &str| json!({"name": "files__echo", "arguments": {"text": text}});
    let mut guarded = Session::new(&gw, "/mcp", &key);
    guarded.initialize().await;
    let r = guarded.call(1, "tools/call", echo("about project nightingale")).await;
    let message = r["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("blocked by guardrail `blocker`"), "{r}");
    assert_eq!(files.stats().calls.get("echo"), None, "the blocked call never left");
    let r = guarded.call(2, "tools/call", echo("mail jane.doe@example.com")).await;
    assert_eq!(r["result"]["content"][0]["text"], "mail [EMAIL]", "{r}");

    let mut open = Session::new(&gw, "/mcp", MASTER);
    open.initialize().await;
    let r = open.call(1, "tools/call", echo("about project nightingale")).await;
    assert_eq!(r["result"]["content"][0]["text"], "about project nightingale", "{r}");
    let r = open.call(2, "tools/call", echo("mail jane.doe@example.com")).await;
    assert_eq!(r["result"]["content"][0]["text"], "mail jane.doe@example.com", "{r}");
}

/// Policy rules on tool calls (issue 58): `mcp.server`, `mcp.tool` and `mcp.arguments` with the
/// caller's attributes; a denied call never reaches the upstream and names its rule.
#[tokio::test]
async fn policy_rules_decide_tool_calls_by_server_tool_and_arguments() {
    let m = mcp_mock(McpMockConfig::default()).await;
    let dir = scratch_dir();
    let db = db_url(&dir);
    let yaml = format!(
        r#"listen: 127.0.0.1:0
storage: {{url: '{db}', usage_journal_dir: '{}/usage'}}
auth: {{master_key: {MASTER}}}
mcp:
  servers:
    - {{name: files, url: '{}'}}
policies:
  - {{name: writers, when: "mcp.tool.startsWith('write') && !('admin' in key.tags)", then: deny, message: "writing needs the admin tag"}}
  - {{name: small-sums, when: "mcp.server == 'files' && mcp.tool == 'add' && mcp.arguments.a > 100", then: deny}}
  - {{name: no-models-here, when: "request.model == 'x'", then: deny}}
"#,
        dir.display(),
        m.url()
    );
    let gw = gateway_yaml(&yaml).await;
    let client = TestClient::new();
    let auth = format!("Bearer {MASTER}");
    let mut keys = Vec::new();
    for tags in [json!([]), json!(["admin"])] {
        let body = json!({"metadata": {"tags": tags}}).to_string();
        let created = client
            .post_json(&format!("{}/admin/keys", gw.url()), body.as_bytes(), &[("authorization", &auth)])
            .await
            .unwrap();
        assert_eq!(created.status, 201, "{}", created.text());
        keys.push(created.json()["key"].as_str().unwrap().to_owned());
    }
    let mut plain = Session::new(&gw, "/mcp", &keys[0]);
    plain.initialize().await;
    let r = plain.call(1, "tools/call", json!({"name": "files__write_file", "arguments": {"path": "/x"}})).await;
    assert_eq!(r["error"]["data"]["reason"], "policy_denied", "{r}");
    assert_eq!(r["error"]["data"]["policy"], "writers", "{r}");
    assert!(r["error"]["message"].as_str().unwrap().contains("writing needs the admin tag"), "{r}");
    assert_eq!(m.stats().calls.get("write_file"), None, "a denied call never reaches the upstream");
    let r = plain.call(2, "tools/call", json!({"name": "files__add", "arguments": {"a": 101, "b": 1}})).await;
    assert_eq!(r["error"]["data"]["policy"], "small-sums", "{r}");
    let r = plain.call(3, "tools/call", json!({"name": "files__add", "arguments": {"a": 2, "b": 3}})).await;
    assert!(r.get("result").is_some(), "{r}");
    let mut admin = Session::new(&gw, "/mcp", &keys[1]);
    admin.initialize().await;
    let r = admin.call(4, "tools/call", json!({"name": "files__write_file", "arguments": {"path": "/x"}})).await;
    assert!(r.get("result").is_some(), "the admin tag writes: {r}");
}
