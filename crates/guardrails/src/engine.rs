//! The engine: every guard's detectors compiled into one multi-pattern regex (the scan that finds
//! where candidates start) and one anchored lazy DFA (which detectors match there, and where they
//! end); scanning and masking whole texts.

use std::borrow::Cow;

use regex_automata::hybrid::dfa::Cache;
use regex_automata::meta;
use regex_automata::nfa::thompson;
use regex_automata::util::pool::PoolGuard;
use regex_automata::util::syntax;
use regex_automata::MatchKind;

use crate::compile::{compile, Detector, Rule};
use crate::error::BuildError;
use crate::finding::{DetectorId, Finding, GuardId, GuardSet};
use crate::mask::{self, Masked};
use crate::prefilter::{Starts, Triggers};
use crate::search::Step;
use crate::spec::GuardSpec;
use crate::walk::Walker;

/// The most windows a thread keeps room for between scans (16 KiB).
const KEPT_WINDOWS: usize = 1024;

thread_local! {
    /// A whole text's windows of possible starts (`Triggers::starts`), reused (taken while in use).
    static WINDOWS: std::cell::Cell<Vec<std::ops::Range<usize>>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Detectors compiled once, shared by every request (`Send + Sync`; scans take `&self`).
pub struct Engine {
    pub(crate) regex: meta::Regex,
    pub(crate) walker: Walker,
    pub(crate) rules: Vec<Rule>,
    pub(crate) detectors: Vec<Detector>,
    guards: Vec<String>,
    max_hold: usize,
    /// The longest match of the scan's regex: a search for starts before `n` reads to `n + longest`.
    pub(crate) longest: usize,
    /// Where a whole text's matches can start (None: anywhere).
    pub(crate) triggers: Option<Triggers>,
}

impl Engine {
    /// Compiles the guards' detectors into one engine. Slow (milliseconds): build once, at
    /// start-up or on reload.
    pub fn new(specs: &[GuardSpec]) -> Result<Engine, BuildError> {
        let compiled = compile(specs)?;
        let compile_error = |err: &dyn std::fmt::Display| BuildError::Compile(err.to_string());
        let regex = meta::Builder::new()
            .configure(meta::Config::new().match_kind(MatchKind::LeftmostFirst))
            .syntax(syntax::Config::new())
            .build_many_from_hir(&compiled.regexes)
            .map_err(|err| compile_error(&err))?;
        let nfa = thompson::Compiler::new()
            .configure(thompson::Config::new().which_captures(thompson::WhichCaptures::None))
            .build_many_from_hir(&compiled.regexes)
            .map_err(|err| compile_error(&err))?;
        Ok(Engine {
            regex,
            walker: Walker::new(nfa)?,
            rules: compiled.rules,
            detectors: compiled.detectors,
            guards: compiled.guards,
            max_hold: compiled.max_hold,
            longest: compiled.longest,
            triggers: compiled.triggers,
        })
    }

    /// Every finding in `text`, in order, never overlapping: at each position the leftmost
    /// candidate, the longest that passes its check. Allocates nothing when there is none.
    pub fn scan(&self, text: &str) -> Vec<Finding> {
        let mut findings = Vec::new();
        self.each_finding(text, |finding| {
            findings.push(finding);
            true
        });
        findings
    }

    /// The first finding in `text`, if any (for a guard that blocks: no need to go on).
    pub fn find(&self, text: &str) -> Option<Finding> {
        let mut first = None;
        self.each_finding(text, |finding| {
            first = Some(finding);
            false
        });
        first
    }

    /// `text` with every finding replaced by its placeholder (`[EMAIL]`, `[CARD]`, ...); borrowed
    /// as it is when there is nothing to mask.
    pub fn mask<'t>(&self, text: &'t str) -> Masked<'t> {
        self.mask_for(text, GuardSet::ALL)
    }

    /// `text` with the findings of `guards` replaced; the findings of other guards (a guard that
    /// only logs, one that does not watch this traffic) are left as they are but still reported.
    /// Findings are the same whatever `guards` is: a finding of another guard still covers its
    /// span.
    pub fn mask_for<'t>(&self, text: &'t str, guards: GuardSet) -> Masked<'t> {
        let findings = self.scan(text);
        let text = match findings.iter().any(|finding| finding.guards.intersects(guards)) {
            true => Cow::Owned(mask::replace(self, text, &findings, guards)),
            false => Cow::Borrowed(text),
        };
        Masked { text, findings }
    }

    /// Calls `each` with every finding in order while it returns `true`. When the detectors say
    /// where matches can start (`prefilter.rs`), and those windows are a small part of the text,
    /// the anchored walk runs at their positions alone; where they cover much of it (text dense in
    /// digits and punctuation), one multi-pattern scan over their span is cheaper than a walk per
    /// position.
    fn each_finding(&self, text: &str, mut each: impl FnMut(Finding) -> bool) {
        // The scan alone decides there is nothing: the pooled cache is taken at the first candidate.
        let mut scan = Scan { cache: None, at: 0 };
        let Some(triggers) = &self.triggers else {
            self.each_in(text, 0..text.len(), &mut scan, &mut each);
            return;
        };
        // The windows' list is kept per thread: a scan allocates nothing when there is nothing to find.
        let mut windows = WINDOWS.take();
        windows.clear();
        match triggers.starts(text.as_bytes(), &mut windows) {
            Starts::Nowhere => {}
            Starts::Windows => self.each_in_windows(triggers, text, &windows, &mut each),
            Starts::Span(span) => _ = self.each_in(text, span, &mut scan, &mut each),
        }
        // A huge text's list is let go rather than kept by the thread.
        if windows.capacity() <= KEPT_WINDOWS {
            WINDOWS.set(windows);
        }
    }

    /// `scan` with the walks at the windows' positions however much of the text they cover.
    #[cfg(test)]
    pub(crate) fn scan_by_walks(&self, text: &str) -> Vec<Finding> {
        let mut findings = Vec::new();
        let mut windows = Vec::new();
        if let Some(triggers) = &self.triggers {
            triggers.windows(text.as_bytes(), &mut windows, false);
            self.each_in_windows(triggers, text, &windows, &mut |finding| {
                findings.push(finding);
                true
            });
        }
        findings
    }

    /// The findings that start in `starts` (and after the last one found); false once `each`
    /// says to stop.
    fn each_in<'e>(
        &'e self,
        text: &str,
        starts: std::ops::Range<usize>,
        scan: &mut Scan<'e>,
        each: &mut impl FnMut(Finding) -> bool,
    ) -> bool {
        let mut from = starts.start.max(scan.at);
        while from < starts.end {
            let bound = self.bound(text, starts.end);
            let Some(candidate) = self.regex.search(&regex_automata::Input::new(text).range(from..bound)) else {
                return true;
            };
            if candidate.start() >= starts.end {
                return true;
            }
            let cache = scan.cache.get_or_insert_with(|| self.walker.pooled());
            match self.step_at(cache, text, candidate.start(), starts.end, true) {
                Step::Found(finding) => {
                    if !each(finding) {
                        return false;
                    }
                    (scan.at, from) = (finding.end, finding.end);
                }
                Step::Clear | Step::Hold(_) => return true,
            }
        }
        true
    }

    /// How far a search for matches starting before `limit` reads: a match is never longer.
    pub(crate) fn bound(&self, text: &str, limit: usize) -> usize {
        limit.saturating_add(self.longest).min(text.len())
    }

    /// What replaces a finding of `detector` when masked: `[EMAIL]`, `[KEYWORD]`, `[EMPLOYEE_ID]`.
    pub fn placeholder(&self, detector: DetectorId) -> &str {
        &self.detectors[detector.index()].placeholder
    }

    /// The detector's name: the kind's (`email`), `keywords`, or the custom pattern's.
    pub fn detector_name(&self, detector: DetectorId) -> &str {
        &self.detectors[detector.index()].name
    }

    /// The guard's name, as its spec gave it.
    pub fn guard_name(&self, guard: GuardId) -> &str {
        &self.guards[guard.index()]
    }

    /// The most bytes a `StreamMasker` over this engine holds back: the longest match any
    /// detector can have (plus the two bytes after it a check may read), or, with private keys or
    /// JWTs among the detectors, their caps (16 KiB, 8 KiB). Text that cannot begin a match is
    /// released at once; this bounds the worst case.
    pub fn max_hold(&self) -> usize {
        self.max_hold
    }
}

/// A whole text's scan in progress: the automaton's cache once taken, and where the last finding ended.
struct Scan<'e> {
    cache: Option<PoolGuard<'e, Cache, crate::walk::NewCache>>,
    at: usize,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("guards", &self.guards).field("rules", &self.rules.len()).finish_non_exhaustive()
    }
}
