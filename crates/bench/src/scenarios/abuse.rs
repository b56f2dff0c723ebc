//! Abuse: real traffic while 2,000 slowloris connections hold half-sent request heads (its p99
//! against the same traffic without them, and the gateway's memory per held connection), then
//! overload: a capped, slow backend far past its capacity, where requests beyond the queue must
//! be refused (503) at once while memory stays flat, then a burst of 10,000 connections at once,
//! each with one request, after which resident memory must come back within a minute of idle.

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
/// Connections the burst opens at once.
const BURST: usize = 10_000;
/// Idle after the burst before memory is read again.
const SETTLE: Duration = Duration::from_secs(60);

pub async fn run(args: &BenchArgs, pin: &Pinning, report: &mut Report) -> Result<(), String> {
    if args.target.is_some() {
        eprintln!("  (abuse starts its own gateway: skipped for --target)");
        return Ok(());
    }
    slowloris(args, pin, report).await?;
    overload(args, pin, report).await?;
    connection_burst(args, pin, report).await
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

/// One request on a connection of its own, `connection: close`: whether it was answered 200.
async fn one_connection(addr: String, request: std::sync::Arc<Vec<u8>>) -> bool {
    use tokio::io::AsyncReadExt;
    let Ok(mut s) = TcpStream::connect(&addr).await else { return false };
    if s.write_all(&request).await.is_err() {
        return false;
    }
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).await.is_ok() && answer.starts_with(b"HTTP/1.1 200")
}

/// `BURST` connections at once, one request each; the gateway's RSS before (warmed, idle), at its
/// peak, and after `SETTLE` of idle (issue 29: back within 5 MiB).
async fn connection_burst(args: &BenchArgs, pin: &Pinning, report: &mut Report) -> Result<(), String> {
    let mock = start_mock(&args.model, 5, None, pin)?;
    let config = format!(
        "listen: 127.0.0.1:0\nlimits: {{max_connections: {}}}\nbackends:\n  - {{name: a, url: '{}'}}\n",
        BURST + 100,
        mock.url
    );
    let gateway = start_gateway(&config, pin)?;
    let setup = setup(&gateway, &mock, &args.model);
    let (_, spec) = setup.pair(&chat_body(&args.model, false, "hello"), false)?;
    measure("warm-up before the burst", &spec, Mode::Closed(16), Duration::ZERO, args.phase(3.0)).await;
    // Idle past two of the gateway's trims (every 10 s), as after the burst.
    tokio::time::sleep(Duration::from_secs(21)).await;
    let rss_before = procs::rss_of(gateway.pid()).unwrap_or(0);
    let body = chat_body(&args.model, false, "hello");
    let request = std::sync::Arc::new(
        format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    );
    let addr = gateway.url.trim_start_matches("http://").to_owned();
    let pid = gateway.pid();
    let peak = tokio::spawn(async move {
        let mut peak = 0;
        for _ in 0..600 {
            peak = peak.max(procs::rss_of(pid).unwrap_or(0));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        peak
    });
    eprintln!("  ▸ abuse: {BURST} connections at once, one request each");
    let started = Instant::now();
    let mut burst = tokio::task::JoinSet::new();
    for _ in 0..BURST {
        burst.spawn(one_connection(addr.clone(), request.clone()));
    }
    let mut answered = 0usize;
    while let Some(ok) = burst.join_next().await {
        answered += usize::from(ok.unwrap_or(false));
    }
    let took = started.elapsed();
    eprintln!("  ▸ abuse: idle {} s after the burst", SETTLE.as_secs());
    tokio::time::sleep(SETTLE).await;
    let rss_after = procs::rss_of(gateway.pid()).unwrap_or(0);
    peak.abort();
    let rss_peak = peak.await.unwrap_or(0).max(rss_after);
    report.finding("abuse", format!("burst: of {BURST} connections, answered 200"), answered as f64, "");
    report.finding("abuse", "burst: took", took.as_secs_f64(), "s");
    report.finding("abuse", "burst: gateway RSS before (idle, warmed)", super::mb(rss_before), "MB");
    report.finding("abuse", "burst: gateway RSS peak (sampled every 50 ms)", super::mb(rss_peak), "MB");
    report.finding("abuse", format!("burst: gateway RSS {} s after", SETTLE.as_secs()), super::mb(rss_after), "MB");
    let back = rss_after as f64 - rss_before as f64;
    report.finding("abuse", "burst: RSS after − before", back / (1024.0 * 1024.0), "MB");
    Ok(())
}
