//! Experiments on live traffic (issue 57), the parts with no gateway types: an experiment's
//! specification and its checks (`spec.rs`), the stable weighted assignment of a unit (a key, a
//! user, a session, a request) to a variant (`assign.rs`), means with 95% confidence intervals and
//! the difference of two variants with its interval (`stats.rs`), and adaptive allocation —
//! Thompson sampling with a floor share per arm, stopped when anytime-valid confidence sequences
//! separate one arm from the rest (`adaptive.rs`), checked by a seeded simulation (`simulate.rs`).
//! The gateway's `experiments/` assigns requests, sends shadows, stores scores and answers results.

pub mod adaptive;
pub mod assign;
pub mod simulate;
pub mod spec;
pub mod stats;

pub use adaptive::{AdaptiveSettings, Arm};
pub use spec::{
    Allocation, Experiment, ExperimentError, JudgeSpec, RawExperiment, ShadowSpec, Unit, Variant, WebhookSpec,
};
pub use stats::{Estimate, Summary};

/// The usage records' metrics every experiment reports (lower is better for each).
pub const USAGE_METRICS: [&str; 7] =
    ["latency", "ttft", "cost", "errors", "tokens", "prompt_tokens", "completion_tokens"];
