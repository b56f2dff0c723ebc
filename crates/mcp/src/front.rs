//! The MCP server the gateway presents to clients, independent of the HTTP stack: one POSTed
//! JSON-RPC message in, an answer out (JSON, an SSE stream, or 202 for a notification), for
//! the aggregated endpoint (every permitted tool, named `{server}__{tool}`) or one server passed
//! through under its own names. Session-era clients `initialize` and get a signed session id
//! (`session.rs`) that any instance with the secret accepts; an unknown one is 404 so the
//! client opens a new session. Every tool call is reported to the caller's `on_call` hook
//! (usage, metrics) however it ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

mod forwarded;
mod input_required;
mod relayed;

use crate::hub::Hub;
use crate::jsonrpc::{self, Id, Message, RpcError, METHOD_NOT_FOUND};
use crate::relay::{ClientCaps, Outbound};
use crate::session::SessionSigner;
use crate::upstream::{Relay, Upstream, UpstreamError};
use crate::version;

/// Which endpoint a request came to.
#[derive(Debug, Clone, Copy)]
pub enum Scope<'a> {
    /// `POST /mcp`: every server's tools, aggregated.
    All,
    /// `POST /mcp/{server}`: one server under its own names.
    Server(&'a str),
    /// `POST /mcp/code`: Code Mode's tools (`code_mode.rs`).
    Code,
}

/// Whether the caller may use (server, tool): the key's MCP permissions.
pub type SharedPermits = Arc<dyn Fn(&str, &str) -> bool + Send + Sync>;

/// Admission of one tool call under the key's limits: `Err(message)` refuses it.
pub type SharedAdmit = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// The gateway's policy rules on one tool call (server, tool, arguments): `Err((rule, message))`
/// when a rule denies it.
pub type SharedPolicy = Arc<dyn Fn(&str, &str, &Value) -> Result<(), (String, String)> + Send + Sync>;

/// A policy that allows every call.
pub fn no_policy() -> SharedPolicy {
    Arc::new(|_: &str, _: &str, _: &Value| Ok(()))
}

/// One HTTP request to an MCP endpoint, as the gateway read it.
pub struct Request<'a> {
    pub method: &'a http::Method,
    pub session: Option<&'a str>,
    pub version_header: Option<&'a str>,
    pub accepts_sse: bool,
    /// The key id the gateway authenticated (sessions are bound to it).
    pub key: Option<&'a str>,
    pub now_unix: i64,
    pub scope: Scope<'a>,
    pub permits: SharedPermits,
    /// Admission of one tool call under the key's limits (Code Mode's programs' calls included).
    pub admit: SharedAdmit,
    /// The policy rules on tool calls (Code Mode's programs' calls included).
    pub policy: SharedPolicy,
    /// Where this request's tool call is reported.
    pub on_call: OnCall,
    /// The caller's own guards on tool calls and results (its key's and team's added ones, with
    /// the defaults), used instead of the hub's; None: the hub's.
    pub tool_guard: Option<SharedToolGuard>,
    pub body: &'a [u8],
}

/// A guard on tool calls, shared by a request's calls.
pub type SharedToolGuard = Arc<dyn crate::tool_guard::ToolGuard>;

pub enum Body {
    Empty,
    Json(Vec<u8>),
    /// SSE `data:` payloads, one JSON-RPC message each; the stream ends when the sender drops.
    Events(mpsc::Receiver<Vec<u8>>),
}

pub struct Answer {
    pub status: u16,
    /// An `Mcp-Session-Id` to send (after `initialize`).
    pub session: Option<String>,
    pub body: Body,
}

impl Answer {
    fn json(status: u16, body: Vec<u8>) -> Answer {
        Answer { status, session: None, body: Body::Json(body) }
    }

    fn empty(status: u16) -> Answer {
        Answer { status, session: None, body: Body::Empty }
    }

    fn rpc_error(status: u16, id: Option<&Id>, error: RpcError) -> Answer {
        Answer::json(status, jsonrpc::error_bytes(id, &error))
    }
}

/// How one tool call ended, for usage records and metrics.
#[derive(Debug, Clone)]
pub struct CallRecord {
    pub key: Option<String>,
    pub server: String,
    pub tool: String,
    /// `ok`, `tool_error` (the tool answered `isError`), `forbidden`, `unknown_tool`,
    /// `cancelled`, or an upstream failure kind (`timeout`, `unreachable`, ...).
    pub status: &'static str,
    pub latency: Duration,
    pub request_bytes: usize,
    pub response_bytes: usize,
}

pub type OnCall = Arc<dyn Fn(CallRecord) + Send + Sync>;

/// A call in flight that `notifications/cancelled` can reach: by (session, client request id).
struct InFlight {
    upstream: Arc<dyn Upstream>,
    upstream_id: u64,
    /// What the client offered, as the upstream call was sent, and its session (the upstream
    /// session it went in).
    offers: ClientCaps,
    client: Option<Arc<str>>,
    cancel: oneshot::Sender<()>,
}

