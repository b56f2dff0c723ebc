//! The mock MCP server's HTTP side and its tools.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::{lock, McpMockConfig, McpStats, Shared, SharedState};

type Body = http_body_util::Either<Full<Bytes>, ChannelBody>;

pub struct McpMock {
    addr: SocketAddr,
    shared: SharedState,
    task: tokio::task::JoinHandle<()>,
}

impl McpMock {
    pub async fn start(listen: SocketAddr, cfg: McpMockConfig) -> std::io::Result<McpMock> {
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let shared: SharedState = Arc::new(Shared::default());
        let state = Arc::new(State { cfg, shared: shared.clone(), next_session: AtomicU64::new(1) });
        let task = tokio::spawn(async move {
            // Connections live in this task's JoinSet, so dropping the mock (aborting the task)
            // closes every connection too, as a killed server would.
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                while connections.try_join_next().is_some() {}
                let _ = stream.set_nodelay(true);
                let state = state.clone();
                connections.spawn(async move {
                    let service = service_fn(move |req| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(handle(state, req).await) }
                    });
                    let _ = Builder::new(TokioExecutor::new()).serve_connection(TokioIo::new(stream), service).await;
                });
            }
        });
        Ok(McpMock { addr, shared, task })
    }

    /// The MCP endpoint, `http://ADDR/mcp`.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    pub fn stats(&self) -> McpStats {
        lock(&self.shared.stats).clone()
    }

    /// Forget every session, as a restarted server would: the next request gets 404.
    pub fn forget_sessions(&self) {
        lock(&self.shared.sessions).clear();
    }
}

impl Drop for McpMock {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub(super) struct State {
    pub(super) cfg: McpMockConfig,
    pub(super) shared: SharedState,
    pub(super) next_session: AtomicU64,
}

fn reply(status: StatusCode, body: Option<Value>) -> Response<Body> {
    let bytes = body.map(|b| serde_json::to_vec(&b).unwrap_or_default()).unwrap_or_default();
    let mut resp = Response::new(http_body_util::Either::Left(Full::new(Bytes::from(bytes))));
    *resp.status_mut() = status;
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

async fn handle(state: Arc<State>, req: Request<Incoming>) -> Response<Body> {
    if req.uri().path() == "/mock/stats" {
        let stats = lock(&state.shared.stats).clone();
        return reply(
            StatusCode::OK,
            Some(json!({
                "initialized": stats.initialized, "lists": stats.lists, "calls": stats.calls,
                "cancelled": stats.cancelled, "stopped_early": stats.stopped_early,
            })),
        );
    }
    if req.uri().path() != "/mcp" {
        return reply(StatusCode::NOT_FOUND, None);
    }
    if let Some(auth) = req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) {
        let mut stats = lock(&state.shared.stats);
        if !stats.authorizations.iter().any(|a| a == auth) {
            stats.authorizations.push(auth.to_owned());
        }
    }
    if req.method() == Method::GET {
        return get_stream(&state, &req);
    }
    if req.method() == Method::DELETE {
        // The client is done with its session: forgotten, its GET stream closed.
        let session = req.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_owned);
        let Some(session) = session.filter(|s| lock(&state.shared.sessions).remove(s)) else {
            return reply(StatusCode::NOT_FOUND, None);
        };
        lock(&state.shared.streams).remove(&session);
        lock(&state.shared.stats).sessions_ended += 1;
        return reply(StatusCode::OK, None);
    }
    if req.method() != Method::POST {
        return reply(StatusCode::METHOD_NOT_ALLOWED, None);
    }
    let session = req.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let Ok(body) = req.into_body().collect().await.map(|b| b.to_bytes()) else {
        return reply(StatusCode::BAD_REQUEST, None);
    };
    let Ok(msg) = serde_json::from_slice::<Value>(&body) else {
        return reply(
            StatusCode::BAD_REQUEST,
            Some(json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "parse error"}})),
        );
    };
    if super::ask::answered(&state.shared, &msg) {
        return reply(StatusCode::ACCEPTED, None);
    }
    let method = msg.get("method").and_then(Value::as_str).unwrap_or_default().to_owned();
    let id = msg.get("id").cloned();
    let params = msg.get("params").cloned().unwrap_or(json!({}));
    if method == "initialize" {
        let sid = format!("mock-{}", state.next_session.fetch_add(1, Relaxed));
        lock(&state.shared.sessions).insert(sid.clone());
        {
            let mut stats = lock(&state.shared.stats);
            stats.initialized += 1;
            stats.client_capabilities.push(params.get("capabilities").cloned().unwrap_or(Value::Null));
        }
        let mut resp = reply(
            StatusCode::OK,
            Some(json!({"jsonrpc": "2.0", "id": id, "result": {
                "protocolVersion": params.get("protocolVersion").cloned().unwrap_or(json!("2025-11-25")),
                "capabilities": {"tools": {"listChanged": true}, "resources": {"subscribe": true}, "prompts": {},
                    "logging": {}, "completions": {}},
                "serverInfo": {"name": "switchyard-mock-mcp", "version": "1"},
                "instructions": "The mock MCP server: echo, add, slow, and tools that ask the client."
            }})),
        );
        if let Ok(v) = HeaderValue::from_str(&sid) {
            resp.headers_mut().insert("mcp-session-id", v);
        }
        return resp;
    }
    let known = session.as_ref().is_some_and(|s| lock(&state.shared.sessions).contains(s));
    if !known {
        return reply(StatusCode::NOT_FOUND, None);
    }
    let Some(id) = id else {
        if method == "notifications/cancelled" {
            let request_id = params.get("requestId").cloned().unwrap_or(Value::Null);
            lock(&state.shared.stats).cancelled.push(request_id.clone());
            if let Some(stop) = lock(&state.shared.cancels).remove(&request_id.to_string()) {
                let _ = stop.send(true);
            }
        }
        return reply(StatusCode::ACCEPTED, None);
    };
    let (tx, rx) = mpsc::channel::<Value>(64);
    let state2 = state.clone();
    let id2 = id.clone();
    let caller = session.clone();
    let work = tokio::spawn(async move { answer(&state2, &method, params, &id2, tx, caller.as_deref()).await });
    if state.cfg.sse || wants_progress(&msg) || super::ask::needs_stream(&msg) {
        return sse(rx, work, id);
    }
    drop(rx);
    let result = work.await.unwrap_or_else(|_| Err((-32603, "panicked".into())));
    reply(StatusCode::OK, Some(envelope(&id, result)))
}

