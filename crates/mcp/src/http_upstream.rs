//! An upstream MCP server over Streamable HTTP, spoken to as a session-era client: `initialize`
//! once, reuse its `Mcp-Session-Id`, open a new session when the server forgets ours (404), and
//! read answers given as JSON or as an SSE stream — every event of it, relaying notifications
//! (progress) until the response with our id arrives. Credentials come from config only.
//!
//! Sessions (`http_upstream/sessions.rs`): each session-era client that offered the server
//! anything to ask (sampling, elicitation, roots) gets an upstream session of its own, so what the
//! server sends on that session's GET stream — a sampling request naming no call — is that
//! client's even while other clients' calls are in flight. Calls without a client session
//! (stateless flights, Code Mode) share one session per set of capabilities.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use switchyard_protocol::frames::SseParser;

use crate::jsonrpc::{self, Message};
use crate::relay::ClientCaps;
use crate::upstream::{
    ask_client, route_unrelated, within_unless_asking, BoxFuture, ListChangedHook, NoteHook, Relay, Upstream,
    UpstreamError,
};

mod sessions;

use sessions::{lock, owner, Registered, Sessions, UpstreamSession};

/// Sends one HTTP request: the gateway's pooled client (TLS, timeouts) behind a trait, so this
/// crate does not choose the HTTP stack.
pub trait HttpSend: Send + Sync {
    fn send(&self, req: Request<Full<Bytes>>) -> BoxFuture<'_, Result<Response<Incoming>, String>>;
}

/// An answer larger than this is refused rather than buffered.
const MAX_ANSWER_BYTES: usize = 64 * 1024 * 1024;

pub static SESSION_HEADER: HeaderName = HeaderName::from_static("mcp-session-id");
pub static VERSION_HEADER: HeaderName = HeaderName::from_static("mcp-protocol-version");

/// How long a GET stream the server closed waits before it is opened again, at first and at most.
const RELISTEN_MIN: Duration = Duration::from_secs(1);
const RELISTEN_MAX: Duration = Duration::from_secs(30);

/// What posting to the server needs, for a task that answers a server's request later.
#[derive(Clone)]
struct Poster {
    url: Uri,
    headers: HeaderMap,
    http: Arc<dyn HttpSend>,
}

pub struct HttpUpstream {
    poster: Poster,
    timeout: Duration,
    next_id: AtomicU64,
    /// One session per set of client capabilities (`ClientCaps::flags`): each declares exactly
    /// what the clients whose calls it carries offered, so a server asks only what they can answer.
    sessions: std::sync::Mutex<Sessions>,

    list_changed: ListChangedHook,
    notes: NoteHook,
    /// Dropped with the upstream: its GET stream's task ends.
    alive: tokio::sync::watch::Sender<()>,
}

impl HttpUpstream {
    pub fn new(url: Uri, headers: HeaderMap, http: Arc<dyn HttpSend>, timeout: Duration) -> HttpUpstream {
        HttpUpstream {
            poster: Poster { url, headers, http },
            timeout,
            next_id: AtomicU64::new(1),
            sessions: std::sync::Mutex::new(Sessions::default()),

            list_changed: ListChangedHook::default(),
            notes: NoteHook::default(),
            alive: tokio::sync::watch::channel(()).0,
        }
    }

    async fn post(
        &self,
        body: Vec<u8>,
        session: Option<&UpstreamSession>,
    ) -> Result<Response<Incoming>, UpstreamError> {
        self.poster.post(body, session).await
    }

