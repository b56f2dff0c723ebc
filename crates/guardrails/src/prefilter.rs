//! A whole text's scan, narrowed to where matches can start. Every built-in kind's matches contain
//! one of a few bytes (a digit, `@`, `:`, `=`, `_`, `-`, `A`, `J`), at most a few bytes past the
//! match's start (`builtin::triggers`), and a keyword contains its own rarest byte. One pass over
//! the text finds them (aho-corasick's packed SIMD searcher, Teddy, with each trigger byte a
//! pattern; a table lookup per byte where the CPU lacks SSSE3 or little is left to read); a match
//! can then start only in the window
//! just before each, and, for a detector anchored on a half word boundary (all of them but the
//! PEM block's BEGIN line), only where no ASCII word character comes before. The anchored walk
//! runs at those positions alone: prose is passed over at SIMD speed, and a text with
//! findings spread through it costs a few walks per finding, not the automaton over all of it.
//! Where triggers are dense, the multi-pattern scan runs over their span instead. A custom pattern
//! (any regex) turns this off: its matches promise nothing.

use std::ops::Range;

use aho_corasick::packed;

/// The trigger bytes of every detector of an engine, and where before them matches can start.
#[derive(Clone)]
pub(crate) struct Triggers {
    /// Per byte: 0 when it triggers nothing, else 1 + how far past a match's start it may be.
    back: [u8; 256],
    /// The furthest any trigger may be past its match's start.
    max_back: usize,
    /// Per byte: a match may start on it whatever comes before (a trigger of a detector not
    /// anchored on a word boundary, which is the match's first byte).
    starts_anywhere: [bool; 256],
    /// Every detector's matches start where no ASCII word character comes before (or on a byte of
    /// `starts_anywhere`).
    anchored: bool,
    /// Per byte: which bytes can lie between a match's start and it, as an index into `classes`
    /// (`ANY`: every byte; 0: not a trigger). An email's `@` follows its local part only, so its
    /// window ends, going back, at the first byte no local part has.
    reach: [u8; 256],
    classes: Vec<[bool; 256]>,
    /// Every trigger byte as a pattern of a packed (SIMD) searcher, built by `seal` once every
    /// byte is added (None: before, or where the CPU has no SSSE3).
    finder: Option<packed::Searcher>,
}

/// Where a whole text's matches may start (`Triggers::starts`).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Starts {
    Nowhere,
    Windows,
    Span(Range<usize>),
}

/// Triggers are dense, and one scan over their span is cheaper than a walk from each window's
/// positions, once `triggers * DENSE_TRIGGER + covered * DENSE_COVERED` passes the bytes read: a
/// trigger's bookkeeping costs about what the scan spends on ten bytes, a window's position (a
/// walk where one may start) about four. Measured with digits, colons and `@`s put in the 4 KB
/// prompt at different spacings; a digit every 40 bytes is walked, every 16 is scanned.
const DENSE_TRIGGER: usize = 10;
const DENSE_COVERED: usize = 4;
/// Density is judged over at least this many bytes: a short text is walked.
const DENSE_AFTER: usize = 512;

/// `reach` of a trigger whose matches may have any byte before it.
const ANY: u8 = u8::MAX;

/// Letters whose case folds to a non-ASCII letter too (`K`, the Kelvin sign; `ſ`, a long s): a
/// case-insensitive keyword may match without them.
const FOLDS_OUTSIDE_ASCII: &[u8] = b"kKsS";

/// The furthest past a match's start a trigger can be told apart (the table holds 1 + it in a byte).
const MAX_BACK: usize = 254;

/// Under this many bytes left to read, the table is used rather than the packed searcher, which
/// needs a vector's worth of haystack (else it falls back to a slower search) and costs a few
/// dozen instructions to start.
const PACKED_AFTER: usize = 64;

impl Triggers {
    pub(crate) fn new() -> Triggers {
        Triggers {
            back: [0; 256],
            max_back: 0,
            starts_anywhere: [false; 256],
            anchored: true,
            reach: [0; 256],
            classes: vec![[false; 256]],
            finder: None,
        }
    }

