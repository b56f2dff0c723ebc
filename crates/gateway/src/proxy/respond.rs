//! Relay: an answer to the client. A translated answer that is not a stream is read whole,
//! translated back and sent as one body; every other answer is relayed frame by frame as it
//! arrives (passed through, observed for usage, or translated event by event). Either way the
//! answer guards see what the client would receive, and the request's `Settlement` moves into
//! what finishes the answer, which settles it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
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
use crate::http::parse::collect_whole;
use crate::http::relay::{AnswerSink, Completion, RelayBody};
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
    let fill: Option<Box<dyn AnswerSink>> = cached.and_then(|c| {
        // A translated answer reaches the client in its own API's content type.
        let translated = matches!(answer.plan, Plan::Translate(_));
        let content_type = translated.then(|| translation::content_type(call.endpoint, call.stream));
        let content_type = content_type.as_ref().or(answer.parts.headers.get(header::CONTENT_TYPE));
        let fill = c.fill(call.app, answer.parts.status, &answer.parts.headers, content_type, &exchange.routed.model);
        fill.map(|f| f as Box<dyn AnswerSink>)
    });
    let fill = crate::http::relay::sinks(fill, exchange.tap.take());
    // Only a translated answer that is not a stream, and one its guards judge whole, are waited
    // for here (read whole). That wait is boxed so the relayed path, every stream and every
    // pass-through answer, keeps this future small.
    let mut resp = match answer.plan {
        Plan::Translate(wire) if !(call.stream && answer.parts.status.is_success()) => {
            let whole = Box::pin(read_translated(call, wire, answer, exchange, failover.upstream_wait)).await?;
            respond_whole(call, whole, settlement, guards, fill)?
        }
        // Read whole here rather than relayed and held: a block is the client's 400 before any
        // of the answer goes out, and the answer is sent in one piece with its length.
        _ if guards.as_ref().is_some_and(|g| g.whole()) => {
            let whole = match http_body::Body::is_end_stream(&answer.body) {
                // The usual small answer came whole with its head: nothing to wait for, nor to box.
                true => passed_whole(call, answer, Bytes::new(), exchange, failover.upstream_wait),
                false => Box::pin(read_passed(call, answer, exchange, failover.upstream_wait)).await?,
            };
            respond_whole(call, whole, settlement, guards, fill)?
        }
        _ => {
            let resumption = failover.resumption(call, exchange, answer.attempts);
            let resumable = answer.parts.status.is_success().then(|| resumption.resumable(call)).flatten();
            let relay = Relay { upstream_wait: failover.upstream_wait, resumable, guards, fill };
            respond_relayed(call, answer, exchange, settlement, relay)?
        }
    };
    if let Some(cached) = cached {
        cached::mark_miss(&mut resp, cached);
    }
    served_by(Ok(resp), &exchange.routed.model)
}

/// The most of an answer read whole for its guards: a larger one is refused rather than held.
pub(super) const MAX_HELD_BYTES: usize = 64 << 20;

/// An answer read whole, with its head: translated, or passed on as the backend sent it.
struct Whole {
    answer: WholeAnswer,
    parts: http::response::Parts,
    slot: crate::route::backend::InFlight,
    ttfb: Duration,
    route: Option<http::HeaderValue>,
    upstream_wait: Duration,
    /// Set for a backend's own answer: the meter reads its usage from it, as it passes.
    passed: Option<Passed>,
}

/// How a backend's own answer, read whole, is metered as the relay would meter it.
struct Passed {
    sse: bool,
    strip_usage_chunk: bool,
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
    Ok(Whole { answer: result?, parts, slot: guard, ttfb, route, upstream_wait, passed: None })
}

/// A backend's answer read whole, as it is, for guards that judge it whole: at most
/// `MAX_HELD_BYTES` in all. A body already here arms no timer; one still on its way has until the
/// request's deadline.
async fn read_passed(
    call: &Call<'_>,
    mut answer: Answer,
    exchange: &Exchange,
    upstream_wait: Duration,
) -> Result<Whole, GatewayError> {
    let waiting = Instant::now();
    let first = answer.first.as_ref().and_then(|f| f.data_ref()).map_or(0, Bytes::len);
    let left = || call.deadline.saturating_duration_since(Instant::now());
    let read = collect_whole(&mut answer.body, MAX_HELD_BYTES.saturating_sub(first), left).await;
    let rest = match read {
        Ok(Ok(rest)) => rest,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "an answer held for its guards could not be read whole");
            return Err(GatewayError::BadGateway { message: "the answer could not be read whole".to_owned() });
        }
        Err(_) => return Err(GatewayError::UpstreamTimeout),
    };
    Ok(passed_whole(call, answer, rest, exchange, upstream_wait + waiting.elapsed()))
}

