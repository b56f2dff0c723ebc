//! Budgets across a fleet (`redis:`): one counter per key and period in Redis, in integer
//! micro-dollars — spent, and reserved by requests in flight. A request reserves its estimate
//! (prompt plus `max_tokens` at the output price) atomically against the budget and settles to
//! its real cost after, so the fleet overshoots only by what in-flight requests cost beyond
//! their estimates. The counter is seeded from the database the first time any instance needs
//! it (set only if absent, so N instances never seed it N times) and expires after its period.
//! While Redis is away, budgeted requests are refused (503): reservations already made settle
//! when Redis is back or expire with their period.

use std::sync::Arc;

use redis::Script;

use crate::shared::{Shared, PREFIX};

/// Reserve against the budget. KEYS: the counter. ARGV: budget, estimate, seed ('' for none:
/// answer -1 when the counter is absent), expiry in ms (0: none). Returns {admitted (1, 0, or
/// -1 for "seed me"), spent + reserved before this request}.
const RESERVE: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then
  if ARGV[3] == '' then return {-1, 0} end
  redis.call('HSET', KEYS[1], 'spent', ARGV[3], 'reserved', 0)
  if tonumber(ARGV[4]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[4]) end
end
local committed = tonumber(redis.call('HGET', KEYS[1], 'spent') or 0) + tonumber(redis.call('HGET', KEYS[1], 'reserved') or 0)
local budget, estimate = tonumber(ARGV[1]), tonumber(ARGV[2])
if committed + estimate > budget or committed >= budget then return {0, committed} end
redis.call('HINCRBY', KEYS[1], 'reserved', estimate)
return {1, committed}
";

/// Replace a reservation with the real cost (nothing when the counter is gone: it will be
/// seeded again from the database, which has the cost). ARGV: reserved, cost.
const SETTLE: &str = r"
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HINCRBY', KEYS[1], 'reserved', -tonumber(ARGV[1]))
  redis.call('HINCRBY', KEYS[1], 'spent', tonumber(ARGV[2]))
end
return 1
";

pub struct SharedBudgets {
    shared: Arc<Shared>,
    reserve: Script,
    settle: Script,
}

/// What a reservation attempt found.
pub enum Reserved {
    Held(Hold),
    /// Spent plus reserved (micro-dollars) already at or over the budget.
    Over(i64),
    /// No counter yet: read the period's spend from the database and try again with it.
    NeedsSeed,
    Unavailable,
}

/// Dollars as integer micro-dollars (what the counters hold).
pub fn micro(usd: f64) -> i64 {
    (usd * 1e6).round() as i64
}

impl SharedBudgets {
    pub fn new(shared: Arc<Shared>) -> Arc<SharedBudgets> {
        Arc::new(SharedBudgets { shared, reserve: Script::new(RESERVE), settle: Script::new(SETTLE) })
    }

    /// Reserve `estimate` USD of `key`'s `budget` for the period from `period_start` to
    /// `period_end` (unix ms; no end: a lifetime budget).
    pub async fn reserve(
        self: &Arc<Self>,
        key: &str,
        (period_start, period_end): (i64, Option<i64>),
        budget: f64,
        estimate: f64,
        seed: Option<f64>,
        now_ms: i64,
    ) -> Reserved {
        let counter = format!("{PREFIX}{{{key}}}:spend:{period_start}");
        let estimate = micro(estimate);
        // A period's counter outlives it by an hour (late settlements); a lifetime one is
        // dropped after a quiet week and seeded again from the database.
        let expiry_ms = period_end.map_or(7 * 86_400_000, |end| (end - now_ms).max(0) + 3_600_000);
        let seed = seed.map(|s| micro(s).to_string()).unwrap_or_default();
        let answer = self
            .shared
            .call(|mut c| {
                let mut call = self.reserve.key(&counter);
                call.arg(micro(budget)).arg(estimate).arg(&seed).arg(expiry_ms);
                async move { call.invoke_async::<Vec<i64>>(&mut c).await }
            })
            .await;
        match answer.as_deref() {
            Ok([1, _]) => Reserved::Held(Hold { budgets: self.clone(), counter, reserved: estimate, done: false }),
            Ok([-1, _]) => Reserved::NeedsSeed,
            Ok([_, committed]) => Reserved::Over(*committed),
            _ => Reserved::Unavailable,
        }
    }
}

/// A request's reservation in the fleet's counter; settle with the real cost, or drop to
/// release it.
pub struct Hold {
    budgets: Arc<SharedBudgets>,
    counter: String,
    reserved: i64,
    done: bool,
}

impl Hold {
    pub fn settle(mut self, cost: f64) {
        self.finish(micro(cost));
    }

    fn finish(&mut self, cost: i64) {
        self.done = true;
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let (budgets, counter, reserved) = (self.budgets.clone(), self.counter.clone(), self.reserved);
        // Off the request's path; a settlement Redis misses is in the database, which seeds
        // the next counter.
        runtime.spawn(async move {
            let _ = budgets
                .shared
                .call(|mut c| {
                    let mut call = budgets.settle.key(&counter);
                    call.arg(reserved).arg(cost);
                    async move { call.invoke_async::<i64>(&mut c).await }
                })
                .await;
        });
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if !self.done {
            self.finish(0);
        }
    }
}
