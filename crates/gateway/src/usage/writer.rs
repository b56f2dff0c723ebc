//! `UsageWriter`: the task that tails the usage journal and writes batches to a `UsageSink`.
//!
//! Loop: read complete journal lines (on the blocking pool) into a batch of up to `batch_max`
//! records; when the journal has no more, linger up to `linger` for the batch to fill; call
//! `write_batch(records, checkpoint after them)`. Idle, it sleeps until an `append` wakes it.
//! When the sink fails the batch is kept (its records are in the journal anyway) and retried
//! with exponential backoff; to a sink whose receivers dedupe by batch (`checkpoint_file`: the
//! export sinks) it is frozen: the same records, not grown by what arrived meanwhile, so a retry
//! carries the same batch key, and its end goes to the sink's file before the first try
//! (`CheckpointFile::intend`), so the first batch after a restart is cut there again. Records
//! read during the outage count as `spilled`, and as `replayed` once written. Files whose records are all stored are deleted. An export sink has a
//! `max_backlog`: a sink that falls further behind loses its oldest records, counted as `dropped`,
//! rather than letting the journal grow until the disk is full.
//!
//! Start-up: read the sink's checkpoint (retrying while the sink is down — appends carry on
//! meanwhile) and replay from there; see `reader.rs` for why replaying too much is harmless.
//! Shutdown: `shutdown(deadline)` writes everything appended so far and stops, or gives up at the
//! deadline; what is left stays in the journal for the next start. Dropping the writer without
//! `shutdown` aborts the task: nothing is lost either, the next start replays.

use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::journal::{Checkpoint, Journal};
use super::reader::{JournalReader, Line};
use super::{CheckpointFile, UsageCounters, UsageSink};
use crate::records::UsageRecord;

#[derive(Debug, Clone)]
pub struct WriterConfig {
    /// Most records per `write_batch`.
    pub batch_max: usize,
    /// How long a partial batch waits for more records.
    pub linger: Duration,
    /// First retry delay after a sink failure; doubles up to `backoff_max`.
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// Re-read the journal this often even without a wake-up (a safety net only).
    pub idle_poll: Duration,
    /// fsync the journal this often (power-loss durability); `None` relies on the page cache.
    pub fsync_every: Option<Duration>,
    /// Which journal consumer this writer is (`Journal::add_consumer`): 0 is the database.
    pub consumer: usize,
    /// Counters of its own (an export sink's); `None`: the journal's, for the database writer.
    pub counters: Option<Arc<UsageCounters>>,
    /// Most bytes of journal this consumer may fall behind (an export sink's `max_backlog`):
    /// past it, its oldest undelivered records are dropped, a file at a time, and counted.
    /// `None` (the database writer): it keeps everything.
    pub max_backlog: Option<u64>,
    /// Run under SCHED_IDLE rather than nice 19 (`spawn_on_own_thread`): for an export sink,
    /// whose records wait safely in the journal while requests want the CPU. The database
    /// writer keeps its small share: limits and budgets read what it writes.
    pub idle: bool,
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            // Big batches keep the database's per-transaction and per-statement costs off the
            // gateway's CPU under load; records are already safe in the journal meanwhile.
            batch_max: 2000,
            linger: Duration::from_millis(100),
            backoff_min: Duration::from_millis(50),
            backoff_max: Duration::from_secs(5),
            // Every append wakes every consumer: an idle gateway need not look every second
            // (each look pages in the reader's code: issue 29's idle memory).
            idle_poll: Duration::from_secs(30),
            fsync_every: None,
            consumer: 0,
            counters: None,
            max_backlog: None,
            idle: false,
        }
    }
}

/// Handle to the running writer. Dropping it aborts a task on the caller's runtime (the
/// journal keeps the rest); a writer on its own thread is told to stop.
pub struct UsageWriter {
    task: Option<Task>,
    stop: watch::Sender<Stop>,
}

