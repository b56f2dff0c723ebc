//! `RelayBody`: streams an upstream response body to the client frame by frame as it arrives
//! (never buffered whole), with an idle timeout between frames. A failure after bytes reached
//! the client is never retried: an SSE stream ends with a final `data: {"error": ...}` event,
//! other bodies end with an error (the client sees a truncated response). Its `Completion`
//! releases the in-flight slot and records the request's duration when the body ends or the
//! client goes away. With a `StreamTranslator` the frames are re-encoded in the client's API on
//! the way (or, when observing, only read for the usage they report).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::upstream::pool::UpstreamBody;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

use super::metering::Meter;
use super::resume::Resumable;
use crate::error::{sse_error_event, GatewayError};
use crate::guard::{AnswerGuards, Blocked};
use crate::metrics::Metrics;
use crate::route::backend::InFlight;
use crate::translate::StreamTranslator;
use crate::usage::Tokens;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Settles one proxied request when its response body is finished or dropped.
pub struct Completion {
    pub guard: InFlight,
    pub metrics: Arc<Metrics>,
    pub started: std::time::Instant,
    /// The key's rate-limit permit when the request is not metered: its parallel slot is held
    /// until the response ends. (A metered request's permit lives in its meter.)
    pub permit: Option<crate::limit::Permit>,
    /// Usage accounting; records on the clean end of the body, or on drop.
    pub meter: Option<Box<Meter>>,
    /// What reads the answer as the client receives it and acts when it ends whole: the
    /// response cache's `Fill`, an experiment's tap.
    pub cache: Option<Box<dyn AnswerSink>>,
}

/// Reads an answer as the client receives it; `finish` only when it ended cleanly.
pub trait AnswerSink: Send + Sync {
    fn push(&mut self, data: &[u8]);
    fn finish(self: Box<Self>);
    /// The body was dropped before the backend's end was read: a client that stops reading at
    /// a stream's terminal event (`[DONE]`) may close before it. By default nothing is kept.
    fn abandoned(self: Box<Self>) {}
}

impl AnswerSink for crate::cache::Fill {
    fn push(&mut self, data: &[u8]) {
        crate::cache::Fill::push(self, data);
    }
    fn finish(self: Box<Self>) {
        crate::cache::Fill::finish(*self);
    }
    fn abandoned(self: Box<Self>) {
        crate::cache::Fill::abandoned(*self);
    }
}

/// Two sinks reading one answer.
pub struct BothSinks(pub Box<dyn AnswerSink>, pub Box<dyn AnswerSink>);

impl AnswerSink for BothSinks {
    fn push(&mut self, data: &[u8]) {
        self.0.push(data);
        self.1.push(data);
    }
    fn finish(self: Box<Self>) {
        let BothSinks(a, b) = *self;
        a.finish();
        b.finish();
    }
    fn abandoned(self: Box<Self>) {
        let BothSinks(a, b) = *self;
        a.abandoned();
        b.abandoned();
    }
}

/// `a`, `b`, both or neither.
pub fn sinks(a: Option<Box<dyn AnswerSink>>, b: Option<Box<dyn AnswerSink>>) -> Option<Box<dyn AnswerSink>> {
    match (a, b) {
        (Some(a), Some(b)) => Some(Box::new(BothSinks(a, b))),
        (a, b) => a.or(b),
    }
}

impl Completion {
    fn stream_failed(&self, kind: &'static str) {
        self.metrics.count_error(kind);
        self.guard.backend().mark_failed(kind);
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        self.metrics.duration.observe(self.started.elapsed());
        if let Some(sink) = self.cache.take() {
            sink.abandoned();
        }
    }
}

pin_project! {
    #[project = RelayBodyProj]
    pub struct RelayBody {
        #[pin]
        inner: UpstreamBody,
        // Read before the response was committed, so a failure there could still be retried.
        first: Option<Frame<Bytes>>,
        #[pin]
        idle: Sleep,
        idle_timeout: Duration,
        sse: bool,
        done: bool,
        translator: Option<StreamTranslator>,
        // Set when a failed backend's answer may be carried on by another (boxed: most bodies
        // have none, and the body is moved by value through hyper).
        resumable: Option<Box<Resumable>>,
        // The answer guards (`guard.rs`); None without any (boxed for the same reason).
        guards: Option<Box<AnswerGuards>>,
        completion: Completion,
    }
}

