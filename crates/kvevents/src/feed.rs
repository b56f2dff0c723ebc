//! One engine's event feed: a ZeroMQ SUB on its publisher and a DEALER on its replay socket,
//! keeping the index in step with what the engine says it holds.
//!
//! Messages are `[topic, seq (8 bytes, big-endian), payload]`. On connect and on every reconnect
//! the replay socket is asked for everything after the last batch applied (`[b"", start_seq]`,
//! answered batch by batch, with or without a topic frame, up to a `-1` end mark); so is every
//! stretch a skipped `seq` shows was missed. A feed that is not connected and caught up is not
//! live: routing treats its backend as unknown (the estimate decides), not as empty. An engine
//! that restarted (its cache gone, its numbering from 0) shows as a `seq` going back below what
//! the last catch-up replayed, or as a reconnect whose replay no longer has the last batch
//! applied: what it held is forgotten.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures_util::StreamExt;
use zeromq::{DealerSocket, Socket, SocketEvent, SocketRecv, SocketSend, SubSocket, ZmqMessage};

use crate::index::KvIndex;
use crate::wire;

/// Where an engine publishes (its `--kv-events-config` values).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedConfig {
    /// The PUB socket, `tcp://host:5557`.
    pub endpoint: String,
    /// The ROUTER socket answering replay requests, `tcp://host:5558`.
    pub replay_endpoint: Option<String>,
    pub topic: String,
    /// Tokens per block, for events that do not carry it.
    pub block_size: usize,
}

/// What a feed has done, for `/metrics` and the console.
#[derive(Debug, Default)]
pub struct FeedStats {
    pub received: AtomicU64,
    pub applied: AtomicU64,
    /// Stored blocks under a parent the index never saw (not keyed).
    pub orphaned: AtomicU64,
    pub undecodable: AtomicU64,
    /// `seq` skips seen, replays asked for, and skips a replay could not fill.
    pub gaps: AtomicU64,
    pub replays: AtomicU64,
    pub unrecovered: AtomicU64,
    /// Restarts seen (`seq` went back).
    pub restarts: AtomicU64,
    /// Connected and caught up.
    pub live: AtomicBool,
    /// The last applied batch's age when it was applied (engine clock to ours), milliseconds.
    pub lag_ms: AtomicU64,
    /// Set when the gateway decided the engine lost its cache (it stopped answering probes):
    /// the feed starts its numbering afresh.
    reset: AtomicBool,
}

impl FeedStats {
    /// The engine's cache is gone (it restarted): the next message starts a new numbering.
    pub fn reset(&self) {
        self.reset.store(true, Relaxed);
    }
}

/// How long a connect or one replayed batch may take before the attempt is given up.
const STEP_TIMEOUT: Duration = Duration::from_secs(2);
const END_OF_REPLAY: [u8; 8] = [0xFF; 8];

/// Runs a feed for `backend` until the task is aborted.
pub fn spawn(
    index: Arc<KvIndex>,
    backend: usize,
    config: FeedConfig,
    stats: Arc<FeedStats>,
) -> tokio::task::JoinHandle<()> {
    let feed = Feed { index, backend, config, stats, last: None, replayed_from: None };
    tokio::spawn(feed.run())
}

struct Feed {
    index: Arc<KvIndex>,
    backend: usize,
    config: FeedConfig,
    stats: Arc<FeedStats>,
    /// The last batch applied.
    last: Option<u64>,
    /// The first batch the last catch-up replayed: live messages from there to `last` are
    /// duplicates; one below it is a restarted engine's.
    replayed_from: Option<u64>,
}

