//! The epoch clock: one thread advances the engine's epoch every tick, so a program that never yields
//! (an endless loop) is interrupted at its deadline without any check in the hot path.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use wasmtime::Engine;

/// Stops its thread when dropped.
pub(crate) struct Ticker {
    stop: Arc<AtomicBool>,
}

impl Ticker {
    pub(crate) fn start(engine: Engine, tick: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        // If the thread cannot be spawned, programs still end at their deadline when they wait on a
        // tool call; only a program that never yields would run on, so say so.
        let spawned = std::thread::Builder::new().name("sandbox-epoch".into()).spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(tick);
                engine.increment_epoch();
            }
        });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "code mode: the epoch thread could not start; busy loops will not be interrupted");
        }
        Self { stop }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
