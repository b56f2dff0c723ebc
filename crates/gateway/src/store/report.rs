//! Usage reports: totals and hour/day buckets summed from the rollups (never from raw rows): whole UTC days
//! from `usage_daily`, the hours before the first whole day and after the last from `usage_hourly`.
//!
//! Time filters work on whole hours: `from_ms` counts from the start of its hour, and an hour is included when it
//! starts before `to_ms` (exclusive), so `[from_ms, to_ms)` is widened outwards to hour boundaries. Day buckets are
//! UTC days. Only the filters that are set appear in the SQL, so each combination gets a plan that can use the
//! primary key's `hour_ms` prefix.

use serde::{Deserialize, Serialize};

use super::usage::{day_floor, hour_floor, ALL, DAY_MS, HOUR_MS};
use super::{to_u64, Store, StoreError};

/// Bucket width of a usage report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Bucket {
    #[default]
    Hour,
    /// UTC days.
    Day,
}

/// Whose usage a grouping covers, when not everyone's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupScope {
    /// One user's (by the name usage records them under).
    User(String),
    /// One team's (by name).
    Team(String),
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

/// One rollup range a report reads: table, time column, `[lo, hi)`.
type Source = (&'static str, &'static str, i64, i64);

/// Where a report over the hours `[from_ms, to_ms)` (widened to whole hours) reads: with `days`, whole UTC
/// days from the daily rollup and the partial days at either end from the hourly one; else only hours.
fn sources(from_ms: i64, to_ms: i64, days: bool) -> Vec<Source> {
    let from_h = hour_floor(from_ms);
    let to_h = hour_floor(to_ms.saturating_add(HOUR_MS - 1));
    let (first_day, end_day) = (day_floor(from_h.saturating_add(DAY_MS - 1)), day_floor(to_h));
    if !days || first_day >= end_day {
        return vec![("usage_hourly", "hour_ms", from_h, to_h)];
    }
    let mut out = Vec::with_capacity(3);
    if from_h < first_day {
        out.push(("usage_hourly", "hour_ms", from_h, first_day));
    }
    out.push(("usage_daily", "day_ms", first_day, end_day));
    if end_day < to_h {
        out.push(("usage_hourly", "hour_ms", end_day, to_h));
    }
    out
}

/// Each source as one `SELECT {select}, <sums> FROM … WHERE {filter} AND <its range>`, joined by UNION ALL;
/// `filter` is made per branch by `filter(params)` so every placeholder is numbered in order.
fn union<'a>(
    sources: &[Source],
    select: &str,
    params: &mut Vec<Param<'a>>,
    mut filter: impl FnMut(&mut Vec<Param<'a>>) -> String,
) -> String {
    let mut branches = Vec::with_capacity(sources.len());
    for &(table, time, lo, hi) in sources {
        let select = select.replace("{time}", time);
        let mut conditions = filter(params);
        params.push(Param::Int(lo));
        let lo_at = params.len();
        params.push(Param::Int(hi));
        conditions.push_str(&format!(" AND {time} >= ${lo_at} AND {time} < ${}", params.len()));
        branches.push(format!(
            "SELECT {select}, requests, prompt_tokens, completion_tokens, total_tokens, cost_usd \
             FROM {table} WHERE {conditions}"
        ));
    }
    branches.join(" UNION ALL ")
}

const SUMS: &str = "CAST(SUM(requests) AS BIGINT), CAST(SUM(prompt_tokens) AS BIGINT), \
                    CAST(SUM(completion_tokens) AS BIGINT), CAST(SUM(total_tokens) AS BIGINT), \
                    CAST(SUM(cost_usd) AS DOUBLE PRECISION)";

/// The key/user/team/model conditions of `q`, their values pushed onto `params`.
fn dimensions<'a>(q: &'a UsageQuery, params: &mut Vec<Param<'a>>) -> Vec<String> {
    let mut conditions = Vec::new();
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
    conditions
}

/// The report's SQL and its parameters, in order.
fn build(q: &UsageQuery) -> (String, Vec<Param<'_>>) {
    let start = match q.bucket {
        Bucket::Hour => "t".to_string(),
        Bucket::Day => format!("(t / {DAY_MS}) * {DAY_MS}"),
    };
    let mut params = Vec::new();
    let inner = match (q.from_ms, q.to_ms) {
        (Some(from), Some(to)) => {
            let sources = sources(from, to, q.bucket == Bucket::Day);
            union(&sources, "{time} AS t", &mut params, |params| dimensions(q, params).join(" AND "))
        }
        // An open range reads the hourly rollup alone.
        (from, to) => {
            let mut conditions = dimensions(q, &mut params);
            if let Some(from) = from {
                params.push(Param::Int(hour_floor(from)));
                conditions.push(format!("hour_ms >= ${}", params.len()));
            }
            if let Some(to) = to {
                params.push(Param::Int(to));
                conditions.push(format!("hour_ms < ${}", params.len()));
            }
            format!(
                "SELECT hour_ms AS t, requests, prompt_tokens, completion_tokens, total_tokens, cost_usd \
                 FROM usage_hourly WHERE {}",
                conditions.join(" AND ")
            )
        }
    };
    let sql = format!("SELECT {start} AS start_ms, {SUMS} FROM ({inner}) AS u GROUP BY {start} ORDER BY {start}");
    (sql, params)
}

