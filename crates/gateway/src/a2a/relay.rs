//! One A2A call relayed to its agent: the request (the agent's configured headers, the A2A
//! headers the client sent, the trace context continuing the caller's trace — never the client's
//! credentials), then the answer: a stream relayed event by event as it comes (its task's state
//! read on the way), or an answer read whole (an extended card rewritten like the public one).
//! Every call ends in one usage record — method, task, state, status — and the metrics.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use serde_json::Value;
use switchyard_a2a::{rewrite_card, Method, TaskSeen};

use super::{Call, Route};
use crate::agents::Card;
use crate::error::GatewayError;
use crate::http::{full, GatewayBody, SseEvents};
use crate::metrics::Metrics;
use crate::records::{KeyRecord, UsageRecord};
use crate::telemetry::{AgentCall, Outcome, Telemetry, Trace, Tracing};
use crate::usage::Journal;

/// An answer read whole may be this large at most.
const MAX_ANSWER_BYTES: usize = 32 << 20;

/// Headers of the A2A protocol a client's call carries to the agent (and an answer back).
const A2A_HEADERS: [&str; 3] = ["a2a-version", "a2a-extensions", "x-a2a-extensions"];

/// Where a call goes.
pub(crate) struct Target<'a> {
    pub card: &'a Arc<Card>,
    pub route: Route,
    /// The agent's base on the gateway (an extended card's URLs are rewritten to it).
    pub gateway: &'a str,
}

/// What writes a call's record, and ends its trace, once it is over (owned: a stream's ends on
/// its own task, so its span covers the whole stream).
pub(crate) struct Recorder {
    journal: Option<Arc<Journal>>,
    metrics: Arc<Metrics>,
    /// The call's trace, when it is recorded: its server span reports the call.
    traced: Option<(Arc<Telemetry>, Box<Trace>)>,
    agent: String,
    method: &'static str,
    key: Option<Arc<KeyRecord>>,
    request_id: String,
    started: Instant,
    ts_ms: i64,
}

impl Call<'_> {
    fn recorder(&self) -> Recorder {
        Recorder {
            journal: self.app.journal.clone(),
            metrics: self.app.metrics.clone(),
            traced: None,
            agent: self.agent.name.clone(),
            method: self.method_name(),
            key: self.key.clone(),
            request_id: self.request_id.clone(),
            started: self.started,
            ts_ms: self.ts_ms,
        }
    }
}

/// Record a call that ended before or without an answer relayed by a stream.
pub(crate) fn record(call: &Call<'_>, status: u16, seen: &TaskSeen, bytes: u64) {
    call.recorder().record(status, seen, bytes);
}

impl Recorder {
    fn record(mut self, status: u16, seen: &TaskSeen, bytes: u64) {
        self.metrics.count_a2a_call(&self.agent, self.method, status, seen.state.as_deref());
        if let Some((telemetry, trace)) = self.traced.take() {
            let call = AgentCall {
                agent: self.agent.clone(),
                method: self.method,
                task_id: seen.id.clone(),
                task_state: seen.state.clone(),
                events: seen.events,
            };
            let outcome = Outcome {
                status,
                model_requested: format!("a2a:{}", self.agent),
                key_id: self.key.as_ref().map(|k| k.id.clone()),
                a2a: Some(Box::new(call)),
                ..Outcome::default()
            };
            telemetry.finish(trace, outcome);
        }
        let Some(journal) = &self.journal else { return };
        let model = format!("a2a:{}", self.agent);
        let record = UsageRecord {
            backend: Some(self.agent.clone()),
            status,
            latency_ms: self.started.elapsed().as_secs_f64() * 1e3,
            tool: Some(self.method.to_owned()),
            response_bytes: Some(bytes),
            task_id: seen.id.clone(),
            task_state: seen.state.clone(),
            ..UsageRecord::started(self.request_id.clone(), self.ts_ms, self.key.as_deref(), &model, &model)
        };
        if let Err(e) = journal.append(record) {
            tracing::error!(error = %e, "could not journal an A2A call's usage");
        }
    }
}

