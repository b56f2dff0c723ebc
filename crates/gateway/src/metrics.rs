//! Process-wide counters and histograms, rendered as Prometheus text by `render`. Lock-free
//! atomics on the hot path; per-backend figures live on each `Backend` and are read at scrape time.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

pub(crate) mod a2a;
pub mod epp;
pub(crate) mod mcp;
pub mod series;

use crate::endpoint::Endpoint;
use crate::route::backend::Backend;

/// Everything that can go wrong, as metric labels. Gateway error kinds plus upstream-side kinds.
const ERROR_KINDS: [&str; 27] = [
    "not_found",
    "content_blocked",
    "guardrail_unavailable",
    "unauthorized",
    "forbidden",
    "policy_denied",
    "rate_limited",
    "internal",
    "bad_request",
    "payload_too_large",
    "uri_too_long",
    "route_not_found",
    "method_not_allowed",
    "unsupported_media_type",
    "model_not_found",
    "no_healthy_backend",
    "overloaded",
    "upstream_timeout",
    "limits_unavailable",
    "bad_gateway",
    "unsupported_feature",
    "upstream_connect",
    "upstream_status",
    "stream_aborted",
    "stream_idle_timeout",
    "upstream_cooldown",
    "backends_cooling",
];

/// Bucket upper bounds in seconds, from 10 µs (gateway overhead) to 2 min (long generations).
const BOUNDS: [f64; 24] = [
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0,
];

/// How many buckets a histogram has (observations past the last bound are only in the count).
pub const BUCKETS: usize = BOUNDS.len();

/// The `q` quantile (0..1) of observations counted per bucket, in seconds: linear within the bucket
/// it falls in, as Prometheus's `histogram_quantile` estimates it. None when nothing was counted.
pub fn quantile(buckets: &[u64; BUCKETS], q: f64) -> Option<f64> {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = q * total as f64;
    let mut seen = 0u64;
    for (i, &n) in buckets.iter().enumerate() {
        if n > 0 && (seen + n) as f64 >= rank {
            let lower = if i == 0 { 0.0 } else { BOUNDS[i - 1] };
            let within = (rank - seen as f64) / n as f64;
            return Some(lower + (BOUNDS[i] - lower) * within.clamp(0.0, 1.0));
        }
        seen += n;
    }
    Some(BOUNDS[BUCKETS - 1])
}

pub struct Histogram {
    buckets: [AtomicU64; BOUNDS.len()],
    count: AtomicU64,
    sum_ns: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            count: AtomicU64::new(0),
            sum_ns: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        if let Some(i) = BOUNDS.iter().position(|b| secs <= *b) {
            self.buckets[i].fetch_add(1, Relaxed);
        }
        self.count.fetch_add(1, Relaxed);
        self.sum_ns.fetch_add(d.as_nanos().min(u64::MAX as u128) as u64, Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.count.load(Relaxed)
    }

    /// Each bucket's own count (not cumulative), for differencing two readings.
    pub fn buckets(&self) -> [u64; BUCKETS] {
        std::array::from_fn(|i| self.buckets[i].load(Relaxed))
    }

    pub(crate) fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0;
        for (bound, bucket) in BOUNDS.iter().zip(&self.buckets) {
            cumulative += bucket.load(Relaxed);
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {cumulative}");
        }
        let count = self.count.load(Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}");
        let brace = |s: &str| if s.is_empty() { String::new() } else { format!("{{{s}}}") };
        let _ = writeln!(out, "{name}_sum{} {}", brace(labels), self.sum_ns.load(Relaxed) as f64 / 1e9);
        let _ = writeln!(out, "{name}_count{} {count}", brace(labels));
    }
}

