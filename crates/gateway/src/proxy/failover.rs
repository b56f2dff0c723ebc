//! Route and attempt: choose a backend for the model (waiting in its fair queue when every one
//! is at its cap), plan the attempt for it (pass through, translate, or answer locally), send,
//! and judge the answer's head. Another backend is tried while nothing has reached the client:
//! after a transport error, a timeout before the first byte, or a retryable status (5xx, 429),
//! whose answer is held to pass through if nothing better comes. When the model's backends are
//! exhausted, its `fallbacks:` are tried in order (a context-window 400 switches to its
//! `context_window_fallbacks`). Attempts are bounded by `routing.max_attempts` and the request's
//! deadline; waits for a cooling backend are not attempts (see `retry.rs`).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};
use http_body::Frame;

use super::headers::header_session;
use super::resume::Resumption;
use super::settle::Settlement;
use super::translation::{self, Bodies, BodyError};
use super::{attempt_once, fallback, keys, queue, retry, AttemptError, Call, Exchange, Headers};
use crate::endpoint::ModelIn;
use crate::error::GatewayError;
use crate::http::parse::with_model;
use crate::http::GatewayBody;
use crate::route::backend::{Backend, InFlight};
use crate::route::{prefix, RouteHints, SelectError, Selected};
use crate::shared::affinity::FleetPin;
use crate::translate::{self, Plan, Wire};
use crate::upstream::pool::UpstreamBody;

/// How long a backend whose every pool key was refused (401) is left alone before it is tried
/// again (its keys stay out until the configuration changes; the fleet's refusals lapse).
const REFUSED_POOL_REST: Duration = Duration::from_secs(60);

/// An upstream answer whose status, headers and first frame are in hand.
pub(super) struct Answer {
    pub parts: http::response::Parts,
    pub body: UpstreamBody,
    pub first: Option<Frame<Bytes>>,
    pub guard: InFlight,
    pub ttfb: Duration,
    pub plan: Plan,
    /// Why this backend (sticky session, cache affinity), for `x-switchyard-route`.
    pub route: Option<HeaderValue>,
    /// Attempts made up to this answer (a resume is one more, within `routing.max_attempts`).
    pub attempts: u32,
}

/// Where routing and attempts ended.
// The answer is the common case: boxing it would cost an allocation per request.
#[allow(clippy::large_enum_variant)]
pub(super) enum Reached {
    /// An answer to relay.
    Answer(Answer),
    /// Answered by the gateway itself (token counting for a backend that cannot).
    Local(Box<Response<GatewayBody>>),
}

/// What one round of selection gave.
enum Pick {
    Backend(Selected),
    /// Waited for a backend to cool down or come back: select again.
    Again,
    /// No backend of this model can take the request.
    Stop,
}

/// What an attempt is, once planned for its backend.
enum Planned {
    Send(Plan, Wire, Bytes),
    /// This backend cannot serve the request: try another.
    Skip,
    Local(Box<Response<GatewayBody>>),
}

/// The attempts of one request, across its models.
pub(super) struct Failover<'f> {
    hints: RouteHints<'f>,
    /// The key's id, for the admission queue's fairness ("" without a key).
    key: &'f str,
    /// Backends that already failed this request (for the current model), and those a policy's
    /// `route: {backends}` left out.
    pub tried: Vec<usize>,
    /// Backends a policy left out: never tried, for any model.
    excluded: Vec<usize>,
    /// Time spent waiting on upstreams, for `Server-Timing` and the overhead histogram.
    pub upstream_wait: Duration,
    failure: Option<GatewayError>,
    /// A retryable (5xx/429) answer, kept to pass through if no other backend can take the request.
    held: Option<Answer>,
    next_attempt: u32,
    waits: u32,
    /// How long until a cooling backend is back, when that was too long to wait.
    cooling: Option<Duration>,
    /// This request found a backend unreachable (connection refused or reset).
    refused: bool,
    /// The fallback models not yet tried.
    fallbacks: std::slice::Iter<'f, String>,
    /// Another endpoint picker's order for this request (`backends[].epp`).
    follow: Option<super::follow::Following>,
}

