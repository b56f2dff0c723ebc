//! A response body of server-sent events the gateway writes itself: each message from a channel
//! becomes one `event: message` with the message as its `data`. The stream ends when the sender
//! is dropped; a client that goes away drops the receiver, which the sender sees as closed.
//! `raw` bodies send each message as it is instead (a file read out in chunks).

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::Frame;
use tokio::sync::mpsc;

pub struct SseEvents {
    messages: mpsc::Receiver<Vec<u8>>,
    /// Each message as it is, not as an event.
    raw: bool,
}

impl SseEvents {
    pub fn new(messages: mpsc::Receiver<Vec<u8>>) -> SseEvents {
        SseEvents { messages, raw: false }
    }

    /// A body of the messages' bytes as they are.
    pub fn raw(messages: mpsc::Receiver<Vec<u8>>) -> SseEvents {
        SseEvents { messages, raw: true }
    }
}

impl http_body::Body for SseEvents {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let raw = self.raw;
        self.messages.poll_recv(cx).map(|next| {
            next.map(|data| {
                if raw {
                    return Ok(Frame::data(Bytes::from(data)));
                }
                let mut event = Vec::with_capacity(data.len() + 24);
                event.extend_from_slice(b"event: message\ndata: ");
                event.extend_from_slice(&data);
                event.extend_from_slice(b"\n\n");
                Ok(Frame::data(Bytes::from(event)))
            })
        })
    }
}
