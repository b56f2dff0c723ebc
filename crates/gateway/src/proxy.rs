//! Forwarding with failover: select a backend, send, and retry on another backend while nothing
//! has reached the client yet. An attempt counts as committed only once the upstream's status,
//! headers and first body frame have arrived, so a backend that dies during prefill, or drops
//! the connection before its body, costs the client nothing. Attempts are bounded by
//! `routing.max_attempts` and by the request deadline (`timeouts.request`).
//!
//! Each attempt is planned for the backend it goes to (`translate::plan`): the client's bytes
//! pass through when the backend speaks the client's API, else the request is translated for
//! it (`proxy/translation.rs`) and the answer translated back.

mod attempt;
mod cached;
mod fallback;
mod headers;
mod permits;
mod queue;
mod resume;
mod retry;
mod translation;

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, HeaderValue, Request, Response, StatusCode};
use http_body::Frame;
use hyper::body::Incoming;

use crate::app::App;
use crate::cache;
use crate::endpoint::Endpoint;
use crate::error::GatewayError;
use crate::http::metering::Meter;
use crate::http::parse::{parse_request_at, read_body, with_model};
use crate::http::relay::{Completion, RelayBody};
use crate::http::GatewayBody;
use crate::limit::Permit;
use crate::route::backend::InFlight;
use crate::route::{prefix, RouteHints, SelectError};
use crate::shared::affinity::FleetPin;
use crate::translate::{self, Plan, StreamTranslator, Wire};
use crate::upstream::pool::UpstreamBody;
use crate::usage::{inject_include_usage, Tokens};
use attempt::{attempt_once, AttemptError, Headers};
use cached::Cached;
pub use headers::BACKEND_HEADER;
use headers::{
    header_session, insert_limit_headers, is_hop_by_hop, served_by, server_timing, ROUTE_HEADER, SERVER_TIMING,
};
use resume::Resumption;
use translation::{Bodies, BodyError};

/// An upstream answer whose status, headers and first frame are in hand.
struct Answer {
    parts: http::response::Parts,
    body: UpstreamBody,
    first: Option<Frame<Bytes>>,
    guard: InFlight,
    ttfb: Duration,
    plan: Plan,
    /// Why this backend (sticky session, cache affinity), for `x-switchyard-route`.
    route: Option<HeaderValue>,
}

