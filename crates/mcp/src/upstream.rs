//! What the gateway needs from an upstream MCP server, whatever carries it (Streamable HTTP now,
//! stdio next): send a request and get its result, relaying the notifications the server sends
//! while it works (progress), and send notifications (cancellation).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::value::RawValue;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::jsonrpc::RpcError;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where an upstream reports that its tool list changed (`notifications/tools/list_changed`):
/// the hub sets it to forget that server's cached tools.
#[derive(Default, Clone)]
pub struct ListChangedHook(Arc<Mutex<Option<OnListChanged>>>);

/// What to do when a server's tool list changes.
pub type OnListChanged = Arc<dyn Fn() + Send + Sync>;

impl ListChangedHook {
    pub fn set(&self, hook: OnListChanged) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(hook);
    }

    pub fn fire(&self) {
        let hook = self.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(hook) = hook {
            hook();
        }
    }
}

/// Where an upstream reports the notifications no call of a client's is waiting for
/// (`notifications/resources/updated`, `notifications/resources/list_changed`,
/// `notifications/prompts/list_changed`, a log message outside any call): the hub passes them to
/// clients' GET streams.
#[derive(Default, Clone)]
pub struct NoteHook(Arc<Mutex<Option<OnNote>>>);

/// What to do with such a notification (the whole message).
pub type OnNote = Arc<dyn Fn(Value) + Send + Sync>;

impl NoteHook {
    pub fn set(&self, hook: OnNote) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(hook);
    }

    pub fn fire(&self, note: Value) {
        let hook = self.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(hook) = hook {
            hook(note);
        }
    }
}

/// Where a server's message that names no request goes: the client of the only call in flight
/// that has one (`relay`), or for a notification with no such call, `notes`. Requests with no
/// single owner are refused: guessing could hand one client's question to another.
pub fn route_unrelated(
    method: &str,
    params: Option<Value>,
    message: &[u8],
    sole: Option<&Relay>,
    notes: &NoteHook,
) -> Option<ClientAnswer> {
    let relayed_to_a_call = matches!(method, "notifications/message" | "notifications/progress");
    if method.starts_with("notifications/") {
        let Ok(note) = serde_json::from_slice::<Value>(message) else { return None };
        match sole.filter(|_| relayed_to_a_call) {
            Some(relay) => {
                let _ = relay.try_send(Inbound::Note(note));
            }
            None if method != "notifications/progress" => notes.fire(note),
            None => {}
        }
        return None;
    }
    Some(ask_client(sole, method, params.unwrap_or_else(|| serde_json::json!({}))))
}

/// `answer`, or `UpstreamError::Timeout` when it takes longer than `limit`.
pub async fn within<T>(
    limit: std::time::Duration,
    answer: impl Future<Output = Result<T, UpstreamError>>,
) -> Result<T, UpstreamError> {
    tokio::time::timeout(limit, answer).await.unwrap_or(Err(UpstreamError::Timeout))
}

/// What an upstream sends the client while it answers one of the client's requests.
#[derive(Debug)]
pub enum Inbound {
    /// A notification (`notifications/progress`, `notifications/message`), the whole message.
    Note(Value),
    /// A request of the server's for the client (`sampling/createMessage`, `elicitation/create`,
    /// `roots/list`, `ping`): the client's answer goes back on `reply`, and from there to the
    /// server under the server's own request id.
    Request { method: String, params: Value, reply: oneshot::Sender<Result<Value, RpcError>> },
}

/// Where an upstream relays what it sends while answering, for the caller to pass to the client,
/// and what that client offered (an HTTP upstream is spoken to in a session that declares exactly
/// that). Bounded: a notification that finds it full (the client reads slower than the upstream
/// reports) is dropped, which progress can afford; a request that finds it full is refused.
#[derive(Clone, Debug)]
pub struct Relay {
    tx: mpsc::Sender<Inbound>,
    pub offers: crate::relay::ClientCaps,
    /// The client's session (session era): an HTTP upstream speaks to each client in an upstream
    /// session of its own, so what the server sends on that session's GET stream is the client's.
    pub client: Option<Arc<str>>,
    /// The server's requests handed to this call's client and not answered yet: while there are
    /// any, the call's timeout waits (a person may be answering), up to `CLIENT_ANSWER_MAX`.
    asking: Arc<AtomicUsize>,
}

