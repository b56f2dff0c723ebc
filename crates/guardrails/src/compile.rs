//! Guards' specs into rules: one regex per detector shape (built-in kinds compiled once however
//! many guards ask for them), each with its check, its detector and the guards it answers to.

use regex_syntax::hir::{Hir, HirKind, Look};
use regex_syntax::ParserBuilder;

use crate::builtin;
use crate::check::{Check, LOOKAHEAD};
use crate::error::BuildError;
use crate::finding::{DetectorId, GuardId, GuardSet};
use crate::kind::Kind;
use crate::prefilter::Triggers;
use crate::spec::{DetectorSpec, GuardSpec};

/// How many repetitions an open repetition (`+`, `*`, `{n,}`) of a custom pattern matches at
/// most: every match must have a bounded length, which bounds what a stream holds back.
pub(crate) const OPEN_REPETITION: u32 = 128;

/// The longest match a custom pattern or keyword may have, in bytes.
pub(crate) const LONGEST_CUSTOM_MATCH: usize = 1024;

/// One detector: what its findings are, what replaces them, which guards asked for it.
pub(crate) struct Detector {
    pub kind: Kind,
    pub name: String,
    pub placeholder: String,
    pub guards: GuardSet,
}

/// One regex of the engine (its index is the regex's pattern id) and what judges its matches.
pub(crate) struct Rule {
    pub check: Check,
    pub detector: DetectorId,
}

/// Everything the engine is built from.
pub(crate) struct Compiled {
    pub guards: Vec<String>,
    pub detectors: Vec<Detector>,
    pub rules: Vec<Rule>,
    pub regexes: Vec<Hir>,
    /// The most a stream may hold back, in bytes.
    pub max_hold: usize,
    /// The longest match any regex has (not its check's reach), in bytes.
    pub longest: usize,
    /// The bytes every match contains (None: a custom pattern promises none).
    pub triggers: Option<Triggers>,
}

pub(crate) fn compile(specs: &[GuardSpec]) -> Result<Compiled, BuildError> {
    if specs.len() > GuardSet::CAPACITY {
        return Err(BuildError::TooManyGuards { max: GuardSet::CAPACITY });
    }
    let mut compiled = Compiled {
        guards: Vec::new(),
        detectors: Vec::new(),
        rules: Vec::new(),
        regexes: Vec::new(),
        max_hold: 0,
        longest: 0,
        triggers: Some(Triggers::new()),
    };
    // Built-in kinds first, in priority order, each once with the guards that asked for it.
    let mut builtin_guards = [GuardSet::default(); builtin::PRIORITY.len()];
    for (index, spec) in specs.iter().enumerate() {
        let guard = GuardId(index as u8);
        compiled.guards.push(spec.name.clone());
        for detector in &spec.detectors {
            if let DetectorSpec::Builtin(kind) = detector {
                let Some(slot) = builtin::PRIORITY.iter().position(|builtin| builtin == kind) else {
                    return Err(BuildError::NotBuiltin { guard: spec.name.clone(), kind: kind.name() });
                };
                builtin_guards[slot].insert(guard);
            }
        }
    }
    for (kind, guards) in builtin::PRIORITY.into_iter().zip(builtin_guards) {
        if guards != GuardSet::default() {
            compiled.add_builtin(kind, guards)?;
        }
    }
    for (index, spec) in specs.iter().enumerate() {
        let guards = {
            let mut guards = GuardSet::default();
            guards.insert(GuardId(index as u8));
            guards
        };
        for detector in &spec.detectors {
            match detector {
                DetectorSpec::Builtin(_) => {}
                DetectorSpec::Keywords(words) => compiled.add_keywords(&spec.name, words, guards)?,
                DetectorSpec::Pattern { name, regex } => compiled.add_pattern(&spec.name, name, regex, guards)?,
            }
        }
    }
    if let Some(triggers) = &mut compiled.triggers {
        triggers.seal();
    }
    Ok(compiled)
}

impl Compiled {
    fn add_detector(&mut self, kind: Kind, name: &str, placeholder: String, guards: GuardSet) -> DetectorId {
        self.detectors.push(Detector { kind, name: name.to_owned(), placeholder, guards });
        DetectorId((self.detectors.len() - 1) as u32)
    }

