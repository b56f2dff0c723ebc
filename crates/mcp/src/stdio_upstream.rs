//! An upstream MCP server run as a child process speaking newline-delimited JSON-RPC on
//! stdin/stdout, supervised: started in its own process group with only the environment the
//! config gives it (plus `PATH` and `HOME`), initialised, restarted with exponential backoff
//! when it dies (pending requests fail at once), and shut down by closing stdin, then SIGTERM,
//! then SIGKILL to the whole group — no zombies and no leaked grandchildren.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{oneshot, watch};

use crate::jsonrpc::{self, Message};
use crate::upstream::{
    route_unrelated, within_unless_asking, BoxFuture, Inbound, ListChangedHook, NoteHook, Relay, Upstream,
    UpstreamError,
};
use crate::version;

/// Restart delays grow from this to `MAX_BACKOFF`, and reset after a run of `HEALTHY_RUN`.
const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
const HEALTHY_RUN: Duration = Duration::from_secs(60);
/// How long a new process may take to answer `initialize`.
const HANDSHAKE: Duration = Duration::from_secs(30);
/// How long shutdown waits after closing stdin, and again after SIGTERM.
const GRACE: Duration = Duration::from_secs(2);
/// A line longer than this from the server is a protocol error (the process is restarted).
const MAX_LINE: usize = 64 * 1024 * 1024;

/// A request waiting for its answer, and where what the server sends for it goes: progress (by
/// the token it carried) and, when it is the only request with a client behind it, the server's
/// own requests and log messages (stdio has one stream for all calls).
struct Waiting {
    answer: oneshot::Sender<Result<Box<RawValue>, UpstreamError>>,
    token: Option<Value>,
    relay: Option<Relay>,
}

type Pending = Arc<Mutex<HashMap<u64, Waiting>>>;

/// The running process, once initialised.
struct Running {
    /// Taken (closing the pipe) when the process is being stopped.
    stdin: tokio::sync::Mutex<Option<ChildStdin>>,
    pid: u32,
    /// The server's `initialize` result, once answered.
    init: std::sync::OnceLock<Value>,
}

pub struct StdioUpstream {
    name: String,
    next_id: AtomicU64,
    pending: Pending,
    /// The current process once it is initialised; None while (re)starting or stopped.
    running: watch::Receiver<Option<Arc<Running>>>,
    timeout: Duration,
    stop: Mutex<Option<oneshot::Sender<()>>>,
    supervisor: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Process starts, for tests and metrics.
    starts: Arc<AtomicU64>,
    list_changed: ListChangedHook,
    notes: NoteHook,
}

impl StdioUpstream {
    /// Start supervising `command` (program and arguments) with `env`. Must be called inside a
    /// tokio runtime.
    pub fn spawn(name: &str, command: Vec<String>, env: Vec<(String, String)>, timeout: Duration) -> StdioUpstream {
        let (running_tx, running) = watch::channel(None);
        let pending: Pending = Arc::new(Mutex::new(HashMap::new()));
        let (stop_tx, stop_rx) = oneshot::channel();
        let starts = Arc::new(AtomicU64::new(0));
        let list_changed = ListChangedHook::default();
        let notes = NoteHook::default();
        let supervisor = Supervisor {
            list_changed: list_changed.clone(),
            notes: notes.clone(),
            name: name.to_owned(),
            command,
            env,
            pending: pending.clone(),
            running: running_tx,
            starts: starts.clone(),
        };
        StdioUpstream {
            name: name.to_owned(),
            next_id: AtomicU64::new(1_000),
            pending,
            running,
            timeout,
            stop: Mutex::new(Some(stop_tx)),
            supervisor: Mutex::new(Some(tokio::spawn(supervisor.run(stop_rx)))),
            starts,
            list_changed,
            notes,
        }
    }

    /// How many times the process was started.
    pub fn starts(&self) -> u64 {
        self.starts.load(Relaxed)
    }

    /// The current process id, once one is initialised.
    pub fn pid(&self) -> Option<u32> {
        self.running.borrow().as_ref().map(|r| r.pid)
    }