impl RelayBody {
    pub fn new(
        inner: UpstreamBody,
        first: Option<Frame<Bytes>>,
        idle_timeout: Duration,
        sse: bool,
        completion: Completion,
    ) -> Self {
        RelayBody {
            done: first.is_none() && inner.is_end_stream(),
            inner,
            first,
            idle: tokio::time::sleep(idle_timeout),
            idle_timeout,
            sse,
            translator: None,
            resumable: None,
            guards: None,
            completion,
        }
    }

    pub fn with_translator(mut self, translator: Option<StreamTranslator>) -> Self {
        self.translator = translator;
        self
    }

    pub fn with_resume(mut self, resumable: Option<Resumable>) -> Self {
        self.resumable = resumable.map(Box::new);
        self
    }

    pub fn with_guards(mut self, guards: Option<Box<AnswerGuards>>) -> Self {
        self.guards = guards;
        self
    }
}

/// A data frame through the translator, if any: translated bytes (possibly none yet), or the
/// same bytes after reading them (observe mode).
fn translate_frame(translator: &mut Option<StreamTranslator>, frame: Frame<Bytes>) -> Option<Frame<Bytes>> {
    let Some(t) = translator.as_mut() else { return Some(frame) };
    match frame.into_data() {
        Ok(data) => {
            let out = t.push(&data);
            let data = if t.translates() { out } else { data };
            (!data.is_empty()).then(|| Frame::data(data))
        }
        Err(frame) => Some(frame),
    }
}

/// Hand the translator's view of the usage to the meter (before it records).
fn report_usage(translator: &Option<StreamTranslator>, meter: &mut Option<Box<Meter>>) {
    if let (Some(t), Some(m)) = (translator, meter.as_mut()) {
        let tokens = t.usage().as_ref().map(Tokens::from);
        m.report_usage(tokens, t.text_chars());
    }
}

/// Pass a frame through the meter, if any; non-data frames (trailers) go as they are.
fn meter_frame(meter: &mut Option<Box<Meter>>, frame: Frame<Bytes>) -> Option<Frame<Bytes>> {
    let Some(meter) = meter.as_mut() else { return Some(frame) };
    match frame.into_data() {
        Ok(data) => meter.frame(data).map(Frame::data),
        Err(frame) => Some(frame),
    }
}

/// The backend's stream ended cleanly: the translator's last events and what the guards held
/// back, then the meter's held-back tail (recorded before the client sees the end).
fn finish(
    translator: &mut Option<StreamTranslator>,
    guards: &mut Option<Box<AnswerGuards>>,
    sse: bool,
    meter: &mut Option<Box<Meter>>,
) -> Result<Option<Bytes>, Blocked> {
    let translated_tail = match translator.as_mut() {
        Some(t) if t.translates() => Some(t.finish()).filter(|b| !b.is_empty()),
        Some(t) => {
            t.finish();
            None
        }
        None => None,
    };
    report_usage(translator, meter);
    let tail = match guards.as_mut() {
        Some(g) => Some(g.finish(translated_tail.unwrap_or_default(), sse)?).filter(|b| !b.is_empty()),
        None => translated_tail,
    };
    if let Some(tail) = tail {
        if let Some(meter) = meter.as_mut() {
            let held = meter.frame(tail.clone());
            let rest = meter.end();
            meter.record_now();
            return Ok(join(held, rest));
        }
        return Ok(Some(tail));
    }
    let Some(meter) = meter.as_mut() else { return Ok(None) };
    let tail = meter.end();
    meter.record_now();
    Ok(tail)
}

/// Two pieces of a tail as one: no copy when either is missing or empty.
fn join(head: Option<Bytes>, rest: Option<Bytes>) -> Option<Bytes> {
    match (head.filter(|b| !b.is_empty()), rest.filter(|b| !b.is_empty())) {
        (Some(head), Some(rest)) => Some(Bytes::from([&head[..], &rest[..]].concat())),
        (head, rest) => head.or(rest),
    }
}

