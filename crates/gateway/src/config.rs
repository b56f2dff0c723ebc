//! Validated configuration: what the rest of the gateway reads. Built in two stages from YAML
//! (`config/raw.rs` → here), with `${VAR}` interpolation (`config/interpolate.rs`).

pub mod agents;
mod backend;
mod batches;
mod cache;
mod console;
mod duration;
pub mod engines;
mod experiments;
mod exports;
pub mod guardrails;
mod interpolate;
pub mod jwt;
mod mcp;
pub mod oidc;
pub mod policies;
pub mod pools;
mod presets;
mod prices;
mod raw;
pub mod security;
mod semantic;
mod storage;
mod telemetry;

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

pub use cache::{CacheConfig, CacheNamespace};
pub use duration::parse_duration;
pub use experiments::model_known;
pub use exports::{ExportConfig, ExportSink, ObjectFormat, S3Target};
pub use interpolate::{Env, ProcessEnv};
pub use mcp::{McpConfig, McpServerConfig, McpTransport};
pub use security::SecurityConfig;
pub use semantic::{ScopePart, SemanticConfig, SemanticStoreKind, VerifyApi, VerifyConfig};
pub use telemetry::{Sampler, TelemetryConfig};

/// A map looked up on every request (models, aliases, prices, keys): foldhash, seeded per
/// process, instead of std's SipHash, which cost about 200 instructions per short key.
pub type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Where a configuration problem is, and what it is. `path` is the YAML key path (`backends[1].url`).
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError {
    pub path: String,
    pub message: String,
}

impl ConfigError {
    fn at(path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError { path: path.into(), message: message.into() }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() || self.path == "." {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// Any OpenAI-compatible server: vLLM, llama.cpp, SGLang, LM Studio, OpenAI itself.
    OpenAi,
    /// Ollama: its native API (`/api/chat`, `/api/generate`, `/api/embed`) for Ollama clients,
    /// its OpenAI-compatible `/v1` API for the rest; models listed by `/api/tags`.
    Ollama,
    /// The Anthropic Messages API (`x-api-key` + `anthropic-version`); every other API is
    /// translated to it.
    Anthropic,
    /// Azure OpenAI: the OpenAI API under `/openai/v1` (or, with `api_version`, under
    /// `/openai/deployments/{model}/...?api-version=`), authenticated by `api-key`.
    Azure,
    /// Google's Gemini API (`/v1beta/models/{model}:generateContent`), authenticated by
    /// `x-goog-api-key`; every other API is translated to it.
    Gemini,
    /// Amazon Bedrock's Converse API (`/model/{modelId}/converse`, `/converse-stream`), with a
    /// Bedrock API key as a bearer token or SigV4-signed with access keys; every other API is
    /// translated to it.
    Bedrock,
}

impl BackendKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::OpenAi => "openai",
            BackendKind::Ollama => "ollama",
            BackendKind::Anthropic => "anthropic",
            BackendKind::Azure => "azure",
            BackendKind::Gemini => "gemini",
            BackendKind::Bedrock => "bedrock",
        }
    }
    /// The path probed for health, which also lists the backend's models (Azure's lists base
    /// models; its deployments are configured).
    pub fn discovery_path(self) -> &'static str {
        match self {
            BackendKind::OpenAi => "/v1/models",
            BackendKind::Ollama => "/api/tags",
            BackendKind::Anthropic => "/v1/models",
            BackendKind::Azure => "/openai/v1/models",
            BackendKind::Gemini => "/v1beta/models?pageSize=1000",
            // ListFoundationModels, on the control-plane endpoint (`Backend::new` picks the host).
            BackendKind::Bedrock => "/foundation-models",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    RoundRobin,
    LeastConnections,
    Priority,
    Weighted,
    /// Longest cached prompt prefix first, load when it is too uneven (`route/prefix.rs`).
    CacheAware,
    /// The first 512 bytes of the prompt hashed to a backend: what some gateways do; kept for
    /// comparison in the benchmarks (it pins every conversation sharing a system prompt together).
    PrefixHash,
}

impl Strategy {
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::RoundRobin => "round-robin",
            Strategy::LeastConnections => "least-connections",
            Strategy::Priority => "priority",
            Strategy::Weighted => "weighted",
            Strategy::CacheAware => "cache-aware",
            Strategy::PrefixHash => "prefix-hash",
        }
    }
}