/// A session's GET stream: messages that relate to no request (`ask.rs` sends some there).
fn get_stream(state: &State, req: &Request<Incoming>) -> Response<Body> {
    let session = req.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let Some(session) = session.filter(|s| lock(&state.shared.sessions).contains(s)) else {
        return reply(StatusCode::NOT_FOUND, None);
    };
    let (tx, mut rx) = mpsc::channel::<Value>(64);
    lock(&state.shared.streams).insert(session, tx);
    let (frames, body) = mpsc::channel::<Bytes>(64);
    tokio::spawn(async move {
        while let Some(message) = rx.recv().await {
            if frames.send(Bytes::from(format!("event: message\ndata: {message}\n\n"))).await.is_err() {
                return;
            }
        }
    });
    let mut resp = Response::new(http_body_util::Either::Right(ChannelBody(body)));
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    resp
}

fn wants_progress(msg: &Value) -> bool {
    msg.pointer("/params/_meta/progressToken").is_some()
}

fn envelope(id: &Value, result: Result<Value, (i64, String)>) -> Value {
    match result {
        Ok(r) => json!({"jsonrpc": "2.0", "id": id, "result": r}),
        Err((code, message)) => json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}),
    }
}

/// An SSE answer: notifications as the work sends them, then the response.
fn sse(
    mut notes: mpsc::Receiver<Value>,
    work: tokio::task::JoinHandle<Result<Value, (i64, String)>>,
    id: Value,
) -> Response<Body> {
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    tokio::spawn(async move {
        while let Some(note) = notes.recv().await {
            let event = format!("event: message\ndata: {note}\n\n");
            if tx.send(Bytes::from(event)).await.is_err() {
                return;
            }
        }
        let result = work.await.unwrap_or_else(|_| Err((-32603, "panicked".into())));
        let event = format!("event: message\ndata: {}\n\n", envelope(&id, result));
        let _ = tx.send(Bytes::from(event)).await;
    });
    let mut resp = Response::new(http_body_util::Either::Right(ChannelBody(rx)));
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    resp
}

