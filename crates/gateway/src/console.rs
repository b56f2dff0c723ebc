//! The operator's console at `/ui`: the browser app (static files from the `switchyard-console`
//! crate), logging in with the master key, and the JSON the app reads under `/ui/api`. A logged-in
//! browser holds an HttpOnly, SameSite=Strict session cookie scoped to `/ui`; nothing under
//! `/ui/api` answers without it, and anything that changes state also needs the
//! `x-switchyard-console` header a cross-site form cannot send.
//!
//! The console composes the handlers below it rather than repeating them: keys go through the
//! admin API's own code, the playground through the proxy as the master key.

mod api;
mod mcp;

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;

use crate::admin::audit::Actor;
use crate::app::App;
use crate::endpoint::Endpoint;
use crate::error::GatewayError;
use crate::http::{full, parse, GatewayBody};
use crate::{admin, proxy};

const COOKIE: &str = "sy_console";
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
    let logged_in = app.auth.console_session(token.as_deref(), now);
    match (req.method(), path.as_str()) {
        (&Method::GET, p) if p.starts_with("/ui/assets/") => Ok(asset(&p["/ui/assets/".len()..], req.headers())),
        (&Method::GET, "/ui" | "/ui/") if logged_in => Ok(page("index.html", req.headers())),
        (&Method::GET, "/ui" | "/ui/") => Ok(redirect("/ui/login", None)),
        (&Method::GET, "/ui/login") if logged_in && app.auth.enabled() => Ok(redirect("/ui", None)),
        (&Method::GET, "/ui/login") if req.uri().query().is_some_and(|q| q.contains("failed")) => Ok(refused_login()),
        (&Method::GET, "/ui/login") => Ok(page("login.html", req.headers())),
        (&Method::POST, "/ui/login") => login(app, req, now, peer).await,
        (&Method::POST, "/ui/logout") => {
            if let Some(token) = &token {
                app.auth.console_logout(token, now);
                admin::audit::record(app, &Actor::console(Some(peer)), "console.logout", "console", None, None).await;
            }
            Ok(redirect("/ui/login", Some(format!("{COOKIE}=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0"))))
        }
        (_, p) if p.starts_with("/ui/api/") => {
            if !logged_in {
                return Err(GatewayError::Unauthorized {
                    message: "log in to the console first".to_owned(),
                    code: "console_login_required",
                });
            }
            if req.method() != Method::GET && req.headers().get(CSRF_HEADER).is_none() {
                return Err(GatewayError::Forbidden {
                    message: format!("console requests that change state need the `{CSRF_HEADER}` header"),
                    code: "csrf",
                });
            }
            let actor = Actor::console(Some(peer));
            Box::pin(api_route(app, req, &path, started, rid, trace, &actor)).await
        }
        (_, "/ui" | "/ui/" | "/ui/login" | "/ui/logout") => Err(GatewayError::MethodNotAllowed),
        _ => Err(GatewayError::RouteNotFound),
    }
}

async fn api_route(
    app: &Arc<App>,
    req: Request<Incoming>,
    path: &str,
    started: Instant,
    rid: &HeaderValue,
    trace: &mut Option<crate::telemetry::Tracing>,
    actor: &Actor,
) -> Result<Response<GatewayBody>, GatewayError> {
    let route = &path["/ui/api".len()..];
    let query = req.uri().query().map(str::to_owned);
    let query = query.as_deref();
    match (req.method(), route) {
        (&Method::GET, "/overview") => api::overview(app).await,
        (&Method::GET, "/usage") => api::usage(app, query, false).await,
        (&Method::GET, "/usage.csv") => api::usage(app, query, true).await,
        (&Method::GET, "/requests") => api::requests(app, query).await,
        (&Method::GET, "/requests/bodies") => api::request_bodies(app, query).await,
        (&Method::GET, "/backends") => Ok(api::backends(app)),
        (&Method::GET, "/models") => Ok(crate::catalog::openai_models(app)),
        (&Method::GET, "/mcp") => Ok(mcp::mcp(app).await),
        (&Method::POST, "/chat/completions") => {
            // The playground: the real pipeline, as the master key.
            let (mut parts, body) = req.into_parts();
            parts.headers.remove(header::COOKIE);
            if let Some(bearer) = app.auth.master_bearer() {
                parts.headers.insert(header::AUTHORIZATION, bearer);
            }
            // Boxed, as the API routes box it: the pipeline's future is large.
            Box::pin(proxy::forward(
                app,
                Endpoint::ChatCompletions,
                Request::from_parts(parts, body),
                started,
                rid,
                trace,
            ))
            .await
        }
        (_, r) if r == "/keys" || r.starts_with("/keys/") => {
            let (parts, body) = req.into_parts();
            let body = parse::read_body(&parts.headers, body, app.config.max_body_bytes, app.config.timeouts.body_read)
                .await?;
            admin::handle(app, actor, &parts.method, &format!("/admin{route}"), query, body).await
        }
        (
            _,
            "/overview" | "/usage" | "/usage.csv" | "/requests" | "/requests/bodies" | "/backends" | "/models" | "/mcp"
            | "/chat/completions",
        ) => Err(GatewayError::MethodNotAllowed),
        _ => Err(GatewayError::RouteNotFound),
    }
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
    match app.auth.console_login(given, now + ttl) {
        Some(token) => {
            admin::audit::record(app, &Actor::console(Some(peer)), "console.login", "console", None, None).await;
            let secure = if app.config.tls.is_some() { "; Secure" } else { "" };
            let cookie = format!("{COOKIE}={token}; Path=/ui; HttpOnly; SameSite=Strict; Max-Age={ttl}{secure}");
            Ok(redirect("/ui", Some(cookie)))
        }
        None => {
            tracing::warn!("console login refused: not the master key");
            let someone = Actor { name: "unknown (wrong key)".to_owned(), client: Some(peer) };
            admin::audit::record(app, &someone, "console.login_failed", "console", None, None).await;
            Ok(redirect("/ui/login?failed=1", None))
        }
    }
}

/// The login page saying the key was wrong: its hidden message shown, on the server (the page's
/// CSP allows no inline script to do it).
fn refused_login() -> Response<GatewayBody> {
    let mut resp = page("login.html", &HeaderMap::new());
    let html = switchyard_console::asset("login.html").map(|a| String::from_utf8_lossy(a.bytes)).unwrap_or_default();
    *resp.body_mut() = full(html.replacen(LOGIN_ERROR_HIDDEN, LOGIN_ERROR_SHOWN, 1));
    resp.headers_mut().remove(header::ETAG);
    resp
}

const LOGIN_ERROR_HIDDEN: &str = r#"data-testid="login-error" role="alert" hidden>"#;
const LOGIN_ERROR_SHOWN: &str = r#"data-testid="login-error" role="alert">"#;

fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| pair.trim().strip_prefix(COOKIE)?.strip_prefix('='))
}

fn redirect(to: &'static str, cookie: Option<String>) -> Response<GatewayBody> {
    let mut resp = Response::new(full(Bytes::new()));
    *resp.status_mut() = StatusCode::SEE_OTHER;
    resp.headers_mut().insert(header::LOCATION, HeaderValue::from_static(to));
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
        assert!(html.unwrap_or_default().contains(LOGIN_ERROR_HIDDEN));
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
