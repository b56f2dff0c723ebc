//! `/a2a`, `/a2a/{agent}/…`: A2A agents behind the gateway (issue 59), keyed, limited, guarded
//! and recorded like models and tools. `/a2a` lists the agents a key may call;
//! `/a2a/{agent}/.well-known/agent-card.json` is the agent's card with the gateway's addresses in
//! it; `POST /a2a/{agent}/` is its JSON-RPC endpoint, and any other path under it the REST
//! binding's. Each call is recognised as its method (`switchyard-a2a`), allowed by the key's
//! `agents` globs, counted against the agent's, the key's and the team's rpm, its message's text
//! parts put through the guardrails on tool calls, and relayed (`a2a/relay.rs`) to the address
//! the agent's card gives — checked against `security.agent_hosts` when the card arrived. The
//! client's credentials stop here: the agent gets only its configured headers.

mod relay;

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{HeaderValue, Method as Verb, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::{json, Value};
use switchyard_a2a::{message_texts, replace_message_texts, Method};

use crate::agents::{Card, CardFailure};
use crate::app::App;
use crate::auth::Identity;
use crate::config::agents::AgentConfig;
use crate::error::GatewayError;
use crate::http::{json_value, parse::read_body, GatewayBody};
use crate::limit::{Limits, Refused};
use crate::records::KeyRecord;
use crate::telemetry::Tracing;

/// One call being relayed: who, to which agent, what.
pub(crate) struct Call<'a> {
    app: &'a App,
    agent: &'a Arc<AgentConfig>,
    key: Option<Arc<KeyRecord>>,
    /// None: a JSON-RPC method the gateway does not know (relayed for keys allowed the whole agent).
    method: Option<Method>,
    request_id: String,
    started: Instant,
    ts_ms: i64,
}

impl Call<'_> {
    fn method_name(&self) -> &'static str {
        self.method.map_or("other", Method::name)
    }
}

/// `path` is the request's path (`/a2a…`).
pub async fn handle(
    app: &App,
    req: Request<Incoming>,
    path: &str,
    request_id: &HeaderValue,
    trace: &mut Option<Tracing>,
) -> Result<Response<GatewayBody>, GatewayError> {
    let (parts, body) = req.into_parts();
    let identity = app.auth.authenticate(&parts.headers, app.clock.unix_secs()).await?;
    let base = crate::http::base_url(app.config.tls.is_some(), &parts.headers);
    let rest = path.strip_prefix("/a2a").unwrap_or_default();
    if rest.is_empty() || rest == "/" {
        return match parts.method {
            Verb::GET => Ok(catalogue(app, &identity, &base)),
            _ => Err(GatewayError::MethodNotAllowed),
        };
    }
    let rest = rest.strip_prefix('/').ok_or(GatewayError::RouteNotFound)?;
    let (name, within) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
    let agent =
        app.config.agents.get(name).ok_or_else(|| GatewayError::NotFound { message: format!("no agent `{name}`") })?;
    let key = identity.key_record().cloned();
    let gateway = format!("{base}/a2a/{name}");
    if parts.method == Verb::GET && matches!(within, "/.well-known/agent-card.json" | "/.well-known/agent.json") {
        if !visible(key.as_deref(), name) {
            return Err(forbidden(name, None));
        }
        let card = card(app, agent).await?;
        let shown = card.for_client(&gateway, &app.config.agents.allowed).map_err(|e| refused_card(&e.to_string()))?;
        return Ok(json_value(StatusCode::OK, &shown));
    }
    let body = read_body(&parts.headers, body, app.config.max_body_bytes, app.config.timeouts.body_read).await?;
    let (method, route) = recognise(&parts.method, within, parts.uri.query(), &body)?;
    let call = Call {
        app,
        agent,
        key,
        method,
        request_id: request_id.to_str().unwrap_or_default().to_owned(),
        started: Instant::now(),
        ts_ms: app.clock.unix_ms(),
    };
    let result = admit(&call, &identity).await;
    let result = match result {
        Ok(()) => guarded(&call, body).await,
        Err(e) => Err(e),
    };
    let body = match result {
        Ok(body) => body,
        Err(e) => {
            relay::record(&call, e.status().as_u16(), &switchyard_a2a::TaskSeen::default(), 0);
            return Err(e);
        }
    };
    let card =
        card(app, agent).await.inspect_err(|e| relay::record(&call, e.status().as_u16(), &Default::default(), 0))?;
    let target = relay::Target { card: &card, route, gateway: &gateway };
    relay::forward(&call, target, (&parts.headers, body), trace).await
}

