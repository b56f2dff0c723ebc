//! The response cache (`cache:`): complete answers stored under a digest of the canonical request
//! (`cache/key.rs`), in memory with a byte cap (least recently used evicted first) and, with
//! `redis:`, in Redis too so a fleet shares them. An answer is stored as the client received it
//! — the JSON body, or the whole event stream — so a hit is replayed byte for byte in the
//! client's own API without touching a backend. A `Fill` collects an answer while it is relayed
//! and stores it only when it ended cleanly and complete.

pub mod key;
pub mod semantic;

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use hashlink::LinkedHashMap;

use crate::clock::Clock;
use crate::config::CacheConfig;
use crate::endpoint::Endpoint;
use crate::shared::{Shared, PREFIX};
pub use key::{digest, Digest, KeyParts};

/// One stored answer.
pub struct Entry {
    /// When it was stored (unix ms), for `age` and `Cache-Control: max-age`.
    pub stored_ms: i64,
    pub expires_ms: i64,
    pub content_type: Bytes,
    /// The model that served it.
    pub model: Box<str>,
    pub body: Bytes,
}

impl Entry {
    /// What it costs the memory cap (the body and its bookkeeping).
    fn weight(&self) -> usize {
        self.body.len() + self.content_type.len() + self.model.len() + 128
    }

    /// The form it has in Redis: `SYC1`, stored and expiry times, then the content type, model
    /// and body, the first two with their lengths.
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.weight());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.stored_ms.to_le_bytes());
        out.extend_from_slice(&self.expires_ms.to_le_bytes());
        for part in [&self.content_type[..], self.model.as_bytes()] {
            out.extend_from_slice(&(part.len() as u16).to_le_bytes());
            out.extend_from_slice(part);
        }
        out.extend_from_slice(&self.body);
        out
    }

    fn decode(bytes: &[u8]) -> Option<Entry> {
        let rest = bytes.strip_prefix(MAGIC)?;
        let (stored, rest) = rest.split_first_chunk::<8>()?;
        let (expires, mut rest) = rest.split_first_chunk::<8>()?;
        let mut parts = [&[][..]; 2];
        for part in &mut parts {
            let (len, after) = rest.split_first_chunk::<2>()?;
            let len = u16::from_le_bytes(*len) as usize;
            *part = after.get(..len)?;
            rest = &after[len..];
        }
        Some(Entry {
            stored_ms: i64::from_le_bytes(*stored),
            expires_ms: i64::from_le_bytes(*expires),
            content_type: Bytes::copy_from_slice(parts[0]),
            model: std::str::from_utf8(parts[1]).ok()?.into(),
            body: Bytes::copy_from_slice(rest),
        })
    }
}

const MAGIC: &[u8] = b"SYC1";

/// Where a hit came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Memory,
    Shared,
}

struct Memory {
    entries: LinkedHashMap<Digest, Arc<Entry>>,
    bytes: usize,
}

#[derive(Default)]
struct Counters {
    hits_memory: AtomicU64,
    hits_shared: AtomicU64,
    misses: AtomicU64,
    stores: AtomicU64,
    evictions: AtomicU64,
    shared_errors: AtomicU64,
}

pub struct ResponseCache {
    memory: Mutex<Memory>,
    max_bytes: usize,
    /// Redis, when the fleet shares the cache.
    shared: Option<Arc<Shared>>,
    clock: Clock,
    counters: Counters,
}

impl ResponseCache {
    /// The cache `config` asks for, or None when it is off.
    pub fn new(config: &CacheConfig, shared: Option<Arc<Shared>>, clock: Clock) -> Option<Arc<ResponseCache>> {
        config.enabled.then(|| {
            Arc::new(ResponseCache {
                memory: Mutex::new(Memory { entries: LinkedHashMap::new(), bytes: 0 }),
                max_bytes: config.max_bytes,
                shared: shared.filter(|_| config.shared),
                clock,
                counters: Counters::default(),
            })
        })
    }

    pub fn now_ms(&self) -> i64 {
        self.clock.unix_ms()
    }

