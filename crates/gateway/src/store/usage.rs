//! Usage writes: one transaction per batch inserts the raw rows (duplicates by id are skipped), adds only the new
//! ones to the hourly and daily rollups, and moves the journal checkpoint. Also the checkpoint read and per-key spend.
//!
//! Concurrency: rollup rows are upserted in primary-key order, so two writers touching the same hours cannot
//! deadlock each other on PostgreSQL; on SQLite writers are serialised by the database lock (busy timeout).

use std::collections::{BTreeMap, HashSet};

use super::{to_i64, to_u64, values_placeholders, Store, StoreError};
use crate::records::UsageRecord;

/// One hour in milliseconds: the rollup's granularity.
pub const HOUR_MS: i64 = 3_600_000;

const RECORD_COLUMNS: &str = "id, ts_ms, key_id, user_name, team, model_requested, model_served, backend, status, \
                              prompt_tokens, completion_tokens, total_tokens, latency_ms, ttft_ms, cost_usd, estimated, tool, \
                              response_bytes, route_reason, guardrails, guard_call, units, batch_id, \
                              cache_read_tokens, cache_write_tokens, backend_key, experiment, variant, policy, tags, task_id, task_state";
const RECORD_COLS: usize = 32;
const ROLLUP_COLS: usize = 10;
/// Rows per multi-row statement at most: 32 columns x 512 = 16,384 parameters, well under SQLite's 32,766 and
/// Postgres's 65,535. Chunks are powers of two (`cached_chunks`), each a cached prepared statement.
const CHUNK_ROWS: usize = 512;

/// One UTC day in milliseconds: the daily rollup's granularity.
pub const DAY_MS: i64 = 86_400_000;

/// Start of the UTC hour containing `ts_ms`.
pub fn hour_floor(ts_ms: i64) -> i64 {
    ts_ms.div_euclid(HOUR_MS) * HOUR_MS
}

/// Start of the UTC day containing `ts_ms`.
pub fn day_floor(ts_ms: i64) -> i64 {
    ts_ms.div_euclid(DAY_MS) * DAY_MS
}

/// A rollup: its table, its time column, and how a record's time maps to its row.
type Rollup = (&'static str, &'static str, fn(i64) -> i64);

const ROLLUPS: [Rollup; 2] = [("usage_hourly", "hour_ms", hour_floor), ("usage_daily", "day_ms", day_floor)];

/// A record with its unsigned fields already converted, so a bad value fails the batch before anything is written.
struct Row<'a> {
    r: &'a UsageRecord,
    status: i32,
    prompt: i64,
    completion: i64,
    total: i64,
    cache_read: i64,
    cache_write: i64,
    response_bytes: Option<i64>,
    /// The guardrails' verdicts as JSON; None when there were none.
    guardrails: Option<String>,
    /// What it used besides tokens, as JSON.
    units: Option<String>,
    tags: Option<String>,
}

