//! The semantic layer's state and what a request contributes to it: the store (embedded or
//! pgvector, `switchyard-semcache`), a request's probe (its partition and the text embedded for
//! it), the answer a miss stores once relayed whole (kept API-neutral, `translate/replay.rs`),
//! and the layer's counters for `/metrics` and the console.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use switchyard_protocol::chat::{ChatRequest, ChatResponse, Part, ResponseFormat, Role, StopReason, Usage};
use switchyard_semcache::embedded::EmbeddedStore;
use switchyard_semcache::pgvector::PgVectorStore;
use switchyard_semcache::{Check, Entry, Partition, PartitionBuilder, Store};

use crate::config::{ScopePart, SemanticConfig, SemanticStoreKind, StorageConfig};
use crate::endpoint::Endpoint;
use crate::records::KeyRecord;

pub struct SemanticCache {
    pub store: Arc<dyn Store>,
    pub counters: Counters,
}

#[derive(Default)]
pub struct Counters {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    /// Candidates refused, by check (`Check::ALL` order).
    pub rejected: [AtomicU64; 8],
    pub stores: AtomicU64,
    pub errors: AtomicU64,
    pub saved_tokens: AtomicU64,
    /// Micro-dollars.
    pub saved_micro_usd: AtomicU64,
}

impl Counters {
    pub fn reject(&self, check: Check) {
        if let Some(i) = Check::ALL.iter().position(|c| *c == check) {
            self.rejected[i].fetch_add(1, Relaxed);
        }
    }
}

impl SemanticCache {
    /// Open the store `config` names: the embedded one (its file beside the gateway's SQLite
    /// database unless `path` says otherwise; in memory when storage is not SQLite), or pgvector.
    pub async fn open(
        config: &SemanticConfig,
        storage: &StorageConfig,
        now_ms: i64,
    ) -> Result<Arc<SemanticCache>, String> {
        let store: Arc<dyn Store> = match config.store {
            SemanticStoreKind::Embedded => {
                let path = config.path.clone().or_else(|| beside_database(&storage.url));
                let opened = EmbeddedStore::open(path.as_deref(), config.max_entries, now_ms).await;
                opened.map_err(|e| format!("cache.semantic: cannot open the embedded store: {e}"))?
            }
            SemanticStoreKind::PgVector => {
                let url =
                    config.url.clone().or_else(|| storage.url.starts_with("postgres").then(|| storage.url.clone()));
                let url = url.ok_or("cache.semantic.url: store pgvector needs a PostgreSQL URL (or storage.url)")?;
                let opened = PgVectorStore::open(&url, &config.table, config.dimensions).await;
                Arc::new(opened.map_err(|e| format!("cache.semantic: cannot open the pgvector store: {e}"))?)
            }
        };
        Ok(Arc::new(SemanticCache { store, counters: Counters::default() }))
    }

