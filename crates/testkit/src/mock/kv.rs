//! The mock's simulated inference server: a KV (prefix) cache shared by K slots. A request waits
//! for a free slot (the queue), looks up the longest cached prefix of its prompt, spends
//! `fixed_ttft_us + prefill_us_per_token × uncached tokens` holding the slot (prefill), then
//! `decode_ms_per_token` per generated token, and leaves its prompt and reply in the cache.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::header::{HeaderName, HeaderValue};
use http::Response;
use serde_json::Value;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::body::MockBody;
use super::prefix_cache::PrefixCache;
use super::reply::Reply;
use super::{lock, tokens};

/// A simulated KV cache ([`super::MockConfig::kv_cache`]); times are simulated with sleeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvCacheConfig {
    /// Tokens the cache holds, shared by every slot (like llama.cpp's unified KV cache).
    pub capacity_tokens: usize,
    /// Prefill time per uncached prompt token, in microseconds.
    pub prefill_us_per_token: u64,
    /// Time per generated token, in milliseconds: the delay between streamed chunks (it replaces
    /// `chunk_delay`), or all of them before a whole response. The reply has `stream_chunks` tokens.
    pub decode_ms_per_token: u64,
    /// Fixed part of the time to first token, in microseconds.
    pub fixed_ttft_us: u64,
    /// Requests processed at once; more wait for a slot, in arrival order.
    pub slots: usize,
}

impl Default for KvCacheConfig {
    fn default() -> Self {
        KvCacheConfig {
            capacity_tokens: 32_768,
            prefill_us_per_token: 100,
            decode_ms_per_token: 0,
            fixed_ttft_us: 200,
            slots: 1,
        }
    }
}

/// Cumulative counters and current state of a mock's KV cache ([`super::MockControl::kv_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct KvStats {
    /// Requests that got a slot and were prefilled.
    pub requests: u64,
    /// Prompt tokens of those requests.
    pub prompt_tokens: u64,
    /// Prompt tokens found in the cache (the prefix hits).
    pub cached_tokens: u64,
    /// Prompt tokens computed (prompt − cached).
    pub prefill_tokens: u64,
    /// Tokens generated.
    pub completion_tokens: u64,
    /// Total time requests waited for a slot, in microseconds.
    pub queue_us: u64,
    /// Tokens the cache holds now, and at most.
    pub cache_tokens: u64,
    pub capacity_tokens: u64,
    /// Tokens evicted so far.
    pub evicted_tokens: u64,
    /// Slots, busy slots, and requests waiting for one.
    pub slots: u64,
    pub processing: u64,
    pub deferred: u64,
}

/// One slot, as `GET /slots` shows it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Slot {
    pub(crate) busy: bool,
    /// The task it serves or last served; -1 before its first.
    pub(crate) id_task: i64,
    pub(crate) prompt_tokens: u64,
    pub(crate) cached_tokens: u64,
    /// Tokens the reply will have.
    pub(crate) n_predict: u64,
    /// When decoding started, and its pace, to tell how many tokens are decoded so far.
    pub(crate) decode_start: Option<Instant>,
    pub(crate) per_token: Duration,
}

impl Slot {
    pub(crate) fn decoded(&self) -> u64 {
        match self.decode_start {
            None => 0,
            Some(_) if self.per_token.is_zero() => self.n_predict,
            Some(start) => {
                let done = start.elapsed().as_nanos() / self.per_token.as_nanos();
                u64::try_from(done).unwrap_or(u64::MAX).min(self.n_predict)
            }
        }
    }
}

struct Inner {
    cache: PrefixCache,
    slots: Vec<Slot>,
}

#[derive(Default)]
struct Counters {
    requests: AtomicU64,
    prompt: AtomicU64,
    cached: AtomicU64,
    prefill: AtomicU64,
    completion: AtomicU64,
    queue_us: AtomicU64,
    /// Simulated prefill and decode time, in microseconds (llama.cpp's `*_seconds_total`).
    prefill_us: AtomicU64,
    decode_us: AtomicU64,
}

/// The simulation's shared state; one per mock, kept in its [`super::MockControl`].
pub(crate) struct KvSim {
    pub(crate) cfg: KvCacheConfig,
    permits: Arc<Semaphore>,
    inner: Mutex<Inner>,
    deferred: AtomicU64,
    next_task: AtomicU64,
    counters: Counters,
}

