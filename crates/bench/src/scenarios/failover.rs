//! Failover: two mock backends behind the gateway under steady closed-loop load — plain requests
//! and a streaming share whose streams are mid-answer when a backend dies — one is killed with
//! SIGKILL and restarted on the same port, `cycles` times. Reports requests sent, what the
//! clients saw fail (streams included: a stream counts as failed unless it ends whole), how long until the gateway stopped routing to the dead backend (it marks it
//! down), and how long until the restarted one took traffic again — both read from the
//! gateway's `/metrics`, polled every 2 ms.
//!
//! `failover-fallback`: the killed backend is the requested model's only one, and the other serves
//! a fallback model (`fallbacks: {MODEL: [fallback-model]}`): requests fall back while it is
//! down, and streams it was serving carry on at the fallback model.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use switchyard_testkit::TestClient;
use tokio::task::JoinHandle;

use super::{chat_body, measure, rate_series, start_gateway, Mode, Setup};
use crate::chart::{Chart, Series};
use crate::load::{RequestSpec, Stats};
use crate::procs::{self, Proc};
use crate::report::Report;
use crate::{BenchArgs, Pinning};

const CONNECTIONS: usize = 16;
/// Connections that only stream (each stream: `STREAM_CHUNKS` chunks, `CHUNK_DELAY_MS` apart).
const STREAM_CONNECTIONS: usize = 8;
const STREAM_CHUNKS: usize = 20;
const CHUNK_DELAY_MS: u64 = 5;

/// A mock whose streams take a while, so a kill lands mid-answer.
fn paced_mock(model: &str, port: u16, pin: &Pinning) -> Result<Proc, String> {
    let listen = format!("127.0.0.1:{port}");
    let args: Vec<String> = [
        "mock",
        "--listen",
        &listen,
        "--models",
        model,
        "--stream-chunks",
        &STREAM_CHUNKS.to_string(),
        "--chunk-delay-ms",
        &CHUNK_DELAY_MS.to_string(),
    ]
    .map(String::from)
    .to_vec();
    Proc::start("mock", &args, pin.mock.as_deref())
}
const POLL: Duration = Duration::from_millis(2);

/// The model the other backend serves in `failover-fallback`.
const FALLBACK_MODEL: &str = "fallback-model";

