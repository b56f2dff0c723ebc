//! `backends[]`: one upstream each — its name, where it is (a URL, or a hosted `provider`), the
//! API it speaks (`type`), its key, and how much it takes.

use std::collections::HashSet;

use serde::Deserialize;

use super::{BackendConfig, BackendKind, ConfigError};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBackend {
    name: String,
    /// Optional with `provider`, which knows the URL.
    url: Option<String>,
    /// A hosted API by name (`super::presets`): its URL and type.
    provider: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    api_key: Option<String>,
    models: Option<Vec<String>>,
    priority: Option<i32>,
    weight: Option<u32>,
    cache_tokens: Option<usize>,
    max_concurrency: Option<usize>,
    /// Azure OpenAI: use the deployment-style URLs with this `api-version` (else the v1 API).
    api_version: Option<String>,
}

/// KV-cache capacity assumed for a backend that does not say: a few conversations of a
/// mid-sized context.
const DEFAULT_CACHE_TOKENS: usize = 65_536;

pub fn validate_backend(i: usize, b: RawBackend, names: &mut HashSet<String>) -> Result<BackendConfig, ConfigError> {
    let at = |field: &str| format!("backends[{i}].{field}");
    if b.name.is_empty() || !b.name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
        return Err(ConfigError::at(at("name"), "use letters, digits, '-', '_' or '.'"));
    }
    if !names.insert(b.name.clone()) {
        return Err(ConfigError::at(at("name"), format!("duplicate backend name `{}`", b.name)));
    }
    let preset = match b.provider.as_deref() {
        None => None,
        Some(name) => Some(super::presets::find(name).ok_or_else(|| {
            ConfigError::at(at("provider"), format!("unknown provider `{name}` ({})", super::presets::names()))
        })?),
    };
    if preset.is_some() && b.api_key.as_deref().is_none_or(str::is_empty) {
        return Err(ConfigError::at(at("api_key"), "a hosted provider needs its API key"));
    }
    let raw_url = match (&b.url, preset) {
        (Some(url), _) => url.clone(),
        (None, Some(p)) => p.url.to_owned(),
        (None, None) => return Err(ConfigError::at(at("url"), "give the backend's `url` (or a `provider`)")),
    };
    let url = raw_url.trim_end_matches('/').to_owned();
    let uri: http::Uri = url.parse().map_err(|_| ConfigError::at(at("url"), format!("`{raw_url}` is not a URL")))?;
    match uri.scheme_str() {
        Some("http") | Some("https") => {}
        _ => return Err(ConfigError::at(at("url"), "must start with http:// or https://")),
    }
    if uri.host().is_none() || uri.query().is_some() {
        return Err(ConfigError::at(at("url"), "must be a base URL like http://host:port"));
    }
    // `/v1` is appended per request; accept a base that already ends with it (and, for Azure,
    // with `/openai` or `/openai/v1`, which are appended too).
    let url = url.strip_suffix("/v1").or_else(|| url.strip_suffix("/v1beta")).unwrap_or(&url);
    let url = if b.kind.as_deref() == Some("azure") { url.strip_suffix("/openai").unwrap_or(url) } else { url };
    let url = url.to_owned();
    let kind_name = b.kind.as_deref().or(preset.map(|p| p.kind)).unwrap_or("openai");
    let kind = match kind_name {
        "openai" => BackendKind::OpenAi,
        "ollama" => BackendKind::Ollama,
        "anthropic" => BackendKind::Anthropic,
        "azure" => BackendKind::Azure,
        "gemini" => BackendKind::Gemini,
        other => {
            return Err(ConfigError::at(
                at("type"),
                format!("unknown backend type `{other}` (openai, ollama, anthropic, azure, gemini)"),
            ))
        }
    };
    if kind == BackendKind::Azure && b.models.is_none() {
        // Azure lists base models, not a resource's deployments, which are what requests name.
        return Err(ConfigError::at(at("models"), "an azure backend needs its deployments listed in `models`"));
    }
    if let Some(v) = &b.api_version {
        if kind != BackendKind::Azure {
            return Err(ConfigError::at(at("api_version"), "only azure backends take an api_version"));
        }
        if v.is_empty() || !v.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            return Err(ConfigError::at(at("api_version"), "expected a version such as 2024-10-21"));
        }
    }
    // Gemini's and Azure deployments' URLs name the model: one path segment.
    if kind == BackendKind::Gemini || b.api_version.is_some() {
        let segment = |m: &String| m.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        if let Some(pos) = b.models.iter().flatten().position(|m| !segment(m)) {
            return Err(ConfigError::at(
                format!("backends[{i}].models[{pos}]"),
                "named in the URL: letters, digits, '-', '_' or '.'",
            ));
        }
    }
    let weight = b.weight.unwrap_or(1);
    if weight == 0 {
        return Err(ConfigError::at(at("weight"), "must be at least 1"));
    }
    if let Some(models) = &b.models {
        if let Some(pos) = models.iter().position(|m| m.is_empty()) {
            return Err(ConfigError::at(format!("backends[{i}].models[{pos}]"), "empty model name"));
        }
    }
    Ok(BackendConfig {
        name: b.name,
        url,
        kind,
        api_key: b.api_key.filter(|k| !k.is_empty()),
        models: b.models,
        priority: b.priority.unwrap_or(0),
        weight,
        cache_tokens: b.cache_tokens.unwrap_or(DEFAULT_CACHE_TOKENS).max(1),
        max_concurrency: match b.max_concurrency {
            Some(0) => return Err(ConfigError::at(at("max_concurrency"), "must be at least 1")),
            n => n,
        },
        api_version: b.api_version,
    })
}
