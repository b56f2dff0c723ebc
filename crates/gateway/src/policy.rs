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

/// Whether any rule applies to `identity` at all: the check a gateway without rules pays.
pub fn any(app: &App, identity: &Identity) -> bool {
    let own = |k: &crate::records::KeyRecord| {
        !k.policies.is_empty() || k.owners.team.as_ref().is_some_and(|t| !t.policies.is_empty())
    };
    !app.organisation.is_empty() || identity.key().is_some_and(own)
}

/// The rule sets that apply to `identity`'s requests, in order: the organisation's (`organisation`,
/// `App::organisation`'s now), the key's team's, the key's.
pub fn levels<'a>(organisation: &'a RuleSet, identity: &'a Identity) -> Vec<&'a RuleSet> {
    let key = identity.key();
    let team = key.and_then(|k| k.owners.team.as_ref()).and_then(|t| t.policies.as_deref());
    [Some(organisation), team, key.and_then(|k| k.policies.as_deref())].into_iter().flatten().collect()
}

/// Whether any of `levels` reads `attribute` (or, ending in `.`, any under it).
pub fn reads(levels: &[&RuleSet], attribute: &str) -> bool {
    levels.iter().any(|l| l.reads_any(attribute))
}

/// The caller's attributes and the request's headers at `now_ms`, those `levels` read (the
/// headers' map and the time are made only for rules that read them).
pub fn caller_values(
    levels: &[&RuleSet],
    identity: &Identity,
    headers: &HeaderMap,
    peer: Option<SocketAddr>,
    now_ms: i64,
) -> Values {
    let mut v = Values::default();
    if reads(levels, "request.headers") {
        let headers: HashMap<String, Value> = headers
            .iter()
            .filter(|(name, _)| !UNREAD_HEADERS.contains(&name.as_str()))
            .map(|(name, value)| {
                (name.as_str().to_owned(), String::from_utf8_lossy(value.as_bytes()).into_owned().into())
            })
            .collect();
        v.set("request.headers", headers);
    }
    if reads(levels, "time.") {
        v.set_time(now_ms);
    }
    if let Some(peer) = peer.filter(|_| reads(levels, "source.")) {
        v.set("source.ip", peer.ip().to_string());
    }
    if let Some(key) = identity.key().filter(|_| reads(levels, "key.")) {
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
    let claims = identity.subject.as_ref().and_then(|s| s.claims.as_deref()).filter(|_| reads(levels, "jwt."));
    if let Some(claims) = claims {
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
    if !any(app, identity) {
        return None;
    }
    let organisation = app.organisation.rules();
    let levels = levels(&organisation, identity);
    if !levels.iter().any(|l| l.any_in(Phase::Mcp)) {
        return None;
    }
    let caller = caller_values(&levels, identity, headers, peer, app.clock.unix_ms());
    let sets: Vec<RuleSet> = levels.into_iter().cloned().collect();
    let metrics = app.metrics.clone();
    Some(Arc::new(move |server: &str, tool: &str, arguments: &serde_json::Value| {
        let mut values = caller.clone();
        values.set("mcp.server", server.to_owned()).set("mcp.tool", tool.to_owned());
        values.set_json("mcp.arguments", &arguments.to_string());
        let levels: Vec<&RuleSet> = sets.iter().collect();
        let bound = values.bind();
        let decision = switchyard_policy::decide(&levels, Phase::Mcp, &bound);
        for rule in &decision.unevaluated {
            metrics.count_policy(&rule.name, "unevaluated");
            tracing::debug!(error = %switchyard_policy::decide::explain(rule, &bound), "a policy rule did not apply");
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