/// What the writer is asked to do besides writing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Stop {
    Run,
    /// Write everything appended so far, then end.
    Drain,
    /// End now (a drain's deadline passed): the journal keeps the rest for the next start.
    Abort,
}

enum Task {
    Local(JoinHandle<bool>),
    /// On its own low-priority thread: resolves with the writer's result when it ends.
    Thread(oneshot::Receiver<bool>),
}

impl UsageWriter {
    /// Spawn the writer on the current tokio runtime.
    pub fn spawn<S: UsageSink>(journal: Arc<Journal>, sink: S, config: WriterConfig) -> UsageWriter {
        let (stop, stop_rx) = watch::channel(Stop::Run);
        let task = tokio::spawn(run(journal, sink, config, stop_rx));
        UsageWriter { task: Some(Task::Local(task)), stop }
    }

    /// Run the writer on a thread of its own at the lowest CPU priority, with a runtime of its
    /// own, and its sink made there (so a SQLite pool's worker threads inherit the priority).
    /// Reading the journal, decoding records and binding a batch's thousands of parameters then
    /// never take the CPU from request handling: under saturation the writer falls behind (the
    /// records wait in the journal) and catches up when load drops.
    pub fn spawn_on_own_thread<S: UsageSink>(
        journal: Arc<Journal>,
        make_sink: impl FnOnce() -> Option<S> + Send + 'static,
        config: WriterConfig,
    ) -> io::Result<UsageWriter> {
        let (stop, stop_rx) = watch::channel(Stop::Run);
        let (done, done_rx) = oneshot::channel();
        let idle = config.idle;
        std::thread::Builder::new().name("usage-writer".to_owned()).spawn(move || {
            if idle {
                super::priority::idle_this_thread();
            } else {
                super::priority::lower_this_thread();
            }
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => runtime,
                Err(e) => {
                    tracing::error!(error = %e, "usage writer could not start its runtime");
                    return;
                }
            };
            let caught_up = runtime.block_on(async move {
                match make_sink() {
                    Some(sink) => run(journal, sink, config, stop_rx).await,
                    None => false,
                }
            });
            let _ = done.send(caught_up);
        })?;
        Ok(UsageWriter { task: Some(Task::Thread(done_rx)), stop })
    }

    /// Write everything appended so far, then stop. True if it caught up before `deadline`.
    pub async fn shutdown(mut self, deadline: Duration) -> bool {
        let _ = self.stop.send(Stop::Drain);
        let Some(task) = self.task.as_mut() else { return false };
        let finished = async {
            match task {
                Task::Local(handle) => handle.await.unwrap_or(false),
                Task::Thread(done) => done.await.unwrap_or(false),
            }
        };
        match tokio::time::timeout(deadline, finished).await {
            Ok(done) => {
                self.task = None;
                done
            }
            Err(_) => {
                tracing::warn!("usage writer did not catch up before the deadline; the rest stays in the journal");
                // A writer on its own thread would otherwise go on retrying a failing sink.
                let _ = self.stop.send(Stop::Abort);
                false
            }
        }
    }
}

impl Drop for UsageWriter {
    fn drop(&mut self) {
        match &self.task {
            Some(Task::Local(handle)) => handle.abort(),
            Some(Task::Thread(_)) => {
                let _ = self.stop.send_if_modified(|s| {
                    let run = *s == Stop::Run;
                    if run {
                        *s = Stop::Drain;
                    }
                    run
                });
            }
            None => {}
        }
    }
}

