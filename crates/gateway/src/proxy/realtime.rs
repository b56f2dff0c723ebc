//! `GET /v1/realtime?model=…`: the realtime API's WebSocket, relayed to a backend that serves it.
//! The client is authenticated before the upgrade — a bearer key, or the key in the
//! `openai-insecure-api-key.…` subprotocol as browsers must send it — and admitted (its rpm at
//! connect; the session holds a parallel slot). Messages are relayed both ways as they come. Each
//! `response.done` event's usage is a usage record of its own, and its tokens are charged to the
//! key's tokens per minute (every level) as it completes; the session's cost settles its budget
//! when it ends. It ends when either side closes, after
//! `realtime.idle_timeout` without a message either way, or after `realtime.max_duration`.

use std::sync::Arc;
use std::time::Instant;

use futures_util::{SinkExt, StreamExt};
use http::header::{
    AUTHORIZATION, CONNECTION, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_KEY, SEC_WEBSOCKET_PROTOCOL, UPGRADE,
};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::permits;
use crate::app::App;
use crate::auth::Identity;
use crate::endpoint::Endpoint;
use crate::error::GatewayError;
use crate::http::parse::RoutedRequest;
use crate::http::GatewayBody;
use crate::limit::{BudgetPermit, Permit};
use crate::records::UsageRecord;
use crate::route::backend::Backend;

/// The subprotocol that carries a key where a browser cannot set headers.
const KEY_PROTOCOL: &str = "openai-insecure-api-key.";

/// Any connection a WebSocket can run over (plain or TLS to the backend; the client's upgrade).
pub trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin> Io for T {}

/// One session's accounting.
struct Session {
    app: Arc<App>,
    identity: Identity,
    requested: String,
    model: String,
    backend: Arc<Backend>,
    request_id: String,
    permit: Option<Permit>,
    budget: Option<BudgetPermit>,
    responses: u32,
    cost: f64,
}

pub async fn forward(
    app: &Arc<App>,
    mut req: Request<Incoming>,
    started: Instant,
    request_id: &HeaderValue,
) -> Result<Response<GatewayBody>, GatewayError> {
    let key = req
        .headers()
        .get(SEC_WEBSOCKET_KEY)
        .cloned()
        .filter(|_| req.headers().get(UPGRADE).is_some_and(|u| u.as_bytes().eq_ignore_ascii_case(b"websocket")))
        .ok_or_else(|| GatewayError::bad_request("the realtime API is a WebSocket: send an upgrade", None))?;
    let identity = app.auth.authenticate(&with_protocol_key(req.headers()), app.clock.unix_secs()).await?;
    let requested = query_model(req.uri().query())?;
    let model = app.config.resolve_alias(&requested).to_owned();
    let routed = RoutedRequest {
        model: model.clone(),
        requested: requested.clone(),
        // Nothing reserved at connect: each response's tokens are charged as it completes.
        max_tokens: Some(0),
        stream: true,
        body: bytes::Bytes::new(),
        session: None,
        chain: Vec::new(),
        root: None,
    };
    let (permit, budget) = permits::take(app, &identity, &routed, started + app.config.timeouts.request).await?;
    let backend = pick(app, &requested, &model)?;
    let upstream = connect(app, &backend, &model, req.headers()).await?;
    let protocol = offered(req.headers()).any(|p| p == "realtime").then_some(HeaderValue::from_static("realtime"));
    let on_upgrade = hyper::upgrade::on(&mut req);
    let request_id = request_id.to_str().unwrap_or_default().to_owned();
    let (responses, cost) = (0, 0.0);
    let app = app.clone();
    let session = Session { app, identity, requested, model, backend, request_id, permit, budget, responses, cost };
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => {
                let client = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
                session.relay(client, upstream).await;
            }
            Err(e) => tracing::debug!(error = %e, "the realtime client's upgrade failed"),
        }
    });
    let mut resp = Response::new(crate::http::full(bytes::Bytes::new()));
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = resp.headers_mut();
    headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(UPGRADE, HeaderValue::from_static("websocket"));
    let accept = HeaderValue::from_str(&derive_accept_key(key.as_bytes())).map_err(|_| GatewayError::Internal)?;
    headers.insert(SEC_WEBSOCKET_ACCEPT, accept);
    if let Some(protocol) = protocol {
        headers.insert(SEC_WEBSOCKET_PROTOCOL, protocol);
    }
    Ok(resp)
}