pub struct Front {
    hub: Arc<Hub>,
    signer: SessionSigner,
    in_flight: Mutex<HashMap<(String, String), InFlight>>,
    /// Set at shutdown: clients' GET streams end, so draining connections does not wait on them.
    closing: tokio::sync::watch::Sender<bool>,
    /// Sessions a client ended with DELETE (id → issued at), until they would have expired.
    /// Per instance: another instance still accepts them until the fleet layer shares this.
    ended: Mutex<HashMap<String, i64>>,
    /// Code Mode, when `mcp.code_mode.enabled`.
    code_mode: Option<crate::code_mode::CodeMode>,
    /// Servers' requests relayed to clients, waiting for their answers.
    outbound: Arc<Outbound>,
    /// Stateless-revision calls waiting for their clients' input (`front/input_required.rs`).
    parked: Mutex<HashMap<String, input_required::Parked>>,
    /// The other instances, when this one is in a fleet (`fleet.rs`).
    fleet: crate::fleet::FleetState,
}

/// Who sent a request: its session (or flight key), era and what it offered at `initialize`.
struct Caller<'a> {
    session: &'a str,
    /// A stateless-revision request, whose results must carry `resultType`.
    modern: bool,
    caps: ClientCaps,
}

impl Caller<'_> {
    /// The client's session, when the upstream should speak to it in a session of its own (the
    /// session era; a stateless request is a flight of its own).
    fn client(&self) -> Option<Arc<str>> {
        (!self.modern).then(|| Arc::from(self.session))
    }
}

/// Ended sessions remembered before expired ones are swept.
const ENDED_SWEEP_ABOVE: usize = 10_000;

/// The 2026-07-28 error for a protocol version the server does not speak; `data` lists those it does.
pub const UNSUPPORTED_VERSION: i64 = -32022;

/// The JSON-RPC error code of a tool call refused by the key's rate limit (implementation-defined
/// server error range).
pub const RATE_LIMITED: i64 = -32029;

/// Session ids live this long; then the client re-initialises.
pub const SESSION_TTL_SECS: i64 = 24 * 3600;

impl Front {
    pub fn new(hub: Arc<Hub>, secret: &[u8]) -> Result<Front, String> {
        Ok(Front {
            hub,
            signer: SessionSigner::new(secret, SESSION_TTL_SECS)?,
            in_flight: Mutex::new(HashMap::new()),
            ended: Mutex::new(HashMap::new()),
            closing: tokio::sync::watch::channel(false).0,
            code_mode: None,
            outbound: Arc::new(Outbound::default()),
            parked: Mutex::new(HashMap::new()),
            fleet: crate::fleet::FleetState::default(),
        })
    }

    /// Serve as one instance of a fleet: relayed requests' ids and `requestState`s carry this
    /// instance's tag, and answers and retries for another instance are forwarded to it.
    pub fn join_fleet(&self, fleet: Arc<dyn crate::fleet::Fleet>) {
        let tag = fleet.tag();
        if self.fleet.join(fleet) {
            self.outbound.tag_ids(tag);
        }
    }

    /// Answers and retries forwarded to and from other instances so far.
    pub fn forwarded(&self) -> crate::fleet::ForwardCounts {
        self.fleet.counts()
    }

    /// Serve Code Mode on `/mcp/code` with these limits.
    pub fn with_code_mode(mut self, limits: switchyard_sandbox::Limits) -> Front {
        self.code_mode = Some(crate::code_mode::CodeMode::new(limits));
        self
    }

    pub fn has_code_mode(&self) -> bool {
        self.code_mode.is_some()
    }

    /// Load Code Mode's sandbox now, so the first program does not wait for it.
    pub async fn warm_code_mode(&self) -> Result<(), String> {
        match &self.code_mode {
            Some(code) => code.sandbox().await.map(drop),
            None => Ok(()),
        }
    }

    /// End every client's GET stream (the gateway is shutting down).
    pub fn close_streams(&self) {
        let _ = self.closing.send(true);
    }

