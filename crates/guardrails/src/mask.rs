//! A masked text: the findings replaced by their placeholders.

use std::borrow::Cow;

use crate::engine::Engine;
use crate::finding::{Finding, GuardSet};

/// The result of `Engine::mask`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Masked<'t> {
    /// The text with every finding replaced; borrowed when there was none.
    pub text: Cow<'t, str>,
    /// Every finding, with offsets into the original text (those `Engine::mask_for` left as they
    /// were included).
    pub findings: Vec<Finding>,
}

/// `text` with each of `findings` (in order, not overlapping) of one of `guards` replaced by its
/// placeholder.
pub(crate) fn replace(engine: &Engine, text: &str, findings: &[Finding], guards: GuardSet) -> String {
    let mut masked = String::with_capacity(text.len());
    let mut copied = 0;
    for finding in findings.iter().filter(|finding| finding.guards.intersects(guards)) {
        masked.push_str(&text[copied..finding.start]);
        masked.push_str(engine.placeholder(finding.detector));
        copied = finding.end;
    }
    masked.push_str(&text[copied..]);
    masked
}
