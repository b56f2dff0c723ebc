//! Tests of `UsageWriter` against an in-memory sink that de-duplicates by id like the SQL one:
//! exactly-once under load, outages, restarts and simulated crashes.

use std::collections::HashMap;
use std::future::Future;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;
use crate::usage::journal::Checkpoint;
use crate::usage::tests::{open, record, TempDir};

#[derive(Default)]
struct FakeSink {
    state: Mutex<State>,
    fail_writes: AtomicBool,
    fail_checkpoint: AtomicBool,
    /// Commit, then report an error (the connection died after COMMIT).
    fail_after_commit: AtomicBool,
    /// Before the commit (a crash here loses the batch's transaction).
    delay_ms: AtomicU64,
    /// After the commit (a crash here means committed but not acknowledged).
    ack_delay_ms: AtomicU64,
    attempts: AtomicU64,
}

#[derive(Default)]
struct State {
    rows: HashMap<String, UsageRecord>,
    /// How many committed batches carried each id (replays show up here, never in `rows`).
    deliveries: HashMap<String, u32>,
    checkpoint: u64,
    largest_batch: usize,
}

impl FakeSink {
    fn commit(&self, records: &[UsageRecord], checkpoint: u64) -> u64 {
        let mut state = self.state.lock().unwrap();
        let mut inserted = 0;
        for r in records {
            *state.deliveries.entry(r.id.clone()).or_default() += 1;
            if !state.rows.contains_key(&r.id) {
                state.rows.insert(r.id.clone(), r.clone());
                inserted += 1;
            }
        }
        state.checkpoint = checkpoint;
        state.largest_batch = state.largest_batch.max(records.len());
        inserted
    }

    fn rows(&self) -> usize {
        self.state.lock().unwrap().rows.len()
    }

    fn deliveries(&self) -> HashMap<String, u32> {
        self.state.lock().unwrap().deliveries.clone()
    }
}

impl UsageSink for FakeSink {
    async fn write_batch(&self, records: &[UsageRecord], checkpoint: u64) -> Result<u64, String> {
        self.attempts.fetch_add(1, Relaxed);
        let delay = self.delay_ms.load(Relaxed);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        if self.fail_writes.load(Relaxed) {
            return Err("database is down".to_owned());
        }
        let inserted = self.commit(records, checkpoint);
        let ack = self.ack_delay_ms.load(Relaxed);
        if ack > 0 {
            tokio::time::sleep(Duration::from_millis(ack)).await;
        }
        if self.fail_after_commit.load(Relaxed) {
            return Err("connection reset after commit".to_owned());
        }
        Ok(inserted)
    }

    fn checkpoint(&self) -> impl Future<Output = Result<u64, String>> + Send {
        let result = if self.fail_checkpoint.load(Relaxed) {
            Err("database is down".to_owned())
        } else {
            Ok(self.state.lock().unwrap().checkpoint)
        };
        async move { result }
    }
}

fn config() -> WriterConfig {
    WriterConfig {
        batch_max: 64,
        linger: Duration::from_millis(2),
        backoff_min: Duration::from_millis(2),
        backoff_max: Duration::from_millis(20),
        idle_poll: Duration::from_millis(200),
        ..WriterConfig::default()
    }
}

async fn eventually(what: &str, cond: impl Fn() -> bool) {
    for _ in 0..2500 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("timed out waiting for {what}");
}

