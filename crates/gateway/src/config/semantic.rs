//! `cache.semantic:` — the response cache's second layer: answers reused for questions that mean
//! the same (embedding model, similarity threshold, what a partition holds, the store, the
//! checks a candidate must pass).

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::ConfigError;

/// What must match exactly for one request to be served another's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScopePart {
    /// The caller's key (`key`), or its team (`team`): tenants never share.
    Key,
    Team,
    Model,
    SystemPrompt,
    Tools,
    /// Sampling parameters that change answers: temperature (in steps of 0.1), `response_format`,
    /// `max_tokens` (in powers of two), `top_p`, `seed`, `stop`.
    Params,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SemanticStoreKind {
    Embedded,
    PgVector,
}

/// What a candidate must pass besides similarity (`verify:`).
#[derive(Debug, Clone, PartialEq)]
pub struct VerifyConfig {
    /// Negation, numbers, times, names, word order, opposites (default on).
    pub lexical: bool,
    /// A content word one question has and the other lacks must have a word embedding this close
    /// to one of the other question's (default 0.65).
    pub terms: f32,
    /// … unless the word carries little of its question: the question without it is at least this
    /// similar to the question with it (default 0.94).
    pub salience: f32,
    /// A model asked too, through the gateway: a reranker (`/v1/rerank`) or a chat model
    /// answering SAME or DIFFERENT.
    pub model: Option<String>,
    pub api: VerifyApi,
    /// The reranker's relevance score needed (default 0.5).
    pub min_score: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyApi {
    Rerank,
    Chat,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SemanticConfig {
    /// A model the gateway serves on `/v1/embeddings`.
    pub embedding_model: String,
    pub threshold: f32,
    pub scope: Vec<ScopePart>,
    pub ttl: Duration,
    pub max_entries: usize,
    pub store: SemanticStoreKind,
    /// The embedded store's SQLite file (default: beside the gateway's SQLite database; in
    /// memory when the gateway's storage is not SQLite).
    pub path: Option<PathBuf>,
    /// pgvector's database (default: `storage.url` when it is PostgreSQL) and table.
    pub url: Option<String>,
    pub table: String,
    /// The embedding's length, for pgvector's HNSW index (without it, exact search per partition).
    pub dimensions: Option<usize>,
    /// The conversation before the question: part of the partition (`exact`, default) or
    /// embedded with the question (`embed`).
    pub embed_conversation: bool,
    /// Requests with a higher temperature are neither looked up nor stored (default 1.0).
    pub max_temperature: f64,
    /// Answers that are tool calls are stored too (default off).
    pub store_tool_calls: bool,
    /// `x-switchyard-cache-threshold` may raise or lower the threshold per request.
    pub threshold_header: bool,
    /// Candidates checked per lookup, most similar first (default 4).
    pub candidates: usize,
    pub verify: VerifyConfig,
    /// The file `switchyard cache calibrate --write` leaves, shown by the console.
    pub calibration: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSemantic {
    embedding_model: String,
    threshold: Option<f32>,
    scope: Option<Vec<String>>,
    ttl: Option<String>,
    max_entries: Option<usize>,
    store: Option<String>,
    path: Option<PathBuf>,
    url: Option<String>,
    table: Option<String>,
    dimensions: Option<usize>,
    conversation: Option<String>,
    max_temperature: Option<f64>,
    store_tool_calls: Option<bool>,
    threshold_header: Option<bool>,
    candidates: Option<usize>,
    verify: Option<RawVerify>,
    calibration: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawVerify {
    lexical: Option<bool>,
    terms: Option<f32>,
    salience: Option<f32>,
    model: Option<String>,
    api: Option<String>,
    min_score: Option<f64>,
}

const AT: &str = "cache.semantic";

pub fn validate(raw: RawSemantic, cache_ttl: Duration) -> Result<SemanticConfig, ConfigError> {
    let at = |field: &str| format!("{AT}.{field}");
    if raw.embedding_model.trim().is_empty() {
        return Err(ConfigError::at(at("embedding_model"), "must name a model the gateway serves on /v1/embeddings"));
    }
    let threshold = raw.threshold.unwrap_or(0.92);
    if !(-1.0..=1.0).contains(&threshold) {
        return Err(ConfigError::at(at("threshold"), "must be a cosine similarity, from -1 to 1"));
    }
    let scope = match raw.scope {
        None => vec![ScopePart::Key, ScopePart::Model, ScopePart::SystemPrompt, ScopePart::Tools, ScopePart::Params],
        Some(parts) => parts.iter().map(|p| scope_part(p)).collect::<Result<_, _>>()?,
    };
    let store = match raw.store.as_deref() {
        None | Some("embedded") => SemanticStoreKind::Embedded,
        Some("pgvector") => SemanticStoreKind::PgVector,
        Some(other) => return Err(ConfigError::at(at("store"), format!("`{other}`: expected embedded or pgvector"))),
    };
    let table = raw.table.unwrap_or_else(|| "switchyard_semantic_cache".to_owned());
    if table.is_empty() || !table.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(ConfigError::at(at("table"), "must be a plain identifier (letters, digits, _)"));
    }
    let embed_conversation = match raw.conversation.as_deref() {
        None | Some("exact") => false,
        Some("embed") => true,
        Some(other) => return Err(ConfigError::at(at("conversation"), format!("`{other}`: expected exact or embed"))),
    };
    Ok(SemanticConfig {
        embedding_model: raw.embedding_model,
        threshold,
        scope,
        ttl: super::raw::duration(&at("ttl"), &raw.ttl, cache_ttl)?,
        max_entries: positive(&at("max_entries"), raw.max_entries, 100_000)?,
        store,
        path: raw.path,
        url: raw.url,
        table,
        dimensions: raw.dimensions,
        embed_conversation,
        max_temperature: raw.max_temperature.unwrap_or(1.0),
        store_tool_calls: raw.store_tool_calls.unwrap_or(false),
        threshold_header: raw.threshold_header.unwrap_or(false),
        candidates: positive(&at("candidates"), raw.candidates, 4)?.min(32),
        verify: verify(raw.verify.unwrap_or_default())?,
        calibration: raw.calibration,
    })
}

fn positive(path: &str, value: Option<usize>, default: usize) -> Result<usize, ConfigError> {
    match value {
        Some(0) => Err(ConfigError::at(path, "must be at least 1")),
        other => Ok(other.unwrap_or(default)),
    }
}

fn scope_part(name: &str) -> Result<ScopePart, ConfigError> {
    Ok(match name {
        "key" => ScopePart::Key,
        "team" => ScopePart::Team,
        "model" => ScopePart::Model,
        "system_prompt" => ScopePart::SystemPrompt,
        "tools" => ScopePart::Tools,
        "params" => ScopePart::Params,
        other => {
            return Err(ConfigError::at(
                format!("{AT}.scope"),
                format!("`{other}`: expected key, team, model, system_prompt, tools or params"),
            ))
        }
    })
}

fn verify(raw: RawVerify) -> Result<VerifyConfig, ConfigError> {
    let api = match raw.api.as_deref() {
        None | Some("rerank") => VerifyApi::Rerank,
        Some("chat") => VerifyApi::Chat,
        Some(other) => {
            return Err(ConfigError::at(format!("{AT}.verify.api"), format!("`{other}`: expected rerank or chat")))
        }
    };
    let (terms, salience) = (raw.terms.unwrap_or(0.65), raw.salience.unwrap_or(0.94));
    for (name, value) in [("terms", terms), ("salience", salience)] {
        if !(0.0..=1.0).contains(&value) {
            return Err(ConfigError::at(format!("{AT}.verify.{name}"), "must be from 0 to 1"));
        }
    }
    Ok(VerifyConfig {
        lexical: raw.lexical.unwrap_or(true),
        terms,
        salience,
        model: raw.model,
        api,
        min_score: raw.min_score.unwrap_or(0.5),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<SemanticConfig, ConfigError> {
        let raw: RawSemantic = yaml_serde::from_str(yaml).unwrap();
        validate(raw, Duration::from_secs(600))
    }

    #[test]
    fn defaults_and_errors() {
        let c = parse("embedding_model: minilm").unwrap();
        assert_eq!(c.threshold, 0.92);
        assert_eq!(c.scope.len(), 5);
        assert_eq!(c.store, SemanticStoreKind::Embedded);
        assert!(c.verify.lexical && c.verify.model.is_none());
        assert!(parse("embedding_model: m\nscope: [tenant]").unwrap_err().to_string().contains("scope"));
        assert!(parse("embedding_model: m\nthreshold: 2").is_err());
        assert!(parse("embedding_model: m\nstore: redis").is_err());
        assert!(parse("embedding_model: m\ntable: \"x; drop\"").is_err());
        let c = parse("embedding_model: m\nstore: pgvector\nverify: {model: r, api: chat}").unwrap();
        assert_eq!((c.store, c.verify.api), (SemanticStoreKind::PgVector, VerifyApi::Chat));
    }
}
