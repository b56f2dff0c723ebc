//! `security:` — which browser origins and which `Host` names may reach the MCP endpoints, the
//! console and the admin API (DNS-rebinding protection, as the MCP specification asks of servers).

use std::net::SocketAddr;

use serde::Deserialize;

use super::ConfigError;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSecurity {
    /// Origins (`https://console.example.com`, `*`) allowed beside the gateway's own.
    allowed_origins: Option<Vec<String>>,
    /// Host names (`gateway.internal`, `*.example.com`, `*`) a request may name in `Host`.
    allowed_hosts: Option<Vec<String>>,
    /// Hosts (`agents.internal`) and `host:port`s A2A agents and their cards may name.
    agent_hosts: Option<Vec<String>>,
}

/// The validated rules; see `server/origin.rs` for how they apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecurityConfig {
    /// Normalised origins (`scheme://host[:port]`, lower case, default port dropped), or `*`.
    pub allowed_origins: Vec<String>,
    /// Host patterns (lower case, `*` globs); empty means any host.
    pub allowed_hosts: Vec<String>,
    /// Where A2A agents may be called (`host` or `host:port`); empty: the configured agents' own.
    pub agent_hosts: Vec<String>,
}

impl Default for SecurityConfig {
    fn default() -> Self {
        SecurityConfig::for_listen(None, "127.0.0.1:4100".parse().ok())
    }
}

impl SecurityConfig {
    /// Default hosts: a loopback listener answers only to loopback names (a page that rebinds
    /// its own name to 127.0.0.1 still sends that name); any other listener to any host.
    fn for_listen(origins: Option<Vec<String>>, listen: Option<SocketAddr>) -> SecurityConfig {
        let hosts = match listen {
            Some(addr) if addr.ip().is_loopback() => {
                let own = match addr {
                    SocketAddr::V4(a) => a.ip().to_string(),
                    SocketAddr::V6(a) => format!("[{}]", a.ip()),
                };
                let mut hosts = vec![own];
                for name in ["localhost", "127.0.0.1", "[::1]"] {
                    if !hosts.iter().any(|h| h == name) {
                        hosts.push(name.to_owned());
                    }
                }
                hosts
            }
            _ => Vec::new(),
        };
        SecurityConfig { allowed_origins: origins.unwrap_or_default(), allowed_hosts: hosts, agent_hosts: Vec::new() }
    }
}

pub fn validate(raw: Option<RawSecurity>, listen: SocketAddr) -> Result<SecurityConfig, ConfigError> {
    let raw = raw.unwrap_or_default();
    let mut origins = Vec::new();
    for (i, origin) in raw.allowed_origins.unwrap_or_default().iter().enumerate() {
        let normalised = if origin == "*" { Some("*".to_owned()) } else { normalise_origin(origin) };
        let Some(normalised) = normalised else {
            return Err(ConfigError::at(
                format!("security.allowed_origins[{i}]"),
                format!("`{origin}` is not an origin like https://console.example.com (or `*`)"),
            ));
        };
        origins.push(normalised);
    }
    let mut config = SecurityConfig::for_listen(Some(origins), Some(listen));
    for (i, host) in raw.agent_hosts.iter().flatten().enumerate() {
        if host.is_empty() || host.contains(['/', ' ', '*']) {
            let message = format!("`{host}` is not a host or host:port like agents.internal or 10.0.0.5:8000");
            return Err(ConfigError::at(format!("security.agent_hosts[{i}]"), message));
        }
    }
    config.agent_hosts = raw.agent_hosts.unwrap_or_default();
    if let Some(hosts) = raw.allowed_hosts {
        for (i, host) in hosts.iter().enumerate() {
            if host.is_empty() || host.contains(['/', ' ']) {
                return Err(ConfigError::at(
                    format!("security.allowed_hosts[{i}]"),
                    format!("`{host}` is not a host name like gateway.internal, *.example.com or *"),
                ));
            }
        }
        config.allowed_hosts = hosts.iter().map(|h| h.to_ascii_lowercase()).collect();
        if config.allowed_hosts.iter().any(|h| h == "*") {
            config.allowed_hosts.clear();
        }
    }
    Ok(config)
}

/// `scheme://host[:port]` in lower case, the scheme's default port dropped; `None` for anything
/// else (a path, no scheme, `null`).
pub fn normalise_origin(origin: &str) -> Option<String> {
    let (scheme, authority) = origin.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let authority = authority.strip_suffix('/').unwrap_or(authority).to_ascii_lowercase();
    if authority.is_empty() || authority.contains(['/', '?', '#', '@', ' ']) {
        return None;
    }
    let default_port = match scheme.as_str() {
        "http" => ":80",
        "https" => ":443",
        _ => "",
    };
    let authority = authority.strip_suffix(default_port).filter(|_| !default_port.is_empty()).unwrap_or(&authority);
    Some(format!("{scheme}://{authority}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_normalised_and_checked() {
        assert_eq!(normalise_origin("HTTPS://App.Example.com:443/").as_deref(), Some("https://app.example.com"));
        assert_eq!(normalise_origin("http://localhost:4100").as_deref(), Some("http://localhost:4100"));
        assert_eq!(normalise_origin("null"), None);
        assert_eq!(normalise_origin("https://a.example/path"), None);
        let raw =
            RawSecurity { allowed_origins: Some(vec!["example.com".into()]), allowed_hosts: None, agent_hosts: None };
        assert!(validate(Some(raw), "127.0.0.1:1".parse().unwrap()).is_err());
    }

    #[test]
    fn loopback_listeners_answer_to_loopback_names_only_unless_configured() {
        let loopback = validate(None, "127.0.0.1:4100".parse().unwrap()).unwrap();
        assert_eq!(loopback.allowed_hosts, ["127.0.0.1", "localhost", "[::1]"]);
        let v6 = validate(None, "[::1]:4100".parse().unwrap()).unwrap();
        assert!(v6.allowed_hosts.contains(&"[::1]".to_owned()));
        let public = validate(None, "0.0.0.0:4100".parse().unwrap()).unwrap();
        assert!(public.allowed_hosts.is_empty());
        let raw = RawSecurity { allowed_origins: None, allowed_hosts: Some(vec!["*".into()]), agent_hosts: None };
        assert!(validate(Some(raw), "127.0.0.1:1".parse().unwrap()).unwrap().allowed_hosts.is_empty());
    }
}
