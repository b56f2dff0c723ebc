//! Why an engine could not be built from its guards' specs.

use std::fmt;

/// A spec the engine cannot compile. Every variant names the guard (and pattern) at fault, so a
/// configuration error can point at the line to fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BuildError {
    /// A kind name that is not a built-in detector.
    UnknownKind(String),
    /// `Kind::Keyword` or `Kind::Pattern` asked for as a built-in: they come with their lists.
    NotBuiltin { guard: String, kind: &'static str },
    /// More guards than a `GuardSet` can name.
    TooManyGuards { max: usize },
    /// A keyword that is empty (or only whitespace): it would match everywhere.
    EmptyKeyword { guard: String },
    /// A custom pattern that does not parse as a regex.
    InvalidPattern { guard: String, pattern: String, message: String },
    /// A custom pattern that can match the empty string.
    EmptyMatch { guard: String, pattern: String },
    /// A custom pattern whose longest match (after capping open repetitions) is longer than a
    /// stream may be held back for it.
    TooLong { guard: String, pattern: String, longest: usize, max: usize },
    /// The compiled automaton would be too big (the regex library's message).
    Compile(String),
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::UnknownKind(name) => write!(f, "unknown detector kind `{name}`"),
            BuildError::NotBuiltin { guard, kind } => {
                write!(f, "guard `{guard}`: `{kind}` is not a built-in detector (give its list instead)")
            }
            BuildError::TooManyGuards { max } => write!(f, "more than {max} guards in one engine"),
            BuildError::EmptyKeyword { guard } => write!(f, "guard `{guard}`: empty keyword"),
            BuildError::InvalidPattern { guard, pattern, message } => {
                write!(f, "guard `{guard}`: pattern `{pattern}`: {message}")
            }
            BuildError::EmptyMatch { guard, pattern } => {
                write!(f, "guard `{guard}`: pattern `{pattern}` can match the empty string")
            }
            BuildError::TooLong { guard, pattern, longest, max } => write!(
                f,
                "guard `{guard}`: pattern `{pattern}` can match {longest} bytes, more than the {max} a stream may hold back; \
                 bound its repetitions"
            ),
            BuildError::Compile(message) => write!(f, "detectors do not compile: {message}"),
        }
    }
}

impl std::error::Error for BuildError {}
