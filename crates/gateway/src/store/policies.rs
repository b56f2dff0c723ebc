//! The organisation's policy rules written through `/admin/policies` (issue 58): one row per
//! rule, in the order they are evaluated (after the configuration's).

use super::{Store, StoreError};

/// A rule written through `/admin/policies`.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredPolicy {
    pub name: String,
    /// Rules are evaluated by position, then name.
    pub position: i64,
    /// The rule as JSON, in the configuration's shape.
    pub spec: String,
    pub created_by: Option<String>,
    pub created_ms: i64,
    pub updated_ms: i64,
}

impl Store {
    /// Every stored rule, in the order they are evaluated.
    pub async fn list_policies(&self) -> Result<Vec<StoredPolicy>, StoreError> {
        let sql = "SELECT name, position, spec, created_by, created_ms, updated_ms FROM policies \
                   ORDER BY position, name";
        type Tuple = (String, i64, String, Option<String>, i64, i64);
        let rows: Vec<Tuple> = with_pool!(self, |pool| sqlx::query_as(sql).fetch_all(pool).await?);
        Ok(rows
            .into_iter()
            .map(|(name, position, spec, created_by, created_ms, updated_ms)| StoredPolicy {
                name,
                position,
                spec,
                created_by,
                created_ms,
                updated_ms,
            })
            .collect())
    }

    /// Create or replace (the creation time and author of a replaced one stay).
    pub async fn put_policy(&self, p: &StoredPolicy) -> Result<(), StoreError> {
        let sql = "INSERT INTO policies (name, position, spec, created_by, created_ms, updated_ms) \
                   VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (name) DO UPDATE SET \
                   position = excluded.position, spec = excluded.spec, updated_ms = excluded.updated_ms";
        with_pool!(self, |pool| {
            sqlx::query(sql)
                .bind(&p.name)
                .bind(p.position)
                .bind(&p.spec)
                .bind(&p.created_by)
                .bind(p.created_ms)
                .bind(p.updated_ms)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// Whether one was deleted.
    pub async fn delete_policy(&self, name: &str) -> Result<bool, StoreError> {
        let sql = "DELETE FROM policies WHERE name = $1";
        let done = with_pool!(self, |pool| sqlx::query(sql).bind(name).execute(pool).await?.rows_affected());
        Ok(done > 0)
    }
}