pub async fn forward(
    app: &Arc<App>,
    endpoint: Endpoint,
    req: Request<Incoming>,
    started: Instant,
    request_id: &HeaderValue,
    trace: &mut Option<crate::telemetry::Tracing>,
) -> Result<Response<GatewayBody>, GatewayError> {
    let (parts, body) = req.into_parts();
    let principal = app.auth.authenticate(&parts.headers, app.clock.unix_secs()).await?;
    let body = read_body(&parts.headers, body, app.config.max_body_bytes, app.config.timeouts.body_read).await?;
    // Gemini names the model in the path; every other API in the body.
    let gemini = matches!(endpoint, Endpoint::GeminiGenerate | Endpoint::GeminiStream);
    let path_model = gemini.then(|| Endpoint::gemini_model(parts.uri.path())).flatten().map(|(model, _)| model);
    let mut routed = parse_request_at(endpoint, path_model, body, &app.config)?;
    // Boxed, as `respond` is below: kept inline, their kilobytes of state would be copied with
    // this future on each move, also on the paths that never await them.
    let (permit, budget) = Box::pin(permits::take(app, &principal, &routed)).await?;
    let mut client_body = routed.body.clone();
    let mut bodies = Bodies::new(endpoint, client_body.clone(), routed.model.clone());
    // For usage on streams the client did not ask it for, ask upstream and hide it on the way back.
    let mut strip_usage_chunk = false;
    if routed.stream && matches!(endpoint, Endpoint::ChatCompletions | Endpoint::Completions) {
        if let Some(body) = inject_include_usage(&routed.body) {
            routed.body = body;
            strip_usage_chunk = true;
        }
    }
    // With telemetry on, a request is metered even when usage is not recorded: its trace ends with it.
    let traced = app.telemetry.clone().zip(trace.take());
    // Boxed: the meter rides with the answer's body, which is moved several times on its way to
    // the client; a pointer is cheaper to move than the meter's ~800 bytes.
    let mut meter = (app.journal.is_some() || traced.is_some()).then(|| {
        Box::new(Meter::new(
            app.journal.clone(),
            app.config.clone(),
            app.metrics.clone(),
            request_id.to_str().unwrap_or_default(),
            principal.key(),
            &routed.requested,
            &routed.model,
            routed.body.len(),
            started,
            app.clock.unix_ms(),
        ))
    });
    if let (Some(m), Some(redactor)) = (meter.as_mut(), &app.redactor) {
        m.keep_bodies(routed.body.clone(), app.config.console.max_stored_body_bytes, redactor.clone());
    }
    if let (Some(m), Some((telemetry, mut tracing))) = (meter.as_mut(), traced) {
        if let crate::telemetry::Tracing::Recorded(trace) = &mut tracing {
            trace.stream = routed.stream;
        }
        m.trace(telemetry, tracing);
    }
    if endpoint == Endpoint::CountTokens {
        if let Some(m) = meter.as_mut() {
            m.uncharged();
        }
    }
    let mut permit = match meter.as_mut() {
        Some(m) => {
            m.set_permit(permit, budget);
            None
        }
        None => permit,
    };
    let cached = Cached::of(app, endpoint, &parts.headers, &principal, &client_body, &routed.requested, routed.stream);
    if let Some(hit) = futures_util::future::OptionFuture::from(cached.as_ref().map(|c| c.lookup(app))).await.flatten()
    {
        return Ok(cached::respond_hit(app, hit, meter, permit.take(), started));
    }
    let deadline = started + app.config.timeouts.request;
    let mut tried: Vec<usize> = Vec::new();
    let mut upstream_wait = Duration::ZERO;
    let mut failure: Option<GatewayError> = None;
    // A retryable (5xx/429) answer, kept to pass through if no other backend can take the request.
    let mut held: Option<Answer> = None;

    let client_headers = &parts.headers;
    let session = header_session(client_headers).or(routed.session.as_deref());
    // In a fleet, a conversation (its session key, or its root) goes where the fleet sent it last.
    let sticky = session.filter(|_| app.config.affinity.sticky_sessions).map(|s| prefix::digest(&[s.as_bytes()]));
    let (shared, ttl) = (app.shared.as_ref(), app.config.affinity.session_ttl);
    let shared = shared.filter(|_| app.router.backends_serving(&routed.model) > 1);
    let lookup = shared.zip(sticky.or(routed.root)).map(|(shared, c)| FleetPin::lookup(shared, &routed.model, c, ttl));
    let mut fleet_pin = futures_util::future::OptionFuture::from(lookup).await;
    let pinned = fleet_pin.as_ref().and_then(|p| app.router.id_of(p.backend.as_deref()?));
    let mut hints = RouteHints { session, chain: std::mem::take(&mut routed.chain), pinned };
    // Waits for a cooling backend (see proxy/retry.rs) are not attempts; they are few and each is
    // bounded by `routing.retry_after_max` and the deadline.
    let (mut next_attempt, mut waits) = (0, 0);
    // How long until a cooling backend is back, when that was too long to wait.
    let mut cooling: Option<Duration> = None;
    // This request found a backend unreachable (connection refused or reset).
    let mut refused = false;
    // The fallback models (`fallbacks:`), tried in order once the model's own backends cannot answer.
    let mut fallbacks = app.config.fallbacks_for(&routed.requested, &routed.model).iter();
    'models: loop {
        while next_attempt < app.config.max_attempts {
            let attempt = next_attempt;
            next_attempt += 1;
            let key = principal.key().map_or("", |k| k.id.as_str());
            let selected = match queue::select(app, &routed.model, &hints, &tried, key, deadline, attempt == 0).await {
                Ok(selected) => selected,
                Err(e) => {
                    app.metrics.count_error(e.kind());
                    if let Some(p) = permit.as_mut() {
                        p.settle(0);
                    }
                    if let Some(m) = meter.as_mut() {
                        m.failed(e.status().as_u16());
                    }
                    return Err(e);
                }
            };
            let (backend, route, slot) = match selected {
                Ok(s) => (s.backend, s.explain.and_then(|e| HeaderValue::try_from(e).ok()), s.slot),
                // No backend serves it (a dead backend's models leave the table): a fallback may.
                Err(SelectError::UnknownModel) if fallbacks.len() > 0 => break,
                Err(SelectError::UnknownModel) => {
                    let e = GatewayError::ModelNotFound { model: routed.model };
                    if let Some(m) = meter.as_mut() {
                        m.failed(e.status().as_u16());
                    }
                    return Err(e);
                }
                Err(SelectError::NoneAvailable | SelectError::Full) => {
                    let more = waits < app.config.max_attempts;
                    match retry::wait_for_cooldown(app, &routed.model, waits, deadline).await {
                        retry::Wait::Waited if more => {
                            (waits, next_attempt) = (waits + 1, attempt);
                            tried.clear();
                            continue;
                        }
                        retry::Wait::TooLong(left) => cooling = Some(left),
                        // Unreachable backends and no fallback: a backoff for one to come back.
                        retry::Wait::Nothing
                            if refused
                                && more
                                && fallbacks.len() == 0
                                && retry::wait_backoff(app, waits, deadline).await =>
                        {
                            (waits, next_attempt) = (waits + 1, attempt);
                            tried.clear();
                            continue;
                        }
                        _ => {}
                    }
                    break;
                }
            };
            tried.push(backend.id);
            if let (Some(m), Some(why)) = (meter.as_mut(), &route) {
                m.route(why);
            }
            if let Some(pin) = fleet_pin.as_mut() {
                pin.went_to(backend.name());
            }
            let plan = translate::plan(endpoint, backend.kind());
            let (wire, upstream_body) = match plan {
                Plan::Pass(wire) => (wire, routed.body.clone()),
                Plan::Translate(wire) => match bodies.encode(wire) {
                    Ok(body) => (wire, body),
                    Err(BodyError::Request(e)) => {
                        let e = GatewayError::from_translate(&e);
                        if let Some(m) = meter.as_mut() {
                            m.failed(e.status().as_u16());
                        }
                        return Err(e);
                    }
                    Err(BodyError::Wire(e)) => {
                        app.metrics.count_error("unsupported_feature");
                        failure = Some(GatewayError::from_translate(&e));
                        continue;
                    }
                },
                Plan::Local => {
                    if let Some(m) = meter.as_mut() {
                        m.failed(200);
                    }
                    return translation::count_tokens_locally(&mut bodies);
                }
                Plan::Unsupported(feature) => {
                    app.metrics.count_error("unsupported_feature");
                    failure = Some(GatewayError::bad_request(
                        format!("backend `{}` ({}) cannot serve {feature}", backend.name(), backend.kind().as_str()),
                        None,
                    ));
                    continue;
                }
            };
            if attempt > 0 {
                app.metrics.retries.fetch_add(1, Relaxed);
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                failure = Some(GatewayError::UpstreamTimeout);
                break;
            }
            let guard = slot;
            backend.stats.attempts.fetch_add(1, Relaxed);
            let sent = Instant::now();
            let limit = remaining.min(app.config.timeouts.first_byte);
            let trace_headers = meter.as_mut().and_then(|m| m.trace_attempt(&backend));
            let headers = Headers {
                model: &routed.model,
                stream: routed.stream,
                client: &parts.headers,
                request_id,
                trace: trace_headers,
            };
            let outcome = attempt_once(app, &backend, wire, upstream_body, headers, limit).await;
            let ttfb = sent.elapsed();
            upstream_wait += ttfb;
            if let Some(m) = meter.as_mut() {
                m.trace_outcome(match &outcome {
                    Ok((parts, _, _)) => Ok(parts.status.as_u16()),
                    Err(AttemptError::Transport) => Err("connection_error"),
                    Err(AttemptError::Timeout) => Err("timeout"),
                });
            }
            match outcome {
                Ok((parts, body, first)) => {
                    let status = parts.status;
                    if status.is_server_error() {
                        backend.stats.failures.fetch_add(1, Relaxed);
                        app.metrics.count_error("upstream_status");
                        if backend.health.on_server_error(app.clock.mono_ms()) {
                            tracing::warn!(backend = backend.name(), %status, "circuit breaker opened");
                        }
                    } else {
                        backend.health.on_success();
                    }
                    retry::on_answer(app, &backend, status, &parts.headers, attempt);
                    // A prompt too long for this model's window goes to one with a larger window.
                    let first_bytes = first.as_ref().and_then(Frame::data_ref).map_or(&[][..], |b| &b[..]);
                    if status == StatusCode::BAD_REQUEST && fallback::context_window_exceeded(first_bytes) {
                        let larger = app.config.context_fallbacks_for(&routed.requested, &routed.model);
                        if !larger.is_empty() {
                            fallbacks = larger.iter();
                            failure = Some(GatewayError::bad_request(
                                format!("the prompt does not fit the context window of `{}`", routed.model),
                                Some("messages"),
                            ));
                            break;
                        }
                    }
                    let answer = Answer { parts, body, first, guard, ttfb, plan, route };
                    if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
                        held = Some(answer);
                        continue;
                    }
                    let metering = Metering { meter, permit, strip_usage_chunk, cached: cached.as_ref() };
                    let call = Call { endpoint, stream: routed.stream, started, upstream_wait, deadline, request_id };
                    let resume = Resumption {
                        tried: &tried,
                        client_body: &client_body,
                        model: &routed.model,
                        headers: client_headers,
                        attempts: attempt + 1,
                        fallbacks: fallbacks.as_slice(),
                        chain: &hints.chain,
                    };
                    return served_by(respond(app, answer, call, metering, &mut bodies, resume).await, &routed.model);
                }
                Err(AttemptError::Transport) => {
                    app.metrics.count_error("upstream_connect");
                    backend.mark_failed("transport error");
                    refused = true;
                    // The backend was dead, not slow: to the client that is "no healthy backend" (503, retryable).
                    failure = None;
                }
                Err(AttemptError::Timeout) => {
                    app.metrics.count_error("upstream_timeout");
                    backend.mark_failed("timeout");
                    failure = Some(GatewayError::UpstreamTimeout);
                }
            }
        }
        // Fall back when nothing answered, or what answered is on `routing.fallback_statuses`.
        let fall_back = held.as_ref().is_none_or(|a| app.config.fallback_statuses.contains(&a.parts.status.as_u16()));
        if let Some(next) = fall_back.then(|| fallbacks.next()).flatten() {
            let to = app.config.resolve_alias(next).to_owned();
            // A Gemini request's model is in its path, not its body.
            let splice =
                |body: &bytes::Bytes| if path_model.is_some() { Ok(body.clone()) } else { with_model(body, &to) };
            let (Ok(upstream), Ok(client)) = (splice(&routed.body), splice(&client_body)) else {
                break;
            };
            app.metrics.count_fallback(&routed.model, &to);
            tracing::debug!(from = %routed.model, to = %to, "falling back to another model");
            (routed.body, client_body) = (upstream, client);
            bodies = Bodies::new(endpoint, client_body.clone(), to.clone());
            if let Some(m) = meter.as_mut() {
                m.serve(&to);
            }
            routed.model = to;
            (next_attempt, waits, cooling, failure) = (0, 0, None, None);
            tried.clear();
            // The fleet's pin and this request's session pin name backends of the first model.
            fleet_pin = None;
            hints.pinned = None;
            continue 'models;
        }
        break;
    }
    if let Some(answer) = held {
        let metering = Metering { meter, permit, strip_usage_chunk, cached: cached.as_ref() };
        let call = Call { endpoint, stream: routed.stream, started, upstream_wait, deadline, request_id };
        let resume = Resumption {
            tried: &tried,
            client_body: &client_body,
            model: &routed.model,
            headers: client_headers,
            attempts: app.config.max_attempts,
            fallbacks: fallbacks.as_slice(),
            chain: &hints.chain,
        };
        return served_by(respond(app, answer, call, metering, &mut bodies, resume).await, &routed.model);
    }
    let e = match (failure, cooling) {
        (Some(e), _) => e,
        // Backends that are only cooling down: say when to come back.
        (None, Some(left)) => {
            GatewayError::BackendsCooling { model: routed.model, retry_after_secs: left.as_secs_f64().ceil() as u64 }
        }
        (None, None) => GatewayError::NoHealthyBackend { model: routed.model },
    };
    // Nothing was generated: give the token reservation back (the meter settles to 0 tokens).
    if let Some(p) = permit.as_mut() {
        p.settle(0);
    }
    if let Some(m) = meter.as_mut() {
        m.failed(e.status().as_u16());
    }
    Err(e)
}

