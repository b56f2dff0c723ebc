//! Masking a stream chunk by chunk, with the same result as masking the whole text at once.
//!
//! After each chunk the masker releases everything up to the first position where a match could
//! still begin: where the anchored automaton, fed the text from there to the end of what has come,
//! has not died (a partial word that could become an email, a number that could grow into a card,
//! a BEGIN line whose END has not come). Before that position every candidate is complete, so it is
//! judged as the whole text would judge it; a check that needs text past what has come holds the
//! stream from its candidate. What is held back is therefore at most the longest match a detector
//! can have (`Engine::max_hold`), and in running prose only the last partial word or number.
//!
//! Unbounded kinds are bounded by their checks: a PEM private-key block is read up to 16 KiB from
//! its BEGIN line and a JWT up to 8 KiB, so a stream holds one back at most that long; a longer one
//! is masked through its cap (the rest, base64 that no detector matches, is released as it is).
//! Custom patterns have open repetitions capped at 128 and matches of at most 1 KiB.

use std::borrow::Borrow;

use regex_automata::hybrid::dfa::Cache;

use crate::check::LOOKBACK;
use crate::engine::Engine;
use crate::finding::{Finding, GuardSet};
use crate::search::Step;

/// How much already released text is kept for the checks and word boundaries that read before a
/// candidate (at most `LOOKBACK` bytes, and one byte for a word boundary).
const CONTEXT: usize = 2 * LOOKBACK;

/// Masks one stream: `push` each chunk as it comes and send on what it returns, then `finish`.
/// The concatenation of everything returned is `engine.mask(whole text)` (with `for_guards`,
/// `engine.mask_for(whole text, guards)`), however the text was split. Borrows the engine
/// (`&Engine`) or shares it (`Arc<Engine>`).
pub struct StreamMasker<E: Borrow<Engine>> {
    engine: E,
    /// The guards whose findings are replaced; the others' are released as they are.
    masking: GuardSet,
    /// The last `CONTEXT` bytes or so of released text, then the text held back.
    buffer: String,
    /// Where the held-back text begins in `buffer`.
    held: usize,
    /// The stream offset of `buffer[0]`.
    offset: usize,
    /// No match can begin before this position of `buffer` (from `held` on): the automaton died
    /// reading from each, and more text cannot revive it. Spares re-walking them every chunk.
    dead_until: usize,
    findings: Vec<Finding>,
}

impl<E: Borrow<Engine>> StreamMasker<E> {
    /// A masker that replaces every finding.
    pub fn new(engine: E) -> StreamMasker<E> {
        StreamMasker::for_guards(engine, GuardSet::ALL)
    }

    /// A masker that replaces the findings of `guards` only, like `Engine::mask_for`.
    pub fn for_guards(engine: E, guards: GuardSet) -> StreamMasker<E> {
        StreamMasker {
            engine,
            masking: guards,
            buffer: String::new(),
            held: 0,
            offset: 0,
            dead_until: 0,
            findings: Vec::new(),
        }
    }

    /// Takes the next chunk; returns the masked text that may be sent now (possibly empty).
    pub fn push(&mut self, chunk: &str) -> String {
        self.buffer.push_str(chunk);
        self.release(false)
    }

    /// The stream has ended: returns the rest, masked. The masker starts a new text after it.
    pub fn finish(&mut self) -> String {
        let rest = self.release(true);
        self.offset += self.buffer.len();
        self.buffer.clear();
        self.held = 0;
        self.dead_until = 0;
        rest
    }

    /// Every finding released so far (masked or not), with offsets into the stream's text (as
    /// pushed).
    pub fn findings(&self) -> &[Finding] {
        &self.findings
    }

    /// How many bytes are held back now.
    pub fn held_back(&self) -> usize {
        self.buffer.len() - self.held
    }

    /// Masks and returns what can be decided; keeps the rest (and some context) in `buffer`.
    fn release(&mut self, eof: bool) -> String {
        let engine = self.engine.borrow();
        // The engine's pooled cache: warm with the states earlier texts built, unlike a new one.
        let mut cache = engine.walker.pooled();
        let text = self.buffer.as_str();
        let mut released = String::new();
        let mut at = self.held;
        // The first position at or after some earlier `at` where a match could still begin.
        let mut alive: Option<usize> = None;
        loop {
            let limit = match (eof, alive) {
                (true, _) => text.len(),
                (false, Some(alive)) if alive >= at => alive,
                (false, _) => {
                    self.dead_until = first_alive(engine, &mut cache, text, at.max(self.dead_until));
                    *alive.insert(self.dead_until)
                }
            };
            match engine.step(&mut cache, text, at, limit, eof) {
                Step::Found(finding) => {
                    match finding.guards.intersects(self.masking) {
                        true => {
                            released.push_str(&text[at..finding.start]);
                            released.push_str(engine.placeholder(finding.detector));
                        }
                        false => released.push_str(&text[at..finding.end]),
                    }
                    self.findings.push(Finding {
                        start: self.offset + finding.start,
                        end: self.offset + finding.end,
                        ..finding
                    });
                    at = finding.end;
                }
                Step::Hold(start) => {
                    released.push_str(&text[at..start]);
                    at = start;
                    break;
                }
                Step::Clear => {
                    released.push_str(&text[at..limit]);
                    at = limit;
                    break;
                }
            }
        }
        self.held = at;
        let keep_from = self.buffer.floor_char_boundary(at.saturating_sub(CONTEXT));
        if keep_from > 0 {
            self.buffer.drain(..keep_from);
            self.offset += keep_from;
            self.held -= keep_from;
            self.dead_until = self.dead_until.saturating_sub(keep_from);
        }
        released
    }
}

/// The first char boundary at or after `from` where a match could begin and run past the end of
/// `text`; `text.len()` when there is none.
fn first_alive(engine: &Engine, cache: &mut Cache, text: &str, from: usize) -> usize {
    (from..text.len())
        .filter(|&at| text.is_char_boundary(at))
        .find(|&at| engine.walker.alive(cache, text.as_bytes(), at))
        .unwrap_or(text.len())
}
