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
//! Why a script per request and not leases (batches of quota taken ahead): a lease strands up
//! to a batch per instance per window, which a small limit (`rpm: 10`) cannot spare, and the
//! round trip costs ~50–100 µs on loopback, beside an LLM call of hundreds of milliseconds.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::Script;

use super::{Limits, MemoryLimiter, Permit, RateLimited, Refused, Snapshot};
use crate::config::FailurePolicy;
use crate::shared::{Shared, HEARTBEAT, PREFIX};

/// How long a parallel slot outlives its last refresh (a killed instance's slots free by then).
const HOLDER_TTL_MS: u64 = 5000;

/// Check every limit of the request and take what it needs, or take nothing.
/// KEYS: the window hash, the holders set. ARGV: rpm, tpm, max_parallel (0: none), the token
/// estimate, the holder's name, its TTL in ms. Returns {admitted, refused-by (1 parallel,
/// 2 requests, 3 tokens), retry-after ms, requests in window, tokens in window, ms until the
/// oldest admission leaves the window, the second charged}.
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
    return {0, 1, 1000, R, T, reset(), now_s}
  end
end
if rpm > 0 and R >= rpm then
  return {0, 2, wait('r', R, rpm, 1), R, T, reset(), now_s}
end
if tpm > 0 and T + est > tpm then
  return {0, 3, math.max(1, wait('t', T, tpm, est)), R, T, reset(), now_s}
end
if rpm > 0 or tpm > 0 then
  if rpm > 0 then
    redis.call('HINCRBY', W, 'r' .. now_s, 1)
    R = R + 1
  end
  if tpm > 0 then
    redis.call('HINCRBY', W, 't' .. now_s, est)
    T = T + est
  end
  if first == nil then first = now_s end
  redis.call('HSET', W, 'h', now_s, 'R', R, 'T', T, 'f', first)
  redis.call('PEXPIRE', W, 62000)
end
if par > 0 then
  redis.call('ZADD', KEYS[2], now_ms + tonumber(ARGV[6]), ARGV[5])
  redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[6]) * 2)
end
return {1, 0, 0, R, T, reset(), now_s}
";

/// Settle a token reservation to the real count (if its second is still in the window, keeping
/// the running sum right) and give back a parallel slot. ARGV: the second ('' for none),
/// reserved, actual, holder ('' for none).
const FINISH: &str = r"
if ARGV[1] ~= '' then
  local f = 't' .. ARGV[1]
  local cur = tonumber(redis.call('HGET', KEYS[1], f))
  if cur then
    local v = cur - tonumber(ARGV[2]) + tonumber(ARGV[3])
    if v < 0 then v = 0 end
    redis.call('HSET', KEYS[1], f, v)
    redis.call('HINCRBY', KEYS[1], 'T', v - cur)
  end
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

/// One admitted request's end: settle its tokens, give back its slot.
struct Finish {
    window: String,
    holders: String,
    /// The second charged ('' for none), reserved, actual.
    second: String,
    reserved: u64,
    actual: u64,
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
        })
    }

    fn holder_name(&self, n: u64) -> String {
        format!("{}:{n}", self.shared.instance)
    }

    /// Admit or refuse one request for `key`, atomically across every limit and instance.
    pub async fn acquire(self: &Arc<Self>, key: &str, limits: &Limits, estimate: u64) -> Result<Permit, Refused> {
        let holder = limits.max_parallel.map(|_| self.next_holder.fetch_add(1, Relaxed));
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
                    .arg(HOLDER_TTL_MS);
                async move { call.invoke_async::<Vec<i64>>(&mut c).await }
            })
            .await;
        let figures = match figures {
            Ok(f) if f.len() == 7 => f,
            Ok(_) | Err(_) => return self.fallback(key, limits, estimate),
        };
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
            self.holders.lock().unwrap_or_else(|p| p.into_inner()).insert(n, holders.clone());
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
                        .arg(f.reserved)
                        .arg(f.actual)
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

    /// Keep this instance's parallel slots alive, every heartbeat, until the process ends.
    pub async fn keep_holders(self: Arc<Self>) {
        let mut tick = tokio::time::interval(HEARTBEAT);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
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
            (Some((second, reserved)), Some(actual)) if actual != reserved => Some((second, reserved, actual)),
            _ => None,
        };
        if settle.is_none() && self.holder.is_none() {
            return;
        }
        let limiter = &self.limiter;
        let (second, reserved, actual) = settle.map_or((String::new(), 0, 0), |(s, r, a)| (s.to_string(), r, a));
        let finish = Finish {
            window: window_key(&self.key),
            holders: holders_key(&self.key),
            second,
            reserved,
            actual,
            holder: self.holder.map(|n| limiter.holder_name(n)).unwrap_or_default(),
        };
        // Off the request's path, batched; a full queue (the batcher not running, or far
        // behind) sends this one on its own.
        let Err(
            tokio::sync::mpsc::error::TrySendError::Full(finish)
            | tokio::sync::mpsc::error::TrySendError::Closed(finish),
        ) = limiter.finishes.try_send(finish)
        else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let limiter = limiter.clone();
        runtime.spawn(async move {
            let _ = limiter
                .shared
                .call(|mut c| {
                    let mut call = limiter.finish.key(&finish.window);
                    call.key(&finish.holders)
                        .arg(&finish.second)
                        .arg(finish.reserved)
                        .arg(finish.actual)
                        .arg(&finish.holder);
                    async move { call.invoke_async::<i64>(&mut c).await }
                })
                .await;
        });
    }
}
