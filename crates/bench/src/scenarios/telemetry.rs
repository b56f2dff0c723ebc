//! Telemetry: the same gateway build with OpenTelemetry traces and each export sink off and on,
//! in one run, on one mock (which doubles as the OTLP receiver and the webhook, unless `--pin
//! sink=CPUS` gives them a mock of their own): added latency p50
//! at one connection (rounds interleaved, so drift hits every variant alike), then throughput and
//! CPU per request at 16 connections — LiteLLM's "with and without the callback" table, for
//! Switchyard. A second gateway with nothing on is measured like the others: its distance from
//! the first is the run's noise. Afterwards each gateway's own counters show what was exported,
//! dropped or failed.

use std::time::Duration;

use super::{chat_body, counter, loaded_rps_and_cpu, measure, own_setup, start_gateway, start_mock, Mode};
use crate::procs::Proc;
use crate::report::Report;
use crate::{BenchArgs, Pinning};

const ROUNDS: usize = 2;

/// The variants measured: a label and the configuration that turns it on.
fn variants(mock: &str) -> Vec<(&'static str, String)> {
    vec![
        ("off", String::new()),
        ("traces", format!("telemetry: {{endpoint: '{mock}'}}\n")),
        ("webhook export", format!("exports:\n  - {{name: hook, type: webhook, url: '{mock}/hooks/usage'}}\n")),
        ("OTLP logs export", format!("exports:\n  - {{name: logs, type: otlp_logs, url: '{mock}'}}\n")),
        (
            "traces + both exports",
            format!(
                "telemetry: {{endpoint: '{mock}'}}\nexports:\n  - {{name: hook, type: webhook, url: '{mock}/hooks/usage'}}\n  \
                 - {{name: logs, type: otlp_logs, url: '{mock}'}}\n"
            ),
        ),
        // A second gateway with nothing on: how far it lands from the first is this run's noise,
        // the yardstick for "within noise".
        ("off, again", String::new()),
    ]
}

pub async fn run(args: &BenchArgs, pin: &Pinning, report: &mut Report) -> Result<(), String> {
    let mock = start_mock(&args.model, args.stream_chunks, None, pin)?;
    // `--pin sink=CPUS`: spans and records go to a mock of their own there, so what receiving
    // them costs is not counted against the gateway (a collector is another machine's work).
    let receiver = match &pin.sink {
        Some(cpus) => Some(start_mock(
            &args.model,
            args.stream_chunks,
            None,
            &Pinning { mock: Some(cpus.clone()), ..Pinning::default() },
        )?),
        None => None,
    };
    let sink_url = receiver.as_ref().map_or(&mock.url, |r| &r.url);
    let base = format!("listen: 127.0.0.1:0\nbackends:\n  - {{name: mock, url: '{}'}}\n", mock.url);
    let mut gateways = Vec::new();
    for (label, extra) in variants(sink_url) {
        gateways.push((label, start_gateway(&format!("{base}{extra}"), pin)?));
    }
    let body = chat_body(&args.model, false, "hello");
    added_latency(args, report, &gateways, &mock, &body).await?;
    loaded_throughput_and_cpu(args, report, &gateways, &mock, &body).await?;
    // Give the last batches their delay (the export sinks run at the lowest CPU priority and
    // catch up once the load stops), then read each gateway's counters.
    tokio::time::sleep(Duration::from_secs(5)).await;
    report_exports(report, &gateways).await
}

