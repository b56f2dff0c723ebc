//! The upstream servers behind the gateway and their tools. Each server's tool list is fetched
//! (every page: many servers paginate, many clients never follow `nextCursor`), filtered by the
//! server's configured allow/deny rule, cached for `TOOLS_TTL`, and named for the aggregated
//! catalogue (`names.rs`). A caller's permission predicate filters listings and is checked again
//! on every call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::breaker::Breaker;
use crate::names;
use crate::upstream::{Relay, Upstream, UpstreamError};

/// How long a fetched tool list is served before it is fetched again.
pub const TOOLS_TTL: Duration = Duration::from_secs(60);
/// A server that keeps handing out cursors is cut off after this many pages.
const MAX_PAGES: usize = 100;
/// How long the guards of one direction of a tool call may take on a server that sets no
/// timeout of its own.
const GUARDS_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether a key may use `tool` of `server` (the gateway's permission check).
pub type Permits<'a> = &'a (dyn Fn(&str, &str) -> bool + Send + Sync);

/// One configured upstream server.
pub struct ServerSpec {
    /// The alias clients see.
    pub name: String,
    pub upstream: Arc<dyn Upstream>,
    /// The server's own allow/deny rule from config: tools it rejects do not exist for clients.
    pub tool_filter: Box<dyn Fn(&str) -> bool + Send + Sync>,
}

/// A tool as clients see it.
#[derive(Debug, Clone)]
pub struct Tool {
    /// The upstream's own name.
    pub name: String,
    /// `{server}__{tool}`, within 64 characters.
    pub aggregated: String,
    /// The tool object as the upstream described it.
    pub definition: Value,
}

struct CachedTools {
    fetched: Instant,
    tools: Arc<Vec<Tool>>,
}

struct Server {
    spec: ServerSpec,
    breaker: Breaker,
    tools: Arc<Mutex<Option<CachedTools>>>,
    /// One fetch at a time per server.
    fetching: tokio::sync::Mutex<()>,
}

pub struct Hub {
    servers: Vec<Server>,
    /// The alias of each server that says its tool list changed, for clients' GET streams.
    changes: tokio::sync::broadcast::Sender<String>,
    /// Notifications servers sent outside any call (resource updates, list changes, log
    /// messages), with the server's alias, for clients' GET streams.
    notes: tokio::sync::broadcast::Sender<(String, Arc<Value>)>,
    /// Checks on every call's arguments and result, when the embedder set them.
    tool_guard: std::sync::RwLock<Option<Arc<dyn crate::tool_guard::ToolGuard>>>,
}

impl Hub {
    /// Servers in alias order. Aliases must be unique (config validation checks). A server
    /// that says its tool list changed has its cached list forgotten at once.
    pub fn new(mut specs: Vec<ServerSpec>) -> Hub {
        specs.sort_by(|a, b| a.name.cmp(&b.name));
        let hub = Hub {
            servers: specs
                .into_iter()
                .map(|spec| Server {
                    spec,
                    breaker: Breaker::default(),
                    tools: Arc::new(Mutex::new(None)),
                    fetching: tokio::sync::Mutex::new(()),
                })
                .collect(),
            changes: tokio::sync::broadcast::channel(64).0,
            notes: tokio::sync::broadcast::channel(256).0,
            tool_guard: std::sync::RwLock::new(None),
        };
        for s in &hub.servers {
            if let Some(hook) = s.spec.upstream.list_changed() {
                let tools = s.tools.clone();
                let (changes, name) = (hub.changes.clone(), s.spec.name.clone());
                hook.set(Arc::new(move || {
                    *lock(&tools) = None;
                    let _ = changes.send(name.clone());
                }));
            }
            if let Some(hook) = s.spec.upstream.notes() {
                let (notes, name) = (hub.notes.clone(), s.spec.name.clone());
                hook.set(Arc::new(move |note| {
                    let _ = notes.send((name.clone(), Arc::new(note)));
                }));
            }
        }
        hub
    }

    /// Notifications servers send outside any call from now on, with the server's alias.
    pub fn notes(&self) -> tokio::sync::broadcast::Receiver<(String, Arc<Value>)> {
        self.notes.subscribe()
    }

    /// Aliases of servers whose tool lists change from now on.
    pub fn changes(&self) -> tokio::sync::broadcast::Receiver<String> {
        self.changes.subscribe()
    }

    pub fn server_names(&self) -> impl Iterator<Item = &str> {
        self.servers.iter().map(|s| s.spec.name.as_str())
    }

    pub fn has_server(&self, name: &str) -> bool {
        self.index(name).is_some()
    }

    fn index(&self, name: &str) -> Option<usize> {
        self.servers.binary_search_by(|s| s.spec.name.as_str().cmp(name)).ok()
    }

    pub fn upstream(&self, name: &str) -> Option<&Arc<dyn Upstream>> {
        self.index(name).map(|i| &self.servers[i].spec.upstream)
    }

    /// `server`'s tools (config filter applied), from the cache when fresh.
    pub async fn tools_of(&self, server: &str) -> Result<Arc<Vec<Tool>>, UpstreamError> {
        let s = &self.servers[self.index(server).ok_or_else(|| UpstreamError::Protocol("no such server".into()))?];
        if let Some(tools) = fresh(s) {
            return Ok(tools);
        }
        let _one = s.fetching.lock().await;
        if let Some(tools) = fresh(s) {
            return Ok(tools);
        }
        let listed = guarded(s, list_all(s.spec.upstream.as_ref())).await?;
        let tools: Vec<Tool> = listed
            .into_iter()
            .filter_map(|definition| {
                let name = definition.get("name")?.as_str()?.to_owned();
                (s.spec.tool_filter)(&name).then(|| Tool {
                    aggregated: names::aggregated(&s.spec.name, &name),
                    name,
                    definition,
                })
            })
            .collect();
        let tools = Arc::new(tools);
        *lock(&s.tools) = Some(CachedTools { fetched: Instant::now(), tools: tools.clone() });
        Ok(tools)
    }

    /// Stop every upstream that runs as a process (stdio servers), and wait until each is gone.
    pub async fn shutdown(&self) {
        futures_join(self.servers.iter().map(|s| s.spec.upstream.shutdown())).await;
    }

    /// Forget a server's cached tools (it said `notifications/tools/list_changed`).
    pub fn invalidate(&self, server: &str) {
        if let Some(i) = self.index(server) {
            *lock(&self.servers[i].tools) = None;
        }
    }

    /// The aggregated catalogue for a caller: every permitted tool of every reachable server,
    /// sorted by aggregated name. A server that cannot list its tools is left out (and logged);
    /// a name two tools would share is given to the first and logged as a configuration error.
    pub async fn catalogue(&self, permits: Permits<'_>) -> Vec<(String, Tool)> {
        let lists = futures_join(self.servers.iter().map(|s| self.tools_of(&s.spec.name))).await;
        let mut out: Vec<(String, Tool)> = Vec::new();
        let mut taken: HashMap<String, String> = HashMap::new();
        for (s, list) in self.servers.iter().zip(lists) {
            if s.breaker.is_open() {
                continue; // failing: its tools would only fail
            }
            let tools = match list {
                Ok(tools) => tools,
                Err(e) => {
                    tracing::warn!(server = %s.spec.name, error = %e, "MCP server left out of the catalogue");
                    continue;
                }
            };
            for tool in tools.iter() {
                if !permits(&s.spec.name, &tool.name) {
                    continue;
                }
                if let Some(first) = taken.get(&tool.aggregated) {
                    tracing::error!(name = %tool.aggregated, first = %first, second = %s.spec.name,
                        "two MCP tools share one aggregated name; the second is hidden (rename a server alias)");
                    continue;
                }
                taken.insert(tool.aggregated.clone(), s.spec.name.clone());
                out.push((s.spec.name.clone(), tool.clone()));
            }
        }
        out.sort_by(|a, b| a.1.aggregated.cmp(&b.1.aggregated));
        out
    }

    /// (server, tool) for an aggregated name.
    pub async fn resolve(&self, aggregated: &str) -> Option<(String, String)> {
        // The alias is the part before the first `__`; long or odd names carry a hash, so look
        // the name up in that server's list rather than splitting it.
        let alias = aggregated.split(names::SEPARATOR).next()?;
        let tools = self.tools_of(alias).await.ok()?;
        tools.iter().find(|t| t.aggregated == aggregated).map(|t| (alias.to_owned(), t.name.clone()))
    }

    /// Call `tool` on `server` with the caller's `params` (whose `name` is replaced with the
    /// upstream's own name; `arguments` and `_meta`, e.g. a progress token, pass as they are),
    /// guarded by the caller's own guard when it has one, else the hub's.
    pub async fn call(
        &self,
        server: &str,
        id: u64,
        tool: &str,
        mut params: Value,
        relay: Option<Relay>,
        caller_guard: Option<&Arc<dyn crate::tool_guard::ToolGuard>>,
    ) -> Result<Box<RawValue>, UpstreamError> {
        let s = &self.servers[self.index(server).ok_or_else(|| UpstreamError::Protocol("no such server".into()))?];
        params["name"] = json!(tool);
        let own = self.tool_guard.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        let guard = caller_guard.or(own.as_ref());
        // Each direction's guards get the server's own timeout, from when they start.
        let guard_deadline = || Instant::now() + s.spec.upstream.timeout().unwrap_or(GUARDS_TIMEOUT);
        if let Some(guard) = guard {
            let arguments = serde_json::to_vec(&params["arguments"]).unwrap_or_default();
            let checked =
                guard.call(server, tool, &arguments, guard_deadline()).await.map_err(UpstreamError::Blocked)?;
            if let Some(checked) = checked {
                params["arguments"] = serde_json::from_slice(&checked)
                    .map_err(|e| UpstreamError::Protocol(format!("a guard's arguments: {e}")))?;
            }
        }
        let result = guarded(s, s.spec.upstream.request(id, "tools/call", params, relay)).await?;
        let Some(guard) = guard else { return Ok(result) };
        match guard
            .result(server, tool, result.get().as_bytes(), guard_deadline())
            .await
            .map_err(UpstreamError::Blocked)?
        {
            None => Ok(result),
            Some(checked) => String::from_utf8(checked)
                .ok()
                .and_then(|text| RawValue::from_string(text).ok())
                .ok_or_else(|| UpstreamError::Protocol("a guard's result is not JSON".into())),
        }
    }

    /// Check every call's arguments and result with `guard` from now on (None: no checks); a
    /// reload replaces it.
    pub fn guard_tools(&self, guard: Option<Arc<dyn crate::tool_guard::ToolGuard>>) {
        *self.tool_guard.write().unwrap_or_else(std::sync::PoisonError::into_inner) = guard;
    }

    /// Whether a server's breaker is open (it failed repeatedly and is being skipped).
    pub fn is_down(&self, server: &str) -> bool {
        self.index(server).is_some_and(|i| self.servers[i].breaker.is_open())
    }
}

/// An upstream exchange under the server's breaker: refused at once while it is open.
async fn guarded<T>(
    s: &Server,
    exchange: impl std::future::Future<Output = Result<T, UpstreamError>>,
) -> Result<T, UpstreamError> {
    if !s.breaker.allows() {
        return Err(UpstreamError::Unreachable(format!("`{}` is failing; its breaker is open", s.spec.name)));
    }
    let outcome = exchange.await;
    if s.breaker.record(&outcome) {
        tracing::warn!(server = %s.spec.name, "MCP server failed {} times in a row: breaker open", crate::breaker::THRESHOLD);
    }
    outcome
}

fn fresh(s: &Server) -> Option<Arc<Vec<Tool>>> {
    lock(&s.tools).as_ref().filter(|c| c.fetched.elapsed() < TOOLS_TTL).map(|c| c.tools.clone())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Every page of `tools/list`.
async fn list_all(upstream: &dyn Upstream) -> Result<Vec<Value>, UpstreamError> {
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let page = upstream.request(upstream.next_id(), "tools/list", params, None).await?;
        let page: Value = serde_json::from_str(page.get()).map_err(|e| UpstreamError::Protocol(e.to_string()))?;
        match page.get("tools") {
            Some(Value::Array(list)) => tools.extend(list.iter().cloned()),
            _ => return Err(UpstreamError::Protocol("tools/list answered no `tools` array".into())),
        }
        cursor = page.get("nextCursor").and_then(Value::as_str).map(str::to_owned);
        if cursor.is_none() {
            return Ok(tools);
        }
    }
    tracing::warn!("an MCP server handed out more than {MAX_PAGES} pages of tools; the rest is ignored");
    Ok(tools)
}

/// Run futures concurrently and collect their outputs in order.
async fn futures_join<F: std::future::Future>(futures: impl Iterator<Item = F>) -> Vec<F::Output> {
    let mut pinned: Vec<_> = futures.map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = (0..pinned.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in pinned.iter_mut().enumerate() {
            if outputs[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => outputs[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}
