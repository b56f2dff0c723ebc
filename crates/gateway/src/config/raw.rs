//! Stage one of config loading: YAML → interpolated values → serde structs that deny unknown keys,
//! then stage two: checks and defaults → the validated `Config`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;

use super::interpolate::{interpolate, Env};
use super::{
    AffinityConfig, AuthConfig, Config, ConfigError, FailurePolicy, HealthConfig, ListenerLimits, RedisConfig,
    Strategy, Timeouts, TlsConfig,
};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    listen: Option<String>,
    #[serde(default)]
    backends: Vec<super::backend::RawBackend>,
    #[serde(default)]
    routing: RawRouting,
    #[serde(default)]
    aliases: HashMap<String, String>,
    #[serde(default)]
    fallbacks: HashMap<String, Vec<String>>,
    #[serde(default)]
    context_window_fallbacks: HashMap<String, Vec<String>>,
    #[serde(default)]
    health: RawHealth,
    #[serde(default)]
    timeouts: RawTimeouts,
    #[serde(default)]
    limits: RawLimits,
    shutdown_grace: Option<String>,
    #[serde(default)]
    auth: RawAuth,
    #[serde(default)]
    storage: super::storage::RawStorage,
    #[serde(default)]
    prices: HashMap<String, super::prices::RawPrice>,
    #[serde(default)]
    mcp: super::mcp::RawMcp,
    tls: Option<RawTls>,
    redis: Option<RawRedis>,
    telemetry: Option<super::telemetry::RawTelemetry>,
    #[serde(default)]
    exports: Vec<super::exports::RawExport>,
    #[serde(default)]
    console: super::console::RawConsole,
    cache: Option<super::cache::RawCache>,
    security: Option<super::security::RawSecurity>,
    guardrails: Option<BTreeMap<String, serde_json::Value>>,
    #[serde(default)]
    batches: super::batches::RawBatches,
    #[serde(default)]
    realtime: RawRealtime,
    epp: Option<super::pools::RawEpp>,
    #[serde(default)] // per-model settings, by the name clients use
    models: HashMap<String, super::guardrails::RawModel>,
    #[serde(default)]
    experiments: super::experiments::RawExperiments,
    #[serde(default)]
    policies: super::policies::RawPolicies,
    #[serde(default)]
    quotas: super::policies::RawQuotas,
    #[serde(default)]
    agents: super::agents::RawAgents,
}

