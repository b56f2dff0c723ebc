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
    max_output_bytes: Option<u64>,
}

#[derive(Debug, Clone, Default)]
pub struct McpConfig {
    pub servers: Vec<McpServerConfig>,
    /// Code Mode's limits, when `mcp.code_mode.enabled`.
    pub code_mode: Option<CodeModeConfig>,
}

/// `mcp.code_mode`: the sandbox's limits per program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeModeConfig {
    pub memory_bytes: usize,
    pub timeout: Duration,
    pub max_tool_calls: u32,
    pub max_parallel_calls: u32,
    pub max_output_bytes: usize,
}

#[derive(Debug, Clone)]
pub enum McpTransport {
    /// Streamable HTTP at `url`, with `headers` (credentials) on every request.
    Http { url: http::Uri, headers: Vec<(http::HeaderName, http::HeaderValue)> },
    /// A child process speaking JSON-RPC on stdin/stdout, with only `env` (plus PATH and HOME).
    Stdio { command: Vec<String>, env: Vec<(String, String)> },
}

#[derive(Debug, Clone)]
pub struct McpServerConfig {
    /// The alias clients see: `[a-z0-9-]{1,16}`.
    pub name: String,
    pub transport: McpTransport,
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
        let transport = match (s.url, s.command) {
            (Some(url), None) => {
                if !s.env.is_empty() {
                    return Err(ConfigError::at(at("env"), "`env` applies to `command` servers only"));
                }
                http_transport(&at, &url, s.headers)?
            }
            (None, Some(command)) => {
                if command.first().is_none_or(String::is_empty) {
                    return Err(ConfigError::at(at("command"), "give the program and its arguments"));
                }
                if !s.headers.is_empty() {
                    return Err(ConfigError::at(at("headers"), "`headers` apply to `url` servers only"));
                }
                McpTransport::Stdio { command, env: s.env.into_iter().collect() }
            }
            _ => return Err(ConfigError::at(at("url"), "give exactly one of `url` and `command`")),
        };
        let timeout = match &s.timeout {
            Some(t) => parse_duration(t).map_err(|m| ConfigError::at(at("timeout"), m))?,
            None => DEFAULT_TIMEOUT,
        };
        servers.push(McpServerConfig { name: s.name, transport, allow: s.tools.allow, deny: s.tools.deny, timeout });
    }
    let code_mode = match raw.code_mode {
        Some(code) if code.enabled.unwrap_or(true) => Some(code_mode(code)?),
        _ => None,
    };
    if code_mode.is_some() && servers.iter().any(|s| s.name == CODE_MODE_ALIAS) {
        return Err(ConfigError::at(
            "mcp.servers",
            format!(
                "`{CODE_MODE_ALIAS}` is Code Mode's endpoint (/mcp/{CODE_MODE_ALIAS}): give that server another name"
            ),
        ));
    }
    Ok(McpConfig { servers, code_mode })
}

/// Code Mode is served as this server.
const CODE_MODE_ALIAS: &str = "code";

fn code_mode(raw: RawCodeMode) -> Result<CodeModeConfig, ConfigError> {
    let memory_mb = raw.memory_mb.unwrap_or(32);
    // The runner needs about 2 MiB before the program allocates anything.
    if !(4..=4096).contains(&memory_mb) {
        return Err(ConfigError::at("mcp.code_mode.memory_mb", "use 4 to 4096"));
    }
    let timeout = match &raw.timeout {
        Some(t) => parse_duration(t).map_err(|m| ConfigError::at("mcp.code_mode.timeout", m))?,
        None => Duration::from_secs(30),
    };
    if timeout.is_zero() || timeout > Duration::from_secs(3600) {
        return Err(ConfigError::at("mcp.code_mode.timeout", "use more than 0 and at most 1h"));
    }
    let max_tool_calls = raw.max_tool_calls.unwrap_or(50);
    // The runner keeps a table of 4096 pending calls.
    if max_tool_calls > 4096 {
        return Err(ConfigError::at("mcp.code_mode.max_tool_calls", "use at most 4096"));
    }
    let max_parallel_calls = raw.max_parallel_calls.unwrap_or(8);
    if !(1..=256).contains(&max_parallel_calls) {
        return Err(ConfigError::at("mcp.code_mode.max_parallel_calls", "use 1 to 256"));
    }
    let max_output_bytes = raw.max_output_bytes.unwrap_or(1 << 20);
    if !(1024..=(64 << 20)).contains(&max_output_bytes) {
        return Err(ConfigError::at("mcp.code_mode.max_output_bytes", "use 1024 to 67108864"));
    }
    Ok(CodeModeConfig {
        memory_bytes: (memory_mb as usize) << 20,
        timeout,
        max_tool_calls,
        max_parallel_calls,
        max_output_bytes: max_output_bytes as usize,
    })
}

