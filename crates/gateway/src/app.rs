//! The gateway's shared state, built once at start-up and read by every request: config,
//! router (backends, health, routing policy), upstream client, auth, limiter, budgets, metrics,
//! store and usage journal, and the clock they all read time from. Building it opens the
//! database and the journal; serving it is `server.rs`'s job.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::auth::{key, Auth, KeyLookup};
use crate::cache::ResponseCache;
use crate::clock::Clock;
use crate::config::{Config, McpTransport};
use crate::limit::{Budgets, Limiter, MemoryLimiter, SharedBudgets, SharedLimiter};
use crate::metrics::Metrics;
use crate::org_rules::Organisation;
use crate::records::KeyRecord;
use crate::route::Router;
use crate::shared::Shared;
use crate::store::Store;
use crate::telemetry::Exports;
use crate::upstream::{self, UpstreamClient};
use crate::usage::{Journal, JournalOptions, UsageWriter, WriterConfig};

/// A request to re-read the configuration file, answered with what happened.
pub type ReloadRequest = tokio::sync::oneshot::Sender<Result<String, String>>;

/// Ask the reload task and wait for its answer.
pub async fn request_reload(reload: &tokio::sync::mpsc::Sender<ReloadRequest>) -> Result<String, String> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    reload.send(tx).await.map_err(|_| "the gateway is shutting down".to_owned())?;
    rx.await.map_err(|_| "the gateway is shutting down".to_owned())?
}

pub struct App {
    pub config: Arc<Config>,
    pub router: Arc<Router>,
    pub client: UpstreamClient,
    pub metrics: Arc<Metrics>,
    pub auth: Arc<Auth>,
    pub limiter: Arc<Limiter>,
    /// What a fleet shares through Redis (`redis:`); None for a lone instance.
    pub shared: Option<Arc<Shared>>,
    pub budgets: Arc<Budgets>,
    /// Budgets across the fleet (with `redis:`), instead of `budgets`.
    pub shared_budgets: Option<Arc<SharedBudgets>>,
    /// Keys and usage; None only for commands that do not serve (`check`).
    pub store: Option<Store>,
    /// The usage journal every request's record is appended to (with a store).
    pub journal: Option<Arc<Journal>>,
    /// Where every part of the pipeline reads the time.
    pub clock: Clock,
    /// The MCP gateway, when `mcp.servers` names any.
    pub mcp: Option<Arc<switchyard_mcp::Front>>,
    /// Each export sink's counters (`exports:`), for `/metrics`.
    pub exports: Arc<crate::telemetry::exports::ExportCounters>,
    /// OpenTelemetry traces (`telemetry:`), started by the server; None: off.
    pub telemetry: Option<Arc<crate::telemetry::Telemetry>>,
    /// Where `POST /admin/reload` asks the server to reload (set while serving).
    pub reload: Option<tokio::sync::mpsc::Sender<ReloadRequest>>,
    /// With `console.store_bodies`: what scrubs secrets from the bodies kept with each record.
    pub redactor: Option<Arc<crate::redact::Redactor>>,
    /// The response cache (`cache:`); None: off.
    pub cache: Option<Arc<crate::cache::ResponseCache>>,
    /// The response cache's semantic layer (`cache.semantic`), opened by `open`; None: off.
    pub semantic: Option<Arc<crate::cache::semantic::SemanticCache>>,
    /// Checks on content (`guard.rs`): none by default, and then the request path skips them.
    pub guards: crate::guard::Guards,
    /// Experiments on live traffic (`experiments:` and the admin API's); lives across reloads.
    pub experiments: Arc<crate::experiments::Experiments>,
    /// The counters of `quotas:` (policy `cost` rules); they live across reloads.
    pub quotas: Arc<crate::limit::quotas::QuotaCounters>,
    /// The organisation's policy rules: the configuration's and the admin API's.
    pub organisation: Arc<Organisation>,
    /// A2A agents' cards (`agents:`); they live across reloads.
    pub agent_cards: Arc<crate::agents::AgentCards>,
}

/// Keys are looked up in the store.
struct StoreKeys(Option<Store>);

