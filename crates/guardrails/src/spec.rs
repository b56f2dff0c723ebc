//! What a guard asks the engine to find: built-in kinds, a keyword deny list, named regexes.

use crate::kind::Kind;

/// One guard's detectors. Several guards' specs compile into one `Engine`; each finding names
/// the guards whose detector found it.
///
/// ```
/// use switchyard_guardrails::{GuardSpec, Kind};
/// let specs = [
///     GuardSpec::pii("pii"),
///     GuardSpec::new("cards").kinds([Kind::Card, Kind::Iban]),
///     GuardSpec::secrets("secrets"),
///     GuardSpec::new("blocker").keywords(["project-nightingale"]),
///     GuardSpec::new("ids").pattern("employee_id", r"EMP-[0-9]{6}"),
/// ];
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuardSpec {
    pub(crate) name: String,
    pub(crate) detectors: Vec<DetectorSpec>,
}

/// One detector of a guard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DetectorSpec {
    /// A built-in kind (personal data or a credential).
    Builtin(Kind),
    /// Words matched case-insensitively, each as a whole word: not preceded and not followed by
    /// an ASCII letter, digit or `_`.
    Keywords(Vec<String>),
    /// A named regex (the `regex` crate's syntax). Its findings are `Kind::Pattern`, masked as
    /// `[NAME]` (the name upper-cased).
    Pattern { name: String, regex: String },
}

impl GuardSpec {
    /// A guard with no detectors yet.
    pub fn new(name: impl Into<String>) -> GuardSpec {
        GuardSpec { name: name.into(), detectors: Vec::new() }
    }

    /// A guard of every personal-data kind (`type: pii`).
    pub fn pii(name: impl Into<String>) -> GuardSpec {
        GuardSpec::new(name).kinds(Kind::PII)
    }

    /// A guard of every credential kind (`type: secrets`).
    pub fn secrets(name: impl Into<String>) -> GuardSpec {
        GuardSpec::new(name).kinds(Kind::SECRETS)
    }

    /// Adds built-in kinds (`kinds: [email, card]`).
    pub fn kinds(mut self, kinds: impl IntoIterator<Item = Kind>) -> GuardSpec {
        self.detectors.extend(kinds.into_iter().map(DetectorSpec::Builtin));
        self
    }

    /// Adds a keyword deny list.
    pub fn keywords<W: Into<String>>(mut self, words: impl IntoIterator<Item = W>) -> GuardSpec {
        self.detectors.push(DetectorSpec::Keywords(words.into_iter().map(Into::into).collect()));
        self
    }

    /// Adds a named regex.
    pub fn pattern(mut self, name: impl Into<String>, regex: impl Into<String>) -> GuardSpec {
        self.detectors.push(DetectorSpec::Pattern { name: name.into(), regex: regex.into() });
        self
    }

    /// The guard's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The guard's detectors, in the order they were added.
    pub fn detectors(&self) -> &[DetectorSpec] {
        &self.detectors
    }
}
