//! Server requests in the stateless revision (2026-07-28, SEP-2322): that revision has no
//! server-to-client requests on a stream; a `tools/call`, `prompts/get` or `resources/read` whose
//! server asks the client something (sampling, elicitation, roots) answers with
//! `resultType: "input_required"`, the question under `inputRequests` and an opaque
//! `requestState`. The upstream call stays parked here, waiting; the client retries the request
//! with `inputResponses` and the `requestState`, its answers go to the server, and the parked call
//! goes on to its answer (or to the next question). A parked call whose client never comes back
//! is dropped after `PARKED_TTL`, which cancels it upstream. The state lives in the instance that
//! parked the call; in a fleet its `requestState` names that instance, and a retry that reaches
//! another one is forwarded there (`fleet.rs`), its result coming back the same way.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::{Answer, Body, Front, Request};
use crate::jsonrpc::{self, Id, RpcError};
use crate::relay::Out;
use crate::upstream::NOTIFICATION_BACKLOG;

/// How long a parked call waits for its client's retry.
const PARKED_TTL: Duration = Duration::from_secs(600);
/// Parked calls past which a new question is refused instead.
const MAX_PARKED: usize = 10_000;

/// Whose call it is: its flight key (the session its questions are registered under) and key.
pub(super) struct Waiting {
    pub flight: String,
    pub key: Option<String>,
}

/// A call waiting for its client's answers.
pub(super) struct Parked {
    answers: mpsc::Receiver<Out>,
    waiting: Waiting,
    /// The gateway ids of the questions asked, to answer each (an error when left out).
    asked: Vec<String>,
    at: Instant,
}

impl Front {
    /// The answer to a stateless request whose messages arrive on `answers`: JSON (its answer, or
    /// `input_required` when the server asks something), or with `stream` a stream of progress
    /// ending in either. `resumed`: the request is a retry, whose id the answer must carry.
    pub(super) async fn stateless_answer(
        self: &Arc<Self>,
        mut answers: mpsc::Receiver<Out>,
        id: Id,
        waiting: Waiting,
        stream: bool,
        resumed: bool,
    ) -> Answer {
        loop {
            match answers.recv().await {
                None => return Answer::json(200, Vec::new()),
                Some(Out::Answer(bytes)) => return Answer::json(200, with_id(bytes, &id, resumed)),
                Some(Out::Ask(ask)) => return Answer::json(200, self.park(answers, ask, &id, waiting)),
                Some(Out::Event(bytes)) if stream => {
                    let (events, rx) = mpsc::channel(NOTIFICATION_BACKLOG);
                    let front = self.clone();
                    tokio::spawn(async move {
                        let mut next = Some(Out::Event(bytes));
                        while let Some(out) = next {
                            let bytes = match out {
                                Out::Event(bytes) => bytes,
                                Out::Answer(bytes) => {
                                    let _ = events.send(with_id(bytes, &id, resumed)).await;
                                    return;
                                }
                                Out::Ask(ask) => {
                                    let _ = events.send(front.park(answers, ask, &id, waiting)).await;
                                    return;
                                }
                            };
                            if events.send(bytes).await.is_err() {
                                return;
                            }
                            next = answers.recv().await;
                        }
                    });
                    return Answer { status: 200, session: None, body: Body::Events(rx) };
                }
                Some(Out::Event(_)) => {}
            }
        }
    }

    /// Keep the call waiting and tell the client what the server asks.
    fn park(&self, answers: mpsc::Receiver<Out>, ask: Value, id: &Id, waiting: Waiting) -> Vec<u8> {
        let asked = ask["id"].to_string();
        let mut parked = crate::hub_lock(&self.parked);
        parked.retain(|_, p| p.at.elapsed() < PARKED_TTL);
        if parked.len() >= MAX_PARKED {
            let e = RpcError::new(jsonrpc::INTERNAL_ERROR, "too many calls wait for their clients' input; retry later");
            return jsonrpc::error_bytes(Some(id), &e);
        }
        let token = match self.fleet.own_tag() {
            Some(tag) => format!("{tag:05x}.{}", request_state()),
            None => request_state(),
        };
        let question = json!({"method": ask["method"], "params": ask["params"]});
        parked.insert(token.clone(), Parked { answers, waiting, asked: vec![asked.clone()], at: Instant::now() });
        let result = json!({"resultType": "input_required", "inputRequests": {asked: question}, "requestState": token});
        jsonrpc::result_value(id, &result)
    }

    /// A retry carrying `requestState`: the client's `inputResponses` go to the server, and the
    /// parked call goes on — here, or on the instance of the fleet that parked it.
    pub(super) async fn resume(self: &Arc<Self>, req: &Request<'_>, id: Id, params: &Value) -> Answer {
        let token = params.get("requestState").and_then(Value::as_str).unwrap_or_default();
        let here = crate::hub_lock(&self.parked).contains_key(token);
        if let Some(tag) = self.fleet.foreign(crate::fleet::tag_of_state(token)).filter(|_| !here) {
            return match self.fleet.forward_resume(tag, req.key, &id, params).await {
                Some(answer) => Answer::json(200, serde_json::to_vec(&answer).unwrap_or_default()),
                None => Answer::json(200, jsonrpc::error_bytes(Some(&id), &unknown_state())),
            };
        }
        self.resume_here(req.key, req.accepts_sse, id, params).await
    }

    /// A retry of a call parked on this instance, by the caller with `key`.
    pub(super) async fn resume_here(self: &Arc<Self>, key: Option<&str>, sse: bool, id: Id, params: &Value) -> Answer {
        let token = params.get("requestState").and_then(Value::as_str).unwrap_or_default();
        let parked = crate::hub_lock(&self.parked).remove(token);
        let Some(parked) = parked.filter(|p| p.waiting.key.as_deref() == key && p.at.elapsed() < PARKED_TTL) else {
            return Answer::json(200, jsonrpc::error_bytes(Some(&id), &unknown_state()));
        };
        let responses = params.get("inputResponses").and_then(Value::as_object);
        for asked in &parked.asked {
            let outcome = match responses.and_then(|r| r.get(asked)) {
                Some(response) => serde_json::value::to_raw_value(response)
                    .map_err(|e| RpcError::new(jsonrpc::INTERNAL_ERROR, e.to_string())),
                None => Err(RpcError::invalid_params("the client sent no response to this request")),
            };
            let gateway_id = Id::number(asked.parse().unwrap_or_default());
            self.outbound.answer(&parked.waiting.flight, &gateway_id, outcome);
        }
        let stream = sse && params.pointer("/_meta/progressToken").is_some();
        self.stateless_answer(parked.answers, id, parked.waiting, stream, true).await
    }
}

fn unknown_state() -> RpcError {
    RpcError::invalid_params("`requestState` is unknown or expired: send the request again without it")
}

/// The answer's bytes under the retry's id (the call was made under the first request's).
fn with_id(bytes: Option<Vec<u8>>, id: &Id, resumed: bool) -> Vec<u8> {
    let bytes = bytes.unwrap_or_default();
    if !resumed {
        return bytes;
    }
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(mut answer) => {
            answer["id"] = id.to_value();
            serde_json::to_vec(&answer).unwrap_or(bytes)
        }
        Err(_) => bytes,
    }
}

/// An unguessable `requestState`: 16 random bytes, hex.
fn request_state() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::getrandom(&mut bytes).is_err() {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        bytes[..8].copy_from_slice(&NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed).to_le_bytes());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
