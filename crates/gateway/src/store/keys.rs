//! Virtual-key CRUD on `api_keys`. `models` and `tags` are stored as JSON arrays in TEXT columns; unsigned limits
//! are stored as BIGINT and range-checked on the way back.

use super::{to_i64, Store, StoreError};
use crate::records::KeyRecord;

const COLUMNS: &str = "id, secret_hash, name, models, rpm, tpm, max_parallel, budget_usd, budget_period, \
                       expires_at, revoked_at, user_name, team, tags, created_at, mcp, team_id, user_id, guardrails, passthrough, policies, agents";

/// One `api_keys` row as both drivers decode it (columns in `COLUMNS` order; more than sqlx's
/// tuples reach, hence by hand).
struct KeyRow {
    id: String,
    secret_hash: Vec<u8>,
    name: Option<String>,
    models: String,
    rpm: Option<i64>,
    tpm: Option<i64>,
    max_parallel: Option<i64>,
    budget_usd: Option<f64>,
    budget_period: Option<String>,
    expires_at: Option<i64>,
    revoked_at: Option<i64>,
    user: Option<String>,
    team: Option<String>,
    tags: String,
    created_at: i64,
    mcp: Option<String>,
    team_id: Option<String>,
    user_id: Option<String>,
    guardrails: Option<String>,
    passthrough: Option<String>,
    policies: Option<String>,
    agents: Option<String>,
}

macro_rules! key_row_from {
    ($row:ty) => {
        impl<'r> sqlx::FromRow<'r, $row> for KeyRow {
            fn from_row(r: &'r $row) -> Result<Self, sqlx::Error> {
                use sqlx::Row;
                Ok(KeyRow {
                    id: r.try_get(0)?,
                    secret_hash: r.try_get(1)?,
                    name: r.try_get(2)?,
                    models: r.try_get(3)?,
                    rpm: r.try_get(4)?,
                    tpm: r.try_get(5)?,
                    max_parallel: r.try_get(6)?,
                    budget_usd: r.try_get(7)?,
                    budget_period: r.try_get(8)?,
                    expires_at: r.try_get(9)?,
                    revoked_at: r.try_get(10)?,
                    user: r.try_get(11)?,
                    team: r.try_get(12)?,
                    tags: r.try_get(13)?,
                    created_at: r.try_get(14)?,
                    mcp: r.try_get(15)?,
                    team_id: r.try_get(16)?,
                    user_id: r.try_get(17)?,
                    guardrails: r.try_get(18)?,
                    passthrough: r.try_get(19)?,
                    policies: r.try_get(20)?,
                    agents: r.try_get(21)?,
                })
            }
        }
    };
}
key_row_from!(sqlx::sqlite::SqliteRow);
key_row_from!(sqlx::postgres::PgRow);

/// The values bound for a key, in `COLUMNS` order, already converted to storable types.
struct KeyParams {
    models: String,
    tags: String,
    rpm: Option<i64>,
    tpm: Option<i64>,
    max_parallel: Option<i64>,
    /// `{"servers": …, "tools": …}`; None when both are None (every server and tool).
    mcp: Option<String>,
    guardrails: Option<String>,
    passthrough: Option<String>,
    policies: Option<String>,
    /// The agents' globs as a JSON list; None: every agent.
    agents: Option<String>,
}

impl KeyParams {
    fn new(k: &KeyRecord) -> Result<KeyParams, StoreError> {
        Ok(KeyParams {
            models: json_list(&k.models)?,
            tags: json_list(&k.tags)?,
            rpm: k.rpm.map(i64::from),
            tpm: k.tpm.map(|v| to_i64(v, "tpm")).transpose()?,
            max_parallel: k.max_parallel.map(i64::from),
            mcp: mcp_column(&k.mcp_servers, &k.mcp_tools)?,
            guardrails: guardrails_column(&k.guardrails)?,
            passthrough: guardrails_column(&k.passthrough)?,
            policies: policies_column(&k.policies)?,
            agents: k.agents.as_ref().map(|a| json_list(a)).transpose()?,
        })
    }
}

