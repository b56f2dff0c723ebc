//! Runs batches: one at a time, oldest first, each line through the gateway's own pipeline as
//! the batch's creator, at most `batches.concurrency` lines in flight and only while the model's
//! queue is empty and a backend has a slot to spare (interactive requests go first). A finished
//! line is one row keyed by its `custom_id`: after a restart the lines already there are skipped.
//! Lines refused for a moment (429, 5xx) are tried again a few times; then their answer is what
//! they get. At the end the output and error files are written and the batch completes.
//!
//! In a fleet one instance runs a batch: it claims the batch in the database (`claim.rs`) and
//! renews the claim while it runs; another instance takes the batch over only once a dead
//! runner's claim has lapsed. A batch still running when its completion window ends stops
//! starting lines: those not run go to the error file as `batch_expired`, and it is `expired`.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::HeaderValue;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::claim::Claim;
use super::jsonl::{self, Line, Parsed};
use super::passthrough;
use crate::app::App;
use crate::auth::{Identity, Principal};
use crate::endpoint::Endpoint;
use crate::proxy::{call_internal, InternalCall};
use crate::store::{BatchRow, LineRow, Store};

/// How often the runner looks for batches when nobody wakes it (another instance's, a restart's).
const POLL: Duration = Duration::from_secs(2);
/// How long a line waits between looks for free capacity.
const ROOM_POLL: Duration = Duration::from_millis(5);
/// Tries of a line refused for a moment (429, 5xx) before its answer stands.
const TRIES: u32 = 5;

/// Wake-ups, counted: every runner in the process (one per gateway; tests run several) sees each,
/// and one sent while a runner was busy is seen when it next waits.
fn wakes() -> &'static watch::Sender<u64> {
    static WAKES: OnceLock<watch::Sender<u64>> = OnceLock::new();
    WAKES.get_or_init(|| watch::channel(0).0)
}

fn cancelled() -> &'static Mutex<HashSet<String>> {
    static CANCELLED: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    CANCELLED.get_or_init(Mutex::default)
}

/// A batch was created: look now.
pub fn wake() {
    wakes().send_modify(|n| *n = n.wrapping_add(1));
}

/// Stop starting lines of `batch`.
pub fn cancel(batch: &str) {
    if let Ok(mut set) = cancelled().lock() {
        set.insert(batch.to_owned());
    }
    wake();
}

pub(super) fn is_cancelled(batch: &str) -> bool {
    cancelled().lock().map(|set| set.contains(batch)).unwrap_or(false)
}

/// Run batches for as long as the gateway runs (the app as it is after any reload; held weakly,
/// so the runner ends with the gateway).
pub fn spawn(current: std::sync::Weak<ArcSwap<App>>) -> tokio::task::JoinHandle<()> {
    let mut woken = wakes().subscribe();
    tokio::spawn(async move {
        loop {
            let Some(app) = current.upgrade().map(|c| c.load_full()) else { return };
            let mut idle = app.config.redis.is_none();
            if let Some(store) = app.store.clone() {
                match store.unfinished_batches().await {
                    Ok(batches) => {
                        idle &= batches.is_empty();
                        for batch in batches {
                            if let Err(e) = run(&app, &store, batch).await {
                                tracing::warn!(error = %e, "a batch could not go on; it is tried again later");
                            }
                        }
                    }
                    Err(e) => {
                        idle = false;
                        tracing::warn!(error = %e, "could not read the unfinished batches");
                    }
                }
            }
            // Batches followed at a provider are looked at as often as `batches.poll_interval` asks.
            let poll = POLL.min(app.config.batches.poll);
            drop(app);
            if idle {
                // Alone on its database (no `redis:`) with nothing unfinished, only a batch made
                // here (or a reload) can give it work, and both wake it: an idle gateway does not
                // query its database every 2 s (issue 29's idle memory: each look pages in SQLite's code).
                let _ = woken.changed().await;
            } else {
                let _ = tokio::time::timeout(poll, woken.changed()).await;
            }
        }
    })
}

