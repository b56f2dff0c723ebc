//! The request path of every model endpoint, as its phases:
//!
//! authenticate → read and parse → admit (limits, budget) → guard (request) → cache → route →
//! attempt (plan, translate, send) → relay with guards on the answer → settle.
//!
//! `forward` reads as that list; each phase is a function or type of its own. A request's
//! accounting (meter, permit, budget reservation, trace, fleet pin) is one owned value,
//! `Settlement` (`proxy/settle.rs`), opened once the request is admitted: the relay takes it over
//! with the answer, an error settles it with its status, a drop settles it as "nothing
//! generated". Routing and attempts (`proxy/failover.rs`) retry on another backend while nothing
//! has reached the client: an attempt counts as committed only once the upstream's status,
//! headers and first body frame have arrived. Answers are relayed, or translated and relayed,
//! by `proxy/respond.rs`.

mod attempt;
mod cached;
mod experiment;
mod failover;
mod fallback;
pub mod feedback;
mod follow;
mod headers;
mod internal;
mod judge;
mod keys;
pub mod passthrough;
mod permits;
pub(crate) mod policy;
mod queue;
pub mod realtime;
mod respond;
mod resume;
mod retry;
mod scorers;
mod semantic;
mod settle;
mod translation;
mod upload;

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response};
use hyper::body::Incoming;

use crate::app::App;
use crate::auth::Identity;
use crate::endpoint::{Endpoint, ModelIn};
use crate::error::GatewayError;
use crate::guard::GuardedRequest;
use crate::http::parse::{parse_request_at, read_body, RoutedRequest};
use crate::http::GatewayBody;
use crate::telemetry::Tracing;
use crate::usage::inject_include_usage;
use attempt::{attempt_once, AttemptError, Headers};
use cached::Cached;
use failover::{Failover, Reached};
pub use headers::BACKEND_HEADER;
pub use internal::{call_for_guard, call_internal, InternalCall};
pub use semantic::score_pair;
use settle::Settlement;
use translation::Bodies;

/// What every phase after parsing reads about the request, unchanged to its end.
pub(crate) struct Call<'a> {
    pub app: &'a Arc<App>,
    pub endpoint: Endpoint,
    /// The client's headers.
    pub headers: &'a HeaderMap,
    pub request_id: &'a HeaderValue,
    pub started: Instant,
    /// `timeouts.request` after the start: every wait and attempt ends by then.
    pub deadline: Instant,
    pub stream: bool,
    /// Model guard `NAME`'s own call to its classifier: it gets no guards, its record is marked.
    pub guard_call: Option<&'a str>,
    /// A line of batch `ID`: its record is marked and priced at the batch discount.
    pub batch: Option<&'a str>,
    /// An experiment's own call (`(NAME, "shadow" | "judge")`): recorded as the experiment's,
    /// never waiting for a slot.
    pub experiment: Option<(&'a str, &'static str)>,
}

/// Where a request came from, as the phases after reading its body need it.
struct Inbound<'a> {
    endpoint: Endpoint,
    path: &'a str,
    headers: &'a HeaderMap,
    request_id: &'a HeaderValue,
    started: Instant,
    deadline: Instant,
    guard_call: Option<&'a str>,
    batch: Option<&'a str>,
    experiment: Option<(&'a str, &'static str)>,
    /// The client's address (`source.ip` for policies); None for the gateway's own calls.
    peer: Option<std::net::SocketAddr>,
}

impl<'a> Inbound<'a> {
    /// A client's request: none of the gateway's own marks, due `timeout` after `started`.
    fn client(
        (endpoint, peer): (Endpoint, Option<std::net::SocketAddr>),
        parts: &'a http::request::Parts,
        request_id: &'a HeaderValue,
        started: Instant,
        timeout: std::time::Duration,
    ) -> Inbound<'a> {
        let (path, headers, deadline) = (parts.uri.path(), &parts.headers, started + timeout);
        Inbound {
            endpoint,
            path,
            headers,
            request_id,
            started,
            deadline,
            guard_call: None,
            batch: None,
            experiment: None,
            peer,
        }
    }
}

