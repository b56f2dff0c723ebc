//! Serving: bind the listener, open the shared state (`app.rs`), start the health probers, then
//! accept connections, serve HTTP/1.1 (keep-alive) and h2c on each through the route table
//! (`server/routes.rs`), and shut down gracefully — stop accepting, let in-flight requests and
//! streams finish up to `shutdown_grace`, flush the usage journal, then drop what is left.

mod conn;
mod guarding;
mod head;
mod idle;
mod origin;
pub mod routes;
mod tls;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use std::sync::Mutex;
use tokio::net::TcpListener;

use arc_swap::ArcSwap;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::app::{App, ReloadRequest};
use crate::config::{Config, ProcessEnv};
use crate::route::health;
use guarding::Guarding;

/// The state requests are served with now: swapped whole by a reload, while requests in flight
/// finish on the snapshot they started with.
type Current = Arc<ArcSwap<App>>;

/// The listener's TLS acceptor, when `tls` is configured: swapped by a reload (new certificates).
type Tls = Option<Arc<ArcSwap<tokio_rustls::TlsAcceptor>>>;

/// A gateway serving on a bound address. Dropping it aborts everything; `shutdown` drains first.
pub struct RunningGateway {
    pub addr: SocketAddr,
    /// Where the endpoint picker serves ext_proc, and gRPC health alone (`epp:`).
    pub epp_addr: Option<SocketAddr>,
    pub epp_health_addr: Option<SocketAddr>,
    /// The state it started with (`current` after a reload).
    pub app: Arc<App>,
    current: Current,
    reload: mpsc::Sender<ReloadRequest>,
    stop: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<()>>,
    probers: Arc<Mutex<Vec<JoinHandle<()>>>>,
    /// Tasks beside the requests, stopped with the server: the console's metrics sampler, and the
    /// fleet's (heartbeat, parallel-slot refresh, key changes) when `redis:` is set.
    fleet: Vec<JoinHandle<()>>,
}

impl RunningGateway {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The state serving new requests now.
    pub fn current(&self) -> Arc<App> {
        self.current.load_full()
    }

    /// Re-read the configuration file (what SIGHUP does); says what changed, or why nothing did.
    pub async fn reload(&self) -> Result<String, String> {
        request_reload(&self.reload).await
    }

    /// A handle to ask for reloads from elsewhere (a signal handler).
    pub fn reloader(&self) -> mpsc::Sender<ReloadRequest> {
        self.reload.clone()
    }

    /// Stop accepting, let in-flight requests finish (up to `shutdown_grace`), stop probing.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            let _ = server.await;
        }
    }

    /// Resolves when the server task ends (after a shutdown signal).
    pub async fn wait(mut self) {
        if let Some(server) = self.server.take() {
            let _ = server.await;
        }
    }
}

pub use crate::app::request_reload;

impl Drop for RunningGateway {
    fn drop(&mut self) {
        for p in self.probers.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
            p.abort();
        }
        for task in &self.fleet {
            task.abort();
        }
        if let Some(server) = &self.server {
            server.abort();
        }
    }
}