#[derive(Debug, Clone)]
pub struct BackendConfig {
    pub name: String,
    /// Base URL without a trailing slash, e.g. `http://127.0.0.1:11434` or `https://api.openai.com`.
    pub url: String,
    pub kind: BackendKind,
    /// The hosted API it is (`provider: openai`), when named so.
    pub provider: Option<String>,
    pub api_key: Option<String>,
    /// A key pool (`api_keys`): several keys for this backend, spread by headroom; empty for one
    /// key (`api_key`) or none.
    pub api_keys: Vec<PoolKeyConfig>,
    /// Static model list; `None` means discover from the backend.
    pub models: Option<Vec<String>>,
    /// What it serves (`endpoint::CAPABILITIES`); None: whatever its type can speak.
    pub capabilities: Option<Vec<String>>,
    /// Higher wins under the `priority` strategy.
    pub priority: i32,
    pub weight: u32,
    /// Prompt tokens the backend's KV cache holds (sizes its share of the prefix index).
    pub cache_tokens: usize,
    /// Requests sent to it at once; more wait in the model's queue. `None`: the slots it
    /// reports (llama.cpp), else no cap.
    pub max_concurrency: Option<usize>,
    /// Azure OpenAI: deployment-style URLs with this `api-version`; None: the v1 API.
    pub api_version: Option<String>,
    /// Bedrock: the access keys requests are SigV4-signed with (when no `api_key` is given), and
    /// the region they are signed for.
    pub aws: Option<AwsKeys>,
    /// Where its engine publishes KV-cache events (`kv_events`), when it does.
    pub kv_events: Option<engines::FeedConfig>,
    /// The pool this backend is a member of, and its endpoint there (`config/pools.rs`).
    pub member: Option<pools::PoolMember>,
}

/// One key of a backend's pool: its name (in records and metrics; the secret never is), the
/// key, and the limits the provider gives it (requests and tokens per minute), when known.
#[derive(Clone, PartialEq, Eq)]
pub struct PoolKeyConfig {
    pub name: String,
    pub key: String,
    pub rpm: Option<u64>,
    pub tpm: Option<u64>,
}

impl std::fmt::Debug for PoolKeyConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolKeyConfig")
            .field("name", &self.name)
            .field("rpm", &self.rpm)
            .field("tpm", &self.tpm)
            .finish()
    }
}

/// AWS credentials of a Bedrock backend.
#[derive(Clone)]
pub struct AwsKeys {
    pub region: String,
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

impl fmt::Debug for AwsKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsKeys")
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

/// Keeping a conversation where its KV cache is warm, without pinning everyone to one backend.
#[derive(Debug, Clone)]
pub struct AffinityConfig {
    /// Route requests that carry a session key to the backend their session went to.
    pub sticky_sessions: bool,
    /// A session's pin expires after this long without a request.
    pub session_ttl: Duration,
    pub max_sessions: usize,
    /// Affinity gives way to load when the preferred backend has more than
    /// `balance_factor × least + balance_slack` requests in flight.
    pub balance_factor: f64,
    pub balance_slack: u32,
}

#[derive(Debug, Clone)]
pub struct HealthConfig {
    pub interval: Duration,
    pub timeout: Duration,
    /// First re-probe delay for a backend that is down; doubles up to `down_backoff_max`.
    pub down_backoff_min: Duration,
    pub down_backoff_max: Duration,
    /// Consecutive 5xx responses that open the circuit breaker.
    pub failure_threshold: u32,
    /// How long an open breaker waits before letting one trial request through.
    pub breaker_cooldown: Duration,
}

#[derive(Debug, Clone)]
pub struct Timeouts {
    pub connect: Duration,
    /// From sending a request until the upstream's response headers arrive.
    pub first_byte: Duration,
    /// Longest silence between two body chunks of an upstream response.
    pub stream_idle: Duration,
    /// Deadline for all attempts of one request together (retries included).
    pub request: Duration,
    /// Time a client has to send its request headers; on HTTP/1.1 also how long a kept-alive
    /// connection may sit idle (the clock starts whenever a request head is awaited).
    pub header_read: Duration,
    /// Time a client has, once its headers arrived, to send the whole request body (408 after).
    pub body_read: Duration,
    /// Longest a client may leave a response unread (writes blocked) before its connection is
    /// closed and the upstream request cancelled.
    pub client_write: Duration,
    /// A connection with no new request for this long is shut down gracefully (HTTP/2: GOAWAY,
    /// streams in flight finish). HTTP/2 has no head-read clock, and a client that answers the
    /// keep-alive PINGs but sends nothing would otherwise hold its connection forever.
    pub connection_idle: Duration,
    /// An upstream connection (plain-http backend) idle this long is closed.
    pub upstream_idle: Duration,
}

/// What one client connection and request head may take (`limits:`).
#[derive(Debug, Clone)]
pub struct ListenerLimits {
    /// Open client connections; more are closed as they arrive.
    pub max_connections: usize,
    /// Header fields per request (more: 431).
    pub max_headers: usize,
    /// A request head's bytes: request line and header fields (more: 431).
    pub max_header_bytes: usize,
    /// A request target's bytes (more: 414).
    pub max_uri_bytes: usize,
}

#[derive(Clone, Default)]
pub struct AuthConfig {
    /// Guards the admin API and may call everything; None = the gateway runs open.
    pub master_key: Option<String>,
    /// HMAC secret for key hashes; None = generated once next to the database.
    pub secret: Option<String>,
    /// Identity providers whose JWTs clients may present (`auth.jwt`).
    pub jwt: Vec<jwt::JwtIssuer>,
    /// Single sign-on to the console (`auth.oidc`).
    pub oidc: Option<oidc::OidcConfig>,
}

impl fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print secrets.
        f.debug_struct("AuthConfig")
            .field("master_key", &self.master_key.as_ref().map(|_| "<set>"))
            .field("secret", &self.secret.as_ref().map(|_| "<set>"))
            .field("jwt", &self.jwt)
            .field("oidc", &self.oidc)
            .finish()
    }
}

