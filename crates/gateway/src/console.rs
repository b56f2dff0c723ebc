//! The operator's console at `/ui`: the browser app (static files from the `switchyard-console`
//! crate), signing in (with the master key, or as a user through the company's OpenID provider,
//! `console/oidc.rs`), and the JSON the app reads under `/ui/api`. A signed-in browser holds an
//! HttpOnly, SameSite=Strict session cookie scoped to `/ui`; nothing under `/ui/api` answers
//! without it, and anything that changes state also needs the `x-switchyard-console` header a
//! cross-site form cannot send. What a user sees is what their role allows (`admin/access.rs`),
//! decided here on the server.
//!
//! The console composes the handlers below it rather than repeating them: keys, teams, users and
//! the audit log go through the admin API's own code, the playground through the proxy as the
//! master key or as the signed-in user.

mod api;
mod cache;
mod mcp;
mod oidc;

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;

use crate::admin::access::{Operator, Rights};
use crate::admin::audit::Actor;
use crate::app::App;
use crate::auth::session::{Session, MASTER};
use crate::endpoint::Endpoint;
use crate::error::GatewayError;
use crate::http::{full, parse, GatewayBody};
use crate::{admin, proxy};

const COOKIE: &str = "sy_console";
/// How a signed-out session is announced on the fleet's key-change channel (`session:TOKEN`).
pub const SIGNED_OUT: &str = "session:";
/// The header every state-changing console request carries (CSRF guard).
const CSRF_HEADER: &str = "x-switchyard-console";
/// A login form is a key and little else.
const LOGIN_BODY_LIMIT: usize = 4096;

/// Answer a request under `/ui`.
pub async fn handle(
    app: &Arc<App>,
    req: Request<Incoming>,
    started: Instant,
    rid: &HeaderValue,
    trace: &mut Option<crate::telemetry::Tracing>,
    peer: std::net::SocketAddr,
) -> Result<Response<GatewayBody>, GatewayError> {
    if !app.config.console.enabled {
        return Err(GatewayError::RouteNotFound);
    }
    let now = app.clock.unix_secs();
    let path = req.uri().path().to_owned();
    let token = session_cookie(req.headers()).map(str::to_owned);
    let session = app.auth.console_session(token.as_deref(), now);
    let operator = match session {
        Some(session) => signed_in(app, session, peer).await?,
        None => None,
    };
    let logged_in = operator.is_some();
    match (req.method(), path.as_str()) {
        (&Method::GET, p) if p.starts_with("/ui/assets/") => Ok(asset(&p["/ui/assets/".len()..], req.headers())),
        (&Method::GET, "/ui" | "/ui/") if logged_in => Ok(page("index.html", req.headers())),
        (&Method::GET, "/ui" | "/ui/") => Ok(redirect("/ui/login", None)),
        (&Method::GET, "/ui/login") if logged_in && app.auth.enabled() => Ok(redirect("/ui", None)),
        (&Method::GET, "/ui/login") => Ok(login_page(app, req.uri().query())),
        (&Method::POST, "/ui/login") => login(app, req, now, peer).await,
        (&Method::GET, "/ui/oidc/login") => oidc::start(app, now).await,
        (&Method::GET, "/ui/oidc/callback") => oidc::callback(app, req, now, peer).await,
        (&Method::POST, "/ui/logout") => {
            if let (Some(token), Some(operator)) = (&token, &operator) {
                app.auth.console_logout(token, now);
                // The other instances of a fleet forget it too.
                if let Some(shared) = &app.shared {
                    crate::shared::revocation::announce(shared, &format!("{SIGNED_OUT}{token}")).await;
                }
                admin::audit::record(app, &operator.actor, "console.logout", "console", None, None).await;
            }
            Ok(redirect("/ui/login", Some(format!("{COOKIE}=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0"))))
        }
        (_, p) if p.starts_with("/ui/api/") => {
            let Some(operator) = operator else {
                return Err(GatewayError::Unauthorized {
                    message: "log in to the console first".to_owned(),
                    code: "console_login_required",
                });
            };
            if req.method() != Method::GET && req.headers().get(CSRF_HEADER).is_none() {
                return Err(GatewayError::Forbidden {
                    message: format!("console requests that change state need the `{CSRF_HEADER}` header"),
                    code: "csrf",
                });
            }
            Box::pin(api_route(app, req, &path, started, rid, trace, &operator)).await
        }
        (_, "/ui" | "/ui/" | "/ui/login" | "/ui/logout" | "/ui/oidc/login" | "/ui/oidc/callback") => {
            Err(GatewayError::MethodNotAllowed)
        }
        _ => Err(GatewayError::RouteNotFound),
    }
}

