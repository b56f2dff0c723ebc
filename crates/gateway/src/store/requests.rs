//! The request log: raw `usage_records` rows, newest first, filtered in SQL and paged by keyset
//! (`ts_ms`, `id`) so page 1,000 costs what page 1 does. Every filter has an index ending in
//! `ts_ms` (migration 0005), a request id is a primary-key lookup, and failures (status >= 400)
//! have partial indexes of their own, alone and per key, team and model (0005, 0008).

use serde::Serialize;
use sqlx::Row;

use super::{to_u64, Store, StoreError};
use crate::records::StoredBodies;

/// Which statuses to list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusFilter {
    /// `[from, to)`, e.g. 200..300.
    Range(u16, u16),
    Exactly(u16),
}

/// Filters for [`Store::request_log`]; every field optional.
#[derive(Debug, Clone, Default)]
pub struct RequestQuery {
    pub id: Option<String>,
    pub key_id: Option<String>,
    /// The user a request was charged to (`user_name`).
    pub user: Option<String>,
    pub team: Option<String>,
    /// The served model.
    pub model: Option<String>,
    pub status: Option<StatusFilter>,
    /// Unix ms, inclusive.
    pub from_ms: Option<i64>,
    /// Unix ms, exclusive.
    pub to_ms: Option<i64>,
    /// Rows older than this `(ts_ms, id)`: the previous page's last row.
    pub before: Option<(i64, String)>,
    pub limit: u32,
}

/// One request as the log shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RequestRow {
    pub id: String,
    pub ts_ms: i64,
    pub key_id: Option<String>,
    pub key_name: Option<String>,
    pub user: Option<String>,
    pub team: Option<String>,
    pub model_requested: String,
    pub model_served: String,
    pub backend: Option<String>,
    pub status: u16,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    /// Of the prompt tokens, those read from and written to the provider's prompt cache.
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    /// The key of the backend's pool it went with (its name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend_key: Option<String>,
    /// The policy rules that decided or routed it, and the tags a `set` rule gave it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    pub latency_ms: f64,
    pub ttft_ms: Option<f64>,
    pub cost_usd: f64,
    pub estimated: bool,
    pub route: Option<String>,
    pub tool: Option<String>,
    /// Bytes sent to the client (MCP tool calls record it).
    pub response_bytes: Option<u64>,
    /// Whether bodies were kept for it (`console.store_bodies`).
    pub has_bodies: bool,
    /// What the guardrails found: `[{guard, kind, action, count}]`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub guardrails: Vec<crate::records::GuardVerdict>,
    /// A model guard's call to its classifier: the guard's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guard_call: Option<String>,
    /// What it used besides tokens (images, search units, audio).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub units: Option<crate::records::UsageUnits>,
    /// The batch it was a line of.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_id: Option<String>,
}

enum Param<'a> {
    Text(&'a str),
    Int(i64),
}

/// The SQL and its parameters, in order.
fn build(q: &RequestQuery) -> (String, Vec<Param<'_>>) {
    let mut conditions = Vec::new();
    let mut params = Vec::new();
    let mut add =
        |params: &mut Vec<Param<'_>>, sql: &str| conditions.push(sql.replace('#', &format!("${}", params.len())));
    for (column, value) in [
        ("r.id", &q.id),
        ("r.key_id", &q.key_id),
        ("r.user_name", &q.user),
        ("r.team", &q.team),
        ("r.model_served", &q.model),
    ] {
        if let Some(v) = value {
            params.push(Param::Text(v));
            add(&mut params, &format!("{column} = #"));
        }
    }
    // Failures spell out `status >= 400`: SQLite uses a partial index only when the query repeats its condition.
    match q.status {
        Some(StatusFilter::Range(from, to)) => {
            if from >= 400 {
                add(&mut params, "r.status >= 400");
            }
            add(&mut params, &format!("r.status >= {from} AND r.status < {to}"));
        }
        Some(StatusFilter::Exactly(code)) => {
            if code >= 400 {
                add(&mut params, "r.status >= 400");
            }
            add(&mut params, &format!("r.status = {code}"));
        }
        None => {}
    }
    if let Some(from) = q.from_ms {
        params.push(Param::Int(from));
        add(&mut params, "r.ts_ms >= #");
    }
    if let Some(to) = q.to_ms {
        params.push(Param::Int(to));
        add(&mut params, "r.ts_ms < #");
    }
    if let Some((ts, id)) = &q.before {
        params.push(Param::Int(*ts));
        let ts_at = params.len();
        params.push(Param::Text(id));
        conditions.push(format!("(r.ts_ms < ${ts_at} OR (r.ts_ms = ${ts_at} AND r.id < ${}))", params.len()));
    }
    let filter = if conditions.is_empty() { String::new() } else { format!(" WHERE {}", conditions.join(" AND ")) };
    let sql = format!(
        "SELECT r.id, r.ts_ms, r.key_id, k.name, r.user_name, r.team, r.model_requested, r.model_served, r.backend, \
         r.status, r.prompt_tokens, r.completion_tokens, r.total_tokens, r.latency_ms, r.ttft_ms, r.cost_usd, \
         r.estimated, r.route_reason, r.tool, r.response_bytes, b.id IS NOT NULL, r.guardrails, r.guard_call, r.units, r.batch_id, \
         r.cache_read_tokens, r.cache_write_tokens, r.backend_key, r.policy, r.tags \
         FROM usage_records r LEFT JOIN api_keys k ON k.id = r.key_id \
         LEFT JOIN request_bodies b ON b.id = r.id{filter} \
         ORDER BY r.ts_ms DESC, r.id DESC LIMIT {}",
        q.limit.clamp(1, 1000)
    );
    (sql, params)
}

