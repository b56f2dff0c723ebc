//! MCP tool-call metrics: calls by server, tool and outcome, and call latency by server.
//! Labels come from the configured servers and their tools, so their number is bounded by config.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

use super::Histogram;

/// server → tool → outcome → calls.
pub type CallCounts = BTreeMap<String, BTreeMap<String, BTreeMap<&'static str, u64>>>;

#[derive(Default)]
pub struct McpMetrics {
    calls: Mutex<CallCounts>,
    latency: Mutex<BTreeMap<String, Histogram>>,
}

impl McpMetrics {
    pub fn count(&self, server: &str, tool: &str, status: &'static str, latency: Duration) {
        // Looked up by `&str` at each level: owned keys are made only for a new series.
        let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        let tools = match calls.get_mut(server) {
            Some(tools) => tools,
            None => calls.entry(server.to_owned()).or_default(),
        };
        let statuses = match tools.get_mut(tool) {
            Some(statuses) => statuses,
            None => tools.entry(tool.to_owned()).or_default(),
        };
        *statuses.entry(status).or_default() += 1;
        drop(calls);
        if !server.is_empty() {
            let mut latency_by_server = self.latency.lock().unwrap_or_else(|p| p.into_inner());
            match latency_by_server.get(server) {
                Some(h) => h.observe(latency),
                None => latency_by_server.entry(server.to_owned()).or_default().observe(latency),
            }
        }
    }

    /// Every call counted so far (a copy: the console reads it now and then).
    pub fn calls(&self) -> CallCounts {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn render(&self, out: &mut String) {
        let calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        if calls.is_empty() {
            return;
        }
        out.push_str("# HELP switchyard_mcp_tool_calls_total MCP tool calls, by server, tool and outcome.\n");
        out.push_str("# TYPE switchyard_mcp_tool_calls_total counter\n");
        for (server, tools) in calls.iter() {
            for (tool, statuses) in tools {
                for (status, n) in statuses {
                    let _ = writeln!(
                        out,
                        "switchyard_mcp_tool_calls_total{{server=\"{}\",tool=\"{}\",status=\"{status}\"}} {n}",
                        escape(server),
                        escape(tool)
                    );
                }
            }
        }
        drop(calls);
        out.push_str("# HELP switchyard_mcp_tool_call_duration_seconds MCP tool call latency through the gateway.\n");
        out.push_str("# TYPE switchyard_mcp_tool_call_duration_seconds histogram\n");
        for (server, h) in self.latency.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            h.render(out, "switchyard_mcp_tool_call_duration_seconds", &format!("server=\"{}\"", escape(server)));
        }
    }
}

/// `switchyard_mcp_server_requests_total{server,method,outcome}`: what MCP servers asked of
/// clients (sampling, elicitation, roots, ping), relayed, answered or refused at once.
pub fn render_server_requests(counts: &switchyard_mcp::relay::RequestCounts, out: &mut String) {
    if counts.is_empty() {
        return;
    }
    out.push_str("# HELP switchyard_mcp_server_requests_total MCP servers' requests to clients, by server, method and outcome.\n");
    out.push_str("# TYPE switchyard_mcp_server_requests_total counter\n");
    for ((server, method, outcome), n) in counts {
        let _ = writeln!(
            out,
            "switchyard_mcp_server_requests_total{{server=\"{}\",method=\"{method}\",outcome=\"{outcome}\"}} {n}",
            escape(server)
        );
    }
}

/// `switchyard_mcp_forwarded_total{kind,outcome}`: clients' answers and `input_required` retries
/// that reached this instance for another of the fleet (`delivered`, `no_holder`, `unavailable`,
/// `timeout`, `refused`), and those other instances forwarded here (`received`, `stale`).
pub fn render_forwarded(counts: &switchyard_mcp::fleet::ForwardCounts, out: &mut String) {
    if counts.is_empty() {
        return;
    }
    out.push_str("# HELP switchyard_mcp_forwarded_total MCP answers and retries forwarded between a fleet's instances, by kind and outcome.\n");
    out.push_str("# TYPE switchyard_mcp_forwarded_total counter\n");
    for ((kind, outcome), n) in counts {
        let _ = writeln!(out, "switchyard_mcp_forwarded_total{{kind=\"{kind}\",outcome=\"{outcome}\"}} {n}");
    }
}

/// A label value with `\`, `"` and newlines escaped, as the exposition format requires.
pub(super) fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}
