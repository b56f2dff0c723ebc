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
//! quota to this instance, sized to its demand and to its share of what is left of the first half
//! of the window's quota, and the next requests are admitted from it without a round trip. Past
//! half the quota every request asks Redis; what a lease did not use goes back when it expires
//! (at the end of Redis's second). Keys with `max_parallel` take no leases:
//! their slots are holders in Redis, one per request.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::Script;

use super::lease::{Grant, Leases, Redraw, Unused, Want};
use super::{Limits, MemoryLimiter, Permit, RateLimited, Refused, Snapshot};
use crate::config::FailurePolicy;
use crate::shared::{Shared, HEARTBEAT, PREFIX};

/// How long a parallel slot outlives its last refresh (a killed instance's slots free by then).
const HOLDER_TTL_MS: u64 = 5000;

/// Check every limit of the request and take what it needs, or take nothing.
/// KEYS: the window hash, the holders set. ARGV: rpm, tpm, max_parallel (0: none), the token
/// estimate, the holder's name, its TTL in ms, the lease wanted (requests and tokens per second,
/// 0: none), the live instances, and an expired lease's unused units to give back first (its
/// second, '' for none; requests; tokens) — in the same script, so they are never seen free and
/// then taken by someone else before this request. Returns {admitted, refused-by (1 parallel, 2 requests,
/// 3 tokens), retry-after ms, requests in window, tokens in window (both without the lease), ms
/// until the oldest admission leaves the window, the second charged, requests and tokens leased,
/// ms into the second}.
///
/// The window hash keeps running sums beside its per-second fields — `R`, `T`, the latest second
/// seen `h` and the oldest second still holding an admission `f` — so a request reads four
/// fields and touches each second at most twice in its life (expired once, stepped over once),
/// whatever the window holds: O(1) per request, not a scan of 122 fields.
const ACQUIRE: &str = r"
local t = redis.call('TIME')
local now_s = tonumber(t[1])
local now_ms = now_s * 1000 + math.floor(tonumber(t[2]) / 1000)
local rpm, tpm, par, est = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local oldest = now_s - 60
local W = KEYS[1]
if ARGV[10] ~= '' then
  for _, back in ipairs({{'r', 'R', tonumber(ARGV[11])}, {'t', 'T', tonumber(ARGV[12])}}) do
    local field = back[1] .. ARGV[10]
    local cur = tonumber(redis.call('HGET', W, field))
    if cur and back[3] > 0 then
      local v = math.max(0, cur - back[3])
      redis.call('HSET', W, field, v)
      redis.call('HINCRBY', W, back[2], v - cur)
    end
  end
end
local R, T, first = 0, 0, nil
if rpm > 0 or tpm > 0 then
  local v = redis.call('HMGET', W, 'h', 'R', 'T', 'f')
  local head = tonumber(v[1]) or now_s
  R, T, first = tonumber(v[2]) or 0, tonumber(v[3]) or 0, tonumber(v[4])
  if first and first < oldest then
    for s = first, math.min(head, oldest - 1) do
      local x = redis.call('HMGET', W, 'r' .. s, 't' .. s)
      if x[1] or x[2] then
        R = R - (tonumber(x[1]) or 0)
        T = T - (tonumber(x[2]) or 0)
        redis.call('HDEL', W, 'r' .. s, 't' .. s)
      end
    end
    first = nil
    for s = oldest, head do
      local x = redis.call('HMGET', W, 'r' .. s, 't' .. s)
      if x[1] or x[2] then
        first = s
        break
      end
    end
    if first == nil then R, T = 0, 0 end
  end
end
local function reset()
  if first then return (first + 61) * 1000 - now_ms end
  return 0
end
local function wait(field, sum, limit, need)
  local freed = limit - sum
  if first then
    for s = first, now_s do
      freed = freed + (tonumber(redis.call('HGET', W, field .. s)) or 0)
      if freed >= need then return (s + 61) * 1000 - now_ms end
    end
  end
  return 61000
end
if par > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now_ms)
  if redis.call('ZCARD', KEYS[2]) >= par then
    return {0, 1, 1000, R, T, reset(), now_s, 0, 0, 0}
  end
end
if rpm > 0 and R >= rpm then
  return {0, 2, wait('r', R, rpm, 1), R, T, reset(), now_s, 0, 0, 0}
end
if tpm > 0 and T + est > tpm then
  return {0, 3, math.max(1, wait('t', T, tpm, est)), R, T, reset(), now_s, 0, 0, 0}
