//! Rows the gateway stores: virtual keys and usage records. Plain data shared by the key store,
//! the usage journal and the SQL backends.

use serde::{Deserialize, Serialize};

/// A virtual key as stored. The secret itself is never stored: only `secret_hash`, an
/// HMAC-SHA256 of it under the server secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeyRecord {
    /// Public id, e.g. `k_3f9a1c0e2b7d`; the key presented by clients is `sy-{id}.{secret}`.
    pub id: String,
    /// HMAC-SHA256(server_secret, secret), 32 bytes.
    pub secret_hash: Vec<u8>,
    pub name: Option<String>,
    /// Allowed model globs (`llama*`, `*`); empty = all.
    pub models: Vec<String>,
    pub rpm: Option<u32>,
    pub tpm: Option<u64>,
    pub max_parallel: Option<u32>,
    pub budget_usd: Option<f64>,
    /// `daily` | `weekly` | `monthly`; None = lifetime budget.
    pub budget_period: Option<String>,
    /// Unix seconds.
    pub expires_at: Option<i64>,
    pub revoked_at: Option<i64>,
    pub user: Option<String>,
    pub team: Option<String>,
    pub tags: Vec<String>,
    pub created_at: i64,
    /// MCP servers this key may use (globs over aliases); None = all.
    #[serde(default)]
    pub mcp_servers: Option<Vec<String>>,
    /// MCP tools this key may use (globs over `{server}__{tool}`); None = all.
    #[serde(default)]
    pub mcp_tools: Option<Vec<String>>,
}

impl KeyRecord {
    /// Whether this key may use `tool` of MCP server `server`.
    pub fn mcp_permits(&self, server: &str, tool: &str) -> bool {
        self.mcp_servers.as_ref().is_none_or(|g| crate::glob::any(g, server))
            && self.mcp_tools.as_ref().is_none_or(|g| crate::glob::any(g, &format!("{server}__{tool}")))
    }

    /// A key with no limits, no metadata and no expiry.
    pub fn new(id: String, secret_hash: Vec<u8>, created_at: i64) -> KeyRecord {
        KeyRecord {
            id,
            secret_hash,
            name: None,
            models: Vec::new(),
            rpm: None,
            tpm: None,
            max_parallel: None,
            budget_usd: None,
            budget_period: None,
            expires_at: None,
            revoked_at: None,
            user: None,
            team: None,
            tags: Vec::new(),
            created_at,
            mcp_servers: None,
            mcp_tools: None,
        }
    }
}

/// One request's usage. `id` is unique per request (the request id), so replays are idempotent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageRecord {
    pub id: String,
    /// Unix milliseconds when the request arrived.
    pub ts_ms: i64,
    pub key_id: Option<String>,
    pub user: Option<String>,
    pub team: Option<String>,
    pub model_requested: String,
    pub model_served: String,
    pub backend: Option<String>,
    pub status: u16,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    pub latency_ms: f64,
    pub ttft_ms: Option<f64>,
    pub cost_usd: f64,
    /// Tokens were estimated because the backend reported none.
    pub estimated: bool,
    /// An MCP tool call's tool (its server is `backend`); None for model requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// An MCP tool call's answer size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_bytes: Option<u64>,
    /// Why the router chose the backend (cache-aware and sticky routing explain themselves).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    /// The request's and response's bodies, when the operator keeps them (`console.store_bodies`):
    /// secrets redacted, each cut at the configured size. Exports carry them too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bodies: Option<Box<StoredBodies>>,
}

/// A request's bodies as stored: text (lossy UTF-8), redacted, capped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredBodies {
    pub request: String,
    /// What the client received (a stream as its raw events).
    pub response: String,
    /// Either body was longer than the cap and was cut there.
    pub truncated: bool,
}
