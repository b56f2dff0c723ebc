//! Code Mode's sandbox: runs a short JavaScript program whose `await tools.<server>.<tool>(args)` calls go
//! back to the host, inside QuickJS compiled to WebAssembly and run by wasmtime.
//!
//! Two layers stand between a program and the gateway: QuickJS's own (no `std`/`os` modules, no
//! `fetch`, `require` or `import`, only the `tools` and `console` objects this crate gives it) and the
//! WebAssembly one (a program, or a memory-safety bug in QuickJS, can touch only its own linear memory;
//! the module's only ways out are the imports in `host.rs`). Every execution gets a fresh instance, so
//! nothing leaks between programs or keys. Limits — memory, wall time, tool calls, parallel calls,
//! output size — each end the program with a [`Failure::Limit`]; none of them can affect the host.
//!
//! QuickJS is initialised and compiled to machine code when the crate is built (build.rs): at run time
//! wasmtime only loads it, so the binary carries no compiler. A program runs as a future on the caller's
//! tokio runtime (wasmtime's async support: the program's stack is a fiber), so a tool call is an
//! ordinary await.
//!
//! The crate knows nothing of MCP: the caller passes a catalogue of `{server: [tool]}` and a
//! [`ToolHost`] that performs the calls (and applies whatever permissions and accounting it wants).

#[cfg(feature = "wasm")]
mod calls;
#[cfg(feature = "wasm")]
mod config;
#[cfg(feature = "wasm")]
mod engine;
#[cfg(feature = "wasm")]
mod host;
#[cfg(feature = "wasm")]
mod mapped;
/// Used by build.rs; here for its tests.
#[cfg(test)]
mod snapshot;
#[cfg(feature = "wasm")]
mod ticker;
#[cfg(not(feature = "wasm"))]
mod unavailable;

#[cfg(feature = "wasm")]
pub use engine::Sandbox;
#[cfg(not(feature = "wasm"))]
pub use unavailable::Sandbox;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// Limits of one execution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The program's linear memory, QuickJS's heap and stack included.
    pub memory_bytes: usize,
    /// Wall time from start to result, tool calls included.
    pub timeout: Duration,
    /// Tool calls one program may start.
    pub max_tool_calls: u32,
    /// Tool calls in flight at once; more wait for a free slot.
    pub max_parallel_calls: u32,
    /// Bytes of console output plus the result.
    pub max_output_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_bytes: 32 << 20,
            timeout: Duration::from_secs(30),
            max_tool_calls: 50,
            max_parallel_calls: 8,
            max_output_bytes: 1 << 20,
        }
    }
}

/// A tool call's answer as the program sees it: `Ok` with a JSON value, or `Err` with a message
/// (the promise rejects with an `Error` carrying it).
pub type ToolAnswer = Result<String, String>;

/// Performs the tool calls of one execution.
pub trait ToolHost: Send + Sync + 'static {
    /// Calls `tool` on `server` with `args` (a JSON object, as text).
    fn call(&self, server: String, tool: String, args: String) -> Pin<Box<dyn Future<Output = ToolAnswer> + Send>>;
}

/// Which limit ended a program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Limit {
    Memory(usize),
    Time(Duration),
    ToolCalls(u32),
    Output(usize),
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::Memory(bytes) => write!(f, "memory limit exceeded ({} MiB)", bytes >> 20),
            Limit::Time(t) => write!(f, "time limit exceeded ({} ms)", t.as_millis()),
            Limit::ToolCalls(n) => write!(f, "tool call limit exceeded ({n} calls)"),
            Limit::Output(bytes) => write!(f, "output limit exceeded ({bytes} bytes)"),
        }
    }
}

/// Why a program produced no value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The program threw (or its promise rejected): the error and its stack.
    Program(String),
    /// A limit ended it.
    Limit(Limit),
    /// The sandbox itself failed (a trap that no limit explains, e.g. the engine's stack ran out).
    Engine(String),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Program(msg) => f.write_str(msg),
            Failure::Limit(limit) => write!(f, "{limit}"),
            Failure::Engine(msg) => write!(f, "sandbox error: {msg}"),
        }
    }
}

/// What one execution produced.
#[derive(Debug)]
pub struct Outcome {
    /// The program's return value as JSON text (`null` when it returned nothing), or why there is none.
    pub result: Result<String, Failure>,
    /// `console.*` output, in order.
    pub logs: Vec<LogLine>,
    /// Tool calls the program started.
    pub tool_calls: u32,
    pub elapsed: Duration,
}

/// Errors building a [`Sandbox`].
#[derive(Debug)]
pub struct SetupError(String);

impl fmt::Display for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "code mode sandbox: {}", self.0)
    }
}

impl std::error::Error for SetupError {}

/// One `console.*` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    /// `log`, `info`, `warn` or `error`.
    pub level: &'static str,
    pub text: String,
}