/// The request's bodies as the phases change them (a guard's mask, a fallback's model).
pub(crate) struct Exchange {
    pub routed: RoutedRequest,
    /// The client's body as it came (alias resolved): what translations and resumes start from.
    pub client_body: Bytes,
    pub bodies: Bodies,
    /// Usage was asked for on a stream the client did not ask it for: hide it on the way back.
    pub strip_usage_chunk: bool,
    /// The guards' verdicts on this request (with guards configured), for its record.
    pub verdicts: Option<Arc<crate::records::VerdictTally>>,
    /// The placeholders its values were given, when a guard pseudonymizes (in memory only).
    pub pseudonyms: Option<Arc<crate::guard::pseudonym::Vault>>,
    /// Classifiers judging the request beside the call: the answer waits for them.
    pub parallel: Option<crate::guard::remote::Parallel>,
    /// A multipart upload streaming through (audio): what attempts send instead of `routed.body`.
    pub upload: Option<upload::Upload>,
    /// What reads the answer for an experiment (a shadow pair, a scorer), with the cache's fill.
    pub tap: Option<Box<dyn crate::http::relay::AnswerSink>>,
    /// What the policy rules made of the request (None: no rule applied).
    pub policy: Option<Box<policy::Applied>>,
}

pub async fn forward(
    app: &Arc<App>,
    (endpoint, peer): (Endpoint, Option<std::net::SocketAddr>),
    req: Request<Incoming>,
    started: Instant,
    request_id: &HeaderValue,
    trace: &mut Option<Tracing>,
) -> Result<Response<GatewayBody>, GatewayError> {
    let (parts, body) = req.into_parts();
    // The console's playground sends its signed-in user's identity along (a client cannot).
    let identity = match parts.extensions.get::<crate::auth::Identity>() {
        Some(identity) => identity.clone(),
        None => app.auth.authenticate(&parts.headers, app.clock.unix_secs()).await?,
    };
    feedback::from_header(app, &identity, &parts.headers);
    let body = read_body(&parts.headers, body, app.config.max_body_bytes, app.config.timeouts.body_read).await?;
    let inbound = Inbound::client((endpoint, peer), &parts, request_id, started, app.config.timeouts.request);
    forward_body(app, &inbound, &identity, body, trace).await
}

/// The request path of a multipart upload (audio transcriptions and translations): the same
/// phases, but the body is read only as far as the form's `model` (`http/multipart.rs`); the
/// rest streams to the backend as it arrives (`proxy/upload.rs`).
pub async fn forward_upload(
    app: &Arc<App>,
    (endpoint, peer): (Endpoint, Option<std::net::SocketAddr>),
    req: Request<Incoming>,
    started: Instant,
    request_id: &HeaderValue,
    trace: &mut Option<Tracing>,
) -> Result<Response<GatewayBody>, GatewayError> {
    let (parts, body) = req.into_parts();
    let identity = app.auth.authenticate(&parts.headers, app.clock.unix_secs()).await?;
    let limit = app.config.max_upload_bytes;
    let declared = parts.headers.get(http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(GatewayError::PayloadTooLarge { limit });
    }
    let boundary = crate::http::multipart::boundary(&parts.headers)?;
    let head = crate::http::multipart::read_head(body, &boundary, limit, app.config.timeouts.body_read).await?;
    let requested = head.model.clone();
    let (head, grew) = head.with_model(app.config.resolve_alias(&requested));
    let stream = head.stream;
    let mut routed = RoutedRequest {
        model: head.model.clone(),
        requested,
        max_tokens: None,
        stream,
        body: Bytes::new(),
        session: None,
        chain: Vec::new(),
        root: None,
    };
    let inbound = Inbound::client((endpoint, peer), &parts, request_id, started, app.config.timeouts.request);
    let applied = policy::apply(app, &inbound, &identity, &mut routed).await?;
    let mut exchange = Exchange::new(endpoint, routed);
    exchange.upload = Some(upload::Upload::new(head, grew, &parts.headers, limit));
    exchange.policy = applied;
    forward_exchange(app, &inbound, &identity, (exchange, None), trace).await
}

