//! Storage for virtual keys and usage: one `Store` over SQLite (default) or PostgreSQL, chosen by URL.
//!
//! Both dialects share one logical schema (`migrations/{sqlite,postgres}/`, embedded in the binary and applied by
//! [`Store::connect`]) and, wherever the dialects agree, the same SQL text: `$N` placeholders, `ON CONFLICT`,
//! `RETURNING` and `CAST(.. AS BIGINT)` all mean the same in SQLite >= 3.35 and PostgreSQL. Queries are built at run
//! time (no compile-time checking, so building needs no database).
//!
//! Usage is stored twice: raw rows in `usage_records` (keyed by request id, so journal replays are idempotent) and
//! an hourly rollup in `usage_hourly`, maintained in the same transaction. Reports and per-key spend read only the
//! rollup, so they stay fast however many raw rows there are; the price is hour granularity.
//!
//! Submodules: `error` (StoreError), `keys` (key CRUD), `usage` (batch writes, checkpoint, spend), `report`
//! (usage reports and per-group totals), `requests` (the console's request log), `batches` (the Files and Batch
//! APIs' files, batches and finished lines), `migrations` (embedded schema).

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};

/// Runs `$body` once per backend with `$pool` bound to the concrete pool. The body is written once but type-checked
/// per dialect, which keeps the shared SQL honest without generic trait-bound gymnastics.
/// Run `$body` with the store's pool, after making sure its migrations ran (a store opened
/// lazily retries them here until the database is reachable).
macro_rules! with_pool {
    ($store:expr, |$pool:ident| $body:expr) => {{
        $store.ready().await?;
        match &$store.inner {
            $crate::store::Inner::Sqlite($pool) => $body,
            $crate::store::Inner::Postgres($pool) => $body,
        }
    }};
}

mod audit;
mod batches;
mod error;
mod experiments;
mod keys;
mod migrations;
mod orgs;
mod policies;
mod report;
mod requests;
mod usage;

/// key_id / user / team of the usage rollup rows summed over all keys.
pub use usage::ALL as ALL_KEYS;

pub use audit::{verify_run, AuditRow, Break, NewAudit, GENESIS};
pub use batches::{BatchRow, FileRow, LineRow};
pub use error::StoreError;
pub use experiments::{EventRow, PairRow, ScoreRow, StoredExperiment, Sums, UsageSums};
pub use policies::StoredPolicy;
pub use report::{Bucket, GroupBy, GroupScope, UsageBucket, UsageGroup, UsageQuery, UsageReport, UsageTotals};
pub use requests::{RequestQuery, RequestRow, StatusFilter};

/// How long a SQLite connection waits for another writer's lock before failing.
const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a caller waits for a pooled connection.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);
/// One writer (the usage batcher) and readers for key lookups and reports; WAL lets them overlap.
const SQLITE_MAX_CONNECTIONS: u32 = 2;
/// Page cache per SQLite connection, KiB: small, since the hot reads (keys) are cached above it.
const SQLITE_CACHE_KIB: i64 = 1024;
const POSTGRES_MAX_CONNECTIONS: u32 = 10;

/// The key and usage store. Cheap to clone: clones share one connection pool.
#[derive(Clone, Debug)]
pub struct Store {
    inner: Inner,
    /// Whose usage-journal checkpoint `write_usage_batch`/`journal_checkpoint` read and write.
    journal_id: Arc<str>,
    /// Set once the migrations have run on this database.
    migrated: Arc<tokio::sync::OnceCell<()>>,
}

#[derive(Clone, Debug)]
enum Inner {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

impl Store {
    /// Connects and applies pending migrations.
    ///
    /// - `sqlite://path/to/file.db` (or `sqlite:file.db`): the file is created if missing and opened in WAL mode
    ///   with `synchronous=NORMAL` and a busy timeout. `sqlite::memory:` gives a private in-memory database (for
    ///   tests; it lives as long as this store).
    /// - `postgres://user:pass@host:port/db` (or `postgresql://`): TLS via rustls when the URL asks for it
    ///   (`sslmode=require`), as sqlx's URL options describe.
    pub async fn connect(url: &str) -> Result<Store, StoreError> {
        let store = Store::open_lazy(url)?;
        store.ready().await?;
        Ok(store)
    }

    /// A store that connects (and migrates) on first use, so a gateway can start while its
    /// database is unreachable: usage waits in the journal, and every operation retries the
    /// connection. Only a malformed URL fails here.
    pub fn open_lazy(url: &str) -> Result<Store, StoreError> {
        let inner = if url.starts_with("sqlite:") {
            Inner::Sqlite(connect_sqlite(url)?)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Inner::Postgres(connect_postgres(url)?)
        } else {
            return Err(StoreError::Invalid("database URL must start with sqlite: or postgres://".into()));
        };
        Ok(Store { inner, journal_id: Arc::from("default"), migrated: Arc::default() })
    }

    /// Reachable and migrated (runs the migrations on the first successful call).
    pub async fn ready(&self) -> Result<(), StoreError> {
        self.migrated.get_or_try_init(|| self.migrate()).await.map(|_| ())
    }

    /// The same store, keeping the usage-journal checkpoint of journal `id` (one per gateway
    /// instance, so gateways sharing a database never overwrite each other's).
    pub fn for_journal(&self, id: &str) -> Store {
        Store { inner: self.inner.clone(), journal_id: Arc::from(id), migrated: self.migrated.clone() }
    }

    pub(crate) fn journal_id(&self) -> &str {
        &self.journal_id
    }

