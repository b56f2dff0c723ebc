//! Export sinks ("logging callbacks"): each configured sink (`exports:`) is a journal consumer of
//! its own, run by a `UsageWriter` on a low-priority thread of its own, with its checkpoint in a
//! file beside the journal. The usage journal is the buffer: a sink that is down falls behind and
//! catches up, and the journal keeps every file until every sink is past it. A request never
//! waits for a sink; records reach each sink once (a gateway killed between a delivery and its
//! checkpoint sends that batch again, under the same record ids).

use std::fmt::Write as _;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{ExportConfig, ExportSink};
use crate::usage::{CheckpointFile, Journal, UsageCounters, UsageSink, UsageWriter, WriterConfig};

/// The running sinks.
#[derive(Default)]
pub struct Exports {
    writers: Vec<(String, UsageWriter)>,
    pub counters: Arc<ExportCounters>,
}

/// Each sink's counters, for `/metrics`.
#[derive(Default)]
pub struct ExportCounters(Vec<(String, Arc<UsageCounters>)>);

impl Exports {
    /// Register one journal consumer per sink: before the database writer starts reading, so it
    /// deletes no file a sink still needs.
    pub fn consumers(journal: &Journal, exports: &[ExportConfig]) -> Vec<usize> {
        exports.iter().map(|_| journal.add_consumer()).collect()
    }

    pub fn start(
        journal: &Arc<Journal>,
        exports: &[ExportConfig],
        consumers: &[usize],
        connect_timeout: Duration,
    ) -> Result<Exports, String> {
        let dir = journal.dir().join("exports");
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let (mut writers, mut counted) = (Vec::new(), Vec::new());
        for (export, &consumer) in exports.iter().zip(consumers) {
            let counters = Arc::new(UsageCounters::default());
            let config = WriterConfig {
                batch_max: export.batch_size,
                linger: export.batch_delay,
                backoff_max: Duration::from_secs(30),
                consumer,
                counters: Some(counters.clone()),
                max_backlog: Some(export.max_backlog),
                idle: true,
                ..WriterConfig::default()
            };
            let checkpoint = CheckpointFile::new(dir.join(format!("{}.checkpoint", export.name)));
            let (timeout, journal_id) = (export.timeout, journal.id().to_owned());
            let writer = match &export.sink {
                ExportSink::Webhook { url, headers } => {
                    let url = url.parse().map_err(|e| format!("exports.{}: {e}", export.name))?;
                    let headers: Vec<_> =
                        headers.iter().filter_map(|(k, v)| Some((k.parse().ok()?, v.parse().ok()?))).collect();
                    spawn_sink(journal, &export.name, config, move || {
                        let client = crate::upstream::build(connect_timeout)?;
                        Ok(super::webhook::WebhookSink { client, url, headers, timeout, journal_id, checkpoint })
                    })
                }
                ExportSink::S3(target) => {
                    let (target, batch_max) = (target.clone(), export.batch_size);
                    spawn_sink(journal, &export.name, config, move || {
                        super::s3::S3Sink::new(&target, timeout, connect_timeout, journal_id, checkpoint, batch_max)
                    })
                }
                ExportSink::OtlpLogs { url, headers } => {
                    let (url, headers) = (url.clone(), headers.clone());
                    spawn_sink(journal, &export.name, config, move || {
                        super::otlp_logs::OtlpLogsSink::new(&url, &headers, timeout, connect_timeout, checkpoint)
                    })
                }
            }?;
            tracing::info!(sink = %export.name, "exporting usage records");
            writers.push((export.name.clone(), writer));
            counted.push((export.name.clone(), counters));
        }
        Ok(Exports { writers, counters: Arc::new(ExportCounters(counted)) })
    }

    /// Deliver what the journal holds (up to `grace`), then stop; the rest goes at the next start.
    pub async fn shutdown(self, grace: Duration) {
        for (name, writer) in self.writers {
            if !writer.shutdown(grace).await {
                tracing::warn!(sink = %name, "export sink did not catch up before shutdown; it resumes at the next start");
            }
        }
    }
}

/// Run a sink's writer on a low-priority thread of its own; the sink (and its HTTP client) is made
/// there, inside the writer's runtime.
fn spawn_sink<S: UsageSink>(
    journal: &Arc<Journal>,
    name: &str,
    config: WriterConfig,
    make: impl FnOnce() -> Result<S, String> + Send + 'static,
) -> Result<UsageWriter, String> {
    let make = move || make().map_err(|e| tracing::error!(error = %e, "export sink could not start")).ok();
    UsageWriter::spawn_on_own_thread(journal.clone(), make, config)
        .map_err(|e| format!("cannot start export `{name}`: {e}"))
}

impl ExportCounters {
    /// Each sink's name and counters, in configuration order.
    pub fn each(&self) -> impl Iterator<Item = (&str, &UsageCounters)> {
        self.0.iter().map(|(name, c)| (name.as_str(), &**c))
    }

    /// `/metrics` lines, per sink.
    pub fn render(&self, out: &mut String) {
        if self.0.is_empty() {
            return;
        }
        out.push_str("# HELP switchyard_export_records_total Usage records per export sink, by state: delivered, spilled (waiting while the sink fails), replayed (delivered late), corrupt, dropped (never delivered: the sink fell more than its max_backlog behind).\n");
        out.push_str("# TYPE switchyard_export_records_total counter\n");
        for (name, counters) in &self.0 {
            for (state, counter) in [
                ("delivered", &counters.written),
                ("spilled", &counters.spilled),
                ("replayed", &counters.replayed),
                ("corrupt", &counters.corrupt),
                ("dropped", &counters.dropped),
            ] {
                let _ = writeln!(
                    out,
                    "switchyard_export_records_total{{sink=\"{name}\",state=\"{state}\"}} {}",
                    counter.load(Relaxed)
                );
            }
        }
        for (metric, help, kind, read) in [
            (
                "switchyard_export_failures_total",
                "Batches an export sink refused or could not take (each is retried with backoff).",
                "counter",
                (|c: &UsageCounters| c.batches_failed.load(Relaxed)) as fn(&UsageCounters) -> u64,
            ),
            (
                "switchyard_export_last_delivery_timestamp_seconds",
                "When an export sink last took a batch (unix seconds; now minus this is its lag while records wait).",
                "gauge",
                |c: &UsageCounters| c.last_written_unix.load(Relaxed),
            ),
        ] {
            let _ = writeln!(out, "# HELP {metric} {help}\n# TYPE {metric} {kind}");
            for (name, counters) in &self.0 {
                let _ = writeln!(out, "{metric}{{sink=\"{name}\"}} {}", read(counters));
            }
        }
    }
}
