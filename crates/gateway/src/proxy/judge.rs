//! Guard (answer, held): an answer that remote guards — webhooks and classifiers with
//! `on: [response]` — must judge whole before any of it reaches the client is held (a stream to
//! its end), then sent with its length, or refused in the client API's error shape. It is judged
//! as the relay would send it: translated, masked by the built-in guards, metered. (Built-in
//! guards on a whole answer need no hold here: `respond` reads such an answer whole and judges it
//! before the response is made.) Without a remote guard (the usual case) the response passes
//! untouched: one check.

use std::time::Instant;

use http::{header, Response};
use http_body_util::Full;

use super::respond::MAX_HELD_BYTES;
use super::settle::Settlement;
use super::{guarded, Call, Exchange};
use crate::auth::Identity;
use crate::error::GatewayError;
use crate::http::metering::Parked;
use crate::http::parse::collect_whole;
use crate::http::GatewayBody;

/// A held answer's judging, decided before the answer is relayed.
pub(super) struct Held {
    /// The meter waits for the remote guards' verdict, so the record carries the answer's
    /// verdicts and, if it is refused, its status. None: no remote guard (or not metered).
    parked: Option<Parked>,
    /// A remote guard watches this answer: it is held whole before it goes out.
    remote: bool,
}

/// Whether this answer is held whole: a remote guard watches it. The meter is parked then, until
/// the guard has judged.
pub(super) fn hold(call: &Call<'_>, identity: &Identity, exchange: &Exchange, settlement: &mut Settlement) -> Held {
    let remote = call.guard_call.is_none() && call.app.guards.remote_answer(&guarded(call, identity, exchange));
    let parked = settlement.meter().filter(|_| remote).map(|meter| meter.park_until_judged());
    Held { parked, remote }
}

pub(super) async fn judge_answer(
    call: &Call<'_>,
    identity: &Identity,
    exchange: &Exchange,
    held: Held,
    resp: Response<GatewayBody>,
) -> Result<Response<GatewayBody>, GatewayError> {
    if !held.remote || !resp.status().is_success() {
        return Ok(resp);
    }
    // Boxed: held answers are the few guarded ones, and inline the judging would grow every
    // request's future.
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
    let (mut parts, body) = resp.into_parts();
    let left = || call.deadline.saturating_duration_since(Instant::now());
    let mut answer = match collect_whole(body, MAX_HELD_BYTES, left).await {
        Ok(Ok(held)) => held,
        Ok(Err(e)) => return Err(unread(e)),
        Err(_) => return Err(GatewayError::UpstreamTimeout),
    };
    let request = guarded(call, identity, exchange);
    call.app.guards.check_remote_answer(&request, &mut answer, call.deadline).await?;
    // hyper writes the length of a body whose size is known (a `Full`'s), as it sends it.
    parts.headers.remove(header::TRANSFER_ENCODING);
    parts.headers.remove(header::CONTENT_LENGTH);
    Ok(Response::from_parts(parts, GatewayBody::Left(Full::new(answer))))
}

/// Why a held answer could not be read whole: a built-in guard blocked it on the way (a stream
/// whose API has no error event: the client's 400), or the body failed.
fn unread(error: Box<dyn std::error::Error + Send + Sync>) -> GatewayError {
    match error.downcast::<GatewayError>() {
        Ok(blocked) => *blocked,
        Err(e) => {
            tracing::warn!(error = %e, "an answer held for its guards could not be read whole");
            GatewayError::BadGateway { message: "the answer could not be read whole".to_owned() }
        }
    }
}
