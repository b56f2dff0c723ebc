//! The fleet's limiter (`redis:`): requests/min, tokens/min and parallel requests of a key held
//! in Redis and checked by one atomic script per request — one round trip, exact across every
//! instance (N concurrent requests against a limit of L admit exactly L, whichever instances
//! receive them). The window is the in-memory limiter's, in Redis: one-second fields per key
//! with running sums, read by Redis's own clock, so instances with skewed clocks agree. Parallel requests are
//! holders in a sorted set with an expiry this instance refreshes every second, so a cancelled
//! request or a killed instance never leaks a slot (a killed instance's expire after
//! `HOLDER_TTL_MS`). When Redis cannot answer, each limit class follows its `on_failure`
//! policy on a local limiter.
//!
//! A key whose requests come faster than round trips are worth takes leases as well
//! (`limit/lease.rs`): the script that admits one request also charges a batch of the window's
//! quota to this instance, sized to its demand and to its share of what is left of the first
//! quarter of the window's quota, and the next requests are admitted from it without a round
//! trip; past that quarter every request asks Redis. What a lease did not use goes back when it
//! expires (at the end of Redis's second). Parallel slots are pooled the same way: extra holders
//! this instance keeps alive, taken by its requests and put back when they end.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::Script;

use super::lease::{Drawn, Grant, Leases, Redraw, Unused, Want};
use super::shared_scripts::{ACQUIRE, CHARGE, FINISH, REFRESH};
use super::{Limits, MemoryLimiter, Permit, RateLimited, Refused, Snapshot};
use crate::config::FailurePolicy;
use crate::shared::{Shared, SharedError, HEARTBEAT, PREFIX};

/// How long a parallel slot outlives its last refresh (a killed instance's slots free by then).
const HOLDER_TTL_MS: u64 = 5000;

/// One admitted request's end (settle its tokens, give back its slot), or a lease's (give back
/// its unused units).
struct Finish {
    window: String,
    holders: String,
    /// The second charged ('' for none), and the changes to its requests and tokens.
    second: String,
    requests: i64,
    tokens: i64,
    /// The holder's name ('' for none).
    holder: String,
}

/// Finishes waiting for the batcher; more than this and a request finishes on its own.
const FINISH_QUEUE: usize = 65_536;
/// Finishes sent in one pipeline (one round trip).
const FINISH_BATCH: usize = 256;

pub struct SharedLimiter {
    shared: Arc<Shared>,
    finishes: tokio::sync::mpsc::Sender<Finish>,
    /// Taken by `finish_batches` when the server starts it.
    finish_queue: Mutex<Option<tokio::sync::mpsc::Receiver<Finish>>>,
    acquire: Script,
    finish: Script,
    refresh: Script,
    charge: Script,
    /// This instance's parallel slots in Redis: holder number → its set's key.
    holders: Mutex<HashMap<u64, (String, bool)>>,
    next_holder: AtomicU64,
    /// Where limits are kept while Redis is away (`local_share`).
    fallback: Arc<MemoryLimiter>,
    /// This instance's leases of keys' quotas.
    leases: Leases,
    /// What this instance's holders are named with (`instance:`), then their number.
    holder_prefix: String,
}

fn window_key(key: &str) -> String {
    // The braces keep a key's two entries on one Redis Cluster slot.
    format!("{PREFIX}{{{key}}}:window")
}

fn holders_key(key: &str) -> String {
    format!("{PREFIX}{{{key}}}:parallel")
}

impl SharedLimiter {
    pub fn new(shared: Arc<Shared>, fallback: Arc<MemoryLimiter>) -> Arc<SharedLimiter> {
        let (finishes, queue) = tokio::sync::mpsc::channel(FINISH_QUEUE);
        let holder_prefix = format!("{}:", shared.instance);
        Arc::new(SharedLimiter {
            shared,
            finishes,
            finish_queue: Mutex::new(Some(queue)),
            acquire: Script::new(ACQUIRE),
            finish: Script::new(FINISH),
            refresh: Script::new(REFRESH),
            charge: Script::new(CHARGE),
            holders: Mutex::new(HashMap::new()),
            next_holder: AtomicU64::new(0),
            fallback,
            leases: Leases::default(),
            holder_prefix,
        })
    }

    fn holder_name(&self, n: u64) -> String {
        format!("{}{n}", self.holder_prefix)
    }