    /// Every trigger is added: build the packed searcher over them. Its pattern-count heuristic
    /// (at most 16 one-byte patterns) is lifted: the built-ins have 17 trigger bytes, and bytes of
    /// one low nibble share a bucket, so a byte that is no trigger is rarely a candidate (never a
    /// lowercase letter, whose high nibbles no trigger has).
    pub(crate) fn seal(&mut self) {
        let mut builder = packed::Config::new().heuristic_pattern_limits(false).builder();
        (0..=u8::MAX).filter(|&byte| self.back[usize::from(byte)] != 0).for_each(|byte| _ = builder.add([byte]));
        self.finder = builder.build();
    }

    /// Matches contain one of `bytes`, at most `back` bytes past their start, with only bytes of
    /// `reach` before it (None: any); `anchored`: they start where no ASCII word character comes
    /// before. False when `back` is too far to record.
    pub(crate) fn add(&mut self, bytes: &[u8], back: usize, anchored: bool, reach: Option<&[u8]>) -> bool {
        let Some(entry) = u8::try_from(back + 1).ok().filter(|_| back <= MAX_BACK) else { return false };
        self.max_back = self.max_back.max(back);
        for &byte in bytes {
            let at = usize::from(byte);
            self.back[at] = self.back[at].max(entry);
            // A first byte that is the trigger itself needs no word boundary before it.
            self.starts_anywhere[at] |= !anchored && back == 0;
            self.reach[at] = match (self.reach[at], reach) {
                (ANY, _) | (_, None) => ANY,
                (0, Some(bytes)) if self.classes.len() < usize::from(ANY) => {
                    self.classes.push([false; 256]);
                    self.widen(self.classes.len() - 1, bytes)
                }
                (0, Some(_)) => ANY,
                (class, Some(bytes)) => self.widen(usize::from(class), bytes),
            };
        }
        self.anchored &= anchored || back == 0;
        true
    }

    /// Adds `bytes` to class `index`; returns the index as `reach` holds it.
    fn widen(&mut self, index: usize, bytes: &[u8]) -> u8 {
        bytes.iter().for_each(|&byte| self.classes[index][usize::from(byte)] = true);
        index as u8
    }

    /// A case-insensitive keyword (anchored on a word boundary), by its rarest byte (both cases of
    /// a letter); false when none will do (a keyword with non-ASCII text, whose case folds are not
    /// bytes, or one whose rarest byte is too far in).
    pub(crate) fn add_keyword(&mut self, word: &str) -> bool {
        if !word.is_ascii() {
            return false;
        }
        let usable = word.bytes().enumerate().filter(|(_, b)| !FOLDS_OUTSIDE_ASCII.contains(b));
        let Some((at, byte)) = usable.min_by_key(|(_, b)| commonness(*b)) else { return false };
        self.add(&[byte.to_ascii_lowercase(), byte.to_ascii_uppercase()], at, true, None)
    }

    /// Where matches may start in `text`: nowhere; in `windows` (filled, ascending, disjoint:
    /// the window before each trigger, back as far as its detectors allow, merged); or, where
    /// triggers are dense (walking each window's positions would cost more than one scan), anywhere
    /// in a span from just before the first trigger to the last.
    pub(crate) fn starts(&self, text: &[u8], windows: &mut Vec<Range<usize>>) -> Starts {
        self.windows(text, windows, true)
    }

    /// `starts`, or with `judge` false every window however dense they are.
    pub(crate) fn windows(&self, text: &[u8], windows: &mut Vec<Range<usize>>, judge: bool) -> Starts {
        let (mut from, mut triggers, mut covered) = (0, 0, 0);
        while let Some(at) = self.next_trigger(text, from) {
            from = at + 1;
            triggers += 1;
            let byte = text[at];
            let mut start = at.saturating_sub(usize::from(self.back[usize::from(byte)] - 1));
            if let Some(class) = self.classes.get(usize::from(self.reach[usize::from(byte)])) {
                // The reach of a trigger with a class: back over that class's bytes only.
                let run = text[start..at].iter().rev().take_while(|&&b| class[usize::from(b)]).count();
                start = at - run;
            }
            // Where a word character comes before, no match starts: such a window's front is
            // dropped, and a window with nothing left is none (`tok7`).
            while start <= at && !self.may_start(text, start) {
                start += 1;
            }
            if start > at {
                continue;
            }
            // Later windows may reach back over earlier ones: merge them into this one.
            while let Some(last) = windows.last().filter(|last| last.end >= start) {
                start = start.min(last.start);
                covered -= last.len();
                windows.pop();
            }
            covered += at + 1 - start;
            windows.push(start..at + 1);
            // Judged on the text read so far, so that a dense text is known early.
            let read = at.max(DENSE_AFTER);
            if judge && triggers * DENSE_TRIGGER + covered * DENSE_COVERED > read {
                windows.clear();
                return self.span(text).map_or(Starts::Nowhere, Starts::Span);
            }
        }
        match windows.is_empty() {
            true => Starts::Nowhere,
            false => Starts::Windows,
        }
    }

