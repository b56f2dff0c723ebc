//! Policies as code (issue 58), the parts both model requests (`proxy/policy.rs`) and MCP tool
//! calls (`mcp.rs`) use: the rule sets that apply to a caller, in order (the organisation's, the
//! key's team's, the key's), and the caller's attributes (`key.*`, `team.*`, `user.*`,
//! `jwt.claims`, `source.ip`, `request.headers`, `time.*`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use http::HeaderMap;
use switchyard_policy::{Phase, RuleSet, Value, Values};

use crate::app::App;
use crate::auth::Identity;

/// Headers a rule never reads: credentials.
const UNREAD_HEADERS: [&str; 5] = ["authorization", "x-api-key", "api-key", "x-goog-api-key", "cookie"];

/// The rule sets that apply to `identity`'s requests, in order.
pub fn levels<'a>(app: &'a App, identity: &'a Identity) -> Vec<&'a RuleSet> {
    let key = identity.key();
    let team = key.and_then(|k| k.owners.team.as_ref()).and_then(|t| t.policies.as_deref());
    [Some(&*app.config.policies), team, key.and_then(|k| k.policies.as_deref())].into_iter().flatten().collect()
}

/// The caller's attributes and the request's headers, at `now_ms`.
pub fn caller_values(identity: &Identity, headers: &HeaderMap, peer: Option<SocketAddr>, now_ms: i64) -> Values {
    let mut v = Values::default();
    let headers: HashMap<String, Value> = headers
        .iter()
        .filter(|(name, _)| !UNREAD_HEADERS.contains(&name.as_str()))
        .map(|(name, value)| (name.as_str().to_owned(), String::from_utf8_lossy(value.as_bytes()).into_owned().into()))
        .collect();
    v.set("request.headers", headers).set_time(now_ms);
    if let Some(peer) = peer {
        v.set("source.ip", peer.ip().to_string());
    }
    if let Some(key) = identity.key() {
        let tags: Vec<Value> = key.tags.iter().map(|t| Value::from(t.as_str())).collect();
        v.set("key.id", key.id.clone()).set("key.tags", tags);
        if let Some(name) = &key.name {
            v.set("key.name", name.clone());
        }
        if let Some(team) = key.team_name() {
            v.set("key.team", team.to_owned());
        }
        if let Some(user) = key.user_name() {
            v.set("key.user", user.to_owned());
        }
    }
    if let Some(team) = identity.team() {
        v.set("team.name", team.to_owned());
    }
    if let Some(user) = identity.user() {
        v.set("user.email", user.to_owned());
    }
    if let Some(claims) = identity.subject.as_ref().and_then(|s| s.claims.as_deref()) {
        v.set_json("jwt.claims", claims);
    }
    v
}

/// The rules on `identity`'s MCP tool calls over this request (`mcp.server`, `mcp.tool`,
/// `mcp.arguments` with the caller's attributes); None without any.
pub fn on_tool_calls(
    app: &App,
    identity: &Identity,
    headers: &HeaderMap,
    peer: Option<SocketAddr>,
) -> Option<switchyard_mcp::SharedPolicy> {
    let levels = levels(app, identity);
    if !levels.iter().any(|l| l.any_in(Phase::Mcp)) {
        return None;
    }
    let sets: Vec<RuleSet> = levels.into_iter().cloned().collect();
    let caller = caller_values(identity, headers, peer, app.clock.unix_ms());
    let metrics = app.metrics.clone();
    Some(Arc::new(move |server: &str, tool: &str, arguments: &serde_json::Value| {
        let mut values = caller.clone();
        values.set("mcp.server", server.to_owned()).set("mcp.tool", tool.to_owned());
        values.set_json("mcp.arguments", &arguments.to_string());
        let levels: Vec<&RuleSet> = sets.iter().collect();
        let decision = switchyard_policy::decide(&levels, Phase::Mcp, &values.bind());
        for error in &decision.errors {
            metrics.count_policy("", "error");
            tracing::warn!(error = %error, "a policy condition could not be evaluated: it did not hold");
        }
        match decision.denied() {
            Some((rule, message)) => {
                metrics.count_policy(rule, "deny");
                Err((rule.to_owned(), message.to_owned()))
            }
            None => {
                if let Some(rule) = &decision.decided {
                    metrics.count_policy(&rule.name, "allow");
                }
                Ok(())
            }
        }
    }))
}
