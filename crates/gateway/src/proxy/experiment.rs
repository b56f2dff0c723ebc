//! The experiment phase (issue 57): before admission a request for an experiment's model is
//! given its variant (a stable hash of its unit) and the variant's model; after the answer is
//! under way, off the request path, the shadow is sent and the answers are kept side by side and
//! scored (`proxy/scorers.rs`). Nothing here can fail or delay the primary.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Response};
use switchyard_experiments::spec::SHADOW;
use tokio::sync::oneshot;

use super::internal::{call_internal, InternalCall};
use super::settle::Settlement;
use super::{Call, Exchange, Inbound};
use crate::app::App;
use crate::auth::Identity;
use crate::endpoint::{Endpoint, ModelIn};
use crate::error::GatewayError;
use crate::experiments::{Assignment, Units};
use crate::http::parse::{with_model, RoutedRequest};
use crate::http::relay::AnswerSink;
use crate::http::GatewayBody;

pub static VARIANT_HEADER: HeaderName = HeaderName::from_static("x-switchyard-variant");

/// The most of an answer kept to compare and score.
const MAX_KEPT: usize = 1 << 20;

/// Assign: the request's variant, its model put in place of the one asked for. None for a
/// request no experiment covers, the gateway's own calls, and a variant the key may not use
/// (then the model asked for answers, as without the experiment).
pub(super) fn assign(
    app: &App,
    inbound: &Inbound<'_>,
    identity: &Identity,
    routed: &mut RoutedRequest,
) -> Option<Assignment> {
    let experiments = &app.experiments;
    if experiments.is_empty()
        || inbound.guard_call.is_some()
        || inbound.batch.is_some()
        || inbound.experiment.is_some()
        || !experiments.covers(&routed.requested, &routed.model)
    {
        return None;
    }
    let key = identity.key();
    let body_user = body_user(&routed.body);
    let units = Units {
        key: key.map(|k| k.id.as_str()),
        user: body_user.as_deref().or_else(|| key.and_then(|k| k.user_name())),
        session: super::header_session(inbound.headers).or(routed.session.as_deref()),
        request_id: inbound.request_id.to_str().unwrap_or(""),
    };
    let allowed = |model: &str| key.is_none_or(|k| k.allows_model(model));
    let assignment = experiments.assign(
        (&routed.requested, &routed.model),
        identity.team(),
        &units,
        &allowed,
        app.clock.unix_ms(),
    )?;
    let model = assignment.model();
    if model != routed.requested {
        let resolved = app.config.resolve_alias(model).to_owned();
        if inbound.endpoint.spec().model_in != ModelIn::Path {
            routed.body = with_model(&routed.body, &resolved).ok()?;
        }
        // The variant's own model: its fallbacks, its cache entries, its permission.
        routed.requested = model.to_owned();
        routed.model = resolved;
    }
    Some(assignment)
}