    async fn request_once(
        &self,
        id: u64,
        method: &str,
        params: &Value,
        relay: Option<Relay>,
    ) -> Result<Box<RawValue>, UpstreamError> {
        let caps = relay.as_ref().map_or_else(ClientCaps::default, |r| r.offers);
        let client = relay.as_ref().and_then(|r| r.client.clone());
        let mut session = self.session(caps, client.as_ref()).await?;
        let register = |session: &UpstreamSession| {
            relay.clone().map(|relay| {
                session.waiting.lock().unwrap_or_else(|p| p.into_inner()).insert(id, relay);
                Registered(session.waiting.clone(), id)
            })
        };
        let mut registered = register(&session);
        let body = jsonrpc::request_bytes(id, method, params);
        let mut resp = self.post(body.clone(), Some(&session)).await?;
        if resp.status() == StatusCode::NOT_FOUND && session.id.is_some() {
            // The server ended or forgot our session: open a new one and try once more.
            self.forget(&session);
            session = self.session(caps, client.as_ref()).await?;
            registered = register(&session);
            resp = self.post(body, Some(&session)).await?;
        }
        let answer = self.read_answer(resp, id, relay, Some(&session)).await;
        drop(registered);
        session.touch();
        answer
    }

    /// The result of request `id` from an answer given as JSON or as an SSE stream. On a
    /// stream, notifications go to `relay`, and each request of the server's is handed to the
    /// client (`ask_client`) and its answer posted back under the server's own id.
    async fn read_answer(
        &self,
        resp: Response<Incoming>,
        id: u64,
        relay: Option<Relay>,
        session: Option<&Arc<UpstreamSession>>,
    ) -> Result<Box<RawValue>, UpstreamError> {
        let status = resp.status();
        if !status.is_success() {
            return Err(UpstreamError::Status(status.as_u16()));
        }
        let sse = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let mut body = resp.into_body();
        let want = id.to_string();
        if !sse {
            let bytes = read_all(&mut body).await?;
            return match jsonrpc::parse(&bytes) {
                Ok(Message::Response { id, outcome }) if id.as_str() == want => outcome.map_err(UpstreamError::Rpc),
                Ok(_) => Err(UpstreamError::Protocol("the answer is not the response to our request".into())),
                Err(r) => Err(UpstreamError::Protocol(r.error.message)),
            };
        }
        let mut parser = SseParser::default();
        let mut events = Events { want, relay, list_changed: &self.list_changed, found: None, asked: Vec::new() };
        let mut seen = 0usize;
        loop {
            let frame = match body.frame().await {
                Some(Ok(frame)) => frame,
                Some(Err(e)) => return Err(UpstreamError::Unreachable(format!("stream broke: {e}"))),
                None => break,
            };
            let Ok(data) = frame.into_data() else { continue };
            seen += data.len();
            if seen > MAX_ANSWER_BYTES {
                return Err(UpstreamError::Protocol("answer too large".into()));
            }
            let _ = parser.feed(&data, |_, event| {
                events.on(event);
                Ok(())
            });
            self.answer_asked(&mut events.asked, session);
            if events.found.is_some() {
                break;
            }
        }
        if events.found.is_none() {
            let _ = parser.finish(|_, event| {
                events.on(event);
                Ok(())
            });
            self.answer_asked(&mut events.asked, session);
        }
        events.found.unwrap_or_else(|| Err(UpstreamError::Protocol("the stream ended without our response".into())))
    }

    /// Post each client answer to a server's request back to the server when it comes.
    fn answer_asked(&self, asked: &mut Vec<Asked>, session: Option<&Arc<UpstreamSession>>) {
        for (id, answer) in asked.drain(..) {
            self.poster.answer_later(id, answer, session.cloned());
        }
    }
}

/// The task that reads a session's GET stream: server requests and notifications that name no
/// call of ours, routed by `route_unrelated`; opened again (with backoff) when the server closes
/// it, until the session ends or the upstream is dropped.
struct Listener {
    poster: Poster,
    session: Arc<UpstreamSession>,
    list_changed: ListChangedHook,
    notes: NoteHook,
}

