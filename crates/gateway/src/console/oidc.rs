//! Signing in to the console with the company's OpenID provider (`auth.oidc`): `/ui/oidc/login`
//! sends the browser there, `/ui/oidc/callback` brings it back. On every sign-in the user is
//! provisioned just in time (created on the first), their role follows the groups claim through
//! `roles` and, with `teams_claim` set, their memberships follow the teams the claim names. Each
//! sign-in, refused or not, is in the audit log.

use std::net::SocketAddr;

use http::{Request, Response};
use hyper::body::Incoming;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{cookie, redirect, secure, session_set_cookie};
use crate::admin::audit::{self, Actor};
use crate::app::App;
use crate::auth::oidc::{Flow, FLOW_TTL};
use crate::config::oidc::{OidcConfig, ROLES};
use crate::error::GatewayError;
use crate::http::GatewayBody;
use crate::records::{LevelLimits, Membership, UserRecord};
use crate::store::{Store, StoreError};

/// The cookie holding a sign-in in flight; `Lax`, as the provider's redirect back is a top-level
/// navigation from another site, which a `Strict` cookie would not come with.
const FLOW_COOKIE: &str = "sy_oidc";

/// `GET /ui/oidc/login`: off to the provider, the flow sealed in a cookie.
pub async fn start(app: &App, now: i64) -> Result<Response<GatewayBody>, GatewayError> {
    let provider = app.auth.oidc().ok_or(GatewayError::RouteNotFound)?;
    let flow = Flow::new().map_err(internal)?;
    let url = provider.authorization_url(&flow).await.map_err(|e| {
        tracing::error!(error = %e, "the OpenID provider could not be reached");
        GatewayError::IdentityUnavailable
    })?;
    let sealed = flow.seal(app.auth.hasher(), now + FLOW_TTL);
    let cookie =
        format!("{FLOW_COOKIE}={sealed}; Path=/ui/oidc; HttpOnly; SameSite=Lax; Max-Age={FLOW_TTL}{}", secure(app));
    Ok(redirect(&url, Some(cookie)))
}

#[derive(Debug, Default, Deserialize)]
struct CallbackParams {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
}

/// `GET /ui/oidc/callback`: the code exchanged, the user provisioned, a session issued.
pub async fn callback(
    app: &App,
    req: Request<Incoming>,
    now: i64,
    peer: SocketAddr,
) -> Result<Response<GatewayBody>, GatewayError> {
    let provider = app.auth.oidc().ok_or(GatewayError::RouteNotFound)?;
    let p: CallbackParams = serde_urlencoded::from_str(req.uri().query().unwrap_or("")).unwrap_or_default();
    let flow = cookie(req.headers(), FLOW_COOKIE).and_then(|sealed| Flow::open(app.auth.hasher(), sealed, now));
    let outcome = match (&flow, p.code, p.state, p.error) {
        (_, _, _, Some(error)) => Err(format!("the provider refused the sign-in: {error}")),
        (Some(flow), Some(code), Some(state), None) if state == flow.state => provider.sign_in(&code, flow).await,
        (None, ..) => Err("no sign-in in flight from this browser (or it took too long)".to_owned()),
        _ => Err("the callback's state is not this sign-in's".to_owned()),
    };
    let claims = match outcome {
        Ok(claims) => claims,
        Err(reason) => return Ok(refused(app, peer, &reason).await),
    };
    let store = app.store.as_ref().ok_or(GatewayError::Internal)?;
    let user = match provision(app, store, provider.config(), &claims, now).await {
        Ok(Some(user)) => user,
        Ok(None) => return Ok(refused(app, peer, "the ID token names no email or subject").await),
        Err(e) => return Err(internal(e)),
    };
    let ttl = app.config.console.session_ttl.as_secs() as i64;
    let token = app.auth.user_session(&user.id, app.clock.unix_ms(), now + ttl).ok_or(GatewayError::Internal)?;
    let actor = Actor { name: format!("user:{} (sso)", user.email), client: Some(peer) };
    audit::record(app, &actor, "console.login", &user.id, None, Some(&json!({"role": user.role}))).await;
    let session = session_set_cookie(app, &token, ttl);
    let gone = format!("{FLOW_COOKIE}=; Path=/ui/oidc; HttpOnly; SameSite=Lax; Max-Age=0");
    Ok(onward_to_console([session, gone]))
}

/// The answer to a completed sign-in: a page of the gateway's own that moves on to `/ui`. Not a
/// redirect: the browser came here from the provider's site, and a redirect would carry that
/// navigation on, so the new `SameSite=Strict` session cookie would not be sent with it.
fn onward_to_console(cookies: [String; 2]) -> Response<GatewayBody> {
    const PAGE: &str = "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
        <meta http-equiv=\"refresh\" content=\"0;url=/ui\"><title>Switchyard</title></head>\
        <body><p>Signed in. <a href=\"/ui\">Open the console</a>.</p></body></html>";
    let mut resp = Response::new(crate::http::full(PAGE));
    let h = resp.headers_mut();
    h.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("text/html; charset=utf-8"));
    h.insert(http::header::CACHE_CONTROL, http::HeaderValue::from_static("no-store"));
    h.insert(
        http::header::CONTENT_SECURITY_POLICY,
        http::HeaderValue::from_static("default-src 'none'; frame-ancestors 'none'; base-uri 'none'"),
    );
    for cookie in cookies {
        if let Ok(v) = http::HeaderValue::try_from(cookie) {
            h.append(http::header::SET_COOKIE, v);
        }
    }
    resp
}

