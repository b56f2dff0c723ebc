//! The in-memory limiter: per key, a sliding 60-second window of admitted requests and token
//! reservations kept as 61 one-second buckets with running sums, plus a parallel-request counter,
//! all checked and committed under one lock so that N concurrent requests against a limit of L
//! admit exactly L. Token limits reserve an estimate up front and settle to the real count after.
//!
//! Why buckets, not a log of every request: a log costs memory and cache misses in proportion to
//! the key's traffic (600k entries for a key doing 10k req/s), and settling searched it. Buckets
//! are O(1) per request and ~1 KB per key. An admission counts for 60 to 61 s (until its second's
//! bucket leaves the window), so no rolling 60-second span ever admits more than the limit.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Limits, Permit, RateLimited, Snapshot};
use crate::clock::Clock;

/// Buckets in the window: an admission in second `s` counts while `now_s - s <= 60`.
const BUCKETS: usize = 61;

struct KeyWindow {
    /// The latest second rotated in (seconds since the limiter's epoch).
    head: u64,
    requests: [u32; BUCKETS],
    tokens: [u64; BUCKETS],
    request_sum: u64,
    token_sum: u64,
    parallel: u32,
}

impl KeyWindow {
    fn new(now_s: u64) -> Box<KeyWindow> {
        Box::new(KeyWindow {
            head: now_s,
            requests: [0; BUCKETS],
            tokens: [0; BUCKETS],
            request_sum: 0,
            token_sum: 0,
            parallel: 0,
        })
    }

    /// Move the window to `now_s`, dropping the seconds that left it.
    fn advance(&mut self, now_s: u64) {
        if now_s <= self.head {
            return;
        }
        if now_s - self.head >= BUCKETS as u64 {
            self.requests = [0; BUCKETS];
            self.tokens = [0; BUCKETS];
            (self.request_sum, self.token_sum) = (0, 0);
        } else {
            for s in self.head + 1..=now_s {
                let i = (s % BUCKETS as u64) as usize;
                self.request_sum -= u64::from(self.requests[i]);
                self.token_sum -= self.tokens[i];
                (self.requests[i], self.tokens[i]) = (0, 0);
            }
        }
        self.head = now_s;
    }

    /// The live seconds, oldest first, with their bucket index.
    fn seconds(&self) -> impl Iterator<Item = (u64, usize)> {
        let oldest = self.head.saturating_sub(BUCKETS as u64 - 1);
        (oldest..=self.head).map(|s| (s, (s % BUCKETS as u64) as usize))
    }

    /// How long until what was admitted in second `s` stops counting.
    fn expiry(s: u64, now_ms: u64) -> Duration {
        Duration::from_millis(((s + BUCKETS as u64) * 1000).saturating_sub(now_ms))
    }

    /// Why one more request with `estimate` tokens would break `limits`, if it would.
    fn refusal(&self, limits: &Limits, estimate: u64, now_ms: u64) -> Option<RateLimited> {
        if let Some(max) = limits.max_parallel {
            if self.parallel >= max {
                return Some(RateLimited {
                    which: "parallel",
                    limit: u64::from(max),
                    retry_after: Duration::from_secs(1),
                    snapshot: self.snapshot(limits, now_ms),
                    level: 0,
                });
            }
        }
        if let Some(rpm) = limits.rpm {
            if self.request_sum >= u64::from(rpm) {
                // When enough of the oldest admissions stop counting for one more to fit.
                let mut freed = u64::from(rpm).saturating_sub(self.request_sum);
                let at = self.seconds().find(|&(_, i)| {
                    freed += u64::from(self.requests[i]);
                    freed >= 1
                });
                return Some(RateLimited {
                    which: "requests",
                    limit: u64::from(rpm),
                    retry_after: at.map_or(Duration::from_secs(1), |(s, _)| KeyWindow::expiry(s, now_ms)),
                    snapshot: self.snapshot(limits, now_ms),
                    level: 0,
                });
            }
        }
        let tpm = limits.tpm?;
        if self.token_sum + estimate <= tpm {
            return None;
        }
        // When enough of the oldest reservations stop counting for this one to fit (an estimate
        // above the whole limit never fits: the window's length is the answer).
        let mut freed = tpm.saturating_sub(self.token_sum);
        let at = self.seconds().find(|&(_, i)| {
            freed += self.tokens[i];
            freed >= estimate
        });
        Some(RateLimited {
            which: "tokens",
            limit: tpm,
            retry_after: at
                .map_or(Duration::from_secs(BUCKETS as u64), |(s, _)| KeyWindow::expiry(s, now_ms))
                .max(Duration::from_millis(1)),
            snapshot: self.snapshot(limits, now_ms),
            level: 0,
        })
    }

