//! `StoreError`: what can go wrong in the store, in a few kinds callers can act on.
//!
//! Display is meant for logs: it never includes SQL text or bound values (sqlx errors don't either). Clients should
//! get a generic message; `kind()` gives a short, metric-safe label.

use std::fmt;

/// An error from [`Store`](super::Store).
#[derive(Debug)]
pub enum StoreError {
    /// A row with that primary key already exists (e.g. `insert_key` with a used id).
    Conflict,
    /// The caller passed something the store cannot represent (bad URL scheme, a count above `i64::MAX`).
    Invalid(String),
    /// A stored row could not be decoded (negative count, malformed JSON list).
    Corrupt(String),
    /// Applying the embedded migrations failed.
    Migrate(sqlx::migrate::MigrateError),
    /// The database or the connection to it failed.
    Database(sqlx::Error),
}

impl StoreError {
    /// Short label for metrics and log fields.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Conflict => "conflict",
            StoreError::Invalid(_) => "invalid",
            StoreError::Corrupt(_) => "corrupt",
            StoreError::Migrate(_) => "migrate",
            StoreError::Database(_) => "database",
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Conflict => f.write_str("a record with this id already exists"),
            StoreError::Invalid(what) => write!(f, "invalid store input: {what}"),
            StoreError::Corrupt(what) => write!(f, "corrupt stored row: {what}"),
            StoreError::Migrate(err) => write!(f, "database migration failed: {err}"),
            StoreError::Database(err) => write!(f, "database error: {err}"),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StoreError::Migrate(err) => Some(err),
            StoreError::Database(err) => Some(err),
            _ => None,
        }
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(err: sqlx::Error) -> Self {
        let unique = err.as_database_error().is_some_and(|db| db.is_unique_violation());
        if unique {
            StoreError::Conflict
        } else {
            StoreError::Database(err)
        }
    }
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(err: sqlx::migrate::MigrateError) -> Self {
        StoreError::Migrate(err)
    }
}
