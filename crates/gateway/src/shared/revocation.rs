//! Key changes reach every instance: a change made through one instance's admin API bumps a
//! version in Redis and publishes `version id` on a channel; every instance evicts that key
//! from its cache as the message arrives (well under a second). Pub/sub loses messages while a
//! subscriber is disconnected, so each instance also reads the version every second and, when
//! it moved past the last message it saw, forgets every cached key; a subscriber that
//! reconnects does the same. A revoked key is refused everywhere within a second, and within a
//! few seconds when the notification channel was cut.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use super::{listen, Shared, HEARTBEAT, PREFIX};

fn channel() -> String {
    format!("{PREFIX}keys")
}

fn version_key() -> String {
    format!("{PREFIX}keys:version")
}

/// No version seen yet.
const UNSEEN: u64 = u64::MAX;

/// Tell the fleet that key `id` changed (updated, revoked). Other instances keep a stale entry
/// for at most their cache's TTL when Redis cannot be reached now.
pub async fn announce(shared: &Shared, id: &str) {
    let script = redis::Script::new(
        r"
        local v = redis.call('INCR', KEYS[1])
        redis.call('PUBLISH', ARGV[1], v .. ' ' .. ARGV[2])
        return v
        ",
    );
    let (version, channel) = (version_key(), channel());
    let outcome = shared
        .call(|mut c| {
            let mut call = script.key(&version);
            call.arg(&channel).arg(id);
            async move { call.invoke_async::<u64>(&mut c).await }
        })
        .await;
    if let Err(e) = outcome {
        tracing::warn!(error = ?e, "could not announce a key change to the fleet; other instances see it when their cache entry expires");
    }
}

/// Tell the fleet that many keys changed at once (their team or user did): every instance
/// forgets its cached keys.
pub async fn announce_all(shared: &Shared) {
    announce(shared, "*").await;
}

/// Forget one cached key (`Some(id)`), or every cached key (`None`).
pub type Evict = Arc<dyn Fn(Option<&str>) + Send + Sync>;

/// Listen for key changes and check the version, until the process ends.
pub fn spawn(shared: Arc<Shared>, auth: Evict) -> Vec<tokio::task::JoinHandle<()>> {
    let seen = Arc::new(AtomicU64::new(UNSEEN));
    vec![tokio::spawn(subscribe(shared.clone(), auth.clone(), seen.clone())), tokio::spawn(poll(shared, auth, seen))]
}

async fn subscribe(shared: Arc<Shared>, evict: Evict, seen: Arc<AtomicU64>) {
    let on_reconnect = {
        let evict = evict.clone();
        move || {
            // Messages sent while we were away are lost: start from a clean cache.
            evict(None);
            tracing::info!("key-change channel reconnected; cached keys forgotten");
        }
    };
    let on_message = move |payload: &str| {
        let Some((version, id)) = payload.split_once(' ') else { return };
        // `*`: a change that reaches many keys (a team's limits), announced with `announce_all`.
        evict(Some(id).filter(|id| *id != "*"));
        if let Ok(version) = version.parse::<u64>() {
            // Only a message that follows the last one seen moves the mark; a gap is left for
            // the version check to find.
            let _ = seen.compare_exchange(version.wrapping_sub(1), version, Relaxed, Relaxed);
        }
    };
    listen(shared, channel(), on_message, on_reconnect).await
}

async fn poll(shared: Arc<Shared>, evict: Evict, seen: Arc<AtomicU64>) {
    let key = version_key();
    let mut tick = tokio::time::interval(HEARTBEAT);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let version = shared
            .call(|mut c| {
                let key = key.clone();
                async move { redis::cmd("GET").arg(&key).query_async::<Option<u64>>(&mut c).await }
            })
            .await;
        let Ok(version) = version else { continue };
        let version = version.unwrap_or(0);
        let last = seen.load(Relaxed);
        if last == UNSEEN {
            seen.store(version, Relaxed);
        } else if version > last {
            // Changes happened that no message told us about.
            evict(None);
            seen.store(version, Relaxed);
            tracing::info!(version, "missed key changes; cached keys forgotten");
        }
    }
}
