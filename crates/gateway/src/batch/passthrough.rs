//! `batches.mode: passthrough`: a batch whose model a `provider: openai` backend serves is sent
//! whole to that provider's own Batch API rather than run line by line here (hosted batches cost
//! half). The gateway uploads the input, creates the provider's batch (tagged with its own id in
//! `metadata.switchyard_batch`, so a create whose answer a crash lost is found, not made twice),
//! then looks at it every `batches.poll_interval`, mirroring its status and counts. A cancel is
//! passed on. When the provider's batch ends, its output and error lines become this batch's
//! lines — the same files as a batch run here, under this batch's request ids — and each line
//! one usage record, tagged with the batch and priced at the model's `batch_discount`.
//! Where it went is kept in the row (`upstream`), so a restart carries on following it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::claim::Claim;
use super::jsonl;
use super::provider::Provider;
use crate::app::App;
use crate::http::metering::Meter;
use crate::route::backend::Backend;
use crate::store::{BatchRow, LineRow, Store};

/// Where a batch went: the backend, and the provider's ids once it has them.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(super) struct Upstream {
    backend: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    batch: Option<String>,
}

/// A batch already sent to a provider (or on its way there).
pub(super) fn sent(batch: &BatchRow) -> Option<Upstream> {
    serde_json::from_str(batch.upstream.as_deref()?).ok()
}

/// Whether a new batch goes to a provider: passthrough is on and its first line's model is served
/// by a `provider: openai` backend.
pub(super) fn target(app: &App, batch: &BatchRow, lines: &[&str]) -> Option<Upstream> {
    #[derive(Deserialize)]
    struct First {
        body: Named,
    }
    #[derive(Deserialize)]
    struct Named {
        model: String,
    }
    if !app.config.batches.passthrough || batch.status != "validating" {
        return None;
    }
    let first: First = lines.iter().find_map(|l| serde_json::from_str(l).ok())?;
    let model = app.config.resolve_alias(&first.body.model);
    let backend = app.router.provider_backend(model, "openai")?;
    Some(Upstream { backend: backend.name().to_owned(), ..Upstream::default() })
}

fn backend(app: &App, up: &Upstream) -> Result<Arc<Backend>, String> {
    let found = app.router.backends.iter().find(|b| b.name() == up.backend).cloned();
    found.ok_or_else(|| format!("the backend `{}` the batch was sent to is no longer configured", up.backend))
}

async fn save(store: &Store, batch: &mut BatchRow, up: &Upstream) -> Result<(), String> {
    batch.upstream = Some(serde_json::to_string(up).map_err(|e| e.to_string())?);
    store.update_batch(batch).await.map_err(|e| e.to_string()).map(drop)
}

/// Upload the input and create the provider's batch; the batch is then `in_progress`.
pub(super) async fn send(
    app: &App,
    store: &Store,
    mut batch: BatchRow,
    mut up: Upstream,
    input: Bytes,
    total: i64,
) -> Result<(), String> {
    let backend = backend(app, &up)?;
    let provider = Provider { client: &app.client, backend: &backend };
    let file = match up.file.clone() {
        Some(file) => file,
        None => {
            let file = provider.upload(&format!("{}.jsonl", batch.id), with_models_resolved(app, input)).await?;
            up.file = Some(file.clone());
            save(store, &mut batch, &up).await?;
            file
        }
    };
    let made = match provider.find(&batch.id).await? {
        Some(made) => made,
        None => provider.create(&batch.id, &file, &batch.endpoint, batch.metadata.as_deref()).await?,
    };
    up.batch = Some(made);
    let fresh = store.get_batch(&batch.id).await.map_err(|e| e.to_string())?.unwrap_or(batch);
    let mut batch = fresh;
    if batch.status == "validating" {
        batch.status = "in_progress".to_owned();
        batch.in_progress_at = Some(app.clock.unix_secs());
    }
    batch.total = total;
    save(store, &mut batch, &up).await
}

/// The input as the provider must see it: a line naming a model by a gateway alias names the
/// model itself (other lines are sent byte for byte).
fn with_models_resolved(app: &App, input: Bytes) -> Bytes {
    let text = String::from_utf8_lossy(&input);
    let mut changed = false;
    let lines: Vec<String> = text
        .lines()
        .map(|line| {
            let Ok(mut value) = serde_json::from_str::<Value>(line) else { return line.to_owned() };
            let Some(model) = value["body"]["model"].as_str() else { return line.to_owned() };
            let resolved = app.config.resolve_alias(model);
            if resolved == model {
                return line.to_owned();
            }
            changed = true;
            value["body"]["model"] = resolved.into();
            value.to_string()
        })
        .collect();
    if !changed {
        return input;
    }
    Bytes::from(lines.join("\n") + "\n")
}

/// When each followed batch was last looked at, so each is looked at once per poll interval.
fn looked() -> &'static Mutex<HashMap<String, Instant>> {
    static LOOKED: OnceLock<Mutex<HashMap<String, Instant>>> = OnceLock::new();
    LOOKED.get_or_init(Mutex::default)
}

