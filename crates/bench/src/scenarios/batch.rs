//! A batch beside interactive traffic (issue 33's bar: the interactive p99 with a batch running
//! is ≤ 1.1× without it). One gateway before two mocks that answer in 20 ms and take 16 requests
//! at once each (`max_concurrency: 16`); the same closed-loop interactive load at 8 connections
//! runs first alone, then while a 20,000-line batch runs through the gateway, which sends lines
//! only in capacity the interactive requests leave free. Reports both latency distributions,
//! their p99 ratio, and the batch's lines per second meanwhile.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use switchyard_testkit::TestClient;

use super::{chat_body, measure, own_setup, start_gateway, Mode};
use crate::procs::Proc;
use crate::report::Report;
use crate::{BenchArgs, Pinning};

const LINES: usize = 20_000;
const BOUNDARY: &str = "bench-batch-form";

fn mock(model: &str, pin: &Pinning) -> Result<Proc, String> {
    let args: Vec<String> =
        ["mock", "--listen", "127.0.0.1:0", "--models", model, "--latency-ms", "20"].map(String::from).to_vec();
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
    let (a, b) = (mock(&args.model, pin)?, mock(&args.model, pin)?);
    let config = format!(
        "listen: 127.0.0.1:0\nbatches: {{concurrency: 4}}\nbackends:\n  - {{name: a, url: '{}', max_concurrency: 16}}\n  \
         - {{name: b, url: '{}', max_concurrency: 16}}\n",
        a.url, b.url
    );
    let gateway = start_gateway(&config, pin)?;
    let (d, w) = (args.phase(10.0), args.warmup());
    let body = chat_body(&args.model, false, "Say hello in one short sentence.");
    let (_, through) = own_setup(&gateway, &a, &args.model).pair(&body, false)?;
    let alone = measure("interactive, alone", &through, Mode::Closed(8), w, d).await;
    let alone_row = report.row("batch", "closed c=8, interactive alone", "gateway", &alone);
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
    let beside = measure("interactive, batch running", &through, Mode::Closed(8), w, d).await;
    let (after, state) = finished(&client, &gateway.url, &id).await?;
    let took = measured.elapsed().as_secs_f64();
    if state["status"] != "in_progress" {
        return Err(format!("the batch ended before the measurement did ({}): make it longer", state["status"]));
    }
    let beside_row = report.row("batch", "closed c=8, interactive with a batch running", "gateway", &beside);
    report.finding("batch", "interactive p50: alone, µs", alone_p50 as f64, "µs");
    report.finding("batch", "interactive p50: with a batch running, µs", beside_row.p50 as f64, "µs");
    report.finding("batch", "interactive p99: with a batch ÷ alone", beside_row.p99 as f64 / alone_p99 as f64, "×");
    report.finding(
        "batch",
        "batch lines per second beside the interactive load",
        (after - before) as f64 / took,
        "lines/s",
    );
    if beside.total() != beside.ok {
        return Err(format!("{} interactive requests failed beside the batch", beside.total() - beside.ok));
    }
    Ok(())
}
