//! What every mock API shares: the per-server state, responses with the mock's headers, reading
//! bodies, failure injection and latency, the KV-cache turn and pacing of replies, and dispatch to
//! the API the server speaks.

use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::value::RawValue;
use serde_json::Value;

use super::body::MockBody;
use super::frames::Frames;
use super::kv::Turn;
use super::render;
use super::reply::Reply;
use super::{MockApi, MockConfig, MockControl};

static X_MOCK_PORT: HeaderName = HeaderName::from_static("x-mock-port");
pub(crate) const JSON: HeaderValue = HeaderValue::from_static("application/json");
const NO_CACHE: HeaderValue = HeaderValue::from_static("no-cache");
const PROTOBUF: HeaderValue = HeaderValue::from_static("application/x-protobuf");

/// A served model: its id and its JSON string literal.
pub(crate) struct Model {
    pub(crate) name: String,
    pub(crate) json: String,
}

/// Everything handlers need, precomputed once per server.
pub(crate) struct State {
    pub(crate) control: Arc<MockControl>,
    pub(crate) api: MockApi,
    pub(crate) api_key: Option<String>,
    pub(crate) models: Vec<Model>,
    /// `GET /v1/models` in OpenAI's shape.
    pub(crate) models_body: Bytes,
    /// `GET /v1/models` in Anthropic's shape.
    pub(crate) anthropic_models_body: Bytes,
    /// Ollama's `GET /api/tags` and `GET /api/ps`.
    pub(crate) tags_body: Bytes,
    pub(crate) ps_body: Bytes,
    /// Quoted JSON literal of the default reply's whole text.
    pub(crate) content_json: String,
    pub(crate) stream_chunks: usize,
    port_header: HeaderValue,
}

impl State {
    pub(crate) fn new(cfg: &MockConfig, control: Arc<MockControl>, port: u16) -> Self {
        State {
            control,
            api: cfg.api,
            api_key: cfg.api_key.clone().filter(|k| !k.is_empty()),
            models: cfg.models.iter().map(|m| Model { name: m.clone(), json: render::json_str(m) }).collect(),
            models_body: render::models_body(&cfg.models),
            anthropic_models_body: render::anthropic_models_body(&cfg.models),
            tags_body: render::ollama_tags_body(&cfg.models, false),
            ps_body: render::ollama_tags_body(&cfg.models, true),
            content_json: render::full_content_json(cfg.stream_chunks),
            stream_chunks: cfg.stream_chunks,
            port_header: HeaderValue::from(port),
        }
    }

    pub(crate) fn respond(&self, status: StatusCode, content_type: HeaderValue, body: MockBody) -> Response<MockBody> {
        let mut resp = Response::new(body);
        *resp.status_mut() = status;
        let h = resp.headers_mut();
        h.insert(CONTENT_TYPE, content_type);
        h.insert(X_MOCK_PORT.clone(), self.port_header.clone());
        resp
    }

    pub(crate) fn json(&self, status: StatusCode, body: impl Into<Bytes>) -> Response<MockBody> {
        self.respond(status, JSON, MockBody::full(body))
    }

    /// A streamed response of `frames`, `delay` apart (see [`State::pace`]).
    pub(crate) fn stream(&self, content_type: HeaderValue, frames: Frames, delay: Duration) -> Response<MockBody> {
        let body = MockBody::Frames(Box::new(frames.into_stream(delay)));
        let mut resp = self.respond(StatusCode::OK, content_type, body);
        resp.headers_mut().insert(CACHE_CONTROL, NO_CACHE);
        resp
    }

    pub(crate) fn find_model(&self, name: &str) -> Option<&Model> {
        self.models.iter().find(|m| m.name == name)
    }

    /// With a KV cache, serves `body`'s prompt up to the first token of `reply` (queue, prefix
    /// match, prefill); `None` without one.
    pub(crate) async fn kv_turn(&self, body: &Value, reply: &Reply) -> Option<Turn> {
        let kv = self.control.kv.as_ref()?;
        Some(kv.begin(body, reply, self.stream_chunks as u64).await)
    }

    /// The delay between streamed tokens: the KV cache's decode time, else the chunk delay.
    pub(crate) fn pace(&self, turn: Option<&Turn>) -> Duration {
        turn.map_or_else(|| self.control.chunk_delay(), Turn::per_token)
    }
}