async fn refused(app: &App, peer: SocketAddr, reason: &str) -> Response<GatewayBody> {
    tracing::warn!(reason, "console single sign-on refused");
    let someone = Actor { name: "unknown (sso)".to_owned(), client: Some(peer) };
    audit::record(app, &someone, "console.login_failed", "console", None, Some(&json!({"reason": reason}))).await;
    redirect("/ui/login?failed=sso", None)
}

fn internal(e: impl std::fmt::Display) -> GatewayError {
    tracing::error!(error = %e, "console single sign-on failed");
    GatewayError::Internal
}

fn strings(v: &Value) -> Vec<String> {
    match v {
        Value::Array(items) => items.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
        Value::String(s) => s.split([',', ' ']).filter(|s| !s.is_empty()).map(str::to_owned).collect(),
        _ => Vec::new(),
    }
}

/// The role the groups claim gives: the most powerful mapped one, else the default.
pub fn role_for(config: &OidcConfig, claims: &Value) -> String {
    let groups = strings(&claims[&config.groups_claim]);
    let rank = |role: &str| ROLES.iter().position(|r| *r == role);
    config
        .roles
        .iter()
        .filter(|(group, _)| groups.contains(group))
        .map(|(_, role)| role.as_str())
        .max_by_key(|role| rank(role))
        .unwrap_or(&config.default_role)
        .to_owned()
}

/// The signed-in user, created or brought in line with the claims (role, name, memberships).
async fn provision(
    app: &App,
    store: &Store,
    config: &OidcConfig,
    claims: &Value,
    now: i64,
) -> Result<Option<UserRecord>, StoreError> {
    let Some(email) = claims["email"].as_str().or(claims["sub"].as_str()).map(str::to_owned) else {
        return Ok(None);
    };
    let role = role_for(config, claims);
    let name = claims["name"].as_str().map(str::to_owned);
    let actor = Actor { name: "single sign-on".to_owned(), client: None };
    let user = match store.user_by_email(&email).await? {
        Some(mut user) => {
            if user.role != role || (name.is_some() && user.name != name) {
                let before = json!({"role": user.role, "name": user.name});
                user.role = role;
                user.name = name.or(user.name);
                store.update_user(&user).await?;
                let after = json!({"role": user.role, "name": user.name});
                audit::record(app, &actor, "user.update", &user.id, Some(&before), Some(&after)).await;
            }
            user
        }
        None => {
            let id = crate::auth::key::random_hex(6).map_err(StoreError::Invalid)?;
            let user = UserRecord {
                id: format!("u_{id}"),
                email,
                name,
                role,
                limits: LevelLimits::default(),
                created_at: now,
                sessions_after: 0,
            };
            store.insert_user(&user).await?;
            let after = json!({"email": user.email, "name": user.name, "role": user.role});
            audit::record(app, &actor, "user.create", &user.id, None, Some(&after)).await;
            user
        }
    };
    if let Some(claim) = &config.teams_claim {
        sync_teams(app, store, &user, &strings(&claims[claim]), now).await?;
    }
    // The user's keys carry their role and teams: read them anew everywhere.
    app.auth.evict_all();
    Ok(Some(user))
}

/// Memberships follow the teams the claim names (teams the gateway does not have are skipped);
/// a `team_admin` (or `admin`) by role administers them.
async fn sync_teams(app: &App, store: &Store, user: &UserRecord, named: &[String], now: i64) -> Result<(), StoreError> {
    let actor = Actor { name: "single sign-on".to_owned(), client: None };
    let role = if matches!(user.role.as_str(), "team_admin" | "admin") { "team_admin" } else { "member" };
    let current = store.memberships(None, Some(&user.id)).await?;
    let mut wanted = Vec::new();
    for name in named {
        match store.team_by_name(name).await? {
            Some(team) => wanted.push(team.id),
            None => tracing::info!(team = %name, "a signed-in user's team is not a team of this gateway: skipped"),
        }
    }
    for m in current.iter().filter(|m| !wanted.contains(&m.team_id)) {
        store.delete_member(&m.team_id, &user.id).await?;
        audit::record(app, &actor, "team.member.delete", &m.team_id, Some(&json!({"user_id": user.id})), None).await;
    }
    for team_id in wanted {
        if current.iter().any(|m| m.team_id == team_id && m.role == role) {
            continue;
        }
        let member =
            Membership { team_id: team_id.clone(), user_id: user.id.clone(), role: role.to_owned(), created_at: now };
        store.put_member(&member).await?;
        let after = json!({"team_id": team_id, "user_id": user.id, "role": role});
        audit::record(app, &actor, "team.member.put", &team_id, None, Some(&after)).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_powerful_mapped_group_gives_the_role() {
        let config = OidcConfig {
            issuer: "https://id".into(),
            client_id: "sw".into(),
            client_secret: None,
            scopes: vec!["openid".into()],
            redirect_url: "https://gw/ui/oidc/callback".into(),
            groups_claim: "groups".into(),
            roles: vec![("ops".into(), "admin".into()), ("leads".into(), "team_admin".into())],
            teams_claim: None,
            default_role: "viewer".into(),
        };
        assert_eq!(role_for(&config, &json!({"groups": ["leads", "ops"]})), "admin");
        assert_eq!(role_for(&config, &json!({"groups": ["leads", "x"]})), "team_admin");
        assert_eq!(role_for(&config, &json!({"groups": "x"})), "viewer");
        assert_eq!(role_for(&config, &json!({})), "viewer");
    }
}
