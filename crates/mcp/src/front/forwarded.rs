//! Messages another instance of the fleet forwarded here (`fleet.rs`): a client's answer to a
//! request this instance relayed, a retry of a call parked here (run, and its result sent back),
//! or the result of a retry this instance forwarded.

use std::sync::Arc;

use serde_json::Value;

use super::{Body, Front};
use crate::fleet::rpc_error;
use crate::jsonrpc::Id;

impl Front {
    /// Take one forwarded message.
    pub async fn deliver(self: &Arc<Self>, payload: &str) {
        let Ok(message) = serde_json::from_str::<Value>(payload) else { return };
        match message.get("t").and_then(Value::as_str) {
            Some("answer") => self.delivered_answer(&message),
            Some("resume") => self.delivered_resume(&message).await,
            Some("reply") => {
                if let Some(corr) = message.get("corr").and_then(Value::as_u64) {
                    self.fleet.take_reply(corr, message.get("answer").cloned().unwrap_or(Value::Null));
                }
            }
            _ => tracing::debug!("an unknown message from the fleet was dropped"),
        }
    }

    fn delivered_answer(&self, message: &Value) {
        let (Some(session), Some(id)) = (message.get("session").and_then(Value::as_str), id_of(message.get("id")))
        else {
            return;
        };
        let outcome = match message.pointer("/outcome/error") {
            Some(e) => Err(rpc_error(e)),
            None => {
                let result = message.pointer("/outcome/result").cloned().unwrap_or(Value::Null);
                serde_json::value::to_raw_value(&result)
                    .map_err(|e| rpc_error(&serde_json::json!({"message": e.to_string()})))
            }
        };
        let taken = self.outbound.answer(session, &id, outcome);
        self.fleet.count("answer", if taken { "received" } else { "stale" });
    }

    async fn delivered_resume(self: &Arc<Self>, message: &Value) {
        let (Some(from), Some(corr), Some(id)) = (
            message.get("from").and_then(Value::as_u64).and_then(|t| u32::try_from(t).ok()),
            message.get("corr").and_then(Value::as_u64),
            id_of(message.get("id")),
        ) else {
            return;
        };
        let params = message.get("params").cloned().unwrap_or(Value::Null);
        let key = message.get("key").and_then(Value::as_str);
        self.fleet.count("resume", "received");
        let answer = self.resume_here(key, false, id, &params).await;
        let answer = match answer.body {
            Body::Json(bytes) => serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            _ => Value::Null,
        };
        self.fleet.reply(from, corr, answer).await;
    }
}

fn id_of(value: Option<&Value>) -> Option<Id> {
    serde_json::value::to_raw_value(value?).ok().map(Id)
}
