//! Relay: an answer to the client. A translated answer that is not a stream is read whole,
//! translated back and sent as one body; every other answer is relayed frame by frame as it
//! arrives (passed through, observed for usage, or translated event by event). Either way the
//! answer guards see what the client would receive, and the request's `Settlement` moves into
//! what finishes the answer, which settles it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{header, Response};

use super::cached::{self, Cached};
use super::failover::{Answer, Failover};
use super::headers::{is_hop_by_hop, served_by, server_timing, BACKEND_HEADER, ROUTE_HEADER, SERVER_TIMING};
use super::settle::{Relayed, Settlement};
use super::translation::{self, WholeAnswer};
use super::{Call, Exchange};
use crate::app::App;
use crate::error::GatewayError;
use crate::guard::{self, AnswerGuards};
use crate::http::relay::{Completion, RelayBody};
use crate::http::GatewayBody;
use crate::translate::{Plan, StreamTranslator, Wire};
use crate::usage::Tokens;

/// An answer on its way to the client, with what watches it.
pub(super) struct Answered<'a> {
    pub answer: Answer,
    /// Set when the request uses the response cache (and missed it).
    pub cached: Option<&'a Cached>,
    /// The answer guards of this request; None without any.
    pub guards: Option<Box<AnswerGuards>>,
}

pub(super) async fn respond(
    call: &Call<'_>,
    answered: Answered<'_>,
    exchange: &mut Exchange,
    settlement: &mut Settlement,
    failover: &Failover<'_>,
) -> Result<Response<GatewayBody>, GatewayError> {
    let Answered { answer, cached, guards } = answered;
    let fill = cached.and_then(|c| {
        // A translated answer reaches the client in its own API's content type.
        let translated = matches!(answer.plan, Plan::Translate(_));
        let content_type = translated.then(|| translation::content_type(call.endpoint, call.stream));
        let content_type = content_type.as_ref().or(answer.parts.headers.get(header::CONTENT_TYPE));
        c.fill(call.app, answer.parts.status, &answer.parts.headers, content_type, &exchange.routed.model)
    });
    // Only a translated answer that is not a stream is waited for here (read whole). That wait is
    // boxed so the relayed path, every stream and every pass-through answer, keeps this future small.
    let mut resp = match answer.plan {
        Plan::Translate(wire) if !(call.stream && answer.parts.status.is_success()) => {
            let whole = Box::pin(read_translated(call, wire, answer, exchange, failover.upstream_wait)).await?;
            respond_whole(call, whole, settlement, guards, fill)?
        }
        _ => {
            let resumption = failover.resumption(call, exchange, answer.attempts);
            let resumable = answer.parts.status.is_success().then(|| resumption.resumable(call)).flatten();
            let relay = Relay { upstream_wait: failover.upstream_wait, resumable, guards, fill };
            respond_relayed(call, answer, exchange, settlement, relay)?
        }
    };
    if cached.is_some() {
        cached::mark_miss(&mut resp);
    }
    served_by(Ok(resp), &exchange.routed.model)
}

/// A translated answer read whole, with its head.
struct Whole {
    answer: WholeAnswer,
    parts: http::response::Parts,
    slot: crate::route::backend::InFlight,
    ttfb: Duration,
    route: Option<http::HeaderValue>,
    upstream_wait: Duration,
}

/// Read a translated answer that is not a stream (or is an error) whole, translated back.
async fn read_translated(
    call: &Call<'_>,
    wire: Wire,
    answer: Answer,
    exchange: &mut Exchange,
    mut upstream_wait: Duration,
) -> Result<Whole, GatewayError> {
    let Answer { parts, body, first, guard, ttfb, route, .. } = answer;
    let waiting = Instant::now();
    let limit = call.deadline.saturating_duration_since(waiting);
    let bodies = &mut exchange.bodies;
    let context = translation::response_context(call.request_id, bodies.model());
    let read = translation::translate_whole(call.endpoint, wire, parts.status, first, body, limit, &context, bodies);
    let result = read.await;
    upstream_wait += waiting.elapsed();
    Ok(Whole { answer: result?, parts, slot: guard, ttfb, route, upstream_wait })
}

/// A whole answer: guarded, metered, stored in the cache, and sent as one body.
fn respond_whole(
    call: &Call<'_>,
    whole: Whole,
    settlement: &mut Settlement,
    guards: Option<Box<AnswerGuards>>,
    fill: Option<Box<crate::cache::Fill>>,
) -> Result<Response<GatewayBody>, GatewayError> {
    let Whole { mut answer, parts, slot, ttfb, route, upstream_wait } = whole;
    if let Some(mut guards) = guards {
        answer.body = guards.finish(answer.body, false).map_err(|b| guard::blocked(&b.guard, &b.reason))?;
    }
    if let Some(mut fill) = fill {
        fill.push(&answer.body);
        fill.finish();
    }
    let app = call.app;
    let overhead = observe(app, call.started, upstream_wait, ttfb);
    let mut resp = crate::http::json_response(answer.status, answer.body);
    let headers = resp.headers_mut();
    for (name, value) in parts.headers.iter() {
        if !(is_hop_by_hop(name) || name == header::CONTENT_TYPE || name == header::CONTENT_LENGTH) {
            headers.append(name, value.clone());
        }
    }
    settlement.insert_limit_headers(headers);
    headers.insert(&BACKEND_HEADER, slot.backend().name_header.clone());
    headers.insert(&SERVER_TIMING, server_timing(overhead, upstream_wait));
    if let Some(route) = route {
        headers.insert(&ROUTE_HEADER, route);
    }
    let Relayed { mut meter, permit } = settlement.hand_over();
    if let Some(m) = meter.as_mut() {
        m.answered(slot.backend().name(), answer.status.as_u16(), false, false, false);
        m.report_usage(answer.usage.as_ref().map(Tokens::from), 0);
        // Recorded before the client sees the answer, like a relayed body's end.
        m.record_now();
    }
    // The permit (parallel slot) and the in-flight slot end with the answer, which is complete.
    drop((permit, slot, meter));
    app.metrics.duration.observe(call.started.elapsed());
    Ok(resp)
}

