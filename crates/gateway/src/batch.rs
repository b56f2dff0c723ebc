//! The OpenAI Files and Batch APIs, run by the gateway itself (issue 33). Files are kept under
//! `storage.files_dir` and listed and read only by their owner (a key's team, else the key; the
//! master key's own). A batch's lines run through the gateway's own pipeline — routed, admitted
//! under its creator's key, metered with the batch's id and priced at the model's
//! `batch_discount` — at low priority: a line goes out only while the model's queue is empty
//! and a backend has a slot to spare. Progress is in the database, one row per finished line
//! keyed by `custom_id`, so after a restart a batch carries on where it was and no line runs
//! into the output twice; a line's request id is derived from the batch and its `custom_id`, so
//! a line sent again after a crash is one usage record, not two.
//!
//! `files.rs` and `batches.rs` answer the HTTP API, `filestore.rs` keeps the bytes (on disk, or in a
//! bucket with `bucket.rs`), `jsonl.rs`
//! reads input lines and writes OpenAI's output and error lines, `runner.rs` runs batches and
//! `claim.rs` keeps a fleet to one runner per batch; `passthrough.rs` sends a batch to a hosted
//! provider's own Batch API instead (`batches.mode: passthrough`), through `provider.rs`.

mod batches;
mod bucket;
mod claim;
mod files;
mod filestore;
mod jsonl;
mod passthrough;
mod provider;
pub mod runner;

use std::sync::Arc;

use http::{Method, Request, Response};
use hyper::body::Incoming;

use crate::app::App;
use crate::auth::Identity;
use crate::error::GatewayError;
use crate::http::GatewayBody;
use crate::store::Store;

/// Who owns what a request creates: its key's team, else the key; the master key's things are
/// the master's.
fn owner_of(identity: &Identity) -> String {
    match identity.key() {
        Some(key) => match &key.team_id {
            Some(team) => format!("team:{team}"),
            None => format!("key:{}", key.id),
        },
        None => "master".to_owned(),
    }
}

/// Whether `identity` may see what `owner` owns (the master key sees everything).
fn may_see(identity: &Identity, owner: &str) -> bool {
    identity.is_admin() || owner_of(identity) == owner
}

fn store(app: &App) -> Result<&Store, GatewayError> {
    app.store.as_ref().ok_or_else(|| GatewayError::NotFound { message: "files and batches need storage".to_owned() })
}

/// `/v1/files…` and `/v1/batches…` (`path` without `/v1`).
pub async fn handle(app: &Arc<App>, req: Request<Incoming>, path: &str) -> Result<Response<GatewayBody>, GatewayError> {
    let identity = app.auth.authenticate(req.headers(), app.clock.unix_secs()).await?;
    let method = req.method().clone();
    let rest = path.trim_end_matches('/');
    match (method, rest.strip_prefix("/files"), rest.strip_prefix("/batches")) {
        (Method::POST, Some(""), _) => files::upload(app, &identity, req).await,
        (Method::GET, Some(""), _) => files::list(app, &identity, req.uri().query()).await,
        (Method::GET, Some(id), _) if id.ends_with("/content") => {
            files::content(app, &identity, id.trim_start_matches('/').trim_end_matches("/content")).await
        }
        (Method::GET, Some(id), _) => files::retrieve(app, &identity, id.trim_start_matches('/')).await,
        (Method::DELETE, Some(id), _) if !id.is_empty() => {
            files::delete(app, &identity, id.trim_start_matches('/')).await
        }
        (Method::POST, _, Some("")) => batches::create(app, &identity, req).await,
        (Method::GET, _, Some("")) => batches::list(app, &identity, req.uri().query()).await,
        (Method::POST, _, Some(id)) if id.ends_with("/cancel") => {
            batches::cancel(app, &identity, id.trim_start_matches('/').trim_end_matches("/cancel")).await
        }
        (Method::GET, _, Some(id)) => batches::retrieve(app, &identity, id.trim_start_matches('/')).await,
        _ => Err(GatewayError::MethodNotAllowed),
    }
}

/// `limit` and `after` of a list request's query (OpenAI's cursor paging).
fn paging(query: Option<&str>) -> Result<(i64, Option<String>, Option<String>), GatewayError> {
    let (mut limit, mut after, mut purpose) = (20, None, None);
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_encoding::percent_decode_str(value).decode_utf8_lossy();
        match name {
            "limit" => {
                limit = value
                    .parse::<i64>()
                    .ok()
                    .filter(|l| (1..=10_000).contains(l))
                    .ok_or_else(|| GatewayError::bad_request("`limit` must be 1 to 10000", Some("limit")))?;
            }
            "after" => after = Some(value.into_owned()),
            "purpose" => purpose = Some(value.into_owned()),
            _ => {}
        }
    }
    Ok((limit, after, purpose))
}

/// OpenAI's list object over `data`, one more than `limit` asked telling whether there is more.
fn list_json(mut data: Vec<serde_json::Value>, limit: i64) -> serde_json::Value {
    let has_more = data.len() as i64 > limit;
    data.truncate(limit as usize);
    let first = data.first().map(|d| d["id"].clone());
    let last = data.last().map(|d| d["id"].clone());
    serde_json::json!({"object": "list", "data": data, "first_id": first, "last_id": last, "has_more": has_more})
}

fn internal(e: impl std::fmt::Display) -> GatewayError {
    tracing::error!(error = %e, "files and batches storage failed");
    GatewayError::Internal
}

/// A fresh id with `prefix` (`file-`, `batch_`): 24 random hex digits.
fn new_id(prefix: &str) -> Result<String, GatewayError> {
    let mut random = [0u8; 12];
    getrandom::getrandom(&mut random).map_err(internal)?;
    Ok(random.iter().fold(prefix.to_owned(), |mut id, b| {
        id.push_str(&format!("{b:02x}"));
        id
    }))
}
