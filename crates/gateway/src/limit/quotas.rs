//! `quotas:` — the counters policy `cost` rules charge: at most `limit` per fixed `period`
//! window (aligned to the Unix epoch), one counter for the whole gateway. With `redis:` the
//! fleet shares it: a Lua script adds the charge only if it fits, so instances never overshoot
//! together. Amounts are counted in millionths, as integers, so sums are exact.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use redis::Script;

use crate::config::policies::Quota;
use crate::shared::{Shared, PREFIX};

/// Millionths of a unit: what the counters hold.
fn micro(amount: f64) -> u64 {
    (amount * 1e6).round().clamp(0.0, u64::MAX as f64) as u64
}

/// KEYS: the window's counter. ARGV: the charge, the limit (millionths), the window's TTL (ms).
/// Returns 1 when charged, 0 when it would pass the limit.
static CHARGE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
        local used = tonumber(redis.call('GET', KEYS[1]) or '0')
        if used + tonumber(ARGV[1]) > tonumber(ARGV[2]) then return 0 end
        redis.call('INCRBY', KEYS[1], ARGV[1])
        redis.call('PEXPIRE', KEYS[1], ARGV[3])
        return 1
        ",
    )
});

/// This process's counters (also what serves when Redis cannot be reached), by quota name:
/// (window, millionths used). They live across reloads.
#[derive(Default)]
pub struct QuotaCounters {
    local: Mutex<HashMap<String, (u64, u64)>>,
}

impl QuotaCounters {
    /// Charge `amount` against quota `name` at `now_ms`: false when it does not fit. The fleet's
    /// answer is waited for past `redis.timeout` (until `until`, the request's deadline): a slow
    /// answer is still the answer, and counting here instead would let the fleet overshoot.
    pub async fn charge(
        &self,
        shared: Option<&Shared>,
        (name, quota): (&str, &Quota),
        amount: f64,
        now_ms: u64,
        until: std::time::Instant,
    ) -> bool {
        let period_ms = (quota.period.as_millis() as u64).max(1);
        let window = now_ms / period_ms;
        let (charge, limit) = (micro(amount), micro(quota.limit));
        if let Some(shared) = shared {
            let key = format!("{PREFIX}quota:{name}:{window}");
            let invoke = |mut c: redis::aio::ConnectionManager| {
                let mut call = CHARGE.prepare_invoke();
                call.key(&key).arg(charge).arg(limit).arg(period_ms * 2);
                async move { call.invoke_async::<i64>(&mut c).await }
            };
            let charged = shared.call_held(invoke, until).await;
            match charged {
                Ok(n) => return n == 1,
                Err(e) => {
                    tracing::warn!(quota = name, error = ?e, "the fleet's quota counter cannot be reached: counting here")
                }
            }
        }
        self.charge_here(name, window, charge, limit)
    }

    fn charge_here(&self, name: &str, window: u64, charge: u64, limit: u64) -> bool {
        let mut local = self.local.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let used = local.entry(name.to_owned()).or_insert((window, 0));
        if used.0 != window {
            *used = (window, 0);
        }
        if used.1.saturating_add(charge) > limit {
            return false;
        }
        used.1 += charge;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_holds_its_limit_exactly_and_the_next_starts_afresh() {
        let counters = QuotaCounters::default();
        let (charge, limit) = (micro(0.1), micro(1.0));
        let charged = (0..20).filter(|_| counters.charge_here("q", 7, charge, limit)).count();
        assert_eq!(charged, 10, "ten charges of 0.1 fit in 1.0, exactly");
        assert!(counters.charge_here("q", 8, charge, limit), "a new window");
    }
}
