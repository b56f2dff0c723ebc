//! The admin API under `/admin`: virtual keys (create, list, read, update, revoke), teams and
//! users (`admin/orgs.rs`) and usage reports (JSON or CSV), guarded by the master key.
//! Documented in `openapi.json` beside this file.

pub mod access;
pub mod audit;
pub mod audit_export;
mod experiments;
mod orgs;
mod policies;
pub mod role_table;

use std::sync::Arc;
use std::time::UNIX_EPOCH;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Response, StatusCode};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::app::App;
use crate::auth::key;
use crate::error::GatewayError;
use crate::http::{full, json_value, GatewayBody};
use crate::records::{KeyRecord, LevelLimits};
use crate::store::{Bucket, UsageQuery};

const OPENAPI: &str = include_str!("admin/openapi.json");

/// Fields a client may set on a key; every one optional (PATCH changes only those present).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyFields {
    name: Option<String>,
    models: Option<Vec<String>>,
    #[serde(default, deserialize_with = "nullable")]
    rpm: Option<Option<u32>>,
    #[serde(default, deserialize_with = "nullable")]
    tpm: Option<Option<u64>>,
    #[serde(default, deserialize_with = "nullable")]
    max_parallel: Option<Option<u32>>,
    #[serde(default, deserialize_with = "nullable")]
    budget_usd: Option<Option<f64>>,
    #[serde(default, deserialize_with = "nullable")]
    budget_period: Option<Option<String>>,
    expires_at: Option<String>,
    metadata: Option<Metadata>,
    /// MCP servers the key may use (globs); `null` = all.
    #[serde(default, deserialize_with = "nullable")]
    mcp_servers: Option<Option<Vec<String>>>,
    /// MCP tools the key may use (globs over `{server}__{tool}`); `null` = all.
    #[serde(default, deserialize_with = "nullable")]
    mcp_tools: Option<Option<Vec<String>>>,
    /// PATCH only: `true` revokes, `false` reinstates.
    revoked: Option<bool>,
    /// The team the key belongs to (`null` takes it out of its team).
    #[serde(default, deserialize_with = "nullable")]
    team_id: Option<Option<String>>,
    /// The user the key belongs to (`null` for none).
    #[serde(default, deserialize_with = "nullable")]
    user_id: Option<Option<String>>,
    /// Guards (names under `guardrails:`) the key's requests get on top of the configured ones.
    guardrails: Option<Vec<String>>,
    /// Backends (globs over names) the key may reach through `/passthrough/{backend}/...`.
    passthrough: Option<Vec<String>>,
    /// The key's own policy rules (checked by `policies::check_key`).
    policies: Option<Vec<switchyard_policy::RawRule>>,
    /// A2A agents the key may call (globs over `{agent}` or `{agent}/{Method}`); `null` = all.
    #[serde(default, deserialize_with = "nullable")]
    agents: Option<Option<Vec<String>>>,
}

/// A present field, `null` included (`Some(None)`), as opposed to an absent one (`None`).
fn nullable<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Metadata {
    user: Option<String>,
    team: Option<String>,
    tags: Option<Vec<String>>,
}

fn bad(message: impl Into<String>, param: Option<&'static str>) -> GatewayError {
    GatewayError::bad_request(message, param)
}

fn internal(e: impl std::fmt::Display) -> GatewayError {
    tracing::error!(error = %e, "admin storage operation failed");
    GatewayError::Internal
}

/// The public view of a key: everything but the hash.
fn key_json(k: &KeyRecord) -> Value {
    let ts = |t: Option<i64>| t.map(rfc3339);
    json!({
        "id": k.id, "name": k.name, "models": k.models, "rpm": k.rpm, "tpm": k.tpm, "max_parallel": k.max_parallel,
        "budget_usd": k.budget_usd, "budget_period": k.budget_period, "expires_at": ts(k.expires_at),
        "revoked_at": ts(k.revoked_at), "created_at": rfc3339(k.created_at),
        "metadata": {"user": k.user, "team": k.team, "tags": k.tags},
        "mcp_servers": k.mcp_servers, "mcp_tools": k.mcp_tools, "team_id": k.team_id, "user_id": k.user_id,
        "guardrails": k.guardrails, "passthrough": k.passthrough, "policies": k.policies.raw, "agents": k.agents,
    })
}

