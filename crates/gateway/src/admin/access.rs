//! Who is administering, and what their role lets them do — issue 31's role table. The master key
//! and users with the `admin` role may do everything; a `viewer` reads the dashboards; a team's
//! admins manage its members and keys (limits within the team's own); a `member` manages their
//! own keys and sees their own usage. Every admin endpoint and console call asks here twice: once
//! for the route (`check_route`, before anything is read) and once per record it touches.

use std::net::SocketAddr;
use std::sync::Arc;

use http::{HeaderMap, Method};
use serde_json::{json, Value};

use super::audit::Actor;
use super::role_table::{self, May};
use crate::app::App;
use crate::auth::{jwt, presented_key, Role};
use crate::error::GatewayError;
use crate::records::{KeyRecord, TeamRecord, UserRecord};
use crate::store::{GroupScope, Store, StoreError};

/// An administrator of some scope, and how the audit log names them.
#[derive(Debug, Clone)]
pub struct Operator {
    pub actor: Actor,
    pub rights: Rights,
}

#[derive(Debug, Clone)]
pub enum Rights {
    /// The master key (or an open gateway): everything.
    Master,
    /// A signed-in user, as their record and memberships were when the request came.
    User(Arc<UserRights>),
}

#[derive(Debug)]
pub struct UserRights {
    pub user: UserRecord,
    pub role: Role,
    pub teams: Vec<TeamRight>,
}

/// A team the user belongs to, and whether they administer it.
#[derive(Debug)]
pub struct TeamRight {
    pub team: TeamRecord,
    pub admin: bool,
}

fn forbidden(message: String) -> GatewayError {
    GatewayError::Forbidden { message, code: "forbidden" }
}

/// The operator an admin API request's bearer stands for: the master key, or a token from a
/// configured issuer (`auth.jwt`) whose user claim names a user of the gateway (by email or id).
pub async fn from_bearer(app: &App, headers: &HeaderMap, client: SocketAddr) -> Result<Operator, GatewayError> {
    if !app.auth.enabled() || app.auth.is_master(headers) {
        return Ok(Operator::master(Some(client)));
    }
    let refused = || GatewayError::Unauthorized {
        message: "the admin API needs the master key, or a user's token, as `Authorization: Bearer`".to_owned(),
        code: "invalid_api_key",
    };
    let token = presented_key(headers).filter(|t| jwt::looks_like_jwt(t)).ok_or_else(refused)?;
    let claims = app.auth.verify_token(token, app.clock.unix_secs()).await.ok_or_else(refused)??;
    let store = app.store.as_ref().ok_or(GatewayError::Internal)?;
    let unavailable = |e: StoreError| {
        tracing::error!(error = %e, "user lookup failed");
        GatewayError::KeysUnavailable
    };
    let user = match store.user_by_email(&claims.user).await.map_err(unavailable)? {
        Some(user) => Some(user),
        None => store.get_user(&claims.user).await.map_err(unavailable)?,
    };
    let user = user.ok_or_else(|| GatewayError::Forbidden {
        message: format!("the token's user `{}` is not a user of this gateway", claims.user),
        code: "unknown_user",
    })?;
    Operator::user(store, user, "token", Some(client)).await.map_err(unavailable)
}

impl Operator {
    pub fn master(client: Option<SocketAddr>) -> Operator {
        Operator { actor: Actor::master(client), rights: Rights::Master }
    }

    /// A user, their memberships read now; `via` says how they came (`console`, `token`).
    pub async fn user(
        store: &Store,
        user: UserRecord,
        via: &str,
        client: Option<SocketAddr>,
    ) -> Result<Operator, StoreError> {
        let role = Role::parse(&user.role).unwrap_or(Role::Viewer);
        let mut teams = Vec::new();
        for m in store.memberships(None, Some(&user.id)).await? {
            if let Some(team) = store.get_team(&m.team_id).await? {
                // A team admin by role administers every team they are in.
                let admin = role != Role::Viewer && (m.role == "team_admin" || role == Role::TeamAdmin);
                teams.push(TeamRight { team, admin });
            }
        }
        let actor = Actor { name: format!("user:{} ({via})", user.email), client };
        Ok(Operator { actor, rights: Rights::User(Arc::new(UserRights { user, role, teams })) })
    }