/// A backend's answer, its first frame and `rest` as one body, passed on as it is.
fn passed_whole(call: &Call<'_>, answer: Answer, rest: Bytes, exchange: &Exchange, upstream_wait: Duration) -> Whole {
    let Answer { parts, first, guard, ttfb, route, .. } = answer;
    let body = match first.and_then(|f| f.into_data().ok()) {
        Some(first) if rest.is_empty() => first,
        Some(first) => Bytes::from([first, rest].concat()),
        None => rest,
    };
    let sse = is_sse(call.stream, &parts.headers);
    let passed = Some(Passed { sse, strip_usage_chunk: exchange.strip_usage_chunk });
    let answer = WholeAnswer { status: parts.status, body, usage: None };
    Whole { answer, parts, slot: guard, ttfb, route, upstream_wait, passed }
}

/// The answer is server-sent events: asked for as a stream, or sent as one anyway.
fn is_sse(stream: bool, headers: &http::HeaderMap) -> bool {
    stream || headers.get(header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"))
}

/// A whole answer: guarded, metered, stored in the cache, and sent as one body.
fn respond_whole(
    call: &Call<'_>,
    whole: Whole,
    settlement: &mut Settlement,
    guards: Option<Box<AnswerGuards>>,
    fill: Option<Box<dyn AnswerSink>>,
) -> Result<Response<GatewayBody>, GatewayError> {
    let Whole { mut answer, parts, slot, ttfb, route, upstream_wait, passed } = whole;
    let sse = passed.as_ref().is_some_and(|p| p.sse);
    if let Some(mut guards) = guards {
        answer.body = guards.finish(answer.body, sse).map_err(|b| guard::blocked(&b.guard, &b.reason))?;
    }
    let Relayed { mut meter, permit } = settlement.hand_over();
    if let Some(m) = meter.as_mut() {
        let (strip, tap) = passed.as_ref().map_or((false, false), |p| (p.strip_usage_chunk, true));
        m.answered(slot.backend().name(), answer.status.as_u16(), sse, strip, tap);
        if tap {
            // What the meter passes on is what the client gets (an SSE usage chunk it strips).
            let held = m.frame(std::mem::take(&mut answer.body));
            answer.body = guard::joined(held.unwrap_or_default(), m.end().unwrap_or_default());
        } else {
            m.report_usage(answer.usage.as_ref().map(Tokens::from), 0);
        }
    }
    if let Some(mut fill) = fill {
        fill.push(&answer.body);
        fill.finish();
    }
    let app = call.app;
    let overhead = observe(app, call.started, upstream_wait, ttfb);
    // A translated answer is JSON in the client's API; a passed one keeps its own content type.
    let own_type = passed.is_some();
    let mut resp = match own_type {
        true => Response::new(crate::http::full(answer.body)),
        false => crate::http::json_response(answer.status, answer.body),
    };
    *resp.status_mut() = answer.status;
    let headers = resp.headers_mut();
    // Room for all the headers below at once (upstream's, ours, six rate-limit ones): growing rehashes.
    headers.reserve(parts.headers.len() + 10);
    for (name, value) in parts.headers.iter() {
        let retyped = name == header::CONTENT_TYPE && !own_type;
        if !(is_hop_by_hop(name) || retyped || name == header::CONTENT_LENGTH) {
            headers.append(name, value.clone());
        }
    }
    settlement.insert_limit_headers(headers);
    headers.insert(&BACKEND_HEADER, slot.backend().name_header.clone());
    headers.insert(&SERVER_TIMING, server_timing(overhead, upstream_wait));
    if let Some(route) = route {
        headers.insert(&ROUTE_HEADER, route);
    }
    if let Some(m) = meter.as_mut() {
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
    fill: Option<Box<dyn AnswerSink>>,
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
    let sse = is_sse(stream, &parts.headers);
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
