//! `mcp`: MCP through the gateway against the same request made directly to the mock MCP server
//! (`switchyard mock-mcp`), one connection, closed loop: `tools/call` answered as JSON, `tools/call`
//! answered as an SSE stream, and `tools/list` (the gateway serves it from its cache; direct, the
//! mock lists its own tools). Sessions are opened once per side before measuring, as a client would.
//! A stdio upstream has no HTTP to call directly: its phase sets the gateway in front of a stdio
//! mock against the direct HTTP call of the JSON phase, so the difference includes the pipes.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use serde_json::json;
use switchyard_testkit::TestClient;

use super::{cdf, measure, Mode};
use crate::chart::{Chart, Series};
use crate::load::RequestSpec;
use crate::procs::Proc;
use crate::report::Report;
use crate::{BenchArgs, Pinning};

pub async fn run(args: &BenchArgs, pin: &Pinning, report: &mut Report) -> Result<(), String> {
    let mock = |name: &str, sse: bool| {
        let mut a: Vec<String> = vec!["mock-mcp".into(), "--listen".into(), "127.0.0.1:0".into()];
        if sse {
            a.push("--sse".into());
        }
        Proc::start(name, &a, pin.mock.as_deref())
    };
    let json_mock = mock("mcp-json", false)?;
    let sse_mock = mock("mcp-sse", true)?;
    let exe = crate::procs::gateway_exe()?;
    let config = format!(
        "listen: 127.0.0.1:0\nmcp:\n  servers:\n    - {{name: j, url: '{}'}}\n    - {{name: s, url: '{}'}}\n    - {{name: l, command: ['{}', mock-mcp, --stdio]}}\n",
        json_mock.url,
        sse_mock.url,
        exe.display()
    );
    let gateway = super::start_gateway(&config, pin)?;
    let gateway_mcp = format!("{}/mcp", gateway.url);
    let direct_json = open_session(&json_mock.url).await?;
    let direct_sse = open_session(&sse_mock.url).await?;
    let through = open_session(&gateway_mcp).await?;
    if let Some(rss) = gateway.rss_bytes() {
        report.finding("mcp", "gateway RSS with two MCP servers, sessions open", super::mb(rss), "MB");
    }

    let call = |tool: &str| json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": {"text": "hello"}}});
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
    let phases = [
        (
            "tools/call, JSON answer",
            spec(&json_mock.url, &direct_json, &call("echo"), false)?,
            spec(&gateway_mcp, &through, &call("j__echo"), false)?,
        ),
        (
            "tools/call, SSE answer",
            spec(&sse_mock.url, &direct_sse, &call("echo"), true)?,
            spec(&gateway_mcp, &through, &call("s__echo"), false)?,
        ),
        ("tools/list", spec(&json_mock.url, &direct_json, &list, false)?, spec(&gateway_mcp, &through, &list, false)?),
        (
            "tools/call, stdio upstream",
            spec(&json_mock.url, &direct_json, &call("echo"), false)?,
            spec(&gateway_mcp, &through, &call("l__echo"), false)?,
        ),
    ];
    let (d, w) = (args.phase(5.0), args.warmup());
    let mut curves = Vec::new();
    for (label, direct, via) in phases {
        let ds = measure(&format!("{label}: direct"), &direct, Mode::Closed(1), w, d).await;
        let gs = measure(&format!("{label}: gateway"), &via, Mode::Closed(1), w, d).await;
        let sd = report.row("mcp", label, "direct", &ds);
        let sg = report.row("mcp", label, "gateway", &gs);
        report.finding("mcp", format!("{label}: added latency p50, 1 connection"), sg.p50 as f64 - sd.p50 as f64, "µs");
        report.finding("mcp", format!("{label}: added latency p99, 1 connection"), sg.p99 as f64 - sd.p99 as f64, "µs");
        if label.starts_with("tools/call, JSON") {
            curves.push(Series { name: "direct".into(), points: cdf(&ds) });
            curves.push(Series { name: "gateway".into(), points: cdf(&gs) });
        }
    }
    report.charts.push((
        "mcp-tools-call-cdf".into(),
        Chart {
            title: "MCP tools/call latency at 1 connection: direct vs through the gateway".into(),
            x_label: "latency (µs)".into(),
            y_label: "fraction of requests".into(),
            series: curves,
            x_log: true,
            markers: vec![],
        },
    ));
    Ok(())
}

/// `initialize` + `notifications/initialized`; the session id to send from then on.
pub(crate) async fn open_session(url: &str) -> Result<String, String> {
    let client = TestClient::new();
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "switchyard-bench", "version": "1"}}});
    let accept = ("accept", "application/json, text/event-stream");
    let r = client
        .post_json(url, init.to_string().as_bytes(), &[accept])
        .await
        .map_err(|e| format!("initialize at {url}: {e}"))?;
    let session =
        r.header("mcp-session-id").ok_or_else(|| format!("{url} answered initialize without a session"))?.to_owned();
    let done = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    client
        .post_json(url, done.to_string().as_bytes(), &[accept, ("mcp-session-id", &session)])
        .await
        .map_err(|e| format!("notifications/initialized at {url}: {e}"))?;
    Ok(session)
}