    /// The range of `text` a match may start in: from a little before its first trigger to its
    /// last (None: no match anywhere).
    fn span(&self, text: &[u8]) -> Option<Range<usize>> {
        let first = self.next_trigger(text, 0)?;
        let last = text.iter().rposition(|b| self.back[usize::from(*b)] != 0)?;
        Some(first.saturating_sub(self.max_back)..last + 1)
    }

    /// The first trigger in `text` from `from` on.
    #[inline]
    fn next_trigger(&self, text: &[u8], from: usize) -> Option<usize> {
        match &self.finder {
            Some(finder) if text.len().saturating_sub(from) >= PACKED_AFTER => {
                finder.find_in(text, aho_corasick::Span::from(from..text.len())).map(|found| found.start())
            }
            // The few bytes left (a short text, the end of a long one), a lookup each: the
            // eight-byte steps below pay off over prose, not here, where triggers are a few
            // bytes apart as often as not (`tok0 tok1`, a date, a sum).
            Some(_) => self.next_trigger_nearby(text, from),
            None => self.next_trigger_by_table(text, from),
        }
    }

    /// `next_trigger` a lookup per byte.
    fn next_trigger_nearby(&self, text: &[u8], from: usize) -> Option<usize> {
        let rest = text.get(from..)?;
        rest.iter().position(|&byte| self.back[usize::from(byte)] != 0).map(|offset| from + offset)
    }

    /// `next_trigger` with a table lookup per byte.
    fn next_trigger_by_table(&self, text: &[u8], from: usize) -> Option<usize> {
        let mut at = from;
        // Eight bytes at a time: one branch per eight lookups (prose has no trigger for hundreds).
        while let Some(chunk) = text.get(at..at + 8) {
            if chunk.iter().fold(0, |any, &byte| any | self.back[usize::from(byte)]) != 0 {
                break;
            }
            at += 8;
        }
        text[at..].iter().position(|&byte| self.back[usize::from(byte)] != 0).map(|offset| at + offset)
    }

    /// Whether a match may start at `at` of `text`, as far as what comes before it says: at the
    /// start, after a byte that is not an ASCII word character, or on a byte of `starts_anywhere`.
    pub(crate) fn may_start(&self, text: &[u8], at: usize) -> bool {
        if !self.anchored || at == 0 || self.starts_anywhere[usize::from(text[at])] {
            return true;
        }
        let before = text[at - 1];
        !(before.is_ascii_alphanumeric() || before == b'_')
    }
}