/// The gateway's own time so far (what is not the upstream's), into the histograms.
fn observe(app: &Arc<App>, started: Instant, upstream_wait: Duration, ttfb: Duration) -> Duration {
    let overhead = started.elapsed().saturating_sub(upstream_wait);
    app.metrics.overhead.observe(overhead);
    app.metrics.upstream_ttfb.observe(ttfb);
    overhead
}

/// What a relayed answer carries besides its body.
struct Relay {
    upstream_wait: Duration,
    resumable: Option<crate::http::resume::Resumable>,
    guards: Option<Box<AnswerGuards>>,
    fill: Option<Box<crate::cache::Fill>>,
}

/// An answer relayed as it arrives: passed through, observed for usage, or translated event by
/// event.
fn respond_relayed(
    call: &Call<'_>,
    answer: Answer,
    exchange: &mut Exchange,
    settlement: &mut Settlement,
    relay: Relay,
) -> Result<Response<GatewayBody>, GatewayError> {
    let Answer { parts, body, first, guard, ttfb, plan, route, .. } = answer;
    let (endpoint, stream) = (call.endpoint, call.stream);
    let translated = matches!(plan, Plan::Translate(_));
    let sse = stream
        || parts.headers.get(header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let translator = stream_translator(call, plan, exchange)?;
    // A guard may change the body's length, as a translation does.
    let reshaped = translated || relay.guards.is_some();
    let overhead = observe(call.app, call.started, relay.upstream_wait, ttfb);
    let backend_name = guard.backend().name_header.clone();
    let mut resp = Response::new(());
    // Room for all the headers below at once (upstream's, ours, six rate-limit ones): growing rehashes.
    resp.headers_mut().reserve(parts.headers.len() + 10);
    settlement.insert_limit_headers(resp.headers_mut());
    let Relayed { mut meter, permit } = settlement.hand_over();
    if let Some(m) = meter.as_mut() {
        let strip = exchange.strip_usage_chunk;
        m.answered(guard.backend().name(), parts.status.as_u16(), sse, strip, translator.is_none());
    }
    let app = call.app;
    let completion =
        Completion { guard, metrics: app.metrics.clone(), started: call.started, permit, meter, cache: relay.fill };
    let body = RelayBody::new(body, first, app.config.timeouts.stream_idle, sse, completion)
        .with_translator(translator)
        .with_resume(relay.resumable.filter(|_| sse))
        .with_guards(relay.guards);
    let mut resp = resp.map(|()| crate::http::relayed(body));
    *resp.status_mut() = parts.status;
    let headers = resp.headers_mut();
    for (name, value) in parts.headers.iter() {
        // An SSE body may change length on the way (usage chunk stripped, error event added);
        // a translated one changes shape too.
        let replaced = reshaped && name == header::CONTENT_LENGTH || translated && name == header::CONTENT_TYPE;
        if !(is_hop_by_hop(name) || sse && name == header::CONTENT_LENGTH || replaced) {
            headers.append(name, value.clone());
        }
    }
    if translated {
        headers.insert(header::CONTENT_TYPE, translation::content_type(endpoint, stream));
    }
    headers.insert(&BACKEND_HEADER, backend_name);
    headers.insert(&SERVER_TIMING, server_timing(overhead, relay.upstream_wait));
    if let Some(route) = route {
        headers.insert(&ROUTE_HEADER, route);
    }
    Ok(resp)
}

/// The translator a relayed answer goes through: a translation into the client's API, or for the
/// client's own API when it is not OpenAI's, a reader of the stream's usage; None for the rest.
fn stream_translator(
    call: &Call<'_>,
    plan: Plan,
    exchange: &mut Exchange,
) -> Result<Option<StreamTranslator>, GatewayError> {
    let bodies = &mut exchange.bodies;
    Ok(match plan {
        Plan::Translate(wire) => {
            let context = translation::response_context(call.request_id, bodies.model());
            let decoded = bodies.decoded().map_err(|e| GatewayError::from_translate(&e))?;
            StreamTranslator::translate(call.endpoint, wire, context, decoded)
        }
        // Same API but not OpenAI's: read the stream's usage without touching it.
        Plan::Pass(wire @ (Wire::Anthropic | Wire::OllamaChat | Wire::OllamaGenerate | Wire::Gemini))
            if call.stream =>
        {
            StreamTranslator::observe(wire, translation::response_context(call.request_id, bodies.model()))
        }
        _ => None,
    })
}
