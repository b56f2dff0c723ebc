//! Guard (answer, held): an answer that must be judged whole before any of it reaches the client
//! is held — a stream to its end — then sent with its length, or refused in the client API's
//! error shape. Two kinds of guard need that: webhooks and classifiers with `on: [response]`
//! (judged here, on the answer as the relay would send it: translated, masked by the built-in
//! guards, metered), and the built-in guards on a whole (not streamed) answer, which judge it as
//! it passes the relay: a block there becomes the client's 400 `content_blocked`, not a cut
//! connection. Without either (the usual case) the response passes untouched: one check.

use std::time::Instant;

use http::{header, Response};
use http_body_util::Full;

use super::settle::Settlement;
use super::{guarded, Call, Exchange};
use crate::auth::Identity;
use crate::error::GatewayError;
use crate::http::metering::Parked;
use crate::http::parse::collect_whole;
use crate::http::GatewayBody;

/// The most of an answer held for judging: a larger one is refused rather than held.
const MAX_HELD_BYTES: usize = 64 << 20;

/// A held answer's judging, decided before the answer is relayed.
pub(super) struct Held {
    /// The meter waits for the remote guards' verdict, so the record carries the answer's
    /// verdicts and, if it is refused, its status. None: no remote guard (or not metered).
    parked: Option<Parked>,
    /// A remote guard watches this answer.
    remote: bool,
    /// The answer is held whole before it goes out.
    holds: bool,
}

/// Whether this answer is held whole: a remote guard watches it, or built-in guards watch a whole
/// answer (`whole_guarded`). With a remote guard the meter is parked until it has judged.
pub(super) fn hold(
    call: &Call<'_>,
    identity: &Identity,
    exchange: &Exchange,
    settlement: &mut Settlement,
    whole_guarded: bool,
) -> Held {
    let remote = call.guard_call.is_none() && call.app.guards.remote_answer(&guarded(call, identity, exchange));
    let parked = settlement.meter().filter(|_| remote).map(|meter| meter.park_until_judged());
    Held { parked, remote, holds: remote || whole_guarded }
}

pub(super) async fn judge_answer(
    call: &Call<'_>,
    identity: &Identity,
    exchange: &Exchange,
    held: Held,
    resp: Response<GatewayBody>,
) -> Result<Response<GatewayBody>, GatewayError> {
    if !held.holds || !resp.status().is_success() {
        return Ok(resp);
    }
    // Boxed: held answers are the few guarded ones, and inline the judging would grow every
    // request's future.
    let judged = Box::pin(judge(call, identity, exchange, held.remote, resp)).await;
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
    remote: bool,
    resp: Response<GatewayBody>,
) -> Result<Response<GatewayBody>, GatewayError> {
    let (mut parts, body) = resp.into_parts();
    let left = || call.deadline.saturating_duration_since(Instant::now());
    let mut answer = match collect_whole(body, MAX_HELD_BYTES, left).await {
        Ok(Ok(held)) => held,
        Ok(Err(e)) => return Err(unread(e)),
        Err(_) => return Err(GatewayError::UpstreamTimeout),
    };
    if remote {
        let request = guarded(call, identity, exchange);
        call.app.guards.check_remote_answer(&request, &mut answer, call.deadline).await?;
    }
    // hyper writes the length of a body whose size is known (a `Full`'s), as it sends it.
    parts.headers.remove(header::TRANSFER_ENCODING);
    parts.headers.remove(header::CONTENT_LENGTH);
    Ok(Response::from_parts(parts, GatewayBody::Left(Full::new(answer))))
}

/// Why a held answer could not be read whole: a built-in guard blocked it on the way (the
/// client's 400), or the body failed.
fn unread(error: Box<dyn std::error::Error + Send + Sync>) -> GatewayError {
    match error.downcast::<GatewayError>() {
        Ok(blocked) => *blocked,
        Err(e) => {
            tracing::warn!(error = %e, "an answer held for its guards could not be read whole");
            GatewayError::BadGateway { message: "the answer could not be read whole".to_owned() }
        }
    }
}
