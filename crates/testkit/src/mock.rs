//! The mock LLM backend: configuration (which API it speaks, an optional simulated KV cache), runtime
//! control knobs and the server lifecycle (bind, accept loop, kill, restart).

mod anthropic;
mod audio;
mod azure;
mod bedrock;
mod body;
mod extra_api;
mod frames;
mod gemini;
mod handlers;
mod kv;
mod ollama;
mod openai;
mod prefix_cache;
mod realtime;
mod render;
mod reply;
mod signals;
mod stream;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_anthropic;
#[cfg(test)]
mod tests_extra;
#[cfg(test)]
mod tests_kv;
#[cfg(test)]
mod tests_ollama;
#[cfg(test)]
mod tests_tools;
pub mod tokens;

use bytes::Bytes;
use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::Poll;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as AutoBuilder;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

use self::handlers::State;
use self::kv::KvSim;
pub use self::kv::{KvCacheConfig, KvStats};
pub use self::reply::{FINE as REPLY_IN_FINE_PIECES, SPLIT as REPLY_SPLIT};

/// Static configuration of a [`MockServer`].
#[derive(Debug, Clone)]
pub struct MockConfig {
    /// Served model ids; requests for other models get a 404 `model_not_found`.
    pub models: Vec<String>,
    /// Delay added before answering the response headers of successful POSTs.
    pub latency: Duration,
    /// Content chunks per streamed response (also the completion token count).
    pub stream_chunks: usize,
    /// Delay between streamed chunks.
    pub chunk_delay: Duration,
    /// Fraction (0.0..=1.0) of POST requests answered with `fail_status`.
    pub fail_rate: f64,
    /// Status used for injected failures.
    pub fail_status: u16,
    /// The API served (OpenAI-compatible, Anthropic Messages or Ollama).
    pub api: MockApi,
    /// When set, requests must carry this key (`Authorization: Bearer` for the OpenAI API,
    /// `x-api-key` for Anthropic's), so tests prove the gateway sends the backend's own key.
    /// Ollama has no authentication and ignores it. Anthropic always requires some `x-api-key`.
    pub api_key: Option<String>,
    /// When set, the mock simulates an inference server's prefix (KV) cache and slots for every
    /// chat and completion endpoint: time to first token grows with the uncached prompt tokens,
    /// responses carry `x-mock-*` token counts, and `GET /slots` and `GET /metrics` answer as
    /// llama.cpp's server does. See [`KvCacheConfig`] and [`tokens`].
    pub kv_cache: Option<KvCacheConfig>,
}

/// Which API a [`MockServer`] speaks, as the real servers of that kind do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MockApi {
    /// `/v1/chat/completions`, `/v1/completions`, `/v1/embeddings`, `/v1/models` (vLLM, llama.cpp, OpenAI).
    #[default]
    OpenAi,
    /// Anthropic Messages only: `/v1/messages`, `/v1/messages/count_tokens`, `/v1/models`.
    Anthropic,
    /// Ollama's native `/api/*` plus its OpenAI-compatible `/v1/*`, as Ollama serves both.
    Ollama,
    /// Azure OpenAI: the OpenAI API under `/openai/v1/*`, and under
    /// `/openai/deployments/{deployment}/*?api-version=` with `/openai/models?api-version=`;
    /// `api-key` authentication.
    Azure,
    /// Google's Gemini API: `/v1beta/models`, `/v1beta/models/{model}:generateContent` and
    /// `:streamGenerateContent?alt=sse`; `x-goog-api-key` authentication.
    Gemini,
    /// Amazon Bedrock: `/foundation-models`, `/model/{modelId}/converse` and `/converse-stream`
    /// (AWS event stream); a bearer API key or a SigV4 `Authorization`.
    Bedrock,
}

