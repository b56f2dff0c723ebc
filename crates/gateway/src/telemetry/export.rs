//! The export task: finished requests' traces become OpenTelemetry spans (the HTTP server span and
//! one GenAI client span per attempt), batched and sent with the OTLP/HTTP exporter from
//! `opentelemetry-otlp` (protobuf, its retry with backoff) over a hyper client.

use std::borrow::Cow;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceState};
use opentelemetry::{InstrumentationScope, KeyValue, StringValue, Value};
use opentelemetry_otlp::{SpanExporter, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter as _, SpanLinks};
use opentelemetry_sdk::Resource;
use tokio::sync::oneshot;

use super::{Counters, Finished, Queue};
use crate::config::{BackendKind, TelemetryConfig};

pub(super) fn exporter(config: &TelemetryConfig, connect_timeout: Duration) -> Result<SpanExporter, String> {
    let client =
        opentelemetry_http::hyper::HyperClient::new(crate::upstream::connector(connect_timeout)?, config.timeout, None);
    let mut exporter = SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_endpoint(config.traces_url.clone())
        .with_timeout(config.timeout)
        .with_headers(config.headers.clone())
        .build()
        .map_err(|e| format!("telemetry: cannot build the OTLP exporter: {e}"))?;
    let resource = Resource::builder_empty()
        .with_service_name(config.service_name.clone())
        .with_attributes(config.resource.iter().map(|(k, v)| KeyValue::new(k.clone(), v.clone())))
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build();
    exporter.set_resource(&resource);
    Ok(exporter)
}

pub(super) async fn run(
    exporter: SpanExporter,
    queue: Arc<Queue>,
    counters: Arc<Counters>,
    config: TelemetryConfig,
    mut stop: oneshot::Receiver<()>,
) {
    let scope = InstrumentationScope::builder("switchyard").with_version(env!("CARGO_PKG_VERSION")).build();
    let mut taken: Vec<Finished> = Vec::with_capacity(config.batch_size);
    let mut batch: Vec<SpanData> = Vec::with_capacity(config.batch_size + 8);
    let mut tick = tokio::time::interval(config.batch_delay);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_warning: Option<Instant> = None;
    loop {
        let stopping = tokio::select! {
            _ = queue.full.notified() => false,
            _ = tick.tick() => false,
            _ = &mut stop => true,
        };
        // Everything waiting goes, in batches: full ones as they fill, then the rest.
        queue.take(&mut taken);
        for finished in taken.drain(..) {
            spans(finished, &scope, &mut batch);
            if batch.len() >= config.batch_size {
                send(&exporter, &mut batch, &counters, &mut last_warning).await;
            }
        }
        if !batch.is_empty() {
            send(&exporter, &mut batch, &counters, &mut last_warning).await;
        }
        if stopping {
            break;
        }
    }
}

async fn send(
    exporter: &SpanExporter,
    batch: &mut Vec<SpanData>,
    counters: &Counters,
    last_warning: &mut Option<Instant>,
) {
    let spans = std::mem::take(batch);
    let n = spans.len() as u64;
    match exporter.export(spans).await {
        Ok(()) => {
            counters.exported.fetch_add(n, Relaxed);
        }
        Err(e) => {
            counters.failed.fetch_add(n, Relaxed);
            // One line a minute at most: a collector that is down would otherwise flood the log.
            if last_warning.is_none_or(|t| t.elapsed() > Duration::from_secs(60)) {
                *last_warning = Some(Instant::now());
                tracing::warn!(error = %e, spans = n, "telemetry export failed; spans dropped");
            }
        }
    }
}