pub struct Metrics {
    /// `[endpoint][status class 1xx..5xx]`
    requests: [[AtomicU64; 5]; Endpoint::ALL.len()],
    errors: [AtomicU64; ERROR_KINDS.len()],
    pub retries: AtomicU64,
    /// Streams carried on at another backend after theirs failed mid-answer.
    pub streams_resumed: AtomicU64,
    /// Client connections open now, and those closed on arrival over `limits.max_connections`.
    pub connections_open: AtomicU64,
    pub connections_refused: AtomicU64,
    /// Client connections closed because the client stopped reading (`timeouts.client_write`).
    pub client_write_timeouts: AtomicU64,
    /// Time from request arrival to the end of the response body.
    pub duration: Histogram,
    /// Time the gateway itself spent: until response headers, minus time waiting on upstreams.
    pub overhead: Histogram,
    /// Time from sending upstream until its response headers arrived (last attempt).
    pub upstream_ttfb: Histogram,
    /// Time from request arrival to the first byte of the answer's body (metered requests).
    pub ttft: Histogram,
    /// Tokens of metered requests (prompt and completion together).
    pub tokens: AtomicU64,
    /// The last minutes of the figures above, read every few seconds for the console.
    pub series: series::Series,
    mcp: mcp::McpMetrics,
    a2a: a2a::A2aMetrics,
    /// The endpoint picker's picks and served endpoints (`epp.rs`), and followed picks.
    pub epp: epp::EppMetrics,
    /// Requests that fell back from one model to another: (from, to) → count. Labels come from
    /// the configured `fallbacks:`, so their number is bounded by config.
    fallbacks: std::sync::Mutex<std::collections::BTreeMap<(String, String), u64>>,
    /// Policy decisions by (rule, decision): rules are named in config or by an admin, so their
    /// number is bounded by them.
    policies: std::sync::Mutex<std::collections::BTreeMap<String, std::collections::BTreeMap<&'static str, u64>>>,
    /// Guardrail findings: guard → (kind, action) → count. Guards come from config, kinds from a
    /// fixed list (or a guard's own pattern names), so the labels are bounded. Keyed by guard
    /// first so counting a finding looks it up by `&str` (no allocation per finding).
    guardrails: std::sync::Mutex<std::collections::BTreeMap<String, VerdictCounts>>,
    /// How long the built-in detectors' scans take (`guard="builtin"`): one or two a guarded
    /// request, so their own histogram, not a lookup under the lock below.
    guardrail_builtin: Histogram,
    /// How long other guardrail checks take, by the guard's name (webhooks).
    guardrail_latency: std::sync::Mutex<std::collections::BTreeMap<String, Histogram>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            requests: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU64::new(0))),
            errors: std::array::from_fn(|_| AtomicU64::new(0)),
            retries: AtomicU64::new(0),
            streams_resumed: AtomicU64::new(0),
            connections_open: AtomicU64::new(0),
            connections_refused: AtomicU64::new(0),
            client_write_timeouts: AtomicU64::new(0),
            duration: Histogram::default(),
            overhead: Histogram::default(),
            upstream_ttfb: Histogram::default(),
            ttft: Histogram::default(),
            tokens: AtomicU64::new(0),
            series: series::Series::default(),
            mcp: mcp::McpMetrics::default(),
            a2a: a2a::A2aMetrics::default(),
            epp: epp::EppMetrics::default(),
            fallbacks: std::sync::Mutex::default(),
            policies: std::sync::Mutex::default(),
            guardrails: std::sync::Mutex::default(),
            guardrail_builtin: Histogram::default(),
            guardrail_latency: std::sync::Mutex::default(),
        }
    }
}

/// The label the built-in detectors' checks are timed under (one scan serves all of them).
const BUILTIN_GUARD: &str = "builtin";

/// One guard's findings: (kind, action) → count.
type VerdictCounts = std::collections::BTreeMap<(&'static str, &'static str), u64>;

impl Metrics {
    /// A guardrail's finding and what was done about it (`mask`, `block`, `log`).
    pub fn count_guardrail(&self, guard: &str, kind: &'static str, action: &'static str) {
        let mut map = self.guardrails.lock().unwrap_or_else(|p| p.into_inner());
        let by_kind = match map.get_mut(guard) {
            Some(by_kind) => by_kind,
            None => map.entry(guard.to_owned()).or_default(),
        };
        *by_kind.entry((kind, action)).or_default() += 1;
    }

    /// Guardrail verdicts so far, by action: mask (pseudonymize with it), block, log (the console's chart).
    pub fn guardrail_verdicts_by_action(&self) -> [u64; 3] {
        let map = self.guardrails.lock().unwrap_or_else(|p| p.into_inner());
        map.values().flatten().fold([0; 3], |mut sums, ((_, action), n)| {
            match *action {
                "mask" | "pseudonymize" => sums[0] += n,
                "block" => sums[1] += n,
                "log" => sums[2] += n,
                _ => {}
            }
            sums
        })
    }

    /// The built-in detectors' scan of one body took `took` (`guard="builtin"`).
    pub fn time_builtin_guardrails(&self, took: Duration) {
        self.guardrail_builtin.observe(took);
    }

    /// A guardrail check took `took`.
    pub fn time_guardrail(&self, guard: &str, took: Duration) {
        let mut map = self.guardrail_latency.lock().unwrap_or_else(|p| p.into_inner());
        match map.get(guard) {
            Some(h) => h.observe(took),
            None => map.entry(guard.to_owned()).or_default().observe(took),
        }
    }

