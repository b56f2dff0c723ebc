//! The epoch clock: one thread advances the engine's epoch every tick while any program runs, so a program
//! that never calls out (an endless loop) yields to the runtime at each tick and is ended at its deadline,
//! without any check in its hot path. With no program running the thread sleeps until one starts: an idle
//! gateway pays no wake-ups for Code Mode.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::Duration;

use wasmtime::Engine;

/// Shared by every execution of one engine.
pub(crate) struct Ticker {
    running: Arc<AtomicUsize>,
    /// The clock's thread, started with the first program; `None` if it could not be.
    thread: OnceLock<Option<Thread>>,
    engine: Engine,
    tick: Duration,
}

/// A running program: the clock ticks while one exists.
pub(crate) struct Running<'a>(&'a Ticker);

impl Ticker {
    pub(crate) fn new(engine: Engine, tick: Duration) -> Self {
        Self { running: Arc::default(), thread: OnceLock::new(), engine, tick }
    }

    /// Counts a program in, waking the clock if it was the only one.
    pub(crate) fn enter(&self) -> Running<'_> {
        let thread = self.thread.get_or_init(|| self.spawn());
        if self.running.fetch_add(1, Ordering::SeqCst) == 0 {
            if let Some(thread) = thread {
                thread.unpark();
            }
        }
        Running(self)
    }

    fn spawn(&self) -> Option<Thread> {
        let (running, engine, tick) = (self.running.clone(), self.engine.clone(), self.tick);
        // If the thread cannot be spawned, programs still end at their deadline when they wait on a tool
        // call; only a program that never calls out would run on, so say so.
        let spawned = std::thread::Builder::new().name("sandbox-epoch".into()).spawn(move || loop {
            // An unpark between the load and the park is not lost: park returns at once.
            if running.load(Ordering::SeqCst) == 0 {
                std::thread::park();
                continue;
            }
            std::thread::sleep(tick);
            engine.increment_epoch();
        });
        match spawned {
            Ok(handle) => Some(handle.thread().clone()),
            Err(e) => {
                tracing::error!(error = %e, "code mode: the epoch thread could not start; busy loops will not be interrupted");
                None
            }
        }
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}