impl<'f> Failover<'f> {
    pub fn new(call: &Call<'f>, key: &'f str, exchange: &mut Exchange, body_session: Option<&'f str>) -> Self {
        let app: &'f crate::app::App = call.app;
        let routed = &mut exchange.routed;
        let session = header_session(call.headers).or(body_session);
        Failover {
            hints: RouteHints {
                session,
                chain: std::mem::take(&mut routed.chain),
                engine: None,
                pinned: None,
                spare: usize::from(call.batch.is_some() || call.experiment.is_some()),
                never_wait: call.experiment.is_some(),
            },
            key,
            tried: exchange.policy.as_ref().map(|p| p.excluded.clone()).unwrap_or_default(),
            excluded: exchange.policy.as_ref().map(|p| p.excluded.clone()).unwrap_or_default(),
            upstream_wait: Duration::ZERO,
            failure: None,
            held: None,
            next_attempt: 0,
            waits: 0,
            cooling: None,
            refused: false,
            fallbacks: app.config.fallbacks_for(&routed.requested, &routed.model).iter(),
            follow: None,
        }
    }

    /// When the model's backends are a pool following another endpoint picker: its pick.
    pub async fn follow_picker(&mut self, call: &Call<'_>, exchange: &mut Exchange) -> Result<(), GatewayError> {
        if call.app.config.pools.iter().any(|p| p.follow.is_some()) {
            self.follow = super::follow::ask(call, exchange).await?;
        }
        Ok(())
    }

    /// Tell the picker that was followed which endpoint answered.
    pub fn report_served(&mut self, call: &Call<'_>, answer: &Answer) {
        if let Some(follow) = &mut self.follow {
            follow.served(answer.guard.backend(), answer.parts.status.as_u16(), &call.app.metrics);
        }
    }

    /// In a fleet, a conversation (its session key, or its root) goes where the fleet sent it last.
    pub async fn fleet_pin(&mut self, call: &Call<'_>, exchange: &Exchange) -> Option<FleetPin> {
        let app = call.app;
        let model = &exchange.routed.model;
        let shared = app.shared.as_ref().filter(|_| app.router.backends_serving(model) > 1)?;
        let sticky = self.hints.session.filter(|_| app.config.affinity.sticky_sessions);
        let conversation = sticky.map(|s| prefix::digest(&[s.as_bytes()])).or(exchange.routed.root)?;
        let pin = FleetPin::lookup(shared, model, conversation, app.config.affinity.session_ttl).await;
        self.hints.pinned = pin.backend.as_deref().and_then(|b| app.router.id_of(b));
        Some(pin)
    }

    /// The prompt keyed as the model's event-publishing engines key it (cache-aware routing, a
    /// model with such backends and a tokenizer). Engines are sent OpenAI chat requests: another
    /// API's chat request is keyed as translated for them (the translation is kept for the
    /// attempt, which sends the same bytes).
    pub async fn key_for_engines(&mut self, call: &Call<'_>, exchange: &mut Exchange) {
        use crate::endpoint::Endpoint;
        let router = &call.app.router;
        let Some(block_size) = router.engine_block_size(&exchange.routed.model) else { return };
        let body = match call.endpoint {
            Endpoint::ChatCompletions => exchange.routed.body.clone(),
            Endpoint::Messages
            | Endpoint::Responses
            | Endpoint::OllamaChat
            | Endpoint::GeminiGenerate
            | Endpoint::GeminiStream => match exchange.bodies.encode(Wire::OpenAiChat) {
                Ok(body) => body,
                Err(_) => return,
            },
            _ => return,
        };
        self.hints.engine = router.engine_keys(&exchange.routed.model, &body, block_size).await;
    }

    /// Every model in turn until one answers; the answer held, or why nothing could.
    pub async fn run(
        &mut self,
        call: &Call<'f>,
        exchange: &mut Exchange,
        settlement: &mut Settlement,
    ) -> Result<Reached, GatewayError> {
        loop {
            if let Some(reached) = self.attempts(call, exchange, settlement).await? {
                return Ok(reached);
            }
            if !self.fall_back(call, exchange, settlement) {
                break;
            }
        }
        match self.held.take() {
            Some(mut answer) => {
                answer.attempts = call.app.config.max_attempts;
                Ok(Reached::Answer(answer))
            }
            None => Err(self.give_up(&exchange.routed.model)),
        }
    }