    fn add_rule(&mut self, regex: Hir, check: Check, detector: DetectorId) {
        let longest = regex.properties().maximum_len().unwrap_or(usize::MAX);
        let hold = check.reach().unwrap_or(longest.saturating_add(LOOKAHEAD));
        self.max_hold = self.max_hold.max(hold);
        self.longest = self.longest.max(longest);
        self.regexes.push(regex);
        self.rules.push(Rule { check, detector });
    }

    fn add_builtin(&mut self, kind: Kind, guards: GuardSet) -> Result<(), BuildError> {
        let detector = self.add_detector(kind, kind.name(), kind.placeholder().to_owned(), guards);
        let shapes = builtin::shapes(kind);
        let parse = |shape: &builtin::Shape| {
            ParserBuilder::new().build().parse(shape.regex).map_err(|err| BuildError::Compile(err.to_string()))
        };
        let regexes = shapes.iter().map(parse).collect::<Result<Vec<_>, _>>()?;
        let anchored = regexes.iter().all(starts_on_word_boundary);
        if let Some(triggers) = &mut self.triggers {
            if !builtin::triggers(kind).iter().all(|t| triggers.add(t.bytes, t.back, anchored, t.reach)) {
                self.triggers = None;
            }
        }
        for (shape, regex) in shapes.iter().zip(regexes) {
            self.add_rule(regex, shape.check, detector);
        }
        Ok(())
    }

    fn add_keywords(&mut self, guard: &str, words: &[String], guards: GuardSet) -> Result<(), BuildError> {
        if words.iter().any(|word| word.trim().is_empty()) {
            return Err(BuildError::EmptyKeyword { guard: guard.to_owned() });
        }
        if words.is_empty() {
            return Ok(());
        }
        if let Some(triggers) = &mut self.triggers {
            if !words.iter().all(|word| triggers.add_keyword(word.trim())) {
                self.triggers = None;
            }
        }
        let alternatives: Vec<String> = words.iter().map(|word| regex_syntax::escape(word.trim())).collect();
        let source = format!(r"(?i)(?-u:\b{{start-half}})(?:{})(?-u:\b{{end-half}})", alternatives.join("|"));
        let regex = parse_custom(guard, "keywords", &source)?;
        let detector = self.add_detector(Kind::Keyword, "keywords", Kind::Keyword.placeholder().to_owned(), guards);
        self.add_rule(regex, Check::Shape, detector);
        Ok(())
    }

    fn add_pattern(&mut self, guard: &str, name: &str, source: &str, guards: GuardSet) -> Result<(), BuildError> {
        let regex = parse_custom(guard, name, source)?;
        // Any regex: its matches contain nothing known in advance.
        self.triggers = None;
        let detector = self.add_detector(Kind::Pattern, name, placeholder_for(name), guards);
        self.add_rule(regex, Check::Shape, detector);
        Ok(())
    }
}

/// A custom regex, bounded: open repetitions capped, Unicode word boundaries read as ASCII ones
/// (the lazy DFA cannot follow Unicode ones past ASCII text and would fall back to a far slower
/// engine), never empty, never longer than `LONGEST_CUSTOM_MATCH`.
fn parse_custom(guard: &str, pattern: &str, source: &str) -> Result<Hir, BuildError> {
    let parsed = ParserBuilder::new().build().parse(source).map_err(|err| BuildError::InvalidPattern {
        guard: guard.to_owned(),
        pattern: pattern.to_owned(),
        message: err.to_string(),
    })?;
    let regex = bounded(parsed);
    let properties = regex.properties();
    if properties.minimum_len().unwrap_or(0) == 0 {
        return Err(BuildError::EmptyMatch { guard: guard.to_owned(), pattern: pattern.to_owned() });
    }
    let longest = properties.maximum_len().unwrap_or(usize::MAX);
    if longest > LONGEST_CUSTOM_MATCH {
        return Err(BuildError::TooLong {
            guard: guard.to_owned(),
            pattern: pattern.to_owned(),
            longest,
            max: LONGEST_CUSTOM_MATCH,
        });
    }
    Ok(regex)
}

