//! The Files and Batch APIs' rows (migration 0015): `files` (what was uploaded, by whom; the
//! content lives outside the database), `batches` (one job each, its counts and status times) and
//! `batch_lines` (a running batch's finished lines, once per custom_id). Times are unix seconds.
//!
//! Lists are newest first (`created_at DESC, id DESC`) and page with OpenAI's cursor: `after` is
//! the id of the last row of the previous page, and only rows older than it follow (none when it
//! no longer exists).

use super::{values_placeholders, Store, StoreError};

/// An uploaded file's record.
#[derive(Debug, Clone, PartialEq)]
pub struct FileRow {
    pub id: String,
    pub owner: String,
    pub filename: String,
    pub purpose: String,
    pub bytes: i64,
    pub created_at: i64,
}

/// A batch job as stored: `metadata` and `errors` are JSON, the counts are its lines'.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchRow {
    pub id: String,
    pub owner: String,
    pub key_id: Option<String>,
    pub endpoint: String,
    pub input_file_id: String,
    pub completion_window: String,
    pub status: String,
    pub metadata: Option<String>,
    pub output_file_id: Option<String>,
    pub error_file_id: Option<String>,
    pub total: i64,
    pub completed: i64,
    pub failed: i64,
    pub created_at: i64,
    pub in_progress_at: Option<i64>,
    pub finalizing_at: Option<i64>,
    pub completed_at: Option<i64>,
    pub failed_at: Option<i64>,
    pub cancelling_at: Option<i64>,
    pub cancelled_at: Option<i64>,
    pub expires_at: i64,
    pub errors: Option<String>,
    pub expired_at: Option<i64>,
    /// Sent to a provider's Batch API (`batches.mode: passthrough`): where, as JSON.
    pub upstream: Option<String>,
}

/// One finished line of a batch: the input line's number, the answer's status and body (JSON),
/// and whether it goes to the error file.
#[derive(Debug, Clone, PartialEq)]
pub struct LineRow {
    pub custom_id: String,
    pub line: i64,
    pub status: i64,
    pub failed: bool,
    pub body: String,
    pub request_id: String,
}

const FILE_COLUMNS: &str = "id, owner, filename, purpose, bytes, created_at";

type FileTuple = (String, String, String, String, i64, i64);

/// In `BatchRow` field order; `id` first (`update_batch` binds it as `$1`).
const BATCH_COLUMNS: &str = "id, owner, key_id, endpoint, input_file_id, completion_window, status, metadata, \
                             output_file_id, error_file_id, total, completed, failed, created_at, in_progress_at, \
                             finalizing_at, completed_at, failed_at, cancelling_at, cancelled_at, expires_at, errors, \
                             expired_at, upstream";

const LINE_COLUMNS: &str = "custom_id, line, status, failed, body, request_id";

/// `failed` is an INTEGER (0 or 1): i32 on PostgreSQL, which either driver decodes.
type LineTuple = (String, i64, i64, i32, String, String);

/// The statuses of a batch that is not done yet.
const UNFINISHED: &str = "'validating', 'in_progress', 'finalizing', 'cancelling'";

macro_rules! batch_row_from {
    ($row:ty) => {
        impl<'r> sqlx::FromRow<'r, $row> for BatchRow {
            fn from_row(r: &'r $row) -> Result<Self, sqlx::Error> {
                use sqlx::Row;
                Ok(BatchRow {
                    id: r.try_get(0)?,
                    owner: r.try_get(1)?,
                    key_id: r.try_get(2)?,
                    endpoint: r.try_get(3)?,
                    input_file_id: r.try_get(4)?,
                    completion_window: r.try_get(5)?,
                    status: r.try_get(6)?,
                    metadata: r.try_get(7)?,
                    output_file_id: r.try_get(8)?,
                    error_file_id: r.try_get(9)?,
                    total: r.try_get(10)?,
                    completed: r.try_get(11)?,
                    failed: r.try_get(12)?,
                    created_at: r.try_get(13)?,
                    in_progress_at: r.try_get(14)?,
                    finalizing_at: r.try_get(15)?,
                    completed_at: r.try_get(16)?,
                    failed_at: r.try_get(17)?,
                    cancelling_at: r.try_get(18)?,
                    cancelled_at: r.try_get(19)?,
                    expires_at: r.try_get(20)?,
                    errors: r.try_get(21)?,
                    expired_at: r.try_get(22)?,
                    upstream: r.try_get(23)?,
                })
            }
        }
    };
}
batch_row_from!(sqlx::sqlite::SqliteRow);
batch_row_from!(sqlx::postgres::PgRow);

/// `$query` with every field of `$b` bound, in `BATCH_COLUMNS` order.
macro_rules! bind_batch {
    ($query:expr, $b:expr) => {{
        let b = $b;
        $query
            .bind(&b.id)
            .bind(&b.owner)
            .bind(&b.key_id)
            .bind(&b.endpoint)
            .bind(&b.input_file_id)
            .bind(&b.completion_window)
            .bind(&b.status)
            .bind(&b.metadata)
            .bind(&b.output_file_id)
            .bind(&b.error_file_id)
            .bind(b.total)
            .bind(b.completed)
            .bind(b.failed)
            .bind(b.created_at)
            .bind(b.in_progress_at)
            .bind(b.finalizing_at)
            .bind(b.completed_at)
            .bind(b.failed_at)
            .bind(b.cancelling_at)
            .bind(b.cancelled_at)
            .bind(b.expires_at)
            .bind(&b.errors)
            .bind(b.expired_at)
            .bind(&b.upstream)
    }};
}