    /// Admit or refuse one request for `key`, atomically across every limit and instance: from
    /// this instance's lease of the key's quota when it holds one, else by one script in Redis.
    /// Past `redis.timeout` the script's answer is still waited for, up to `until` (the request's
    /// deadline): it counts in Redis either way, so a fallback admission on top would overshoot.
    pub async fn acquire(
        self: &Arc<Self>,
        key: &str,
        limits: &Limits,
        estimate: u64,
        until: Instant,
    ) -> Result<Permit, Refused> {
        let miss = match self.leases.draw(key, limits, estimate, Instant::now()) {
            Ok(drawn) => return Ok(self.leased(key, limits, estimate, drawn)),
            Err(miss) => miss,
        };
        let (want, unused) = (miss.want, miss.unused);
        let mut refreshing = miss.refresher.then_some(Refreshing { leases: &self.leases, key });
        let holder = limits.max_parallel.map(|_| self.next_holder.fetch_add(1, Relaxed));
        // Numbers for the pooled slots asked for (those not granted are never used).
        let first_slot = self.next_holder.fetch_add(want.slots, Relaxed);
        let sent = Instant::now();
        // An expired lease's units sent along stay charged if no answer comes: the script may
        // have run before the answer was lost, and giving them back twice would overshoot.
        let asked = self.ask(key, limits, estimate, holder, (want, first_slot), unused.as_ref(), until).await;
        let mut figures = match asked {
            Ok(figures) => figures,
            Err(unanswered) => return self.unanswered(key, limits, estimate, &unanswered),
        };
        if figures[0] != 1 {
            drop(refreshing.take());
            match self.redraw(key, limits, estimate).await {
                Redraw::Drawn(drawn) => return Ok(self.leased(key, limits, estimate, drawn)),
                // Units this instance took and can no longer use: give them back and ask again,
                // in one script.
                Redraw::Expired(unused) => {
                    let again = (Want::default(), 0);
                    match self.ask(key, limits, estimate, holder, again, Some(&unused), until).await {
                        Ok(again) => figures = again,
                        Err(unanswered) => return self.unanswered(key, limits, estimate, &unanswered),
                    }
                }
                Redraw::Wait(_) | Redraw::Nothing => {}
            }
        }
        let ms = |v: i64| Duration::from_millis(v.max(0) as u64);
        let snapshot = Snapshot {
            requests: limits
                .rpm
                .map(|l| (u64::from(l), u64::from(l).saturating_sub(figures[3] as u64), ms(figures[5]))),
            tokens: limits.tpm.map(|l| (l, l.saturating_sub(figures[4] as u64), ms(figures[5]))),
        };
        if figures[0] != 1 {
            let (which, limit) = match figures[1] {
                1 => ("parallel", limits.max_parallel.map_or(0, u64::from)),
                2 => ("requests", limits.rpm.map_or(0, u64::from)),
                _ => ("tokens", limits.tpm.unwrap_or(0)),
            };
            return Err(Refused::Limited(RateLimited {
                which,
                limit,
                retry_after: ms(figures[2]),
                snapshot,
                level: 0,
            }));
        }
        if let Some(n) = holder {
            self.holders.lock().unwrap_or_else(|p| p.into_inner()).insert(n, (holders_key(key), false));
        }
        {
            let refresher = refreshing.take().is_some_and(|r| r.granted());
            let slots: Vec<u64> = (first_slot..first_slot + figures[10].max(0) as u64).collect();
            if !slots.is_empty() {
                let mut held = self.holders.lock().unwrap_or_else(|p| p.into_inner());
                held.extend(slots.iter().map(|&n| (n, (holders_key(key), true))));
            }
            let grant = refresher.then(|| Grant {
                second: figures[6],
                requests: limits.rpm.map(|_| figures[7] as u64),
                tokens: limits.tpm.map(|_| figures[8] as u64),
                into_second: ms(figures[9]),
                sent,
                charged_requests: (figures[3] + figures[7]) as u64,
                charged_tokens: (figures[4] + figures[8]) as u64,
                reset: ms(figures[5]),
                slots,
            });
            if let Some(unused) = self.leases.admitted(key, estimate, refresher, grant) {
                self.give_back(key, unused);
            }
        }
        let hold = Hold {
            limiter: self.clone(),
            key: key.to_owned(),
            reservation: limits.tpm.map(|_| (figures[6], estimate)),
            actual: None,
            holder,
            pooled: None,
        };
        Ok(Permit::shared(snapshot, hold))
    }

