//! Guardrails' detection engine: finds personal data, credentials, deny-listed words and custom
//! patterns in text, and masks them — whole texts, or streams chunk by chunk with the same result.
//!
//! - **One pass per text.** Every built-in detector's matches contain one of a few bytes close to
//!   their start (`prefilter.rs`); one SIMD pass finds them, and candidates are looked for
//!   only in the short windows before them (at word starts). Where they are dense, or a custom
//!   pattern promises nothing, every guard's detectors compiled into one multi-pattern regex
//!   (regex-automata's meta regex, a lazy DFA underneath) propose where candidates start instead.
//!   Ordinary text costs that one pass and nothing else.
//! - **Validated candidates.** At a candidate's start one anchored walk of a second lazy DFA (all
//!   detectors, every match reported) lists which detectors match and where they can end; each is
//!   judged by its check (Luhn, mod 97, issued ranges, entropy, context, the rest of a PEM block or
//!   JWT) and the longest accepted wins. A start with none accepted is skipped.
//! - **Findings** never overlap, come in order, and name their kind, detector and guards.
//! - **Streams** (`StreamMasker`) hold back only what could still become a match, at most
//!   `Engine::max_hold()` bytes, and release exactly what masking the whole text would.
//!
//! ```
//! use switchyard_guardrails::{Engine, GuardSpec, Kind, StreamMasker};
//!
//! let engine = Engine::new(&[GuardSpec::pii("pii"), GuardSpec::secrets("secrets")]).unwrap();
//! let masked = engine.mask("Mail jane@example.com, card 4111 1111 1111 1111.");
//! assert_eq!(masked.text, "Mail [EMAIL], card [CARD].");
//! assert_eq!(masked.findings[1].kind, Kind::Card);
//!
//! let mut stream = StreamMasker::new(&engine);
//! let mut out = stream.push("Mail jane@exa");
//! out += &stream.push("mple.com now");
//! out += &stream.finish();
//! assert_eq!(out, "Mail [EMAIL] now");
//! ```

mod builtin;
mod check;
mod compile;
mod engine;
mod error;
mod finding;
mod kind;
mod mask;
mod prefilter;
mod search;
mod spec;
mod stream;
mod walk;

pub use engine::Engine;
pub use error::BuildError;
pub use finding::{DetectorId, Finding, GuardId, GuardSet};
pub use kind::Kind;
pub use mask::Masked;
pub use spec::{DetectorSpec, GuardSpec};
pub use stream::StreamMasker;
