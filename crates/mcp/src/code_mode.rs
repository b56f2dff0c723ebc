//! Code Mode, served as the MCP server `code` (`POST /mcp/code`): `list_servers`, `search_tools` (TypeScript
//! declarations of matching tools, so a model reads signatures instead of every schema) and
//! `execute_code`, which runs a JavaScript program in the sandbox where `await tools.<server>.<tool>(args)`
//! is a real tool call through the same permission check, rate limit, usage record and metrics as a
//! `tools/call` on `/mcp`.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};
use switchyard_sandbox::{Failure, Sandbox, ToolAnswer, ToolHost};
use tokio::sync::OnceCell;

use crate::declarations;
use crate::front::{CallRecord, OnCall, SharedAdmit, SharedPermits, SharedPolicy};
use crate::hub::Hub;

/// The alias Code Mode is served under, in records, metrics and key permissions (`mcp_servers`).
pub const SERVER: &str = "code";

/// Code Mode's tools, in the order `tools/list` gives them.
pub const TOOLS: [&str; 3] = ["list_servers", "search_tools", "execute_code"];

/// `search_tools` answers at most this many declarations unless asked for fewer.
const SEARCH_LIMIT: usize = 20;

/// The sandbox, loaded once (in the background from start-up, or on first use).
pub struct CodeMode {
    limits: switchyard_sandbox::Limits,
    sandbox: OnceCell<Result<Sandbox, String>>,
}

impl CodeMode {
    pub fn new(limits: switchyard_sandbox::Limits) -> CodeMode {
        CodeMode { limits, sandbox: OnceCell::new() }
    }

    /// The sandbox. Loading it takes a millisecond or two (the module was compiled when the binary was built),
    /// so it happens in place.
    pub async fn sandbox(&self) -> Result<&Sandbox, String> {
        let built =
            self.sandbox.get_or_init(|| async { Sandbox::new(self.limits.clone()).map_err(|e| e.to_string()) }).await;
        built.as_ref().map_err(Clone::clone)
    }
}

/// The three tools' definitions.
pub fn tool_definitions() -> Value {
    json!([
        {
            "name": "list_servers",
            "description": "List the MCP servers whose tools a program can call, with how many tools each has.",
            "inputSchema": {"type": "object", "properties": {}},
        },
        {
            "name": "search_tools",
            "description": "Find tools by words in their name or description. Answers TypeScript declarations of \
                `tools.<server>.<tool>(args)` to call from execute_code.",
            "inputSchema": {"type": "object", "properties": {
                "query": {"type": "string", "description": "Words to look for; empty lists every tool."},
                "server": {"type": "string", "description": "Only this server's tools."},
                "limit": {"type": "integer", "minimum": 1, "description": "At most this many (default 20)."},
            }, "required": ["query"]},
        },
        {
            "name": "execute_code",
            "description": "Run JavaScript: the body of an async function. `await tools.<server>.<tool>({...})` \
                calls a tool and gives its result (structured content, or its text parsed as JSON when it is JSON); \
                a tool error throws. Promise.all runs calls concurrently. console.log output is returned; so is the \
                value the program returns (as JSON). No network, files, timers or modules.",
            "inputSchema": {"type": "object", "properties": {
                "code": {"type": "string", "description": "e.g. const r = await tools.github.search({q: 'x'}); return r.items.length;"},
            }, "required": ["code"]},
        },
    ])
}

/// What a `tools/call` on `/mcp/code` needs from the request; also the program's [`ToolHost`], so its calls
/// are governed like the client's own.
pub struct CodeCall {
    pub hub: Arc<Hub>,
    pub permits: SharedPermits,
    pub admit: SharedAdmit,
    pub policy: SharedPolicy,
    pub on_call: OnCall,
    pub key: Option<String>,
    /// The caller's own tool guards (`Request::tool_guard`); None: the hub's.
    pub tool_guard: Option<crate::front::SharedToolGuard>,
}

