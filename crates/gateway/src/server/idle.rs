//! Driving one client connection to its end: it is shut down gracefully (HTTP/2: GOAWAY, and
//! requests and streams in flight finish) when the server drains, or when no new request came
//! for `timeouts.connection_idle`. HTTP/2 has no head-read clock, and its keep-alive PINGs only
//! catch a client that stopped answering: one that answers them but never sends a request would
//! otherwise hold its connection, and a slot of `limits.max_connections`, forever.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// When a connection last started a request (one relaxed store per request).
#[derive(Clone)]
pub struct Activity {
    opened: Instant,
    /// Milliseconds after `opened`.
    last_request: Arc<AtomicU64>,
}

impl Activity {
    pub fn new() -> Activity {
        Activity { opened: Instant::now(), last_request: Arc::new(AtomicU64::new(0)) }
    }

    pub fn request(&self) {
        self.last_request.store(self.opened.elapsed().as_millis() as u64, Relaxed);
    }

    /// How long since the last request started (or the connection opened).
    pub fn quiet(&self) -> Duration {
        self.opened.elapsed().saturating_sub(Duration::from_millis(self.last_request.load(Relaxed)))
    }
}

/// The future that serves connection `$conn` until it ends, shutting it down gracefully when
/// `$draining` (a `watch::Receiver`) changes or is closed, or after `$idle` without a request
/// (`$activity`). A macro, not a function: hyper-util's connection types name their service
/// and executor bounds in crate-private traits.
macro_rules! drive {
    ($conn:expr, $draining:expr, $activity:expr, $idle:expr) => {{
        // The connection boxed: its future is kilobytes, and the spawn would copy them all.
        let (mut conn, mut draining, activity, idle) = (Box::pin($conn), $draining, $activity, $idle);
        async move {
            let timer = tokio::time::sleep(idle);
            tokio::pin!(timer);
            let mut closing = false;
            loop {
                tokio::select! {
                    outcome = conn.as_mut() => {
                        if let Err(e) = outcome {
                            tracing::debug!(error = %e, "connection ended with an error");
                        }
                        break;
                    }
                    _ = draining.changed(), if !closing => {
                        closing = true;
                        conn.as_mut().graceful_shutdown();
                    }
                    _ = &mut timer, if !closing => {
                        let quiet = activity.quiet();
                        if quiet >= idle {
                            closing = true;
                            conn.as_mut().graceful_shutdown();
                        } else {
                            timer.as_mut().reset(tokio::time::Instant::now() + (idle - quiet));
                        }
                    }
                }
            }
            drop(draining);
        }
    }};
}
pub(crate) use drive;
