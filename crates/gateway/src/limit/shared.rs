//! The fleet's limiter (`redis:`): requests/min, tokens/min and parallel requests of a key held
//! in Redis and checked by one atomic script per request — one round trip, exact across every
//! instance (N concurrent requests against a limit of L admit exactly L, whichever instances
//! receive them). The window is the in-memory limiter's, in Redis: 61 one-second fields per
//! key read by Redis's own clock, so instances with skewed clocks agree. Parallel requests are
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
/// oldest request / tokens leave the window, the second charged}.
const ACQUIRE: &str = r"
local t = redis.call('TIME')
local now_s = tonumber(t[1])
local now_ms = now_s * 1000 + math.floor(tonumber(t[2]) / 1000)
local rpm, tpm, par, est = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local oldest = now_s - 60
local r, tk, rsum, tsum = {}, {}, 0, 0
if rpm > 0 or tpm > 0 then
  local all = redis.call('HGETALL', KEYS[1])
  for i = 1, #all, 2 do
    local f = all[i]
    local s = tonumber(string.sub(f, 2))
    local v = tonumber(all[i + 1])
    if s < oldest then
      redis.call('HDEL', KEYS[1], f)
    elseif string.sub(f, 1, 1) == 'r' then
      r[s] = v
      rsum = rsum + v
    else
      tk[s] = v
      tsum = tsum + v
    end
  end
end
local function reset(counts)
  for s = oldest, now_s do
    if (counts[s] or 0) > 0 then return (s + 61) * 1000 - now_ms end
  end
  return 0
end
local function wait(counts, sum, limit, need)
  local freed = limit - sum
  for s = oldest, now_s do
    freed = freed + (counts[s] or 0)
    if freed >= need then return (s + 61) * 1000 - now_ms end
  end
  return 61000
end
if par > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now_ms)
  if redis.call('ZCARD', KEYS[2]) >= par then
    return {0, 1, 1000, rsum, tsum, reset(r), reset(tk), now_s}
  end
end
if rpm > 0 and rsum >= rpm then
  return {0, 2, wait(r, rsum, rpm, 1), rsum, tsum, reset(r), reset(tk), now_s}
end
if tpm > 0 and tsum + est > tpm then
  return {0, 3, math.max(1, wait(tk, tsum, tpm, est)), rsum, tsum, reset(r), reset(tk), now_s}
end
if rpm > 0 then
  redis.call('HINCRBY', KEYS[1], 'r' .. now_s, 1)
  rsum = rsum + 1
  r[now_s] = (r[now_s] or 0) + 1
end
if tpm > 0 then
  redis.call('HINCRBY', KEYS[1], 't' .. now_s, est)
  tsum = tsum + est
  tk[now_s] = (tk[now_s] or 0) + est
end
if rpm > 0 or tpm > 0 then redis.call('PEXPIRE', KEYS[1], 62000) end
if par > 0 then
  redis.call('ZADD', KEYS[2], now_ms + tonumber(ARGV[6]), ARGV[5])
  redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[6]) * 2)
end
return {1, 0, 0, rsum, tsum, reset(r), reset(tk), now_s}
";

/// Settle a token reservation to the real count (if its second is still in the window) and
/// give back a parallel slot. ARGV: the second ('' for none), reserved, actual, holder ('').
const FINISH: &str = r"
if ARGV[1] ~= '' then
  local f = 't' .. ARGV[1]
  local cur = redis.call('HGET', KEYS[1], f)
  if cur then
    local v = tonumber(cur) - tonumber(ARGV[2]) + tonumber(ARGV[3])
    if v < 0 then v = 0 end
    redis.call('HSET', KEYS[1], f, v)
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

pub struct SharedLimiter {
    shared: Arc<Shared>,
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
        Arc::new(SharedLimiter {
            shared,
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
            Ok(f) if f.len() == 8 => f,
            Ok(_) | Err(_) => return self.fallback(key, limits, estimate),
        };
        let ms = |v: i64| Duration::from_millis(v.max(0) as u64);
        let snapshot = Snapshot {
            requests: limits
                .rpm
                .map(|l| (u64::from(l), u64::from(l).saturating_sub(figures[3] as u64), ms(figures[5]))),
            tokens: limits.tpm.map(|l| (l, l.saturating_sub(figures[4] as u64), ms(figures[6]))),
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
            reservation: limits.tpm.map(|_| (figures[7], estimate)),
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
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let limiter = self.limiter.clone();
        let (window, holders) = (window_key(&self.key), holders_key(&self.key));
        let holder = self.holder.map(|n| limiter.holder_name(n)).unwrap_or_default();
        // Off the request's path: a slot that cannot be given back expires by itself.
        runtime.spawn(async move {
            let (second, reserved, actual) = settle.map_or((String::new(), 0, 0), |(s, r, a)| (s.to_string(), r, a));
            let _ = limiter
                .shared
                .call(|mut c| {
                    let mut call = limiter.finish.key(&window);
                    call.key(&holders).arg(&second).arg(reserved).arg(actual).arg(&holder);
                    async move { call.invoke_async::<i64>(&mut c).await }
                })
                .await;
        });
    }
}