/// The phases from parsing on, for a body that has been read: parse only what routing needs,
/// and give a request an experiment covers its variant.
async fn forward_body(
    app: &Arc<App>,
    inbound: &Inbound<'_>,
    identity: &Identity,
    body: Bytes,
    trace: &mut Option<Tracing>,
) -> Result<Response<GatewayBody>, GatewayError> {
    let mut routed = parse_routed(app, inbound.endpoint, inbound.path, body)?;
    let applied = policy::apply(app, inbound, identity, &mut routed).await?;
    let assignment = experiment::assign(app, inbound, identity, &mut routed);
    let mut exchange = Exchange::new(inbound.endpoint, routed);
    exchange.policy = applied;
    forward_exchange(app, inbound, identity, (exchange, assignment), trace).await
}

/// The phases from admission on, for a request that has been parsed.
async fn forward_exchange(
    app: &Arc<App>,
    inbound: &Inbound<'_>,
    identity: &Identity,
    (mut exchange, assignment): (Exchange, Option<crate::experiments::Assignment>),
    trace: &mut Option<Tracing>,
) -> Result<Response<GatewayBody>, GatewayError> {
    let (endpoint, deadline) = (inbound.endpoint, inbound.deadline);
    // Boxed, as the later phases are: inline, their kilobytes of state would be copied with this
    // future on each move, also on the paths that never await them.
    let admitted = Box::pin(permits::take(app, identity, &exchange.routed, deadline)).await?;
    let call = Call {
        app,
        endpoint,
        headers: inbound.headers,
        request_id: inbound.request_id,
        started: inbound.started,
        deadline,
        stream: exchange.routed.stream,
        guard_call: inbound.guard_call,
        batch: inbound.batch,
        experiment: inbound.experiment,
    };
    let mut settlement = Settlement::open(&call, identity, &exchange.routed, admitted, trace);
    if let (Some(upload), Some(meter)) = (&exchange.upload, settlement.meter()) {
        meter.upload_seconds(upload.seconds());
        meter.form_units(upload.images());
    }
    if let (Some(applied), Some(meter)) = (&exchange.policy, settlement.meter()) {
        meter.policy(applied.named.as_deref(), &applied.tags);
    }
    let watch = assignment.map(|a| experiment::Watch::open(a, &call, &mut exchange, &mut settlement));
    let mut result = Box::pin(proceed(&call, identity, &mut exchange, &mut settlement)).await;
    if let Err(e) = &result {
        settlement.fail(e.status().as_u16());
    }
    if let (Ok(resp), Some(named)) = (&mut result, policy::named_header(exchange.policy.as_deref())) {
        resp.headers_mut().insert(&crate::http::POLICY_HEADER, named);
    }
    if let Some(watch) = watch {
        watch.answered(&call, &mut result, exchange.client_body.clone());
    }
    result
}

/// The phases after admission: guard, cache, route and attempt, relay.
async fn proceed(
    call: &Call<'_>,
    identity: &Identity,
    exchange: &mut Exchange,
    settlement: &mut Settlement,
) -> Result<Response<GatewayBody>, GatewayError> {
    guard_request(call, identity, exchange, settlement).await?;
    served(call, exchange)?;
    let mut cached = Cached::of(
        call.app,
        call.endpoint,
        call.headers,
        identity,
        &exchange.client_body,
        &exchange.routed.requested,
        call.stream,
    );
    let lookup = futures_util::future::OptionFuture::from(cached.as_ref().map(|c| c.lookup(call.app)));
    if let Some(hit) = lookup.await.flatten() {
        let respond = |meter, permit| cached::respond_hit(call.app, hit, meter, permit, call.started);
        return from_cache(call, identity, exchange, settlement, respond).await;
    }
    if let Some(c) = cached.as_mut().filter(|_| call.app.semantic.is_some()) {
        if let Some(stored) = Box::pin(semantic::lookup(call, identity, exchange, c)).await {
            let respond = |meter, permit| cached::respond_stored(call.app, stored, meter, permit, call.started);
            return from_cache(call, identity, exchange, settlement, respond).await;
        }
    }
    if let (Some(c), Some(meter)) = (&cached, settlement.meter()) {
        meter.cache_verdict(&cached::miss_verdict(c));
    }
    let session = exchange.routed.session.take();
    let key = identity.key().map_or("", |k| k.id.as_str());
    let mut failover = Failover::new(call, key, exchange, session.as_deref());
    settlement.pin(failover.fleet_pin(call, exchange).await);
    failover.key_for_engines(call, exchange).await;
    failover.follow_picker(call, exchange).await?;
    let reached = failover.run(call, exchange, settlement).await?;
    judged(exchange).await?;
    match reached {
        Reached::Answer(answer) => {
            failover.report_served(call, &answer);
            let guards = answer_guards(call, identity, exchange);
            let held = judge::hold(call, identity, exchange, settlement);
            let answered = respond::Answered { answer, cached: cached.as_ref(), guards };
            let resp = respond::respond(call, answered, exchange, settlement, &failover).await?;
            judge::judge_answer(call, identity, exchange, held, resp).await
        }
        Reached::Local(resp) => {
            settlement.fail(200);
            Ok(*resp)
        }
    }
}

