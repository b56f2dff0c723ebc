//! The relay's side of stream resume: it keeps what the client has been sent of a stream (whole
//! events only, as shared `Bytes`, so nothing is parsed or copied on the way), holds back tool
//! calls until the answer is complete (a call cut mid-arguments is regenerated whole, never
//! sent twice or half), and when the backend fails hands all that to a `Resume` (the proxy's,
//! which knows how to ask another backend to carry on) and splices its answer in.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::upstream::pool::UpstreamBody;
use bytes::{Bytes, BytesMut};
use http_body::Frame;

use crate::endpoint::Endpoint;
use crate::route::backend::InFlight;
use crate::translate::StreamTranslator;
use crate::usage::Tokens;

/// Most bytes of a stream kept for a resume; a longer answer is relayed without one.
pub const MAX_RESUME_LOG: usize = 1024 * 1024;

/// Another backend carrying on an answer.
pub struct Resumed {
    pub body: UpstreamBody,
    pub first: Option<Frame<Bytes>>,
    pub guard: InFlight,
    /// Turns the new backend's stream into the rest of the client's.
    pub translator: StreamTranslator,
    /// What the attempts before this one consumed (estimated: they never reported usage).
    pub earlier: Tokens,
    /// The fallback model that carries the answer on, when no backend of the request's own could.
    pub model: Option<String>,
}

pub type ResumeFuture = Pin<Box<dyn Future<Output = Option<(Resumed, Box<dyn Resume>)>> + Send>>;

/// Finds a backend to carry on an answer (implemented by the proxy, which can route).
pub trait Resume: Send {
    /// Carry on after `emitted` (whole events the client has) and `discarded` (generated but
    /// held back). Gives itself back for a further resume, or `None` when no backend could.
    fn resume(self: Box<Self>, emitted: Bytes, discarded: Bytes) -> ResumeFuture;
}

/// A resumable stream's bookkeeping inside the relay.
pub struct Resumable {
    resume: Option<Box<dyn Resume>>,
    pending: Option<ResumeFuture>,
    /// Whole events sent to the client.
    sent: Vec<Bytes>,
    sent_len: usize,
    /// The tail of the last frame that did not end an event (sent with the next boundary).
    partial: BytesMut,
    /// From the first tool call on, everything waits for the clean end of the answer.
    held: Vec<Bytes>,
    holding: bool,
    /// Bytes by which the client's API marks a tool call.
    tool_marker: &'static [u8],
    /// NDJSON (Ollama): events end at a newline; SSE: at a blank line.
    ndjson: bool,
    /// Why the stream broke (kind, message), reported if no backend carries it on.
    pub broke: (&'static str, &'static str),
}

impl Resumable {
    pub fn new(endpoint: Endpoint, resume: Box<dyn Resume>) -> Resumable {
        let (tool_marker, ndjson): (&'static [u8], bool) = match endpoint {
            Endpoint::Messages => (b"\"tool_use\"", false),
            Endpoint::Responses => (b"\"function_call\"", false),
            Endpoint::OllamaChat | Endpoint::OllamaGenerate => (b"\"tool_calls\"", true),
            _ => (b"\"tool_calls\"", false),
        };
        Resumable {
            resume: Some(resume),
            pending: None,
            sent: Vec::new(),
            sent_len: 0,
            partial: BytesMut::new(),
            held: Vec::new(),
            holding: false,
            tool_marker,
            ndjson,
            broke: ("stream_aborted", "the upstream stream was interrupted"),
        }
    }

