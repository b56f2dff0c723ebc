//! The OTLP logs export sink: one log record per usage record (event `switchyard.request`, its
//! figures as attributes named after the GenAI conventions where they have a name), sent in
//! batches with `opentelemetry-otlp`'s HTTP log exporter — what Grafana, Datadog, Langfuse and any
//! OpenTelemetry Collector take in.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::logs::{AnyValue, LogRecord as _, Logger as _, LoggerProvider as _, Severity};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{LogExporter, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::logs::{LogBatch, LogExporter as _, SdkLogRecord, SdkLoggerProvider};
use opentelemetry_sdk::Resource;

use crate::records::UsageRecord;
use crate::usage::CheckpointFile;
use crate::usage::UsageSink;

pub struct OtlpLogsSink {
    exporter: LogExporter,
    /// Only makes log records (it has no processor: the sink sends them itself, then checkpoints).
    provider: SdkLoggerProvider,
    scope: InstrumentationScope,
    checkpoint: CheckpointFile,
}

impl OtlpLogsSink {
    pub fn new(
        url: &str,
        headers: &[(String, String)],
        timeout: Duration,
        connect_timeout: Duration,
        checkpoint: CheckpointFile,
    ) -> Result<OtlpLogsSink, String> {
        let client =
            opentelemetry_http::hyper::HyperClient::new(crate::upstream::connector(connect_timeout)?, timeout, None);
        let mut exporter = LogExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_endpoint(url)
            .with_timeout(timeout)
            .with_headers(headers.iter().cloned().collect())
            .build()
            .map_err(|e| format!("cannot build the OTLP log exporter: {e}"))?;
        let resource = Resource::builder_empty()
            .with_service_name("switchyard")
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        exporter.set_resource(&resource);
        let scope = InstrumentationScope::builder("switchyard.usage").with_version(env!("CARGO_PKG_VERSION")).build();
        Ok(OtlpLogsSink { exporter, provider: SdkLoggerProvider::builder().build(), scope, checkpoint })
    }

    fn log_record(&self, record: &UsageRecord) -> SdkLogRecord {
        let mut log = self.provider.logger("switchyard.usage").create_log_record();
        let ms = u64::try_from(record.ts_ms).unwrap_or(0);
        log.set_timestamp(UNIX_EPOCH + Duration::from_millis(ms));
        log.set_observed_timestamp(SystemTime::now());
        log.set_event_name("switchyard.request");
        let (severity, text) = match record.status {
            500.. | 0 => (Severity::Error, "ERROR"),
            400..=499 => (Severity::Warn, "WARN"),
            _ => (Severity::Info, "INFO"),
        };
        log.set_severity_number(severity);
        log.set_severity_text(text);
        log.set_body(AnyValue::from(format!(
            "{} {} → {} via {}: {} in, {} out, {:.1} ms",
            record.status,
            record.model_requested,
            record.model_served,
            record.backend.as_deref().unwrap_or("-"),
            record.prompt_tokens,
            record.completion_tokens,
            record.latency_ms
        )));
        log.add_attribute("switchyard.request_id", record.id.clone());
        log.add_attribute("gen_ai.request.model", record.model_requested.clone());
        log.add_attribute("gen_ai.response.model", record.model_served.clone());
        log.add_attribute("gen_ai.usage.input_tokens", record.prompt_tokens as i64);
        log.add_attribute("gen_ai.usage.output_tokens", record.completion_tokens as i64);
        log.add_attribute("http.response.status_code", i64::from(record.status));
        log.add_attribute("switchyard.latency_ms", record.latency_ms);
        log.add_attribute("switchyard.cost_usd", record.cost_usd);
        log.add_attribute("switchyard.estimated", record.estimated);
        let optional = [
            ("switchyard.key_id", &record.key_id),
            ("user.id", &record.user),
            ("switchyard.team", &record.team),
            ("switchyard.backend", &record.backend),
            ("gen_ai.tool.name", &record.tool),
        ];
        for (key, value) in optional {
            if let Some(v) = value {
                log.add_attribute(key, v.clone());
            }
        }
        if let Some(ttft) = record.ttft_ms {
            log.add_attribute("switchyard.ttft_ms", ttft);
        }
        log
    }
}

impl OtlpLogsSink {
    /// Audit log entries (as the admin API shows them), one log record each (event
    /// `switchyard.audit`).
    pub async fn export_audit(&self, entries: &[serde_json::Value]) -> Result<(), String> {
        let text = |e: &serde_json::Value, k: &str| e[k].as_str().unwrap_or_default().to_owned();
        let logs: Vec<SdkLogRecord> = entries
            .iter()
            .map(|e| {
                let mut log = self.provider.logger("switchyard.audit").create_log_record();
                let ms = e["ts_ms"].as_u64().unwrap_or(0);
                log.set_timestamp(UNIX_EPOCH + Duration::from_millis(ms));
                log.set_observed_timestamp(SystemTime::now());
                log.set_event_name("switchyard.audit");
                log.set_severity_number(Severity::Info);
                log.set_severity_text("INFO");
                log.set_body(AnyValue::from(format!(
                    "{} {} {}",
                    text(e, "actor"),
                    text(e, "action"),
                    text(e, "target")
                )));
                log.add_attribute("switchyard.audit.seq", e["seq"].as_i64().unwrap_or(0));
                for (attribute, field) in [
                    ("switchyard.audit.actor", "actor"),
                    ("switchyard.audit.action", "action"),
                    ("switchyard.audit.target", "target"),
                    ("switchyard.audit.hash", "hash"),
                    ("client.address", "client"),
                ] {
                    if let Some(v) = e[field].as_str() {
                        log.add_attribute(attribute, v.to_owned());
                    }
                }
                for (attribute, field) in [("switchyard.audit.before", "before"), ("switchyard.audit.after", "after")] {
                    if !e[field].is_null() {
                        log.add_attribute(attribute, e[field].to_string());
                    }
                }
                log
            })
            .collect();
        let pairs: Vec<(&SdkLogRecord, &InstrumentationScope)> = logs.iter().map(|l| (l, &self.scope)).collect();
        self.exporter.export(LogBatch::new(&pairs)).await.map_err(|e| format!("OTLP log export failed: {e}"))
    }
}

impl UsageSink for OtlpLogsSink {
    async fn write_batch(&self, records: &[UsageRecord], checkpoint: u64) -> Result<u64, String> {
        let logs: Vec<SdkLogRecord> = records.iter().map(|r| self.log_record(r)).collect();
        let pairs: Vec<(&SdkLogRecord, &InstrumentationScope)> = logs.iter().map(|l| (l, &self.scope)).collect();
        self.exporter.export(LogBatch::new(&pairs)).await.map_err(|e| format!("OTLP log export failed: {e}"))?;
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
