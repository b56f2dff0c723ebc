//! The admin API's organisations: teams (`/admin/teams`, their members), users (`/admin/users`).
//! A team's or user's limits and budget apply to their keys' requests beside the key's own; a
//! change to one reaches every instance's key cache at once (`announce_all`).

use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Response, StatusCode};
use serde::Deserialize;
use serde_json::{json, Value};

use super::access::Operator;
use super::audit;
use super::{bad, internal, nullable, rfc3339};
use crate::app::App;
use crate::error::GatewayError;
use crate::http::{json_value, GatewayBody};
use crate::limit::period_start;
use crate::records::{LevelLimits, Membership, TeamRecord, UserRecord};
use crate::store::{Store, StoreError};

/// The limit fields teams, users and keys share; PATCH changes those present, and `null` removes
/// a limit.
#[derive(Debug, Default, Deserialize)]
pub struct LimitFields {
    #[serde(default, deserialize_with = "nullable")]
    pub rpm: Option<Option<u32>>,
    #[serde(default, deserialize_with = "nullable")]
    pub tpm: Option<Option<u64>>,
    #[serde(default, deserialize_with = "nullable")]
    pub max_parallel: Option<Option<u32>>,
    #[serde(default, deserialize_with = "nullable")]
    pub budget_usd: Option<Option<f64>>,
    #[serde(default, deserialize_with = "nullable")]
    pub budget_period: Option<Option<String>>,
}

