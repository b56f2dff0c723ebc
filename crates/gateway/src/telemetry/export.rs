//! The export thread's work: finished requests' traces become OTLP spans (the HTTP server span and
//! one GenAI client span per attempt), written as protobuf straight from the trace
//! (`otlp_spans.rs`) and POSTed as OTLP/HTTP protobuf, retried with backoff (within
//! `telemetry.timeout`) where the OTLP spec calls a failure retryable. On a saturated core even an
//! idle-priority thread's work shows in throughput, so a trace costs as little as it can: the
//! SDK's `SpanData` and `opentelemetry-otlp`'s exporter took about 41,000 instructions per trace,
//! `opentelemetry-proto`'s messages about 34,000. Overloaded (traces being dropped), the thread
//! sends at most `batch_size` traces per `batch_delay`.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{header, HeaderName, HeaderValue};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use opentelemetry::trace::TraceState;
use opentelemetry_http::hyper::HyperClient;
use opentelemetry_http::HttpClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use tokio::sync::oneshot;

use super::otlp_spans::{Kind, SpanHead, SpanWriter, Value};
use super::{Counters, Finished, Queue};
use crate::config::{BackendKind, TelemetryConfig};

/// Retries after a first failed POST (OTLP/HTTP: connection errors, 429, 502, 503, 504).
const RETRIES: u32 = 3;
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_millis(1600);
/// `flags` of a span: W3C sampled, and "whether the parent is remote" known (OTLP's
/// `SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK`), with `IS_REMOTE` set when it is.
const SAMPLED: u32 = 0x01;
const HAS_IS_REMOTE: u32 = 0x100;
const IS_REMOTE: u32 = 0x200;

pub(super) struct Exporter {
    client: HyperClient<HttpsConnector<HttpConnector>>,
    url: http::Uri,
    headers: Vec<(HeaderName, HeaderValue)>,
    /// Writes the spans of a batch (the resource and scope encoded once, in it).
    writer: SpanWriter,
    /// The whole export of a batch, retries included, ends by then (as `opentelemetry-otlp`'s).
    timeout: Duration,
}

