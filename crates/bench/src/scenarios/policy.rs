//! Policies as code (issue 58): three gateways in front of one fast mock — no rules, five
//! typical rules, twenty — measured in alternating turns (noise on a shared machine moves all
//! alike) at 8 connections. Reported: the gateway's CPU per request and its p50 latency for each,
//! and the CPU each rule adds (the judged figure is per rule: at most 1 µs). The rules are
//! evaluated on every request (none decides, so every one runs).

use std::time::Duration;

use super::{chat_body, fleet, measure, own_setup, start_gateway, start_mock, Mode};
use crate::report::Report;
use crate::{BenchArgs, Pinning};

/// Turns per configuration.
const TURNS: usize = 3;

/// Five typical rules, none of which holds for the bench's requests (so all are evaluated).
const TYPICAL: [&str; 5] = [
    r#"{name: interns, when: "'intern' in key.tags && request.model != 'small'", then: route, route: {backends: [b]}}"#,
    r#"{name: restricted, when: "request.headers['x-data-class'] == 'restricted'", then: deny}"#,
    r#"{name: nights, when: "request.model == 'big' && time.now.getHours('Europe/Paris') >= 22", then: deny}"#,
    r#"{name: big-bodies, when: "request.size > 1000000 || request.stream && request.size > 500000", then: deny}"#,
    r#"{name: research, when: "key.team == 'research'", then: set, set: {tags: [research]}}"#,
];

fn policies(n: usize) -> String {
    let mut out = String::from("policies:\n");
    for i in 0..n {
        let rule = TYPICAL[i % TYPICAL.len()].replacen("{name: ", &format!("{{name: r{i}-"), 1);
        out.push_str(&format!("  - {rule}\n"));
    }
    out
}

pub async fn run(args: &BenchArgs, pin: &Pinning, report: &mut Report) -> Result<(), String> {
    let model = args.model.as_str();
    let mock = start_mock(model, 1, None, pin)?;
    let base = format!("listen: 127.0.0.1:0\nbackends:\n  - {{name: b, url: '{}', models: ['{model}']}}\n", mock.url);
    let counts = [0usize, 5, 20];
    let gateways = counts
        .iter()
        .map(|&n| start_gateway(&if n == 0 { base.clone() } else { format!("{base}{}", policies(n)) }, pin))
        .collect::<Result<Vec<_>, _>>()?;
    let (d, w) = (args.phase(4.0), args.warmup());
    let body = chat_body(model, false, "policy bench");
    let mut cpu = [(0u64, 0u64); 3];
    let mut p50 = [0f64; 3];
    for turn in 0..TURNS {
        for (i, gateway) in gateways.iter().enumerate() {
            let label = format!("{} rules", counts[i]);
            let (_, through) = own_setup(gateway, &mock, model).pair(&body, false)?;
            let warm = if turn == 0 { w } else { Duration::ZERO };
            let before = fleet::cpu_us(gateway.pid());
            let stats = measure(&format!("{label}, turn {}", turn + 1), &through, Mode::Closed(8), warm, d).await;
            let after = fleet::cpu_us(gateway.pid());
            stats.all_ok(&label)?;
            if let (Some(a), Some(b)) = (before, after) {
                cpu[i].0 += b.saturating_sub(a);
                cpu[i].1 += stats.ok;
            }
            p50[i] += stats.latency.value_at_quantile(0.5) as f64 / TURNS as f64;
            report.row("policy", format!("closed c=8, {label}, turn {}", turn + 1), "gateway", &stats);
        }
    }
    let per = |(us, n): (u64, u64)| us as f64 / n.max(1) as f64;
    for (i, n) in counts.iter().enumerate() {
        report.finding("policy", format!("gateway CPU per request, {n} rules"), per(cpu[i]), "µs");
        report.finding("policy", format!("latency p50, {n} rules"), p50[i], "µs");
    }
    for i in 1..counts.len() {
        let added = (per(cpu[i]) - per(cpu[0])) / counts[i] as f64;
        report.finding("policy", format!("CPU each rule adds ({} rules against none)", counts[i]), added, "µs");
    }
    Ok(())
}
