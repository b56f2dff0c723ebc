//! Tests of the usage journal and its reader on real files; shared fixtures for the writer tests.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use super::journal::HANDOFF_MAX;
use super::journal::{Checkpoint, Journal, JournalOptions, MAX_GENERATION, MAX_OFFSET};
use super::reader::{JournalReader, Line};
use crate::records::UsageRecord;

/// A fresh directory under the system temp dir, removed on drop.
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    pub(crate) fn new(name: &str) -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Relaxed);
        let dir = std::env::temp_dir().join(format!("sy-usage-{}-{n}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        TempDir(dir)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(crate) fn record(id: &str) -> UsageRecord {
    UsageRecord {
        id: id.to_owned(),
        ts_ms: 1_700_000_000_000,
        key_id: Some("k_3f9a1c0e2b7d".into()),
        user: None,
        team: Some("team \"a\"\n".into()),
        model_requested: "fast".into(),
        model_served: "llama3.2:1b".into(),
        backend: Some("ollama-1".into()),
        status: 200,
        prompt_tokens: 12,
        completion_tokens: 7,
        total_tokens: 19,
        cache_read_tokens: 4,
        cache_write_tokens: 2,
        latency_ms: 12.5,
        ttft_ms: Some(3.25),
        cost_usd: 0.0001,
        estimated: false,
        tool: None,
        response_bytes: None,
        backend_key: None,
        route: None,
        bodies: None,
        guardrails: Vec::new(),
        guard_call: None,
        units: None,
        batch_id: None,
        experiment: None,
        variant: None,
        policy: None,
        tags: Vec::new(),
        task_id: None,
        task_state: None,
    }
}

pub(crate) fn open(dir: &TempDir, rotate_bytes: u64) -> Arc<Journal> {
    Journal::open(dir.path(), JournalOptions { rotate_bytes }).unwrap()
}

/// Every line the reader can take now, parsed, with its generation.
fn read_all(reader: &mut JournalReader) -> Vec<(u64, UsageRecord)> {
    read_all_handed(reader).into_iter().map(|(g, r, _)| (g, r)).collect()
}

/// Every line the reader can take now, with its generation and whether it came from the hand-off.
fn read_all_handed(reader: &mut JournalReader) -> Vec<(u64, UsageRecord, bool)> {
    let mut out = Vec::new();
    loop {
        let fill = reader.read(7, |g, line| out.push(with_origin(g, line))).unwrap();
        if fill.caught_up {
            return out;
        }
    }
}

/// The ids read, and how many of them came from the hand-off.
fn ids_and_handed(read: &[(u64, UsageRecord, bool)]) -> (Vec<String>, usize) {
    (read.iter().map(|(_, r, _)| r.id.clone()).collect(), read.iter().filter(|(_, _, handed)| *handed).count())
}

/// Append records `r{i}` for each `i` in `range`.
fn append_ids(journal: &Journal, range: std::ops::Range<usize>) {
    range.for_each(|i| journal.append(record(&format!("r{i}"))).unwrap());
}

fn ids(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("r{i}")).collect()
}

/// Write bytes into a journal file at `offset`, behind the journal's back.
fn write_raw(journal: &Journal, generation: u64, offset: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    std::fs::OpenOptions::new()
        .write(true)
        .open(journal.path(generation))
        .unwrap()
        .write_all_at(bytes, offset)
        .unwrap();
}

#[test]
fn checkpoint_encoding_round_trips_and_orders() {
    let cases = [(0, 0), (0, 17), (1, 0), (42, 64 << 20), (MAX_GENERATION, MAX_OFFSET)];
    for (generation, offset) in cases {
        let ck = Checkpoint { generation, offset };
        assert_eq!(Checkpoint::decode(ck.encode()), ck);
    }
    let encoded: Vec<u64> =
        cases.iter().map(|&(generation, offset)| Checkpoint { generation, offset }.encode()).collect();
    assert!(encoded.windows(2).all(|w| w[0] < w[1]), "encoding keeps (generation, offset) order");
    assert_eq!(Checkpoint { generation: 3, offset: 5 }.encode(), 3 << 40 | 5);
    assert_eq!(Checkpoint::decode(0), Checkpoint::default());
    assert!(Checkpoint { generation: MAX_GENERATION, offset: MAX_OFFSET }.encode() <= i64::MAX as u64);
}