    /// A session-era client's GET stream: `notifications/tools/list_changed` whenever a server in
    /// its scope says its tools changed, until the client goes away or the gateway shuts down.
    fn stream(&self, req: &Request<'_>) -> Answer {
        if !req.accepts_sse {
            return Answer::empty(405);
        }
        let Some(session) = req.session else {
            let e = RpcError::new(jsonrpc::INVALID_REQUEST, "missing Mcp-Session-Id: send `initialize` first");
            return Answer::rpc_error(400, None, e);
        };
        if !self.session_valid(session, req.key, req.now_unix) {
            return Answer::empty(404);
        }
        let only: Option<String> = match req.scope {
            Scope::All => None,
            Scope::Server(name) => Some(name.to_owned()),
            // Code Mode's own three tools never change.
            Scope::Code => Some(crate::code_mode::SERVER.to_owned()),
        };
        let (tx, rx) = mpsc::channel(16);
        let mut changes = self.hub.changes();
        let mut notes = self.hub.notes();
        let aggregated = matches!(req.scope, Scope::All);
        let mut closing = self.closing.subscribe();
        if *closing.borrow() {
            return Answer::empty(503);
        }
        tokio::spawn(async move {
            let note = jsonrpc::notification_bytes("notifications/tools/list_changed", &json!({}));
            loop {
                tokio::select! {
                    changed = changes.recv() => match changed {
                        Ok(server) if only.as_ref().is_some_and(|o| *o != server) => {}
                        // A lagging stream missed some: one notification covers them all.
                        Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                            if tx.send(note.clone()).await.is_err() {
                                return;
                            }
                        }
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                    },
                    note = notes.recv() => match note {
                        Ok((server, note)) => {
                            let Some(bytes) = unrelated_note(&server, &note, only.as_deref(), aggregated) else { continue };
                            if tx.send(bytes).await.is_err() {
                                return;
                            }
                        }
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                    },
                    _ = tx.closed() => return,
                    // The only change ever made is to `true`: shutting down.
                    _ = closing.changed() => return,
                }
            }
        });
        Answer { status: 200, session: None, body: Body::Events(rx) }
    }

    /// Servers' requests to clients so far, by server, method and outcome (`/metrics`).
    pub fn server_requests(&self) -> crate::relay::RequestCounts {
        self.outbound.counts()
    }

    pub fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }

    pub async fn handle(self: &Arc<Self>, req: Request<'_>) -> Answer {
        let missing = match req.scope {
            Scope::Server(name) => (!self.hub.has_server(name)).then_some(name),
            Scope::Code => self.code_mode.is_none().then_some(crate::code_mode::SERVER),
            Scope::All => None,
        };
        if let Some(name) = missing {
            return Answer::rpc_error(404, None, RpcError::new(METHOD_NOT_FOUND, format!("no MCP server `{name}`")));
        }
        match *req.method {
            http::Method::POST => {}
            http::Method::GET => return self.stream(&req),
            http::Method::DELETE => {
                return match req.session.filter(|s| self.session_valid(s, req.key, req.now_unix)) {
                    Some(id) => {
                        self.end_session(id, req.key, req.now_unix);
                        Answer::empty(200)
                    }
                    None => Answer::empty(404),
                };
            }
            _ => return Answer::empty(405),
        }
        let message = match jsonrpc::parse(req.body) {
            Ok(m) => m,
            Err(refusal) => return Answer::rpc_error(400, refusal.id.as_ref(), refusal.error),
        };
        if let Some(v) = req.version_header {
            if !version::is_supported(v) {
                let e = RpcError::new(jsonrpc::INVALID_REQUEST, format!("unsupported MCP-Protocol-Version `{v}`"));
                return Answer::rpc_error(400, None, e);
            }
        }
        // The stateless revision: the version travels in every request's `_meta`; no session.
        if let Some(requested) = meta_version(&message) {
            return self.stateless(&req, message, &requested).await;
        }
        // `initialize` opens a session; everything else needs one.
        if let Message::Request { id, method, params } = &message {
            if method == "initialize" {
                return self.initialize(&req, id, params.as_ref()).await;
            }
        }
        let Some(session_id) = req.session else {
            let e = RpcError::new(jsonrpc::INVALID_REQUEST, "missing Mcp-Session-Id: send `initialize` first");
            return Answer::rpc_error(400, None, e);
        };
        let Some(caps) = self.session_caps(session_id, req.key, req.now_unix) else {
            let e = RpcError::new(jsonrpc::INVALID_REQUEST, "unknown or expired session: initialize again");
            return Answer::rpc_error(404, None, e);
        };
        match message {
            Message::Notification { method, params } => {
                if method == "notifications/cancelled" {
                    self.cancel(session_id, params.as_ref()).await;
                }
                Answer::empty(202)
            }
            // The client's answer to a server's request we relayed; anything else is dropped.
            Message::Response { id, outcome } => {
                if let Some(tag) = self.fleet.foreign(crate::fleet::tag_of_id(&id)) {
                    self.fleet.forward_answer(tag, session_id, &id, &outcome).await;
                } else if !self.outbound.answer(session_id, &id, outcome) {
                    tracing::debug!(
                        "an MCP client answered a request that is not waiting (ended, or another instance's)"
                    );
                }
                Answer::empty(202)
            }
            Message::Request { id, method, params } => {
                let caller = Caller { session: session_id, modern: false, caps };
                self.request(&req, &caller, id, &method, params.unwrap_or_else(|| json!({}))).await
            }
        }
    }

    /// A request of the stateless revision (2026-07-28): the version it names must be one we
    /// speak (else -32022 with the ones we do), the `MCP-Protocol-Version` header must agree, and
    /// closing the answer's stream is how it is cancelled.
    async fn stateless(self: &Arc<Self>, req: &Request<'_>, message: Message, requested: &str) -> Answer {
        let id = match &message {
            Message::Request { id, .. } => Some(id.clone()),
            _ => None,
        };
        if requested != version::STATELESS {
            let mut e = RpcError::new(UNSUPPORTED_VERSION, format!("unsupported protocol version `{requested}`"));
            e.data = Some(json!({"supported": supported_versions(), "requested": requested}));
            return Answer::rpc_error(400, id.as_ref(), e);
        }
        if req.version_header.is_some_and(|h| h != requested) {
            let e =
                RpcError::new(jsonrpc::INVALID_REQUEST, "MCP-Protocol-Version does not match the request's `_meta`");
            return Answer::rpc_error(400, id.as_ref(), e);
        }
        let Message::Request { id, method, params } = message else { return Answer::empty(202) };
        let params = params.unwrap_or_else(|| json!({}));
        match method.as_str() {
            "server/discover" => {
                let mut result = self.description(req.scope).await;
                result["supportedVersions"] = json!(supported_versions());
                result["resultType"] = json!("complete");
                result["ttlMs"] = json!(0);
                result["cacheScope"] = json!("private");
                Answer::json(200, jsonrpc::result_value(&id, &result))
            }
            "ping" => Answer::json(200, jsonrpc::result_value(&id, &json!({"resultType": "complete"}))),
            _ => {
                // Cancellation is by closing the stream: no id to look calls up by, so each
                // request gets a key of its own.
                static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                let flight = format!("~{}", NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
                let caller = Caller { session: &flight, modern: true, caps: ClientCaps::in_meta(&params) };
                self.request(req, &caller, id, &method, params).await
            }
        }
    }

    /// Capabilities, instructions and server info: what `initialize` and `server/discover` say.
    fn server_description(&self, scope: Scope<'_>) -> Value {
        let capabilities = match scope {
            Scope::All => json!({"tools": {"listChanged": true}, "logging": {}}),
            // One server: what it offers (tools, resources, prompts), as ours.
            Scope::Server(_) => json!({"tools": {"listChanged": true}, "resources": {}, "prompts": {}}),
            Scope::Code => json!({"tools": {}}),
        };
        let info = json!({"name": "switchyard", "version": env!("CARGO_PKG_VERSION")});
        json!({
            "capabilities": capabilities,
            "serverInfo": info,
            "_meta": {"io.modelcontextprotocol/serverInfo": info},
            "instructions": match scope {
                Scope::All => "Tools of every MCP server behind this gateway, named {server}__{tool}.".to_owned(),
                Scope::Server(name) => format!("The `{name}` MCP server, through the Switchyard gateway."),
                Scope::Code => "Code Mode: find tools with search_tools, then run one JavaScript program with \
                    execute_code that calls them (await tools.<server>.<tool>(args)) instead of one tool call per turn."
                    .to_owned(),
            },
        })
    }

    fn session_valid(&self, id: &str, key: Option<&str>, now_unix: i64) -> bool {
        self.session_caps(id, key, now_unix).is_some()
    }

    /// What the client of a valid session offered; None for an invalid or ended session.
    fn session_caps(&self, id: &str, key: Option<&str>, now_unix: i64) -> Option<ClientCaps> {
        let session = self.signer.verify(id, key, now_unix)?;
        (!crate::hub_lock(&self.ended).contains_key(id)).then(|| ClientCaps::from_flags(&session.caps))
    }

    /// `server_description`, and for one server passed through, what that server itself says
    /// at `initialize`: its capabilities (those the gateway passes on), `serverInfo` and
    /// `instructions`.
    async fn description(&self, scope: Scope<'_>) -> Value {
        let mut description = self.server_description(scope);
        let Scope::Server(name) = scope else { return description };
        let Some(upstream) = self.hub.upstream(name) else { return description };
        let Some(init) = upstream.init_result().await else { return description };
        let offered = init.get("capabilities").and_then(Value::as_object);
        let mut capabilities = serde_json::Map::new();
        for cap in ["tools", "resources", "prompts", "logging", "completions"] {
            if let Some(value) = offered.and_then(|o| o.get(cap)) {
                capabilities.insert(cap.to_owned(), value.clone());
            }
        }
        // The gateway tells clients when a server's tools change, whether the server can or not.
        capabilities.insert("tools".to_owned(), json!({"listChanged": true}));
        description["capabilities"] = Value::Object(capabilities);
        if let Some(info) = init.get("serverInfo").filter(|i| i.is_object()) {
            description["serverInfo"] = info.clone();
            description["_meta"] = json!({"io.modelcontextprotocol/serverInfo": info});
        }
        match init.get("instructions").and_then(Value::as_str) {
            Some(text) => description["instructions"] = json!(text),
            None => {
                if let Some(d) = description.as_object_mut() {
                    d.remove("instructions");
                }
            }
        }
        description
    }

    fn end_session(&self, id: &str, key: Option<&str>, now_unix: i64) {
        let Some(session) = self.signer.verify(id, key, now_unix) else { return };
        let mut ended = crate::hub_lock(&self.ended);
        if ended.len() >= ENDED_SWEEP_ABOVE {
            ended.retain(|_, issued| now_unix - *issued <= SESSION_TTL_SECS);
        }
        ended.insert(id.to_owned(), session.issued_unix);
        drop(ended);
        // What each upstream keeps for this client alone goes with it.
        for name in self.hub.server_names() {
            if let Some(upstream) = self.hub.upstream(name).cloned() {
                let client = id.to_owned();
                tokio::spawn(async move { upstream.forget_client(&client).await });
            }
        }
    }

    async fn initialize(&self, req: &Request<'_>, id: &Id, params: Option<&Value>) -> Answer {
        let requested = params.and_then(|p| p.get("protocolVersion")).and_then(Value::as_str);
        let agreed = version::negotiate(requested);
        let mut result = self.description(req.scope).await;
        result["protocolVersion"] = json!(agreed);
        if let Some(m) = result.as_object_mut() {
            m.remove("_meta");
        }
        let caps = ClientCaps::offered(params);
        let mut answer = Answer::json(200, jsonrpc::result_value(id, &result));
        answer.session = Some(self.signer.issue_with(agreed, &caps.flags(), req.key, req.now_unix));
        answer
    }

    async fn request(
        self: &Arc<Self>,
        req: &Request<'_>,
        caller: &Caller<'_>,
        id: Id,
        method: &str,
        params: Value,
    ) -> Answer {
        let permits = req.permits.as_ref();
        let modern = caller.modern;
        if modern && params.get("requestState").is_some() {
            return self.resume(req, id, &params).await;
        }
        match (method, req.scope) {
            ("ping", _) => Answer::json(200, jsonrpc::result_value(&id, &json!({}))),
            ("tools/list", Scope::All) => {
                let tools: Vec<Value> = self
                    .hub
                    .catalogue(permits)
                    .await
                    .into_iter()
                    .map(|(_, t)| {
                        let mut d = t.definition;
                        d["name"] = json!(t.aggregated);
                        d
                    })
                    .collect();
                Answer::json(200, jsonrpc::result_value(&id, &tool_list(tools)))
            }
            ("tools/list", Scope::Server(server)) => match self.hub.tools_of(server).await {
                Ok(tools) => {
                    let tools: Vec<Value> =
                        tools.iter().filter(|t| permits(server, &t.name)).map(|t| t.definition.clone()).collect();
                    Answer::json(200, jsonrpc::result_value(&id, &tool_list(tools)))
                }
                Err(e) => upstream_failure(&id, &e),
            },
            ("tools/list", Scope::Code) => {
                Answer::json(200, jsonrpc::result_value(&id, &tool_list_of(crate::code_mode::tool_definitions())))
            }
            ("tools/call", Scope::Code) => self.code_call(req, caller, id, params).await,
            ("tools/call", scope) => self.call(req, caller, id, scope, params).await,
            ("logging/setLevel", Scope::All) => {
                self.set_level_everywhere(params, caller.caps, caller.client()).await;
                Answer::json(200, jsonrpc::result_bytes_for(&id, &empty_result(), modern))
            }
            (_, Scope::Server(server)) if passed_through(method) => {
                let Some(upstream) = self.hub.upstream(server).cloned() else { return Answer::empty(404) };
                let method = method.to_owned();
                let answer_id = id.clone();
                let work = move |relay: Option<Relay>| async move {
                    let answer = upstream.request(upstream.next_id(), &method, params, relay).await;
                    Some(match answer {
                        Ok(result) => jsonrpc::result_bytes_for(&id, &result, modern),
                        Err(e) => upstream_failure_bytes(&id, &e),
                    })
                };
                self.answer_relaying(req, caller, &answer_id, (server, false), false, work).await
            }
            _ => Answer::json(
                200,
                jsonrpc::error_bytes(
                    Some(&id),
                    &RpcError::new(METHOD_NOT_FOUND, format!("method `{method}` not found")),
                ),
            ),
        }
    }

    async fn call(
        self: &Arc<Self>,
        req: &Request<'_>,
        caller: &Caller<'_>,
        id: Id,
        scope: Scope<'_>,
        params: Value,
    ) -> Answer {
        let (session, modern) = (caller.session, caller.modern);
        let started = Instant::now();
        let Some(name) = params.get("name").and_then(Value::as_str).map(str::to_owned) else {
            return Answer::json(200, jsonrpc::error_bytes(Some(&id), &RpcError::invalid_params("`name` is required")));
        };
        let record = |server: &str, tool: &str, status, response_bytes| CallRecord {
            key: req.key.map(str::to_owned),
            server: server.to_owned(),
            tool: tool.to_owned(),
            status,
            latency: started.elapsed(),
            request_bytes: req.body.len(),
            response_bytes,
        };
        let target = match scope {
            Scope::All => self.hub.resolve(&name).await,
            Scope::Server(server) => match self.hub.tools_of(server).await {
                Ok(tools) => tools.iter().any(|t| t.name == name).then(|| (server.to_owned(), name.clone())),
                Err(e) => return upstream_failure(&id, &e),
            },
            Scope::Code => None,
        };
        let Some((server, tool)) = target else {
            (req.on_call)(record("", &name, "unknown_tool", 0));
            let e = RpcError::invalid_params(format!("unknown tool `{name}`"));
            return Answer::json(200, jsonrpc::error_bytes(Some(&id), &e));
        };
        if !(req.permits)(&server, &tool) {
            (req.on_call)(record(&server, &tool, "forbidden", 0));
            let e = RpcError::invalid_params(format!("tool `{name}` is not permitted for this key"));
            return refused(&id, e, "forbidden");
        }
        let arguments = params.get("arguments").unwrap_or(&Value::Null);
        if let Err((rule, message)) = (req.policy)(&server, &tool, arguments) {
            (req.on_call)(record(&server, &tool, "policy_denied", 0));
            let mut e = RpcError::invalid_params(format!("{message} (policy `{rule}`)"));
            e.data = Some(json!({"reason": "policy_denied", "policy": rule}));
            return Answer::json(200, jsonrpc::error_bytes(Some(&id), &e));
        }
        if let Err(message) = (req.admit)() {
            (req.on_call)(record(&server, &tool, "rate_limited", 0));
            return refused(&id, RpcError::new(RATE_LIMITED, message), "rate_limited");
        }
        let Some(upstream) = self.hub.upstream(&server).cloned() else { return Answer::empty(404) };
        let upstream_id = upstream.next_id();
        // The session the call goes to: what the client offered, when it can be asked anything.
        let offers = if req.accepts_sse || caller.modern { caller.caps } else { ClientCaps::default() };
        let client = caller.client();
        let (cancel_tx, cancel_rx) = oneshot::channel();
        let flight_key = (session.to_owned(), id.as_str().to_owned());
        crate::hub_lock(&self.in_flight).insert(
            flight_key.clone(),
            InFlight { upstream: upstream.clone(), upstream_id, offers, client, cancel: cancel_tx },
        );
        let wants_progress = params.pointer("/_meta/progressToken").is_some();
        let (relayed_for, aggregated) = (server.clone(), matches!(scope, Scope::All));
        let call = Call {
            modern,
            front: self.clone(),
            server,
            tool,
            id,
            upstream_id,
            flight_key,
            params,
            on_call: req.on_call.clone(),
            key: req.key.map(str::to_owned),
            tool_guard: req.tool_guard.clone(),
            request_bytes: req.body.len(),
            started,
        };
        // Progress asked for: always a stream. Otherwise JSON, unless the server sends
        // something (a log message, a request for the client) before its answer.
        let answer_id = call.id.clone();
        let work = move |relay: Option<Relay>| call.finish(relay, cancel_rx);
        self.answer_relaying(req, caller, &answer_id, (&relayed_for, aggregated), wants_progress, work).await
    }

    /// `logging/setLevel` on the aggregated endpoint: every server is told (those without
    /// logging refuse, which changes nothing), in the sessions this client's calls go to.
    async fn set_level_everywhere(&self, params: Value, caps: ClientCaps, client: Option<Arc<str>>) {
        let mut asked = tokio::task::JoinSet::new();
        for name in self.hub.server_names() {
            if let Some(upstream) = self.hub.upstream(name).cloned() {
                let params = params.clone();
                // A relay nobody reads: it only names the session; the server asks nothing here.
                let relay = Relay::new(mpsc::channel(1).0, caps).for_client(client.clone());
                asked.spawn(async move {
                    let _ = upstream.request(upstream.next_id(), "logging/setLevel", params, Some(relay)).await;
                });
            }
        }
        while asked.join_next().await.is_some() {}
    }

    /// A `tools/call` of Code Mode: permitted as the server `code`, admitted under the key's rate limit,
    /// recorded like any tool call; the program's own calls are checked and recorded one by one.
    async fn code_call(&self, req: &Request<'_>, caller: &Caller<'_>, id: Id, params: Value) -> Answer {
        let modern = caller.modern;
        use crate::code_mode::SERVER;
        let started = Instant::now();
        let Some(code_mode) = &self.code_mode else { return Answer::empty(404) };
        let Some(name) = params.get("name").and_then(Value::as_str).map(str::to_owned) else {
            return Answer::json(200, jsonrpc::error_bytes(Some(&id), &RpcError::invalid_params("`name` is required")));
        };
        let report = |tool: &str, status, response_bytes| {
            (req.on_call)(CallRecord {
                key: req.key.map(str::to_owned),
                server: SERVER.to_owned(),
                tool: tool.to_owned(),
                status,
                latency: started.elapsed(),
                request_bytes: req.body.len(),
                response_bytes,
            })
        };
        // Before anything is recorded under it: a made-up name must not become a metric label.
        if !crate::code_mode::TOOLS.contains(&name.as_str()) {
            report(&name, "unknown_tool", 0);
            let e =
                RpcError::invalid_params(format!("unknown tool `{name}`: use {}", crate::code_mode::TOOLS.join(", ")));
            return Answer::json(200, jsonrpc::error_bytes(Some(&id), &e));
        }
        if !(req.permits)(SERVER, &name) {
            report(&name, "forbidden", 0);
            let e = RpcError::invalid_params(format!("Code Mode (`{SERVER}__{name}`) is not permitted for this key"));
            return refused(&id, e, "forbidden");
        }
        if let Err(message) = (req.admit)() {
            report(&name, "rate_limited", 0);
            return refused(&id, RpcError::new(RATE_LIMITED, message), "rate_limited");
        }
        let call = crate::code_mode::CodeCall {
            hub: self.hub.clone(),
            permits: req.permits.clone(),
            admit: req.admit.clone(),
            policy: req.policy.clone(),
            on_call: req.on_call.clone(),
            key: req.key.map(str::to_owned),
            tool_guard: req.tool_guard.clone(),
        };
        let args = params.get("arguments").cloned().unwrap_or_else(|| json!({}));
        match call.run(code_mode, &name, &args).await {
            Ok((mut result, status)) => {
                if modern {
                    result["resultType"] = json!("complete");
                }
                let bytes = jsonrpc::result_value(&id, &result);
                report(&name, status, bytes.len());
                Answer::json(200, bytes)
            }
            Err(message) => {
                report(&name, "invalid", 0);
                Answer::json(200, jsonrpc::error_bytes(Some(&id), &RpcError::invalid_params(message)))
            }
        }
    }

    /// `notifications/cancelled` from the client: stop waiting and tell the upstream.
    async fn cancel(&self, session: &str, params: Option<&Value>) {
        let Some(request_id) = params.and_then(|p| p.get("requestId")) else { return };
        let key = (session.to_owned(), request_id.to_string());
        let flight = crate::hub_lock(&self.in_flight).remove(&key);
        if let Some(f) = flight {
            let _ = f.cancel.send(());
            let reason = params.and_then(|p| p.get("reason")).cloned().unwrap_or(json!("cancelled by the client"));
            if let Err(e) = f
                .upstream
                .notify(
                    "notifications/cancelled",
                    json!({"requestId": f.upstream_id, "reason": reason}),
                    f.offers,
                    f.client,
                )
                .await
            {
                tracing::debug!(error = %e, "could not forward a cancellation upstream");
            }
        }
    }
}