/// The subprotocols a client offered.
fn offered(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
}

/// The client's headers, with the key of an `openai-insecure-api-key.` subprotocol as a bearer
/// when no `Authorization` came.
fn with_protocol_key(headers: &HeaderMap) -> HeaderMap {
    let mut headers = headers.clone();
    if !headers.contains_key(AUTHORIZATION) {
        let key = offered(&headers).find_map(|p| p.strip_prefix(KEY_PROTOCOL)).map(str::to_owned);
        if let Some(bearer) = key.and_then(|k| HeaderValue::from_str(&format!("Bearer {k}")).ok()) {
            headers.insert(AUTHORIZATION, bearer);
        }
    }
    headers
}

fn query_model(query: Option<&str>) -> Result<String, GatewayError> {
    let model = query.unwrap_or("").split('&').find_map(|pair| pair.strip_prefix("model="));
    match model.map(|m| percent_encoding::percent_decode_str(m).decode_utf8_lossy().into_owned()) {
        Some(m) if !m.is_empty() => Ok(m),
        _ => Err(GatewayError::bad_request("you must provide a model parameter (`?model=`)", Some("model"))),
    }
}

/// A healthy backend of `model` that serves realtime sessions.
fn pick(app: &App, requested: &str, model: &str) -> Result<Arc<Backend>, GatewayError> {
    if !app.router.knows_model(model) {
        return Err(GatewayError::ModelNotFound { model: requested.to_owned() });
    }
    if !app.router.serves(model, Endpoint::Realtime) {
        return Err(GatewayError::NotServedFor { model: requested.to_owned(), capability: "realtime" });
    }
    let mut tried = Vec::new();
    while let Ok(backend) = app.router.select(model, &tried) {
        if backend.serves(Endpoint::Realtime) {
            return Ok(backend);
        }
        tried.push(backend.id);
    }
    Err(GatewayError::NoHealthyBackend { model: requested.to_owned() })
}

/// The backend's WebSocket: its URL with `ws`/`wss`, its own credentials, the client's
/// `OpenAI-Beta` (which selects the API's version).
async fn connect(
    app: &App,
    backend: &Backend,
    model: &str,
    client: &HeaderMap,
) -> Result<WebSocketStream<Box<dyn Io>>, GatewayError> {
    let failed = |e: &dyn std::fmt::Display| {
        tracing::warn!(backend = backend.name(), error = %e, "could not open the realtime backend's WebSocket");
        GatewayError::NoHealthyBackend { model: model.to_owned() }
    };
    let base = backend.cfg.url.trim_end_matches('/');
    let model_query = percent_encoding::utf8_percent_encode(model, percent_encoding::NON_ALPHANUMERIC);
    let http_uri: http::Uri = format!("{base}/v1/realtime?model={model_query}").parse().map_err(|e| failed(&e))?;
    let ws_url = format!("{base}/v1/realtime?model={model_query}").replacen("http", "ws", 1);
    let mut connector = crate::upstream::h1_connector(app.config.timeouts.connect).map_err(|e| failed(&e))?;
    let stream = tower_service::Service::call(&mut connector, http_uri).await.map_err(|e| failed(&e))?;
    let io: Box<dyn Io> = Box::new(TokioIo::new(stream));
    let mut request = tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(ws_url.as_str())
        .map_err(|e| failed(&e))?;
    for (name, value) in &backend.auth_headers {
        request.headers_mut().insert(name.clone(), value.clone());
    }
    if let Some(beta) = client.get("openai-beta") {
        request.headers_mut().insert("openai-beta", beta.clone());
    }
    let handshake = tokio_tungstenite::client_async(request, io);
    let (ws, _) = tokio::time::timeout(app.config.timeouts.first_byte, handshake)
        .await
        .map_err(|_| failed(&"no handshake in time"))?
        .map_err(|e| failed(&e))?;
    Ok(ws)
}