impl<'a> Row<'a> {
    fn new(r: &'a UsageRecord) -> Result<Row<'a>, StoreError> {
        Ok(Row {
            r,
            status: i32::from(r.status),
            prompt: to_i64(r.prompt_tokens, "prompt_tokens")?,
            completion: to_i64(r.completion_tokens, "completion_tokens")?,
            total: to_i64(r.total_tokens, "total_tokens")?,
            cache_read: to_i64(r.cache_read_tokens, "cache_read_tokens")?,
            cache_write: to_i64(r.cache_write_tokens, "cache_write_tokens")?,
            response_bytes: r.response_bytes.map(|b| to_i64(b, "response_bytes")).transpose()?,
            guardrails: (!r.guardrails.is_empty()).then(|| serde_json::to_string(&r.guardrails).unwrap_or_default()),
            units: r.units.as_ref().map(|u| serde_json::to_string(u).unwrap_or_default()),
            tags: (!r.tags.is_empty()).then(|| serde_json::to_string(&r.tags).unwrap_or_default()),
        })
    }
}

/// Rollup primary key: (hour_ms or day_ms, key_id, user_name, team, model), absent dimensions as "".
type RollupKey<'a> = (i64, &'a str, &'a str, &'a str, &'a str);

#[derive(Default)]
struct Sums {
    requests: i64,
    prompt: i64,
    completion: i64,
    total: i64,
    cost: f64,
}

/// Sums the rows per rollup key, time cut by `floor`; BTreeMap order is the primary-key order the upserts must
/// follow.
fn roll_up<'a>(rows: impl Iterator<Item = &'a Row<'a>>, floor: fn(i64) -> i64) -> BTreeMap<RollupKey<'a>, Sums> {
    let mut out: BTreeMap<RollupKey<'a>, Sums> = BTreeMap::new();
    for row in rows {
        let r = row.r;
        let key = (
            floor(r.ts_ms),
            r.key_id.as_deref().unwrap_or(""),
            r.user.as_deref().unwrap_or(""),
            r.team.as_deref().unwrap_or(""),
            r.model_served.as_str(),
        );
        // The detailed row, and the all-keys row that unfiltered reports read.
        let all = (key.0, ALL, ALL, ALL, key.4);
        for k in [key, all] {
            let s = out.entry(k).or_default();
            s.requests += 1;
            s.prompt = s.prompt.saturating_add(row.prompt);
            s.completion = s.completion.saturating_add(row.completion);
            s.total = s.total.saturating_add(row.total);
            s.cost += r.cost_usd;
        }
    }
    out
}

/// key_id / user_name / team of the per-(hour, model) rows summed over all keys.
pub const ALL: &str = "*";

/// Which of a chunk's ids are stored already.
/// `rows` in chunks whose sizes are powers of two up to `CHUNK_ROWS`, largest first: each size is
/// one prepared statement per connection, kept in its statement cache, so a batch of any size is
/// written without SQL to parse (a batch of 37 rows of its own size cost a parse of each statement
/// every time: about 8% of the gateway's instructions per request, by callgrind).
fn cached_chunks<T>(mut rows: &[T]) -> impl Iterator<Item = &[T]> {
    std::iter::from_fn(move || {
        if rows.is_empty() {
            return None;
        }
        let size = 1usize << rows.len().min(CHUNK_ROWS).ilog2();
        let (chunk, rest) = rows.split_at(size);
        rows = rest;
        Some(chunk)
    })
}

fn select_ids_sql(sqlite: bool, rows: usize) -> String {
    format!("SELECT id FROM usage_records WHERE id IN ({})", values_placeholders(sqlite, rows, 1))
}

fn insert_records_sql(sqlite: bool, rows: usize) -> String {
    format!(
        "INSERT INTO usage_records ({RECORD_COLUMNS}) VALUES {} ON CONFLICT (id) DO NOTHING",
        values_placeholders(sqlite, rows, RECORD_COLS)
    )
}

fn insert_bodies_sql(sqlite: bool, rows: usize) -> String {
    format!(
        "INSERT INTO request_bodies (id, request, response, truncated) VALUES {} \
         ON CONFLICT (id) DO NOTHING",
        values_placeholders(sqlite, rows, 4)
    )
}

/// Adds the groups to a rollup's rows (`table`, keyed by `time`), creating the rows not there yet.
fn upsert_rollup_sql(table: &str, time: &str, sqlite: bool, rows: usize) -> String {
    format!(
        "INSERT INTO {table} ({time}, key_id, user_name, team, model, requests, prompt_tokens, \
         completion_tokens, total_tokens, cost_usd) VALUES {} \
         ON CONFLICT ({time}, key_id, user_name, team, model) DO UPDATE SET \
         requests = {table}.requests + excluded.requests, \
         prompt_tokens = {table}.prompt_tokens + excluded.prompt_tokens, \
         completion_tokens = {table}.completion_tokens + excluded.completion_tokens, \
         total_tokens = {table}.total_tokens + excluded.total_tokens, \
         cost_usd = {table}.cost_usd + excluded.cost_usd",
        values_placeholders(sqlite, rows, ROLLUP_COLS)
    )
}

/// A query on either database, its arguments bound by position.
type Query<'q, DB> = sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments<'q>>;

/// Binds one record's values, in `RECORD_COLUMNS` order. Generic so that both of `with_pool!`'s
/// arms (SQLite and PostgreSQL) can use it.
fn bind_record<'q, DB>(q: Query<'q, DB>, row: &'q Row<'q>) -> Query<'q, DB>
where
    DB: sqlx::Database,
    String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    i32: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    f64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    bool: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    // sqlx implements `Encode` for `Option` per database, not for every `Encode` type.
    Option<String>: sqlx::Encode<'q, DB>,
    Option<i64>: sqlx::Encode<'q, DB>,
    Option<f64>: sqlx::Encode<'q, DB>,
{
    let r = row.r;
    q.bind(&r.id)
        .bind(r.ts_ms)
        .bind(&r.key_id)
        .bind(&r.user)
        .bind(&r.team)
        .bind(&r.model_requested)
        .bind(&r.model_served)
        .bind(&r.backend)
        .bind(row.status)
        .bind(row.prompt)
        .bind(row.completion)
        .bind(row.total)
        .bind(r.latency_ms)
        .bind(r.ttft_ms)
        .bind(r.cost_usd)
        .bind(r.estimated)
        .bind(&r.tool)
        .bind(row.response_bytes)
        .bind(&r.route)
        .bind(&row.guardrails)
        .bind(&r.guard_call)
        .bind(&row.units)
        .bind(&r.batch_id)
        .bind(row.cache_read)
        .bind(row.cache_write)
        .bind(&r.backend_key)
        .bind(&r.experiment)
        .bind(&r.variant)
        .bind(&r.policy)
        .bind(&row.tags)
        .bind(&r.task_id)
        .bind(&r.task_state)
}

