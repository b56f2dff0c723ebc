//! `/v1/batches`: create a batch from a JSONL file the caller owns, retrieve, list and cancel
//! it; the batch object in OpenAI's shape, `request_counts` included.

use std::sync::Arc;

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use serde::Deserialize;
use serde_json::{json, Value};

use super::files::owned;
use super::jsonl::ENDPOINTS;
use super::{internal, list_json, may_see, new_id, owner_of, paging, runner, store};
use crate::app::App;
use crate::auth::Identity;
use crate::error::GatewayError;
use crate::http::{json_value, GatewayBody};
use crate::store::BatchRow;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Create {
    input_file_id: String,
    endpoint: String,
    completion_window: String,
    metadata: Option<serde_json::Map<String, Value>>,
}

/// OpenAI's batch object.
pub(super) fn batch_json(b: &BatchRow) -> Value {
    let metadata = b.metadata.as_deref().and_then(|m| serde_json::from_str::<Value>(m).ok());
    let errors = b.errors.as_deref().and_then(|e| serde_json::from_str::<Value>(e).ok());
    json!({
        "id": b.id, "object": "batch", "endpoint": b.endpoint, "errors": errors, "input_file_id": b.input_file_id,
        "completion_window": b.completion_window, "status": b.status, "output_file_id": b.output_file_id,
        "error_file_id": b.error_file_id, "created_at": b.created_at, "in_progress_at": b.in_progress_at,
        "expires_at": b.expires_at, "finalizing_at": b.finalizing_at, "completed_at": b.completed_at,
        "failed_at": b.failed_at, "expired_at": b.expired_at, "cancelling_at": b.cancelling_at, "cancelled_at": b.cancelled_at,
        "request_counts": {"total": b.total, "completed": b.completed, "failed": b.failed},
        "metadata": metadata,
    })
}

fn bad(message: impl Into<String>, param: Option<&'static str>) -> GatewayError {
    GatewayError::bad_request(message, param)
}

/// `POST /v1/batches`.
pub async fn create(
    app: &Arc<App>,
    identity: &Identity,
    req: Request<Incoming>,
) -> Result<Response<GatewayBody>, GatewayError> {
    let (parts, body) = req.into_parts();
    let config = &app.config;
    let body =
        crate::http::parse::read_body(&parts.headers, body, config.max_body_bytes, config.timeouts.body_read).await?;
    let asked: Create =
        serde_json::from_slice(&body).map_err(|e| bad(format!("the batch could not be read: {e}"), None))?;
    if !ENDPOINTS.contains(&asked.endpoint.as_str()) {
        return Err(bad(format!("`endpoint` must be one of {}", ENDPOINTS.join(", ")), Some("endpoint")));
    }
    if asked.completion_window != "24h" {
        return Err(bad("`completion_window` must be 24h", Some("completion_window")));
    }
    let file = owned(app, identity, &asked.input_file_id).await?;
    if file.purpose != "batch" {
        return Err(bad("the input file's `purpose` must be batch", Some("input_file_id")));
    }
    let now = app.clock.unix_secs();
    let row = BatchRow {
        id: new_id("batch_")?,
        owner: owner_of(identity),
        key_id: identity.key().map(|k| k.id.clone()),
        endpoint: asked.endpoint,
        input_file_id: file.id,
        completion_window: asked.completion_window,
        status: "validating".to_owned(),
        metadata: asked.metadata.map(|m| Value::Object(m).to_string()),
        output_file_id: None,
        error_file_id: None,
        total: 0,
        completed: 0,
        failed: 0,
        created_at: now,
        in_progress_at: None,
        finalizing_at: None,
        completed_at: None,
        failed_at: None,
        cancelling_at: None,
        cancelled_at: None,
        expires_at: now + app.config.batches.window.as_secs() as i64,
        errors: None,
        expired_at: None,
        upstream: None,
    };
    store(app)?.insert_batch(&row).await.map_err(internal)?;
    runner::wake();
    Ok(json_value(StatusCode::OK, &batch_json(&row)))
}

/// The batch `id`, when `identity` may see it.
async fn owned_batch(app: &App, identity: &Identity, id: &str) -> Result<BatchRow, GatewayError> {
    let batch = store(app)?.get_batch(id).await.map_err(internal)?;
    batch
        .filter(|b| may_see(identity, &b.owner))
        .ok_or_else(|| GatewayError::NotFound { message: format!("No such Batch object: {id}") })
}

pub async fn retrieve(app: &App, identity: &Identity, id: &str) -> Result<Response<GatewayBody>, GatewayError> {
    let mut batch = owned_batch(app, identity, id).await?;
    // While it runs, its counts are its finished lines (the row has them once it ends).
    // (A batch at a provider has the provider's counts.)
    if batch.upstream.is_none() && matches!(batch.status.as_str(), "in_progress" | "cancelling" | "finalizing") {
        let (completed, failed) = store(app)?.line_counts(&batch.id).await.map_err(internal)?;
        (batch.completed, batch.failed) = (completed, failed);
    }
    Ok(json_value(StatusCode::OK, &batch_json(&batch)))
}

/// `GET /v1/batches`: the caller's batches, newest first.
pub async fn list(app: &App, identity: &Identity, query: Option<&str>) -> Result<Response<GatewayBody>, GatewayError> {
    let (limit, after, _) = paging(query)?;
    let owner = (!identity.is_admin()).then(|| owner_of(identity));
    let rows = store(app)?.list_batches(owner.as_deref(), limit + 1, after.as_deref()).await.map_err(internal)?;
    Ok(json_value(StatusCode::OK, &list_json(rows.iter().map(batch_json).collect(), limit)))
}

/// `POST /v1/batches/{id}/cancel`: no new lines start; those in flight finish; then the batch is
/// `cancelled`, with the output of what finished.
pub async fn cancel(app: &App, identity: &Identity, id: &str) -> Result<Response<GatewayBody>, GatewayError> {
    let mut batch = owned_batch(app, identity, id).await?;
    if matches!(batch.status.as_str(), "validating" | "in_progress") {
        batch.status = "cancelling".to_owned();
        batch.cancelling_at = Some(app.clock.unix_secs());
        store(app)?.update_batch(&batch).await.map_err(internal)?;
        runner::cancel(&batch.id);
    }
    Ok(json_value(StatusCode::OK, &batch_json(&batch)))
}
