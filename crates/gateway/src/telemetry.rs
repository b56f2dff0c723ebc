//! OpenTelemetry traces (`telemetry:`): a server span per inbound request that continues the
//! caller's `traceparent`, and a client span per upstream attempt named and attributed per the
//! GenAI semantic conventions. The request path only fills in a `Trace` (ids, clock reads) and
//! hands it over with one non-blocking send; spans are built and exported in batches on the
//! export thread (`telemetry/export.rs`), under SCHED_IDLE. A full queue drops the trace and
//! counts it — as the request begins, when it is full already: telemetry never slows or fails a
//! request.

mod export;
pub mod exports;
pub mod otlp_logs;
mod otlp_spans;
#[cfg(feature = "parquet")]
mod parquet_file;
pub mod s3;
pub mod trace;
pub mod webhook;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use http::{HeaderMap, HeaderValue, Method};
use opentelemetry::trace::SpanId;
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};
use std::sync::{Mutex, PoisonError};

use tokio::sync::{oneshot, Notify};

use crate::config::{Sampler, TelemetryConfig};
use crate::endpoint::Endpoint;
pub use exports::Exports;
pub use trace::Trace;

/// What a request carries of tracing.
pub enum Tracing {
    /// Sampled: its spans are exported when it ends.
    Recorded(Box<Trace>),
    /// Not recorded (not sampled, or dropped at the door): only a context for upstream, the
    /// caller's `traceparent` and `tracestate` as they came or, with none, a fresh unsampled
    /// `traceparent`, so the backend's own sampling agrees with ours. Forwarding the caller's
    /// context keeps a backend's spans attached to the caller's trace. Either way the request
    /// spends nothing on spans: no boxed trace, no clock reads, no attempt list.
    PassedOn((HeaderValue, Option<HeaderValue>)),
}

/// What a request ended with, beyond its trace: what its spans report.
#[derive(Debug, Default)]
pub struct Outcome {
    pub status: u16,
    pub model_requested: String,
    pub model_served: String,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub key_id: Option<String>,
    /// An A2A call's agent, method and task (`/a2a`), reported on its server span.
    pub a2a: Option<Box<AgentCall>>,
}

/// What an A2A call's server span reports (`a2a.*` attributes).
#[derive(Debug, Default)]
pub struct AgentCall {
    pub agent: String,
    pub method: &'static str,
    pub task_id: Option<String>,
    /// The task's last state seen.
    pub task_state: Option<String>,
    /// Stream events relayed (0 for an answer read whole).
    pub events: u32,
}

struct Finished {
    trace: Box<Trace>,
    outcome: Outcome,
    end: Instant,
}

#[derive(Default)]
struct Counters {
    exported: AtomicU64,
    dropped: AtomicU64,
    failed: AtomicU64,
}

/// Finished traces waiting for the export task. A plain buffer rather than a channel: a push
/// wakes nothing (a channel would schedule the export task once per request); the task takes the
/// whole buffer when a batch is full or the batch delay is up.
struct Queue {
    waiting: Mutex<Vec<Finished>>,
    /// `waiting.len()`, readable without the lock: a request checks it before tracing at all.
    len: AtomicUsize,
    /// Most traces `waiting` may hold (`telemetry.queue_size`).
    capacity: usize,
    /// How many make a batch worth waking the task for.
    batch: usize,
    full: Notify,
}

impl Queue {
    fn take(&self, into: &mut Vec<Finished>) {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        std::mem::swap(&mut *waiting, into);
        self.len.store(waiting.len(), Relaxed);
    }

    fn is_full(&self) -> bool {
        self.len.load(Relaxed) >= self.capacity
    }
}

pub struct Telemetry {
    queue: Arc<Queue>,
    ids: RandomIdGenerator,
    sampler: Sampler,
    counters: Arc<Counters>,
}

/// The export thread; `shutdown` sends what is queued before it ends.
pub struct Exporting {
    stop: oneshot::Sender<()>,
    /// Resolves when the thread's loop has ended.
    task: oneshot::Receiver<()>,
}

impl Exporting {
    pub async fn shutdown(self, grace: Duration) {
        let _ = self.stop.send(());
        if tokio::time::timeout(grace, self.task).await.is_err() {
            tracing::warn!("telemetry export did not finish before shutdown; queued spans are lost");
        }
    }
}