/// Answer from the cache (either layer): the parallel classifiers and the judge still have
/// their say; the accounting moves into the answer.
async fn from_cache(
    call: &Call<'_>,
    identity: &Identity,
    exchange: &mut Exchange,
    settlement: &mut Settlement,
    respond: impl FnOnce(Option<Box<crate::http::metering::Meter>>, Option<crate::limit::Permit>) -> Response<GatewayBody>,
) -> Result<Response<GatewayBody>, GatewayError> {
    judged(exchange).await?;
    let held = judge::hold(call, identity, exchange, settlement);
    let relayed = settlement.hand_over();
    let resp = respond(relayed.meter, relayed.permit);
    judge::judge_answer(call, identity, exchange, held, resp).await
}

/// Route: a model the gateway knows, but whose backends all serve other endpoints (a chat model
/// asked to rerank), is not found for this one — unless a fallback model may serve it.
fn served(call: &Call<'_>, exchange: &Exchange) -> Result<(), GatewayError> {
    let (router, model, requested) = (&call.app.router, exchange.routed.model.as_str(), &exchange.routed.requested);
    if !router.knows_model(model)
        || router.serves(model, call.endpoint)
        || !call.app.config.fallbacks_for(requested, model).is_empty()
    {
        return Ok(());
    }
    let capability = call.endpoint.spec().capability;
    Err(GatewayError::NotServedFor { model: requested.clone(), capability })
}

/// Classifiers running beside the call (`mode: parallel`) have judged the request: the answer
/// goes out only once they let it.
async fn judged(exchange: &mut Exchange) -> Result<(), GatewayError> {
    match exchange.parallel.take() {
        Some(parallel) => parallel.verdict().await,
        None => Ok(()),
    }
}

/// The guards on this request's answer; none on a guard's own call.
fn answer_guards(call: &Call<'_>, identity: &Identity, exchange: &Exchange) -> Option<Box<crate::guard::AnswerGuards>> {
    if call.guard_call.is_some() {
        return None;
    }
    call.app.guards.answer(&guarded(call, identity, exchange))
}

/// Admit (the endpoint picker's): the key's model permission, limits and budgets.
pub(crate) async fn admit(
    app: &App,
    identity: &Identity,
    routed: &RoutedRequest,
    deadline: Instant,
) -> Result<(Option<crate::limit::Permit>, Option<crate::limit::BudgetPermit>), GatewayError> {
    permits::take(app, identity, routed, deadline).await
}

/// Route (the endpoint picker's): a backend of `model`, waiting in its fair queue when all are
/// full, skipping `tried`.
pub(crate) async fn queue_select(
    app: &App,
    model: &str,
    hints: &crate::route::RouteHints<'_>,
    tried: &[usize],
    key: &str,
    deadline: Instant,
) -> Result<Result<crate::route::Selected, crate::route::SelectError>, GatewayError> {
    queue::select(app, model, hints, tried, key, deadline, true).await
}

/// Parse (the endpoint picker's): what routing needs of a request body, and nothing for the
/// attempts (no bodies to translate, no stream usage asked for).
pub(crate) fn parse_routed(
    app: &App,
    endpoint: Endpoint,
    path: &str,
    body: Bytes,
) -> Result<RoutedRequest, GatewayError> {
    parse_request_at(endpoint, model_in_path(endpoint, path), body, &app.config)
}

