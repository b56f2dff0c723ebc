//! One journal file, appended to through a shared memory mapping: an append is a `memcpy` into
//! the page cache, with no system call, and survives the process being killed just as a
//! `write(2)` would (the pages belong to the kernel's cache of the file, not to the process).
//!
//! The mapping is a window of [`WINDOW`] bytes that slides along the file: a full window is
//! unmapped, so the pages the process keeps mapped (and that count in its RSS) stay bounded by
//! one window however long the file grows. Each window's blocks are reserved with `fallocate`
//! before it is mapped: a store into a mapped page the file system cannot back would kill the
//! process with SIGBUS, whereas a failed reservation is an ordinary error (the record is lost and
//! counted, as a failed `write` would be).
//!
//! The file is longer than its data while it is being written (the rest of the window is zeros).
//! [`Segment::seal`] (rotation, shutdown, drop) cuts it to the data; after a crash,
//! [`trim_zero_tail`] does the same when the directory is next opened. Records never contain a
//! NUL byte (they are JSON), so the data ends at the last non-zero byte.
//!
//! Pages are made writable [`PREFAULT`] bytes ahead of the data with one `madvise` call
//! (`MADV_POPULATE_WRITE`): a first store into each page would otherwise fault, and in a VM one
//! fault per 4 KiB (one per dozen records) cost more than the rest of an append.

#![allow(unsafe_code)] // mmap and fallocate; see the SAFETY notes.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::path::Path;

use memmap2::{Advice, MmapMut, MmapOptions};

/// Bytes mapped at a time.
const WINDOW: u64 = 1 << 20;
/// Window starts are multiples of this (the largest page size Linux uses for such mappings).
const ALIGN: u64 = 64 << 10;
/// Bytes made writable ahead of the data at a time.
const PREFAULT: u64 = 64 << 10;

pub struct Segment {
    file: File,
    /// Bytes of data (the append position).
    len: u64,
    /// The mapped window and the file offset it starts at.
    window: Option<(u64, MmapMut)>,
    /// File offset up to which the window's pages are known writable; `None` once the kernel
    /// refused to prefault (before Linux 5.14): stores then fault page by page.
    prefaulted: Option<u64>,
}

impl Segment {
    /// Create a new, empty file at `path` (it must not exist).
    pub fn create(path: &Path) -> io::Result<Segment> {
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(path)?;
        Ok(Segment { file, len: 0, window: None, prefaulted: Some(0) })
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    /// Append `bytes`. On error nothing was written.
    pub fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        let end = self.len + bytes.len() as u64;
        let (start, map) = match self.window.take() {
            Some((start, map)) if end <= start + map.len() as u64 => (start, map),
            old => {
                drop(old);
                let mapped = self.map_window(bytes.len() as u64)?;
                // A new mapping's pages are not writable yet, even where the old one's were.
                self.prefaulted = self.prefaulted.map(|_| self.len);
                mapped
            }
        };
        if self.prefaulted.is_some_and(|done| end > done) {
            self.prefaulted = prefault(&map, start, self.prefaulted.unwrap_or(self.len).max(self.len), end);
        }
        let at = (self.len - start) as usize;
        let window = self.window.insert((start, map));
        window.1[at..at + bytes.len()].copy_from_slice(bytes);
        self.len = end;
        Ok(())
    }

    /// Map a window that starts at or before `len` and has room for `need` more bytes.
    fn map_window(&mut self, need: u64) -> io::Result<(u64, MmapMut)> {
        let start = self.len - self.len % ALIGN;
        let size = (self.len - start + need).next_multiple_of(WINDOW);
        reserve(&self.file, start, size)?;
        // SAFETY: the file is this process's own (created with `create_new`, one process per
        // journal directory), its blocks for the whole window were just reserved so a store
        // cannot fault for lack of space, and it is never truncated below a mapped window
        // (`seal` unmaps first).
        let map = unsafe { MmapOptions::new().offset(start).len(size as usize).map_mut(&self.file)? };
        Ok((start, map))
    }

    /// Unmap and cut the file to its data; further appends map a new window.
    pub fn seal(&mut self) -> io::Result<()> {
        self.window = None;
        self.file.set_len(self.len)
    }

    /// The file, e.g. to fsync it (which writes back pages dirtied through the mapping too).
    pub fn file(&self) -> &File {
        &self.file
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        if let Err(e) = self.seal() {
            tracing::warn!(error = %e, "could not cut a usage journal file to its data");
        }
    }
}

/// Make the window's pages from `from` to [`PREFAULT`] past `end` writable in one call; the new
/// prefaulted offset, or `None` when the kernel cannot (nothing is lost: stores fault instead).
fn prefault(map: &MmapMut, start: u64, from: u64, end: u64) -> Option<u64> {
    let window_end = start + map.len() as u64;
    let from = from.max(start);
    let to = (end + PREFAULT).next_multiple_of(PREFAULT).min(window_end);
    if to <= from {
        return Some(from);
    }
    match map.advise_range(Advice::PopulateWrite, (from - start) as usize, (to - from) as usize) {
        Ok(()) => Some(to),
        Err(e) => {
            tracing::debug!(error = %e, "cannot prefault the usage journal's pages; they fault one by one");
            None
        }
    }
}

/// Reserve the file's blocks for `[start, start + size)`, growing it as needed.
fn reserve(file: &File, start: u64, size: u64) -> io::Result<()> {
    let (Ok(offset), Ok(len)) = (libc::off_t::try_from(start), libc::off_t::try_from(size)) else {
        return Err(io::Error::other("usage journal file is too large"));
    };
    // SAFETY: plain system call on a file descriptor this `File` owns.
    match unsafe { libc::posix_fallocate(file.as_raw_fd(), offset, len) } {
        0 => Ok(()),
        err => Err(io::Error::from_raw_os_error(err)),
    }
}

/// Cut a file left by a process that died while writing it down to its data (see the module
/// doc). A file that ends in a non-zero byte is left alone.
pub fn trim_zero_tail(path: &Path) -> io::Result<()> {
    let mut file = OpenOptions::new().read(true).write(true).open(path)?;
    let mut end = file.metadata()?.len();
    let mut buf = vec![0u8; 64 << 10];
    while end > 0 {
        let from = end.saturating_sub(buf.len() as u64);
        let chunk = &mut buf[..(end - from) as usize];
        file.seek(SeekFrom::Start(from))?;
        if let Err(e) = file.read_exact(chunk) {
            if e.kind() != io::ErrorKind::UnexpectedEof {
                return Err(e);
            }
            // Cut shorter meanwhile (its writer sealed it): start again from its new end.
            let len = file.metadata()?.len();
            if len >= end {
                return Err(e);
            }
            end = len;
            continue;
        }
        match chunk.iter().rposition(|&b| b != 0) {
            Some(i) => {
                end = from + i as u64 + 1;
                break;
            }
            None => end = from,
        }
    }
    if end < file.metadata()?.len() {
        file.set_len(end)?;
    }
    Ok(())
}