/// What accounting travels with a response.
struct Metering<'a> {
    meter: Option<Box<Meter>>,
    permit: Option<Permit>,
    strip_usage_chunk: bool,
    /// Set when the request uses the response cache (and missed it).
    cached: Option<&'a Cached>,
}

/// What the response to one call needs to know about it.
struct Call<'a> {
    endpoint: Endpoint,
    stream: bool,
    started: Instant,
    upstream_wait: Duration,
    deadline: Instant,
    /// For the id and time a translated answer needs (made only when one is).
    request_id: &'a HeaderValue,
}

async fn respond(
    app: &Arc<App>,
    answer: Answer,
    call: Call<'_>,
    metering: Metering<'_>,
    bodies: &mut Bodies,
    resumption: Resumption<'_>,
) -> Result<Response<GatewayBody>, GatewayError> {
    let cached = metering.cached;
    let fill = cached.and_then(|c| {
        // A translated answer reaches the client in its own API's content type.
        let translated = matches!(answer.plan, Plan::Translate(_));
        let content_type = translated.then(|| translation::content_type(call.endpoint, call.stream));
        let content_type = content_type.as_ref().or(answer.parts.headers.get(header::CONTENT_TYPE));
        c.fill(app, answer.parts.status, &answer.parts.headers, content_type, resumption.model)
    });
    // Only a translated answer that is not a stream is waited for here (read whole). That wait is
    // boxed so the relayed path, every stream and every pass-through answer, keeps this future small.
    let mut resp = match answer.plan {
        Plan::Translate(wire) if !(call.stream && answer.parts.status.is_success()) => {
            Box::pin(respond_translated_whole(app, wire, answer, call, metering, bodies, fill)).await?
        }
        _ => respond_relayed(app, answer, call, metering, bodies, resumption, fill)?,
    };
    if cached.is_some() {
        cached::mark_miss(&mut resp);
    }
    Ok(resp)
}