    async fn current(&self) -> Result<Arc<Running>, UpstreamError> {
        let mut rx = self.running.clone();
        let ready = async move { rx.wait_for(Option::is_some).await.map(|r| r.clone()) };
        match tokio::time::timeout(self.timeout, ready).await {
            Ok(Ok(r)) => r.ok_or_else(|| UpstreamError::Unreachable("not running".into())),
            Ok(Err(_)) => Err(UpstreamError::Unreachable(format!("`{}` was shut down", self.name))),
            Err(_) => Err(UpstreamError::Timeout),
        }
    }

    async fn request_once(
        &self,
        id: u64,
        method: &str,
        params: Value,
        relay: Option<Relay>,
    ) -> Result<Box<RawValue>, UpstreamError> {
        let running = self.current().await?;
        let (tx, rx) = oneshot::channel();
        let token = params.pointer("/_meta/progressToken").cloned();
        lock(&self.pending).insert(id, Waiting { answer: tx, token, relay });
        let _forget = Forget { pending: self.pending.clone(), id };
        write_line(&running, jsonrpc::request_bytes(id, method, &params)).await?;
        rx.await.unwrap_or_else(|_| Err(UpstreamError::Unreachable("the process exited".into())))
    }

    /// Close stdin, wait, SIGTERM the group, wait, SIGKILL the group; stop restarting. Returns
    /// once the process is gone.
    pub async fn shutdown(&self) {
        if let Some(stop) = lock(&self.stop).take() {
            let _ = stop.send(());
        }
        let supervisor = lock(&self.supervisor).take();
        if let Some(task) = supervisor {
            let _ = task.await;
        }
    }
}

struct Forget {
    pending: Pending,
    id: u64,
}

impl Drop for Forget {
    fn drop(&mut self) {
        lock(&self.pending).remove(&self.id);
    }
}

impl Drop for StdioUpstream {
    fn drop(&mut self) {
        // Dropped without `shutdown`: aborting the supervisor drops its `GroupGuard`, which
        // kills the process group.
        if let Some(task) = lock(&self.supervisor).take() {
            task.abort();
        }
    }
}

impl Upstream for StdioUpstream {
    fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Relaxed)
    }

    fn request<'a>(
        &'a self,
        id: u64,
        method: &'a str,
        params: Value,
        relay: Option<Relay>,
    ) -> BoxFuture<'a, Result<Box<RawValue>, UpstreamError>> {
        Box::pin(async move {
            let asking = relay.clone();
            within_unless_asking(self.timeout, asking.as_ref(), self.request_once(id, method, params, relay)).await
        })
    }

    fn timeout(&self) -> Option<Duration> {
        Some(self.timeout)
    }

    fn init_result(&self) -> BoxFuture<'_, Option<Value>> {
        Box::pin(async move { self.current().await.ok().and_then(|r| r.init.get().cloned()) })
    }

    fn notify<'a>(
        &'a self,
        method: &'a str,
        params: Value,
        _offers: crate::relay::ClientCaps,
        _client: Option<std::sync::Arc<str>>,
    ) -> BoxFuture<'a, Result<(), UpstreamError>> {
        Box::pin(async move {
            let running = self.current().await?;
            write_line(&running, jsonrpc::notification_bytes(method, &params)).await
        })
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(StdioUpstream::shutdown(self))
    }

    fn list_changed(&self) -> Option<&ListChangedHook> {
        Some(&self.list_changed)
    }

    fn notes(&self) -> Option<&NoteHook> {
        Some(&self.notes)
    }
}

async fn write_line(running: &Running, mut line: Vec<u8>) -> Result<(), UpstreamError> {
    line.push(b'\n');
    let mut stdin = running.stdin.lock().await;
    let pipe = stdin.as_mut().ok_or_else(|| UpstreamError::Unreachable("stopping".into()))?;
    pipe.write_all(&line).await.map_err(|e| UpstreamError::Unreachable(format!("stdin: {e}")))?;
    pipe.flush().await.map_err(|e| UpstreamError::Unreachable(format!("stdin: {e}")))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn signal_group(pid: u32, signal: Signal) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ = killpg(Pid::from_raw(pid), signal);
    }
}