/// Where a call goes on the agent: JSON-RPC's endpoint, or a REST path (with its query).
pub(crate) enum Route {
    JsonRpc,
    Rest { verb: Verb, path_and_query: String },
}

/// The method a call is, and where it goes.
fn recognise(
    verb: &Verb,
    within: &str,
    query: Option<&str>,
    body: &Bytes,
) -> Result<(Option<Method>, Route), GatewayError> {
    if within.is_empty() || within == "/" {
        if *verb != Verb::POST {
            return Err(GatewayError::MethodNotAllowed);
        }
        let message: Value = serde_json::from_slice(body)
            .map_err(|e| GatewayError::bad_request(format!("the body is not a JSON-RPC request: {e}"), None))?;
        let method = message.get("method").and_then(Value::as_str);
        let method =
            method.ok_or_else(|| GatewayError::bad_request("a JSON-RPC request needs a `method`", Some("method")))?;
        return Ok((Method::from_jsonrpc(method), Route::JsonRpc));
    }
    let (method, _task) = Method::from_rest(verb, within).ok_or(GatewayError::RouteNotFound)?;
    let path_and_query = match query {
        Some(q) => format!("{within}?{q}"),
        None => within.to_owned(),
    };
    Ok((Some(method), Route::Rest { verb: verb.clone(), path_and_query }))
}

/// Whether a key may see an agent at all (its card, the catalogue): a glob for the agent, or
/// for one of its methods.
fn visible(key: Option<&KeyRecord>, agent: &str) -> bool {
    let Some(globs) = key.and_then(|k| k.agents.as_ref()) else { return true };
    globs.iter().any(|g| {
        let agent_part = g.split_once('/').map_or(g.as_str(), |(a, _)| a);
        crate::glob::matches(agent_part, agent)
    })
}

fn forbidden(agent: &str, method: Option<&str>) -> GatewayError {
    let message = match method {
        Some(m) => format!("this key may not call `{m}` on agent `{agent}`"),
        None => format!("this key may not use agent `{agent}`"),
    };
    GatewayError::Forbidden { message, code: "agent_not_allowed" }
}

fn refused_card(why: &str) -> GatewayError {
    GatewayError::BadGateway { message: why.to_owned() }
}

async fn card(app: &App, agent: &Arc<AgentConfig>) -> Result<Arc<Card>, GatewayError> {
    app.agent_cards.card(agent, &app.client, &app.config.agents.allowed).await.map_err(|e| match e {
        CardFailure::Refused(e) => refused_card(&e.to_string()),
        CardFailure::Unreachable(why) => GatewayError::BadGateway { message: format!("agent card: {why}") },
    })
}

