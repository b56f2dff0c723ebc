//! Route, when the model's backends are a pool that follows another endpoint picker
//! (`backends[].epp`): the picker is asked (`switchyard_epp::Follower`, the protocol as Envoy
//! speaks it, with the body as the pool's engines will get it), its endpoints become the
//! attempts' order, and the endpoint that answered is reported back to it. When it cannot be
//! asked: a 503 (`failure_mode: closed`), or the gateway's own routing (`open`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use switchyard_epp::{Answer, Follower, Session};

use super::{Call, Exchange};
use crate::config::pools::FollowConfig;
use crate::endpoint::Endpoint;
use crate::error::GatewayError;
use crate::route::backend::Backend;
use crate::translate::Wire;

/// A request routed by another picker: its members in the picker's order, and the stream to
/// report the served endpoint on.
pub(super) struct Following {
    pool: String,
    pub order: Vec<usize>,
    session: Option<Box<Session>>,
}

/// One connection per picker (HTTP/2, multiplexed), kept across reloads.
fn follower(config: &FollowConfig) -> Result<Follower, String> {
    static FOLLOWERS: OnceLock<Mutex<HashMap<(String, std::time::Duration), Follower>>> = OnceLock::new();
    let mut all = FOLLOWERS.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    let key = (config.endpoint.clone(), config.timeout);
    if let Some(f) = all.get(&key) {
        return Ok(f.clone());
    }
    let f = Follower::new(&config.endpoint, config.timeout)?;
    all.insert(key, f.clone());
    Ok(f)
}

/// Ask the picker of the pool serving the request's model, if it is such a pool.
pub(super) async fn ask(call: &Call<'_>, exchange: &mut Exchange) -> Result<Option<Following>, GatewayError> {
    let app = call.app;
    let model = &exchange.routed.model.clone();
    let members: Vec<&Arc<Backend>> = app
        .router
        .backends
        .iter()
        .filter(|b| b.cfg.member.is_some() && b.models().iter().any(|m| m == model))
        .collect();
    let Some(pool) = members.first().and_then(|b| b.cfg.member.as_ref()).map(|m| m.pool.clone()) else {
        return Ok(None);
    };
    let Some(config) = app.config.pool(&pool).and_then(|p| p.follow.clone()) else { return Ok(None) };
    let metrics = &app.metrics.epp;
    let failed = |why: String| {
        tracing::warn!(pool = %pool, picker = %config.endpoint, error = %why, "the endpoint picker did not pick");
        metrics.followed(&pool, if config.fail_open { "failed_open" } else { "failed_closed" });
        if config.fail_open {
            Ok(None)
        } else {
            Err(GatewayError::NoHealthyBackend { model: model.clone() })
        }
    };
    let follower = match follower(&config) {
        Ok(f) => f,
        Err(e) => return failed(e),
    };
    let (path, body) = as_sent(call, exchange);
    let authority = members[0].cfg.member.as_ref().map_or("", |m| m.endpoint.as_str());
    match follower.ask("POST", &path, authority, call.headers, body).await {
        Ok(Answer::Picked { endpoints, session }) => {
            let order: Vec<usize> = endpoints
                .iter()
                .filter_map(|e| members.iter().find(|b| b.cfg.member.as_ref().is_some_and(|m| &m.endpoint == e)))
                .map(|b| b.id)
                .collect();
            if order.is_empty() {
                metrics.followed(&pool, "unknown_endpoint");
                return failed(format!("it picked {endpoints:?}, none a member of the pool"));
            }
            metrics.followed(&pool, "followed");
            Ok(Some(Following { pool, order, session: Some(session) }))
        }
        Ok(Answer::Refused { status, .. }) => {
            metrics.followed(&pool, "refused");
            Err(match status {
                429 => GatewayError::Overloaded { model: model.clone(), retry_after_secs: 1 },
                _ => GatewayError::NoHealthyBackend { model: model.clone() },
            })
        }
        Err(e) => failed(e.0),
    }
}

/// The path and body the pool's engines are sent (OpenAI-compatible): the client's own for
/// OpenAI requests, the translation for chat requests of other APIs.
fn as_sent(call: &Call<'_>, exchange: &mut Exchange) -> (String, Bytes) {
    match call.endpoint {
        Endpoint::Messages
        | Endpoint::Responses
        | Endpoint::OllamaChat
        | Endpoint::GeminiGenerate
        | Endpoint::GeminiStream => {
            let body = exchange.bodies.encode(Wire::OpenAiChat).unwrap_or_else(|_| exchange.routed.body.clone());
            ("/v1/chat/completions".to_owned(), body)
        }
        other => (format!("/v1{}", other.spec().path.unwrap_or("/chat/completions")), exchange.routed.body.clone()),
    }
}

impl Following {
    /// Tell the picker which endpoint answered, with its status.
    pub fn served(&mut self, backend: &Backend, status: u16, metrics: &crate::metrics::Metrics) {
        let Some(endpoint) = backend.cfg.member.as_ref().map(|m| m.endpoint.as_str()) else { return };
        if let Some(session) = self.session.take() {
            metrics.epp.served(&self.pool, endpoint);
            session.served(endpoint, status);
        }
    }
}
