//! Usage accounting: one `UsageRecord` per request, journalled locally off the hot path and
//! written to the database in batches ("never on the hot path, never lost"), plus the pure
//! functions that find token counts in responses and SSE streams.
//!
//! Flow: the request's completion guard calls [`Journal::append`] (one `write(2)` to an
//! `O_APPEND` file, no database, no await). The [`UsageWriter`] task tails the journal and calls
//! [`UsageSink::write_batch`] with the records and the journal checkpoint after them, in one
//! transaction; the sink de-duplicates by record id, so replaying a record is always safe. What
//! survives what:
//! - database down: records stay in the journal ("spilled") and are replayed when it recovers;
//! - process killed (even SIGKILL): a completed `append` is in the kernel's page cache, so the
//!   next start replays everything after the stored checkpoint — no loss, no duplicates;
//! - power loss: only what the optional periodic fsync (`WriterConfig::fsync_every`) covered.
//!
//! Files: `journal.rs` (append, rotation, checkpoints), `reader.rs` (tailing), `writer.rs` (the
//! batch task), `extract.rs` (usage in JSON bodies, `include_usage` injection), `sse.rs` (the
//! stream tap).

use std::fmt::Write as _;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use crate::records::UsageRecord;

mod checkpoint_file;
pub mod extract;
pub mod journal;
pub(crate) mod priority;
pub mod reader;
mod segment;
pub mod sse;
pub mod writer;

pub use checkpoint_file::CheckpointFile;
pub use extract::{inject_include_usage, usage_from_response, BodyUsageTap};
pub use journal::{Checkpoint, Journal, JournalOptions};
pub use sse::SseUsageTap;
pub use writer::{UsageWriter, WriterConfig};

#[cfg(test)]
mod tests;

/// Where batches go (the SQL store implements this). Implemented for `Arc<T>` too.
///
/// Contract the writer relies on:
/// - `write_batch` inserts the records idempotently by `id` (`ON CONFLICT DO NOTHING`) and stores
///   `checkpoint` (as given — it may be lower than the stored one after a journal reset) in the
///   same transaction; it returns how many rows were newly inserted. If it fails, nothing of the
///   batch may be half-applied (a failure *after* commit is fine: the replay de-duplicates).
/// - `checkpoint` returns the last stored checkpoint, `0` when none. It belongs to one journal
///   directory: gateways sharing a database need one checkpoint row each (see [`Journal::id`]).
pub trait UsageSink: Send + Sync + 'static {
    /// Durably insert these records (idempotent by id) and the journal checkpoint in one
    /// transaction; returns rows newly inserted.
    fn write_batch(&self, records: &[UsageRecord], checkpoint: u64)
        -> impl Future<Output = Result<u64, String>> + Send;
    /// The checkpoint stored by the last successful `write_batch`, `0` if none.
    fn checkpoint(&self) -> impl Future<Output = Result<u64, String>> + Send;
    /// An export sink's checkpoint file: its receivers dedupe by batch (a batch key such as
    /// `Idempotency-Key`), so a batch once offered is retried as it is, never grown, and its end
    /// is kept there before the first try, for a restart to cut the same batch again. None for a
    /// sink idempotent record by record (the database), whose batches may grow.
    fn checkpoint_file(&self) -> Option<&CheckpointFile> {
        None
    }
}

impl<T: UsageSink> UsageSink for Arc<T> {
    fn write_batch(
        &self,
        records: &[UsageRecord],
        checkpoint: u64,
    ) -> impl Future<Output = Result<u64, String>> + Send {
        (**self).write_batch(records, checkpoint)
    }

    fn checkpoint(&self) -> impl Future<Output = Result<u64, String>> + Send {
        (**self).checkpoint()
    }

    fn checkpoint_file(&self) -> Option<&CheckpointFile> {
        (**self).checkpoint_file()
    }
}

