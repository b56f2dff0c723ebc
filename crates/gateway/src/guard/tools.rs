//! The guardrails on MCP tool calls (`tool_call`) and their results (`tool_result`), on `/mcp`,
//! `/mcp/{server}` and Code Mode's calls alike (`Hub::call`): the built-in detectors scan the
//! JSON whole (every string, whatever its key), then the webhooks and classifiers watching tools
//! are asked. A block is the call's JSON-RPC error and the upstream never sees the call; a masked
//! result reaches the caller already masked. The guards of one direction share a deadline (the
//! server's timeout, `Hub::call`), so several slow services in a row cannot add up past it.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use switchyard_mcp::tool_guard::{Checked, Checking, ToolGuard};

use super::content::ContentGuards;
use super::remote::RemoteGuards;

/// Which call a check is about, and which way.
#[derive(Clone, Copy)]
struct ToolCheck<'a> {
    server: &'a str,
    tool: &'a str,
    direction: &'static str,
}

pub struct ToolGuards {
    content: ContentGuards,
    remote: Option<Arc<RemoteGuards>>,
    /// The guards on calls and on results, as sets of the configured guards' indexes.
    calls: u64,
    results: u64,
}

impl ToolGuards {
    /// The configured guards on tools (from `default` and what a key and its team add), when any
    /// applies.
    pub fn build(
        content: &ContentGuards,
        remote: Option<Arc<RemoteGuards>>,
        added: [&[String]; 2],
    ) -> Option<ToolGuards> {
        let (calls, results) = content.on_tools(added);
        (calls | results != 0).then(|| ToolGuards { content: content.clone(), remote, calls, results })
    }

    async fn check(&self, call: ToolCheck<'_>, json: &[u8], active: u64, deadline: Instant) -> Checked {
        if active == 0 {
            return Ok(None);
        }
        let masked = self.content.check_tool(json, active)?;
        let Some(remote) = self.remote.as_ref().filter(|r| r.watches(active)) else { return Ok(masked) };
        let mut body = Bytes::from(masked.unwrap_or_else(|| json.to_vec()));
        let named = format!("{}/{}", call.server, call.tool);
        let checked = remote.check_tool(active, call.direction, &named, &mut body, deadline).await;
        checked.map_err(|e| super::tool_refusal(&e))?;
        Ok((body != json).then(|| body.to_vec()))
    }
}

impl ToolGuard for ToolGuards {
    fn call<'a>(&'a self, server: &'a str, tool: &'a str, arguments: &'a [u8], deadline: Instant) -> Checking<'a> {
        let call = ToolCheck { server, tool, direction: "tool_call" };
        Box::pin(self.check(call, arguments, self.calls, deadline))
    }

    fn result<'a>(&'a self, server: &'a str, tool: &'a str, result: &'a [u8], deadline: Instant) -> Checking<'a> {
        let call = ToolCheck { server, tool, direction: "tool_result" };
        Box::pin(self.check(call, result, self.results, deadline))
    }
}
