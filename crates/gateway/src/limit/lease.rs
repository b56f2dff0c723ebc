//! Leases on the fleet's limits: when a key's requests arrive faster than a round trip to
//! Redis is worth, the instance that admits one also takes a batch of the key's requests/min and
//! tokens/min quota ahead of demand (charged in Redis at once, so the fleet never admits more than
//! the limit) and admits the next requests from it without asking Redis. Sizing and life:
//! - a lease is sized to this instance's own demand for the key (twice its recent rate) and to
//!   at most `1 / (2 × live instances)` of what is left of the first quarter of the window's quota:
//!   past that, every request asks Redis again, so a burst that spends the rest finds few units,
//!   if any, stranded in another instance's lease (never more admitted than the limit; at worst
//!   a few fewer, for the rest of that second);
//! - it is charged to Redis's current second and used only until that second ends (as seen from
//!   here: the end is measured from before the call was sent, so it is never late), so every
//!   admission still counts in the window for its full 60 s;
//! - what it did not use is given back when it expires or is replaced (in the next script this
//!   instance sends for the key, or the batched finishes); what can be held up is one second's
//!   batch of an instance whose demand stopped.
//!
//! Parallel limits are pooled the same way: a key with `max_parallel` busy here takes extra
//! slots (holders in Redis, refreshed like any other) beside the one its request needs, at most
//! its share of the first quarter of `max_parallel`; a request admitted here takes an idle one and
//! puts it back when it ends, with no round trip. Slots that stayed idle for a whole heartbeat
//! go back to Redis.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::futures::OwnedNotified;
use tokio::sync::Notify;

use super::{Limits, Snapshot};

/// The most request units one lease takes.
const MOST_REQUESTS: u64 = 4096;
/// The most parallel slots one refresh asks for.
const MOST_SLOTS: u64 = 256;
/// A key's rate is measured over at least this span (a burst of first requests is not a rate).
const SHORTEST_SPAN: Duration = Duration::from_millis(100);
/// A key takes leases once it has been seen here for this long.
const SUSTAINED: Duration = Duration::from_secs(1);
/// A key's entry is forgotten after this long without a request.
const IDLE: Duration = Duration::from_secs(10);

/// Quota taken ahead for one key, charged in Redis to `second`.
struct Lease {
    second: i64,
    /// Units left; `None` where the key has no such limit.
    requests: Option<u64>,
    tokens: Option<u64>,
    /// Usable until (the end of Redis's `second`, as seen from here).
    until: Instant,
    /// What Redis had charged in the window after this grant, and when its oldest charge
    /// leaves: what the client's `x-ratelimit-*` headers are computed from.
    charged_requests: u64,
    charged_tokens: u64,
    reset: Duration,
    granted: Instant,
}

struct Entry {
    lease: Option<Lease>,
    /// Admissions and their tokens since `since`: the key's demand on this instance.
    admitted: u64,
    tokens: u64,
    since: Instant,
    /// A request is asking Redis for a new lease; others ask for no extra meanwhile.
    refreshing: bool,
    /// Woken when that request's answer is in (refused requests wait for it: see `redraw`).
    refreshed: Arc<Notify>,
    first_seen: Instant,
    last_seen: Instant,
    /// Parallel slots this instance holds in Redis and no request uses (holder numbers), how
    /// many its requests use, and the fewest idle since the last sweep (what was never needed).
    slots: Vec<u64>,
    slots_in_use: u64,
    slots_low: usize,
}

/// A request admitted here: the second its rate units are charged to, what its client is told,
/// and the pooled parallel slot it holds.
#[derive(Debug)]
pub struct Drawn {
    pub second: i64,
    pub snapshot: Snapshot,
    pub slot: Option<u64>,
    /// The pools' generation the slot belongs to (see `Leases::forget_slots`).
    pub generation: u64,
}

