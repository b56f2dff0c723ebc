//! Rows the gateway stores: virtual keys, teams, users and usage records. Plain data shared by
//! the key store, the usage journal and the SQL backends.

use std::sync::Arc;

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
    /// The team the key belongs to (`/admin/teams`): its limits, budget and allow-lists apply too.
    #[serde(default)]
    pub team_id: Option<String>,
    /// The user the key belongs to (`/admin/users`): their limits and budget apply too.
    #[serde(default)]
    pub user_id: Option<String>,
    /// Guards (by name, from `guardrails:`) this key's requests get on top of the configured ones.
    #[serde(default)]
    pub guardrails: Vec<String>,
    /// Backends (globs over their names) this key may reach through `/passthrough/{backend}/…`.
    #[serde(default)]
    pub passthrough: Vec<String>,
    /// The key's own policy rules (`policies`), which may only narrow its team's and the
    /// organisation's.
    #[serde(default, skip_serializing_if = "OwnRules::is_empty")]
    pub policies: OwnRules,
    /// A2A agents this key may call (globs over `{agent}` for every method, or
    /// `{agent}/{Method}` for one); None = every agent.
    #[serde(default)]
    pub agents: Option<Vec<String>>,
    /// The key's team and user as they were when the key was looked up (not stored with it).
    #[serde(skip)]
    pub owners: Owners,
}

/// A team's or a key's own policy rules: as written (stored and shown) and compiled once, when
/// the record is read (evaluated per request).
#[derive(Debug, Clone, Default)]
pub struct OwnRules {
    pub raw: Vec<switchyard_policy::RawRule>,
    pub compiled: Option<Arc<switchyard_policy::RuleSet>>,
}

impl OwnRules {
    /// Compile `raw` (checked when it was stored; a rule that no longer compiles is left out
    /// with a warning rather than failing the key).
    pub fn compile(raw: Vec<switchyard_policy::RawRule>) -> OwnRules {
        if raw.is_empty() {
            return OwnRules::default();
        }
        let mut rules = Vec::with_capacity(raw.len());
        for r in &raw {
            match switchyard_policy::Rule::compile(r.clone(), &|_| true) {
                Ok(rule) => rules.push(rule),
                Err(e) => tracing::warn!(error = %e, "a stored policy rule does not compile: left out"),
            }
        }
        let compiled = switchyard_policy::RuleSet::new(rules).ok().map(Arc::new);
        OwnRules { raw, compiled }
    }

    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    pub fn as_deref(&self) -> Option<&switchyard_policy::RuleSet> {
        self.compiled.as_deref()
    }
}

impl PartialEq for OwnRules {
    fn eq(&self, other: &Self) -> bool {
        self.raw == other.raw
    }
}

impl Serialize for OwnRules {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.raw.serialize(s)
    }
}

impl<'de> Deserialize<'de> for OwnRules {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Vec::<switchyard_policy::RawRule>::deserialize(d).map(OwnRules::compile)
    }
}

/// A key's team and user records, loaded with the key (and cached with it).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Owners {
    pub team: Option<Arc<TeamRecord>>,
    pub user: Option<Arc<UserRecord>>,
}

/// The limits a team, a user or a key may carry; `None` is no limit.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LevelLimits {
    pub rpm: Option<u32>,
    pub tpm: Option<u64>,
    pub max_parallel: Option<u32>,
    pub budget_usd: Option<f64>,
    /// `daily` | `weekly` | `monthly`; None = a lifetime budget.
    pub budget_period: Option<String>,
}

/// A team: its members' keys share its limits and budget, within its allow-lists.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TeamRecord {
    /// `t_…`.
    pub id: String,
    /// Unique; what usage records, JWT and OIDC claims name the team by.
    pub name: String,
    /// Allowed model globs; empty = all.
    pub models: Vec<String>,
    pub limits: LevelLimits,
    pub mcp_servers: Option<Vec<String>>,
    pub mcp_tools: Option<Vec<String>>,
    pub created_at: i64,
    /// Guards (by name) every request of the team's keys gets on top of the configured ones.
    #[serde(default)]
    pub guardrails: Vec<String>,
    /// The team's own policy rules (`policies`): they may only narrow the organisation's.
    #[serde(default, skip_serializing_if = "OwnRules::is_empty")]
    pub policies: OwnRules,
}

