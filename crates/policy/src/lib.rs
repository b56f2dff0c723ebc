//! Policies as code (issue 58), the parts with no gateway types: the attributes a rule may read
//! and the phase each becomes known in (`attributes.rs`), the load-time check of a CEL
//! expression against them — unknown attributes, wrong types, attributes of a later phase are
//! errors naming where (`check.rs`) — and a compiled condition evaluated against one request's
//! attributes (`condition.rs`). Parsing and evaluation are the `cel` crate's.

pub mod attributes;
pub mod check;
pub mod condition;
pub mod decide;
pub mod rule;

pub use attributes::{Phase, Type};
/// CEL's values, for callers that set attributes of their own types.
pub use cel::Value;
pub use check::CheckError;
pub use condition::{Bound, Condition, Expression, Values};
pub use decide::{decide, Decision, RuleSet};
pub use rule::{Action, RawRule, Rule, RuleError, Then};