/// Bind `config.listen`, open the state, probe every backend once, then serve until `shutdown`
/// resolves (or `RunningGateway::shutdown` is called).
pub async fn start(
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<RunningGateway, String> {
    start_guarded(config, crate::guard::Guards::default(), shutdown).await
}

/// `start` with guards on the traffic (`guard.rs`), for an embedder that brings its own checks.
pub async fn start_guarded(
    config: Config,
    guards: crate::guard::Guards,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<RunningGateway, String> {
    let listener =
        TcpListener::bind(config.listen).await.map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let picking = crate::epp::Listeners::bind(&config).await?;
    let (epp_addr, epp_health_addr) = picking.as_ref().map_or((None, None), crate::epp::Listeners::addrs);
    let (mut app, writer, exports) = Box::pin(App::open(config)).await?;
    if let Some(store) = &app.store {
        crate::admin::audit_export::spawn(store, &app.config.exports, app.config.timeouts.connect);
    }
    let guarding = Arc::new(Guarding::new(guards, &app));
    app.guards = guarding.build(&app)?;
    let exporting = match &app.config.telemetry {
        Some(telemetry) => {
            let (telemetry, exporting) = crate::telemetry::Telemetry::start(telemetry, app.config.timeouts.connect)?;
            app.telemetry = Some(telemetry);
            Some(exporting)
        }
        None => None,
    };
    let (reload, reloads) = mpsc::channel::<ReloadRequest>(4);
    app.reload = Some(reload.clone());
    let app = Arc::new(app);
    if !app.auth.enabled() {
        tracing::warn!(
            "no master key configured: the gateway and its admin API are OPEN to anyone who can reach them; \
             set SWITCHYARD_MASTER_KEY (or auth.master_key) to require keys"
        );
    }
    health::probe_all(&app.router, &app.client, &app.config.health).await;
    if let Some(mcp) = app.mcp.clone().filter(|m| m.has_code_mode()) {
        // Load Code Mode's precompiled sandbox in the background: the first program should not wait for it.
        tokio::spawn(async move {
            if let Err(e) = mcp.warm_code_mode().await {
                tracing::error!(error = %e, "Code Mode's sandbox could not be loaded; execute_code will fail");
            }
        });
    }
    let probers = Arc::new(Mutex::new(spawn_probers(&app)));
    let mut fleet = spawn_fleet(&app);
    fleet.extend(join_mcp_fleet(&app).await);
    let current: Current = Arc::new(ArcSwap::new(app.clone()));
    guarding.serve(&current);
    if let Some(store) = app.store.clone() {
        spawn_store_readers(&current, store);
    }
    if let Some(shared) = &app.shared {
        fleet.extend(spawn_health_sharing(current.clone(), shared.clone()));
    }
    if app.config.console.enabled {
        fleet.push(spawn_sampler(current.clone()));
    }
    fleet.push(spawn_memory_keeper());
    let tls: Tls = match &app.config.tls {
        Some(config) => Some(Arc::new(ArcSwap::from_pointee(tls::acceptor(config)?))),
        None => None,
    };
    let found = Arc::new(crate::epp::members::Found::default());
    fleet.extend(spawn_pools(&current, &found, &reload, picking));
    let reloading = Reloading { current: current.clone(), probers: probers.clone(), tls: tls.clone(), guarding, found };
    let reloader = tokio::spawn(reload_loop(reloading, reloads));
    let (stop, stopped) = oneshot::channel::<()>();
    let grace = app.config.shutdown_grace;
    let serving = current.clone();
    let server = tokio::spawn(async move {
        let signal = async move {
            tokio::select! {
                _ = shutdown => {}
                _ = stopped => {}
            }
        };
        serve(listener, serving.clone(), tls, signal).await;
        reloader.abort();
        let server_app = serving.load_full();
        // Requests have drained: stop the MCP servers the gateway runs as child processes.
        if let Some(mcp) = &server_app.mcp {
            mcp.hub().shutdown().await;
        }
        // In-flight requests have drained, so their spans are queued: send them.
        if let Some(exporting) = exporting {
            exporting.shutdown(grace).await;
        }
        // ... and their records are in the journal: deliver them to the export sinks, and flush it.
        exports.shutdown(grace).await;
        if let Some(writer) = writer {
            if !writer.shutdown(grace).await {
                tracing::warn!(
                    "usage writer did not catch up before shutdown; the journal replays the rest at next start"
                );
            }
        }
        // A sink past its grace may still hold the journal: cut its file now, not when it lets go.
        if let Some(journal) = &server_app.journal {
            if let Err(e) = journal.close() {
                tracing::warn!(error = %e, "could not cut the usage journal's file to its data");
            }
        }
    });
    let (stop, server) = (Some(stop), Some(server));
    Ok(RunningGateway { addr, epp_addr, epp_health_addr, app, current, reload, stop, server, probers, fleet })
}

/// Read the gateway's figures every few seconds for the console's live charts (of whichever
/// configuration is current: backends come and go with reloads).
fn spawn_sampler(current: Current) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(crate::metrics::series::STEP_S));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let app = current.load();
            let now = crate::clock::unix_ms().max(0) as u64 / 1000;
            app.metrics.series.sample(&app.metrics, &app.router.backends, now);
        }
    })
}

