//! Guardrails' cost: one gateway without guards and one with `guardrails.default: [pii, secrets]`
//! (masking), in front of one mock. Reports the gateway's own time (`server-timing`) for a 4 KB
//! prompt with no match and with ten matches to mask, a streamed answer's added time per chunk
//! (its latency with guards on less off, over the chunks), and throughput and CPU per request at
//! 32 connections for a short prompt and the 4 KB one, the two gateways loaded side by side on one
//! core (issue 32's bars: ≤ 15 µs and ≤ 25 µs added, ≤ 50 µs per chunk, ≥ 0.9×).

use super::fleet::cpu_us;
use super::{chat_body, own_setup, start_gateway, start_mock};
use crate::load::{alternating_loop, closed_loop, Stats};
use crate::procs::Proc;
use crate::report::Report;
use crate::{BenchArgs, Pinning};

/// Rounds of throughput, each with a fresh pair of gateways, so that no one process's luck (its
/// memory layout, where its threads landed) weighs on every round.
const ROUNDS: usize = 6;

/// Requests in a row to one gateway before the other's turn, in the latency phases. Turns of one
/// request each found every process's caches cold after the other's request: the unguarded
/// gateway's own time read 9–14 µs instead of the few it takes alone, and ten findings added 21
/// and 26 µs.
const BLOCK: usize = 64;

/// What one gateway did in a round of throughput.
struct Side {
    requests: f64,
    cpu_us: f64,
}

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

    for (kind, text) in [("4 KB, no match", prompt()), ("4 KB, 10 matches", prompt_with_matches())] {
        let body = chat_body(&args.model, false, &text);
        let sides = in_turns([&off, &on], &mock, &body, false, kind, args, report).await?;
        let own = sides.map(|stats| stats.reported_overhead.value_at_quantile(0.5) as f64);
        for (label, p50) in ["guards off", "guards on"].iter().zip(own) {
            report.finding("guardrails", format!("{kind}, {label}: gateway's own time p50 (server-timing)"), p50, "µs");
        }
        report.finding("guardrails", format!("{kind}: added by the guards, p50"), own[1] - own[0], "µs");
    }

    let body = chat_body(&args.model, true, "Write the weekly summary.");
    let sides = in_turns([&off, &on], &mock, &body, true, "streamed", args, report).await?;
    let latency = sides.map(|stats| stats.latency.value_at_quantile(0.5) as f64);
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
        let mut rounds = Vec::with_capacity(ROUNDS);
        for round in 1..=ROUNDS {
            let gateways = [start_gateway(&base, pin)?, start_gateway(&format!("{base}{guards}"), pin)?];
            let label = format!("{kind}, round {round}");
            rounds.push(side_by_side(&gateways, &mock, &body, &label, args, report).await?);
        }
        let sum = |of: fn(&[Side; 2]) -> f64| rounds.iter().map(of).sum::<f64>();
        report.finding(
            "guardrails",
            format!("{kind}: throughput at 32 connections, guards on ÷ off (all rounds)"),
            sum(|[_, on]| on.requests) / sum(|[off, _]| off.requests),
            "×",
        );
        let mut ratios: Vec<f64> = rounds.iter().map(|[off, on]| on.requests / off.requests).collect();
        ratios.sort_by(f64::total_cmp);
        report.finding(
            "guardrails",
            format!("{kind}: throughput at 32 connections, guards on ÷ off (median of the rounds' ratios)"),
            (ratios[(ROUNDS - 1) / 2] + ratios[ROUNDS / 2]) / 2.0,
            "×",
        );
        report.finding(
            "guardrails",
            format!("{kind}: CPU per request, guards on − off (all rounds)"),
            sum(|[_, on]| on.cpu_us) / sum(|[_, on]| on.requests)
                - sum(|[off, _]| off.cpu_us) / sum(|[off, _]| off.requests),
            "µs",
        );
        report.finding(
            "guardrails",
            format!("{kind}: the shared core's time the two gateways used (all rounds)"),
            100.0 * sum(|[off, on]| off.cpu_us + on.cpu_us) / (ROUNDS as f64 * args.phase(5.0).as_secs_f64() * 1e6),
            "%",
        );
    }
    Ok(())
}

