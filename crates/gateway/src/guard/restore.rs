//! The answer side of `action: pseudonymize`: a guard after the configured guardrails that gives
//! the client its own values back where the answer carries the placeholders its request was sent
//! with (`guard/pseudonym.rs`). A whole answer's texts are restored when it is complete; a stream's
//! text events are restored as they come, a placeholder cut between events held back until whole
//! (held text past the last text event goes out in an event made like it, before the next other
//! event); events that repeat the whole text (Responses' `…done`, `response.completed`) are
//! restored whole.

use std::sync::Arc;

use bytes::Bytes;

use super::json_text::{not_text, rewrite_texts};
use super::pseudonym::{StreamRestorer, Vault};
use super::stream_text::{Shape, TextEvent};
use super::{AnswerGuard, Guard, GuardedRequest, Held, Verdict};

/// Registered when a guard pseudonymizes (`server/guarding.rs`); it acts only on answers whose
/// request was given placeholders by a guard that watches answers.
pub struct Restore;

impl Guard for Restore {
    fn name(&self) -> &str {
        "pseudonymize"
    }

    fn answer(&self, request: &GuardedRequest<'_>) -> Option<Box<dyn AnswerGuard>> {
        let vault = request.pseudonyms.filter(|v| v.restores())?.clone();
        if !request.stream {
            return Some(Box::new(WholeRestore { vault, held: Held::default() }));
        }
        let shape = Shape::of(request.endpoint)?;
        let restorer = StreamRestorer::new(vault.clone());
        Some(Box::new(StreamRestore { vault, shape, restorer, last: None }))
    }
}

/// A JSON body with its texts restored; `None` when it carries no placeholder.
fn restored(vault: &Vault, body: &[u8]) -> Option<Vec<u8>> {
    rewrite_texts(body, not_text, |text| vault.restore(text))
}

struct WholeRestore {
    vault: Arc<Vault>,
    held: Held,
}

impl AnswerGuard for WholeRestore {
    fn event(&mut self, chunk: &Bytes) -> Verdict {
        self.held.hold(chunk)
    }

    fn end(&mut self) -> Verdict {
        let held = self.held.take();
        Verdict::Replace(restored(&self.vault, &held).map_or(held, Bytes::from))
    }
}

struct StreamRestore {
    vault: Arc<Vault>,
    shape: Shape,
    restorer: StreamRestorer,
    /// The last text event: what text held past it goes out in.
    last: Option<TextEvent>,
}

impl StreamRestore {
    /// The text held back, in an event like the last text event (empty when nothing is held).
    fn flush(&mut self) -> Bytes {
        let rest = self.restorer.finish();
        match (&self.last, rest.is_empty()) {
            (Some(last), false) => last.with_text(&rest),
            _ => Bytes::new(),
        }
    }
}

impl AnswerGuard for StreamRestore {
    fn event(&mut self, event: &Bytes) -> Verdict {
        let Some(text_event) = TextEvent::parse(self.shape, event) else {
            let held = self.flush();
            let event = restored(&self.vault, event).map_or_else(|| event.clone(), Bytes::from);
            return match held.is_empty() {
                true => Verdict::Replace(event),
                false => Verdict::Replace(Bytes::from([&held[..], &event[..]].concat())),
            };
        };
        let released = self.restorer.push(text_event.text());
        let out = text_event.with_text(&released);
        self.last = Some(text_event);
        Verdict::Replace(out)
    }

    fn end(&mut self) -> Verdict {
        match self.flush() {
            held if held.is_empty() => Verdict::Pass,
            held => Verdict::Replace(held),
        }
    }
}
