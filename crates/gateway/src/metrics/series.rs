//! The last five minutes of the gateway's own figures, one reading every two seconds, for the
//! console's live charts: cumulative counters and histogram buckets are kept as read, and rates
//! and quantiles are the differences between readings, as Prometheus computes them. Read by a
//! timer task the server runs; nothing here is touched by a request.

use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use super::{quantile, Metrics, BUCKETS};
use crate::route::backend::Backend;

/// Seconds between readings.
pub const STEP_S: u64 = 2;
/// Readings kept: five minutes.
const KEEP: usize = 151;

/// One backend as it was at a reading.
#[derive(Clone, Debug, Serialize)]
pub struct BackendReading {
    #[serde(skip)]
    pub name: Arc<str>,
    pub up: bool,
    pub breaker_open: bool,
    pub in_flight: usize,
}

/// One reading of cumulative figures.
#[derive(Clone)]
struct Reading {
    unix_s: u64,
    requests: u64,
    errors: u64,
    tokens: u64,
    duration: [u64; BUCKETS],
    ttft: [u64; BUCKETS],
    overhead: [u64; BUCKETS],
    /// Guardrail verdicts so far, by action: mask, block, log.
    verdicts: [u64; 3],
    backends: Vec<BackendReading>,
}

/// What happened between two readings (or over a span of them).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Rates {
    pub rps: f64,
    /// Share of answers that were 5xx; None with no answers.
    pub error_rate: Option<f64>,
    pub p50_ms: Option<f64>,
    pub p95_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub ttft_p50_ms: Option<f64>,
    pub overhead_p50_us: Option<f64>,
    pub tokens_per_s: f64,
    /// Guardrail verdicts per second, by action.
    pub guard_masks_per_s: f64,
    pub guard_blocks_per_s: f64,
    pub guard_logs_per_s: f64,
}

/// The series the console charts: one entry per step, oldest first, same length each.
#[derive(Debug, Default, Serialize)]
pub struct Charts {
    pub t: Vec<u64>,
    pub rps: Vec<f64>,
    pub error_rate: Vec<Option<f64>>,
    pub p50_ms: Vec<Option<f64>>,
    pub p95_ms: Vec<Option<f64>>,
    pub p99_ms: Vec<Option<f64>>,
    pub ttft_p50_ms: Vec<Option<f64>>,
    pub overhead_p50_us: Vec<Option<f64>>,
    pub tokens_per_s: Vec<f64>,
    pub guard_masks_per_s: Vec<f64>,
    pub guard_blocks_per_s: Vec<f64>,
    pub guard_logs_per_s: Vec<f64>,
}

#[derive(Default)]
pub struct Series {
    readings: Mutex<VecDeque<Reading>>,
}

fn diff(a: &[u64; BUCKETS], b: &[u64; BUCKETS]) -> [u64; BUCKETS] {
    std::array::from_fn(|i| b[i].saturating_sub(a[i]))
}

fn rates(from: &Reading, to: &Reading) -> Rates {
    let secs = to.unix_s.saturating_sub(from.unix_s).max(1) as f64;
    let requests = to.requests.saturating_sub(from.requests);
    let errors = to.errors.saturating_sub(from.errors);
    let q = |h: [u64; BUCKETS], q: f64, scale: f64| quantile(&h, q).map(|s| s * scale);
    let duration = diff(&from.duration, &to.duration);
    let verdicts = |i: usize| to.verdicts[i].saturating_sub(from.verdicts[i]) as f64 / secs;
    Rates {
        rps: requests as f64 / secs,
        error_rate: (requests > 0).then(|| errors as f64 / requests as f64),
        p50_ms: q(duration, 0.5, 1e3),
        p95_ms: q(duration, 0.95, 1e3),
        p99_ms: q(duration, 0.99, 1e3),
        ttft_p50_ms: q(diff(&from.ttft, &to.ttft), 0.5, 1e3),
        overhead_p50_us: q(diff(&from.overhead, &to.overhead), 0.5, 1e6),
        tokens_per_s: to.tokens.saturating_sub(from.tokens) as f64 / secs,
        guard_masks_per_s: verdicts(0),
        guard_blocks_per_s: verdicts(1),
        guard_logs_per_s: verdicts(2),
    }
}

