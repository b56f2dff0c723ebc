//! The audit log's rows (`audit_log`, migration 0010), chained: each entry's `hash` is SHA-256
//! over the previous entry's hash and this entry's fields exactly as stored (length-prefixed, so
//! no two entries hash alike), which makes an edited or removed entry detectable. Appends take
//! the table's write lock (`BEGIN IMMEDIATE` on SQLite, `LOCK TABLE` on PostgreSQL), so a fleet
//! sharing one database still writes one chain in one order.

use sha2::{Digest, Sha256};

use super::{Inner, Store, StoreError};

/// The hash the first entry chains from.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// An entry to append: who did what to which, the record before and after (JSON, secrets never
/// included), and from which client address.
#[derive(Debug, Clone, Default)]
pub struct NewAudit {
    pub ts_ms: i64,
    pub actor: String,
    pub action: String,
    pub target: String,
    pub before: Option<String>,
    pub after: Option<String>,
    pub client: Option<String>,
}

/// An entry as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditRow {
    pub seq: i64,
    pub ts_ms: i64,
    pub actor: String,
    pub action: String,
    pub target: String,
    pub before: Option<String>,
    pub after: Option<String>,
    pub client: Option<String>,
    pub prev_hash: String,
    pub hash: String,
}

type Row = (i64, i64, String, String, String, Option<String>, Option<String>, Option<String>, String, String);

const COLUMNS: &str = "seq, ts_ms, actor, action, target, before, after, client, prev_hash, hash";

impl AuditRow {
    /// The entry as the admin API and the export sinks show it (`before`/`after` as JSON).
    pub fn to_json(&self) -> serde_json::Value {
        let parsed = |t: &Option<String>| {
            t.as_deref().map(|t| serde_json::from_str::<serde_json::Value>(t).unwrap_or_else(|_| t.into()))
        };
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(u64::try_from(self.ts_ms).unwrap_or(0));
        serde_json::json!({
            "seq": self.seq, "time": humantime::format_rfc3339_seconds(at).to_string(), "ts_ms": self.ts_ms,
            "actor": self.actor, "action": self.action, "target": self.target, "before": parsed(&self.before),
            "after": parsed(&self.after), "client": self.client, "prev_hash": self.prev_hash, "hash": self.hash,
        })
    }

    fn from_row((seq, ts_ms, actor, action, target, before, after, client, prev_hash, hash): Row) -> AuditRow {
        AuditRow { seq, ts_ms, actor, action, target, before, after, client, prev_hash, hash }
    }

    /// What this entry's hash must be, from its fields and `prev_hash`.
    pub fn expected_hash(&self) -> String {
        let mut h = Sha256::new();
        h.update(self.prev_hash.as_bytes());
        let (seq, ts) = (self.seq.to_string(), self.ts_ms.to_string());
        let fields = [
            Some(seq.as_str()),
            Some(ts.as_str()),
            Some(self.actor.as_str()),
            Some(self.action.as_str()),
            Some(self.target.as_str()),
            self.before.as_deref(),
            self.after.as_deref(),
            self.client.as_deref(),
        ];
        for field in fields {
            // Absent and empty differ: `-` for none, the length then the bytes for a value.
            match field {
                None => h.update(b"|-"),
                Some(v) => {
                    h.update(format!("|{}:", v.len()).as_bytes());
                    h.update(v.as_bytes());
                }
            }
        }
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// Read the chain's end and append `e` after it, on one connection inside the caller's lock.
macro_rules! append_on {
    ($conn:expr, $e:expr) => {{
        let last: Option<(i64, String)> = sqlx::query_as("SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1")
            .fetch_optional(&mut *$conn)
            .await?;
        let (seq, prev_hash) = last.map_or((1, GENESIS.to_owned()), |(seq, hash)| (seq + 1, hash));
        let e = $e;
        let mut row = AuditRow {
            seq,
            ts_ms: e.ts_ms,
            actor: e.actor,
            action: e.action,
            target: e.target,
            before: e.before,
            after: e.after,
            client: e.client,
            prev_hash,
            hash: String::new(),
        };
        row.hash = row.expected_hash();
        let sql = format!("INSERT INTO audit_log ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)");
        sqlx::query(&sql)
            .bind(row.seq)
            .bind(row.ts_ms)
            .bind(&row.actor)
            .bind(&row.action)
            .bind(&row.target)
            .bind(&row.before)
            .bind(&row.after)
            .bind(&row.client)
            .bind(&row.prev_hash)
            .bind(&row.hash)
            .execute(&mut *$conn)
            .await?;
        Ok::<AuditRow, StoreError>(row)
    }};
}

impl Store {
    /// Append one entry to the chain; the entry as stored.
    pub async fn append_audit(&self, e: NewAudit) -> Result<AuditRow, StoreError> {
        self.ready().await?;
        match &self.inner {
            Inner::Sqlite(pool) => {
                let mut conn = pool.acquire().await?;
                // The write lock before the read: no other writer can append between them.
                sqlx::query("BEGIN IMMEDIATE").execute(&mut *conn).await?;
                let appended = async { append_on!(conn, e) }.await;
                let end = if appended.is_ok() { "COMMIT" } else { "ROLLBACK" };
                sqlx::query(end).execute(&mut *conn).await?;
                appended
            }
            Inner::Postgres(pool) => {
                let mut tx = pool.begin().await?;
                sqlx::query("LOCK TABLE audit_log IN EXCLUSIVE MODE").execute(&mut *tx).await?;
                let row = append_on!(tx, e)?;
                tx.commit().await?;
                Ok(row)
            }
        }
    }

    /// Up to `limit` entries with `seq` below `before` (all when None), newest first.
    pub async fn audit_page(&self, before: Option<i64>, limit: i64) -> Result<Vec<AuditRow>, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM audit_log WHERE seq < $1 ORDER BY seq DESC LIMIT $2");
        let rows: Vec<Row> = with_pool!(self, |pool| sqlx::query_as(&sql)
            .bind(before.unwrap_or(i64::MAX))
            .bind(limit)
            .fetch_all(pool)
            .await?);
        Ok(rows.into_iter().map(AuditRow::from_row).collect())
    }

    /// Up to `limit` entries with `seq` above `after`, oldest first (for walking the chain).
    pub async fn audit_from(&self, after: i64, limit: i64) -> Result<Vec<AuditRow>, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM audit_log WHERE seq > $1 ORDER BY seq LIMIT $2");
        let rows: Vec<Row> =
            with_pool!(self, |pool| sqlx::query_as(&sql).bind(after).bind(limit).fetch_all(pool).await?);
        Ok(rows.into_iter().map(AuditRow::from_row).collect())
    }
}