/// The stream broke off for good: record it, and end the client's stream with an error in its
/// shape (an SSE error event, or a translated one), or cut a plain body.
fn fail(this: &mut RelayBodyProj<'_>, kind: &'static str, message: &str, error: BoxError) -> Polled {
    settle_broken(this);
    if let Some(t) = this.translator.as_mut().filter(|t| t.translates()) {
        // In the client's own shape (an Anthropic error event, an Ollama error line, ...).
        let tail = t.fail(message);
        return Poll::Ready(Some(if tail.is_empty() { Err(error) } else { Ok(Frame::data(tail)) }));
    }
    if *this.sse {
        Poll::Ready(Some(Ok(Frame::data(sse_error_event(message, kind)))))
    } else {
        Poll::Ready(Some(Err(error)))
    }
}

type Polled = Poll<Option<Result<Frame<Bytes>, BoxError>>>;

/// A guard stopped the answer: it ends as a failed stream does, with the guard's reason.
/// The stream ends here: nothing more is read or cached, and its usage is recorded now.
fn settle_broken(this: &mut RelayBodyProj<'_>) {
    *this.done = true;
    this.completion.cache = None;
    report_usage(this.translator, &mut this.completion.meter);
    if let Some(meter) = this.completion.meter.as_mut() {
        // A partial event would merge with the error event into one broken event: drop it.
        let _ = meter.end();
        meter.record_now();
    }
}

/// A guard stopped the answer (a stream: a whole answer is judged before it is relayed, in
/// `proxy/respond.rs`): it ends with an error event in the client's own API shape
/// (`code: content_blocked` where the shape has a code), whether or not it was translated, or,
/// where the shape has none, in the error (a 400 if a remote guard held it, `proxy/judge.rs`).
fn blocked(this: &mut RelayBodyProj<'_>, b: Blocked) -> Polled {
    this.completion.metrics.count_error("content_blocked");
    settle_broken(this);
    match crate::translate::stream_error_event(b.endpoint, crate::error::blocked_error(&b.guard, &b.reason)) {
        Some(event) => Poll::Ready(Some(Ok(Frame::data(event)))),
        None => Poll::Ready(Some(Err(Box::new(GatewayError::ContentBlocked { guard: b.guard, reason: b.reason })))),
    }
}

/// While another backend is being found to carry a broken stream on: Some(poll) to return, or
/// None once the new stream is in place (or there is none to wait for).
fn poll_resume(this: &mut RelayBodyProj<'_>, cx: &mut Context<'_>) -> Option<Polled> {
    let resumable = this.resumable.as_mut().filter(|r| r.is_resuming())?;
    match resumable.poll_resumed(cx) {
        Poll::Pending => Some(Poll::Pending),
        Poll::Ready(Some(resumed)) => {
            this.completion.metrics.streams_resumed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if let Some(meter) = this.completion.meter.as_mut() {
                meter.resumed(resumed.guard.backend(), resumed.earlier);
                if let Some(model) = &resumed.model {
                    meter.serve(model);
                }
            }
            this.inner.set(resumed.body);
            *this.first = resumed.first;
            this.completion.guard = resumed.guard;
            *this.translator = Some(resumed.translator);
            *this.done = false;
            this.idle.as_mut().reset(Instant::now() + *this.idle_timeout);
            None
        }
        Poll::Ready(None) => {
            let (kind, message) = resumable.broke;
            let error: BoxError = Box::new(GatewayError::BadGateway { message: message.to_owned() });
            Some(fail(this, kind, message, error))
        }
    }
}

