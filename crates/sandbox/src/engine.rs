//! The sandbox proper (feature `wasm`): the QuickJS runner compiled once by wasmtime, a fresh
//! instance per execution.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::{Config, Engine, InstancePre, Linker, Module, OptLevel};

use crate::{host, snapshot, ticker, Failure, Limits, Outcome, SetupError, ToolHost, RUNNER_WASM};

/// How often the epoch advances: the wall-time limit is enforced to within this.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(5);

/// The compiled runner, ready to instantiate; shared by every execution. Cheap to clone.
#[derive(Clone)]
pub struct Sandbox {
    inner: Arc<Inner>,
}

struct Inner {
    engine: Engine,
    pre: InstancePre<host::State>,
    limits: Limits,
    _ticker: ticker::Ticker,
}

impl Sandbox {
    /// Compiles the runner, initialises QuickJS in it and compiles the initialised image (a second or two of
    /// CPU: do it once, off the request path).
    pub fn new(limits: Limits) -> Result<Self, SetupError> {
        let mut config = Config::new();
        config.epoch_interruption(true);
        config.cranelift_opt_level(OptLevel::Speed);
        // QuickJS's C stack lives in linear memory; this bounds the host stack its frames use.
        config.max_wasm_stack(1 << 20);
        let engine = Engine::new(&config).map_err(|e| SetupError(e.to_string()))?;
        let initialised = snapshot::build(&engine, RUNNER_WASM).map_err(|e| SetupError(e.to_string()))?;
        let module = Module::new(&engine, &initialised).map_err(|e| SetupError(e.to_string()))?;
        let mut linker = Linker::new(&engine);
        host::define(&mut linker).map_err(|e| SetupError(e.to_string()))?;
        let pre = linker.instantiate_pre(&module).map_err(|e| SetupError(e.to_string()))?;
        let ticker = ticker::Ticker::start(engine.clone(), EPOCH_TICK);
        Ok(Self { inner: Arc::new(Inner { engine, pre, limits, _ticker: ticker }) })
    }

    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// Runs `code` (the body of an async function) with `tools` built from `catalog`
    /// (`{"server": ["tool", ...]}` as JSON). Runs on a blocking thread; tool calls run on the current
    /// tokio runtime. Dropping the returned future lets the program run on until its next tool call
    /// or its time limit, whichever comes first, and cancels its calls in flight.
    pub async fn execute(&self, code: String, catalog: String, tools: Arc<dyn ToolHost>) -> Outcome {
        let started = Instant::now();
        let inner = self.inner.clone();
        let runtime = tokio::runtime::Handle::current();
        let cancelled = host::CancelOnDrop::default();
        let flag = cancelled.flag();
        let job = tokio::task::spawn_blocking(move || {
            host::run(
                &inner.engine,
                &inner.pre,
                &inner.limits,
                host::Job { code, catalog, tools, runtime, cancelled: flag },
            )
        });
        let mut outcome = match job.await {
            Ok(outcome) => outcome,
            Err(e) => Outcome {
                result: Err(Failure::Engine(format!("execution thread failed: {e}"))),
                logs: Vec::new(),
                tool_calls: 0,
                elapsed: Duration::ZERO,
            },
        };
        drop(cancelled);
        outcome.elapsed = started.elapsed();
        outcome
    }
}
