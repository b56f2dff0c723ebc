//! `code-mode`: Code Mode's `execute_code` through the gateway, one connection, closed loop: an empty program,
//! programs making 1, 10 and 50 tool calls one after another or at once (`Promise.all`), against a mock tool
//! that answers at once and one that takes 10 ms. Set beside a direct `tools/call` to the mock, so the
//! sandbox's cost per tool call can be told apart from the tool call itself.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use serde_json::{json, Value};
use switchyard_testkit::TestClient;

use super::{measure, Mode};
use crate::load::RequestSpec;
use crate::procs::Proc;
use crate::report::Report;
use crate::{BenchArgs, Pinning};

/// A program making `n` calls of `call` (a JavaScript expression), awaited one by one or all at once.
fn program(n: usize, call: &str, parallel: bool) -> String {
    match (n, parallel) {
        (0, _) => String::new(),
        (_, false) => format!("let r; for (let i = 0; i < {n}; i++) r = await {call}; return r;"),
        (_, true) => {
            format!("const r = await Promise.all(Array.from({{length: {n}}}, () => {call})); return r.length;")
        }
    }
}

pub async fn run(args: &BenchArgs, pin: &Pinning, report: &mut Report) -> Result<(), String> {
    let mock = Proc::start("mcp", &["mock-mcp".into(), "--listen".into(), "127.0.0.1:0".into()], pin.mock.as_deref())?;
    let config = format!(
        "listen: 127.0.0.1:0\nmcp:\n  servers:\n    - {{name: t, url: '{}'}}\n  code_mode: {{enabled: true, max_tool_calls: 100, max_parallel_calls: 50}}\n",
        mock.url
    );
    let gateway = super::start_gateway(&config, pin)?;
    let code_url = format!("{}/mcp/code", gateway.url);
    ready(&code_url).await?;
    if let Some(rss) = gateway.rss_bytes() {
        report.finding("code-mode", "gateway RSS, sandbox compiled", super::mb(rss), "MB");
    }
    let call = |name: &str| json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": {"text": "x"}}});
    let direct = super::mcp::spec(&mock.url, &super::mcp::open_session(&mock.url).await?, &call("echo"), false)?;
    let mcp_url = format!("{}/mcp", gateway.url);
    let through = super::mcp::spec(&mcp_url, &super::mcp::open_session(&mcp_url).await?, &call("t__echo"), false)?;
    let echo = "tools.t.echo({text: 'x'})";
    let slow = "tools.t.slow({ms: 10})";
    let phases: Vec<(String, String)> = vec![
        ("empty program".into(), program(0, echo, false)),
        ("1 call, 0 ms tool".into(), program(1, echo, false)),
        ("10 calls in sequence, 0 ms tool".into(), program(10, echo, false)),
        ("50 calls in sequence, 0 ms tool".into(), program(50, echo, false)),
        ("10 calls with Promise.all, 0 ms tool".into(), program(10, echo, true)),
        ("50 calls with Promise.all, 0 ms tool".into(), program(50, echo, true)),
        ("1 call, 10 ms tool".into(), program(1, slow, false)),
        ("10 calls in sequence, 10 ms tool".into(), program(10, slow, false)),
        ("10 calls with Promise.all, 10 ms tool".into(), program(10, slow, true)),
    ];
    let (d, w) = (args.phase(5.0), args.warmup());
    let tool_call = measure("tools/call direct to the mock", &direct, Mode::Closed(1), w, d).await;
    report.row("code-mode", "one tools/call, direct to the mock", "direct", &tool_call);
    let via = measure("tools/call through the gateway", &through, Mode::Closed(1), w, d).await;
    let tc = report.row("code-mode", "one tools/call by a client, through the gateway", "gateway", &via);
    let mut p50 = Vec::new();
    for (label, code) in &phases {
        let spec = execute_spec(&code_url, code)?;
        check(&code_url, code).await.map_err(|e| format!("{label}: {e}"))?;
        let stats = measure(label, &spec, Mode::Closed(1), w, d).await;
        p50.push(report.row("code-mode", label.clone(), "gateway", &stats).p50 as f64);
    }
    report.finding("code-mode", "empty program p50, end to end", p50[0], "µs");
    // What each of 50 sequential calls adds over the empty program, against the same call made by a client
    // through the gateway (which also pays the client's own HTTP leg, so this errs towards the sandbox).
    let per_call = (p50[3] - p50[0]) / 50.0;
    report.finding("code-mode", "per sequential tool call (50 calls), p50", per_call, "µs");
    report.finding(
        "code-mode",
        "per call beyond a client's tools/call through the gateway",
        per_call - tc.p50 as f64,
        "µs",
    );
    report.finding("code-mode", "10 parallel calls of a 10 ms tool, p50", p50[8], "µs");
    Ok(())
}

/// Waits (up to 60 s) until the gateway's sandbox has compiled and answers an empty program.
async fn ready(url: &str) -> Result<(), String> {
    for _ in 0..600 {
        if check(url, "").await.is_ok() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err("Code Mode never answered an empty program".into())
}

/// Runs `code` once and fails unless it returned a value.
pub(crate) async fn check(url: &str, code: &str) -> Result<(), String> {
    let body = execute_body(code);
    let r = TestClient::new()
        .post_json(
            url,
            &body,
            &[("accept", "application/json, text/event-stream"), ("mcp-protocol-version", "2026-07-28")],
        )
        .await
        .map_err(|e| e.to_string())?;
    let v: Value = serde_json::from_slice(&r.body).map_err(|e| format!("{e}: {}", r.text()))?;
    match v.pointer("/result/isError") {
        Some(Value::Bool(false)) => Ok(()),
        _ => Err(format!("the program failed: {v}")),
    }
}

fn execute_body(code: &str) -> Vec<u8> {
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "execute_code", "arguments": {"code": code},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}})
    .to_string()
    .into_bytes()
}

/// A stateless-revision `execute_code` request: no session to open.
pub(crate) fn execute_spec(url: &str, code: &str) -> Result<Arc<RequestSpec>, String> {
    Ok(Arc::new(RequestSpec {
        uri: url.parse().map_err(|e| format!("bad URL {url}: {e}"))?,
        body: Bytes::from(execute_body(code)),
        headers: vec![
            (http::header::CONTENT_TYPE, HeaderValue::from_static("application/json")),
            (http::header::ACCEPT, HeaderValue::from_static("application/json, text/event-stream")),
            (HeaderName::from_static("mcp-protocol-version"), HeaderValue::from_static("2026-07-28")),
        ],
        stream: false,
        stream_end: b"",
        backend_header: HeaderName::from_static("x-switchyard-backend"),
        timeout: Duration::from_secs(30),
    }))
}