impl CodeCall {
    /// The result of tool `name` with `args`, as a JSON-RPC result value; `Err` for invalid params.
    pub async fn run(self, code_mode: &CodeMode, name: &str, args: &Value) -> Result<(Value, &'static str), String> {
        match name {
            "list_servers" => Ok((text_result(&self.list_servers().await, false), "ok")),
            "search_tools" => {
                let Some(query) = args.get("query").and_then(Value::as_str) else {
                    return Err("`query` (a string; empty lists every tool) is required".into());
                };
                let server = args.get("server").and_then(Value::as_str);
                let limit = args.get("limit").and_then(Value::as_u64).map_or(SEARCH_LIMIT, |n| n.max(1) as usize);
                Ok((text_result(&self.search(query, server, limit).await, false), "ok"))
            }
            "execute_code" => {
                let Some(code) = args.get("code").and_then(Value::as_str) else {
                    return Err("`code` (a string) is required".into());
                };
                Ok(self.execute(code_mode, code.to_owned()).await)
            }
            other => Err(format!("unknown tool `{other}`: use {}", TOOLS.join(", "))),
        }
    }

    /// `{server: [tool, ...]}` of what this key may call.
    async fn catalog(&self) -> BTreeMap<String, Vec<crate::Tool>> {
        let mut by_server: BTreeMap<String, Vec<crate::Tool>> = BTreeMap::new();
        for (server, tool) in self.hub.catalogue(self.permits.as_ref()).await {
            by_server.entry(server).or_default().push(tool);
        }
        by_server
    }

    async fn list_servers(&self) -> String {
        let catalog = self.catalog().await;
        let servers: Vec<Value> =
            catalog.iter().map(|(name, tools)| json!({"name": name, "tools": tools.len()})).collect();
        json!({"servers": servers}).to_string()
    }

    async fn search(&self, query: &str, only: Option<&str>, limit: usize) -> String {
        let words: Vec<String> = query.split_whitespace().map(str::to_lowercase).collect();
        let catalog = self.catalog().await;
        let mut scored: Vec<(usize, &str, &crate::Tool)> = Vec::new();
        for (server, tools) in &catalog {
            if only.is_some_and(|o| o != server) {
                continue;
            }
            for tool in tools {
                let description = tool.definition.get("description").and_then(Value::as_str).unwrap_or_default();
                let haystack = format!("{server} {} {description}", tool.name).to_lowercase();
                let score = words.iter().filter(|w| haystack.contains(w.as_str())).count();
                if words.is_empty() || score > 0 {
                    scored.push((score, server, tool));
                }
            }
        }
        // Best matches first; ties in catalogue order (deterministic).
        scored.sort_by_key(|s| std::cmp::Reverse(s.0));
        let shown = scored.len().min(limit);
        let mut out = String::new();
        for (_, server, tool) in &scored[..shown] {
            out.push_str(&declarations::declare(server, &tool.name, &tool.definition));
            out.push('\n');
        }
        if scored.is_empty() {
            out.push_str("// no tool matches; list_servers shows what there is\n");
        } else if scored.len() > shown {
            out.push_str(&format!("// {} more match; narrow the query or raise `limit`\n", scored.len() - shown));
        }
        out
    }

    async fn execute(self, code_mode: &CodeMode, code: String) -> (Value, &'static str) {
        let sandbox = match code_mode.sandbox().await {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "code mode sandbox unavailable");
                return (text_result("the code mode sandbox is unavailable", true), "unavailable");
            }
        };
        let catalog: BTreeMap<String, Vec<String>> = self
            .catalog()
            .await
            .into_iter()
            .map(|(server, tools)| (server, tools.into_iter().map(|t| t.name).collect()))
            .collect();
        let catalog = serde_json::to_string(&catalog).unwrap_or_else(|_| "{}".into());
        let outcome = sandbox.execute(code, catalog, Arc::new(self)).await;
        let logs: Vec<Value> = outcome.logs.iter().map(|l| json!({"level": l.level, "text": l.text})).collect();
        let log_text: String = outcome.logs.iter().map(|l| format!("{}\n", l.text)).collect();
        let mut content = Vec::new();
        let (structured, is_error, status) = match &outcome.result {
            Ok(result_json) => {
                content.push(json!({"type": "text", "text": result_json}));
                let value: Value = serde_json::from_str(result_json).unwrap_or(Value::Null);
                (json!({"result": value, "logs": logs, "toolCalls": outcome.tool_calls}), false, "ok")
            }
            Err(failure) => {
                let (kind, status) = match failure {
                    Failure::Program(_) => ("error", "tool_error"),
                    Failure::Limit(_) => ("limit", "limit_exceeded"),
                    Failure::Engine(_) => ("sandbox", "sandbox_error"),
                };
                // The engine's own words (traps, backtraces) go to the log, not to the client.
                let message = match failure {
                    Failure::Engine(e) => {
                        tracing::warn!(error = %e, "code mode program ended by a sandbox error");
                        "the sandbox failed while running the program".to_owned()
                    }
                    other => other.to_string(),
                };
                content.push(json!({"type": "text", "text": message}));
                let err = json!({"kind": kind, "message": message});
                (json!({"error": err, "logs": logs, "toolCalls": outcome.tool_calls}), true, status)
            }
        };
        if !log_text.is_empty() {
            content.push(json!({"type": "text", "text": format!("console output:\n{log_text}")}));
        }
        (json!({"content": content, "structuredContent": structured, "isError": is_error}), status)
    }
}