/// Entry point of every request.
pub(crate) async fn handle(state: &State, req: Request<Incoming>) -> Response<MockBody> {
    if super::realtime::is_realtime(&req) {
        return super::realtime::serve(state, req);
    }
    if let Some(resp) = super::signals::handle(state, req.method(), req.uri().path(), req.uri().query()) {
        return resp;
    }
    // An OTLP/HTTP receiver too, for benchmarks of a gateway exporting telemetry: it takes
    // anything and answers OTLP's empty success (an empty protobuf message).
    if req.method() == Method::POST && matches!(req.uri().path(), "/v1/traces" | "/v1/logs") {
        state.control.otlp_exports.fetch_add(1, Ordering::Relaxed);
        let _ = read_body(req.into_body()).await;
        return state.respond(StatusCode::OK, PROTOBUF, MockBody::full(Bytes::new()));
    }
    // A webhook receiver too, for a gateway's export sinks: a JSON array of usage records,
    // refused at the configured fail rate (an outage is `set_fail_rate(1.0)`).
    if req.method() == Method::POST && req.uri().path().starts_with("/hooks/") {
        if state.control.should_fail() {
            return state.json(StatusCode::SERVICE_UNAVAILABLE, Bytes::from_static(b"{\"error\":\"down\"}"));
        }
        let key = req.headers().get("idempotency-key").and_then(|v| v.to_str().ok()).map(str::to_owned);
        // Usage records as an array; audit log entries as `{"object": "audit_log", "data": [...]}`,
        // each counted as `audit:{seq}`.
        let ids: Vec<String> = match read_body(req.into_body()).await.map(|b| serde_json::from_slice::<Value>(&b)) {
            Some(Ok(Value::Array(records))) => {
                records.iter().map(|r| r["id"].as_str().unwrap_or("-").to_owned()).collect()
            }
            Some(Ok(audit)) if audit["object"] == "audit_log" => audit["data"]
                .as_array()
                .map(|entries| entries.iter().map(|e| format!("audit:{}", e["seq"])).collect())
                .unwrap_or_default(),
            _ => return state.json(StatusCode::BAD_REQUEST, Bytes::from_static(b"{\"error\":\"not a JSON array\"}")),
        };
        state.control.delivered(ids.iter().cloned());
        // A repeat of a key already kept is answered at once, as deduping receivers do.
        if state.control.store_once(key.as_deref(), &ids) {
            let delay = state.control.hook_delay();
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
        }
        return state.json(StatusCode::OK, Bytes::from_static(b"{}"));
    }
    if req.method() == Method::POST {
        state.control.requests.fetch_add(1, Ordering::Relaxed);
        let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok());
        state.control.enter_in_ledger(header("x-request-id"), header("traceparent"));
    }
    if req.method() == Method::GET && req.uri().path() == "/health" {
        return state.json(StatusCode::OK, Bytes::from_static(render::HEALTH_BODY));
    }
    let resp = match state.api {
        MockApi::OpenAi => super::openai::handle(state, req).await,
        MockApi::Anthropic => super::anthropic::handle(state, req).await,
        MockApi::Ollama => super::ollama::handle(state, req).await,
        MockApi::Azure => super::azure::handle(state, req).await,
        MockApi::Gemini => super::gemini::handle(state, req).await,
        MockApi::Bedrock => super::bedrock::handle(state, req).await,
    };
    if matches!(resp.body(), MockBody::Full(_)) {
        return resp;
    }
    match state.control.take_death() {
        Some(left) => resp.map(|body| MockBody::Dying { body: Box::new(body), left }),
        None => resp,
    }
}

/// A model API request's whole body, kept in the body log when one is kept
/// ([`super::MockControl::keep_bodies`]).
pub(crate) async fn read_logged(state: &State, body: Incoming) -> Option<Bytes> {
    let bytes = read_body(body).await?;
    state.control.log_body(&bytes);
    Some(bytes)
}

/// The whole request body, or `None` when the client broke off sending it.
pub(crate) async fn read_body(body: Incoming) -> Option<Bytes> {
    body.collect().await.ok().map(|c| c.to_bytes())
}

/// A JSON string value, borrowed when it has no escapes.
pub(crate) fn raw_str(raw: &RawValue) -> Option<Cow<'_, str>> {
    match serde_json::from_str::<&str>(raw.get()) {
        Ok(s) => Some(Cow::Borrowed(s)),
        Err(_) => serde_json::from_str::<String>(raw.get()).ok().map(Cow::Owned),
    }
}

/// Deterministic per-body id, so identical requests yield byte-identical responses.
pub(crate) fn body_id(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h % 1_000_000_000
}

/// An early (error) response; boxed to keep `Result` small.
pub(crate) type Rejection = Box<Response<MockBody>>;

/// Failure injection then added latency, shared by every POST endpoint; `fail_body` is the
/// injected error in the API's own shape.
pub(crate) async fn gate(state: &State, fail_body: &'static [u8]) -> Result<(), Rejection> {
    let control = &state.control;
    if control.should_fail() {
        control.failures.fetch_add(1, Ordering::Relaxed);
        let status = StatusCode::from_u16(control.fail_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = control.fail_body().unwrap_or_else(|| Bytes::from_static(fail_body));
        let mut answer = state.json(status, body);
        for (name, value) in control.fail_headers() {
            if let Ok(value) = http::HeaderValue::try_from(value) {
                answer.headers_mut().insert(name, value);
            }
        }
        return Err(Box::new(answer));
    }
    let latency = control.latency();
    if !latency.is_zero() {
        let now = control.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        control.peak_in_flight.fetch_max(now, Ordering::Relaxed);
        // Counted out however the wait ends (a client that hangs up drops this future).
        let _out = scopeguard(|| {
            control.in_flight.fetch_sub(1, Ordering::Relaxed);
        });
        tokio::time::sleep(latency).await;
    }
    Ok(())
}

/// Runs `f` when dropped.
fn scopeguard<F: FnOnce()>(f: F) -> impl Drop {
    struct Guard<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for Guard<F> {
        fn drop(&mut self) {
            if let Some(f) = self.0.take() {
                f();
            }
        }
    }
    Guard(Some(f))
}
