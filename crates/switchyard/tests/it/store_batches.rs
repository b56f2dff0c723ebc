//! The Files and Batch APIs' storage (files, batches, finished lines) against a real database: a
//! SQLite file, or PostgreSQL with `SWITCHYARD_TEST_STORAGE=postgres` (a fresh schema per test).

use switchyard_gateway::store::{BatchRow, FileRow, LineRow, Store, StoreError};

use crate::common::{db_url, scratch_dir};

async fn store() -> Store {
    let url = db_url(&scratch_dir());
    Store::connect(&url).await.unwrap_or_else(|e| panic!("connect {url}: {e}"))
}

fn file(id: &str, owner: &str, purpose: &str, created_at: i64) -> FileRow {
    FileRow {
        id: id.into(),
        owner: owner.into(),
        filename: format!("{id}.jsonl"),
        purpose: purpose.into(),
        bytes: 1234,
        created_at,
    }
}

fn batch(id: &str, owner: &str, status: &str, created_at: i64) -> BatchRow {
    BatchRow {
        id: id.into(),
        owner: owner.into(),
        key_id: Some("k1".into()),
        endpoint: "/v1/chat/completions".into(),
        input_file_id: "file-in".into(),
        completion_window: "24h".into(),
        status: status.into(),
        metadata: Some(r#"{"job":"nightly"}"#.into()),
        output_file_id: None,
        error_file_id: None,
        total: 0,
        completed: 0,
        failed: 0,
        created_at,
        in_progress_at: None,
        finalizing_at: None,
        completed_at: None,
        failed_at: None,
        cancelling_at: None,
        cancelled_at: None,
        expires_at: created_at + 86_400,
        errors: None,
        expired_at: None,
        upstream: None,
    }
}

fn line(custom_id: &str, line: i64, failed: bool, body: &str) -> LineRow {
    LineRow {
        custom_id: custom_id.into(),
        line,
        status: if failed { 500 } else { 200 },
        failed,
        body: body.into(),
        request_id: format!("req-{custom_id}"),
    }
}

fn file_ids(rows: &[FileRow]) -> Vec<&str> {
    rows.iter().map(|r| r.id.as_str()).collect()
}

fn batch_ids(rows: &[BatchRow]) -> Vec<&str> {
    rows.iter().map(|r| r.id.as_str()).collect()
}

#[tokio::test]
async fn files_insert_get_list_page_and_delete() {
    let s = store().await;
    let files = [
        file("file-a1", "alice", "batch", 100),
        file("file-a2", "alice", "batch", 200),
        // Same second as a2: the id breaks the tie.
        file("file-a3", "alice", "fine-tune", 200),
        file("file-b1", "bob", "batch", 150),
    ];
    for f in &files {
        s.insert_file(f).await.unwrap();
    }
    assert!(matches!(s.insert_file(&files[0]).await, Err(StoreError::Conflict)));
    assert_eq!(s.get_file("file-a2").await.unwrap(), Some(files[1].clone()));
    assert_eq!(s.get_file("file-missing").await.unwrap(), None);

    let all = s.list_files(None, None, 100, None).await.unwrap();
    assert_eq!(file_ids(&all), ["file-a3", "file-a2", "file-b1", "file-a1"]);
    let alice = s.list_files(Some("alice"), None, 100, None).await.unwrap();
    assert_eq!(file_ids(&alice), ["file-a3", "file-a2", "file-a1"]);
    assert_eq!(alice[0], files[2]);
    let batch_files = s.list_files(Some("alice"), Some("batch"), 100, None).await.unwrap();
    assert_eq!(file_ids(&batch_files), ["file-a2", "file-a1"]);
    assert!(s.list_files(Some("carol"), None, 100, None).await.unwrap().is_empty());

    // Paging: `after` is the previous page's last id; ties on created_at page by id.
    let first = s.list_files(None, None, 2, None).await.unwrap();
    assert_eq!(file_ids(&first), ["file-a3", "file-a2"]);
    let second = s.list_files(None, None, 2, Some("file-a2")).await.unwrap();
    assert_eq!(file_ids(&second), ["file-b1", "file-a1"]);
    assert!(s.list_files(None, None, 2, Some("file-a1")).await.unwrap().is_empty());
    let alice_after = s.list_files(Some("alice"), None, 10, Some("file-a3")).await.unwrap();
    assert_eq!(file_ids(&alice_after), ["file-a2", "file-a1"]);
    assert!(s.list_files(None, None, 10, Some("file-gone")).await.unwrap().is_empty());
    // The limit is clamped to at least one.
    assert_eq!(s.list_files(None, None, 0, None).await.unwrap().len(), 1);
    assert_eq!(s.list_files(None, None, -5, None).await.unwrap().len(), 1);

    assert!(s.delete_file("file-a2").await.unwrap());
    assert!(!s.delete_file("file-a2").await.unwrap());
    assert_eq!(s.get_file("file-a2").await.unwrap(), None);
    let left = s.list_files(None, None, 100, None).await.unwrap();
    assert_eq!(file_ids(&left), ["file-a3", "file-b1", "file-a1"]);
    s.close().await;
}

#[tokio::test]
async fn batches_insert_get_update_list_and_unfinished() {
    let s = store().await;
    let mut b1 = batch("batch-1", "alice", "validating", 100);
    let b2 = batch("batch-2", "bob", "in_progress", 200);
    let mut b3 = batch("batch-3", "alice", "completed", 300);
    b3.key_id = None;
    b3.metadata = None;
    let b4 = batch("batch-4", "alice", "cancelling", 300);
    let b5 = batch("batch-5", "bob", "finalizing", 50);
    let b6 = batch("batch-6", "bob", "failed", 10);
    for b in [&b1, &b2, &b3, &b4, &b5, &b6] {
        s.insert_batch(b).await.unwrap();
    }
    assert!(matches!(s.insert_batch(&b1).await, Err(StoreError::Conflict)));
    assert_eq!(s.get_batch("batch-3").await.unwrap(), Some(b3.clone()));
    assert_eq!(s.get_batch("batch-missing").await.unwrap(), None);

    // Every field but the id is replaced.
    b1 = BatchRow {
        status: "in_progress".into(),
        output_file_id: Some("file-out".into()),
        error_file_id: Some("file-err".into()),
        total: 10,
        completed: 7,
        failed: 2,
        in_progress_at: Some(101),
        finalizing_at: Some(102),
        completed_at: Some(103),
        failed_at: Some(104),
        cancelling_at: Some(105),
        cancelled_at: Some(106),
        expires_at: 999,
        errors: Some(r#"{"object":"list","data":[]}"#.into()),
        metadata: None,
        key_id: None,
        endpoint: "/v1/embeddings".into(),
        input_file_id: "file-in-2".into(),
        completion_window: "48h".into(),
        owner: "alice".into(),
        ..b1
    };
    assert!(s.update_batch(&b1).await.unwrap());
    assert_eq!(s.get_batch("batch-1").await.unwrap(), Some(b1.clone()));
    assert!(!s.update_batch(&batch("batch-missing", "x", "failed", 1)).await.unwrap());
    assert_eq!(s.get_batch("batch-missing").await.unwrap(), None);

    let all = s.list_batches(None, 100, None).await.unwrap();
    assert_eq!(batch_ids(&all), ["batch-4", "batch-3", "batch-2", "batch-1", "batch-5", "batch-6"]);
    let alice = s.list_batches(Some("alice"), 100, None).await.unwrap();
    assert_eq!(batch_ids(&alice), ["batch-4", "batch-3", "batch-1"]);
    assert_eq!(alice[2], b1);
    let page = s.list_batches(Some("alice"), 1, Some("batch-4")).await.unwrap();
    assert_eq!(batch_ids(&page), ["batch-3"]);
    let rest = s.list_batches(None, 100, Some("batch-2")).await.unwrap();
    assert_eq!(batch_ids(&rest), ["batch-1", "batch-5", "batch-6"]);
    assert!(s.list_batches(None, 100, Some("batch-gone")).await.unwrap().is_empty());
    assert_eq!(s.list_batches(None, 0, None).await.unwrap().len(), 1);

    // Oldest first; completed and failed batches are done.
    let open = s.unfinished_batches().await.unwrap();
    assert_eq!(batch_ids(&open), ["batch-5", "batch-1", "batch-2", "batch-4"]);
    s.close().await;
}

#[tokio::test]
async fn lines_are_kept_once_per_custom_id_in_line_order_and_counted() {
    let s = store().await;
    assert_eq!(s.line_counts("batch-1").await.unwrap(), (0, 0));
    assert!(s.batch_lines("batch-1").await.unwrap().is_empty());

    let third = line("c", 2, true, r#"{"error":"boom"}"#);
    let first = line("a", 0, false, r#"{"id":"first"}"#);
    let second = line("b", 1, false, r#"{"id":"second"}"#);
    for l in [&third, &first, &second] {
        assert!(s.insert_line("batch-1", l).await.unwrap());
    }
    // The same custom_id again (a line redone after a restart): nothing changes.
    let again = LineRow { body: r#"{"id":"again"}"#.into(), failed: true, status: 500, ..first.clone() };
    assert!(!s.insert_line("batch-1", &again).await.unwrap());
    // The same custom_id in another batch is a line of its own.
    assert!(s.insert_line("batch-2", &again).await.unwrap());

    let lines = s.batch_lines("batch-1").await.unwrap();
    assert_eq!(lines, [first.clone(), second, third]);
    assert_eq!(s.line_counts("batch-1").await.unwrap(), (2, 1));
    assert_eq!(s.line_counts("batch-2").await.unwrap(), (0, 1));
    assert_eq!(s.batch_lines("batch-2").await.unwrap(), [again]);

    s.delete_lines("batch-1").await.unwrap();
    assert!(s.batch_lines("batch-1").await.unwrap().is_empty());
    assert_eq!(s.line_counts("batch-1").await.unwrap(), (0, 0));
    assert_eq!(s.line_counts("batch-2").await.unwrap(), (0, 1));
    // Once deleted, a custom_id can be inserted again.
    assert!(s.insert_line("batch-1", &first).await.unwrap());
    s.close().await;
}

#[tokio::test]
async fn one_runner_holds_a_batch_until_its_claim_lapses() {
    let s = store().await;
    s.insert_batch(&batch("batch-c", "alice", "in_progress", 100)).await.unwrap();
    // a claims it until 2,000 ms; b cannot until then, a can renew.
    assert!(s.claim_batch("batch-c", "a", 1_000, 2_000, false).await.unwrap());
    assert!(!s.claim_batch("batch-c", "b", 1_500, 2_500, false).await.unwrap());
    assert!(s.claim_batch("batch-c", "a", 1_900, 3_000, false).await.unwrap());
    assert!(!s.claim_batch("batch-c", "b", 2_999, 4_000, false).await.unwrap());
    // Lapsed: b takes it over, and a's renewal then fails.
    assert!(s.claim_batch("batch-c", "b", 3_001, 4_000, false).await.unwrap());
    assert!(!s.claim_batch("batch-c", "a", 3_100, 4_100, false).await.unwrap());
    // An instance alone on its database takes it at once.
    assert!(s.claim_batch("batch-c", "c", 3_200, 4_200, true).await.unwrap());
    assert!(!s.claim_batch("batch-missing", "c", 0, 1, true).await.unwrap());
    // The claim is not part of the batch's row: updating the row keeps it.
    let mut b = s.get_batch("batch-c").await.unwrap().unwrap();
    b.expired_at = Some(5);
    assert!(s.update_batch(&b).await.unwrap());
    assert_eq!(s.get_batch("batch-c").await.unwrap().unwrap().expired_at, Some(5));
    assert!(!s.claim_batch("batch-c", "b", 3_300, 4_300, false).await.unwrap());
    s.close().await;
}