impl KeyLookup for StoreKeys {
    fn lookup(&self, id: &str) -> Pin<Box<dyn Future<Output = Result<Option<KeyRecord>, String>> + Send + '_>> {
        let id = id.to_owned();
        Box::pin(async move {
            match &self.0 {
                Some(store) => store.get_key_with_owners(&id).await.map_err(|e| e.to_string()),
                None => Ok(None),
            }
        })
    }

    fn team_by_name(
        &self,
        name: &str,
    ) -> Pin<Box<dyn Future<Output = Result<Option<crate::records::TeamRecord>, String>> + Send + '_>> {
        let name = name.to_owned();
        Box::pin(async move {
            match &self.0 {
                Some(store) => store.team_by_name(&name).await.map_err(|e| e.to_string()),
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
    match crate::config::sqlite_file(url) {
        Some(path) => Ok(Some(path.with_file_name("switchyard.secret"))),
        None => Err("storage on PostgreSQL needs auth.secret (or SWITCHYARD_SECRET), so that every instance \
                     hashes keys alike"
            .to_owned()),
    }
}

impl App {
    pub fn new(config: Config, store: Option<Store>) -> Result<App, String> {
        App::with_clock(config, store, Clock::system())
    }

    /// The state with `clock` as its time source (virtual time in tests).
    pub fn with_clock(config: Config, store: Option<Store>, clock: Clock) -> Result<App, String> {
        let router = Router::with_clock(&config, clock.clone())?;
        let experiments = Arc::new(crate::experiments::Experiments::default());
        experiments.configure(&config.experiments);
        let client = upstream::build(config.timeouts.connect)?;
        let secret = match &config.auth.secret {
            Some(s) => key::server_secret(Some(s), std::path::Path::new(""))?,
            None => match secret_path(&config)? {
                Some(path) if store.is_some() => key::server_secret(None, &path)?,
                // No persistent place (in-memory database, `check`): an ephemeral secret.
                _ => key::generate()?.1.into_bytes(),
            },
        };
        let mut auth =
            Auth::new(config.auth.master_key.clone(), key::Hasher::new(&secret), Arc::new(StoreKeys(store.clone())));
        if !config.auth.jwt.is_empty() {
            auth = auth.with_jwt(crate::auth::jwt::JwtVerifier::new(&config.auth.jwt, client.clone()));
        }
        if let Some(oidc) = &config.auth.oidc {
            auth = auth.with_oidc(crate::auth::oidc::OidcProvider::new(oidc, client.clone()));
        }
        let auth = Arc::new(auth);
        let mcp = mcp_front(&config, &client, &secret)?;
        let metrics = Arc::new(Metrics::default());
        let memory = Arc::new(MemoryLimiter::new(clock.clone()));
        let (limiter, shared) = match &config.redis {
            None => (Limiter::new(memory, None), None),
            Some(redis) => {
                let shared = Shared::new(redis)?;
                // The fallback keeps its own windows: what `local_share` enforces while Redis is away.
                let fallback = Arc::new(MemoryLimiter::new(clock.clone()));
                (Limiter::new(memory, Some(SharedLimiter::new(shared.clone(), fallback))), Some(shared))
            }
        };
        let redactor = redactor(&config);
        let cache = ResponseCache::new(&config.cache, shared.clone(), clock.clone());
        let organisation = Arc::new(Organisation::new(&config, Vec::new()));
        Ok(App {
            config: Arc::new(config),
            router: Arc::new(router),
            client,
            metrics,
            auth,
            limiter: Arc::new(limiter),
            shared_budgets: shared.clone().map(SharedBudgets::new),
            shared,
            budgets: Arc::new(Budgets::default()),
            store,
            journal: None,
            clock,
            mcp,
            exports: Arc::default(),
            telemetry: None,
            reload: None,
            redactor,
            cache,
            semantic: None,
            guards: crate::guard::Guards::default(),
            experiments,
            quotas: Arc::default(),
            organisation,
            agent_cards: Arc::default(),
        })
    }

    /// The state for a reloaded `config`: a new router (backends added, removed or changed),
    /// upstream client and config, sharing everything that lives across configurations —
    /// keys and their cache, limits and budgets in flight, metrics, the store and journal, the
    /// MCP gateway. What only a restart can change is refused, naming it.
    pub fn reconfigured(&self, config: Config) -> Result<App, String> {
        let old = &self.config;
        let fixed = [
            ("storage", old.storage.url != config.storage.url || old.storage.journal_dir != config.storage.journal_dir),
            ("storage.record_usage", old.storage.record_usage != config.storage.record_usage),
            ("redis", old.redis != config.redis),
            ("telemetry", old.telemetry != config.telemetry),
            ("exports", old.exports != config.exports),
            ("cache.semantic (its store)", semantic_store(&old.cache) != semantic_store(&config.cache)),
            ("auth", old.auth.master_key != config.auth.master_key || old.auth.secret != config.auth.secret),
            ("mcp", format!("{:?}", old.mcp) != format!("{:?}", config.mcp)),
            ("limits (of the listener)", format!("{:?}", old.listener) != format!("{:?}", config.listener)),
            (
                "timeouts.header_read and client_write",
                (old.timeouts.header_read, old.timeouts.client_write)
                    != (config.timeouts.header_read, config.timeouts.client_write),
            ),
        ];
        if let Some((what, _)) = fixed.iter().find(|(_, changed)| *changed) {
            return Err(format!("`{what}` cannot change while serving; restart to apply it"));
        }
        let router = Router::with_clock(&config, self.clock.clone())?;
        let client = upstream::build(config.timeouts.connect)?;
        let redactor = redactor(&config);
        // Stored answers outlive a reload, unless the reload changed how they are kept.
        let cache = match &self.cache {
            Some(cache) if old.cache == config.cache => Some(cache.clone()),
            _ => ResponseCache::new(&config.cache, self.shared.clone(), self.clock.clone()),
        };
        self.experiments.configure(&config.experiments);
        let organisation = Arc::new(Organisation::new(&config, self.organisation.stored()));
        Ok(App {
            config: Arc::new(config),
            router: Arc::new(router),
            client,
            metrics: self.metrics.clone(),
            auth: self.auth.clone(),
            limiter: self.limiter.clone(),
            shared: self.shared.clone(),
            shared_budgets: self.shared_budgets.clone(),
            budgets: self.budgets.clone(),
            store: self.store.clone(),
            journal: self.journal.clone(),
            clock: self.clock.clone(),
            mcp: self.mcp.clone(),
            exports: self.exports.clone(),
            telemetry: self.telemetry.clone(),
            reload: self.reload.clone(),
            redactor,
            cache,
            semantic: self.semantic.clone(),
            guards: self.guards.clone(),
            experiments: self.experiments.clone(),
            quotas: self.quotas.clone(),
            organisation,
            agent_cards: self.agent_cards.clone(),
        })
    }

    /// The state a serving gateway needs: the store (waiting briefly for a database server),
    /// and unless usage recording is off, the usage journal, its writer and the export sinks
    /// reading it. The writer and the sinks are the caller's to drain at shutdown.
    pub async fn open(config: Config) -> Result<(App, Option<UsageWriter>, Exports), String> {
        let store = open_store(&config.storage.url).await?;
        let (journal, writer, exports) = if config.storage.record_usage {
            let journal = Journal::open(
                &config.storage.journal_dir,
                JournalOptions { rotate_bytes: config.storage.journal_file_bytes },
            )
            .map_err(|e| format!("cannot open the usage journal in {}: {e}", config.storage.journal_dir.display()))?;
            let consumers = Exports::consumers(&journal, &config.exports);
            let writer = spawn_writer(&config.storage.url, &store, &journal)?;
            let exports = Exports::start(&journal, &config.exports, &consumers, config.timeouts.connect)?;
            (Some(journal), Some(writer), exports)
        } else {
            tracing::warn!("storage.record_usage is off: no usage is recorded and key budgets are not enforced");
            (None, None, Exports::default())
        };
        let semantic = match &config.cache.semantic {
            Some(semantic) if config.cache.enabled => Some(
                crate::cache::semantic::SemanticCache::open(semantic, &config.storage, crate::clock::unix_ms()).await?,
            ),
            _ => None,
        };
        // A database down at start-up does not stop the gateway: the stored rules are read again
        // each second (`org_rules::run`) until it answers.
        let stored = store.list_policies().await.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "the stored policy rules cannot be read yet: only the configuration's apply until they can");
            Vec::new()
        });
        let mut app = App::new(config, Some(store))?;
        app.organisation = Arc::new(Organisation::new(&app.config, stored));
        if let Some(model) = app.config.cache.semantic.as_ref().map(|s| &s.embedding_model) {
            if !app.router.knows_model(model) {
                tracing::warn!(model = %model, "cache.semantic.embedding_model is not a model any backend serves (yet): lookups miss until one does");
            }
        }
        app.semantic = semantic;
        app.journal = journal;
        app.exports = exports.counters.clone();
        Ok((app, writer, exports))
    }
}

