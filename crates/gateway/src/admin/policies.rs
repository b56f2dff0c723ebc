//! Policies on the admin API (issue 58). The organisation's own rules are written here —
//! `POST /admin/policies`, `PUT`/`DELETE /admin/policies/{name}` (administrators; audited; stored,
//! so every instance of a fleet applies them within a second) — after the configuration's, which
//! are read-only here. A team's and a key's rules (`policies` on `POST/PATCH /admin/teams` and
//! `/admin/keys`) are checked as the configuration's are — every expression type-checked for its
//! phase, quotas and route targets known — and may only narrow the rules above them: each error a
//! 400 naming the rule and where, and an organisation rule that an existing team or key rule
//! would widen is refused (409) naming both. `GET /admin/policies` lists every level's rules.

use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Response, StatusCode};
use serde_json::{json, Value};
use switchyard_policy::{RawRule, RuleSet};

use super::access::Operator;
use super::{audit, bad};
use crate::app::App;
use crate::error::GatewayError;
use crate::http::{json_value, GatewayBody};
use crate::org_rules;
use crate::records::OwnRules;
use crate::store::{Store, StoredPolicy};

/// `raw` checked as a team's or key's rules under `above` (the levels evaluated before them).
pub(super) fn checked(app: &App, raw: Vec<RawRule>, above: &[&RuleSet]) -> Result<OwnRules, GatewayError> {
    let config = &app.config;
    let compiled = crate::config::policies::compile(raw.clone(), &config.quotas, &config.backends, &config.aliases)
        .map_err(|e| bad(rule_message(&e), Some("policies")))?;
    for level in above {
        level.narrowed_by(&compiled).map_err(|e| bad(rule_message(&e), Some("policies")))?;
    }
    Ok(OwnRules { raw, compiled: (!compiled.is_empty()).then(|| Arc::new(compiled)) })
}

fn rule_message(e: &switchyard_policy::RuleError) -> String {
    e.to_string()
}

const PREFIX: &str = "/admin/policies";

fn internal(e: impl std::fmt::Display) -> GatewayError {
    tracing::error!(error = %e, "policies: store error");
    GatewayError::Internal
}

/// The answer for an `/admin/policies` route; None for any other route.
pub(super) async fn handle(
    app: &Arc<App>,
    op: &Operator,
    store: &Store,
    method: &Method,
    path: &str,
    body: &Bytes,
) -> Option<Result<Response<GatewayBody>, GatewayError>> {
    let rest = path.strip_prefix(PREFIX)?;
    if !(rest.is_empty() || rest.starts_with('/')) {
        return None;
    }
    let name = rest.trim_start_matches('/');
    Some(match (method, name) {
        (&Method::GET, "") => list(app, store).await,
        (&Method::POST, "") => put(app, op, store, None, body).await,
        (_, "") => Err(GatewayError::MethodNotAllowed),
        (_, name) if name.contains('/') => Err(GatewayError::RouteNotFound),
        (&Method::GET, name) => one(app, store, name).await,
        (&Method::PUT, name) => put(app, op, store, Some(name), body).await,
        (&Method::DELETE, name) => delete(app, op, store, name).await,
        _ => Err(GatewayError::MethodNotAllowed),
    })
}

/// A rule of the organisation as the API shows it: the rule, where it comes from, and for a
/// stored one its position and history.
fn shown(raw: &RawRule, stored: Option<&StoredPolicy>) -> Value {
    let mut v = serde_json::to_value(raw).unwrap_or_default();
    if let Value::Object(fields) = &mut v {
        fields.insert("source".to_owned(), json!(if stored.is_some() { "api" } else { "config" }));
        if let Some(s) = stored {
            fields.insert("position".to_owned(), json!(s.position));
            fields.insert("created_by".to_owned(), json!(s.created_by));
            fields.insert("created_ms".to_owned(), json!(s.created_ms));
            fields.insert("updated_ms".to_owned(), json!(s.updated_ms));
        }
    }
    v
}

/// The organisation's rules in the order they are evaluated (the configuration's, then the
/// stored ones that apply), each as shown.
fn organisation(app: &App, stored: &[StoredPolicy]) -> Vec<Value> {
    let rules = app.organisation.rules();
    rules
        .rules
        .iter()
        .map(|r| shown(&r.raw, stored.iter().find(|s| s.name == r.name && !configured(app, &r.name))))
        .collect()
}

fn configured(app: &App, name: &str) -> bool {
    app.config.policies.rules.iter().any(|r| r.name == name)
}

