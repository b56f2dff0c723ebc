//! Leases on the fleet's rate limits: when a key's requests arrive faster than a round trip to
//! Redis is worth, the instance that admits one also takes a batch of the key's requests/min and
//! tokens/min quota ahead of demand (charged in Redis at once, so the fleet never admits more than
//! the limit) and admits the next requests from it without asking Redis. Sizing and life:
//! - a lease is sized to this instance's own demand for the key (twice its recent rate) and to
//!   at most `1 / (2 × live instances)` of what is left of the first half of the window's quota:
//!   past half, every request asks Redis again, so a burst that spends the rest finds few units,
//!   if any, stranded in another instance's lease (never more admitted than the limit; at worst
//!   a few fewer, for the rest of that second);
//! - it is charged to Redis's current second and used only until that second ends (as seen from
//!   here: the end is measured from before the call was sent, so it is never late), so every
//!   admission still counts in the window for its full 60 s;
//! - what it did not use is given back (through the batched finishes) when it expires or is
//!   replaced; what can be stranded is one second's batch of an instance whose demand stopped.
//!
//! Keys with `max_parallel` take no leases: a parallel slot is a holder in Redis per request.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::futures::OwnedNotified;
use tokio::sync::Notify;

use super::{Limits, Snapshot};

/// The most request units one lease takes.
const MOST_REQUESTS: u64 = 4096;
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
}

impl Entry {
    /// Admit one request from the lease, if it holds enough: the second it is charged to, and
    /// what its client is told.
    fn take(&mut self, limits: &Limits, estimate: u64, now: Instant) -> Option<(i64, Snapshot)> {
        let lease = self.lease.as_mut().filter(|l| l.fits(limits, estimate, now))?;
        if let Some(r) = lease.requests.as_mut() {
            *r -= 1;
        }
        if let Some(t) = lease.tokens.as_mut() {
            *t -= estimate;
        }
        self.admitted += 1;
        self.tokens += estimate;
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
        Some((lease.second, snapshot))
    }
}

/// How much a request asks Redis to take ahead, per second of lease (0: none).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Want {
    pub requests_per_s: u64,
    pub tokens_per_s: u64,
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
    Drawn((i64, Snapshot)),
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
    entries: Mutex<HashMap<String, Entry>>,
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
    pub fn draw(&self, key: &str, limits: &Limits, estimate: u64, now: Instant) -> Result<(i64, Snapshot), Miss> {
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
            }),
        };
        entry.last_seen = now;
        if let Some(drawn) = entry.take(limits, estimate, now) {
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
        if let Some(drawn) = entry.take(limits, estimate, now) {
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
        let grant = grant.filter(|g| g.requests.unwrap_or(0) > 0 || g.tokens.unwrap_or(0) > 0)?;
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

    /// The refreshing request ended without a grant (refused, Redis away, or cancelled).
    pub fn missed(&self, key: &str) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = entries.get_mut(key) {
            entry.refreshing = false;
            entry.refreshed.notify_waiters();
        }
    }

    /// Take every expired lease's unused units (to give back), and forget idle keys.
    pub fn sweep(&self, now: Instant) -> Vec<(String, Unused)> {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let mut unused = Vec::new();
        entries.retain(|key, entry| {
            if entry.lease.as_ref().is_some_and(|l| now >= l.until) {
                if let Some(u) = entry.lease.take().and_then(|l| l.unused()) {
                    unused.push((key.clone(), u));
                }
            }
            entry.lease.is_some() || entry.refreshing || now.saturating_duration_since(entry.last_seen) < IDLE
        });
        unused
    }
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
        assert_eq!(later.want, Want { requests_per_s: 2, tokens_per_s: 20 });
    }

    #[test]
    fn a_lease_admits_until_its_units_or_its_second_run_out_then_gives_the_rest_back() {
        let leases = Leases::default();
        let sent = Instant::now();
        let _ = leases.draw("k", &RATE, 10, sent).unwrap_err();
        assert_eq!(leases.admitted("k", 10, true, Some(grant(sent, 3, 25, 600))), None);
        let (second, snapshot) = leases.draw("k", &RATE, 10, sent).unwrap();
        assert_eq!(second, 7);
        // 13 charged, 2 of them still leased here: 11 used of 1000.
        assert_eq!(snapshot.requests.map(|r| r.1), Some(989));
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
        assert!(leases.sweep(sent).is_empty());
        let swept = leases.sweep(sent + Duration::from_secs(1));
        assert_eq!(swept, vec![("k".to_owned(), Unused { second: 7, requests: 4, tokens: 40 })]);
        assert!(leases.sweep(sent + IDLE + Duration::from_secs(1)).is_empty());
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
        assert_eq!(
            leases.sweep(sent + Duration::from_secs(1)),
            vec![("k".to_owned(), Unused { second: 7, requests: 3, tokens: 8 })]
        );
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