/// What a GET stream in scope `only` (one server; None: every server, `aggregated`) passes on of
/// a server's notification that named no call: everything of its own server; on the aggregated
/// endpoint only log messages, their `logger` naming the server (resources and prompts are not
/// aggregated).
fn unrelated_note(server: &str, note: &Value, only: Option<&str>, aggregated: bool) -> Option<Vec<u8>> {
    if only.is_some_and(|o| o != server) {
        return None;
    }
    if !aggregated {
        return serde_json::to_vec(note).ok();
    }
    if note.get("method").and_then(Value::as_str) != Some("notifications/message") {
        return None;
    }
    let mut note = note.clone();
    crate::relay::prefix_logger(&mut note, server);
    serde_json::to_vec(&note).ok()
}

/// A `tools/list` result: one page, and the 2026-07-28 fields older clients ignore (the list
/// depends on the caller's key: private, and not to be reused).
fn tool_list(tools: Vec<Value>) -> Value {
    tool_list_of(Value::Array(tools))
}

fn tool_list_of(tools: Value) -> Value {
    json!({"tools": tools, "resultType": "complete", "ttlMs": 0, "cacheScope": "private"})
}

/// A call refused before it reached an upstream: `error`, with `data.reason` saying why.
fn refused(id: &Id, mut error: RpcError, reason: &str) -> Answer {
    error.data = Some(json!({"reason": reason}));
    Answer::json(200, jsonrpc::error_bytes(Some(id), &error))
}

