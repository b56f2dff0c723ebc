//! `console:` — the operator's console at `/ui`: on or off, how long a login lasts, and whether
//! request and response bodies are kept for its request log (redacted, capped).

use std::time::Duration;

use serde::Deserialize;

use super::ConfigError;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConsole {
    enabled: Option<bool>,
    session_ttl: Option<String>,
    /// Keep each request's and response's body in the request log (redacted, capped).
    store_bodies: Option<bool>,
    /// The cap on each stored body.
    max_stored_body_bytes: Option<usize>,
}

pub fn validate(raw: RawConsole) -> Result<super::ConsoleConfig, ConfigError> {
    let defaults = super::ConsoleConfig::default();
    let session_ttl = super::raw::duration("console.session_ttl", &raw.session_ttl, defaults.session_ttl)?;
    if session_ttl < Duration::from_secs(60) {
        return Err(ConfigError::at("console.session_ttl", "must be at least 1m"));
    }
    let max_stored_body_bytes = raw.max_stored_body_bytes.unwrap_or(defaults.max_stored_body_bytes);
    if !(256..=1024 * 1024).contains(&max_stored_body_bytes) {
        return Err(ConfigError::at("console.max_stored_body_bytes", "must be between 256 and 1048576"));
    }
    Ok(super::ConsoleConfig {
        enabled: raw.enabled.unwrap_or(defaults.enabled),
        session_ttl,
        store_bodies: raw.store_bodies.unwrap_or(defaults.store_bodies),
        max_stored_body_bytes,
    })
}
