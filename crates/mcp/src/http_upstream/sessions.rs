//! An HTTP upstream's sessions: one per client that offered something to ask (up to
//! `MAX_CLIENT_SESSIONS`, idle ones ended after `CLIENT_SESSION_IDLE`, and with their client), one
//! per set of capabilities for everything else; each made once, on first use, outside the map's
//! lock; and whose calls are in flight in each (where a message on its GET stream goes).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderValue;
use serde_json::{json, Value};

use super::{HttpUpstream, Listener, SESSION_HEADER};
use crate::jsonrpc;
use crate::relay::ClientCaps;
use crate::upstream::{Relay, Upstream, UpstreamError};
use crate::version;

pub(super) struct UpstreamSession {
    /// None when the server issues no session id (a stateless server of the session era).
    pub(super) id: Option<HeaderValue>,
    pub(super) version: HeaderValue,
    /// The server's `initialize` result.
    pub(super) init: Value,
    /// Set once the server forgot this session, or it ended: its GET stream stops.
    pub(super) ended: std::sync::atomic::AtomicBool,
    /// The client session this one serves alone; None: shared by every client offering the same.
    pub(super) client: Option<Arc<str>>,
    /// Its calls in flight that have a client behind them.
    pub(super) waiting: Waiting,
    pub(super) last_used: std::sync::Mutex<std::time::Instant>,
    /// Ends its GET stream's task at once.
    pub(super) stop: tokio::sync::watch::Sender<()>,
}

impl UpstreamSession {
    pub(super) fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|p| p.into_inner()) = std::time::Instant::now();
    }

    fn idle_for(&self) -> Duration {
        self.last_used.lock().unwrap_or_else(|p| p.into_inner()).elapsed()
    }

    pub(super) fn end(&self) {
        self.ended.store(true, Relaxed);
        self.stop.send_replace(());
    }
}

/// Sessions by key (capability flags, and `@client` for a client's own), each made once on first use.
pub(super) type Sessions = std::collections::HashMap<String, Arc<tokio::sync::OnceCell<Arc<UpstreamSession>>>>;

pub(super) fn lock(sessions: &std::sync::Mutex<Sessions>) -> std::sync::MutexGuard<'_, Sessions> {
    sessions.lock().unwrap_or_else(|p| p.into_inner())
}

/// Client sessions an upstream keeps a session of its own for; past this, clients share.
const MAX_CLIENT_SESSIONS: usize = 256;
/// A client's upstream session with no call for this long ends.
const CLIENT_SESSION_IDLE: Duration = Duration::from_secs(600);

/// Calls in flight that have a client behind them, by our request id: where a server's request
/// or log message that names no request goes (`owner`).
pub(super) type Waiting = Arc<std::sync::Mutex<std::collections::HashMap<u64, Relay>>>;

/// Who a message on a session's GET stream is for: in a client's own session, that client (any of
/// its calls' relays reaches it); in a shared one, the only call in flight, if there is one.
pub(super) fn owner(waiting: &Waiting, own: bool) -> Option<Relay> {
    let waiting = waiting.lock().unwrap_or_else(|p| p.into_inner());
    let mut relays = waiting.values();
    let first = relays.next().cloned();
    first.filter(|_| own || relays.next().is_none())
}

/// Removes a call from `Waiting` however it ends.
pub(super) struct Registered(pub(super) Waiting, pub(super) u64);

impl Drop for Registered {
    fn drop(&mut self) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.1);
    }
}

impl HttpUpstream {
    /// The session for a client offering `caps` (its own, for `client`, when it offered anything
    /// and there is room): made on first use. The map is locked only to find or add its slot; the
    /// `initialize` round trips run outside it, so one client's new session never holds up another's
    /// calls.
    pub(super) async fn session(
        &self,
        caps: ClientCaps,
        client: Option<&Arc<str>>,
    ) -> Result<Arc<UpstreamSession>, UpstreamError> {
        let flags = caps.flags();
        // A client that offered nothing cannot be asked anything: it shares.
        let client = client.filter(|_| caps.sampling || caps.elicitation || caps.roots);
        let (slot, client) = {
            let mut sessions = lock(&self.sessions);
            self.sweep(&mut sessions);
            let own = client.filter(|_| sessions.keys().filter(|k| k.contains('@')).count() < MAX_CLIENT_SESSIONS);
            let (key, client) = match own {
                Some(c) => (format!("{flags}@{c}"), Some(c.clone())),
                None => (flags, None),
            };
            (sessions.entry(key).or_default().clone(), client)
        };
        let session = slot.get_or_try_init(|| self.open_session(caps, client)).await?.clone();
        session.touch();
        Ok(session)
    }