fn bounded(regex: Hir) -> Hir {
    match regex.into_kind() {
        HirKind::Repetition(mut repetition) => {
            repetition.sub = Box::new(bounded(*repetition.sub));
            repetition.max = Some(repetition.max.unwrap_or(repetition.min.max(OPEN_REPETITION)));
            Hir::repetition(repetition)
        }
        HirKind::Capture(mut capture) => {
            capture.sub = Box::new(bounded(*capture.sub));
            Hir::capture(capture)
        }
        HirKind::Concat(subs) => Hir::concat(subs.into_iter().map(bounded).collect()),
        HirKind::Alternation(subs) => Hir::alternation(subs.into_iter().map(bounded).collect()),
        HirKind::Look(look) => Hir::look(ascii(look)),
        HirKind::Empty => Hir::empty(),
        HirKind::Literal(literal) => Hir::literal(literal.0),
        HirKind::Class(class) => Hir::class(class),
    }
}

/// Whether every match of `regex` starts where no ASCII word character comes before (it begins
/// with `(?-u:\b{start-half})`).
fn starts_on_word_boundary(regex: &Hir) -> bool {
    match regex.kind() {
        HirKind::Look(look) => *look == Look::WordStartHalfAscii,
        HirKind::Concat(subs) => subs.first().is_some_and(starts_on_word_boundary),
        HirKind::Capture(capture) => starts_on_word_boundary(&capture.sub),
        HirKind::Alternation(subs) => subs.iter().all(starts_on_word_boundary),
        _ => false,
    }
}

fn ascii(look: Look) -> Look {
    match look {
        Look::WordUnicode => Look::WordAscii,
        Look::WordUnicodeNegate => Look::WordAsciiNegate,
        Look::WordStartUnicode => Look::WordStartAscii,
        Look::WordEndUnicode => Look::WordEndAscii,
        Look::WordStartHalfUnicode => Look::WordStartHalfAscii,
        Look::WordEndHalfUnicode => Look::WordEndHalfAscii,
        other => other,
    }
}

/// `[EMPLOYEE_ID]` for a pattern named `employee-id`.
fn placeholder_for(name: &str) -> String {
    let label: String =
        name.chars().map(|char| if char.is_alphanumeric() { char.to_ascii_uppercase() } else { '_' }).collect();
    format!("[{label}]")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_shape_is_bounded_and_parses() {
        for kind in builtin::PRIORITY {
            for shape in builtin::shapes(kind) {
                let regex = ParserBuilder::new().build().parse(shape.regex).unwrap();
                let longest = regex.properties().maximum_len().unwrap_or_else(|| panic!("{kind} unbounded"));
                assert!(longest <= 600, "{kind}: {longest}");
                assert!(regex.properties().minimum_len().unwrap() > 0, "{kind}");
            }
        }
    }

    #[test]
    fn every_builtin_kind_but_the_pem_line_starts_on_a_word_boundary() {
        for kind in builtin::PRIORITY {
            let anchored = builtin::shapes(kind)
                .iter()
                .all(|shape| starts_on_word_boundary(&ParserBuilder::new().build().parse(shape.regex).unwrap()));
            assert_eq!(anchored, kind != Kind::PrivateKey, "{kind}");
        }
        let keywords = parse_custom("g", "keywords", r"(?i)(?-u:\b{start-half})(?:a|b)").unwrap();
        assert!(starts_on_word_boundary(&keywords));
        assert!(!starts_on_word_boundary(&parse_custom("g", "p", r"(?:\bx|y)").unwrap()));
    }

    #[test]
    fn custom_patterns_are_bounded_or_refused() {
        let regex = parse_custom("g", "p", r"\bEMP-\d+\b").unwrap();
        assert_eq!(regex.properties().maximum_len(), Some(4 + 4 * OPEN_REPETITION as usize));
        assert!(matches!(parse_custom("g", "p", "a*"), Err(BuildError::EmptyMatch { .. })));
        assert!(matches!(parse_custom("g", "p", r"(\w+ ){10}"), Err(BuildError::TooLong { .. })));
        assert!(matches!(parse_custom("g", "p", "(a"), Err(BuildError::InvalidPattern { .. })));
        assert_eq!(placeholder_for("employee-id"), "[EMPLOYEE_ID]");
    }
}
