//! Code Mode, black box: the real gateway with `mcp.code_mode` on, in front of a mock MCP server, spoken
//! to in the stateless revision on `POST /mcp/code`. Programs call tools through the same permission
//! checks, rate limit, usage records and metrics as direct calls; every limit ends a program with a clear
//! error while the gateway keeps serving.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use crate::common::*;
use bytes::Bytes;
use http::Method;
use serde_json::{json, Value};
use switchyard_testkit::{McpMock, McpMockConfig, TestClient};

const MASTER: &str = "master-key-for-code-mode-tests";

/// A gateway with the mock as server `files` and Code Mode on with `limits` (YAML flow-map entries).
async fn code_gateway(limits: &str) -> (switchyard_gateway::RunningGateway, McpMock, String) {
    code_gateway_with(limits, "").await
}

/// `code_gateway` with more top-level YAML after it.
async fn code_gateway_with(limits: &str, extra: &str) -> (switchyard_gateway::RunningGateway, McpMock, String) {
    let m = McpMock::start("127.0.0.1:0".parse().unwrap(), McpMockConfig::default()).await.unwrap();
    let dir = scratch_dir();
    let db = db_url(&dir);
    let yaml = format!(
        "listen: 127.0.0.1:0\nstorage: {{url: '{db}', usage_journal_dir: '{}/usage'}}\nauth: {{master_key: {MASTER}}}\n\
         mcp:\n  servers:\n    - {{name: files, url: '{}'}}\n  code_mode: {{enabled: true{limits}}}\n{extra}",
        dir.display(),
        m.url()
    );
    (gateway_yaml(&yaml).await, m, db)
}