/// What of `cache.semantic` only a restart changes: whether it is on, and where it keeps entries.
fn semantic_store(cache: &crate::config::CacheConfig) -> Option<String> {
    cache.semantic.as_ref().map(|s| format!("{:?} {:?} {:?} {}", s.store, s.path, s.url, s.table))
}

/// The MCP gateway over the configured servers; its session ids are signed with a key derived
/// from the server secret, so every instance sharing the secret accepts them.
fn mcp_front(
    config: &Config,
    client: &UpstreamClient,
    secret: &[u8],
) -> Result<Option<Arc<switchyard_mcp::Front>>, String> {
    if config.mcp.servers.is_empty() && config.mcp.code_mode.is_none() {
        return Ok(None);
    }
    let http: Arc<dyn switchyard_mcp::http_upstream::HttpSend> = Arc::new(upstream::McpHttp(client.clone()));
    let specs = config
        .mcp
        .servers
        .iter()
        .map(|s| {
            let upstream: Arc<dyn switchyard_mcp::Upstream> = match &s.transport {
                McpTransport::Http { url, headers } => Arc::new(switchyard_mcp::http_upstream::HttpUpstream::new(
                    url.clone(),
                    headers.iter().cloned().collect(),
                    http.clone(),
                    s.timeout,
                )),
                McpTransport::Stdio { command, env } => Arc::new(switchyard_mcp::stdio_upstream::StdioUpstream::spawn(
                    &s.name,
                    command.clone(),
                    env.clone(),
                    s.timeout,
                )),
            };
            let rules = s.clone();
            switchyard_mcp::ServerSpec {
                name: s.name.clone(),
                upstream,
                tool_filter: Box::new(move |tool| rules.tool_allowed(tool)),
            }
        })
        .collect();
    let hub = Arc::new(switchyard_mcp::Hub::new(specs));
    let session_key = [b"switchyard mcp sessions:".as_slice(), secret].concat();
    let mut front = switchyard_mcp::Front::new(hub, &session_key)?;
    if let Some(code) = &config.mcp.code_mode {
        front = front.with_code_mode(switchyard_sandbox::Limits {
            memory_bytes: code.memory_bytes,
            timeout: code.timeout,
            max_tool_calls: code.max_tool_calls,
            max_parallel_calls: code.max_parallel_calls,
            max_output_bytes: code.max_output_bytes,
        });
    }
    Ok(Some(Arc::new(front)))
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

/// With `console.store_bodies`, the redactor for stored bodies: it knows this deployment's own
/// secrets (master key, server secret, backends' API keys, MCP servers' headers and environment).
fn redactor(config: &Config) -> Option<Arc<crate::redact::Redactor>> {
    if !config.console.store_bodies {
        return None;
    }
    let mut known: Vec<String> =
        [&config.auth.master_key, &config.auth.secret].into_iter().flatten().cloned().collect();
    known.extend(config.backends.iter().filter_map(|b| b.api_key.clone()));
    known.extend(config.backends.iter().flat_map(|b| b.api_keys.iter().map(|k| k.key.clone())));
    for server in &config.mcp.servers {
        match &server.transport {
            crate::config::McpTransport::Http { headers, .. } => {
                known.extend(headers.iter().filter_map(|(_, v)| v.to_str().ok().map(str::to_owned)));
            }
            crate::config::McpTransport::Stdio { env, .. } => known.extend(env.iter().map(|(_, v)| v.clone())),
        }
    }
    Some(Arc::new(crate::redact::Redactor::new(known)))
}