    /// Run the admission script for one request: its figures, or why Redis gave none.
    #[allow(clippy::too_many_arguments)] // one script's arguments, each its own thing
    async fn ask(
        &self,
        key: &str,
        limits: &Limits,
        estimate: u64,
        holder: Option<u64>,
        (want, first_slot): (Want, u64),
        unused: Option<&Unused>,
        until: Instant,
    ) -> Result<Vec<i64>, SharedError> {
        let (window, holders) = (window_key(key), holders_key(key));
        let figures = self
            .shared
            .call_held(
                |mut c| {
                    let mut call = self.acquire.key(&window);
                    call.key(&holders)
                        .arg(limits.rpm.unwrap_or(0))
                        .arg(limits.tpm.unwrap_or(0))
                        .arg(limits.max_parallel.unwrap_or(0))
                        .arg(estimate)
                        .arg(holder.map(|n| self.holder_name(n)).unwrap_or_default())
                        .arg(HOLDER_TTL_MS)
                        .arg(want.requests_per_s)
                        .arg(want.tokens_per_s)
                        .arg(self.shared.live_instances());
                    match unused {
                        Some(u) => call.arg(u.second).arg(u.requests).arg(u.tokens),
                        None => call.arg("").arg(0).arg(0),
                    };
                    call.arg(want.slots).arg(&self.holder_prefix).arg(first_slot);
                    async move { call.invoke_async::<Vec<i64>>(&mut c).await }
                },
                until,
            )
            .await?;
        // Answered, so it ran: an answer of another shape is a broken script, and in doubt.
        if figures.len() == 11 {
            Ok(figures)
        } else {
            Err(SharedError::InDoubt)
        }
    }

    /// No figures from Redis. Not sent (the breaker is open, or the connection failed): the
    /// limit's `on_failure` policy decides. Sent and unanswered: the script may have counted the
    /// request, so admitting it locally as well could overshoot; it is refused, unless the
    /// policy is `open` (the operator chose availability over the limit).
    fn unanswered(&self, key: &str, limits: &Limits, estimate: u64, why: &SharedError) -> Result<Permit, Refused> {
        if !matches!(why, SharedError::InDoubt) {
            return self.fallback(key, limits, estimate);
        }
        self.shared.count_fallback();
        let config = &self.shared.config;
        let rate_open = (limits.rpm.is_none() && limits.tpm.is_none()) || config.rate_policy == FailurePolicy::Open;
        let parallel_open = limits.max_parallel.is_none() || config.parallel_policy == FailurePolicy::Open;
        if rate_open && parallel_open {
            Ok(Permit::unlimited())
        } else {
            Err(Refused::Unavailable)
        }
    }

    /// A refused request's last chance: this instance's own lease (waiting, within
    /// `redis.timeout`, for one being granted), or an expired one's units to give back.
    async fn redraw(&self, key: &str, limits: &Limits, estimate: u64) -> Redraw {
        match self.leases.redraw(key, limits, estimate, Instant::now()) {
            Redraw::Wait(granted) => {
                let _ = tokio::time::timeout(self.shared.config.timeout, granted).await;
                match self.leases.redraw(key, limits, estimate, Instant::now()) {
                    Redraw::Wait(_) => Redraw::Nothing,
                    other => other,
                }
            }
            other => other,
        }
    }

    /// A request admitted from this instance's lease and slot pool, with no round trip.
    fn leased(self: &Arc<Self>, key: &str, limits: &Limits, estimate: u64, drawn: Drawn) -> Permit {
        self.shared.count_leased();
        let hold = Hold {
            limiter: self.clone(),
            key: key.to_owned(),
            reservation: limits.tpm.map(|_| (drawn.second, estimate)),
            actual: None,
            holder: drawn.slot,
            pooled: drawn.slot.map(|_| drawn.generation),
        };
        Permit::shared(drawn.snapshot, hold)
    }