/// Carry one batch on from where it is, unless another instance is running it.
async fn run(app: &Arc<App>, store: &Store, batch: BatchRow) -> Result<(), String> {
    let sent = passthrough::sent(&batch);
    if let Some((up, theirs)) = sent.as_ref().and_then(|up| Some((up.clone(), up.made()?.to_owned()))) {
        return Box::pin(passthrough::follow(app, store, batch, up, &theirs)).await;
    }
    let Some(claim) = Claim::take(app, store, &batch.id).await? else { return Ok(()) };
    let files = super::files::file_store(app).map_err(|_| "no place for files")?;
    let input = files.read(&batch.input_file_id).await.map_err(|e| format!("input file: {e}"))?;
    let text = String::from_utf8_lossy(&input);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if let Some(up) = sent.or_else(|| passthrough::target(app, &batch, &lines)) {
        let total = lines.len() as i64;
        return Box::pin(passthrough::send(app, store, batch, up, input.clone(), total)).await;
    }
    let batch = start(app, store, batch, lines.len() as i64).await?;
    if batch.status == "in_progress" {
        run_lines(app, store, &batch, &lines, &claim).await?;
    }
    if claim.lost() {
        // Another instance took the batch over (this one could not renew its claim in time).
        return Ok(());
    }
    let expired = expired(app, &batch) && expire_rest(store, &batch, &lines).await > 0;
    finish(app, store, &batch.id, expired).await
}

/// Whether `batch`'s completion window is over.
fn expired(app: &App, batch: &BatchRow) -> bool {
    app.clock.unix_secs() >= batch.expires_at
}

/// Each line of an expired batch that has not run: an error line `batch_expired`. How many.
async fn expire_rest(store: &Store, batch: &BatchRow, lines: &[&str]) -> usize {
    let message = "This request could not be executed before the completion window expired.";
    let body = serde_json::json!({"code": "batch_expired", "message": message}).to_string();
    let Ok(done) = store.batch_lines(&batch.id).await else { return 0 };
    let mut done: HashSet<String> = done.into_iter().map(|l| l.custom_id).collect();
    let mut expired = 0;
    for (n, text) in lines.iter().enumerate() {
        let Parsed::Line(line) = jsonl::parse(&batch.id, n as i64, text, &batch.endpoint) else { continue };
        if done.insert(line.custom_id.clone()) {
            let request_id = jsonl::request_id(&batch.id, &line.custom_id);
            let (custom_id, body) = (line.custom_id, body.clone());
            record(store, &batch.id, &LineRow { custom_id, line: line.n, status: 0, failed: true, body, request_id })
                .await;
            expired += 1;
        }
    }
    expired
}

/// `validating` → `in_progress` with the line count (unless cancelled meanwhile).
async fn start(app: &App, store: &Store, batch: BatchRow, total: i64) -> Result<BatchRow, String> {
    let mut fresh = store.get_batch(&batch.id).await.map_err(|e| e.to_string())?.unwrap_or(batch);
    if fresh.status == "validating" {
        fresh.status = "in_progress".to_owned();
        fresh.in_progress_at = Some(app.clock.unix_secs());
        fresh.total = total;
        store.update_batch(&fresh).await.map_err(|e| e.to_string())?;
    }
    Ok(fresh)
}

