//! The usage journal's recovery from whatever a previous process left on disk.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a fuzz harness, like a test: a panic is the failure report

use std::sync::Arc;

use switchyard_gateway::records::UsageRecord;
use switchyard_gateway::usage::reader::{JournalReader, Line};
use switchyard_gateway::usage::{Checkpoint, Journal, JournalOptions};

/// Records the new process journals after opening the directory.
const APPENDED: usize = 3;

fn record(i: usize) -> UsageRecord {
    UsageRecord {
        id: format!("fuzz-{i}"),
        ts_ms: 1_700_000_000_000 + i as i64,
        key_id: None,
        user: None,
        team: None,
        model_requested: "m".to_owned(),
        model_served: "m".to_owned(),
        backend: Some("b".to_owned()),
        status: 200,
        prompt_tokens: 3,
        completion_tokens: 5,
        total_tokens: 8,
        cache_read_tokens: 0,
        cache_write_tokens: 0,
        latency_ms: 1.5,
        ttft_ms: None,
        cost_usd: 0.0,
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

/// A line's bytes; a record the journal handed off in memory as the bytes it wrote for it.
fn line_bytes(line: Line<'_>) -> Vec<u8> {
    match line {
        Line::Bytes(bytes) => bytes.to_vec(),
        Line::Record(record) => serde_json::to_vec(&record).expect("a record serialises"),
    }
}

/// Every line a reader hands out, in order, reading `max` at a time from `checkpoint`.
fn read_all(journal: &Arc<Journal>, checkpoint: Checkpoint, max: usize) -> (Vec<Vec<u8>>, Checkpoint) {
    let mut reader = JournalReader::open(journal.clone(), checkpoint.encode()).expect("a reader opens");
    let mut lines = Vec::new();
    loop {
        let fill = reader.read(max, |_, line| lines.push(line_bytes(line))).expect("the journal reads");
        if fill.caught_up {
            return (lines, reader.position());
        }
    }
}

/// The first byte picks a batch size; the rest is the file a killed process left (generation 0).
/// Opening the directory must not panic; a reader from the start hands out exactly the complete,
/// non-empty lines of that file (a torn last line, or the zeros of an unwritten window, never)
/// followed by what the new process appended; and a reader reopened at each stored checkpoint,
/// as the writer does after every batch and every restart, hands out the same lines, none twice
/// and none lost. Each line is read as a record or skipped (counted corrupt) without a panic.
pub fn journal_recovery(data: &[u8]) {
    let Some((&seed, file)) = data.split_first() else { return };
    let max = usize::from(seed % 7) + 1;
    let dir = std::env::temp_dir().join(format!("switchyard-fuzz-journal-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    std::fs::write(dir.join("usage-00000000.journal"), file).expect("the old generation");
    let journal = Journal::open(&dir, JournalOptions::default()).expect("the journal opens");
    for i in 0..APPENDED {
        journal.append(record(i)).expect("a record appends");
    }

    let kept = &file[..file.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1)];
    let complete = kept.len() - kept.iter().rev().position(|&b| b == b'\n').unwrap_or(kept.len());
    let mut expected: Vec<Vec<u8>> =
        kept[..complete].split(|&b| b == b'\n').filter(|l| !l.is_empty()).map(<[u8]>::to_vec).collect();
    let appended: Vec<Vec<u8>> =
        (0..APPENDED).map(|i| serde_json::to_vec(&record(i)).expect("a record serialises")).collect();
    expected.extend(appended.iter().cloned());

    let (all, _) = read_all(&journal, Checkpoint::default(), usize::MAX);
    assert_eq!(all, expected, "a fresh reader hands out the complete lines, then the new records");
    for line in &all {
        let _ = serde_json::from_slice::<UsageRecord>(line);
    }
    for (line, want) in all[all.len() - APPENDED..].iter().zip(0..) {
        assert_eq!(serde_json::from_slice::<UsageRecord>(line).ok(), Some(record(want)));
    }

    // Batch by batch, reopening at each checkpoint as after a restart.
    journal.mark_synced().expect("the synced marker");
    let mut resumed = Vec::new();
    let mut at = Checkpoint::default();
    for _ in 0..=all.len() {
        let mut reader = JournalReader::open(journal.clone(), at.encode()).expect("a reader reopens");
        let fill = reader.read(max, |_, line| resumed.push(line_bytes(line))).expect("the journal reads");
        at = reader.position();
        if fill.caught_up && fill.lines == 0 {
            break;
        }
    }
    assert_eq!(resumed, all, "resuming from checkpoints repeats and loses nothing");
    let _ = std::fs::remove_dir_all(&dir);
}
