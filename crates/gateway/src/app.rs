//! Builds the gateway's shared state and runs it. The request pipeline, outer to inner:
//!
//! 1. accept (HTTP/1.1 keep-alive or h2c), header-read timeout — `server.rs`
//! 2. request id (propagated or minted), request counting — `http/routes.rs`
//! 3. route table: proxy endpoints, `/v1/models`, `/health`, `/ready`, `/metrics` — `http/routes.rs`
//! 4. body read under `limits.max_body_bytes`; parse only `model`/`stream` and the endpoint's
//!    required field; alias → model rewrite by byte splice — `http/parse.rs`
//! 5. model → candidate backends (404 if none serves it) → available ones (up, breaker closed)
//!    → routing policy — `route.rs`, `route/policy/`
//! 6. upstream call with connect/first-byte timeouts; a failure before anything reached the
//!    client is retried on another backend, bounded by attempts and deadline — `proxy.rs`
//! 7. relay the body frame by frame with an idle timeout; a completion guard releases the
//!    in-flight slot and records metrics however the response ends — `http/relay.rs`
//!
//! Before step 4, a client is authenticated (master key or virtual key, `auth.rs`); after step 4,
//! the key's model allow-list and rate limits are checked (`limit.rs`); `/admin` is the admin
//! API behind the master key (`http/admin.rs`).
//!
//! Health probing and discovery run beside the pipeline, one task per backend — `route/health.rs`.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use std::future::Future;
use std::pin::Pin;

use crate::auth::{key, Auth, KeyLookup};
use crate::config::Config;
use crate::limit::{Budgets, MemoryLimiter};
use crate::metrics::Metrics;
use crate::records::KeyRecord;
use crate::route::{health, Router};
use crate::store::Store;
use crate::upstream::{self, UpstreamClient};
use crate::usage::{Journal, JournalOptions, UsageWriter, WriterConfig};

pub struct App {
    pub config: Arc<Config>,
    pub router: Arc<Router>,
    pub client: UpstreamClient,
    pub metrics: Arc<Metrics>,
    pub auth: Auth,
    pub limiter: Arc<MemoryLimiter>,
    pub budgets: Arc<Budgets>,
    /// Keys and usage; None only for commands that do not serve (`check`).
    pub store: Option<Store>,
    /// The usage journal every request's record is appended to (with a store).
    pub journal: Option<Arc<Journal>>,
}

/// Keys are looked up in the store.
struct StoreKeys(Option<Store>);

impl KeyLookup for StoreKeys {
    fn lookup(&self, id: &str) -> Pin<Box<dyn Future<Output = Result<Option<KeyRecord>, String>> + Send + '_>> {
        let id = id.to_owned();
        Box::pin(async move {
            match &self.0 {
                Some(store) => store.get_key(&id).await.map_err(|e| e.to_string()),
                None => Ok(None),
            }
        })
    }
}

/// Where the server secret for key hashes lives when it is not configured: beside the SQLite file.
fn secret_path(config: &Config) -> Result<Option<std::path::PathBuf>, String> {
    let url = &config.storage.url;
    if url.contains(":memory:") {
        return Ok(None);
    }
    match url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:")) {
        Some(path) => {
            let path = std::path::Path::new(path.split('?').next().unwrap_or(path));
            Ok(Some(path.with_file_name("switchyard.secret")))
        }
        None => Err("storage on PostgreSQL needs auth.secret (or SWITCHYARD_SECRET), so that every instance \
                     hashes keys alike"
            .to_owned()),
    }
}

impl App {
    pub fn new(config: Config, store: Option<Store>) -> Result<App, String> {
        let router = Router::new(&config)?;
        let client = upstream::build(config.timeouts.connect)?;
        let secret = match &config.auth.secret {
            Some(s) => key::server_secret(Some(s), std::path::Path::new(""))?,
            None => match secret_path(&config)? {
                Some(path) if store.is_some() => key::server_secret(None, &path)?,
                // No persistent place (in-memory database, `check`): an ephemeral secret.
                _ => key::generate()?.1.into_bytes(),
            },
        };
        let auth =
            Auth::new(config.auth.master_key.clone(), key::Hasher::new(&secret), Arc::new(StoreKeys(store.clone())));
        Ok(App {
            config: Arc::new(config),
            router: Arc::new(router),
            client,
            metrics: Arc::new(Metrics::default()),
            auth,
            limiter: Arc::new(MemoryLimiter::default()),
            budgets: Arc::new(Budgets::default()),
            store,
            journal: None,
        })
    }
}

