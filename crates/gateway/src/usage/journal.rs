//! The usage journal: append-only JSON-lines files `DIR/usage-<generation>.journal`, written on
//! the request path with one `memcpy` per record (no system call), and its checkpoint encoding.
//!
//! Durability: every record is copied whole into the file's shared mapping (`segment.rs`), so
//! once `append` returns the line is in the kernel's page cache and survives the process being
//! killed (SIGKILL, OOM, panic=abort). It does not survive power loss unless the writer's
//! periodic fsync ran (`Journal::sync`). Readers in this process read only up to the published
//! end of the data ([`Journal::written_end`]), so they never see a line being copied; a process
//! killed in the middle of a copy leaves a torn last line, which the reader skips and counts as
//! corrupt.
//!
//! Generations: each process start opens a new generation (one past the highest file present),
//! and a generation is also sealed and a new one started, under the append lock, once it passes
//! `rotate_bytes`. A generation below the current one is never appended to again, which is how
//! the reader knows it has seen all of it. The writer deletes generations once every record in
//! them is in the database. Rotating on size alone (not only once a file is fully written) keeps
//! a long database outage's backlog in pieces that can be deleted as the replay progresses.
//!
//! Hand-off: the database writer (consumer 0) also gets each record as it was appended, in
//! memory, with where its line lies ([`Handed`]), so it need not read the line back and parse it
//! (a tenth of the gateway's instructions per request, by callgrind). The file stays the truth:
//! the hand-off holds at most [`HANDOFF_MAX`] records, and the reader falls back to the file for
//! any it does not find there (a writer behind under load, a replay, a restart).
//!
//! One process per directory: two gateways appending to the same directory would break the
//! "sealed" rule. Give each instance its own directory.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::fs::File;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

use super::segment::{trim_zero_tail, Segment};
use super::UsageCounters;
use crate::records::UsageRecord;

/// Bits of the byte offset in an encoded checkpoint; the generation takes the 23 above them, so
/// an encoded checkpoint always fits a signed 64-bit SQL column.
const OFFSET_BITS: u32 = 40;
/// Largest byte offset a checkpoint can carry (1 TiB).
pub const MAX_OFFSET: u64 = (1 << OFFSET_BITS) - 1;
/// Largest generation a checkpoint can carry (8.4 million files).
pub const MAX_GENERATION: u64 = (1 << (63 - OFFSET_BITS)) - 1;
/// Files are named `usage-00000042.journal`.
const PREFIX: &str = "usage-";
const SUFFIX: &str = ".journal";
/// Present once the sink's checkpoint refers to this directory's generations (see `reader.rs`).
const SYNCED_MARKER: &str = "synced";
const ID_FILE: &str = "journal.id";
/// Records handed off in memory and not yet taken, at most: past it, the writer reads the rest
/// from the file (it is that far behind anyway). Its batches are up to 2,000 records.
pub const HANDOFF_MAX: usize = 4096;

/// A record appended by this process, handed to the database writer in memory, with its line's
/// place in the journal: from `start` to byte `end` of the same generation's file.
#[derive(Debug)]
pub struct Handed {
    pub start: Checkpoint,
    pub end: u64,
    pub record: UsageRecord,
}

/// A position in the journal: the byte just after the last line taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Checkpoint {
    pub generation: u64,
    pub offset: u64,
}

impl Checkpoint {
    /// `generation << 40 | offset`. Both are kept in range by the journal.
    pub fn encode(self) -> u64 {
        (self.generation.min(MAX_GENERATION) << OFFSET_BITS) | self.offset.min(MAX_OFFSET)
    }

    pub fn decode(value: u64) -> Checkpoint {
        Checkpoint { generation: value >> OFFSET_BITS, offset: value & MAX_OFFSET }
    }
}

#[derive(Debug, Clone)]
pub struct JournalOptions {
    /// Start a new generation once the current file is at least this large.
    pub rotate_bytes: u64,
}

impl Default for JournalOptions {
    fn default() -> Self {
        JournalOptions { rotate_bytes: 64 << 20 }
    }
}