impl Store {
    /// Inserts a new key; an existing id gives [`StoreError::Conflict`].
    pub async fn insert_key(&self, k: &KeyRecord) -> Result<(), StoreError> {
        let p = KeyParams::new(k)?;
        let sql = format!(
            "INSERT INTO api_keys ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22)"
        );
        with_pool!(self, |pool| {
            sqlx::query(&sql)
                .bind(&k.id)
                .bind(&k.secret_hash)
                .bind(&k.name)
                .bind(&p.models)
                .bind(p.rpm)
                .bind(p.tpm)
                .bind(p.max_parallel)
                .bind(k.budget_usd)
                .bind(&k.budget_period)
                .bind(k.expires_at)
                .bind(k.revoked_at)
                .bind(&k.user)
                .bind(&k.team)
                .bind(&p.tags)
                .bind(k.created_at)
                .bind(&p.mcp)
                .bind(&k.team_id)
                .bind(&k.user_id)
                .bind(&p.guardrails)
                .bind(&p.passthrough)
                .bind(&p.policies)
                .bind(&p.agents)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// The key with this id, if any.
    pub async fn get_key(&self, id: &str) -> Result<Option<KeyRecord>, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM api_keys WHERE id = $1");
        let row: Option<KeyRow> = with_pool!(self, |pool| sqlx::query_as(&sql).bind(id).fetch_optional(pool).await?);
        row.map(from_row).transpose()
    }

    /// Every key, oldest first (ties by id).
    pub async fn list_keys(&self) -> Result<Vec<KeyRecord>, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM api_keys ORDER BY created_at, id");
        let rows: Vec<KeyRow> = with_pool!(self, |pool| sqlx::query_as(&sql).fetch_all(pool).await?);
        rows.into_iter().map(from_row).collect()
    }

    /// The keys of a team, oldest first.
    pub async fn team_keys(&self, team_id: &str) -> Result<Vec<KeyRecord>, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM api_keys WHERE team_id = $1 ORDER BY created_at, id");
        let rows: Vec<KeyRow> = with_pool!(self, |pool| sqlx::query_as(&sql).bind(team_id).fetch_all(pool).await?);
        rows.into_iter().map(from_row).collect()
    }

    /// The key with this id and its team and user (what a request's admission reads).
    pub async fn get_key_with_owners(&self, id: &str) -> Result<Option<KeyRecord>, StoreError> {
        let Some(mut key) = self.get_key(id).await? else { return Ok(None) };
        if let Some(team) = &key.team_id {
            key.owners.team = self.get_team(team).await?.map(std::sync::Arc::new);
        }
        if let Some(user) = &key.user_id {
            key.owners.user = self.get_user(user).await?.map(std::sync::Arc::new);
        }
        Ok(Some(key))
    }

