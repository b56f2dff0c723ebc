//! `exports:` — where every request's usage record is delivered besides the database ("logging
//! callbacks"): each sink reads the usage journal on its own, so a sink that is down only falls
//! behind.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use serde::Deserialize;

use super::duration::parse_duration;
use super::ConfigError;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawExport {
    name: String,
    #[serde(rename = "type")]
    kind: String,
    url: Option<String>,
    #[serde(default)]
    headers: HashMap<String, String>,
    /// `s3`: the bucket, a key prefix, and where and how to reach it (else the `AWS_*` variables).
    bucket: Option<String>,
    prefix: Option<String>,
    endpoint: Option<String>,
    region: Option<String>,
    access_key_id: Option<String>,
    secret_access_key: Option<String>,
    /// `s3`: `jsonl` (the default) or `parquet`.
    format: Option<String>,
    batch_size: Option<usize>,
    /// How long a partial batch waits for more records.
    batch_delay: Option<String>,
    timeout: Option<String>,
    /// Most journal bytes the sink may fall behind before its oldest records are dropped.
    max_backlog: Option<super::cache::RawSize>,
    /// Deliver the audit log's entries too (default true).
    audit: Option<bool>,
}

#[derive(Clone, PartialEq)]
pub enum ExportSink {
    /// POST batches of records as JSON to `url`.
    Webhook { url: String, headers: Vec<(String, String)> },
    /// One OTLP log record per usage record, to `url` (the collector's `/v1/logs`).
    OtlpLogs { url: String, headers: Vec<(String, String)> },
    /// A JSON Lines (or Parquet) object per batch in an S3-compatible bucket.
    S3(S3Target),
}

/// How the S3 sink writes a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectFormat {
    /// One JSON object per line (`.jsonl`).
    JsonLines,
    /// One Parquet file, Snappy-compressed (`.parquet`).
    Parquet,
}

impl ObjectFormat {
    pub fn extension(self) -> &'static str {
        match self {
            ObjectFormat::JsonLines => "jsonl",
            ObjectFormat::Parquet => "parquet",
        }
    }
}

#[derive(Clone, PartialEq)]
pub struct S3Target {
    pub bucket: String,
    /// Prepended to every key; ends with `/` unless empty.
    pub prefix: String,
    /// An S3-compatible server (MinIO, GCS's `https://storage.googleapis.com`); None: AWS.
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    pub format: ObjectFormat,
}

#[derive(Clone, PartialEq)]
pub struct ExportConfig {
    pub name: String,
    pub sink: ExportSink,
    pub batch_size: usize,
    pub batch_delay: Duration,
    pub timeout: Duration,
    /// How far (journal bytes) the sink may fall behind before its oldest records are dropped
    /// and counted: a sink down for days must not fill the disk.
    pub max_backlog: u64,
    /// The audit log's entries go to this sink too (`telemetry/audit_export.rs`).
    pub audit: bool,
}

/// `max_backlog` when the configuration gives none: about ten million records.
pub const DEFAULT_MAX_BACKLOG: u64 = 4 << 30;

impl fmt::Debug for S3Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the credentials.
        f.debug_struct("S3Target")
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for ExportConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Header values are usually credentials of the receiving service.
        let kind = match &self.sink {
            ExportSink::Webhook { .. } => "webhook",
            ExportSink::OtlpLogs { .. } => "otlp_logs",
            ExportSink::S3(_) => "s3",
        };
        f.debug_struct("ExportConfig").field("name", &self.name).field("type", &kind).finish_non_exhaustive()
    }
}

/// An S3 sink's `format`; Parquet only in a build with the `parquet` feature.
fn object_format(format: Option<&str>) -> Result<ObjectFormat, String> {
    match format {
        None | Some("jsonl") => Ok(ObjectFormat::JsonLines),
        Some("parquet") if cfg!(feature = "parquet") => Ok(ObjectFormat::Parquet),
        Some("parquet") => Err("this build has no Parquet support: build it with `--features parquet`".to_owned()),
        Some(other) => Err(format!("`{other}` is not a format (jsonl, parquet)")),
    }
}

