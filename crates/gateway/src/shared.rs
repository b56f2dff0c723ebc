//! The state a fleet of gateways shares through Redis (`redis:`): one multiplexed connection,
//! calls behind a breaker (so no request waits on a dead Redis), and a heartbeat that registers
//! this instance among the live ones (what `local_share` divides limits by), opens the breaker
//! when Redis stops answering and closes it again when Redis is back. A call whose answer is
//! optional (a conversation's pin) is bounded by `redis.timeout`; an admission is not: its script
//! counts in Redis whether or not the answer is read, so a late answer is waited for (`call_held`)
//! and never replaced by a fallback admission on top of it. Slowness alone never opens the
//! breaker: errors do, and a heartbeat unanswered for `HEARTBEAT_WAIT`. What is shared lives in
//! the modules that use it: limits in `limit/shared.rs`, key changes in `shared/revocation.rs`,
//! conversations' backends in `shared/affinity.rs`, backend health hints in `shared/health.rs`.

pub mod affinity;
pub mod health;
pub mod keys;
pub mod mcp;
pub mod revocation;

use std::fmt::Write;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::ConnectionManager;

use crate::config::RedisConfig;

/// Consecutive failures that open the breaker; only the heartbeat's probe closes it again, so
/// while Redis is away no request waits on it (beyond the few that opened the breaker).
const BREAKER_FAILURES: u32 = 3;
/// The heartbeat's period; an instance counts as live for three of them.
pub const HEARTBEAT: Duration = Duration::from_secs(1);
const INSTANCE_TTL_MS: u64 = 3000;
/// How long the heartbeat waits for its answer before counting a failure: far longer than
/// `redis.timeout`, so a Redis that is slow under load (answering in tens of milliseconds) is not
/// taken for a dead one and its limits left to the fallback.
const HEARTBEAT_WAIT: Duration = Duration::from_millis(500);

/// Every Redis key the gateway writes starts with this.
pub const PREFIX: &str = "switchyard:";

pub struct Shared {
    pub config: RedisConfig,
    connection: ConnectionManager,
    client: redis::Client,
    /// This process's name in the fleet (random per start).
    pub instance: String,
    failures: AtomicU32,
    /// The breaker is open.
    down: AtomicBool,
    /// Wakes held calls when the breaker opens (their answer may never come).
    opened: tokio::sync::Notify,
    /// Held calls answered after `redis.timeout`: waited for, not replaced by a fallback.
    late: AtomicU64,
    /// Live instances at the last heartbeat (this one included); what `local_share` divides by.
    live: AtomicU32,
    /// Failed or timed-out calls, and requests decided by an `on_failure` policy instead.
    errors: AtomicU64,
    fallbacks: AtomicU64,
    /// Requests admitted from this instance's leases, without a round trip.
    leased: AtomicU64,
    /// Conversations found pinned by the fleet, and not found (new ones).
    affinity_hits: AtomicU64,
    affinity_misses: AtomicU64,
}

/// Why a shared call gave no answer (details are logged, not shown to clients).
#[derive(Debug)]
pub enum SharedError {
    /// The breaker is open: the call was not tried.
    Unavailable,
    Timeout,
    /// A held call was sent and the breaker opened (or the request's deadline passed) before
    /// its answer came: whether Redis ran it is unknown.
    InDoubt,
    Redis(redis::RedisError),
}