    /// Bytes on their way to the client: what may go now (whole events, no tool call).
    pub fn outgoing(&mut self, bytes: Bytes) -> Option<Bytes> {
        if self.resume.is_none() {
            // Too long to keep, or resumed as often as allowed: plain relaying from here on.
            return self.flush_with(Some(bytes));
        }
        let bytes = if self.partial.is_empty() {
            bytes
        } else {
            self.partial.extend_from_slice(&bytes);
            self.partial.split().freeze()
        };
        let cut = event_boundary(&bytes, self.ndjson);
        let (whole, rest) = (bytes.slice(..cut), bytes.slice(cut..));
        if rest.len() > MAX_RESUME_LOG {
            // No event end in sight: stop keeping anything and relay as it comes.
            self.give_up();
            return self.flush_with(Some(bytes));
        }
        self.partial.extend_from_slice(&rest);
        if whole.is_empty() {
            return None;
        }
        if !self.holding && memchr::memmem::find(&whole, self.tool_marker).is_some() {
            self.holding = true;
        }
        if self.holding {
            self.held.push(whole);
            if self.held.iter().map(Bytes::len).sum::<usize>() > MAX_RESUME_LOG {
                self.give_up();
                return self.flush_with(None);
            }
            return None;
        }
        self.sent_len += whole.len();
        if self.sent_len > MAX_RESUME_LOG {
            self.give_up();
        } else {
            self.sent.push(whole.clone());
        }
        Some(whole)
    }

    /// The answer ended cleanly: everything still held, then `tail`.
    pub fn finish(&mut self, tail: Option<Bytes>) -> Option<Bytes> {
        self.give_up();
        self.flush_with(tail)
    }

    fn give_up(&mut self) {
        self.resume = None;
        self.sent = Vec::new();
    }

    fn flush_with(&mut self, tail: Option<Bytes>) -> Option<Bytes> {
        let mut out = BytesMut::new();
        for held in self.held.drain(..) {
            out.extend_from_slice(&held);
        }
        out.extend_from_slice(&self.partial.split());
        self.holding = false;
        if out.is_empty() {
            return tail.filter(|t| !t.is_empty());
        }
        if let Some(tail) = tail {
            out.extend_from_slice(&tail);
        }
        Some(out.freeze())
    }

    /// The backend failed: start carrying on elsewhere, if this stream can be. What was held
    /// back or left partial is dropped: the client never saw it.
    pub fn begin(&mut self, kind: &'static str, message: &'static str) -> bool {
        let Some(resume) = self.resume.take() else { return false };
        self.broke = (kind, message);
        let emitted = concat(&self.sent);
        let mut discarded = BytesMut::new();
        for held in self.held.drain(..) {
            discarded.extend_from_slice(&held);
        }
        self.partial.clear();
        self.holding = false;
        self.pending = Some(resume.resume(emitted, discarded.freeze()));
        true
    }

    pub fn is_resuming(&self) -> bool {
        self.pending.is_some()
    }

    pub fn poll_resumed(&mut self, cx: &mut Context<'_>) -> Poll<Option<Resumed>> {
        let Some(pending) = self.pending.as_mut() else { return Poll::Ready(None) };
        let outcome = match pending.as_mut().poll(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(outcome) => outcome,
        };
        self.pending = None;
        Poll::Ready(outcome.map(|(resumed, resume)| {
            self.resume = Some(resume);
            resumed
        }))
    }
}

fn concat(parts: &[Bytes]) -> Bytes {
    match parts {
        [] => Bytes::new(),
        [one] => one.clone(),
        many => Bytes::from(many.concat()),
    }
}

/// Length of the prefix of `bytes` made of whole events (up to the last blank line for SSE,
/// the last newline for NDJSON).
fn event_boundary(bytes: &[u8], ndjson: bool) -> usize {
    let mut end = bytes.len();
    while let Some(i) = memchr::memrchr(b'\n', &bytes[..end]) {
        if ndjson {
            return i + 1;
        }
        let before = &bytes[..i];
        if before.ends_with(b"\n") || before.ends_with(b"\n\r") {
            return i + 1;
        }
        end = i;
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_boundaries() {
        assert_eq!(event_boundary(b"data: a\n\ndata: b", false), 9);
        assert_eq!(event_boundary(b"data: a\r\n\r\n", false), 11);
        assert_eq!(event_boundary(b"data: a\n", false), 0);
        assert_eq!(event_boundary(b"{}\n{", true), 3);
        assert_eq!(event_boundary(b"{", true), 0);
    }
}
