//! The sandbox proper (feature `wasm`): the QuickJS runner, initialised and compiled at build time (build.rs),
//! loaded once per process (mapped.rs); a fresh instance per execution, run as a future on the caller's tokio
//! runtime.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use wasmtime::{Engine, InstancePre, Linker, Module};

use crate::{host, mapped, ticker, Limits, Outcome, SetupError, ToolHost};

/// How often the epoch advances while a program runs: the wall-time limit is enforced to within this, and a
/// program that computes without calling a tool yields to the runtime this often.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(5);

/// The engine and the runner, shared by every sandbox of the process (the runner is the same for all; only
/// limits differ).
struct Loaded {
    engine: Engine,
    module: Module,
    ticker: ticker::Ticker,
}

static LOADED: OnceLock<Result<Loaded, String>> = OnceLock::new();

fn loaded() -> Result<&'static Loaded, SetupError> {
    let loaded = LOADED.get_or_init(|| {
        let started = Instant::now();
        let (engine, module, how) = mapped::load().map_err(|e| format!("the precompiled runner: {e}"))?;
        tracing::debug!(how, elapsed = ?started.elapsed(), "code mode: runner loaded");
        let ticker = ticker::Ticker::new(engine.clone(), EPOCH_TICK);
        Ok(Loaded { engine, module, ticker })
    });
    loaded.as_ref().map_err(|e| SetupError(e.clone()))
}

/// The runner ready to instantiate, with its limits. Cheap to clone.
#[derive(Clone)]
pub struct Sandbox {
    inner: Arc<Inner>,
}

struct Inner {
    loaded: &'static Loaded,
    pre: InstancePre<host::State>,
    limits: Limits,
}

impl Sandbox {
    /// Loads the precompiled runner, the first time in the process (a millisecond or so: nothing is compiled
    /// at run time).
    pub fn new(limits: Limits) -> Result<Self, SetupError> {
        let loaded = loaded()?;
        let mut linker = Linker::new(&loaded.engine);
        host::define(&mut linker).map_err(|e| SetupError(e.to_string()))?;
        let pre = linker.instantiate_pre(&loaded.module).map_err(|e| SetupError(e.to_string()))?;
        Ok(Self { inner: Arc::new(Inner { loaded, pre, limits }) })
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
        let _ticking = self.inner.loaded.ticker.enter();
        let mut outcome = host::run(&self.inner.pre, &self.inner.limits, host::Job { code, catalog, tools }).await;
        outcome.elapsed = started.elapsed();
        outcome
    }
}