/// The reader and the batch being built: moved to the blocking pool and back for each read.
struct Tail {
    journal: Arc<Journal>,
    reader: JournalReader,
    records: Vec<UsageRecord>,
    /// Checkpoint after the last line read into `records`.
    end: Checkpoint,
    /// This process's records in the batch not yet counted as spilled.
    fresh: u64,
    /// Records in the batch that count as replayed once written.
    replay: u64,
    /// The sink failed and the writer has not caught up since.
    outage: bool,
    caught_up: bool,
    removed_below: u64,
    mark_synced: bool,
    consumer: usize,
    counters: Arc<UsageCounters>,
    max_backlog: Option<u64>,
    /// The batch has been offered to the sink: it is resent as it is (same records, same end,
    /// so the same batch key) until delivered, never grown by what arrived meanwhile.
    frozen: bool,
    /// Where the batch a previous process was sending ended (`CheckpointFile::intended`): the first
    /// batch after a restart is cut there again.
    cut_at: Option<Checkpoint>,
}

impl Tail {
    /// Read up to `max` records in total into the batch (blocking).
    fn fill(&mut self, max: usize) -> io::Result<()> {
        if self.mark_synced {
            self.journal.mark_synced()?;
            self.mark_synced = false;
        }
        self.shed()?;
        let caught_up = match self.cut_at.take() {
            None => self.read_lines(max.saturating_sub(self.records.len()))?,
            Some(cut) => {
                let mut caught_up = false;
                while self.reader.position() < cut && self.records.len() < max && !caught_up {
                    caught_up = self.read_lines(1)?;
                }
                self.frozen = !self.records.is_empty();
                caught_up
            }
        };
        self.end = self.reader.position();
        self.caught_up = caught_up;
        // Nothing pending: every record of the generations already left is stored.
        if self.records.is_empty() && self.end.generation > self.removed_below {
            self.journal.release(self.consumer, self.end.generation)?;
            self.removed_below = self.end.generation;
        }
        Ok(())
    }

    /// Read up to `room` lines into the batch; whether the reader caught up with the journal.
    fn read_lines(&mut self, room: usize) -> io::Result<bool> {
        let counters: &UsageCounters = &self.counters;
        let start_generation = self.journal.start_generation();
        let (records, fresh, replay, outage) = (&mut self.records, &mut self.fresh, &mut self.replay, self.outage);
        let mut corrupt = 0;
        let fill = self.reader.read(room, |generation, line| match decode(line) {
            Some(record) => {
                records.push(record);
                if generation < start_generation {
                    *replay += 1;
                } else if outage {
                    counters.spilled.fetch_add(1, Relaxed);
                    *replay += 1;
                } else {
                    *fresh += 1;
                }
            }
            None => corrupt += 1,
        })?;
        if corrupt > 0 {
            tracing::warn!(lines = corrupt, "skipped corrupt usage journal lines");
            UsageCounters::add(&counters.corrupt, corrupt);
        }
        Ok(fill.caught_up)
    }

    /// Past `max_backlog`: drop the oldest records not yet delivered (the batch in hand, which is
    /// older still, with them) so that a sink down for days cannot fill the disk (blocking).
    /// Cheap while the reader is in the file being written: nothing is listed then.
    fn shed(&mut self) -> io::Result<()> {
        let Some(max) = self.max_backlog else { return Ok(()) };
        if self.reader.position().generation >= self.journal.generation() {
            return Ok(());
        }
        let Some(skipped) = self.reader.skip_backlog(max)? else { return Ok(()) };
        let dropped = skipped + self.records.len() as u64;
        UsageCounters::add(&self.counters.dropped, dropped);
        tracing::warn!(dropped, max_backlog = max, "export sink too far behind; its oldest records are dropped");
        self.records.clear();
        (self.fresh, self.replay, self.frozen, self.cut_at) = (0, 0, false, None);
        self.end = self.reader.position();
        self.journal.release(self.consumer, self.end.generation)?;
        self.removed_below = self.end.generation;
        Ok(())
    }