/// Memory that comes back (`memory.rs`): once start-up is over, the code pages only it ran are
/// let go; then every `TRIM_EVERY`, malloc's free pages go back to the kernel.
/// What reads the store for every instance of a fleet alike: batches to run, experiments' state,
/// the organisation's stored policy rules.
fn spawn_store_readers(current: &Current, store: crate::store::Store) {
    crate::batch::runner::spawn(Arc::downgrade(current));
    let weak = Arc::downgrade(current);
    let config = move || weak.upgrade().map(|c| c.load_full()).map(|app| (app.config.clone(), app.clock.unix_ms()));
    let experiments = current.load().experiments.clone();
    tokio::spawn(crate::experiments::refresh::run(experiments, store.clone(), config));
    let weak = Arc::downgrade(current);
    let organisation =
        move || weak.upgrade().map(|c| c.load_full()).map(|a| (a.organisation.clone(), a.config.clone()));
    tokio::spawn(crate::org_rules::run(store, organisation));
}

fn spawn_memory_keeper() -> JoinHandle<()> {
    const SETTLE: Duration = Duration::from_secs(5);
    const TRIM_EVERY: Duration = Duration::from_secs(10);
    tokio::spawn(async move {
        tokio::time::sleep(SETTLE).await;
        crate::memory::release_startup_pages();
        let mut tick = tokio::time::interval(TRIM_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            crate::memory::trim();
        }
    })
}

/// What an instance of a fleet runs beside its requests (nothing without `redis:`).
fn spawn_fleet(app: &App) -> Vec<JoinHandle<()>> {
    let Some(shared) = &app.shared else { return Vec::new() };
    let mut tasks = vec![tokio::spawn(shared.clone().heartbeat())];
    if let Some(limiter) = app.limiter.shared() {
        tasks.push(tokio::spawn(limiter.clone().keep_holders()));
        tasks.push(tokio::spawn(limiter.clone().finish_batches()));
    }
    let (auth, clock) = (app.auth.clone(), app.clock.clone());
    // A key's id, `*`, or a console session signed out on another instance (`session:TOKEN`).
    let evict = Arc::new(move |id: Option<&str>| match id {
        Some(id) => match id.strip_prefix(crate::console::SIGNED_OUT) {
            Some(token) => auth.console_logout(token, clock.unix_secs()),
            None => auth.evict(id),
        },
        None => auth.evict_all(),
    });
    tasks.extend(crate::shared::revocation::spawn(shared.clone(), evict));
    tasks
}

/// The MCP gateway as one instance of the fleet: its tag, and a listener for what other
/// instances forward to it (answers and retries its clients sent them).
async fn join_mcp_fleet(app: &App) -> Option<JoinHandle<()>> {
    let (front, shared) = (app.mcp.clone()?, app.shared.clone()?);
    let fleet = crate::shared::mcp::RedisFleet::join(shared.clone()).await;
    let tag = switchyard_mcp::fleet::Fleet::tag(&fleet);
    front.join_fleet(Arc::new(fleet));
    Some(crate::shared::mcp::spawn(shared, tag, front))
}

/// Backend health across a fleet: tell the others when this instance's view of a backend changes,
/// and probe a backend at once when another instance's view of it changed (always the backends
/// of the configuration serving now).
fn spawn_health_sharing(current: Current, shared: Arc<crate::shared::Shared>) -> Vec<JoinHandle<()>> {
    let serving = current.clone();
    let probe = Arc::new(move |name: &str| {
        if let Some(backend) = serving.load().router.backends.iter().find(|b| b.name() == name) {
            backend.wake.notify_one();
        }
    });
    let listener = crate::shared::health::spawn(shared.clone(), probe);
    let watcher = tokio::spawn(async move {
        let mut seen = std::collections::HashMap::<String, bool>::new();
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let app = current.load_full();
            for backend in &app.router.backends {
                let up = backend.health.is_up();
                if seen.insert(backend.name().to_owned(), up).is_some_and(|was| was != up) {
                    crate::shared::health::announce(&shared, backend.name(), up).await;
                }
            }
        }
    });
    vec![listener, watcher]
}