impl Telemetry {
    /// Build the exporter and start its thread.
    pub fn start(config: &TelemetryConfig, connect_timeout: Duration) -> Result<(Arc<Telemetry>, Exporting), String> {
        let exporter = export::exporter(config, connect_timeout)?;
        let queue = Arc::new(Queue {
            waiting: Mutex::new(Vec::with_capacity(config.batch_size)),
            len: AtomicUsize::new(0),
            capacity: config.queue_size,
            batch: config.batch_size.min(config.queue_size),
            full: Notify::new(),
        });
        let counters = Arc::new(Counters::default());
        let (stop, stopped) = oneshot::channel();
        let (done, task) = oneshot::channel();
        let (waiting, counted, config_for_task) = (queue.clone(), counters.clone(), config.clone());
        // Its own thread under SCHED_IDLE: building, encoding and posting spans only ever uses
        // CPU that requests leave. Below saturation it keeps up; at saturation it gets next to
        // nothing, the queue fills and traces are dropped and counted. (The export sinks run
        // under SCHED_IDLE too, but drop nothing: their records wait in the journal.)
        std::thread::Builder::new()
            .name("telemetry-export".to_owned())
            .spawn(move || {
                crate::usage::priority::idle_this_thread();
                match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(runtime) => runtime.block_on(export::run(exporter, waiting, counted, config_for_task, stopped)),
                    Err(e) => tracing::error!(error = %e, "telemetry export could not start its runtime"),
                }
                let _ = done.send(());
            })
            .map_err(|e| format!("telemetry: cannot start the export thread: {e}"))?;
        tracing::info!(endpoint = %config.traces_url, "exporting OpenTelemetry traces");
        let telemetry = Telemetry { queue, ids: RandomIdGenerator::default(), sampler: config.sampler, counters };
        Ok((Arc::new(telemetry), Exporting { stop, task }))
    }

    /// A request arrived: its trace, continuing the caller's `traceparent` when it sent one.
    pub fn begin(
        &self,
        headers: &HeaderMap,
        method: &Method,
        endpoint: Endpoint,
        path: &str,
        request_id: &HeaderValue,
        started: Instant,
    ) -> Tracing {
        let sent = headers.get(&trace::TRACEPARENT);
        let parent = sent.and_then(|v| trace::parse_traceparent(v.as_bytes()));
        let trace_id = parent.map_or_else(|| self.ids.new_trace_id(), |p| p.trace_id);
        let mut sampled = match parent {
            Some(p) if self.sampler.follow_parent => p.flags.is_sampled(),
            _ => ratio_samples(self.sampler.ratio, trace_id.to_bytes()),
        };
        // The export queue is full already (a saturated core; the export thread runs only on
        // what requests leave): the trace would be dropped at its end, so it is dropped now,
        // before the request spends anything on it.
        if sampled && self.queue.is_full() {
            sampled = false;
            self.counters.dropped.fetch_add(1, Relaxed);
        }
        if !sampled {
            return Tracing::PassedOn(match (parent, sent) {
                (Some(_), Some(sent)) => (sent.clone(), headers.get(&trace::TRACESTATE).cloned()),
                _ => (trace::traceparent(trace_id, self.ids.new_span_id(), false), None),
            });
        }
        let now = SystemTime::now();
        Tracing::Recorded(Box::new(Trace {
            trace_id,
            span_id: self.ids.new_span_id(),
            parent,
            tracestate: parent.and_then(|_| headers.get(&trace::TRACESTATE).cloned()),
            start: now.checked_sub(started.elapsed()).unwrap_or(now),
            started,
            method: method.clone(),
            endpoint,
            path: endpoint.route().is_none().then(|| path.to_owned()),
            request_id: request_id.clone(),
            stream: false,
            attempts: Vec::new(),
        }))
    }

    /// A fresh span id (for an attempt's span).
    pub fn span_id(&self) -> SpanId {
        self.ids.new_span_id()
    }

    /// The request is over: queue its spans for export, or drop and count them when the queue is full.
    pub fn finish(&self, trace: Box<Trace>, outcome: Outcome) {
        let finished = Finished { trace, outcome, end: Instant::now() };
        let waiting = {
            let mut waiting = self.queue.waiting.lock().unwrap_or_else(PoisonError::into_inner);
            if waiting.len() >= self.queue.capacity {
                drop(waiting);
                self.counters.dropped.fetch_add(1, Relaxed);
                return;
            }
            waiting.push(finished);
            self.queue.len.store(waiting.len(), Relaxed);
            waiting.len()
        };
        if waiting == self.queue.batch {
            self.queue.full.notify_one();
        }
    }

    /// `/metrics` lines.
    pub fn render(&self, out: &mut String) {
        use std::fmt::Write;
        for (name, help, value) in [
            ("switchyard_telemetry_spans_exported_total", "Spans the collector accepted.", &self.counters.exported),
            (
                "switchyard_telemetry_traces_dropped_total",
                "Requests' traces dropped because the export queue (telemetry.queue_size) was full.",
                &self.counters.dropped,
            ),
            (
                "switchyard_telemetry_spans_failed_total",
                "Spans lost because their export failed after retries (collector down or refusing).",
                &self.counters.failed,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}", value.load(Relaxed));
        }
    }
}