fn text_result(text: &str, is_error: bool) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": is_error})
}

impl ToolHost for CodeCall {
    fn call(&self, server: String, tool: String, args: String) -> Pin<Box<dyn Future<Output = ToolAnswer> + Send>> {
        let (hub, permits, admit, on_call, key) =
            (self.hub.clone(), self.permits.clone(), self.admit.clone(), self.on_call.clone(), self.key.clone());
        let (tool_guard, policy) = (self.tool_guard.clone(), self.policy.clone());
        Box::pin(async move {
            let started = Instant::now();
            let request_bytes = args.len();
            let report = |status: &'static str, response_bytes: usize| {
                on_call(CallRecord {
                    key: key.clone(),
                    server: server.clone(),
                    tool: tool.clone(),
                    status,
                    latency: started.elapsed(),
                    request_bytes,
                    response_bytes,
                })
            };
            let known = match hub.tools_of(&server).await {
                Ok(tools) => tools.iter().any(|t| t.name == tool),
                Err(_) => false,
            };
            if !known {
                report("unknown_tool", 0);
                return Err(format!("unknown tool {server}.{tool}"));
            }
            if !permits(&server, &tool) {
                report("forbidden", 0);
                return Err(format!("tool {server}.{tool} is not permitted for this key"));
            }
            let arguments: Value = serde_json::from_str(&args).map_err(|e| e.to_string())?;
            if let Err((rule, message)) = policy(&server, &tool, &arguments) {
                report("policy_denied", 0);
                return Err(format!("{message} (policy `{rule}`)"));
            }
            if let Err(message) = admit() {
                report("rate_limited", 0);
                return Err(message);
            }
            let Some(upstream) = hub.upstream(&server) else { return Err(format!("no MCP server {server}")) };
            let id = upstream.next_id();
            let params = json!({"name": tool, "arguments": arguments});
            match hub.call(&server, id, &tool, params, None, tool_guard.as_ref()).await {
                Ok(raw) => {
                    let result: Value = serde_json::from_str(raw.get()).unwrap_or(Value::Null);
                    let is_error = result.get("isError").and_then(Value::as_bool) == Some(true);
                    report(if is_error { "tool_error" } else { "ok" }, raw.get().len());
                    if is_error {
                        Err(content_text(&result).unwrap_or_else(|| "the tool reported an error".into()))
                    } else {
                        Ok(program_value(result))
                    }
                }
                Err(e) => {
                    report(e.kind(), 0);
                    Err(match e {
                        crate::UpstreamError::Rpc(rpc) => rpc.message,
                        crate::UpstreamError::Blocked(why) => format!("blocked by {why}"),
                        other => format!("the MCP server `{server}` failed ({})", other.kind()),
                    })
                }
            }
        })
    }
}

/// What `await tools.s.t(...)` gives the program: the structured content when there is one, else the
/// text (parsed when it is JSON), else the content array.
fn program_value(result: Value) -> String {
    if let Some(structured) = result.get("structuredContent") {
        return structured.to_string();
    }
    if let Some(text) = content_text(&result) {
        if serde_json::from_str::<Value>(&text).is_ok() {
            return text;
        }
        return Value::String(text).to_string();
    }
    result.get("content").cloned().unwrap_or(Value::Null).to_string()
}

/// The text blocks of a result's content, joined, when all its blocks are text.
fn content_text(result: &Value) -> Option<String> {
    let blocks = result.get("content")?.as_array()?;
    let texts: Option<Vec<&str>> = blocks
        .iter()
        .map(|b| (b.get("type")?.as_str()? == "text").then(|| b.get("text")?.as_str()).flatten())
        .collect();
    texts.filter(|t| !t.is_empty()).map(|t| t.join("\n"))
}