    fn written(&mut self, counters: &UsageCounters, inserted: u64) {
        UsageCounters::add(&counters.written, inserted);
        counters.last_written_unix.store((crate::clock::unix_ms() / 1000).max(0) as u64, Relaxed);
        UsageCounters::add(&counters.replayed, self.replay);
        if self.outage && self.caught_up {
            self.outage = false;
            tracing::info!("usage sink recovered; the journal backlog is written");
        }
        // The marker vouches for the database's checkpoint only (see reader.rs).
        self.mark_synced = self.consumer == 0 && !self.journal.is_synced();
        self.records.clear();
        (self.fresh, self.replay, self.frozen) = (0, 0, false);
    }

    fn failed(&mut self, counters: &UsageCounters, error: &str) {
        if !self.outage {
            tracing::warn!(error, "usage sink failing; records are kept in the journal and retried");
        } else {
            tracing::debug!(error, "usage sink still failing");
        }
        UsageCounters::add(&counters.spilled, self.fresh);
        counters.batches_failed.fetch_add(1, Relaxed);
        self.replay += self.fresh;
        self.fresh = 0;
        self.outage = true;
    }
}

/// A journal line's record: handed off as it is, or parsed from the file's bytes (`None`: not a record).
fn decode(line: Line<'_>) -> Option<UsageRecord> {
    match line {
        Line::Record(record) => Some(record),
        Line::Bytes(bytes) => serde_json::from_slice(bytes).ok(),
    }
}

/// Send the batch; to a sink whose receivers dedupe by batch, keep where it ends before the first
/// try and freeze it, so a retry or a resend after a restart is the same batch under the same key.
async fn offer<S: UsageSink>(sink: &S, tail: &mut Tail) -> Result<u64, String> {
    let end = tail.end.encode();
    if let Some(file) = sink.checkpoint_file().filter(|_| !tail.frozen) {
        file.intend(end)?;
        tail.frozen = true;
    }
    sink.write_batch(&tail.records, end).await
}

/// Run `f` on the blocking pool with the tail. `None` if the blocking task was lost (runtime
/// shutting down): the writer stops and the journal keeps everything for the next start.
async fn blocking(mut tail: Tail, f: impl FnOnce(&mut Tail) -> io::Result<()> + Send + 'static) -> Option<Tail> {
    let done = tokio::task::spawn_blocking(move || {
        let result = f(&mut tail);
        (tail, result)
    })
    .await;
    match done {
        Ok((tail, Ok(()))) => Some(tail),
        Ok((tail, Err(e))) => {
            tracing::error!(error = %e, "usage journal I/O failed; retrying");
            tokio::time::sleep(Duration::from_millis(500)).await;
            Some(tail)
        }
        Err(e) => {
            tracing::error!(error = %e, "usage writer lost its journal reader; stopping");
            None
        }
    }
}

struct Backoff {
    next: Duration,
    min: Duration,
    max: Duration,
}

impl Backoff {
    fn reset(&mut self) {
        self.next = self.min;
    }

    async fn wait(&mut self) {
        tokio::time::sleep(self.next).await;
        self.next = (self.next * 2).min(self.max);
    }
}

/// Read the sink's checkpoint and open the journal there, retrying until both work.
async fn start<S: UsageSink>(
    journal: &Arc<Journal>,
    sink: &S,
    backoff: &mut Backoff,
    cfg: &WriterConfig,
    counters: Arc<UsageCounters>,
) -> Option<Tail> {
    let (batch_max, consumer) = (cfg.batch_max.max(1), cfg.consumer);
    let mut outage = false;
    let checkpoint = loop {
        match sink.checkpoint().await {
            Ok(checkpoint) => break checkpoint,
            Err(error) => {
                if !outage {
                    tracing::warn!(error, "usage sink unavailable at start-up; records are kept in the journal");
                }
                outage = true;
                backoff.wait().await;
            }
        }
    };
    let reader = loop {
        let journal = journal.clone();
        match tokio::task::spawn_blocking(move || JournalReader::open_as(journal, checkpoint, consumer)).await {
            Ok(Ok(reader)) => break reader,
            Ok(Err(e)) => {
                tracing::error!(error = %e, "usage journal could not be read; retrying");
                backoff.wait().await;
            }
            Err(_) => return None,
        }
    };
    backoff.reset();
    let cut_at = match sink.checkpoint_file().map_or(Ok(None), CheckpointFile::intended) {
        Ok(end) => end.filter(|end| *end > checkpoint).map(Checkpoint::decode),
        Err(error) => {
            tracing::warn!(
                error,
                "the export's batch in flight at the last stop is unknown; the first batch is cut anew"
            );
            None
        }
    };
    Some(Tail {
        journal: journal.clone(),
        end: reader.position(),
        reader,
        records: Vec::with_capacity(batch_max),
        fresh: 0,
        replay: 0,
        outage,
        caught_up: false,
        removed_below: 0,
        mark_synced: false,
        consumer,
        counters,
        max_backlog: cfg.max_backlog,
        frozen: false,
        cut_at,
    })
}