/// The path part of a SQLite `storage.url` (`sqlite://./switchyard.db?mode=rwc` → `./switchyard.db`);
/// None for another database. (`sqlite::memory:` gives `:memory:`: the caller decides.)
pub fn sqlite_file(url: &str) -> Option<std::path::PathBuf> {
    let path = url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:"))?;
    Some(path.split('?').next().unwrap_or(path).into())
}

#[derive(Debug, Clone)]
pub struct StorageConfig {
    /// `sqlite://PATH` or `postgres://...`.
    pub url: String,
    /// Where the usage journal lives (append-only files replayed into the database).
    pub journal_dir: std::path::PathBuf,
    /// Where uploaded files and batch results are kept (`storage.files_dir`).
    pub files_dir: std::path::PathBuf,
    /// … or in this S3-compatible bucket instead (`storage.files`; its `format` is unused).
    pub files_bucket: Option<Box<S3Target>>,
    /// A new journal file is started once the current one is this large (64 MiB); files are the
    /// unit in which they are deleted, and in which an export sink past `max_backlog` drops records.
    pub journal_file_bytes: u64,
    /// Record a usage row per request (default). Off, nothing is journaled or written and key
    /// budgets cannot be enforced: for a pure proxy, and to measure the core alone.
    pub record_usage: bool,
}

/// USD per million tokens, and per unit of what else a request uses.
/// The tokens a request is charged for: every prompt token (those read from and written to the
/// provider's prompt cache among them) and the completion's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counted {
    pub prompt: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    pub completion: u64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    pub input_per_million: f64,
    pub output_per_million: f64,
    /// Prompt tokens read from the provider's prompt cache (`cache_read`); None: billed as input.
    pub cached_input_per_million: Option<f64>,
    /// Prompt tokens written to the provider's prompt cache (`cache_write`); None: billed as input.
    pub cache_write_per_million: Option<f64>,
    pub units: UnitPrices,
    /// The share of the price a batch's lines pay (`batch_discount`, 1.0 unless set).
    pub batch_discount: f64,
}

/// USD per answered request, image, search unit, second of audio and character of speech.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct UnitPrices {
    pub per_request: f64,
    pub per_image: f64,
    pub per_search_unit: f64,
    pub per_second_audio: f64,
    pub per_character: f64,
}

