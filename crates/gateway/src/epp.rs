//! Serving as the Endpoint Picker (`epp:`): Envoy-based gateways ask over ext_proc
//! (`switchyard-epp` speaks the protocol) and the gateway's own phases answer — authenticate,
//! parse, admit (the key's limits), route (strategy, sticky sessions, cache-aware by estimate or
//! KV events, load signals, the fair queue and its shedding) — among a pool's members, which are
//! backends like any other (`config/pools.rs`). The pick's slot and permits are held until the
//! request's stream ends; the endpoint Envoy reports as having served moves them there.

pub mod members;

use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use bytes::Bytes;
use switchyard_epp::{PickRequest, Picked, Picker, Refusal};
use tokio::sync::watch;

use crate::app::App;
use crate::endpoint::Endpoint;
use crate::error::GatewayError;
use crate::http::parse::RoutedRequest;
use crate::route::backend::{Backend, InFlight};
use crate::route::{RouteHints, SelectError};
use switchyard_protocol::chat::Api;

/// The gateway's router behind the picker protocol, over whichever configuration is current.
pub struct GatewayPicker {
    current: Arc<ArcSwap<App>>,
}

/// What a picked request holds until its stream ends: its slot on the member picked (moved if
/// another served it), its rate-limit permit and budget hold, and what affinity needs.
pub struct Ticket {
    app: Arc<App>,
    pool: String,
    slot: InFlight,
    chain: Vec<u64>,
    _permits: (Option<crate::limit::Permit>, Option<crate::limit::BudgetPermit>),
}

impl Picker for GatewayPicker {
    type Ticket = Ticket;

    async fn pick(&self, request: PickRequest) -> Result<Picked<Ticket>, Refusal> {
        let app = self.current.load_full();
        let path = request.path.split('?').next().unwrap_or("");
        let path = path.strip_prefix("/v1").filter(|p| p.starts_with('/')).unwrap_or(path);
        let endpoint = Endpoint::from_path(path);
        let api = crate::translate::client_api(endpoint);
        let outcome = pick(&app, &request, endpoint, path).await;
        let pool = outcome.as_ref().map_or("", |(pool, _)| pool.as_str());
        app.metrics.epp.picked(pool, outcome.as_ref().map_or_else(|e| e.kind(), |_| "picked"));
        outcome.map(|(_, picked)| picked).map_err(|e| refusal(&e, api))
    }

    fn responded(&self, ticket: &mut Ticket, served: Option<&str>, status: Option<u16>) {
        if let Some(endpoint) = served {
            ticket.app.metrics.epp.served(&ticket.pool, endpoint);
            ticket.moved_to(endpoint);
        }
        // The answer judges the member as an attempt's does: 5xx toward its breaker, else a success.
        let (backend, now) = (ticket.slot.backend(), ticket.app.clock.mono_ms());
        match status {
            Some(500..=599) => {
                backend.stats.failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if backend.health.on_server_error(now) {
                    tracing::warn!(backend = backend.name(), "circuit breaker opened (as reported by the data plane)");
                }
            }
            Some(_) => backend.health.on_success(),
            None => {}
        }
    }

    fn malformed(&self, why: &'static str) {
        self.current.load().metrics.epp.malformed(why);
    }
}

impl Ticket {
    /// Served by another endpoint than picked (a fallback): the load and the prompt's blocks are
    /// there now.
    fn moved_to(&mut self, endpoint: &str) {
        if member_endpoint(self.slot.backend()) == Some(endpoint) {
            return;
        }
        let router = &self.app.router;
        let Some(backend) = router.backends.iter().find(|b| member_endpoint(b) == Some(endpoint)) else { return };
        self.slot = backend.start();
        router.remember_at(backend, &self.chain);
    }
}

/// The endpoint a pool member stands for.
fn member_endpoint(backend: &Backend) -> Option<&str> {
    backend.cfg.member.as_ref().map(|m| m.endpoint.as_str())
}

/// The phases up to the pick, each refusing in the client API's shape.
async fn pick(
    app: &Arc<App>,
    request: &PickRequest,
    endpoint: Endpoint,
    path: &str,
) -> Result<(String, Picked<Ticket>), GatewayError> {
    let epp = app.config.epp.as_ref().ok_or(GatewayError::RouteNotFound)?;
    let identity = app.auth.authenticate(&request.headers, app.clock.unix_secs()).await?;
    let deadline = Instant::now() + app.config.timeouts.request;
    let routed = parsed(app, endpoint, path, &request.body)?;
    let (pool, model) = pool_for(epp, routed.as_ref().map(|r| r.model.as_str()))?;
    let permits = match &routed {
        Some(routed) => Box::pin(crate::proxy::admit(app, &identity, routed, deadline)).await?,
        None => (None, None),
    };
    let key = identity.key().map_or("", |k| k.id.as_str());
    let session = crate::proxy::header_session(&request.headers).or(routed.as_ref().and_then(|r| r.session.as_deref()));
    let chain = routed.as_ref().map(|r| r.chain.clone()).unwrap_or_default();
    let mut hints = RouteHints { session, chain, ..RouteHints::default() };
    if let (Some(block_size), Some(routed)) = (app.router.engine_block_size(&model), &routed) {
        if endpoint == Endpoint::ChatCompletions {
            hints.engine = app.router.engine_keys(&model, &routed.body, block_size).await;
        }
    }
    let outside = outside_subset(app, &model, request.subset.as_deref());
    let selected = match crate::proxy::queue_select(app, &model, &hints, &outside, key, deadline).await? {
        Ok(selected) => selected,
        Err(SelectError::UnknownModel) => return Err(GatewayError::ModelNotFound { model }),
        Err(SelectError::NoneAvailable | SelectError::Full) => return Err(GatewayError::NoHealthyBackend { model }),
    };
    let first = member_endpoint(&selected.backend)
        .ok_or_else(|| GatewayError::NoHealthyBackend { model: model.clone() })?
        .to_owned();
    let mut tried = outside;
    tried.push(selected.backend.id);
    let mut endpoints = vec![first];
    for b in app.router.least_loaded(&model, &tried, epp.fallbacks) {
        endpoints.extend(member_endpoint(&b).map(str::to_owned));
    }
    let headers = selected.explain.map(|why| vec![("x-switchyard-route".to_owned(), why)]).unwrap_or_default();
    let ticket =
        Ticket { app: app.clone(), pool: pool.clone(), slot: selected.slot, chain: hints.chain, _permits: permits };
    Ok((pool, Picked { endpoints, ticket, headers }))
}

