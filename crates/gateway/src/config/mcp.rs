//! The `mcp:` section: the upstream MCP servers behind `POST /mcp` and `POST /mcp/{server}`,
//! their credentials (from config and environment only, never from clients) and tool rules.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use serde::Deserialize;

use super::duration::parse_duration;
use super::ConfigError;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMcp {
    #[serde(default)]
    servers: Vec<RawMcpServer>,
    code_mode: Option<RawCodeMode>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMcpServer {
    name: String,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    command: Option<Vec<String>>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    tools: RawToolRules,
    timeout: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawToolRules {
    #[serde(default)]
    allow: Vec<String>,
    #[serde(default)]
    deny: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCodeMode {
    enabled: Option<bool>,
    memory_mb: Option<u64>,
    timeout: Option<String>,
    max_tool_calls: Option<u32>,
    max_parallel_calls: Option<u32>,
}

#[derive(Debug, Clone, Default)]
pub struct McpConfig {
    pub servers: Vec<McpServerConfig>,
}

#[derive(Debug, Clone)]
pub struct McpServerConfig {
    /// The alias clients see: `[a-z0-9-]{1,16}`.
    pub name: String,
    pub url: http::Uri,
    /// Sent on every upstream request (credentials), after `${VAR}` interpolation.
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
    pub allow: Vec<String>,
    pub deny: Vec<String>,
    /// Per upstream request.
    pub timeout: Duration,
}

impl McpServerConfig {
    /// The server's own tool rule: allowed (all when `allow` is empty) and not denied.
    pub fn tool_allowed(&self, tool: &str) -> bool {
        (self.allow.is_empty() || crate::glob::any(&self.allow, tool)) && !crate::glob::any(&self.deny, tool)
    }
}

/// Upstream MCP requests time out after this unless the server sets `timeout`.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

pub fn validate(raw: RawMcp) -> Result<McpConfig, ConfigError> {
    let mut names = HashSet::new();
    let mut servers = Vec::with_capacity(raw.servers.len());
    for (i, s) in raw.servers.into_iter().enumerate() {
        let at = |field: &str| format!("mcp.servers[{i}].{field}");
        if !valid_alias(&s.name) {
            return Err(ConfigError::at(at("name"), "use 1 to 16 of a-z, 0-9 and '-'"));
        }
        if !names.insert(s.name.clone()) {
            return Err(ConfigError::at(at("name"), format!("`{}` is used twice", s.name)));
        }
        let url = match (s.url, s.command) {
            (Some(url), None) => url,
            (None, Some(_)) => {
                return Err(ConfigError::at(
                    at("command"),
                    "stdio MCP servers are not supported by this build yet; run the server behind Streamable HTTP \
                     and give its `url`",
                ))
            }
            _ => return Err(ConfigError::at(at("url"), "give exactly one of `url` and `command`")),
        };
        if !s.env.is_empty() {
            return Err(ConfigError::at(at("env"), "`env` applies to `command` servers only"));
        }
        let url: http::Uri = url.parse().map_err(|_| ConfigError::at(at("url"), format!("`{url}` is not a URL")))?;
        if !matches!(url.scheme_str(), Some("http" | "https")) || url.host().is_none() {
            return Err(ConfigError::at(at("url"), "use an http:// or https:// URL"));
        }
        let mut headers = Vec::with_capacity(s.headers.len());
        for (name, value) in s.headers {
            let path = at(&format!("headers.{name}"));
            let name = http::HeaderName::try_from(name.as_str())
                .map_err(|_| ConfigError::at(&path, "not a valid header name"))?;
            let mut value = http::HeaderValue::try_from(value.as_str())
                .map_err(|_| ConfigError::at(&path, "not a valid header value"))?;
            value.set_sensitive(true);
            headers.push((name, value));
        }
        let timeout = match &s.timeout {
            Some(t) => parse_duration(t).map_err(|m| ConfigError::at(at("timeout"), m))?,
            None => DEFAULT_TIMEOUT,
        };
        servers.push(McpServerConfig { name: s.name, url, headers, allow: s.tools.allow, deny: s.tools.deny, timeout });
    }
    if let Some(code) = raw.code_mode {
        let _ = (code.memory_mb, code.timeout, code.max_tool_calls, code.max_parallel_calls);
        if code.enabled == Some(true) {
            return Err(ConfigError::at(
                "mcp.code_mode.enabled",
                "Code Mode is not available in this build yet (it needs its WebAssembly sandbox)",
            ));
        }
    }
    Ok(McpConfig { servers })
}

fn valid_alias(name: &str) -> bool {
    (1..=16).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::super::Config;
    use std::collections::HashMap;

    fn load(yaml: &str) -> Result<Config, String> {
        let env: HashMap<String, String> = [("TOKEN".to_owned(), "t0p".to_owned())].into();
        Config::from_yaml(yaml, &env).map_err(|e| e.to_string())
    }

    #[test]
    fn servers_with_credentials_from_the_environment_and_tool_rules() {
        let c = load(
            "mcp:\n  servers:\n    - {name: github, url: 'https://mcp.example.com/mcp', headers: {Authorization: 'Bearer ${TOKEN}'}, tools: {deny: ['write_*']}}\n",
        )
        .unwrap();
        let s = &c.mcp.servers[0];
        assert_eq!(s.headers[0].1, "Bearer t0p");
        assert!(s.tool_allowed("read_file") && !s.tool_allowed("write_file"));
    }

    #[test]
    fn bad_servers_name_their_key() {
        let err = |yaml: &str| load(yaml).unwrap_err();
        assert!(err("mcp: {servers: [{name: GitHub, url: 'http://a/mcp'}]}").starts_with("mcp.servers[0].name"));
        assert!(
            err("mcp: {servers: [{name: a, url: 'http://a'}, {name: a, url: 'http://b'}]}").contains("servers[1].name")
        );
        assert!(err("mcp: {servers: [{name: a}]}").starts_with("mcp.servers[0].url"));
        assert!(err("mcp: {servers: [{name: a, url: 'ftp://x'}]}").starts_with("mcp.servers[0].url"));
        assert!(err("mcp: {servers: [{name: a, command: [npx, x]}]}").starts_with("mcp.servers[0].command"));
        assert!(err("mcp: {servers: [{name: a, url: 'http://a', bogus: 1}]}").contains("bogus"));
        assert!(err("mcp: {code_mode: {enabled: true}}").starts_with("mcp.code_mode.enabled"));
    }
}