/// SIGKILLs the process group when dropped while armed: the supervisor task was aborted
/// mid-run. Disarmed once the process is reaped (its group id could be reused after that).
struct GroupGuard(Option<u32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pid) = self.0.take() {
            signal_group(pid, Signal::SIGKILL);
        }
    }
}

struct Supervisor {
    list_changed: ListChangedHook,
    notes: NoteHook,
    name: String,
    command: Vec<String>,
    env: Vec<(String, String)>,
    pending: Pending,
    running: watch::Sender<Option<Arc<Running>>>,
    starts: Arc<AtomicU64>,
}

impl Supervisor {
    async fn run(self, mut stop: oneshot::Receiver<()>) {
        let mut backoff = MIN_BACKOFF;
        loop {
            let started = tokio::time::Instant::now();
            if let Some((mut child, process, stdout)) = self.start() {
                let mut guard = GroupGuard(Some(process.pid));
                // The process exiting ends the run even while a grandchild keeps its stdout open.
                let stopped = tokio::select! {
                    _ = self.serve(&process, stdout) => false,
                    _ = child.wait() => false,
                    _ = &mut stop => true,
                };
                self.fail_pending();
                if stopped {
                    stop_gracefully(&mut child, &process).await;
                    guard.0 = None;
                    return;
                }
                // It exited, closed stdout, or hung in its handshake: the whole group goes (the
                // leader is not reaped yet, so the group id is still this process's).
                signal_group(process.pid, Signal::SIGKILL);
                let _ = child.wait().await;
                guard.0 = None;
            }
            if started.elapsed() >= HEALTHY_RUN {
                backoff = MIN_BACKOFF;
            }
            tracing::warn!(server = %self.name, retry_in_ms = backoff.as_millis() as u64, "stdio MCP server exited; restarting");
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = &mut stop => return,
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    fn fail_pending(&self) {
        let _ = self.running.send(None);
        for (_, waiting) in lock(&self.pending).drain() {
            let _ = waiting.answer.send(Err(UpstreamError::Unreachable(format!("MCP server `{}` exited", self.name))));
        }
    }

    fn start(&self) -> Option<(Child, Arc<Running>, ChildStdout)> {
        let (program, args) = self.command.split_first()?;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .env_clear()
            .envs(std::env::vars().filter(|(k, _)| k == "PATH" || k == "HOME"))
            .envs(self.env.iter().cloned())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(server = %self.name, error = %e, "cannot start stdio MCP server");
                return None;
            }
        };
        self.starts.fetch_add(1, Relaxed);
        let pid = child.id().unwrap_or(0);
        if let Some(stderr) = child.stderr.take() {
            let name = self.name.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::info!(server = %name, "{line}");
                }
            });
        }
        let (stdin, stdout) = (child.stdin.take()?, child.stdout.take()?);
        Some((
            child,
            Arc::new(Running { stdin: tokio::sync::Mutex::new(Some(stdin)), pid, init: std::sync::OnceLock::new() }),
            stdout,
        ))
    }

    /// Initialise, publish, then read the server's messages until it closes stdout.
    async fn serve(&self, process: &Arc<Running>, stdout: ChildStdout) {
        let mut reader = BufReader::new(stdout);
        let params = json!({"protocolVersion": version::SESSION[0], "capabilities": crate::upstream::client_capabilities(crate::relay::ClientCaps::ALL),
            "clientInfo": {"name": "switchyard", "version": env!("CARGO_PKG_VERSION")}});
        if write_line(process, jsonrpc::request_bytes(1, "initialize", &params)).await.is_err() {
            return;
        }
        let mut line = Vec::new();
        // A server that never answers `initialize` is restarted like one that died.
        let deadline = tokio::time::Instant::now() + HANDSHAKE;
        loop {
            line.clear();
            match tokio::time::timeout_at(deadline, read_line(&mut reader, &mut line)).await {
                Ok(Some(())) => {}
                Ok(None) => return,
                Err(_) => {
                    tracing::error!(server = %self.name, "stdio MCP server did not answer initialize in time");
                    return;
                }
            }
            if let Ok(Message::Response { id, outcome }) = jsonrpc::parse(trim(&line)) {
                if id.as_str() == "1" {
                    match outcome {
                        Err(e) => {
                            tracing::error!(server = %self.name, error = %e.message, "stdio MCP server refused initialize");
                            return;
                        }
                        Ok(result) => {
                            if let Ok(init) = serde_json::from_str(result.get()) {
                                let _ = process.init.set(init);
                            }
                        }
                    }
                    break;
                }
            }
        }
        if write_line(process, jsonrpc::notification_bytes("notifications/initialized", &json!({}))).await.is_err() {
            return;
        }
        let _ = self.running.send(Some(process.clone()));
        tracing::info!(server = %self.name, pid = process.pid, "stdio MCP server ready");
        loop {
            line.clear();
            if read_line(&mut reader, &mut line).await.is_none() {
                return;
            }
            self.dispatch(trim(&line), process).await;
        }
    }

    /// A response completes its request; a progress notification goes to the request that
    /// carried its token; a request from the server, or a notification that names no request,
    /// goes to the client of the only request that has one (`sole_client`), else is refused.
    async fn dispatch(&self, line: &[u8], process: &Arc<Running>) {
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        match jsonrpc::parse(line) {
            Ok(Message::Response { id, outcome }) => {
                let Ok(id) = id.as_str().parse::<u64>() else { return };
                if let Some(waiting) = lock(&self.pending).remove(&id) {
                    let _ = waiting.answer.send(outcome.map_err(UpstreamError::Rpc));
                }
            }
            Ok(Message::Notification { method, params }) => {
                if method == "notifications/tools/list_changed" {
                    self.list_changed.fire();
                    return;
                }
                if let Some(token) = params.as_ref().and_then(|p| p.get("progressToken")) {
                    let Ok(value) = serde_json::from_slice::<Value>(line) else { return };
                    let pending = lock(&self.pending);
                    let to = pending.values().find(|w| w.token.as_ref() == Some(token));
                    if let Some(relay) = to.and_then(|w| w.relay.as_ref()) {
                        let _ = relay.try_send(Inbound::Note(value));
                    }
                    return;
                }
                let relay = sole_client(&lock(&self.pending)).and_then(|w| w.relay.clone());
                route_unrelated(&method, params, line, relay.as_ref(), &self.notes);
            }
            Ok(Message::Request { id, method, params }) => {
                let relay = sole_client(&lock(&self.pending)).and_then(|w| w.relay.clone());
                let Some(answer) = route_unrelated(&method, params, line, relay.as_ref(), &self.notes) else { return };
                let process = process.clone();
                tokio::spawn(async move {
                    let _ = write_line(&process, crate::upstream::reply_to_server(id, answer).await).await;
                });
            }
            Err(_) => tracing::debug!(server = %self.name, "stdio MCP server wrote a line that is not JSON-RPC"),
        }
    }
}