fn rfc3339(unix: i64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + std::time::Duration::from_secs(unix.max(0) as u64)).to_string()
}

fn parse_time(text: &str, param: &'static str) -> Result<i64, GatewayError> {
    let t = humantime::parse_rfc3339_weak(text)
        .map_err(|_| bad(format!("`{param}` must be an RFC 3339 time such as 2026-12-31T23:59:59Z"), Some(param)))?;
    Ok(t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64))
}

/// Apply `fields` onto `k`, validating each.
fn apply(k: &mut KeyRecord, f: KeyFields, now: i64) -> Result<(), GatewayError> {
    if let Some(v) = f.name {
        k.name = Some(v);
    }
    if let Some(v) = f.models {
        if v.iter().any(|m| m.is_empty()) {
            return Err(bad("`models` entries must not be empty", Some("models")));
        }
        k.models = v;
    }
    let mut limits = LevelLimits {
        rpm: k.rpm,
        tpm: k.tpm,
        max_parallel: k.max_parallel,
        budget_usd: k.budget_usd,
        budget_period: k.budget_period.take(),
    };
    let given = orgs::LimitFields {
        rpm: f.rpm,
        tpm: f.tpm,
        max_parallel: f.max_parallel,
        budget_usd: f.budget_usd,
        budget_period: f.budget_period,
    };
    let checked = given.apply(&mut limits);
    (k.rpm, k.tpm, k.max_parallel, k.budget_usd, k.budget_period) =
        (limits.rpm, limits.tpm, limits.max_parallel, limits.budget_usd, limits.budget_period);
    checked?;
    if let Some(team) = f.team_id {
        k.team_id = team;
    }
    if let Some(user) = f.user_id {
        k.user_id = user;
    }
    if let Some(guardrails) = f.guardrails {
        k.guardrails = guardrails;
    }
    if let Some(policies) = f.policies {
        k.policies = crate::records::OwnRules { raw: policies, compiled: None };
    }
    if let Some(passthrough) = f.passthrough {
        if passthrough.iter().any(|b| b.trim().is_empty()) {
            return Err(bad("`passthrough` entries must not be empty", Some("passthrough")));
        }
        k.passthrough = passthrough;
    }
    if let Some(t) = f.expires_at {
        k.expires_at = Some(parse_time(&t, "expires_at")?);
    }
    if let Some(m) = f.metadata {
        // `*` names the all-keys rows of the usage rollup.
        if m.user.as_deref() == Some(crate::store::ALL_KEYS) || m.team.as_deref() == Some(crate::store::ALL_KEYS) {
            return Err(bad("`metadata.user` and `metadata.team` cannot be `*`", Some("metadata")));
        }
        k.user = m.user.or(k.user.take());
        k.team = m.team.or(k.team.take());
        if let Some(tags) = m.tags {
            k.tags = tags;
        }
    }
    for (name, v, slot) in [
        ("mcp_servers", f.mcp_servers, &mut k.mcp_servers),
        ("mcp_tools", f.mcp_tools, &mut k.mcp_tools),
        ("agents", f.agents, &mut k.agents),
    ] {
        if let Some(v) = v {
            if v.as_ref().is_some_and(|globs| globs.iter().any(String::is_empty)) {
                return Err(bad(format!("`{name}` entries must not be empty"), None));
            }
            *slot = v;
        }
    }
    match f.revoked {
        Some(true) if k.revoked_at.is_none() => k.revoked_at = Some(now),
        Some(false) => k.revoked_at = None,
        _ => {}
    }
    Ok(())
}

fn parse_fields(body: &Bytes) -> Result<KeyFields, GatewayError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(KeyFields::default());
    }
    serde_json::from_slice(body).map_err(|e| bad(format!("invalid key fields: {e}"), None))
}