/// `table`'s rows older than the one whose id is `$n` (every row when `$n` is NULL).
fn older_than(table: &str, n: usize) -> String {
    format!(
        "(${n} IS NULL OR EXISTS (SELECT 1 FROM {table} c WHERE c.id = ${n} AND ({table}.created_at < c.created_at \
         OR ({table}.created_at = c.created_at AND {table}.id < c.id))))"
    )
}

/// A list's page size: `limit` clamped to 1..=10000.
fn page(limit: i64) -> i64 {
    limit.clamp(1, 10_000)
}

fn file_row((id, owner, filename, purpose, bytes, created_at): FileTuple) -> FileRow {
    FileRow { id, owner, filename, purpose, bytes, created_at }
}

fn line_row((custom_id, line, status, failed, body, request_id): LineTuple) -> LineRow {
    LineRow { custom_id, line, status, failed: failed != 0, body, request_id }
}

/// `UPDATE batches SET owner = $2, ... WHERE id = $1`, in `BATCH_COLUMNS` order.
fn update_batch_sql() -> String {
    let sets: Vec<String> =
        BATCH_COLUMNS.split(", ").enumerate().skip(1).map(|(i, column)| format!("{column} = ${}", i + 1)).collect();
    format!("UPDATE batches SET {} WHERE id = $1", sets.join(", "))
}

