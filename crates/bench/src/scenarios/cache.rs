//! The response cache: one gateway with `cache:` on and one without, in front of one mock. The
//! same request is sent over and over, so after the first every answer through the cached gateway
//! is a hit. Reports the gateway's own time per hit (`server-timing`, the figure issue 16 judges:
//! at most 30 µs) plain and streamed, the latency a client sees for a hit against a backend
//! round trip, throughput and CPU per request at 16 connections, and how many requests reached
//! the backend (a hit must reach none).

use super::{chat_body, counter, loaded_rps_and_cpu, measure, own_setup, start_gateway, start_mock, Mode};
use crate::report::Report;
use crate::{BenchArgs, Pinning};

pub async fn run(args: &BenchArgs, pin: &Pinning, report: &mut Report) -> Result<(), String> {
    let mock = start_mock(&args.model, args.stream_chunks, None, pin)?;
    let base = format!("listen: 127.0.0.1:0\nbackends:\n  - {{name: mock, url: '{}'}}\n", mock.url);
    let off = start_gateway(&base, pin)?;
    let on = start_gateway(&format!("{base}cache: {{ttl: 1h}}\n"), pin)?;
    let (d, w) = (args.phase(5.0), args.warmup());

    for stream in [false, true] {
        let kind = if stream { "streamed" } else { "plain" };
        let body = chat_body(&args.model, stream, &format!("cache bench, {kind}"));
        for (label, gateway) in [("cache off", &off), ("cache hit", &on)] {
            let setup = own_setup(gateway, &mock, &args.model);
            let (direct, through) = setup.pair(&body, stream)?;
            let sd = measure(&format!("{kind}: direct"), &direct, Mode::Closed(1), w, d).await;
            let sg = measure(&format!("{kind}: {label}"), &through, Mode::Closed(1), w, d).await;
            sg.all_ok(&format!("{kind}, {label}"))?;
            let phase = format!("closed c=1, {kind}, {label}");
            let sd = report.row("cache", phase.clone(), "direct", &sd);
            let own = sg.reported_overhead.value_at_quantile(0.5);
            let own_p99 = sg.reported_overhead.value_at_quantile(0.99);
            let sg = report.row("cache", phase, "gateway", &sg);
            report.finding(
                "cache",
                format!("{kind}, {label}: gateway's own time p50 (server-timing)"),
                own as f64,
                "µs",
            );
            report.finding("cache", format!("{kind}, {label}: gateway's own time p99"), own_p99 as f64, "µs");
            report.finding("cache", format!("{kind}, {label}: client latency p50"), sg.p50 as f64, "µs");
            report.finding("cache", format!("{kind}: backend directly, latency p50"), sd.p50 as f64, "µs");
        }
    }

    let body = chat_body(&args.model, false, "cache bench, plain");
    let mut loaded = Vec::new();
    for (label, gateway) in [("cache off", &off), ("cache hit", &on)] {
        let setup = own_setup(gateway, &mock, &args.model);
        loaded.push(loaded_rps_and_cpu("cache", label, &setup, gateway, &body, args, report).await?);
    }
    if let [(rps_off, cpu_off), (rps_hit, cpu_hit)] = loaded[..] {
        report.finding("cache", "throughput, cache hit ÷ cache off", rps_hit / rps_off, "×");
        report.finding("cache", "CPU per request, cache hit ÷ cache off", cpu_hit / cpu_off, "×");
    }
    let hits = counter(&on.url, "switchyard_cache_hits_total{source=\"memory\"}").await?;
    let misses = counter(&on.url, "switchyard_cache_misses_total").await?;
    report.finding("cache", "hits", hits as f64, "requests");
    report.finding("cache", "misses (requests that reached the backend)", misses as f64, "requests");
    Ok(())
}