impl Listener {
    async fn run(
        self,
        mut stream: Incoming,
        mut alive: tokio::sync::watch::Receiver<()>,
        mut stop: tokio::sync::watch::Receiver<()>,
    ) {
        let mut pause = RELISTEN_MIN;
        loop {
            let mut parser = SseParser::default();
            loop {
                let frame = tokio::select! {
                    frame = stream.frame() => frame,
                    _ = alive.changed() => return,
                    _ = stop.changed() => return,
                };
                let Some(Ok(frame)) = frame else { break };
                let Ok(data) = frame.into_data() else { continue };
                pause = RELISTEN_MIN;
                let _ = parser.feed(&data, |_, event| {
                    self.on(event);
                    Ok(())
                });
            }
            loop {
                tokio::select! {
                    () = tokio::time::sleep(pause) => {}
                    _ = alive.changed() => return,
                    _ = stop.changed() => return,
                }
                if self.session.ended.load(Relaxed) {
                    return;
                }
                pause = (pause * 2).min(RELISTEN_MAX);
                if let Some(again) = self.poster.listen(&self.session).await {
                    stream = again;
                    break;
                }
            }
        }
    }

    fn on(&self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        match jsonrpc::parse(data) {
            Ok(Message::Notification { method, .. }) if method == "notifications/tools/list_changed" => {
                self.list_changed.fire();
            }
            Ok(Message::Notification { method, params }) => {
                let owner = owner(&self.session.waiting, self.session.client.is_some());
                route_unrelated(&method, params, data, owner.as_ref(), &self.notes);
            }
            Ok(Message::Request { id, method, params }) => {
                let owner = owner(&self.session.waiting, self.session.client.is_some());
                if let Some(answer) = route_unrelated(&method, params, data, owner.as_ref(), &self.notes) {
                    self.poster.answer_later(id, answer, Some(self.session.clone()));
                }
            }
            _ => tracing::debug!("upstream MCP event ignored"),
        }
    }
}

impl Poster {
    /// Open the session's GET stream; None when the server offers none (405) or fails.
    async fn listen(&self, session: &UpstreamSession) -> Option<Incoming> {
        let mut req = Request::get(self.url.clone()).body(Full::new(Bytes::new())).ok()?;
        let h = req.headers_mut();
        h.extend(self.headers.clone());
        h.insert(header::ACCEPT, HeaderValue::from_static("text/event-stream"));
        if let Some(id) = &session.id {
            h.insert(SESSION_HEADER.clone(), id.clone());
        }
        h.insert(VERSION_HEADER.clone(), session.version.clone());
        let resp = tokio::time::timeout(RELISTEN_MAX, self.http.send(req)).await.ok()?.ok()?;
        let sse = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        (resp.status().is_success() && sse).then(|| resp.into_body())
    }

    /// End a session on the server (`DELETE`, as a client that is done does).
    async fn delete(&self, session: &UpstreamSession) {
        let Some(id) = &session.id else { return };
        let Ok(mut req) = Request::delete(self.url.clone()).body(Full::new(Bytes::new())) else { return };
        let h = req.headers_mut();
        h.extend(self.headers.clone());
        h.insert(SESSION_HEADER.clone(), id.clone());
        h.insert(VERSION_HEADER.clone(), session.version.clone());
        if let Ok(Err(e)) = tokio::time::timeout(RELISTEN_MAX, self.http.send(req)).await {
            tracing::debug!(error = %e, "could not end an upstream MCP session");
        }
    }

    /// Post the client's answer to a server's request `id` once it comes.
    fn answer_later(
        &self,
        id: jsonrpc::Id,
        answer: crate::upstream::ClientAnswer,
        session: Option<Arc<UpstreamSession>>,
    ) {
        let poster = self.clone();
        tokio::spawn(async move {
            let bytes = crate::upstream::reply_to_server(id, answer).await;
            if let Err(e) = poster.post(bytes, session.as_deref()).await {
                tracing::debug!(error = %e, "could not answer an MCP server's request");
            }
        });
    }

    async fn post(
        &self,
        body: Vec<u8>,
        session: Option<&UpstreamSession>,
    ) -> Result<Response<Incoming>, UpstreamError> {
        let mut req = Request::post(self.url.clone())
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| UpstreamError::Protocol(e.to_string()))?;
        let h = req.headers_mut();
        h.extend(self.headers.clone());
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        h.insert(header::ACCEPT, HeaderValue::from_static("application/json, text/event-stream"));
        if let Some(s) = session {
            if let Some(id) = &s.id {
                h.insert(SESSION_HEADER.clone(), id.clone());
            }
            h.insert(VERSION_HEADER.clone(), s.version.clone());
        }
        self.http.send(req).await.map_err(UpstreamError::Unreachable)
    }
}