    /// Count one admitted request: its token reservation, and whether it holds a parallel slot.
    fn charge(&mut self, limits: &Limits, estimate: u64, now_s: u64) -> (Option<Reservation>, bool) {
        let i = (now_s % BUCKETS as u64) as usize;
        if limits.rpm.is_some() {
            self.requests[i] += 1;
            self.request_sum += 1;
        }
        let reservation = limits.tpm.map(|_| {
            self.tokens[i] += estimate;
            self.token_sum += estimate;
            Reservation { second: now_s, tokens: estimate }
        });
        let parallel = limits.max_parallel.is_some();
        if parallel {
            self.parallel += 1;
        }
        (reservation, parallel)
    }

    fn snapshot(&self, limits: &Limits, now_ms: u64) -> Snapshot {
        let reset = |nonzero: &dyn Fn(usize) -> bool| {
            self.seconds().find(|&(_, i)| nonzero(i)).map_or(Duration::ZERO, |(s, _)| Self::expiry(s, now_ms))
        };
        Snapshot {
            requests: limits.rpm.map(|l| {
                let l = u64::from(l);
                (l, l.saturating_sub(self.request_sum), reset(&|i| self.requests[i] > 0))
            }),
            tokens: limits.tpm.map(|l| (l, l.saturating_sub(self.token_sum), reset(&|i| self.tokens[i] > 0))),
        }
    }
}

pub struct MemoryLimiter {
    clock: Clock,
    keys: Mutex<crate::config::FastMap<String, Box<KeyWindow>>>,
}

impl Default for MemoryLimiter {
    fn default() -> Self {
        MemoryLimiter::new(Clock::system())
    }
}

/// A token reservation: the second it was made in, and how many tokens it holds now.
#[derive(Clone, Copy)]
struct Reservation {
    second: u64,
    tokens: u64,
}

/// An admitted request's share of the limits. Holds its parallel slot until dropped; `settle`
/// corrects the token reservation to the real count.
pub struct Hold {
    limiter: Arc<MemoryLimiter>,
    key: String,
    reservation: Option<Reservation>,
    parallel: bool,
}

/// Past this many windows, idle ones are swept when a new key arrives.
const SWEEP_ABOVE: usize = 4096;

impl MemoryLimiter {
    /// A limiter whose windows move with `clock`.
    pub fn new(clock: Clock) -> MemoryLimiter {
        MemoryLimiter { clock, keys: Mutex::default() }
    }

    fn now_ms(&self) -> u64 {
        self.clock.mono_ms()
    }

    /// Admit or refuse one request for `key` with `estimate` tokens, atomically across limits.
    pub fn acquire(self: &Arc<Self>, key: &str, limits: &Limits, estimate: u64) -> Result<Permit, RateLimited> {
        self.acquire_at(key, limits, estimate, self.now_ms())
    }

    fn acquire_at(
        self: &Arc<Self>,
        key: &str,
        limits: &Limits,
        estimate: u64,
        now_ms: u64,
    ) -> Result<Permit, RateLimited> {
        self.acquire_levels_at(&[(key, *limits)], estimate, now_ms)
    }

    /// Admit or refuse one request at every level it is charged to (a key, its user, its team),
    /// atomically: under one lock every level is checked before any is charged, so a refusal at
    /// one level leaves the others as they were.
    pub fn acquire_levels(self: &Arc<Self>, levels: &[(&str, Limits)], estimate: u64) -> Result<Permit, RateLimited> {
        self.acquire_levels_at(levels, estimate, self.now_ms())
    }

    fn acquire_levels_at(
        self: &Arc<Self>,
        levels: &[(&str, Limits)],
        estimate: u64,
        now_ms: u64,
    ) -> Result<Permit, RateLimited> {
        let now_s = now_ms / 1000;
        let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        for (level, (key, limits)) in levels.iter().enumerate() {
            if keys.len() >= SWEEP_ABOVE && !keys.contains_key(*key) {
                keys.retain(|_, w| w.parallel > 0 || now_s.saturating_sub(w.head) < BUCKETS as u64);
            }
            let w = keys.entry((*key).to_owned()).or_insert_with(|| KeyWindow::new(now_s));
            w.advance(now_s);
            if let Some(refused) = w.refusal(limits, estimate, now_ms) {
                return Err(RateLimited { level, ..refused });
            }
        }
        let mut permit: Option<Permit> = None;
        for (key, limits) in levels {
            let Some(w) = keys.get_mut(*key) else { continue };
            let (reservation, parallel) = w.charge(limits, estimate, now_s);
            let hold = Hold { limiter: self.clone(), key: (*key).to_owned(), reservation, parallel };
            let level = Permit::memory(w.snapshot(limits, now_ms), hold);
            permit = Some(match permit {
                None => level,
                Some(p) => p.join(level),
            });
        }
        Ok(permit.unwrap_or_else(Permit::unlimited))
    }