#[derive(Debug, Clone)]
pub struct Config {
    pub auth: AuthConfig,
    pub storage: StorageConfig,
    /// Model → price; unpriced models cost 0 (self-hosted).
    pub prices: FastMap<String, Price>,
    pub listen: SocketAddr,
    pub backends: Vec<BackendConfig>,
    /// Backends that are pools of endpoints (`backends[].endpoints | dns`, `epp.pools`): their
    /// members are among `backends` (`expand_pools`).
    pub pools: Vec<pools::PoolSpec>,
    /// Serve the Endpoint Picker protocol (`epp:`).
    pub epp: Option<pools::EppConfig>,
    pub strategy: Strategy,
    /// Upper bound on upstream attempts per request (first try included).
    pub max_attempts: u32,
    /// The first wait before trying a backend again after a 429 or 503 (doubling, with jitter).
    pub retry_backoff: Duration,
    /// The longest `Retry-After` a request waits out; beyond it the answer goes to the client.
    pub retry_after_max: Duration,
    /// Carry a stream whose backend failed mid-answer on at another backend (`routing.resume_streams`).
    pub resume_streams: bool,
    /// Requests that may wait for a slot when every backend of their model is at its cap, and
    /// how long one waits (`routing.max_queue`, `routing.queue_timeout`).
    pub max_queue: usize,
    pub queue_timeout: Duration,
    /// Sticky sessions and cache-aware balance.
    pub affinity: AffinityConfig,
    pub aliases: FastMap<String, String>,
    /// Experiments on live traffic (`experiments:`), checked; those made through the admin API
    /// are not here (`experiments.rs` holds both).
    pub experiments: Vec<std::sync::Arc<switchyard_experiments::Experiment>>,
    /// The organisation's rules (`policies:`), compiled and checked; a team's and a key's are
    /// on their records.
    pub policies: std::sync::Arc<switchyard_policy::RuleSet>,
    /// `quotas:` that `cost` rules charge, by name.
    pub quotas: FastMap<String, policies::Quota>,
    /// `fallbacks:` the models to try, in order, when a model's own backends cannot answer (keyed
    /// by the name the client sends, alias or not).
    pub fallbacks: FastMap<String, Vec<String>>,
    /// `context_window_fallbacks:` where a prompt too long for a model's context window goes
    /// (models with larger windows); a model without an entry uses its `fallbacks`.
    pub context_window_fallbacks: FastMap<String, Vec<String>>,
    /// `routing.fallback_statuses`: backend answers that send a request on to a fallback model
    /// (besides no backend being able to take it at all).
    pub fallback_statuses: Vec<u16>,
    pub health: HealthConfig,
    pub timeouts: Timeouts,
    pub max_body_bytes: usize,
    /// The largest multipart upload (audio): a 413 once this much has streamed through.
    pub max_upload_bytes: usize,
    /// Idle keep-alive connections kept per plain-http backend; one coming back past this is
    /// closed (0: none kept, every request connects anew).
    pub max_idle_upstream_connections: usize,
    pub listener: ListenerLimits,
    pub shutdown_grace: Duration,
    /// Upstream MCP servers (`mcp:`); none by default.
    pub mcp: McpConfig,
    /// The file this was read from: what a reload (SIGHUP, `POST /admin/reload`) re-reads.
    pub source: Option<std::path::PathBuf>,
    /// TLS on the listener (`tls: {cert, key}`, PEM files; re-read on every reload).
    pub tls: Option<TlsConfig>,
    /// Shared state for a fleet (`redis:`): limits, revocations. None: each instance alone.
    pub redis: Option<RedisConfig>,
    /// OpenTelemetry trace export (`telemetry:` or the `OTEL_EXPORTER_OTLP_*` variables); None: off.
    pub telemetry: Option<TelemetryConfig>,
    /// Sinks every usage record is delivered to besides the database (`exports:`).
    pub exports: Vec<ExportConfig>,
    /// The operator's console at `/ui` (`console:`).
    pub console: ConsoleConfig,
    /// The response cache (`cache:`); off by default.
    pub cache: CacheConfig,
    /// Which origins and `Host` names reach `/mcp`, `/ui` and `/admin` (`security:`).
    pub security: SecurityConfig,
    /// A2A agents served at `/a2a/{name}` (`agents:`), and where their calls may go.
    pub agents: agents::AgentsConfig,
    /// Content checks and where they apply (`guardrails:`, `models.*.guardrails`).
    pub guardrails: guardrails::GuardrailsConfig,
    /// Per model (as routed), the directory of its tokenizer and chat template
    /// (`models.*.tokenizer`), for keying prompts as event-publishing engines do.
    pub tokenizers: FastMap<String, std::path::PathBuf>,
    /// How the Batch API is served (`batches:`).
    pub batches: batches::BatchSettings,
    /// A realtime session ends after this long without a frame either way (`realtime.idle_timeout`).
    pub realtime_idle: Duration,
    /// … and after this long in all (`realtime.max_duration`).
    pub realtime_max: Duration,
}