/// The key may call this method, and the agent's, the key's and the team's rpm have room.
async fn admit(call: &Call<'_>, identity: &Identity) -> Result<(), GatewayError> {
    let name = &call.agent.name;
    if !identity.key().is_none_or(|k| match call.method {
        Some(m) => k.agent_permits(name, m.name()),
        None => k.agents.as_ref().is_none_or(|g| crate::glob::any(g, name)),
    }) {
        return Err(forbidden(name, Some(call.method_name())));
    }
    let rpm = |rpm: Option<u32>| Limits { rpm, tpm: None, max_parallel: None };
    let agent_id = format!("a2a:{name}");
    let mut levels: Vec<(&str, Limits, &str)> = Vec::with_capacity(3);
    if call.agent.rpm.is_some() {
        levels.push((&agent_id, rpm(call.agent.rpm), "agent"));
    }
    if let Some(k) = identity.key().filter(|k| k.rpm.is_some()) {
        levels.push((&k.id, rpm(k.rpm), "key"));
    }
    if let Some(team) = identity.key().and_then(|k| k.owners.team.as_deref()).filter(|t| t.limits.rpm.is_some()) {
        levels.push((&team.id, rpm(team.limits.rpm), "team"));
    }
    if levels.is_empty() {
        return Ok(());
    }
    let ids: Vec<(&str, Limits)> = levels.iter().map(|(id, l, _)| (*id, *l)).collect();
    let deadline = std::time::Instant::now() + call.app.config.timeouts.connect;
    match call.app.limiter.acquire_levels(&ids, 0, deadline).await {
        Ok(permit) => {
            drop(permit);
            Ok(())
        }
        Err(Refused::Unavailable) => Err(GatewayError::LimitsUnavailable),
        Err(Refused::Limited(r)) => {
            let whose = levels.get(r.level).map_or("agent", |(_, _, w)| w);
            let secs = r.retry_after.as_secs_f64().ceil().max(1.0) as u64;
            Err(GatewayError::RateLimited {
                message: format!(
                    "rate limit reached: {} requests per minute for this {whose}; retry in {secs} s",
                    r.limit
                ),
                code: "rate_limit_exceeded",
                retry_after_secs: secs,
                headers: Box::new(r.snapshot.headers()),
            })
        }
    }
}

/// The guardrails on tool calls, on the text parts of a message sent: a block refuses the call;
/// masked text is put back in place (the body is written again only then).
async fn guarded(call: &Call<'_>, body: Bytes) -> Result<Bytes, GatewayError> {
    if !matches!(call.method, Some(Method::SendMessage | Method::SendStreamingMessage)) {
        return Ok(body);
    }
    let guard = match &call.key {
        Some(k) => {
            let team = k.owners.team.as_ref().map_or(&[][..], |t| &t.guardrails[..]);
            call.app.guards.tools_adding([&k.guardrails, team]).or_else(|| call.app.guards.tools())
        }
        None => call.app.guards.tools(),
    };
    let Some(guard) = guard else { return Ok(body) };
    let Ok(mut message) = serde_json::from_slice::<Value>(&body) else { return Ok(body) };
    let params = if message.get("params").is_some() { "/params" } else { "" };
    let Some(texts) = message.pointer(params).map(message_texts).filter(|t| !t.is_empty()) else { return Ok(body) };
    let json = serde_json::to_vec(&texts).map_err(|_| GatewayError::Internal)?;
    let deadline = std::time::Instant::now() + call.agent.timeout;
    let server = format!("a2a:{}", call.agent.name);
    let checked = guard.call(&server, call.method_name(), &json, deadline).await;
    let masked = checked.map_err(|reason| crate::guard::blocked("tool_call", &reason))?;
    let Some(masked) = masked else { return Ok(body) };
    let texts: Vec<String> = serde_json::from_slice(&masked).map_err(|_| GatewayError::Internal)?;
    if let Some(target) = message.pointer_mut(params) {
        replace_message_texts(target, &texts);
    }
    serde_json::to_vec(&message).map(Bytes::from).map_err(|_| GatewayError::Internal)
}

/// `GET /a2a`: the agents this key may call, with where each is on the gateway.
fn catalogue(app: &App, identity: &Identity, base: &str) -> Response<GatewayBody> {
    let data: Vec<Value> = app
        .config
        .agents
        .list
        .iter()
        .filter(|a| visible(identity.key(), &a.name))
        .map(|a| {
            json!({
                "name": a.name, "description": a.description,
                "url": format!("{base}/a2a/{}/", a.name),
                "card": format!("{base}/a2a/{}/.well-known/agent-card.json", a.name),
                "rpm": a.rpm,
            })
        })
        .collect();
    json_value(StatusCode::OK, &json!({"object": "list", "data": data}))
}