/// Each backend's health prober, and each event-publishing engine's feed: what belongs to one
/// routing state and retires with it on a reload.
fn spawn_probers(app: &App) -> Vec<JoinHandle<()>> {
    let probers = app.router.backends.iter().map(|b| {
        tokio::spawn(health::run(app.router.clone(), b.clone(), app.client.clone(), app.config.health.clone()))
    });
    let feeds = app.router.engines.iter().flat_map(|e| e.spawn_feeds());
    probers.chain(feeds).collect()
}

/// Pools whose members are discovered, applied through reloads with the members found; and the
/// endpoint picker (`epp:`) when configured.
fn spawn_pools(
    current: &Current,
    found: &Arc<crate::epp::members::Found>,
    reload: &mpsc::Sender<ReloadRequest>,
    picking: Option<crate::epp::Listeners>,
) -> Vec<JoinHandle<()>> {
    let mut tasks = crate::epp::members::spawn(&current.load().config, found.clone(), reload.clone());
    tasks.extend(picking.map(|listeners| spawn_picker(current.clone(), listeners)));
    tasks
}

/// The endpoint picker (`epp:`), served beside the HTTP listener until the gateway stops.
fn spawn_picker(current: Current, listeners: crate::epp::Listeners) -> JoinHandle<()> {
    tokio::spawn(async move {
        if let Err(e) = crate::epp::serve(current, listeners, std::future::pending()).await {
            tracing::error!(error = %e, "the endpoint picker stopped");
        }
    })
}

/// What the reload task works on: the state serving now, its probers, the TLS acceptor, the
/// guards, and the pool members discovered.
struct Reloading {
    current: Current,
    probers: Arc<Mutex<Vec<JoinHandle<()>>>>,
    tls: Tls,
    guarding: Arc<Guarding>,
    found: Arc<crate::epp::members::Found>,
}

/// Reloads, one at a time: read the file, build the whole new state, probe its backends, then
/// swap it in and retire the old probers. Any failure leaves the running state as it was.
async fn reload_loop(reloading: Reloading, mut requests: mpsc::Receiver<ReloadRequest>) {
    let Reloading { current, probers, tls, guarding, found } = reloading;
    while let Some(answer) = requests.recv().await {
        let old = current.load_full();
        let outcome = async {
            let path = old.config.source.clone().ok_or("the gateway was started without a config file")?;
            let mut config = Config::load(&path, &ProcessEnv).map_err(|e| format!("{}: {e}", path.display()))?;
            config.expand_pools(&found.snapshot());
            if config.listen != old.config.listen {
                // The listener is bound (and may come from --listen): moving it takes a restart.
                tracing::warn!(listen = %old.config.listen, "`listen` changes apply at the next start");
                config.listen = old.config.listen;
            }
            // The certificate files are read again even when their paths did not change (renewal).
            let acceptor = match (&tls, &config.tls) {
                (Some(_), Some(files)) => Some(tls::acceptor(files)?),
                (None, None) => None,
                _ => return Err("`tls` cannot be turned on or off while serving; restart to apply it".to_owned()),
            };
            let mut app = old.reconfigured(config)?;
            app.guards = guarding.build(&app)?;
            let app = Arc::new(app);
            health::probe_all(&app.router, &app.client, &app.config.health).await;
            let fresh = spawn_probers(&app);
            let backends = app.router.backends.len();
            current.store(app);
            // The batch runner waits for a wake-up when it had nothing to do; the new config may
            // give it some (a fleet's `redis:`).
            crate::batch::runner::wake();
            if let (Some(tls), Some(acceptor)) = (&tls, acceptor) {
                tls.store(Arc::new(acceptor));
            }
            for old in std::mem::replace(&mut *probers.lock().unwrap_or_else(|e| e.into_inner()), fresh) {
                old.abort();
            }
            Ok::<_, String>(format!("configuration reloaded from {} ({backends} backends)", path.display()))
        }
        .await;
        match &outcome {
            Ok(message) => tracing::info!("{message}"),
            Err(e) => tracing::error!(error = %e, "configuration reload failed; the running configuration stays"),
        }
        let _ = answer.send(outcome);
    }
}

/// The header count hyper refuses above when no other cap is set.
const HYPER_DEFAULT_MAX_HEADERS: usize = 100;