impl MockApi {
    pub fn as_str(self) -> &'static str {
        match self {
            MockApi::OpenAi => "openai",
            MockApi::Anthropic => "anthropic",
            MockApi::Ollama => "ollama",
            MockApi::Azure => "azure",
            MockApi::Gemini => "gemini",
            MockApi::Bedrock => "bedrock",
        }
    }
}

impl fmt::Display for MockApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for MockApi {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "openai" => Ok(MockApi::OpenAi),
            "anthropic" => Ok(MockApi::Anthropic),
            "ollama" => Ok(MockApi::Ollama),
            "azure" => Ok(MockApi::Azure),
            "gemini" => Ok(MockApi::Gemini),
            "bedrock" => Ok(MockApi::Bedrock),
            other => {
                Err(format!("unknown API `{other}` (expected openai, anthropic, ollama, azure, gemini or bedrock)"))
            }
        }
    }
}

impl Default for MockConfig {
    fn default() -> Self {
        MockConfig {
            models: vec!["mock-model".to_owned()],
            latency: Duration::ZERO,
            stream_chunks: 5,
            chunk_delay: Duration::ZERO,
            fail_rate: 0.0,
            fail_status: 503,
            api: MockApi::OpenAi,
            api_key: None,
            kv_cache: None,
        }
    }
}