    /// Replaces every field of the key with `k.id` (including `created_at`); false if there is no such key.
    pub async fn update_key(&self, k: &KeyRecord) -> Result<bool, StoreError> {
        let p = KeyParams::new(k)?;
        let sql = "UPDATE api_keys SET secret_hash = $2, name = $3, models = $4, rpm = $5, tpm = $6, \
                   max_parallel = $7, budget_usd = $8, budget_period = $9, expires_at = $10, revoked_at = $11, \
                   user_name = $12, team = $13, tags = $14, created_at = $15, mcp = $16, team_id = $17, \
                   user_id = $18, guardrails = $19, passthrough = $20, policies = $21, agents = $22 WHERE id = $1";
        let affected = with_pool!(self, |pool| {
            sqlx::query(sql)
                .bind(&k.id)
                .bind(&k.secret_hash)
                .bind(&k.name)
                .bind(&p.models)
                .bind(p.rpm)
                .bind(p.tpm)
                .bind(p.max_parallel)
                .bind(k.budget_usd)
                .bind(&k.budget_period)
                .bind(k.expires_at)
                .bind(k.revoked_at)
                .bind(&k.user)
                .bind(&k.team)
                .bind(&p.tags)
                .bind(k.created_at)
                .bind(&p.mcp)
                .bind(&k.team_id)
                .bind(&k.user_id)
                .bind(&p.guardrails)
                .bind(&p.passthrough)
                .bind(&p.policies)
                .bind(&p.agents)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(affected > 0)
    }

    /// Deletes the key; false if there was no such key. Its usage rows and rollups are kept.
    pub async fn delete_key(&self, id: &str) -> Result<bool, StoreError> {
        let sql = "DELETE FROM api_keys WHERE id = $1";
        let affected = with_pool!(self, |pool| sqlx::query(sql).bind(id).execute(pool).await?.rows_affected());
        Ok(affected > 0)
    }
}

pub(super) fn json_list(items: &[String]) -> Result<String, StoreError> {
    serde_json::to_string(items).map_err(|e| StoreError::Invalid(format!("list not serialisable: {e}")))
}

pub(super) fn parse_list(text: &str, what: &str) -> Result<Vec<String>, StoreError> {
    serde_json::from_str(text).map_err(|_| StoreError::Corrupt(format!("{what} is not a JSON list of strings")))
}

/// A list column (`guardrails`, `passthrough`): a JSON list of names, NULL for none.
pub(super) fn guardrails_column(names: &[String]) -> Result<Option<String>, StoreError> {
    if names.is_empty() {
        return Ok(None);
    }
    json_list(names).map(Some)
}

pub(super) fn parse_guardrails(column: Option<&str>) -> Result<Vec<String>, StoreError> {
    column.map_or(Ok(Vec::new()), |text| parse_list(text, "guardrails"))
}

pub(super) fn narrow<T: TryFrom<i64>>(value: Option<i64>, what: &str) -> Result<Option<T>, StoreError> {
    value.map(|v| T::try_from(v).map_err(|_| StoreError::Corrupt(format!("{what} out of range ({v})")))).transpose()
}

fn from_row(row: KeyRow) -> Result<KeyRecord, StoreError> {
    let (mcp_servers, mcp_tools) = parse_mcp(row.mcp.as_deref())?;
    Ok(KeyRecord {
        id: row.id,
        secret_hash: row.secret_hash,
        name: row.name,
        models: parse_list(&row.models, "models")?,
        rpm: narrow(row.rpm, "rpm")?,
        tpm: narrow(row.tpm, "tpm")?,
        max_parallel: narrow(row.max_parallel, "max_parallel")?,
        budget_usd: row.budget_usd,
        budget_period: row.budget_period,
        expires_at: row.expires_at,
        revoked_at: row.revoked_at,
        user: row.user,
        team: row.team,
        tags: parse_list(&row.tags, "tags")?,
        created_at: row.created_at,
        mcp_servers,
        mcp_tools,
        team_id: row.team_id,
        user_id: row.user_id,
        guardrails: parse_guardrails(row.guardrails.as_deref())?,
        passthrough: row.passthrough.as_deref().map_or(Ok(Vec::new()), |t| parse_list(t, "passthrough"))?,
        policies: parse_policies(row.policies.as_deref())?,
        agents: row.agents.as_deref().map(|t| parse_list(t, "agents")).transpose()?,
        owners: Default::default(),
    })
}

/// A team's or key's own policy rules: a JSON list of rules, NULL for none.
pub(super) fn policies_column(rules: &crate::records::OwnRules) -> Result<Option<String>, StoreError> {
    if rules.is_empty() {
        return Ok(None);
    }
    serde_json::to_string(&rules.raw).map(Some).map_err(|e| StoreError::Invalid(format!("policies: {e}")))
}

pub(super) fn parse_policies(column: Option<&str>) -> Result<crate::records::OwnRules, StoreError> {
    let Some(text) = column else { return Ok(crate::records::OwnRules::default()) };
    let raw = serde_json::from_str(text).map_err(|_| StoreError::Corrupt("policies are not a list of rules".into()))?;
    Ok(crate::records::OwnRules::compile(raw))
}

/// MCP allow-lists: servers and tools (globs), None for all.
pub(super) type McpLists = (Option<Vec<String>>, Option<Vec<String>>);

/// The `mcp` column: `{"servers": …, "tools": …}`, or NULL for every server and tool.
pub(super) fn parse_mcp(mcp: Option<&str>) -> Result<McpLists, StoreError> {
    let Some(text) = mcp else { return Ok((None, None)) };
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|_| StoreError::Corrupt("mcp permissions are not JSON".into()))?;
    let list = |field: &str| -> Result<Option<Vec<String>>, StoreError> {
        match v.get(field) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(list) => serde_json::from_value(list.clone())
                .map(Some)
                .map_err(|_| StoreError::Corrupt(format!("mcp.{field} is not a JSON list of strings"))),
        }
    };
    Ok((list("servers")?, list("tools")?))
}

/// The `mcp` column for these lists (None when both are None: every server and tool).
pub(super) fn mcp_column(
    servers: &Option<Vec<String>>,
    tools: &Option<Vec<String>>,
) -> Result<Option<String>, StoreError> {
    match (servers, tools) {
        (None, None) => Ok(None),
        (servers, tools) => serde_json::to_string(&serde_json::json!({"servers": servers, "tools": tools}))
            .map(Some)
            .map_err(|e| StoreError::Invalid(format!("mcp permissions not serialisable: {e}"))),
    }
}