/// The protocol version a stateless-revision request names in its `_meta`.
fn meta_version(message: &Message) -> Option<String> {
    let params = match message {
        Message::Request { params, .. } | Message::Notification { params, .. } => params.as_ref()?,
        Message::Response { .. } => return None,
    };
    params.get("_meta")?.get(version::META_KEY)?.as_str().map(str::to_owned)
}

fn supported_versions() -> Vec<&'static str> {
    std::iter::once(version::STATELESS).chain(version::SESSION).collect()
}

/// Methods of one server that pass through unchanged on `/mcp/{server}`.
fn passed_through(method: &str) -> bool {
    matches!(
        method,
        "resources/list"
            | "logging/setLevel"
            | "resources/templates/list"
            | "resources/read"
            | "resources/subscribe"
            | "resources/unsubscribe"
            | "prompts/list"
            | "prompts/get"
            | "completion/complete"
    )
}

fn upstream_failure(id: &Id, e: &UpstreamError) -> Answer {
    Answer::json(200, upstream_failure_bytes(id, e))
}

/// An empty result (`logging/setLevel`'s).
fn empty_result() -> Box<RawValue> {
    RawValue::from_string("{}".to_owned()).unwrap_or_else(|_| jsonrpc::null())
}

fn upstream_failure_bytes(id: &Id, e: &UpstreamError) -> Vec<u8> {
    let error = match e {
        UpstreamError::Rpc(rpc) => rpc.clone(),
        UpstreamError::Blocked(why) => RpcError::invalid_params(format!("blocked by {why}")),
        other => {
            tracing::warn!(error = %other, "MCP upstream failed");
            RpcError::new(jsonrpc::INTERNAL_ERROR, format!("the upstream MCP server failed ({})", other.kind()))
        }
    };
    jsonrpc::error_bytes(Some(id), &error)
}