impl Store {
    /// A report's rows: `sql` run with `params` bound in order.
    async fn report_rows<T>(&self, sql: &str, params: &[Param<'_>]) -> Result<Vec<T>, StoreError>
    where
        T: Send
            + Unpin
            + for<'r> sqlx::FromRow<'r, sqlx::sqlite::SqliteRow>
            + for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow>,
    {
        Ok(with_pool!(self, |pool| {
            let mut query = sqlx::query_as(sql);
            for p in params {
                query = match p {
                    Param::Text(s) => query.bind(*s),
                    Param::Int(i) => query.bind(*i),
                };
            }
            query.fetch_all(pool).await?
        }))
    }
}

impl Store {
    /// Totals and time buckets of the usage matching `q`, from the rollups.
    pub async fn usage_report(&self, q: &UsageQuery) -> Result<UsageReport, StoreError> {
        let (sql, params) = build(q);
        let rows: Vec<BucketRow> = self.report_rows(&sql, &params).await?;
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
    /// (then most requests), at most `limit` groups. Reads whole days from the daily rollup.
    pub async fn usage_groups(
        &self,
        by: GroupBy,
        from_ms: i64,
        to_ms: i64,
        limit: u32,
        within: Option<&GroupScope>,
    ) -> Result<Vec<UsageGroup>, StoreError> {
        let column = by.column();
        // By model: the all-keys rows (a few per hour); otherwise the detailed rows. Within one
        // user's or team's usage: the detailed rows of theirs.
        let rows_wanted = match (by, within) {
            (_, Some(_)) => format!("key_id <> '{ALL}'"),
            (GroupBy::Model, None) => format!("key_id = '{ALL}' AND user_name = '{ALL}' AND team = '{ALL}'"),
            _ => format!("key_id <> '{ALL}'"),
        };
        let mut params = Vec::new();
        let inner = union(&sources(from_ms, to_ms, true), column, &mut params, |params| match within {
            Some(scope) => {
                let (column, value) = match scope {
                    GroupScope::User(v) => ("user_name", v),
                    GroupScope::Team(v) => ("team", v),
                };
                params.push(Param::Text(value.as_str()));
                format!("{rows_wanted} AND {column} = ${}", params.len())
            }
            None => rows_wanted.clone(),
        });
        let sql = format!(
            "SELECT {column}, {SUMS} AS cost FROM ({inner}) AS u GROUP BY {column} \
             ORDER BY cost DESC, 2 DESC, {column} LIMIT {}",
            limit.clamp(1, 10_000)
        );
        let rows: Vec<GroupRow> = self.report_rows(&sql, &params).await?;
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
        assert!(sql.contains("(t / 86400000) * 86400000"));
    }

    #[test]
    fn whole_days_come_from_the_daily_rollup_and_the_ends_from_the_hourly() {
        let day = DAY_MS;
        // 30 whole days up to the hour after "now", 10:20 on day 40.
        let now = 40 * day + 10 * HOUR_MS + 1_200_000;
        let got = sources(10 * day, now + HOUR_MS, true);
        assert_eq!(
            got,
            vec![
                ("usage_daily", "day_ms", 10 * day, 40 * day),
                ("usage_hourly", "hour_ms", 40 * day, 40 * day + 12 * HOUR_MS)
            ]
        );
        // A start inside a day: its remaining hours from the hourly rollup, counted from the start of its hour.
        let got = sources(10 * day + 90 * 60_000, 13 * day, true);
        assert_eq!(
            got,
            vec![
                ("usage_hourly", "hour_ms", 10 * day + HOUR_MS, 11 * day),
                ("usage_daily", "day_ms", 11 * day, 13 * day)
            ]
        );
        // Less than a whole day, or hourly buckets: hours only.
        assert_eq!(
            sources(10 * day + HOUR_MS, 11 * day + HOUR_MS, true),
            vec![("usage_hourly", "hour_ms", 10 * day + HOUR_MS, 11 * day + HOUR_MS)]
        );
        assert_eq!(sources(10 * day, 12 * day, false), vec![("usage_hourly", "hour_ms", 10 * day, 12 * day)]);
        let q = UsageQuery {
            from_ms: Some(10 * day),
            to_ms: Some(12 * day + 1),
            bucket: Bucket::Day,
            ..Default::default()
        };
        let (sql, params) = build(&q);
        assert!(sql.contains("FROM usage_daily WHERE key_id = '*' AND user_name = '*' AND team = '*' AND day_ms >= $1 AND day_ms < $2 UNION ALL"), "{sql}");
        assert!(sql.contains("FROM usage_hourly WHERE key_id = '*' AND user_name = '*' AND team = '*' AND hour_ms >= $3 AND hour_ms < $4"), "{sql}");
        assert_eq!(params.len(), 4);
    }
}
