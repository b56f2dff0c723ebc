//! The S3 export sink: each batch of usage records is one JSON Lines (or Parquet) object in an S3-compatible
//! bucket (AWS S3, MinIO, GCS's S3 API), written with `object_store` over the gateway's hyper
//! client. An object is named after where its batch starts in this journal and is only ever
//! created, never replaced (`If-None-Match: *`). A batch sent again (after a failure, a crash, or
//! a restart) starts at the same stored checkpoint, so it meets the object an earlier try made:
//! that object holds the first records from there (an earlier try may even have timed out here
//! and still reached the server, later), so this try counts them and writes only the rest, under
//! `{start}.{records before it}`. Every record is in the bucket exactly once.
//!
//! Key: `{prefix}dt=YYYY-MM-DD/{journal id}-{start checkpoint, 20 digits}[.{n}].jsonl` (`.parquet`).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use object_store::aws::S3ConditionalPut;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::client::{
    ClientOptions, HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse, HttpResponseBody,
    HttpService,
};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, RetryConfig};

use crate::config::{ObjectFormat, S3Target};
use crate::records::UsageRecord;
use crate::upstream::UpstreamClient;
use crate::usage::CheckpointFile;
use crate::usage::UsageSink;

/// What a build without the `parquet` feature says (its config refuses `format: parquet` first).
#[cfg(not(feature = "parquet"))]
const NO_PARQUET: &str = "this build has no Parquet support";

pub struct S3Sink {
    store: AmazonS3,
    prefix: String,
    format: ObjectFormat,
    journal_id: String,
    checkpoint: CheckpointFile,
    /// Where the next batch starts: the stored checkpoint.
    start: AtomicU64,
    /// Records per batch at most (the export's `batch_size`).
    batch_max: usize,
}

impl S3Sink {
    pub fn new(
        target: &S3Target,
        timeout: Duration,
        connect_timeout: Duration,
        journal_id: String,
        checkpoint: CheckpointFile,
        batch_max: usize,
    ) -> Result<S3Sink, String> {
        let store = bucket(target, timeout, connect_timeout)
            // The journal's writer retries a failed batch with its own backoff; object_store's
            // retries on top would stack (minutes of hidden retrying per put while a server is down).
            .with_retry(RetryConfig { max_retries: 0, ..RetryConfig::default() })
            .with_conditional_put(S3ConditionalPut::ETagMatch)
            .build()
            .map_err(|e| format!("S3 sink: {e}"))?;
        Ok(S3Sink {
            store,
            prefix: target.prefix.clone(),
            format: target.format,
            journal_id,
            checkpoint,
            start: AtomicU64::new(0),
            batch_max,
        })
    }

    /// The object for the records of the batch starting at `start` from the `skip`th on.
    fn key(&self, first: &UsageRecord, start: u64, skip: usize) -> Path {
        let at = UNIX_EPOCH + Duration::from_millis(u64::try_from(first.ts_ms).unwrap_or(0));
        let day = humantime::format_rfc3339_seconds(at).to_string();
        let day = day.get(..10).unwrap_or("1970-01-01");
        let extension = self.format.extension();
        let part = if skip == 0 { String::new() } else { format!(".{skip}") };
        Path::from(format!("{}dt={day}/{}-{start:020}{part}.{extension}", self.prefix, self.journal_id))
    }

    fn encode(&self, records: &[UsageRecord]) -> Result<Vec<u8>, String> {
        match self.format {
            ObjectFormat::JsonLines => {
                let mut body = Vec::with_capacity(records.len() * 320);
                for record in records {
                    serde_json::to_writer(&mut body, record).map_err(|e| format!("encoding records: {e}"))?;
                    body.push(b'\n');
                }
                Ok(body)
            }
            #[cfg(feature = "parquet")]
            ObjectFormat::Parquet => super::parquet_file::encode(records),
            #[cfg(not(feature = "parquet"))]
            ObjectFormat::Parquet => Err(NO_PARQUET.to_owned()),
        }
    }

    /// How many records the object at `key` holds (an earlier try's).
    async fn records_in(&self, key: &Path) -> Result<usize, String> {
        let body = self.store.get(key).await.map_err(|e| format!("S3 get {key}: {e}"))?;
        let bytes = body.bytes().await.map_err(|e| format!("S3 get {key}: {e}"))?;
        match self.format {
            ObjectFormat::JsonLines => Ok(bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()).count()),
            #[cfg(feature = "parquet")]
            ObjectFormat::Parquet => super::parquet_file::rows(bytes),
            #[cfg(not(feature = "parquet"))]
            ObjectFormat::Parquet => Err(NO_PARQUET.to_owned()),
        }
    }
}

impl S3Sink {
    /// Audit log entries, one object each (`{prefix}audit/{seq, 20 digits}.json`), created once:
    /// an entry sent again meets its own object.
    pub async fn put_audit(&self, entries: &[serde_json::Value], seqs: &[i64]) -> Result<(), String> {
        for (entry, seq) in entries.iter().zip(seqs) {
            let key = Path::from(format!("{}audit/{seq:020}.json", self.prefix));
            let body = PutPayload::from(serde_json::to_vec(entry).map_err(|e| format!("encoding audit: {e}"))?);
            match self.store.put_opts(&key, body, PutOptions::from(PutMode::Create)).await {
                Ok(_) | Err(object_store::Error::AlreadyExists { .. }) => {}
                Err(e) => return Err(format!("S3 put {key}: {e}")),
            }
        }
        Ok(())
    }
}