    pub fn count_request(&self, endpoint: Endpoint, status: u16) {
        let class = (status / 100).clamp(1, 5) as usize - 1;
        self.requests[endpoint as usize][class].fetch_add(1, Relaxed);
    }

    /// One MCP tool call and how it ended.
    pub fn count_mcp_call(&self, server: &str, tool: &str, status: &'static str, latency: Duration) {
        self.mcp.count(server, tool, status, latency);
    }

    /// One A2A call: its agent, method (1.0 name), status and the state it left its task in.
    pub fn count_a2a_call(&self, agent: &str, method: &'static str, status: u16, state: Option<&str>) {
        self.a2a.count(agent, method, status, state);
    }

    /// MCP tool calls so far: server → tool → outcome → calls.
    pub fn mcp_calls(&self) -> mcp::CallCounts {
        self.mcp.calls()
    }

    /// Model requests answered so far by status class (1xx..5xx), every model endpoint together;
    /// not `Other` (health checks, scrapes, the admin API, the console's own polling).
    pub fn requests_by_class(&self) -> [u64; 5] {
        let mut out = [0; 5];
        for ep in Endpoint::ALL.into_iter().filter(|ep| *ep != Endpoint::Other) {
            for (class, counter) in self.requests[ep as usize].iter().enumerate() {
                out[class] += counter.load(Relaxed);
            }
        }
        out
    }

    /// A request fell back from model `from` to `to`.
    pub fn count_fallback(&self, from: &str, to: &str) {
        let mut counts = self.fallbacks.lock().unwrap_or_else(|p| p.into_inner());
        *counts.entry((from.to_owned(), to.to_owned())).or_default() += 1;
    }

    /// A policy rule decided (`allow`, `deny`), routed, set, spent a quota, or could not be
    /// evaluated for a request (`unevaluated`: an attribute it lacks). No allocation once a
    /// rule has been counted.
    pub fn count_policy(&self, rule: &str, decision: &'static str) {
        let mut counts = self.policies.lock().unwrap_or_else(|p| p.into_inner());
        let per_rule = match counts.get_mut(rule) {
            Some(per_rule) => per_rule,
            None => counts.entry(rule.to_owned()).or_default(),
        };
        *per_rule.entry(decision).or_default() += 1;
    }

    pub fn count_error(&self, kind: &str) {
        if let Some(i) = ERROR_KINDS.iter().position(|k| *k == kind) {
            self.errors[i].fetch_add(1, Relaxed);
        }
    }

    /// The guardrails' verdicts and check times, when any guard has been at work.
    fn render_guardrails(&self, out: &mut String) {
        let verdicts = self.guardrails.lock().unwrap_or_else(|p| p.into_inner());
        if !verdicts.is_empty() {
            out.push_str(
                "# HELP switchyard_guardrail_verdicts_total Guardrail findings, by guard, kind and the action taken.\n",
            );
            out.push_str("# TYPE switchyard_guardrail_verdicts_total counter\n");
            for (guard, by_kind) in verdicts.iter() {
                let guard = mcp::escape(guard);
                for ((kind, action), n) in by_kind {
                    let _ = writeln!(
                        out,
                        "switchyard_guardrail_verdicts_total{{guard=\"{guard}\",kind=\"{kind}\",action=\"{action}\"}} {n}"
                    );
                }
            }
        }
        drop(verdicts);
        let latency = self.guardrail_latency.lock().unwrap_or_else(|p| p.into_inner());
        let builtin = self.guardrail_builtin.count() > 0;
        if builtin || !latency.is_empty() {
            out.push_str(
                "# HELP switchyard_guardrail_duration_seconds Time a guardrail check took: the built-in detectors' \
                 one scan of a request or whole answer (guard=\"builtin\"), or a webhook's call (by guard name).\n",
            );
            out.push_str("# TYPE switchyard_guardrail_duration_seconds histogram\n");
            if builtin {
                let labels = format!("guard=\"{BUILTIN_GUARD}\"");
                self.guardrail_builtin.render(out, "switchyard_guardrail_duration_seconds", &labels);
            }
            for (guard, h) in latency.iter() {
                h.render(out, "switchyard_guardrail_duration_seconds", &format!("guard=\"{}\"", mcp::escape(guard)));
            }
        }
        drop(latency);
    }

