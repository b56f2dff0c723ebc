//! `JournalReader`: tails the usage journal from a checkpoint, complete lines only, across
//! generations in order. Blocking file I/O: the writer runs it on the blocking pool.
//!
//! Where to start. The sink's checkpoint is trusted only if this directory's `synced` marker
//! exists (the writer creates it after its first successful batch), i.e. the checkpoint counts
//! *these* files. A fresh or wiped directory restarts its numbering at 0, so a checkpoint from
//! the old one would skip new records; without the marker the reader replays every file from its
//! start instead. Replaying more than needed is always safe: the sink inserts by record id with
//! `ON CONFLICT DO NOTHING`, so a replayed record is stored once. The same holds when the
//! checkpoint points past the end of its file (the journal lost its tail in a power cut): that
//! file is replayed from the beginning. Files below a trusted checkpoint are fully stored and are
//! deleted.
//!
//! Hand-off: the database writer's reader (consumer 0) takes the records this process appends
//! from the journal in memory (`Journal::take_handed`) whenever the next one there starts where
//! the reader is, and reads the file otherwise (a gap where the hand-off was full, another
//! generation, a replay): the same records in the same order either way. Files are read with
//! `pread` at the reader's position, so skipping a handed line's bytes needs no seek.
//!
//! Lines: in the generation being appended to, the reader reads only up to the journal's
//! published end of data, so it takes complete lines only (the file itself is longer: the rest of
//! its mapped window is zeros). A line without its `\n` at the end of a sealed generation is a
//! torn write (the process was killed mid-copy) and is skipped (counted as corrupt). Lines that are complete but not a record are
//! handed to the caller, which counts them.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use super::journal::{Checkpoint, Handed, Journal};
use crate::records::UsageRecord;

/// Bytes read from the file per `pread(2)`.
const CHUNK: usize = 64 << 10;

pub struct JournalReader {
    journal: Arc<Journal>,
    generation: u64,
    file: File,
    /// Bytes read but not yet taken, from `start`.
    buf: Vec<u8>,
    start: usize,
    /// File offset of `buf[start]`: the checkpoint after the last line taken.
    offset: u64,
    /// Records taken from the journal's hand-off and not yet passed; `None` for a reader that
    /// does not take them (an export sink's).
    handed: Option<VecDeque<Handed>>,
}

/// One journal line as a reader hands it on: its bytes, or the record itself when it came
/// from the hand-off. Passed by value to the reader's callback, once per line, never kept: the
/// record is not boxed (an allocation per record, to save a move).
#[allow(clippy::large_enum_variant)]
pub enum Line<'a> {
    Bytes(&'a [u8]),
    Record(UsageRecord),
}

/// What one `read` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fill {
    /// Lines handed to the callback.
    pub lines: usize,
    /// No complete line is left to read right now.
    pub caught_up: bool,
}

impl JournalReader {
    /// Position a reader at the database sink's `checkpoint` (see the module doc for when it is trusted).
    pub fn open(journal: Arc<Journal>, checkpoint: u64) -> io::Result<JournalReader> {
        JournalReader::open_as(journal, checkpoint, 0)
    }

    /// A reader for journal consumer `consumer` (`Journal::add_consumer`). Only the database's
    /// checkpoint (consumer 0) can belong to another directory; an export sink keeps its
    /// checkpoint inside this one, so it is trusted whenever it is not in the future.
    pub fn open_as(journal: Arc<Journal>, checkpoint: u64, consumer: usize) -> io::Result<JournalReader> {
        let ck = Checkpoint::decode(checkpoint);
        let current = journal.generation();
        let trusted = (consumer != 0 || journal.is_synced()) && ck.generation <= current;
        if trusted {
            journal.release(consumer, ck.generation)?;
        }
        let generations = journal.generations()?;
        let (generation, mut offset) = if trusted {
            match generations.iter().copied().find(|&g| g >= ck.generation) {
                Some(g) if g == ck.generation => (g, ck.offset),
                Some(g) => (g, 0),
                None => (current, 0),
            }
        } else {
            (generations.first().copied().unwrap_or(current), 0)
        };
        let file = File::open(journal.path(generation))?;
        if offset > file.metadata()?.len() {
            tracing::warn!(generation, offset, "usage checkpoint is past the end of its journal file; replaying it");
            offset = 0;
        }
        let handed = (consumer == 0).then(VecDeque::new);
        Ok(JournalReader { journal, generation, file, buf: Vec::new(), start: 0, offset, handed })
    }

    /// Where the next line starts: the checkpoint to store once every line taken is stored.
    pub fn position(&self) -> Checkpoint {
        Checkpoint { generation: self.generation, offset: self.offset }
    }

