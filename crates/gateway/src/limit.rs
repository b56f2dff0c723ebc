//! Per-key rate limits: requests/min, tokens/min and parallel requests, reserve-then-settle.
//! In memory by default (`limit/memory.rs`); the shape leaves room for a shared (Redis) limiter.

mod budget;
mod memory;

use std::time::Duration;

pub use budget::{period_end, period_start, BudgetPermit, Budgets, OverBudget};
pub use memory::{MemoryLimiter, Permit};

/// The limits of one key; `None` means unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Limits {
    pub rpm: Option<u32>,
    pub tpm: Option<u64>,
    pub max_parallel: Option<u32>,
}

impl Limits {
    pub fn is_unlimited(&self) -> bool {
        self.rpm.is_none() && self.tpm.is_none() && self.max_parallel.is_none()
    }
}

/// What a client is told about its limits (the `x-ratelimit-*` headers).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub requests: Option<(u64, u64, Duration)>,
    pub tokens: Option<(u64, u64, Duration)>,
}

/// A refusal: which limit, and when trying again can succeed.
#[derive(Debug, Clone, PartialEq)]
pub struct RateLimited {
    pub which: &'static str,
    pub limit: u64,
    pub retry_after: Duration,
    pub snapshot: Snapshot,
}

impl Snapshot {
    /// OpenAI-style headers: `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`.
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if let Some((limit, remaining, reset)) = self.requests {
            out.push(("x-ratelimit-limit-requests", limit.to_string()));
            out.push(("x-ratelimit-remaining-requests", remaining.to_string()));
            out.push(("x-ratelimit-reset-requests", format_reset(reset)));
        }
        if let Some((limit, remaining, reset)) = self.tokens {
            out.push(("x-ratelimit-limit-tokens", limit.to_string()));
            out.push(("x-ratelimit-remaining-tokens", remaining.to_string()));
            out.push(("x-ratelimit-reset-tokens", format_reset(reset)));
        }
        out
    }
}

/// `1.5s`, `12ms` — the format OpenAI uses in its reset headers.
fn format_reset(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else {
        let secs = format!("{:.3}", d.as_secs_f64());
        format!("{}s", secs.trim_end_matches('0').trim_end_matches('.'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reset_format() {
        assert_eq!(format_reset(Duration::from_millis(12)), "12ms");
        assert_eq!(format_reset(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format_reset(Duration::from_secs(60)), "60s");
    }
}