/// Each variant's gateway, by its label.
type Gateways = [(&'static str, Proc)];

/// Added latency p50 at one connection, each variant against the mock directly, `ROUNDS` rounds
/// interleaved; the median of the rounds, and how far each variant lands beyond "off".
async fn added_latency(
    args: &BenchArgs,
    report: &mut Report,
    gateways: &Gateways,
    mock: &Proc,
    body: &str,
) -> Result<(), String> {
    let (d, w) = (args.phase(5.0), args.warmup());
    let mut added = vec![Vec::new(); gateways.len()];
    let mut own = vec![Vec::new(); gateways.len()];
    for round in 1..=ROUNDS {
        for (i, (label, gateway)) in gateways.iter().enumerate() {
            let setup = own_setup(gateway, mock, &args.model);
            let (direct, through) = setup.pair(body, false)?;
            let sd = measure(&format!("{label}: direct (round {round})"), &direct, Mode::Closed(1), w, d).await;
            let sg = measure(&format!("{label} (round {round})"), &through, Mode::Closed(1), w, d).await;
            sg.all_ok(label)?;
            let phase = format!("closed c=1, {label}, round {round}");
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
    let base_added = median(&mut added[0]);
    for (i, (label, _)) in gateways.iter().enumerate() {
        let a = median(&mut added[i]);
        report.finding("telemetry", format!("added latency p50, {label}"), a, "µs");
        if i > 0 {
            report.finding("telemetry", format!("{label}: added p50 beyond off"), a - base_added, "µs");
        }
        if !own[i].is_empty() {
            let o = median(&mut own[i]);
            report.finding("telemetry", format!("gateway-reported own time p50 (server-timing), {label}"), o, "µs");
        }
    }
    Ok(())
}

/// Throughput and CPU per request at 16 connections, each variant against "off". Rounds in
/// alternating order, so drift over the run weighs on every variant alike; each variant's figure
/// is the mean of its rounds.
async fn loaded_throughput_and_cpu(
    args: &BenchArgs,
    report: &mut Report,
    gateways: &Gateways,
    mock: &Proc,
    body: &str,
) -> Result<(), String> {
    let mut loaded = vec![(0.0, 0.0); gateways.len()];
    for round in 0..ROUNDS {
        let mut order: Vec<usize> = (0..gateways.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let (label, gateway) = &gateways[i];
            let setup = own_setup(gateway, mock, &args.model);
            let label = format!("{label}, round {}", round + 1);
            let (rps, cpu) = loaded_rps_and_cpu("telemetry", &label, &setup, gateway, body, args, report).await?;
            loaded[i].0 += rps / ROUNDS as f64;
            loaded[i].1 += cpu / ROUNDS as f64;
        }
    }
    if let Some(&(rps_off, cpu_off)) = loaded.first() {
        for ((label, _), (rps, cpu)) in gateways.iter().zip(&loaded).skip(1) {
            report.finding("telemetry", format!("throughput, {label} ÷ off"), rps / rps_off, "×");
            report.finding("telemetry", format!("CPU per request, {label} ÷ off"), cpu / cpu_off, "×");
        }
    }
    Ok(())
}

/// What each gateway with something on exported, dropped or failed, from its own counters.
async fn report_exports(report: &mut Report, gateways: &Gateways) -> Result<(), String> {
    for (label, gateway) in gateways.iter().skip(1) {
        let exported = counter(&gateway.url, "switchyard_telemetry_spans_exported_total").await?;
        let dropped = counter(&gateway.url, "switchyard_telemetry_traces_dropped_total").await?;
        let failed = counter(&gateway.url, "switchyard_telemetry_spans_failed_total").await?;
        let queued = counter(&gateway.url, "switchyard_usage_records_total{state=\"queued\"}").await?;
        if label.contains("traces") {
            report.finding("telemetry", format!("{label}: spans exported"), exported as f64, "spans");
            report.finding("telemetry", format!("{label}: traces dropped (queue full)"), dropped as f64, "traces");
            report.finding("telemetry", format!("{label}: spans whose export failed"), failed as f64, "spans");
        }
        for sink in ["hook", "logs"] {
            let line = format!("switchyard_export_records_total{{sink=\"{sink}\",state=\"delivered\"}}");
            // A sink that fell behind under the load catches up now (every gateway's at once, on
            // a shared core): wait for it, up to a minute, before counting what arrived.
            let waiting = std::time::Instant::now();
            let mut delivered = counter(&gateway.url, &line).await?;
            while delivered > 0 && delivered < queued && waiting.elapsed() < Duration::from_secs(60) {
                tokio::time::sleep(Duration::from_millis(200)).await;
                delivered = counter(&gateway.url, &line).await?;
            }
            if delivered > 0 {
                report.finding(
                    "telemetry",
                    format!("{label}: records delivered to {sink} of {queued} journalled"),
                    delivered as f64,
                    "records",
                );
            }
        }
    }
    Ok(())
}
