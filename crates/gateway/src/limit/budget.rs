//! USD budgets per key, checked before the call against spend plus outstanding reservations
//! and settled with the real cost after it. Concurrent requests can overshoot a budget only by
//! how much their real cost exceeds the estimate they reserved. Spend for the current period is
//! read from the store once per key and period, then kept up to date in memory by settlements
//! (one gateway per database; a fleet keeps its counters in Redis: `limit/shared_budget.rs`).

use std::sync::{Arc, Mutex};

const DAY_MS: i64 = 86_400_000;

/// Start (unix ms, UTC) of the budget period containing `now_ms`; 0 for a lifetime budget.
pub fn period_start(period: Option<&str>, now_ms: i64) -> i64 {
    let day = now_ms.div_euclid(DAY_MS);
    match period {
        Some("daily") => day * DAY_MS,
        // 1970-01-01 was a Thursday; weeks start on Monday.
        Some("weekly") => (day - (day + 3).rem_euclid(7)) * DAY_MS,
        Some("monthly") => {
            let (y, m, _) = civil_from_days(day);
            days_from_civil(y, m, 1) * DAY_MS
        }
        _ => 0,
    }
}

/// When the period that started at `start` ends (unix ms); None for a lifetime budget.
pub fn period_end(period: Option<&str>, start: i64) -> Option<i64> {
    match period {
        Some("daily") => Some(start + DAY_MS),
        Some("weekly") => Some(start + 7 * DAY_MS),
        Some("monthly") => Some(period_start(Some("monthly"), start + 32 * DAY_MS)),
        _ => None,
    }
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from(if m > 2 { m - 3 } else { m + 9 });
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

struct KeySpend {
    period_start: i64,
    spent: f64,
    reserved: f64,
}

#[derive(Default)]
pub struct Budgets {
    keys: Mutex<crate::config::FastMap<String, KeySpend>>,
}

/// A refusal: the budget, and what is spent or reserved against it.
#[derive(Debug, PartialEq)]
pub struct OverBudget {
    pub budget: f64,
    pub committed: f64,
}

/// An admitted request's reservation; settle with the real cost, or drop to release it.
pub struct BudgetPermit {
    hold: Hold,
}

enum Hold {
    Local(LocalHold),
    Shared(super::shared_budget::Hold),
    /// A request charged to several budgets (its key's, its user's, its team's).
    Levels(Vec<Hold>),
}

impl BudgetPermit {
    pub fn shared(hold: super::shared_budget::Hold) -> BudgetPermit {
        BudgetPermit { hold: Hold::Shared(hold) }
    }

    /// One permit for a request reserved against two budgets: both reservations.
    pub fn join(self, other: BudgetPermit) -> BudgetPermit {
        let mut holds = match self.hold {
            Hold::Levels(holds) => holds,
            hold => vec![hold],
        };
        holds.push(other.hold);
        BudgetPermit { hold: Hold::Levels(holds) }
    }

    /// Replace the reservation with the real cost.
    pub fn settle(self, cost: f64) {
        self.hold.settle(cost);
    }
}

impl Hold {
    fn settle(self, cost: f64) {
        match self {
            Hold::Local(mut h) => h.release(cost),
            Hold::Shared(h) => h.settle(cost),
            Hold::Levels(holds) => holds.into_iter().for_each(|h| h.settle(cost)),
        }
    }
}

/// A reservation in this process's counters.
struct LocalHold {
    budgets: Arc<Budgets>,
    key: String,
    period_start: i64,
    reserved: f64,
}

impl Budgets {
    /// Is the period's spend for `key` known? If not, the caller loads it (`load`) first.
    pub fn needs_load(&self, key: &str, period_start: i64) -> bool {
        let keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        keys.get(key).is_none_or(|k| k.period_start != period_start)
    }

    /// Set the spend so far in this period, from the store. Keeps reservations in flight.
    pub fn load(&self, key: &str, period_start: i64, spent: f64) {
        let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        let entry = keys.entry(key.to_owned()).or_insert(KeySpend { period_start, spent, reserved: 0.0 });
        if entry.period_start != period_start {
            *entry = KeySpend { period_start, spent, reserved: entry.reserved };
        }
    }

    /// Reserve `estimate` USD against `budget`, or refuse.
    pub fn reserve(
        self: &Arc<Self>,
        key: &str,
        period_start: i64,
        budget: f64,
        estimate: f64,
    ) -> Result<BudgetPermit, OverBudget> {
        let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        let k = keys.entry(key.to_owned()).or_insert(KeySpend { period_start, spent: 0.0, reserved: 0.0 });
        let committed = k.spent + k.reserved;
        // A spent budget refuses even requests estimated to cost nothing.
        if committed + estimate > budget || committed >= budget {
            return Err(OverBudget { budget, committed });
        }
        k.reserved += estimate;
        let hold = LocalHold { budgets: self.clone(), key: key.to_owned(), period_start, reserved: estimate };
        Ok(BudgetPermit { hold: Hold::Local(hold) })
    }
}

impl LocalHold {
    fn release(&mut self, cost: f64) {
        let mut keys = self.budgets.keys.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = keys.get_mut(&self.key) {
            k.reserved = (k.reserved - self.reserved).max(0.0);
            if k.period_start == self.period_start {
                k.spent += cost;
            }
        }
        self.reserved = 0.0;
    }
}

impl Drop for LocalHold {
    fn drop(&mut self) {
        if self.reserved > 0.0 {
            self.release(0.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Clock;
    use std::time::Duration;

    #[test]
    fn a_daily_budget_spent_today_is_open_again_tomorrow_in_virtual_time() {
        let clock = Clock::manual(1_795_262_400_000); // 2026-11-21T12:00Z
        let budgets = Arc::new(Budgets::default());
        let today = period_start(Some("daily"), clock.unix_ms());
        budgets.load("k", today, 0.0);
        budgets.reserve("k", today, 1.0, 0.6).unwrap().settle(1.0);
        assert_eq!(budgets.reserve("k", today, 1.0, 0.0).err(), Some(OverBudget { budget: 1.0, committed: 1.0 }));
        let tomorrow_at = period_end(Some("daily"), today).unwrap();
        clock.advance(Duration::from_millis((tomorrow_at - clock.unix_ms()) as u64 - 1));
        let still_today = period_start(Some("daily"), clock.unix_ms());
        assert_eq!(still_today, today);
        assert!(!budgets.needs_load("k", still_today) && budgets.reserve("k", still_today, 1.0, 0.0).is_err());
        clock.advance(Duration::from_millis(1));
        let tomorrow = period_start(Some("daily"), clock.unix_ms());
        assert_eq!(tomorrow, tomorrow_at);
        assert!(budgets.needs_load("k", tomorrow), "a new period reads its spend from the store");
        budgets.load("k", tomorrow, 0.0);
        assert!(budgets.reserve("k", tomorrow, 1.0, 0.6).is_ok());
    }

    #[test]
    fn periods() {
        // 2026-11-21T13:45:00Z is a Saturday.
        let now = 1_795_268_700_000;
        assert_eq!(period_start(Some("daily"), now), 1_795_219_200_000); // 2026-11-21T00:00Z
        assert_eq!(period_start(Some("weekly"), now), 1_794_787_200_000); // Monday 2026-11-16
        assert_eq!(period_start(Some("monthly"), now), 1_793_491_200_000); // 2026-11-01
        assert_eq!(period_start(None, now), 0);
        assert_eq!(period_start(Some("monthly"), 0), 0);
        assert_eq!(period_end(Some("monthly"), 1_793_491_200_000), Some(1_796_083_200_000)); // 2026-12-01
        assert_eq!(period_end(None, 0), None);
        for d in [-1000, 0, 59, 60, 365, 10_000, 20_000, 30_000] {
            let (y, m, day) = civil_from_days(d);
            assert_eq!(days_from_civil(y, m, day), d);
        }
    }

    #[test]
    fn reservations_bound_the_overshoot() {
        let b = Arc::new(Budgets::default());
        b.load("k", 0, 0.0);
        let permits: Vec<_> = (0..10).filter_map(|_| b.reserve("k", 0, 1.0, 0.3).ok()).collect();
        assert_eq!(permits.len(), 3, "0.9 reserved; a 4th would pass 1.0");
        let mut it = permits.into_iter();
        it.next().unwrap().settle(0.1);
        drop(it.next()); // failed request: released
        let _held = b.reserve("k", 0, 1.0, 0.3).unwrap();
        let committed = b.reserve("k", 0, 1.0, 0.5).err().unwrap().committed;
        assert!((committed - 0.7).abs() < 1e-9, "{committed}");
    }

    #[test]
    fn a_new_period_reloads() {
        let b = Arc::new(Budgets::default());
        b.load("k", 0, 5.0);
        assert!(!b.needs_load("k", 0));
        assert!(b.needs_load("k", 86_400_000));
        assert!(b.reserve("k", 0, 5.0, 0.0).is_err(), "spent");
        b.load("k", 86_400_000, 0.0);
        assert!(b.reserve("k", 86_400_000, 5.0, 1.0).is_ok());
    }
}