/// `TraceIdRatioBased`: the trace id's last 8 bytes against the ratio, so every instance (and
/// every other service using the same rule) decides alike for one trace.
fn ratio_samples(ratio: f64, trace_id: [u8; 16]) -> bool {
    if ratio >= 1.0 {
        return true;
    }
    let mut low = [0u8; 8];
    low.copy_from_slice(&trace_id[8..]);
    let x = u64::from_be_bytes(low) >> 1;
    (x as f64) < ratio * (1u64 << 63) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratio_sampling_keeps_about_its_share_of_random_traces() {
        let ids = RandomIdGenerator::default();
        let kept = (0..20_000).filter(|_| ratio_samples(0.25, ids.new_trace_id().to_bytes())).count();
        assert!((4_500..5_500).contains(&kept), "{kept}");
        assert!(!ratio_samples(0.0, ids.new_trace_id().to_bytes()));
        assert!(ratio_samples(1.0, [0; 16]));
    }

    #[test]
    fn a_trace_begun_while_the_queue_is_full_is_dropped_at_once_and_counted() {
        let telemetry = Telemetry {
            queue: Arc::new(Queue {
                waiting: Mutex::new(Vec::new()),
                len: AtomicUsize::new(0),
                capacity: 1,
                batch: 1,
                full: Notify::new(),
            }),
            ids: RandomIdGenerator::default(),
            sampler: Sampler { ratio: 1.0, follow_parent: true },
            counters: Arc::new(Counters::default()),
        };
        let begin = |headers: &HeaderMap| {
            let rid = HeaderValue::from_static("r");
            telemetry.begin(headers, &Method::POST, Endpoint::ChatCompletions, "/", &rid, Instant::now())
        };
        let none = HeaderMap::new();
        let Tracing::Recorded(first) = begin(&none) else { panic!("the first trace is recorded") };
        telemetry.finish(first, Outcome::default());
        assert_eq!(telemetry.queue.len.load(Relaxed), 1);
        // The queue is full: the next trace is not kept and is counted at once; upstream gets
        // a fresh context that says it is not sampled.
        let Tracing::PassedOn((traceparent, None)) = begin(&none) else { panic!("passed on") };
        assert!(trace::parse_traceparent(traceparent.as_bytes()).is_some_and(|p| !p.flags.is_sampled()));
        assert_eq!(telemetry.counters.dropped.load(Relaxed), 1);
        // A caller's context is passed on as it came, so the backend's spans stay in its trace.
        let mut caller = HeaderMap::new();
        caller
            .insert("traceparent", HeaderValue::from_static("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
        caller.insert("tracestate", HeaderValue::from_static("vendor=1"));
        let Tracing::PassedOn((traceparent, Some(tracestate))) = begin(&caller) else { panic!("passed on") };
        assert_eq!((traceparent, tracestate), (caller["traceparent"].clone(), caller["tracestate"].clone()));
        assert_eq!(telemetry.counters.dropped.load(Relaxed), 2);
        // Once the export thread takes the queue, traces are kept again.
        telemetry.queue.take(&mut Vec::new());
        assert!(matches!(begin(&none), Tracing::Recorded(_)));
    }
}