fn fixed_tools() -> Vec<Value> {
    let obj = |props: Value, required: Value| json!({"type": "object", "properties": props, "required": required});
    vec![
        json!({"name": "echo", "description": "Echo the text back.", "inputSchema": obj(json!({"text": {"type": "string"}}), json!(["text"]))}),
        json!({"name": "add", "description": "Add two numbers.", "inputSchema": obj(json!({"a": {"type": "number"}, "b": {"type": "number"}}), json!(["a", "b"]))}),
        json!({"name": "slow", "description": "Wait `ms` milliseconds in `steps` steps, reporting progress.", "inputSchema": obj(json!({"ms": {"type": "integer"}, "steps": {"type": "integer"}}), json!([]))}),
        json!({"name": "fail", "description": "Always fails (isError).", "inputSchema": obj(json!({}), json!([]))}),
        json!({"name": "large", "description": "Return `kb` kilobytes of text.", "inputSchema": obj(json!({"kb": {"type": "integer"}}), json!(["kb"]))}),
        json!({"name": "write_file", "description": "Pretend to write a file.", "inputSchema": obj(json!({"path": {"type": "string"}}), json!(["path"]))}),
        json!({"name": "change_tools", "description": "Add `added_tool` and announce list_changed.", "inputSchema": obj(json!({}), json!([]))}),
    ]
}

fn process_tools() -> Vec<Value> {
    let none = json!({"type": "object"});
    vec![
        json!({"name": "pid", "description": "The server's process id.", "inputSchema": none}),
        json!({"name": "crash", "description": "Exit the server at once.", "inputSchema": none}),
        json!({"name": "spawn_sleeper", "description": "Start a child process that sleeps; its pid.", "inputSchema": none}),
    ]
}

fn all_tools(cfg: &McpMockConfig, shared: &Shared) -> Vec<Value> {
    let mut tools = fixed_tools();
    tools.extend(super::ask::tools());
    if shared.tools_changed.load(Relaxed) {
        tools.push(json!({"name": "added_tool", "description": "Appeared after change_tools.", "inputSchema": {"type": "object"}}));
    }
    if cfg.stdio {
        tools.extend(process_tools());
    }
    for i in 0..cfg.extra_tools {
        tools.push(json!({"name": format!("tool_{i}"), "description": format!("Generated tool {i}."), "inputSchema": {"type": "object"}}));
    }
    tools
}

fn text(t: impl Into<String>) -> Value {
    json!({"content": [{"type": "text", "text": t.into()}]})
}