    /// Redis did not answer: each limit class follows its `on_failure` policy on the local limiter.
    fn fallback(&self, key: &str, limits: &Limits, estimate: u64) -> Result<Permit, Refused> {
        let config = &self.shared.config;
        self.shared.count_fallback();
        let live = u64::from(self.shared.live_instances());
        let rate = limits.rpm.is_some() || limits.tpm.is_some();
        if (rate && config.rate_policy == FailurePolicy::Closed)
            || (limits.max_parallel.is_some() && config.parallel_policy == FailurePolicy::Closed)
        {
            return Err(Refused::Unavailable);
        }
        let share = |policy: FailurePolicy, limit: u64| match policy {
            FailurePolicy::LocalShare => Some(limit.div_ceil(live).max(1)),
            _ => None,
        };
        let local = Limits {
            rpm: limits.rpm.and_then(|l| share(config.rate_policy, u64::from(l))).map(|l| l as u32),
            tpm: limits.tpm.and_then(|l| share(config.rate_policy, l)),
            max_parallel: limits
                .max_parallel
                .and_then(|l| share(config.parallel_policy, u64::from(l)))
                .map(|l| l as u32),
        };
        if local.is_unlimited() {
            return Ok(Permit::unlimited());
        }
        self.fallback.acquire(key, &local, estimate).map_err(Refused::Limited)
    }

    /// Send requests' finishes in batches, one pipeline (one round trip) per batch, until the
    /// process ends: a request's end costs Redis one script run, not a round trip of its own.
    pub async fn finish_batches(self: Arc<Self>) {
        let Some(mut queue) = self.finish_queue.lock().unwrap_or_else(|p| p.into_inner()).take() else { return };
        let mut batch = Vec::with_capacity(FINISH_BATCH);
        while queue.recv_many(&mut batch, FINISH_BATCH).await > 0 {
            let pipeline = |script: &Script| {
                let mut pipe = redis::pipe();
                for f in &batch {
                    pipe.cmd("EVALSHA")
                        .arg(script.get_hash())
                        .arg(2)
                        .arg(&f.window)
                        .arg(&f.holders)
                        .arg(&f.second)
                        .arg(f.requests)
                        .arg(f.tokens)
                        .arg(&f.holder)
                        .ignore();
                }
                pipe
            };
            let finish = &self.finish;
            let sent = self
                .shared
                .call(|mut c| {
                    let pipe = pipeline(finish);
                    async move {
                        match pipe.query_async::<()>(&mut c).await {
                            // Redis lost its scripts (a restart): load it, send again. Nothing
                            // ran, so nothing runs twice.
                            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                                finish.prepare_invoke().load_async(&mut c).await?;
                                pipe.query_async::<()>(&mut c).await
                            }
                            other => other,
                        }
                    }
                })
                .await;
            if let Err(e) = sent {
                // Slots not given back expire by themselves; estimates stay charged.
                tracing::debug!(error = ?e, finishes = batch.len(), "could not finish requests in redis");
            }
            batch.clear();
        }
    }

    /// Keep this instance's parallel slots alive and give back expired leases' unused units, every
    /// heartbeat, until the process ends.
    pub async fn keep_holders(self: Arc<Self>) {
        let mut tick = tokio::time::interval(HEARTBEAT);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let swept = self.leases.sweep(Instant::now());
            for (key, unused) in swept.units {
                self.give_back(&key, unused);
            }
            for (key, n) in swept.slots {
                self.return_slot(&key, n);
            }
            let held: Vec<(String, String, bool)> = self
                .holders
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .map(|(n, (set, pooled))| (set.clone(), self.holder_name(*n), *pooled))
                .collect();
            if held.is_empty() {
                continue;
            }
            let kept = self
                .shared
                .call(|mut c| {
                    let mut call = self.refresh.prepare_invoke();
                    call.arg(HOLDER_TTL_MS);
                    for (set, name, _) in &held {
                        call.key(set).arg(name);
                    }
                    async move { call.invoke_async::<Vec<i64>>(&mut c).await }
                })
                .await;
            // A pooled slot not refreshed may have expired, and then another instance can take
            // it: this instance's pools are no longer its own. Forget them (the slots its
            // requests are using go back to Redis as they end) and pool afresh. (A request's own
            // holder found gone has just ended.)
            let lost = match &kept {
                Ok(kept) => held.iter().zip(kept).any(|((_, _, pooled), &kept)| *pooled && kept == 0),
                Err(_) => true,
            };
            if lost {
                for (key, n) in self.leases.forget_slots() {
                    self.return_slot(&key, n);
                }
            }
        }
    }
}

/// An admitted request's share of the fleet's limits; dropping it settles and gives back.
pub struct Hold {
    limiter: Arc<SharedLimiter>,
    key: String,
    /// The second charged and the tokens reserved in it.
    reservation: Option<(i64, u64)>,
    actual: Option<u64>,
    holder: Option<u64>,
    /// The holder is one of this instance's pooled slots (of this generation of its pools): it
    /// goes back to the pool, not Redis.
    pooled: Option<u64>,
}