#[test]
fn append_then_read_round_trips() {
    let dir = TempDir::new("roundtrip");
    let journal = open(&dir, 1 << 20);
    let records: Vec<UsageRecord> = (0..25).map(|i| record(&format!("r{i}"))).collect();
    for r in &records {
        journal.append(r.clone()).unwrap();
    }
    assert_eq!(journal.counters().queued.load(Relaxed), 25);
    let mut reader = JournalReader::open(journal.clone(), 0).unwrap();
    let read = read_all(&mut reader);
    assert_eq!(read.into_iter().map(|(_, r)| r).collect::<Vec<_>>(), records);
    assert_eq!(reader.position(), journal.written_end());
    // Closed, the file is cut to its data: one line per record, each a single JSON object.
    let (path, end) = (journal.path(0), journal.written_end().offset);
    drop((reader, journal));
    let text = std::fs::read_to_string(path).unwrap();
    assert_eq!(text.len() as u64, end);
    assert_eq!(text.lines().count(), 25);
    assert!(text.ends_with("}\n"));
}

#[test]
fn the_reader_stops_at_the_published_end_of_the_current_file() {
    let dir = TempDir::new("published");
    let journal = open(&dir, 1 << 20);
    journal.append(record("a")).unwrap();
    // Bytes past the published end (a copy in progress, as far as a reader can tell) are not taken,
    // even when they look like a complete line.
    let mut ghost = serde_json::to_vec(&record("ghost")).unwrap();
    ghost.push(b'\n');
    write_raw(&journal, 0, journal.written_end().offset, &ghost);
    let mut reader = JournalReader::open(journal.clone(), 0).unwrap();
    assert_eq!(read_all(&mut reader).into_iter().map(|(_, r)| r.id).collect::<Vec<_>>(), ["a"]);
    let after_a = reader.position();
    assert_eq!(read_all(&mut reader).len(), 0);
    assert_eq!(reader.position(), after_a);
    journal.append(record("b")).unwrap();
    assert_eq!(read_all(&mut reader).into_iter().map(|(_, r)| r.id).collect::<Vec<_>>(), ["b"]);
    assert_eq!(journal.counters().corrupt.load(Relaxed), 0);
}

#[test]
fn a_torn_tail_of_an_old_generation_is_skipped_and_counted() {
    let dir = TempDir::new("torn-old");
    let first = open(&dir, 1 << 20);
    first.append(record("a")).unwrap();
    // Killed in the middle of copying the next line: half a line, then the zeros of the mapped window.
    let end = first.written_end().offset;
    write_raw(&first, 0, end, b"{\"id\":\"half");
    std::mem::forget(first);
    assert!(std::fs::metadata(dir.path().join("usage-00000000.journal")).unwrap().len() > end + 11);
    // Restart: a new generation; the old one is cut to its data and sealed.
    let journal = open(&dir, 1 << 20);
    assert_eq!(std::fs::metadata(journal.path(0)).unwrap().len(), end + 11);
    assert_eq!((journal.start_generation(), journal.generation()), (1, 1));
    journal.append(record("b")).unwrap();
    let mut reader = JournalReader::open(journal.clone(), 0).unwrap();
    let read = read_all(&mut reader);
    assert_eq!(read.iter().map(|(g, r)| (*g, r.id.as_str())).collect::<Vec<_>>(), [(0, "a"), (1, "b")]);
    assert_eq!(journal.counters().corrupt.load(Relaxed), 1);
}