impl Entry {
    /// Admit one request from the lease and the slot pool, if they hold enough (`generation`:
    /// the pools' current one).
    fn take(&mut self, limits: &Limits, estimate: u64, now: Instant, generation: u64) -> Option<Drawn> {
        let rate = limits.rpm.is_some() || limits.tpm.is_some();
        if limits.max_parallel.is_some() && self.slots.is_empty() {
            return None;
        }
        if rate && !self.lease.as_ref().is_some_and(|l| l.fits(limits, estimate, now)) {
            return None;
        }
        let slot = match limits.max_parallel {
            Some(_) => {
                let n = self.slots.pop();
                self.slots_in_use += 1;
                self.slots_low = self.slots_low.min(self.slots.len());
                n
            }
            None => None,
        };
        self.admitted += 1;
        self.tokens += estimate;
        let Some(lease) = self.lease.as_mut().filter(|_| rate) else {
            return Some(Drawn { second: 0, snapshot: Snapshot::default(), slot, generation });
        };
        if let Some(r) = lease.requests.as_mut() {
            *r -= 1;
        }
        if let Some(t) = lease.tokens.as_mut() {
            *t -= estimate;
        }
        let elapsed = now.saturating_duration_since(lease.granted);
        let snapshot = Snapshot {
            requests: limits.rpm.map(|l| {
                let used = lease.charged_requests - lease.requests.unwrap_or(0);
                (u64::from(l), u64::from(l).saturating_sub(used), lease.reset.saturating_sub(elapsed))
            }),
            tokens: limits.tpm.map(|l| {
                let used = lease.charged_tokens - lease.tokens.unwrap_or(0);
                (l, l.saturating_sub(used), lease.reset.saturating_sub(elapsed))
            }),
        };
        Some(Drawn { second: lease.second, snapshot, slot, generation })
    }
}

/// How much a request asks Redis to take ahead, per second of lease (0: none).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Want {
    pub requests_per_s: u64,
    pub tokens_per_s: u64,
    /// Parallel slots to hold beside the request's own.
    pub slots: u64,
}

/// Units of an expired or replaced lease to give back to the window.
#[derive(Debug, PartialEq)]
pub struct Unused {
    pub second: i64,
    pub requests: u64,
    pub tokens: u64,
}

/// What a refused request can still be admitted from.
pub enum Redraw {
    Drawn(Drawn),
    /// A lease is being granted: wait for it, then look again.
    Wait(OwnedNotified),
    /// This instance's lease expired holding these units: give them back and ask again.
    Expired(Unused),
    Nothing,
}

/// What Redis granted beside the request that asked.
pub struct Grant {
    pub second: i64,
    /// Units taken ahead; `None` where the key has no such limit.
    pub requests: Option<u64>,
    pub tokens: Option<u64>,
    /// How far into its current second Redis was.
    pub into_second: Duration,
    /// When the call was sent (the lease's end is measured from here).
    pub sent: Instant,
    pub charged_requests: u64,
    pub charged_tokens: u64,
    pub reset: Duration,
    /// Parallel slots taken beside the request's own (holder numbers).
    pub slots: Vec<u64>,
}

/// Why a request was not admitted from a lease: what to ask Redis for, and what to give back.
#[derive(Debug)]
pub struct Miss {
    pub want: Want,
    /// This request is the one refreshing the lease (it must call `granted` or `missed`).
    pub refresher: bool,
    pub unused: Option<Unused>,
}

#[derive(Default)]
pub struct Leases {
    entries: Mutex<crate::config::FastMap<String, Entry>>,
    /// Bumped (under the lock) when the pools are forgotten: older slots are not pooled again.
    generation: AtomicU64,
}

impl Lease {
    fn unused(&self) -> Option<Unused> {
        let (requests, tokens) = (self.requests.unwrap_or(0), self.tokens.unwrap_or(0));
        (requests > 0 || tokens > 0).then_some(Unused { second: self.second, requests, tokens })
    }