/// One tool call on its way upstream.
struct Call {
    /// A stateless-revision call: its result must carry `resultType`.
    modern: bool,
    front: Arc<Front>,
    server: String,
    tool: String,
    id: Id,
    upstream_id: u64,
    flight_key: (String, String),
    params: Value,
    on_call: OnCall,
    key: Option<String>,
    tool_guard: Option<SharedToolGuard>,
    request_bytes: usize,
    started: Instant,
}

impl Call {
    /// The answer's bytes, or None when the call was cancelled. Reports the call either way.
    async fn finish(self, relay: Option<Relay>, cancel: oneshot::Receiver<()>) -> Option<Vec<u8>> {
        let mut guard = FlightGuard {
            front: self.front.clone(),
            key: self.flight_key.clone(),
            upstream_id: self.upstream_id,
            offers: relay.as_ref().map_or_else(ClientCaps::default, |r| r.offers),
            client: relay.as_ref().and_then(|r| r.client.clone()),
            server: self.server.clone(),
            done: false,
        };
        let outcome = tokio::select! {
            r = self.front.hub.call(&self.server, self.upstream_id, &self.tool, self.params, relay, self.tool_guard.as_ref()) => Some(r),
            _ = cancel => None,
        };
        guard.done = true;
        drop(guard);
        let (bytes, status) = match outcome {
            None => (None, "cancelled"),
            Some(Ok(result)) => (
                Some(jsonrpc::result_bytes_for(&self.id, &result, self.modern)),
                if tool_error(&result) { "tool_error" } else { "ok" },
            ),
            Some(Err(e)) => (Some(upstream_failure_bytes(&self.id, &e)), e.kind()),
        };
        (self.on_call)(CallRecord {
            key: self.key,
            server: self.server,
            tool: self.tool,
            status,
            latency: self.started.elapsed(),
            request_bytes: self.request_bytes,
            response_bytes: bytes.as_ref().map_or(0, Vec::len),
        });
        bytes
    }
}