    fn settle(&self, key: &str, reservation: Reservation, actual: u64, now_ms: u64) {
        let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(w) = keys.get_mut(key) {
            w.advance(now_ms / 1000);
            // Still in the window (otherwise its bucket was cleared, maybe reused): correct it.
            if w.head.checked_sub(reservation.second).is_some_and(|age| age < BUCKETS as u64) {
                let i = (reservation.second % BUCKETS as u64) as usize;
                w.tokens[i] = w.tokens[i].saturating_sub(reservation.tokens) + actual;
                w.token_sum = w.token_sum.saturating_sub(reservation.tokens) + actual;
            }
        }
    }
}

impl Hold {
    /// Charge `tokens` used since admission to the key's window now (its current second).
    pub fn charge(&self, tokens: u64) {
        let now_s = self.limiter.now_ms() / 1000;
        let mut keys = self.limiter.keys.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(w) = keys.get_mut(&self.key) {
            w.advance(now_s);
            let i = (now_s % BUCKETS as u64) as usize;
            w.tokens[i] += tokens;
            w.token_sum += tokens;
        }
    }

    /// Replace the token estimate with the real count (a reservation already aged out is left alone).
    pub fn settle(&mut self, actual_tokens: u64) {
        if let Some(r) = self.reservation.take() {
            self.limiter.settle(&self.key, r, actual_tokens, self.limiter.now_ms());
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if self.parallel {
            let mut keys = self.limiter.keys.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(w) = keys.get_mut(&self.key) {
                w.parallel = w.parallel.saturating_sub(1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take_reservation(p: &mut Permit) -> Reservation {
        match &mut p.hold {
            crate::limit::Hold::Memory(h) => h.reservation.take().unwrap(),
            _ => unreachable!("a memory permit"),
        }
    }

    fn limits(rpm: Option<u32>, tpm: Option<u64>, par: Option<u32>) -> Limits {
        Limits { rpm, tpm, max_parallel: par }
    }

    #[test]
    fn exactly_the_limit_passes_under_concurrency() {
        let l = Arc::new(MemoryLimiter::default());
        let lim = limits(Some(50), None, None);
        let admitted = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..25 {
                        if let Ok(p) = l.acquire("k", &lim, 0) {
                            admitted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            std::mem::forget(p);
                        }
                    }
                });
            }
        });
        assert_eq!(admitted.into_inner(), 50);
        let refused = l.acquire("k", &lim, 0).err().unwrap();
        assert_eq!(refused.which, "requests");
        assert!(refused.retry_after > Duration::from_secs(50));
        assert!(l.acquire("other", &lim, 0).is_ok(), "limits are per key");
    }

    #[test]
    fn a_refused_key_is_admitted_again_when_virtual_time_passes_its_window() {
        let clock = Clock::manual(0);
        let l = Arc::new(MemoryLimiter::new(clock.clone()));
        let lim = limits(Some(2), Some(1000), None);
        let mut first = l.acquire("k", &lim, 400).unwrap();
        first.settle(400);
        clock.advance(Duration::from_secs(30));
        l.acquire("k", &lim, 400).unwrap().settle(400);
        let refused = l.acquire("k", &lim, 100).err().unwrap();
        assert_eq!(refused.which, "requests");
        // The first request expires 60-61 s after it was admitted, i.e. 30-31 s from now.
        assert!(refused.retry_after > Duration::from_secs(29) && refused.retry_after <= Duration::from_secs(31));
        clock.advance(Duration::from_secs(29));
        assert!(l.acquire("k", &lim, 100).is_err(), "still inside the first request's window");
        clock.advance(refused.retry_after - Duration::from_secs(29));
        let again = l.acquire("k", &lim, 100).unwrap();
        assert_eq!(again.snapshot.requests.as_ref().unwrap().1, 0, "one slot came back, and it is taken now");
        assert_eq!(again.snapshot.tokens.as_ref().unwrap().1, 500, "the first request's 400 tokens came back too");
    }

    #[test]
    fn tokens_reserve_then_settle() {
        let l = Arc::new(MemoryLimiter::default());
        let lim = limits(None, Some(1000), None);
        let mut a = l.acquire("k", &lim, 600).unwrap();
        assert_eq!(a.snapshot.tokens.as_ref().unwrap().1, 400);
        assert_eq!(l.acquire("k", &lim, 600).err().unwrap().which, "tokens");
        a.settle(100);
        let b = l.acquire("k", &lim, 600).unwrap();
        assert_eq!(b.snapshot.tokens.as_ref().unwrap().1, 300);
    }

    #[test]
    fn parallel_slots_return_on_drop() {
        let l = Arc::new(MemoryLimiter::default());
        let lim = limits(None, None, Some(2));
        let a = l.acquire("k", &lim, 0).unwrap();
        let _b = l.acquire("k", &lim, 0).unwrap();
        assert_eq!(l.acquire("k", &lim, 0).err().unwrap().which, "parallel");
        drop(a);
        assert!(l.acquire("k", &lim, 0).is_ok());
    }