    /// `switchyard_semantic_cache_*` series for `/metrics`.
    pub fn render(&self, out: &mut String) {
        let c = &self.counters;
        let _ = writeln!(
            out,
            "# HELP switchyard_semantic_cache_lookups_total Semantic lookups after an exact miss, by result.\n\
             # TYPE switchyard_semantic_cache_lookups_total counter\n\
             switchyard_semantic_cache_lookups_total{{result=\"hit\"}} {}\n\
             switchyard_semantic_cache_lookups_total{{result=\"miss\"}} {}",
            c.hits.load(Relaxed),
            c.misses.load(Relaxed)
        );
        out.push_str("# HELP switchyard_semantic_cache_rejected_total Candidates similar enough but refused, by the check that refused them.\n# TYPE switchyard_semantic_cache_rejected_total counter\n");
        for (check, n) in Check::ALL.iter().zip(&c.rejected) {
            let _ = writeln!(
                out,
                "switchyard_semantic_cache_rejected_total{{check=\"{}\"}} {}",
                check.name(),
                n.load(Relaxed)
            );
        }
        for (name, help, kind, value) in [
            (
                "switchyard_semantic_cache_stores_total",
                "Answers stored in the semantic layer.",
                "counter",
                c.stores.load(Relaxed),
            ),
            (
                "switchyard_semantic_cache_errors_total",
                "Embedding, verification or store calls that failed (served as misses).",
                "counter",
                c.errors.load(Relaxed),
            ),
            (
                "switchyard_semantic_cache_saved_tokens_total",
                "Tokens the answers served from the semantic layer took when first generated.",
                "counter",
                c.saved_tokens.load(Relaxed),
            ),
            (
                "switchyard_semantic_cache_entries",
                "Entries in the semantic store (as last known, for pgvector).",
                "gauge",
                self.store.len() as u64,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
        }
        let saved = c.saved_micro_usd.load(Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "# HELP switchyard_semantic_cache_saved_usd_total What the answers served from the semantic layer cost when first generated.\n# TYPE switchyard_semantic_cache_saved_usd_total counter\nswitchyard_semantic_cache_saved_usd_total {saved}");
    }
}

/// `sqlite://./switchyard.db` → `./switchyard.db.semantic`; none for another database.
fn beside_database(url: &str) -> Option<PathBuf> {
    let path = crate::config::sqlite_file(url).filter(|p| !p.as_os_str().is_empty() && !url.contains(":memory:"))?;
    Some(PathBuf::from(format!("{}.semantic", path.display())))
}

/// What a request looks up and, on a miss, stores under.
#[derive(Debug, Clone)]
pub struct Probe {
    pub partition: Partition,
    /// The text embedded: the last user turn (with the conversation before it when
    /// `conversation: embed`).
    pub question: String,
}

/// Why a request is not looked up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    Endpoint,
    /// Tool results, images, no user turn last, or several answers asked for.
    Content,
    Temperature,
}

impl Probe {
    /// The probe of `request` by `key` for `model` (as resolved), or why it has none.
    pub fn of(
        config: &SemanticConfig,
        endpoint: Endpoint,
        request: &ChatRequest,
        key: Option<&KeyRecord>,
        model: &str,
    ) -> Result<Probe, Skip> {
        if !semantic_endpoint(endpoint) {
            return Err(Skip::Endpoint);
        }
        if request.temperature.is_some_and(|t| t > config.max_temperature) {
            return Err(Skip::Temperature);
        }
        let (last, before) = request.messages.split_last().ok_or(Skip::Content)?;
        let text_only = |m: &&switchyard_protocol::chat::Message| m.content.iter().all(|p| matches!(p, Part::Text(_)));
        if last.role != Role::User || !text_only(&last) || !request.messages.iter().all(|m| text_only(&m)) {
            return Err(Skip::Content);
        }
        let mut question = text_of(last);
        if question.trim().is_empty() {
            return Err(Skip::Content);
        }
        let mut parts = PartitionBuilder::default();
        for part in &config.scope {
            add_scope(&mut parts, *part, request, key, model);
        }
        let conversation = transcript(before);
        if config.embed_conversation && !conversation.is_empty() {
            question = format!("{conversation}\n{question}");
        } else {
            parts.part("conversation", conversation.as_bytes());
        }
        parts.part("embedding_model", config.embedding_model.as_bytes());
        Ok(Probe { partition: parts.finish(), question })
    }
}

fn semantic_endpoint(endpoint: Endpoint) -> bool {
    matches!(
        endpoint,
        Endpoint::ChatCompletions
            | Endpoint::Messages
            | Endpoint::Responses
            | Endpoint::OllamaChat
            | Endpoint::OllamaGenerate
            | Endpoint::GeminiGenerate
            | Endpoint::GeminiStream
    )
}