pub(super) async fn answer(
    state: &State,
    method: &str,
    params: Value,
    id: &Value,
    notes: mpsc::Sender<Value>,
    session: Option<&str>,
) -> Result<Value, (i64, String)> {
    match method {
        "ping" => Ok(json!({})),
        "tools/list" => {
            lock(&state.shared.stats).lists += 1;
            let tools = all_tools(&state.cfg, &state.shared);
            let start: usize = params.get("cursor").and_then(Value::as_str).and_then(|c| c.parse().ok()).unwrap_or(0);
            let end = (start + state.cfg.page_size.max(1)).min(tools.len());
            let mut page = json!({"tools": tools.get(start..end).unwrap_or_default()});
            if end < tools.len() {
                page["nextCursor"] = json!(end.to_string());
            }
            Ok(page)
        }
        "resources/list" => {
            Ok(json!({"resources": [{"uri": "mock://readme", "name": "readme", "mimeType": "text/plain"}]}))
        }
        "resources/read" => {
            Ok(json!({"contents": [{"uri": "mock://readme", "mimeType": "text/plain", "text": "hello from the mock"}]}))
        }
        "prompts/list" => Ok(json!({"prompts": [{"name": "greet", "description": "Say hello."}]})),
        "prompts/get" => Ok(json!({"messages": [{"role": "user", "content": {"type": "text", "text": "hello"}}]})),
        "logging/setLevel" => {
            lock(&state.shared.stats).log_level = params.get("level").and_then(Value::as_str).map(str::to_owned);
            Ok(json!({}))
        }
        "resources/subscribe" | "resources/unsubscribe" => Ok(json!({})),
        "completion/complete" => {
            Ok(json!({"completion": {"values": ["alpha", "alpine"], "total": 2, "hasMore": false}}))
        }
        "tools/call" => {
            let name = params.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
            *lock(&state.shared.stats).calls.entry(name.clone()).or_default() += 1;
            if state.cfg.call_delay_ms > 0 {
                tokio::time::sleep(Duration::from_millis(state.cfg.call_delay_ms)).await;
            }
            let args = params.get("arguments").cloned().unwrap_or(json!({}));
            if let Some(result) = super::ask::call(&state.shared, &name, &args, &notes, session).await {
                return Ok(result);
            }
            match name.as_str() {
                "echo" | "write_file" => {
                    Ok(text(args.get("text").or(args.get("path")).and_then(Value::as_str).unwrap_or_default()))
                }
                "add" => {
                    let n = |k| args.get(k).and_then(Value::as_f64).unwrap_or(0.0);
                    Ok(text((n("a") + n("b")).to_string()))
                }
                "fail" => Ok(json!({"content": [{"type": "text", "text": "this tool always fails"}], "isError": true})),
                "large" => {
                    let kb = args.get("kb").and_then(Value::as_u64).unwrap_or(1) as usize;
                    Ok(text("x".repeat(kb * 1024)))
                }
                "slow" => slow(state, &params, &args, id, notes).await,
                other if other.starts_with("tool_") => Ok(text(other)),
                "change_tools" => {
                    state.shared.tools_changed.store(true, Relaxed);
                    let _ = notes.send(json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})).await;
                    Ok(text("changed"))
                }
                "added_tool" => Ok(text("added")),
                // Process tools: only a mock on stdio runs in a process of its own.
                "pid" if state.cfg.stdio => Ok(text(std::process::id().to_string())),
                "crash" if state.cfg.stdio => std::process::exit(3),
                "spawn_sleeper" if state.cfg.stdio => match std::process::Command::new("sleep").arg("300").spawn() {
                    Ok(child) => Ok(text(child.id().to_string())),
                    Err(e) => Err((-32603, e.to_string())),
                },
                other => Err((-32602, format!("unknown tool {other}"))),
            }
        }
        other => Err((-32601, format!("method {other} not found"))),
    }
}

async fn slow(
    state: &State,
    params: &Value,
    args: &Value,
    id: &Value,
    notes: mpsc::Sender<Value>,
) -> Result<Value, (i64, String)> {
    let ms = args.get("ms").and_then(Value::as_u64).unwrap_or(100);
    let steps = args.get("steps").and_then(Value::as_u64).unwrap_or(1).max(1);
    let token = params.pointer("/_meta/progressToken").cloned();
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    lock(&state.shared.cancels).insert(id.to_string(), stop_tx);
    let _running = SlowRunning::enter(&state.shared);
    for step in 1..=steps {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(ms / steps)) => {}
            _ = stop_rx.changed() => {
                lock(&state.shared.stats).stopped_early += 1;
                return Err((-32800, "cancelled".into()));
            }
        }
        if let Some(token) = &token {
            let note = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": token, "progress": step, "total": steps, "message": format!("step {step}")}});
            let _ = notes.send(note).await;
        }
    }
    lock(&state.shared.cancels).remove(&id.to_string());
    Ok(text(format!("waited {ms} ms")))
}

/// Counts a `slow` call as running while it lives (however it ends), and keeps the peak.
struct SlowRunning<'a>(&'a Shared);

impl<'a> SlowRunning<'a> {
    fn enter(shared: &'a Shared) -> Self {
        let now = shared.slow_running.fetch_add(1, Relaxed) + 1;
        let mut stats = lock(&shared.stats);
        stats.peak_slow = stats.peak_slow.max(now);
        SlowRunning(shared)
    }
}

impl Drop for SlowRunning<'_> {
    fn drop(&mut self) {
        self.0.slow_running.fetch_sub(1, Relaxed);
    }
}

/// A response body fed by a channel: each message is one data frame.
pub struct ChannelBody(mpsc::Receiver<Bytes>);

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|next| next.map(|bytes| Ok(Frame::data(bytes))))
    }
}
