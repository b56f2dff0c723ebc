//! `/admin/experiments`: experiments made, changed and removed through the API (team admins for
//! their teams; the configuration's are read-only here), and each one's results.

use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Response, StatusCode};
use serde_json::{json, Value};
use switchyard_experiments::RawExperiment;

use super::access::Operator;
use super::audit;
use crate::app::App;
use crate::error::GatewayError;
use crate::experiments::{Live, Source};
use crate::http::{json_value, GatewayBody};
use crate::store::{Store, StoredExperiment};

const PREFIX: &str = "/admin/experiments";

fn bad(message: impl Into<String>, param: Option<&'static str>) -> GatewayError {
    GatewayError::bad_request(message, param)
}

fn internal(e: impl std::fmt::Display) -> GatewayError {
    tracing::error!(error = %e, "experiments: store error");
    GatewayError::Internal
}

/// The answer for an `/admin/experiments` route; None for any other route.
pub async fn handle(
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
    let rest = rest.trim_start_matches('/');
    let (name, tail) = rest.split_once('/').unwrap_or((rest, ""));
    Some(match (method, name, tail) {
        (&Method::GET, "", "") => Ok(list(app, op)),
        (&Method::POST, "", "") => put(app, op, store, None, body).await,
        (&Method::GET, name, "") => results(app, op, store, name).await,
        (&Method::PUT, name, "") => put(app, op, store, Some(name), body).await,
        (&Method::DELETE, name, "") => delete(app, op, store, name).await,
        (&Method::GET, name, "pairs") => pairs(app, op, store, name).await,
        (_, _, "" | "pairs") => Err(GatewayError::MethodNotAllowed),
        _ => Err(GatewayError::RouteNotFound),
    })
}

fn summary(live: &Live) -> Value {
    let spec = &live.spec;
    let state = live.state();
    let variants: Vec<Value> = spec
        .variants
        .iter()
        .enumerate()
        .map(|(i, v)| json!({"name": v.name, "model": v.model, "weight": v.share * 100.0, "share": state.shares[i], "stopped": state.stopped[i]}))
        .collect();
    json!({
        "name": spec.name, "source": live.source, "model": spec.model, "team": spec.team, "unit": spec.unit,
        "allocation": spec.allocation, "variants": variants, "shadow": spec.shadow, "metrics": spec.metrics,
        "winner": state.winner.map(|w| spec.variants[w].name.clone()), "shadow_stopped": state.shadow_stopped,
    })
}

fn visible(app: &App, op: &Operator, name: &str) -> Result<Arc<Live>, GatewayError> {
    let live = app.experiments.get(name).filter(|l| op.sees_team_named(l.spec.team.as_deref()));
    live.ok_or_else(|| GatewayError::NotFound { message: format!("no experiment `{name}`") })
}

fn list(app: &App, op: &Operator) -> Response<GatewayBody> {
    let data: Vec<Value> = app
        .experiments
        .all()
        .iter()
        .filter(|l| op.sees_team_named(l.spec.team.as_deref()))
        .map(|l| summary(l))
        .collect();
    json_value(StatusCode::OK, &json!({"object": "list", "data": data}))
}

async fn results(app: &App, op: &Operator, store: &Store, name: &str) -> Result<Response<GatewayBody>, GatewayError> {
    let live = visible(app, op, name)?;
    let results = crate::experiments::results::results(store, &live).await.map_err(internal)?;
    Ok(json_value(StatusCode::OK, &results))
}

async fn pairs(app: &App, op: &Operator, store: &Store, name: &str) -> Result<Response<GatewayBody>, GatewayError> {
    visible(app, op, name)?;
    let rows = store.pairs(name, 100).await.map_err(internal)?;
    Ok(json_value(StatusCode::OK, &json!({"object": "list", "data": rows})))
}