/// Every line not finished yet, a few at a time, in free capacity only.
async fn run_lines(
    app: &Arc<App>,
    store: &Store,
    batch: &BatchRow,
    lines: &[&str],
    claim: &Claim,
) -> Result<(), String> {
    let done: HashSet<String> =
        store.batch_lines(&batch.id).await.map_err(|e| e.to_string())?.into_iter().map(|l| l.custom_id).collect();
    let identity = creator(store, batch).await?;
    let endpoint = Endpoint::from_path(batch.endpoint.trim_start_matches("/v1"));
    let mut seen = HashSet::new();
    let mut running = JoinSet::new();
    for (n, text) in lines.iter().enumerate() {
        // Cancelled here, or (every so many lines) by another instance of a fleet.
        if is_cancelled(&batch.id)
            || claim.lost()
            || expired(app, batch)
            || n % 256 == 255 && cancelled_elsewhere(store, &batch.id).await
        {
            break;
        }
        let row = match jsonl::parse(&batch.id, n as i64, text, &batch.endpoint) {
            Parsed::Line(line) if done.contains(&line.custom_id) => continue,
            Parsed::Line(line) if !seen.insert(line.custom_id.clone()) => duplicate(&batch.id, line),
            Parsed::Line(line) => {
                while running.len() >= app.config.batches.concurrency {
                    running.join_next().await;
                }
                if !wait_for_room(app, &line.body, || expired(app, batch) || claim.lost()).await {
                    break;
                }
                let (app, store, batch_id, identity) = (app.clone(), store.clone(), batch.id.clone(), identity.clone());
                running.spawn(async move {
                    let row = run_line(&app, &batch_id, identity, endpoint, line).await;
                    record(&store, &batch_id, &row).await;
                });
                continue;
            }
            Parsed::Bad(row) => row,
        };
        record(store, &batch.id, &row).await;
    }
    while running.join_next().await.is_some() {}
    Ok(())
}

async fn cancelled_elsewhere(store: &Store, batch: &str) -> bool {
    matches!(store.get_batch(batch).await, Ok(Some(b)) if b.status == "cancelling")
}

async fn record(store: &Store, batch: &str, row: &LineRow) {
    if let Err(e) = store.insert_line(batch, row).await {
        tracing::warn!(batch, custom_id = %row.custom_id, error = %e, "could not record a batch line");
    }
}

/// A second line with a `custom_id` already used: the error file says so.
fn duplicate(batch: &str, line: Line) -> LineRow {
    let body =
        serde_json::json!({"code": "duplicate_custom_id", "message": "this `custom_id` is used by an earlier line"});
    // Its own id: the first line of that custom_id keeps the shared one.
    let custom_id = format!("{}#line-{}", line.custom_id, line.n + 1);
    let request_id = jsonl::request_id(batch, &custom_id);
    LineRow { custom_id, line: line.n, status: 0, failed: true, body: body.to_string(), request_id }
}

/// Who the lines run as: the key that created the batch (its limits, budget and allow-lists
/// apply), or the master key.
pub(super) async fn creator(store: &Store, batch: &BatchRow) -> Result<Identity, String> {
    let Some(id) = &batch.key_id else { return Ok(Identity::from(Principal::Master)) };
    match store.get_key_with_owners(id).await.map_err(|e| e.to_string())? {
        Some(key) => Ok(Identity::from(Principal::Key(Arc::new(key)))),
        None => Err(format!("the key {id} that created the batch is gone")),
    }
}

/// Wait until the line's model has no one queued and a backend with a slot to spare: false when
/// `give_up` says to stop waiting first.
async fn wait_for_room(app: &App, body: &Bytes, give_up: impl Fn() -> bool) -> bool {
    #[derive(serde::Deserialize)]
    struct Named {
        model: Option<String>,
    }
    let Some(model) = serde_json::from_slice::<Named>(body).ok().and_then(|n| n.model) else { return true };
    let model = app.config.resolve_alias(&model);
    while app.router.admission.has_waiters(model) || !app.router.has_spare(model) {
        if give_up() {
            return false;
        }
        tokio::time::sleep(ROOM_POLL).await;
    }
    true
}