/// `GET /admin/policies`: the organisation's rules, then each team's and key's, in the order they
/// are evaluated, and the quotas.
async fn list(app: &App, store: &Store) -> Result<Response<GatewayBody>, GatewayError> {
    let stored = store.list_policies().await.map_err(internal)?;
    let teams: Vec<Value> = store
        .list_teams()
        .await
        .map_err(internal)?
        .iter()
        .filter(|t| !t.policies.is_empty())
        .map(|t| json!({"id": t.id, "name": t.name, "policies": t.policies.raw}))
        .collect();
    let keys: Vec<Value> = store
        .list_keys()
        .await
        .map_err(internal)?
        .iter()
        .filter(|k| !k.policies.is_empty())
        .map(|k| json!({"id": k.id, "name": k.name, "policies": k.policies.raw}))
        .collect();
    let quotas: serde_json::Map<String, Value> = app
        .config
        .quotas
        .iter()
        .map(|(name, q)| (name.clone(), json!({"limit": q.limit, "period_seconds": q.period.as_secs()})))
        .collect();
    let body = json!({"organisation": organisation(app, &stored), "teams": teams, "keys": keys, "quotas": quotas});
    Ok(json_value(StatusCode::OK, &body))
}

/// `GET /admin/policies/{name}`: one of the organisation's rules.
async fn one(app: &App, store: &Store, name: &str) -> Result<Response<GatewayBody>, GatewayError> {
    let stored = store.list_policies().await.map_err(internal)?;
    let found = organisation(app, &stored).into_iter().find(|r| r["name"] == name);
    let found = found.or_else(|| {
        // A stored rule that does not apply under this configuration is still shown, saying so.
        let s = stored.iter().find(|s| s.name == name)?;
        let raw = org_rules::raw(s).ok()?;
        let mut v = shown(&raw, Some(s));
        v["applies"] = json!(false);
        Some(v)
    });
    let found = found.ok_or_else(|| GatewayError::NotFound { message: format!("no policy rule `{name}`") })?;
    Ok(json_value(StatusCode::OK, &found))
}

/// The rule a `POST` or `PUT` body gives (its name the path's for a `PUT`), and its position if given.
fn parse_rule(named: Option<&str>, body: &Bytes) -> Result<(RawRule, Option<i64>), GatewayError> {
    let mut fields: serde_json::Map<String, Value> =
        serde_json::from_slice(body).map_err(|e| bad(format!("the body must be a JSON object: {e}"), None))?;
    let position = match fields.remove("position") {
        None | Some(Value::Null) => None,
        Some(p) => Some(p.as_i64().ok_or_else(|| bad("`position` is an integer", Some("position")))?),
    };
    match (named, fields.get("name")) {
        (Some(path), Some(Value::String(body))) if path != body => {
            return Err(bad(format!("the body names `{body}`, the path `{path}`"), Some("name")))
        }
        (Some(path), None) => drop(fields.insert("name".to_owned(), json!(path))),
        (None, None) => return Err(bad("a rule needs a `name`", Some("name"))),
        _ => {}
    }
    let raw: RawRule =
        serde_json::from_value(Value::Object(fields)).map_err(|e| bad(format!("invalid rule: {e}"), None))?;
    Ok((raw, position))
}

/// Create (`POST`, the name in the body) or replace (`PUT`) one of the organisation's rules:
/// checked as the configuration's are, and refused where a team's or key's rule would widen the
/// organisation's rules as they would be.
async fn put(
    app: &Arc<App>,
    op: &Operator,
    store: &Store,
    named: Option<&str>,
    body: &Bytes,
) -> Result<Response<GatewayBody>, GatewayError> {
    let (raw, position) = parse_rule(named, body)?;
    let name = raw.name.clone();
    if configured(app, &name) {
        return Err(GatewayError::Conflict {
            message: format!("policy rule `{name}` is in the configuration file; change it there"),
        });
    }
    org_rules::compile(&app.config, vec![raw.clone()]).map_err(|e| bad(e.to_string(), Some("policies")))?;
    let mut stored = store.list_policies().await.map_err(internal)?;
    let before = stored.iter().position(|s| s.name == name).map(|i| stored.remove(i));
    if named.is_none() && before.is_some() {
        return Err(GatewayError::Conflict { message: format!("policy rule `{name}` exists") });
    }
    let now = app.clock.unix_ms();
    let last = stored.iter().map(|s| s.position).max();
    let row = StoredPolicy {
        name: name.clone(),
        position: position.or(before.as_ref().map(|b| b.position)).unwrap_or(last.map_or(0, |p| p + 1)),
        spec: serde_json::to_string(&raw).map_err(internal)?,
        created_by: before.as_ref().map_or(Some(op.actor.name.clone()), |b| b.created_by.clone()),
        created_ms: before.as_ref().map_or(now, |b| b.created_ms),
        updated_ms: now,
    };
    stored.push(row.clone());
    stored.sort_by(|a, b| (a.position, &a.name).cmp(&(b.position, &b.name)));
    let (rules, _) = org_rules::combined(&app.config, &stored);
    still_narrowed(store, &rules).await?;
    store.put_policy(&row).await.map_err(internal)?;
    let earlier = before.as_ref().and_then(|b| org_rules::raw(b).ok()).map(|r| json!(r));
    let action = if before.is_some() { "policy.update" } else { "policy.create" };
    audit::record(app, &op.actor, action, &name, earlier.as_ref(), Some(&json!(raw))).await;
    org_rules::refresh(&app.organisation, &app.config, store).await.map_err(internal)?;
    let status = if before.is_some() { StatusCode::OK } else { StatusCode::CREATED };
    Ok(json_value(status, &shown(&raw, Some(&row))))
}

