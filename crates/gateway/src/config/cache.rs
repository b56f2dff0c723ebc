//! `cache:` — the response cache: on or off, for how long, how much memory it may hold, whose
//! answers a request may be served (`namespace`), and whether the fleet shares it through Redis.

use std::time::Duration;

use serde::Deserialize;

use super::ConfigError;

/// Whose stored answers a request may be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheNamespace {
    /// Only answers to requests made with the same key (the default).
    Key,
    /// Answers to any key of the same team (keys without a team keep to themselves).
    Team,
    /// Any caller's answers.
    Global,
}

/// `cache: {enabled, ttl, max_bytes, max_entry_bytes, namespace, opt_in, shared}`.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheConfig {
    pub enabled: bool,
    /// How long a stored answer is served.
    pub ttl: Duration,
    /// The memory the in-process cache may hold (bodies and their bookkeeping), least recently
    /// used answers evicted first.
    pub max_bytes: usize,
    /// Larger answers are not stored.
    pub max_entry_bytes: usize,
    pub namespace: CacheNamespace,
    /// Only requests that ask for it (`x-switchyard-cache: on`) or keys tagged `cache:on` use it;
    /// otherwise every request does unless it or its key opts out.
    pub opt_in: bool,
    /// With `redis:`, instances share stored answers through it (default on).
    pub shared: bool,
    /// The second layer (`cache.semantic`), consulted on an exact miss.
    pub semantic: Option<Box<super::semantic::SemanticConfig>>,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            enabled: false,
            ttl: Duration::from_secs(600),
            max_bytes: 256 * 1024 * 1024,
            max_entry_bytes: 1024 * 1024,
            namespace: CacheNamespace::Key,
            opt_in: false,
            shared: true,
            semantic: None,
        }
    }
}

/// A size: a number of bytes, or text with a unit (`64MiB`, `512KB`, `1GiB`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawSize {
    Bytes(u64),
    Text(String),
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCache {
    enabled: Option<bool>,
    ttl: Option<String>,
    max_bytes: Option<RawSize>,
    max_entry_bytes: Option<RawSize>,
    namespace: Option<String>,
    opt_in: Option<bool>,
    shared: Option<bool>,
    semantic: Option<super::semantic::RawSemantic>,
}

pub fn validate(raw: Option<RawCache>) -> Result<CacheConfig, ConfigError> {
    let defaults = CacheConfig::default();
    let Some(raw) = raw else { return Ok(defaults) };
    let ttl = super::raw::duration("cache.ttl", &raw.ttl, defaults.ttl)?;
    if ttl < Duration::from_secs(1) {
        return Err(ConfigError::at("cache.ttl", "must be at least 1s"));
    }
    let max_bytes = size("cache.max_bytes", raw.max_bytes, defaults.max_bytes)?;
    let max_entry_bytes = size("cache.max_entry_bytes", raw.max_entry_bytes, defaults.max_entry_bytes)?;
    if max_bytes < 64 * 1024 {
        return Err(ConfigError::at("cache.max_bytes", "must be at least 64KiB"));
    }
    if max_entry_bytes == 0 || max_entry_bytes > max_bytes {
        return Err(ConfigError::at("cache.max_entry_bytes", "must be more than 0 and at most cache.max_bytes"));
    }
    let namespace = match raw.namespace.as_deref() {
        None | Some("key") => CacheNamespace::Key,
        Some("team") => CacheNamespace::Team,
        Some("global") => CacheNamespace::Global,
        Some(other) => {
            return Err(ConfigError::at("cache.namespace", format!("`{other}`: expected key, team or global")));
        }
    };
    Ok(CacheConfig {
        // A `cache:` block turns the cache on unless it says otherwise.
        enabled: raw.enabled.unwrap_or(true),
        ttl,
        max_bytes,
        max_entry_bytes,
        namespace,
        opt_in: raw.opt_in.unwrap_or(defaults.opt_in),
        shared: raw.shared.unwrap_or(defaults.shared),
        semantic: raw.semantic.map(|s| super::semantic::validate(s, ttl)).transpose()?.map(Box::new),
    })
}

pub(super) fn size(path: &str, raw: Option<RawSize>, default: usize) -> Result<usize, ConfigError> {
    let bytes = match raw {
        None => return Ok(default),
        Some(RawSize::Bytes(n)) => n,
        Some(RawSize::Text(text)) => parse_size(&text)
            .ok_or_else(|| ConfigError::at(path, format!("`{text}`: expected bytes, or a size such as 64MiB")))?,
    };
    usize::try_from(bytes).map_err(|_| ConfigError::at(path, "too large"))
}

/// `64MiB`, `512 KB`, `1gib`, `4096`: bytes (KB/MB/GB are powers of 1000, KiB/MiB/GiB of 1024).
fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let digits = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let number: u64 = text[..digits].parse().ok()?;
    let unit = match text[digits..].trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "kib" | "k" => 1 << 10,
        "mb" => 1_000_000,
        "mib" | "m" => 1 << 20,
        "gb" => 1_000_000_000,
        "gib" | "g" => 1 << 30,
        _ => return None,
    };
    number.checked_mul(unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_with_and_without_units() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("64MiB"), Some(64 << 20));
        assert_eq!(parse_size("512 KB"), Some(512_000));
        assert_eq!(parse_size("1gib"), Some(1 << 30));
        assert_eq!(parse_size("MiB"), None);
        assert_eq!(parse_size("12 parsecs"), None);
        assert_eq!(parse_size("99999999999999999999GiB"), None);
    }
}
