//! Guards on tool calls (`tool_call`) and their results (`tool_result`): the embedder's checks on
//! what a client sends a tool server and what comes back (the gateway's guardrails). Every call
//! passes through `Hub::call`, whether a client made it on `/mcp`, `/mcp/{server}` or from a Code
//! Mode program, so that is where they run: a blocked call never reaches its server, a masked
//! result reaches the caller already masked.

use std::time::Instant;

/// What a guard decides about some JSON bytes.
pub type Checked = Result<Option<Vec<u8>>, String>;

/// A guard's decision to come: some guards ask a service (a webhook, a classifier model).
pub type Checking<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = Checked> + Send + 'a>>;

/// The guards of one direction of one call share a deadline: a guard that asks a service gets
/// what is left of it, so several slow guards in a row take no longer than one would.
pub trait ToolGuard: Send + Sync {
    /// A call's `arguments` (JSON), decided by `deadline`: `Ok(None)` as they are,
    /// `Ok(Some(bytes))` instead, `Err(why)` refused.
    fn call<'a>(&'a self, server: &'a str, tool: &'a str, arguments: &'a [u8], deadline: Instant) -> Checking<'a>;

    /// A call's result (JSON), the same way.
    fn result<'a>(&'a self, server: &'a str, tool: &'a str, result: &'a [u8], deadline: Instant) -> Checking<'a>;
}