/// Every team's and key's rules still only narrow `organisation` (the rules a change would make).
async fn still_narrowed(store: &Store, organisation: &RuleSet) -> Result<(), GatewayError> {
    let conflict = |whose: String, e: switchyard_policy::RuleError| GatewayError::Conflict {
        message: format!("{whose} would widen the organisation's rules: {e}; change it first"),
    };
    for team in store.list_teams().await.map_err(internal)? {
        if let Some(rules) = team.policies.as_deref() {
            organisation.narrowed_by(rules).map_err(|e| conflict(format!("team `{}`'s rules", team.name), e))?;
        }
    }
    for key in store.list_keys().await.map_err(internal)? {
        if let Some(rules) = key.policies.as_deref() {
            let whose = format!("key `{}`'s rules", key.name.as_deref().unwrap_or(&key.id));
            organisation.narrowed_by(rules).map_err(|e| conflict(whose, e))?;
        }
    }
    Ok(())
}

/// `DELETE /admin/policies/{name}`: a stored rule removed (a deletion only ever widens what the
/// organisation allows, so nothing below it needs checking again).
async fn delete(
    app: &Arc<App>,
    op: &Operator,
    store: &Store,
    name: &str,
) -> Result<Response<GatewayBody>, GatewayError> {
    if configured(app, name) {
        return Err(GatewayError::Conflict {
            message: format!("policy rule `{name}` is in the configuration file; remove it there"),
        });
    }
    let stored = store.list_policies().await.map_err(internal)?;
    let before = stored.iter().find(|s| s.name == name);
    let before = before.ok_or_else(|| GatewayError::NotFound { message: format!("no policy rule `{name}`") })?;
    store.delete_policy(name).await.map_err(internal)?;
    let earlier = org_rules::raw(before).ok().map(|r| json!(r));
    audit::record(app, &op.actor, "policy.delete", name, earlier.as_ref(), None).await;
    org_rules::refresh(&app.organisation, &app.config, store).await.map_err(internal)?;
    Ok(json_value(StatusCode::OK, &json!({"name": name, "deleted": true})))
}

/// Check a key's rules (as `apply` set them) under the organisation's and its team's.
pub(super) async fn check_key(
    app: &App,
    store: &Store,
    key: &mut crate::records::KeyRecord,
) -> Result<(), GatewayError> {
    if key.policies.is_empty() {
        return Ok(());
    }
    let team = match &key.team_id {
        Some(id) => store.get_team(id).await.map_err(|_| GatewayError::Internal)?,
        None => None,
    };
    let organisation = app.organisation.rules();
    let mut above = vec![&*organisation];
    if let Some(rules) = team.as_ref().and_then(|t| t.policies.as_deref()) {
        above.push(rules);
    }
    key.policies = checked(app, std::mem::take(&mut key.policies.raw), &above)?;
    Ok(())
}

/// Check a team's rules (as `apply_team` set them) under the organisation's.
pub(super) fn check_team(app: &App, team: &mut crate::records::TeamRecord) -> Result<(), GatewayError> {
    if team.policies.is_empty() {
        return Ok(());
    }
    let organisation = app.organisation.rules();
    team.policies = checked(app, std::mem::take(&mut team.policies.raw), &[&organisation])?;
    Ok(())
}
