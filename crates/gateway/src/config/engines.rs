//! `backends[].kv_events` (where an engine publishes its KV-cache events: the values of its own
//! `--kv-events-config`) and `models.*.tokenizer` (the directory of the model's `tokenizer.json`
//! and chat template, to key prompts as the engine does).

use std::collections::HashMap;

use serde::Deserialize;

use super::ConfigError;
pub use switchyard_kvevents::FeedConfig;

/// `kv_events: {endpoint, replay_endpoint, topic, block_size, engine}` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawKvEvents {
    endpoint: String,
    replay_endpoint: Option<String>,
    #[serde(default)]
    topic: String,
    block_size: Option<usize>,
    engine: Option<String>,
}

/// The block size vLLM uses unless told otherwise (SGLang's page size is 1 by default, but
/// its events carry their own `block_size`).
const DEFAULT_BLOCK_SIZE: usize = 16;

pub fn validate_kv_events(raw: RawKvEvents, at: &dyn Fn(&str) -> String) -> Result<FeedConfig, ConfigError> {
    let tcp = |field: &str, value: &str| -> Result<String, ConfigError> {
        let rest = value.strip_prefix("tcp://").ok_or_else(|| {
            ConfigError::at(at(&format!("kv_events.{field}")), "expected tcp://host:port (the engine's own endpoint)")
        })?;
        let port = rest.rsplit_once(':').and_then(|(host, port)| (!host.is_empty()).then_some(port));
        if port.and_then(|p| p.parse::<u16>().ok()).is_none_or(|p| p == 0) || rest.contains('*') {
            return Err(ConfigError::at(
                at(&format!("kv_events.{field}")),
                "expected tcp://host:port with the engine's host, not a wildcard",
            ));
        }
        Ok(value.to_owned())
    };
    let endpoint = tcp("endpoint", &raw.endpoint)?;
    let replay_endpoint = raw.replay_endpoint.as_deref().map(|r| tcp("replay_endpoint", r)).transpose()?;
    match raw.engine.as_deref() {
        None | Some("vllm") | Some("sglang") => {}
        Some(other) => {
            return Err(ConfigError::at(at("kv_events.engine"), format!("`{other}`: expected vllm or sglang")));
        }
    }
    let block_size = match raw.block_size {
        Some(0) => return Err(ConfigError::at(at("kv_events.block_size"), "must be at least 1")),
        Some(n) => n,
        None => DEFAULT_BLOCK_SIZE,
    };
    Ok(FeedConfig { endpoint, replay_endpoint, topic: raw.topic, block_size })
}

/// `models.*.tokenizer`: a directory per model (loaded, and so checked, when routing is built).
pub(super) fn tokenizers(
    models: &HashMap<String, super::guardrails::RawModel>,
) -> Result<super::FastMap<String, std::path::PathBuf>, ConfigError> {
    let mut out = super::FastMap::default();
    for (model, settings) in models {
        match settings.tokenizer() {
            Some("") => return Err(ConfigError::at(format!("models.{model}.tokenizer"), "empty path")),
            Some(dir) => {
                out.insert(model.clone(), std::path::PathBuf::from(dir));
            }
            None => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn load(kv_events: &str) -> Result<Config, String> {
        let yaml = format!("backends:\n  - {{name: e1, url: 'http://127.0.0.1:8000', kv_events: {kv_events}}}\n");
        Config::from_yaml(&yaml, &crate::config::ProcessEnv).map_err(|e| e.to_string())
    }

    #[test]
    fn kv_events_take_the_engines_own_endpoints_and_name_what_is_wrong() {
        let config =
            load("{endpoint: 'tcp://10.0.0.5:5557', replay_endpoint: 'tcp://10.0.0.5:5558', engine: sglang}").unwrap();
        let feed = config.backends[0].kv_events.clone().unwrap();
        assert_eq!((feed.endpoint.as_str(), feed.block_size, feed.topic.as_str()), ("tcp://10.0.0.5:5557", 16, ""));
        assert_eq!(feed.replay_endpoint.as_deref(), Some("tcp://10.0.0.5:5558"));
        for (bad, at) in [
            ("{endpoint: 'tcp://*:5557'}", "backends[0].kv_events.endpoint"),
            ("{endpoint: 'ipc:///tmp/kv'}", "backends[0].kv_events.endpoint"),
            ("{endpoint: 'tcp://h:5557', replay_endpoint: 'tcp://h:0'}", "backends[0].kv_events.replay_endpoint"),
            ("{endpoint: 'tcp://h:5557', block_size: 0}", "backends[0].kv_events.block_size"),
            ("{endpoint: 'tcp://h:5557', engine: trt}", "backends[0].kv_events.engine"),
            ("{endpoint: 'tcp://h:5557', topics: x}", "backends[0]"),
        ] {
            let e = load(bad).unwrap_err();
            assert!(e.starts_with(at), "{bad}: {e}");
        }
    }
}
