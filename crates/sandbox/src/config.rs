//! The wasmtime configuration, one source for both sides: build.rs compiles the runner with it (adding only
//! the compiler's own settings and the target), and the crate loads the result into an engine made from it.
//! Everything here that shapes compiled code (epoch checks, stack limit, memory layout) must agree on both
//! sides, or `Module::deserialize` refuses the artifact at start-up. Included by build.rs with `#[path]`: it
//! may use wasmtime and std only, nothing of the crate.

use wasmtime::Config;

/// The host stack wasm frames may use. QuickJS's own C stack lives in linear memory; this bounds the native
/// frames of the compiled code.
pub(crate) const MAX_WASM_STACK: usize = 1 << 20;

/// A program runs on a fiber of this size: the wasm frames plus room for the host functions it calls.
pub(crate) const FIBER_STACK: usize = 2 << 20;

/// The engine's configuration.
pub(crate) fn config() -> Config {
    let mut config = Config::new();
    // The wall-time limit: compiled code checks the engine's epoch at loop heads and function entries.
    config.epoch_interruption(true);
    config.max_wasm_stack(MAX_WASM_STACK);
    config.async_stack_size(FIBER_STACK);
    // No map from machine code back to wasm offsets: it only names the wasm instruction in a trap's
    // backtrace (a QuickJS program's own errors are JavaScript exceptions, not traps), and it is a
    // third of a megabyte of the binary.
    config.generate_address_map(false);
    // No `.eh_frame` for the compiled code: wasmtime captures wasm backtraces from frame pointers;
    // native unwind info only serves outside unwinders (a profiler's), and costs 88 KB.
    config.native_unwind_info(false);
    config
}