/// Binds one rollup group's key and sums, in `upsert_rollup_sql`'s column order.
fn bind_rollup<'q, DB>(q: Query<'q, DB>, group: &'q (RollupKey<'q>, Sums)) -> Query<'q, DB>
where
    DB: sqlx::Database,
    &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    f64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    let ((at, key_id, user, team, model), s) = group;
    q.bind(*at)
        .bind(*key_id)
        .bind(*user)
        .bind(*team)
        .bind(*model)
        .bind(s.requests)
        .bind(s.prompt)
        .bind(s.completion)
        .bind(s.total)
        .bind(s.cost)
}

impl Store {
    /// Writes a batch in one transaction: inserts the records (ids already stored are skipped, so replays are
    /// idempotent), adds only the newly inserted ones to the hourly rollup (by served model), and stores
    /// `journal_offset` as the usage-journal checkpoint. Returns how many records were new.
    pub async fn write_usage_batch(&self, records: &[UsageRecord], journal_offset: u64) -> Result<u64, StoreError> {
        let offset = to_i64(journal_offset, "journal offset")?;
        let rows = records.iter().map(Row::new).collect::<Result<Vec<_>, _>>()?;
        let sqlite = matches!(self.inner, super::Inner::Sqlite(_));
        let upsert_checkpoint = "INSERT INTO journal_checkpoints (journal_id, journal_offset) VALUES ($1, $2) \
                                 ON CONFLICT (journal_id) DO UPDATE SET journal_offset = excluded.journal_offset";
        let journal_id = self.journal_id().to_owned();
        let inserted = with_pool!(self, |pool| {
            // SQLite: take the write lock up front; a deferred transaction that reads first could not
            // upgrade to a write once another writer committed (SQLITE_BUSY_SNAPSHOT).
            let begin = if sqlite { "BEGIN IMMEDIATE" } else { "BEGIN" };
            // Optimistically, every record is new: the common case (records this process has just
            // journalled) then costs no look-up first. The rows the inserts report tell: when any id
            // was stored already (a replay, or a client's repeated `x-request-id`), the transaction
            // is rolled back and done again asking first which, so that only new records are rolled
            // up. (Asking, rather than `INSERT ... RETURNING id`, keeps row-by-row results, a thread
            // hand-off each on SQLite, off both paths.)
            let mut ask_first = false;
            let (mut tx, kept) = loop {
                let mut tx = pool.begin_with(begin).await?;
                let mut existing: HashSet<String> = HashSet::new();
                if ask_first {
                    for chunk in cached_chunks(&rows) {
                        let sql = select_ids_sql(sqlite, chunk.len());
                        let mut q = sqlx::query_scalar::<_, String>(&sql);
                        for row in chunk {
                            q = q.bind(&row.r.id);
                        }
                        existing.extend(q.fetch_all(&mut *tx).await?);
                    }
                }
                let mut new_rows = 0;
                for chunk in cached_chunks(&rows) {
                    let sql = insert_records_sql(sqlite, chunk.len());
                    let mut q = sqlx::query(&sql);
                    for row in chunk {
                        q = bind_record(q, row);
                    }
                    new_rows += q.execute(&mut *tx).await?.rows_affected();
                }
                if new_rows == rows.len() as u64 {
                    break (tx, rows.iter().collect::<Vec<&Row>>());
                }
                if ask_first {
                    // A repeated id inside one batch: the first occurrence is the one the database kept.
                    let mut new_ids: HashSet<&str> =
                        rows.iter().map(|row| row.r.id.as_str()).filter(|id| !existing.contains(*id)).collect();
                    break (tx, rows.iter().filter(|row| new_ids.remove(row.r.id.as_str())).collect());
                }
                tx.rollback().await?;
                ask_first = true;
            };
            let inserted = kept.len();
            let with_bodies: Vec<_> =
                kept.iter().filter_map(|row| row.r.bodies.as_deref().map(|b| (&row.r.id, b))).collect();
            for chunk in cached_chunks(&with_bodies) {
                let sql = insert_bodies_sql(sqlite, chunk.len());
                let mut q = sqlx::query(&sql);
                for (id, b) in chunk {
                    q = q.bind(*id).bind(&b.request).bind(&b.response).bind(b.truncated);
                }
                q.execute(&mut *tx).await?;
            }
            for (table, time, floor) in ROLLUPS {
                let groups: Vec<_> = roll_up(kept.iter().copied(), floor).into_iter().collect();
                for chunk in cached_chunks(&groups) {
                    let sql = upsert_rollup_sql(table, time, sqlite, chunk.len());
                    let mut q = sqlx::query(&sql);
                    for group in chunk {
                        q = bind_rollup(q, group);
                    }
                    q.execute(&mut *tx).await?;
                }
            }
            sqlx::query(upsert_checkpoint).bind(&journal_id).bind(offset).execute(&mut *tx).await?;
            tx.commit().await?;
            inserted
        });
        Ok(inserted as u64)
    }