    fn fits(&self, limits: &Limits, estimate: u64, now: Instant) -> bool {
        now < self.until
            && self.requests.is_some() == limits.rpm.is_some()
            && self.tokens.is_some() == limits.tpm.is_some()
            && self.requests.is_none_or(|r| r >= 1)
            && self.tokens.is_none_or(|t| t >= estimate)
    }
}

impl Leases {
    /// Admit one request of `key` from this instance's lease, or say what to ask Redis for.
    pub fn draw(&self, key: &str, limits: &Limits, estimate: u64, now: Instant) -> Result<Drawn, Miss> {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let entry = match entries.get_mut(key) {
            Some(e) => e,
            None => entries.entry(key.to_owned()).or_insert(Entry {
                lease: None,
                admitted: 0,
                tokens: 0,
                since: now,
                refreshing: false,
                refreshed: Arc::new(Notify::new()),
                first_seen: now,
                last_seen: now,
                slots: Vec::new(),
                slots_in_use: 0,
                slots_low: 0,
            }),
        };
        entry.last_seen = now;
        if let Some(drawn) = entry.take(limits, estimate, now, self.generation.load(Relaxed)) {
            return Ok(drawn);
        }
        let unused = match entry.lease.as_ref() {
            Some(l) if now >= l.until => entry.lease.take().and_then(|l| l.unused()),
            _ => None,
        };
        if entry.refreshing {
            return Err(Miss { want: Want::default(), refresher: false, unused });
        }
        entry.refreshing = true;
        // Twice the key's recent rate here, so a lease lasts past the next one's round trip; none
        // for a key not seen for a second yet (a burst from a new key is not a rate to lease for).
        let span = now.saturating_duration_since(entry.since).max(SHORTEST_SPAN).as_millis() as u64;
        let want = match now.saturating_duration_since(entry.first_seen) >= SUSTAINED {
            true => Want {
                requests_per_s: (entry.admitted * 2000 / span).min(MOST_REQUESTS),
                tokens_per_s: entry.tokens.saturating_mul(2000) / span,
                // Twice the slots in use here, while none is idle.
                slots: match limits.max_parallel.is_some() && entry.slots.is_empty() {
                    true => (2 * entry.slots_in_use).clamp(2, MOST_SLOTS),
                    false => 0,
                },
            },
            false => return Err(Miss { want: Want::default(), refresher: true, unused }),
        };
        (entry.admitted, entry.tokens, entry.since) = (0, 0, now);
        Err(Miss { want, refresher: true, unused })
    }

    /// Redis refused a request of `key`: admit it from this instance's lease if that holds
    /// enough, so no unit this instance took is stranded while its own requests are refused. A
    /// lease being granted (whose answer may be in but not yet stored) is waited for; an expired
    /// one's units are handed over to give back.
    pub fn redraw(&self, key: &str, limits: &Limits, estimate: u64, now: Instant) -> Redraw {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let Some(entry) = entries.get_mut(key) else { return Redraw::Nothing };
        if let Some(drawn) = entry.take(limits, estimate, now, self.generation.load(Relaxed)) {
            return Redraw::Drawn(drawn);
        }
        if entry.lease.as_ref().is_some_and(|l| now >= l.until) {
            if let Some(unused) = entry.lease.take().and_then(|l| l.unused()) {
                return Redraw::Expired(unused);
            }
        }
        match entry.refreshing {
            // Made under the lock, so the wake-up of `admitted` or `missed` cannot be missed.
            true => Redraw::Wait(entry.refreshed.clone().notified_owned()),
            false => Redraw::Nothing,
        }
    }