fn due(app: &App, batch: &str) -> bool {
    let Ok(mut looked) = looked().lock() else { return true };
    let now = Instant::now();
    match looked.get(batch) {
        Some(at) if now.duration_since(*at) < app.config.batches.poll => false,
        _ => {
            looked.insert(batch.to_owned(), now);
            true
        }
    }
}

/// Look at a batch the provider has (when its poll interval is up, or at once while it is being
/// cancelled): pass a cancel on, mirror the counts, and settle it when the provider's batch ends.
pub(super) async fn follow(
    app: &App,
    store: &Store,
    batch: BatchRow,
    up: Upstream,
    theirs: &str,
) -> Result<(), String> {
    let cancelling = batch.status == "cancelling" || super::runner::is_cancelled(&batch.id);
    if !cancelling && !due(app, &batch.id) {
        return Ok(());
    }
    let Some(_claim) = Claim::take(app, store, &batch.id).await? else { return Ok(()) };
    let backend = backend(app, &up)?;
    let provider = Provider { client: &app.client, backend: &backend };
    let mut object = provider.look(theirs).await?;
    let status = object["status"].as_str().unwrap_or_default();
    if cancelling && !matches!(status, "cancelling" | "cancelled" | "completed" | "failed" | "expired") {
        provider.cancel(theirs).await?;
        object = provider.look(theirs).await?;
    }
    let mut batch = store.get_batch(&batch.id).await.map_err(|e| e.to_string())?.unwrap_or(batch);
    let count = |name: &str| object["request_counts"][name].as_i64().unwrap_or(0);
    (batch.total, batch.completed, batch.failed) =
        (count("total").max(batch.total), count("completed"), count("failed"));
    match object["status"].as_str().unwrap_or_default() {
        "completed" | "expired" | "cancelled" => settle(app, store, batch, &provider, &object).await,
        "failed" => {
            batch.status = "failed".to_owned();
            batch.failed_at = Some(app.clock.unix_secs());
            batch.errors = Some(object["errors"].to_string()).filter(|e| e != "null");
            store.update_batch(&batch).await.map_err(|e| e.to_string()).map(drop)
        }
        _ => store.update_batch(&batch).await.map_err(|e| e.to_string()).map(drop),
    }
}

impl Upstream {
    /// The provider's batch id, once it has made the batch.
    pub(super) fn made(&self) -> Option<&str> {
        self.batch.as_deref()
    }
}

/// The provider's batch ended: its result lines become this batch's lines, each one usage
/// record; then the output and error files are written as for a batch run here.
async fn settle(
    app: &App,
    store: &Store,
    mut batch: BatchRow,
    provider: &Provider<'_>,
    object: &Value,
) -> Result<(), String> {
    let identity = super::runner::creator(store, &batch).await?;
    let mut n = 0;
    for file in ["output_file_id", "error_file_id"] {
        let Some(id) = object[file].as_str() else { continue };
        let content = provider.content(id).await?;
        for text in String::from_utf8_lossy(&content).lines().filter(|l| !l.trim().is_empty()) {
            let Some((row, model)) = line_row(&batch.id, n, text) else { continue };
            n += 1;
            // A line the provider never sent (its `error` and no `response`) used nothing.
            if store.insert_line(&batch.id, &row).await.map_err(|e| e.to_string())? && row.status != 0 {
                meter(app, &batch, &identity, provider.backend.name(), &row, &model);
            }
        }
    }
    if object["status"] == "cancelled" {
        // `finish` ends a cancelling batch as cancelled, with what finished.
        batch.status = "cancelling".to_owned();
    }
    store.update_batch(&batch).await.map_err(|e| e.to_string())?;
    super::runner::finish(app, store, &batch.id, object["status"] == "expired").await
}

/// One of the provider's result lines as this batch's line, under this batch's request id, and
/// the model its answer names.
fn line_row(batch: &str, n: i64, text: &str) -> Option<(LineRow, String)> {
    let line: Value = serde_json::from_str(text).ok()?;
    let custom_id = line["custom_id"].as_str()?.to_owned();
    let request_id = jsonl::request_id(batch, &custom_id);
    let (status, body) = match &line["response"] {
        Value::Object(response) => (
            response.get("status_code").and_then(Value::as_i64).unwrap_or(0),
            response.get("body").cloned().unwrap_or(Value::Null),
        ),
        _ => (0, line["error"].clone()),
    };
    let failed = !line["error"].is_null() || !(200..300).contains(&status);
    let model = body["model"].as_str().unwrap_or_default().to_owned();
    Some((LineRow { custom_id, line: n, status, failed, body: body.to_string(), request_id }, model))
}

/// A result line's usage record: its tokens as the provider reported them, tagged with the batch.
fn meter(app: &App, batch: &BatchRow, identity: &crate::auth::Identity, backend: &str, row: &LineRow, model: &str) {
    let now = app.clock.unix_ms();
    let mut meter = Meter::new(
        app.journal.clone(),
        app.config.clone(),
        app.metrics.clone(),
        &row.request_id,
        identity.key(),
        model,
        model,
        0,
        Instant::now(),
        now,
    );
    meter.batch(&batch.id);
    meter.answered(backend, u16::try_from(row.status).unwrap_or(502), false, false, true);
    let _ = meter.frame(Bytes::from(row.body.clone()));
    let _ = meter.end();
    meter.record_now();
}
