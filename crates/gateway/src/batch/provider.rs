//! A hosted provider's own Files and Batch API (OpenAI's), as `batches.mode: passthrough` uses
//! it: upload a batch's input, create the batch, look at it, cancel it, read its result files.
//! Requests carry the backend's own credentials; answers are read within a size cap.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use http::{header, Method, Request};
use http_body_util::{BodyExt, Full, Limited};
use serde_json::{json, Value};

use crate::route::backend::Backend;
use crate::upstream::UpstreamClient;

/// The largest result file read back from a provider (OpenAI's batch input limit is 200 MB).
const MAX_FILE_BYTES: usize = 256 << 20;
/// The largest JSON answer otherwise.
const MAX_JSON_BYTES: usize = 4 << 20;

pub(super) struct Provider<'a> {
    pub client: &'a UpstreamClient,
    pub backend: &'a Arc<Backend>,
}

impl Provider<'_> {
    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Bytes,
        content_type: &str,
        cap: usize,
    ) -> Result<Bytes, String> {
        let url = format!("{}{path}", self.backend.cfg.url.trim_end_matches('/'));
        let mut req = Request::builder().method(method).uri(&url).header(header::CONTENT_TYPE, content_type);
        for (name, value) in &self.backend.auth_headers {
            req = req.header(name, value.clone());
        }
        let req = req.body(Full::new(body)).map_err(|e| e.to_string())?;
        let resp = self.client.request(req).await.map_err(|e| format!("{}: unreachable: {e}", self.backend.name()))?;
        let status = resp.status();
        let bytes = Limited::new(resp.into_body(), cap)
            .collect()
            .await
            .map_err(|e| format!("{}: reading {path}: {e}", self.backend.name()))?
            .to_bytes();
        if !status.is_success() {
            let said = String::from_utf8_lossy(&bytes[..bytes.len().min(300)]).into_owned();
            return Err(format!("{} answered {status} to {path}: {said}", self.backend.name()));
        }
        Ok(bytes)
    }

    async fn json(&self, method: Method, path: &str, body: Option<Value>) -> Result<Value, String> {
        let body = body.map_or_else(Bytes::new, |b| Bytes::from(b.to_string()));
        let bytes = self.send(method, path, body, "application/json", MAX_JSON_BYTES).await?;
        serde_json::from_slice(&bytes).map_err(|e| format!("{path}: an answer that is not JSON: {e}"))
    }

    /// `POST /v1/files` (`purpose: batch`): the provider's id of the uploaded input.
    pub async fn upload(&self, filename: &str, content: Bytes) -> Result<String, String> {
        let boundary = "switchyard-batch-input-7d1f0c9a";
        let mut form = BytesMut::with_capacity(content.len() + 512);
        form.put_slice(
            format!("--{boundary}\r\ncontent-disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n").as_bytes(),
        );
        let head = format!(
            "--{boundary}\r\ncontent-disposition: form-data; name=\"file\"; filename=\"{}\"\r\n\
             content-type: application/jsonl\r\n\r\n",
            filename.replace(['"', '\r', '\n'], "_")
        );
        form.put_slice(head.as_bytes());
        form.put_slice(&content);
        form.put_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
        let content_type = format!("multipart/form-data; boundary={boundary}");
        let bytes = self.send(Method::POST, "/v1/files", form.freeze(), &content_type, MAX_JSON_BYTES).await?;
        let file: Value = serde_json::from_slice(&bytes).map_err(|e| format!("the uploaded file's answer: {e}"))?;
        file["id"].as_str().map(str::to_owned).ok_or_else(|| "the uploaded file's answer has no id".to_owned())
    }

    /// The provider's batch made for gateway batch `ours` (its `metadata.switchyard_batch`), among
    /// the latest: a create whose answer was lost to a crash is found rather than made twice.
    pub async fn find(&self, ours: &str) -> Result<Option<String>, String> {
        let list = self.json(Method::GET, "/v1/batches?limit=100", None).await?;
        let found = list["data"].as_array().into_iter().flatten().find(|b| b["metadata"]["switchyard_batch"] == ours);
        Ok(found.and_then(|b| b["id"].as_str()).map(str::to_owned))
    }

    /// `POST /v1/batches`: the provider's batch id.
    pub async fn create(
        &self,
        ours: &str,
        file: &str,
        endpoint: &str,
        metadata: Option<&str>,
    ) -> Result<String, String> {
        let mut meta = metadata.and_then(|m| serde_json::from_str::<Value>(m).ok()).unwrap_or_else(|| json!({}));
        meta["switchyard_batch"] = json!(ours);
        let asked = json!({"input_file_id": file, "endpoint": endpoint, "completion_window": "24h", "metadata": meta});
        let made = self.json(Method::POST, "/v1/batches", Some(asked)).await?;
        made["id"].as_str().map(str::to_owned).ok_or_else(|| "the created batch's answer has no id".to_owned())
    }

    /// `GET /v1/batches/{id}`: the provider's batch object.
    pub async fn look(&self, batch: &str) -> Result<Value, String> {
        self.json(Method::GET, &format!("/v1/batches/{batch}"), None).await
    }

    /// `POST /v1/batches/{id}/cancel`.
    pub async fn cancel(&self, batch: &str) -> Result<(), String> {
        self.json(Method::POST, &format!("/v1/batches/{batch}/cancel"), None).await.map(drop)
    }

    /// `GET /v1/files/{id}/content`.
    pub async fn content(&self, file: &str) -> Result<Bytes, String> {
        self.send(Method::GET, &format!("/v1/files/{file}/content"), Bytes::new(), "application/json", MAX_FILE_BYTES)
            .await
    }
}
