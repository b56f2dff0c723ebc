//! Abuse: real traffic while 2,000 slowloris connections hold half-sent request heads (its p99
//! against the same traffic without them, and the gateway's memory per held connection), then
//! overload: a capped, slow backend far past its capacity, where requests beyond the queue must
//! be refused (503) at once while memory stays flat.

use std::time::{Duration, Instant};

use switchyard_testkit::TestClient;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::{chat_body, measure, own_setup as setup, start_gateway, start_mock, Mode};
use crate::procs::{self, Proc};
use crate::report::Report;
use crate::{BenchArgs, Pinning};

/// Half-open connections the slowloris phase holds.
const SLOWLORIS: usize = 2000;
/// Sequential requests timed while the gateway is overloaded.
const PROBES: usize = 300;

pub async fn run(args: &BenchArgs, pin: &Pinning, report: &mut Report) -> Result<(), String> {
    if args.target.is_some() {
        eprintln!("  (abuse starts its own gateway: skipped for --target)");
        return Ok(());
    }
    slowloris(args, pin, report).await?;
    overload(args, pin, report).await
}

async fn slowloris(args: &BenchArgs, pin: &Pinning, report: &mut Report) -> Result<(), String> {
    let mock = start_mock(&args.model, 5, None, pin)?;
    let config = format!("listen: 127.0.0.1:0\nbackends:\n  - {{name: a, url: '{}'}}\n", mock.url);
    let gateway = start_gateway(&config, pin)?;
    let setup = setup(&gateway, &mock, &args.model);
    let (_, spec) = setup.pair(&chat_body(&args.model, false, "hello"), false)?;
    let phase = args.phase(5.0);
    let mode = Mode::Open(args.rate);
    let base = measure("real traffic alone", &spec, mode, args.warmup(), phase).await;
    let rss_before = procs::rss_of(gateway.pid()).unwrap_or(0);
    let addr = gateway.url.trim_start_matches("http://").to_owned();
    let mut held = Vec::with_capacity(SLOWLORIS);
    for _ in 0..SLOWLORIS {
        let mut s = TcpStream::connect(&addr).await.map_err(|e| format!("slowloris connect: {e}"))?;
        s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n")
            .await
            .map_err(|e| format!("slowloris write: {e}"))?;
        held.push(s);
    }
    // Every held connection accepted and parked in its head read before measuring.
    let client = TestClient::new();
    let metrics = format!("{}/metrics", gateway.url);
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let text = client.get(&metrics).await.map(|r| r.text()).unwrap_or_default();
        let open = text
            .lines()
            .find_map(|l| l.strip_prefix("switchyard_connections_open "))
            .and_then(|v| v.trim().parse::<usize>().ok());
        if open.is_some_and(|n| n >= SLOWLORIS) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let rss_held = procs::rss_of(gateway.pid()).unwrap_or(0);
    let loaded =
        measure(&format!("real traffic beside {SLOWLORIS} slowloris"), &spec, mode, Duration::ZERO, phase).await;
    let b = report.row("abuse", "alone", "gateway", &base);
    let l = report.row("abuse", format!("beside {SLOWLORIS} slowloris"), "gateway", &loaded);
    report.finding("abuse", "p99 beside slowloris / p99 alone", l.p99 as f64 / b.p99.max(1) as f64, "x");
    report.finding("abuse", "failed requests beside slowloris", (l.requests - l.ok) as f64, "");
    let per_conn = rss_held.saturating_sub(rss_before) as f64 / SLOWLORIS as f64 / 1024.0;
    report.finding("abuse", "gateway memory per held connection", per_conn, "KiB");
    report.finding("abuse", "gateway RSS with the connections held", super::mb(rss_held), "MB");
    drop(held);
    Ok(())
}

async fn overload(args: &BenchArgs, pin: &Pinning, report: &mut Report) -> Result<(), String> {
    let listen = format!("127.0.0.1:{}", procs::free_port()?);
    let mock_args: Vec<String> =
        ["mock", "--listen", &listen, "--models", &args.model, "--latency-ms", "200"].map(String::from).to_vec();
    let mock = Proc::start("mock", &mock_args, pin.mock.as_deref())?;
    let config = format!(
        "listen: 127.0.0.1:0\nrouting: {{max_queue: 64, queue_timeout: 5s}}\nbackends:\n  - {{name: a, url: '{}', max_concurrency: 4}}\n",
        mock.url
    );
    let gateway = start_gateway(&config, pin)?;
    let setup = setup(&gateway, &mock, &args.model);
    let (_, spec) = setup.pair(&chat_body(&args.model, false, "hello"), false)?;
    let rss_before = procs::rss_of(gateway.pid()).unwrap_or(0);
    // 256 clients against 4 slots and 64 queue places: the rest must be refused at once.
    let phase = args.phase(5.0);
    let flood = tokio::spawn({
        let spec = spec.clone();
        async move { measure("256 clients against 4 slots", &spec, Mode::Closed(256), Duration::ZERO, phase).await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let client = TestClient::new();
    let url = format!("{}/v1/chat/completions", gateway.url);
    let body = chat_body(&args.model, false, "hello");
    let mut refusals = crate::load::histogram();
    let mut other = 0u64;
    for _ in 0..PROBES {
        let sent = Instant::now();
        match client.post_json(&url, body.as_bytes(), &[]).await {
            Ok(r) if r.status == 503 && r.header("retry-after").is_some() => {
                let _ = refusals.record(sent.elapsed().as_micros() as u64);
            }
            _ => other += 1,
        }
    }
    let rss_peak = procs::rss_of(gateway.pid()).unwrap_or(0);
    let flood = flood.await.map_err(|e| e.to_string())?;
    // Not a table row: the flood's 503s are the point, not failures.
    let refused: u64 = flood.errors.iter().filter(|(k, _)| k.contains("503")).map(|(_, n)| n).sum();
    report.finding("abuse", "overload: flood answered 200", flood.ok as f64, "");
    report.finding("abuse", "overload: flood refused 503", refused as f64, "");
    let other_errors: u64 = flood.errors.values().sum::<u64>() - refused;
    report.finding("abuse", "overload: flood failed otherwise", other_errors as f64, "");
    report.finding("abuse", "overload: probes refused with 503 + Retry-After", refusals.len() as f64, "");
    report.finding("abuse", "overload: probes not refused (admitted or failed otherwise)", other as f64, "");
    report.finding("abuse", "overload: refusal p50", refusals.value_at_quantile(0.5) as f64 / 1e3, "ms");
    report.finding("abuse", "overload: refusal p99", refusals.value_at_quantile(0.99) as f64 / 1e3, "ms");
    report.finding("abuse", "overload: gateway RSS growth", super::mb(rss_peak.saturating_sub(rss_before)), "MB");
    Ok(())
}