/// Accept until `shutdown`, then drain: in-flight requests and streams get up to
/// `shutdown_grace` to finish.
async fn serve(listener: TcpListener, current: Current, tls: Tls, shutdown: impl Future<Output = ()>) {
    let app = current.load_full();
    let limits = &app.config.listener;
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(app.config.timeouts.header_read)
        .keep_alive(true)
        // A head that does not fit the read buffer is refused with 431.
        .max_buf_size(limits.max_header_bytes);
    // hyper's own cap is 100 headers, on a faster path (its header arrays stay uninitialised
    // on the stack); only a different cap is set explicitly.
    if limits.max_headers != HYPER_DEFAULT_MAX_HEADERS {
        builder.http1().max_headers(limits.max_headers);
    }
    // HTTP/2 has no head-read idle clock: a connection that sends nothing for `header_read` is
    // pinged, and closed if the ping goes unanswered as long (a client that vanished without a
    // FIN would otherwise hold its slot forever).
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(limits.max_header_bytes as u32)
        .keep_alive_interval(Some(app.config.timeouts.header_read))
        .keep_alive_timeout(app.config.timeouts.header_read);
    // Shared by the connections, each of which takes its own copy only once its first head is in.
    let builder = Arc::new(builder);
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let write_limit = app.config.timeouts.client_write;
    // Each connection holds a receiver: the drain signal reaches it, and the sender's `closed`
    // tells when every connection has ended.
    let (drain, draining) = tokio::sync::watch::channel(false);
    let idle = app.config.timeouts.connection_idle;
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(conn) => conn,
                    Err(e) => {
                        // Typically out of file descriptors: back off instead of spinning.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                };
                let Ok(permit) = slots.clone().try_acquire_owned() else {
                    // Full: close at once rather than hold the socket (the client may retry).
                    app.metrics.connections_refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    drop(stream);
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let stream = conn::Guarded::new(stream, write_limit, conn::Slot::new(permit, app.metrics.clone()));
                let current = current.clone();
                let activity = idle::Activity::new();
                let seen = activity.clone();
                let service = service_fn(move |req| {
                    seen.request();
                    // Each request on the snapshot current when it arrives.
                    let app = current.load_full();
                    async move { Ok::<_, Infallible>(routes::handle(app, req, peer).await) }
                });
                let mut draining = draining.clone();
                let (builder, head_limit, max_head) =
                    (builder.clone(), app.config.timeouts.header_read, limits.max_header_bytes);
                let tls = tls.as_ref().map(|t| t.load_full());
                tokio::spawn(async move {
                    // Until its first head is in, a connection costs its task and that head's
                    // buffer; a silent client is dropped after `timeouts.header_read`.
                    let Some(acceptor) = tls else {
                        let Some(io) = head::first_request(stream, head_limit, max_head, &mut draining).await else {
                            return;
                        };
                        let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), service).into_owned();
                        return idle::drive!(conn, draining, activity, idle).await;
                    };
                    // The handshake too.
                    let stream = match tokio::time::timeout(head_limit, acceptor.accept(stream)).await {
                        Ok(Ok(stream)) => stream,
                        Ok(Err(e)) => return tracing::debug!(error = %e, "TLS handshake failed"),
                        Err(_) => return tracing::debug!("TLS handshake timed out"),
                    };
                    let Some(io) = head::first_request(stream, head_limit, max_head, &mut draining).await else {
                        return;
                    };
                    let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), service).into_owned();
                    idle::drive!(conn, draining, activity, idle).await
                });
            }
            _ = &mut shutdown => break,
        }
    }
    drop(listener);
    // Long-lived MCP GET streams would hold their connections open through the whole grace.
    if let Some(mcp) = &app.mcp {
        mcp.close_streams();
    }
    let grace = app.config.shutdown_grace;
    tracing::info!(grace_secs = grace.as_secs_f64(), "shutting down: draining in-flight requests");
    drop(draining);
    let _ = drain.send(true);
    tokio::select! {
        _ = drain.closed() => tracing::info!("all connections closed"),
        _ = tokio::time::sleep(grace) => tracing::warn!("shutdown grace period over; dropping remaining connections"),
    }
}
