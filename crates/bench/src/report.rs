//! Benchmark results: one row per measured phase, findings (the figures that matter, such as
//! overhead = gateway − direct), machine and parameters; printed as a table and as JSON.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::chart::Chart;
use super::load::Stats;

/// Percentiles and counts of one phase, in µs.
#[derive(Debug, Clone)]
pub struct Summary {
    pub requests: u64,
    pub ok: u64,
    pub errors: BTreeMap<String, u64>,
    pub rps: f64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
    pub first_chunk_p50: Option<u64>,
    pub reported_overhead_p50: Option<u64>,
    pub seconds: f64,
    pub backends: BTreeMap<String, u64>,
}

impl Summary {
    pub fn of(s: &Stats) -> Summary {
        let q = |q: f64| if s.ok > 0 { s.latency.value_at_quantile(q) } else { 0 };
        Summary {
            requests: s.total(),
            ok: s.ok,
            errors: s.errors.clone(),
            rps: s.throughput(),
            p50: q(0.5),
            p90: q(0.9),
            p99: q(0.99),
            p999: q(0.999),
            max: if s.ok > 0 { s.latency.max() } else { 0 },
            first_chunk_p50: (!s.first_chunk.is_empty()).then(|| s.first_chunk.value_at_quantile(0.5)),
            reported_overhead_p50: (!s.reported_overhead.is_empty())
                .then(|| s.reported_overhead.value_at_quantile(0.5)),
            seconds: s.elapsed.as_secs_f64(),
            backends: s.backends.clone(),
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "requests": self.requests, "ok": self.ok, "errors": self.errors, "requests_per_second": self.rps,
            "latency_us": {"p50": self.p50, "p90": self.p90, "p99": self.p99, "p99_9": self.p999, "max": self.max},
            "first_chunk_p50_us": self.first_chunk_p50, "gateway_reported_overhead_p50_us": self.reported_overhead_p50,
            "seconds": self.seconds, "backends": self.backends,
        })
    }
}

pub struct Row {
    pub scenario: &'static str,
    pub phase: String,
    /// "direct" or "gateway".
    pub target: &'static str,
    pub summary: Summary,
}

pub struct Finding {
    pub scenario: &'static str,
    pub name: String,
    pub value: f64,
    pub unit: &'static str,
}

#[derive(Default)]
pub struct Report {
    pub params: Value,
    pub machine: Value,
    pub rows: Vec<Row>,
    pub findings: Vec<Finding>,
    pub charts: Vec<(String, Chart)>,
    /// Free-form per-scenario data (RSS series, failover cycles...).
    pub extra: BTreeMap<String, Value>,
}

impl Report {
    pub fn row(
        &mut self,
        scenario: &'static str,
        phase: impl Into<String>,
        target: &'static str,
        stats: &Stats,
    ) -> Summary {
        let summary = Summary::of(stats);
        self.rows.push(Row { scenario, phase: phase.into(), target, summary: summary.clone() });
        summary
    }

    pub fn finding(&mut self, scenario: &'static str, name: impl Into<String>, value: f64, unit: &'static str) {
        self.findings.push(Finding { scenario, name: name.into(), value, unit });
    }

    pub fn unexpected_errors(&self) -> u64 {
        self.rows.iter().map(|r| r.summary.errors.values().sum::<u64>()).sum()
    }

    pub fn to_json(&self) -> Value {
        let rows: Vec<Value> = self
            .rows
            .iter()
            .map(|r| json!({"scenario": r.scenario, "phase": r.phase, "target": r.target, "figures": r.summary.to_json()}))
            .collect();
        let findings: Vec<Value> = self
            .findings
            .iter()
            .map(|f| json!({"scenario": f.scenario, "name": f.name, "value": f.value, "unit": f.unit}))
            .collect();
        json!({
            "switchyard_version": env!("CARGO_PKG_VERSION"),
            "machine": self.machine,
            "parameters": self.params,
            "phases": rows,
            "findings": findings,
            "extra": self.extra,
        })
    }
}

pub fn print(report: &Report) {
    let mut scenario = "";
    for r in &report.rows {
        if r.scenario != scenario {
            scenario = r.scenario;
            println!("\n== {scenario} ==");
            println!(
                "{:<26} {:<8} {:>9} {:>6} {:>10} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9}",
                "phase",
                "target",
                "requests",
                "errors",
                "req/s",
                "p50 µs",
                "p90 µs",
                "p99 µs",
                "p99.9",
                "max µs",
                "1st chunk"
            );
        }
        let s = &r.summary;
        println!(
            "{:<26} {:<8} {:>9} {:>6} {:>10.0} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9}",
            r.phase,
            r.target,
            s.requests,
            s.requests - s.ok,
            s.rps,
            s.p50,
            s.p90,
            s.p99,
            s.p999,
            s.max,
            s.first_chunk_p50.map_or("-".to_owned(), |v| v.to_string()),
        );
        for (kind, n) in &s.errors {
            println!("{:<26}   error {kind}: {n}", "");
        }
    }
    if !report.findings.is_empty() {
        println!("\n== findings ==");
        for f in &report.findings {
            let value = if f.value.fract() == 0.0 || f.value.abs() >= 100.0 {
                format!("{:.0}", f.value)
            } else {
                format!("{:.2}", f.value)
            };
            println!("{:<16} {:<52} {:>10} {}", f.scenario, f.name, value, f.unit);
        }
    }
}