pub(crate) use headers::header_session;

/// Gemini names the model in the path; every other API in the body.
fn model_in_path(endpoint: Endpoint, path: &str) -> Option<&str> {
    let in_path = endpoint.spec().model_in == ModelIn::Path;
    in_path.then(|| Endpoint::gemini_model(path)).flatten().map(|(model, _)| model)
}

impl Exchange {
    fn new(endpoint: Endpoint, mut routed: RoutedRequest) -> Exchange {
        let client_body = routed.body.clone();
        let bodies = Bodies::new(endpoint, client_body.clone(), routed.model.clone());
        let strip_usage_chunk = ask_stream_usage(endpoint, &mut routed);
        let (verdicts, pseudonyms, parallel, upload, tap, policy) = (None, None, None, None, None, None);
        Exchange { routed, client_body, bodies, strip_usage_chunk, verdicts, pseudonyms, parallel, upload, tap, policy }
    }

    /// The client's body changed (a guard masked it): what is sent upstream follows.
    fn replace_body(&mut self, endpoint: Endpoint, body: Bytes) {
        self.routed.body = body.clone();
        self.bodies = Bodies::new(endpoint, body.clone(), self.routed.model.clone());
        self.client_body = body;
        self.strip_usage_chunk = ask_stream_usage(endpoint, &mut self.routed);
    }
}

/// For usage on streams the client did not ask it for, ask upstream; the relay hides it.
fn ask_stream_usage(endpoint: Endpoint, routed: &mut RoutedRequest) -> bool {
    if !(routed.stream && endpoint.spec().stream_usage) {
        return false;
    }
    let Some(body) = inject_include_usage(&routed.body) else { return false };
    routed.body = body;
    true
}

/// What a guard is told about the request.
fn guarded<'a>(call: &Call<'_>, identity: &'a Identity, exchange: &'a Exchange) -> GuardedRequest<'a> {
    GuardedRequest {
        endpoint: call.endpoint,
        model: &exchange.routed.model,
        requested: &exchange.routed.requested,
        key: identity.key().map(|k| k.id.as_str()),
        team: identity.team(),
        added: identity
            .key()
            .map_or([&[], &[]], |k| [&k.guardrails[..], k.owners.team.as_ref().map_or(&[][..], |t| &t.guardrails[..])]),
        stream: call.stream,
        verdicts: exchange.verdicts.as_ref(),
        tool: None,
        pseudonyms: exchange.pseudonyms.as_ref(),
    }
}

/// Guard (request): every guard that applies sees the body, then the webhooks; a block refuses the
/// request, a mask changes what is sent (and what the request log keeps). Verdicts, the answer's
/// guards' too, go into the request's record. Nothing to do without guards, nor on a guard's own
/// call (its classifier would judge itself).
async fn guard_request(
    call: &Call<'_>,
    identity: &Identity,
    exchange: &mut Exchange,
    settlement: &mut Settlement,
) -> Result<(), GatewayError> {
    let guards = &call.app.guards;
    // An upload's form is not JSON text: guards watch JSON APIs.
    if guards.is_empty() || call.guard_call.is_some() || call.endpoint.is_upload() {
        return Ok(());
    }
    let tally = Arc::new(crate::records::VerdictTally::default());
    if let Some(meter) = settlement.meter() {
        meter.guard_verdicts(tally.clone());
    }
    exchange.verdicts = Some(tally);
    if guards.pseudonymizes() {
        exchange.pseudonyms = Some(Arc::default());
    }
    let mut body = exchange.client_body.clone();
    let request = guarded(call, identity, exchange);
    guards.check_request(&request, &mut body)?;
    let parallel = guards.check_remote(&request, &mut body, call.deadline).await?;
    exchange.parallel = parallel;
    // A guard that changes the body hands back a new one: telling them apart by where their bytes
    // are is enough, and compares no text.
    if body.as_ptr() != exchange.client_body.as_ptr() || body.len() != exchange.client_body.len() {
        exchange.replace_body(call.endpoint, body);
        if let Some(meter) = settlement.meter() {
            meter.request_body_changed(exchange.client_body.clone());
        }
    }
    Ok(())
}
