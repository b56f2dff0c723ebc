//! A whole text's scan, narrowed to where matches can be. Every built-in kind's matches contain
//! one of a few bytes (a digit, `@`, `:`, `=`, `_`, `-`, `A`, `J`), at most a few bytes past the
//! match's start (`builtin::triggers`), and a keyword contains its own rarest byte. One pass over
//! the text's bytes (a table lookup each) finds them; the multi-pattern scan then runs only over
//! the windows just before them, merged. Prose without them is passed over at table-lookup
//! speed, several times faster than the automaton. A custom pattern (any regex) turns this off:
//! its matches promise nothing.

use std::ops::Range;

/// Per byte: 0 when it triggers nothing, else 1 + how far past a match's start it may be.
#[derive(Clone)]
pub(crate) struct Triggers {
    back: [u8; 256],
    /// The furthest any trigger may be past its match's start.
    max_back: usize,
}

/// Letters whose case folds to a non-ASCII letter too (`K`, the Kelvin sign; `ſ`, a long s): a
/// case-insensitive keyword may match without them.
const FOLDS_OUTSIDE_ASCII: &[u8] = b"kKsS";

impl Triggers {
    pub(crate) fn new() -> Triggers {
        Triggers { back: [0; 256], max_back: 0 }
    }

    /// Matches contain one of `bytes`, at most `back` bytes past their start.
    pub(crate) fn add(&mut self, bytes: &[u8], back: usize) {
        let back = u8::try_from(back.saturating_add(1)).unwrap_or(u8::MAX);
        self.max_back = self.max_back.max(usize::from(back - 1));
        for &byte in bytes {
            self.back[usize::from(byte)] = self.back[usize::from(byte)].max(back);
        }
    }

    /// A case-insensitive keyword, by its rarest byte (both cases of a letter); false when none
    /// will do (a keyword with non-ASCII text, whose case folds are not bytes).
    pub(crate) fn add_keyword(&mut self, word: &str) -> bool {
        if !word.is_ascii() {
            return false;
        }
        let usable = word.bytes().enumerate().filter(|(_, b)| !FOLDS_OUTSIDE_ASCII.contains(b));
        let Some((at, byte)) = usable.min_by_key(|(_, b)| commonness(*b)) else { return false };
        self.add(&[byte.to_ascii_lowercase(), byte.to_ascii_uppercase()], at);
        true
    }

    /// The range of `text` a match may start in: from a little before its first trigger to its
    /// last (None: no match anywhere). One range, not a window per trigger: a search for starts in
    /// a window reads up to the longest match past it, so many small windows cost more than one.
    pub(crate) fn span(&self, text: &[u8]) -> Option<Range<usize>> {
        let first = text.iter().position(|b| self.back[usize::from(*b)] != 0)?;
        let last = text.iter().rposition(|b| self.back[usize::from(*b)] != 0)?;
        Some(first.saturating_sub(self.max_back)..last + 1)
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

    #[test]
    fn matches_start_from_just_before_the_first_trigger_to_the_last() {
        let mut triggers = Triggers::new();
        triggers.add(b"0123456789", 1);
        assert_eq!(triggers.span(b"call 555 0199 or write to me"), Some(4..13));
        assert_eq!(triggers.span(b"nothing here"), None);
        triggers.add(b"@", 64);
        assert_eq!(triggers.span(b"a@b"), Some(0..2));
        assert_eq!(triggers.span(&[b"x".repeat(100), b"7 and 8".to_vec()].concat()), Some(36..107));
        assert!(triggers.add_keyword("project-nightingale"));
        assert_eq!(triggers.back[usize::from(b'-')], 8);
        assert!(!triggers.add_keyword("caf\u{e9}"));
        assert!(!triggers.add_keyword("sk"));
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

    fn same(narrowed: &Engine, whole: &Engine, text: &str) {
        let (a, b) = (narrowed.scan(text), whole.scan(text));
        let spans = |f: &[crate::Finding]| f.iter().map(|f| (f.start, f.end, f.kind)).collect::<Vec<_>>();
        assert_eq!(spans(&a), spans(&b), "in {text:?}");
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