/// Whether a tool result says `"isError": true` (read without parsing the whole result).
fn tool_error(result: &RawValue) -> bool {
    let text = result.get().as_bytes();
    memchr::memmem::find(text, b"\"isError\"").is_some()
        && serde_json::from_str::<Value>(result.get()).ok().and_then(|v| v.get("isError").and_then(Value::as_bool))
            == Some(true)
}

/// Removes a call from the in-flight table however it ends; a call dropped before it finished
/// (the client went away) is cancelled upstream too.
struct FlightGuard {
    front: Arc<Front>,
    key: (String, String),
    upstream_id: u64,
    offers: ClientCaps,
    client: Option<Arc<str>>,
    server: String,
    done: bool,
}

impl Drop for FlightGuard {
    fn drop(&mut self) {
        let removed = crate::hub_lock(&self.front.in_flight).remove(&self.key);
        if !self.done && removed.is_some() {
            // No runtime (it is shutting down): the upstream is going away with it anyway.
            let runtime = tokio::runtime::Handle::try_current();
            if let (Some(upstream), Ok(runtime)) = (self.front.hub.upstream(&self.server).cloned(), runtime) {
                let (id, offers, client) = (self.upstream_id, self.offers, self.client.take());
                runtime.spawn(async move {
                    let params = json!({"requestId": id, "reason": "the client went away"});
                    let _ = upstream.notify("notifications/cancelled", params, offers, client).await;
                });
            }
        }
    }
}