pub(crate) fn spec(url: &str, session: &str, body: &serde_json::Value, sse: bool) -> Result<Arc<RequestSpec>, String> {
    let header = |v: &str| HeaderValue::from_str(v).map_err(|e| e.to_string());
    Ok(Arc::new(RequestSpec {
        uri: url.parse().map_err(|e| format!("bad URL {url}: {e}"))?,
        body: Bytes::from(body.to_string()),
        headers: vec![
            (http::header::CONTENT_TYPE, HeaderValue::from_static("application/json")),
            (http::header::ACCEPT, HeaderValue::from_static("application/json, text/event-stream")),
            (HeaderName::from_static("mcp-session-id"), header(session)?),
        ],
        stream: sse,
        stream_end: b"\"result\"",
        backend_header: HeaderName::from_static("x-switchyard-backend"),
        timeout: Duration::from_secs(30),
    }))
}

/// `mixed`: model requests, MCP tool calls and Code Mode programs through one gateway at a fixed rate,
/// the peers' mix (60 % of `--rate` chat completions, 30 % `tools/call`, 10 % `execute_code` of a program
/// making two tool calls at once), for `--duration` (default 30 s): errors, latency of each kind, and the
/// gateway's memory over the run.
pub async fn mixed(args: &BenchArgs, pin: &Pinning, report: &mut Report) -> Result<(), String> {
    let llm = super::start_mock(&args.model, 5, None, pin)?;
    let mcp = Proc::start("mcp", &["mock-mcp".into(), "--listen".into(), "127.0.0.1:0".into()], pin.mock.as_deref())?;
    let config = format!(
        "listen: 127.0.0.1:0\nbackends:\n  - {{name: a, url: '{}'}}\nmcp:\n  servers:\n    - {{name: t, url: '{}'}}\n  code_mode: {{enabled: true}}\n",
        llm.url, mcp.url
    );
    let gateway = super::start_gateway(&config, pin)?;
    let mcp_url = format!("{}/mcp", gateway.url);
    let session = open_session(&mcp_url).await?;
    let chat = Arc::new(RequestSpec {
        uri: format!("{}/v1/chat/completions", gateway.url).parse().map_err(|e| format!("{e}"))?,
        body: Bytes::from(super::chat_body(&args.model, false, "hello")),
        headers: vec![(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"))],
        stream: false,
        stream_end: b"",
        backend_header: HeaderName::from_static("x-switchyard-backend"),
        timeout: Duration::from_secs(30),
    });
    let tool = spec(
        &mcp_url,
        &session,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "t__echo", "arguments": {"text": "hello"}}}),
        false,
    )?;
    let code_url = format!("{}/mcp/code", gateway.url);
    let code =
        "const [a, b] = await Promise.all([tools.t.echo({text: 'a'}), tools.t.echo({text: 'b'})]); return a + b;";
    super::code_mode::check(&code_url, code).await.map_err(|e| format!("mixed: {e}"))?;
    let program = super::code_mode::execute_spec(&code_url, code)?;
    let d = args.phase(30.0);
    let rss = super::RssSampler::start(Some(gateway.pid()));
    eprintln!("  ▸ mixed at {:.0} req/s for {:.0} s", args.rate, d.as_secs_f64());
    let schedule = |share: f64| [(args.rate * share, d)];
    let (chat_schedule, tool_schedule, code_schedule) = (schedule(0.6), schedule(0.3), schedule(0.1));
    let (chats, tools, programs) = tokio::join!(
        crate::load::open_loop(chat, &chat_schedule),
        crate::load::open_loop(tool, &tool_schedule),
        crate::load::open_loop(program, &code_schedule)
    );
    let samples = rss.finish(Some(gateway.pid()));
    let c = report.row("mixed", format!("chat, {:.0}/s", args.rate * 0.6), "gateway", &chats);
    let t = report.row("mixed", format!("tools/call, {:.0}/s", args.rate * 0.3), "gateway", &tools);
    let p = report.row("mixed", format!("execute_code (2 calls), {:.0}/s", args.rate * 0.1), "gateway", &programs);
    let failed = |s: &crate::load::Stats| s.errors.values().sum::<u64>();
    report.finding("mixed", "failed requests", (failed(&chats) + failed(&tools) + failed(&programs)) as f64, "");
    report.finding("mixed", "requests answered", (chats.ok + tools.ok + programs.ok) as f64, "");
    report.finding("mixed", "execute_code latency p50", p.p50 as f64, "µs");
    report.finding("mixed", "execute_code latency p99", p.p99 as f64, "µs");
    report.finding("mixed", "chat latency p50", c.p50 as f64, "µs");
    report.finding("mixed", "chat latency p99", c.p99 as f64, "µs");
    report.finding("mixed", "tools/call latency p50", t.p50 as f64, "µs");
    report.finding("mixed", "tools/call latency p99", t.p99 as f64, "µs");
    // Memory after the first tenth of the run against its end: flat means no growth per request.
    if let (Some(early), Some(last)) = (samples.get(samples.len() / 10), samples.last()) {
        report.finding("mixed", "gateway RSS after warm-up", super::mb(early.1), "MB");
        report.finding("mixed", "gateway RSS at the end", super::mb(last.1), "MB");
    }
    Ok(())
}