impl Shared {
    /// Connect lazily: an instance starts (and serves on its fallbacks) while Redis is down.
    pub fn new(config: &RedisConfig) -> Result<Arc<Shared>, String> {
        use redis::IntoConnectionInfo;
        // Without TCP_NODELAY a request's script waits behind the previous batch's unacknowledged
        // segment (Nagle): about 100 µs per request on loopback.
        let info = config
            .url
            .as_str()
            .into_connection_info()
            .map_err(|e| format!("redis.url: {e}"))?
            .set_tcp_settings(redis::io::tcp::TcpSettings::default().set_nodelay(true));
        let client = redis::Client::open(info).map_err(|e| format!("redis.url: {e}"))?;
        let manager = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(config.timeout.max(Duration::from_millis(250))))
            // No response timeout in the client: a timed-out script may still have run, and the
            // client would report it as an I/O error that `call` sends again. The gateway bounds
            // each call itself (`call`, `call_held`).
            .set_response_timeout(None)
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let connection =
            ConnectionManager::new_lazy_with_config(client.clone(), manager).map_err(|e| format!("redis: {e}"))?;
        let mut id = [0u8; 6];
        getrandom::getrandom(&mut id).map_err(|e| format!("no randomness for an instance id: {e}"))?;
        let instance = id.iter().map(|b| format!("{b:02x}")).collect();
        Ok(Arc::new(Shared {
            config: config.clone(),
            connection,
            client,
            instance,
            failures: AtomicU32::new(0),
            down: AtomicBool::new(false),
            opened: tokio::sync::Notify::new(),
            late: AtomicU64::new(0),
            live: AtomicU32::new(1),
            errors: AtomicU64::new(0),
            fallbacks: AtomicU64::new(0),
            leased: AtomicU64::new(0),
            affinity_hits: AtomicU64::new(0),
            affinity_misses: AtomicU64::new(0),
        }))
    }

    /// A request's limits were decided by an `on_failure` policy.
    pub fn count_fallback(&self) {
        self.fallbacks.fetch_add(1, Relaxed);
    }

    /// A request was admitted from a lease of its key's quota, without a round trip.
    pub fn count_leased(&self) {
        self.leased.fetch_add(1, Relaxed);
    }

    /// The fleet's gauges and counters, Prometheus text.
    pub fn render(&self, out: &mut String) {
        for (name, help, kind, value) in [
            (
                "switchyard_redis_up",
                "1 while the shared state (redis:) answers, 0 while its breaker is open.",
                "gauge",
                u64::from(self.available()),
            ),
            (
                "switchyard_redis_errors_total",
                "Redis calls that failed or timed out (redis.timeout).",
                "counter",
                self.errors.load(Relaxed),
            ),
            (
                "switchyard_redis_late_answers_total",
                "Admissions whose Redis answer came after redis.timeout: waited for, never replaced by a fallback admission.",
                "counter",
                self.late.load(Relaxed),
            ),
            (
                "switchyard_redis_fallbacks_total",
                "Requests whose limits were decided by redis.on_failure instead of the shared state.",
                "counter",
                self.fallbacks.load(Relaxed),
            ),
            (
                "switchyard_redis_leased_total",
                "Requests admitted from this instance's lease of their key's rate limits, without a Redis round trip.",
                "counter",
                self.leased.load(Relaxed),
            ),
            (
                "switchyard_redis_instances_live",
                "Instances of the fleet that sent a heartbeat in the last 3 s, this one included.",
                "gauge",
                u64::from(self.live_instances()),
            ),
            (
                "switchyard_redis_affinity_hits_total",
                "Requests whose conversation the fleet had pinned to a backend (redis with cache-aware routing or sticky sessions).",
                "counter",
                self.affinity_hits.load(Relaxed),
            ),
            (
                "switchyard_redis_affinity_misses_total",
                "Requests whose conversation no instance had pinned yet.",
                "counter",
                self.affinity_misses.load(Relaxed),
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
        }
    }

    pub fn client(&self) -> &redis::Client {
        &self.client
    }

    /// Is the breaker closed (calls are tried)?
    pub fn available(&self) -> bool {
        !self.down.load(Relaxed)
    }

    /// Live instances as last seen (at least 1).
    pub fn live_instances(&self) -> u32 {
        self.live.load(Relaxed).max(1)
    }

    /// Run one call on the shared connection within `redis.timeout`, through the breaker. A call
    /// that finds the connection dropped (Redis restarted) is sent once more on the new one,
    /// within the same timeout: a restart alone never sends a request to the fallback.
    pub async fn call<T, F, Fut>(&self, f: F) -> Result<T, SharedError>
    where
        F: Fn(ConnectionManager) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        if !self.available() {
            return Err(SharedError::Unavailable);
        }
        let attempts = async {
            match f(self.connection.clone()).await {
                Err(e) if e.is_connection_dropped() || e.is_io_error() => f(self.connection.clone()).await,
                other => other,
            }
        };
        let outcome = match tokio::time::timeout(self.config.timeout, attempts).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(SharedError::Redis(e)),
            Err(_) => Err(SharedError::Timeout),
        };
        match &outcome {
            Ok(_) => self.succeeded(),
            Err(e) => self.failed(e),
        }
        outcome
    }

    /// Run a call whose effect stands in Redis whether or not its answer is read (an admission
    /// script): past `redis.timeout` it is still waited for, until its answer comes, the breaker
    /// opens or `until` passes; then it is `InDoubt`, and its caller must not act as if Redis had
    /// not run it. Not sent while the breaker is open (`Unavailable`).
    pub async fn call_held<T, F, Fut>(&self, f: F, until: Instant) -> Result<T, SharedError>
    where
        F: Fn(ConnectionManager) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let opened = self.opened.notified();
        tokio::pin!(opened);
        opened.as_mut().enable();
        if !self.available() {
            return Err(SharedError::Unavailable);
        }
        let sent = Instant::now();
        let attempts = async {
            match f(self.connection.clone()).await {
                Err(e) if e.is_connection_dropped() || e.is_io_error() => f(self.connection.clone()).await,
                other => other,
            }
        };
        let outcome = tokio::select! {
            answer = attempts => answer.map_err(SharedError::Redis),
            () = opened => Err(SharedError::InDoubt),
            () = tokio::time::sleep_until(until.into()) => Err(SharedError::InDoubt),
        };
        match &outcome {
            Ok(_) => {
                if sent.elapsed() > self.config.timeout {
                    self.late.fetch_add(1, Relaxed);
                }
                self.succeeded();
            }
            Err(e) => self.failed(e),
        }
        outcome
    }

    fn succeeded(&self) {
        if self.failures.load(Relaxed) != 0 {
            self.failures.store(0, Relaxed);
        }
        if self.down.swap(false, Relaxed) {
            tracing::info!("redis is reachable again: shared limits are exact again");
        }
    }

    fn failed(&self, error: &SharedError) {
        self.errors.fetch_add(1, Relaxed);
        // A late answer is not a dead Redis: only errors (and the heartbeat's own wait) open the
        // breaker, else a loaded Redis would send every limit to its fallback.
        if matches!(error, SharedError::Timeout | SharedError::InDoubt | SharedError::Unavailable) {
            return;
        }
        self.count_failure(error);
    }

    fn count_failure(&self, error: &SharedError) {
        let failures = self.failures.fetch_add(1, Relaxed) + 1;
        if failures >= BREAKER_FAILURES && !self.down.swap(true, Relaxed) {
            tracing::warn!(error = ?error, "redis is failing: limits fall back to their on_failure policies");
            self.opened.notify_waiters();
        }
    }

    /// Register this instance among the live ones and count them, every `HEARTBEAT`; the same
    /// call is the breaker's probe. Runs until the process ends.
    pub async fn heartbeat(self: Arc<Self>) {
        let script = redis::Script::new(
            r"
            local t = redis.call('TIME')
            local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
            redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
            redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
            redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 2)
            return redis.call('ZCARD', KEYS[1])
            ",
        );
        let key = format!("{PREFIX}instances");
        let mut tick = tokio::time::interval(HEARTBEAT);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            // The probe goes through even while the breaker is open: it is what closes it.
            let call = async {
                let mut c = self.connection.clone();
                script.key(&key).arg(&self.instance).arg(INSTANCE_TTL_MS).invoke_async::<u32>(&mut c).await
            };
            match tokio::time::timeout(HEARTBEAT_WAIT.max(self.config.timeout), call).await {
                Ok(Ok(live)) => {
                    self.live.store(live, Relaxed);
                    self.succeeded();
                }
                Ok(Err(e)) => self.failed(&SharedError::Redis(e)),
                Err(_) => {
                    self.errors.fetch_add(1, Relaxed);
                    self.count_failure(&SharedError::Timeout);
                }
            }
        }
    }
}

