//! Origin and `Host` validation for the routes a browser page must not reach on the user's
//! behalf (`/mcp*`, `/ui`, `/admin`): DNS rebinding gives a foreign page the gateway's address
//! under the page's own name, so a foreign `Host` on a loopback listener is refused (421), and
//! a foreign `Origin` is refused (403) with or without a master key. Requests without `Origin`
//! (SDKs, curl) are not browsers' cross-site requests and pass.

use http::header::{HOST, ORIGIN};
use http::Request;

use crate::config::security::normalise_origin;
use crate::config::SecurityConfig;
use crate::error::GatewayError;
use crate::glob;

/// Refuses a request whose `Host` or `Origin` the rules do not allow.
pub fn check<B>(rules: &SecurityConfig, req: &Request<B>) -> Result<(), GatewayError> {
    let host =
        req.headers().get(HOST).and_then(|h| h.to_str().ok()).or_else(|| req.uri().authority().map(|a| a.as_str()));
    let host = host.map(str::to_ascii_lowercase);
    if !rules.allowed_hosts.is_empty() {
        let name = host.as_deref().map(host_name);
        if !name.is_some_and(|name| rules.allowed_hosts.iter().any(|p| glob::matches(p, name))) {
            return Err(GatewayError::MisdirectedHost);
        }
    }
    let Some(origin) = req.headers().get(ORIGIN) else { return Ok(()) };
    let origin = origin.to_str().ok().and_then(normalise_origin);
    let allowed = origin.as_deref().is_some_and(|origin| {
        rules.allowed_origins.iter().any(|o| o == "*" || o == origin) || is_own(origin, host.as_deref())
    });
    if allowed {
        Ok(())
    } else {
        Err(GatewayError::Forbidden {
            message: "requests from this origin are not allowed (security.allowed_origins)".to_owned(),
            code: "origin_not_allowed",
        })
    }
}

/// `Host` without its port: `example.com:4100` → `example.com`, `[::1]:4100` → `[::1]`.
fn host_name(host: &str) -> &str {
    match host.rfind(':') {
        Some(i) if !host[i..].contains(']') => &host[..i],
        _ => host,
    }
}

/// The gateway's own origin: the origin's authority is the request's `Host` (ports compared as
/// the origin's scheme defaults them).
fn is_own(origin: &str, host: Option<&str>) -> bool {
    let Some(host) = host else { return false };
    let Some((scheme, authority)) = origin.split_once("://") else { return false };
    let default_port = if scheme == "https" { ":443" } else { ":80" };
    authority == host || (host.ends_with(default_port) && authority == host.strip_suffix(default_port).unwrap_or(host))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(host: &str, origin: Option<&str>) -> Request<()> {
        let mut builder = Request::builder().uri("/mcp").header(HOST, host);
        if let Some(origin) = origin {
            builder = builder.header(ORIGIN, origin);
        }
        builder.body(()).unwrap()
    }

    fn loopback() -> SecurityConfig {
        SecurityConfig::default()
    }

    #[test]
    fn own_origin_and_no_origin_pass_and_foreign_ones_are_refused() {
        let rules = loopback();
        assert!(check(&rules, &request("127.0.0.1:4100", None)).is_ok());
        assert!(check(&rules, &request("127.0.0.1:4100", Some("http://127.0.0.1:4100"))).is_ok());
        assert!(check(&rules, &request("localhost:80", Some("http://localhost"))).is_ok());
        let foreign = check(&rules, &request("127.0.0.1:4100", Some("http://evil.example.com")));
        assert_eq!(foreign.unwrap_err().status(), http::StatusCode::FORBIDDEN);
        assert!(check(&rules, &request("127.0.0.1:4100", Some("null"))).is_err());
        assert!(check(&rules, &request("127.0.0.1:4100", Some("http://127.0.0.1:4101"))).is_err());
    }

    #[test]
    fn a_foreign_host_on_loopback_is_misdirected() {
        let rules = loopback();
        let rebound = check(&rules, &request("evil.example.com:4100", Some("http://evil.example.com:4100")));
        assert_eq!(rebound.unwrap_err().status(), http::StatusCode::MISDIRECTED_REQUEST);
        assert!(check(&rules, &request("[::1]:4100", None)).is_ok());
        assert!(check(&rules, &request("LOCALHOST:4100", None)).is_ok());
    }

    #[test]
    fn configured_origins_and_hosts_are_allowed() {
        let rules = SecurityConfig {
            allowed_origins: vec!["https://console.example.com".into()],
            allowed_hosts: vec!["*.example.com".into()],
            agent_hosts: vec![],
        };
        assert!(check(&rules, &request("gw.example.com", Some("https://console.example.com"))).is_ok());
        assert!(check(&rules, &request("gw.example.com", Some("https://other.example.com"))).is_err());
        assert!(check(&rules, &request("gw.other.com", None)).is_err());
        let any = SecurityConfig { allowed_origins: vec!["*".into()], allowed_hosts: vec![], agent_hosts: vec![] };
        assert!(check(&any, &request("anything", Some("https://x.example"))).is_ok());
    }
}