    /// `"sqlite"` or `"postgres"`.
    pub fn kind(&self) -> &'static str {
        match self.inner {
            Inner::Sqlite(_) => "sqlite",
            Inner::Postgres(_) => "postgres",
        }
    }

    /// Connections the pool holds open now (in use and idle).
    pub fn connections_open(&self) -> u32 {
        match &self.inner {
            Inner::Sqlite(pool) => pool.size(),
            Inner::Postgres(pool) => pool.size(),
        }
    }

    /// Bytes SQLite's allocator holds now (page caches, prepared statements), for every SQLite
    /// database in this process; `None` on PostgreSQL. Bounded by `cache_size` per connection: the
    /// soak tells a leak from a filling page cache with it.
    pub fn sqlite_heap_bytes(&self) -> Option<i64> {
        match &self.inner {
            Inner::Sqlite(_) => Some(sqlite_memory_used()),
            Inner::Postgres(_) => None,
        }
    }

    /// Closes the pool, waiting for checked-out connections to come back. Later calls fail.
    pub async fn close(&self) {
        match &self.inner {
            Inner::Sqlite(pool) => pool.close().await,
            Inner::Postgres(pool) => pool.close().await,
        }
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        match &self.inner {
            Inner::Sqlite(pool) => migrations::sqlite().await?.run(pool).await?,
            Inner::Postgres(pool) => migrations::postgres().await?.run(pool).await?,
        }
        Ok(())
    }
}

fn connect_sqlite(url: &str) -> Result<SqlitePool, StoreError> {
    let options = SqliteConnectOptions::from_str(url)?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(SQLITE_BUSY_TIMEOUT)
        .pragma("cache_size", format!("-{SQLITE_CACHE_KIB}"))
        .foreign_keys(true);
    let mut pool = SqlitePoolOptions::new().max_connections(SQLITE_MAX_CONNECTIONS).acquire_timeout(ACQUIRE_TIMEOUT);
    if url.contains(":memory:") || url.contains("mode=memory") {
        // A shared-cache in-memory database vanishes with its last connection: never let the pool reap them all.
        pool = pool.min_connections(1).idle_timeout(None).max_lifetime(None);
    }
    Ok(pool.connect_lazy_with(options))
}

/// SQLite's own count of the bytes it has allocated (`sqlite3_memory_used`; memory statistics are
/// on in the bundled build). No SQL function or pragma reports it.
#[allow(unsafe_code)]
fn sqlite_memory_used() -> i64 {
    // SAFETY: takes no arguments, touches no connection, and is thread-safe in this build
    // (SQLITE_THREADSAFE=1): it reads a counter under SQLite's own mutex.
    unsafe { libsqlite3_sys::sqlite3_memory_used() }
}

fn connect_postgres(url: &str) -> Result<PgPool, StoreError> {
    let options = PgConnectOptions::from_str(url)?.application_name("switchyard");
    let pool = PgPoolOptions::new().max_connections(POSTGRES_MAX_CONNECTIONS).acquire_timeout(ACQUIRE_TIMEOUT);
    Ok(pool.connect_lazy_with(options))
}

/// Converts a count to the signed 64-bit integer both databases store.
fn to_i64(value: u64, what: &str) -> Result<i64, StoreError> {
    i64::try_from(value).map_err(|_| StoreError::Invalid(format!("{what} does not fit in a signed 64-bit integer")))
}

/// Converts a stored signed integer back to a count; negative values mean a corrupt row.
fn to_u64(value: i64, what: &str) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|_| StoreError::Corrupt(format!("{what} is negative ({value})")))
}

/// Placeholder groups for a multi-row `VALUES` list: `rows` groups of `cols` each, numbered `$1, $2, ...` on
/// PostgreSQL and plain `?` on SQLite (same order). SQLite resolves each *named* parameter by a linear scan, so
/// `$N` costs O(n^2) over thousands of parameters: measured 18x slower loading 216k rows.
fn values_placeholders(sqlite: bool, rows: usize, cols: usize) -> String {
    let mut out = String::with_capacity(rows * cols * 6);
    for row in 0..rows {
        if row > 0 {
            out.push(',');
        }
        out.push('(');
        for col in 0..cols {
            if col > 0 {
                out.push(',');
            }
            if sqlite {
                out.push('?');
            } else {
                out.push('$');
                out.push_str(&(row * cols + col + 1).to_string());
            }
        }
        out.push(')');
    }
    out
}

/// The usage writer's sink: batches and the journal checkpoint, in one transaction.
impl crate::usage::UsageSink for Store {
    async fn write_batch(&self, records: &[crate::records::UsageRecord], checkpoint: u64) -> Result<u64, String> {
        self.write_usage_batch(records, checkpoint).await.map_err(|e| e.to_string())
    }

    async fn checkpoint(&self) -> Result<u64, String> {
        self.journal_checkpoint().await.map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_number_rows_consecutively() {
        assert_eq!(values_placeholders(false, 2, 3), "($1,$2,$3),($4,$5,$6)");
        assert_eq!(values_placeholders(false, 1, 1), "($1)");
        assert_eq!(values_placeholders(true, 2, 2), "(?,?),(?,?)");
    }

    #[test]
    fn integer_conversions_reject_out_of_range() {
        assert!(to_i64(u64::MAX, "x").is_err());
        assert_eq!(to_i64(7, "x").ok(), Some(7));
        assert!(to_u64(-1, "x").is_err());
    }

    #[tokio::test]
    async fn rejects_unknown_schemes() {
        let err = Store::connect("mysql://localhost/x").await.err();
        assert!(matches!(err, Some(StoreError::Invalid(_))));
    }
}
