//! Cache affinity across a fleet: which backend each conversation is pinned to, shared through
//! Redis so its turns reach the same backend (and its warm KV cache) whichever instance receives
//! them. A conversation is its session key when the client sent one, else the digest of what it
//! re-sends at every turn (`http/parse.rs::conversation_root`). The record is
//! `switchyard:affinity:<model>:<conversation>` → backend name, expiring after
//! `routing.session_ttl` without a turn.
//!
//! Reading costs one round trip (GETEX: the value, and its expiry pushed back, at once); writing
//! happens only when a conversation is new or moves, and is never waited on. Without Redis (or
//! with its breaker open) each instance routes on its own tables, as a single gateway does.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use redis::AsyncCommands;

use super::{Shared, PREFIX};

fn key(model: &str, conversation: u64) -> String {
    format!("{PREFIX}affinity:{model}:{conversation:016x}")
}

fn ttl_ms(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// One request's conversation as the fleet knows it.
pub struct FleetPin {
    shared: Arc<Shared>,
    key: String,
    ttl_ms: u64,
    /// The backend (by name) the conversation is pinned to: the fleet's answer, then wherever
    /// this request went.
    pub backend: Option<String>,
}

impl FleetPin {
    /// Where the fleet has `conversation` pinned for `model`, refreshing the pin's expiry; no
    /// backend for a new conversation, and when Redis does not answer (routing goes on alone).
    pub async fn lookup(shared: &Arc<Shared>, model: &str, conversation: u64, ttl: Duration) -> FleetPin {
        let (key, ttl_ms) = (key(model, conversation), ttl_ms(ttl));
        let found = shared
            .call(|mut c| {
                let key = key.clone();
                async move { c.get_ex::<_, Option<String>>(key, redis::Expiry::PX(ttl_ms)).await }
            })
            .await;
        let counter = match &found {
            Ok(Some(_)) => Some(&shared.affinity_hits),
            Ok(None) => Some(&shared.affinity_misses),
            Err(_) => None,
        };
        if let Some(counter) = counter {
            counter.fetch_add(1, Relaxed);
        }
        FleetPin { shared: shared.clone(), key, ttl_ms, backend: found.ok().flatten() }
    }

    /// The request went to `backend`: when that is new (a new conversation, or one that moved),
    /// pin it there for the whole fleet, in the background — the request does not wait (the
    /// next turn is at least a round trip away).
    pub fn went_to(&mut self, backend: &str) {
        if self.backend.as_deref() == Some(backend) {
            return;
        }
        self.backend = Some(backend.to_owned());
        let (shared, key, backend, ttl) = (self.shared.clone(), self.key.clone(), backend.to_owned(), self.ttl_ms);
        tokio::spawn(async move {
            let _ = shared
                .call(|mut c| {
                    let (key, backend) = (key.clone(), backend.clone());
                    async move { c.pset_ex::<_, _, ()>(key, backend, ttl).await }
                })
                .await;
        });
    }
}
