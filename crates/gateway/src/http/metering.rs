//! Metering one proxied request: watches the relayed frames for token usage (SSE tap or body
//! tap), strips the usage chunk the gateway itself asked for, settles the key's token
//! reservation, and appends exactly one `UsageRecord` to the journal — before the end of the
//! body is handed to the client, or when the request ends any other way (error, disconnect).
//! With telemetry on, it carries the request's trace too and hands it over at the same moment.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::config::{Config, Counted};
use crate::limit::{BudgetPermit, Permit};
use crate::metrics::Metrics;
use crate::records::{StoredBodies, UsageRecord};
use crate::redact::Redactor;
use crate::route::backend::Backend;
use crate::telemetry::{Outcome, Telemetry, Trace, Tracing};
use crate::usage::extract::BodyUsageTap;
use crate::usage::{estimate_tokens, Journal, SseUsageTap, Tokens};

/// Bodies larger than this are not kept for reading `usage` (tokens are estimated instead).
const BODY_TAP_LIMIT: usize = 16 * 1024 * 1024;

enum Tap {
    Sse(SseUsageTap),
    Body(BodyUsageTap),
}

/// Read past the cap, so a secret that straddles it is still recognised and redacted whole.
const CAPTURE_SLACK: usize = 256;

/// Bodies kept for the request log (`console.store_bodies`).
struct Capture {
    redactor: Arc<Redactor>,
    max: usize,
    request: Bytes,
    response: Vec<u8>,
    response_len: usize,
}

impl Capture {
    fn push(&mut self, frame: &[u8]) {
        self.response_len += frame.len();
        let room = (self.max + CAPTURE_SLACK).saturating_sub(self.response.len());
        self.response.extend_from_slice(&frame[..frame.len().min(room)]);
    }

    fn finish(self) -> StoredBodies {
        let (request, request_cut) = kept(&self.request, self.request.len(), self.max, &self.redactor);
        let (response, response_cut) = kept(&self.response, self.response_len, self.max, &self.redactor);
        StoredBodies { request, response, truncated: request_cut || response_cut }
    }
}

/// `bytes` (the first part of a body `len` long) as redacted text of at most `max` bytes, and
/// whether it was cut.
fn kept(bytes: &[u8], len: usize, max: usize, redactor: &Redactor) -> (String, bool) {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(max + CAPTURE_SLACK)]);
    let mut text = redactor.redact(&text);
    let cut = len > max || text.len() > max;
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    (text, cut)
}

/// A request's tracing and where a recorded trace goes when the request ends.
struct Traced {
    telemetry: Arc<Telemetry>,
    tracing: Tracing,
}

pub struct Meter {
    /// None: usage recording is off and the meter exists for the trace.
    journal: Option<Arc<Journal>>,
    /// Inline: the meter itself is boxed, and a recorded trace is boxed within.
    traced: Option<Traced>,
    /// Bodies being kept, when the operator opted in (boxed for the same reason).
    capture: Option<Box<Capture>>,
    /// The guards' verdicts on this request (with guardrails configured).
    verdicts: Option<Arc<crate::records::VerdictTally>>,
    config: Arc<Config>,
    /// Where time to first token and tokens are counted, for `/metrics` and the console.
    metrics: Arc<Metrics>,
    record: UsageRecord,
    started: Instant,
    /// Prompt tokens estimated from the request body, used when the backend reports none.
    prompt_estimate: u64,
    tap: Option<Tap>,
    permit: Option<Permit>,
    budget: Option<BudgetPermit>,
    /// Usage read by the relay itself (a translated or observed stream, a translated body).
    reported: Option<Tokens>,
    /// Generated characters the relay saw, for an estimate when nothing was reported.
    reported_chars: usize,
    /// Not billable (token counting): recorded with zero tokens.
    uncharged: bool,
    /// What attempts before a resumed stream's current one consumed (estimated).
    earlier: Option<Tokens>,
    /// What the endpoint is priced by besides tokens, and what the request asked for of it
    /// (images: how many, what size and quality).
    units_kind: crate::endpoint::Units,
    units: Option<Box<crate::records::UsageUnits>>,
    /// A cached answer's first generation: `(prompt, completion)` tokens saved.
    saved: Option<(u64, u64)>,
    /// The response cache's verdict (`x-switchyard-cache`), kept with the record.
    cache_verdict: Option<Box<str>>,
    /// An upload's duration from its WAV header (f64 bits; 0: unknown), read as it streams.
    upload_seconds: Option<Arc<std::sync::atomic::AtomicU64>>,
    /// The answer is held for remote guards: when it ends the meter waits here, unrecorded,
    /// for their verdict (`park_until_judged`).
    park: Option<Parked>,
    /// Told the request's tokens when it is recorded (the pool key it went with counts them).
    on_spent: Option<SpentHook>,
    recorded: bool,
}