/// The one waiting request with a client behind it: where a server's request or log message that
/// names no request goes. With several, none: guessing could hand one client's question to
/// another, so the server is refused instead.
fn sole_client(pending: &HashMap<u64, Waiting>) -> Option<&Waiting> {
    let mut with_client = pending.values().filter(|w| w.relay.is_some());
    let first = with_client.next();
    first.filter(|_| with_client.next().is_none())
}

/// Close stdin and wait; then SIGTERM the group and wait; then SIGKILL it. Reaps the child.
async fn stop_gracefully(child: &mut Child, process: &Running) {
    drop(process.stdin.lock().await.take());
    if tokio::time::timeout(GRACE, child.wait()).await.is_err() {
        signal_group(process.pid, Signal::SIGTERM);
        if tokio::time::timeout(GRACE, child.wait()).await.is_err() {
            signal_group(process.pid, Signal::SIGKILL);
            let _ = child.wait().await;
        }
    }
    // Grandchildren that outlived the leader.
    signal_group(process.pid, Signal::SIGKILL);
}

fn trim(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

async fn read_line(reader: &mut BufReader<ChildStdout>, line: &mut Vec<u8>) -> Option<()> {
    match reader.read_until(b'\n', line).await {
        Ok(0) | Err(_) => None,
        Ok(_) if line.len() > MAX_LINE => None,
        Ok(_) => Some(()),
    }
}
