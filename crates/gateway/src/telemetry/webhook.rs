//! The webhook export sink: batches of usage records POSTed as a JSON array. A 2xx answer
//! delivers the batch and moves the sink's checkpoint past it; anything else is retried by the
//! writer with backoff while the records wait in the journal.

use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderName, HeaderValue, Request, Uri};
use http_body_util::{BodyExt, Full};

use crate::records::UsageRecord;
use crate::upstream::UpstreamClient;
use crate::usage::CheckpointFile;
use crate::usage::UsageSink;

pub struct WebhookSink {
    pub(super) client: UpstreamClient,
    pub(super) url: Uri,
    pub(super) headers: Vec<(HeaderName, HeaderValue)>,
    pub(super) timeout: Duration,
    /// `Idempotency-Key` prefix: the journal's id, so keys differ between instances.
    pub(super) journal_id: String,
    pub(super) checkpoint: CheckpointFile,
}

static IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

impl WebhookSink {
    /// A sink for the audit log (`admin/audit_export.rs`), whose mark is kept in the database.
    pub fn for_audit(
        client: UpstreamClient,
        url: Uri,
        headers: Vec<(HeaderName, HeaderValue)>,
        timeout: Duration,
    ) -> WebhookSink {
        let checkpoint = CheckpointFile::new(std::path::PathBuf::from("/dev/null"));
        WebhookSink { client, url, headers, timeout, journal_id: String::new(), checkpoint }
    }

    async fn post(&self, records: &[UsageRecord], checkpoint: u64) -> Result<(), String> {
        let body = serde_json::to_vec(records).map_err(|e| format!("encoding records: {e}"))?;
        // The batch's end in this journal: a batch retried, or resent after a crash, is the
        // same batch (the writer freezes it and keeps its end before the first try), so a
        // receiver that keeps each key once stores each record once.
        self.send(body, format!("{}-{checkpoint}", self.journal_id)).await
    }

    /// Audit log entries, as `{"object": "audit_log", "data": [...]}`; the key names the entries
    /// (`audit-{first seq}-{last seq}`), the same whichever instance sends them.
    pub async fn post_audit(&self, entries: &[serde_json::Value], first: i64, last: i64) -> Result<(), String> {
        let body = serde_json::to_vec(&serde_json::json!({"object": "audit_log", "data": entries}))
            .map_err(|e| format!("encoding audit entries: {e}"))?;
        self.send(body, format!("audit-{first}-{last}")).await
    }

    async fn send(&self, body: Vec<u8>, idempotency_key: String) -> Result<(), String> {
        let mut req = Request::post(self.url.clone())
            .header(header::CONTENT_TYPE, "application/json")
            .header(&IDEMPOTENCY_KEY, idempotency_key);
        for (name, value) in &self.headers {
            req = req.header(name, value.clone());
        }
        let req = req.body(Full::new(Bytes::from(body))).map_err(|e| e.to_string())?;
        let exchange = async {
            let resp = self.client.request(req).await.map_err(|e| format!("webhook unreachable: {e}"))?;
            let status = resp.status();
            // Read the answer whole so the connection is reused.
            let _ = resp.into_body().collect().await;
            if status.is_success() {
                Ok(())
            } else {
                Err(format!("webhook answered {status}"))
            }
        };
        tokio::time::timeout(self.timeout, exchange).await.map_err(|_| "webhook timed out".to_owned())?
    }
}

impl UsageSink for WebhookSink {
    async fn write_batch(&self, records: &[UsageRecord], checkpoint: u64) -> Result<u64, String> {
        self.post(records, checkpoint).await?;
        self.checkpoint.store(checkpoint)?;
        Ok(records.len() as u64)
    }

    async fn checkpoint(&self) -> Result<u64, String> {
        self.checkpoint.load()
    }

    fn checkpoint_file(&self) -> Option<&CheckpointFile> {
        Some(&self.checkpoint)
    }
}
