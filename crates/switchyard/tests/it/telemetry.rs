//! OpenTelemetry traces against a real OpenTelemetry Collector, built from its Go modules by
//! `scripts/otelcol` (OTLP/HTTP receiver, file exporter): the caller's trace continues through the
//! gateway, each upstream attempt is a GenAI client span, the backend is handed the attempt's
//! `traceparent`, and a collector that is down costs no request anything.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use switchyard_testkit::{MockConfig, TestClient};

use crate::common::*;

/// The collector binary: `SWITCHYARD_TEST_OTELCOL`, else what `scripts/otelcol` builds (cached after the first time).
fn collector_binary() -> PathBuf {
    if let Ok(path) = std::env::var("SWITCHYARD_TEST_OTELCOL") {
        return path.into();
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out =
        Command::new(root.join("scripts/otelcol")).stderr(Stdio::inherit()).output().expect("scripts/otelcol runs");
    assert!(out.status.success(), "scripts/otelcol failed");
    String::from_utf8(out.stdout).unwrap().lines().last().expect("a path").trim().into()
}

/// A collector writing every span it receives to a JSON-lines file.
struct Collector {
    child: Child,
    port: u16,
    file: PathBuf,
}

impl Collector {
    /// Start one on `port` (0: a free one) and wait until its receiver accepts connections.
    fn start(dir: &Path, port: u16) -> Collector {
        static STARTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = STARTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let port = if port == 0 { free_port() } else { port };
        // A file per start: the exporter empties its file when it starts.
        let file = dir.join(format!("otlp-{port}-{n}.json"));
        let config = dir.join(format!("collector-{port}-{n}.yaml"));
        std::fs::write(
            &config,
            format!(
                "receivers: {{otlp: {{protocols: {{http: {{endpoint: '127.0.0.1:{port}'}}}}}}}}\n\
                 exporters: {{file: {{path: '{}', format: json, flush_interval: 50ms}}}}\n\
                 service:\n  telemetry: {{metrics: {{level: none}}}}\n  \
                 pipelines: {{traces: {{receivers: [otlp], exporters: [file]}}, \
                 logs: {{receivers: [otlp], exporters: [file]}}}}\n",
                file.display()
            ),
        )
        .unwrap();
        let child = Command::new(collector_binary())
            .arg(format!("--config={}", config.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the collector starts");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "the collector never opened port {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Collector { child, port, file }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every span in the file so far, with its resource's attributes under `"resource"`.
    fn spans(&self) -> Vec<Value> {
        let text = self.complete_lines();
        let mut spans = Vec::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let doc: Value = serde_json::from_str(line).unwrap();
            for rs in doc["resourceSpans"].as_array().into_iter().flatten() {
                for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                    for span in ss["spans"].as_array().into_iter().flatten() {
                        let mut span = span.clone();
                        span["resource"] = rs["resource"].clone();
                        spans.push(span);
                    }
                }
            }
        }
        spans
    }

    /// The file's complete lines so far: the collector may be part-way through writing the last.
    fn complete_lines(&self) -> String {
        let mut text = std::fs::read_to_string(&self.file).unwrap_or_default();
        text.truncate(text.rfind('\n').map_or(0, |end| end + 1));
        text
    }

    /// Every log record in the file so far.
    fn logs(&self) -> Vec<Value> {
        let text = self.complete_lines();
        let mut logs = Vec::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let doc: Value = serde_json::from_str(line).unwrap();
            for rl in doc["resourceLogs"].as_array().into_iter().flatten() {
                for sl in rl["scopeLogs"].as_array().into_iter().flatten() {
                    logs.extend(sl["logRecords"].as_array().into_iter().flatten().cloned());
                }
            }
        }
        logs
    }

    /// Wait (bounded) until the spans of `trace_id` number at least `n`.
    async fn trace(&self, trace_id: &str, n: usize) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let spans: Vec<Value> = self.spans().into_iter().filter(|s| s["traceId"] == trace_id).collect();
            if spans.len() >= n {
                return spans;
            }
            assert!(Instant::now() < deadline, "trace {trace_id}: {} of {n} spans arrived: {spans:#?}", spans.len());
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// An attribute's value as text (OTLP JSON writes integers as strings).
fn attr(span: &Value, key: &str) -> Option<String> {
    let kv = span["attributes"].as_array()?.iter().find(|kv| kv["key"] == key)?;
    let v = &kv["value"];
    let text = match (&v["stringValue"], &v["intValue"], &v["doubleValue"], &v["boolValue"]) {
        (Value::String(s), _, _, _) | (_, Value::String(s), _, _) => s.clone(),
        (_, Value::Number(n), _, _) | (_, _, Value::Number(n), _) => n.to_string(),
        (_, _, _, Value::Bool(b)) => b.to_string(),
        _ => return None,
    };
    Some(text)
}

const SERVER: i64 = 2;
const CLIENT: i64 = 3;

fn kind(span: &Value) -> i64 {
    span["kind"].as_i64().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_requests_trace_reaches_the_collector_with_the_callers_trace_id_and_genai_attributes() {
    let dir = scratch_dir();
    let collector = Collector::start(&dir, 0);
    let failing = mock_with(&["m"], MockConfig { fail_rate: 1.0, fail_status: 500, ..Default::default() }).await;
    let good = mock(&["m"]).await;
    good.control().keep_ledger();
    let yaml = format!(
        "listen: 127.0.0.1:0\nrouting: {{strategy: priority}}\n\
         telemetry: {{endpoint: '{}', batch_delay: 50ms, service_name: switchyard-test}}\n\
         backends:\n  - {{name: failing, url: '{}', priority: 1}}\n  - {{name: good, url: '{}', priority: 0}}\n",
        collector.url(),
        failing.url(),
        good.url()
    );
    let gw = gateway_yaml(&yaml).await;
    let client = TestClient::new();
    let (trace_id, caller_span) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let traceparent = format!("00-{trace_id}-{caller_span}-01");
    let r = client
        .post_json(
            &format!("{}/v1/chat/completions", gw.url()),
            chat_body("m", false).as_bytes(),
            &[("traceparent", traceparent.as_str())],
        )
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(backend_of(&r), "good");

    let spans = collector.trace(trace_id, 3).await;
    assert_eq!(spans.len(), 3, "one server span and two attempts: {spans:#?}");
    let server = spans.iter().find(|s| kind(s) == SERVER).expect("a server span");
    assert_eq!(server["parentSpanId"], caller_span, "the caller's span is the parent");
    assert_eq!(server["name"], "POST /v1/chat/completions");
    assert_eq!(attr(server, "http.response.status_code").as_deref(), Some("200"));
    assert_eq!(attr(server, "switchyard.request_id").as_deref(), r.header("x-request-id"));
    let service = server["resource"]["attributes"].as_array().unwrap().iter().find(|kv| kv["key"] == "service.name");
    assert_eq!(service.unwrap()["value"]["stringValue"], "switchyard-test");

    let mut attempts: Vec<&Value> = spans.iter().filter(|s| kind(s) == CLIENT).collect();
    attempts.sort_by_key(|s| s["startTimeUnixNano"].as_str().unwrap_or("").parse::<u128>().unwrap_or(0));
    for a in &attempts {
        assert_eq!(a["parentSpanId"], server["spanId"]);
        assert_eq!(a["name"], "chat m");
        assert_eq!(attr(a, "gen_ai.operation.name").as_deref(), Some("chat"));
        assert_eq!(attr(a, "gen_ai.provider.name").as_deref(), Some("openai"));
        assert_eq!(attr(a, "gen_ai.request.model").as_deref(), Some("m"));
        assert_eq!(attr(a, "server.address").as_deref(), Some("127.0.0.1"));
    }
    let (first, second) = (attempts[0], attempts[1]);
    assert_eq!(attr(first, "switchyard.backend").as_deref(), Some("failing"));
    assert_eq!(attr(first, "error.type").as_deref(), Some("500"), "{first:#?}");
    assert_eq!(first["status"]["code"], 2, "the failed attempt's status is Error");
    assert_eq!(attr(second, "switchyard.backend").as_deref(), Some("good"));
    assert_eq!(attr(second, "error.type"), None);
    assert_eq!(attr(second, "gen_ai.response.model").as_deref(), Some("m"));
    let input: u64 = attr(second, "gen_ai.usage.input_tokens").unwrap().parse().unwrap();
    let output: u64 = attr(second, "gen_ai.usage.output_tokens").unwrap().parse().unwrap();
    assert!(input > 0 && output > 0, "usage: {input} in, {output} out");

    // The backend that answered was told which attempt span it is part of.
    let sent = good.control().traceparents();
    assert_eq!(sent, vec![format!("00-{trace_id}-{}-01", second["spanId"].as_str().unwrap())]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_reports_time_to_first_chunk_and_a_new_trace_starts_without_a_traceparent() {
    let dir = scratch_dir();
    let collector = Collector::start(&dir, 0);
    let backend = mock(&["m"]).await;
    backend.control().keep_ledger();
    let extra = format!("telemetry: {{endpoint: '{}', batch_delay: 50ms}}", collector.url());
    let gw = gateway(&[&backend], &extra).await;
    let client = TestClient::new();
    let r = client
        .post_json(&format!("{}/v1/chat/completions", gw.url()), chat_body("m", true).as_bytes(), &[])
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    assert!(r.text().contains("[DONE]"));
    // No traceparent from the caller: the gateway started a trace and handed it upstream.
    let sent = backend.control().traceparents();
    assert_eq!(sent.len(), 1);
    let trace_id = sent[0].split('-').nth(1).unwrap().to_owned();
    let spans = collector.trace(&trace_id, 2).await;
    let server = spans.iter().find(|s| kind(s) == SERVER).unwrap();
    assert!(server.get("parentSpanId").is_none_or(|p| p == ""), "a root span: {server:#?}");
    let attempt = spans.iter().find(|s| kind(s) == CLIENT).unwrap();
    assert_eq!(attr(attempt, "gen_ai.request.stream").as_deref(), Some("true"));
    let ttfc: f64 = attr(attempt, "gen_ai.response.time_to_first_chunk").unwrap().parse().unwrap();
    assert!(ttfc > 0.0 && ttfc < 10.0, "{ttfc}");
    assert!(attr(attempt, "gen_ai.usage.output_tokens").is_some());
    // The attempt span covers the whole stream: it ends no earlier than the server span's start plus its first chunk.
    let nanos = |s: &Value, k: &str| s[k].as_str().unwrap().parse::<u128>().unwrap();
    assert!(nanos(attempt, "endTimeUnixNano") >= nanos(attempt, "startTimeUnixNano"));
    assert!(nanos(server, "endTimeUnixNano") >= nanos(attempt, "endTimeUnixNano"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsampled_request_records_nothing_and_passes_the_callers_context_on_as_it_came() {
    let dir = scratch_dir();
    let collector = Collector::start(&dir, 0);
    let backend = mock(&["m"]).await;
    backend.control().keep_ledger();
    let extra = format!("telemetry: {{endpoint: '{}', batch_delay: 50ms, sample_ratio: 0}}", collector.url());
    let gw = gateway(&[&backend], &extra).await;
    let client = TestClient::new();
    let send = |headers: &'static [(&'static str, &'static str)]| {
        let (client, url) = (&client, format!("{}/v1/chat/completions", gw.url()));
        async move {
            let r = client.post_json(&url, chat_body("m", false).as_bytes(), headers).await.unwrap();
            assert_eq!(r.status, 200, "{}", r.text());
        }
    };
    // The caller did not sample: its context goes upstream untouched.
    const UNSAMPLED: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";
    send(&[("traceparent", UNSAMPLED), ("tracestate", "vendor=1")]).await;
    // No caller context and a ratio of 0: a fresh context that says "not sampled".
    send(&[]).await;
    // The caller sampled: followed, recorded, and the backend gets the attempt's span as parent.
    let sampled_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    send(&[("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")]).await;

    let sent = backend.control().traceparents();
    assert_eq!(sent.len(), 3, "{sent:?}");
    assert_eq!(sent[0], UNSAMPLED);
    let fresh: Vec<&str> = sent[1].split('-').collect();
    assert_eq!((fresh.len(), fresh[0], fresh[3]), (4, "00", "00"), "{}", sent[1]);
    assert_ne!(fresh[1], "0af7651916cd43dd8448eb211c80319c");
    assert!(sent[2].starts_with(&format!("00-{sampled_trace}-")) && sent[2].ends_with("-01"), "{}", sent[2]);
    // Only the sampled request's spans reach the collector.
    collector.trace(sampled_trace, 2).await;
    let traces: std::collections::BTreeSet<String> =
        collector.spans().iter().map(|s| s["traceId"].as_str().unwrap_or("").to_owned()).collect();
    assert_eq!(traces.into_iter().collect::<Vec<_>>(), vec![sampled_trace.to_owned()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_collector_down_no_request_fails_and_export_resumes_when_it_is_back() {
    let dir = scratch_dir();
    let collector = Collector::start(&dir, 0);
    let port = collector.port;
    let backend = mock(&["m"]).await;
    let extra = format!("telemetry: {{endpoint: '{}', batch_delay: 50ms, timeout: 300ms}}", collector.url());
    let gw = gateway(&[&backend], &extra).await;
    drop(collector);
    let client = TestClient::new();
    for _ in 0..200 {
        let r = chat(&client, &gw, "m").await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    // The spans of those requests fail to export and are counted, never retried forever.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let metrics = client.get(&format!("{}/metrics", gw.url())).await.unwrap().text();
        let failed = metric(&metrics, "switchyard_telemetry_spans_failed_total ").unwrap_or(0);
        if failed > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "no export failure counted:\n{metrics}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The collector is back on the same port: the next request's trace arrives.
    let collector = Collector::start(&dir, port);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let r = client
            .post_json(
                &format!("{}/v1/chat/completions", gw.url()),
                CHAT.as_bytes(),
                &[("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")],
            )
            .await
            .unwrap();
        assert_eq!(r.status, 200);
        if collector.spans().iter().any(|s| s["traceId"] == "0af7651916cd43dd8448eb211c80319c") {
            break;
        }
        assert!(Instant::now() < deadline, "no trace arrived after the collector came back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Log records' request ids, from every collector that ran.
fn logged_ids(collectors: &[&Collector]) -> Vec<String> {
    collectors.iter().flat_map(|c| c.logs()).filter_map(|l| attr(&l, "switchyard.request_id")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_records_reach_an_otlp_logs_sink_once_each_across_a_collector_outage() {
    let dir = scratch_dir();
    let first = Collector::start(&dir, 0);
    let port = first.port;
    let backend = mock(&["m"]).await;
    let yaml = format!(
        "listen: 127.0.0.1:0\nshutdown_grace: 1s\n\
         exports:\n  - {{name: otel, type: otlp_logs, url: '{}', batch_size: 10, batch_delay: 20ms, timeout: 500ms}}\n\
         backends:\n  - {{name: b0, url: '{}'}}\n",
        first.url(),
        backend.url()
    );
    let gw = gateway_yaml(&yaml).await;
    let client = TestClient::new();
    let mut sent = Vec::new();
    for _ in 0..20 {
        let r = chat(&client, &gw, "m").await;
        assert_eq!(r.status, 200);
        sent.push(r.header("x-request-id").unwrap().to_owned());
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while logged_ids(&[&first]).len() < 20 {
        assert!(Instant::now() < deadline, "{} of 20 log records arrived", logged_ids(&[&first]).len());
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let log = first.logs().into_iter().find(|l| attr(l, "switchyard.request_id").as_deref() == Some(&sent[0])).unwrap();
    assert_eq!(log["eventName"], "switchyard.request");
    assert_eq!(log["severityText"], "INFO");
    assert_eq!(attr(&log, "gen_ai.request.model").as_deref(), Some("m"));
    assert_eq!(attr(&log, "http.response.status_code").as_deref(), Some("200"));
    assert!(attr(&log, "gen_ai.usage.output_tokens").unwrap().parse::<u64>().unwrap() > 0);

    // The collector goes away; requests carry on; a new one on the same port gets the rest.
    drop(first);
    for _ in 0..15 {
        let r = chat(&client, &gw, "m").await;
        assert_eq!(r.status, 200);
        sent.push(r.header("x-request-id").unwrap().to_owned());
    }
    let second = Collector::start(&dir, port);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got: Vec<String> = logged_ids(&[&second]);
        if sent[20..].iter().all(|id| got.contains(id)) {
            let unique: std::collections::HashSet<&String> = got.iter().collect();
            assert_eq!(unique.len(), got.len(), "a record was logged twice");
            assert!(got.iter().all(|id| sent[20..].contains(id)), "the first 20 were sent again");
            break;
        }
        assert!(Instant::now() < deadline, "{} of 15 log records arrived after the outage", got.len());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// An A2A call's trace (issue 59): its server span continues the caller's trace and reports the
/// agent, the method, the task and its state; the agent gets the gateway's span as its parent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_a2a_calls_span_reports_the_agent_method_and_task() {
    let dir = scratch_dir();
    let collector = Collector::start(&dir, 0);
    let agent = crate::a2a::mock_agent(None).await;
    let yaml = format!(
        "listen: 127.0.0.1:0\ntelemetry: {{endpoint: '{}', batch_delay: 50ms}}\nagents:\n  a: {{url: '{}'}}\n",
        collector.url(),
        agent.url
    );
    let gw = gateway_yaml(&yaml).await;
    let (trace_id, caller_span) = ("5bf92f3577b34da6a3ce929d0e0e4737", "10f067aa0ba902b7");
    let traceparent = format!("00-{trace_id}-{caller_span}-01");
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                      "params": {"message": {"messageId": "u", "role": "ROLE_USER", "parts": [{"text": "task"}]}}});
    let r = TestClient::new()
        .post_json(
            &format!("{}/a2a/a/", gw.url()),
            call.to_string().as_bytes(),
            &[("traceparent", traceparent.as_str())],
        )
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let spans = collector.trace(trace_id, 1).await;
    let server = spans.iter().find(|s| kind(s) == SERVER).expect("a server span");
    assert_eq!(server["parentSpanId"], caller_span, "the caller's span is the parent");
    assert_eq!(attr(server, "a2a.agent.name").as_deref(), Some("a"));
    assert_eq!(attr(server, "a2a.method").as_deref(), Some("SendMessage"));
    assert_eq!(attr(server, "a2a.task.id").as_deref(), Some("t-1"));
    assert_eq!(attr(server, "a2a.task.state").as_deref(), Some("completed"));
    assert_eq!(attr(server, "http.response.status_code").as_deref(), Some("200"));
    let received = agent.received.lock().unwrap().clone();
    let (head, _) = received.iter().find(|(h, _)| h.starts_with("post ")).unwrap();
    let sent = head.lines().find_map(|l| l.strip_prefix("traceparent: ")).unwrap();
    assert_eq!(
        sent,
        format!("00-{trace_id}-{}-01", server["spanId"].as_str().unwrap()),
        "the agent's parent is the gateway's span"
    );
}