impl fmt::Debug for KvSim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KvSim").field("cfg", &self.cfg).finish_non_exhaustive()
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Counts a request waiting for a slot while it lives, so a waiter whose client goes away
/// stops counting.
struct Waiting<'a>(&'a AtomicU64);

impl<'a> Waiting<'a> {
    fn new(gauge: &'a AtomicU64) -> Self {
        gauge.fetch_add(1, Ordering::Relaxed);
        Waiting(gauge)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl KvSim {
    pub(crate) fn new(cfg: KvCacheConfig) -> Self {
        let slots = cfg.slots.max(1);
        KvSim {
            permits: Arc::new(Semaphore::new(slots)),
            inner: Mutex::new(Inner {
                cache: PrefixCache::new(cfg.capacity_tokens),
                slots: vec![Slot { id_task: -1, ..Slot::default() }; slots],
            }),
            cfg: KvCacheConfig { slots, ..cfg },
            deferred: AtomicU64::new(0),
            next_task: AtomicU64::new(0),
            counters: Counters::default(),
        }
    }

    /// Serves the prompt of `body` answered with `reply` of `generated` tokens, up to its first
    /// token: waits for a slot, matches the cache, sleeps the prefill, caches prompt and reply.
    pub(crate) async fn begin(self: &Arc<Self>, body: &Value, reply: &Reply, generated: u64) -> Turn {
        let prompt = tokens::prompt_tokens(body);
        let sequence = tokens::conversation_tokens(body, Some(&reply.normalised_text()));
        let queued = Instant::now();
        let permit = {
            let _waiting = Waiting::new(&self.deferred);
            // The semaphore is never closed, so this only fails in theory; then run unqueued.
            self.permits.clone().acquire_owned().await.ok()
        };
        let queue = queued.elapsed();
        let per_token = Duration::from_millis(self.cfg.decode_ms_per_token);
        let (index, cached) = {
            let mut inner = lock(&self.inner);
            let index = inner.slots.iter().position(|s| !s.busy).unwrap_or(0);
            // A server always computes the prompt's last token again, for its logits.
            let cached = inner.cache.longest_prefix(&prompt).min(prompt.len().saturating_sub(1));
            let id_task = i64::try_from(self.next_task.fetch_add(1, Ordering::Relaxed)).unwrap_or(i64::MAX);
            inner.slots[index] = Slot {
                busy: true,
                id_task,
                prompt_tokens: prompt.len() as u64,
                cached_tokens: cached as u64,
                n_predict: generated,
                decode_start: None,
                per_token,
            };
            (index, cached as u64)
        };
        // From here on the slot is released however the request ends (even cancelled mid-prefill).
        let slot = SlotGuard { sim: self.clone(), index, _permit: permit };
        let prompt_tokens = prompt.len() as u64;
        let prefill = prompt_tokens - cached;
        let ttft = Duration::from_micros(
            self.cfg.fixed_ttft_us.saturating_add(self.cfg.prefill_us_per_token.saturating_mul(prefill)),
        );
        if !ttft.is_zero() {
            tokio::time::sleep(ttft).await;
        }
        {
            let mut inner = lock(&self.inner);
            // The reply goes in now, not after decoding: a client can only send it back once it
            // has it all, and by then a real server holds it too.
            inner.cache.insert(&sequence);
            inner.slots[index].decode_start = Some(Instant::now());
        }
        let c = &self.counters;
        c.requests.fetch_add(1, Ordering::Relaxed);
        c.prompt.fetch_add(prompt_tokens, Ordering::Relaxed);
        c.cached.fetch_add(cached, Ordering::Relaxed);
        c.prefill.fetch_add(prefill, Ordering::Relaxed);
        c.completion.fetch_add(generated, Ordering::Relaxed);
        c.queue_us.fetch_add(micros(queue), Ordering::Relaxed);
        c.prefill_us.fetch_add(micros(ttft), Ordering::Relaxed);
        c.decode_us.fetch_add(micros(per_token).saturating_mul(generated), Ordering::Relaxed);
        Turn { slot, prompt_tokens, cached, queue, ttft, per_token, generated }
    }

    pub(crate) fn stats(&self) -> KvStats {
        let c = &self.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let inner = lock(&self.inner);
        KvStats {
            requests: load(&c.requests),
            prompt_tokens: load(&c.prompt),
            cached_tokens: load(&c.cached),
            prefill_tokens: load(&c.prefill),
            completion_tokens: load(&c.completion),
            queue_us: load(&c.queue_us),
            cache_tokens: inner.cache.len() as u64,
            capacity_tokens: inner.cache.capacity() as u64,
            evicted_tokens: inner.cache.evicted(),
            slots: inner.slots.len() as u64,
            processing: inner.slots.iter().filter(|s| s.busy).count() as u64,
            deferred: load(&self.deferred),
        }
    }

    /// Simulated prefill and decode time so far, in seconds.
    pub(crate) fn simulated_seconds(&self) -> (f64, f64) {
        let c = &self.counters;
        let secs = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64 / 1e6;
        (secs(&c.prefill_us), secs(&c.decode_us))
    }

    pub(crate) fn slots(&self) -> Vec<Slot> {
        lock(&self.inner).slots.clone()
    }

    pub(crate) fn clear_cache(&self) {
        lock(&self.inner).cache.clear();
    }

    pub(crate) fn reset_counters(&self) {
        let c = &self.counters;
        for counter in
            [&c.requests, &c.prompt, &c.cached, &c.prefill, &c.completion, &c.queue_us, &c.prefill_us, &c.decode_us]
        {
            counter.store(0, Ordering::Relaxed);
        }
    }
}

/// A busy slot; dropping it (the response body done or abandoned) frees the slot.
pub(crate) struct SlotGuard {
    sim: Arc<KvSim>,
    index: usize,
    _permit: Option<OwnedSemaphorePermit>,
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        // Before the permit is released (fields drop after this), so the next request finds the
        // slot free.
        if let Some(slot) = lock(&self.sim.inner).slots.get_mut(self.index) {
            slot.busy = false;
            slot.decode_start = None;
        }
    }
}

/// One request being served, from its first token on.
pub(crate) struct Turn {
    slot: SlotGuard,
    pub(crate) prompt_tokens: u64,
    pub(crate) cached: u64,
    queue: Duration,
    ttft: Duration,
    per_token: Duration,
    generated: u64,
}

static PROMPT_TOKENS: HeaderName = HeaderName::from_static("x-mock-prompt-tokens");
static CACHED_TOKENS: HeaderName = HeaderName::from_static("x-mock-cached-tokens");
static PREFILL_TOKENS: HeaderName = HeaderName::from_static("x-mock-prefill-tokens");
static QUEUE_US: HeaderName = HeaderName::from_static("x-mock-queue-us");
static TTFT_US: HeaderName = HeaderName::from_static("x-mock-ttft-us");
static SLOT: HeaderName = HeaderName::from_static("x-mock-slot");

impl Turn {
    /// Prompt tokens computed.
    pub(crate) fn prefill(&self) -> u64 {
        self.prompt_tokens - self.cached
    }

