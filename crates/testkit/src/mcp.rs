//! A mock MCP server over Streamable HTTP, session era (`initialize`, `Mcp-Session-Id`, 404 for
//! a session it does not know), for the gateway's MCP tests and benchmarks. Tools:
//! `echo {text}`, `add {a, b}`, `slow {ms, steps}` (progress notifications over SSE when the
//! caller sent a progress token; stops when cancelled), `fail` (`isError: true`),
//! `large {kb}`, plus `tool_0..N` to make listings span pages; `sample`, `elicit`, `roots`,
//! `ping_client` and `log` ask things of the client (`ask.rs`). It records what reached it
//! (calls, cancellations, the `Authorization` header) for tests to assert on, also as
//! `GET /mock/stats` for tests that run it as a process. `run_stdio` serves
//! the same tools on stdin/stdout, one JSON-RPC message per line.

mod ask;
mod server;
mod stdio;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

pub use server::McpMock;
pub use stdio::run_stdio;

#[derive(Debug, Clone)]
pub struct McpMockConfig {
    /// Generated `tool_{i}` tools besides the fixed ones.
    pub extra_tools: usize,
    /// Tools per `tools/list` page (the rest behind `nextCursor`).
    pub page_size: usize,
    /// Answer every request as an SSE stream instead of JSON.
    pub sse: bool,
    /// Delay before answering a `tools/call`, in milliseconds.
    pub call_delay_ms: u64,
    /// Serving on stdin/stdout (`run_stdio`): adds `pid`, `crash` and `spawn_sleeper`.
    pub stdio: bool,
}

impl Default for McpMockConfig {
    fn default() -> Self {
        McpMockConfig { extra_tools: 0, page_size: 100, sse: false, call_delay_ms: 0, stdio: false }
    }
}

/// What reached the mock.
#[derive(Debug, Default, Clone)]
pub struct McpStats {
    pub initialized: u64,
    pub lists: u64,
    /// Calls per tool name.
    pub calls: BTreeMap<String, u64>,
    /// `requestId`s of `notifications/cancelled` received.
    pub cancelled: Vec<serde_json::Value>,
    /// `Authorization` headers seen (each distinct value once).
    pub authorizations: Vec<String>,
    /// Calls that were still running when their cancellation arrived.
    pub stopped_early: u64,
    /// The most `slow` calls that were running at once.
    pub peak_slow: u64,
    /// The capabilities the client declared at each `initialize`, in order.
    pub client_capabilities: Vec<serde_json::Value>,
    /// The level of the last `logging/setLevel`.
    pub log_level: Option<String>,
    /// Sessions its clients ended (`DELETE`).
    pub sessions_ended: u64,
}

#[derive(Default)]
pub(crate) struct Shared {
    /// `change_tools` was called: `added_tool` is listed and list_changed was announced.
    pub(crate) tools_changed: std::sync::atomic::AtomicBool,
    pub(crate) stats: Mutex<McpStats>,
    pub(crate) sessions: Mutex<std::collections::HashSet<String>>,
    pub(crate) cancels: Mutex<BTreeMap<String, tokio::sync::watch::Sender<bool>>>,
    /// `slow` calls running now.
    pub(crate) slow_running: std::sync::atomic::AtomicU64,
    /// Requests sent to the client, waiting for its answer (by id as JSON text).
    pub(crate) asked: Mutex<std::collections::HashMap<String, tokio::sync::oneshot::Sender<serde_json::Value>>>,
    pub(crate) next_ask: std::sync::atomic::AtomicU64,
    /// Each session's GET stream, where messages that relate to no request go.
    pub(crate) streams: Mutex<std::collections::HashMap<String, tokio::sync::mpsc::Sender<serde_json::Value>>>,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Start a mock MCP server on `listen` and print `listening on URL` (the CLI's `mock --api mcp`).
pub async fn run_cli(listen: SocketAddr, cfg: McpMockConfig) -> std::io::Result<()> {
    use std::io::Write as _;
    let server = McpMock::start(listen, cfg).await?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on {}", server.url())?;
        out.flush()?;
    }
    tokio::signal::ctrl_c().await?;
    Ok(())
}

pub(crate) type SharedState = Arc<Shared>;
