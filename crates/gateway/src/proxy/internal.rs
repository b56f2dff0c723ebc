//! Requests the gateway makes itself, through the whole pipeline: a model guard's call to its
//! classifier (`guard/model.rs`) and a batch's lines (`batch/runner.rs`). Each is routed, failed
//! over, admitted and metered like a client's; the answer comes back whole.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use http_body_util::BodyExt;

use super::{forward_body, Inbound};
use crate::app::App;
use crate::auth::Identity;
use crate::endpoint::Endpoint;

/// The largest answer an internal call reads.
const MAX_ANSWER_BYTES: usize = 16 << 20;

/// One request of the gateway's own.
pub struct InternalCall<'a> {
    pub endpoint: Endpoint,
    /// Who it is made as: the master key for a guard, a batch's creator for its lines.
    pub identity: Identity,
    pub body: Bytes,
    pub deadline: Instant,
    pub request_id: HeaderValue,
    pub guard_call: Option<&'a str>,
    pub batch: Option<&'a str>,
    /// An experiment's own call (a shadow, a judge): the experiment and the record's variant.
    pub experiment: Option<(&'a str, &'static str)>,
}

/// Send `call`: the answer's status and body, or an error's own status and body (in OpenAI's
/// error shape) when there was no answer.
pub async fn call_internal(app: &Arc<App>, call: InternalCall<'_>) -> (StatusCode, Bytes) {
    let mut headers = HeaderMap::new();
    headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let started = Instant::now();
    let path = call.endpoint.route().unwrap_or("/");
    let inbound = Inbound {
        endpoint: call.endpoint,
        path,
        headers: &headers,
        request_id: &call.request_id,
        started,
        deadline: call.deadline.min(started + app.config.timeouts.request),
        guard_call: call.guard_call,
        batch: call.batch,
        experiment: call.experiment,
        peer: None,
    };
    let answered = Box::pin(forward_body(app, &inbound, &call.identity, call.body, &mut None)).await;
    let status = answered.as_ref().map_or_else(|e| e.status(), |r| r.status());
    app.metrics.count_request(call.endpoint, status.as_u16());
    match answered {
        Ok(resp) => match http_body_util::Limited::new(resp.into_body(), MAX_ANSWER_BYTES).collect().await {
            Ok(read) => (status, read.to_bytes()),
            Err(e) => {
                let e = crate::error::GatewayError::bad_request(format!("the answer could not be read: {e}"), None);
                (StatusCode::BAD_GATEWAY, e.to_json())
            }
        },
        Err(e) => (status, e.to_json()),
    }
}

/// A model guard's call to its classifier (Chat Completions or moderations) as the gateway itself
/// (no key, so no key's limits; no guards of its own), its usage record marked with the guard's
/// name. The answer's body, or why there is none.
pub async fn call_for_guard(
    app: &Arc<App>,
    guard: &str,
    endpoint: Endpoint,
    body: Bytes,
    deadline: Instant,
) -> Result<Bytes, String> {
    let call = InternalCall {
        endpoint,
        identity: Identity::from(crate::auth::Principal::Master),
        body,
        deadline,
        request_id: crate::http::request_id::generate(),
        guard_call: Some(guard),
        batch: None,
        experiment: None,
    };
    match call_internal(app, call).await {
        (status, body) if status.is_success() => Ok(body),
        (status, _) => Err(format!("the classifier answered {status}")),
    }
}