/// The request's spans: the server span, then one client span per upstream attempt.
fn spans(f: Finished, scope: &InstrumentationScope, out: &mut Vec<SpanData>) {
    let Finished { trace, outcome, end } = f;
    let at = |t: Instant| trace.start + t.saturating_duration_since(trace.started);
    let state = trace
        .tracestate
        .as_ref()
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.parse::<TraceState>().ok())
        .unwrap_or(TraceState::NONE);
    let context =
        |span_id: SpanId| SpanContext::new(trace.trace_id, span_id, TraceFlags::SAMPLED, false, state.clone());
    let route = trace.endpoint.route();
    let name = match route {
        Some(route) => format!("{} {route}", trace.method),
        None => trace.method.to_string(),
    };
    let mut attributes = vec![
        KeyValue::new("http.request.method", method(&trace.method)),
        KeyValue::new("http.response.status_code", i64::from(outcome.status)),
        KeyValue::new("switchyard.request_id", trace.request_id.to_str().unwrap_or_default().to_owned()),
    ];
    match (route, &trace.path) {
        (Some(route), _) => attributes.push(KeyValue::new("http.route", route)),
        (None, Some(path)) => attributes.push(KeyValue::new("url.path", path.clone())),
        (None, None) => {}
    }
    if !outcome.model_requested.is_empty() {
        attributes.push(KeyValue::new("gen_ai.request.model", outcome.model_requested.clone()));
    }
    if let Some(key) = &outcome.key_id {
        attributes.push(KeyValue::new("switchyard.key_id", key.clone()));
    }
    let server_error = outcome.status >= 500;
    if server_error {
        attributes.push(KeyValue::new("error.type", outcome.status.to_string()));
    }
    out.push(SpanData {
        span_context: context(trace.span_id),
        parent_span_id: trace.parent.map_or(SpanId::INVALID, |p| p.span_id),
        parent_span_is_remote: trace.parent.is_some(),
        span_kind: SpanKind::Server,
        name: Cow::Owned(name),
        start_time: trace.start,
        end_time: at(end),
        attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status: if server_error { error_status(outcome.status.to_string()) } else { Status::Unset },
        instrumentation_scope: scope.clone(),
    });
    let operation = trace.endpoint.operation();
    let model = if outcome.model_served.is_empty() { &outcome.model_requested } else { &outcome.model_served };
    // One allocation, shared by every attempt's attributes.
    let model_value: StringValue = Arc::<str>::from(model.as_str()).into();
    let last = trace.attempts.len().saturating_sub(1);
    for (i, attempt) in trace.attempts.iter().enumerate() {
        let backend = &attempt.backend;
        let mut attributes = vec![
            KeyValue::new("gen_ai.operation.name", operation),
            KeyValue::new("gen_ai.provider.name", provider(backend.kind())),
            KeyValue::new("gen_ai.request.model", Value::String(model_value.clone())),
            KeyValue::new("switchyard.backend", backend.name().to_owned()),
        ];
        if let Some(host) = backend.discovery_uri.host() {
            attributes.push(KeyValue::new("server.address", host.to_owned()));
        }
        if let Some(port) = backend.discovery_uri.port_u16() {
            attributes.push(KeyValue::new("server.port", i64::from(port)));
        }
        if let Some(status) = attempt.status {
            attributes.push(KeyValue::new("http.response.status_code", i64::from(status)));
        }
        if trace.stream {
            attributes.push(KeyValue::new("gen_ai.request.stream", true));
            if let Some(first) = attempt.first_chunk {
                let seconds = first.saturating_duration_since(attempt.start).as_secs_f64();
                attributes.push(KeyValue::new("gen_ai.response.time_to_first_chunk", seconds));
            }
        }
        if i == last && attempt.error.is_none() {
            attributes.push(KeyValue::new("gen_ai.response.model", Value::String(model_value.clone())));
            if let Some(n) = outcome.input_tokens {
                attributes.push(KeyValue::new("gen_ai.usage.input_tokens", n as i64));
            }
            if let Some(n) = outcome.output_tokens {
                attributes.push(KeyValue::new("gen_ai.usage.output_tokens", n as i64));
            }
        }
        if let Some(error) = attempt.error {
            attributes.push(KeyValue::new("error.type", error));
        }
        out.push(SpanData {
            span_context: context(attempt.span_id),
            parent_span_id: trace.span_id,
            parent_span_is_remote: false,
            span_kind: SpanKind::Client,
            name: Cow::Owned(format!("{operation} {model}")),
            start_time: at(attempt.start),
            end_time: at(attempt.end.unwrap_or(end)),
            attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: attempt.error.map_or(Status::Unset, |e| error_status(e.to_owned())),
            instrumentation_scope: scope.clone(),
        });
    }
}

/// `http.request.method` without an allocation for the common methods.
fn method(method: &http::Method) -> StringValue {
    match *method {
        http::Method::GET => "GET".into(),
        http::Method::POST => "POST".into(),
        http::Method::PUT => "PUT".into(),
        http::Method::DELETE => "DELETE".into(),
        _ => method.as_str().to_owned().into(),
    }
}

fn error_status(description: String) -> Status {
    Status::Error { description: Cow::Owned(description) }
}

/// `gen_ai.provider.name`: the API flavour the backend speaks (an OpenAI-compatible server such as
/// vLLM reports `openai`, as the conventions ask; `server.address` tells which one it was).
fn provider(kind: BackendKind) -> &'static str {
    match kind {
        BackendKind::OpenAi => "openai",
        BackendKind::Anthropic => "anthropic",
        BackendKind::Ollama => "ollama",
        BackendKind::Azure => "azure.ai.openai",
        BackendKind::Gemini => "gcp.gemini",
        BackendKind::Bedrock => "aws.bedrock",
    }
}
