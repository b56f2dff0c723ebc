//! `backends[]`: one upstream each — its name, where it is (a URL, or a hosted `provider`), the
//! API it speaks (`type`), its key, and how much it takes.

use std::collections::HashSet;

use serde::Deserialize;

use super::{AwsKeys, BackendConfig, BackendKind, ConfigError, PoolKeyConfig};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBackend {
    name: String,
    /// Optional with `provider`, which knows the URL; none for a pool (`endpoints`, `dns`).
    pub(super) url: Option<String>,
    /// A hosted API by name (`super::presets`): its URL and type.
    provider: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    api_key: Option<String>,
    /// Several keys for this one backend (a key pool): `[{name, key, rpm, tpm}]`.
    api_keys: Option<Vec<RawPoolKey>>,
    models: Option<Vec<String>>,
    /// What the backend serves (`chat`, `embeddings`, `rerank`, `moderations`, `images`,
    /// `audio`, `tokenize`); unset: whatever its type can speak.
    capabilities: Option<Vec<String>>,
    priority: Option<i32>,
    weight: Option<u32>,
    cache_tokens: Option<usize>,
    max_concurrency: Option<usize>,
    /// Azure OpenAI: use the deployment-style URLs with this `api-version` (else the v1 API).
    api_version: Option<String>,
    /// Bedrock: the AWS region (the endpoint's and the signature's).
    region: Option<String>,
    /// Bedrock: access keys to SigV4-sign requests with, when no `api_key` is given.
    aws_access_key_id: Option<String>,
    aws_secret_access_key: Option<String>,
    aws_session_token: Option<String>,
    /// Where the engine publishes its KV-cache events (vLLM's and SGLang's `--kv-events-config`).
    kv_events: Option<super::engines::RawKvEvents>,
    /// A pool of endpoints instead of one `url` (`config/pools.rs`): listed, or a DNS name's records.
    pub(super) endpoints: Option<Vec<String>>,
    pub(super) dns: Option<super::pools::RawDns>,
    /// The endpoint picker a pool follows.
    pub(super) epp: Option<super::pools::RawFollow>,
}

impl RawBackend {
    /// Whether this entry is a pool of endpoints.
    pub(super) fn is_pool(&self) -> bool {
        self.endpoints.is_some() || self.dns.is_some() || self.epp.is_some()
    }

    /// The template backend of an `epp.pools[]` entry: an OpenAI-compatible engine.
    pub(super) fn for_pool(
        name: String,
        models: Vec<String>,
        max_concurrency: Option<usize>,
        cache_tokens: Option<usize>,
        kv_events: Option<super::engines::RawKvEvents>,
    ) -> RawBackend {
        RawBackend {
            name,
            url: Some("http://pool.invalid".to_owned()),
            provider: None,
            kind: None,
            api_key: None,
            api_keys: None,
            models: Some(models),
            capabilities: None,
            priority: None,
            weight: None,
            cache_tokens,
            max_concurrency,
            api_version: None,
            region: None,
            aws_access_key_id: None,
            aws_secret_access_key: None,
            aws_session_token: None,
            kv_events,
            endpoints: None,
            dns: None,
            epp: None,
        }
    }
}

/// One key of a backend's pool as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPoolKey {
    name: String,
    key: String,
    rpm: Option<u64>,
    tpm: Option<u64>,
}

/// `api_keys`: named, non-empty, each name once, limits of at least 1; not with `api_key`.
fn pool_keys(b: &RawBackend, at: &dyn Fn(&str) -> String) -> Result<Vec<PoolKeyConfig>, ConfigError> {
    let Some(keys) = &b.api_keys else { return Ok(Vec::new()) };
    if b.api_key.as_deref().is_some_and(|k| !k.is_empty()) {
        return Err(ConfigError::at(at("api_keys"), "give `api_key` (one key) or `api_keys` (a pool), not both"));
    }
    if b.aws_access_key_id.is_some() {
        return Err(ConfigError::at(at("api_keys"), "give either Bedrock API keys or access keys, not both"));
    }
    if keys.is_empty() {
        return Err(ConfigError::at(at("api_keys"), "a pool needs at least one key"));
    }
    let mut names = HashSet::new();
    let mut pool = Vec::with_capacity(keys.len());
    for (j, k) in keys.iter().enumerate() {
        let here = |field: &str| at(&format!("api_keys[{j}].{field}"));
        if k.name.is_empty() || !names.insert(k.name.as_str()) {
            return Err(ConfigError::at(here("name"), "each key needs a name of its own"));
        }
        if k.key.is_empty() {
            return Err(ConfigError::at(here("key"), "empty key"));
        }
        for (field, limit) in [("rpm", k.rpm), ("tpm", k.tpm)] {
            if limit == Some(0) {
                return Err(ConfigError::at(here(field), "must be at least 1"));
            }
        }
        pool.push(PoolKeyConfig { name: k.name.clone(), key: k.key.clone(), rpm: k.rpm, tpm: k.tpm });
    }
    Ok(pool)
}