/// The body's OpenAI `user` field (or Anthropic's `metadata.user_id`), read only for experiments.
fn body_user(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Metadata {
        user_id: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct User {
        user: Option<String>,
        metadata: Option<Metadata>,
    }
    let found = serde_json::from_slice::<User>(body).ok()?;
    found.user.or(found.metadata.and_then(|m| m.user_id)).filter(|u| !u.is_empty())
}

/// What watches an assigned request's answer: its tap, and what is done with the answer.
pub(super) struct Watch {
    assignment: Assignment,
    answer: Option<oneshot::Receiver<Vec<u8>>>,
    judge: bool,
    webhook: bool,
}

impl Watch {
    /// The phase's second half, once the request is admitted: its record names the experiment
    /// and variant, and the answer gets its tap when something reads it.
    pub fn open(
        assignment: Assignment,
        call: &Call<'_>,
        exchange: &mut Exchange,
        settlement: &mut Settlement,
    ) -> Watch {
        if let Some(meter) = settlement.meter() {
            meter.experiment(assignment.experiment(), assignment.variant_name());
        }
        let (watch, tap) = Watch::new(assignment, call);
        exchange.tap = tap;
        watch
    }

    /// The answer's head is out: say the variant, and start what runs after the answer.
    pub fn answered(
        self,
        call: &Call<'_>,
        result: &mut Result<Response<GatewayBody>, GatewayError>,
        client_body: Bytes,
    ) {
        let Ok(resp) = result else { return };
        if let Ok(variant) = HeaderValue::from_str(self.assignment.variant_name()) {
            resp.headers_mut().insert(&VARIANT_HEADER, variant);
        }
        self.spawn(call, client_body);
    }

    /// Decide what this request gets (shadow, judge, webhook, by their samples) and make the tap
    /// when any needs the answer.
    fn new(assignment: Assignment, call: &Call<'_>) -> (Watch, Option<Box<dyn AnswerSink>>) {
        use switchyard_experiments::assign::point;
        let request_id = call.request_id.to_str().unwrap_or("");
        let spec = &assignment.live.spec;
        let sampled = |what: &str, share: f64| point(&format!("{}#{what}", spec.name), request_id) < share;
        let judge = spec.judge.as_ref().is_some_and(|j| sampled("judge", j.sample));
        let webhook = spec.webhook.as_ref().is_some_and(|w| sampled("webhook", w.sample));
        let watched = assignment.shadow || judge || webhook;
        let (tap, answer) = match watched {
            true => {
                let (tx, rx) = oneshot::channel();
                let tap = Tap { body: Vec::new(), over: false, tx, endpoint: call.endpoint, stream: call.stream };
                (Some(Box::new(tap) as Box<dyn AnswerSink>), Some(rx))
            }
            false => (None, None),
        };
        (Watch { assignment, answer, judge, webhook }, tap)
    }

    /// The answer is under way: send the shadow, keep the pair, score — on a task of its own.
    fn spawn(self, call: &Call<'_>, client_body: Bytes) {
        let Some(answer) = self.answer else { return };
        let (app, request_id) = (call.app.clone(), call.request_id.to_str().unwrap_or("").to_owned());
        let (endpoint, stream) = (call.endpoint, call.stream);
        let ctx = Context { app, endpoint, stream, request_id, client_body, assignment: self.assignment };
        let (judge, webhook) = (self.judge, self.webhook);
        tokio::spawn(async move {
            let shadow = match ctx.assignment.shadow_model() {
                Some(model) => Some(ctx.send_shadow(model).await),
                None => None,
            };
            // The primary's answer ends when its client has read it (or never: then it is None).
            let limit = ctx.app.config.timeouts.request;
            let primary = tokio::time::timeout(limit, answer).await.ok().and_then(Result::ok);
            let compared = ctx.compare(primary.as_deref(), shadow.as_ref());
            if let Some(shadow) = &shadow {
                ctx.keep_pair(&compared, shadow).await;
            }
            super::scorers::score(&ctx, &compared, judge, webhook).await;
        });
    }
}

/// Reads the primary's answer for its watch; sends it only if it ended whole.
struct Tap {
    body: Vec<u8>,
    over: bool,
    tx: oneshot::Sender<Vec<u8>>,
    endpoint: Endpoint,
    stream: bool,
}

impl AnswerSink for Tap {
    fn push(&mut self, data: &[u8]) {
        if self.over || self.body.len() + data.len() > MAX_KEPT {
            self.over = true;
            return;
        }
        self.body.extend_from_slice(data);
    }
    fn finish(self: Box<Self>) {
        if !self.over {
            let _ = self.tx.send(self.body);
        }
    }
    /// A stream its client closed after the terminal event is whole all the same.
    fn abandoned(self: Box<Self>) {
        if self.stream && crate::cache::stream_complete(self.endpoint, &self.body) {
            self.finish();
        }
    }
}

/// An assigned request, as the work after its answer needs it.
pub(super) struct Context {
    pub app: Arc<App>,
    pub endpoint: Endpoint,
    /// The client asked for a stream (the answers read back are streams).
    pub stream: bool,
    pub request_id: String,
    pub client_body: Bytes,
    pub assignment: Assignment,
}

/// The shadow's call: its status, answer and time.
pub(super) struct ShadowAnswer {
    pub model: String,
    pub status: u16,
    pub body: Bytes,
    pub latency: Duration,
}

/// The request and both answers, as text.
pub(super) struct Compared {
    pub request: Option<String>,
    pub primary: Option<String>,
    pub shadow: Option<String>,
}

impl Context {
    /// The same request (after the guards) to the shadow model, as the gateway itself: never
    /// the key's limits or budget; it waits for no slot (refused at once when the backend has
    /// none to spare); its record is the experiment's, variant `shadow`.
    async fn send_shadow(&self, model: &str) -> ShadowAnswer {
        let resolved = self.app.config.resolve_alias(model).to_owned();
        let body = match self.endpoint.spec().model_in {
            ModelIn::Path => self.client_body.clone(),
            _ => with_model(&self.client_body, &resolved).unwrap_or_else(|_| self.client_body.clone()),
        };
        let id = format!("{}-{SHADOW}", self.request_id);
        let started = Instant::now();
        let call = InternalCall {
            endpoint: self.endpoint,
            identity: Identity::from(crate::auth::Principal::Master),
            body,
            deadline: started + self.app.config.timeouts.request,
            request_id: HeaderValue::from_str(&id).unwrap_or_else(|_| HeaderValue::from_static("shadow")),
            guard_call: None,
            batch: None,
            experiment: Some((self.assignment.experiment(), SHADOW)),
        };
        let (status, body) = call_internal(&self.app, call).await;
        self.assignment.live.count_shadow(status.as_u16());
        ShadowAnswer { model: model.to_owned(), status: status.as_u16(), body, latency: started.elapsed() }
    }

    fn compare(&self, primary: Option<&[u8]>, shadow: Option<&ShadowAnswer>) -> Compared {
        let stream = self.stream;
        let text = |body: &[u8]| crate::translate::replay::read_answer(self.endpoint, stream, body).map(|a| a.text());
        Compared {
            request: request_text(self.endpoint, &self.client_body),
            primary: primary.and_then(text),
            shadow: shadow.filter(|s| s.status < 300).and_then(|s| text(&s.body)),
        }
    }

    /// Redacted and cut, as request logging keeps bodies.
    fn kept(&self, text: Option<&String>) -> Option<String> {
        let max = self.app.config.console.max_stored_body_bytes;
        let text = text?;
        // Without `console.store_bodies` there is no redactor of the deployment's own secrets,
        // but the patterns every redactor knows (API keys, private keys) still apply.
        let text = match &self.app.redactor {
            Some(redactor) => redactor.redact(text),
            None => crate::redact::Redactor::default().redact(text),
        };
        let mut cut = max.min(text.len());
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        Some(text[..cut].to_owned())
    }

    async fn keep_pair(&self, compared: &Compared, shadow: &ShadowAnswer) {
        let Some(store) = &self.app.store else { return };
        let a = &self.assignment;
        let pair = crate::store::PairRow {
            request_id: self.request_id.clone(),
            experiment: a.experiment().to_owned(),
            variant: a.variant_name().to_owned(),
            primary_model: a.model().to_owned(),
            shadow_model: shadow.model.clone(),
            request: self.kept(compared.request.as_ref()),
            primary_answer: self.kept(compared.primary.as_ref()),
            shadow_answer: self.kept(compared.shadow.as_ref()),
            shadow_status: i32::from(shadow.status),
            shadow_latency_ms: shadow.latency.as_secs_f64() * 1000.0,
            ts_ms: self.app.clock.unix_ms(),
        };
        if let Err(e) = store.put_pair(&pair).await {
            tracing::warn!(error = %e, experiment = %pair.experiment, "a shadow pair could not be kept");
        }
    }
}

/// The conversation as text: one `role: text` line per message, the system prompt first.
pub(super) fn request_text(endpoint: Endpoint, body: &[u8]) -> Option<String> {
    let decoded = crate::translate::Decoded::decode(endpoint, body, "").ok()?;
    let chat = decoded.chat()?;
    let mut out = String::new();
    for system in &chat.system {
        out.push_str("system: ");
        out.push_str(system);
        out.push('\n');
    }
    for message in &chat.messages {
        let text: String = message
            .content
            .iter()
            .filter_map(|p| match p {
                switchyard_protocol::chat::Part::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        let role = format!("{:?}", message.role).to_lowercase();
        out.push_str(&format!("{role}: {text}\n"));
    }
    Some(out)
}
