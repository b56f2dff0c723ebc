//! Where a gateway may send an agent's calls: an allow-list of hosts (any port) and
//! `host:port`s. A URL an agent card names is called only when its host is listed, so a card
//! cannot make the gateway reach a metadata service or an internal host (server-side request
//! forgery).

use http::Uri;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct AllowedHosts {
    /// Lower-case `host` or `host:port` entries (IPv6 hosts in brackets).
    entries: Vec<String>,
}

impl AllowedHosts {
    pub fn new<I: IntoIterator<Item = S>, S: AsRef<str>>(entries: I) -> AllowedHosts {
        AllowedHosts { entries: entries.into_iter().map(|e| e.as_ref().trim().to_ascii_lowercase()).collect() }
    }

    /// Whether `uri` (absolute, http or https) is on a listed host.
    pub fn allows(&self, uri: &Uri) -> bool {
        let (Some(host), Some(port)) = (uri.host(), port_of(uri)) else { return false };
        let host = host.to_ascii_lowercase();
        let with_port = format!("{host}:{port}");
        self.entries.iter().any(|e| *e == host || *e == with_port)
    }

    pub fn entries(&self) -> &[String] {
        &self.entries
    }
}

/// The port `uri` reaches: its own, or its scheme's; None for a scheme other than http(s).
fn port_of(uri: &Uri) -> Option<u16> {
    match (uri.port_u16(), uri.scheme_str()) {
        (Some(port), Some("http" | "https")) => Some(port),
        (None, Some("http")) => Some(80),
        (None, Some("https")) => Some(443),
        _ => None,
    }
}

/// `text` as an absolute http(s) URL, or why not.
pub fn parse_url(text: &str) -> Result<Uri, String> {
    let uri: Uri = text.parse().map_err(|e| format!("`{text}` is not a URL: {e}"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
        return Err(format!("`{text}` is not an absolute http(s) URL"));
    }
    Ok(uri)
}

/// `uri`'s `host:port` (the port its scheme implies when none is written).
pub fn host_port(uri: &Uri) -> Option<String> {
    Some(format!("{}:{}", uri.host()?.to_ascii_lowercase(), port_of(uri)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_match_with_or_without_their_port() {
        let allowed = AllowedHosts::new(["agents.internal", "127.0.0.1:8080", "[::1]:9000"]);
        let yes = [
            "http://agents.internal/",
            "https://AGENTS.internal:8443/x",
            "http://127.0.0.1:8080/a",
            "http://[::1]:9000/",
        ];
        for url in yes {
            assert!(allowed.allows(&parse_url(url).unwrap()), "{url}");
        }
        let no = [
            "http://127.0.0.1:8081/",
            "http://169.254.169.254/latest/",
            "http://agents.internal.evil.com/",
            "http://[::1]:9001/",
        ];
        for url in no {
            assert!(!allowed.allows(&parse_url(url).unwrap()), "{url}");
        }
        assert!(parse_url("ftp://agents.internal/").is_err());
        assert!(parse_url("/relative").is_err());
        assert_eq!(host_port(&parse_url("https://a.b/").unwrap()).as_deref(), Some("a.b:443"));
    }
}
