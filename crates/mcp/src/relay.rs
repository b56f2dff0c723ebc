//! What an upstream sends while it answers a client's request, relayed to that client: its
//! notifications as they are (a log message's `logger` prefixed with the server on the
//! aggregated `/mcp`), and its own requests (sampling, elicitation, roots, ping) under ids of
//! the gateway's, whose answers the client POSTs back (`Outbound::answer`) and the upstream gets
//! under its own id. A request the client did not offer at `initialize`, or one the protocol era
//! cannot carry, is refused at once: the server never waits on a client that cannot answer.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use crate::jsonrpc::{self, Id, RpcError};
use crate::upstream::Inbound;

/// What a client offered at `initialize` that a server may ask of it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ClientCaps {
    pub sampling: bool,
    pub elicitation: bool,
    pub roots: bool,
}

impl ClientCaps {
    /// Everything a client can offer (what a stdio server, one session for every client, is told).
    pub const ALL: ClientCaps = ClientCaps { sampling: true, elicitation: true, roots: true };

    /// From `initialize`'s `params.capabilities`.
    pub fn offered(params: Option<&Value>) -> ClientCaps {
        ClientCaps::of(params.and_then(|p| p.get("capabilities")))
    }

    /// From a capabilities object.
    fn of(caps: Option<&Value>) -> ClientCaps {
        let has = |name: &str| caps.and_then(|c| c.get(name)).is_some_and(|v| !v.is_null());
        ClientCaps { sampling: has("sampling"), elicitation: has("elicitation"), roots: has("roots") }
    }

    /// As carried in the session id (`session.rs`).
    pub fn flags(self) -> String {
        [(self.sampling, 's'), (self.elicitation, 'e'), (self.roots, 'r')]
            .into_iter()
            .filter_map(|(on, c)| on.then_some(c))
            .collect()
    }

    pub fn from_flags(flags: &str) -> ClientCaps {
        ClientCaps { sampling: flags.contains('s'), elicitation: flags.contains('e'), roots: flags.contains('r') }
    }

    /// Whether the client can take a server's `method`; `ping` needs no capability.
    fn allows(self, method: &str) -> bool {
        match method {
            "ping" => true,
            "sampling/createMessage" => self.sampling,
            "elicitation/create" => self.elicitation,
            "roots/list" => self.roots,
            _ => false,
        }
    }
}

/// A server's request waiting for the client's answer.
struct Asked {
    session: String,
    server: String,
    method: &'static str,
    reply: oneshot::Sender<Result<Value, RpcError>>,
}

/// The server requests relayed to clients and not answered yet, by the id the client saw, and
/// how many each server made, by method and outcome (for `/metrics`).
#[derive(Default)]
pub struct Outbound {
    next: AtomicU64,
    waiting: Mutex<HashMap<String, Asked>>,
    counts: Mutex<RequestCounts>,
}

/// (server, method, outcome) → requests. Methods other than the four a client answers count as
/// `other`, so labels stay bounded; outcomes are `relayed` (sent to the client), `answered` (its
/// answer went back), `refused` (answered for it at once) and `unanswered` (the call ended first:
/// it timed out, or its client went away).
pub type RequestCounts = std::collections::BTreeMap<(String, &'static str, &'static str), u64>;

fn method_label(method: &str) -> &'static str {
    match method {
        "sampling/createMessage" => "sampling/createMessage",
        "elicitation/create" => "elicitation/create",
        "roots/list" => "roots/list",
        "ping" => "ping",
        _ => "other",
    }
}

/// Server requests waiting for clients, past which more are refused (each is one call's).
const MAX_WAITING: usize = 10_000;

impl Outbound {
    /// Ids from now on carry `tag` (a fleet's instance tag) above `fleet::TAG_SHIFT`.
    pub(crate) fn tag_ids(&self, tag: u32) {
        self.next.store(u64::from(tag) << crate::fleet::TAG_SHIFT, Relaxed);
    }

    fn ask(
        &self,
        session: &str,
        server: &str,
        method: &str,
        reply: oneshot::Sender<Result<Value, RpcError>>,
    ) -> Option<u64> {
        let method = method_label(method);
        let mut waiting = crate::hub_lock(&self.waiting);
        if waiting.len() >= MAX_WAITING {
            drop(waiting);
            let _ =
                reply.send(Err(RpcError::new(jsonrpc::INTERNAL_ERROR, "too many server requests wait for clients")));
            self.count(server, method, "refused");
            return None;
        }
        let id = self.next.fetch_add(1, Relaxed) + 1;
        waiting.insert(id.to_string(), Asked { session: session.to_owned(), server: server.to_owned(), method, reply });
        drop(waiting);
        self.count(server, method, "relayed");
        Some(id)
    }

