//! Usage reports: totals and hour/day buckets summed from the `usage_hourly` rollup (never from raw rows).
//!
//! Time filters work on whole hours: `from_ms` counts from the start of its hour, and an hour is included when it
//! starts before `to_ms` (exclusive), so `[from_ms, to_ms)` is widened outwards to hour boundaries. Day buckets are
//! UTC days. Only the filters that are set appear in the SQL, so each combination gets a plan that can use the
//! primary key's `hour_ms` prefix.

use serde::{Deserialize, Serialize};

use super::usage::hour_floor;
use super::usage::ALL;
use super::{to_u64, Store, StoreError};

const DAY_MS: i64 = 86_400_000;

/// Bucket width of a usage report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Bucket {
    #[default]
    Hour,
    /// UTC days.
    Day,
}

/// Filters for [`Store::usage_report`]; every field is optional. `model` matches the served model.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UsageQuery {
    pub key_id: Option<String>,
    pub user: Option<String>,
    pub team: Option<String>,
    pub model: Option<String>,
    /// Unix ms, inclusive (from the start of its hour).
    pub from_ms: Option<i64>,
    /// Unix ms, exclusive (hours starting before it are included).
    pub to_ms: Option<i64>,
    pub bucket: Bucket,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct UsageTotals {
    pub requests: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    pub cost_usd: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UsageBucket {
    /// Start of the hour or UTC day, unix ms.
    pub start_ms: i64,
    #[serde(flatten)]
    pub totals: UsageTotals,
}

/// Totals over the whole query, and per bucket in time order (buckets with no usage are omitted).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct UsageReport {
    pub totals: UsageTotals,
    pub buckets: Vec<UsageBucket>,
}

/// (start_ms, requests, prompt, completion, total, cost) as both drivers decode it.
type BucketRow = (i64, i64, i64, i64, i64, f64);

enum Param<'a> {
    Text(&'a str),
    Int(i64),
}

/// The report's SQL and its parameters, in order.
fn build(q: &UsageQuery) -> (String, Vec<Param<'_>>) {
    let mut conditions = Vec::new();
    let mut params = Vec::new();
    let text_filters = [("key_id", &q.key_id), ("user_name", &q.user), ("team", &q.team), ("model", &q.model)];
    for (column, value) in text_filters {
        if let Some(v) = value {
            params.push(Param::Text(v));
            conditions.push(format!("{column} = ${}", params.len()));
        }
    }
    // Without key/user/team filters, read the all-keys rows (a few per hour); with one, skip them.
    if q.key_id.is_none() && q.user.is_none() && q.team.is_none() {
        conditions.push(format!("key_id = '{ALL}' AND user_name = '{ALL}' AND team = '{ALL}'"));
    } else {
        conditions.push(format!("key_id <> '{ALL}'"));
    }
    if let Some(from) = q.from_ms {
        params.push(Param::Int(hour_floor(from)));
        conditions.push(format!("hour_ms >= ${}", params.len()));
    }
    if let Some(to) = q.to_ms {
        params.push(Param::Int(to));
        conditions.push(format!("hour_ms < ${}", params.len()));
    }
    let start = match q.bucket {
        Bucket::Hour => "hour_ms".to_string(),
        Bucket::Day => format!("(hour_ms / {DAY_MS}) * {DAY_MS}"),
    };
    let filter = if conditions.is_empty() { String::new() } else { format!(" WHERE {}", conditions.join(" AND ")) };
    let sql = format!(
        "SELECT {start} AS start_ms, CAST(SUM(requests) AS BIGINT), CAST(SUM(prompt_tokens) AS BIGINT), \
         CAST(SUM(completion_tokens) AS BIGINT), CAST(SUM(total_tokens) AS BIGINT), \
         CAST(SUM(cost_usd) AS DOUBLE PRECISION) FROM usage_hourly{filter} GROUP BY {start} ORDER BY {start}"
    );
    (sql, params)
}

