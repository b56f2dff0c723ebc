//! The mock's response body type: one precomputed buffer, the OpenAI SSE stream, or frames rendered up
//! front, optionally holding a simulated server's slot.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use super::frames::FrameStream;
use super::kv::SlotGuard;
use super::stream::SseStream;

/// Response body of every mock endpoint.
pub(crate) enum MockBody {
    /// A complete body, sent as one frame with an exact content-length.
    Full(Option<Bytes>),
    /// The OpenAI server-sent-events stream of the default reply, one frame per event.
    Stream(Box<SseStream>),
    /// Any other stream (Anthropic SSE, Ollama NDJSON, OpenAI tool calls), one frame per event.
    Frames(Box<FrameStream>),
    /// A body of a simulated KV-cache server: its slot stays busy until the body is done or dropped.
    Held { body: Box<MockBody>, _slot: SlotGuard },
    /// A stream that breaks off (the connection is cut) after `left` more frames: a backend
    /// dying mid-answer, at a chosen point (`MockControl::set_die_after_frames`).
    Dying { body: Box<MockBody>, left: usize },
}

/// The error a dying stream ends with: the server cuts the connection.
#[derive(Debug)]
pub struct Died;

impl std::fmt::Display for Died {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the mock backend died mid-stream")
    }
}

impl std::error::Error for Died {}

impl MockBody {
    pub(crate) fn full(b: impl Into<Bytes>) -> Self {
        MockBody::Full(Some(b.into()))
    }
}

impl Body for MockBody {
    type Data = Bytes;
    type Error = Died;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Died>>> {
        let never = |p: Poll<Option<Result<Frame<Bytes>, Infallible>>>| p.map(|f| f.map(|r| r.map_err(|e| match e {})));
        match self.get_mut() {
            MockBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            MockBody::Stream(s) => never(Pin::new(s.as_mut()).poll_frame(cx)),
            MockBody::Frames(s) => never(Pin::new(s.as_mut()).poll_frame(cx)),
            MockBody::Held { body: b, .. } => Pin::new(b.as_mut()).poll_frame(cx),
            MockBody::Dying { left: 0, .. } => Poll::Ready(Some(Err(Died))),
            MockBody::Dying { body, left } => {
                let polled = Pin::new(body.as_mut()).poll_frame(cx);
                if let Poll::Ready(Some(Ok(_))) = &polled {
                    *left -= 1;
                }
                polled
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            MockBody::Full(b) => b.is_none(),
            MockBody::Stream(s) => s.is_end_stream(),
            MockBody::Frames(s) => s.is_end_stream(),
            MockBody::Held { body: b, .. } | MockBody::Dying { body: b, .. } => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            MockBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            MockBody::Full(None) => SizeHint::with_exact(0),
            MockBody::Stream(s) => s.size_hint(),
            MockBody::Frames(s) => s.size_hint(),
            MockBody::Held { body: b, .. } => b.size_hint(),
            MockBody::Dying { .. } => SizeHint::default(),
        }
    }
}
