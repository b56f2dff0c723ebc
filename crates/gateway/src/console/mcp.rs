//! `GET /ui/api/mcp`: the MCP gateway as the console's MCP page shows it — each server, how it is
//! reached (never its credentials), whether its breaker is open, its tools, and the calls each
//! tool has had since start. The page reads the tool-call log from the request log
//! (`model = mcp:{server}`, an indexed filter).

use std::sync::Arc;
use std::time::Duration;

use http::{Response, StatusCode};
use serde_json::{json, Value};

use crate::app::App;
use crate::config::McpTransport;
use crate::http::{json_value, GatewayBody};

/// How long the page waits for a server's tool list (they are cached; a cold, slow one shows as
/// unavailable rather than holding the page).
const LIST_WAIT: Duration = Duration::from_secs(3);

pub async fn mcp(app: &Arc<App>) -> Response<GatewayBody> {
    let Some(front) = &app.mcp else {
        return json_value(StatusCode::OK, &json!({"enabled": false, "code_mode": false, "servers": []}));
    };
    let hub = front.hub();
    let calls = app.metrics.mcp_calls();
    // Every server's list at once: one slow server costs the page LIST_WAIT, not one each.
    let mut lists = tokio::task::JoinSet::new();
    for (i, server) in app.config.mcp.servers.iter().enumerate() {
        let (hub, name) = (hub.clone(), server.name.clone());
        lists.spawn(async move { (i, tokio::time::timeout(LIST_WAIT, hub.tools_of(&name)).await) });
    }
    let mut tools: Vec<Result<Value, String>> = vec![Err("not listed".into()); app.config.mcp.servers.len()];
    while let Some(Ok((i, listed))) = lists.join_next().await {
        tools[i] = match listed {
            Err(_) => Err("the server did not list its tools in time".into()),
            Ok(Err(e)) => Err(e.kind().replace('_', " ")),
            Ok(Ok(list)) => Ok(list
                .iter()
                .map(|t| {
                    json!({
                        "name": t.name,
                        "aggregated": t.aggregated,
                        "description": t.definition.get("description").and_then(Value::as_str).unwrap_or(""),
                    })
                })
                .collect()),
        };
    }
    let servers: Vec<Value> = app
        .config
        .mcp
        .servers
        .iter()
        .zip(tools)
        .map(|(server, listed)| {
            let (transport, target) = match &server.transport {
                // Scheme, host and path: a query or user-info may carry a token.
                McpTransport::Http { url, .. } => (
                    "http",
                    format!(
                        "{}://{}{}",
                        url.scheme_str().unwrap_or("http"),
                        url.authority().map_or("", |a| a.host()),
                        url.path()
                    ),
                ),
                // The program alone: arguments may carry secrets.
                McpTransport::Stdio { command, .. } => ("stdio", command.first().cloned().unwrap_or_default()),
            };
            let by_tool = calls.get(&server.name);
            let mut tools = listed.as_ref().cloned().unwrap_or(Value::Array(Vec::new()));
            if let Value::Array(list) = &mut tools {
                for t in list.iter_mut() {
                    let name = t["name"].as_str().unwrap_or_default().to_owned();
                    t["calls"] = json!(by_tool.and_then(|m| m.get(&name)).cloned().unwrap_or_default());
                }
            }
            let total: u64 = by_tool.map_or(0, |m| m.values().flat_map(|s| s.values()).sum());
            let failed: u64 = by_tool.map_or(0, |m| {
                m.values().flat_map(|s| s.iter()).filter(|(status, _)| **status != "ok").map(|(_, n)| n).sum()
            });
            json!({
                "name": server.name,
                "transport": transport,
                "target": target,
                "breaker_open": hub.is_down(&server.name),
                "error": listed.as_ref().err(),
                "tools": tools,
                "calls": total,
                "failed_calls": failed,
            })
        })
        .collect();
    json_value(StatusCode::OK, &json!({"enabled": true, "code_mode": front.has_code_mode(), "servers": servers}))
}