/// Counters for /metrics, shared by the journal and the writer (all monotonic).
#[derive(Debug, Default)]
pub struct UsageCounters {
    /// Records appended to the journal by this process.
    pub queued: AtomicU64,
    /// Rows the sink reported newly inserted (replayed duplicates are not counted).
    pub written: AtomicU64,
    /// Records of this process that could not be written promptly because the sink was failing;
    /// they wait in the journal.
    pub spilled: AtomicU64,
    /// Records written after a sink failure, or found in the journal at start-up.
    pub replayed: AtomicU64,
    /// Journal lines skipped because they were not a valid record (or a torn tail).
    pub corrupt: AtomicU64,
    /// Records that could not be journalled at all (disk full, I/O error): these are lost.
    pub append_failed: AtomicU64,
    /// Batches the sink refused or could not take (each retried).
    pub batches_failed: AtomicU64,
    /// Records an export sink never delivered because it fell more than its `max_backlog` behind.
    pub dropped: AtomicU64,
    /// Unix seconds of the last batch the sink took (0: none yet).
    pub last_written_unix: AtomicU64,
}

impl UsageCounters {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        if n > 0 {
            counter.fetch_add(n, Relaxed);
        }
    }

    /// Append the counters in Prometheus text format, as
    /// `switchyard_usage_records_total{state="queued"} 12` and so on.
    pub fn render(&self, out: &mut String) {
        out.push_str("# HELP switchyard_usage_records_total Usage records, by state.\n");
        out.push_str("# TYPE switchyard_usage_records_total counter\n");
        for (state, counter) in [
            ("queued", &self.queued),
            ("written", &self.written),
            ("spilled", &self.spilled),
            ("replayed", &self.replayed),
            ("corrupt", &self.corrupt),
            ("append_failed", &self.append_failed),
        ] {
            let _ = writeln!(out, "switchyard_usage_records_total{{state=\"{state}\"}} {}", counter.load(Relaxed));
        }
    }
}

/// Token counts of one request, as the backend reported them (or as estimated).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tokens {
    /// Every prompt token, those read from the provider's prompt cache included.
    pub prompt: u64,
    pub completion: u64,
    pub total: u64,
    /// Prompt tokens read from the provider's prompt cache (billed at its cached-input price).
    pub cached: u64,
    /// Prompt tokens written to the provider's prompt cache (billed at its cache-write price).
    pub cache_write: u64,
}

impl From<&switchyard_protocol::chat::Usage> for Tokens {
    /// The counts a translator read in any API's spelling.
    fn from(u: &switchyard_protocol::chat::Usage) -> Tokens {
        Tokens {
            prompt: u.prompt_tokens,
            completion: u.completion_tokens,
            total: u.total_tokens.max(u.prompt_tokens + u.completion_tokens),
            cached: u.cached_prompt_tokens.unwrap_or(0),
            cache_write: u.cache_write_tokens.unwrap_or(0),
        }
    }
}

/// Tokens for `chars` characters of text when the backend reported none: about four characters
/// per token, OpenAI's rule of thumb for English with BPE tokenizers (code and other scripts use
/// more tokens per character, so this under-counts them). Rounded up: any text is ≥ 1 token.
pub fn estimate_tokens(chars: usize) -> u64 {
    (chars as u64).div_ceil(4)
}

#[cfg(test)]
mod counter_tests {
    use super::*;

    #[test]
    fn estimate_rounds_up() {
        assert_eq!([0, 1, 4, 5, 8, 9].map(estimate_tokens), [0, 1, 1, 2, 2, 3]);
    }

    #[test]
    fn counters_render_as_prometheus() {
        let c = UsageCounters::default();
        c.queued.store(3, Relaxed);
        let mut out = String::new();
        c.render(&mut out);
        assert!(out.contains("switchyard_usage_records_total{state=\"queued\"} 3\n"));
        assert!(out.contains("switchyard_usage_records_total{state=\"corrupt\"} 0\n"));
    }
}