pub struct Journal {
    dir: PathBuf,
    id: String,
    rotate_bytes: u64,
    active: Mutex<Active>,
    /// The generation appends go to; only grows. Published after the previous one was sealed.
    generation: AtomicU64,
    /// Encoded [`Checkpoint`] just past the last complete line: how far readers may read.
    written_end: AtomicU64,
    /// The generation this process opened: anything below it was written by an earlier process.
    start_generation: u64,
    /// Files from this generation up may still need an fsync (used only by `sync`).
    unsynced_from: Mutex<u64>,
    synced_marker: AtomicBool,
    counters: Arc<UsageCounters>,
    /// Per consumer (the database writer is 0; each export sink adds one): the generation below
    /// which it needs no file. A file is deleted once every consumer is past it.
    floors: Mutex<Vec<u64>>,
}

struct Active {
    segment: Segment,
    /// Set by [`Journal::close`]: the file is cut to its data and takes no more lines.
    closed: bool,
    generation: u64,
    /// Try the next rotation at this length (pushed back after a failed rotation).
    rotate_at: u64,
    /// One per consumer, each told of every append: with one shared `Notify` an append woke a
    /// single consumer and the others saw it only at their next poll.
    wakers: Vec<Arc<Notify>>,
    /// Records for the database writer, once its reader asked for them (`take_handed`).
    handed: Option<VecDeque<Handed>>,
}

