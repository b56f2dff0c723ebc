//! Experiments' rows (issue 57): those made through the admin API, scores per request and
//! variant, shadow pairs, events (a variant stopped, a winner), and the sums results are made of.

use super::{Store, StoreError};

/// An experiment made through `/admin/experiments`.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredExperiment {
    pub name: String,
    pub team: Option<String>,
    /// The spec as JSON, in the configuration's shape.
    pub spec: String,
    pub created_by: Option<String>,
    pub created_ms: i64,
    pub updated_ms: i64,
}

/// One score of one request.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoreRow {
    pub request_id: String,
    pub name: String,
    /// `feedback`, `judge` or `webhook`.
    pub source: String,
    pub experiment: String,
    pub variant: String,
    pub value: f64,
    pub key_id: Option<String>,
    pub ts_ms: i64,
}

/// A primary answer and its shadow's, side by side.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PairRow {
    pub request_id: String,
    pub experiment: String,
    pub variant: String,
    pub primary_model: String,
    pub shadow_model: String,
    pub request: Option<String>,
    pub primary_answer: Option<String>,
    pub shadow_answer: Option<String>,
    pub shadow_status: i32,
    pub shadow_latency_ms: f64,
    pub ts_ms: i64,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EventRow {
    pub variant: Option<String>,
    pub kind: String,
    pub detail: Option<String>,
    pub ts_ms: i64,
}

/// Count, sum and sum of squares of one metric in one variant.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sums {
    pub count: f64,
    pub sum: f64,
    pub sum_sq: f64,
}

/// The usage records' metrics of one variant.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UsageSums {
    pub variant: String,
    pub requests: f64,
    pub latency: Sums,
    pub ttft: Sums,
    pub cost: Sums,
    pub errors: Sums,
    pub tokens: Sums,
    pub prompt_tokens: Sums,
    pub completion_tokens: Sums,
}

type UsageTuple = (String, f64, f64, f64, f64, f64, f64, f64, f64, f64, f64, f64, f64, f64, f64, f64);

/// Failed requests: a server error, or none at all (0: the client went away before an answer).
const ERROR: &str = "CASE WHEN status >= 500 THEN 1.0 ELSE 0.0 END";

impl Store {
    pub async fn list_experiments(&self) -> Result<Vec<StoredExperiment>, StoreError> {
        let sql = "SELECT name, team, spec, created_by, created_ms, updated_ms FROM experiments ORDER BY name";
        type Tuple = (String, Option<String>, String, Option<String>, i64, i64);
        let rows: Vec<Tuple> = with_pool!(self, |pool| sqlx::query_as(sql).fetch_all(pool).await?);
        Ok(rows
            .into_iter()
            .map(|(name, team, spec, created_by, created_ms, updated_ms)| StoredExperiment {
                name,
                team,
                spec,
                created_by,
                created_ms,
                updated_ms,
            })
            .collect())
    }