impl Feed {
    async fn run(mut self) {
        let mut backoff = Duration::from_millis(100);
        loop {
            let outcome = self.session().await;
            self.stats.live.store(false, Relaxed);
            if let Err(why) = outcome {
                tracing::debug!(backend = self.backend, endpoint = %self.config.endpoint, "kv events: {why}");
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    }

    /// One connection: subscribe, catch up, then follow until it drops.
    async fn session(&mut self) -> Result<(), String> {
        let mut sub = SubSocket::new();
        let mut monitor = sub.monitor();
        tokio::time::timeout(STEP_TIMEOUT, sub.connect(&self.config.endpoint))
            .await
            .map_err(|_| "connect timed out".to_owned())?
            .map_err(|e| format!("connect: {e}"))?;
        sub.subscribe(&self.config.topic).await.map_err(|e| format!("subscribe: {e}"))?;
        self.take_reset();
        match self.last {
            None => {
                self.catch_up(0).await;
            }
            // Asked from the last batch applied: an engine that no longer has it restarted.
            Some(last) => {
                if self.catch_up(last).await == Some(false) {
                    self.restarted();
                    self.catch_up(0).await;
                }
            }
        }
        self.stats.live.store(true, Relaxed);
        loop {
            tokio::select! {
                message = sub.recv() => {
                    let message = message.map_err(|e| format!("receive: {e}"))?;
                    self.on_message(message).await;
                }
                event = monitor.next() => match event {
                    Some(SocketEvent::Disconnected(_)) | None => return Err("disconnected".to_owned()),
                    Some(_) => {}
                },
            }
        }
    }

    fn take_reset(&mut self) {
        if self.stats.reset.swap(false, Relaxed) {
            self.last = None;
            self.replayed_from = None;
        }
    }

    async fn on_message(&mut self, message: ZmqMessage) {
        let frames = message.into_vec();
        let Some((seq, payload)) = seq_and_payload(&frames) else {
            self.stats.undecodable.fetch_add(1, Relaxed);
            return;
        };
        self.take_reset();
        match self.last {
            Some(last) if seq <= last => {
                if self.replayed_from.is_some_and(|from| seq >= from) {
                    return; // Also replayed: applied already.
                }
                // The numbering started again: the engine restarted, and its cache with it.
                self.restarted();
                self.catch_up(0).await;
                if self.last.is_none_or(|l| seq > l) {
                    self.apply(seq, payload);
                }
            }
            // A skip; or, with nothing applied yet, a first message after the first batch: the
            // engine published before this subscription took effect (ZeroMQ's slow joiner).
            last if seq > last.map_or(0, |l| l + 1) => {
                self.stats.gaps.fetch_add(1, Relaxed);
                self.catch_up(last.map_or(0, |l| l + 1)).await;
                if self.last.map_or(seq > 0, |l| l + 1 < seq) {
                    self.stats.unrecovered.fetch_add(1, Relaxed);
                }
                if self.last.is_none_or(|l| seq > l) {
                    self.apply(seq, payload);
                }
            }
            _ => self.apply(seq, payload),
        }
    }

    /// The engine restarted: what it held is gone, and its numbering starts again.
    fn restarted(&mut self) {
        self.stats.restarts.fetch_add(1, Relaxed);
        self.index.clear(self.backend);
        self.last = None;
        self.replayed_from = None;
    }

    fn apply(&mut self, seq: u64, payload: &[u8]) {
        self.last = Some(seq);
        let batch = match wire::decode(payload) {
            Ok(batch) => batch,
            Err(e) => {
                self.stats.undecodable.fetch_add(1, Relaxed);
                tracing::debug!(backend = self.backend, seq, "kv events: undecodable batch: {e}");
                return;
            }
        };
        self.stats.received.fetch_add(batch.events.len() as u64, Relaxed);
        let done = self.index.apply(self.backend, self.config.block_size, &batch.events);
        self.stats.applied.fetch_add(done.applied, Relaxed);
        self.stats.orphaned.fetch_add(done.orphaned, Relaxed);
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        if batch.ts > 0.0 {
            self.stats.lag_ms.store(((now - batch.ts).max(0.0) * 1000.0) as u64, Relaxed);
        }
    }

    /// Asks the replay socket for every batch from `from` on and applies those not applied yet;
    /// whether it had any (None: no replay socket, or no answer).
    async fn catch_up(&mut self, from: u64) -> Option<bool> {
        let endpoint = self.config.replay_endpoint.clone()?;
        self.stats.replays.fetch_add(1, Relaxed);
        match self.replay(&endpoint, from).await {
            Ok(first) => {
                // Live messages from here to `last` were replayed too: duplicates.
                self.replayed_from = first;
                Some(first.is_some())
            }
            Err(why) => {
                tracing::debug!(backend = self.backend, %endpoint, "kv events: replay: {why}");
                None
            }
        }
    }

    /// The replay exchange; the first sequence number it answered with, if any.
    async fn replay(&mut self, endpoint: &str, from: u64) -> Result<Option<u64>, String> {
        let mut dealer = DealerSocket::new();
        tokio::time::timeout(STEP_TIMEOUT, dealer.connect(endpoint))
            .await
            .map_err(|_| "connect timed out".to_owned())?
            .map_err(|e| format!("connect: {e}"))?;
        let request = vec![Bytes::new(), Bytes::copy_from_slice(&from.to_be_bytes())];
        let request = ZmqMessage::try_from(request).map_err(|e| format!("{e:?}"))?;
        dealer.send(request).await.map_err(|e| format!("send: {e}"))?;
        let mut first = None;
        loop {
            let reply = tokio::time::timeout(STEP_TIMEOUT, dealer.recv())
                .await
                .map_err(|_| "no answer".to_owned())?
                .map_err(|e| format!("receive: {e}"))?;
            let frames = reply.into_vec();
            let n = frames.len();
            if n >= 2 && frames[n - 2][..] == END_OF_REPLAY {
                return Ok(first);
            }
            let Some((seq, payload)) = seq_and_payload(&frames) else {
                self.stats.undecodable.fetch_add(1, Relaxed);
                continue;
            };
            first.get_or_insert(seq);
            if self.last.is_none_or(|l| seq > l) {
                self.apply(seq, payload);
            }
        }
    }
}

/// The sequence number and payload: a message's last two frames (a published one is
/// `[topic, seq, payload]`, a replayed one `["", (topic,) seq, payload]`).
fn seq_and_payload(frames: &[Bytes]) -> Option<(u64, &[u8])> {
    let n = frames.len();
    if n < 2 {
        return None;
    }
    let seq: [u8; 8] = frames[n - 2][..].try_into().ok()?;
    Some((u64::from_be_bytes(seq), &frames[n - 1][..]))
}