    /// The current model's attempts: an answer to relay, or None when its backends are exhausted.
    async fn attempts(
        &mut self,
        call: &Call<'f>,
        exchange: &mut Exchange,
        settlement: &mut Settlement,
    ) -> Result<Option<Reached>, GatewayError> {
        let app = call.app;
        while self.next_attempt < app.config.max_attempts {
            let attempt = self.next_attempt;
            self.next_attempt += 1;
            let selected = match self.select(call, &exchange.routed.model, attempt).await? {
                Pick::Backend(selected) => selected,
                Pick::Again => continue,
                Pick::Stop => break,
            };
            let Selected { backend, explain, slot } = selected;
            let route = explain.and_then(|e| HeaderValue::try_from(e).ok());
            self.tried.push(backend.id);
            settlement.went_to(&backend, route.as_ref());
            let (plan, wire, body) = match self.plan(call, exchange, &backend)? {
                Planned::Send(plan, wire, body) => (plan, wire, body),
                Planned::Skip => continue,
                Planned::Local(resp) => return Ok(Some(Reached::Local(resp))),
            };
            if attempt > 0 {
                app.metrics.retries.fetch_add(1, Relaxed);
            }
            let remaining = call.deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                self.failure = Some(GatewayError::UpstreamTimeout);
                break;
            }
            let (outcome, ttfb) = self.send(call, exchange, settlement, &backend, wire, body, remaining).await;
            let (parts, body, first) = match outcome {
                Ok(head) => head,
                Err(e) => {
                    self.unanswered(call, &backend, e);
                    continue;
                }
            };
            let answer = Answer { parts, body, first, guard: slot, ttfb, plan, route, attempts: attempt + 1 };
            if let Some(answer) = self.judge(call, exchange, &backend, answer) {
                return Ok(Some(Reached::Answer(answer)));
            }
        }
        Ok(None)
    }

    /// A backend for this attempt, waiting for one in the model's queue or for a cooling one.
    async fn select(&mut self, call: &Call<'_>, model: &str, attempt: u32) -> Result<Pick, GatewayError> {
        let app = call.app;
        if let Some(follow) = &self.follow {
            // The picker's endpoints in its order, and no other.
            return Ok(app.router.select_listed(&follow.order, &self.tried).map_or(Pick::Stop, Pick::Backend));
        }
        let queued = queue::select(app, model, &self.hints, &self.tried, self.key, call.deadline, attempt == 0).await;
        match queued.inspect_err(|e| app.metrics.count_error(e.kind()))? {
            Ok(selected) => Ok(Pick::Backend(selected)),
            // No backend serves it (a dead backend's models leave the table): a fallback may.
            Err(SelectError::UnknownModel) if self.fallbacks.len() > 0 => Ok(Pick::Stop),
            Err(SelectError::UnknownModel) => Err(GatewayError::ModelNotFound { model: model.to_owned() }),
            Err(SelectError::NoneAvailable | SelectError::Full) => Ok(Box::pin(self.wait(call, model, attempt)).await),
        }
    }

    /// Every backend is down, cooling or full: wait for one if that is short and allowed.
    async fn wait(&mut self, call: &Call<'_>, model: &str, attempt: u32) -> Pick {
        let app = call.app;
        let more = self.waits < app.config.max_attempts;
        match retry::wait_for_cooldown(app, model, self.waits, call.deadline).await {
            retry::Wait::Waited if more => return self.again(attempt),
            retry::Wait::TooLong(left) => self.cooling = Some(left),
            // Unreachable backends and no fallback: a backoff for one to come back.
            retry::Wait::Nothing
                if self.refused
                    && more
                    && self.fallbacks.len() == 0
                    && retry::wait_backoff(app, self.waits, call.deadline).await =>
            {
                return self.again(attempt)
            }
            _ => {}
        }
        Pick::Stop
    }

    /// After a wait: the same attempt again, over every backend.
    fn again(&mut self, attempt: u32) -> Pick {
        (self.waits, self.next_attempt) = (self.waits + 1, attempt);
        self.tried.clone_from(&self.excluded);
        Pick::Again
    }

    /// The attempt planned for `backend`'s API: the client's bytes, a translation, or a local answer.
    fn plan(&mut self, call: &Call<'_>, exchange: &mut Exchange, backend: &Backend) -> Result<Planned, GatewayError> {
        let plan = match backend.serves(call.endpoint) {
            true => translate::plan(call.endpoint, backend.kind()),
            false => Plan::Unsupported(call.endpoint.spec().capability),
        };
        Ok(match plan {
            Plan::Pass(wire) => Planned::Send(plan, wire, exchange.routed.body.clone()),
            Plan::Translate(wire) => match exchange.bodies.encode(wire) {
                Ok(body) => Planned::Send(plan, wire, body),
                Err(BodyError::Request(e)) => return Err(GatewayError::from_translate(&e)),
                Err(BodyError::Wire(e)) => {
                    call.app.metrics.count_error("unsupported_feature");
                    self.failure = Some(GatewayError::from_translate(&e));
                    Planned::Skip
                }
            },
            Plan::Local => {
                Planned::Local(Box::new(translation::count_tokens_locally(&mut exchange.bodies, call.endpoint)?))
            }
            Plan::Unsupported(feature) => {
                call.app.metrics.count_error("unsupported_feature");
                self.failure = Some(GatewayError::bad_request(
                    format!("backend `{}` ({}) cannot serve {feature}", backend.name(), backend.kind().as_str()),
                    None,
                ));
                Planned::Skip
            }
        })
    }

    /// Send the attempt and wait for its answer's head, within the first-byte timeout.
    #[allow(clippy::too_many_arguments)]
    async fn send(
        &mut self,
        call: &Call<'_>,
        exchange: &Exchange,
        settlement: &mut Settlement,
        backend: &Arc<Backend>,
        wire: Wire,
        body: Bytes,
        remaining: Duration,
    ) -> (Result<(http::response::Parts, UpstreamBody, Option<Frame<Bytes>>), AttemptError>, Duration) {
        backend.stats.attempts.fetch_add(1, Relaxed);
        let sent = Instant::now();
        let limit = remaining.min(call.app.config.timeouts.first_byte);
        let trace = settlement.meter().and_then(|m| m.trace_attempt(backend));
        let headers = Headers {
            model: &exchange.routed.model,
            stream: call.stream,
            client: call.headers,
            request_id: call.request_id,
            trace,
            credentials: None,
            extra: exchange.policy.as_ref().map_or(&[][..], |p| &p.headers),
        };
        let outcome = match &exchange.upload {
            // An upload streams for as long as the client sends: the request's deadline bounds it.
            Some(upload) => super::upload::attempt(call.app, backend, wire, upload, headers, remaining).await,
            None if backend.keys.is_none() => attempt_once(call.app, backend, wire, body, headers, limit).await,
            // Boxed, as the rare path: its future would otherwise enlarge every request's.
            None => {
                let (outcome, key) = Box::pin(keys::attempt(call.app, backend, wire, body, headers, limit)).await;
                if let (Some(key), Some(m)) = (key, settlement.meter()) {
                    m.pool_key(key.keys.name(key.key), key.spent_hook(call.app, backend.name()));
                }
                outcome
            }
        };
        let ttfb = sent.elapsed();
        self.upstream_wait += ttfb;
        if let Some(m) = settlement.meter() {
            m.trace_outcome(match &outcome {
                Ok((parts, _, _)) => Ok(parts.status.as_u16()),
                Err(AttemptError::Transport | AttemptError::Spent) => Err("connection_error"),
                Err(AttemptError::Timeout) => Err("timeout"),
                Err(AttemptError::TooLarge) => Err("request_too_large"),
                Err(AttemptError::NoKey(_)) => Err("keys_resting"),
            });
        }
        (outcome, ttfb)
    }

    /// No answer came: the backend is marked failed, and the next attempt goes elsewhere.
    fn unanswered(&mut self, call: &Call<'_>, backend: &Backend, error: AttemptError) {
        let metrics = &call.app.metrics;
        match error {
            AttemptError::Transport => {
                metrics.count_error("upstream_connect");
                backend.mark_failed("transport error");
                self.refused = true;
                // The backend was dead, not slow: to the client that is "no healthy backend" (503, retryable).
                self.failure = None;
            }
            AttemptError::Timeout => {
                metrics.count_error("upstream_timeout");
                backend.mark_failed("timeout");
                self.failure = Some(GatewayError::UpstreamTimeout);
            }
            // The client's upload, not the backend, failed: why stands, and no backend is blamed.
            AttemptError::TooLarge => {
                self.failure = Some(GatewayError::PayloadTooLarge { limit: call.app.config.max_upload_bytes });
            }
            AttemptError::Spent => {}
            // Every key of its pool rests: the backend cools until the first is back, and the
            // request waits for it or goes elsewhere as for any cooling backend.
            AttemptError::NoKey(back_in) => {
                let rest = back_in.unwrap_or(REFUSED_POOL_REST);
                backend.health.cool_down(call.app.clock.mono_ms() + rest.as_millis() as u64);
                if back_in.is_none() {
                    tracing::warn!(backend = backend.name(), "every key of the backend's pool was refused");
                }
            }
        }
    }

    /// An answer began: the backend's health learns from its status. The answer to relay, or
    /// None to go on: a retryable status (held), or a prompt too long for this model's window
    /// (its larger-window fallbacks come next, and this model's attempts end).
    fn judge(&mut self, call: &Call<'f>, exchange: &Exchange, backend: &Backend, answer: Answer) -> Option<Answer> {
        let app: &'f crate::app::App = call.app;
        let status = answer.parts.status;
        if status.is_server_error() {
            backend.stats.failures.fetch_add(1, Relaxed);
            app.metrics.count_error("upstream_status");
            if backend.health.on_server_error(app.clock.mono_ms()) {
                tracing::warn!(backend = backend.name(), %status, "circuit breaker opened");
            }
        } else {
            backend.health.on_success();
        }
        retry::on_answer(app, backend, status, &answer.parts.headers, answer.attempts - 1);
        let first_bytes = answer.first.as_ref().and_then(Frame::data_ref).map_or(&[][..], |b| &b[..]);
        if status == StatusCode::BAD_REQUEST && fallback::context_window_exceeded(first_bytes) {
            let routed = &exchange.routed;
            let larger = app.config.context_fallbacks_for(&routed.requested, &routed.model);
            if !larger.is_empty() {
                self.fallbacks = larger.iter();
                let message = format!("the prompt does not fit the context window of `{}`", routed.model);
                self.failure = Some(GatewayError::bad_request(message, Some("messages")));
                self.next_attempt = app.config.max_attempts;
                return None;
            }
        }
        if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
            self.held = Some(answer);
            return None;
        }
        Some(answer)
    }

    /// Fall back when nothing answered, or what answered is on `routing.fallback_statuses`:
    /// the next fallback model, spliced into the bodies. False when there is none.
    fn fall_back(&mut self, call: &Call<'_>, exchange: &mut Exchange, settlement: &mut Settlement) -> bool {
        let app = call.app;
        let fall_back =
            self.held.as_ref().is_none_or(|a| app.config.fallback_statuses.contains(&a.parts.status.as_u16()));
        let Some(next) = fall_back.then(|| self.fallbacks.next()).flatten() else { return false };
        let to = app.config.resolve_alias(next).to_owned();
        // A Gemini request's model is in its path, not its body.
        let in_path = call.endpoint.spec().model_in == ModelIn::Path;
        let splice = |body: &Bytes| if in_path { Ok(body.clone()) } else { with_model(body, &to) };
        let (Ok(upstream), Ok(client)) = (splice(&exchange.routed.body), splice(&exchange.client_body)) else {
            return false;
        };
        app.metrics.count_fallback(&exchange.routed.model, &to);
        tracing::debug!(from = %exchange.routed.model, to = %to, "falling back to another model");
        (exchange.routed.body, exchange.client_body) = (upstream, client);
        exchange.bodies = Bodies::new(call.endpoint, exchange.client_body.clone(), to.clone());
        settlement.serve(&to);
        exchange.routed.model = to;
        (self.next_attempt, self.waits, self.cooling, self.failure) = (0, 0, None, None);
        self.tried.clone_from(&self.excluded);
        // This request's fleet pin names a backend of the first model, and its engine keys
        // were made with the first model's tokenizer.
        self.hints.pinned = None;
        self.hints.engine = None;
        true
    }

    /// Nothing answered: why, as the client is told.
    fn give_up(&mut self, model: &str) -> GatewayError {
        match (self.failure.take(), self.cooling) {
            (Some(e), _) => e,
            // Backends that are only cooling down: say when to come back.
            (None, Some(left)) => GatewayError::BackendsCooling {
                model: model.to_owned(),
                retry_after_secs: left.as_secs_f64().ceil() as u64,
            },
            (None, None) => GatewayError::NoHealthyBackend { model: model.to_owned() },
        }
    }

    /// What carrying a broken stream on elsewhere needs from the attempts so far.
    pub fn resumption<'r>(&'r self, call: &'r Call<'_>, exchange: &'r Exchange, attempts: u32) -> Resumption<'r> {
        Resumption {
            tried: &self.tried,
            client_body: &exchange.client_body,
            model: &exchange.routed.model,
            headers: call.headers,
            attempts,
            fallbacks: self.fallbacks.as_slice(),
            chain: &self.hints.chain,
        }
    }
}