impl Session {
    /// Relay until either side closes or a timeout ends the session; then settle.
    async fn relay(
        mut self,
        client: WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>,
        upstream: WebSocketStream<Box<dyn Io>>,
    ) {
        let (mut to_client, mut from_client) = client.split();
        let (mut to_upstream, mut from_upstream) = upstream.split();
        let (idle, ends) = (self.app.config.realtime_idle, tokio::time::Instant::now() + self.app.config.realtime_max);
        let _guard = self.backend.start();
        loop {
            let message = tokio::select! {
                m = from_client.next() => match m {
                    Some(Ok(m)) if !m.is_close() => to_upstream.send(m).await.is_ok(),
                    _ => false,
                },
                m = from_upstream.next() => match m {
                    Some(Ok(m)) if !m.is_close() => {
                        if let (Some(tokens), Some(permit)) = (self.observe(&m), &self.permit) {
                            permit.charge(tokens).await;
                        }
                        to_client.send(m).await.is_ok()
                    }
                    _ => false,
                },
                _ = tokio::time::sleep(idle) => false,
                _ = tokio::time::sleep_until(ends) => false,
            };
            if !message {
                break;
            }
        }
        let _ = to_client.send(Message::Close(None)).await;
        let _ = to_upstream.send(Message::Close(None)).await;
        self.settle();
    }

    /// A `response.done` event from the backend: its usage is a record; its tokens.
    fn observe(&mut self, message: &Message) -> Option<u64> {
        let Message::Text(text) = message else { return None };
        if !text.as_str().contains("\"response.done\"") {
            return None;
        }
        #[derive(serde::Deserialize)]
        struct Done {
            response: Option<DoneResponse>,
        }
        #[derive(serde::Deserialize)]
        struct DoneResponse {
            usage: Option<DoneUsage>,
        }
        #[derive(serde::Deserialize)]
        struct DoneUsage {
            #[serde(default)]
            input_tokens: u64,
            #[serde(default)]
            output_tokens: u64,
        }
        let usage = serde_json::from_str::<Done>(text.as_str()).ok().and_then(|d| d.response?.usage);
        let (input, output) = usage.map_or((0, 0), |u| (u.input_tokens, u.output_tokens));
        self.record(input, output);
        Some(input + output)
    }

    fn record(&mut self, input: u64, output: u64) {
        self.responses += 1;
        let counted = crate::config::Counted { prompt: input, completion: output, ..Default::default() };
        let cost = self.app.config.cost(&self.model, &counted);
        self.cost += cost;
        let Some(journal) = &self.app.journal else { return };
        let id = format!("{}.{}", self.request_id, self.responses);
        let started =
            UsageRecord::started(id, self.app.clock.unix_ms(), self.identity.key(), &self.requested, &self.model);
        let record = UsageRecord {
            backend: Some(self.backend.name().to_owned()),
            status: 200,
            prompt_tokens: input,
            completion_tokens: output,
            total_tokens: input + output,
            cost_usd: cost,
            backend_key: None,
            route: Some("realtime".to_owned()),
            ..started
        };
        if let Err(e) = journal.append(record) {
            tracing::error!(error = %e, "could not journal a realtime response's usage");
        }
    }

    /// The session's cost against its budget; its reservation of tokens given back (its
    /// responses' tokens were charged as they completed).
    fn settle(&mut self) {
        if let Some(mut permit) = self.permit.take() {
            permit.settle(0);
        }
        if let Some(budget) = self.budget.take() {
            budget.settle(self.cost);
        }
    }
}