/// Only what routing needs of the body, as the gateway reads it; nothing on the headers-only
/// path, nor for a path that names no model endpoint.
fn parsed(app: &App, endpoint: Endpoint, path: &str, body: &Bytes) -> Result<Option<RoutedRequest>, GatewayError> {
    if body.is_empty() || endpoint == Endpoint::Other {
        return Ok(None);
    }
    crate::proxy::parse_routed(app, endpoint, path, body.clone()).map(Some)
}

/// The pool serving `model` and the model routed by: a pool that lists it, else the first pool
/// that takes any model (by its own model name). No model (the headers-only path): the first
/// pool, any member.
fn pool_for(epp: &crate::config::pools::EppConfig, model: Option<&str>) -> Result<(String, String), GatewayError> {
    let any = |name: &String| (name.clone(), crate::config::pools::pool_model(name));
    if let Some(model) = model {
        if let Some((name, _)) =
            epp.pools.iter().find(|(_, m)| m.as_ref().is_some_and(|m| m.iter().any(|x| x == model)))
        {
            return Ok((name.clone(), model.to_owned()));
        }
        return match epp.pools.iter().find(|(_, m)| m.is_none()) {
            Some((name, _)) => Ok(any(name)),
            None => Err(GatewayError::ModelNotFound { model: model.to_owned() }),
        };
    }
    epp.pools.first().map(|(name, _)| any(name)).ok_or(GatewayError::RouteNotFound)
}

/// The backends of `model` outside the data plane's subset hint (skipped as if tried).
fn outside_subset(app: &App, model: &str, subset: Option<&[String]>) -> Vec<usize> {
    let Some(subset) = subset else { return Vec::new() };
    app.router
        .backends
        .iter()
        .filter(|b| b.models().iter().any(|m| m == model))
        .filter(|b| !member_endpoint(b).is_some_and(|e| switchyard_epp::message::in_subset(subset, e)))
        .map(|b| b.id)
        .collect()
}

/// A refusal as the gateway renders the error, in the client API's shape.
fn refusal(e: &GatewayError, api: Api) -> Refusal {
    let response = crate::http::error_response_in(e, api);
    let headers = response
        .headers()
        .iter()
        .filter_map(|(k, v)| Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned())))
        .collect();
    let body = e.render(api);
    // Shed (the model's queue past its bound) is a 429 to the data plane, as the protocol asks.
    let status = if matches!(e, GatewayError::Overloaded { .. }) { 429 } else { e.status().as_u16() };
    Refusal { status, headers, body, details: e.kind().to_owned() }
}

/// The picker's listeners, bound before serving so that their addresses are known (port 0).
pub struct Listeners {
    ext_proc: tokio::net::TcpListener,
    health: Option<tokio::net::TcpListener>,
}

impl Listeners {
    /// Bind `epp.listen` and `epp.health_listen`, when `epp:` is configured.
    pub async fn bind(config: &crate::config::Config) -> Result<Option<Listeners>, String> {
        let Some(epp) = &config.epp else { return Ok(None) };
        let bind = |addr: std::net::SocketAddr| async move {
            tokio::net::TcpListener::bind(addr).await.map_err(|e| format!("cannot listen on {addr} (epp): {e}"))
        };
        let ext_proc = bind(epp.listen).await?;
        let health = match epp.health_listen {
            Some(addr) => Some(bind(addr).await?),
            None => None,
        };
        Ok(Some(Listeners { ext_proc, health }))
    }

    /// Where ext_proc is served, and gRPC health alone.
    pub fn addrs(&self) -> (Option<std::net::SocketAddr>, Option<std::net::SocketAddr>) {
        (self.ext_proc.local_addr().ok(), self.health.as_ref().and_then(|h| h.local_addr().ok()))
    }
}

/// Serve the picker protocol until `shutdown`: ext_proc (and gRPC health) on `epp.listen`, gRPC
/// health on `epp.health_listen`; ready once some pool has a member.
pub async fn serve(
    current: Arc<ArcSwap<App>>,
    listeners: Listeners,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), String> {
    let app = current.load_full();
    let (ready, readiness) = watch::channel(false);
    let watched = current.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        loop {
            tick.tick().await;
            let known = watched.load().router.backends.iter().any(|b| b.cfg.member.is_some());
            ready.send_if_modified(|r| std::mem::replace(r, known) != known);
            if ready.is_closed() {
                return;
            }
        }
    });
    let limits = switchyard_epp::Limits { max_body_bytes: app.config.max_body_bytes };
    let picker = Arc::new(GatewayPicker { current });
    tracing::info!(listen = ?listeners.addrs().0, "serving the endpoint picker protocol (ext_proc)");
    switchyard_epp::serve(picker, limits, listeners.ext_proc, listeners.health, readiness, shutdown).await
}