/// A translated answer that is not a stream (or is an error): read whole, translated back and
/// sent as one body.
async fn respond_translated_whole(
    app: &Arc<App>,
    wire: Wire,
    answer: Answer,
    call: Call<'_>,
    metering: Metering<'_>,
    bodies: &mut Bodies,
    fill: Option<Box<cache::Fill>>,
) -> Result<Response<GatewayBody>, GatewayError> {
    let Answer { parts, body, first, guard, ttfb, plan: _, route } = answer;
    let Call { endpoint, stream: _, started, mut upstream_wait, deadline, request_id } = call;
    let Metering { mut meter, permit, strip_usage_chunk: _, cached: _ } = metering;
    let waiting = Instant::now();
    let limit = deadline.saturating_duration_since(waiting);
    let context = translation::response_context(request_id, bodies.model());
    let read = translation::translate_whole(endpoint, wire, parts.status, first, body, limit, &context, bodies);
    let result = read.await;
    upstream_wait += waiting.elapsed();
    let whole = match result {
        Ok(whole) => whole,
        Err(e) => {
            if let Some(m) = meter.as_mut() {
                m.failed(e.status().as_u16());
            }
            return Err(e);
        }
    };
    if let Some(mut fill) = fill {
        fill.push(&whole.body);
        fill.finish();
    }
    let mut resp = respond_whole(app, whole, parts, guard, ttfb, started, upstream_wait, meter, permit);
    if let Some(route) = route {
        resp.headers_mut().insert(&ROUTE_HEADER, route);
    }
    Ok(resp)
}