    fn count(&self, server: &str, method: &'static str, outcome: &'static str) {
        *crate::hub_lock(&self.counts).entry((server.to_owned(), method, outcome)).or_default() += 1;
    }

    /// Every server request counted so far.
    pub fn counts(&self) -> RequestCounts {
        crate::hub_lock(&self.counts).clone()
    }

    /// The client's answer to request `id`: true when it was one of ours for this session.
    pub fn answer(&self, session: &str, id: &Id, outcome: Result<Box<RawValue>, RpcError>) -> bool {
        let mut waiting = crate::hub_lock(&self.waiting);
        if waiting.get(id.as_str()).is_none_or(|a| a.session != session) {
            return false;
        }
        let Some(asked) = waiting.remove(id.as_str()) else { return false };
        drop(waiting);
        let outcome = outcome.map(|raw| serde_json::from_str(raw.get()).unwrap_or(Value::Null));
        self.count(&asked.server, asked.method, "answered");
        asked.reply.send(outcome).is_ok()
    }

    /// The relay is over: requests still waiting were never answered (counted `unanswered`).
    fn forget(&self, ids: &[u64]) {
        let mut waiting = crate::hub_lock(&self.waiting);
        let unanswered: Vec<Asked> = ids.iter().filter_map(|id| waiting.remove(&id.to_string())).collect();
        drop(waiting);
        for asked in unanswered {
            self.count(&asked.server, asked.method, "unanswered");
        }
    }
}

/// How one request's relayed messages reach its client.
pub struct ToClient {
    pub outbound: Arc<Outbound>,
    pub session: String,
    /// The server whose messages these are (metric labels).
    pub server: String,
    pub caps: ClientCaps,
    /// On the aggregated `/mcp`: log messages' `logger` is prefixed with `server`.
    pub aggregated: bool,
    /// A stateless-revision request: only progress is streamed (log messages need a `logLevel`
    /// in the request's `_meta`, which the gateway does not pass on yet); server requests become
    /// `input_required` results (`front/input_required.rs`).
    pub stateless: bool,
    /// Requests asked under this relay: forgotten when it ends (their servers get an error).
    asked: Vec<u64>,
}

impl ToClient {
    pub fn new(outbound: Arc<Outbound>, session: &str, server: &str, caps: ClientCaps) -> ToClient {
        ToClient {
            outbound,
            session: session.to_owned(),
            server: server.to_owned(),
            caps,
            aggregated: false,
            stateless: false,
            asked: Vec::new(),
        }
    }

    /// What to pass the client for `inbound`, if anything.
    pub fn event(&mut self, inbound: Inbound) -> Option<Out> {
        match inbound {
            Inbound::Note(mut note) => {
                let method = note.get("method").and_then(Value::as_str);
                if self.stateless && method != Some("notifications/progress") {
                    return None;
                }
                if self.aggregated {
                    prefix_logger(&mut note, &self.server);
                }
                serde_json::to_vec(&note).ok().map(Out::Event)
            }
            Inbound::Request { method, params, reply } => {
                // The stateless revision has no ping (the gateway answers it); a capability the
                // client did not offer is refused.
                let refusal = if self.stateless && method == "ping" {
                    let _ = reply.send(Ok(json!({})));
                    return None;
                } else {
                    (!self.caps.allows(&method))
                        .then(|| format!("the client did not offer the capability `{method}` needs"))
                };
                if let Some(message) = refusal {
                    let _ = reply.send(Err(RpcError::new(jsonrpc::METHOD_NOT_FOUND, message)));
                    self.outbound.count(&self.server, method_label(&method), "refused");
                    return None;
                }
                let id = self.outbound.ask(&self.session, &self.server, &method, reply)?;
                self.asked.push(id);
                Some(Out::Ask(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})))
            }
        }
    }
}

impl Drop for ToClient {
    fn drop(&mut self) {
        self.outbound.forget(&self.asked);
    }
}