/// KV-cache capacity assumed for a backend that does not say: a few conversations of a
/// mid-sized context.
const DEFAULT_CACHE_TOKENS: usize = 65_536;

pub fn validate_backend(i: usize, b: RawBackend, names: &mut HashSet<String>) -> Result<BackendConfig, ConfigError> {
    let at = |field: &str| format!("backends[{i}].{field}");
    validate_name(&b.name, names, &at)?;
    let preset = match b.provider.as_deref() {
        None => None,
        Some(name) => Some(super::presets::find(name).ok_or_else(|| {
            ConfigError::at(at("provider"), format!("unknown provider `{name}` ({})", super::presets::names()))
        })?),
    };
    let api_keys = pool_keys(&b, &at)?;
    if preset.is_some() && b.api_key.as_deref().is_none_or(str::is_empty) && api_keys.is_empty() {
        return Err(ConfigError::at(at("api_key"), "a hosted provider needs its API key"));
    }
    let bedrock = b.kind.as_deref() == Some("bedrock");
    if let Some(region) = &b.region {
        if !bedrock {
            return Err(ConfigError::at(at("region"), "only bedrock backends take a region"));
        }
        if region.is_empty() || !region.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') {
            return Err(ConfigError::at(at("region"), "expected an AWS region such as us-east-1"));
        }
    }
    let url = base_url(&b, preset, &at)?;
    let kind = backend_kind(b.kind.as_deref().or(preset.map(|p| p.kind)).unwrap_or("openai"), &at)?;
    let aws = bedrock_keys(&b, &at)?;
    validate_models_for_kind(i, &b, kind, &at)?;
    let weight = b.weight.unwrap_or(1);
    if weight == 0 {
        return Err(ConfigError::at(at("weight"), "must be at least 1"));
    }
    if let Some(models) = &b.models {
        if let Some(pos) = models.iter().position(|m| m.is_empty()) {
            return Err(ConfigError::at(format!("backends[{i}].models[{pos}]"), "empty model name"));
        }
    }
    let known = &crate::endpoint::CAPABILITIES[..crate::endpoint::CAPABILITIES.len() - 1];
    if let Some(pos) = b.capabilities.iter().flatten().position(|c| !known.contains(&c.as_str())) {
        let message = format!("must be one of {}", known.join(", "));
        return Err(ConfigError::at(format!("backends[{i}].capabilities[{pos}]"), message));
    }
    Ok(BackendConfig {
        name: b.name,
        url,
        kind,
        provider: b.provider,
        api_key: b.api_key.filter(|k| !k.is_empty()),
        api_keys,
        models: b.models,
        capabilities: b.capabilities,
        priority: b.priority.unwrap_or(0),
        weight,
        cache_tokens: b.cache_tokens.unwrap_or(DEFAULT_CACHE_TOKENS).max(1),
        max_concurrency: match b.max_concurrency {
            Some(0) => return Err(ConfigError::at(at("max_concurrency"), "must be at least 1")),
            n => n,
        },
        api_version: b.api_version,
        aws,
        kv_events: b.kv_events.map(|k| super::engines::validate_kv_events(k, &at)).transpose()?,
        member: None,
    })
}

/// A backend's name: a plain token (it appears in metrics and logs), unique among the backends.
fn validate_name(name: &str, names: &mut HashSet<String>, at: &dyn Fn(&str) -> String) -> Result<(), ConfigError> {
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
        return Err(ConfigError::at(at("name"), "use letters, digits, '-', '_' or '.'"));
    }
    if !names.insert(name.to_owned()) {
        return Err(ConfigError::at(at("name"), format!("duplicate backend name `{name}`")));
    }
    Ok(())
}