    /// Hand up to `max` complete, non-empty lines (without the `\n`), or their records from the
    /// hand-off, to `each` with their generation, moving to later generations when a sealed one
    /// is exhausted.
    pub fn read(&mut self, max: usize, mut each: impl FnMut(u64, Line<'_>)) -> io::Result<Fill> {
        let mut lines = 0;
        loop {
            while lines < max {
                if let Some(record) = self.take_handed() {
                    each(self.generation, Line::Record(record));
                    lines += 1;
                    continue;
                }
                let Some(nl) = memchr::memchr(b'\n', &self.buf[self.start..]) else { break };
                let (from, to) = (self.start, self.start + nl);
                self.start = to + 1;
                self.offset += nl as u64 + 1;
                if to > from {
                    each(self.generation, Line::Bytes(&self.buf[from..to]));
                    lines += 1;
                }
            }
            if lines >= max {
                return Ok(Fill { lines, caught_up: false });
            }
            // Need more: records handed off since, else bytes from the file.
            if self.refill_handed() {
                continue;
            }
            // Keep only the incomplete tail.
            self.buf.drain(..self.start);
            self.start = 0;
            // Read the end before the file: if it was sealed then, this read sees its last byte.
            let end = self.journal.written_end();
            let sealed = end.generation > self.generation;
            if self.fill_buf(if sealed { u64::MAX } else { end.offset })? > 0 {
                continue;
            }
            if !sealed || !self.advance()? {
                return Ok(Fill { lines, caught_up: true });
            }
        }
    }

    /// The handed-off record whose line starts where this reader is, if the next one does (those
    /// already passed are dropped); its line's bytes are passed over.
    fn take_handed(&mut self) -> Option<UsageRecord> {
        let here = self.position();
        let handed = self.handed.as_mut()?;
        while handed.front().is_some_and(|next| next.start < here) {
            handed.pop_front();
        }
        let next = handed.pop_front_if(|next| next.start == here)?;
        let len = (next.end - next.start.offset) as usize;
        if self.buf.len() - self.start >= len {
            self.start += len;
        } else {
            // What was read of the line is a prefix of it: the next read starts after it.
            self.buf.clear();
            self.start = 0;
        }
        self.offset = next.end;
        Some(next.record)
    }

    /// Take what was handed off since the last look, when nothing taken is left; whether the
    /// next record there starts where this reader is.
    fn refill_handed(&mut self) -> bool {
        let here = self.position();
        match &mut self.handed {
            Some(handed) if handed.is_empty() => {
                *handed = self.journal.take_handed();
                handed.front().is_some_and(|next| next.start == here)
            }
            _ => false,
        }
    }

    /// Read more of the file, but not past file offset `limit`.
    fn fill_buf(&mut self, limit: u64) -> io::Result<usize> {
        let old = self.buf.len();
        let file_pos = self.offset + (old - self.start) as u64;
        let want = limit.saturating_sub(file_pos).min(CHUNK as u64) as usize;
        if want == 0 {
            return Ok(0);
        }
        self.buf.resize(old + want, 0);
        let read = loop {
            match self.file.read_at(&mut self.buf[old..], file_pos) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => break other,
            }
        };
        self.buf.truncate(old + *read.as_ref().unwrap_or(&0));
        read
    }

    /// Keep this reader at most `max` bytes of journal behind the end of what is written: when it
    /// is further behind, move it forward over whole files, oldest first (never into the file
    /// being written), until what is left to read fits. Returns how many lines it skipped, or
    /// `None` when it was within `max` and stayed where it is. For an export sink that has been
    /// down so long that keeping all it missed would fill the disk.
    pub fn skip_backlog(&mut self, max: u64) -> io::Result<Option<u64>> {
        let end = self.journal.written_end();
        if end.generation <= self.generation {
            return Ok(None);
        }
        // The sealed files from this reader's on, each with what is left to read in it.
        let mut files = Vec::new();
        for generation in self.journal.generations()? {
            if generation < self.generation || generation >= end.generation {
                continue;
            }
            let len = std::fs::metadata(self.journal.path(generation))?.len();
            let from = if generation == self.generation { self.offset.min(len) } else { 0 };
            files.push((generation, from, len - from));
        }
        let mut behind = end.offset + files.iter().map(|f| f.2).sum::<u64>();
        if behind <= max {
            return Ok(None);
        }
        let mut skipped = 0;
        let mut next = end.generation;
        for (i, &(generation, from, left)) in files.iter().enumerate() {
            if behind <= max {
                next = generation;
                break;
            }
            skipped += count_lines(&self.journal.path(generation), from)?;
            behind -= left;
            if i + 1 == files.len() {
                next = end.generation;
            }
        }
        self.file = File::open(self.journal.path(next))?;
        self.generation = next;
        self.offset = 0;
        self.buf.clear();
        self.start = 0;
        Ok(Some(skipped))
    }

    /// Move past an exhausted, sealed generation. False if there is no later file (cannot
    /// happen while the journal is open, as the current generation's file exists).
    fn advance(&mut self) -> io::Result<bool> {
        let Some(next) = self.journal.generations()?.into_iter().find(|&g| g > self.generation) else {
            return Ok(false);
        };
        if !self.buf.is_empty() {
            tracing::warn!(generation = self.generation, bytes = self.buf.len(), "skipping a torn usage journal line");
            self.journal.counters().corrupt.fetch_add(1, Relaxed);
            self.buf.clear();
        }
        self.file = File::open(self.journal.path(next))?;
        self.generation = next;
        self.offset = 0;
        Ok(true)
    }
}

/// Complete lines in the file at `path` from byte `from` on.
fn count_lines(path: &std::path::Path, from: u64) -> io::Result<u64> {
    let mut file = File::open(path)?;
    file.seek(SeekFrom::Start(from))?;
    let mut buf = vec![0u8; CHUNK];
    let mut lines = 0;
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => return Ok(lines),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        lines += memchr::memchr_iter(b'\n', &buf[..n]).count() as u64;
    }
}