/// Runtime knobs and counters shared by every handler of one [`MockServer`]
/// (and preserved across [`MockServer::restart`]).
#[derive(Debug)]
pub struct MockControl {
    /// POST requests received (every POST, whatever its outcome).
    pub requests: AtomicU64,
    /// POST requests answered with the injected failure status.
    pub failures: AtomicU64,
    /// TCP connections accepted.
    pub connections: AtomicU64,
    /// POSTs inside their added latency now, and the most there ever were at once.
    pub in_flight: AtomicU64,
    pub peak_in_flight: AtomicU64,
    fail_rate_bits: AtomicU64,
    fail_status: AtomicU16,
    /// The next this many POSTs fail whatever the rate.
    fail_next: AtomicU64,
    /// Headers the injected failures carry (`Retry-After`, `retry-after-ms`).
    fail_headers: Mutex<Vec<(&'static str, String)>>,
    /// The injected failures' body, instead of the API's own generic error.
    fail_body: Mutex<Option<Bytes>>,
    latency_ns: AtomicU64,
    chunk_delay_ns: AtomicU64,
    rng: AtomicU64,
    /// The next stream breaks off after this many frames, plus one (0: none does).
    die_after_frames: AtomicU64,
    /// The simulated KV cache and slots, when configured.
    kv: Option<Arc<KvSim>>,
    /// When on, the `x-request-id` and `traceparent` of every POST, in arrival order (see
    /// [`MockControl::keep_ledger`]).
    ledger: Mutex<Option<Vec<(String, String)>>>,
    /// When on, every model API request body, in arrival order (see [`MockControl::keep_bodies`]).
    bodies: Mutex<Option<Vec<Bytes>>>,
    /// OTLP exports received (`POST /v1/traces`, `/v1/logs`).
    otlp_exports: AtomicU64,
    /// Ids of the records webhook deliveries (`POST /hooks/...`) carried, in arrival order.
    delivered: Mutex<Vec<String>>,
    /// As a receiver that dedupes by `Idempotency-Key` keeps them: each key's batch once.
    hook_store: Mutex<HookStore>,
    /// How long a webhook delivery seen for the first time waits (after it is stored) before
    /// it is answered: a receiver slower than the sender's timeout.
    hook_delay_ns: AtomicU64,
    /// Azure and Bedrock APIs only: the path (and query) of every POST, in arrival order.
    posted_paths: Mutex<Vec<String>>,
    /// Bedrock only: the prompt prefixes cached at a `cachePoint` so far.
    prompt_prefixes: Mutex<std::collections::HashSet<String>>,
    /// OpenAI API only: a provider's limits on each key (a key pool's tests), when set.
    key_limits: Mutex<Option<KeyLimits>>,
}

/// Each key may make `rpm` requests a window (windows aligned to the wall clock, as a provider's
/// minute is); revoked keys get 401.
#[derive(Debug)]
struct KeyLimits {
    rpm: u64,
    window: Duration,
    /// The window the counts are of (Unix ms / window).
    current: u64,
    used: std::collections::HashMap<String, u64>,
    revoked: std::collections::HashSet<String>,
    served: std::collections::HashMap<String, u64>,
    refused: u64,
}

/// Why a key's request was refused by its limits.
pub(crate) enum KeyRefusal {
    Revoked,
    /// A 429, with the headers that say when to come back.
    Limited(Vec<(http::HeaderName, http::HeaderValue)>),
}

/// What a webhook receiver that dedupes by `Idempotency-Key` has kept.
#[derive(Debug, Default)]
struct HookStore {
    keys: std::collections::HashSet<String>,
    ids: Vec<String>,
    repeats: u64,
}

fn duration_to_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl MockControl {
    fn new(cfg: &MockConfig) -> Self {
        let c = MockControl {
            requests: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            peak_in_flight: AtomicU64::new(0),
            fail_rate_bits: AtomicU64::new(0),
            fail_status: AtomicU16::new(503),
            fail_next: AtomicU64::new(0),
            fail_headers: Mutex::new(Vec::new()),
            fail_body: Mutex::new(None),
            latency_ns: AtomicU64::new(0),
            chunk_delay_ns: AtomicU64::new(0),
            rng: AtomicU64::new(0x5EED),
            die_after_frames: AtomicU64::new(0),
            kv: cfg.kv_cache.clone().map(|kv| Arc::new(KvSim::new(kv))),
            ledger: Mutex::new(None),
            bodies: Mutex::new(None),
            otlp_exports: AtomicU64::new(0),
            delivered: Mutex::new(Vec::new()),
            hook_store: Mutex::new(HookStore::default()),
            hook_delay_ns: AtomicU64::new(0),
            posted_paths: Mutex::new(Vec::new()),
            prompt_prefixes: Mutex::new(std::collections::HashSet::new()),
            key_limits: Mutex::new(None),
        };
        c.set_fail_rate(cfg.fail_rate);
        c.set_fail_status(cfg.fail_status);
        c.set_latency(cfg.latency);
        c.set_chunk_delay(cfg.chunk_delay);
        c
    }

    /// The next `n` POSTs fail with the fail status, whatever the fail rate.
    pub fn set_fail_next(&self, n: u64) {
        self.fail_next.store(n, Ordering::Relaxed);
    }

    /// Headers every injected failure carries from now on (e.g. `("retry-after", "2")`).
    pub fn set_fail_headers(&self, headers: &[(&'static str, &str)]) {
        *self.fail_headers.lock().unwrap_or_else(|p| p.into_inner()) =
            headers.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
    }

    /// The body injected failures carry from now on (None: the API's own generic error).
    pub fn set_fail_body(&self, body: Option<&str>) {
        *self.fail_body.lock().unwrap_or_else(|p| p.into_inner()) = body.map(|b| Bytes::from(b.to_owned()));
    }

    pub(crate) fn fail_body(&self) -> Option<Bytes> {
        self.fail_body.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(crate) fn fail_headers(&self) -> Vec<(&'static str, String)> {
        self.fail_headers.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Sets the fraction of POSTs answered with the fail status (clamped to 0..=1).
    pub fn set_fail_rate(&self, rate: f64) {
        let rate = if rate.is_nan() { 0.0 } else { rate.clamp(0.0, 1.0) };
        self.fail_rate_bits.store(rate.to_bits(), Ordering::Relaxed);
    }
    /// Current fail rate.
    pub fn fail_rate(&self) -> f64 {
        f64::from_bits(self.fail_rate_bits.load(Ordering::Relaxed))
    }
    /// Sets the status of injected failures (invalid codes are answered as 500).
    pub fn set_fail_status(&self, status: u16) {
        self.fail_status.store(status, Ordering::Relaxed);
    }
    /// Current status of injected failures.
    pub fn fail_status(&self) -> u16 {
        self.fail_status.load(Ordering::Relaxed)
    }
    /// Sets the delay added before answering headers.
    pub fn set_latency(&self, latency: Duration) {
        self.latency_ns.store(duration_to_ns(latency), Ordering::Relaxed);
    }
    /// Current added latency.
    pub fn latency(&self) -> Duration {
        Duration::from_nanos(self.latency_ns.load(Ordering::Relaxed))
    }
    /// Sets the delay between streamed chunks.
    pub fn set_chunk_delay(&self, delay: Duration) {
        self.chunk_delay_ns.store(duration_to_ns(delay), Ordering::Relaxed);
    }
    /// Current delay between streamed chunks.
    pub fn chunk_delay(&self) -> Duration {
        Duration::from_nanos(self.chunk_delay_ns.load(Ordering::Relaxed))
    }
    /// Number of POST requests received so far.
    /// The next streamed answer (only that one) breaks off after `frames` frames, the connection
    /// cut as when a server process dies: a backend failing mid-answer at a chosen point.
    pub fn set_die_after_frames(&self, frames: usize) {
        self.die_after_frames.store(frames as u64 + 1, Ordering::Relaxed);
    }

    /// Claims the pending death, if any, for the stream being answered.
    pub(crate) fn take_death(&self) -> Option<usize> {
        match self.die_after_frames.swap(0, Ordering::Relaxed) {
            0 => None,
            n => Some(n as usize - 1),
        }
    }

    /// Starts keeping a ledger: the `x-request-id` header of every POST from now on ("-" when it
    /// has none), the backend's own account of what it was asked, to check a gateway's records
    /// against. Off by default, so long benchmarks do not grow the mock's memory.
    pub fn keep_ledger(&self) {
        let mut ledger = self.ledger.lock().unwrap_or_else(PoisonError::into_inner);
        ledger.get_or_insert_with(Vec::new);
    }

    /// Starts keeping every model API request body from now on: what the backend was actually
    /// sent (a guardrail's masking is checked here). Off by default.
    /// As a provider limits each of a pool's keys: `rpm` requests per `window` each (windows of the
    /// wall clock: a window of a minute is each calendar minute; answers say
    /// what is left in `x-ratelimit-*`; past it a 429 with `retry-after`), and 401 for `revoked`.
    pub fn set_key_limits(&self, rpm: u64, window: Duration, revoked: &[&str]) {
        *self.key_limits.lock().unwrap_or_else(|p| p.into_inner()) = Some(KeyLimits {
            rpm,
            window,
            current: 0,
            used: Default::default(),
            revoked: revoked.iter().map(|k| (*k).to_owned()).collect(),
            served: Default::default(),
            refused: 0,
        });
    }

    /// Requests each key was served (not refused) under `set_key_limits`, and the 429s sent.
    pub fn key_usage(&self) -> (std::collections::HashMap<String, u64>, u64) {
        let limits = self.key_limits.lock().unwrap_or_else(|p| p.into_inner());
        limits.as_ref().map_or_else(Default::default, |l| (l.served.clone(), l.refused))
    }

    /// One request with `key`: the headers its answer carries, or why it is refused.
    pub(crate) fn take_key_request(&self, key: &str) -> Result<Vec<(http::HeaderName, http::HeaderValue)>, KeyRefusal> {
        let mut limits = self.key_limits.lock().unwrap_or_else(|p| p.into_inner());
        let Some(l) = limits.as_mut() else { return Ok(Vec::new()) };
        if l.revoked.contains(key) {
            return Err(KeyRefusal::Revoked);
        }
        let now_ms =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis() as u64;
        let window_ms = (l.window.as_millis() as u64).max(1);
        if now_ms / window_ms != l.current {
            (l.current, l.used) = (now_ms / window_ms, Default::default());
        }
        let left_ms = (window_ms - now_ms % window_ms).max(1);
        let used = l.used.entry(key.to_owned()).or_default();
        let header = |name: &'static str, value: String| {
            (
                http::HeaderName::from_static(name),
                http::HeaderValue::from_str(&value).unwrap_or(http::HeaderValue::from_static("0")),
            )
        };
        if *used >= l.rpm {
            l.refused += 1;
            return Err(KeyRefusal::Limited(vec![
                header("x-ratelimit-limit-requests", l.rpm.to_string()),
                header("x-ratelimit-remaining-requests", "0".into()),
                header("x-ratelimit-reset-requests", format!("{left_ms}ms")),
                header("retry-after-ms", left_ms.to_string()),
            ]));
        }
        *used += 1;
        let remaining = l.rpm - *used;
        *l.served.entry(key.to_owned()).or_default() += 1;
        Ok(vec![
            header("x-ratelimit-limit-requests", l.rpm.to_string()),
            header("x-ratelimit-remaining-requests", remaining.to_string()),
            header("x-ratelimit-reset-requests", format!("{left_ms}ms")),
        ])
    }

    /// A prompt prefix up to a cache point: true when it is new (a cache write), false when an
    /// earlier request cached it (a read).
    pub fn remember_prompt_prefix(&self, prefix: &str) -> bool {
        self.prompt_prefixes.lock().unwrap_or_else(|p| p.into_inner()).insert(prefix.to_owned())
    }

    pub fn keep_bodies(&self) {
        self.bodies.lock().unwrap_or_else(PoisonError::into_inner).get_or_insert_with(Vec::new);
    }

    /// The bodies kept so far, as text.
    pub fn bodies(&self) -> Vec<String> {
        let bodies = self.bodies.lock().unwrap_or_else(PoisonError::into_inner);
        bodies.iter().flatten().map(|b| String::from_utf8_lossy(b).into_owned()).collect()
    }

    pub(crate) fn log_body(&self, body: &Bytes) {
        if let Some(kept) = self.bodies.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
            kept.push(body.clone());
        }
    }

    /// The ledger so far (empty when none is kept).
    pub fn ledger(&self) -> Vec<String> {
        let ledger = self.ledger.lock().unwrap_or_else(PoisonError::into_inner);
        ledger.iter().flatten().map(|(id, _)| id.clone()).collect()
    }

    /// Azure and Bedrock APIs only: the path (and query) of every POST so far.
    pub fn posted_paths(&self) -> Vec<String> {
        self.posted_paths.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    pub(crate) fn saw_posted_path(&self, path: String) {
        self.posted_paths.lock().unwrap_or_else(PoisonError::into_inner).push(path);
    }

    /// The `traceparent` header of every POST in the ledger ("-" when it had none).
    pub fn traceparents(&self) -> Vec<String> {
        let ledger = self.ledger.lock().unwrap_or_else(PoisonError::into_inner);
        ledger.iter().flatten().map(|(_, t)| t.clone()).collect()
    }

    pub(crate) fn enter_in_ledger(&self, request_id: Option<&str>, traceparent: Option<&str>) {
        let mut ledger = self.ledger.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(ledger) = ledger.as_mut() {
            ledger.push((request_id.unwrap_or("-").to_owned(), traceparent.unwrap_or("-").to_owned()));
        }
    }

    /// Record ids every accepted webhook delivery carried, in order (repeats included).
    pub fn delivered_ids(&self) -> Vec<String> {
        self.delivered.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    pub(crate) fn delivered(&self, ids: impl Iterator<Item = String>) {
        self.delivered.lock().unwrap_or_else(PoisonError::into_inner).extend(ids);
    }

    /// Record ids as a receiver that drops batches whose `Idempotency-Key` it has seen keeps
    /// them (batches without a key are all kept).
    pub fn stored_ids(&self) -> Vec<String> {
        self.hook_store.lock().unwrap_or_else(PoisonError::into_inner).ids.clone()
    }

    /// `Idempotency-Key`s seen again (a batch retried or resent), counted once per repeat.
    pub fn repeated_keys(&self) -> u64 {
        self.hook_store.lock().unwrap_or_else(PoisonError::into_inner).repeats
    }

    /// Keep a delivery by its key; `false` when the key was seen before (nothing kept).
    pub(crate) fn store_once(&self, key: Option<&str>, ids: &[String]) -> bool {
        let mut store = self.hook_store.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(key) = key {
            if !store.keys.insert(key.to_owned()) {
                store.repeats += 1;
                return false;
            }
        }
        store.ids.extend_from_slice(ids);
        true
    }

    /// Sets how long a first-seen webhook delivery is held before its answer.
    pub fn set_hook_delay(&self, delay: Duration) {
        self.hook_delay_ns.store(duration_to_ns(delay), Ordering::Relaxed);
    }

    pub(crate) fn hook_delay(&self) -> Duration {
        Duration::from_nanos(self.hook_delay_ns.load(Ordering::Relaxed))
    }

    /// OTLP export requests received (the mock doubles as a telemetry receiver).
    pub fn otlp_exports(&self) -> u64 {
        self.otlp_exports.load(Ordering::Relaxed)
    }

    pub fn request_count(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
    /// Resets the `requests`, `failures` and `connections` counters, and the KV cache's, to zero.
    pub fn reset_counters(&self) {
        self.requests.store(0, Ordering::Relaxed);
        self.failures.store(0, Ordering::Relaxed);
        self.connections.store(0, Ordering::Relaxed);
        if let Some(kv) = &self.kv {
            kv.reset_counters();
        }
    }

    /// Counters and state of the simulated KV cache (all zero without one).
    pub fn kv_stats(&self) -> KvStats {
        self.kv.as_ref().map(|kv| kv.stats()).unwrap_or_default()
    }

    /// Empties the simulated KV cache, as a restarted server has it (counters are kept).
    pub fn clear_kv_cache(&self) {
        if let Some(kv) = &self.kv {
            kv.clear_cache();
        }
    }

    /// Decides whether this request gets the injected failure.
    /// Deterministic for rates 0 and 1; otherwise a counter-based splitmix draw.
    fn should_fail(&self) -> bool {
        if self.fail_next.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok() {
            return true;
        }
        let rate = self.fail_rate();
        if rate <= 0.0 {
            return false;
        }
        if rate >= 1.0 {
            return true;
        }
        let n = self.rng.fetch_add(1, Ordering::Relaxed);
        let unit = (splitmix64(n) >> 11) as f64 / (1u64 << 53) as f64;
        unit < rate
    }
}

/// Where the accept loop finds its listener; `kill` takes it out and drops it,
/// which closes the listening socket synchronously.
type ListenerSlot = Arc<Mutex<Option<TcpListener>>>;
type ConnSet = Arc<Mutex<JoinSet<()>>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One serving incarnation (between `start`/`restart` and `kill`).
struct Running {
    listener: ListenerSlot,
    conns: ConnSet,
    accept_task: JoinHandle<()>,
}

/// A running mock backend. Dropping it kills it.
pub struct MockServer {
    addr: SocketAddr,
    state: Arc<State>,
    running: Mutex<Option<Running>>,
}

impl MockServer {
    /// Binds `listen` (port 0 picks a free port), spawns the accept loop and returns once listening.
    pub async fn start(listen: SocketAddr, cfg: MockConfig) -> io::Result<MockServer> {
        let listener = bind(listen)?;
        let addr = listener.local_addr()?;
        let control = Arc::new(MockControl::new(&cfg));
        let state = Arc::new(State::new(&cfg, control, addr.port()));
        let running = spawn_accept(listener, state.clone());
        Ok(MockServer { addr, state, running: Mutex::new(Some(running)) })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Base URL (`http://127.0.0.1:PORT` when bound to an unspecified address).
    pub fn url(&self) -> String {
        let ip = match self.addr.ip() {
            IpAddr::V4(v4) if v4.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(v6) if v6.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
            ip => ip,
        };
        format!("http://{}", SocketAddr::new(ip, self.addr.port()))
    }

    /// Runtime knobs and counters (survive `restart`).
    pub fn control(&self) -> Arc<MockControl> {
        self.state.control.clone()
    }

    /// Whether the server is currently serving (not killed).
    pub fn is_running(&self) -> bool {
        lock(&self.running).is_some()
    }

    /// Abrupt death: closes the listening socket now and aborts every connection task,
    /// dropping sockets mid-response. Synchronous and idempotent.
    pub fn kill(&self) {
        let Some(running) = lock(&self.running).take() else {
            return;
        };
        running.accept_task.abort();
        drop(lock(&running.listener).take());
        lock(&running.conns).abort_all();
    }

    /// Re-binds the same port (killing the current incarnation first if needed)
    /// and serves again with the same control and configuration, with an empty KV cache.
    pub async fn restart(&mut self) -> io::Result<()> {
        self.kill();
        self.state.control.clear_kv_cache();
        let listener = bind(self.addr)?;
        let running = spawn_accept(listener, self.state.clone());
        *lock(&self.running) = Some(running);
        Ok(())
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.kill();
    }
}

impl std::fmt::Debug for MockServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockServer").field("addr", &self.addr).field("running", &self.is_running()).finish()
    }
}

fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.set_nodelay(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

fn spawn_accept(listener: TcpListener, state: Arc<State>) -> Running {
    let listener: ListenerSlot = Arc::new(Mutex::new(Some(listener)));
    let conns: ConnSet = Arc::new(Mutex::new(JoinSet::new()));
    let accept_task = tokio::spawn(accept_loop(listener.clone(), conns.clone(), state));
    Running { listener, conns, accept_task }
}

async fn accept(slot: &ListenerSlot) -> Option<io::Result<TcpStream>> {
    std::future::poll_fn(|cx| match lock(slot).as_ref() {
        None => Poll::Ready(None),
        Some(l) => l.poll_accept(cx).map(|r| Some(r.map(|(s, _)| s))),
    })
    .await
}

async fn accept_loop(slot: ListenerSlot, conns: ConnSet, state: Arc<State>) {
    let mut builder = AutoBuilder::new(TokioExecutor::new());
    builder.http1().header_read_timeout(None);
    let builder = Arc::new(builder);
    while let Some(res) = accept(&slot).await {
        let stream = match res {
            Ok(s) => s,
            Err(e) => {
                // Typically EMFILE or a connection reset before accept; back off briefly.
                tracing::debug!(error = %e, "mock accept failed");
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "mock set_nodelay failed");
        }
        state.control.connections.fetch_add(1, Ordering::Relaxed);
        let builder = builder.clone();
        let state = state.clone();
        let conn = async move {
            let svc = service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, std::convert::Infallible>(handlers::handle(&state, req).await) }
            });
            if let Err(e) = builder.serve_connection_with_upgrades(TokioIo::new(stream), svc).await {
                tracing::trace!(error = %e, "mock connection ended with error");
            }
        };
        let mut set = lock(&conns);
        while set.try_join_next().is_some() {}
        set.spawn(conn);
    }
}

/// Starts a mock, prints exactly one line `listening on http://ADDR` to stdout and
/// serves until ctrl-c.
pub async fn run_cli(listen: SocketAddr, cfg: MockConfig) -> io::Result<()> {
    use std::io::Write as _;
    let server = MockServer::start(listen, cfg).await?;
    {
        let mut out = io::stdout().lock();
        writeln!(out, "listening on {}", server.url())?;
        out.flush()?;
    }
    tokio::signal::ctrl_c().await?;
    server.kill();
    Ok(())
}