/// A person (or service) the gateway knows: a role, memberships, and optional limits of their own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserRecord {
    /// `u_…`.
    pub id: String,
    /// Unique.
    pub email: String,
    pub name: Option<String>,
    /// `admin` | `team_admin` | `member` | `viewer`.
    pub role: String,
    pub limits: LevelLimits,
    pub created_at: i64,
    /// Console sessions issued before this (unix milliseconds) are void: ending a user's sessions
    /// everywhere is one write.
    #[serde(default)]
    pub sessions_after: i64,
}

/// A user's place in a team.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Membership {
    pub team_id: String,
    pub user_id: String,
    /// `team_admin` | `member`.
    pub role: String,
    pub created_at: i64,
}

impl KeyRecord {
    /// The user its usage is recorded under: its user's email, else its `metadata.user` tag.
    pub fn user_name(&self) -> Option<&str> {
        self.owners.user.as_ref().map(|u| u.email.as_str()).or(self.user.as_deref())
    }

    /// The team its usage is recorded under: its team's name, else its `metadata.team` tag.
    pub fn team_name(&self) -> Option<&str> {
        self.owners.team.as_ref().map(|t| t.name.as_str()).or(self.team.as_deref())
    }

    /// Whether this key may use `model` (or the alias the client named): within its own
    /// allow-list and its team's (an empty list allows every model).
    pub fn allows_model(&self, model: &str) -> bool {
        let allowed = |globs: &[String]| globs.is_empty() || crate::glob::any(globs, model);
        allowed(&self.models) && self.owners.team.as_ref().is_none_or(|t| allowed(&t.models))
    }
}

impl KeyRecord {
    /// Whether this key may use `tool` of MCP server `server`.
    pub fn mcp_permits(&self, server: &str, tool: &str) -> bool {
        let permits = |servers: &Option<Vec<String>>, tools: &Option<Vec<String>>| {
            servers.as_ref().is_none_or(|g| crate::glob::any(g, server))
                && tools.as_ref().is_none_or(|g| crate::glob::any(g, &format!("{server}__{tool}")))
        };
        // The key's lists intersected with its team's.
        permits(&self.mcp_servers, &self.mcp_tools)
            && self.owners.team.as_ref().is_none_or(|t| permits(&t.mcp_servers, &t.mcp_tools))
    }

    /// Whether this key may call `method` (its 1.0 name) of `agent`. The extended agent card is
    /// only for keys granted it by name (`{agent}/GetExtendedAgentCard`) or with no list at all.
    pub fn agent_permits(&self, agent: &str, method: &str) -> bool {
        let Some(globs) = &self.agents else { return true };
        let named = format!("{agent}/{method}");
        crate::glob::any(globs, &named) || (method != "GetExtendedAgentCard" && crate::glob::any(globs, agent))
    }

    /// A key with no limits, no metadata and no expiry.
    pub fn new(id: String, secret_hash: Vec<u8>, created_at: i64) -> KeyRecord {
        KeyRecord {
            id,
            secret_hash,
            policies: OwnRules::default(),
            agents: None,
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
            team_id: None,
            user_id: None,
            guardrails: Vec::new(),
            passthrough: Vec::new(),
            owners: Owners::default(),
        }
    }
}