/// Who a live session is for: the master key, or a user as they are now (a user deleted, or
/// whose sessions were revoked after this one was issued, is signed out).
async fn signed_in(app: &App, session: Session, peer: std::net::SocketAddr) -> Result<Option<Operator>, GatewayError> {
    if session.subject == MASTER {
        return Ok(Some(Operator { actor: Actor::console(Some(peer)), rights: Rights::Master }));
    }
    let store = app.store.as_ref().ok_or(GatewayError::Internal)?;
    let unavailable = |e: crate::store::StoreError| {
        tracing::error!(error = %e, "console user lookup failed");
        GatewayError::KeysUnavailable
    };
    let Some(user) = store.get_user(&session.subject).await.map_err(unavailable)? else { return Ok(None) };
    if user.sessions_after > session.issued {
        return Ok(None);
    }
    Operator::user(store, user, "console", Some(peer)).await.map(Some).map_err(unavailable)
}

async fn api_route(
    app: &Arc<App>,
    req: Request<Incoming>,
    path: &str,
    started: Instant,
    rid: &HeaderValue,
    trace: &mut Option<crate::telemetry::Tracing>,
    operator: &Operator,
) -> Result<Response<GatewayBody>, GatewayError> {
    let route = &path["/ui/api".len()..];
    let query = req.uri().query().map(str::to_owned);
    let query = query.as_deref();
    let mirrored = ["/keys", "/teams", "/users", "/audit", "/experiments"]
        .iter()
        .any(|m| route == *m || route.strip_prefix(m).is_some_and(|r| r.starts_with('/')));
    if mirrored {
        let (parts, body) = req.into_parts();
        let body =
            parse::read_body(&parts.headers, body, app.config.max_body_bytes, app.config.timeouts.body_read).await?;
        return admin::handle(app, operator, &parts.method, &format!("/admin{route}"), query, body).await;
    }
    operator.check_route(req.method(), path)?;
    match (req.method(), route) {
        (&Method::GET, "/me") => Ok(crate::http::json_value(StatusCode::OK, &operator.me())),
        (&Method::GET, "/overview") => api::overview(app).await,
        (&Method::GET, "/usage") => api::usage(app, operator, query, false).await,
        (&Method::GET, "/usage.csv") => api::usage(app, operator, query, true).await,
        (&Method::GET, "/requests") => api::requests(app, operator, query).await,
        (&Method::GET, "/requests/bodies") => api::request_bodies(app, query).await,
        (&Method::GET, "/backends") => Ok(api::backends(app)),
        (&Method::GET, "/models") => Ok(crate::catalog::openai_models(app)),
        (&Method::GET, "/mcp") => Ok(mcp::mcp(app).await),
        (&Method::GET, "/cache") => Ok(cache::cache(app)),
        (&Method::POST, "/chat/completions") => Box::pin(playground(app, req, operator, started, rid, trace)).await,
        (
            _,
            "/me" | "/overview" | "/usage" | "/usage.csv" | "/requests" | "/requests/bodies" | "/backends" | "/models"
            | "/mcp" | "/cache" | "/chat/completions",
        ) => Err(GatewayError::MethodNotAllowed),
        _ => Err(GatewayError::RouteNotFound),
    }
}