/// How common a byte is in English text, roughly: letters by their frequency, then space, then
/// digits and punctuation (rarer).
fn commonness(byte: u8) -> u32 {
    const LETTERS: &[u8] = b"zqxjkvbpygfwmucldrhsnioate";
    match byte {
        b' ' => 40,
        b if b.is_ascii_alphabetic() => {
            LETTERS.iter().position(|l| *l == b.to_ascii_lowercase()).map_or(30, |rank| 10 + rank as u32)
        }
        b if b.is_ascii_digit() => 5,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn windows(triggers: &Triggers, text: &[u8]) -> Vec<Range<usize>> {
        let mut out = Vec::new();
        assert_eq!(triggers.windows(text, &mut out, false) == Starts::Windows, !out.is_empty());
        out
    }

    #[test]
    fn matches_start_in_the_windows_just_before_triggers_merged() {
        let mut triggers = Triggers::new();
        assert!(triggers.add(b"0123456789", 1, true, None));
        // A digit may start a match one byte back, but not after a word character: `555` opens
        // one window where it starts and none past it.
        assert_eq!(windows(&triggers, b"call 555 0199 or write to me"), vec![(5..7), (9..11)]);
        assert!(windows(&triggers, b"tok0 tok1 x_2").is_empty());
        assert!(windows(&triggers, b"nothing here").is_empty());
        assert!(triggers.add(b"@", 64, true, None));
        assert_eq!(windows(&triggers, b"a@b"), vec![(0..2)]);
        // A later trigger's window reaching back over earlier ones swallows them.
        assert_eq!(windows(&triggers, b"7 xxxxx 8 xx@"), vec![(0..13)]);
        assert_eq!(windows(&triggers, &[b"x".repeat(100), b" 7 and 8".to_vec()].concat()), [101..102, 107..108]);
        assert!(triggers.add_keyword("project-nightingale"));
        assert_eq!(triggers.back[usize::from(b'-')], 8);
        assert!(!triggers.add_keyword("caf\u{e9}"));
        assert!(!triggers.add_keyword("sk"));
        assert!(!triggers.add_keyword(&format!("{}z", "e".repeat(300))), "a trigger too far in");
    }

    #[test]
    fn dense_triggers_make_one_span() {
        let mut triggers = Triggers::new();
        assert!(triggers.add(b"0123456789", 1, true, None));
        assert!(triggers.add(b"@", 64, true, None));
        let mut out = Vec::new();
        assert_eq!(triggers.starts(b"nothing", &mut out), Starts::Nowhere);
        let dense = "1, 2 and 3; ".repeat(100);
        assert_eq!(triggers.starts(dense.as_bytes(), &mut out), Starts::Span(0..1198));
        assert!(out.is_empty());
        let sparse = format!("{} 1 {} 2", "x".repeat(200), "y".repeat(200));
        assert_eq!(triggers.starts(sparse.as_bytes(), &mut out), Starts::Windows);
        assert_eq!(out, [201..202, 404..405]);
        let mut out = Vec::new();
        // (Words a local part may start at: after 100 bytes of one word, a match could start nowhere.)
        let wide = format!("{0}@{0}@{1}", "x.".repeat(50), "y".repeat(300));
        assert_eq!(triggers.starts(wide.as_bytes(), &mut out), Starts::Span(36..202), "130 of the first 512 covered");
        let wide = format!("{}@{}", "x.".repeat(500), "y".repeat(300));
        assert_eq!(triggers.starts(wide.as_bytes(), &mut out), Starts::Windows, "65 of 1,000 covered");
        assert_eq!(out, vec![(936..1001)]);
    }

    #[test]
    fn the_packed_searcher_finds_the_triggers_the_table_finds() {
        let mut triggers = crate::engine::Engine::new(&[
            crate::GuardSpec::pii("pii"),
            crate::GuardSpec::secrets("secrets"),
            crate::GuardSpec::new("blocker").keywords(["project-nightingale"]),
        ])
        .unwrap()
        .triggers
        .unwrap();
        #[cfg(target_arch = "x86_64")]
        assert!(triggers.finder.is_some() || !std::is_x86_feature_detected!("ssse3"));
        // Every byte value, spread thin through prose, at every offset the search may start from.
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        for round in 0..400 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let mut text = b"the quiet review of the warehouse layout, ".repeat(1 + round % 5);
            for k in 0..(round % 4) {
                let at = (seed >> (k * 16)) as usize % text.len();
                text[at] = (seed >> (k * 8 + 3)) as u8;
            }
            for from in 0..=text.len() {
                assert_eq!(triggers.next_trigger(&text, from), triggers.next_trigger_by_table(&text, from));
            }
        }
        triggers.finder = None;
        assert_eq!(triggers.next_trigger(&[b'x'; 100], 0), None);
    }

    #[test]
    fn anchored_matches_start_after_a_non_word_byte_or_on_a_free_first_byte() {
        let mut triggers = Triggers::new();
        assert!(triggers.add(b"@", 64, true, None));
        let text = b"ab_c.d@e";
        let starts: Vec<usize> = (0..text.len()).filter(|&at| triggers.may_start(text, at)).collect();
        assert_eq!(starts, [0, 5, 7]);
        assert!(triggers.add(b"-", 0, false, None));
        assert!(triggers.may_start(b"x-----BEGIN", 1), "the PEM line may follow a word");
        assert!(!triggers.may_start(b"xy", 1));
        assert!(triggers.add(b"=", 3, false, None) && !triggers.anchored, "unanchored with a window: every position");
    }
}