impl Relay {
    pub fn new(tx: mpsc::Sender<Inbound>, offers: crate::relay::ClientCaps) -> Relay {
        Relay { tx, offers, client: None, asking: Arc::default() }
    }

    /// The same, for the client of session `client`.
    pub fn for_client(mut self, client: Option<Arc<str>>) -> Relay {
        self.client = client;
        self
    }

    pub fn try_send(&self, inbound: Inbound) -> Result<(), mpsc::error::TrySendError<Inbound>> {
        self.tx.try_send(inbound)
    }
}

/// How many messages wait for a slow client before newer ones are dropped.
pub const NOTIFICATION_BACKLOG: usize = 64;

/// Hand a server's request to the client behind `relay`, or answer it at once when there is no
/// client to ask (Code Mode, a call made without one, a client gone or too far behind): `ping`
/// is answered by the gateway, anything else refused with an error that says why.
pub fn ask_client(relay: Option<&Relay>, method: &str, params: Value) -> ClientAnswer {
    let (reply, answer) = oneshot::channel();
    let refused = match relay {
        Some(relay) => match relay.try_send(Inbound::Request { method: method.to_owned(), params, reply }) {
            Ok(()) => {
                relay.asking.fetch_add(1, Ordering::Relaxed);
                return ClientAnswer { answer, _asking: Some(Asking(relay.asking.clone())) };
            }
            Err(e) => match e.into_inner() {
                Inbound::Request { reply, .. } => reply,
                Inbound::Note(_) => return ClientAnswer { answer, _asking: None },
            },
        },
        None => reply,
    };
    let _ = refused.send(refuse(method));
    ClientAnswer { answer, _asking: None }
}

/// A client's answer to a server's request, to come; while it is awaited, the call it belongs to
/// counts as asking its client.
pub struct ClientAnswer {
    answer: oneshot::Receiver<Result<Value, RpcError>>,
    _asking: Option<Asking>,
}

impl Future for ClientAnswer {
    type Output = Result<Result<Value, RpcError>, oneshot::error::RecvError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        Pin::new(&mut self.answer).poll(cx)
    }
}

/// One outstanding request to a client, counted while it lives.
struct Asking(Arc<AtomicUsize>);

impl Drop for Asking {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The longest a call waits on its client's answers past its own timeout.
pub const CLIENT_ANSWER_MAX: std::time::Duration = std::time::Duration::from_secs(600);

/// `answer`, or `UpstreamError::Timeout` after `limit` — a limit that waits while the server is
/// asking the call's client something (`relay`'s outstanding requests), up to `CLIENT_ANSWER_MAX`
/// more: the server is not the slow one then, and the timeout would otherwise count toward its
/// breaker.
pub async fn within_unless_asking<T>(
    limit: std::time::Duration,
    relay: Option<&Relay>,
    answer: impl Future<Output = Result<T, UpstreamError>>,
) -> Result<T, UpstreamError> {
    let Some(asking) = relay.map(|r| r.asking.clone()) else { return within(limit, answer).await };
    let started = tokio::time::Instant::now();
    let mut deadline = started + limit;
    tokio::pin!(answer);
    loop {
        tokio::select! {
            result = &mut answer => return result,
            () = tokio::time::sleep_until(deadline) => {
                if asking.load(Ordering::Relaxed) == 0 || deadline >= started + limit + CLIENT_ANSWER_MAX {
                    return Err(UpstreamError::Timeout);
                }
                deadline = (deadline + limit).min(started + limit + CLIENT_ANSWER_MAX);
            }
        }
    }
}

/// What the gateway offers as a client upstream on behalf of clients that offered `caps`: it
/// relays those requests to the client whose call the server is answering (and refuses any other
/// at once, an error, never a wait).
pub fn client_capabilities(caps: crate::relay::ClientCaps) -> Value {
    let mut offered = serde_json::Map::new();
    if caps.sampling {
        offered.insert("sampling".into(), serde_json::json!({}));
    }
    if caps.elicitation {
        offered.insert("elicitation".into(), serde_json::json!({}));
    }
    if caps.roots {
        offered.insert("roots".into(), serde_json::json!({"listChanged": false}));
    }
    Value::Object(offered)
}

/// The response to a server's request `id` once its client answers (an error when the client
/// went away first), ready to send the server.
pub async fn reply_to_server(id: crate::jsonrpc::Id, answer: ClientAnswer) -> Vec<u8> {
    let outcome = answer.await.unwrap_or_else(|_| {
        Err(RpcError::new(crate::jsonrpc::INTERNAL_ERROR, "the client went away before answering"))
    });
    match outcome {
        Ok(result) => crate::jsonrpc::result_value(&id, &result),
        Err(e) => crate::jsonrpc::error_bytes(Some(&id), &e),
    }
}

/// The answer to a server's request no client can take.
pub fn refuse(method: &str) -> Result<Value, RpcError> {
    if method == "ping" {
        return Ok(serde_json::json!({}));
    }
    Err(RpcError::new(
        crate::jsonrpc::METHOD_NOT_FOUND,
        format!("`{method}` cannot be answered: no client that offers it is attached to this request"),
    ))
}

#[derive(Debug, Clone, PartialEq)]
pub enum UpstreamError {
    /// Could not connect, or the connection broke.
    Unreachable(String),
    /// No answer within the timeout.
    Timeout,
    /// An HTTP status that is not an answer.
    Status(u16),
    /// An answer that is not MCP.
    Protocol(String),
    /// The server answered with a JSON-RPC error: passed on to the client as it is.
    Rpc(RpcError),
    /// A guard refused the call or its result (`tool_guard.rs`): the reason, never the text.
    Blocked(String),
}

impl UpstreamError {
    /// A short label for metrics and usage records.
    pub fn kind(&self) -> &'static str {
        match self {
            UpstreamError::Unreachable(_) => "unreachable",
            UpstreamError::Timeout => "timeout",
            UpstreamError::Status(_) => "upstream_status",
            UpstreamError::Protocol(_) => "upstream_protocol",
            UpstreamError::Rpc(_) => "rpc_error",
            UpstreamError::Blocked(_) => "blocked",
        }
    }
}

