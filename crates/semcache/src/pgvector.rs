//! The fleet's store: one PostgreSQL table with pgvector's `vector` type, shared by every
//! instance, searched within the request's partition by cosine distance (`<=>`). With
//! `dimensions` known, an HNSW index (`vector_cosine_ops`) serves large partitions, its scan
//! made iterative so the partition filter cannot starve it; otherwise each search scans its
//! partition exactly (a B-tree on the partition finds its rows).

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Executor, PgPool, Row};

use crate::store::{Candidate, Entry, Store, StoreError};
use crate::Partition;

pub struct PgVectorStore {
    pool: PgPool,
    table: String,
    held: AtomicUsize,
}

impl PgVectorStore {
    /// Connect to `url`, creating the extension (when allowed), the table and its indexes.
    /// `table` must be a plain identifier; `dimensions` enables the HNSW index.
    pub async fn open(url: &str, table: &str, dimensions: Option<usize>) -> Result<PgVectorStore, StoreError> {
        if table.is_empty() || !table.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(StoreError(format!("`{table}` is not a plain table name")));
        }
        let options: PgConnectOptions = url.parse().map_err(|e: sqlx::Error| StoreError(e.to_string()))?;
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(Duration::from_secs(5))
            .after_connect(|conn, _| {
                Box::pin(async move {
                    // pgvector 0.8: keep scanning the graph until LIMIT rows pass the partition
                    // filter (older versions do not know the setting; that is not an error here).
                    let _ = conn.execute("SET hnsw.iterative_scan = relaxed_order").await;
                    Ok(())
                })
            })
            .connect_with(options)
            .await?;
        if let Err(e) = sqlx::query("CREATE EXTENSION IF NOT EXISTS vector").execute(&pool).await {
            tracing::debug!(error = %e, "could not create the vector extension (it may exist already)");
        }
        let column = dimensions.map_or_else(|| "vector".to_owned(), |d| format!("vector({d})"));
        let statements = [
            format!(
                "CREATE TABLE IF NOT EXISTS {table} (id BIGINT PRIMARY KEY, partition BYTEA NOT NULL, \
                 embedding {column} NOT NULL, question TEXT NOT NULL, answer BYTEA NOT NULL, \
                 stored_ms BIGINT NOT NULL, expires_ms BIGINT NOT NULL)"
            ),
            format!("CREATE INDEX IF NOT EXISTS {table}_partition ON {table} (partition, expires_ms)"),
        ];
        for statement in statements {
            sqlx::query(&statement)
                .execute(&pool)
                .await
                .map_err(|e| StoreError(format!("{e} (is pgvector installed?)")))?;
        }
        if dimensions.is_some() {
            let hnsw =
                format!("CREATE INDEX IF NOT EXISTS {table}_hnsw ON {table} USING hnsw (embedding vector_cosine_ops)");
            sqlx::query(&hnsw).execute(&pool).await?;
        }
        let count: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {table}")).fetch_one(&pool).await?;
        Ok(PgVectorStore { pool, table: table.to_owned(), held: AtomicUsize::new(count.max(0) as usize) })
    }

    /// Remove expired rows (called now and then by the gateway, never on the request path).
    pub async fn sweep(&self, now_ms: i64) -> Result<u64, StoreError> {
        let sql = format!("DELETE FROM {} WHERE expires_ms <= $1", self.table);
        let done = sqlx::query(&sql).bind(now_ms).execute(&self.pool).await?;
        Ok(done.rows_affected())
    }
}

/// pgvector's text form: `[0.1,0.2,…]`.
fn literal(vector: &[f32]) -> String {
    let mut out = String::with_capacity(vector.len() * 12 + 2);
    out.push('[');
    for (i, x) in vector.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&x.to_string());
    }
    out.push(']');
    out
}

#[async_trait::async_trait]
impl Store for PgVectorStore {
    async fn search(
        &self,
        partition: &Partition,
        vector: &[f32],
        k: usize,
        min_similarity: f32,
        now_ms: i64,
    ) -> Result<Vec<Candidate>, StoreError> {
        let sql = format!(
            "SELECT id, question, answer, stored_ms, expires_ms, 1 - (embedding <=> $1::vector) AS similarity \
             FROM {} WHERE partition = $2 AND expires_ms > $3 ORDER BY embedding <=> $1::vector LIMIT $4",
            self.table
        );
        let rows = sqlx::query(&sql)
            .bind(literal(vector))
            .bind(&partition.0[..])
            .bind(now_ms)
            .bind(k as i64)
            .fetch_all(&self.pool)
            .await?;
        let mut found = Vec::with_capacity(rows.len());
        for row in rows {
            let similarity = row.try_get::<f64, _>("similarity")? as f32;
            if similarity < min_similarity {
                continue;
            }
            let answer: Vec<u8> = row.try_get("answer")?;
            let entry = Entry {
                id: row.try_get::<i64, _>("id")? as u64,
                partition: *partition,
                vector: Vec::new(),
                question: row.try_get("question")?,
                answer: Bytes::from(answer),
                stored_ms: row.try_get("stored_ms")?,
                expires_ms: row.try_get("expires_ms")?,
            };
            found.push(Candidate { entry: Arc::new(entry), similarity });
        }
        Ok(found)
    }

    async fn insert(&self, entry: Entry) -> Result<(), StoreError> {
        let sql = format!(
            "INSERT INTO {} (id, partition, embedding, question, answer, stored_ms, expires_ms) \
             VALUES ($1, $2, $3::vector, $4, $5, $6, $7) ON CONFLICT (id) DO NOTHING",
            self.table
        );
        sqlx::query(&sql)
            .bind(entry.id as i64)
            .bind(&entry.partition.0[..])
            .bind(literal(&entry.vector))
            .bind(&entry.question)
            .bind(&entry.answer[..])
            .bind(entry.stored_ms)
            .bind(entry.expires_ms)
            .execute(&self.pool)
            .await?;
        self.held.fetch_add(1, Relaxed);
        Ok(())
    }

    fn len(&self) -> usize {
        self.held.load(Relaxed)
    }

    fn kind(&self) -> &'static str {
        "pgvector"
    }
}

#[cfg(test)]
mod tests {
    use super::literal;

    #[test]
    fn vectors_are_written_in_pgvectors_text_form() {
        assert_eq!(literal(&[0.5, -1.0, 0.25]), "[0.5,-1,0.25]");
        assert_eq!(literal(&[]), "[]");
    }
}