    /// `initialize` a new session (and its `initialized`), and open its GET stream.
    async fn open_session(
        &self,
        caps: ClientCaps,
        client: Option<Arc<str>>,
    ) -> Result<Arc<UpstreamSession>, UpstreamError> {
        let id = self.next_id();
        let params = json!({
            "protocolVersion": version::SESSION[0],
            "capabilities": crate::upstream::client_capabilities(caps),
            "clientInfo": {"name": "switchyard", "version": env!("CARGO_PKG_VERSION")},
        });
        let resp = self.post(jsonrpc::request_bytes(id, "initialize", &params), None).await?;
        let sid = resp.headers().get(&SESSION_HEADER).cloned();
        let result = self.read_answer(resp, id, None, None).await?;
        let init = serde_json::from_str::<Value>(result.get()).unwrap_or(Value::Null);
        let agreed = init
            .get("protocolVersion")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .filter(|v| version::is_supported(v))
            .ok_or_else(|| UpstreamError::Protocol("initialize answered no protocol version we speak".into()))?;
        let session = Arc::new(UpstreamSession {
            id: sid,
            version: HeaderValue::from_str(&agreed).map_err(|e| UpstreamError::Protocol(e.to_string()))?,
            init,
            ended: std::sync::atomic::AtomicBool::new(false),
            client,
            waiting: Waiting::default(),
            last_used: std::sync::Mutex::new(std::time::Instant::now()),
            stop: tokio::sync::watch::channel(()).0,
        });
        let initialized = jsonrpc::notification_bytes("notifications/initialized", &json!({}));
        let resp = self.post(initialized, Some(&session)).await?;
        if !resp.status().is_success() {
            return Err(UpstreamError::Status(resp.status().as_u16()));
        }
        // Open the session's GET stream before the first call: servers send what relates to no
        // request there (and some send their sampling and elicitation requests there too).
        if let Some(stream) = self.poster.listen(&session).await {
            let listener = Listener {
                poster: self.poster.clone(),
                session: session.clone(),
                list_changed: self.list_changed.clone(),
                notes: self.notes.clone(),
            };
            tokio::spawn(listener.run(stream, self.alive.subscribe(), session.stop.subscribe()));
        }
        Ok(session)
    }

    /// End clients' sessions idle past `CLIENT_SESSION_IDLE` (none of their calls in flight).
    fn sweep(&self, sessions: &mut Sessions) {
        let idle = |s: &UpstreamSession| {
            s.client.is_some()
                && s.idle_for() > CLIENT_SESSION_IDLE
                && s.waiting.lock().unwrap_or_else(|p| p.into_inner()).is_empty()
        };
        self.end_where(sessions, idle);
    }

    /// Take the sessions `gone` picks out of `sessions`, and end each.
    pub(super) fn end_where(&self, sessions: &mut Sessions, gone: impl Fn(&UpstreamSession) -> bool) {
        let keys: Vec<String> =
            sessions.iter().filter(|(_, slot)| slot.get().is_some_and(|s| gone(s))).map(|(k, _)| k.clone()).collect();
        for key in keys {
            if let Some(session) = sessions.remove(&key).and_then(|slot| slot.get().cloned()) {
                self.end_session(session);
            }
        }
    }

    /// Stop a session's GET stream and tell the server it is over.
    pub(super) fn end_session(&self, session: Arc<UpstreamSession>) {
        session.end();
        let poster = self.poster.clone();
        tokio::spawn(async move { poster.delete(&session).await });
    }

    /// Forget `stale` (the server answered 404 for it) unless another caller already did.
    pub(super) fn forget(&self, stale: &Arc<UpstreamSession>) {
        let mut sessions = lock(&self.sessions);
        let key = sessions.iter().find(|(_, slot)| slot.get().is_some_and(|s| Arc::ptr_eq(s, stale)));
        if let Some(key) = key.map(|(k, _)| k.clone()) {
            stale.ended.store(true, Relaxed);
            stale.stop.send_replace(());
            sessions.remove(&key);
        }
    }
}