    #[test]
    fn admissions_count_for_60_to_61_seconds_and_never_more_than_the_limit_in_any_60() {
        let l = Arc::new(MemoryLimiter::default());
        let lim = limits(Some(2), None, None);
        assert!(l.acquire_at("k", &lim, 0, 500).is_ok());
        assert!(l.acquire_at("k", &lim, 0, 30_000).is_ok());
        let refused = l.acquire_at("k", &lim, 0, 59_900).err().unwrap();
        // The first admission (second 0) stops counting at 61 s.
        assert_eq!(refused.retry_after, Duration::from_millis(1_100));
        assert_eq!(refused.snapshot.requests, Some((2, 0, Duration::from_millis(1_100))));
        assert!(l.acquire_at("k", &lim, 0, 60_999).is_err());
        assert!(l.acquire_at("k", &lim, 0, 61_000).is_ok());
        assert!(l.acquire_at("k", &lim, 0, 61_001).is_err());
        // Long idle: everything has aged out.
        assert!(l.acquire_at("k", &lim, 0, 500_000).is_ok());
        assert!(l.acquire_at("k", &lim, 0, 500_001).is_ok());

        // A steady stream of attempts every 250 ms against rpm 7: admitted times never put more
        // than 7 into any 60-second span, and the limiter keeps admitting as old ones age out.
        let lim = limits(Some(7), None, None);
        let admitted: Vec<u64> =
            (0..2_000u64).map(|i| i * 250).filter(|&t| l.acquire_at("steady", &lim, 0, t).is_ok()).collect();
        for (i, &t) in admitted.iter().enumerate() {
            assert!(admitted[i..].iter().take_while(|&&u| u < t + 60_000).count() <= 7, "at {t}");
        }
        assert!(admitted.len() >= 7 * 8, "{}", admitted.len());
    }

    #[test]
    fn a_settlement_corrects_its_own_second_and_is_dropped_once_that_second_aged_out() {
        let l = Arc::new(MemoryLimiter::default());
        let lim = limits(None, Some(1_000), None);
        let mut a = l.acquire_at("k", &lim, 600, 1_000).unwrap();
        let r = take_reservation(&mut a);
        l.settle("k", r, 100, 2_000);
        let b = l.acquire_at("k", &lim, 100, 3_000).unwrap();
        assert_eq!(b.snapshot.tokens.as_ref().unwrap().1, 800);
        // Too big for what is left: refused until second 1's tokens age out at 62 s.
        let refused = l.acquire_at("k", &lim, 850, 10_000).err().unwrap();
        assert_eq!(refused.retry_after, Duration::from_millis(52_000));
        // An estimate above the whole limit never fits.
        assert_eq!(l.acquire_at("k", &lim, 5_000, 10_000).err().unwrap().retry_after, Duration::from_secs(61));
        // Settling after the reservation's second left the window changes nothing.
        let mut c = l.acquire_at("late", &lim, 500, 0).unwrap();
        let r = take_reservation(&mut c);
        assert!(l.acquire_at("late", &lim, 0, 70_000).is_ok());
        l.settle("late", r, 900, 70_000);
        assert_eq!(l.acquire_at("late", &lim, 0, 70_001).unwrap().snapshot.tokens.unwrap().1, 1_000);
    }

    #[test]
    fn idle_windows_are_swept_once_there_are_many() {
        let l = Arc::new(MemoryLimiter::default());
        let lim = limits(Some(5), None, Some(5));
        let held = l.acquire_at("busy", &lim, 0, 0).unwrap();
        for i in 0..SWEEP_ABOVE {
            drop(l.acquire_at(&format!("k{i}"), &lim, 0, 0).unwrap());
        }
        assert_eq!(l.keys.lock().unwrap().len(), SWEEP_ABOVE + 1);
        drop(l.acquire_at("new", &lim, 0, 100_000).unwrap());
        // Only the key with a request in flight and the new one are left.
        let mut left: Vec<String> = l.keys.lock().unwrap().keys().cloned().collect();
        left.sort();
        assert_eq!(left, ["busy", "new"]);
        drop(held);
    }

    #[test]
    fn snapshot_headers() {
        let l = Arc::new(MemoryLimiter::default());
        let p = l.acquire("k", &limits(Some(10), Some(100), None), 30).unwrap();
        let h = p.snapshot.headers();
        assert_eq!(h["x-ratelimit-limit-requests"], "10");
        assert_eq!(h["x-ratelimit-remaining-requests"], "9");
        assert_eq!(h["x-ratelimit-remaining-tokens"], "70");
        assert!(h["x-ratelimit-reset-requests"].to_str().unwrap().ends_with('s'));
    }
}
