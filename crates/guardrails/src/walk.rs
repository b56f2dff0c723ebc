//! The anchored automaton over every detector's regex at once (a lazy DFA reporting all matches):
//! walked from one position, it says which detectors match there and at which ends, and, for a
//! stream, whether a match could still begin there once more text comes.

use std::panic::{RefUnwindSafe, UnwindSafe};

use regex_automata::hybrid::dfa::{Cache, DFA};
use regex_automata::hybrid::LazyStateID;
use regex_automata::nfa::thompson::NFA;
use regex_automata::util::pool::{Pool, PoolGuard};
use regex_automata::util::start;
use regex_automata::{Anchored, MatchKind};

use crate::error::BuildError;

/// The lazy DFA's transition cache. States are built as text needs them; when the cache is full
/// it is cleared and rebuilt, never given up on, so every walk finishes in the DFA.
const CACHE_BYTES: usize = 2 << 20;

pub(crate) type NewCache = Box<dyn Fn() -> Cache + Send + Sync + UnwindSafe + RefUnwindSafe>;

/// The most (detector, end) pairs kept from one walk; past that the shortest are dropped.
pub(crate) const MAX_CANDIDATES: usize = 64;

pub(crate) struct Walker {
    dfa: DFA,
    caches: Pool<Cache, NewCache>,
}

/// A detector's regex (`rule`) matching from the walk's start to `end`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Candidate {
    pub end: usize,
    pub rule: usize,
}

/// The candidates of one walk, the longest `MAX_CANDIDATES` of them, on the stack.
pub(crate) struct Candidates {
    items: [Candidate; MAX_CANDIDATES],
    len: usize,
    next: usize,
}

/// Whether a walk ended: every match from its start is known, or one may still grow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Walk {
    Done,
    Alive,
}

impl Walker {
    pub(crate) fn new(nfa: NFA) -> Result<Walker, BuildError> {
        let config =
            DFA::config().match_kind(MatchKind::All).minimum_cache_clear_count(None).cache_capacity(CACHE_BYTES);
        let dfa =
            DFA::builder().configure(config).build_from_nfa(nfa).map_err(|err| BuildError::Compile(err.to_string()))?;
        let for_caches = dfa.clone();
        let caches = Pool::new(Box::new(move || for_caches.create_cache()) as NewCache);
        Ok(Walker { dfa, caches })
    }

    /// A pooled cache, for one scan or one stream chunk.
    pub(crate) fn pooled(&self) -> PoolGuard<'_, Cache, NewCache> {
        self.caches.get()
    }

    /// Every match anchored at `start` of `hay`: its rule and end, into `out`. `Alive` when the
    /// automaton still runs at the end of `hay` and more may come (`eof` false).
    pub(crate) fn candidates(
        &self,
        cache: &mut Cache,
        hay: &[u8],
        start: usize,
        eof: bool,
        out: &mut Candidates,
    ) -> Walk {
        let Some(mut state) = self.start(cache, hay, start) else {
            return Walk::Done;
        };
        for (at, &byte) in hay.iter().enumerate().skip(start) {
            let Ok(next) = self.dfa.next_state(cache, state, byte) else {
                return Walk::Done;
            };
            state = next;
            if state.is_tagged() {
                // Matches are reported one byte late: this state means a match ended at `at`.
                if state.is_match() {
                    self.collect(cache, state, at, out);
                } else if state.is_dead() || state.is_quit() {
                    return Walk::Done;
                }
            }
        }
        if !eof {
            return Walk::Alive;
        }
        if let Ok(last) = self.dfa.next_eoi_state(cache, state) {
            if last.is_match() {
                self.collect(cache, last, hay.len(), out);
            }
        }
        Walk::Done
    }

    /// Whether a match could begin at `start` and run past the end of `hay`: the automaton has
    /// not died reading what there is.
    pub(crate) fn alive(&self, cache: &mut Cache, hay: &[u8], start: usize) -> bool {
        let Some(mut state) = self.start(cache, hay, start) else {
            return false;
        };
        for &byte in &hay[start..] {
            match self.dfa.next_state(cache, state, byte) {
                Ok(next) if next.is_dead() || next.is_quit() => return false,
                Ok(next) => state = next,
                // Unreachable with the cache never given up on; holding back is the safe answer.
                Err(_) => return true,
            }
        }
        true
    }

    fn start(&self, cache: &mut Cache, hay: &[u8], start: usize) -> Option<LazyStateID> {
        let look_behind = start.checked_sub(1).map(|before| hay[before]);
        let config = start::Config::new().anchored(Anchored::Yes).look_behind(look_behind);
        self.dfa.start_state(cache, &config).ok()
    }

    fn collect(&self, cache: &Cache, state: LazyStateID, end: usize, out: &mut Candidates) {
        for index in 0..self.dfa.match_len(cache, state) {
            out.push(Candidate { end, rule: self.dfa.match_pattern(cache, state, index).as_usize() });
        }
    }
}

impl Candidates {
    pub(crate) fn new() -> Candidates {
        Candidates { items: [Candidate::default(); MAX_CANDIDATES], len: 0, next: 0 }
    }

    /// Empty again, for the next walk (the slots are overwritten as candidates come).
    pub(crate) fn clear(&mut self) {
        (self.len, self.next) = (0, 0);
    }

    fn push(&mut self, candidate: Candidate) {
        self.items[self.next] = candidate;
        self.next = (self.next + 1) % MAX_CANDIDATES;
        self.len = (self.len + 1).min(MAX_CANDIDATES);
    }

    /// The candidates grouped by rule (in rule order), each rule's longest first.
    pub(crate) fn by_rule_longest_first(&mut self) -> &[Candidate] {
        let items = &mut self.items[..self.len];
        items.sort_unstable_by(|a, b| a.rule.cmp(&b.rule).then(b.end.cmp(&a.end)));
        items
    }
}