impl LimitFields {
    /// Validate each present field and set it on `to`.
    pub fn apply(self, to: &mut LevelLimits) -> Result<(), GatewayError> {
        for (name, v) in [
            ("rpm", self.rpm.flatten().map(u64::from)),
            ("tpm", self.tpm.flatten()),
            ("max_parallel", self.max_parallel.flatten().map(u64::from)),
        ] {
            if v == Some(0) {
                return Err(bad(format!("`{name}` must be at least 1 (null for no limit)"), None));
            }
        }
        if let Some(Some(b)) = self.budget_usd {
            if !b.is_finite() || b < 0.0 {
                return Err(bad("`budget_usd` must be a non-negative number", Some("budget_usd")));
            }
        }
        if let Some(Some(p)) = &self.budget_period {
            if !matches!(p.as_str(), "daily" | "weekly" | "monthly") {
                return Err(bad("`budget_period` must be daily, weekly or monthly", Some("budget_period")));
            }
        }
        to.rpm = self.rpm.unwrap_or(to.rpm);
        to.tpm = self.tpm.unwrap_or(to.tpm);
        to.max_parallel = self.max_parallel.unwrap_or(to.max_parallel);
        to.budget_usd = self.budget_usd.unwrap_or(to.budget_usd);
        to.budget_period = self.budget_period.unwrap_or(to.budget_period.take());
        Ok(())
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TeamFields {
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
    #[serde(default, deserialize_with = "nullable")]
    mcp_servers: Option<Option<Vec<String>>>,
    #[serde(default, deserialize_with = "nullable")]
    mcp_tools: Option<Option<Vec<String>>>,
    /// Guards every request of the team's keys gets on top of the configured ones.
    guardrails: Option<Vec<String>>,
    /// The team's own policy rules (checked by `policies::check_team`).
    policies: Option<Vec<switchyard_policy::RawRule>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct UserFields {
    email: Option<String>,
    name: Option<String>,
    role: Option<String>,
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
    /// PATCH only: `true` ends every console session the user has, on every instance.
    revoke_sessions: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MemberFields {
    user_id: String,
    role: Option<String>,
}

/// The roles a user may have, and a member may have in a team.
const USER_ROLES: [&str; 4] = ["admin", "team_admin", "member", "viewer"];
const MEMBER_ROLES: [&str; 2] = ["team_admin", "member"];

fn parse<T: for<'de> Deserialize<'de> + Default>(body: &Bytes, what: &str) -> Result<T, GatewayError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|e| bad(format!("invalid {what} fields: {e}"), None))
}

fn limits_json(l: &LevelLimits) -> Value {
    json!({"rpm": l.rpm, "tpm": l.tpm, "max_parallel": l.max_parallel, "budget_usd": l.budget_usd,
           "budget_period": l.budget_period})
}

fn merged(mut head: Value, more: Value) -> Value {
    if let (Some(head), Value::Object(more)) = (head.as_object_mut(), more) {
        head.extend(more);
    }
    head
}

fn team_json(t: &TeamRecord) -> Value {
    merged(
        json!({"id": t.id, "name": t.name, "models": t.models, "mcp_servers": t.mcp_servers,
               "mcp_tools": t.mcp_tools, "guardrails": t.guardrails, "policies": t.policies.raw,
               "created_at": rfc3339(t.created_at)}),
        limits_json(&t.limits),
    )
}

fn user_json(u: &UserRecord) -> Value {
    let sessions_after = (u.sessions_after > 0).then(|| rfc3339(u.sessions_after / 1000));
    merged(
        json!({"id": u.id, "email": u.email, "name": u.name, "role": u.role, "created_at": rfc3339(u.created_at),
               "sessions_after": sessions_after}),
        limits_json(&u.limits),
    )
}

fn member_json(m: &Membership) -> Value {
    json!({"team_id": m.team_id, "user_id": m.user_id, "role": m.role, "created_at": rfc3339(m.created_at)})
}

fn new_id(prefix: &str) -> Result<String, GatewayError> {
    crate::auth::key::random_hex(6).map(|hex| format!("{prefix}{hex}")).map_err(internal)
}

fn conflict_or_internal(what: &str) -> impl Fn(StoreError) -> GatewayError + '_ {
    move |e| match e {
        StoreError::Conflict => GatewayError::Conflict { message: format!("{what} already exists") },
        e => internal(e),
    }
}

fn apply_team(t: &mut TeamRecord, f: TeamFields) -> Result<(), GatewayError> {
    if let Some(name) = f.name {
        if name.trim().is_empty() || name == crate::store::ALL_KEYS {
            return Err(bad("`name` must be a non-empty name other than `*`", Some("name")));
        }
        t.name = name;
    }
    if let Some(models) = f.models {
        if models.iter().any(String::is_empty) {
            return Err(bad("`models` entries must not be empty", Some("models")));
        }
        t.models = models;
    }
    let limits = LimitFields {
        rpm: f.rpm,
        tpm: f.tpm,
        max_parallel: f.max_parallel,
        budget_usd: f.budget_usd,
        budget_period: f.budget_period,
    };
    limits.apply(&mut t.limits)?;
    for (name, v, slot) in
        [("mcp_servers", f.mcp_servers, &mut t.mcp_servers), ("mcp_tools", f.mcp_tools, &mut t.mcp_tools)]
    {
        if let Some(v) = v {
            if v.as_ref().is_some_and(|globs| globs.iter().any(String::is_empty)) {
                return Err(bad(format!("`{name}` entries must not be empty"), None));
            }
            *slot = v;
        }
    }
    if let Some(guardrails) = f.guardrails {
        t.guardrails = guardrails;
    }
    if let Some(policies) = f.policies {
        t.policies = crate::records::OwnRules { raw: policies, compiled: None };
    }
    Ok(())
}

/// Every name must be a guard under the configuration's `guardrails:` (a key or team adds guards
/// the operator defined; it cannot define its own, nor take away the configured ones).
pub(super) fn known_guardrails(app: &crate::app::App, names: &[String]) -> Result<(), GatewayError> {
    let guards = &app.config.guardrails.guards;
    match names.iter().find(|n| !guards.iter().any(|g| &g.name == *n)) {
        Some(unknown) => Err(bad(format!("`{unknown}` is not a guard under `guardrails`"), Some("guardrails"))),
        None => Ok(()),
    }
}

fn apply_user(u: &mut UserRecord, f: UserFields, now_ms: i64) -> Result<(), GatewayError> {
    if f.revoke_sessions == Some(true) {
        u.sessions_after = now_ms;
    }
    if let Some(email) = f.email {
        if !email.contains('@') || email.trim() != email {
            return Err(bad("`email` must be an email address", Some("email")));
        }
        u.email = email;
    }
    if let Some(name) = f.name {
        u.name = Some(name);
    }
    if let Some(role) = f.role {
        if !USER_ROLES.contains(&role.as_str()) {
            return Err(bad("`role` must be admin, team_admin, member or viewer", Some("role")));
        }
        u.role = role;
    }
    let limits = LimitFields {
        rpm: f.rpm,
        tpm: f.tpm,
        max_parallel: f.max_parallel,
        budget_usd: f.budget_usd,
        budget_period: f.budget_period,
    };
    limits.apply(&mut u.limits)
}

/// `/admin/teams…` and `/admin/users…`; `None` for other paths.
pub async fn handle(
    app: &Arc<App>,
    op: &Operator,
    store: &Store,
    method: &Method,
    path: &str,
    body: &Bytes,
    now: i64,
) -> Option<Result<Response<GatewayBody>, GatewayError>> {
    let rest = path.strip_prefix("/admin/")?;
    let (collection, rest) = rest.split_once('/').map_or((rest, None), |(c, r)| (c, Some(r)));
    let answer = match collection {
        "teams" => teams(&Call { app, op, store, now }, method, rest, body).await,
        "users" => users(&Call { app, op, store, now }, method, rest, body).await,
        _ => return None,
    };
    Some(answer)
}

/// What every handler here needs: the app, who is acting, the store, the time.
struct Call<'a> {
    app: &'a Arc<App>,
    op: &'a Operator,
    store: &'a Store,
    now: i64,
}