/// Subscribe to `channel` until the process ends, handing each message's payload to
/// `on_message`. Pub/sub drops what is sent while a subscriber is away, so after a reconnect
/// `on_reconnect` runs (to resync by other means).
pub async fn listen(
    shared: Arc<Shared>,
    channel: String,
    on_message: impl Fn(&str) + Send + Sync + 'static,
    on_reconnect: impl Fn() + Send + Sync + 'static,
) {
    use futures_util::StreamExt;
    let mut connected_before = false;
    loop {
        let connect = async {
            let mut pubsub = shared.client().get_async_pubsub().await?;
            pubsub.subscribe(&channel).await?;
            Ok::<_, redis::RedisError>(pubsub)
        };
        match tokio::time::timeout(Duration::from_secs(2), connect).await {
            Ok(Ok(pubsub)) => {
                if connected_before {
                    on_reconnect();
                }
                connected_before = true;
                let mut messages = pubsub.into_on_message();
                while let Some(message) = messages.next().await {
                    if let Ok(payload) = message.get_payload::<String>() {
                        on_message(&payload);
                    }
                }
                tracing::warn!(channel, "fleet channel lost; reconnecting");
            }
            Ok(Err(e)) => tracing::debug!(error = %e, channel, "cannot subscribe"),
            Err(_) => tracing::debug!(channel, "subscribing timed out"),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