/// A frame from the backend on its way to the client: translated, guarded, metered, noted for a
/// resume and the cache. Some(poll) to return, None to read on (nothing to send for it yet).
fn on_frame(this: &mut RelayBodyProj<'_>, frame: Frame<Bytes>) -> Option<Polled> {
    this.idle.as_mut().reset(Instant::now() + *this.idle_timeout);
    let frame = translate_frame(this.translator, frame)?;
    if this.translator.as_ref().is_some_and(StreamTranslator::failed) {
        // Unreadable upstream bytes: the client has its error event; stop reading (dropping the
        // body cancels the upstream).
        *this.done = true;
        this.completion.cache = None;
        this.completion.metrics.count_error("bad_gateway");
        report_usage(this.translator, &mut this.completion.meter);
        if let Some(meter) = this.completion.meter.as_mut() {
            meter.frame(frame.data_ref().cloned().unwrap_or_default());
            meter.record_now();
        }
        return Some(Poll::Ready(Some(Ok(frame))));
    }
    let frame = match (this.guards.as_mut(), frame.into_data()) {
        (Some(guards), Ok(data)) => match guards.frame(data, *this.sse) {
            Ok(data) if data.is_empty() => return None,
            Ok(data) => Frame::data(data),
            Err(b) => return Some(blocked(this, b)),
        },
        (_, Ok(data)) => Frame::data(data),
        (_, Err(frame)) => frame,
    };
    // Entirely held back or stripped (the usage chunk): read on.
    let frame = meter_frame(&mut this.completion.meter, frame)?;
    let frame = match (this.resumable.as_mut(), frame.into_data()) {
        (Some(resumable), Ok(data)) => Frame::data(resumable.outgoing(data)?),
        (_, Ok(data)) => Frame::data(data),
        (_, Err(frame)) => frame,
    };
    if let (Some(fill), Some(data)) = (this.completion.cache.as_mut(), frame.data_ref()) {
        fill.push(data);
        // A body of known length is not polled past its last byte: it is whole now.
        if !*this.sse && this.translator.is_none() && this.guards.is_none() && this.inner.is_end_stream() {
            if let Some(fill) = this.completion.cache.take() {
                fill.finish();
            }
        }
    }
    Some(Poll::Ready(Some(Ok(frame))))
}

/// The backend's body ended cleanly: the last bytes (translator's, guards', meter's), recorded,
/// and the cache filled.
fn on_end(this: &mut RelayBodyProj<'_>) -> Polled {
    *this.done = true;
    let tail = match finish(this.translator, this.guards, *this.sse, &mut this.completion.meter) {
        Ok(tail) => tail,
        Err(b) => return blocked(this, b),
    };
    let tail = match this.resumable.as_mut() {
        Some(resumable) => resumable.finish(tail),
        None => tail,
    };
    if let Some(mut fill) = this.completion.cache.take() {
        if let Some(tail) = &tail {
            fill.push(tail);
        }
        fill.finish();
    }
    Poll::Ready(tail.map(|tail| Ok(Frame::data(tail))))
}

impl Body for RelayBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Polled {
        let mut this = self.project();
        loop {
            if let Some(polled) = poll_resume(&mut this, cx) {
                return polled;
            }
            let next = match this.first.take() {
                Some(frame) => Poll::Ready(Some(Ok(frame))),
                None if *this.done => return Poll::Ready(None),
                None => this.inner.as_mut().poll_frame(cx),
            };
            let (kind, message, error): (&'static str, &'static str, BoxError) = match next {
                Poll::Ready(Some(Ok(frame))) => match on_frame(&mut this, frame) {
                    Some(polled) => return polled,
                    None => continue,
                },
                Poll::Ready(None) => return on_end(&mut this),
                Poll::Ready(Some(Err(e))) => ("stream_aborted", "the upstream stream was interrupted", Box::new(e)),
                Poll::Pending => match this.idle.as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(()) => {
                        ("stream_idle_timeout", "the upstream stream stalled", Box::new(GatewayError::UpstreamTimeout))
                    }
                },
            };
            *this.done = true;
            this.completion.stream_failed(kind);
            if this.resumable.as_mut().is_some_and(|r| r.begin(kind, message)) {
                continue;
            }
            return fail(&mut this, kind, message, error);
        }
    }

    fn is_end_stream(&self) -> bool {
        self.first.is_none() && self.done && !self.resumable.as_ref().is_some_and(|r| r.is_resuming())
    }

    fn size_hint(&self) -> SizeHint {
        if self.sse || self.translator.is_some() || self.guards.is_some() {
            // An SSE stream may gain an error event or lose a stripped usage chunk: no length.
            return SizeHint::default();
        }
        let inner = self.inner.size_hint();
        let extra = self.first.as_ref().and_then(|f| f.data_ref()).map_or(0, |d| d.len() as u64);
        let mut hint = SizeHint::new();
        // Upper first: `set_lower` asserts lower <= upper.
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + extra);
        }
        hint.set_lower(inner.lower() + extra);
        hint
    }
}