impl UsageSink for S3Sink {
    async fn write_batch(&self, records: &[UsageRecord], checkpoint: u64) -> Result<u64, String> {
        let Some(first) = records.first() else { return Ok(0) };
        let start = self.start.load(Relaxed);
        let mut done = 0;
        while done < records.len() {
            let key = self.key(first, start, done);
            let body = PutPayload::from(self.encode(&records[done..])?);
            match self.store.put_opts(&key, body, PutOptions::from(PutMode::Create)).await {
                Ok(_) => done = records.len(),
                Err(object_store::Error::AlreadyExists { .. }) => {
                    let held = self.records_in(&key).await?;
                    if held == 0 {
                        return Err(format!("S3 object {key} exists but holds no records"));
                    }
                    if done + held > records.len() {
                        if records.len() < self.batch_max {
                            // An earlier try held more than this batch: try again once the batch
                            // has grown to cover it (its records are in the journal already).
                            return Err(format!("S3 object {key} holds {held} records, more than this batch"));
                        }
                        // A full batch still short of it (batch_size was lowered): what follows
                        // is written again, so those records are in the bucket twice.
                        tracing::warn!(%key, held, "an S3 object from an earlier try holds more than a whole batch");
                    }
                    done += held;
                }
                Err(e) => return Err(format!("S3 put {key}: {e}")),
            }
        }
        self.checkpoint.store(checkpoint)?;
        self.start.store(checkpoint, Relaxed);
        Ok(records.len() as u64)
    }

    async fn checkpoint(&self) -> Result<u64, String> {
        let checkpoint = self.checkpoint.load()?;
        self.start.store(checkpoint, Relaxed);
        Ok(checkpoint)
    }

    fn checkpoint_file(&self) -> Option<&CheckpointFile> {
        Some(&self.checkpoint)
    }
}

/// A client of `target`'s bucket over the gateway's own hyper client: the `AWS_*` variables
/// first (credentials, region, session token), then what the config names.
pub fn bucket(target: &S3Target, timeout: Duration, connect_timeout: Duration) -> AmazonS3Builder {
    let mut builder = AmazonS3Builder::from_env()
        .with_bucket_name(&target.bucket)
        .with_http_connector(Hyper { connect_timeout })
        .with_client_options(ClientOptions::new().with_timeout(timeout));
    if let Some(region) = &target.region {
        builder = builder.with_region(region);
    }
    if let Some(endpoint) = &target.endpoint {
        builder = builder
            .with_endpoint(endpoint)
            .with_allow_http(endpoint.starts_with("http://"))
            // MinIO, moto and GCS address buckets by path, not by host name.
            .with_virtual_hosted_style_request(false);
    }
    if let (Some(id), Some(secret)) = (&target.access_key_id, &target.secret_access_key) {
        builder = builder.with_access_key_id(id).with_secret_access_key(secret);
    }
    builder
}

/// `object_store`'s HTTP client, made of the gateway's own hyper client (rustls, no reqwest).
#[derive(Debug)]
struct Hyper {
    connect_timeout: Duration,
}

impl HttpConnector for Hyper {
    fn connect(&self, _options: &ClientOptions) -> object_store::Result<HttpClient> {
        let client = crate::upstream::build(self.connect_timeout)
            .map_err(|e| object_store::Error::Generic { store: "S3", source: e.into() })?;
        Ok(HttpClient::new(HyperService(Arc::new(client))))
    }
}

#[derive(Debug)]
struct HyperService(Arc<UpstreamClient>);

#[async_trait::async_trait]
impl HttpService for HyperService {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let (parts, body) = req.into_parts();
        let streamed = parts.method == http::Method::GET;
        let body = match body.as_bytes() {
            Some(bytes) => bytes.clone(),
            None => body.collect().await?.to_bytes(),
        };
        let resp = self.0.request(http::Request::from_parts(parts, Full::new(body))).await.map_err(|e| {
            HttpError::new(if e.is_connect() { HttpErrorKind::Connect } else { HttpErrorKind::Request }, e)
        })?;
        let (parts, body) = resp.into_parts();
        if streamed && parts.status.is_success() {
            // An object read back (a file sent to a client): passed on as it arrives.
            let body = body.map_err(|e| HttpError::new(HttpErrorKind::Decode, e));
            return Ok(HttpResponse::from_parts(parts, HttpResponseBody::new(body)));
        }
        // Answers to PUTs are small: read whole, which also frees the connection for the next one.
        let bytes: Bytes = body.collect().await.map_err(|e| HttpError::new(HttpErrorKind::Decode, e))?.to_bytes();
        Ok(HttpResponse::from_parts(parts, HttpResponseBody::from(bytes)))
    }
}