end
-- A lease: what the asker will use until this second ends, and at most its share (1 / 2 x live)
-- of what is left of the first half of the window's quota: leases take none of the second half,
-- so a burst that spends the rest finds few units, if any, stranded in another instance's lease.
local into = now_ms - now_s * 1000
local left, live = 1000 - into, 2 * tonumber(ARGV[9])
local xr, xt = 0, 0
if rpm > 0 then
  xr = math.min(math.floor(tonumber(ARGV[7]) * left / 1000), math.floor((math.floor(rpm / 2) - R - 1) / live))
end
if tpm > 0 then
  xt = math.min(math.floor(tonumber(ARGV[8]) * left / 1000), math.floor((math.floor(tpm / 2) - T - est) / live))
end
if (rpm > 0 and xr <= 0) or (tpm > 0 and xt <= 0) then xr, xt = 0, 0 end
if rpm > 0 or tpm > 0 then
  if rpm > 0 then
    redis.call('HINCRBY', W, 'r' .. now_s, 1 + xr)
    R = R + 1 + xr
  end
  if tpm > 0 then
    redis.call('HINCRBY', W, 't' .. now_s, est + xt)
    T = T + est + xt
  end
  if first == nil then first = now_s end
  redis.call('HSET', W, 'h', now_s, 'R', R, 'T', T, 'f', first)
  redis.call('PEXPIRE', W, 62000)
end
if par > 0 then
  redis.call('ZADD', KEYS[2], now_ms + tonumber(ARGV[6]), ARGV[5])
  redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[6]) * 2)
end
return {1, 0, 0, R - xr, T - xt, reset(), now_s, xr, xt, into}
";

/// Correct what a second of the window holds (a token reservation settled to the real count,
/// a lease's unused units given back), keeping the running sums right, if that second is still
/// in the window; and give back a parallel slot. ARGV: the second ('' for none), the change of
/// requests, the change of tokens, the holder ('' for none).
const FINISH: &str = r"
local function adjust(field, sum, by)
  if by == 0 then return end
  local cur = tonumber(redis.call('HGET', KEYS[1], field))
  if cur then
    local v = math.max(0, cur + by)
    redis.call('HSET', KEYS[1], field, v)
    redis.call('HINCRBY', KEYS[1], sum, v - cur)
  end
end
if ARGV[1] ~= '' then
  adjust('r' .. ARGV[1], 'R', tonumber(ARGV[2]))
  adjust('t' .. ARGV[1], 'T', tonumber(ARGV[3]))
end
if ARGV[4] ~= '' then redis.call('ZREM', KEYS[2], ARGV[4]) end
return 1
";

/// Push back the expiry of this instance's holders. KEYS: holder sets; ARGV: TTL, then one
/// holder per key.
const REFRESH: &str = r"
local t = redis.call('TIME')
local until_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
for i = 1, #KEYS do
  redis.call('ZADD', KEYS[i], 'XX', until_ms, ARGV[i + 1])