#[test]
fn generations_rotate_and_are_read_in_order() {
    let dir = TempDir::new("rotate");
    let journal = open(&dir, 700);
    let mut reader = JournalReader::open(journal.clone(), 0).unwrap();
    let mut read = Vec::new();
    for i in 0..40 {
        journal.append(record(&format!("r{i:02}"))).unwrap();
        if i % 9 == 0 {
            read.extend(read_all(&mut reader)); // read while files rotate under the reader
        }
    }
    read.extend(read_all(&mut reader));
    let ids: Vec<String> = read.iter().map(|(_, r)| r.id.clone()).collect();
    assert_eq!(ids, (0..40).map(|i| format!("r{i:02}")).collect::<Vec<_>>());
    let generations: Vec<u64> = read.iter().map(|(g, _)| *g).collect();
    assert!(generations.windows(2).all(|w| w[0] <= w[1]));
    assert!(journal.generation() >= 10, "rotated: {}", journal.generation());
    assert_eq!(journal.generations().unwrap().len() as u64, journal.generation() + 1);
    assert_eq!(reader.position().generation, journal.generation());
    // Everything below the reader is done: delete it, never the current file.
    journal.remove_below(u64::MAX).unwrap();
    assert_eq!(journal.generations().unwrap(), [journal.generation()]);
    journal.append(record("after")).unwrap();
    assert_eq!(read_all(&mut reader).len(), 1);
}

#[test]
fn the_reader_trusts_a_checkpoint_only_from_this_directory() {
    let dir = TempDir::new("trust");
    let journal = open(&dir, 1 << 20);
    for id in ["a", "b", "c"] {
        journal.append(record(id)).unwrap();
    }
    let line = std::fs::read_to_string(journal.path(0)).unwrap().find('\n').unwrap() as u64 + 1;
    let after_a = Checkpoint { generation: 0, offset: line }.encode();
    let ids = |reader: &mut JournalReader| read_all(reader).into_iter().map(|(_, r)| r.id).collect::<Vec<_>>();
    // Not marked synced (fresh or wiped directory): replay everything.
    assert_eq!(ids(&mut JournalReader::open(journal.clone(), after_a).unwrap()), ["a", "b", "c"]);
    journal.mark_synced().unwrap();
    assert!(dir.path().join("synced").exists());
    assert_eq!(ids(&mut JournalReader::open(journal.clone(), after_a).unwrap()), ["b", "c"]);
    // Past the end of its file (tail lost in a power cut): that file from its start.
    let past = Checkpoint { generation: 0, offset: 1 << 30 }.encode();
    assert_eq!(ids(&mut JournalReader::open(journal.clone(), past).unwrap()), ["a", "b", "c"]);
    // A generation this directory never had: replay everything.
    let future = Checkpoint { generation: 9, offset: 0 }.encode();
    assert_eq!(ids(&mut JournalReader::open(journal.clone(), future).unwrap()), ["a", "b", "c"]);
    // After a restart the old generation below a trusted checkpoint is deleted.
    drop(journal);
    let journal = open(&dir, 1 << 20);
    assert!(journal.is_synced());
    journal.append(record("d")).unwrap();
    let at_gen1 = Checkpoint { generation: 1, offset: 0 }.encode();
    assert_eq!(ids(&mut JournalReader::open(journal.clone(), at_gen1).unwrap()), ["d"]);
    assert_eq!(journal.generations().unwrap(), [1]);
}

#[test]
fn a_file_is_deleted_only_once_every_consumer_is_past_it() {
    let dir = TempDir::new("consumers");
    let journal = open(&dir, 1);
    let export = journal.add_consumer();
    for i in 0..4 {
        journal.append(record(&format!("r{i}"))).unwrap();
    }
    let last = journal.generation();
    assert!(last >= 3, "rotated: {last}");
    // The database is done with everything; the export sink is not: nothing goes.
    journal.remove_below(last).unwrap();
    assert_eq!(journal.generations().unwrap().len() as u64, last + 1);
    // The export sink's reader starts at its own checkpoint (trusted without the synced marker).
    let at_1 = Checkpoint { generation: 1, offset: 0 }.encode();
    let mut reader = JournalReader::open_as(journal.clone(), at_1, export).unwrap();
    assert_eq!(read_all(&mut reader)[0].1.id, "r1");
    assert_eq!(journal.generations().unwrap()[0], 1, "below both consumers");
    journal.release(export, last).unwrap();
    assert_eq!(journal.generations().unwrap(), [last]);
}