impl Call<'_> {
    async fn audit(&self, action: &str, target: &str, before: Option<&Value>, after: Option<&Value>) {
        audit::record(self.app, &self.op.actor, action, target, before, after).await;
    }
}

/// A new team with nothing set but its id and time.
fn empty_team(now: i64) -> Result<TeamRecord, GatewayError> {
    Ok(TeamRecord {
        id: new_id("t_")?,
        name: String::new(),
        models: Vec::new(),
        limits: LevelLimits::default(),
        mcp_servers: None,
        mcp_tools: None,
        created_at: now,
        guardrails: Vec::new(),
        policies: Default::default(),
    })
}

async fn teams(
    call: &Call<'_>,
    method: &Method,
    rest: Option<&str>,
    body: &Bytes,
) -> Result<Response<GatewayBody>, GatewayError> {
    let (app, store, now) = (call.app, call.store, call.now);
    let Some(rest) = rest.filter(|r| !r.is_empty()) else {
        return match *method {
            Method::POST => {
                let fields: TeamFields = parse(body, "team")?;
                if fields.name.is_none() {
                    return Err(bad("a team needs a `name`", Some("name")));
                }
                let mut team = empty_team(now)?;
                apply_team(&mut team, fields)?;
                known_guardrails(app, &team.guardrails)?;
                super::policies::check_team(app, &mut team)?;
                store.insert_team(&team).await.map_err(conflict_or_internal("a team with this name"))?;
                let after = team_json(&team);
                call.audit("team.create", &team.id, None, Some(&after)).await;
                Ok(json_value(StatusCode::CREATED, &after))
            }
            Method::GET => {
                let teams = store.list_teams().await.map_err(internal)?;
                let seen: Vec<Value> = teams.iter().filter(|t| call.op.sees_team(&t.id)).map(team_json).collect();
                Ok(json_value(StatusCode::OK, &json!({"object": "list", "data": seen})))
            }
            _ => Err(GatewayError::MethodNotAllowed),
        };
    };
    let (id, sub) = rest.split_once('/').map_or((rest, None), |(id, sub)| (id, Some(sub)));
    if !call.op.sees_team(id) {
        return Err(GatewayError::Forbidden {
            message: format!("the `{}` role may not read team `{id}`", call.op.role_name()),
            code: "forbidden",
        });
    }
    let mut team = store
        .get_team(id)
        .await
        .map_err(internal)?
        .ok_or_else(|| GatewayError::NotFound { message: format!("no team with id `{id}`") })?;
    let before = team_json(&team);
    match (method, sub) {
        (&Method::GET, None) => team_detail(app, store, &team).await,
        (&Method::PATCH, None) => {
            apply_team(&mut team, parse(body, "team")?)?;
            known_guardrails(app, &team.guardrails)?;
            super::policies::check_team(app, &mut team)?;
            store.update_team(&team).await.map_err(conflict_or_internal("a team with this name"))?;
            keys_changed(app).await;
            let after = team_json(&team);
            call.audit("team.update", id, Some(&before), Some(&after)).await;
            Ok(json_value(StatusCode::OK, &after))
        }
        (&Method::DELETE, None) => {
            store.delete_team(id).await.map_err(internal)?;
            keys_changed(app).await;
            call.audit("team.delete", id, Some(&before), None).await;
            Ok(json_value(StatusCode::OK, &json!({"id": id, "deleted": true})))
        }
        (&Method::POST, Some("members")) => {
            let fields: MemberFields =
                serde_json::from_slice(body).map_err(|e| bad(format!("invalid member fields: {e}"), None))?;
            let role = fields.role.unwrap_or_else(|| "member".to_owned());
            if !MEMBER_ROLES.contains(&role.as_str()) {
                return Err(bad("`role` must be team_admin or member", Some("role")));
            }
            if store.get_user(&fields.user_id).await.map_err(internal)?.is_none() {
                return Err(GatewayError::NotFound { message: format!("no user with id `{}`", fields.user_id) });
            }
            let member = Membership { team_id: team.id.clone(), user_id: fields.user_id, role, created_at: now };
            store.put_member(&member).await.map_err(internal)?;
            let after = member_json(&member);
            call.audit("team.member.put", id, None, Some(&after)).await;
            Ok(json_value(StatusCode::CREATED, &after))
        }
        (&Method::GET, Some("members")) => {
            let members = store.memberships(Some(id), None).await.map_err(internal)?;
            Ok(json_value(
                StatusCode::OK,
                &json!({"object": "list", "data": members.iter().map(member_json).collect::<Vec<_>>()}),
            ))
        }
        (&Method::DELETE, Some(member)) if member.starts_with("members/") => {
            let user_id = &member["members/".len()..];
            if !store.delete_member(id, user_id).await.map_err(internal)? {
                return Err(GatewayError::NotFound { message: format!("`{user_id}` is not a member of `{id}`") });
            }
            call.audit("team.member.delete", id, Some(&json!({"user_id": user_id})), None).await;
            Ok(json_value(StatusCode::OK, &json!({"team_id": id, "user_id": user_id, "deleted": true})))
        }
        (_, None | Some("members")) => Err(GatewayError::MethodNotAllowed),
        _ => Err(GatewayError::RouteNotFound),
    }
}