/// A row of `build`'s SELECT, from either driver.
macro_rules! decode {
    ($row:expr) => {{
        let row = $row;
        let status: i32 = row.try_get(9)?;
        RequestRow {
            id: row.try_get(0)?,
            ts_ms: row.try_get(1)?,
            key_id: row.try_get(2)?,
            key_name: row.try_get(3)?,
            user: row.try_get(4)?,
            team: row.try_get(5)?,
            model_requested: row.try_get(6)?,
            model_served: row.try_get(7)?,
            backend: row.try_get(8)?,
            status: u16::try_from(status).map_err(|_| StoreError::Corrupt(format!("status {status}")))?,
            prompt_tokens: to_u64(row.try_get(10)?, "prompt_tokens")?,
            completion_tokens: to_u64(row.try_get(11)?, "completion_tokens")?,
            total_tokens: to_u64(row.try_get(12)?, "total_tokens")?,
            latency_ms: row.try_get(13)?,
            ttft_ms: row.try_get(14)?,
            cost_usd: row.try_get(15)?,
            estimated: row.try_get(16)?,
            route: row.try_get(17)?,
            tool: row.try_get(18)?,
            response_bytes: row.try_get::<Option<i64>, _>(19)?.map(|b| to_u64(b, "response_bytes")).transpose()?,
            has_bodies: row.try_get(20)?,
            guardrails: row
                .try_get::<Option<String>, _>(21)?
                .map(|g| serde_json::from_str(&g).map_err(|_| StoreError::Corrupt(format!("guardrails {g}"))))
                .transpose()?
                .unwrap_or_default(),
            guard_call: row.try_get(22)?,
            units: row
                .try_get::<Option<String>, _>(23)?
                .map(|u| serde_json::from_str(&u).map_err(|_| StoreError::Corrupt(format!("units {u}"))))
                .transpose()?,
            batch_id: row.try_get(24)?,
            cache_read_tokens: to_u64(row.try_get(25)?, "cache_read_tokens")?,
            cache_write_tokens: to_u64(row.try_get(26)?, "cache_write_tokens")?,
            backend_key: row.try_get(27)?,
            policy: row.try_get(28)?,
            tags: row.try_get::<Option<String>, _>(29)?.and_then(|t| serde_json::from_str(&t).ok()).unwrap_or_default(),
        }
    }};
}

impl Store {
    /// One page of the request log, newest first.
    pub async fn request_log(&self, q: &RequestQuery) -> Result<Vec<RequestRow>, StoreError> {
        let (sql, params) = build(q);
        with_pool!(self, |pool| {
            let mut query = sqlx::query(&sql);
            for p in &params {
                query = match p {
                    Param::Text(s) => query.bind(*s),
                    Param::Int(i) => query.bind(*i),
                };
            }
            let rows = query.fetch_all(pool).await?;
            let mut out = Vec::with_capacity(rows.len());
            for row in &rows {
                out.push(decode!(row));
            }
            Ok(out)
        })
    }

    /// The bodies kept for request `id`, if any.
    pub async fn request_bodies(&self, id: &str) -> Result<Option<StoredBodies>, StoreError> {
        let sql = "SELECT request, response, truncated FROM request_bodies WHERE id = $1";
        let row: Option<(String, String, bool)> =
            with_pool!(self, |pool| sqlx::query_as(sql).bind(id).fetch_optional(pool).await?);
        Ok(row.map(|(request, response, truncated)| StoredBodies { request, response, truncated }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_and_the_cursor_reach_the_sql_in_order() {
        let q = RequestQuery {
            key_id: Some("k".into()),
            status: Some(StatusFilter::Range(500, 600)),
            before: Some((42, "req-9".into())),
            limit: 50,
            ..RequestQuery::default()
        };
        let (sql, params) = build(&q);
        assert!(
            sql.contains(
                "WHERE r.key_id = $1 AND r.status >= 400 AND r.status >= 500 AND r.status < 600 \
                 AND (r.ts_ms < $2 OR (r.ts_ms = $2 AND r.id < $3))"
            ),
            "{sql}"
        );
        assert!(sql.ends_with("ORDER BY r.ts_ms DESC, r.id DESC LIMIT 50"), "{sql}");
        assert_eq!(params.len(), 3);
        let unfiltered = RequestQuery { limit: 0, ..RequestQuery::default() };
        let (sql, params) = build(&unfiltered);
        assert!(!sql.contains("WHERE") && sql.ends_with("LIMIT 1"), "{sql}");
        assert!(params.is_empty());
    }
}
