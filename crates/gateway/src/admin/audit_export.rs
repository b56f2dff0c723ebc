//! The audit log delivered to the export sinks (`exports[].audit`, on by default): the database
//! is the buffer. Each sink has a task that takes the entries past the sink's mark in
//! `audit_exports`, delivers them in order and moves the mark — shared by a fleet, so whichever
//! instance delivers a run of entries, the others skip it; two racing for the same run send it
//! under the same idempotency key (webhook), as the same objects (S3), or, for OTLP, twice with
//! the same `switchyard.audit.seq`. A sink that is down is retried with backoff; nothing is lost.

use std::time::Duration;

use tokio::sync::Notify;

use crate::config::{ExportConfig, ExportSink};
use crate::store::{AuditRow, Store};
use crate::usage::CheckpointFile;

/// Woken on every append here; other instances' appends are found by polling.
pub static APPENDED: Notify = Notify::const_new();

/// How often the log is read for other instances' entries.
const POLL: Duration = Duration::from_secs(2);
/// Entries per delivery at most.
const BATCH: i64 = 100;

enum Target {
    Webhook(crate::telemetry::webhook::WebhookSink),
    Otlp(crate::telemetry::otlp_logs::OtlpLogsSink),
    S3(crate::telemetry::s3::S3Sink),
}

impl Target {
    fn new(export: &ExportConfig, connect_timeout: Duration) -> Result<Target, String> {
        // The usage sinks' checkpoint file is not used here: the mark is in the database.
        let unused = CheckpointFile::new(std::path::PathBuf::from("/dev/null"));
        Ok(match &export.sink {
            ExportSink::Webhook { url, headers } => Target::Webhook(crate::telemetry::webhook::WebhookSink::for_audit(
                crate::upstream::build(connect_timeout)?,
                url.parse().map_err(|e| format!("exports.{}: {e}", export.name))?,
                headers.iter().filter_map(|(k, v)| Some((k.parse().ok()?, v.parse().ok()?))).collect(),
                export.timeout,
            )),
            ExportSink::OtlpLogs { url, headers } => Target::Otlp(crate::telemetry::otlp_logs::OtlpLogsSink::new(
                url,
                headers,
                export.timeout,
                connect_timeout,
                unused,
            )?),
            ExportSink::S3(target) => Target::S3(crate::telemetry::s3::S3Sink::new(
                target,
                export.timeout,
                connect_timeout,
                String::new(),
                unused,
                1,
            )?),
        })
    }

    async fn deliver(&self, rows: &[AuditRow]) -> Result<(), String> {
        let (first, last) = (rows.first().map_or(0, |r| r.seq), rows.last().map_or(0, |r| r.seq));
        match self {
            Target::Webhook(sink) => {
                let entries: Vec<_> = rows.iter().map(AuditRow::to_json).collect();
                sink.post_audit(&entries, first, last).await
            }
            Target::Otlp(sink) => {
                let entries: Vec<_> = rows.iter().map(AuditRow::to_json).collect();
                sink.export_audit(&entries).await
            }
            Target::S3(sink) => {
                let entries: Vec<_> = rows.iter().map(AuditRow::to_json).collect();
                let seqs: Vec<i64> = rows.iter().map(|r| r.seq).collect();
                sink.put_audit(&entries, &seqs).await
            }
        }
    }
}

/// Start delivering the audit log to every sink that takes it.
pub fn spawn(store: &Store, exports: &[ExportConfig], connect_timeout: Duration) {
    for export in exports.iter().filter(|e| e.audit) {
        let (store, export) = (store.clone(), export.clone());
        tokio::spawn(async move {
            match Target::new(&export, connect_timeout) {
                Ok(target) => run(&store, &export.name, &target).await,
                Err(e) => tracing::error!(sink = %export.name, error = %e, "audit export could not start"),
            }
        });
    }
}

async fn run(store: &Store, sink: &str, target: &Target) {
    let mut backoff = Duration::from_millis(200);
    loop {
        match step(store, sink, target).await {
            Ok(true) => {
                backoff = Duration::from_millis(200);
                continue;
            }
            Ok(false) => {
                backoff = Duration::from_millis(200);
                let _ = tokio::time::timeout(POLL, APPENDED.notified()).await;
            }
            Err(e) => {
                tracing::warn!(sink, error = %e, "audit export failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
        }
    }
}

/// Deliver the next run of entries, if any: whether there was one.
async fn step(store: &Store, sink: &str, target: &Target) -> Result<bool, String> {
    let mark = store.audit_export_seq(sink).await.map_err(|e| e.to_string())?;
    let rows = store.audit_from(mark, BATCH).await.map_err(|e| e.to_string())?;
    let Some(last) = rows.last().map(|r| r.seq) else { return Ok(false) };
    target.deliver(&rows).await?;
    if !store.advance_audit_export(sink, mark, last).await.map_err(|e| e.to_string())? {
        tracing::debug!(sink, "another instance delivered these audit entries too");
    }
    Ok(true)
}