impl std::fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UpstreamError::Unreachable(e) => write!(f, "unreachable: {e}"),
            UpstreamError::Timeout => write!(f, "timed out"),
            UpstreamError::Status(s) => write!(f, "answered HTTP {s}"),
            UpstreamError::Protocol(e) => write!(f, "protocol error: {e}"),
            UpstreamError::Rpc(e) => write!(f, "error {}: {}", e.code, e.message),
            UpstreamError::Blocked(why) => write!(f, "blocked by {why}"),
        }
    }
}

pub trait Upstream: Send + Sync {
    /// A fresh request id on this upstream: the caller keeps it to cancel the request.
    fn next_id(&self) -> u64;

    /// Send `method` with `params` as request `id` and wait for its result. What the server
    /// sends on the way (notifications, requests for the client) goes to `relay` when given;
    /// without one, the server's requests are answered at once (`ask_client`).
    fn request<'a>(
        &'a self,
        id: u64,
        method: &'a str,
        params: Value,
        relay: Option<Relay>,
    ) -> BoxFuture<'a, Result<Box<RawValue>, UpstreamError>>;

    /// The server's own `initialize` result (capabilities, `serverInfo`, `instructions`), once
    /// it has been initialised; None for servers that cannot say.
    fn init_result(&self) -> BoxFuture<'_, Option<Value>> {
        Box::pin(async { None })
    }

    /// Send a notification; nothing comes back. `offers` and `client`: what the client of the
    /// request it is about offered and its session (its `Relay`'s), so it goes to the session that
    /// request went to.
    fn notify<'a>(
        &'a self,
        method: &'a str,
        params: Value,
        offers: crate::relay::ClientCaps,
        client: Option<Arc<str>>,
    ) -> BoxFuture<'a, Result<(), UpstreamError>>;

    /// A client session ended: what this upstream keeps for it alone (its own upstream session)
    /// can go.
    fn forget_client<'a>(&'a self, _client: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }

    /// How long a request to this server may take (its configured `timeout`); None where the
    /// server has no such bound. Guards on its tool calls share the same bound (`Hub::call`).
    fn timeout(&self) -> Option<std::time::Duration> {
        None
    }

    /// Where this upstream reports a changed tool list, if it can.
    fn list_changed(&self) -> Option<&ListChangedHook> {
        None
    }

    /// Where this upstream reports notifications no call is waiting for, if it can.
    fn notes(&self) -> Option<&NoteHook> {
        None
    }

    /// Stop whatever runs the server (a child process); nothing for remote servers.
    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}