#[test]
fn non_finite_numbers_are_journalled_as_zero() {
    let dir = TempDir::new("nan");
    let journal = open(&dir, 1 << 20);
    let odd = UsageRecord { latency_ms: f64::NAN, cost_usd: f64::INFINITY, ttft_ms: Some(f64::NAN), ..record("nan") };
    journal.append(odd).unwrap();
    let read = read_all(&mut JournalReader::open(journal.clone(), 0).unwrap());
    let expected = UsageRecord { latency_ms: 0.0, cost_usd: 0.0, ttft_ms: Some(0.0), ..record("nan") };
    assert_eq!(read, [(0, expected)]);
}

#[test]
fn the_journal_id_is_stable_per_directory() {
    let dir = TempDir::new("id");
    let id = open(&dir, 1 << 20).id().to_owned();
    assert_eq!(id.len(), 16);
    assert_eq!(open(&dir, 1 << 20).id(), id);
    let other = TempDir::new("id2");
    assert_ne!(open(&other, 1 << 20).id(), id);
}

#[test]
fn sync_flushes_every_generation() {
    let dir = TempDir::new("sync");
    let journal = open(&dir, 300);
    for i in 0..5 {
        journal.append(record(&format!("s{i}"))).unwrap();
    }
    journal.sync().unwrap();
    journal.sync().unwrap();
}

#[test]
fn a_closed_journal_is_cut_to_its_data_takes_no_more_lines_and_reopens_beside_a_reader() {
    let dir = TempDir::new("close");
    let journal = open(&dir, 1 << 20);
    journal.append(record("a")).unwrap();
    let data = journal.written_end().offset;
    // A reader still holds the journal (an export sink past its grace period)...
    let mut reader = JournalReader::open(journal.clone(), 0).unwrap();
    journal.close().unwrap();
    assert_eq!(std::fs::metadata(journal.path(0)).unwrap().len(), data, "cut to its data at close");
    assert!(journal.append(record("b")).is_err(), "a closed journal takes no more lines");
    // ...while the next gateway opens the directory: it finds the file whole and starts the next one.
    let next = open(&dir, 1 << 20);
    assert_eq!(next.generation(), 1);
    assert_eq!(std::fs::metadata(journal.path(0)).unwrap().len(), data);
    let read: Vec<String> = read_all(&mut reader).into_iter().map(|(_, r)| r.id).collect();
    assert_eq!(read, ["a"]);
    drop(reader);
    drop(journal);
    assert_eq!(std::fs::metadata(next.path(0)).unwrap().len(), data, "the last reader letting go cuts nothing more");
}

#[test]
fn a_reader_past_its_backlog_skips_whole_files_oldest_first_and_counts_their_lines() {
    let dir = TempDir::new("backlog");
    // About 300 bytes a line: a new file every 4 lines.
    let journal = open(&dir, 1000);
    let consumer = journal.add_consumer();
    let mut reader = JournalReader::open_as(journal.clone(), 0, consumer).unwrap();
    for i in 0..3 {
        journal.append(record(&format!("r{i}"))).unwrap();
    }
    // Take one line; within any backlog the reader stays put.
    let mut first = 0;
    reader.read(1, |_, _| first += 1).unwrap();
    assert_eq!(first, 1);
    assert_eq!(reader.skip_backlog(0).unwrap(), None, "nothing sealed yet");
    for i in 3..40 {
        journal.append(record(&format!("r{i}"))).unwrap();
    }
    assert_eq!(reader.skip_backlog(u64::MAX).unwrap(), None);
    let line = serde_json::to_vec(&record("r10")).unwrap().len() as u64 + 1;
    // Room for about 12 lines: the files before it go, counted line by line.
    let skipped = reader.skip_backlog(12 * line).unwrap().expect("over the backlog");
    let rest: Vec<String> = read_all(&mut reader).into_iter().map(|(_, r)| r.id).collect();
    assert_eq!(skipped as usize + rest.len(), 39, "skipped {skipped}, then read {rest:?}");
    assert!(rest.len() <= 12 && !rest.is_empty(), "{rest:?}");
    // What is left is the newest records, in order, from the start of a file.
    let expected: Vec<String> = (40 - rest.len()..40).map(|i| format!("r{i}")).collect();
    assert_eq!(rest, expected);
    assert_eq!(reader.position().generation, journal.generation());
}

