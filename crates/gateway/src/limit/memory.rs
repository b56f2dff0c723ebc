//! The in-memory limiter: per key, a sliding 60-second log of admitted requests and token
//! reservations plus a parallel-request counter, all checked and committed under one lock so
//! that N concurrent requests against a limit of L admit exactly L. Token limits reserve an
//! estimate up front and settle to the real count afterwards.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{Limits, RateLimited, Snapshot};

const WINDOW: Duration = Duration::from_secs(60);

#[derive(Default)]
struct KeyWindow {
    requests: VecDeque<Instant>,
    /// (admitted at, reservation id, tokens)
    tokens: VecDeque<(Instant, u64, u64)>,
    token_sum: u64,
    parallel: u32,
}

impl KeyWindow {
    fn prune(&mut self, now: Instant) {
        while self.requests.front().is_some_and(|t| now.duration_since(*t) >= WINDOW) {
            self.requests.pop_front();
        }
        while let Some(&(t, _, n)) = self.tokens.front() {
            if now.duration_since(t) < WINDOW {
                break;
            }
            self.tokens.pop_front();
            self.token_sum -= n;
        }
    }

    fn snapshot(&self, limits: &Limits, now: Instant) -> Snapshot {
        let reset = |t: Option<Instant>| t.map_or(Duration::ZERO, |t| WINDOW.saturating_sub(now.duration_since(t)));
        Snapshot {
            requests: limits.rpm.map(|l| {
                let l = u64::from(l);
                (l, l.saturating_sub(self.requests.len() as u64), reset(self.requests.front().copied()))
            }),
            tokens: limits.tpm.map(|l| (l, l.saturating_sub(self.token_sum), reset(self.tokens.front().map(|e| e.0)))),
        }
    }
}

#[derive(Default)]
pub struct MemoryLimiter {
    keys: Mutex<HashMap<String, KeyWindow>>,
    next_reservation: std::sync::atomic::AtomicU64,
}

/// An admitted request. Holds its parallel slot until dropped; `settle` corrects the token
/// reservation to the real count.
pub struct Permit {
    limiter: Arc<MemoryLimiter>,
    key: String,
    reservation: Option<u64>,
    parallel: bool,
    pub snapshot: Snapshot,
}

impl MemoryLimiter {
    /// Admit or refuse one request for `key` with `estimate` tokens, atomically across limits.
    pub fn acquire(self: &Arc<Self>, key: &str, limits: &Limits, estimate: u64) -> Result<Permit, RateLimited> {
        let now = Instant::now();
        let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        let w = keys.entry(key.to_owned()).or_default();
        w.prune(now);
        if let Some(max) = limits.max_parallel {
            if w.parallel >= max {
                return Err(RateLimited {
                    which: "parallel",
                    limit: u64::from(max),
                    retry_after: Duration::from_secs(1),
                    snapshot: w.snapshot(limits, now),
                });
            }
        }
        if let Some(rpm) = limits.rpm {
            if w.requests.len() as u64 >= u64::from(rpm) {
                let oldest = w.requests.front().copied().unwrap_or(now);
                return Err(RateLimited {
                    which: "requests",
                    limit: u64::from(rpm),
                    retry_after: WINDOW.saturating_sub(now.duration_since(oldest)),
                    snapshot: w.snapshot(limits, now),
                });
            }
        }
        if let Some(tpm) = limits.tpm {
            if w.token_sum + estimate > tpm {
                // When enough of the oldest reservations expire for this one to fit.
                let mut freed = tpm.saturating_sub(w.token_sum);
                let mut at = now + WINDOW;
                for &(t, _, n) in &w.tokens {
                    freed += n;
                    if freed >= estimate {
                        at = t + WINDOW;
                        break;
                    }
                }
                return Err(RateLimited {
                    which: "tokens",
                    limit: tpm,
                    retry_after: at.saturating_duration_since(now).max(Duration::from_millis(1)),
                    snapshot: w.snapshot(limits, now),
                });
            }
        }
        if limits.rpm.is_some() {
            w.requests.push_back(now);
        }
        let reservation = limits.tpm.map(|_| {
            let id = self.next_reservation.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            w.tokens.push_back((now, id, estimate));
            w.token_sum += estimate;
            id
        });
        let parallel = limits.max_parallel.is_some();
        if parallel {
            w.parallel += 1;
        }
        let snapshot = w.snapshot(limits, now);
        Ok(Permit { limiter: self.clone(), key: key.to_owned(), reservation, parallel, snapshot })
    }

    fn settle(&self, key: &str, reservation: u64, actual: u64) {
        let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(w) = keys.get_mut(key) {
            // Reservation ids only grow, so each key's log is sorted by id: O(log n), not a scan.
            if let Ok(i) = w.tokens.binary_search_by_key(&reservation, |e| e.1) {
                let entry = &mut w.tokens[i];
                w.token_sum = w.token_sum - entry.2 + actual;
                entry.2 = actual;
            }
        }
    }
}

impl Permit {
    /// Replace the token estimate with the real count (a reservation already aged out is left alone).
    pub fn settle(&mut self, actual_tokens: u64) {
        if let Some(id) = self.reservation.take() {
            self.limiter.settle(&self.key, id, actual_tokens);
        }
    }
}

impl Drop for Permit {
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