/// The playground: the real pipeline, as the master key, or as the signed-in user (their and
/// their first team's limits, budget and allow-lists apply; usage is theirs).
async fn playground(
    app: &Arc<App>,
    req: Request<Incoming>,
    operator: &Operator,
    started: Instant,
    rid: &HeaderValue,
    trace: &mut Option<crate::telemetry::Tracing>,
) -> Result<Response<GatewayBody>, GatewayError> {
    let (mut parts, body) = req.into_parts();
    parts.headers.remove(header::COOKIE);
    match &operator.rights {
        Rights::User(u) => {
            let team = u.teams.first().map(|t| Arc::new(t.team.clone()));
            parts.extensions.insert(crate::auth::Auth::user_identity(Arc::new(u.user.clone()), team));
        }
        Rights::Master => {
            if let Some(bearer) = app.auth.master_bearer() {
                parts.headers.insert(header::AUTHORIZATION, bearer);
            }
        }
    }
    // Boxed, as the API routes box it: the pipeline's future is large.
    Box::pin(proxy::forward(
        app,
        (Endpoint::ChatCompletions, None),
        Request::from_parts(parts, body),
        started,
        rid,
        trace,
    ))
    .await
}

/// `POST /ui/login` (a form with `key`): a session cookie and the console, or the form again.
async fn login(
    app: &App,
    req: Request<Incoming>,
    now: i64,
    peer: std::net::SocketAddr,
) -> Result<Response<GatewayBody>, GatewayError> {
    let (parts, body) = req.into_parts();
    let body = parse::read_body(&parts.headers, body, LOGIN_BODY_LIMIT, app.config.timeouts.body_read).await?;
    let form: Vec<(String, String)> = serde_urlencoded::from_bytes(&body).unwrap_or_default();
    let given = form.iter().find(|(k, _)| k == "key").map(|(_, v)| v.as_str()).unwrap_or("");
    let ttl = app.config.console.session_ttl.as_secs() as i64;
    if !app.auth.enabled() {
        return Ok(redirect("/ui", None));
    }
    match app.auth.console_login(given, app.clock.unix_ms(), now + ttl) {
        Some(token) => {
            admin::audit::record(app, &Actor::console(Some(peer)), "console.login", "console", None, None).await;
            Ok(redirect("/ui", Some(session_set_cookie(app, &token, ttl))))
        }
        None => {
            tracing::warn!("console login refused: not the master key");
            let someone = Actor { name: "unknown (wrong key)".to_owned(), client: Some(peer) };
            admin::audit::record(app, &someone, "console.login_failed", "console", None, None).await;
            Ok(redirect("/ui/login?failed=1", None))
        }
    }
}

/// The login page: the single sign-on button shown when `auth.oidc` is set, and the message
/// saying why the last attempt failed, both revealed here on the server (the page's CSP allows no
/// inline script to do it).
fn login_page(app: &App, query: Option<&str>) -> Response<GatewayBody> {
    let failed = query.is_some_and(|q| q.contains("failed"));
    let sso = app.config.auth.oidc.is_some();
    let mut resp = page("login.html", &HeaderMap::new());
    if !failed && !sso {
        return resp;
    }
    let html = switchyard_console::asset("login.html").map(|a| String::from_utf8_lossy(a.bytes)).unwrap_or_default();
    let mut html = html.into_owned();
    if failed {
        html = html.replacen(LOGIN_ERROR_HIDDEN, LOGIN_ERROR_SHOWN, 1);
        if query.is_some_and(|q| q.contains("failed=sso")) {
            html = html.replacen(MASTER_KEY_REFUSED, SSO_REFUSED, 1);
        }
    }
    if sso {
        html = html.replacen(SSO_HIDDEN, SSO_SHOWN, 1);
    }
    *resp.body_mut() = full(html);
    resp.headers_mut().remove(header::ETAG);
    resp.headers_mut().remove(header::CONTENT_ENCODING);
    resp
}

