//! One runner per batch in a fleet: an instance claims a batch in the database before running it
//! and renews the claim every third of its life while it runs; a batch claimed by another live
//! instance is left to it, and a dead runner's batch is taken over once its claim lapses. Lines
//! are exactly-once by `custom_id` either way; the claim keeps them from being *sent* twice.
//!
//! An instance without Redis is alone on its database by configuration: it takes every batch
//! over at once, so a restarted gateway carries on without waiting out its old life's claim.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::app::App;
use crate::store::Store;

/// How long a claim lasts unless renewed.
const LIFE: Duration = Duration::from_secs(15);

/// This process's name as a batch runner: its fleet instance id, else one of its own.
fn runner(app: &App) -> String {
    static OWN: OnceLock<String> = OnceLock::new();
    match &app.shared {
        Some(shared) => shared.instance.clone(),
        None => OWN
            .get_or_init(|| {
                let mut id = [0u8; 8];
                let _ = getrandom::getrandom(&mut id);
                id.iter().map(|b| format!("{b:02x}")).collect()
            })
            .clone(),
    }
}

/// A held claim on a batch, renewed until dropped.
pub struct Claim {
    lost: Arc<AtomicBool>,
    renewer: tokio::task::JoinHandle<()>,
}

impl Claim {
    /// Claim `batch` for this instance: None when another instance holds it.
    pub async fn take(app: &App, store: &Store, batch: &str) -> Result<Option<Claim>, String> {
        let (me, alone) = (runner(app), app.shared.is_none());
        if !claim(app, store, batch, &me, alone).await? {
            return Ok(None);
        }
        let lost = Arc::new(AtomicBool::new(false));
        let (store, batch, clock, flag) = (store.clone(), batch.to_owned(), app.clock.clone(), lost.clone());
        let renewer = tokio::spawn(async move {
            loop {
                tokio::time::sleep(LIFE / 3).await;
                let until = clock.unix_ms() + LIFE.as_millis() as i64;
                match store.claim_batch(&batch, &me, clock.unix_ms(), until, alone).await {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::warn!(batch, "another instance took this batch over; it stops here");
                        flag.store(true, Relaxed);
                        return;
                    }
                    // The database is away for a moment: the claim still holds until it lapses.
                    Err(e) => tracing::warn!(batch, error = %e, "could not renew the claim on a batch"),
                }
            }
        });
        Ok(Some(Claim { lost, renewer }))
    }

    /// Whether another instance has taken the batch over.
    pub fn lost(&self) -> bool {
        self.lost.load(Relaxed)
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.renewer.abort();
    }
}

async fn claim(app: &App, store: &Store, batch: &str, me: &str, alone: bool) -> Result<bool, String> {
    let now = app.clock.unix_ms();
    store.claim_batch(batch, me, now, now + LIFE.as_millis() as i64, alone).await.map_err(|e| e.to_string())
}
