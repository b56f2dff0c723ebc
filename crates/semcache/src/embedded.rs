//! The embedded store: every partition's index in this process, the entries persisted to a
//! SQLite file (next to the gateway's database) and loaded again at start, so a restart keeps
//! them. Bounded by `max_entries` (the oldest go first) and by each entry's expiry.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use sqlx::{Row, SqlitePool};

use crate::index::PartitionIndex;
use crate::store::{vector_bytes, vector_from_bytes, Candidate, Entry, Store, StoreError};
use crate::Partition;

pub struct EmbeddedStore {
    inner: RwLock<Inner>,
    max_entries: usize,
    db: Option<SqlitePool>,
    held: AtomicUsize,
    /// Set once the entries read at `open` are indexed.
    loaded: tokio::sync::watch::Sender<bool>,
}

#[derive(Default)]
struct Inner {
    partitions: HashMap<Partition, PartitionIndex>,
    entries: HashMap<u64, Arc<Entry>>,
    /// Ids in the order they were stored: the oldest is evicted first, and (one `ttl` for all)
    /// expires first.
    order: VecDeque<u64>,
}

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS semantic_cache (id INTEGER PRIMARY KEY, partition BLOB NOT NULL, \
                      vector BLOB NOT NULL, question TEXT NOT NULL, answer BLOB NOT NULL, stored_ms INTEGER NOT NULL, \
                      expires_ms INTEGER NOT NULL)";

impl EmbeddedStore {
    /// In memory only (`path` None), or persisted to the SQLite file at `path`, whose living
    /// entries are read now and indexed in the background (a graph of 100k entries takes about
    /// a minute to build: the gateway serves meanwhile, those entries not yet found).
    pub async fn open(path: Option<&Path>, max_entries: usize, now_ms: i64) -> Result<Arc<EmbeddedStore>, StoreError> {
        let (loaded, _) = tokio::sync::watch::channel(false);
        let store = EmbeddedStore {
            inner: RwLock::new(Inner::default()),
            max_entries: max_entries.max(1),
            db: None,
            held: AtomicUsize::new(0),
            loaded,
        };
        let Some(path) = path else {
            store.loaded.send_replace(true);
            return Ok(Arc::new(store));
        };
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(std::time::Duration::from_secs(5));
        let db = SqlitePoolOptions::new().max_connections(2).connect_with(options).await?;
        sqlx::query(SCHEMA).execute(&db).await?;
        sqlx::query("DELETE FROM semantic_cache WHERE expires_ms <= ?").bind(now_ms).execute(&db).await?;
        let rows = sqlx::query(
            "SELECT id, partition, vector, question, answer, stored_ms, expires_ms FROM semantic_cache ORDER BY stored_ms",
        )
        .fetch_all(&db)
        .await?;
        let entries: Vec<Entry> = rows.iter().filter_map(entry_of).collect();
        let store = Arc::new(EmbeddedStore { db: Some(db), ..store });
        let (loading, shown) = (store.clone(), path.display().to_string());
        tokio::task::spawn_blocking(move || {
            let count = entries.len();
            for entry in entries {
                loading.hold(entry);
            }
            loading.loaded.send_replace(true);
            tracing::info!(entries = count, path = %shown, "semantic cache loaded");
        });
        Ok(store)
    }

    /// Wait until the entries found at `open` are indexed.
    pub async fn loaded(&self) {
        let mut watch = self.loaded.subscribe();
        let _ = watch.wait_for(|done| *done).await;
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Add `entry` in memory; the ids evicted to stay within `max_entries`.
    fn hold(&self, entry: Entry) -> Vec<u64> {
        let mut inner = self.write();
        let dim = entry.vector.len();
        let id = entry.id;
        inner.partitions.entry(entry.partition).or_insert_with(|| PartitionIndex::new(dim)).insert(id, &entry.vector);
        inner.entries.insert(id, Arc::new(entry));
        inner.order.push_back(id);
        let mut evicted = Vec::new();
        while inner.entries.len() > self.max_entries {
            let Some(old) = inner.order.pop_front() else { break };
            inner.forget(old);
            evicted.push(old);
        }
        self.held.store(inner.entries.len(), Relaxed);
        evicted
    }

    /// Drop entries that expired (the oldest first, up to the first still living).
    fn expire(&self, now_ms: i64) -> Vec<u64> {
        let mut inner = self.write();
        let mut expired = Vec::new();
        while let Some(&old) = inner.order.front() {
            if inner.entries.get(&old).is_some_and(|e| e.expires_ms > now_ms) {
                break;
            }
            inner.order.pop_front();
            inner.forget(old);
            expired.push(old);
        }
        self.held.store(inner.entries.len(), Relaxed);
        expired
    }

    async fn delete(&self, ids: &[u64]) -> Result<(), StoreError> {
        let Some(db) = &self.db else { return Ok(()) };
        for id in ids {
            sqlx::query("DELETE FROM semantic_cache WHERE id = ?").bind(*id as i64).execute(db).await?;
        }
        Ok(())
    }
}

impl Inner {
    fn forget(&mut self, id: u64) {
        if let Some(entry) = self.entries.remove(&id) {
            if let Some(index) = self.partitions.get_mut(&entry.partition) {
                index.remove(id);
                if index.is_empty() {
                    self.partitions.remove(&entry.partition);
                }
            }
        }
    }
}

fn entry_of(row: &sqlx::sqlite::SqliteRow) -> Option<Entry> {
    let partition: Vec<u8> = row.try_get("partition").ok()?;
    let vector: Vec<u8> = row.try_get("vector").ok()?;
    let answer: Vec<u8> = row.try_get("answer").ok()?;
    Some(Entry {
        id: row.try_get::<i64, _>("id").ok()? as u64,
        partition: Partition(partition.try_into().ok()?),
        vector: vector_from_bytes(&vector),
        question: row.try_get("question").ok()?,
        answer: Bytes::from(answer),
        stored_ms: row.try_get("stored_ms").ok()?,
        expires_ms: row.try_get("expires_ms").ok()?,
    })
}

#[async_trait::async_trait]
impl Store for EmbeddedStore {
    async fn search(
        &self,
        partition: &Partition,
        vector: &[f32],
        k: usize,
        min_similarity: f32,
        now_ms: i64,
    ) -> Result<Vec<Candidate>, StoreError> {
        let inner = self.inner.read().unwrap_or_else(|p| p.into_inner());
        let Some(index) = inner.partitions.get(partition) else { return Ok(Vec::new()) };
        Ok(index
            .search(vector, k)
            .into_iter()
            .filter(|(_, similarity)| *similarity >= min_similarity)
            .filter_map(|(id, similarity)| {
                let entry = inner.entries.get(&id).filter(|e| e.expires_ms > now_ms)?;
                Some(Candidate { entry: entry.clone(), similarity })
            })
            .collect())
    }