impl Store {
    /// How far the export sink `sink` has taken the audit log (0: nothing yet).
    pub async fn audit_export_seq(&self, sink: &str) -> Result<i64, StoreError> {
        let sql = "SELECT seq FROM audit_exports WHERE sink = $1";
        let seq: Option<(i64,)> = with_pool!(self, |pool| sqlx::query_as(sql).bind(sink).fetch_optional(pool).await?);
        Ok(seq.map_or(0, |(s,)| s))
    }

    /// How far each export sink has taken the audit log: (sink, last entry delivered).
    pub async fn audit_export_marks(&self) -> Result<Vec<(String, i64)>, StoreError> {
        let sql = "SELECT sink, seq FROM audit_exports ORDER BY sink";
        Ok(with_pool!(self, |pool| sqlx::query_as(sql).fetch_all(pool).await?))
    }

    /// Move `sink` from `from` to `to`; false if another instance moved it first.
    pub async fn advance_audit_export(&self, sink: &str, from: i64, to: i64) -> Result<bool, StoreError> {
        let sql = "INSERT INTO audit_exports (sink, seq) VALUES ($1, $3) \
                   ON CONFLICT (sink) DO UPDATE SET seq = excluded.seq WHERE audit_exports.seq = $2";
        let moved = with_pool!(self, |pool| sqlx::query(sql)
            .bind(sink)
            .bind(from)
            .bind(to)
            .execute(pool)
            .await?
            .rows_affected());
        Ok(moved > 0)
    }
}

/// Where a chain breaks: the first entry whose hash, or link to the one before, is wrong.
#[derive(Debug, PartialEq)]
pub struct Break {
    pub seq: i64,
    pub why: &'static str,
}

/// Check a run of entries (oldest first) that follows an entry with hash `prev` and number
/// `prev_seq`: the end of the run to continue from, or the first break.
pub fn verify_run(prev: (i64, String), rows: &[AuditRow]) -> Result<(i64, String), Break> {
    let (mut seq, mut hash) = prev;
    for row in rows {
        if row.seq != seq + 1 {
            return Err(Break { seq: seq + 1, why: "an entry is missing" });
        }
        if row.prev_hash != hash {
            return Err(Break { seq: row.seq, why: "it does not follow the entry before it" });
        }
        if row.expected_hash() != row.hash {
            return Err(Break { seq: row.seq, why: "its fields do not match its hash (edited)" });
        }
        (seq, hash) = (row.seq, row.hash.clone());
    }
    Ok((seq, hash))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(seq: i64, prev: &str, after: &str) -> AuditRow {
        let mut r = AuditRow {
            seq,
            ts_ms: 1000 + seq,
            actor: "master key".into(),
            action: "key.update".into(),
            target: "k1".into(),
            before: None,
            after: Some(after.into()),
            client: Some("127.0.0.1".into()),
            prev_hash: prev.into(),
            hash: String::new(),
        };
        r.hash = r.expected_hash();
        r
    }

    #[test]
    fn a_chain_verifies_and_any_edit_or_gap_breaks_it() {
        let a = row(1, GENESIS, r#"{"rpm":1}"#);
        let b = row(2, &a.hash, r#"{"rpm":2}"#);
        let c = row(3, &b.hash, r#"{"rpm":3}"#);
        let start = (0, GENESIS.to_owned());
        assert_eq!(verify_run(start.clone(), &[a.clone(), b.clone(), c.clone()]), Ok((3, c.hash.clone())));
        let mut edited = b.clone();
        edited.after = Some(r#"{"rpm":20}"#.into());
        assert_eq!(verify_run(start.clone(), &[a.clone(), edited, c.clone()]).unwrap_err().seq, 2);
        assert_eq!(verify_run(start.clone(), &[a.clone(), c.clone()]).unwrap_err().why, "an entry is missing");
        // A value moved between fields is not the same entry.
        let mut moved = a.clone();
        (moved.before, moved.after) = (moved.after.take(), None);
        assert_ne!(moved.expected_hash(), a.hash);
    }
}
