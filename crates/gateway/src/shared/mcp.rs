//! The MCP gateway across a fleet (issue 59): each instance takes a tag unique among the fleet's
//! (`INCR` on one Redis counter) and listens on a channel of its own; a client's answer to a
//! server request, or an `input_required` retry, that reached another instance is published to the
//! tagged instance's channel (`switchyard_mcp::fleet` decides what and when). Handling is bounded:
//! past `MAX_HANDLING` messages at once, more are dropped and counted.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use switchyard_mcp::fleet::{Fleet, MAX_TAG};
use switchyard_mcp::upstream::BoxFuture;

use super::{listen, Shared, PREFIX};

/// Forwarded messages handled at once (a resumed call's lasts as long as the call).
const MAX_HANDLING: usize = 1024;

fn channel(tag: u32) -> String {
    format!("{PREFIX}mcp:{tag:05x}")
}

pub struct RedisFleet {
    shared: Arc<Shared>,
    tag: u32,
}

impl RedisFleet {
    /// This instance's place in the fleet: a tag from the fleet's counter (a random one while
    /// Redis cannot be reached: unique with high odds).
    pub async fn join(shared: Arc<Shared>) -> RedisFleet {
        let counter = format!("{PREFIX}mcp:tags");
        let next = shared
            .call(|mut c| {
                let mut incr = redis::cmd("INCR");
                incr.arg(&counter);
                async move { incr.query_async::<u64>(&mut c).await }
            })
            .await;
        let n = next.unwrap_or_else(|e| {
            tracing::warn!(error = ?e, "no MCP fleet tag from Redis: a random one is used");
            u64::from(rand::random::<u32>())
        });
        let tag = u32::try_from(n % u64::from(MAX_TAG)).unwrap_or(0) + 1;
        RedisFleet { shared, tag }
    }
}

impl Fleet for RedisFleet {
    fn tag(&self) -> u32 {
        self.tag
    }

    fn send(&self, tag: u32, message: String) -> BoxFuture<'static, Result<usize, String>> {
        let shared = self.shared.clone();
        Box::pin(async move {
            let channel = channel(tag);
            let sent = shared
                .call(|mut c| {
                    let mut publish = redis::cmd("PUBLISH");
                    publish.arg(&channel).arg(&message);
                    async move { publish.query_async::<i64>(&mut c).await }
                })
                .await;
            sent.map(|n| usize::try_from(n).unwrap_or(0)).map_err(|e| format!("{e:?}"))
        })
    }
}

/// Take what other instances forward to `tag` until the process ends.
pub fn spawn(shared: Arc<Shared>, tag: u32, front: Arc<switchyard_mcp::Front>) -> tokio::task::JoinHandle<()> {
    let handling = Arc::new(AtomicUsize::new(0));
    let on_message = move |payload: &str| {
        if handling.fetch_add(1, Relaxed) >= MAX_HANDLING {
            handling.fetch_sub(1, Relaxed);
            tracing::warn!("too many forwarded MCP messages at once: one was dropped");
            return;
        }
        let (front, handling, payload) = (front.clone(), handling.clone(), payload.to_owned());
        tokio::spawn(async move {
            front.deliver(&payload).await;
            handling.fetch_sub(1, Relaxed);
        });
    };
    tokio::spawn(listen(shared, channel(tag), on_message, || {}))
}