/// The base URL requests are sent under: the configured `url`, else the provider's, else (for
/// Bedrock) the region's endpoint; without a trailing `/` or the API path appended per request.
fn base_url(
    b: &RawBackend,
    preset: Option<&super::presets::Preset>,
    at: &dyn Fn(&str) -> String,
) -> Result<String, ConfigError> {
    let bedrock = b.kind.as_deref() == Some("bedrock");
    let raw_url = match (&b.url, preset, &b.region) {
        (Some(url), _, _) => url.clone(),
        (None, Some(p), _) => p.url.to_owned(),
        (None, None, Some(region)) if bedrock => format!("https://bedrock-runtime.{region}.amazonaws.com"),
        (None, None, _) if bedrock => {
            return Err(ConfigError::at(at("region"), "a bedrock backend needs its `region`"))
        }
        (None, None, _) => return Err(ConfigError::at(at("url"), "give the backend's `url` (or a `provider`)")),
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
    Ok(url.to_owned())
}

fn backend_kind(name: &str, at: &dyn Fn(&str) -> String) -> Result<BackendKind, ConfigError> {
    match name {
        "openai" => Ok(BackendKind::OpenAi),
        "ollama" => Ok(BackendKind::Ollama),
        "anthropic" => Ok(BackendKind::Anthropic),
        "azure" => Ok(BackendKind::Azure),
        "gemini" => Ok(BackendKind::Gemini),
        "bedrock" => Ok(BackendKind::Bedrock),
        other => Err(ConfigError::at(
            at("type"),
            format!("unknown backend type `{other}` (openai, ollama, anthropic, azure, gemini, bedrock)"),
        )),
    }
}

/// What a backend's kind asks of its `models` and `api_version`.
fn validate_models_for_kind(
    i: usize,
    b: &RawBackend,
    kind: BackendKind,
    at: &dyn Fn(&str) -> String,
) -> Result<(), ConfigError> {
    if kind == BackendKind::Bedrock && b.models.is_none() {
        // Requests name model ids and inference profiles, which no one list holds.
        return Err(ConfigError::at(at("models"), "a bedrock backend needs its model ids listed in `models`"));
    }
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
    // Gemini's and Azure deployments' URLs name the model: one path segment (Bedrock's are
    // percent-encoded into theirs).
    if kind == BackendKind::Gemini || b.api_version.is_some() {
        let segment = |m: &String| m.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        if let Some(pos) = b.models.iter().flatten().position(|m| !segment(m)) {
            return Err(ConfigError::at(
                format!("backends[{i}].models[{pos}]"),
                "named in the URL: letters, digits, '-', '_' or '.'",
            ));
        }
    }
    Ok(())
}

/// A Bedrock backend's access keys: both or neither, and not beside an `api_key` (a Bedrock API
/// key, sent as a bearer token). Other kinds take none.
fn bedrock_keys(b: &RawBackend, at: &dyn Fn(&str) -> String) -> Result<Option<AwsKeys>, ConfigError> {
    let given = |v: &Option<String>| v.as_deref().filter(|s| !s.is_empty()).map(str::to_owned);
    let (id, secret, token) =
        (given(&b.aws_access_key_id), given(&b.aws_secret_access_key), given(&b.aws_session_token));
    if b.kind.as_deref() != Some("bedrock") {
        if id.is_some() || secret.is_some() || token.is_some() {
            return Err(ConfigError::at(at("aws_access_key_id"), "only bedrock backends take AWS access keys"));
        }
        return Ok(None);
    }
    let region = b.region.clone().unwrap_or_default();
    match (id, secret) {
        (Some(access_key_id), Some(secret_access_key)) => {
            if b.api_key.as_deref().is_some_and(|k| !k.is_empty()) {
                return Err(ConfigError::at(at("api_key"), "give either a Bedrock API key or access keys, not both"));
            }
            if region.is_empty() {
                return Err(ConfigError::at(at("region"), "SigV4 signing needs the backend's `region`"));
            }
            Ok(Some(AwsKeys { region, access_key_id, secret_access_key, session_token: token }))
        }
        (None, None) if token.is_none() => Ok(None),
        (None, _) => Err(ConfigError::at(at("aws_access_key_id"), "give the access key id with its secret")),
        (Some(_), None) => Err(ConfigError::at(at("aws_secret_access_key"), "give the secret with its access key id")),
    }
}
