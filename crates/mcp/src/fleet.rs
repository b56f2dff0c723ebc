//! A fleet of gateways as one MCP endpoint (issue 59). A server's request relayed to a client
//! waits on the instance that relayed it; behind a balancer without sticky sessions the client's
//! answer — or its `input_required` retry — may reach another instance. Every instance has a tag,
//! carried in what the client must send back (a relayed request's id: `tag << 33 | n`; a
//! `requestState`: `{tag}.{secret}`), and the instance that receives a foreign one forwards it to
//! the tagged instance through the gateway's `Fleet` (Redis pub/sub): an answer one way, a retry
//! with its result coming back. Forwarding is bounded (pending retries, their wait), and counted.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::oneshot;

use crate::jsonrpc::{Id, RpcError};
use crate::upstream::BoxFuture;

/// How instances reach each other (the gateway's is Redis pub/sub, a channel per tag).
pub trait Fleet: Send + Sync {
    /// This instance's tag: 1 to `MAX_TAG`.
    fn tag(&self) -> u32;
    /// Hand `message` to the instance tagged `tag`; how many took it (0: none has that tag now).
    fn send(&self, tag: u32, message: String) -> BoxFuture<'static, Result<usize, String>>;
}

/// Ids of relayed requests carry their instance's tag above this bit (under 2^53: safe in JSON
/// numbers everywhere).
pub const TAG_SHIFT: u32 = 33;
pub const MAX_TAG: u32 = (1 << 20) - 1;

/// Retries forwarded and waiting for their result, past which more are refused.
const MAX_PENDING: usize = 1000;
/// How long a forwarded retry waits for its result (the resumed call's own work included).
pub const RESUME_WAIT: Duration = Duration::from_secs(300);

/// (kind, outcome) → forwarded messages: kinds `answer`, `resume`; outcomes `delivered`,
/// `no_holder` (no instance has the tag), `unavailable` (the fleet could not be reached),
/// `timeout`, `refused` (too many waiting), `received` (taken from another instance).
pub type ForwardCounts = BTreeMap<(&'static str, &'static str), u64>;

#[derive(Default)]
pub(crate) struct FleetState {
    fleet: OnceLock<Arc<dyn Fleet>>,
    pending: Mutex<HashMap<u64, oneshot::Sender<Value>>>,
    counts: Mutex<ForwardCounts>,
}

/// The tag in a relayed request's id, if it carries one.
pub fn tag_of_id(id: &Id) -> Option<u32> {
    let n: u64 = id.as_str().parse().ok()?;
    u32::try_from(n >> TAG_SHIFT).ok().filter(|t| *t != 0 && *t <= MAX_TAG)
}

/// The tag in a `requestState`, if it carries one.
pub fn tag_of_state(token: &str) -> Option<u32> {
    let (tag, _) = token.split_once('.')?;
    u32::from_str_radix(tag, 16).ok().filter(|t| *t != 0 && *t <= MAX_TAG)
}

impl FleetState {
    pub(crate) fn join(&self, fleet: Arc<dyn Fleet>) -> bool {
        self.fleet.set(fleet).is_ok()
    }

    pub(crate) fn own_tag(&self) -> Option<u32> {
        self.fleet.get().map(|f| f.tag())
    }

    /// `tag` names another instance of this fleet.
    pub(crate) fn foreign(&self, tag: Option<u32>) -> Option<u32> {
        let own = self.own_tag()?;
        tag.filter(|t| *t != own)
    }

    pub(crate) fn count(&self, kind: &'static str, outcome: &'static str) {
        *crate::hub_lock(&self.counts).entry((kind, outcome)).or_default() += 1;
    }

    pub(crate) fn counts(&self) -> ForwardCounts {
        crate::hub_lock(&self.counts).clone()
    }

    /// Send a client's answer on to the instance that asked.
    pub(crate) async fn forward_answer(
        &self,
        tag: u32,
        session: &str,
        id: &Id,
        outcome: &Result<Box<serde_json::value::RawValue>, RpcError>,
    ) {
        let Some(fleet) = self.fleet.get() else { return };
        let outcome = match outcome {
            Ok(result) => json!({"result": serde_json::from_str::<Value>(result.get()).unwrap_or(Value::Null)}),
            Err(e) => json!({"error": e.to_value()}),
        };
        let message = json!({"t": "answer", "session": session, "id": id.to_value(), "outcome": outcome}).to_string();
        let sent = fleet.send(tag, message).await;
        self.count("answer", sent_outcome(&sent));
    }

    /// Send a retry on to the instance holding its call, and wait for the result it gives.
    pub(crate) async fn forward_resume(&self, tag: u32, key: Option<&str>, id: &Id, params: &Value) -> Option<Value> {
        let fleet = self.fleet.get()?;
        let corr = random_u64();
        let (tx, rx) = oneshot::channel();
        {
            let mut pending = crate::hub_lock(&self.pending);
            if pending.len() >= MAX_PENDING {
                drop(pending);
                self.count("resume", "refused");
                return None;
            }
            pending.insert(corr, tx);
        }
        let message = json!({"t": "resume", "from": fleet.tag(), "corr": corr, "key": key, "id": id.to_value(), "params": params});
        let sent = fleet.send(tag, message.to_string()).await;
        let outcome = sent_outcome(&sent);
        let result = match outcome {
            "delivered" => tokio::time::timeout(RESUME_WAIT, rx).await.ok().and_then(Result::ok),
            _ => None,
        };
        crate::hub_lock(&self.pending).remove(&corr);
        self.count("resume", if outcome == "delivered" && result.is_none() { "timeout" } else { outcome });
        result
    }

    /// The result of a retry this instance forwarded.
    pub(crate) fn take_reply(&self, corr: u64, answer: Value) {
        if let Some(waiting) = crate::hub_lock(&self.pending).remove(&corr) {
            let _ = waiting.send(answer);
        }
    }

    /// Send the result of a retry forwarded here back to the instance that forwarded it.
    pub(crate) async fn reply(&self, to: u32, corr: u64, answer: Value) {
        let Some(fleet) = self.fleet.get() else { return };
        let message = json!({"t": "reply", "corr": corr, "answer": answer}).to_string();
        if let Err(e) = fleet.send(to, message).await {
            tracing::warn!(error = %e, "could not send a resumed call's result back to the instance that forwarded it");
        }
    }
}

fn sent_outcome(sent: &Result<usize, String>) -> &'static str {
    match sent {
        Ok(0) => "no_holder",
        Ok(_) => "delivered",
        Err(_) => "unavailable",
    }
}

/// An `RpcError` from its JSON form.
pub(crate) fn rpc_error(value: &Value) -> RpcError {
    let code = value.get("code").and_then(Value::as_i64).unwrap_or(crate::jsonrpc::INTERNAL_ERROR);
    let message = value.get("message").and_then(Value::as_str).unwrap_or_default();
    RpcError { code, message: message.to_owned(), data: value.get("data").cloned() }
}

pub(crate) fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    if getrandom::getrandom(&mut bytes).is_err() {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        return NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    u64::from_le_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_read_back_from_ids_and_states() {
        let id = Id::number((5u64 << TAG_SHIFT) | 42);
        assert_eq!(tag_of_id(&id), Some(5));
        assert_eq!(tag_of_id(&Id::number(42)), None, "an untagged (single-instance) id");
        assert_eq!(tag_of_state("000ff.abcdef"), Some(0xff));
        assert_eq!(tag_of_state("abcdef0123"), None);
        assert!((u64::from(MAX_TAG) << TAG_SHIFT | u64::from(u32::MAX)) < 1 << 53);
    }
}