/// A team with its members, its keys' ids and its spend in the budget's current period.
async fn team_detail(app: &App, store: &Store, team: &TeamRecord) -> Result<Response<GatewayBody>, GatewayError> {
    let members = store.memberships(Some(&team.id), None).await.map_err(internal)?;
    let keys = store.team_keys(&team.id).await.map_err(internal)?;
    let since = period_start(team.limits.budget_period.as_deref(), app.clock.unix_ms());
    let spend = store.team_spend(&team.name, since).await.map_err(internal)?;
    let mut out = team_json(team);
    out["members"] = members.iter().map(member_json).collect();
    out["keys"] = keys.iter().map(|k| json!(k.id)).collect();
    out["spend_usd"] = json!(spend);
    Ok(json_value(StatusCode::OK, &out))
}

async fn users(
    call: &Call<'_>,
    method: &Method,
    rest: Option<&str>,
    body: &Bytes,
) -> Result<Response<GatewayBody>, GatewayError> {
    let (app, store, now) = (call.app, call.store, call.now);
    let Some(id) = rest.filter(|r| !r.is_empty()) else {
        return match *method {
            Method::POST => {
                let fields: UserFields = parse(body, "user")?;
                if fields.email.is_none() {
                    return Err(bad("a user needs an `email`", Some("email")));
                }
                let mut user = UserRecord {
                    id: new_id("u_")?,
                    email: String::new(),
                    name: None,
                    role: "member".to_owned(),
                    limits: LevelLimits::default(),
                    created_at: now,
                    sessions_after: 0,
                };
                if fields.revoke_sessions.is_some() {
                    return Err(bad("`revoke_sessions` can only be given with PATCH", Some("revoke_sessions")));
                }
                apply_user(&mut user, fields, app.clock.unix_ms())?;
                store.insert_user(&user).await.map_err(conflict_or_internal("a user with this email"))?;
                let after = user_json(&user);
                call.audit("user.create", &user.id, None, Some(&after)).await;
                Ok(json_value(StatusCode::CREATED, &after))
            }
            Method::GET => {
                let users = store.list_users().await.map_err(internal)?;
                Ok(json_value(
                    StatusCode::OK,
                    &json!({"object": "list", "data": users.iter().map(user_json).collect::<Vec<_>>()}),
                ))
            }
            _ => Err(GatewayError::MethodNotAllowed),
        };
    };
    if id.contains('/') {
        return Err(GatewayError::RouteNotFound);
    }
    let mut user = store
        .get_user(id)
        .await
        .map_err(internal)?
        .ok_or_else(|| GatewayError::NotFound { message: format!("no user with id `{id}`") })?;
    let before = user_json(&user);
    match *method {
        Method::GET => {
            let teams = store.memberships(None, Some(id)).await.map_err(internal)?;
            let mut out = user_json(&user);
            out["teams"] = teams.iter().map(member_json).collect();
            Ok(json_value(StatusCode::OK, &out))
        }
        Method::PATCH => {
            apply_user(&mut user, parse(body, "user")?, app.clock.unix_ms())?;
            store.update_user(&user).await.map_err(conflict_or_internal("a user with this email"))?;
            keys_changed(app).await;
            let after = user_json(&user);
            call.audit("user.update", id, Some(&before), Some(&after)).await;
            Ok(json_value(StatusCode::OK, &after))
        }
        Method::DELETE => {
            store.delete_user(id).await.map_err(internal)?;
            keys_changed(app).await;
            call.audit("user.delete", id, Some(&before), None).await;
            Ok(json_value(StatusCode::OK, &json!({"id": id, "deleted": true})))
        }
        _ => Err(GatewayError::MethodNotAllowed),
    }
}

/// A team's or user's change reaches the keys cached with it, here and across the fleet.
async fn keys_changed(app: &App) {
    app.auth.evict_all();
    if let Some(shared) = &app.shared {
        crate::shared::revocation::announce_all(shared).await;
    }
}