/// One stateless-revision JSON-RPC request; the answer's JSON.
async fn rpc(gw: &switchyard_gateway::RunningGateway, path: &str, key: &str, method: &str, params: Value) -> Value {
    let mut params = params;
    params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28"});
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let auth = format!("Bearer {key}");
    let headers = [
        ("authorization", auth.as_str()),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2026-07-28"),
    ];
    let url = format!("{}{path}", gw.url());
    let r = TestClient::new().request(Method::POST, &url, Bytes::from(body.to_string()), &headers).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

async fn execute(gw: &switchyard_gateway::RunningGateway, key: &str, code: &str) -> Value {
    let r = rpc(gw, "/mcp/code", key, "tools/call", json!({"name": "execute_code", "arguments": {"code": code}})).await;
    r["result"].clone()
}

/// The error text of a failed program.
fn error_of(result: &Value) -> String {
    assert_eq!(result["isError"], true, "{result}");
    result["structuredContent"]["error"]["message"].as_str().unwrap().to_owned()
}

async fn create_key(gw: &switchyard_gateway::RunningGateway, body: &str) -> String {
    let auth = format!("Bearer {MASTER}");
    let created = TestClient::new()
        .post_json(&format!("{}/admin/keys", gw.url()), body.as_bytes(), &[("authorization", &auth)])
        .await
        .unwrap();
    assert_eq!(created.status, 201, "{}", created.text());
    created.json()["key"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn lists_searches_and_runs_a_program_calling_three_tools() {
    let (gw, m, db) = code_gateway("").await;
    let list = rpc(&gw, "/mcp/code", MASTER, "tools/list", json!({})).await;
    let names: Vec<&str> =
        list["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["list_servers", "search_tools", "execute_code"]);

    let servers = rpc(&gw, "/mcp/code", MASTER, "tools/call", json!({"name": "list_servers", "arguments": {}})).await;
    let text = servers["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains(r#""name":"files""#), "{text}");

    let found =
        rpc(&gw, "/mcp/code", MASTER, "tools/call", json!({"name": "search_tools", "arguments": {"query": "add"}}))
            .await;
    let decl = found["result"]["content"][0]["text"].as_str().unwrap();
    assert!(decl.starts_with("/**") && decl.contains("tools.files.add(args: {"), "{decl}");
    assert!(decl.contains("a: number") && decl.contains("b: number"), "{decl}");

    let result = execute(
        &gw,
        MASTER,
        "const a = await tools.files.add({a: 2, b: 3});\n\
         const e = await tools.files.echo({text: 'sum ' + JSON.stringify(a)});\n\
         const t = await tools.files.add({a: 10, b: 20});\n\
         console.log('echoed', e);\n\
         return {echo: e, t};",
    )
    .await;
    assert_eq!(result["isError"], false, "{result}");
    let out = &result["structuredContent"];
    assert_eq!(out["toolCalls"], 3);
    assert_eq!(out["logs"][0]["text"].as_str().unwrap().split(' ').next(), Some("echoed"));
    assert!(out["result"]["echo"].as_str().unwrap().starts_with("sum "), "{out}");
    assert_eq!(m.stats().calls.values().sum::<u64>(), 3, "three calls reached the upstream");

    // One usage record per tool call the program made, and one for each Code Mode call (list, search, execute).
    let rows = records(&db, 6).await;
    assert_eq!(rows.len(), 6, "{rows:?}");
    let metrics = TestClient::new().get(&format!("{}/metrics", gw.url())).await.unwrap().text();
    assert!(
        metrics.contains(r#"switchyard_mcp_tool_calls_total{server="files",tool="add",status="ok"} 2"#),
        "{metrics}"
    );
    assert!(metrics.contains(r#"switchyard_mcp_tool_calls_total{server="code",tool="execute_code",status="ok"} 1"#));
}

#[tokio::test]
async fn ten_parallel_calls_overlap() {
    let (gw, m, _) = code_gateway(", max_parallel_calls: 10").await;
    let result = execute(
        &gw,
        MASTER,
        "const r = await Promise.all(Array.from({length: 10}, (_, i) => tools.files.slow({ms: 300})));\n\
         return r.length;",
    )
    .await;
    assert_eq!(result["structuredContent"]["result"], 10, "{result}");
    assert_eq!(m.stats().peak_slow, 10, "all ten were running at the upstream at once");
}

#[tokio::test]
async fn every_limit_ends_the_program_and_the_gateway_keeps_serving() {
    let (gw, _m, _) = code_gateway(", timeout: 1s, memory_mb: 16, max_output_bytes: 65536").await;
    // While an endless loop runs, tool calls and other programs are served.
    let endless = {
        let url = gw.url().to_owned();
        tokio::spawn(async move {
            let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                "name": "execute_code", "arguments": {"code": "for (;;) {}"},
                "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}});
            let auth = format!("Bearer {MASTER}");
            let headers = [("authorization", auth.as_str()), ("accept", "application/json")];
            let r = TestClient::new()
                .request(Method::POST, &format!("{url}/mcp/code"), Bytes::from(body.to_string()), &headers)
                .await
                .unwrap();
            r.json()["result"].clone()
        })
    };
    let direct =
        rpc(&gw, "/mcp", MASTER, "tools/call", json!({"name": "files__echo", "arguments": {"text": "up"}})).await;
    assert_eq!(direct["result"]["content"][0]["text"], "up");
    assert_eq!(execute(&gw, MASTER, "return 1 + 1;").await["structuredContent"]["result"], 2);
    assert!(error_of(&endless.await.unwrap()).contains("time limit exceeded"));

    let bomb = execute(&gw, MASTER, "const a = []; for (;;) a.push('x'.repeat(65536) + a.length);").await;
    assert!(error_of(&bomb).contains("memory limit exceeded (16 MiB)"), "{bomb}");
    let calls = execute(&gw, MASTER, "for (let i = 0; i < 1000; i++) await tools.files.echo({text: 'x'});").await;
    assert!(error_of(&calls).contains("tool call limit exceeded (50 calls)"), "{calls}");
    let output = execute(&gw, MASTER, "for (;;) console.log('y'.repeat(1000));").await;
    assert!(error_of(&output).contains("output limit exceeded"), "{output}");
    let waiting = execute(&gw, MASTER, "await tools.files.slow({ms: 5000});").await;
    assert!(error_of(&waiting).contains("time limit exceeded"), "{waiting}");
    assert_eq!(execute(&gw, MASTER, "return 'still here';").await["structuredContent"]["result"], "still here");
}

#[tokio::test]
async fn escape_attempts_fail() {
    let (gw, _m, _) = code_gateway("").await;
    // Each fails because the thing does not exist in the sandbox, not because using it went wrong.
    for (code, reason) in [
        ("return await fetch('http://127.0.0.1:1/');", "ReferenceError: fetch is not defined"),
        ("return require('child_process');", "ReferenceError: require is not defined"),
        ("return await import('std');", "ReferenceError: could not load module 'std'"),
        ("return await import('os');", "ReferenceError: could not load module 'os'"),
        ("return process.env.SWITCHYARD_MASTER_KEY;", "ReferenceError: process is not defined"),
        ("return eval('globalThis.__sy_call')('files', 'echo', '{}');", "TypeError: not a function"),
        ("return Object.getOwnPropertyNames(globalThis).filter(n => n.startsWith('__sy'))[0].length;", "TypeError"),
    ] {
        let message = error_of(&execute(&gw, MASTER, code).await);
        assert!(message.starts_with(reason), "{code}: {message}");
    }
}

#[tokio::test]
async fn programs_are_held_to_the_keys_permissions_and_rate_limit() {
    let (gw, m, _) = code_gateway("").await;
    // May use Code Mode and files__echo only.
    let key = create_key(&gw, r#"{"mcp_tools": ["code__*", "files__echo"], "rpm": 3}"#).await;
    let list = execute(&gw, &key, "return Object.keys(tools.files);").await;
    assert_eq!(list["structuredContent"]["result"], json!(["echo"]), "{list}");
    let forbidden = execute(&gw, &key, "return await tools.files.add({a: 1, b: 2});").await;
    assert!(error_of(&forbidden).contains(r#"no tool "add""#), "{forbidden}");
    assert_eq!(m.stats().calls.get("add"), None, "a forbidden call never reaches the upstream");
    // rpm 3: this is the third execute_code, so the tool call it makes is the fourth request: refused.
    let limited = execute(&gw, &key, "return await tools.files.echo({text: 'x'});").await;
    assert!(error_of(&limited).contains("rate limit"), "{limited}");

    // A key without Code Mode in its servers cannot use it.
    let files_only = create_key(&gw, r#"{"mcp_servers": ["files"]}"#).await;
    let r =
        rpc(&gw, "/mcp/code", &files_only, "tools/call", json!({"name": "execute_code", "arguments": {"code": ""}}))
            .await;
    assert_eq!(r["error"]["data"]["reason"], "forbidden", "{r}");
}

#[tokio::test]
async fn malformed_calls_get_json_rpc_errors() {
    let (gw, _m, _) = code_gateway("").await;
    let call = |name: &str, arguments: Value| json!({"name": name, "arguments": arguments});
    for (params, needle) in [
        (call("execute_code", json!({})), "`code`"),
        (call("execute_code", json!({"code": 42})), "`code`"),
        (call("execute_code", json!("not an object")), "`code`"),
        (call("search_tools", json!({})), "`query`"),
        (call("search_tools", json!({"query": ["x"]})), "`query`"),
        (call("run_anything", json!({})), "unknown tool `run_anything`"),
        (json!({"arguments": {}}), "`name`"),
    ] {
        let r = rpc(&gw, "/mcp/code", MASTER, "tools/call", params.clone()).await;
        assert_eq!(r["error"]["code"], -32602, "{params}: {r}");
        assert!(r["error"]["message"].as_str().unwrap().contains(needle), "{params}: {r}");
    }
    // A made-up tool name never becomes a metric label.
    let metrics = TestClient::new().get(&format!("{}/metrics", gw.url())).await.unwrap().text();
    assert!(!metrics.contains("run_anything"), "{metrics}");
    let auth = format!("Bearer {MASTER}");
    let url = format!("{}/mcp/code", gw.url());
    let headers = [("authorization", auth.as_str()), ("accept", "application/json, text/event-stream")];
    let broken = TestClient::new().post_json(&url, b"{\"jsonrpc\": \"2.0\", \"id\": 1,", &headers).await.unwrap();
    assert_eq!(broken.json()["error"]["code"], -32700, "{}", broken.text());
    let huge = vec![b' '; 11 << 20];
    let too_big = TestClient::new().post_json(&url, &huge, &headers).await.unwrap();
    assert_eq!(too_big.status, 413);
}

#[tokio::test]
async fn a_servers_request_to_a_program_is_answered_with_an_error_at_once() {
    let (gw, m, _) = code_gateway("").await;
    let result = execute(&gw, MASTER, "const r = await tools.files.sample({prompt: 'x'}); return r;").await;
    let text = result.to_string();
    assert!(text.contains("error -32601") && text.contains("cannot be answered"), "{text}");
    assert_eq!(m.stats().calls.get("sample"), Some(&1));
}

#[tokio::test]
async fn guardrails_apply_to_the_calls_a_program_makes() {
    let guards = "guardrails:\n  default: [pii, secrets]\n  pii: {type: pii, action: mask, on: [tool_result]}\n  \
                  secrets: {type: secrets, action: block, on: [tool_call]}\n";
    let (gw, m, _db) = code_gateway_with("", guards).await;
    let result = execute(&gw, MASTER, "return await tools.files.echo({text: 'mail jane.doe@example.com'});").await;
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(result["structuredContent"]["result"], "mail [EMAIL]", "{result}");
    let blocked = execute(&gw, MASTER, "return await tools.files.echo({text: 'AKIAIOSFODNN7EXAMPLE'});").await;
    let error = error_of(&blocked);
    assert!(error.contains("blocked by guardrail `secrets`") && !error.contains("AKIA"), "{error}");
    assert_eq!(m.stats().calls.get("echo").copied().unwrap_or(0), 1, "the blocked call never reached the server");
}

/// A key's own guardrails apply to the calls its programs make (issue 32); the master key, which
/// adds none, is not masked.
#[tokio::test]
async fn a_keys_own_guardrails_apply_to_its_programs_calls() {
    let guards = "guardrails:\n  pii: {type: pii, action: mask, on: [tool_result]}\n";
    let (gw, _m, _db) = code_gateway_with("", guards).await;
    let key = create_key(&gw, r#"{"guardrails": ["pii"]}"#).await;
    let program = "return await tools.files.echo({text: 'mail jane.doe@example.com'});";
    let result = execute(&gw, &key, program).await;
    assert_eq!(result["structuredContent"]["result"], "mail [EMAIL]", "{result}");
    let result = execute(&gw, MASTER, program).await;
    assert_eq!(result["structuredContent"]["result"], "mail jane.doe@example.com", "{result}");
}