thread_local! {
    /// Serialisation buffer, reused so an append does not allocate.
    static LINE: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl Journal {
    /// Open (creating) `dir` and start a new generation after every file already there.
    pub fn open(dir: impl Into<PathBuf>, options: JournalOptions) -> io::Result<Arc<Journal>> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir)?;
        let id = read_or_create_id(&dir)?;
        let generation = match list_generations(&dir)?.last() {
            Some(&g) if g >= MAX_GENERATION => {
                return Err(io::Error::other(format!("usage journal {} has run out of generations", dir.display())))
            }
            Some(&g) => {
                // The previous process's file: if it was killed, the unwritten rest of its window is still there.
                trim_zero_tail(&generation_path(&dir, g))?;
                g + 1
            }
            None => 0,
        };
        let segment = Segment::create(&generation_path(&dir, generation))?;
        let rotate_bytes = options.rotate_bytes.clamp(1, MAX_OFFSET / 2);
        Ok(Arc::new(Journal {
            synced_marker: AtomicBool::new(dir.join(SYNCED_MARKER).exists()),
            active: Mutex::new(Active {
                segment,
                generation,
                rotate_at: rotate_bytes,
                closed: false,
                wakers: vec![Arc::new(Notify::new())],
                handed: None,
            }),
            generation: AtomicU64::new(generation),
            written_end: AtomicU64::new(Checkpoint { generation, offset: 0 }.encode()),
            start_generation: generation,
            unsynced_from: Mutex::new(generation),
            counters: Arc::default(),
            floors: Mutex::new(vec![0]),
            rotate_bytes,
            dir,
            id,
        }))
    }

    /// Journal one record. One `memcpy`, no system call (but one per megabyte to map the next
    /// window), no fsync, no await: safe on the request path. An error
    /// (disk full) means the record is lost; it is counted in `append_failed`.
    pub fn append(&self, record: UsageRecord) -> io::Result<()> {
        LINE.with(|cell| {
            let mut line = cell.borrow_mut();
            line.clear();
            // JSON has no NaN/inf: serde would write `null`, which would not read back as a number.
            let finite = record.latency_ms.is_finite()
                && record.cost_usd.is_finite()
                && record.ttft_ms.is_none_or(f64::is_finite);
            let record = if finite { record } else { finite_copy(&record) };
            if let Err(e) = serde_json::to_writer(&mut *line, &record) {
                return Err(self.lost(io::Error::other(e), &record));
            }
            line.push(b'\n');
            let written = self.write_line(&line, record);
            if line.capacity() > 64 << 10 {
                *line = Vec::new();
            }
            written
        })
    }

    /// Append `line` (`record`, serialised), and hand `record` to the database writer if it asked.
    fn write_line(&self, line: &[u8], record: UsageRecord) -> io::Result<()> {
        let mut active = self.active.lock().unwrap_or_else(PoisonError::into_inner);
        if active.closed {
            let closed = io::Error::other("usage journal is closed (the gateway is shutting down)");
            return Err(self.lost(closed, &record));
        }
        if active.segment.len() >= active.rotate_at {
            if let Err(e) = self.rotate(&mut active) {
                let len = active.segment.len();
                active.rotate_at = len + (self.rotate_bytes / 8).max(4096);
                tracing::warn!(error = %e, "usage journal rotation failed; appending to the current file");
            }
        }
        let start = active.segment.len();
        if start + line.len() as u64 > MAX_OFFSET {
            return Err(self.lost(io::Error::other("usage journal file is full"), &record));
        }
        if let Err(e) = active.segment.append(line) {
            return Err(self.lost(e, &record));
        }
        let end = Checkpoint { generation: active.generation, offset: active.segment.len() };
        self.written_end.store(end.encode(), Ordering::Release);
        self.counters.queued.fetch_add(1, Ordering::Relaxed);
        if let Some(handed) = active.handed.as_mut().filter(|h| h.len() < HANDOFF_MAX) {
            let start = Checkpoint { generation: end.generation, offset: start };
            handed.push_back(Handed { start, end: end.offset, record });
        }
        for waker in &active.wakers {
            waker.notify_one();
        }
        Ok(())
    }

    /// A record that could not be journalled: counted and logged (by id), and lost.
    fn lost(&self, e: io::Error, record: &UsageRecord) -> io::Error {
        self.counters.append_failed.fetch_add(1, Ordering::Relaxed);
        tracing::error!(error = %e, id = %record.id, "usage record could not be journalled");
        e
    }

    /// The records handed off since the last call, oldest first; the first call starts the
    /// hand-off (records appended before it are read from the file). For the database writer's
    /// reader only: there is one hand-off.
    pub fn take_handed(&self) -> VecDeque<Handed> {
        let mut active = self.active.lock().unwrap_or_else(PoisonError::into_inner);
        std::mem::take(active.handed.get_or_insert_with(VecDeque::new))
    }

    /// Seal the current generation and start the next. Called under the append lock.
    fn rotate(&self, active: &mut Active) -> io::Result<()> {
        let next = active.generation + 1;
        if next > MAX_GENERATION {
            return Err(io::Error::other("usage journal has run out of generations"));
        }
        let segment = Segment::create(&self.path(next))?;
        // Cut the old file to its data before anyone can see that it is sealed.
        let old = std::mem::replace(&mut active.segment, segment);
        drop(old);
        active.generation = next;
        active.rotate_at = self.rotate_bytes;
        // After the sealed file's last write (program order under the lock): a reader that sees
        // the new generation has every byte of the old one available, and no more.
        self.written_end.store(Checkpoint { generation: next, offset: 0 }.encode(), Ordering::Release);
        self.generation.store(next, Ordering::Release);
        Ok(())
    }

    /// Cut the current file to its data now and take no more lines. Called at shutdown, once
    /// requests have drained: readers (an export sink still retrying past the grace period) may
    /// hold the journal for a while yet, and the next gateway on this directory must find the
    /// file already cut rather than have it cut under it when the last reader lets go.
    pub fn close(&self) -> io::Result<()> {
        let mut active = self.active.lock().unwrap_or_else(PoisonError::into_inner);
        active.closed = true;
        active.segment.seal()
    }

    /// Just past the last complete line of the current generation. Lines below a sealed
    /// generation's file length are all complete.
    pub fn written_end(&self) -> Checkpoint {
        Checkpoint::decode(self.written_end.load(Ordering::Acquire))
    }

    /// fsync every file written since the last call, and the directory (blocking: call from
    /// `spawn_blocking`). Makes the journal survive power loss up to this point.
    pub fn sync(&self) -> io::Result<()> {
        let mut from = self.unsynced_from.lock().unwrap_or_else(PoisonError::into_inner);
        let current = self.generation();
        for generation in *from..current {
            match File::open(self.path(generation)) {
                Ok(file) => file.sync_data()?,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        let file = self.active.lock().unwrap_or_else(PoisonError::into_inner).segment.file().try_clone()?;
        file.sync_data()?;
        if current != *from {
            File::open(&self.dir)?.sync_all()?;
        }
        *from = current;
        Ok(())
    }

    /// The generation appends currently go to.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The generation this process opened; lower ones hold records from earlier runs.
    pub fn start_generation(&self) -> u64 {
        self.start_generation
    }

    /// A stable random id for this directory, for a store that keeps one checkpoint per gateway.
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn counters(&self) -> &Arc<UsageCounters> {
        &self.counters
    }

    /// What wakes `consumer` after an append: its `notified()` resolves after the next one (or
    /// at once if one happened since the last wait).
    pub fn waker(&self, consumer: usize) -> Arc<Notify> {
        let mut active = self.active.lock().unwrap_or_else(PoisonError::into_inner);
        while active.wakers.len() <= consumer {
            active.wakers.push(Arc::new(Notify::new()));
        }
        active.wakers[consumer].clone()
    }

    pub fn path(&self, generation: u64) -> PathBuf {
        generation_path(&self.dir, generation)
    }

    /// Generations present on disk, oldest first.
    pub fn generations(&self) -> io::Result<Vec<u64>> {
        list_generations(&self.dir)
    }

    /// Delete sealed generations below `generation` (their records are all in the database),
    /// as far as every other consumer is past them too.
    pub fn remove_below(&self, generation: u64) -> io::Result<usize> {
        self.release(0, generation)
    }

    /// One more reader that must see every record (an export sink); its id for `release`.
    /// Register every consumer before any of them starts reading.
    pub fn add_consumer(&self) -> usize {
        let consumer = {
            let mut floors = self.floors.lock().unwrap_or_else(PoisonError::into_inner);
            floors.push(0);
            floors.len() - 1
        };
        self.waker(consumer);
        consumer
    }

    /// `consumer` needs no file below `generation`: delete those no consumer needs.
    pub fn release(&self, consumer: usize, generation: u64) -> io::Result<usize> {
        let floor = {
            let mut floors = self.floors.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(f) = floors.get_mut(consumer) {
                *f = generation;
            }
            floors.iter().copied().min().unwrap_or(0)
        };
        let limit = floor.min(self.generation());
        let mut removed = 0;
        for g in self.generations()?.into_iter().take_while(|&g| g < limit) {
            match std::fs::remove_file(self.path(g)) {
                Ok(()) => removed += 1,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(removed)
    }

    /// Whether the sink's checkpoint refers to this directory (see `reader.rs`).
    pub fn is_synced(&self) -> bool {
        self.synced_marker.load(Ordering::Relaxed)
    }

    /// Record that the sink now holds a checkpoint of this directory (blocking, once).
    pub fn mark_synced(&self) -> io::Result<()> {
        if !self.is_synced() {
            File::create(self.dir.join(SYNCED_MARKER))?;
            self.synced_marker.store(true, Ordering::Relaxed);
        }
        Ok(())
    }
}

fn finite_copy(record: &UsageRecord) -> UsageRecord {
    let finite = |x: f64| if x.is_finite() { x } else { 0.0 };
    UsageRecord {
        latency_ms: finite(record.latency_ms),
        cost_usd: finite(record.cost_usd),
        ttft_ms: record.ttft_ms.map(finite),
        ..record.clone()
    }
}

fn generation_path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("{PREFIX}{generation:08}{SUFFIX}"))
}

fn list_generations(dir: &Path) -> io::Result<Vec<u64>> {
    let mut generations = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        let parsed = name.to_str().and_then(|n| n.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?.parse::<u64>().ok());
        generations.extend(parsed);
    }
    generations.sort_unstable();
    Ok(generations)
}

fn read_or_create_id(dir: &Path) -> io::Result<String> {
    let path = dir.join(ID_FILE);
    match std::fs::read_to_string(&path) {
        Ok(id) if !id.trim().is_empty() => return Ok(id.trim().to_owned()),
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher
        .write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    let id = format!("{:016x}", hasher.finish());
    std::fs::write(&path, &id)?;
    Ok(id)
}