    /// The delay between generated tokens.
    pub(crate) fn per_token(&self) -> Duration {
        self.per_token
    }

    /// Simulated prefill time (the time to first token, queue excluded).
    pub(crate) fn ttft(&self) -> Duration {
        self.ttft
    }

    /// Simulated decoding time of the whole reply.
    pub(crate) fn decode_time(&self) -> Duration {
        self.per_token.saturating_mul(u32::try_from(self.generated).unwrap_or(u32::MAX))
    }

    /// For a whole (non-streamed) response: waits until every token is decoded.
    pub(crate) async fn decode(&self) {
        let time = self.decode_time();
        if !time.is_zero() {
            tokio::time::sleep(time).await;
        }
    }

    /// Adds the `x-mock-*` headers and makes the body hold the slot until it is sent.
    pub(crate) fn finish(self, resp: Response<MockBody>) -> Response<MockBody> {
        let (mut parts, body) = resp.into_parts();
        for (name, value) in [
            (&PROMPT_TOKENS, self.prompt_tokens),
            (&CACHED_TOKENS, self.cached),
            (&PREFILL_TOKENS, self.prefill()),
            (&QUEUE_US, micros(self.queue)),
            (&TTFT_US, micros(self.ttft)),
            (&SLOT, self.slot.index as u64),
        ] {
            parts.headers.insert(name.clone(), HeaderValue::from(value));
        }
        Response::from_parts(parts, MockBody::Held { body: Box::new(body), _slot: self.slot })
    }
}

/// [`Turn::finish`] when a KV cache is simulated.
pub(crate) fn finish(turn: Option<Turn>, resp: Response<MockBody>) -> Response<MockBody> {
    match turn {
        Some(turn) => turn.finish(resp),
        None => resp,
    }
}