    fn memory(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.memory.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The stored answer for `digest`, if one is still fresh and no older than `max_age`: from
    /// memory, else (in a fleet) from Redis.
    pub async fn get(&self, digest: &Digest, max_age: Option<Duration>) -> Option<(Arc<Entry>, Source)> {
        let now = self.now_ms();
        let fresh = |e: &Entry| e.expires_ms > now && max_age.is_none_or(|a| now - e.stored_ms <= a.as_millis() as i64);
        let found = {
            let mut memory = self.memory();
            match memory.entries.to_back(digest).cloned() {
                Some(e) if e.expires_ms <= now => {
                    memory.entries.remove(digest);
                    memory.bytes -= e.weight();
                    None
                }
                other => other,
            }
        };
        if let Some(entry) = found.filter(|e| fresh(e)) {
            self.counters.hits_memory.fetch_add(1, Relaxed);
            return Some((entry, Source::Memory));
        }
        if let Some(entry) = self.get_shared(digest).await {
            let entry = Arc::new(entry);
            if entry.expires_ms > now {
                self.insert_memory(*digest, entry.clone());
            }
            if fresh(&entry) {
                self.counters.hits_shared.fetch_add(1, Relaxed);
                return Some((entry, Source::Shared));
            }
        }
        self.counters.misses.fetch_add(1, Relaxed);
        None
    }

    async fn get_shared(&self, digest: &Digest) -> Option<Entry> {
        let shared = self.shared.as_ref()?;
        let key = redis_key(digest);
        let got = shared
            .call(|mut c| {
                let mut get = redis::cmd("GET");
                get.arg(&key);
                async move { get.query_async::<Option<Vec<u8>>>(&mut c).await }
            })
            .await;
        match got {
            Ok(bytes) => Entry::decode(&bytes?),
            Err(e) => {
                self.counters.shared_errors.fetch_add(1, Relaxed);
                tracing::debug!(error = ?e, "could not read the shared response cache");
                None
            }
        }
    }

    /// Store an answer for `ttl`: in memory at once, in Redis in the background.
    pub fn put(&self, digest: Digest, entry: Entry) {
        self.counters.stores.fetch_add(1, Relaxed);
        let entry = Arc::new(entry);
        if let Some(shared) = self.shared.clone() {
            let (key, value) = (redis_key(&digest), entry.encode());
            let ttl_ms = (entry.expires_ms - entry.stored_ms).max(1);
            tokio::spawn(async move {
                let stored = shared
                    .call(|mut c| {
                        let mut set = redis::cmd("SET");
                        set.arg(&key).arg(&value).arg("PX").arg(ttl_ms);
                        async move { set.query_async::<()>(&mut c).await }
                    })
                    .await;
                if let Err(e) = stored {
                    tracing::debug!(error = ?e, "could not share a cached response");
                }
            });
        }
        self.insert_memory(digest, entry);
    }

    fn insert_memory(&self, digest: Digest, entry: Arc<Entry>) {
        let weight = entry.weight();
        let mut memory = self.memory();
        if let Some(old) = memory.entries.insert(digest, entry) {
            memory.bytes -= old.weight();
        }
        memory.bytes += weight;
        let mut evicted = 0;
        while memory.bytes > self.max_bytes {
            let Some((_, old)) = memory.entries.pop_front() else { break };
            memory.bytes -= old.weight();
            evicted += 1;
        }
        drop(memory);
        if evicted > 0 {
            self.counters.evictions.fetch_add(evicted, Relaxed);
        }
    }

    /// The exact layer's counters, for the console's cache page.
    pub fn stats(&self) -> serde_json::Value {
        let c = &self.counters;
        let (entries, bytes) = {
            let memory = self.memory();
            (memory.entries.len(), memory.bytes)
        };
        serde_json::json!({
            "hits": c.hits_memory.load(Relaxed) + c.hits_shared.load(Relaxed),
            "hits_redis": c.hits_shared.load(Relaxed),
            "misses": c.misses.load(Relaxed),
            "stores": c.stores.load(Relaxed),
            "entries": entries,
            "bytes": bytes,
            "max_bytes": self.max_bytes,
        })
    }

    /// `switchyard_cache_*` series for `/metrics`.
    pub fn render(&self, out: &mut String) {
        let c = &self.counters;
        let (entries, bytes) = {
            let memory = self.memory();
            (memory.entries.len(), memory.bytes)
        };
        out.push_str("# HELP switchyard_cache_hits_total Requests answered from the response cache, by where the answer was found.\n# TYPE switchyard_cache_hits_total counter\n");
        let _ = writeln!(out, "switchyard_cache_hits_total{{source=\"memory\"}} {}", c.hits_memory.load(Relaxed));
        let _ = writeln!(out, "switchyard_cache_hits_total{{source=\"redis\"}} {}", c.hits_shared.load(Relaxed));
        for (name, help, kind, value) in [
            (
                "switchyard_cache_misses_total",
                "Cacheable requests with no stored answer.",
                "counter",
                c.misses.load(Relaxed),
            ),
            ("switchyard_cache_stores_total", "Answers stored.", "counter", c.stores.load(Relaxed)),
            (
                "switchyard_cache_evictions_total",
                "Answers evicted to stay within cache.max_bytes.",
                "counter",
                c.evictions.load(Relaxed),
            ),
            (
                "switchyard_cache_redis_errors_total",
                "Shared-cache reads that failed (served as misses).",
                "counter",
                c.shared_errors.load(Relaxed),
            ),
            ("switchyard_cache_entries", "Answers held in memory.", "gauge", entries as u64),
            (
                "switchyard_cache_bytes",
                "Memory the held answers take (counted against cache.max_bytes).",
                "gauge",
                bytes as u64,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
        }
    }
}

fn redis_key(digest: &Digest) -> String {
    let mut key = String::with_capacity(PREFIX.len() + 6 + 64);
    key.push_str(PREFIX);
    key.push_str("cache:");
    for b in digest {
        let _ = write!(key, "{b:02x}");
    }
    key
}

/// An answer being relayed that may be stored once it is complete.
pub struct Fill {
    cache: Arc<ResponseCache>,
    digest: Digest,
    endpoint: Endpoint,
    stream: bool,
    ttl: Duration,
    max: usize,
    content_type: Bytes,
    model: Box<str>,
    body: Vec<u8>,
    /// More than `max` bytes came: not stored.
    over: bool,
    /// The semantic layer's part: stored too, API-neutral, when the answer is complete.
    semantic: Option<semantic::Pending>,
}

impl Fill {
    /// `stream`: the answer is a stream of `endpoint`'s API, stored for `config.ttl` if it stays
    /// within `config.max_entry_bytes`.
    pub fn new(
        cache: Arc<ResponseCache>,
        digest: Digest,
        endpoint: Endpoint,
        stream: bool,
        config: &CacheConfig,
        content_type: Bytes,
        model: &str,
    ) -> Fill {
        let (ttl, max) = (config.ttl, config.max_entry_bytes);
        Fill {
            cache,
            digest,
            endpoint,
            stream,
            ttl,
            max,
            content_type,
            model: model.into(),
            body: Vec::new(),
            over: false,
            semantic: None,
        }
    }

    /// Store the answer in the semantic layer too.
    pub fn with_semantic(mut self, pending: Option<semantic::Pending>) -> Fill {
        self.semantic = pending;
        self
    }

    /// Bytes on their way to the client.
    pub fn push(&mut self, data: &[u8]) {
        if self.over || self.body.len() + data.len() > self.max {
            self.over = true;
            self.body = Vec::new();
            return;
        }
        self.body.extend_from_slice(data);
    }

    /// The client went away before the backend's end was read. A stream that already passed its
    /// terminal event is whole all the same (clients stop reading at `[DONE]` and may close
    /// before the backend's last chunk arrives); a plain body is not known to be.
    pub fn abandoned(self) {
        if self.stream && stream_complete(self.endpoint, &self.body) {
            self.finish();
        }
    }

    /// The answer reached its clean end: store it if it is whole and not an error.
    pub fn finish(self) {
        if self.over || self.body.is_empty() || !complete(self.endpoint, self.stream, &self.body) {
            return;
        }
        let stored_ms = self.cache.now_ms();
        if let Some(pending) = self.semantic {
            pending.store(self.endpoint, self.stream, &self.body, &self.model, stored_ms);
        }
        let entry = Entry {
            stored_ms,
            expires_ms: stored_ms.saturating_add(self.ttl.as_millis() as i64),
            content_type: self.content_type,
            model: self.model,
            body: Bytes::from(self.body),
        };
        self.cache.put(self.digest, entry);
    }
}

/// Whether a stream a client closed is whole all the same: it passed its terminal event, and
/// stopped at an event's (or NDJSON line's) end, never a terminal event cut in two.
pub(crate) fn stream_complete(endpoint: Endpoint, body: &[u8]) -> bool {
    body.ends_with(b"\n") && complete(endpoint, true, body)
}

/// Whether a relayed answer is whole: a stream that reached its API's last event, with no error
/// event on the way (a 200 stream can still carry one), or a JSON body that is not an error.
fn complete(endpoint: Endpoint, stream: bool, body: &[u8]) -> bool {
    use memchr::memmem::find;
    if !stream {
        return !body.starts_with(b"{\"error\"");
    }
    if find(body, b"event: error").is_some() || find(body, b"data: {\"error\"").is_some() {
        return false;
    }
    let last: &[u8] = match endpoint {
        Endpoint::ChatCompletions | Endpoint::Completions => b"[DONE]",
        Endpoint::Messages => b"message_stop",
        Endpoint::Responses => b"response.completed",
        Endpoint::OllamaChat | Endpoint::OllamaGenerate => b"\"done\":true",
        Endpoint::GeminiStream => b"\"finishReason\"",
        _ => return false,
    };
    // The last event may carry the whole answer (`response.completed`): search from the end.
    memchr::memmem::rfind(body, last).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(body: &str, stored_ms: i64) -> Entry {
        Entry {
            stored_ms,
            expires_ms: stored_ms + 60_000,
            content_type: Bytes::from_static(b"application/json"),
            model: "m".into(),
            body: Bytes::copy_from_slice(body.as_bytes()),
        }
    }

    #[test]
    fn entries_round_trip_through_their_redis_form() {
        let e = entry("{\"x\":1}", 1234);
        let back = Entry::decode(&e.encode()).unwrap();
        assert_eq!((back.stored_ms, back.expires_ms), (1234, 61_234));
        assert_eq!(&back.content_type[..], b"application/json");
        assert_eq!(&*back.model, "m");
        assert_eq!(&back.body[..], b"{\"x\":1}");
        assert!(Entry::decode(b"SYC1\0\0").is_none());
        assert!(Entry::decode(b"nope").is_none());
    }

    #[tokio::test]
    async fn memory_stays_within_its_cap_evicting_the_least_recently_used() {
        let config = CacheConfig { enabled: true, max_bytes: 3 * (1000 + 16 + 1 + 128), ..CacheConfig::default() };
        let clock = Clock::system();
        let cache = ResponseCache::new(&config, None, clock.clone()).unwrap();
        let now = clock.unix_ms();
        let body = "x".repeat(1000);
        for i in 0..3u8 {
            cache.put([i; 32], entry(&body, now));
        }
        // Touch the first: the second is now the least recently used.
        assert!(cache.get(&[0; 32], None).await.is_some());
        cache.put([3; 32], entry(&body, now));
        assert!(cache.get(&[1; 32], None).await.is_none());
        for i in [0u8, 2, 3] {
            assert!(cache.get(&[i; 32], None).await.is_some(), "entry {i}");
        }
        assert!(cache.memory().bytes <= config.max_bytes);
    }

    #[tokio::test]
    async fn stale_and_too_old_answers_are_not_served() {
        let config = CacheConfig { enabled: true, ..CacheConfig::default() };
        let clock = Clock::system();
        let cache = ResponseCache::new(&config, None, clock.clone()).unwrap();
        let now = clock.unix_ms();
        cache.put([1; 32], entry("{}", now - 61_000));
        assert!(cache.get(&[1; 32], None).await.is_none(), "expired");
        cache.put([2; 32], entry("{}", now - 5_000));
        assert!(cache.get(&[2; 32], Some(Duration::from_secs(2))).await.is_none(), "older than max-age");
        assert!(cache.get(&[2; 32], Some(Duration::from_secs(10))).await.is_some());
    }

    #[test]
    fn only_whole_answers_are_complete() {
        let chat = Endpoint::ChatCompletions;
        assert!(complete(chat, true, b"data: {\"choices\":[]}\n\ndata: [DONE]\n\n"));
        assert!(!complete(chat, true, b"data: {\"choices\":[]}\n\n"));
        assert!(!complete(chat, true, b"data: {\"error\":{}}\n\ndata: [DONE]\n\n"));
        assert!(complete(Endpoint::Messages, true, b"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"));
        assert!(!complete(Endpoint::Messages, true, b"event: error\ndata: {}\n\nevent: message_stop\n\n"));
        assert!(complete(Endpoint::OllamaChat, true, b"{\"done\":true}\n"));
        assert!(complete(chat, false, b"{\"id\":\"x\",\"choices\":[]}"));
        assert!(!complete(chat, false, b"{\"error\":{\"message\":\"no\"}}"));
    }
}