    /// Create or replace (the creation time of a replaced one stays).
    pub async fn put_experiment(&self, e: &StoredExperiment) -> Result<(), StoreError> {
        let sql = "INSERT INTO experiments (name, team, spec, created_by, created_ms, updated_ms) \
                   VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (name) DO UPDATE SET \
                   team = excluded.team, spec = excluded.spec, updated_ms = excluded.updated_ms";
        with_pool!(self, |pool| {
            sqlx::query(sql)
                .bind(&e.name)
                .bind(&e.team)
                .bind(&e.spec)
                .bind(&e.created_by)
                .bind(e.created_ms)
                .bind(e.updated_ms)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// Whether one was deleted.
    pub async fn delete_experiment(&self, name: &str) -> Result<bool, StoreError> {
        let sql = "DELETE FROM experiments WHERE name = $1";
        let done = with_pool!(self, |pool| sqlx::query(sql).bind(name).execute(pool).await?.rows_affected());
        Ok(done > 0)
    }

    /// The latest value of a name from a source replaces an earlier one.
    pub async fn put_score(&self, s: &ScoreRow) -> Result<(), StoreError> {
        let sql =
            "INSERT INTO experiment_scores (request_id, name, source, experiment, variant, value, key_id, ts_ms) \
                   VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (request_id, name, source) DO UPDATE SET \
                   value = excluded.value, ts_ms = excluded.ts_ms";
        with_pool!(self, |pool| {
            sqlx::query(sql)
                .bind(&s.request_id)
                .bind(&s.name)
                .bind(&s.source)
                .bind(&s.experiment)
                .bind(&s.variant)
                .bind(s.value)
                .bind(&s.key_id)
                .bind(s.ts_ms)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// Per score name and variant: count, sum, sum of squares.
    pub async fn score_sums(&self, experiment: &str) -> Result<Vec<(String, String, Sums)>, StoreError> {
        let sql = "SELECT name, variant, CAST(COUNT(*) AS DOUBLE PRECISION), CAST(SUM(value) AS DOUBLE PRECISION), \
                   CAST(SUM(value * value) AS DOUBLE PRECISION) FROM experiment_scores WHERE experiment = $1 \
                   GROUP BY name, variant ORDER BY name, variant";
        let rows: Vec<(String, String, f64, f64, f64)> =
            with_pool!(self, |pool| sqlx::query_as(sql).bind(experiment).fetch_all(pool).await?);
        Ok(rows.into_iter().map(|(n, v, count, sum, sum_sq)| (n, v, Sums { count, sum, sum_sq })).collect())
    }

    /// Per variant: the usage records' metrics as sums, of the records since `since_ms`.
    pub async fn usage_sums(&self, experiment: &str, since_ms: i64) -> Result<Vec<UsageSums>, StoreError> {
        let sums = |x: &str| {
            format!(
                "CAST(COUNT({x}) AS DOUBLE PRECISION), CAST(COALESCE(SUM({x}), 0) AS DOUBLE PRECISION), \
                 CAST(COALESCE(SUM(CAST({x} AS DOUBLE PRECISION) * {x}), 0) AS DOUBLE PRECISION)"
            )
        };
        let sql = format!(
            "SELECT variant, CAST(COUNT(*) AS DOUBLE PRECISION), \
             CAST(SUM(latency_ms) AS DOUBLE PRECISION), CAST(SUM(latency_ms * latency_ms) AS DOUBLE PRECISION), \
             {}, CAST(SUM(cost_usd) AS DOUBLE PRECISION), CAST(SUM(cost_usd * cost_usd) AS DOUBLE PRECISION), \
             CAST(SUM({ERROR}) AS DOUBLE PRECISION), \
             CAST(SUM(total_tokens) AS DOUBLE PRECISION), CAST(SUM(CAST(total_tokens AS DOUBLE PRECISION) * total_tokens) AS DOUBLE PRECISION), \
             CAST(SUM(prompt_tokens) AS DOUBLE PRECISION), CAST(SUM(CAST(prompt_tokens AS DOUBLE PRECISION) * prompt_tokens) AS DOUBLE PRECISION), \
             CAST(SUM(completion_tokens) AS DOUBLE PRECISION), \
             CAST(SUM(CAST(completion_tokens AS DOUBLE PRECISION) * completion_tokens) AS DOUBLE PRECISION) \
             FROM usage_records WHERE experiment = $1 AND ts_ms >= $2 AND variant IS NOT NULL GROUP BY variant ORDER BY variant",
            sums("ttft_ms")
        );
        let rows: Vec<UsageTuple> =
            with_pool!(self, |pool| sqlx::query_as(&sql).bind(experiment).bind(since_ms).fetch_all(pool).await?);
        Ok(rows.into_iter().map(usage_row).collect())
    }

    /// Which experiment and variant a recorded request had, and its key.
    pub async fn request_assignment(
        &self,
        request_id: &str,
    ) -> Result<Option<(String, String, Option<String>)>, StoreError> {
        let sql = "SELECT experiment, variant, key_id FROM usage_records WHERE id = $1 AND experiment IS NOT NULL";
        let row: Option<(String, Option<String>, Option<String>)> =
            with_pool!(self, |pool| sqlx::query_as(sql).bind(request_id).fetch_optional(pool).await?);
        Ok(row.and_then(|(e, v, k)| Some((e, v?, k))))
    }

    /// Store a pair (`trim_pairs` bounds them).
    pub async fn put_pair(&self, p: &PairRow) -> Result<(), StoreError> {
        let sql =
            "INSERT INTO experiment_pairs (request_id, experiment, variant, primary_model, shadow_model, request, \
                   primary_answer, shadow_answer, shadow_status, shadow_latency_ms, ts_ms) \
                   VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT (request_id) DO NOTHING";
        with_pool!(self, |pool| {
            sqlx::query(sql)
                .bind(&p.request_id)
                .bind(&p.experiment)
                .bind(&p.variant)
                .bind(&p.primary_model)
                .bind(&p.shadow_model)
                .bind(&p.request)
                .bind(&p.primary_answer)
                .bind(&p.shadow_answer)
                .bind(p.shadow_status)
                .bind(p.shadow_latency_ms)
                .bind(p.ts_ms)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// Keep the newest `keep` pairs of an experiment.
    pub async fn trim_pairs(&self, experiment: &str, keep: usize) -> Result<(), StoreError> {
        let trim = "DELETE FROM experiment_pairs WHERE experiment = $1 AND request_id IN (SELECT request_id FROM \
                    experiment_pairs WHERE experiment = $1 ORDER BY ts_ms DESC, request_id DESC LIMIT -1 OFFSET $2)";
        let trim_pg = "DELETE FROM experiment_pairs WHERE experiment = $1 AND request_id IN (SELECT request_id FROM \
                       experiment_pairs WHERE experiment = $1 ORDER BY ts_ms DESC, request_id DESC OFFSET $2)";
        let keep = keep as i64;
        match &self.inner {
            super::Inner::Sqlite(pool) => {
                sqlx::query(trim).bind(experiment).bind(keep).execute(pool).await?;
            }
            super::Inner::Postgres(pool) => {
                sqlx::query(trim_pg).bind(experiment).bind(keep).execute(pool).await?;
            }
        }
        Ok(())
    }

    /// The newest pairs first.
    pub async fn pairs(&self, experiment: &str, limit: i64) -> Result<Vec<PairRow>, StoreError> {
        type Tuple =
            (String, String, String, String, String, Option<String>, Option<String>, Option<String>, i32, f64, i64);
        let sql = "SELECT request_id, experiment, variant, primary_model, shadow_model, request, primary_answer, \
                   shadow_answer, shadow_status, shadow_latency_ms, ts_ms FROM experiment_pairs WHERE experiment = $1 \
                   ORDER BY ts_ms DESC, request_id DESC LIMIT $2";
        let rows: Vec<Tuple> =
            with_pool!(self, |pool| sqlx::query_as(sql).bind(experiment).bind(limit).fetch_all(pool).await?);
        Ok(rows
            .into_iter()
            .map(|(request_id, experiment, variant, pm, sm, request, pa, sa, status, latency, ts_ms)| PairRow {
                request_id,
                experiment,
                variant,
                primary_model: pm,
                shadow_model: sm,
                request,
                primary_answer: pa,
                shadow_answer: sa,
                shadow_status: status,
                shadow_latency_ms: latency,
                ts_ms,
            })
            .collect())
    }

    pub async fn add_experiment_event(
        &self,
        experiment: &str,
        variant: Option<&str>,
        kind: &str,
        detail: &str,
        ts_ms: i64,
    ) -> Result<(), StoreError> {
        let sql =
            "INSERT INTO experiment_events (experiment, variant, kind, detail, ts_ms) VALUES ($1, $2, $3, $4, $5)";
        with_pool!(self, |pool| {
            sqlx::query(sql).bind(experiment).bind(variant).bind(kind).bind(detail).bind(ts_ms).execute(pool).await?;
        });
        Ok(())
    }

    /// Oldest first.
    pub async fn experiment_events(&self, experiment: &str) -> Result<Vec<EventRow>, StoreError> {
        let sql = "SELECT variant, kind, detail, ts_ms FROM experiment_events WHERE experiment = $1 ORDER BY ts_ms";
        let rows: Vec<(Option<String>, String, Option<String>, i64)> =
            with_pool!(self, |pool| sqlx::query_as(sql).bind(experiment).fetch_all(pool).await?);
        Ok(rows.into_iter().map(|(variant, kind, detail, ts_ms)| EventRow { variant, kind, detail, ts_ms }).collect())
    }
}

fn usage_row(t: UsageTuple) -> UsageSums {
    let (variant, requests, lat, lat2, ttft_n, ttft, ttft2, cost, cost2, errors, tok, tok2, p, p2, c) =
        (t.0, t.1, t.2, t.3, t.4, t.5, t.6, t.7, t.8, t.9, t.10, t.11, t.12, t.13, t.14);
    let all = |sum: f64, sum_sq: f64| Sums { count: requests, sum, sum_sq };
    UsageSums {
        variant,
        requests,
        latency: all(lat, lat2),
        ttft: Sums { count: ttft_n, sum: ttft, sum_sq: ttft2 },
        cost: all(cost, cost2),
        errors: all(errors, errors),
        tokens: all(tok, tok2),
        prompt_tokens: all(p, p2),
        completion_tokens: all(c, t.15),
    }
}
