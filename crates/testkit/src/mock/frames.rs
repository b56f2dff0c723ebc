//! A streamed response body of frames rendered up front (Anthropic SSE, Ollama NDJSON, OpenAI tool
//! calls), each sent as its own frame, with `chunk_delay` before the frames that carry content.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

/// Frames to send, in order; the flag says whether the delay precedes the frame.
#[derive(Default)]
pub(crate) struct Frames {
    frames: VecDeque<(bool, Bytes)>,
    /// Whether a content frame has been pushed: the first one goes without delay.
    saw_content: bool,
}

impl Frames {
    /// A frame sent at once after the previous one (a stream's head, bookkeeping events).
    pub(crate) fn push(&mut self, frame: impl Into<Bytes>) {
        self.frames.push_back((false, frame.into()));
    }

    /// A frame of content: after the first, each waits `chunk_delay`, like the OpenAI stream's chunks.
    pub(crate) fn push_content(&mut self, frame: impl Into<Bytes>) {
        self.frames.push_back((self.saw_content, frame.into()));
        self.saw_content = true;
    }

    /// The frame that ends the content (stop reason, usage): waits like a content frame when any came before.
    pub(crate) fn push_end(&mut self, frame: impl Into<Bytes>) {
        self.frames.push_back((self.saw_content, frame.into()));
        self.saw_content = false;
    }

    pub(crate) fn into_stream(self, delay: Duration) -> FrameStream {
        FrameStream { frames: self.frames, delay, sleep: None }
    }
}

/// The body sending [`Frames`].
pub(crate) struct FrameStream {
    frames: VecDeque<(bool, Bytes)>,
    delay: Duration,
    /// The wait before the front frame, once started.
    sleep: Option<Pin<Box<Sleep>>>,
}

impl Body for FrameStream {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        let Some((wait, _)) = this.frames.front() else {
            return Poll::Ready(None);
        };
        if *wait && !this.delay.is_zero() {
            let delay = this.delay;
            let sleep = this.sleep.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(Instant::now() + delay)));
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            this.sleep = None;
        }
        Poll::Ready(this.frames.pop_front().map(|(_, frame)| Ok(Frame::data(frame))))
    }

    fn is_end_stream(&self) -> bool {
        self.frames.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
