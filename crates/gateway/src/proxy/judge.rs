//! Guard (answer, remote): webhooks and classifiers with `on: [response]` judge the whole answer
//! before any of it reaches the client. The answer, as the relay would send it (translated,
//! masked by the built-in guards, metered), is held whole — a stream to its end — then judged;
//! it goes out as the guards leave it, or the client gets the block in its API's error shape.
//! Without such a guard (the usual case) the response passes untouched: one check.

use std::time::Instant;

use bytes::Bytes;
use http::{header, Response};
use http_body_util::{BodyExt, Full, Limited};

use super::settle::Settlement;
use super::{guarded, Call, Exchange};
use crate::auth::Identity;
use crate::error::GatewayError;
use crate::http::metering::Parked;
use crate::http::GatewayBody;

/// The most of an answer held for judging: a larger one is refused rather than held.
const MAX_HELD_BYTES: usize = 64 << 20;

/// A held answer's judging, decided before the answer is relayed: its meter waits for the
/// verdict, so the record carries the answer's verdicts and, if it is refused, its status.
pub(super) struct Held {
    /// None: nothing to hold (no such guard, or the request is not metered).
    parked: Option<Parked>,
    judged: bool,
}

/// Whether a remote guard watches this answer; if so, park the meter until they have judged it.
pub(super) fn hold(call: &Call<'_>, identity: &Identity, exchange: &Exchange, settlement: &mut Settlement) -> Held {
    let judged = call.guard_call.is_none() && call.app.guards.remote_answer(&guarded(call, identity, exchange));
    let parked = settlement.meter().filter(|_| judged).map(|meter| meter.park_until_judged());
    Held { parked, judged }
}

pub(super) async fn judge_answer(
    call: &Call<'_>,
    identity: &Identity,
    exchange: &Exchange,
    held: Held,
    resp: Response<GatewayBody>,
) -> Result<Response<GatewayBody>, GatewayError> {
    if !held.judged || !resp.status().is_success() {
        return Ok(resp);
    }
    // Boxed: held answers are rare, and inline the judging would grow every request's future.
    let judged = Box::pin(judge(call, identity, exchange, resp)).await;
    let parked = held.parked.and_then(|slot| slot.lock().ok()?.take());
    if let (Some(mut meter), Err(e)) = (parked, &judged) {
        meter.refused(e.status().as_u16());
    }
    judged
}

async fn judge(
    call: &Call<'_>,
    identity: &Identity,
    exchange: &Exchange,
    resp: Response<GatewayBody>,
) -> Result<Response<GatewayBody>, GatewayError> {
    let request = guarded(call, identity, exchange);
    let (mut parts, body) = resp.into_parts();
    let left = call.deadline.saturating_duration_since(Instant::now());
    let held = match tokio::time::timeout(left, Limited::new(body, MAX_HELD_BYTES).collect()).await {
        Ok(Ok(held)) => held.to_bytes(),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "an answer held for its guards could not be read whole");
            return Err(GatewayError::BadGateway { message: "the answer could not be read whole".to_owned() });
        }
        Err(_) => return Err(GatewayError::UpstreamTimeout),
    };
    let mut answer: Bytes = held;
    call.app.guards.check_remote_answer(&request, &mut answer, call.deadline).await?;
    parts.headers.remove(header::TRANSFER_ENCODING);
    parts.headers.insert(header::CONTENT_LENGTH, answer.len().into());
    Ok(Response::from_parts(parts, GatewayBody::Left(Full::new(answer))))
}