pub async fn run(args: &BenchArgs, pin: &Pinning, report: &mut Report, fallback: bool) -> Result<(), String> {
    if args.target.is_some() {
        eprintln!("  (failover needs backends the bench can kill: skipped for --target)");
        return Ok(());
    }
    let (port_a, port_b) = (procs::free_port()?, procs::free_port()?);
    let a = paced_mock(if fallback { FALLBACK_MODEL } else { &args.model }, port_a, pin)?;
    let mut b = paced_mock(&args.model, port_b, pin)?;
    let fallbacks =
        if fallback { format!("fallbacks: {{'{}': [{FALLBACK_MODEL}]}}\n", args.model) } else { String::new() };
    let config = format!(
        "listen: 127.0.0.1:0\n{fallbacks}backends:\n  - {{name: a, url: '{}'}}\n  - {{name: b, url: '{}'}}\n",
        a.url, b.url
    );
    let gateway = start_gateway(&config, pin)?;
    let setup = Setup {
        direct: a.url.clone(),
        target: gateway.url.clone(),
        model: args.model.clone(),
        headers: Vec::new(),
        backend_header: http::HeaderName::from_static("x-switchyard-backend"),
        gateway_pid: Some(gateway.pid()),
        api: args.api.clone(),
        _procs: Vec::new(),
    };
    let (_, spec) = setup.pair(&chat_body(&args.model, false, "hello"), false)?;
    let (_, stream_spec) = setup.pair(&chat_body(&args.model, true, "hello"), true)?;
    let up_for = args.phase(2.0).max(Duration::from_millis(300));
    let down_for = Duration::from_secs_f64(args.down_for.max(0.1));
    let total = (up_for + down_for) * args.cycles as u32 + up_for;

    let start = Instant::now();
    let rss = super::RssSampler::start(setup.gateway_pid);
    let (load, streams) = spawn_load(spec, stream_spec, total);
    let client = TestClient::new();
    let metrics_url = format!("{}/metrics", gateway.url);
    let schedule = Schedule { start, up_for, down_for, cycles: args.cycles };
    let (cycles, markers) = kill_and_restart(&schedule, &mut b, &client, &metrics_url, report).await?;
    let stats = load.await.map_err(|e| e.to_string())?;
    let stream_stats = streams.await.map_err(|e| e.to_string())?;
    let resumed = counter(&fetch(&client, &metrics_url).await, "switchyard_streams_resumed_total");
    if let Some(peak) = rss.finish(setup.gateway_pid).iter().map(|s| s.1).max() {
        report.finding("memory", "gateway RSS peak during failover", super::mb(peak), "MB");
    }
    report_load(report, args.cycles, &stats, &stream_stats, resumed);
    if fallback {
        let fell_back = fetch(&client, &metrics_url)
            .await
            .lines()
            .filter(|l| l.starts_with("switchyard_fallbacks_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum::<u64>();
        report.finding("failover", "requests and streams served by the fallback model", fell_back as f64, "");
    }
    report.extra.insert("failover_cycles".into(), json!(cycles));
    report.charts.push(("failover-timeline".into(), timeline(args.cycles, fallback, &stats, markers)));
    drop((a, gateway));
    Ok(())
}

/// When b dies and comes back: up for `up_for`, then down for `down_for`, `cycles` times, from `start`.
struct Schedule {
    start: Instant,
    up_for: Duration,
    down_for: Duration,
    cycles: usize,
}

/// The closed-loop load for the whole run: plain requests, and streams beside them.
fn spawn_load(
    spec: Arc<RequestSpec>,
    stream_spec: Arc<RequestSpec>,
    total: Duration,
) -> (JoinHandle<Stats>, JoinHandle<Stats>) {
    let load = tokio::spawn(async move {
        measure(
            &format!("gateway, {CONNECTIONS} connections, killing b"),
            &spec,
            Mode::Closed(CONNECTIONS),
            Duration::ZERO,
            total,
        )
        .await
    });
    let streams = tokio::spawn(async move {
        measure(
            &format!("gateway, {STREAM_CONNECTIONS} streaming connections, killing b"),
            &stream_spec,
            Mode::Closed(STREAM_CONNECTIONS),
            Duration::ZERO,
            total,
        )
        .await
    });
    (load, streams)
}

/// A cycle's timings as the report's extra keeps them, and the chart's markers.
type Cycles = (Vec<serde_json::Value>, Vec<(f64, String)>);

/// Kills b and restarts it on `schedule`, timing how long the gateway takes to mark it down and
/// to send it traffic again (read from `/metrics`).
async fn kill_and_restart(
    schedule: &Schedule,
    b: &mut Proc,
    client: &TestClient,
    metrics_url: &str,
    report: &mut Report,
) -> Result<Cycles, String> {
    let Schedule { start, up_for, down_for, .. } = *schedule;
    let mut cycles = Vec::new();
    let mut markers = Vec::new();
    for cycle in 0..schedule.cycles {
        tokio::time::sleep_until((start + (up_for + down_for) * cycle as u32 + up_for).into()).await;
        b.kill();
        let killed = Instant::now();
        markers.push((killed.duration_since(start).as_secs_f64(), format!("b killed #{}", cycle + 1)));
        let reroute = poll_until(client, metrics_url, Duration::from_secs(10), |m| {
            gauge(m, "switchyard_backend_up", "b") == Some(0)
        })
        .await;
        tokio::time::sleep_until((killed + down_for).into()).await;
        let before = gauge(&fetch(client, metrics_url).await, "switchyard_backend_requests_total", "b").unwrap_or(0);
        restart(b)?;
        let restarted = Instant::now();
        markers.push((restarted.duration_since(start).as_secs_f64(), format!("b restarted #{}", cycle + 1)));
        let readmit = poll_until(client, metrics_url, Duration::from_secs(10), |m| {
            gauge(m, "switchyard_backend_requests_total", "b").is_some_and(|n| n > before)
        })
        .await;
        cycles.push(json!({
            "cycle": cycle + 1,
            "reroute_ms": reroute.map(|d| d.as_secs_f64() * 1e3),
            "readmission_ms": readmit.map(|d| (d.saturating_sub(Duration::ZERO)).as_secs_f64() * 1e3),
        }));
        report.finding("failover", format!("cycle {}: kill → b marked down", cycle + 1), ms(reroute), "ms");
        report.finding("failover", format!("cycle {}: restart → b takes traffic", cycle + 1), ms(readmit), "ms");
    }
    Ok((cycles, markers))
}

/// What the clients saw: requests and streams sent, those that failed, streams resumed.
fn report_load(report: &mut Report, kills: usize, stats: &Stats, stream_stats: &Stats, resumed: Option<u64>) {
    let s = report.row("failover", format!("c={CONNECTIONS}, {kills} kills"), "gateway", stats);
    report.finding("failover", "requests sent", s.requests as f64, "");
    report.finding("failover", "client-visible failures", (s.requests - s.ok) as f64, "");
    let st = report.row("failover", format!("streams c={STREAM_CONNECTIONS}, {kills} kills"), "gateway", stream_stats);
    report.finding("failover", "streams sent", st.requests as f64, "");
    report.finding("failover", "client-visible stream failures", (st.requests - st.ok) as f64, "");
    report.finding("failover", "streams resumed on the other backend", resumed.unwrap_or(0) as f64, "");
}

/// Requests per second, succeeded and failed, with a marker at each kill and restart.
fn timeline(kills: usize, fallback: bool, stats: &Stats, markers: Vec<(f64, String)>) -> Chart {
    Chart {
        title: if fallback {
            format!("Failover: {kills} SIGKILLs of the model's only backend, a fallback model behind it")
        } else {
            format!("Failover: {kills} SIGKILLs of one of two backends under load")
        },
        x_label: "seconds".into(),
        y_label: "requests/s".into(),
        series: vec![
            Series { name: "succeeded".into(), points: rate_series(stats, false) },
            Series { name: "failed".into(), points: rate_series(stats, true) },
        ],
        x_log: false,
        markers,
    }
}

fn ms(d: Option<Duration>) -> f64 {
    d.map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
}

fn restart(p: &mut Proc) -> Result<(), String> {
    p.restart()
}

async fn fetch(client: &TestClient, url: &str) -> String {
    client.get(url).await.map(|r| r.text()).unwrap_or_default()
}

/// Poll `/metrics` until `done` holds; the time it took, or None on timeout.
async fn poll_until(client: &TestClient, url: &str, limit: Duration, done: impl Fn(&str) -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if done(&fetch(client, url).await) {
            return Some(start.elapsed());
        }
        tokio::time::sleep(POLL).await;
    }
    None
}

/// Value of `name{backend="B"}` in Prometheus text.
fn gauge(metrics: &str, name: &str, backend: &str) -> Option<u64> {
    let prefix = format!("{name}{{backend=\"{backend}\"}} ");
    metrics.lines().find_map(|l| l.strip_prefix(&prefix)).and_then(|v| v.trim().parse().ok())
}

/// An unlabelled series' value.
fn counter(metrics: &str, name: &str) -> Option<u64> {
    let prefix = format!("{name} ");
    metrics.lines().find_map(|l| l.strip_prefix(&prefix)).and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_a_backend_series() {
        let m = "switchyard_backend_up{backend=\"a\"} 1\nswitchyard_backend_up{backend=\"b\"} 0\n";
        assert_eq!(super::gauge(m, "switchyard_backend_up", "b"), Some(0));
        assert_eq!(super::gauge(m, "switchyard_backend_up", "c"), None);
    }
}