impl Series {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Reading>> {
        self.readings.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Take a reading now (the server's timer calls this every `STEP_S`).
    pub fn sample(&self, metrics: &Metrics, backends: &[Arc<Backend>], unix_s: u64) {
        let classes = metrics.requests_by_class();
        let reading = Reading {
            unix_s,
            requests: classes.iter().sum(),
            errors: classes[4],
            tokens: metrics.tokens.load(Relaxed),
            duration: metrics.duration.buckets(),
            ttft: metrics.ttft.buckets(),
            overhead: metrics.overhead.buckets(),
            verdicts: metrics.guardrail_verdicts_by_action(),
            backends: backends
                .iter()
                .map(|b| BackendReading {
                    name: b.name().into(),
                    up: b.health.is_up(),
                    breaker_open: b.health.breaker_open(),
                    in_flight: b.in_flight(),
                })
                .collect(),
        };
        let mut readings = self.lock();
        if readings.len() == KEEP {
            readings.pop_front();
        }
        readings.push_back(reading);
    }

    /// Rates and quantiles per step, oldest first.
    pub fn charts(&self) -> Charts {
        let readings = self.lock();
        let mut c = Charts::default();
        for (a, b) in readings.iter().zip(readings.iter().skip(1)) {
            let r = rates(a, b);
            c.t.push(b.unix_s);
            c.rps.push(r.rps);
            c.error_rate.push(r.error_rate);
            c.p50_ms.push(r.p50_ms);
            c.p95_ms.push(r.p95_ms);
            c.p99_ms.push(r.p99_ms);
            c.ttft_p50_ms.push(r.ttft_p50_ms);
            c.overhead_p50_us.push(r.overhead_p50_us);
            c.tokens_per_s.push(r.tokens_per_s);
            c.guard_masks_per_s.push(r.guard_masks_per_s);
            c.guard_blocks_per_s.push(r.guard_blocks_per_s);
            c.guard_logs_per_s.push(r.guard_logs_per_s);
        }
        c
    }

    /// Rates over the last `secs` seconds of readings (fewer when there are fewer).
    pub fn recent(&self, secs: u64) -> Rates {
        let readings = self.lock();
        let Some(last) = readings.back() else { return Rates::default() };
        let since = last.unix_s.saturating_sub(secs);
        let first = readings.iter().find(|r| r.unix_s >= since).unwrap_or(last);
        if std::ptr::eq(first, last) {
            return Rates::default();
        }
        rates(first, last)
    }

    /// Each backend's readings, oldest first: `(unix_s, reading)`.
    pub fn backend_history(&self, name: &str) -> Vec<(u64, BackendReading)> {
        self.lock()
            .iter()
            .filter_map(|r| r.backends.iter().find(|b| &*b.name == name).map(|b| (r.unix_s, b.clone())))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn rates_are_differences_between_readings() {
        let m = Metrics::default();
        let s = Series::default();
        s.sample(&m, &[], 100);
        assert_eq!(s.recent(60), Rates::default(), "one reading has no rate");
        for _ in 0..9 {
            m.count_request(crate::endpoint::Endpoint::ChatCompletions, 200);
            m.duration.observe(Duration::from_millis(7));
        }
        m.count_request(crate::endpoint::Endpoint::ChatCompletions, 502);
        m.count_request(crate::endpoint::Endpoint::Other, 200); // a scrape: not model traffic
        m.tokens.fetch_add(40, Relaxed);
        (0..6).for_each(|_| m.count_guardrail("pii", "email", "mask"));
        m.count_guardrail("blocker", "keyword", "block");
        s.sample(&m, &[], 102);
        let r = s.recent(60);
        assert_eq!(r.rps, 5.0);
        assert_eq!(r.error_rate, Some(0.1));
        assert_eq!(r.tokens_per_s, 20.0);
        assert_eq!((r.guard_masks_per_s, r.guard_blocks_per_s, r.guard_logs_per_s), (3.0, 0.5, 0.0));
        assert!(r.p50_ms.is_some_and(|p| (5.0..=10.0).contains(&p)), "{r:?}");
        s.sample(&m, &[], 104);
        let c = s.charts();
        assert_eq!(c.t, vec![102, 104]);
        assert_eq!(c.rps, vec![5.0, 0.0]);
        assert_eq!(c.error_rate, vec![Some(0.1), None]);
        assert_eq!(c.guard_masks_per_s, vec![3.0, 0.0]);
    }
}