/// Send one line (again, while it is refused for a moment): its finished row.
async fn run_line(app: &Arc<App>, batch: &str, identity: Identity, endpoint: Endpoint, line: Line) -> LineRow {
    let base = jsonl::request_id(batch, &line.custom_id);
    let mut answer = (http::StatusCode::INTERNAL_SERVER_ERROR, Bytes::new());
    for try_n in 0..TRIES {
        // A try's own request id, the first the line's: a crash's re-send is the same record.
        let id = if try_n == 0 { base.clone() } else { format!("{base}-{try_n}") };
        let call = InternalCall {
            endpoint,
            identity: identity.clone(),
            body: line.body.clone(),
            deadline: Instant::now() + app.config.timeouts.request,
            request_id: HeaderValue::from_str(&id).unwrap_or_else(|_| HeaderValue::from_static("batch_req")),
            guard_call: None,
            batch: Some(batch),
            experiment: None,
        };
        answer = call_internal(app, call).await;
        let transient = answer.0.as_u16() == 429 || answer.0.is_server_error();
        if !transient || try_n + 1 == TRIES {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200 << try_n)).await;
    }
    let (status, body) = answer;
    LineRow {
        custom_id: line.custom_id,
        line: line.n,
        status: i64::from(status.as_u16()),
        failed: !status.is_success(),
        body: String::from_utf8_lossy(&body).into_owned(),
        request_id: base,
    }
}

/// Write the output and error files from the finished lines; the batch is then `completed` (or
/// `cancelled`, or `expired` when lines were left when its window ended).
pub(super) async fn finish(app: &App, store: &Store, id: &str, expired: bool) -> Result<(), String> {
    let mut batch = store.get_batch(id).await.map_err(|e| e.to_string())?.ok_or("the batch is gone")?;
    let now = app.clock.unix_secs();
    batch.finalizing_at.get_or_insert(now);
    let lines = store.batch_lines(id).await.map_err(|e| e.to_string())?;
    let (mut output, mut errors) = (String::new(), String::new());
    for line in &lines {
        let text = jsonl::output(line);
        if jsonl::succeeded(line) {
            output.push_str(&text);
        } else {
            errors.push_str(&text);
        }
    }
    let files = super::files::file_store(app).map_err(|_| "no place for files")?;
    batch.output_file_id = keep(app, store, &files, &batch, "output", output).await?;
    batch.error_file_id = keep(app, store, &files, &batch, "errors", errors).await?;
    batch.completed = lines.iter().filter(|l| jsonl::succeeded(l)).count() as i64;
    batch.failed = lines.len() as i64 - batch.completed;
    if batch.status == "cancelling" {
        batch.status = "cancelled".to_owned();
        batch.cancelled_at = Some(now);
    } else if expired {
        batch.status = "expired".to_owned();
        batch.expired_at = Some(now);
    } else {
        batch.status = "completed".to_owned();
        batch.completed_at = Some(now);
    }
    store.update_batch(&batch).await.map_err(|e| e.to_string())?;
    if let Ok(mut set) = cancelled().lock() {
        set.remove(id);
    }
    Ok(())
}

/// One of a batch's result files (`output` or `errors`), owned as the batch is; None when empty.
async fn keep(
    app: &App,
    store: &Store,
    files: &super::filestore::FileStore,
    batch: &BatchRow,
    what: &str,
    text: String,
) -> Result<Option<String>, String> {
    if text.is_empty() {
        return Ok(None);
    }
    // Named by the batch: finishing again after a crash writes the same file, not a second one.
    let id = format!("file-{}-{what}", batch.id);
    let bytes = files.write_all(&id, Bytes::from(text)).await.map_err(|e| format!("{e:?}"))?;
    let row = crate::store::FileRow {
        id: id.clone(),
        owner: batch.owner.clone(),
        filename: format!("{}_{what}.jsonl", batch.id),
        purpose: "batch_output".to_owned(),
        bytes: bytes as i64,
        created_at: app.clock.unix_secs(),
    };
    if store.get_file(&id).await.map_err(|e| e.to_string())?.is_none() {
        store.insert_file(&row).await.map_err(|e| e.to_string())?;
    }
    Ok(Some(id))
}