    /// Redis admitted a request of `key` (`estimate` tokens) and, if it refreshed, granted this
    /// lease; returns the replaced lease's units to give back.
    pub fn admitted(&self, key: &str, estimate: u64, refresher: bool, grant: Option<Grant>) -> Option<Unused> {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let entry = entries.get_mut(key)?;
        entry.admitted += 1;
        entry.tokens += estimate;
        if !refresher {
            return None;
        }
        entry.refreshing = false;
        entry.refreshed.notify_waiters();
        let mut grant = grant?;
        entry.slots.append(&mut grant.slots);
        if grant.requests.unwrap_or(0) == 0 && grant.tokens.unwrap_or(0) == 0 {
            return None;
        }
        let left = Duration::from_secs(1).saturating_sub(grant.into_second);
        let lease = Lease {
            second: grant.second,
            requests: grant.requests,
            tokens: grant.tokens,
            until: grant.sent + left,
            charged_requests: grant.charged_requests,
            charged_tokens: grant.charged_tokens,
            reset: grant.reset,
            granted: grant.sent,
        };
        entry.lease.replace(lease).and_then(|l| l.unused())
    }

    /// A request charged to `second` settled its tokens `by` less than it reserved (negative:
    /// more): when this instance's lease of that second is still live, the difference is kept
    /// in it (used by the next requests, given back with it) instead of sent to Redis.
    pub fn settle(&self, key: &str, second: i64, by: i64, now: Instant) -> bool {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let Some(lease) = entries.get_mut(key).and_then(|e| e.lease.as_mut()) else { return false };
        let Some(tokens) = lease.tokens.as_mut().filter(|_| lease.second == second && now < lease.until) else {
            return false;
        };
        match tokens.checked_add_signed(by) {
            Some(t) => {
                *tokens = t;
                true
            }
            None => false,
        }
    }

    /// A request admitted with pooled slot `n` ended: the slot is idle here again. `false` when
    /// the key was forgotten (give the slot back to Redis).
    pub fn release(&self, key: &str, n: u64, generation: u64) -> bool {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if generation != self.generation.load(Relaxed) {
            return false;
        }
        let Some(entry) = entries.get_mut(key) else { return false };
        entry.slots_in_use = entry.slots_in_use.saturating_sub(1);
        entry.slots.push(n);
        true
    }

    /// Forget every pool (their holders in Redis may have expired and been taken): returns the
    /// idle slots; slots in use are not pooled again when they end.
    pub fn forget_slots(&self) -> Vec<(String, u64)> {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        self.generation.fetch_add(1, Relaxed);
        let mut idle = Vec::new();
        for (key, entry) in entries.iter_mut() {
            idle.extend(entry.slots.drain(..).map(|n| (key.clone(), n)));
            (entry.slots_in_use, entry.slots_low) = (0, 0);
        }
        idle
    }

    /// The refreshing request ended without a grant (refused, Redis away, or cancelled).
    pub fn missed(&self, key: &str) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = entries.get_mut(key) {
            entry.refreshing = false;
            entry.refreshed.notify_waiters();
        }
    }

    /// Take every expired lease's unused units and the slots idle since the last sweep (to give
    /// back), and forget idle keys.
    pub fn sweep(&self, now: Instant) -> Swept {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let mut swept = Swept::default();
        entries.retain(|key, entry| {
            if entry.lease.as_ref().is_some_and(|l| now >= l.until) {
                if let Some(u) = entry.lease.take().and_then(|l| l.unused()) {
                    swept.units.push((key.clone(), u));
                }
            }
            let idle = entry.slots_low.min(entry.slots.len());
            swept.slots.extend(entry.slots.drain(..idle).map(|n| (key.clone(), n)));
            entry.slots_low = entry.slots.len();
            entry.lease.is_some()
                || entry.refreshing
                || entry.slots_in_use > 0
                || !entry.slots.is_empty()
                || now.saturating_duration_since(entry.last_seen) < IDLE
        });
        swept
    }
}

/// What a sweep hands back to Redis.
#[derive(Debug, Default, PartialEq)]
pub struct Swept {
    pub units: Vec<(String, Unused)>,
    pub slots: Vec<(String, u64)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const RATE: Limits = Limits { rpm: Some(1000), tpm: Some(100_000), max_parallel: None };

