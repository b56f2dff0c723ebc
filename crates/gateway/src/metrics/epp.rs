//! The endpoint picker's counters: picks by pool and outcome, served endpoints as the data plane
//! reports them, malformed streams, and followed picks (`backends[].epp`) by outcome. Pools and
//! outcomes come from config and a fixed list, endpoints from a pool's members: bounded labels.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

#[derive(Default)]
pub struct EppMetrics {
    /// (metric, first label, second label) → count.
    counts: Mutex<BTreeMap<(&'static str, String, String), u64>>,
}

impl EppMetrics {
    fn add(&self, metric: &'static str, a: &str, b: &str) {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        *counts.entry((metric, a.to_owned(), b.to_owned())).or_default() += 1;
    }

    /// A pick asked of the picker: `picked`, or the error kind it was refused with.
    pub fn picked(&self, pool: &str, outcome: &str) {
        self.add("picks", pool, outcome);
    }

    /// The data plane says `endpoint` served a request of `pool`.
    pub fn served(&self, pool: &str, endpoint: &str) {
        self.add("served", pool, endpoint);
    }

    /// A stream that broke the protocol.
    pub fn malformed(&self, why: &'static str) {
        self.add("malformed", why, "");
    }

    /// A request of a pool following another picker: `followed`, `refused`, `failed_closed`,
    /// `failed_open`, `unknown_endpoint`.
    pub fn followed(&self, pool: &str, outcome: &'static str) {
        self.add("followed", pool, outcome);
    }

    pub fn render(&self, out: &mut String) {
        let counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if counts.is_empty() {
            return;
        }
        let series: [(&str, &str, &str); 4] = [
            ("picks", "switchyard_epp_picks_total", "Picks asked of the endpoint picker, by pool and outcome."),
            ("served", "switchyard_epp_served_total", "Requests the data plane reports served, by pool and endpoint."),
            (
                "malformed",
                "switchyard_epp_malformed_total",
                "ext_proc streams refused for breaking the protocol, by why.",
            ),
            (
                "followed",
                "switchyard_epp_followed_total",
                "Requests routed by another endpoint picker, by pool and outcome.",
            ),
        ];
        for (metric, name, help) in series {
            let mut lines = counts.iter().filter(|((m, _, _), _)| *m == metric).peekable();
            if lines.peek().is_none() {
                continue;
            }
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for ((_, a, b), n) in lines {
                let (a, b) = (super::mcp::escape(a), super::mcp::escape(b));
                let _ = match metric {
                    "picks" | "followed" => writeln!(out, "{name}{{pool=\"{a}\",outcome=\"{b}\"}} {n}"),
                    "served" => writeln!(out, "{name}{{pool=\"{a}\",endpoint=\"{b}\"}} {n}"),
                    _ => writeln!(out, "{name}{{why=\"{a}\"}} {n}"),
                };
            }
        }
    }
}
