//! A2A metrics (issue 59): calls by agent, method and status, and the task states seen by agent.
//! Agents come from the configuration and methods and states from fixed lists (an unknown state
//! is counted as `other`), so the series are bounded.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;

use super::mcp::escape;

const STATES: [&str; 9] =
    ["submitted", "working", "input_required", "auth_required", "completed", "canceled", "failed", "rejected", "other"];

#[derive(Default)]
pub struct A2aMetrics {
    /// (agent, method, status) → calls.
    calls: Mutex<BTreeMap<(String, &'static str, u16), u64>>,
    /// (agent, state) → calls that left their task in it.
    states: Mutex<BTreeMap<(String, &'static str), u64>>,
}

impl A2aMetrics {
    pub fn count(&self, agent: &str, method: &'static str, status: u16, state: Option<&str>) {
        let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        *calls.entry((agent.to_owned(), method, status)).or_default() += 1;
        drop(calls);
        if let Some(state) = state {
            let state = STATES.iter().find(|s| **s == state).copied().unwrap_or("other");
            let mut states = self.states.lock().unwrap_or_else(|p| p.into_inner());
            *states.entry((agent.to_owned(), state)).or_default() += 1;
        }
    }

    pub fn render(&self, out: &mut String) {
        let calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        if calls.is_empty() {
            return;
        }
        out.push_str("# HELP switchyard_a2a_calls_total A2A calls, by agent, method and HTTP status.\n");
        out.push_str("# TYPE switchyard_a2a_calls_total counter\n");
        for ((agent, method, status), n) in calls.iter() {
            let agent = escape(agent);
            let _ = writeln!(
                out,
                "switchyard_a2a_calls_total{{agent=\"{agent}\",method=\"{method}\",status=\"{status}\"}} {n}"
            );
        }
        drop(calls);
        let states = self.states.lock().unwrap_or_else(|p| p.into_inner());
        out.push_str(
            "# HELP switchyard_a2a_task_states_total A2A calls by agent and the state they left their task in.\n",
        );
        out.push_str("# TYPE switchyard_a2a_task_states_total counter\n");
        for ((agent, state), n) in states.iter() {
            let _ =
                writeln!(out, "switchyard_a2a_task_states_total{{agent=\"{}\",state=\"{state}\"}} {n}", escape(agent));
        }
    }
}