/// A gateway serving on a bound address. Dropping it aborts everything; `shutdown` drains first.
pub struct RunningGateway {
    pub addr: SocketAddr,
    pub app: Arc<App>,
    stop: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<()>>,
    probers: Vec<JoinHandle<()>>,
}

impl RunningGateway {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
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

impl Drop for RunningGateway {
    fn drop(&mut self) {
        for p in &self.probers {
            p.abort();
        }
        if let Some(server) = &self.server {
            server.abort();
        }
    }
}

/// How long start-up waits for a database server before serving without it.
const DATABASE_STARTUP_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The store. A SQLite file that cannot be opened is a configuration error; a database server
/// that does not answer is not: the gateway serves, journals usage, and connects when it can.
async fn open_store(url: &str) -> Result<Store, String> {
    let store = Store::open_lazy(url).map_err(|e| format!("bad database URL {}: {e}", redact(url)))?;
    if store.kind() == "sqlite" {
        store.ready().await.map_err(|e| format!("cannot open the database at {}: {e}", redact(url)))?;
        return Ok(store);
    }
    match tokio::time::timeout(DATABASE_STARTUP_WAIT, store.ready()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(
            database = %redact(url), error = %e,
            "database unreachable at start-up: serving anyway; usage is journalled and written once it is back"
        ),
        Err(_) => tracing::warn!(
            database = %redact(url),
            "database did not answer at start-up: serving anyway; usage is journalled and written once it is back"
        ),
    }
    Ok(store)
}

/// The usage writer: on its own low-priority thread with a database pool of its own, unless
/// the database is in memory (a second pool would be a second database).
fn spawn_writer(url: &str, store: &Store, journal: &Arc<Journal>) -> Result<UsageWriter, String> {
    if url.contains(":memory:") || url.contains("mode=memory") {
        return Ok(UsageWriter::spawn(journal.clone(), store.for_journal(journal.id()), WriterConfig::default()));
    }
    let (url, id) = (url.to_owned(), journal.id().to_owned());
    let make_sink = move || match Store::open_lazy(&url) {
        Ok(store) => Some(store.for_journal(&id)),
        Err(e) => {
            tracing::error!(error = %e, "usage writer cannot open the database");
            None
        }
    };
    UsageWriter::spawn_on_own_thread(journal.clone(), make_sink, WriterConfig::default())
        .map_err(|e| format!("cannot start the usage writer: {e}"))
}

/// Bind `config.listen`, probe every backend once, then serve until `shutdown` resolves (or
/// `RunningGateway::shutdown` is called).
pub async fn start(
    config: Config,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<RunningGateway, String> {
    let listener =
        TcpListener::bind(config.listen).await.map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let store = open_store(&config.storage.url).await?;
    let (journal, writer) = if config.storage.record_usage {
        let journal = Journal::open(&config.storage.journal_dir, JournalOptions::default())
            .map_err(|e| format!("cannot open the usage journal in {}: {e}", config.storage.journal_dir.display()))?;
        let writer = spawn_writer(&config.storage.url, &store, &journal)?;
        (Some(journal), Some(writer))
    } else {
        tracing::warn!("storage.record_usage is off: no usage is recorded and key budgets are not enforced");
        (None, None)
    };
    let mut app = App::new(config, Some(store))?;
    app.journal = journal;
    let app = Arc::new(app);
    if !app.auth.enabled() {
        tracing::warn!(
            "no master key configured: the gateway and its admin API are OPEN to anyone who can reach them; \
             set SWITCHYARD_MASTER_KEY (or auth.master_key) to require keys"
        );
    }
    health::probe_all(&app.router, &app.client, &app.config.health).await;
    let probers = app
        .router
        .backends
        .iter()
        .map(|b| {
            tokio::spawn(health::run(app.router.clone(), b.clone(), app.client.clone(), app.config.health.clone()))
        })
        .collect();
    let (stop, stopped) = oneshot::channel::<()>();
    let grace = app.config.shutdown_grace;
    let server_app = app.clone();
    let server = tokio::spawn(async move {
        let signal = async move {
            tokio::select! {
                _ = shutdown => {}
                _ = stopped => {}
            }
        };
        crate::server::serve(listener, server_app, signal).await;
        // In-flight requests have drained, so their records are in the journal: flush it.
        let Some(writer) = writer else { return };
        if !writer.shutdown(grace).await {
            tracing::warn!("usage writer did not catch up before shutdown; the journal replays the rest at next start");
        }
    });
    Ok(RunningGateway { addr, app, stop: Some(stop), server: Some(server), probers })
}

/// A database URL without its password, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let creds = &url[scheme + 3..at];
            let user = creds.split(':').next().unwrap_or("");
            format!("{}{user}:***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}
