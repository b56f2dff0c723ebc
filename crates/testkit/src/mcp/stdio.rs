//! The mock MCP server on stdin/stdout: one JSON-RPC message per line, answers written as
//! they finish (so a slow call does not hold up others), progress as notifications. Exits when
//! stdin closes, as a well-behaved stdio server does.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, Mutex};

use super::server::{answer, State};
use super::{lock, McpMockConfig, Shared};

pub async fn run_stdio(mut cfg: McpMockConfig) -> std::io::Result<()> {
    cfg.stdio = true;
    let state = Arc::new(State { cfg, shared: Arc::new(Shared::default()), next_session: AtomicU64::new(1) });
    let out = Arc::new(Mutex::new(tokio::io::stdout()));
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        let Ok(msg) = serde_json::from_str::<Value>(&line) else { continue };
        if super::ask::answered(&state.shared, &msg) {
            continue;
        }
        let method = msg.get("method").and_then(Value::as_str).unwrap_or_default().to_owned();
        let params = msg.get("params").cloned().unwrap_or(json!({}));
        let Some(id) = msg.get("id").cloned() else {
            if method == "notifications/cancelled" {
                let request_id = params.get("requestId").cloned().unwrap_or(Value::Null);
                if let Some(stop) = lock(&state.shared.cancels).remove(&request_id.to_string()) {
                    let _ = stop.send(true);
                }
            }
            continue;
        };
        if method.is_empty() {
            continue; // an answer to something we never asked
        }
        if method == "initialize" {
            lock(&state.shared.stats)
                .client_capabilities
                .push(params.get("capabilities").cloned().unwrap_or(Value::Null));
        }
        let (state, out) = (state.clone(), out.clone());
        tokio::spawn(async move {
            let reply = if method == "initialize" {
                Ok(json!({"protocolVersion": params.get("protocolVersion").cloned().unwrap_or(json!("2025-11-25")),
                    "capabilities": {"tools": {"listChanged": true}, "logging": {}}, "serverInfo": {"name": "switchyard-mock-mcp-stdio", "version": "1"}}))
            } else {
                let (tx, mut rx) = mpsc::channel::<Value>(64);
                let writer = {
                    let out = out.clone();
                    tokio::spawn(async move {
                        while let Some(note) = rx.recv().await {
                            write(&out, &note).await;
                        }
                    })
                };
                let result = answer(&state, &method, params, &id, tx, None).await;
                let _ = writer.await;
                result
            };
            let envelope = match reply {
                Ok(r) => json!({"jsonrpc": "2.0", "id": id, "result": r}),
                Err((code, message)) => {
                    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
                }
            };
            write(&out, &envelope).await;
        });
    }
    Ok(())
}

async fn write(out: &Mutex<tokio::io::Stdout>, message: &Value) {
    let mut line = serde_json::to_vec(message).unwrap_or_default();
    line.push(b'\n');
    let mut out = out.lock().await;
    let _ = out.write_all(&line).await;
    let _ = out.flush().await;
}
