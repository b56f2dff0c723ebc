//! `/v1/files`: upload (multipart, streamed to disk within `limits.max_upload_bytes`), list,
//! retrieve, delete and read back, each only by the file's owner.

use std::sync::{Arc, Mutex};

use http::{Request, Response, StatusCode};
use http_body_util::BodyDataStream;
use hyper::body::Incoming;
use serde_json::{json, Value};

use super::bucket::Bucket;
use super::filestore::{Disk, FileStore, WriteError};
use super::{internal, list_json, may_see, new_id, owner_of, paging, store};
use crate::app::App;
use crate::auth::Identity;
use crate::config::S3Target;
use crate::error::GatewayError;
use crate::http::{json_value, GatewayBody, SseEvents};
use crate::store::FileRow;
use http_body_util::Either;

/// What files may be uploaded for.
const PURPOSES: [&str; 6] = ["batch", "assistants", "fine-tune", "vision", "user_data", "evals"];

/// Where this configuration keeps files: made once and kept while the configuration names the
/// same place (a bucket's client holds its connections).
pub(super) fn file_store(app: &App) -> Result<Arc<FileStore>, GatewayError> {
    type Place = (std::path::PathBuf, Option<Box<S3Target>>);
    static MADE: Mutex<Option<(Place, Arc<FileStore>)>> = Mutex::new(None);
    let storage = &app.config.storage;
    let place = (storage.files_dir.clone(), storage.files_bucket.clone());
    let mut made = MADE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, files)) = made.as_ref().filter(|(at, _)| *at == place) {
        return Ok(files.clone());
    }
    let files = Arc::new(match &storage.files_bucket {
        None => FileStore::Disk(Disk::new(storage.files_dir.clone())),
        Some(target) => {
            let timeouts = &app.config.timeouts;
            FileStore::Bucket(Bucket::new(target, timeouts.request, timeouts.connect).map_err(internal)?)
        }
    });
    *made = Some((place, files.clone()));
    Ok(files)
}

/// OpenAI's file object.
pub(super) fn file_json(f: &FileRow) -> Value {
    json!({"id": f.id, "object": "file", "bytes": f.bytes, "created_at": f.created_at, "filename": f.filename,
           "purpose": f.purpose, "status": "processed", "expires_at": null, "status_details": null})
}

fn bad(message: impl Into<String>, param: Option<&'static str>) -> GatewayError {
    GatewayError::bad_request(message, param)
}

/// The file `id`, when `identity` may see it (another owner's is as absent as a missing one).
pub(super) async fn owned(app: &App, identity: &Identity, id: &str) -> Result<FileRow, GatewayError> {
    let file = store(app)?.get_file(id).await.map_err(internal)?;
    file.filter(|f| may_see(identity, &f.owner))
        .ok_or_else(|| GatewayError::NotFound { message: format!("No such File object: {id}") })
}

/// `POST /v1/files`: a multipart form with `purpose` and `file`.
pub async fn upload(
    app: &Arc<App>,
    identity: &Identity,
    req: Request<Incoming>,
) -> Result<Response<GatewayBody>, GatewayError> {
    let store = store(app)?;
    let boundary = crate::http::multipart::boundary(req.headers())?;
    let mut form = multer::Multipart::new(BodyDataStream::new(req.into_body()), boundary);
    let (mut purpose, mut saved) = (None, None);
    let files = file_store(app)?;
    while let Some(field) =
        form.next_field().await.map_err(|e| bad(format!("a malformed multipart form: {e}"), None))?
    {
        match field.name() {
            // Bytes, not `text()`: that would link every character encoding's tables.
            Some("purpose") => {
                let bytes = field.bytes().await.map_err(|_| bad("`purpose` could not be read", Some("purpose")))?;
                purpose = Some(
                    String::from_utf8(bytes.to_vec()).map_err(|_| bad("`purpose` must be text", Some("purpose")))?,
                );
            }
            Some("file") if saved.is_none() => {
                let filename = field.file_name().unwrap_or("upload.jsonl").chars().take(255).collect::<String>();
                let id = new_id("file-")?;
                let bytes = files.write(&id, field, app.config.max_upload_bytes as u64).await.map_err(|e| match e {
                    WriteError::TooLarge => GatewayError::PayloadTooLarge { limit: app.config.max_upload_bytes },
                    WriteError::Read(e) => bad(format!("the upload could not be read: {e}"), Some("file")),
                    WriteError::Io(e) => internal(e),
                })?;
                saved = Some((id, filename, bytes));
            }
            _ => {}
        }
    }
    let Some((id, filename, bytes)) = saved else { return Err(bad("you must provide a `file`", Some("file"))) };
    let purpose = match purpose {
        Some(p) if PURPOSES.contains(&p.as_str()) => p,
        _ => {
            let _ = files.delete(&id).await;
            return Err(bad(format!("`purpose` must be one of {}", PURPOSES.join(", ")), Some("purpose")));
        }
    };
    let row = FileRow {
        id,
        owner: owner_of(identity),
        filename,
        purpose,
        bytes: bytes as i64,
        created_at: app.clock.unix_secs(),
    };
    store.insert_file(&row).await.map_err(internal)?;
    Ok(json_value(StatusCode::OK, &file_json(&row)))
}

/// `GET /v1/files`: the caller's files, newest first.
pub async fn list(app: &App, identity: &Identity, query: Option<&str>) -> Result<Response<GatewayBody>, GatewayError> {
    let (limit, after, purpose) = paging(query)?;
    let owner = (!identity.is_admin()).then(|| owner_of(identity));
    let rows = store(app)?.list_files(owner.as_deref(), purpose.as_deref(), limit + 1, after.as_deref()).await;
    let data = rows.map_err(internal)?.iter().map(file_json).collect();
    Ok(json_value(StatusCode::OK, &list_json(data, limit)))
}

pub async fn retrieve(app: &App, identity: &Identity, id: &str) -> Result<Response<GatewayBody>, GatewayError> {
    Ok(json_value(StatusCode::OK, &file_json(&owned(app, identity, id).await?)))
}

pub async fn delete(app: &App, identity: &Identity, id: &str) -> Result<Response<GatewayBody>, GatewayError> {
    let file = owned(app, identity, id).await?;
    store(app)?.delete_file(&file.id).await.map_err(internal)?;
    file_store(app)?.delete(&file.id).await.map_err(internal)?;
    Ok(json_value(StatusCode::OK, &json!({"id": file.id, "object": "file", "deleted": true})))
}

/// `GET /v1/files/{id}/content`: the file's bytes, streamed from disk (never read whole).
pub async fn content(app: &App, identity: &Identity, id: &str) -> Result<Response<GatewayBody>, GatewayError> {
    let file = owned(app, identity, id).await?;
    let (chunks, size) = file_store(app)?.read_stream(&file.id).await.map_err(internal)?;
    let body = GatewayBody::Right(Either::Right(SseEvents::raw(chunks)));
    Response::builder()
        .status(StatusCode::OK)
        .header(http::header::CONTENT_TYPE, "application/octet-stream")
        .header(http::header::CONTENT_LENGTH, size)
        .body(body)
        .map_err(internal)
}