fn http_transport(
    at: &dyn Fn(&str) -> String,
    url: &str,
    raw_headers: BTreeMap<String, String>,
) -> Result<McpTransport, ConfigError> {
    let url: http::Uri = url.parse().map_err(|_| ConfigError::at(at("url"), format!("`{url}` is not a URL")))?;
    if !matches!(url.scheme_str(), Some("http" | "https")) || url.host().is_none() {
        return Err(ConfigError::at(at("url"), "use an http:// or https:// URL"));
    }
    let mut headers = Vec::with_capacity(raw_headers.len());
    for (name, value) in raw_headers {
        let path = at(&format!("headers.{name}"));
        let name =
            http::HeaderName::try_from(name.as_str()).map_err(|_| ConfigError::at(&path, "not a valid header name"))?;
        let mut value = http::HeaderValue::try_from(value.as_str())
            .map_err(|_| ConfigError::at(&path, "not a valid header value"))?;
        value.set_sensitive(true);
        headers.push((name, value));
    }
    Ok(McpTransport::Http { url, headers })
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
        let super::McpTransport::Http { headers, .. } = &s.transport else { panic!("an HTTP server") };
        assert_eq!(headers[0].1, "Bearer t0p");
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
        assert!(err("mcp: {servers: [{name: a, command: []}]}").starts_with("mcp.servers[0].command"));
        assert!(err("mcp: {servers: [{name: a, url: 'http://a', env: {X: y}}]}").starts_with("mcp.servers[0].env"));
        let c = load("mcp: {servers: [{name: files, command: [npx, server], env: {ROOT: '${TOKEN}'}}]}").unwrap();
        let super::McpTransport::Stdio { command, env } = &c.mcp.servers[0].transport else { panic!("stdio") };
        assert_eq!((command.len(), env[0].1.as_str()), (2, "t0p"));
        assert!(err("mcp: {servers: [{name: a, url: 'http://a', bogus: 1}]}").contains("bogus"));
        assert!(err("mcp: {code_mode: {memory_mb: 1}}").starts_with("mcp.code_mode.memory_mb"));
        assert!(err("mcp: {code_mode: {timeout: 0s}}").starts_with("mcp.code_mode.timeout"));
        assert!(err("mcp: {code_mode: {max_parallel_calls: 0}}").starts_with("mcp.code_mode.max_parallel_calls"));
        assert!(err("mcp: {code_mode: {max_tool_calls: 5000}}").starts_with("mcp.code_mode.max_tool_calls"));
        assert!(err("mcp: {code_mode: {max_output_bytes: 10}}").starts_with("mcp.code_mode.max_output_bytes"));
        assert!(
            err("mcp: {code_mode: {enabled: true}, servers: [{name: code, url: 'http://a'}]}").contains("Code Mode")
        );
    }

    #[test]
    fn code_mode_limits_with_defaults() {
        let c = load("mcp: {code_mode: {enabled: true, memory_mb: 16, timeout: 5s, max_tool_calls: 10}}").unwrap();
        let code = c.mcp.code_mode.unwrap();
        assert_eq!(code.memory_bytes, 16 << 20);
        assert_eq!(code.timeout, std::time::Duration::from_secs(5));
        assert_eq!((code.max_tool_calls, code.max_parallel_calls, code.max_output_bytes), (10, 8, 1 << 20));
        assert!(load("mcp: {code_mode: {enabled: false}}").unwrap().mcp.code_mode.is_none());
    }
}
