//! The corpora: every kind, in many formats, found in every piece of prose it is embedded in (the
//! positive corpus); and look-alikes of every kind left alone, with the false-positive rate per
//! kind reported and held at what was measured (the negative corpus). The corpora are
//! `corpus/*.tsv` and `corpus/prose.txt` plus what `generate.rs` generates.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report
#![allow(clippy::too_many_lines)] // test scenarios read top to bottom; splitting them hides the story

mod generate;
mod negative;
mod positive;

use switchyard_guardrails::{Engine, GuardSpec};

fn engine() -> Engine {
    Engine::new(&[GuardSpec::pii("pii"), GuardSpec::secrets("secrets")]).unwrap()
}

/// The lines of a corpus file, without comments and blank lines, `\n` read as a newline.
fn lines(file: &str) -> impl Iterator<Item = String> + '_ {
    file.lines().filter(|line| !line.is_empty() && !line.starts_with('#')).map(|line| line.replace("\\n", "\n"))
}