/// One request's usage. `id` is unique per request (the request id), so replays are idempotent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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
    /// Of the prompt tokens, those read from the provider's prompt cache and those written to
    /// it, as the backend reported them (priced by `prices.MODEL.cache_read` and `cache_write`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_read_tokens: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
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
    /// The key of the backend's pool the request went with (its name, never the secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_key: Option<String>,
    /// Why the router chose the backend (cache-aware and sticky routing explain themselves).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    /// The request's and response's bodies, when the operator keeps them (`console.store_bodies`):
    /// secrets redacted, each cut at the configured size. Exports carry them too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bodies: Option<Box<StoredBodies>>,
    /// What the guardrails found in the request and its answer, per guard, kind and action.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub guardrails: Vec<GuardVerdict>,
    /// A model guard's own call to its classifier: the guard's name (`type: model`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guard_call: Option<String>,
    /// What the request used besides tokens (images, search units, audio), when anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub units: Option<Box<UsageUnits>>,
    /// The batch a line of which this request was (`/v1/batches`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_id: Option<String>,
    /// The experiment that assigned this request (`experiments:`), and its variant (`shadow`
    /// for a shadow's own call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experiment: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// The policy rules that decided or routed this request (`policies:`), comma-separated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// Tags a policy's `set` gave the request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// An A2A call's task (`/a2a/{agent}`; its method is `tool`) and the task's last state seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_state: Option<String>,
}

impl UsageRecord {
    /// A request's record as it starts: who (the key, its user and team), when, which model;
    /// everything it consumes still zero.
    pub fn started(id: String, ts_ms: i64, key: Option<&KeyRecord>, requested: &str, served: &str) -> UsageRecord {
        UsageRecord {
            id,
            ts_ms,
            key_id: key.map(|k| k.id.clone()),
            user: key.and_then(|k| k.user_name().map(str::to_owned)),
            team: key.and_then(|k| k.team_name().map(str::to_owned)),
            model_requested: requested.to_owned(),
            model_served: served.to_owned(),
            backend: None,
            status: 0,
            prompt_tokens: 0,
            completion_tokens: 0,
            total_tokens: 0,
            cache_read_tokens: 0,
            cache_write_tokens: 0,
            latency_ms: 0.0,
            ttft_ms: None,
            cost_usd: 0.0,
            estimated: false,
            tool: None,
            response_bytes: None,
            backend_key: None,
            route: None,
            bodies: None,
            guardrails: Vec::new(),
            guard_call: None,
            units: None,
            batch_id: None,
            experiment: None,
            variant: None,
            policy: None,
            tags: Vec::new(),
            task_id: None,
            task_state: None,
        }
    }
}

/// What a request used besides tokens, priced by `prices.MODEL.per_*` (issue 33).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageUnits {
    /// Images generated, and the size and quality asked for.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub images: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_size: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_quality: Option<String>,
    /// Search units billed (a hosted reranker's).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub search_units: u64,
    /// Seconds of audio transcribed or translated.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub audio_seconds: f64,
    /// Characters of text spoken.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub characters: u64,
    /// An answer served from the response cache: the tokens it took when first generated, and
    /// what they cost then (the request itself costs nothing).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub saved_tokens: u64,
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub saved_usd: f64,
    /// What the response cache said (`x-switchyard-cache`), for a request that used it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero_f64(n: &f64) -> bool {
    *n == 0.0
}

/// One request's verdicts as the guards reach them (request, answer, webhooks), for its record.
#[derive(Debug, Default)]
pub struct VerdictTally(std::sync::Mutex<Vec<GuardVerdict>>);

impl VerdictTally {
    pub fn add(&self, guard: &str, kind: &str, action: &str) {
        let Ok(mut verdicts) = self.0.lock() else { return };
        match verdicts.iter_mut().find(|v| v.guard == guard && v.kind == kind && v.action == action) {
            Some(v) => v.count += 1,
            None => verdicts.push(GuardVerdict {
                guard: guard.to_owned(),
                kind: kind.to_owned(),
                action: action.to_owned(),
                count: 1,
            }),
        }
    }

    pub fn take(&self) -> Vec<GuardVerdict> {
        self.0.lock().map(|mut v| std::mem::take(&mut *v)).unwrap_or_default()
    }
}

/// A guard's verdicts of one kind on one request: e.g. `pii`, `email`, `mask`, 2.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuardVerdict {
    pub guard: String,
    pub kind: String,
    pub action: String,
    pub count: u32,
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
