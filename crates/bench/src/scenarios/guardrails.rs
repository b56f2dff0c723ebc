//! Guardrails' cost: one gateway without guards and one with `guardrails.default: [pii, secrets]`
//! (masking), in front of one mock. Reports the gateway's own time (`server-timing`) for a 4 KB
//! prompt with no match and with ten matches to mask, a streamed answer's added time per chunk
//! (its latency with guards on less off, over the chunks), and throughput and CPU per request at
//! 32 connections for a short prompt and the 4 KB one (issue 32's bars: ≤ 15 µs and ≤ 25 µs
//! added, ≤ 50 µs per chunk, ≥ 0.9×).

use super::{chat_body, loaded_rps_and_cpu_at, measure, own_setup, start_gateway, start_mock, Mode};
use crate::report::Report;
use crate::{BenchArgs, Pinning};

/// Throughput is measured off and on in turns, this many times each (with three, one run could
/// not tell 0.88 from 0.93 on a noisy machine). Even: each side goes first in half the rounds.
const ROUNDS: usize = 6;

/// About 4 KB of plain English with nothing a detector takes.
fn prompt() -> String {
    let sentence = "The quarterly review covers shipping times, the new warehouse layout and what the \
                    support team heard from customers about returns during the holiday weeks. ";
    sentence.repeat(4096 / sentence.len() + 1)
}

/// The same prompt with ten findings in it (emails, a card, keys, an IBAN).
fn prompt_with_matches() -> String {
    let values = [
        "ana.lopez@example.com",
        "4111 1111 1111 1111",
        "AKIAIOSFODNN7EXAMPLE",
        "ben@corp.example.org",
        "GB82 WEST 1234 5698 7654 32",
        "ghp_0123456789abcdefghijABCDEFGHIJ012345",
        "cara.diaz@example.net",
        "5500 0000 0000 0004",
        "dan@example.com",
        "eve.moss@example.co.uk",
    ];
    let base = prompt();
    let step = base.len() / values.len();
    let mut out = String::with_capacity(base.len() + 400);
    for (i, v) in values.iter().enumerate() {
        let piece = &base[i * step..((i + 1) * step).min(base.len())];
        out.push_str(piece);
        out.push_str(v);
        out.push(' ');
    }
    out
}

pub async fn run(args: &BenchArgs, pin: &Pinning, report: &mut Report) -> Result<(), String> {
    let mock = start_mock(&args.model, args.stream_chunks, None, pin)?;
    let base = format!("listen: 127.0.0.1:0\nbackends:\n  - {{name: mock, url: '{}'}}\n", mock.url);
    let guards = "guardrails:\n  default: [pii, secrets]\n  pii: {type: pii, action: mask}\n  \
                  secrets: {type: secrets, action: mask}\n";
    let off = start_gateway(&base, pin)?;
    let on = start_gateway(&format!("{base}{guards}"), pin)?;
    let (d, w) = (args.phase(5.0), args.warmup());

    for (kind, text) in [("4 KB, no match", prompt()), ("4 KB, 10 matches", prompt_with_matches())] {
        let body = chat_body(&args.model, false, &text);
        let mut own = Vec::new();
        for (label, gateway) in [("guards off", &off), ("guards on", &on)] {
            let (_, through) = own_setup(gateway, &mock, &args.model).pair(&body, false)?;
            let stats = measure(&format!("{kind}: {label}"), &through, Mode::Closed(1), w, d).await;
            if stats.total() != stats.ok {
                return Err(format!(
                    "{kind}, {label}: {} of {} requests failed",
                    stats.total() - stats.ok,
                    stats.total()
                ));
            }
            let p50 = stats.reported_overhead.value_at_quantile(0.5) as f64;
            report.row("guardrails", format!("closed c=1, {kind}, {label}"), "gateway", &stats);
            report.finding("guardrails", format!("{kind}, {label}: gateway's own time p50 (server-timing)"), p50, "µs");
            own.push(p50);
        }
        report.finding("guardrails", format!("{kind}: added by the guards, p50"), own[1] - own[0], "µs");
    }

    let body = chat_body(&args.model, true, "Write the weekly summary.");
    let mut latency = Vec::new();
    for (label, gateway) in [("guards off", &off), ("guards on", &on)] {
        let (_, through) = own_setup(gateway, &mock, &args.model).pair(&body, true)?;
        let stats = measure(&format!("stream: {label}"), &through, Mode::Closed(1), w, d).await;
        let row = report.row("guardrails", format!("closed c=1, streamed, {label}"), "gateway", &stats);
        latency.push(row.p50 as f64);
    }
    let chunks = args.stream_chunks.max(1) as f64;
    report.finding(
        "guardrails",
        "streamed: added per chunk by the guards, p50",
        (latency[1] - latency[0]) / chunks,
        "µs",
    );

    // Throughput: the usual short chat request, then the 4 KB prompt (scanned on its way out;
    // the mock's answer is the same short one for both).
    for (kind, text) in [("short prompt", "Say hello in one short sentence.".to_owned()), ("4 KB prompt", prompt())] {
        let body = chat_body(&args.model, false, &text);
        // Off and on in turns: one phase each moved the ratio by ±0.1 between runs on a noisy
        // machine, as drift hit one side and not the other. Off goes first in odd rounds and on
        // in even ones, so that drift within a round weighs on both sides alike. Each round has
        // its own two gateways: in one run a single guarded process stayed ~20 % slower through
        // all six rounds (44–45 µs a request, 32–39 without guards), ~5x what its instructions add.
        let mut rounds = Vec::with_capacity(ROUNDS);
        for round in 1..=ROUNDS {
            let (fresh_off, fresh_on) = (start_gateway(&base, pin)?, start_gateway(&format!("{base}{guards}"), pin)?);
            let sides = [("guards off", &fresh_off), ("guards on", &fresh_on)];
            let mut this = [(0.0, 0.0); 2];
            let order = if round % 2 == 1 { [0, 1] } else { [1, 0] };
            for i in order {
                let (label, gateway) = sides[i];
                let setup = own_setup(gateway, &mock, &args.model);
                let label = format!("{kind}, {label}, round {round}");
                this[i] =
                    loaded_rps_and_cpu_at(32, ("guardrails", &label), &setup, gateway, &body, args, report).await?;
            }
            rounds.push(this);
        }
        let mean = |of: fn(&[(f64, f64); 2]) -> f64| rounds.iter().map(of).sum::<f64>() / ROUNDS as f64;
        report.finding(
            "guardrails",
            format!("{kind}: throughput at 32 connections, guards on ÷ off (mean of rounds)"),
            mean(|[_, on]| on.0) / mean(|[off, _]| off.0),
            "×",
        );
        let mut ratios: Vec<f64> = rounds.iter().map(|[off, on]| on.0 / off.0).collect();
        ratios.sort_by(f64::total_cmp);
        let median = (ratios[(ROUNDS - 1) / 2] + ratios[ROUNDS / 2]) / 2.0;
        report.finding(
            "guardrails",
            format!("{kind}: throughput at 32 connections, guards on ÷ off (median of the rounds' ratios)"),
            median,
            "×",
        );
        report.finding(
            "guardrails",
            format!("{kind}: CPU per request, guards on − off (mean of rounds)"),
            mean(|[_, on]| on.1) - mean(|[off, _]| off.1),
            "µs",
        );
    }
    Ok(())
}