impl Store {
    /// Totals and time buckets of the usage matching `q`, from the hourly rollup.
    pub async fn usage_report(&self, q: &UsageQuery) -> Result<UsageReport, StoreError> {
        let (sql, params) = build(q);
        let rows: Vec<BucketRow> = with_pool!(self, |pool| {
            let mut query = sqlx::query_as(&sql);
            for p in &params {
                query = match p {
                    Param::Text(s) => query.bind(*s),
                    Param::Int(i) => query.bind(*i),
                };
            }
            query.fetch_all(pool).await?
        });
        let mut report = UsageReport::default();
        for (start_ms, requests, prompt, completion, total, cost) in rows {
            let totals = UsageTotals {
                requests: to_u64(requests, "requests")?,
                prompt_tokens: to_u64(prompt, "prompt_tokens")?,
                completion_tokens: to_u64(completion, "completion_tokens")?,
                total_tokens: to_u64(total, "total_tokens")?,
                cost_usd: cost,
            };
            let t = &mut report.totals;
            t.requests += totals.requests;
            t.prompt_tokens += totals.prompt_tokens;
            t.completion_tokens += totals.completion_tokens;
            t.total_tokens += totals.total_tokens;
            t.cost_usd += totals.cost_usd;
            report.buckets.push(UsageBucket { start_ms, totals });
        }
        Ok(report)
    }
}

/// What [`Store::usage_groups`] sums by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupBy {
    Key,
    User,
    Team,
    Model,
}

impl GroupBy {
    fn column(self) -> &'static str {
        match self {
            GroupBy::Key => "key_id",
            GroupBy::User => "user_name",
            GroupBy::Team => "team",
            GroupBy::Model => "model",
        }
    }
}

/// One group's totals: `name` is the key id, user, team or served model ("" = none).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UsageGroup {
    pub name: String,
    #[serde(flatten)]
    pub totals: UsageTotals,
}

/// (name, requests, prompt, completion, total, cost) as both drivers decode it.
type GroupRow = (String, i64, i64, i64, i64, f64);

impl Store {
    /// Totals per key, user, team or model over whole hours `[from_ms, to_ms)`, most spent first
    /// (then most requests), at most `limit` groups. Reads only the hourly rollup.
    pub async fn usage_groups(
        &self,
        by: GroupBy,
        from_ms: i64,
        to_ms: i64,
        limit: u32,
    ) -> Result<Vec<UsageGroup>, StoreError> {
        let column = by.column();
        // By model: the all-keys rows (a few per hour); otherwise the detailed rows.
        let rows_wanted = match by {
            GroupBy::Model => format!("key_id = '{ALL}' AND user_name = '{ALL}' AND team = '{ALL}'"),
            _ => format!("key_id <> '{ALL}'"),
        };
        let sql = format!(
            "SELECT {column}, CAST(SUM(requests) AS BIGINT), CAST(SUM(prompt_tokens) AS BIGINT), \
             CAST(SUM(completion_tokens) AS BIGINT), CAST(SUM(total_tokens) AS BIGINT), \
             CAST(SUM(cost_usd) AS DOUBLE PRECISION) AS cost FROM usage_hourly \
             WHERE hour_ms >= $1 AND hour_ms < $2 AND {rows_wanted} GROUP BY {column} \
             ORDER BY cost DESC, 2 DESC, {column} LIMIT {}",
            limit.clamp(1, 10_000)
        );
        let rows: Vec<GroupRow> = with_pool!(self, |pool| {
            sqlx::query_as(&sql).bind(hour_floor(from_ms)).bind(to_ms).fetch_all(pool).await?
        });
        rows.into_iter()
            .map(|(name, requests, prompt, completion, total, cost_usd)| {
                Ok(UsageGroup {
                    name,
                    totals: UsageTotals {
                        requests: to_u64(requests, "requests")?,
                        prompt_tokens: to_u64(prompt, "prompt_tokens")?,
                        completion_tokens: to_u64(completion, "completion_tokens")?,
                        total_tokens: to_u64(total, "total_tokens")?,
                        cost_usd,
                    },
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_set_filters_reach_the_sql() {
        let empty = UsageQuery::default();
        let (sql, params) = build(&empty);
        assert!(
            sql.contains("WHERE key_id = '*' AND user_name = '*' AND team = '*'"),
            "unfiltered reads the all-keys rows: {sql}"
        );
        assert!(params.is_empty());
        let q = UsageQuery {
            team: Some("t".into()),
            from_ms: Some(5_400_000),
            bucket: Bucket::Day,
            ..UsageQuery::default()
        };
        let (sql, params) = build(&q);
        assert!(sql.contains("WHERE team = $1 AND key_id <> '*' AND hour_ms >= $2"), "{sql}");
        assert!(matches!(params[1], Param::Int(3_600_000)));
        assert!(sql.contains("(hour_ms / 86400000) * 86400000"));
    }
}