impl Hold {
    pub fn settle(&mut self, actual_tokens: u64) {
        self.actual = Some(actual_tokens);
    }

    /// Charge `tokens` used since admission to the key's window now (one script; a failure
    /// is logged: the tokens were used either way).
    pub async fn charge(&self, tokens: u64) {
        let limiter = &self.limiter;
        let window = window_key(&self.key);
        let charged = limiter
            .shared
            .call(|mut c| {
                let mut call = limiter.charge.key(&window);
                call.arg(tokens);
                async move { call.invoke_async::<i64>(&mut c).await }
            })
            .await;
        if let Err(e) = charged {
            tracing::warn!(error = ?e, "could not charge a session's tokens to its shared window");
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let limiter = &self.limiter;
        // A pooled slot goes back to the pool (it stays registered for its refreshes).
        let pooled = |n| self.pooled.is_some_and(|generation| limiter.leases.release(&self.key, n, generation));
        let mut holder = self.holder.filter(|&n| !pooled(n));
        if let Some(n) = holder {
            limiter.holders.lock().unwrap_or_else(|p| p.into_inner()).remove(&n);
        }
        let settle = match (self.reservation, self.actual) {
            (Some((second, reserved)), Some(actual)) if actual != reserved => {
                Some((second, actual as i64 - reserved as i64))
            }
            _ => None,
        }
        .filter(|&(second, by)| !limiter.leases.settle(&self.key, second, -by, Instant::now()));
        if settle.is_none() && holder.is_none() {
            return;
        }
        let (second, tokens) = settle.map_or((String::new(), 0), |(s, by)| (s.to_string(), by));
        let finish = Finish {
            window: window_key(&self.key),
            holders: holders_key(&self.key),
            second,
            requests: 0,
            tokens,
            holder: holder.take().map(|n| limiter.holder_name(n)).unwrap_or_default(),
        };
        limiter.send_finish(finish);
    }
}

/// The request refreshing a key's lease; if it ends without an answer from Redis (refused, Redis
/// away, or the client gone), the next request refreshes instead.
struct Refreshing<'a> {
    leases: &'a Leases,
    key: &'a str,
}

impl Refreshing<'_> {
    /// Redis answered with a grant: `Leases::admitted` ends the refresh.
    fn granted(self) -> bool {
        std::mem::forget(self);
        true
    }
}

impl Drop for Refreshing<'_> {
    fn drop(&mut self) {
        self.leases.missed(self.key);
    }
}

impl SharedLimiter {
    /// Give a pooled slot back to Redis (and stop refreshing it).
    fn return_slot(self: &Arc<Self>, key: &str, n: u64) {
        self.holders.lock().unwrap_or_else(|p| p.into_inner()).remove(&n);
        self.send_finish(Finish {
            window: window_key(key),
            holders: holders_key(key),
            second: String::new(),
            requests: 0,
            tokens: 0,
            holder: self.holder_name(n),
        });
    }

    /// Give a lease's unused units back to the window (batched, off the request's path).
    fn give_back(self: &Arc<Self>, key: &str, unused: Unused) {
        self.send_finish(Finish {
            window: window_key(key),
            holders: holders_key(key),
            second: unused.second.to_string(),
            requests: -(unused.requests as i64),
            tokens: -(unused.tokens as i64),
            holder: String::new(),
        });
    }

    /// Queue a finish for the batcher; a full queue (the batcher not running, or far behind)
    /// sends this one on its own.
    fn send_finish(self: &Arc<Self>, finish: Finish) {
        let Err(
            tokio::sync::mpsc::error::TrySendError::Full(finish)
            | tokio::sync::mpsc::error::TrySendError::Closed(finish),
        ) = self.finishes.try_send(finish)
        else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let limiter = self.clone();
        runtime.spawn(async move {
            let _ = limiter
                .shared
                .call(|mut c| {
                    let mut call = limiter.finish.key(&finish.window);
                    call.key(&finish.holders)
                        .arg(&finish.second)
                        .arg(finish.requests)
                        .arg(finish.tokens)
                        .arg(&finish.holder);
                    async move { call.invoke_async::<i64>(&mut c).await }
                })
                .await;
        });
    }
}