/// `notifications/message` from one of several servers: its `logger` names the server.
pub(crate) fn prefix_logger(note: &mut Value, server: &str) {
    if note.get("method").and_then(Value::as_str) != Some("notifications/message") {
        return;
    }
    let Some(params) = note.get_mut("params").and_then(Value::as_object_mut) else { return };
    let logger = match params.get("logger").and_then(Value::as_str) {
        Some(logger) => format!("{server}/{logger}"),
        None => server.to_owned(),
    };
    params.insert("logger".into(), Value::String(logger));
}

/// One message of a relayed answer: a notification, a request of the server's for the client
/// (under the gateway's id), or the answer itself (None when the call was cancelled).
pub enum Out {
    Event(Vec<u8>),
    Ask(Value),
    Answer(Option<Vec<u8>>),
}

impl ClientCaps {
    /// A stateless-revision request's capabilities (`_meta["io.modelcontextprotocol/clientCapabilities"]`).
    pub fn in_meta(params: &Value) -> ClientCaps {
        ClientCaps::of(params.get("_meta").and_then(|m| m.get(crate::version::CAPABILITIES_KEY)))
    }
}

/// Run `work` (an upstream exchange whose messages arrive on `relayed`) and pass what it sends
/// to `out`, its answer last. Ends when the client is gone (`out` closed), dropping `work`, which
/// cancels it upstream.
pub async fn pump(
    work: impl std::future::Future<Output = Option<Vec<u8>>>,
    mut relayed: mpsc::Receiver<Inbound>,
    mut to_client: ToClient,
    out: mpsc::Sender<Out>,
) {
    tokio::pin!(work);
    loop {
        tokio::select! {
            answer = &mut work => {
                while let Ok(inbound) = relayed.try_recv() {
                    if let Some(message) = to_client.event(inbound) {
                        let _ = out.send(message).await;
                    }
                }
                let _ = out.send(Out::Answer(answer)).await;
                return;
            }
            Some(inbound) = relayed.recv() => {
                if let Some(message) = to_client.event(inbound) {
                    if out.send(message).await.is_err() {
                        return;
                    }
                }
            }
            _ = out.closed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_round_trip_through_flags_and_gate_requests() {
        let caps =
            ClientCaps::offered(Some(&json!({"capabilities": {"sampling": {}, "roots": {"listChanged": true}}})));
        assert_eq!(caps.flags(), "sr");
        assert_eq!(ClientCaps::from_flags("sr"), caps);
        assert!(caps.allows("sampling/createMessage") && caps.allows("roots/list") && caps.allows("ping"));
        assert!(!caps.allows("elicitation/create") && !caps.allows("tools/call"));
        assert_eq!(ClientCaps::offered(None).flags(), "");
    }

    #[test]
    fn a_request_gets_a_gateway_id_and_only_its_session_may_answer_it() {
        let outbound = Arc::new(Outbound::default());
        let mut to =
            ToClient::new(outbound.clone(), "s-a", "docs", ClientCaps { sampling: true, ..Default::default() });
        let (reply, answer) = oneshot::channel();
        let event = to.event(Inbound::Request { method: "sampling/createMessage".into(), params: json!({}), reply });
        let Some(Out::Ask(sent)) = event else { panic!("a request for the client") };
        let id = Id::number(sent["id"].as_u64().unwrap());
        let result = || Ok(RawValue::from_string("{\"role\":\"assistant\"}".into()).unwrap());
        assert!(!outbound.answer("s-b", &id, result()), "another session cannot answer it");
        assert!(outbound.answer("s-a", &id, result()));
        assert_eq!(answer.blocking_recv().unwrap().unwrap()["role"], "assistant");
        let (reply, refused) = oneshot::channel();
        assert!(to.event(Inbound::Request { method: "elicitation/create".into(), params: json!({}), reply }).is_none());
        assert!(refused.blocking_recv().unwrap().is_err(), "not offered: refused at once");
        let counts = outbound.counts();
        assert_eq!(counts[&("docs".to_owned(), "sampling/createMessage", "relayed")], 1);
        assert_eq!(counts[&("docs".to_owned(), "sampling/createMessage", "answered")], 1);
        assert_eq!(counts[&("docs".to_owned(), "elicitation/create", "refused")], 1);
    }

    #[test]
    fn log_messages_name_their_server_on_the_aggregated_endpoint() {
        let mut note =
            json!({"method": "notifications/message", "params": {"level": "info", "logger": "db", "data": 1}});
        prefix_logger(&mut note, "files");
        assert_eq!(note["params"]["logger"], "files/db");
    }
}