fn count(c: &AtomicU64) -> u64 {
    c.load(Relaxed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_record_is_written_exactly_once() {
    let dir = TempDir::new("once");
    let journal = open(&dir, 8 << 10);
    let sink = Arc::new(FakeSink::default());
    let cfg = WriterConfig { fsync_every: Some(Duration::from_millis(5)), ..config() };
    let writer = UsageWriter::spawn(journal.clone(), sink.clone(), cfg);
    let appenders: Vec<_> = (0..4)
        .map(|t| {
            let journal = journal.clone();
            tokio::spawn(async move {
                for i in 0..500 {
                    journal.append(record(&format!("t{t}-{i}"))).unwrap();
                    if i % 50 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect();
    for a in appenders {
        a.await.unwrap();
    }
    assert!(writer.shutdown(Duration::from_secs(10)).await, "caught up");
    let deliveries = sink.deliveries();
    assert_eq!(deliveries.len(), 2000);
    assert!(deliveries.values().all(|&n| n == 1), "no record sent twice");
    assert_eq!(sink.state.lock().unwrap().rows["t3-499"], record("t3-499"));
    assert!(sink.state.lock().unwrap().largest_batch <= 64);
    let c = journal.counters();
    assert_eq!((count(&c.queued), count(&c.written)), (2000, 2000));
    assert_eq!((count(&c.spilled), count(&c.replayed), count(&c.corrupt)), (0, 0, 0));
    // Fully written generations are deleted; the checkpoint is the end of the journal.
    assert_eq!(journal.generations().unwrap(), [journal.generation()]);
    let ck = Checkpoint::decode(sink.state.lock().unwrap().checkpoint);
    assert_eq!(ck.generation, journal.generation());
    assert_eq!(ck, journal.written_end());
}

#[tokio::test]
async fn an_outage_spills_then_writes_each_record_once() {
    let dir = TempDir::new("outage");
    let journal = open(&dir, 1 << 20);
    let sink = Arc::new(FakeSink::default());
    sink.fail_writes.store(true, Relaxed);
    let writer = UsageWriter::spawn(journal.clone(), sink.clone(), config());
    for i in 0..50 {
        journal.append(record(&format!("a{i}"))).unwrap();
    }
    let c = journal.counters().clone();
    eventually("failed attempts", || count(&sink.attempts) >= 3).await;
    assert_eq!((count(&c.spilled), count(&c.written)), (50, 0));
    for i in 0..10 {
        journal.append(record(&format!("b{i}"))).unwrap();
    }
    eventually("records read during the outage count as spilled", || count(&c.spilled) == 60).await;
    sink.fail_writes.store(false, Relaxed);
    eventually("recovery", || count(&c.written) == 60).await;
    assert_eq!(count(&c.replayed), 60);
    journal.append(record("after")).unwrap();
    assert!(writer.shutdown(Duration::from_secs(5)).await);
    assert_eq!((count(&c.written), count(&c.spilled), count(&c.replayed)), (61, 60, 60), "back to normal");
    assert!(sink.deliveries().values().all(|&n| n == 1));
}

#[tokio::test]
async fn a_sink_down_at_start_up_does_not_block_appends() {
    let dir = TempDir::new("startup");
    let journal = open(&dir, 1 << 20);
    let sink = Arc::new(FakeSink::default());
    sink.fail_checkpoint.store(true, Relaxed);
    let writer = UsageWriter::spawn(journal.clone(), sink.clone(), config());
    for i in 0..20 {
        journal.append(record(&format!("r{i}"))).unwrap();
    }
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(sink.rows(), 0);
    sink.fail_checkpoint.store(false, Relaxed);
    assert!(writer.shutdown(Duration::from_secs(5)).await);
    let c = journal.counters();
    assert_eq!((count(&c.written), count(&c.spilled), count(&c.replayed)), (20, 20, 20));
}

#[tokio::test]
async fn a_restart_replays_only_what_is_after_the_checkpoint() {
    let dir = TempDir::new("restart");
    let sink = Arc::new(FakeSink::default());
    let journal = open(&dir, 1 << 20);
    let writer = UsageWriter::spawn(journal.clone(), sink.clone(), config());
    (0..30).for_each(|i| journal.append(record(&format!("a{i}"))).unwrap());
    assert!(writer.shutdown(Duration::from_secs(5)).await);
    // Written while no writer ran; a new writer on the same journal sends only these.
    (0..20).for_each(|i| journal.append(record(&format!("b{i}"))).unwrap());
    let writer = UsageWriter::spawn(journal.clone(), sink.clone(), config());
    assert!(writer.shutdown(Duration::from_secs(5)).await);
    assert_eq!(sink.deliveries().values().sum::<u32>(), 50, "nothing sent twice");
    // A new process on the same directory replays the old generation from the checkpoint.
    (0..5).for_each(|i| journal.append(record(&format!("c{i}"))).unwrap());
    drop(journal);
    let journal = open(&dir, 1 << 20);
    let writer = UsageWriter::spawn(journal.clone(), sink.clone(), config());
    assert!(writer.shutdown(Duration::from_secs(5)).await);
    let deliveries = sink.deliveries();
    assert_eq!((deliveries.len(), deliveries.values().sum::<u32>()), (55, 55));
    assert_eq!(count(&journal.counters().replayed), 5);
    assert_eq!(count(&journal.counters().written), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashes_lose_nothing_and_store_nothing_twice() {
    let dir = TempDir::new("crash");
    let sink = Arc::new(FakeSink::default());
    let mut expected = Vec::new();
    for round in 0..8u64 {
        let journal = open(&dir, 4 << 10);
        sink.delay_ms.store(round % 3, Relaxed);
        sink.ack_delay_ms.store(if round % 2 == 1 { 3 } else { 0 }, Relaxed);
        sink.fail_after_commit.store(round == 5, Relaxed);
        sink.fail_writes.store(round == 6, Relaxed);
        let writer = UsageWriter::spawn(journal.clone(), sink.clone(), WriterConfig { batch_max: 16, ..config() });
        let appenders: Vec<_> = (0..2)
            .map(|t| {
                let journal = journal.clone();
                tokio::spawn(async move {
                    for i in 0..150 {
                        journal.append(record(&format!("r{round}-t{t}-{i}"))).unwrap();
                        if i % 10 == 0 {
                            tokio::time::sleep(Duration::from_micros(300)).await;
                        }
                    }
                })
            })
            .collect();
        // Kill the writer at a different point each round, with appends still going on.
        tokio::time::sleep(Duration::from_millis(1 + round * 2)).await;
        drop(writer);
        for a in appenders {
            a.await.unwrap();
        }
        expected.extend((0..2).flat_map(|t| (0..150).map(move |i| format!("r{round}-t{t}-{i}"))));
        drop(journal);
    }
    for flag in [&sink.fail_after_commit, &sink.fail_writes] {
        flag.store(false, Relaxed);
    }
    let journal = open(&dir, 4 << 10);
    let writer = UsageWriter::spawn(journal.clone(), sink.clone(), config());
    assert!(writer.shutdown(Duration::from_secs(10)).await);
    let state = sink.state.lock().unwrap();
    let mut stored: Vec<&String> = state.rows.keys().collect();
    stored.sort();
    expected.sort();
    assert_eq!(stored, expected.iter().collect::<Vec<_>>(), "every completed record stored, nothing extra");
    // Rows are unique by construction of the sink; count how many replays it had to absorb.
    let replays: u32 = state.deliveries.values().map(|n| n - 1).sum();
    eprintln!("{} records, {replays} duplicate deliveries absorbed by ON CONFLICT", expected.len());
    assert_eq!(journal.generations().unwrap(), [journal.generation()], "all written generations deleted");
}

#[tokio::test]
async fn corrupt_lines_are_skipped_and_counted() {
    let dir = TempDir::new("corrupt");
    // Lines that are not records, in a file an earlier process left (cut to its data on close).
    let earlier = open(&dir, 1 << 20);
    earlier.append(record("a")).unwrap();
    let path = earlier.path(earlier.generation());
    drop(earlier);
    let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    file.write_all(b"not json\n{\"id\":1}\n\n").unwrap();
    let journal = open(&dir, 1 << 20);
    journal.append(record("b")).unwrap();
    let sink = Arc::new(FakeSink::default());
    let writer = UsageWriter::spawn(journal.clone(), sink.clone(), config());
    assert!(writer.shutdown(Duration::from_secs(5)).await);
    assert_eq!(sink.rows(), 2);
    assert_eq!(count(&journal.counters().corrupt), 2, "the empty line is not counted");
}

#[tokio::test]
async fn shutdown_gives_up_at_the_deadline_and_keeps_the_records() {
    let dir = TempDir::new("deadline");
    let journal = open(&dir, 1 << 20);
    let sink = Arc::new(FakeSink::default());
    sink.fail_writes.store(true, Relaxed);
    let writer = UsageWriter::spawn(journal.clone(), sink.clone(), config());
    (0..5).for_each(|i| journal.append(record(&format!("r{i}"))).unwrap());
    assert!(!writer.shutdown(Duration::from_millis(100)).await);
    sink.fail_writes.store(false, Relaxed);
    let writer = UsageWriter::spawn(journal.clone(), sink.clone(), config());
    assert!(writer.shutdown(Duration::from_secs(5)).await);
    assert_eq!(sink.rows(), 5);
}

#[tokio::test]
async fn a_fresh_directory_ignores_a_foreign_checkpoint() {
    let dir = TempDir::new("wiped");
    let sink = Arc::new(FakeSink::default());
    // The database remembers a journal that no longer exists (the directory was wiped).
    sink.state.lock().unwrap().checkpoint = Checkpoint { generation: 7, offset: 12345 }.encode();
    let journal = open(&dir, 1 << 20);
    (0..10).for_each(|i| journal.append(record(&format!("r{i}"))).unwrap());
    let writer = UsageWriter::spawn(journal.clone(), sink.clone(), config());
    assert!(writer.shutdown(Duration::from_secs(5)).await);
    assert_eq!(sink.rows(), 10);
    assert!(journal.is_synced(), "the checkpoint now describes this directory");
}

/// The real thing: a child process appends from two threads and reports each id once `append`
/// returned; it is SIGKILLed mid-stream; a writer started afterwards must store every reported id.
#[test]
fn a_sigkilled_process_loses_no_completed_record() {
    const CHILD: &str = "SY_USAGE_SIGKILL_CHILD_DIR";
    if let Ok(dir) = std::env::var(CHILD) {
        let journal =
            crate::usage::Journal::open(dir, crate::usage::JournalOptions { rotate_bytes: 16 << 10 }).unwrap();
        let threads: Vec<_> = (0..2)
            .map(|t| {
                let journal = journal.clone();
                std::thread::spawn(move || {
                    for i in 0..100_000 {
                        let id = format!("k{t}-{i}");
                        journal.append(record(&id)).unwrap();
                        println!("done:{id}");
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        return;
    }
    use std::io::BufRead;
    let dir = TempDir::new("sigkill");
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "usage::writer::tests::a_sigkilled_process_loses_no_completed_record", "--nocapture"])
        .env(CHILD, dir.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut completed = Vec::new();
    while completed.len() < 3000 {
        let line = lines.next().expect("child ended early").unwrap();
        completed.extend(line.strip_prefix("done:").map(str::to_owned));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    completed.extend(lines.map_while(Result::ok).filter_map(|l| l.strip_prefix("done:").map(str::to_owned)));

    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let sink = Arc::new(FakeSink::default());
    let journal = open(&dir, 16 << 10);
    runtime.block_on(async {
        let writer = UsageWriter::spawn(journal.clone(), sink.clone(), WriterConfig { batch_max: 500, ..config() });
        assert!(writer.shutdown(Duration::from_secs(20)).await);
    });
    let state = sink.state.lock().unwrap();
    let missing: Vec<&String> = completed.iter().filter(|id| !state.rows.contains_key(*id)).collect();
    assert!(
        missing.is_empty(),
        "{} completed records lost, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    assert!(state.deliveries.values().all(|&n| n == 1));
    assert!(
        state.rows.len() >= completed.len() && state.rows.len() <= completed.len() + 2,
        "at most the in-flight ones"
    );
    eprintln!(
        "{} completed before SIGKILL, {} stored, {} torn",
        completed.len(),
        state.rows.len(),
        count(&journal.counters().corrupt)
    );
}
