//! `batches:` — how the gateway serves the Batch API: it runs a batch's lines itself (`mode:
//! run`, the default), or, with `mode: passthrough`, sends a batch whose model a `provider:
//! openai` backend serves to that provider's own Batch API and follows it there.

use std::time::Duration;

use serde::Deserialize;

use super::raw::{duration, nonzero};
use super::ConfigError;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBatches {
    concurrency: Option<usize>,
    completion_window: Option<String>,
    mode: Option<String>,
    poll_interval: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct BatchSettings {
    /// Lines of one batch in flight at once, at most (`batches.concurrency`), and only in capacity
    /// interactive requests leave free.
    pub concurrency: usize,
    /// How long a batch has to finish before it expires (`batches.completion_window`, 24 h as
    /// OpenAI's): lines not run by then go to the error file as `batch_expired`.
    pub window: Duration,
    /// `mode: passthrough`: a batch for a `provider: openai` backend's model goes to its Batch API.
    pub passthrough: bool,
    /// How often a batch sent to a provider is looked at there (`batches.poll_interval`, 30 s).
    pub poll: Duration,
}

pub(super) fn validate(raw: RawBatches) -> Result<BatchSettings, ConfigError> {
    Ok(BatchSettings {
        concurrency: match raw.concurrency {
            Some(0) => return Err(ConfigError::at("batches.concurrency", "must be at least 1")),
            n => n.unwrap_or(4),
        },
        window: nonzero("batches.completion_window", &raw.completion_window, Duration::from_secs(24 * 3600))?,
        passthrough: match raw.mode.as_deref() {
            None | Some("run") => false,
            Some("passthrough") => true,
            Some(_) => return Err(ConfigError::at("batches.mode", "must be run or passthrough")),
        },
        poll: match duration("batches.poll_interval", &raw.poll_interval, Duration::from_secs(30))? {
            d if d < Duration::from_millis(100) => {
                return Err(ConfigError::at("batches.poll_interval", "must be at least 100ms"))
            }
            d => d,
        },
    })
}
