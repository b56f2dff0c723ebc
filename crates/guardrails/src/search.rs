//! The one search both a whole text and a stream use: the next finding is the leftmost position
//! where some detector's regex matches, and there the longest candidate that passes its check (one
//! anchored walk lists them). A position whose candidates all fail is skipped and the search goes
//! on from the next character. The positions to try come from one multi-pattern scan (`step`), or,
//! for a whole text whose trigger bytes are sparse, from the windows before them (`each_in_windows`,
//! `prefilter.rs`): the same findings either way.

use std::ops::Range;

use regex_automata::hybrid::dfa::Cache;
use regex_automata::Input;

use crate::check::{Hay, Verdict};
use crate::engine::Engine;
use crate::finding::Finding;
use crate::prefilter::Triggers;
use crate::walk::{Candidates, Walk};

/// What the search found from a position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// The next finding.
    Found(Finding),
    /// A candidate starts here whose verdict needs text not seen yet (a stream only).
    Hold(usize),
    /// No finding starts before the limit.
    Clear,
}

/// The best candidate at one position.
enum Best {
    Found(Finding),
    NeedMore,
    None,
}

impl Engine {
    /// The next finding of `text` that starts in `from..limit`. `eof` says whether `text` is all
    /// there is; while it is not, the caller picks `limit` so that no regex match starting before
    /// it can reach the end of `text` (`Walker::alive`), and checks that need more answer `Hold`.
    pub(crate) fn step(&self, cache: &mut Cache, text: &str, from: usize, limit: usize, eof: bool) -> Step {
        match self.regex.search(&Input::new(text).range(from..)) {
            Some(candidate) => self.step_at(cache, text, candidate.start(), limit, eof),
            None => Step::Clear,
        }
    }

    /// `step` once the scan has found a candidate at `start`.
    pub(crate) fn step_at(&self, cache: &mut Cache, text: &str, start: usize, limit: usize, eof: bool) -> Step {
        let mut start = start;
        let mut candidates = Candidates::new();
        while start < limit {
            match self.best_at(cache, text, start, eof, &mut candidates) {
                Best::Found(finding) => return Step::Found(finding),
                Best::NeedMore => return Step::Hold(start),
                Best::None => {}
            }
            let next = next_char(text, start);
            if next >= limit {
                return Step::Clear;
            }
            // Only starts before `limit` count, and no match is longer than `longest`.
            match self.regex.search(&Input::new(text).range(next..self.bound(text, limit))) {
                Some(candidate) => start = candidate.start(),
                None => return Step::Clear,
            }
        }
        Step::Clear
    }

    /// The longest candidate at `start` that its check accepts; on equal ends, the detector
    /// compiled first.
    fn best_at(&self, cache: &mut Cache, text: &str, start: usize, eof: bool, candidates: &mut Candidates) -> Best {
        let hay = Hay { bytes: text.as_bytes(), eof };
        candidates.clear();
        if self.walker.candidates(cache, hay.bytes, start, eof, candidates) == Walk::Alive {
            return Best::NeedMore;
        }
        let mut best: Option<(usize, usize, usize)> = None;
        let mut decided_rule = None;
        for candidate in candidates.by_rule_longest_first() {
            if decided_rule == Some(candidate.rule) {
                continue;
            }
            match self.rules[candidate.rule].check.verdict(hay, start, candidate.end) {
                Verdict::Accept { start, end } => {
                    decided_rule = Some(candidate.rule);
                    if best.is_none_or(|(_, best_end, _)| end > best_end) {
                        best = Some((start, end, candidate.rule));
                    }
                }
                Verdict::Reject => {}
                Verdict::NeedMore => return Best::NeedMore,
            }
        }
        match best {
            Some((start, end, rule)) => {
                let detector = &self.detectors[self.rules[rule].detector.index()];
                Best::Found(Finding {
                    start,
                    end,
                    kind: detector.kind,
                    guards: detector.guards,
                    detector: self.rules[rule].detector,
                })
            }
            None => Best::None,
        }
    }
}

impl Engine {
    /// Calls `each` with every finding of a whole text in order while it returns `true`, walking
    /// only from the positions of `windows` (ascending, disjoint) where a match may start.
    pub(crate) fn each_in_windows(
        &self,
        triggers: &Triggers,
        text: &str,
        windows: &[Range<usize>],
        each: &mut impl FnMut(Finding) -> bool,
    ) {
        // Taken at the first position a match may start at: a text whose triggers all follow a
        // word (`tok0 tok1`) is passed over without the pool or the walk's room.
        let mut walk = None;
        // Where the next finding may start: past the last one.
        let mut next = 0;
        for window in windows {
            let mut at = window.start.max(next);
            while at < window.end {
                if text.is_char_boundary(at) && triggers.may_start(text.as_bytes(), at) {
                    let (cache, candidates) = walk.get_or_insert_with(|| (self.walker.pooled(), Candidates::new()));
                    match self.best_at(cache, text, at, true, candidates) {
                        Best::Found(finding) => {
                            if !each(finding) {
                                return;
                            }
                            next = finding.end.max(at + 1);
                            at = next;
                            continue;
                        }
                        // Not for a whole text (`eof`); stop as the full scan does.
                        Best::NeedMore => return,
                        Best::None => {}
                    }
                }
                at += 1;
            }
        }
    }
}

/// The next char boundary after `at`.
fn next_char(text: &str, at: usize) -> usize {
    (at + 1..=text.len()).find(|&next| text.is_char_boundary(next)).unwrap_or(text.len())
}