/// `realtime:` — how long a WebSocket session may sit idle, and last at most.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRealtime {
    idle_timeout: Option<String>,
    max_duration: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRedis {
    url: String,
    timeout: Option<String>,
    #[serde(default)]
    on_failure: RawOnFailure,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOnFailure {
    rate: Option<String>,
    parallel: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    cert: String,
    key: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAuth {
    master_key: Option<String>,
    secret: Option<String>,
    jwt: Option<Vec<super::jwt::RawJwtIssuer>>,
    oidc: Option<super::oidc::RawOidc>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRouting {
    strategy: Option<String>,
    max_attempts: Option<u32>,
    retry_backoff: Option<String>,
    retry_after_max: Option<String>,
    fallback_statuses: Option<Vec<u16>>,
    resume_streams: Option<bool>,
    max_queue: Option<usize>,
    queue_timeout: Option<String>,
    sticky_sessions: Option<bool>,
    session_ttl: Option<String>,
    max_sessions: Option<usize>,
    balance_factor: Option<f64>,
    balance_slack: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHealth {
    interval: Option<String>,
    timeout: Option<String>,
    down_backoff_min: Option<String>,
    down_backoff_max: Option<String>,
    failure_threshold: Option<u32>,
    breaker_cooldown: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTimeouts {
    connect: Option<String>,
    first_byte: Option<String>,
    stream_idle: Option<String>,
    request: Option<String>,
    header_read: Option<String>,
    body_read: Option<String>,
    client_write: Option<String>,
    connection_idle: Option<String>,
    upstream_idle: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    max_body_bytes: Option<usize>,
    max_upload_bytes: Option<usize>,
    max_connections: Option<usize>,
    max_idle_upstream_connections: Option<usize>,
    max_headers: Option<usize>,
    max_header_bytes: Option<usize>,
    max_uri_bytes: Option<usize>,
}

/// YAML text → interpolated value tree → `RawConfig`, with the key path in every error.
pub fn parse(text: &str, env: &dyn Env) -> Result<RawConfig, ConfigError> {
    let mut value: yaml_serde::Value =
        yaml_serde::from_str(text).map_err(|e| ConfigError::at("", format!("invalid YAML: {e}")))?;
    if value.is_null() {
        return Ok(RawConfig::default());
    }
    interpolate_tree(&mut value, String::new(), env)?;
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        ConfigError::at(path, e.into_inner().to_string())
    })
}

fn interpolate_tree(value: &mut yaml_serde::Value, path: String, env: &dyn Env) -> Result<(), ConfigError> {
    use yaml_serde::Value;
    match value {
        Value::String(s) => {
            *s = interpolate(s, env).map_err(|m| ConfigError::at(path, m))?;
        }
        Value::Sequence(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                interpolate_tree(item, format!("{path}[{i}]"), env)?;
            }
        }
        Value::Mapping(map) => {
            for (k, v) in map.iter_mut() {
                let key = k.as_str().unwrap_or("?");
                let child = if path.is_empty() { key.to_owned() } else { format!("{path}.{key}") };
                interpolate_tree(v, child, env)?;
            }
        }
        Value::Tagged(t) => interpolate_tree(&mut t.value, path, env)?,
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
    Ok(())
}

/// `duration`, refusing zero (a zero timeout would end every session at once).
pub(super) use super::duration::{duration, nonzero};

pub fn validate(raw: RawConfig, env: &dyn Env) -> Result<Config, ConfigError> {
    let listen = validate_listen(raw.listen.as_deref())?;

    let mut names = HashSet::new();
    let super::pools::Validated { backends, pools, epp } =
        super::pools::validate_backends(raw.backends, raw.epp, &mut names)?;

    let strategy = validate_strategy(raw.routing.strategy.as_deref())?;
    let affinity = validate_affinity(&raw.routing)?;
    let max_attempts = raw.routing.max_attempts.unwrap_or(3);
    if max_attempts == 0 {
        return Err(ConfigError::at("routing.max_attempts", "must be at least 1"));
    }

    validate_fallback_lists(&raw.fallbacks, &raw.context_window_fallbacks)?;
    let (fallbacks, context_window_fallbacks) = (raw.fallbacks.clone(), raw.context_window_fallbacks.clone());
    let fallback_statuses = raw.routing.fallback_statuses.clone().unwrap_or_else(|| vec![429, 500, 502, 503, 504]);
    if fallback_statuses.iter().any(|s| !(400..=599).contains(s)) {
        return Err(ConfigError::at("routing.fallback_statuses", "statuses must be between 400 and 599"));
    }
    validate_aliases(&raw.aliases)?;

    let health = validate_health(&raw.health)?;
    let timeouts = validate_timeouts(&raw.timeouts)?;
    let max_body_bytes = raw.limits.max_body_bytes.unwrap_or(10 * 1024 * 1024);
    if max_body_bytes == 0 {
        return Err(ConfigError::at("limits.max_body_bytes", "must be greater than zero"));
    }
    // Uploads (audio) stream through: their limit is checked as they go, never buffered.
    let max_upload_bytes = raw.limits.max_upload_bytes.unwrap_or(64 * 1024 * 1024);
    if max_upload_bytes == 0 {
        return Err(ConfigError::at("limits.max_upload_bytes", "must be greater than zero"));
    }
    let listener = validate_listener(&raw.limits)?;
    let auth = validate_auth(raw.auth, env)?;
    let storage = super::storage::validate(raw.storage)?;
    let prices = super::prices::validate(raw.prices)?;
    let exports = super::exports::validate(raw.exports)?;
    if !exports.is_empty() && !storage.record_usage {
        return Err(ConfigError::at("exports", "exports read the usage journal: storage.record_usage must be on"));
    }

    let aliases: super::FastMap<String, String> = raw.aliases.into_iter().collect();
    let experiments = super::experiments::validate(raw.experiments, &backends, &aliases)?;
    let quotas = super::policies::quotas(raw.quotas)?;
    let policies = super::policies::validate(raw.policies, &quotas, &backends, &aliases)?;
    let security = super::security::validate(raw.security, listen)?;

    Ok(Config {
        auth,
        storage,
        prices: prices.into_iter().collect(),
        listen,
        backends,
        pools,
        epp,
        strategy,
        max_attempts,
        retry_backoff: duration("routing.retry_backoff", &raw.routing.retry_backoff, Duration::from_millis(250))?,
        retry_after_max: duration("routing.retry_after_max", &raw.routing.retry_after_max, Duration::from_secs(10))?,
        resume_streams: raw.routing.resume_streams.unwrap_or(true),
        max_queue: raw.routing.max_queue.unwrap_or(1000),
        queue_timeout: duration("routing.queue_timeout", &raw.routing.queue_timeout, Duration::from_secs(30))?,
        affinity,
        aliases,
        experiments,
        policies,
        quotas,
        fallbacks: fallbacks.into_iter().collect(),
        context_window_fallbacks: context_window_fallbacks.into_iter().collect(),
        fallback_statuses,
        health,
        timeouts,
        max_body_bytes,
        max_upload_bytes,
        max_idle_upstream_connections: raw.limits.max_idle_upstream_connections.unwrap_or(1024),
        listener,
        shutdown_grace: duration("shutdown_grace", &raw.shutdown_grace, Duration::from_secs(30))?,
        mcp: super::mcp::validate(raw.mcp)?,
        tls: raw.tls.map(|t| TlsConfig { cert: t.cert.into(), key: t.key.into() }),
        redis: raw.redis.map(validate_redis).transpose()?,
        telemetry: super::telemetry::validate(raw.telemetry, env)?,
        exports,
        console: super::console::validate(raw.console)?,
        cache: super::cache::validate(raw.cache)?,
        agents: super::agents::validate(raw.agents, &security.agent_hosts)?,
        security,
        tokenizers: super::engines::tokenizers(&raw.models)?,
        guardrails: super::guardrails::validate(raw.guardrails, raw.models)?,
        realtime_idle: nonzero("realtime.idle_timeout", &raw.realtime.idle_timeout, Duration::from_secs(300))?,
        realtime_max: nonzero("realtime.max_duration", &raw.realtime.max_duration, Duration::from_secs(3600))?,
        batches: super::batches::validate(raw.batches)?,
        source: None,
    })
    .map(|mut config: Config| {
        config.expand_pools(&HashMap::new());
        config
    })
}

fn validate_listen(listen: Option<&str>) -> Result<SocketAddr, ConfigError> {
    let listen_text = listen.unwrap_or("127.0.0.1:4100");
    listen_text
        .parse()
        .map_err(|_| ConfigError::at("listen", format!("`{listen_text}` is not an address like 127.0.0.1:4100")))
}

fn validate_strategy(strategy: Option<&str>) -> Result<Strategy, ConfigError> {
    match strategy.unwrap_or("least-connections") {
        "round-robin" => Ok(Strategy::RoundRobin),
        "least-connections" => Ok(Strategy::LeastConnections),
        "priority" => Ok(Strategy::Priority),
        "weighted" => Ok(Strategy::Weighted),
        "cache-aware" => Ok(Strategy::CacheAware),
        "prefix-hash" => Ok(Strategy::PrefixHash),
        other => Err(ConfigError::at(
            "routing.strategy",
            format!(
                "unknown strategy `{other}` (round-robin, least-connections, priority, weighted, cache-aware, \
                 prefix-hash)"
            ),
        )),
    }
}

/// Sticky sessions and how far they may unbalance the backends.
fn validate_affinity(r: &RawRouting) -> Result<AffinityConfig, ConfigError> {
    let affinity = AffinityConfig {
        sticky_sessions: r.sticky_sessions.unwrap_or(true),
        session_ttl: duration("routing.session_ttl", &r.session_ttl, Duration::from_secs(30 * 60))?,
        max_sessions: r.max_sessions.unwrap_or(100_000).max(1),
        balance_factor: r.balance_factor.unwrap_or(1.5),
        balance_slack: r.balance_slack.unwrap_or(2),
    };
    if !(affinity.balance_factor >= 1.0 && affinity.balance_factor.is_finite()) {
        return Err(ConfigError::at("routing.balance_factor", "must be a number of at least 1"));
    }
    Ok(affinity)
}

/// Each list of `fallbacks` and `context_window_fallbacks` names models, none of them its own.
fn validate_fallback_lists(
    fallbacks: &HashMap<String, Vec<String>>,
    context_window_fallbacks: &HashMap<String, Vec<String>>,
) -> Result<(), ConfigError> {
    let lists = fallbacks.iter().map(|e| ("fallbacks", e));
    for (block, (model, to)) in lists.chain(context_window_fallbacks.iter().map(|e| ("context_window_fallbacks", e))) {
        let at = || format!("{block}.{model}");
        if to.is_empty() || to.iter().any(String::is_empty) {
            return Err(ConfigError::at(at(), "list the models to fall back to, in order"));
        }
        if to.iter().any(|m| m == model) {
            return Err(ConfigError::at(at(), "a model cannot fall back to itself"));
        }
    }
    Ok(())
}

/// An alias points at a model name, never at another alias.
fn validate_aliases(aliases: &HashMap<String, String>) -> Result<(), ConfigError> {
    for (alias, target) in aliases {
        if target.is_empty() {
            return Err(ConfigError::at(format!("aliases.{alias}"), "alias target is empty"));
        }
        if aliases.contains_key(target) {
            return Err(ConfigError::at(
                format!("aliases.{alias}"),
                format!("`{target}` is itself an alias; point `{alias}` at a model name"),
            ));
        }
    }
    Ok(())
}

fn validate_health(h: &RawHealth) -> Result<HealthConfig, ConfigError> {
    let health = HealthConfig {
        interval: duration("health.interval", &h.interval, Duration::from_secs(2))?,
        timeout: duration("health.timeout", &h.timeout, Duration::from_secs(1))?,
        down_backoff_min: duration("health.down_backoff_min", &h.down_backoff_min, Duration::from_millis(50))?,
        down_backoff_max: duration("health.down_backoff_max", &h.down_backoff_max, Duration::from_millis(100))?,
        failure_threshold: h.failure_threshold.unwrap_or(5).max(1),
        breaker_cooldown: duration("health.breaker_cooldown", &h.breaker_cooldown, Duration::from_secs(5))?,
    };
    if health.interval.is_zero() {
        return Err(ConfigError::at("health.interval", "must be greater than zero"));
    }
    if health.down_backoff_min.is_zero() || health.down_backoff_max < health.down_backoff_min {
        return Err(ConfigError::at(
            "health.down_backoff_min",
            "must be greater than zero and not above health.down_backoff_max",
        ));
    }
    Ok(health)
}

/// Every timeout has a default and none may be zero.
fn validate_timeouts(t: &RawTimeouts) -> Result<Timeouts, ConfigError> {
    let timeouts = Timeouts {
        connect: duration("timeouts.connect", &t.connect, Duration::from_secs(2))?,
        first_byte: duration("timeouts.first_byte", &t.first_byte, Duration::from_secs(300))?,
        stream_idle: duration("timeouts.stream_idle", &t.stream_idle, Duration::from_secs(120))?,
        request: duration("timeouts.request", &t.request, Duration::from_secs(600))?,
        header_read: duration("timeouts.header_read", &t.header_read, Duration::from_secs(30))?,
        body_read: duration("timeouts.body_read", &t.body_read, Duration::from_secs(60))?,
        client_write: duration("timeouts.client_write", &t.client_write, Duration::from_secs(60))?,
        connection_idle: duration("timeouts.connection_idle", &t.connection_idle, Duration::from_secs(180))?,
        upstream_idle: duration("timeouts.upstream_idle", &t.upstream_idle, Duration::from_secs(90))?,
    };
    for (path, d) in [
        ("timeouts.connect", timeouts.connect),
        ("timeouts.first_byte", timeouts.first_byte),
        ("timeouts.stream_idle", timeouts.stream_idle),
        ("timeouts.request", timeouts.request),
        ("timeouts.header_read", timeouts.header_read),
        ("timeouts.body_read", timeouts.body_read),
        ("timeouts.client_write", timeouts.client_write),
        ("timeouts.connection_idle", timeouts.connection_idle),
        ("timeouts.upstream_idle", timeouts.upstream_idle),
    ] {
        if d.is_zero() {
            return Err(ConfigError::at(path, "must be greater than zero"));
        }
    }
    Ok(timeouts)
}

/// The listener's limits on connections and request heads.
fn validate_listener(l: &RawLimits) -> Result<ListenerLimits, ConfigError> {
    let listener = ListenerLimits {
        max_connections: l.max_connections.unwrap_or(10_000),
        max_headers: l.max_headers.unwrap_or(100),
        max_header_bytes: l.max_header_bytes.unwrap_or(32 * 1024),
        max_uri_bytes: l.max_uri_bytes.unwrap_or(8 * 1024),
    };
    if listener.max_connections == 0 {
        return Err(ConfigError::at("limits.max_connections", "must be greater than zero"));
    }
    if !(1..=1024).contains(&listener.max_headers) {
        return Err(ConfigError::at("limits.max_headers", "must be between 1 and 1024"));
    }
    // hyper's smallest read buffer is 8 KiB; a head must fit in it.
    if !(8 * 1024..=1024 * 1024).contains(&listener.max_header_bytes) {
        return Err(ConfigError::at("limits.max_header_bytes", "must be between 8192 and 1048576"));
    }
    if !(256..=65_534).contains(&listener.max_uri_bytes) {
        return Err(ConfigError::at("limits.max_uri_bytes", "must be between 256 and 65534"));
    }
    Ok(listener)
}

/// The master key and secret, from the file or else the environment.
fn validate_auth(raw: RawAuth, env: &dyn Env) -> Result<AuthConfig, ConfigError> {
    let master_key = raw.master_key.or_else(|| env.var("SWITCHYARD_MASTER_KEY")).filter(|k| !k.is_empty());
    let auth = AuthConfig {
        oidc: super::oidc::validate(raw.oidc, master_key.is_some())?,
        master_key,
        secret: raw.secret.or_else(|| env.var("SWITCHYARD_SECRET")).filter(|k| !k.is_empty()),
        jwt: super::jwt::validate(raw.jwt)?,
    };
    if auth.master_key.as_ref().is_some_and(|k| k.len() < 8) {
        return Err(ConfigError::at("auth.master_key", "must be at least 8 characters"));
    }
    if auth.secret.as_ref().is_some_and(|k| k.len() < 32) {
        return Err(ConfigError::at("auth.secret", "must be at least 32 characters"));
    }
    Ok(auth)
}

fn validate_redis(raw: RawRedis) -> Result<RedisConfig, ConfigError> {
    if !(raw.url.starts_with("redis://") || raw.url.starts_with("rediss://") || raw.url.starts_with("redis+unix://")) {
        return Err(ConfigError::at("redis.url", "use redis://HOST:PORT/DB (rediss:// for TLS)"));
    }
    let timeout = duration("redis.timeout", &raw.timeout, Duration::from_millis(50))?;
    if timeout.is_zero() {
        return Err(ConfigError::at("redis.timeout", "must be greater than zero"));
    }
    let policy = |path: &str, raw: Option<String>| match raw.as_deref() {
        None | Some("local_share") => Ok(FailurePolicy::LocalShare),
        Some("open") => Ok(FailurePolicy::Open),
        Some("closed") => Ok(FailurePolicy::Closed),
        Some(other) => Err(ConfigError::at(path, format!("`{other}`: use local_share, open or closed"))),
    };
    Ok(RedisConfig {
        url: raw.url,
        timeout,
        rate_policy: policy("redis.on_failure.rate", raw.on_failure.rate)?,
        parallel_policy: policy("redis.on_failure.parallel", raw.on_failure.parallel)?,
    })
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use std::collections::HashMap;

    fn load(yaml: &str) -> Result<Config, String> {
        let env = HashMap::from([("GPU_A_KEY".to_owned(), "k1".to_owned())]);
        Config::from_yaml(yaml, &env).map_err(|e| e.to_string())
    }

    #[test]
    fn a_sinks_backlog_and_the_journal_file_size_are_checked() {
        let hook = "  - {name: h, type: webhook, url: 'http://127.0.0.1:9/h'";
        let base = "backends:\n  - {name: b, url: 'http://127.0.0.1:9'}\n";
        let with = |extra: &str, storage: &str| load(&format!("{base}{storage}exports:\n{hook}{extra}}}\n"));
        let c = with(", max_backlog: 256MiB", "").unwrap();
        assert_eq!(c.exports[0].max_backlog, 256 << 20);
        assert_eq!(with("", "").unwrap().exports[0].max_backlog, 4 << 30);
        for (extra, field) in [(", max_backlog: 0", "max_backlog"), (", max_backlog: lots", "max_backlog")] {
            let e = with(extra, "").unwrap_err();
            assert!(e.contains(&format!("exports[0].{field}")), "{e}");
        }
        let storage = |size: &str| format!("storage: {{usage_journal_file_bytes: {size}}}\n");
        assert_eq!(with("", &storage("8KiB")).unwrap().storage.journal_file_bytes, 8 << 10);
        for bad in ["1000", "big"] {
            let e = with("", &storage(bad)).unwrap_err();
            assert!(e.contains("storage.usage_journal_file_bytes"), "{e}");
        }
    }

    #[test]
    fn issue_example_parses() {
        let c = load(
            r#"
listen: 127.0.0.1:4100
backends:
  - name: gpu-a
    url: http://127.0.0.1:11434
    type: ollama
    api_key: ${GPU_A_KEY}
    models: [llama3.2:1b]
    priority: 100
    weight: 1
routing:
  strategy: least-connections
aliases:
  fast: llama3.2:1b
"#,
        )
        .unwrap();
        assert_eq!(c.backends[0].api_key.as_deref(), Some("k1"));
        assert_eq!(c.resolve_alias("fast"), "llama3.2:1b");
        assert_eq!(c.resolve_alias("other"), "other");
    }

    #[test]
    fn unknown_keys_name_their_path() {
        let e = load("backends:\n  - name: a\n    url: http://x:1\n    modles: [m]\n").unwrap_err();
        assert!(e.starts_with("backends[0]"), "{e}");
        assert!(e.contains("modles"), "{e}");
        let e = load("routing:\n  stratgy: priority\n").unwrap_err();
        assert!(e.contains("stratgy"), "{e}");
    }

    #[test]
    fn bad_values_name_their_path() {
        assert!(load("routing: {strategy: fastest}").unwrap_err().starts_with("routing.strategy"));
        assert!(load("realtime: {idle_timeout: 0s}").unwrap_err().starts_with("realtime.idle_timeout"));
        assert!(load("batches: {concurrency: 0}").unwrap_err().starts_with("batches.concurrency"));
        assert!(load("batches: {completion_window: 0s}").unwrap_err().starts_with("batches.completion_window"));
        assert!(load("batches: {mode: later}").unwrap_err().starts_with("batches.mode"));
        assert!(load("batches: {poll_interval: 1ms}").unwrap_err().starts_with("batches.poll_interval"));
        assert!(load("limits: {max_upload_bytes: 0}").unwrap_err().starts_with("limits.max_upload_bytes"));
        assert!(load("backends: [{name: a, url: ftp://x}]").unwrap_err().starts_with("backends[0].url"));
        assert!(load("backends: [{name: a, url: 'http://x:1', weight: 0}]").unwrap_err().contains("weight"));
        assert!(load("backends: [{name: a, url: 'http://x:1'}, {name: a, url: 'http://y:1'}]")
            .unwrap_err()
            .contains("duplicate"));
        assert!(load("backends: [{name: a, url: 'http://x:1', api_key: '${NOPE}'}]")
            .unwrap_err()
            .starts_with("backends[0].api_key"));
        assert!(load("aliases: {a: b, b: c}").unwrap_err().contains("itself an alias"));
        assert!(load("health: {interval: soon}").unwrap_err().starts_with("health.interval"));
        assert!(load("listen: nowhere").unwrap_err().starts_with("listen"));
    }

    #[test]
    fn empty_and_defaults() {
        let c = load("").unwrap();
        assert!(c.backends.is_empty());
        assert_eq!(c.listen.port(), 4100);
        let c = load("backends: [{name: a, url: 'http://x:1/v1/'}]").unwrap();
        assert_eq!(c.backends[0].url, "http://x:1");
        assert_eq!(c.backends[0].kind, crate::config::BackendKind::OpenAi);
    }
}