/// Every other answer is relayed as it arrives: passed through, observed for usage, or
/// translated event by event.
fn respond_relayed(
    app: &Arc<App>,
    answer: Answer,
    call: Call<'_>,
    metering: Metering<'_>,
    bodies: &mut Bodies,
    resumption: Resumption<'_>,
    fill: Option<Box<cache::Fill>>,
) -> Result<Response<GatewayBody>, GatewayError> {
    let resumable = if answer.parts.status.is_success() { resumption.resumable(app, &call) } else { None };
    let Answer { parts, body, first, guard, ttfb, plan, route } = answer;
    let Call { endpoint, stream, started, upstream_wait, deadline: _, request_id } = call;
    let Metering { mut meter, permit, strip_usage_chunk, cached: _ } = metering;
    let translated = matches!(plan, Plan::Translate(_));
    let sse = stream
        || parts.headers.get(header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let overhead = started.elapsed().saturating_sub(upstream_wait);
    app.metrics.overhead.observe(overhead);
    app.metrics.upstream_ttfb.observe(ttfb);
    let backend_name = guard.backend().name_header.clone();

    let mut resp = Response::new(());
    // Room for all the headers below at once (upstream's, ours, six rate-limit ones): growing rehashes.
    resp.headers_mut().reserve(parts.headers.len() + 10);
    insert_limit_headers(resp.headers_mut(), &meter, &permit);
    let translator = match plan {
        Plan::Translate(wire) => {
            let context = translation::response_context(request_id, bodies.model());
            let decoded = bodies.decoded().map_err(|e| GatewayError::from_translate(&e))?;
            StreamTranslator::translate(endpoint, wire, context, decoded)
        }
        // Same API but not OpenAI's: read the stream's usage without touching it.
        Plan::Pass(wire @ (Wire::Anthropic | Wire::OllamaChat | Wire::OllamaGenerate | Wire::Gemini)) if stream => {
            StreamTranslator::observe(wire, translation::response_context(request_id, bodies.model()))
        }
        _ => None,
    };
    if let Some(m) = meter.as_mut() {
        m.answered(guard.backend().name(), parts.status.as_u16(), sse, strip_usage_chunk, translator.is_none());
    }
    let completion = Completion { guard, metrics: app.metrics.clone(), started, permit, meter, cache: fill };
    let relay = RelayBody::new(body, first, app.config.timeouts.stream_idle, sse, completion)
        .with_translator(translator)
        .with_resume(resumable.filter(|_| sse));
    let mut resp = resp.map(|()| crate::http::relayed(relay));
    *resp.status_mut() = parts.status;
    let headers = resp.headers_mut();
    for (name, value) in parts.headers.iter() {
        // An SSE body may change length on the way (usage chunk stripped, error event added);
        // a translated one changes shape too.
        let replaced = translated && (name == header::CONTENT_TYPE || name == header::CONTENT_LENGTH);
        if !(is_hop_by_hop(name) || sse && name == header::CONTENT_LENGTH || replaced) {
            headers.append(name, value.clone());
        }
    }
    if translated {
        headers.insert(header::CONTENT_TYPE, translation::content_type(endpoint, stream));
    }
    headers.insert(&BACKEND_HEADER, backend_name);
    headers.insert(&SERVER_TIMING, server_timing(overhead, upstream_wait));
    if let Some(route) = route {
        headers.insert(&ROUTE_HEADER, route);
    }
    Ok(resp)
}

/// A translated answer read whole: metered, and sent as one body.
#[allow(clippy::too_many_arguments)]
fn respond_whole(
    app: &App,
    whole: translation::WholeAnswer,
    parts: http::response::Parts,
    guard: InFlight,
    ttfb: Duration,
    started: Instant,
    upstream_wait: Duration,
    mut meter: Option<Box<Meter>>,
    permit: Option<Permit>,
) -> Response<GatewayBody> {
    let overhead = started.elapsed().saturating_sub(upstream_wait);
    app.metrics.overhead.observe(overhead);
    app.metrics.upstream_ttfb.observe(ttfb);
    let mut resp = crate::http::json_response(whole.status, whole.body);
    let headers = resp.headers_mut();
    for (name, value) in parts.headers.iter() {
        if !(is_hop_by_hop(name) || name == header::CONTENT_TYPE || name == header::CONTENT_LENGTH) {
            headers.append(name, value.clone());
        }
    }
    insert_limit_headers(headers, &meter, &permit);
    headers.insert(&BACKEND_HEADER, guard.backend().name_header.clone());
    headers.insert(&SERVER_TIMING, server_timing(overhead, upstream_wait));
    if let Some(m) = meter.as_mut() {
        m.answered(guard.backend().name(), whole.status.as_u16(), false, false, false);
        let tokens = whole.usage.as_ref().map(Tokens::from);
        m.report_usage(tokens, 0);
        // Recorded before the client sees the answer, like a relayed body's end.
        m.record_now();
    }
    // The permit (parallel slot) and the in-flight guard end with the answer, which is complete.
    drop((permit, guard));
    app.metrics.duration.observe(started.elapsed());
    resp
}