fn text_of(message: &switchyard_protocol::chat::Message) -> String {
    let texts: Vec<&str> = message
        .content
        .iter()
        .filter_map(|p| match p {
            Part::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    texts.join("\n")
}

fn transcript(messages: &[switchyard_protocol::chat::Message]) -> String {
    let mut out = String::new();
    for m in messages {
        let role = match m.role {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        };
        let _ = writeln!(out, "{role}: {}", text_of(m));
    }
    out
}

fn add_scope(
    parts: &mut PartitionBuilder,
    part: ScopePart,
    request: &ChatRequest,
    key: Option<&KeyRecord>,
    model: &str,
) {
    match part {
        ScopePart::Key => parts.part("key", key.map_or("", |k| k.id.as_str()).as_bytes()),
        // A key without a team keeps to itself.
        ScopePart::Team => match key.and_then(|k| k.team_name()) {
            Some(team) => parts.part("team", team.as_bytes()),
            None => parts.part("key", key.map_or("", |k| k.id.as_str()).as_bytes()),
        },
        ScopePart::Model => parts.part("model", model.as_bytes()),
        ScopePart::SystemPrompt => parts.part("system", request.system.join("\n").as_bytes()),
        ScopePart::Tools => {
            let mut tools = String::new();
            for tool in &request.tools {
                let _ = write!(
                    tools,
                    "{}\u{1f}{}\u{1f}{}\u{1e}",
                    tool.name,
                    tool.description.as_deref().unwrap_or(""),
                    tool.parameters.as_str()
                );
            }
            let _ = write!(tools, "{:?}", request.tool_choice);
            parts.part("tools", tools.as_bytes())
        }
        ScopePart::Params => parts.part("params", params(request).as_bytes()),
    };
}

/// The sampling parameters that change answers, bucketed where small changes do not.
fn params(request: &ChatRequest) -> String {
    let temperature = request.temperature.map(|t| (t * 10.0).round() as i64);
    let max_tokens = request.max_tokens.map(|m| 64 - m.max(1).leading_zeros());
    let format = match &request.response_format {
        None => String::new(),
        Some(ResponseFormat::JsonObject) => "json_object".to_owned(),
        Some(other) => format!("{other:?}"),
    };
    format!(
        "t={temperature:?};max={max_tokens:?};fmt={format};top_p={:?};seed={:?};stop={:?}",
        request.top_p, request.seed, request.stop
    )
}

/// An answer as the semantic layer keeps it.
#[derive(Debug, Serialize, Deserialize)]
pub struct StoredAnswer {
    pub model: String,
    pub text: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<(String, String, String)>,
    pub stop: String,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

impl StoredAnswer {
    pub fn of(response: &ChatResponse, model: &str) -> StoredAnswer {
        StoredAnswer {
            model: model.to_owned(),
            text: response.text(),
            tool_calls: response.tool_calls().map(|c| (c.id.clone(), c.name.clone(), c.arguments.clone())).collect(),
            stop: match &response.stop_reason {
                StopReason::EndTurn => "end_turn".to_owned(),
                StopReason::MaxTokens => "max_tokens".to_owned(),
                StopReason::StopSequence => "stop_sequence".to_owned(),
                StopReason::ToolUse => "tool_use".to_owned(),
                StopReason::ContentFilter => "content_filter".to_owned(),
                StopReason::Other(o) => o.clone(),
            },
            prompt_tokens: response.usage.prompt_tokens,
            completion_tokens: response.usage.completion_tokens,
        }
    }

    /// As a response for a client: `id` and `created` are this request's.
    pub fn response(&self, id: String, created: u64) -> ChatResponse {
        let mut content = Vec::new();
        if !self.text.is_empty() || self.tool_calls.is_empty() {
            content.push(Part::Text(self.text.clone()));
        }
        for (id, name, arguments) in &self.tool_calls {
            let call = switchyard_protocol::chat::ToolCall {
                id: id.clone(),
                name: name.clone(),
                arguments: arguments.clone(),
            };
            content.push(Part::ToolCall(call));
        }
        let stop_reason = match self.stop.as_str() {
            "end_turn" => StopReason::EndTurn,
            "max_tokens" => StopReason::MaxTokens,
            "stop_sequence" => StopReason::StopSequence,
            "tool_use" => StopReason::ToolUse,
            "content_filter" => StopReason::ContentFilter,
            other => StopReason::Other(other.to_owned()),
        };
        ChatResponse {
            id,
            model: self.model.clone(),
            created,
            content,
            stop_reason,
            stop_sequence: None,
            usage: Usage::new(self.prompt_tokens, self.completion_tokens),
        }
    }
}

/// What a miss stores once its answer has been relayed whole.
pub struct Pending {
    pub cache: Arc<SemanticCache>,
    pub probe: Probe,
    pub vector: Vec<f32>,
    pub ttl_ms: i64,
    pub store_tool_calls: bool,
}

impl Pending {
    /// The client of `endpoint` received `body` (whole and complete): store it, in the background.
    pub fn store(self, endpoint: Endpoint, stream: bool, body: &[u8], model: &str, now_ms: i64) {
        let Some(response) = crate::translate::replay::read_answer(endpoint, stream, body) else { return };
        let has_calls = response.tool_calls().next().is_some();
        if (has_calls && !self.store_tool_calls) || (response.text().is_empty() && !has_calls) {
            return;
        }
        let Ok(answer) = serde_json::to_vec(&StoredAnswer::of(&response, model)) else { return };
        let entry = Entry {
            id: random_id(),
            partition: self.probe.partition,
            vector: self.vector,
            question: self.probe.question,
            answer: Bytes::from(answer),
            stored_ms: now_ms,
            expires_ms: now_ms.saturating_add(self.ttl_ms),
        };
        let cache = self.cache;
        tokio::spawn(async move {
            match cache.store.insert(entry).await {
                Ok(()) => cache.counters.stores.fetch_add(1, Relaxed),
                Err(e) => {
                    tracing::warn!(error = %e, "could not store an answer in the semantic cache");
                    cache.counters.errors.fetch_add(1, Relaxed)
                }
            };
        });
    }
}

fn random_id() -> u64 {
    let mut bytes = [0u8; 8];
    if getrandom::getrandom(&mut bytes).is_err() {
        return crate::clock::unix_ms() as u64 ^ 0x5DEE_CE66_D1CE_F00D;
    }
    // Positive as an SQL BIGINT, so ids read back the same from either database.
    u64::from_le_bytes(bytes) >> 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::translate::Decoded;

    fn config() -> SemanticConfig {
        let raw = r#"{"cache": {"semantic": {"embedding_model": "e"}}}"#;
        let config = crate::config::Config::from_yaml(raw, &crate::config::ProcessEnv).unwrap();
        *config.cache.semantic.unwrap()
    }

    fn probe(body: &str) -> Result<Probe, Skip> {
        let decoded = Decoded::decode(Endpoint::ChatCompletions, body.as_bytes(), "m").unwrap();
        Probe::of(&config(), Endpoint::ChatCompletions, decoded.chat().unwrap(), None, "m")
    }

    #[test]
    fn partitions_hold_what_must_match_exactly() {
        let ask = |system: &str, temperature: f64, question: &str| {
            probe(&format!(
                r#"{{"model":"m","temperature":{temperature},"messages":[{{"role":"system","content":"{system}"}},{{"role":"user","content":"{question}"}}]}}"#
            ))
            .unwrap()
        };
        let a = ask("be brief", 0.0, "What is Rust?");
        assert_eq!(a.question, "What is Rust?");
        assert_eq!(a.partition, ask("be brief", 0.01, "Tell me about Rust").partition);
        assert_ne!(a.partition, ask("be verbose", 0.0, "What is Rust?").partition);
        assert_ne!(a.partition, ask("be brief", 0.5, "What is Rust?").partition);
    }

    #[test]
    fn requests_the_layer_cannot_answer_are_skipped() {
        let hot = r#"{"model":"m","temperature":1.5,"messages":[{"role":"user","content":"hi"}]}"#;
        assert_eq!(probe(hot).unwrap_err(), Skip::Temperature);
        let tool = r#"{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"42"}]}"#;
        assert_eq!(probe(tool).unwrap_err(), Skip::Content);
    }

    #[test]
    fn the_database_file_lies_beside_sqlites() {
        assert_eq!(beside_database("sqlite://./data/s.db"), Some(PathBuf::from("./data/s.db.semantic")));
        assert_eq!(beside_database("sqlite::memory:"), None);
        assert_eq!(beside_database("postgres://x/y"), None);
    }
}