/// Send the call to its agent and relay the answer. A recorded trace is taken over here: the
/// call's record ends it (a stream's when the stream ends), its span reporting the call.
pub(crate) async fn forward(
    call: &Call<'_>,
    target: Target<'_>,
    (client, body): (&HeaderMap, Bytes),
    trace: &mut Option<Tracing>,
) -> Result<Response<GatewayBody>, GatewayError> {
    let mut recorder = call.recorder();
    if let (Some(Tracing::Recorded(_)), Some(telemetry)) = (&*trace, &call.app.telemetry) {
        if let Some(Tracing::Recorded(t)) = trace.take() {
            recorder.traced = Some((telemetry.clone(), t));
        }
    }
    let context = trace_context(client, trace, recorder.traced.as_ref().map(|(_, t)| &**t));
    let request = upstream_request(call, &target, client, body, context)?;
    let sent = tokio::time::timeout(call.agent.timeout, call.app.client.request(request)).await;
    let answer = match sent {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => {
            tracing::warn!(agent = %call.agent.name, error = %e, "an A2A call could not reach its agent");
            recorder.record(502, &TaskSeen::default(), 0);
            let message = format!("agent `{}` could not be reached", call.agent.name);
            return Err(GatewayError::BadGateway { message });
        }
        Err(_) => {
            recorder.record(504, &TaskSeen::default(), 0);
            return Err(GatewayError::UpstreamTimeout);
        }
    };
    let sse =
        answer.headers().get(header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    if sse {
        return Ok(stream(call, answer, recorder));
    }
    whole(call, &target, answer, recorder).await
}

fn upstream_request(
    call: &Call<'_>,
    target: &Target<'_>,
    client: &HeaderMap,
    body: Bytes,
    context: Vec<(HeaderName, HeaderValue)>,
) -> Result<Request<Full<Bytes>>, GatewayError> {
    let (verb, url) = match &target.route {
        Route::JsonRpc => (http::Method::POST, target.card.jsonrpc().to_string()),
        Route::Rest { verb, path_and_query } => {
            let base = target.card.rest().to_string();
            (verb.clone(), format!("{}{path_and_query}", base.trim_end_matches('/')))
        }
    };
    let mut req = Request::builder().method(verb).uri(&url);
    let accept = client.get(header::ACCEPT).cloned().unwrap_or(HeaderValue::from_static("application/json"));
    req = req.header(header::ACCEPT, accept);
    if !body.is_empty() {
        req = req.header(header::CONTENT_TYPE, "application/json");
    }
    for name in A2A_HEADERS {
        for value in client.get_all(name) {
            req = req.header(name, value);
        }
    }
    for (name, value) in call.agent.headers.iter().cloned().chain(context) {
        req = req.header(name, value);
    }
    req.body(Full::new(body)).map_err(|e| {
        tracing::error!(error = %e, url = %url, "an A2A call could not be built");
        GatewayError::Internal
    })
}

/// The trace context the agent gets: the gateway's span as the parent when the call is traced
/// (`traced`), else the context the gateway passes on, else the caller's as it came.
fn trace_context(
    client: &HeaderMap,
    trace: &Option<Tracing>,
    traced: Option<&Trace>,
) -> Vec<(HeaderName, HeaderValue)> {
    let traced = traced.or(match trace {
        Some(Tracing::Recorded(t)) => Some(&**t),
        _ => None,
    });
    let (parent, state) = match (traced, trace) {
        (Some(t), _) => (Some(t.traceparent(t.span_id)), t.tracestate.clone()),
        (None, Some(Tracing::PassedOn((parent, state)))) => (Some(parent.clone()), state.clone()),
        (None, _) => (client.get("traceparent").cloned(), client.get("tracestate").cloned()),
    };
    let parent = parent.map(|p| (HeaderName::from_static("traceparent"), p));
    let state = state.map(|s| (HeaderName::from_static("tracestate"), s));
    parent.into_iter().chain(state).collect()
}

/// The answer's status and the headers a client reads from it.
fn answer_head(answer: &Response<Incoming>) -> http::response::Builder {
    let mut resp = Response::builder().status(answer.status());
    for (name, value) in answer.headers() {
        if name == header::CONTENT_TYPE || A2A_HEADERS.contains(&name.as_str()) {
            resp = resp.header(name, value);
        }
    }
    resp
}

/// A stream relayed event by event on a task of its own, which records the call (and ends its
/// trace) when the stream ends or the client leaves.
fn stream(call: &Call<'_>, answer: Response<Incoming>, recorder: Recorder) -> Response<GatewayBody> {
    let head = answer_head(&answer);
    let status = answer.status().as_u16();
    let (tx, rx) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
    let idle = call.app.config.timeouts.stream_idle;
    let mut body = answer.into_body();
    tokio::spawn(async move {
        let (mut seen, mut bytes) = (TaskSeen::default(), 0u64);
        let ended = loop {
            match tokio::time::timeout(idle, body.frame()).await {
                Ok(Some(Ok(frame))) => {
                    let Ok(data) = frame.into_data() else { continue };
                    seen.push_sse(&data);
                    bytes += data.len() as u64;
                    if tx.send(data.to_vec()).await.is_err() {
                        break 499;
                    }
                }
                Ok(None) => break status,
                Ok(Some(Err(_))) => break 502,
                Err(_) => break 504,
            }
        };
        recorder.record(ended, &seen, bytes);
    });
    let body = http_body_util::Either::Right(http_body_util::Either::Right(SseEvents::raw(rx)));
    head.body(body).unwrap_or_else(|_| Response::new(full(Vec::new())))
}

/// An answer read whole: its task noted, an extended card rewritten, then relayed.
async fn whole(
    call: &Call<'_>,
    target: &Target<'_>,
    answer: Response<Incoming>,
    recorder: Recorder,
) -> Result<Response<GatewayBody>, GatewayError> {
    let head = answer_head(&answer);
    let status = answer.status();
    let read = tokio::time::timeout(call.agent.timeout, Limited::new(answer.into_body(), MAX_ANSWER_BYTES).collect());
    let mut bytes = match read.await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(_)) | Err(_) => {
            recorder.record(502, &TaskSeen::default(), 0);
            let message = format!("agent `{}` broke off its answer", call.agent.name);
            return Err(GatewayError::BadGateway { message });
        }
    };
    let mut seen = TaskSeen::default();
    if let Ok(mut value) = serde_json::from_slice::<Value>(&bytes) {
        seen.observe(&value);
        if call.method == Some(Method::GetExtendedAgentCard) && status == StatusCode::OK {
            match extended_card(call, target, &mut value) {
                Ok(rewritten) => bytes = rewritten,
                Err(e) => {
                    recorder.record(502, &TaskSeen::default(), 0);
                    return Err(e);
                }
            }
        }
    }
    recorder.record(status.as_u16(), &seen, bytes.len() as u64);
    head.body(full(bytes)).map_err(|_| GatewayError::Internal)
}

/// An extended card (a JSON-RPC result, or a REST answer) checked and rewritten like the public one.
fn extended_card(call: &Call<'_>, target: &Target<'_>, value: &mut Value) -> Result<Bytes, GatewayError> {
    let card = if value.get("result").is_some() { &mut value["result"] } else { &mut *value };
    rewrite_card(card, target.gateway, &call.app.config.agents.allowed)
        .map_err(|e| GatewayError::BadGateway { message: e.to_string() })?;
    serde_json::to_vec(value).map(Bytes::from).map_err(|_| GatewayError::Internal)
}