pub async fn handle(
    app: &Arc<App>,
    op: &access::Operator,
    method: &Method,
    path: &str,
    query: Option<&str>,
    body: Bytes,
) -> Result<Response<GatewayBody>, GatewayError> {
    op.check_route(method, path)?;
    let store = app.store.as_ref().ok_or(GatewayError::Internal)?;
    let now = app.clock.unix_secs();
    let actor = &op.actor;
    // Boxed: the organisations' handlers would otherwise grow every admin request's future.
    let orgs = orgs::handle(app, op, store, method, path.trim_end_matches('/'), &body, now);
    if let Some(answer) = Box::pin(orgs).await {
        return answer;
    }
    if let Some(answer) = Box::pin(experiments::handle(app, op, store, method, path.trim_end_matches('/'), &body)).await
    {
        return answer;
    }
    if let Some(answer) = Box::pin(policies::handle(app, op, store, method, path.trim_end_matches('/'), &body)).await {
        return answer;
    }
    match (method, path.trim_end_matches('/')) {
        (&Method::GET, "/admin/openapi.json") => {
            let mut resp = Response::new(full(Bytes::from_static(OPENAPI.as_bytes())));
            resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            Ok(resp)
        }
        (&Method::POST, "/admin/keys") => {
            let fields = parse_fields(&body)?;
            if fields.revoked.is_some() {
                return Err(bad("`revoked` can only be changed with PATCH", Some("revoked")));
            }
            let (id, secret, full_key) = key::generate().map_err(internal)?;
            let mut record = KeyRecord::new(id, app.auth.hasher().hash(&secret), now);
            apply(&mut record, fields, now)?;
            orgs::known_guardrails(app, &record.guardrails)?;
            op.own_new_key(&mut record);
            op.check_key(&record)?;
            owners_exist(store, &record).await?;
            policies::check_key(app, store, &mut record).await?;
            store.insert_key(&record).await.map_err(internal)?;
            let mut out = key_json(&record);
            audit::record(app, actor, "key.create", &record.id, None, Some(&out)).await;
            out["key"] = json!(full_key);
            Ok(json_value(StatusCode::CREATED, &out))
        }
        (&Method::GET, "/admin/keys") => {
            let keys = store.list_keys().await.map_err(internal)?;
            let seen: Vec<Value> = keys.iter().filter(|k| op.sees_key(k)).map(key_json).collect();
            Ok(json_value(StatusCode::OK, &json!({"object": "list", "data": seen})))
        }
        (&Method::GET, "/admin/usage") => usage(app, op, query).await,
        (&Method::GET, "/admin/audit") => audit::page(app, query).await,
        (&Method::POST, "/admin/reload") => {
            let answer = reload(app).await;
            let outcome = match &answer {
                Ok(_) => json!({"reloaded": true}),
                Err(e) => json!({"reloaded": false, "error": e.to_string()}),
            };
            audit::record(app, actor, "config.reload", "config", None, Some(&outcome)).await;
            answer
        }
        (m, p) if p.starts_with("/admin/keys/") => key_by_id(app, op, m, &p["/admin/keys/".len()..], &body, now).await,
        (_, "/admin/keys" | "/admin/usage" | "/admin/audit" | "/admin/openapi.json" | "/admin/reload") => {
            Err(GatewayError::MethodNotAllowed)
        }
        _ => Err(GatewayError::RouteNotFound),
    }
}