pub fn validate(raw: Vec<RawExport>) -> Result<Vec<ExportConfig>, ConfigError> {
    let mut exports: Vec<ExportConfig> = Vec::with_capacity(raw.len());
    for (i, e) in raw.into_iter().enumerate() {
        let at = |field: &str| format!("exports[{i}].{field}");
        let name_ok = !e.name.is_empty() && e.name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !name_ok {
            return Err(ConfigError::at(at("name"), "use letters, digits, `-` and `_`"));
        }
        if exports.iter().any(|x| x.name == e.name) {
            return Err(ConfigError::at(at("name"), format!("`{}` is used twice", e.name)));
        }
        let http_target = |what: &str| -> Result<(String, Vec<(String, String)>), ConfigError> {
            let url = e.url.clone().ok_or_else(|| ConfigError::at(at("url"), format!("{what} needs a url")))?;
            if !(url.starts_with("http://") || url.starts_with("https://")) || url.parse::<http::Uri>().is_err() {
                return Err(ConfigError::at(at("url"), format!("`{url}` is not an http(s) URL")));
            }
            for (name, value) in &e.headers {
                if http::HeaderName::try_from(name.as_str()).is_err() || http::HeaderValue::try_from(value).is_err() {
                    return Err(ConfigError::at(at("headers"), format!("`{name}` is not a valid header")));
                }
            }
            Ok((url, e.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect()))
        };
        let sink = match e.kind.as_str() {
            "webhook" => {
                let (url, headers) = http_target("a webhook")?;
                ExportSink::Webhook { url, headers }
            }
            "otlp_logs" => {
                let (url, headers) = http_target("an OTLP sink")?;
                // The collector's base URL, as OTEL_EXPORTER_OTLP_ENDPOINT takes it; a full one is kept.
                let url =
                    if url.ends_with("/v1/logs") { url } else { format!("{}/v1/logs", url.trim_end_matches('/')) };
                ExportSink::OtlpLogs { url, headers }
            }
            "s3" => {
                let bucket =
                    e.bucket.clone().ok_or_else(|| ConfigError::at(at("bucket"), "an S3 sink needs a bucket"))?;
                if let Some(endpoint) = &e.endpoint {
                    if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
                        return Err(ConfigError::at(at("endpoint"), format!("`{endpoint}` is not an http(s) URL")));
                    }
                }
                if e.access_key_id.is_some() != e.secret_access_key.is_some() {
                    return Err(ConfigError::at(at("access_key_id"), "give both access_key_id and secret_access_key"));
                }
                let format = object_format(e.format.as_deref()).map_err(|e| ConfigError::at(at("format"), e))?;
                let prefix = e.prefix.clone().unwrap_or_else(|| "switchyard/".to_owned());
                let prefix = if prefix.is_empty() || prefix.ends_with('/') { prefix } else { format!("{prefix}/") };
                ExportSink::S3(S3Target {
                    bucket,
                    prefix,
                    endpoint: e.endpoint.clone(),
                    region: e.region.clone(),
                    access_key_id: e.access_key_id.clone(),
                    secret_access_key: e.secret_access_key.clone(),
                    format,
                })
            }
            other => {
                return Err(ConfigError::at(
                    at("type"),
                    format!("`{other}` is not a sink type (webhook, otlp_logs, s3)"),
                ))
            }
        };
        let duration = |field: &str, raw: &Option<String>, default: Duration| match raw {
            None => Ok(default),
            Some(text) => parse_duration(text).map_err(|m| ConfigError::at(at(field), m)),
        };
        let batch_size = e.batch_size.unwrap_or(500);
        if !(1..=10_000).contains(&batch_size) {
            return Err(ConfigError::at(at("batch_size"), "must be 1–10000"));
        }
        let max_backlog = super::cache::size(&at("max_backlog"), e.max_backlog, DEFAULT_MAX_BACKLOG as usize)? as u64;
        if max_backlog == 0 {
            return Err(ConfigError::at(at("max_backlog"), "must be more than 0"));
        }
        exports.push(ExportConfig {
            max_backlog,
            name: e.name,
            sink,
            batch_size,
            batch_delay: duration("batch_delay", &e.batch_delay, Duration::from_secs(1))?,
            timeout: duration("timeout", &e.timeout, Duration::from_secs(10))?,
            audit: e.audit.unwrap_or(true),
        });
    }
    Ok(exports)
}