pub(super) fn exporter(config: &TelemetryConfig, connect_timeout: Duration) -> Result<Exporter, String> {
    let client = HyperClient::new(crate::upstream::connector(connect_timeout)?, config.timeout, None);
    let url = config.traces_url.parse().map_err(|_| format!("telemetry: bad endpoint URL {}", config.traces_url))?;
    let headers = config
        .headers
        .iter()
        .map(|(name, value)| {
            let name =
                HeaderName::from_bytes(name.as_bytes()).map_err(|_| format!("telemetry: bad header name {name}"))?;
            let value = HeaderValue::from_str(value).map_err(|_| format!("telemetry: bad value for header {name}"))?;
            Ok((name, value))
        })
        .collect::<Result<Vec<_>, String>>()?;
    // Later entries win, as in the SDK's resource builder: the service name, then the
    // `OTEL_RESOURCE_ATTRIBUTES`, then the version.
    let mut attributes: Vec<KeyValue> = Vec::new();
    let mut set = |key: &str, value: &str| {
        let value = Some(AnyValue { value: Some(any_value::Value::StringValue(value.to_owned())) });
        match attributes.iter_mut().find(|a| a.key == key) {
            Some(a) => a.value = value,
            None => attributes.push(KeyValue { key: key.to_owned(), value, ..Default::default() }),
        }
    };
    set("service.name", &config.service_name);
    for (key, value) in &config.resource {
        set(key, value);
    }
    set("service.version", env!("CARGO_PKG_VERSION"));
    Ok(Exporter {
        client,
        url,
        headers,
        writer: SpanWriter::new(
            &Resource { attributes, ..Default::default() },
            &InstrumentationScope {
                name: "switchyard".to_owned(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
                ..Default::default()
            },
        ),
        timeout: config.timeout,
    })
}

pub(super) async fn run(
    mut exporter: Exporter,
    queue: Arc<Queue>,
    counters: Arc<Counters>,
    config: TelemetryConfig,
    mut stop: oneshot::Receiver<()>,
) {
    let mut taken: Vec<Finished> = Vec::with_capacity(config.batch_size);
    let mut tick = tokio::time::interval(config.batch_delay);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_warning: Option<Instant> = None;
    let mut dropped_seen = counters.dropped.load(Relaxed);
    let mut overloaded = false;
    loop {
        let stopping = tokio::select! {
            // Overloaded, a full batch does not wake it: it goes on the tick.
            _ = queue.full.notified(), if !overloaded => false,
            _ = tick.tick() => false,
            _ = &mut stop => true,
        };
        queue.take(&mut taken);
        let dropped = counters.dropped.load(Relaxed);
        overloaded = dropped != dropped_seen;
        if overloaded && !stopping && taken.len() > config.batch_size {
            // The newest go: what is left of a saturated core belongs to requests.
            let excess = (taken.len() - config.batch_size) as u64;
            taken.truncate(config.batch_size);
            counters.dropped.fetch_add(excess, Relaxed);
        }
        dropped_seen = counters.dropped.load(Relaxed);
        for finished in taken.drain(..) {
            spans(&finished, &mut exporter.writer);
            if exporter.writer.count() >= config.batch_size {
                exporter.send(&counters, &mut last_warning).await;
            }
        }
        if exporter.writer.count() > 0 {
            exporter.send(&counters, &mut last_warning).await;
        }
        if stopping {
            break;
        }
    }
}

impl Exporter {
    /// Send the spans written so far.
    async fn send(&mut self, counters: &Counters, last_warning: &mut Option<Instant>) {
        let n = self.writer.count() as u64;
        let body = self.writer.take();
        let outcome = self.post(body).await;
        let warning = match outcome {
            Ok(0) => {
                counters.exported.fetch_add(n, Relaxed);
                return;
            }
            Ok(rejected) => {
                counters.exported.fetch_add(n.saturating_sub(rejected), Relaxed);
                counters.failed.fetch_add(rejected.min(n), Relaxed);
                format!("the collector rejected {rejected} of {n} spans")
            }
            Err(e) => {
                counters.failed.fetch_add(n, Relaxed);
                e
            }
        };
        // One line a minute at most: a collector that is down would otherwise flood the log.
        if last_warning.is_none_or(|t| t.elapsed() > Duration::from_secs(60)) {
            *last_warning = Some(Instant::now());
            tracing::warn!(error = %warning, spans = n, "telemetry export failed; spans dropped");
        }
    }

    /// POST one encoded batch: `Ok` with how many spans the collector rejected (a partial
    /// success), or why it failed after its retries.
    async fn post(&self, body: Bytes) -> Result<u64, String> {
        let deadline = Instant::now() + self.timeout;
        let mut backoff = FIRST_BACKOFF;
        let mut tries = 0;
        loop {
            let mut req = http::Request::post(self.url.clone())
                .header(header::CONTENT_TYPE, "application/x-protobuf")
                .body(body.clone())
                .map_err(|e| format!("cannot build the export request: {e}"))?;
            req.headers_mut().extend(self.headers.iter().cloned());
            let why = match self.client.send_bytes(req).await {
                Ok(resp) if resp.status().is_success() => {
                    let rejected = ExportTraceServiceResponse::decode(resp.body().as_ref())
                        .ok()
                        .and_then(|r| r.partial_success)
                        .map_or(0, |p| p.rejected_spans.max(0) as u64);
                    return Ok(rejected);
                }
                Ok(resp) if matches!(resp.status().as_u16(), 429 | 502 | 503 | 504) => {
                    format!("the collector answered {}", resp.status())
                }
                Ok(resp) => return Err(format!("the collector answered {}", resp.status())),
                Err(e) => format!("the collector is unreachable: {e}"),
            };
            if tries == RETRIES || Instant::now() + backoff >= deadline {
                return Err(why);
            }
            tries += 1;
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }
}

/// An A2A call's attributes on its server span.
fn agent_call(call: &crate::telemetry::AgentCall, w: &mut SpanWriter) {
    w.attribute("a2a.agent.name", Value::Str(&call.agent));
    w.attribute("a2a.method", Value::Str(call.method));
    if let Some(task) = &call.task_id {
        w.attribute("a2a.task.id", Value::Str(task));
    }
    if let Some(state) = &call.task_state {
        w.attribute("a2a.task.state", Value::Str(state));
    }
    if call.events > 0 {
        w.attribute("a2a.stream.events", Value::Int(i64::from(call.events)));
    }
}

/// The request's spans: the server span, then one client span per upstream attempt.
fn spans(f: &Finished, w: &mut SpanWriter) {
    let Finished { trace, outcome, end } = f;
    let nanos = |t: SystemTime| t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let at = |t: Instant| nanos(trace.start + t.saturating_duration_since(trace.started));
    let trace_id = trace.trace_id.to_bytes();
    let span_id = trace.span_id.to_bytes();
    // Passed on as the caller sent it, when it is a valid `tracestate`.
    let trace_state = trace
        .tracestate
        .as_ref()
        .and_then(|v| v.to_str().ok())
        .filter(|s| s.parse::<TraceState>().is_ok())
        .unwrap_or_default();
    let route = trace.endpoint.route();
    let parent = trace.parent.map(|p| p.span_id.to_bytes());
    w.begin(&SpanHead {
        trace_id,
        span_id,
        trace_state,
        parent_span_id: parent.as_ref().map_or(&[], |p| &p[..]),
        name: match route {
            Some(route) => [trace.method.as_str(), " ", route],
            None => [trace.method.as_str(), "", ""],
        },
        kind: Kind::Server,
        start_unix_nano: nanos(trace.start),
        end_unix_nano: at(*end),
        flags: SAMPLED | HAS_IS_REMOTE | if parent.is_some() { IS_REMOTE } else { 0 },
    });
    w.attribute("http.request.method", Value::Str(trace.method.as_str()));
    w.attribute("http.response.status_code", Value::Int(i64::from(outcome.status)));
    w.attribute("switchyard.request_id", Value::Str(trace.request_id.to_str().unwrap_or_default()));
    match (route, &trace.path) {
        (Some(route), _) => w.attribute("http.route", Value::Str(route)),
        (None, Some(path)) => w.attribute("url.path", Value::Str(path)),
        (None, None) => {}
    }
    if !outcome.model_requested.is_empty() {
        w.attribute("gen_ai.request.model", Value::Str(&outcome.model_requested));
    }
    if let Some(key) = &outcome.key_id {
        w.attribute("switchyard.key_id", Value::Str(key));
    }
    if let Some(call) = &outcome.a2a {
        agent_call(call, w);
    }
    let server_error = (outcome.status >= 500).then(|| outcome.status.to_string());
    if let Some(error) = &server_error {
        w.attribute("error.type", Value::Str(error));
    }
    w.end(server_error.as_deref());
    let operation = trace.endpoint.operation();
    let model = if outcome.model_served.is_empty() { &outcome.model_requested } else { &outcome.model_served };
    let last = trace.attempts.len().saturating_sub(1);
    for (i, attempt) in trace.attempts.iter().enumerate() {
        let backend = &attempt.backend;
        w.begin(&SpanHead {
            trace_id,
            span_id: attempt.span_id.to_bytes(),
            trace_state,
            parent_span_id: &span_id,
            name: [operation, " ", model],
            kind: Kind::Client,
            start_unix_nano: at(attempt.start),
            end_unix_nano: at(attempt.end.unwrap_or(*end)),
            flags: SAMPLED | HAS_IS_REMOTE,
        });
        w.attribute("gen_ai.operation.name", Value::Str(operation));
        w.attribute("gen_ai.provider.name", Value::Str(provider(backend.kind())));
        w.attribute("gen_ai.request.model", Value::Str(model));
        w.attribute("switchyard.backend", Value::Str(backend.name()));
        if let Some(host) = backend.discovery_uri.host() {
            w.attribute("server.address", Value::Str(host));
        }
        if let Some(port) = backend.discovery_uri.port_u16() {
            w.attribute("server.port", Value::Int(i64::from(port)));
        }
        if let Some(status) = attempt.status {
            w.attribute("http.response.status_code", Value::Int(i64::from(status)));
        }
        if trace.stream {
            w.attribute("gen_ai.request.stream", Value::Bool(true));
            if let Some(first) = attempt.first_chunk {
                let seconds = first.saturating_duration_since(attempt.start).as_secs_f64();
                w.attribute("gen_ai.response.time_to_first_chunk", Value::Double(seconds));
            }
        }
        if i == last && attempt.error.is_none() {
            w.attribute("gen_ai.response.model", Value::Str(model));
            if let Some(n) = outcome.input_tokens {
                w.attribute("gen_ai.usage.input_tokens", Value::Int(n as i64));
            }
            if let Some(n) = outcome.output_tokens {
                w.attribute("gen_ai.usage.output_tokens", Value::Int(n as i64));
            }
        }
        if let Some(error) = attempt.error {
            w.attribute("error.type", Value::Str(error));
        }
        w.end(attempt.error);
    }
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
