//! Policies on the admin API (issue 58): a team's and a key's own rules (`policies` on
//! `POST/PATCH /admin/teams` and `/admin/keys`) are checked as the configuration's are — every
//! expression type-checked for its phase, quotas and route targets known — and may only narrow
//! the rules above them (the organisation's; for a key also its team's): each error a 400 naming
//! the rule and where. `GET /admin/policies` lists every level's rules.

use std::sync::Arc;

use http::{Method, Response, StatusCode};
use serde_json::{json, Value};
use switchyard_policy::{RawRule, RuleSet};

use super::bad;
use crate::app::App;
use crate::error::GatewayError;
use crate::http::{json_value, GatewayBody};
use crate::records::OwnRules;
use crate::store::Store;

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

/// `GET /admin/policies`: the organisation's rules (the configuration's), then each team's and
/// key's, in the order they are evaluated.
pub(super) async fn handle(
    app: &Arc<App>,
    store: &Store,
    method: &Method,
) -> Result<Response<GatewayBody>, GatewayError> {
    if *method != Method::GET {
        return Err(GatewayError::MethodNotAllowed);
    }
    let internal = |e: crate::store::StoreError| {
        tracing::warn!(error = %e, "could not list policies");
        GatewayError::Internal
    };
    let organisation: Vec<&RawRule> = app.config.policies.rules.iter().map(|r| &r.raw).collect();
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
    let body = json!({"organisation": organisation, "teams": teams, "keys": keys, "quotas": quotas});
    Ok(json_value(StatusCode::OK, &body))
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
    let mut above = vec![&*app.config.policies];
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
    team.policies = checked(app, std::mem::take(&mut team.policies.raw), &[&app.config.policies])?;
    Ok(())
}