    async fn insert(&self, entry: Entry) -> Result<(), StoreError> {
        let mut gone = self.expire(entry.stored_ms);
        if let Some(db) = &self.db {
            sqlx::query(
                "INSERT OR REPLACE INTO semantic_cache (id, partition, vector, question, answer, stored_ms, expires_ms) \
                 VALUES (?, ?, ?, ?, ?, ?, ?)",
            )
            .bind(entry.id as i64)
            .bind(&entry.partition.0[..])
            .bind(vector_bytes(&entry.vector))
            .bind(&entry.question)
            .bind(&entry.answer[..])
            .bind(entry.stored_ms)
            .bind(entry.expires_ms)
            .execute(db)
            .await?;
        }
        gone.extend(self.hold(entry));
        self.delete(&gone).await
    }

    fn len(&self) -> usize {
        self.held.load(Relaxed)
    }

    fn kind(&self) -> &'static str {
        "embedded"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PartitionBuilder;

    fn partition(name: &str) -> Partition {
        let mut b = PartitionBuilder::default();
        b.part("key", name.as_bytes());
        b.finish()
    }

    fn entry(id: u64, partition: Partition, vector: Vec<f32>, stored_ms: i64) -> Entry {
        Entry {
            id,
            partition,
            vector,
            question: format!("q{id}"),
            answer: Bytes::from(format!("a{id}")),
            stored_ms,
            expires_ms: stored_ms + 1000,
        }
    }

    #[tokio::test]
    async fn searches_stay_inside_their_partition() {
        let store = EmbeddedStore::open(None, 100, 0).await.unwrap();
        store.insert(entry(1, partition("a"), vec![1.0, 0.0], 10)).await.unwrap();
        store.insert(entry(2, partition("b"), vec![1.0, 0.0], 10)).await.unwrap();
        let found = store.search(&partition("a"), &[1.0, 0.0], 4, -1.0, 20).await.unwrap();
        assert_eq!(found.iter().map(|c| c.entry.id).collect::<Vec<_>>(), [1]);
        assert!(store.search(&partition("c"), &[1.0, 0.0], 4, -1.0, 20).await.unwrap().is_empty());
        assert!(store.search(&partition("a"), &[1.0, 0.0], 4, -1.0, 2000).await.unwrap().is_empty(), "expired");
        assert!(store.search(&partition("a"), &[0.0, 1.0], 4, 0.5, 20).await.unwrap().is_empty(), "below threshold");
    }

    #[tokio::test]
    async fn the_oldest_entries_go_past_max_entries() {
        let store = EmbeddedStore::open(None, 2, 0).await.unwrap();
        for id in 1..=3 {
            store.insert(entry(id, partition("a"), vec![1.0, id as f32 / 10.0], 10)).await.unwrap();
        }
        assert_eq!(store.len(), 2);
        let found = store.search(&partition("a"), &[1.0, 0.1], 4, -1.0, 20).await.unwrap();
        assert!(found.iter().all(|c| c.entry.id != 1));
    }

    #[tokio::test]
    async fn a_reopened_store_has_its_living_entries() {
        let path = std::env::temp_dir().join(format!("semcache-test-{}.sqlite", std::process::id()));
        let _ = std::fs::remove_file(&path);
        {
            let store = EmbeddedStore::open(Some(&path), 100, 0).await.unwrap();
            store.insert(entry(1, partition("a"), vec![1.0, 0.0], 10)).await.unwrap();
            store.insert(entry(2, partition("a"), vec![0.0, 1.0], 5000)).await.unwrap();
        }
        let store = EmbeddedStore::open(Some(&path), 100, 2000).await.unwrap();
        store.loaded().await;
        assert_eq!(store.len(), 1, "the entry that expired is not loaded");
        let found = store.search(&partition("a"), &[0.0, 1.0], 4, 0.5, 2000).await.unwrap();
        assert_eq!(found[0].entry.question, "q2");
        assert_eq!(&found[0].entry.answer[..], b"a2");
        let _ = std::fs::remove_file(&path);
    }
}
