//! Switchyard's MCP gateway: JSON-RPC and MCP protocol pieces (`jsonrpc`, `version`, `names`,
//! `session`), upstream clients (`upstream`, `http_upstream`, `stdio_upstream`), the tool catalogue over every
//! upstream (`hub`), the MCP server presented to clients (`front`), and Code Mode (`code_mode`, with
//! `declarations` for its tool search; the sandbox itself is `switchyard-sandbox`). The gateway crate mounts
//! the endpoints and applies keys, limits and usage; nothing here knows about them.

pub mod breaker;
pub mod code_mode;
pub mod declarations;
pub mod fleet;
pub mod front;
pub mod http_upstream;
pub mod hub;
pub mod jsonrpc;
pub mod names;
pub mod relay;
pub mod session;
pub mod stdio_upstream;
pub mod tool_guard;
pub mod upstream;
pub mod version;

pub use front::{
    no_policy, Answer, Body, CallRecord, Front, OnCall, Request, Scope, SharedAdmit, SharedPermits, SharedPolicy,
    SharedToolGuard,
};
pub use hub::{Hub, ServerSpec, Tool};
pub use upstream::{Upstream, UpstreamError};

fn hub_lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