    pub fn render(&self, backends: &[std::sync::Arc<Backend>]) -> String {
        let mut out = String::with_capacity(8192);
        out.push_str("# HELP switchyard_requests_total Requests answered, by endpoint and status class.\n");
        out.push_str("# TYPE switchyard_requests_total counter\n");
        for ep in Endpoint::ALL {
            for (class, counter) in self.requests[ep as usize].iter().enumerate() {
                let _ = writeln!(
                    out,
                    "switchyard_requests_total{{endpoint=\"{}\",code=\"{}xx\"}} {}",
                    ep.as_str(),
                    class + 1,
                    counter.load(Relaxed)
                );
            }
        }
        out.push_str("# HELP switchyard_errors_total Errors, by kind.\n# TYPE switchyard_errors_total counter\n");
        for (kind, counter) in ERROR_KINDS.iter().zip(&self.errors) {
            let _ = writeln!(out, "switchyard_errors_total{{kind=\"{kind}\"}} {}", counter.load(Relaxed));
        }
        self.render_guardrails(&mut out);
        self.epp.render(&mut out);
        let policies = self.policies.lock().unwrap_or_else(|p| p.into_inner());
        if !policies.is_empty() {
            out.push_str(
                "# HELP switchyard_policy_decisions_total Requests a policy rule decided, routed or refused.\n",
            );
            out.push_str("# TYPE switchyard_policy_decisions_total counter\n");
            for (rule, decisions) in policies.iter() {
                let rule = mcp::escape(rule);
                for (decision, n) in decisions {
                    let _ = writeln!(
                        out,
                        "switchyard_policy_decisions_total{{rule=\"{rule}\",decision=\"{decision}\"}} {n}"
                    );
                }
            }
        }
        drop(policies);
        let fallbacks = self.fallbacks.lock().unwrap_or_else(|p| p.into_inner());
        if !fallbacks.is_empty() {
            out.push_str("# HELP switchyard_fallbacks_total Requests that fell back from a model to another.\n");
            out.push_str("# TYPE switchyard_fallbacks_total counter\n");
            for ((from, to), n) in fallbacks.iter() {
                let (from, to) = (mcp::escape(from), mcp::escape(to));
                let _ = writeln!(out, "switchyard_fallbacks_total{{from=\"{from}\",to=\"{to}\"}} {n}");
            }
        }
        drop(fallbacks);
        out.push_str("# HELP switchyard_retries_total Upstream attempts beyond the first.\n");
        out.push_str("# TYPE switchyard_retries_total counter\n");
        let _ = writeln!(out, "switchyard_retries_total {}", self.retries.load(Relaxed));
        for (name, help, kind, value) in [
            (
                "switchyard_streams_resumed_total",
                "Streams carried on at another backend after theirs failed mid-answer.",
                "counter",
                &self.streams_resumed,
            ),
            ("switchyard_connections_open", "Client connections open now.", "gauge", &self.connections_open),
            (
                "switchyard_connections_refused_total",
                "Client connections closed on arrival: limits.max_connections were open.",
                "counter",
                &self.connections_refused,
            ),
            (
                "switchyard_client_write_timeouts_total",
                "Client connections closed because the client stopped reading for timeouts.client_write.",
                "counter",
                &self.client_write_timeouts,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {}", value.load(Relaxed));
        }
        for (name, help, h) in [
            ("switchyard_request_duration_seconds", "Request arrival to end of response body.", &self.duration),
            (
                "switchyard_overhead_seconds",
                "Time spent in the gateway itself, upstream waits excluded.",
                &self.overhead,
            ),
            ("switchyard_upstream_ttfb_seconds", "Upstream send to response headers.", &self.upstream_ttfb),
            (
                "switchyard_time_to_first_token_seconds",
                "Request arrival to the first byte of the answer's body (metered requests).",
                &self.ttft,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
            h.render(&mut out, name, "");
        }
        let _ = writeln!(
            out,
            "# HELP switchyard_tokens_total Tokens of metered requests, prompt and completion.\n\
             # TYPE switchyard_tokens_total counter\nswitchyard_tokens_total {}",
            self.tokens.load(Relaxed)
        );
        render_backends(&mut out, backends);
        self.mcp.render(&mut out);
        self.a2a.render(&mut out);
        out
    }
}

/// A per-backend series: name, help text, and how to read it off a backend.
type BackendSeries = (&'static str, &'static str, fn(&Backend) -> u64);

fn render_backends(out: &mut String, backends: &[std::sync::Arc<Backend>]) {
    let gauges: [BackendSeries; 7] = [
        ("switchyard_backend_up", "1 when the backend passes health checks.", |b| b.health.is_up() as u64),
        ("switchyard_backend_circuit_open", "1 when the backend's circuit breaker is not closed.", |b| {
            b.health.breaker_open() as u64
        }),
        ("switchyard_backend_in_flight", "Requests in flight to the backend.", |b| b.in_flight() as u64),
        (
            "switchyard_backend_idle_connections",
            "Keep-alive connections to the backend waiting for a request (plain-http backends).",
            |b| b.pool.as_ref().map_or(0, |p| p.idle_count() as u64),
        ),
        ("switchyard_backend_requests_total", "Upstream attempts sent to the backend.", |b| {
            b.stats.attempts.load(Relaxed)
        }),
        ("switchyard_backend_failures_total", "Failed upstream attempts (transport, timeout or 5xx).", |b| {
            b.stats.failures.load(Relaxed)
        }),
        ("switchyard_backend_probes_total", "Health probes of the backend (start-up and every round).", |b| {
            b.stats.probes.load(Relaxed)
        }),
    ];
    for (name, help, get) in gauges {
        let kind = if name.ends_with("_total") { "counter" } else { "gauge" };
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for b in backends {
            let _ = writeln!(out, "{name}{{backend=\"{}\"}} {}", b.name(), get(b));
        }
    }
    let _ = writeln!(
        out,
        "# HELP switchyard_backend_models Models the backend serves.\n# TYPE switchyard_backend_models gauge"
    );
    for b in backends {
        let _ = writeln!(out, "switchyard_backend_models{{backend=\"{}\"}} {}", b.name(), b.models().len());
    }
    let _ = writeln!(
        out,
        "# HELP switchyard_backend_capacity Requests the backend takes at once: max_concurrency, else the slots it reports (absent: unknown).\n\
         # TYPE switchyard_backend_capacity gauge"
    );
    for b in backends {
        if let Some(capacity) = b.capacity() {
            let _ = writeln!(out, "switchyard_backend_capacity{{backend=\"{}\"}} {capacity}", b.name());
        }
    }
    let _ = writeln!(
        out,
        "# HELP switchyard_backend_waiting Requests queued at the backend, as it last reported (fresh readings only).\n\
         # TYPE switchyard_backend_waiting gauge"
    );
    for b in backends {
        if let Some(waiting) = b.signals.waiting() {
            let _ = writeln!(out, "switchyard_backend_waiting{{backend=\"{}\"}} {waiting}", b.name());
        }
    }
    render_pool_keys(out, backends);
}

/// Each pool key's requests, rests and state, for the backends that have a pool.
fn render_pool_keys(out: &mut String, backends: &[std::sync::Arc<Backend>]) {
    let pooled: Vec<(&str, &crate::route::keys::BackendKeys)> =
        backends.iter().filter_map(|b| Some((b.name(), &**b.keys.as_ref()?))).collect();
    if pooled.is_empty() {
        return;
    }
    let now_ms = u64::try_from(crate::clock::unix_ms()).unwrap_or(0);
    crate::route::keys::BackendKeys::render(&pooled, now_ms, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_is_cumulative() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(20));
        h.observe(Duration::from_millis(2));
        let mut s = String::new();
        h.render(&mut s, "x", "");
        assert!(s.contains("x_bucket{le=\"0.000025\"} 1"), "{s}");
        assert!(s.contains("x_bucket{le=\"0.0025\"} 2"), "{s}");
        assert!(s.contains("x_bucket{le=\"+Inf\"} 2"), "{s}");
        assert!(s.contains("x_count 2"), "{s}");
    }

    #[test]
    fn quantiles_interpolate_within_a_bucket() {
        let h = Histogram::default();
        assert_eq!(quantile(&h.buckets(), 0.5), None);
        for _ in 0..100 {
            h.observe(Duration::from_millis(7)); // the (5 ms, 10 ms] bucket
        }
        let p50 = quantile(&h.buckets(), 0.5).unwrap_or_default();
        assert!((p50 - 0.0075).abs() < 1e-9, "{p50}");
        h.observe(Duration::from_secs(1000)); // past every bound
        assert!(quantile(&h.buckets(), 0.99).unwrap_or_default() <= 0.01);
    }

    #[test]
    fn requests_by_class() {
        let m = Metrics::default();
        m.count_request(Endpoint::ChatCompletions, 200);
        m.count_request(Endpoint::ChatCompletions, 503);
        m.count_error("no_healthy_backend");
        let s = m.render(&[]);
        assert!(s.contains("switchyard_requests_total{endpoint=\"chat_completions\",code=\"2xx\"} 1"));
        assert!(s.contains("switchyard_requests_total{endpoint=\"chat_completions\",code=\"5xx\"} 1"));
        assert!(s.contains("switchyard_errors_total{kind=\"no_healthy_backend\"} 1"));
    }
}