    /// The usage-journal offset stored by the last [`write_usage_batch`](Store::write_usage_batch); 0 when none.
    pub async fn journal_checkpoint(&self) -> Result<u64, StoreError> {
        let sql = "SELECT journal_offset FROM journal_checkpoints WHERE journal_id = $1";
        let id = self.journal_id();
        let offset: Option<i64> =
            with_pool!(self, |pool| sqlx::query_scalar(sql).bind(id).fetch_optional(pool).await?);
        offset.map_or(Ok(0), |o| to_u64(o, "journal offset"))
    }

    /// A key's spend in USD since `since_ms` (unix ms; 0 or less = all time), read from the hourly rollup: the hour
    /// containing `since_ms` is counted whole, i.e. a budget period starting at 09:30 counts usage from 09:00.
    pub async fn key_spend(&self, key_id: &str, since_ms: i64) -> Result<f64, StoreError> {
        let from = if since_ms <= 0 { i64::MIN } else { hour_floor(since_ms) };
        let sql = "SELECT CAST(COALESCE(SUM(cost_usd), 0) AS DOUBLE PRECISION) FROM usage_hourly \
                   WHERE key_id = $1 AND hour_ms >= $2";
        let spend: f64 =
            with_pool!(self, |pool| sqlx::query_scalar(sql).bind(key_id).bind(from).fetch_one(pool).await?);
        Ok(spend)
    }

    /// Spend since `since_ms` of the usage recorded under `value` in `column` (`team` or
    /// `user_name`), over every key (the all-keys rows excluded), as `key_spend` counts hours.
    pub(super) async fn spend_where(
        &self,
        column: &'static str,
        value: &str,
        since_ms: i64,
    ) -> Result<f64, StoreError> {
        let from = if since_ms <= 0 { i64::MIN } else { hour_floor(since_ms) };
        let sql = format!(
            "SELECT CAST(COALESCE(SUM(cost_usd), 0) AS DOUBLE PRECISION) FROM usage_hourly \
             WHERE {column} = $1 AND key_id <> '*' AND hour_ms >= $2"
        );
        let spend: f64 =
            with_pool!(self, |pool| sqlx::query_scalar(&sql).bind(value).bind(from).fetch_one(pool).await?);
        Ok(spend)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hour_floor_is_utc_hour_start() {
        assert_eq!(hour_floor(0), 0);
        assert_eq!(hour_floor(HOUR_MS - 1), 0);
        assert_eq!(hour_floor(HOUR_MS), HOUR_MS);
        assert_eq!(hour_floor(-1), -HOUR_MS);
    }

    #[test]
    fn batches_go_in_power_of_two_chunks_so_every_statement_is_a_cached_one() {
        let sizes = |n: usize| cached_chunks(&vec![0u8; n]).map(<[u8]>::len).collect::<Vec<_>>();
        assert_eq!(sizes(37), [32, 4, 1]);
        assert_eq!(sizes(1100), [512, 512, 64, 8, 4]);
        assert_eq!(sizes(0), Vec::<usize>::new());
        assert!((1..2000).all(|n| sizes(n).iter().sum::<usize>() == n && sizes(n).iter().all(|s| s.is_power_of_two())));
    }
}