/// One round of throughput at 32 connections, guards off and on side by side: both gateways are
/// pinned to the same core and loaded at once, so they share its time and whatever slows the
/// machine in that window slows both alike. Measured one after the other, the ratio moved by ±0.1
/// between runs, as the same process's CPU per request drifted by ±15 % from one second to the
/// next, several times what the guards add. Side by side, what each completes is in inverse
/// proportion to its CPU per request, which is what throughput on a saturated core is; two
/// unguarded twins measured this way came out at 1.00 (and the core's time used is reported, to
/// show it was saturated).
async fn side_by_side(
    [off, on]: &[Proc; 2],
    mock: &Proc,
    body: &str,
    label: &str,
    args: &BenchArgs,
    report: &mut Report,
) -> Result<[Side; 2], String> {
    let (d, w) = (args.phase(5.0), args.warmup());
    let spec = |gateway: &Proc| own_setup(gateway, mock, &args.model).pair(body, false).map(|(_, through)| through);
    let (off_spec, on_spec) = (spec(off)?, spec(on)?);
    eprintln!("  ▸ {label}: guards off and on side by side, 32 connections each ({:.1} s)", (w + d).as_secs_f64());
    tokio::join!(closed_loop(off_spec.clone(), 32, w), closed_loop(on_spec.clone(), 32, w));
    let before = [cpu_us(off.pid()), cpu_us(on.pid())];
    let (off_stats, on_stats) = tokio::join!(closed_loop(off_spec, 32, d), closed_loop(on_spec, 32, d));
    let after = [cpu_us(off.pid()), cpu_us(on.pid())];
    let mut side = |i: usize, name: &str, stats: Stats| -> Result<Side, String> {
        let label = format!("{label}, {name}");
        stats.all_ok(&label)?;
        let cpu = match (before[i], after[i]) {
            (Some(a), Some(b)) => b.saturating_sub(a) as f64,
            _ => f64::NAN,
        };
        let requests = stats.ok as f64;
        report.row("guardrails", format!("closed c=32, {label}, side by side"), "gateway", &stats);
        report.finding(
            "guardrails",
            format!("throughput at 32 connections, {label}"),
            requests / d.as_secs_f64(),
            "req/s",
        );
        report.finding("guardrails", format!("gateway CPU per request, {label}"), cpu / requests, "µs");
        Ok(Side { requests, cpu_us: cpu })
    };
    Ok([side(0, "guards off", off_stats)?, side(1, "guards on", on_stats)?])
}

/// One request at a time, to the unguarded and the guarded gateway in turns of `BLOCK` requests
/// (`alternating_loop`), for a warm-up and a measured phase. Measured one gateway after the
/// other, "10 matches, added" read 9 to 26 µs across runs as the machine drifted between phases.
async fn in_turns(
    [off, on]: [&Proc; 2],
    mock: &Proc,
    body: &str,
    stream: bool,
    kind: &str,
    args: &BenchArgs,
    report: &mut Report,
) -> Result<[Stats; 2], String> {
    let (d, w) = (args.phase(5.0), args.warmup());
    let spec = |gateway: &Proc| own_setup(gateway, mock, &args.model).pair(body, stream).map(|(_, through)| through);
    let specs = [spec(off)?, spec(on)?];
    eprintln!(
        "  ▸ {kind}: guards off and on in turns of {BLOCK} requests, one at a time ({:.1} s)",
        (w + d).as_secs_f64()
    );
    alternating_loop(specs.clone(), BLOCK, w).await;
    let sides = alternating_loop(specs, BLOCK, d).await;
    for (label, stats) in ["guards off", "guards on"].iter().zip(&sides) {
        stats.all_ok(&format!("{kind}, {label}"))?;
        report.row("guardrails", format!("closed c=1, {kind}, {label}, in turns"), "gateway", stats);
    }
    Ok(sides)
}