end
return #KEYS
";

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
    /// This instance's parallel slots in Redis: holder number → its set's key.
    holders: Mutex<HashMap<u64, String>>,
    next_holder: AtomicU64,
    /// Where limits are kept while Redis is away (`local_share`).
    fallback: Arc<MemoryLimiter>,
    /// This instance's leases of keys' quotas.
    leases: Leases,
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
        Arc::new(SharedLimiter {
            shared,
            finishes,
            finish_queue: Mutex::new(Some(queue)),
            acquire: Script::new(ACQUIRE),
            finish: Script::new(FINISH),
            refresh: Script::new(REFRESH),
            holders: Mutex::new(HashMap::new()),
            next_holder: AtomicU64::new(0),
            fallback,
            leases: Leases::default(),
        })
    }

    fn holder_name(&self, n: u64) -> String {
        format!("{}:{n}", self.shared.instance)
    }

    /// Admit or refuse one request for `key`, atomically across every limit and instance: from
    /// this instance's lease of the key's quota when it holds one, else by one script in Redis.
    pub async fn acquire(self: &Arc<Self>, key: &str, limits: &Limits, estimate: u64) -> Result<Permit, Refused> {
        let mut want = Want::default();
        let mut unused = None;
        let mut refreshing = None;
        if limits.max_parallel.is_none() {
            match self.leases.draw(key, limits, estimate, Instant::now()) {
                Ok((second, snapshot)) => {
                    self.shared.count_leased();
                    return Ok(Permit::shared(snapshot, self.leased_hold(key, limits, second, estimate)));
                }
                Err(miss) => {
                    unused = miss.unused;
                    want = miss.want;
                    refreshing = miss.refresher.then_some(Refreshing { leases: &self.leases, key });
                }
            }
        }
        let holder = limits.max_parallel.map(|_| self.next_holder.fetch_add(1, Relaxed));
        let sent = Instant::now();
        // An expired lease's units sent along stay charged if no answer comes: the script may
        // have run before the answer was lost, and giving them back twice would overshoot.
        let Some(mut figures) = self.ask(key, limits, estimate, holder, want, unused.as_ref()).await else {
            return self.fallback(key, limits, estimate);
        };
        if figures[0] != 1 && limits.max_parallel.is_none() {
            drop(refreshing.take());
            match self.redraw(key, limits, estimate).await {
                Redraw::Drawn((second, snapshot)) => {
                    self.shared.count_leased();
                    return Ok(Permit::shared(snapshot, self.leased_hold(key, limits, second, estimate)));
                }
                // Units this instance took and can no longer use: give them back and ask again,
                // in one script.
                Redraw::Expired(unused) => {
                    let Some(again) = self.ask(key, limits, estimate, None, Want::default(), Some(&unused)).await
                    else {
                        return self.fallback(key, limits, estimate);
                    };
                    figures = again;
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
            return Err(Refused::Limited(RateLimited { which, limit, retry_after: ms(figures[2]), snapshot }));
        }
        if let Some(n) = holder {
            self.holders.lock().unwrap_or_else(|p| p.into_inner()).insert(n, holders_key(key));
        }
        if limits.max_parallel.is_none() {
            let refresher = refreshing.take().is_some_and(|r| r.granted());
            let grant = refresher.then(|| Grant {
                second: figures[6],
                requests: limits.rpm.map(|_| figures[7] as u64),
                tokens: limits.tpm.map(|_| figures[8] as u64),
                into_second: ms(figures[9]),
                sent,
                charged_requests: (figures[3] + figures[7]) as u64,
                charged_tokens: (figures[4] + figures[8]) as u64,
                reset: ms(figures[5]),
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
        };
        Ok(Permit::shared(snapshot, hold))
    }

    /// Run the admission script for one request: its figures, or `None` when Redis gave no
    /// answer.
    async fn ask(
        &self,
        key: &str,
        limits: &Limits,
        estimate: u64,
        holder: Option<u64>,
        want: Want,
        unused: Option<&Unused>,
    ) -> Option<Vec<i64>> {
        let (window, holders) = (window_key(key), holders_key(key));
        let figures = self
            .shared
            .call(|mut c| {
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
                async move { call.invoke_async::<Vec<i64>>(&mut c).await }
            })
            .await;
        figures.ok().filter(|f| f.len() == 10)
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

    /// The hold of a request admitted from a lease charged to `second`.
    fn leased_hold(self: &Arc<Self>, key: &str, limits: &Limits, second: i64, estimate: u64) -> Hold {
        Hold {
            limiter: self.clone(),
            key: key.to_owned(),
            reservation: limits.tpm.map(|_| (second, estimate)),
            actual: None,
            holder: None,
        }
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
            for (key, unused) in self.leases.sweep(Instant::now()) {
                self.give_back(&key, unused);
            }
            let held: Vec<(String, String)> = self
                .holders
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .map(|(n, set)| (set.clone(), self.holder_name(*n)))
                .collect();
            if held.is_empty() {
                continue;
            }
            let _ = self
                .shared
                .call(|mut c| {
                    let mut call = self.refresh.prepare_invoke();
                    call.arg(HOLDER_TTL_MS);
                    for (set, name) in &held {
                        call.key(set).arg(name);
                    }
                    async move { call.invoke_async::<i64>(&mut c).await }
                })
                .await;
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
}

impl Hold {
    pub fn settle(&mut self, actual_tokens: u64) {
        self.actual = Some(actual_tokens);
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if let Some(n) = self.holder {
            self.limiter.holders.lock().unwrap_or_else(|p| p.into_inner()).remove(&n);
        }
        let settle = match (self.reservation, self.actual) {
            (Some((second, reserved)), Some(actual)) if actual != reserved => {
                Some((second, actual as i64 - reserved as i64))
            }
            _ => None,
        };
        if settle.is_none() && self.holder.is_none() {
            return;
        }
        let limiter = &self.limiter;
        if let (Some((second, by)), None) = (settle, self.holder) {
            if limiter.leases.settle(&self.key, second, -by, Instant::now()) {
                return;
            }
        }
        let (second, tokens) = settle.map_or((String::new(), 0), |(s, by)| (s.to_string(), by));
        let finish = Finish {
            window: window_key(&self.key),
            holders: holders_key(&self.key),
            second,
            requests: 0,
            tokens,
            holder: self.holder.map(|n| limiter.holder_name(n)).unwrap_or_default(),
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