    fn grant(sent: Instant, requests: u64, tokens: u64, into_ms: u64) -> Grant {
        Grant {
            second: 7,
            requests: Some(requests),
            tokens: Some(tokens),
            into_second: Duration::from_millis(into_ms),
            sent,
            charged_requests: 10 + requests,
            charged_tokens: 1000 + tokens,
            reset: Duration::from_secs(60),
            slots: Vec::new(),
        }
    }

    #[test]
    fn a_new_key_asks_redis_and_one_request_at_a_time_refreshes() {
        let leases = Leases::default();
        let now = Instant::now();
        let first = leases.draw("k", &RATE, 10, now).unwrap_err();
        assert!(first.refresher);
        assert_eq!(first.want, Want::default(), "no demand seen yet: no lease");
        let second = leases.draw("k", &RATE, 10, now).unwrap_err();
        assert!(!second.refresher, "one refresh at a time");
        assert_eq!(leases.admitted("k", 10, true, None), None);
        let third = leases.draw("k", &RATE, 10, now + Duration::from_millis(50)).unwrap_err();
        assert!(third.refresher);
        assert_eq!(third.want, Want::default(), "a key seen for less than a second takes no lease");
        leases.missed("k");
        let later = leases.draw("k", &RATE, 10, now + SUSTAINED).unwrap_err();
        // One admission over the second since the last refresh, asked for twice over.
        assert_eq!(later.want, Want { requests_per_s: 2, tokens_per_s: 20, slots: 0 });
    }

    #[test]
    fn a_lease_admits_until_its_units_or_its_second_run_out_then_gives_the_rest_back() {
        let leases = Leases::default();
        let sent = Instant::now();
        let _ = leases.draw("k", &RATE, 10, sent).unwrap_err();
        assert_eq!(leases.admitted("k", 10, true, Some(grant(sent, 3, 25, 600))), None);
        let drawn = leases.draw("k", &RATE, 10, sent).unwrap();
        assert_eq!(drawn.second, 7);
        // 13 charged, 2 of them still leased here: 11 used of 1000.
        assert_eq!(drawn.snapshot.requests.map(|r| r.1), Some(989));
        assert!(leases.draw("k", &RATE, 10, sent).is_ok());
        let short = leases.draw("k", &RATE, 10, sent).unwrap_err();
        assert!(short.refresher, "5 tokens left cannot hold a request of 10");
        assert!(short.unused.is_none(), "an unexpired lease is given back when replaced");
        leases.missed("k");
        // The lease ends where Redis's second ends: 400 ms after the call was sent.
        let late = sent + Duration::from_millis(400);
        let expired = leases.draw("k", &RATE, 1, late).unwrap_err();
        assert_eq!(expired.unused, Some(Unused { second: 7, requests: 1, tokens: 5 }));
    }

    #[test]
    fn a_replaced_lease_is_given_back_and_expired_ones_are_swept() {
        let leases = Leases::default();
        let sent = Instant::now();
        let _ = leases.draw("k", &RATE, 10, sent).unwrap_err();
        leases.admitted("k", 10, true, Some(grant(sent, 3, 30, 0)));
        let _ = leases.draw("k", &RATE, 100, sent).unwrap_err();
        let replaced = leases.admitted("k", 10, true, Some(grant(sent, 4, 40, 0)));
        assert_eq!(replaced, Some(Unused { second: 7, requests: 3, tokens: 30 }));
        assert_eq!(leases.sweep(sent), Swept::default());
        let swept = leases.sweep(sent + Duration::from_secs(1));
        assert_eq!(swept.units, vec![("k".to_owned(), Unused { second: 7, requests: 4, tokens: 40 })]);
        assert_eq!(leases.sweep(sent + IDLE + Duration::from_secs(1)), Swept::default());
        assert!(leases.entries.lock().unwrap().is_empty(), "idle keys are forgotten");
    }