impl Store {
    /// Records an uploaded file; an existing id gives [`StoreError::Conflict`].
    pub async fn insert_file(&self, f: &FileRow) -> Result<(), StoreError> {
        let sql = format!("INSERT INTO files ({FILE_COLUMNS}) VALUES {}", values_placeholders(false, 1, 6));
        with_pool!(self, |pool| {
            sqlx::query(&sql)
                .bind(&f.id)
                .bind(&f.owner)
                .bind(&f.filename)
                .bind(&f.purpose)
                .bind(f.bytes)
                .bind(f.created_at)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// The file with this id, if any.
    pub async fn get_file(&self, id: &str) -> Result<Option<FileRow>, StoreError> {
        let sql = format!("SELECT {FILE_COLUMNS} FROM files WHERE id = $1");
        let row: Option<FileTuple> =
            with_pool!(self, |pool| sqlx::query_as(&sql).bind(id).fetch_optional(pool).await?);
        Ok(row.map(file_row))
    }

    /// Newest first; `owner` None = every owner; `after` = a file id: only files older than it (OpenAI's cursor);
    /// at most `limit` (clamp 1..=10000).
    pub async fn list_files(
        &self,
        owner: Option<&str>,
        purpose: Option<&str>,
        limit: i64,
        after: Option<&str>,
    ) -> Result<Vec<FileRow>, StoreError> {
        let sql = format!(
            "SELECT {FILE_COLUMNS} FROM files WHERE ($1 IS NULL OR owner = $1) AND ($2 IS NULL OR purpose = $2) \
             AND {} ORDER BY created_at DESC, id DESC LIMIT $4",
            older_than("files", 3)
        );
        let rows: Vec<FileTuple> = with_pool!(self, |pool| sqlx::query_as(&sql)
            .bind(owner)
            .bind(purpose)
            .bind(after)
            .bind(page(limit))
            .fetch_all(pool)
            .await?);
        Ok(rows.into_iter().map(file_row).collect())
    }

    /// Deletes the file's record; false if there was no such file.
    pub async fn delete_file(&self, id: &str) -> Result<bool, StoreError> {
        let sql = "DELETE FROM files WHERE id = $1";
        let affected = with_pool!(self, |pool| sqlx::query(sql).bind(id).execute(pool).await?.rows_affected());
        Ok(affected > 0)
    }

    /// Records a new batch; an existing id gives [`StoreError::Conflict`].
    pub async fn insert_batch(&self, b: &BatchRow) -> Result<(), StoreError> {
        let sql = format!("INSERT INTO batches ({BATCH_COLUMNS}) VALUES {}", values_placeholders(false, 1, 24));
        with_pool!(self, |pool| {
            bind_batch!(sqlx::query(&sql), b).execute(pool).await?;
        });
        Ok(())
    }

    /// The batch with this id, if any.
    pub async fn get_batch(&self, id: &str) -> Result<Option<BatchRow>, StoreError> {
        let sql = format!("SELECT {BATCH_COLUMNS} FROM batches WHERE id = $1");
        Ok(with_pool!(self, |pool| sqlx::query_as(&sql).bind(id).fetch_optional(pool).await?))
    }

    /// Newest first, same cursor rules as list_files.
    pub async fn list_batches(
        &self,
        owner: Option<&str>,
        limit: i64,
        after: Option<&str>,
    ) -> Result<Vec<BatchRow>, StoreError> {
        let sql = format!(
            "SELECT {BATCH_COLUMNS} FROM batches WHERE ($1 IS NULL OR owner = $1) AND {} \
             ORDER BY created_at DESC, id DESC LIMIT $3",
            older_than("batches", 2)
        );
        Ok(with_pool!(self, |pool| sqlx::query_as(&sql)
            .bind(owner)
            .bind(after)
            .bind(page(limit))
            .fetch_all(pool)
            .await?))
    }

    /// Replace every field but id; false if no such batch.
    pub async fn update_batch(&self, b: &BatchRow) -> Result<bool, StoreError> {
        let sql = update_batch_sql();
        let affected = with_pool!(self, |pool| bind_batch!(sqlx::query(&sql), b).execute(pool).await?.rows_affected());
        Ok(affected > 0)
    }

    /// Batches whose status is validating, in_progress, finalizing or cancelling, oldest first.
    pub async fn unfinished_batches(&self) -> Result<Vec<BatchRow>, StoreError> {
        let sql = format!("SELECT {BATCH_COLUMNS} FROM batches WHERE status IN ({UNFINISHED}) ORDER BY created_at, id");
        Ok(with_pool!(self, |pool| sqlx::query_as(&sql).fetch_all(pool).await?))
    }

    /// Claim (or renew the claim on) batch `id` for `runner` until `until_ms` (unix ms): true when
    /// `runner` holds it now — it was nobody's, already `runner`'s, or its holder let it lapse
    /// before `now_ms`; `take_over` takes it from any holder (an instance alone on its database).
    pub async fn claim_batch(
        &self,
        id: &str,
        runner: &str,
        now_ms: i64,
        until_ms: i64,
        take_over: bool,
    ) -> Result<bool, StoreError> {
        let sql = "UPDATE batches SET runner = $2, runner_until = $3 WHERE id = $1 \
                   AND (runner IS NULL OR runner = $2 OR runner_until < $4 OR $5)";
        let affected = with_pool!(self, |pool| sqlx::query(sql)
            .bind(id)
            .bind(runner)
            .bind(until_ms)
            .bind(now_ms)
            .bind(take_over)
            .execute(pool)
            .await?
            .rows_affected());
        Ok(affected > 0)
    }
}

impl Store {
    /// Insert a finished line; false (and nothing changed) if that custom_id of that batch is already there (ON
    /// CONFLICT DO NOTHING) — this is what makes a line exactly-once across restarts.
    pub async fn insert_line(&self, batch_id: &str, l: &LineRow) -> Result<bool, StoreError> {
        let sql = format!(
            "INSERT INTO batch_lines (batch_id, {LINE_COLUMNS}) VALUES {} ON CONFLICT (batch_id, custom_id) DO NOTHING",
            values_placeholders(false, 1, 7)
        );
        let affected = with_pool!(self, |pool| sqlx::query(&sql)
            .bind(batch_id)
            .bind(&l.custom_id)
            .bind(l.line)
            .bind(l.status)
            .bind(i32::from(l.failed))
            .bind(&l.body)
            .bind(&l.request_id)
            .execute(pool)
            .await?
            .rows_affected());
        Ok(affected > 0)
    }

    /// Every finished line of a batch, in `line` order.
    pub async fn batch_lines(&self, batch_id: &str) -> Result<Vec<LineRow>, StoreError> {
        let sql = format!("SELECT {LINE_COLUMNS} FROM batch_lines WHERE batch_id = $1 ORDER BY line, custom_id");
        let rows: Vec<LineTuple> = with_pool!(self, |pool| sqlx::query_as(&sql).bind(batch_id).fetch_all(pool).await?);
        Ok(rows.into_iter().map(line_row).collect())
    }

    /// (completed, failed) counts of a batch's finished lines.
    pub async fn line_counts(&self, batch_id: &str) -> Result<(i64, i64), StoreError> {
        let sql = "SELECT CAST(COALESCE(SUM(1 - failed), 0) AS BIGINT), CAST(COALESCE(SUM(failed), 0) AS BIGINT) \
                   FROM batch_lines WHERE batch_id = $1";
        Ok(with_pool!(self, |pool| sqlx::query_as(sql).bind(batch_id).fetch_one(pool).await?))
    }

    /// Delete a batch's lines (after its output file is written).
    pub async fn delete_lines(&self, batch_id: &str) -> Result<(), StoreError> {
        let sql = "DELETE FROM batch_lines WHERE batch_id = $1";
        with_pool!(self, |pool| {
            sqlx::query(sql).bind(batch_id).execute(pool).await?;
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn update_sets_every_column_but_id_in_bind_order() {
        let sql = update_batch_sql();
        assert!(sql.starts_with("UPDATE batches SET owner = $2, key_id = $3, "), "{sql}");
        assert!(sql.ends_with("errors = $22, expired_at = $23, upstream = $24 WHERE id = $1"), "{sql}");
        assert_eq!(BATCH_COLUMNS.split(", ").count(), 24);
    }
}
