//! Virtual-key CRUD on `api_keys`. `models` and `tags` are stored as JSON arrays in TEXT columns; unsigned limits
//! are stored as BIGINT and range-checked on the way back.

use super::{to_i64, Store, StoreError};
use crate::records::KeyRecord;

const COLUMNS: &str = "id, secret_hash, name, models, rpm, tpm, max_parallel, budget_usd, budget_period, \
                       expires_at, revoked_at, user_name, team, tags, created_at, mcp";

/// One `api_keys` row as both drivers decode it (column order = `COLUMNS`).
type KeyRow = (
    String,
    Vec<u8>,
    Option<String>,
    String,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<f64>,
    Option<String>,
    Option<i64>,
    Option<i64>,
    Option<String>,
    Option<String>,
    String,
    i64,
    Option<String>,
);

/// The values bound for a key, in `COLUMNS` order, already converted to storable types.
struct KeyParams {
    models: String,
    tags: String,
    rpm: Option<i64>,
    tpm: Option<i64>,
    max_parallel: Option<i64>,
    /// `{"servers": …, "tools": …}`; None when both are None (every server and tool).
    mcp: Option<String>,
}

impl KeyParams {
    fn new(k: &KeyRecord) -> Result<KeyParams, StoreError> {
        Ok(KeyParams {
            models: json_list(&k.models)?,
            tags: json_list(&k.tags)?,
            rpm: k.rpm.map(i64::from),
            tpm: k.tpm.map(|v| to_i64(v, "tpm")).transpose()?,
            max_parallel: k.max_parallel.map(i64::from),
            mcp: match (&k.mcp_servers, &k.mcp_tools) {
                (None, None) => None,
                (servers, tools) => Some(
                    serde_json::to_string(&serde_json::json!({"servers": servers, "tools": tools}))
                        .map_err(|e| StoreError::Invalid(format!("mcp permissions not serialisable: {e}")))?,
                ),
            },
        })
    }
}

impl Store {
    /// Inserts a new key; an existing id gives [`StoreError::Conflict`].
    pub async fn insert_key(&self, k: &KeyRecord) -> Result<(), StoreError> {
        let p = KeyParams::new(k)?;
        let sql = format!(
            "INSERT INTO api_keys ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)"
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

    /// Replaces every field of the key with `k.id` (including `created_at`); false if there is no such key.
    pub async fn update_key(&self, k: &KeyRecord) -> Result<bool, StoreError> {
        let p = KeyParams::new(k)?;
        let sql = "UPDATE api_keys SET secret_hash = $2, name = $3, models = $4, rpm = $5, tpm = $6, \
                   max_parallel = $7, budget_usd = $8, budget_period = $9, expires_at = $10, revoked_at = $11, \
                   user_name = $12, team = $13, tags = $14, created_at = $15, mcp = $16 WHERE id = $1";
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

fn json_list(items: &[String]) -> Result<String, StoreError> {
    serde_json::to_string(items).map_err(|e| StoreError::Invalid(format!("list not serialisable: {e}")))
}

fn parse_list(text: &str, what: &str) -> Result<Vec<String>, StoreError> {
    serde_json::from_str(text).map_err(|_| StoreError::Corrupt(format!("{what} is not a JSON list of strings")))
}

fn narrow<T: TryFrom<i64>>(value: Option<i64>, what: &str) -> Result<Option<T>, StoreError> {
    value.map(|v| T::try_from(v).map_err(|_| StoreError::Corrupt(format!("{what} out of range ({v})")))).transpose()
}

fn from_row(row: KeyRow) -> Result<KeyRecord, StoreError> {
    let (
        id,
        secret_hash,
        name,
        models,
        rpm,
        tpm,
        max_parallel,
        budget_usd,
        budget_period,
        expires_at,
        revoked_at,
        user,
        team,
        tags,
        created_at,
        mcp,
    ) = row;
    let (mcp_servers, mcp_tools) = match mcp {
        None => (None, None),
        Some(text) => {
            let v: serde_json::Value =
                serde_json::from_str(&text).map_err(|_| StoreError::Corrupt("mcp permissions are not JSON".into()))?;
            let list = |field: &str| -> Result<Option<Vec<String>>, StoreError> {
                match v.get(field) {
                    None | Some(serde_json::Value::Null) => Ok(None),
                    Some(list) => serde_json::from_value(list.clone())
                        .map(Some)
                        .map_err(|_| StoreError::Corrupt(format!("mcp.{field} is not a JSON list of strings"))),
                }
            };
            (list("servers")?, list("tools")?)
        }
    };
    Ok(KeyRecord {
        id,
        secret_hash,
        name,
        models: parse_list(&models, "models")?,
        rpm: narrow(rpm, "rpm")?,
        tpm: narrow(tpm, "tpm")?,
        max_parallel: narrow(max_parallel, "max_parallel")?,
        budget_usd,
        budget_period,
        expires_at,
        revoked_at,
        user,
        team,
        tags: parse_list(&tags, "tags")?,
        created_at,
        mcp_servers,
        mcp_tools,
    })
}