    #[test]
    fn settled_tokens_stay_in_a_live_lease_of_their_second() {
        let leases = Leases::default();
        let sent = Instant::now();
        let _ = leases.draw("k", &RATE, 10, sent).unwrap_err();
        leases.admitted("k", 10, true, Some(grant(sent, 3, 30, 0)));
        assert!(leases.settle("k", 7, 8, sent), "8 of 10 reserved tokens unused: kept");
        assert!(leases.settle("k", 7, -30, sent), "2 more than reserved: taken from the lease");
        assert!(!leases.settle("k", 7, -100, sent), "more than the lease holds: to Redis");
        assert!(!leases.settle("k", 6, 5, sent), "another second: to Redis");
        assert!(!leases.settle("k", 7, 5, sent + Duration::from_secs(1)), "an expired lease: to Redis");
        let swept = leases.sweep(sent + Duration::from_secs(1));
        assert_eq!(swept.units, vec![("k".to_owned(), Unused { second: 7, requests: 3, tokens: 8 })]);
    }

    #[test]
    fn pooled_slots_admit_here_come_back_when_released_and_idle_ones_are_swept() {
        let leases = Leases::default();
        let parallel = Limits { rpm: None, tpm: None, max_parallel: Some(8) };
        let sent = Instant::now();
        let _ = leases.draw("k", &parallel, 0, sent).unwrap_err();
        leases.admitted("k", 0, true, None);
        let busy = leases.draw("k", &parallel, 0, sent + SUSTAINED).unwrap_err();
        assert_eq!(busy.want.slots, 2, "a busy key with no idle slot asks for some");
        let slots = Grant { slots: vec![40, 41], ..grant(sent, 0, 0, 0) };
        assert_eq!(leases.admitted("k", 0, true, Some(Grant { requests: None, tokens: None, ..slots })), None);
        let a = leases.draw("k", &parallel, 0, sent + SUSTAINED).unwrap();
        let b = leases.draw("k", &parallel, 0, sent + SUSTAINED).unwrap();
        assert_eq!((a.slot, b.slot), (Some(41), Some(40)));
        assert!(leases.draw("k", &parallel, 0, sent + SUSTAINED).is_err(), "both slots in use");
        leases.missed("k");
        assert!(leases.release("k", 41, a.generation));
        // 41 was in use at some point since the last sweep: kept. Idle through the next: given back.
        assert!(leases.sweep(sent + SUSTAINED).slots.is_empty());
        assert_eq!(leases.sweep(sent + SUSTAINED).slots, vec![("k".to_owned(), 41)]);
        assert!(!leases.release("other", 9, 0), "a forgotten key's slot goes back to Redis");
        assert_eq!(leases.forget_slots(), vec![], "41 was just given back");
        let _ = leases.draw("k", &parallel, 0, sent + SUSTAINED).unwrap_err();
        leases.admitted(
            "k",
            0,
            true,
            Some(Grant { requests: None, tokens: None, slots: vec![50, 51], ..grant(sent, 0, 0, 0) }),
        );
        let c = leases.draw("k", &parallel, 0, sent + SUSTAINED).unwrap();
        assert_eq!(leases.forget_slots(), vec![("k".to_owned(), 50)], "pools forgotten: the idle one is handed back");
        assert!(!leases.release("k", c.slot.unwrap(), c.generation), "and one in use is not pooled again");
    }

    #[test]
    fn a_lease_for_other_limits_does_not_admit() {
        let leases = Leases::default();
        let sent = Instant::now();
        let _ = leases.draw("k", &RATE, 10, sent).unwrap_err();
        leases.admitted("k", 10, true, Some(grant(sent, 3, 30, 0)));
        let requests_only = Limits { tpm: None, ..RATE };
        assert!(leases.draw("k", &requests_only, 10, sent).is_err());
    }
}