#[test]
fn records_appended_once_the_writers_reader_looked_are_handed_off_as_the_file_has_them() {
    let dir = TempDir::new("handoff");
    let journal = open(&dir, 1 << 20);
    let export = journal.add_consumer();
    let mut reader = JournalReader::open(journal.clone(), 0).unwrap();
    assert!(read_all(&mut reader).is_empty());
    let records: Vec<UsageRecord> = (0..25).map(|i| record(&format!("r{i}"))).collect();
    records.iter().for_each(|r| journal.append(r.clone()).unwrap());
    let read = read_all_handed(&mut reader);
    assert_eq!(ids_and_handed(&read), (ids(0..25), 25), "all from memory");
    assert_eq!(read.into_iter().map(|(_, r, _)| r).collect::<Vec<_>>(), records);
    assert_eq!(reader.position(), journal.written_end());
    // An export sink's reader takes no hand-off: the same records, from the file.
    let from_file = read_all_handed(&mut JournalReader::open_as(journal.clone(), 0, export).unwrap());
    assert_eq!(ids_and_handed(&from_file), (ids(0..25), 0));
}

#[test]
fn past_a_full_hand_off_the_reader_reads_the_file_and_takes_the_hand_off_again_after() {
    let dir = TempDir::new("handoff-full");
    let journal = open(&dir, 1 << 30);
    let mut reader = JournalReader::open(journal.clone(), 0).unwrap();
    assert!(read_all(&mut reader).is_empty());
    let n = HANDOFF_MAX + 10;
    append_ids(&journal, 0..n);
    assert_eq!(ids_and_handed(&read_all_handed(&mut reader)), (ids(0..n), HANDOFF_MAX));
    append_ids(&journal, n..n + 5);
    assert_eq!(ids_and_handed(&read_all_handed(&mut reader)), (ids(n..n + 5), 5));
    assert_eq!(reader.position(), journal.written_end());
}

#[test]
fn file_lines_and_handed_records_interleave_in_order_across_reads_rotations_and_cut_lines() {
    let dir = TempDir::new("handoff-mixed");
    // About 300 bytes a line: a few hundred lines to a file, so files turn over while the reader
    // reads 64 KiB at a time, and a read's last line is cut in two now and then.
    let journal = open(&dir, 100_000);
    let mut reader = JournalReader::open(journal.clone(), 0).unwrap();
    let mut read = Vec::new();
    for round in 0..6 {
        let from = round * 400;
        // The first half of each round goes missing from the hand-off (taken and dropped here, as
        // when it was full): the reader must find those in the file, the second half in memory.
        append_ids(&journal, from..from + 200);
        drop(journal.take_handed());
        append_ids(&journal, from + 200..from + 400);
        // A few lines first, so the reader stops with the rest of a 64 KiB read in its buffer
        // (the first half's 200 lines are less than that: it holds some of the second's too, the
        // last of them cut), then the rest.
        reader.read(1 + round, |g, line| read.push(with_origin(g, line))).unwrap();
        read.extend(read_all_handed(&mut reader));
    }
    let (read_ids, handed) = ids_and_handed(&read);
    assert_eq!(read_ids, ids(0..2400));
    assert_eq!(handed, 1200, "each round's second half from memory");
    assert!(journal.generation() >= 5, "rotated: {}", journal.generation());
    assert!(read.windows(2).all(|w| w[0].0 <= w[1].0), "generations in order");
    assert_eq!(reader.position(), journal.written_end());
    assert_eq!(journal.counters().corrupt.load(Relaxed), 0);
}

fn with_origin(generation: u64, line: Line<'_>) -> (u64, UsageRecord, bool) {
    match line {
        Line::Record(r) => (generation, r, true),
        Line::Bytes(bytes) => (generation, serde_json::from_slice(bytes).unwrap(), false),
    }
}