/// `/admin/keys/{id}`: read, change or revoke one key.
async fn key_by_id(
    app: &Arc<App>,
    op: &access::Operator,
    method: &Method,
    id: &str,
    body: &Bytes,
    now: i64,
) -> Result<Response<GatewayBody>, GatewayError> {
    let store = app.store.as_ref().ok_or(GatewayError::Internal)?;
    if id.is_empty() || id.contains('/') {
        return Err(GatewayError::RouteNotFound);
    }
    let not_found = || GatewayError::NotFound { message: format!("no key with id `{id}`") };
    let mut record = store.get_key(id).await.map_err(internal)?.ok_or_else(not_found)?;
    let before = key_json(&record);
    if !op.sees_key(&record) {
        return Err(GatewayError::Forbidden {
            message: format!("the `{}` role may not read key `{id}`", op.role_name()),
            code: "forbidden",
        });
    }
    if *method != Method::GET {
        op.check_key(&record)?;
    }
    match *method {
        Method::GET => Ok(json_value(StatusCode::OK, &key_json(&record))),
        Method::PATCH => {
            apply(&mut record, parse_fields(body)?, now)?;
            orgs::known_guardrails(app, &record.guardrails)?;
            op.check_key(&record)?;
            owners_exist(store, &record).await?;
            policies::check_key(app, store, &mut record).await?;
            store.update_key(&record).await.map_err(internal)?;
            app.auth.evict(id);
            announce(app, id).await;
            let after = key_json(&record);
            audit::record(app, &op.actor, "key.update", id, Some(&before), Some(&after)).await;
            Ok(json_value(StatusCode::OK, &after))
        }
        Method::DELETE => {
            if record.revoked_at.is_none() {
                record.revoked_at = Some(now);
                store.update_key(&record).await.map_err(internal)?;
            }
            app.auth.evict(id);
            announce(app, id).await;
            let after = key_json(&record);
            audit::record(app, &op.actor, "key.revoke", id, Some(&before), Some(&after)).await;
            Ok(json_value(StatusCode::OK, &after))
        }
        _ => Err(GatewayError::MethodNotAllowed),
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct UsageParams {
    key_id: Option<String>,
    user: Option<String>,
    team: Option<String>,
    model: Option<String>,
    from: Option<String>,
    to: Option<String>,
    bucket: Option<String>,
    format: Option<String>,
}

async fn usage(
    app: &Arc<App>,
    op: &access::Operator,
    query: Option<&str>,
) -> Result<Response<GatewayBody>, GatewayError> {
    let store = app.store.as_ref().ok_or(GatewayError::Internal)?;
    let mut p: UsageParams = serde_urlencoded::from_str(query.unwrap_or(""))
        .map_err(|e| bad(format!("invalid query parameters: {e}"), None))?;
    op.restrict_usage(store, &mut p.team, &mut p.user).await?;
    let bucket = match p.bucket.as_deref().unwrap_or("day") {
        "hour" => Bucket::Hour,
        "day" => Bucket::Day,
        _ => return Err(bad("`bucket` must be hour or day", Some("bucket"))),
    };
    let ms = |t: &Option<String>, name| t.as_deref().map(|t| parse_time(t, name).map(|s| s * 1000)).transpose();
    let q = UsageQuery {
        key_id: p.key_id,
        user: p.user,
        team: p.team,
        model: p.model,
        from_ms: ms(&p.from, "from")?,
        to_ms: ms(&p.to, "to")?,
        bucket,
    };
    let report = store.usage_report(&q).await.map_err(internal)?;
    match p.format.as_deref().unwrap_or("json") {
        "json" => Ok(json_value(StatusCode::OK, &serde_json::to_value(&report).unwrap_or_default())),
        "csv" => {
            let mut csv = String::from("bucket_start,requests,prompt_tokens,completion_tokens,total_tokens,cost_usd\n");
            for b in &report.buckets {
                csv.push_str(&format!(
                    "{},{},{},{},{},{:.6}\n",
                    rfc3339(b.start_ms / 1000),
                    b.totals.requests,
                    b.totals.prompt_tokens,
                    b.totals.completion_tokens,
                    b.totals.total_tokens,
                    b.totals.cost_usd
                ));
            }
            let mut resp = Response::new(full(csv));
            resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/csv; charset=utf-8"));
            Ok(resp)
        }
        _ => Err(bad("`format` must be json or csv", Some("format"))),
    }
}

/// `POST /admin/reload`: re-read the configuration file, as SIGHUP does. 200 with what was
/// loaded, or 400 saying why the file was refused (the running configuration stays).
async fn reload(app: &App) -> Result<Response<GatewayBody>, GatewayError> {
    let Some(reload) = &app.reload else {
        return Err(GatewayError::bad_request("this gateway cannot reload (it is not serving)", None));
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    reload.send(tx).await.map_err(|_| GatewayError::Internal)?;
    match rx.await.map_err(|_| GatewayError::Internal)? {
        Ok(message) => Ok(json_value(StatusCode::OK, &serde_json::json!({ "reloaded": true, "message": message }))),
        Err(why) => Err(GatewayError::bad_request(format!("configuration not reloaded: {why}"), None)),
    }
}

/// A key's team and user must exist.
async fn owners_exist(store: &crate::store::Store, key: &KeyRecord) -> Result<(), GatewayError> {
    if let Some(team) = &key.team_id {
        if store.get_team(team).await.map_err(internal)?.is_none() {
            return Err(bad(format!("no team with id `{team}`"), Some("team_id")));
        }
    }
    if let Some(user) = &key.user_id {
        if store.get_user(user).await.map_err(internal)?.is_none() {
            return Err(bad(format!("no user with id `{user}`"), Some("user_id")));
        }
    }
    Ok(())
}

/// Tell the rest of the fleet (when there is one) that a key changed.
async fn announce(app: &App, id: &str) {
    if let Some(shared) = &app.shared {
        crate::shared::revocation::announce(shared, id).await;
    }
}
