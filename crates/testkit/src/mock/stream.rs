//! Server-sent-events response body: yields each streamed chunk as its own frame, sleeping `chunk_delay` between chunks.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use super::render::{chunk_text, Usage, CREATED};

const DONE: &[u8] = b"data: [DONE]\n\n";

/// Which OpenAI object the chunks represent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Chat,
    Completion,
}

enum Step {
    Content(usize),
    Stop,
    Usage(Usage),
    Done,
    End,
}

/// Hand-written SSE body; one frame per event.
pub(crate) struct SseStream {
    kind: Kind,
    /// `data: {"id":..,"object":..,"created":..,"model":..,"choices":[`
    prefix: String,
    chunks: usize,
    usage: Option<Usage>,
    /// Index of the next event: `0..chunks` content, then stop, usage, done.
    next: usize,
    delay: Duration,
    sleep: Option<Pin<Box<Sleep>>>,
    waited: bool,
}

impl SseStream {
    pub(crate) fn new(
        kind: Kind,
        id: u64,
        model_json: &str,
        chunks: usize,
        usage: Option<Usage>,
        delay: Duration,
    ) -> Self {
        let mut prefix = String::with_capacity(120 + model_json.len());
        let (id_prefix, object) = match kind {
            Kind::Chat => ("chatcmpl", "chat.completion.chunk"),
            Kind::Completion => ("cmpl", "text_completion"),
        };
        let _ = write!(
            prefix,
            r#"data: {{"id":"{id_prefix}-mock-{id}","object":"{object}","created":{CREATED},"model":{model_json},"choices":["#
        );
        SseStream { kind, prefix, chunks, usage, next: 0, delay, sleep: None, waited: false }
    }

    fn step(&self) -> Step {
        let n = self.chunks;
        match self.next {
            i if i < n => Step::Content(i),
            i if i == n => Step::Stop,
            i if i == n + 1 => match self.usage {
                Some(u) => Step::Usage(u),
                None => Step::Done,
            },
            i if i == n + 2 && self.usage.is_some() => Step::Done,
            _ => Step::End,
        }
    }

    fn advance(&mut self) {
        self.next = match self.step() {
            Step::Done => self.chunks + 3,
            _ => self.next + 1,
        };
    }

    /// Whether a `chunk_delay` wait precedes the next event.
    fn needs_delay(&self) -> bool {
        !self.delay.is_zero()
            && match self.step() {
                Step::Content(i) => i > 0,
                Step::Stop => self.chunks > 0,
                _ => false,
            }
    }

    fn render(&self, step: &Step) -> Bytes {
        let mut s = String::with_capacity(self.prefix.len() + 112);
        s.push_str(&self.prefix);
        match (step, self.kind) {
            (Step::Content(i), Kind::Chat) => {
                s.push_str(r#"{"index":0,"delta":{"#);
                if *i == 0 {
                    s.push_str(r#""role":"assistant","#);
                }
                s.push_str(r#""content":""#);
                chunk_text(&mut s, *i);
                s.push_str(r#""},"finish_reason":null}]}"#);
            }
            (Step::Content(i), Kind::Completion) => {
                s.push_str(r#"{"text":""#);
                chunk_text(&mut s, *i);
                s.push_str(r#"","index":0,"logprobs":null,"finish_reason":null}]}"#);
            }
            (Step::Stop, Kind::Chat) => {
                s.push_str(r#"{"index":0,"delta":{},"finish_reason":"stop"}]}"#);
            }
            (Step::Stop, Kind::Completion) => {
                s.push_str(r#"{"text":"","index":0,"logprobs":null,"finish_reason":"stop"}]}"#);
            }
            (Step::Usage(u), _) => {
                s.push_str(r#"],"usage":"#);
                u.write_json(&mut s);
                s.push('}');
            }
            (Step::Done, _) | (Step::End, _) => return Bytes::from_static(DONE),
        }
        s.push_str("\n\n");
        Bytes::from(s)
    }
}

impl Body for SseStream {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        let step = this.step();
        if matches!(step, Step::End) {
            return Poll::Ready(None);
        }
        if !this.waited && this.needs_delay() {
            let deadline = Instant::now() + this.delay;
            let sleep = match &mut this.sleep {
                Some(sleep) => {
                    sleep.as_mut().reset(deadline);
                    sleep
                }
                slot @ None => slot.insert(Box::pin(tokio::time::sleep_until(deadline))),
            };
            this.waited = true;
            // Register interest now; fall through below on later polls.
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        } else if this.waited {
            if let Some(sleep) = &mut this.sleep {
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
            }
        }
        this.waited = false;
        let frame = this.render(&step);
        this.advance();
        Poll::Ready(Some(Ok(Frame::data(frame))))
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.step(), Step::End)
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
