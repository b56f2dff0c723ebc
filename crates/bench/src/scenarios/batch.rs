//! A batch beside interactive traffic (issues 33 and 53: the interactive p99 with a batch running
//! is ≤ 1.1× without it). Two cases, each its own gateway: two mocks that answer in 20 ms and
//! take 16 requests at once each (`max_concurrency: 16`) under 8 interactive connections; and one
//! mock that answers in 150 ms and takes 4 at once, asked one interactive request at a time while
//! the batch may have 8 lines in flight (so only the gateway's "never the last slot" keeps the
//! interactive request from waiting). In each, the same closed-loop interactive load runs first
//! alone, then while a 20,000-line batch runs through the gateway. Reports both latency
//! distributions, their p99 ratio, and the batch's lines per second meanwhile.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use switchyard_testkit::TestClient;

use super::{chat_body, measure, own_setup, start_gateway, Mode};
use crate::procs::Proc;
use crate::report::Report;
use crate::{BenchArgs, Pinning};

const LINES: usize = 20_000;
const BOUNDARY: &str = "bench-batch-form";

/// One case: its backends (how many, how slow, how many requests each takes at once), the lines
/// a batch may have in flight, and the interactive connections.
struct Case {
    name: &'static str,
    mocks: usize,
    latency_ms: u32,
    slots: usize,
    lines_in_flight: usize,
    connections: usize,
}

const CASES: [Case; 2] = [
    Case { name: "2x16 slots, 20 ms, c=8", mocks: 2, latency_ms: 20, slots: 16, lines_in_flight: 4, connections: 8 },
    Case { name: "4 slots, 150 ms, c=1", mocks: 1, latency_ms: 150, slots: 4, lines_in_flight: 8, connections: 1 },
];

fn mock(model: &str, latency_ms: u32, pin: &Pinning) -> Result<Proc, String> {
    let latency = latency_ms.to_string();
    let args: Vec<String> =
        ["mock", "--listen", "127.0.0.1:0", "--models", model, "--latency-ms", &latency].map(String::from).to_vec();
    Proc::start("mock", &args, pin.mock.as_deref())
}

/// Upload the batch's lines and start it: its id.
async fn start_batch(client: &TestClient, url: &str, model: &str) -> Result<String, String> {
    let mut file = String::with_capacity(LINES * 160);
    for i in 0..LINES {
        let body = json!({"model": model, "messages": [{"role": "user", "content": format!("label item {i}")}]});
        let line = json!({"custom_id": format!("l{i}"), "method": "POST", "url": "/v1/chat/completions", "body": body});
        file.push_str(&line.to_string());
        file.push('\n');
    }
    let form = format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--{BOUNDARY}\r\n\
         Content-Disposition: form-data; name=\"file\"; filename=\"lines.jsonl\"\r\n\r\n{file}\r\n--{BOUNDARY}--\r\n"
    );
    let content_type = format!("multipart/form-data; boundary={BOUNDARY}");
    let uploaded = client
        .request(http::Method::POST, &format!("{url}/v1/files"), form.into(), &[("content-type", &content_type)])
        .await
        .map_err(|e| e.to_string())?;
    let file_id =
        uploaded.json()["id"].as_str().ok_or_else(|| format!("upload failed: {}", uploaded.text()))?.to_owned();
    let create = json!({"input_file_id": file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h"});
    let created = client
        .post_json(&format!("{url}/v1/batches"), create.to_string().as_bytes(), &[])
        .await
        .map_err(|e| e.to_string())?;
    created.json()["id"].as_str().map(str::to_owned).ok_or_else(|| format!("batch not created: {}", created.text()))
}

/// The batch's finished lines so far.
async fn finished(client: &TestClient, url: &str, id: &str) -> Result<(u64, Value), String> {
    let got = client.get(&format!("{url}/v1/batches/{id}")).await.map_err(|e| e.to_string())?.json();
    let counts = &got["request_counts"];
    Ok((counts["completed"].as_u64().unwrap_or(0) + counts["failed"].as_u64().unwrap_or(0), got))
}

pub async fn run(args: &BenchArgs, pin: &Pinning, report: &mut Report) -> Result<(), String> {
    for case in &CASES {
        run_case(case, args, pin, report).await?;
    }
    Ok(())
}

async fn run_case(case: &Case, args: &BenchArgs, pin: &Pinning, report: &mut Report) -> Result<(), String> {
    let mocks = (0..case.mocks).map(|_| mock(&args.model, case.latency_ms, pin)).collect::<Result<Vec<_>, _>>()?;
    let backends: String = (mocks.iter().enumerate())
        .map(|(i, m)| format!("  - {{name: b{i}, url: '{}', max_concurrency: {}}}\n", m.url, case.slots))
        .collect();
    let config =
        format!("listen: 127.0.0.1:0\nbatches: {{concurrency: {}}}\nbackends:\n{backends}", case.lines_in_flight);
    let gateway = start_gateway(&config, pin)?;
    let (d, w) = (args.phase(10.0), args.warmup());
    let body = chat_body(&args.model, false, "Say hello in one short sentence.");
    let (_, through) = own_setup(&gateway, &mocks[0], &args.model).pair(&body, false)?;
    let load = Mode::Closed(case.connections);
    let alone = measure("interactive, alone", &through, load, w, d).await;
    let alone_row = report.row("batch", format!("{}: interactive alone", case.name), "gateway", &alone);
    let (alone_p50, alone_p99) = (alone_row.p50, alone_row.p99);

    let client = TestClient::new();
    let id = start_batch(&client, &gateway.url, &args.model).await?;
    // The batch has begun sending lines before the interactive load is measured beside it.
    let began = Instant::now();
    while finished(&client, &gateway.url, &id).await?.0 == 0 {
        if began.elapsed() > Duration::from_secs(30) {
            return Err("the batch never started".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (before, _) = finished(&client, &gateway.url, &id).await?;
    let measured = Instant::now();
    let beside = measure("interactive, batch running", &through, load, w, d).await;
    let (after, state) = finished(&client, &gateway.url, &id).await?;
    let took = measured.elapsed().as_secs_f64();
    if state["status"] != "in_progress" {
        return Err(format!("the batch ended before the measurement did ({}): make it longer", state["status"]));
    }
    let label = |what: &str| format!("{}: {what}", case.name);
    let beside_row = report.row("batch", label("interactive with a batch running"), "gateway", &beside);
    report.finding("batch", label("interactive p50 alone, µs"), alone_p50 as f64, "µs");
    report.finding("batch", label("interactive p50 with a batch running, µs"), beside_row.p50 as f64, "µs");
    report.finding(
        "batch",
        label("interactive p99 with a batch ÷ alone"),
        beside_row.p99 as f64 / alone_p99 as f64,
        "×",
    );
    report.finding("batch", label("batch lines per second beside it"), (after - before) as f64 / took, "lines/s");
    if beside.total() != beside.ok {
        return Err(format!("{} interactive requests failed beside the batch", beside.total() - beside.ok));
    }
    Ok(())
}
