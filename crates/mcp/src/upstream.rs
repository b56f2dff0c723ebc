//! What the gateway needs from an upstream MCP server, whatever carries it (Streamable HTTP now,
//! stdio next): send a request and get its result, relaying the notifications the server sends
//! while it works (progress), and send notifications (cancellation).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use serde_json::value::RawValue;
use serde_json::Value;
use tokio::sync::mpsc;

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

/// `answer`, or `UpstreamError::Timeout` when it takes longer than `limit`.
pub async fn within<T>(
    limit: std::time::Duration,
    answer: impl Future<Output = Result<T, UpstreamError>>,
) -> Result<T, UpstreamError> {
    tokio::time::timeout(limit, answer).await.unwrap_or(Err(UpstreamError::Timeout))
}

/// Notifications an upstream sent while answering (e.g. `notifications/progress`), as whole
/// JSON-RPC messages, for the caller to relay.
/// Bounded: a notification that finds it full (the client reads slower than the upstream
/// reports) is dropped, which progress can afford; memory per call stays bounded.
pub type NotificationSink = mpsc::Sender<Value>;

/// How many notifications wait for a slow client before newer ones are dropped.
pub const NOTIFICATION_BACKLOG: usize = 64;

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
        }
    }
}

pub trait Upstream: Send + Sync {
    /// A fresh request id on this upstream: the caller keeps it to cancel the request.
    fn next_id(&self) -> u64;

    /// Send `method` with `params` as request `id` and wait for its result. Notifications the
    /// server sends on the way go to `notify` when given.
    fn request<'a>(
        &'a self,
        id: u64,
        method: &'a str,
        params: Value,
        notify: Option<NotificationSink>,
    ) -> BoxFuture<'a, Result<Box<RawValue>, UpstreamError>>;

    /// Send a notification; nothing comes back.
    fn notify<'a>(&'a self, method: &'a str, params: Value) -> BoxFuture<'a, Result<(), UpstreamError>>;

    /// Where this upstream reports a changed tool list, if it can.
    fn list_changed(&self) -> Option<&ListChangedHook> {
        None
    }

    /// Stop whatever runs the server (a child process); nothing for remote servers.
    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}