/// What is told a request's total tokens once they are known.
pub type SpentHook = Box<dyn FnOnce(u64) + Send + Sync>;

/// Where a meter whose answer is held for judging waits for the verdict. Whoever drops the last
/// handle with the meter still inside records it as it stands.
pub type Parked = Arc<std::sync::Mutex<Option<Meter>>>;

impl Meter {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        journal: Option<Arc<Journal>>,
        config: Arc<Config>,
        metrics: Arc<Metrics>,
        request_id: &str,
        key: Option<&crate::records::KeyRecord>,
        requested: &str,
        served: &str,
        request_bytes: usize,
        started: Instant,
        now_unix_ms: i64,
    ) -> Meter {
        Meter {
            record: UsageRecord::started(
                request_id.to_owned(),
                now_unix_ms - started.elapsed().as_millis() as i64,
                key,
                requested,
                served,
            ),
            journal,
            traced: None,
            capture: None,
            verdicts: None,
            config,
            metrics,
            started,
            prompt_estimate: (request_bytes as u64).div_ceil(4),
            tap: None,
            permit: None,
            budget: None,
            reported: None,
            reported_chars: 0,
            uncharged: false,
            earlier: None,
            units_kind: crate::endpoint::Units::Tokens,
            units: None,
            saved: None,
            cache_verdict: None,
            upload_seconds: None,
            park: None,
            on_spent: None,
            recorded: false,
        }
    }

    /// When the answer ends, wait in the returned slot rather than record: the remote guards'
    /// verdicts on the whole answer (and a block's status) then reach the record.
    pub fn park_until_judged(&mut self) -> Parked {
        let slot = Parked::default();
        self.park = Some(slot.clone());
        slot
    }

    /// The answer was refused after it was relayed (a guard blocked it): the record says so; the
    /// tokens the backend spent are still counted.
    pub fn refused(&mut self, status: u16) {
        self.record.status = status;
    }

    /// The endpoint is priced by `kind` besides tokens; an image request's `n`, `size` and
    /// `quality` are read from its body here (the answer's images may be megabytes of base64).
    pub fn units(&mut self, kind: crate::endpoint::Units, request: &[u8]) {
        use crate::endpoint::Units;
        self.units_kind = kind;
        self.units = match kind {
            Units::Images => Some(Box::new(crate::usage::extract::image_request(request))),
            Units::Characters => Some(Box::new(crate::usage::extract::speech_request(request))),
            _ => None,
        };
    }

    /// What a form asked for (an image edit's `n`, `size` and `quality`), read as it arrived.
    pub fn form_units(&mut self, units: crate::records::UsageUnits) {
        if self.units_kind == crate::endpoint::Units::Images {
            self.units = Some(Box::new(units));
        }
    }

    /// The upload's duration as its header tells it, for when the answer does not.
    pub fn upload_seconds(&mut self, seconds: Arc<std::sync::atomic::AtomicU64>) {
        self.upload_seconds = Some(seconds);
    }

    /// Keep the request body and what the client receives with the record, redacted, each cut at `max`.
    pub fn keep_bodies(&mut self, request: Bytes, max: usize, redactor: Arc<Redactor>) {
        self.capture = Some(Box::new(Capture { redactor, max, request, response: Vec::new(), response_len: 0 }));
    }

    /// This request is a line of batch `batch`: its record says so, and it pays the model's
    /// `batch_discount` of the price.
    pub fn batch(&mut self, batch: &str) {
        self.record.batch_id = Some(batch.to_owned());
    }

    /// This request is model guard `guard`'s call to its classifier: its record says so.
    pub fn guard_call(&mut self, guard: &str) {
        self.record.guard_call = Some(guard.to_owned());
    }

    /// The policy rules that decided or routed the request, and the tags a `set` rule gave it.
    pub fn policy(&mut self, named: Option<&str>, tags: &[String]) {
        self.record.policy = named.map(str::to_owned);
        self.record.tags.extend_from_slice(tags);
    }

    /// The experiment that assigned the request, and its variant.
    pub fn experiment(&mut self, experiment: &str, variant: &str) {
        self.record.experiment = Some(experiment.to_owned());
        self.record.variant = Some(variant.to_owned());
    }

    /// Where the guards note their verdicts on this request; they go into its record.
    pub fn guard_verdicts(&mut self, tally: Arc<crate::records::VerdictTally>) {
        self.verdicts = Some(tally);
    }

    /// A guard changed the request (masked it): the kept body is what was sent on, never the
    /// client's raw text.
    pub fn request_body_changed(&mut self, body: Bytes) {
        if let Some(capture) = self.capture.as_mut() {
            capture.request = body;
        }
    }

    /// Carry the request's tracing; a recorded trace is handed to `telemetry` when the request ends.
    pub fn trace(&mut self, telemetry: Arc<Telemetry>, tracing: Tracing) {
        self.traced = Some(Traced { telemetry, tracing });
    }

    fn recorded_trace(&mut self) -> Option<&mut Trace> {
        match self.traced.as_mut() {
            Some(Traced { tracing: Tracing::Recorded(trace), .. }) => Some(trace),
            _ => None,
        }
    }

    /// An attempt at `backend` begins: the `traceparent` (and the caller's `tracestate`) for it.
    pub fn trace_attempt(&mut self, backend: &Arc<Backend>) -> Option<(http::HeaderValue, Option<http::HeaderValue>)> {
        let traced = self.traced.as_mut()?;
        match &mut traced.tracing {
            Tracing::Recorded(trace) => {
                let parent = trace.attempt(backend, traced.telemetry.span_id());
                Some((parent, trace.tracestate.clone()))
            }
            Tracing::PassedOn(context) => Some(context.clone()),
        }
    }

    /// The current attempt's answer began (`Ok(status)`) or it failed with no answer (`Err(why)`).
    pub fn trace_outcome(&mut self, outcome: Result<u16, &'static str>) {
        if let Some(trace) = self.recorded_trace() {
            match outcome {
                Ok(status) => trace.answered(status),
                Err(why) => trace.failed(why),
            }
        }
    }

    /// The request falls back to `model`: from here it is the model served.
    pub fn serve(&mut self, model: &str) {
        model.clone_into(&mut self.record.model_served);
    }

    /// The attempt went with this key of the backend's pool (its name, never the secret); `spent`
    /// is told the tokens when the request is recorded.
    pub fn pool_key(&mut self, name: &str, spent: SpentHook) {
        self.record.backend_key = Some(name.to_owned());
        self.on_spent = Some(spent);
    }

    /// Why the router chose this attempt's backend, for the request log.
    pub fn route(&mut self, why: &http::HeaderValue) {
        self.record.route = why.to_str().ok().map(str::to_owned);
    }

    /// Usage read elsewhere (by a translator): used instead of a tap's.
    pub fn report_usage(&mut self, tokens: Option<Tokens>, generated_chars: usize) {
        self.reported = tokens;
        self.reported_chars = generated_chars;
    }

    /// This request costs nothing (token counting): record it with zero tokens.
    pub fn uncharged(&mut self) {
        self.uncharged = true;
    }

    /// The response cache's part of the record: its verdict, and what a hit saved.
    fn cache_units(&mut self) {
        let r = &mut self.record;
        if let Some((prompt, completion)) = self.saved {
            let counted = Counted { prompt, cache_read: 0, cache_write: 0, completion };
            let units = r.units.get_or_insert_with(Box::default);
            units.saved_tokens = prompt + completion;
            units.saved_usd = self.config.cost(&r.model_served, &counted);
        }
        if let Some(verdict) = self.cache_verdict.take() {
            r.units.get_or_insert_with(Box::default).cache = Some(verdict.into());
        }
    }

    /// What the response cache said of this request (`exact-hit`, `semantic-hit; …`, `miss; …`).
    pub fn cache_verdict(&mut self, verdict: &http::HeaderValue) {
        self.cache_verdict = verdict.to_str().ok().map(Into::into);
    }

    /// Answered from the cache: the answer's first generation took these tokens (recorded as
    /// saved, with their price); the request is uncharged. Returns what they cost.
    pub fn saved(&mut self, prompt: u64, completion: u64) -> f64 {
        self.uncharged = true;
        self.saved = Some((prompt, completion));
        let counted = Counted { prompt, cache_read: 0, cache_write: 0, completion };
        self.config.cost(&self.record.model_served, &counted)
    }

    pub fn set_permit(&mut self, permit: Option<Permit>, budget: Option<BudgetPermit>) {
        self.permit = permit;
        self.budget = budget;
    }

    /// The key's rate-limit state as of admission, as `x-ratelimit-*` headers.
    pub fn insert_permit_headers(&self, headers: &mut http::HeaderMap) {
        if let Some(p) = &self.permit {
            p.snapshot.insert_into(headers);
        }
    }

    /// The upstream answered: start watching its body (unless `tap` is false: the relay reads
    /// usage itself and reports it).
    pub fn answered(&mut self, backend: &str, status: u16, sse: bool, strip_usage_chunk: bool, tap: bool) {
        self.record.backend = Some(backend.to_owned());
        self.record.status = status;
        if !tap {
            self.tap = None;
            return;
        }
        self.tap = match self.units_kind {
            _ if sse => Some(Tap::Sse(SseUsageTap::new(strip_usage_chunk))),
            // Speech answers are audio: nothing in them to read.
            crate::endpoint::Units::Characters => None,
            units => Some(Tap::Body(BodyUsageTap::new(BODY_TAP_LIMIT).with_units(units))),
        };
    }

    /// The stream carries on at `backend` (a resume): from here the relay's translator reports
    /// usage, and `earlier` adds what the failed attempts consumed.
    pub fn resumed(&mut self, backend: &Arc<Backend>, earlier: Tokens) {
        self.record.backend = Some(backend.name().to_owned());
        if let Some(Traced { telemetry, tracing: Tracing::Recorded(trace) }) = self.traced.as_mut() {
            trace.resumed(backend, telemetry.span_id());
        }
        self.tap = None;
        self.reported = None;
        self.reported_chars = 0;
        let sum = self.earlier.unwrap_or_default();
        self.earlier = Some(Tokens {
            prompt: sum.prompt + earlier.prompt,
            completion: sum.completion + earlier.completion,
            total: sum.total + earlier.total,
            cached: sum.cached + earlier.cached,
            cache_write: sum.cache_write + earlier.cache_write,
        });
    }

    /// One data frame on its way to the client; `None` means nothing to forward for it.
    pub fn frame(&mut self, frame: Bytes) -> Option<Bytes> {
        if self.record.ttft_ms.is_none() && !frame.is_empty() {
            self.record.ttft_ms = Some(self.started.elapsed().as_secs_f64() * 1e3);
        }
        let forwarded = match &mut self.tap {
            Some(Tap::Sse(tap)) => tap.push(frame),
            Some(Tap::Body(tap)) => {
                tap.push(&frame);
                Some(frame)
            }
            None => Some(frame),
        };
        self.capture_forwarded(forwarded.as_ref());
        forwarded
    }

    /// The upstream body ended cleanly: bytes still held back by the tap, to forward last.
    pub fn end(&mut self) -> Option<Bytes> {
        let forwarded = match &mut self.tap {
            Some(Tap::Sse(tap)) => tap.finish(),
            _ => None,
        };
        self.capture_forwarded(forwarded.as_ref());
        forwarded
    }

    /// Kept bodies record what the client receives (without the usage chunk the gateway stripped).
    fn capture_forwarded(&mut self, frame: Option<&Bytes>) {
        if let (Some(capture), Some(frame)) = (self.capture.as_mut(), frame) {
            capture.push(frame);
        }
    }

    /// A request that failed before any upstream answer was relayed.
    pub fn failed(&mut self, status: u16) {
        self.record.status = status;
        self.tap = None;
        self.record_now();
    }

    /// What an answered request used besides tokens.
    fn units_used(&mut self) -> Option<Box<crate::records::UsageUnits>> {
        use crate::endpoint::Units;
        let read = match &mut self.tap {
            Some(Tap::Body(tap)) => tap.units(),
            _ => None,
        };
        match self.units_kind {
            Units::Images | Units::Characters => self.units.take(),
            Units::SearchUnits => read.map(Box::new),
            Units::AudioSeconds => read.map(Box::new).or_else(|| {
                let bits = self.upload_seconds.as_ref()?.load(std::sync::atomic::Ordering::Relaxed);
                let audio_seconds = f64::from_bits(bits);
                (bits != 0).then(|| Box::new(crate::records::UsageUnits { audio_seconds, ..Default::default() }))
            }),
            Units::Tokens => None,
        }
    }

    /// Append the record (once). Tokens come from the backend's `usage`; without one they are
    /// estimated (prompt from the request size, completion from the streamed text) and marked so.
    pub fn record_now(&mut self) {
        if self.recorded {
            return;
        }
        if let Some(slot) = self.park.take() {
            let mut stand_in =
                Meter::new(None, self.config.clone(), self.metrics.clone(), "", None, "", "", 0, self.started, 0);
            stand_in.recorded = true;
            let meter = std::mem::replace(self, stand_in);
            if let Ok(mut parked) = slot.lock() {
                *parked = Some(meter);
            }
            return;
        }
        self.recorded = true;
        let reported = match &mut self.tap {
            Some(Tap::Sse(tap)) => tap.usage(),
            Some(Tap::Body(tap)) => tap.finish(),
            None => self.reported,
        };
        let answered = self.record.status != 0 && self.record.status < 400 && !self.uncharged;
        let had_usage = reported.is_some() || self.uncharged;
        let tokens = reported.filter(|_| !self.uncharged).unwrap_or_else(|| {
            let completion = match &self.tap {
                Some(Tap::Sse(tap)) => estimate_tokens(tap.content_chars()),
                None if answered => estimate_tokens(self.reported_chars),
                _ => 0,
            };
            let prompt = if answered { self.prompt_estimate } else { 0 };
            Tokens { prompt, completion, total: prompt + completion, cached: 0, cache_write: 0 }
        });
        let mut tokens = tokens;
        if let Some(earlier) = self.earlier {
            tokens.prompt += earlier.prompt;
            tokens.completion += earlier.completion;
            tokens.total += earlier.total;
            tokens.cached += earlier.cached;
            tokens.cache_write += earlier.cache_write;
        }
        let units = if answered { self.units_used() } else { None };
        let r = &mut self.record;
        r.estimated = (!had_usage && answered) || self.earlier.is_some();
        r.prompt_tokens = tokens.prompt;
        r.completion_tokens = tokens.completion;
        r.total_tokens = tokens.total.max(tokens.prompt + tokens.completion);
        r.latency_ms = self.started.elapsed().as_secs_f64() * 1e3;
        (r.cache_read_tokens, r.cache_write_tokens) = (tokens.cached, tokens.cache_write);
        let counted = Counted {
            prompt: r.prompt_tokens,
            cache_read: tokens.cached,
            cache_write: tokens.cache_write,
            completion: r.completion_tokens,
        };
        r.cost_usd = self.config.cost(&r.model_served, &counted);
        if answered {
            r.units = units;
            r.cost_usd += unit_cost(&self.config, &r.model_served, r.units.as_deref());
        }
        if r.batch_id.is_some() {
            r.cost_usd *= self.config.price(&r.model_served).map_or(1.0, |p| p.batch_discount);
        }
        self.cache_units();
        let r = &mut self.record;
        if let Some(p) = self.permit.as_mut() {
            p.settle(r.total_tokens);
        }
        self.metrics.tokens.fetch_add(r.total_tokens, std::sync::atomic::Ordering::Relaxed);
        if let Some(spent) = self.on_spent.take() {
            spent(r.total_tokens);
        }
        if let Some(Ok(ttft)) = r.ttft_ms.filter(|_| r.status < 400).map(|ms| Duration::try_from_secs_f64(ms / 1e3)) {
            self.metrics.ttft.observe(ttft);
        }
        if let Some(b) = self.budget.take() {
            b.settle(r.cost_usd);
        }
        if let Some(capture) = self.capture.take() {
            r.bodies = Some(Box::new(capture.finish()));
        }
        if let Some(tally) = self.verdicts.take() {
            r.guardrails = tally.take();
        }
        if let Some(Traced { telemetry, tracing: Tracing::Recorded(trace) }) = self.traced.take() {
            let answered = r.status != 0 && r.status < 400;
            let outcome = Outcome {
                status: r.status,
                model_requested: r.model_requested.clone(),
                model_served: r.model_served.clone(),
                input_tokens: answered.then_some(r.prompt_tokens),
                output_tokens: answered.then_some(r.completion_tokens),
                key_id: r.key_id.clone(),
                a2a: None,
            };
            telemetry.finish(trace, outcome);
        }
        if let Some(journal) = &self.journal {
            // Moved, not copied: the journal hands it to the usage writer as it is. A failure is
            // logged (with the record's id) and counted there.
            let _ = journal.append(std::mem::take(r));
        }
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        self.record_now();
    }
}

/// What an answered request of `model` costs besides its tokens: per request, and per image,
/// search unit, second of audio and character it used.
fn unit_cost(config: &Config, model: &str, units: Option<&crate::records::UsageUnits>) -> f64 {
    config.price(model).map_or(0.0, |p| {
        let u = p.units;
        let used = units.cloned().unwrap_or_default();
        u.per_request
            + used.images as f64 * u.per_image
            + used.search_units as f64 * u.per_search_unit
            + used.audio_seconds * u.per_second_audio
            + used.characters as f64 * u.per_character
    })
}
