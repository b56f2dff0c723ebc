//! Shadow traffic (issue 57): one gateway without experiments and one mirroring every request
//! (`shadow: {sample: 1.0}`) to a second model on its own backend, both in front of backends that
//! take 20 ms to answer, as a small model does. Measured in alternating turns (noise on a shared
//! machine moves both alike): the primary's p50 and p99 latency through each, at 8 connections,
//! plain and streamed; the judged ratio is with ÷ without (at most 1.05). The gateway's CPU per
//! request is reported too: a shadow is a second request, and that work is not free.

use std::time::Duration;

use super::{chat_body, fleet, measure, own_setup, start_gateway, Mode};
use crate::procs::Proc;
use crate::report::Report;
use crate::{BenchArgs, Pinning};

/// The backends' time to answer.
const BACKEND_MS: u64 = 20;
/// Turns per configuration.
const TURNS: usize = 3;

fn slow_mock(model: &str, pin: &Pinning) -> Result<Proc, String> {
    let latency = BACKEND_MS.to_string();
    let args: Vec<String> =
        ["mock", "--listen", "127.0.0.1:0", "--models", model, "--latency-ms", &latency, "--chunk-delay-ms", "2"]
            .map(String::from)
            .to_vec();
    Proc::start("mock", &args, pin.mock.as_deref())
}

pub async fn run(args: &BenchArgs, pin: &Pinning, report: &mut Report) -> Result<(), String> {
    let model = args.model.as_str();
    let primary = slow_mock(model, pin)?;
    let shadow = slow_mock("shadow-model", pin)?;
    let base = format!(
        "listen: 127.0.0.1:0\nbackends:\n  - {{name: primary, url: '{}', models: ['{model}']}}\n  - {{name: shadow, url: '{}', models: [shadow-model]}}\n",
        primary.url, shadow.url
    );
    let off = start_gateway(&base, pin)?;
    let on = start_gateway(
        &format!("{base}experiments:\n  mirror: {{model: '{model}', shadow: {{model: shadow-model, sample: 1.0}}}}\n"),
        pin,
    )?;
    let (d, w) = (args.phase(4.0), args.warmup());
    for stream in [false, true] {
        let kind = if stream { "streamed" } else { "plain" };
        let body = chat_body(model, stream, &format!("shadow bench, {kind}"));
        let mut merged = [crate::load::histogram(), crate::load::histogram()];
        let mut cpu = [(0u64, 0u64); 2];
        for turn in 0..TURNS {
            for (i, (label, gateway)) in [("without shadow", &off), ("with shadow", &on)].into_iter().enumerate() {
                let setup = own_setup(gateway, &primary, model);
                let (_, through) = setup.pair(&body, stream)?;
                let warm = if turn == 0 { w } else { Duration::ZERO };
                let before = fleet::cpu_us(gateway.pid());
                let stats =
                    measure(&format!("{kind}, {label}, turn {}", turn + 1), &through, Mode::Closed(8), warm, d).await;
                let after = fleet::cpu_us(gateway.pid());
                stats.all_ok(label)?;
                merged[i].add(&stats.latency).map_err(|e| e.to_string())?;
                if let (Some(a), Some(b)) = (before, after) {
                    cpu[i].0 += b.saturating_sub(a);
                    cpu[i].1 += stats.ok;
                }
                report.row("shadow", format!("closed c=8, {kind}, {label}, turn {}", turn + 1), "gateway", &stats);
            }
        }
        let [without, with] = &merged;
        for (q, name) in [(0.5, "p50"), (0.99, "p99")] {
            let (a, b) = (without.value_at_quantile(q) as f64, with.value_at_quantile(q) as f64);
            report.finding("shadow", format!("{kind}: primary latency {name} without shadow"), a, "µs");
            report.finding("shadow", format!("{kind}: primary latency {name} with shadow (sample 1.0)"), b, "µs");
            report.finding("shadow", format!("{kind}: primary latency {name}, with ÷ without"), b / a, "×");
        }
        let per = |(us, n): (u64, u64)| us as f64 / n.max(1) as f64;
        report.finding("shadow", format!("{kind}: gateway CPU per primary request without shadow"), per(cpu[0]), "µs");
        report.finding("shadow", format!("{kind}: gateway CPU per primary request with its shadow"), per(cpu[1]), "µs");
    }
    Ok(())
}