/// A server's request handed to the client: its id (the server's) and the answer to come.
type Asked = (jsonrpc::Id, crate::upstream::ClientAnswer);

/// The events of one answer stream as they are read.
struct Events<'a> {
    want: String,
    relay: Option<Relay>,
    list_changed: &'a ListChangedHook,
    found: Option<Result<Box<RawValue>, UpstreamError>>,
    asked: Vec<Asked>,
}

impl Events<'_> {
    fn on(&mut self, data: &[u8]) {
        if self.found.is_some() || data.is_empty() {
            return;
        }
        match jsonrpc::parse(data) {
            Ok(Message::Response { id, outcome }) if id.as_str() == self.want => {
                self.found = Some(outcome.map_err(UpstreamError::Rpc));
            }
            Ok(Message::Notification { method, .. }) => {
                // The gateway's own list_changed goes out on clients' GET streams once the
                // hub has forgotten the old list (`hub.rs`).
                if method == "notifications/tools/list_changed" {
                    self.list_changed.fire();
                    return;
                }
                if let (Some(relay), Ok(value)) = (&self.relay, serde_json::from_slice::<Value>(data)) {
                    let _ = relay.try_send(crate::upstream::Inbound::Note(value));
                }
            }
            Ok(Message::Request { id, method, params }) => {
                let answer = ask_client(self.relay.as_ref(), &method, params.unwrap_or_else(|| json!({})));
                self.asked.push((id, answer));
            }
            _ => tracing::debug!("upstream MCP event ignored"),
        }
    }
}

impl Upstream for HttpUpstream {
    fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Relaxed)
    }

    fn request<'a>(
        &'a self,
        id: u64,
        method: &'a str,
        params: Value,
        relay: Option<Relay>,
    ) -> BoxFuture<'a, Result<Box<RawValue>, UpstreamError>> {
        Box::pin(async move {
            let asking = relay.clone();
            within_unless_asking(self.timeout, asking.as_ref(), self.request_once(id, method, &params, relay)).await
        })
    }

    fn timeout(&self) -> Option<Duration> {
        Some(self.timeout)
    }

    fn init_result(&self) -> BoxFuture<'_, Option<Value>> {
        Box::pin(async move { self.session(ClientCaps::default(), None).await.ok().map(|s| s.init.clone()) })
    }

    fn list_changed(&self) -> Option<&ListChangedHook> {
        Some(&self.list_changed)
    }

    fn notes(&self) -> Option<&NoteHook> {
        Some(&self.notes)
    }

    fn notify<'a>(
        &'a self,
        method: &'a str,
        params: Value,
        offers: ClientCaps,
        client: Option<Arc<str>>,
    ) -> BoxFuture<'a, Result<(), UpstreamError>> {
        Box::pin(async move {
            let session = self.session(offers, client.as_ref()).await?;
            let resp = self.post(jsonrpc::notification_bytes(method, &params), Some(&session)).await?;
            match resp.status().is_success() {
                true => Ok(()),
                false => Err(UpstreamError::Status(resp.status().as_u16())),
            }
        })
    }

    fn forget_client<'a>(&'a self, client: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let mut sessions = lock(&self.sessions);
            self.end_where(&mut sessions, |s| s.client.as_deref() == Some(client));
        })
    }
}

async fn read_all(body: &mut Incoming) -> Result<Vec<u8>, UpstreamError> {
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| UpstreamError::Unreachable(format!("body broke: {e}")))?;
        if let Ok(data) = frame.into_data() {
            if out.len() + data.len() > MAX_ANSWER_BYTES {
                return Err(UpstreamError::Protocol("answer too large".into()));
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(out)
}