const MASTER_KEY_REFUSED: &str = "That is not the master key.";
const SSO_REFUSED: &str = "Single sign-on did not complete. Try again, or ask an administrator.";
const SSO_HIDDEN: &str = r#"data-testid="sso-login" hidden>"#;
const SSO_SHOWN: &str = r#"data-testid="sso-login">"#;
const LOGIN_ERROR_HIDDEN: &str = r#"data-testid="login-error" role="alert" hidden>"#;
const LOGIN_ERROR_SHOWN: &str = r#"data-testid="login-error" role="alert">"#;

fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    cookie(headers, COOKIE)
}

/// The value of the cookie `name`, among all the request's cookies.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| pair.trim().strip_prefix(name)?.strip_prefix('='))
}

/// `; Secure` when the gateway serves TLS.
fn secure(app: &App) -> &'static str {
    if app.config.tls.is_some() {
        "; Secure"
    } else {
        ""
    }
}

/// The `Set-Cookie` of a new console session, however it was signed in.
fn session_set_cookie(app: &App, token: &str, ttl: i64) -> String {
    format!("{COOKIE}={token}; Path=/ui; HttpOnly; SameSite=Strict; Max-Age={ttl}{}", secure(app))
}

fn redirect(to: &str, cookie: Option<String>) -> Response<GatewayBody> {
    let mut resp = Response::new(full(Bytes::new()));
    *resp.status_mut() = StatusCode::SEE_OTHER;
    if let Ok(to) = HeaderValue::try_from(to) {
        resp.headers_mut().insert(header::LOCATION, to);
    }
    resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Some(cookie) = cookie.and_then(|c| HeaderValue::try_from(c).ok()) {
        resp.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    resp
}

/// A page: an asset, never cached (it is where a new binary's assets are first seen), and never framed.
/// Scripts and styles only from the gateway itself: no inline script or style attribute runs (the
/// app styles elements through the CSSOM, which the policy allows).
fn page(name: &str, request: &HeaderMap) -> Response<GatewayBody> {
    let mut resp = asset(name, request);
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; \
             frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
        ),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    resp
}

/// A static file, gzipped when the browser takes it, revalidated by `ETag`.
fn asset(name: &str, request: &HeaderMap) -> Response<GatewayBody> {
    let Some(a) = switchyard_console::asset(name) else {
        let mut resp = Response::new(full(Bytes::from_static(b"not found")));
        *resp.status_mut() = StatusCode::NOT_FOUND;
        return resp;
    };
    let etag = a.etag();
    let mut resp = if request.get(header::IF_NONE_MATCH).is_some_and(|v| v.as_bytes() == etag.as_bytes()) {
        let mut resp = Response::new(full(Bytes::new()));
        *resp.status_mut() = StatusCode::NOT_MODIFIED;
        resp
    } else if accepts_gzip(request) && !a.gzipped().is_empty() {
        let mut resp = Response::new(full(Bytes::from_static(a.gzipped())));
        resp.headers_mut().insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        resp
    } else {
        Response::new(full(Bytes::from_static(a.bytes)))
    };
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(a.content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    if let Ok(v) = HeaderValue::from_str(etag) {
        h.insert(header::ETAG, v);
    }
    resp
}

fn accepts_gzip(request: &HeaderMap) -> bool {
    request
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|enc| enc.trim().split(';').next().is_some_and(|e| e.trim().eq_ignore_ascii_case("gzip")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_login_page_has_the_message_a_refusal_reveals() {
        let html = switchyard_console::asset("login.html").map(|a| String::from_utf8_lossy(a.bytes).into_owned());
        let html = html.unwrap_or_default();
        for needed in [LOGIN_ERROR_HIDDEN, MASTER_KEY_REFUSED, SSO_HIDDEN] {
            assert!(html.contains(needed), "{needed}");
        }
    }

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let mut h = HeaderMap::new();
        h.append(header::COOKIE, HeaderValue::from_static("a=1; sy_console=tok.en; b=2"));
        assert_eq!(session_cookie(&h), Some("tok.en"));
        let mut h = HeaderMap::new();
        h.append(header::COOKIE, HeaderValue::from_static("sy_console_other=x"));
        assert_eq!(session_cookie(&h), None);
    }
}