/// `console: {enabled, session_ttl, store_bodies, max_stored_body_bytes}`.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsoleConfig {
    /// Serve `/ui` (default on; behind the master key when one is set).
    pub enabled: bool,
    /// How long a console login lasts.
    pub session_ttl: Duration,
    /// Keep request and response bodies with each request's record (off by default), secrets
    /// redacted, each cut at `max_stored_body_bytes`.
    pub store_bodies: bool,
    pub max_stored_body_bytes: usize,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        ConsoleConfig {
            enabled: true,
            session_ttl: Duration::from_secs(12 * 3600),
            store_bodies: false,
            max_stored_body_bytes: 16 * 1024,
        }
    }
}

/// `redis:` — where a fleet keeps what its instances share, and what to do while it is away.
#[derive(Clone, PartialEq)]
pub struct RedisConfig {
    pub url: String,
    /// How long one call may take before it counts as a failure (`redis.timeout`, 50 ms).
    pub timeout: Duration,
    /// While Redis is unreachable: requests/tokens per minute, and parallel requests.
    pub rate_policy: FailurePolicy,
    pub parallel_policy: FailurePolicy,
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The URL may carry a password.
        f.debug_struct("RedisConfig")
            .field("timeout", &self.timeout)
            .field("rate_policy", &self.rate_policy)
            .field("parallel_policy", &self.parallel_policy)
            .finish_non_exhaustive()
    }
}

/// What a limit does while the shared state cannot be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    /// Each instance enforces the limit divided by the live instances it knows of.
    LocalShare,
    /// The limit is not enforced.
    Open,
    /// Requests under the limit are refused (503).
    Closed,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    /// The certificate chain, leaf first.
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
}

impl Config {
    /// Read, interpolate and validate a YAML file.
    pub fn load(path: &Path, env: &dyn Env) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::at("", format!("cannot read {}: {e}", path.display())))?;
        let mut config = Config::from_yaml(&text, env)?;
        config.source = Some(path.to_owned());
        Ok(config)
    }

    pub fn from_yaml(text: &str, env: &dyn Env) -> Result<Config, ConfigError> {
        let raw = raw::parse(text, env)?;
        raw::validate(raw, env)
    }

    /// The configuration used when no file is given: no backends, everything else default.
    pub fn empty() -> Result<Config, ConfigError> {
        Config::from_yaml("{}", &ProcessEnv)
    }

    /// The price of `model`: its own entry, else that of its name without a provider prefix or
    /// date suffix (`openai/gpt-4o-2024-08-06` is priced as `gpt-4o`).
    pub fn price(&self, model: &str) -> Option<&Price> {
        self.prices.get(model).or_else(|| self.prices.get(prices::normalized(model)?))
    }

    /// Cost in USD of a request to `model` that `counted` these tokens: prompt tokens read from
    /// the provider's prompt cache at its `cache_read` price, those written to it at its
    /// `cache_write` price (each the input price where none is set), the rest as input.
    pub fn cost(&self, model: &str, counted: &Counted) -> f64 {
        self.price(model).map_or(0.0, |p| {
            let read = counted.cache_read.min(counted.prompt);
            let written = counted.cache_write.min(counted.prompt - read);
            let read_price = p.cached_input_per_million.unwrap_or(p.input_per_million);
            let write_price = p.cache_write_per_million.unwrap_or(p.input_per_million);
            ((counted.prompt - read - written) as f64 * p.input_per_million
                + read as f64 * read_price
                + written as f64 * write_price
                + counted.completion as f64 * p.output_per_million)
                / 1e6
        })
    }

    /// The fallback models for a request that asked for `requested` (resolved to `model`).
    pub fn fallbacks_for(&self, requested: &str, model: &str) -> &[String] {
        self.fallbacks.get(requested).or_else(|| self.fallbacks.get(model)).map_or(&[], Vec::as_slice)
    }

    /// Where a prompt too long for `model` (asked for as `requested`) goes next.
    pub fn context_fallbacks_for(&self, requested: &str, model: &str) -> &[String] {
        let listed = |name: &str| self.context_window_fallbacks.get(name).or_else(|| self.fallbacks.get(name));
        listed(model).or_else(|| listed(requested)).map_or(&[], Vec::as_slice)
    }

    /// Resolve an alias; a name that is not an alias resolves to itself.
    pub fn resolve_alias<'a>(&'a self, model: &'a str) -> &'a str {
        self.aliases.get(model).map(String::as_str).unwrap_or(model)
    }
}