async fn run<S: UsageSink>(journal: Arc<Journal>, sink: S, cfg: WriterConfig, mut stop: watch::Receiver<Stop>) -> bool {
    let counters = cfg.counters.clone().unwrap_or_else(|| journal.counters().clone());
    let appended = journal.waker(cfg.consumer);
    let batch_max = cfg.batch_max.max(1);
    let mut backoff = Backoff { next: cfg.backoff_min, min: cfg.backoff_min, max: cfg.backoff_max };
    let started = start(&journal, &sink, &mut backoff, &cfg, counters.clone()).await;
    let Some(mut tail) = started else { return false };
    let mut draining = false;
    let mut linger_until: Option<Instant> = None;
    let mut next_fsync = cfg.fsync_every.map(|every| Instant::now() + every);
    loop {
        let asked = *stop.borrow();
        if asked == Stop::Abort {
            return false;
        }
        draining |= asked == Stop::Drain;
        if let (Some(at), Some(every)) = (next_fsync, cfg.fsync_every) {
            if Instant::now() >= at {
                let journal = journal.clone();
                if let Ok(Err(e)) = tokio::task::spawn_blocking(move || journal.sync()).await {
                    tracing::warn!(error = %e, "usage journal fsync failed");
                }
                next_fsync = Some(Instant::now() + every);
            }
        }
        if tail.records.len() < batch_max && !tail.frozen {
            tail = match blocking(tail, move |t| t.fill(batch_max)).await {
                Some(tail) => tail,
                None => return false,
            };
        }
        if tail.records.is_empty() {
            linger_until = None;
            if !tail.caught_up {
                continue;
            }
            if draining {
                return true;
            }
            let poll =
                cfg.idle_poll.min(next_fsync.map_or(cfg.idle_poll, |at| at.saturating_duration_since(Instant::now())));
            tokio::select! {
                _ = appended.notified() => {}
                changed = stop.changed() => if changed.is_err() { return false },
                _ = tokio::time::sleep(poll) => {}
            }
            continue;
        }
        if tail.records.len() < batch_max && tail.caught_up && !draining && !tail.frozen {
            let until = *linger_until.get_or_insert_with(|| Instant::now() + cfg.linger);
            if Instant::now() < until {
                tokio::select! {
                    _ = tokio::time::sleep_until(until) => {}
                    changed = stop.changed() => if changed.is_err() { return false },
                }
                continue;
            }
        }
        match offer(&sink, &mut tail).await {
            Ok(inserted) => {
                tail.written(&counters, inserted);
                linger_until = None;
                backoff.reset();
            }
            Err(error) => {
                tail.failed(&counters, &error);
                tokio::select! {
                    _ = backoff.wait() => {}
                    changed = stop.changed() => if changed.is_err() { return false },
                }
                // A full batch is retried without reading on: the backlog is checked here too.
                if tail.max_backlog.is_some() {
                    tail = match blocking(tail, Tail::shed).await {
                        Some(tail) => tail,
                        None => return false,
                    };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