/// Create (POST, the name in the body) or replace (PUT): checked as the configuration's are,
/// and a team admin's only for a team they administer, with models the team may use.
async fn put(
    app: &Arc<App>,
    op: &Operator,
    store: &Store,
    named: Option<&str>,
    body: &Bytes,
) -> Result<Response<GatewayBody>, GatewayError> {
    let mut fields: serde_json::Map<String, Value> =
        serde_json::from_slice(body).map_err(|e| bad(format!("the body must be a JSON object: {e}"), None))?;
    let name = match (named, fields.remove("name")) {
        (Some(name), _) => name.to_owned(),
        (None, Some(Value::String(name))) => name,
        (None, _) => return Err(bad("an experiment needs a `name`", Some("name"))),
    };
    let raw: RawExperiment =
        serde_json::from_value(Value::Object(fields)).map_err(|e| bad(format!("invalid experiment: {e}"), None))?;
    let known = |m: &str| crate::config::model_known(&app.config.backends, &app.config.aliases, m);
    let checked = raw.clone().check(&name, &known).map_err(|e| bad(e.to_string(), None))?;
    let existing = app.experiments.get(&name);
    if existing.as_ref().is_some_and(|l| l.source == Source::Config) {
        return Err(GatewayError::Conflict {
            message: format!("experiment `{name}` is in the configuration file; change it there"),
        });
    }
    if named.is_none() && existing.is_some() {
        return Err(GatewayError::Conflict { message: format!("experiment `{name}` exists") });
    }
    team_may(op, store, &checked).await?;
    let now = app.clock.unix_ms();
    let spec = serde_json::to_string(&raw).map_err(internal)?;
    let row = StoredExperiment {
        name: name.clone(),
        team: raw.team.clone(),
        spec,
        created_by: Some(op.actor.name.clone()),
        created_ms: now,
        updated_ms: now,
    };
    store.put_experiment(&row).await.map_err(internal)?;
    let after = json!({"name": name, "spec": raw});
    let action = if named.is_some() { "experiment.update" } else { "experiment.create" };
    audit::record(app, &op.actor, action, &name, None, Some(&after)).await;
    crate::experiments::refresh::load_api(&app.experiments, store, &app.config).await.map_err(internal)?;
    let live = app.experiments.get(&name).ok_or(GatewayError::Internal)?;
    let status = if named.is_some() { StatusCode::OK } else { StatusCode::CREATED };
    Ok(json_value(status, &summary(&live)))
}

/// An experiment for a team uses only models the team may use (whoever makes it), and a scoped
/// operator (a team admin) manages only experiments of teams they administer.
async fn team_may(op: &Operator, store: &Store, e: &switchyard_experiments::Experiment) -> Result<(), GatewayError> {
    let forbidden = |message: String| GatewayError::Forbidden { message, code: "forbidden" };
    let Some(team) = e.team.as_deref() else {
        return match op.is_admin() {
            true => Ok(()),
            false => Err(forbidden("a team admin's experiment names a `team` they administer".to_owned())),
        };
    };
    if !op.admins_team_named(team) {
        return Err(forbidden(format!("only an administrator of team `{team}` manages its experiments")));
    }
    let record = store.team_by_name(team).await.map_err(internal)?;
    let record = record.ok_or_else(|| bad(format!("experiments.{}.team: no team `{team}`", e.name), Some("team")))?;
    let allowed = |m: &str| record.models.is_empty() || crate::glob::any(&record.models, m);
    let models = e.variants.iter().map(|v| (format!("variants.{}.model", v.name), &v.model));
    let shadow = e.shadow.iter().map(|s| ("shadow.model".to_owned(), &s.model));
    for (field, model) in models.chain(shadow) {
        if !allowed(model) {
            return Err(bad(format!("experiments.{}.{field}: team `{team}` may not use `{model}`", e.name), None));
        }
    }
    Ok(())
}

async fn delete(
    app: &Arc<App>,
    op: &Operator,
    store: &Store,
    name: &str,
) -> Result<Response<GatewayBody>, GatewayError> {
    // Not `visible`: a team admin is told they may not remove another team's (403).
    let live = app
        .experiments
        .get(name)
        .ok_or_else(|| GatewayError::NotFound { message: format!("no experiment `{name}`") })?;
    if live.source == Source::Config {
        return Err(GatewayError::Conflict {
            message: format!("experiment `{name}` is in the configuration file; remove it there"),
        });
    }
    team_may(op, store, &live.spec).await?;
    store.delete_experiment(name).await.map_err(internal)?;
    audit::record(app, &op.actor, "experiment.delete", name, Some(&json!({"spec": live.spec.raw})), None).await;
    crate::experiments::refresh::load_api(&app.experiments, store, &app.config).await.map_err(internal)?;
    Ok(json_value(StatusCode::OK, &json!({"name": name, "deleted": true})))
}
