//! Telemetry: the same gateway build with OpenTelemetry traces off and on, in one run, on one
//! mock (which doubles as the OTLP receiver): added latency p50 at one connection (rounds
//! interleaved, so drift hits both alike), then throughput and CPU per request at 16 connections —
//! LiteLLM's "with and without the callback" table, for Switchyard. Afterwards the gateway's own
//! counters must show every span exported and none dropped.

use std::time::Duration;

use super::fleet::cpu_us;
use super::{chat_body, measure, own_setup, start_gateway, start_mock, Mode};
use crate::report::Report;
use crate::{BenchArgs, Pinning};

const ROUNDS: usize = 2;

/// A counter's value from a gateway's `/metrics`.
async fn counter(url: &str, name: &str) -> Result<u64, String> {
    let client = switchyard_testkit::TestClient::new();
    let text = client.get(&format!("{url}/metrics")).await.map_err(|e| e.to_string())?.text();
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0))
}

pub async fn run(args: &BenchArgs, pin: &Pinning, report: &mut Report) -> Result<(), String> {
    let mock = start_mock(&args.model, args.stream_chunks, None, pin)?;
    let base = format!("listen: 127.0.0.1:0\nbackends:\n  - {{name: mock, url: '{}'}}\n", mock.url);
    let off = start_gateway(&base, pin)?;
    let on = start_gateway(&format!("{base}telemetry: {{endpoint: '{}'}}\n", mock.url), pin)?;
    let (d, w) = (args.phase(5.0), args.warmup());
    let body = chat_body(&args.model, false, "hello");

    let mut added = [Vec::new(), Vec::new()];
    let mut own = [Vec::new(), Vec::new()];
    for round in 1..=ROUNDS {
        for (i, (label, gateway)) in [("off", &off), ("on", &on)].into_iter().enumerate() {
            let setup = own_setup(gateway, &mock, &args.model);
            let (direct, through) = setup.pair(&body, false)?;
            let sd =
                measure(&format!("telemetry {label}: direct (round {round})"), &direct, Mode::Closed(1), w, d).await;
            let sg = measure(&format!("telemetry {label} (round {round})"), &through, Mode::Closed(1), w, d).await;
            if sg.total() != sg.ok {
                return Err(format!("telemetry {label}: {} of {} requests failed", sg.total() - sg.ok, sg.total()));
            }
            let phase = format!("closed c=1, telemetry {label}, round {round}");
            let sd = report.row("telemetry", phase.clone(), "direct", &sd);
            let sg = report.row("telemetry", phase, "gateway", &sg);
            added[i].push(sg.p50 as f64 - sd.p50 as f64);
            if let Some(o) = sg.reported_overhead_p50 {
                own[i].push(o as f64);
            }
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    let (added_off, added_on) = (median(&mut added[0]), median(&mut added[1]));
    report.finding("telemetry", "added latency p50, telemetry off", added_off, "µs");
    report.finding("telemetry", "added latency p50, telemetry on", added_on, "µs");
    report.finding("telemetry", "telemetry's added p50 (on − off)", added_on - added_off, "µs");
    if !own[0].is_empty() && !own[1].is_empty() {
        let (o0, o1) = (median(&mut own[0]), median(&mut own[1]));
        report.finding("telemetry", "gateway-reported own time p50 (server-timing), off", o0, "µs");
        report.finding("telemetry", "gateway-reported own time p50 (server-timing), on", o1, "µs");
    }

    let mut loaded = Vec::new();
    for (label, gateway) in [("off", &off), ("on", &on)] {
        let setup = own_setup(gateway, &mock, &args.model);
        let (_, through) = setup.pair(&body, false)?;
        let _ = measure(&format!("telemetry {label} warm-up"), &through, Mode::Closed(16), w, Duration::from_millis(1))
            .await;
        let cpu_before = cpu_us(gateway.pid());
        let stats =
            measure(&format!("telemetry {label}, 16 connections"), &through, Mode::Closed(16), Duration::ZERO, d).await;
        let cpu_after = cpu_us(gateway.pid());
        report.row("telemetry", format!("closed c=16, telemetry {label}"), "gateway", &stats);
        if stats.total() != stats.ok {
            return Err(format!(
                "telemetry {label}: {} of {} requests failed",
                stats.total() - stats.ok,
                stats.total()
            ));
        }
        let cpu = match (cpu_before, cpu_after) {
            (Some(a), Some(b)) if stats.ok > 0 => b.saturating_sub(a) as f64 / stats.ok as f64,
            _ => f64::NAN,
        };
        let rps = stats.ok as f64 / d.as_secs_f64();
        report.finding("telemetry", format!("throughput at 16 connections, telemetry {label}"), rps, "req/s");
        report.finding("telemetry", format!("gateway CPU per request at 16 connections, telemetry {label}"), cpu, "µs");
        loaded.push((rps, cpu));
    }
    if let [(rps_off, cpu_off), (rps_on, cpu_on)] = loaded[..] {
        report.finding("telemetry", "throughput, on ÷ off", rps_on / rps_off, "×");
        report.finding("telemetry", "CPU per request, on ÷ off", cpu_on / cpu_off, "×");
    }

    // Every request's spans left: give the last batch its delay, then read the counters.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let exported = counter(&on.url, "switchyard_telemetry_spans_exported_total").await?;
    let dropped = counter(&on.url, "switchyard_telemetry_traces_dropped_total").await?;
    let failed = counter(&on.url, "switchyard_telemetry_spans_failed_total").await?;
    report.finding("telemetry", "spans exported", exported as f64, "spans");
    report.finding("telemetry", "traces dropped (queue full)", dropped as f64, "traces");
    report.finding("telemetry", "spans whose export failed", failed as f64, "spans");
    Ok(())
}
