//! A build without the `wasm` feature (no wasmtime, as the fuzzing build uses): the same API, but
//! a [`Sandbox`] cannot be made, so a configuration that enables Code Mode is refused at start-up.

use std::sync::Arc;

use crate::{Limits, Outcome, SetupError, ToolHost};

/// Never constructed in this build: [`Sandbox::new`] always fails.
#[derive(Clone)]
pub struct Sandbox {
    limits: Limits,
}

impl Sandbox {
    pub fn new(_limits: Limits) -> Result<Self, SetupError> {
        Err(SetupError("this build has no Code Mode (built without the `wasm` feature)".to_owned()))
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    pub async fn execute(&self, _code: String, _catalog: String, _tools: Arc<dyn ToolHost>) -> Outcome {
        Outcome {
            result: Err(crate::Failure::Engine("this build has no Code Mode".to_owned())),
            logs: Vec::new(),
            tool_calls: 0,
            elapsed: std::time::Duration::ZERO,
        }
    }
}