/// The narrowed scan finds exactly what a scan of the whole text finds: over both corpora (each
/// positive value in each prose template), and over generated texts dense in the triggers and in
/// pieces of every kind's shape.
#[cfg(test)]
mod same_findings {
    use crate::engine::Engine;
    use crate::spec::GuardSpec;

    fn engines() -> (Engine, Engine) {
        let specs = [
            GuardSpec::pii("pii"),
            GuardSpec::secrets("secrets"),
            GuardSpec::new("blocker").keywords(["project-nightingale", "Zeta Nine"]),
        ];
        let narrowed = Engine::new(&specs).unwrap();
        let mut whole = Engine::new(&specs).unwrap();
        assert!(narrowed.triggers.is_some());
        whole.triggers = None;
        (narrowed, whole)
    }

    /// The same findings whichever way the narrowed engine goes: the walks at the windows'
    /// positions, or one scan over their span.
    fn same(narrowed: &Engine, whole: &Engine, text: &str) {
        let spans = |f: &[crate::Finding]| f.iter().map(|f| (f.start, f.end, f.kind)).collect::<Vec<_>>();
        let expected = spans(&whole.scan(text));
        assert_eq!(spans(&narrowed.scan(text)), expected, "in {text:?}");
        assert_eq!(spans(&narrowed.scan_by_walks(text)), expected, "walked, in {text:?}");
    }

    #[test]
    fn over_the_corpora() {
        let (narrowed, whole) = engines();
        let lines = |file: &str| -> Vec<String> {
            file.lines()
                .filter(|l| !l.starts_with('#') && !l.is_empty())
                .map(|l| l.split('\t').nth(1).unwrap_or(l).replace("\\n", "\n"))
                .collect()
        };
        let positive = lines(include_str!("../corpus/positive.tsv"));
        let prose: Vec<String> =
            include_str!("../corpus/prose.txt").lines().skip(1).map(|l| l.replace("\\n", "\n")).collect();
        for value in &positive {
            for template in &prose {
                same(&narrowed, &whole, &template.replace("{}", value));
            }
        }
        for text in lines(include_str!("../corpus/negative.tsv")) {
            same(&narrowed, &whole, &text);
        }
        same(&narrowed, &whole, include_str!("../corpus/prompt.txt"));
        same(&narrowed, &whole, &positive.join(" and "));
    }

    #[test]
    fn over_generated_texts() {
        let (narrowed, whole) = engines();
        let pieces = [
            "a",
            "Z",
            " ",
            "  ",
            "0",
            "7",
            "19",
            "@",
            ":",
            "::",
            "=",
            ":=",
            "=>",
            "-",
            "_",
            ".",
            "+",
            "(",
            ")",
            "\"",
            "'",
            "\n",
            "é",
            "ſ",
            "K",
            "AKIA",
            "ASIA",
            "AIza",
            "eyJ",
            "hbGci",
            "sk-",
            "sk-ant-",
            "ghp_",
            "github_pat_",
            "xoxb-",
            "-----BEGIN ",
            "PRIVATE KEY-----",
            "password",
            "PASSWD",
            "api_key",
            "token",
            "secret",
            "mail",
            "example.com",
            "+44 ",
            "555-",
            "4111",
            "GB82",
            "WEST",
            "192.168.",
            "fe80",
            "project-nightingale",
            "PROJECT-NIGHTINGALE",
            "zeta nine",
            "x9Qz",
            "Kp3mZ8vL",
            "1234 5678",
        ];
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..6_000 {
            let len = 1 + (next() % 40) as usize;
            let text: String = (0..len).map(|_| pieces[(next() % pieces.len() as u64) as usize]).collect();
            same(&narrowed, &whole, &text);
        }
    }
}