    fn scoped(&self) -> Option<&UserRights> {
        match &self.rights {
            Rights::User(u) if u.role != Role::Admin => Some(u),
            _ => None,
        }
    }

    /// Whether nothing is out of this operator's reach.
    pub fn is_admin(&self) -> bool {
        self.scoped().is_none()
    }

    pub fn role_name(&self) -> &'static str {
        match self.scoped().map(|u| u.role) {
            None | Some(Role::Admin) => "admin",
            Some(Role::TeamAdmin) => "team_admin",
            Some(Role::Member) => "member",
            Some(Role::Viewer) => "viewer",
        }
    }

    /// Whether the operator reads everything but changes nothing.
    pub fn is_viewer(&self) -> bool {
        self.scoped().is_some_and(|u| u.role == Role::Viewer)
    }

    fn user_id(&self) -> Option<&str> {
        self.scoped().map(|u| u.user.id.as_str())
    }

    fn admins_team(&self, team_id: &str) -> bool {
        self.scoped().is_none_or(|u| u.teams.iter().any(|t| t.admin && t.team.id == team_id))
    }

    fn in_team(&self, team_id: &str) -> bool {
        self.scoped().is_none_or(|u| u.teams.iter().any(|t| t.team.id == team_id))
    }

    /// Whether the operator administers the team named `name` (everyone unscoped does).
    pub fn admins_team_named(&self, name: &str) -> bool {
        self.scoped().is_none_or(|u| u.teams.iter().any(|t| t.admin && t.team.name == name))
    }

    /// Whether the operator reads everything (an admin, a viewer, the master key), or is in
    /// the team named `name`.
    pub fn sees_team_named(&self, name: Option<&str>) -> bool {
        self.is_viewer() || self.scoped().is_none_or(|u| name.is_some_and(|n| u.teams.iter().any(|t| t.team.name == n)))
    }

    fn admins_any_team(&self) -> bool {
        self.scoped().is_none_or(|u| u.teams.iter().any(|t| t.admin))
    }

    /// `GET /ui/api/me`: who the console is signed in as.
    pub fn me(&self) -> Value {
        let user = match &self.rights {
            Rights::User(u) => json!({"id": u.user.id, "email": u.user.email, "name": u.user.name}),
            Rights::Master => Value::Null,
        };
        let teams: Vec<Value> = match &self.rights {
            Rights::User(u) => u
                .teams
                .iter()
                .map(|t| json!({"id": t.team.id, "name": t.team.name, "role": if t.admin { "team_admin" } else { "member" }}))
                .collect(),
            Rights::Master => Vec::new(),
        };
        json!({"role": self.role_name(), "master": matches!(self.rights, Rights::Master), "user": user, "teams": teams})
    }

    /// Whether the role may call this route of the admin API or the console's at all, as the
    /// role table (`role_table.rs`) says; records are checked again.
    pub fn check_route(&self, method: &Method, path: &str) -> Result<(), GatewayError> {
        let Some(u) = self.scoped() else { return Ok(()) };
        let allowed = match role_table::row(method.as_str(), path) {
            None => false,
            Some((may, named)) => match may {
                May::Everyone => true,
                May::Writers => u.role != Role::Viewer,
                May::Viewers => u.role == Role::Viewer,
                May::TeamAdmins => self.admins_team(named.team),
                May::AnyTeamAdmin => self.admins_any_team(),
                May::SelfOrTeamAdmin => named.user == u.user.id || self.admins_any_team(),
            },
        };
        if allowed {
            Ok(())
        } else {
            Err(forbidden(format!("the `{}` role may not {method} {path}", self.role_name())))
        }
    }

    /// Whether the operator may read this key.
    pub fn sees_key(&self, k: &KeyRecord) -> bool {
        self.is_viewer()
            || self.scoped().is_none()
            || k.user_id.as_deref() == self.user_id()
            || k.team_id.as_deref().is_some_and(|t| self.admins_team(t))
    }

    /// Whether the operator may change this key (as it is, and again as it would be after the
    /// change): their own keys in their own teams, or any key of a team they administer.
    pub fn check_key(&self, k: &KeyRecord) -> Result<(), GatewayError> {
        let Some(u) = self.scoped() else { return Ok(()) };
        let own =
            k.user_id.as_deref() == Some(u.user.id.as_str()) && k.team_id.as_deref().is_none_or(|t| self.in_team(t));
        let teams = k.team_id.as_deref().is_some_and(|t| self.admins_team(t));
        if u.role == Role::Viewer || !(own || teams) {
            return Err(forbidden(format!("the `{}` role may not manage key `{}`", self.role_name(), k.id)));
        }
        let Some(right) = u.teams.iter().find(|t| k.team_id.as_deref() == Some(t.team.id.as_str())) else {
            return Ok(());
        };
        let l = &right.team.limits;
        let over = |key: Option<f64>, team: Option<f64>| matches!((key, team), (Some(k), Some(t)) if k > t);
        for (name, key, team) in [
            ("rpm", k.rpm.map(f64::from), l.rpm.map(f64::from)),
            ("tpm", k.tpm.map(|v| v as f64), l.tpm.map(|v| v as f64)),
            ("max_parallel", k.max_parallel.map(f64::from), l.max_parallel.map(f64::from)),
            ("budget_usd", k.budget_usd, l.budget_usd),
        ] {
            if over(key, team) {
                return Err(forbidden(format!(
                    "`{name}` may not exceed team `{}`'s own ({}) unless an admin sets it",
                    right.team.name,
                    team.unwrap_or_default()
                )));
            }
        }
        Ok(())
    }

    /// A key a non-admin creates belongs to them unless it is a key of a team they administer;
    /// with no team named, it goes to their first team.
    pub fn own_new_key(&self, k: &mut KeyRecord) {
        let Some(u) = self.scoped() else { return };
        if k.team_id.is_none() {
            k.team_id = u.teams.first().map(|t| t.team.id.clone());
        }
        if k.user_id.is_none() && !k.team_id.as_deref().is_some_and(|t| self.admins_team(t)) {
            k.user_id = Some(u.user.id.clone());
        }
    }

    pub fn sees_team(&self, team_id: &str) -> bool {
        self.is_viewer() || self.in_team(team_id)
    }

    /// Narrow a usage or request-log query (a team's id or name, a user's email) to what the
    /// operator may read: everything for admins and viewers; a team they administer; else their
    /// own. A team named by its id is named by its name from here on, as the records are.
    pub async fn restrict_usage(
        &self,
        store: &Store,
        team: &mut Option<String>,
        user: &mut Option<String>,
    ) -> Result<(), GatewayError> {
        if let Some(named) = team.as_deref() {
            match store.get_team(named).await {
                Ok(Some(by_id)) => *team = Some(by_id.name),
                Ok(None) => {}
                Err(e) => {
                    tracing::error!(error = %e, "team lookup failed");
                    return Err(GatewayError::Internal);
                }
            }
        }
        self.restrict_to_own(team, user)
    }

    fn restrict_to_own(&self, team: &mut Option<String>, user: &mut Option<String>) -> Result<(), GatewayError> {
        let Some(u) = self.scoped().filter(|u| u.role != Role::Viewer) else { return Ok(()) };
        let administered = |name: &str| u.teams.iter().any(|t| t.admin && t.team.name == name);
        let refuse = |whose: &str| forbidden(format!("the `{}` role may not read {whose} usage", self.role_name()));
        match (team.as_deref(), user.as_deref()) {
            (Some(t), _) if !administered(t) => return Err(refuse(&format!("team `{t}`'s"))),
            (Some(_), _) => {}
            (None, Some(e)) if e != u.user.email => return Err(refuse("another user's")),
            (None, Some(_)) => {}
            (None, None) => match u.teams.iter().find(|t| t.admin) {
                Some(t) => *team = Some(t.team.name.clone()),
                None => *user = Some(u.user.email.clone()),
            },
        }
        Ok(())
    }

    /// The scope of a grouped usage view after [`Operator::restrict_usage`].
    pub fn group_scope(team: Option<&str>, user: Option<&str>) -> Option<GroupScope> {
        team.map(|t| GroupScope::Team(t.to_owned())).or_else(|| user.map(|u| GroupScope::User(u.to_owned())))
    }
}
