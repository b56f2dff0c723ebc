//! The sandbox proper (feature `wasm`): the QuickJS runner, initialised and compiled at build time (build.rs),
//! loaded once; a fresh instance per execution, run as a future on the caller's tokio runtime.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::{Engine, InstancePre, Linker, Module};

use crate::{config, host, ticker, Limits, Outcome, SetupError, ToolHost};

/// How often the epoch advances: the wall-time limit is enforced to within this, and a program that
/// computes without calling a tool yields to the runtime this often.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(5);

/// The runner as build.rs left it: initialised, and compiled for this crate's target by this wasmtime.
static PRECOMPILED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/quickjs-runner.cwasm"));

/// The loaded runner, ready to instantiate; shared by every execution. Cheap to clone.
#[derive(Clone)]
pub struct Sandbox {
    inner: Arc<Inner>,
}

struct Inner {
    pre: InstancePre<host::State>,
    limits: Limits,
    _ticker: ticker::Ticker,
}

impl Sandbox {
    /// Loads the precompiled runner (a few milliseconds: no compiling happens at run time) and starts the
    /// epoch clock.
    pub fn new(limits: Limits) -> Result<Self, SetupError> {
        let engine = Engine::new(&config::config()).map_err(|e| SetupError(e.to_string()))?;
        let module = load(&engine).map_err(|e| SetupError(format!("the precompiled runner: {e}")))?;
        let mut linker = Linker::new(&engine);
        host::define(&mut linker).map_err(|e| SetupError(e.to_string()))?;
        let pre = linker.instantiate_pre(&module).map_err(|e| SetupError(e.to_string()))?;
        let ticker = ticker::Ticker::start(engine, EPOCH_TICK);
        Ok(Self { inner: Arc::new(Inner { pre, limits, _ticker: ticker }) })
    }

    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// Runs `code` (the body of an async function) with `tools` built from `catalog`
    /// (`{"server": ["tool", ...]}` as JSON). Runs on the current tokio runtime, as this future: tool calls
    /// are awaited like any other, and a program that computes yields every epoch tick. Dropping the future
    /// ends the program at once and cancels its calls in flight.
    pub async fn execute(&self, code: String, catalog: String, tools: Arc<dyn ToolHost>) -> Outcome {
        let started = Instant::now();
        let mut outcome = host::run(&self.inner.pre, &self.inner.limits, host::Job { code, catalog, tools }).await;
        outcome.elapsed = started.elapsed();
        outcome
    }
}

/// The precompiled runner as a module.
#[allow(unsafe_code)]
fn load(engine: &Engine) -> wasmtime::Result<Module> {
    // SAFETY: `Module::deserialize` runs the machine code it is given. These bytes are not input: build.rs
    // produced them with `Engine::precompile_module`, from the committed runner (checksum-tested), with this
    // same wasmtime version (pinned `=` in the workspace) and `config::config()` for this crate's target, and
    // they are embedded in the binary, so nothing can change them between build and load. wasmtime checks
    // its version and every setting that shapes code, and refuses a mismatch with an error.
    unsafe { Module::deserialize(engine, PRECOMPILED) }
}
