//! `agents:` — A2A agents served at `/a2a/{name}` (issue 59): where each is, whose card to serve
//! (the agent's own, fetched and cached, or a file), its request-rate limit and the headers the
//! gateway adds for it. Every agent's address must be on `security.agent_hosts` (by default, the
//! configured agents' own `host:port`s are the whole list), and so must every interface a card
//! names: a card cannot send the gateway elsewhere.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, HeaderValue, Uri};
use serde::Deserialize;
use switchyard_a2a::hosts::{host_port, parse_url};
use switchyard_a2a::AllowedHosts;

use super::duration::nonzero;
use super::ConfigError;

pub type RawAgents = BTreeMap<String, RawAgent>;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAgent {
    /// The agent's base URL: its card is at `{url}/.well-known/agent-card.json`.
    pub url: String,
    /// `fetch` (the default): the agent's own card, cached; or a JSON file served instead.
    pub card: Option<String>,
    /// How long a fetched card is served before it is fetched again (default 5m).
    pub card_ttl: Option<String>,
    /// Calls per minute to this agent, from every caller together.
    pub rpm: Option<u32>,
    /// How long one call may take, streams excepted (they may last; default 5m).
    pub timeout: Option<String>,
    /// Headers sent to the agent (its own credentials); a client's never are.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    pub description: Option<String>,
}

/// Where an agent's card comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum CardSource {
    Fetch,
    /// The configured card (JSON), served whatever the agent's own says.
    Configured(Arc<serde_json::Value>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct AgentConfig {
    pub name: String,
    pub url: Uri,
    pub card: CardSource,
    pub card_ttl: Duration,
    pub rpm: Option<u32>,
    pub timeout: Duration,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub description: Option<String>,
}

/// The agents and the hosts their calls may reach.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentsConfig {
    pub list: Vec<Arc<AgentConfig>>,
    pub allowed: AllowedHosts,
}

impl AgentsConfig {
    pub fn get(&self, name: &str) -> Option<&Arc<AgentConfig>> {
        self.list.iter().find(|a| a.name == name)
    }
}

pub fn validate(raw: RawAgents, agent_hosts: &[String]) -> Result<AgentsConfig, ConfigError> {
    let mut list = Vec::with_capacity(raw.len());
    for (name, agent) in raw {
        list.push(Arc::new(agent_config(name, agent)?));
    }
    let allowed = match agent_hosts.is_empty() {
        true => AllowedHosts::new(list.iter().filter_map(|a| host_port(&a.url))),
        false => AllowedHosts::new(agent_hosts),
    };
    if let Some(agent) = list.iter().find(|a| !allowed.allows(&a.url)) {
        let message = format!("`{}` is not on security.agent_hosts", agent.url);
        return Err(ConfigError::at(format!("agents.{}.url", agent.name), message));
    }
    Ok(AgentsConfig { list, allowed })
}

fn agent_config(name: String, raw: RawAgent) -> Result<AgentConfig, ConfigError> {
    let at = |field: &str| format!("agents.{name}.{field}");
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) {
        return Err(ConfigError::at(at("name"), "an agent's name is letters, digits, `-`, `_` and `.`"));
    }
    let url = parse_url(raw.url.trim_end_matches('/')).map_err(|m| ConfigError::at(at("url"), m))?;
    let card = match raw.card.as_deref() {
        None | Some("fetch") => CardSource::Fetch,
        Some(file) => {
            let text =
                std::fs::read_to_string(file).map_err(|e| ConfigError::at(at("card"), format!("{file}: {e}")))?;
            let card: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| ConfigError::at(at("card"), format!("{file} is not JSON: {e}")))?;
            CardSource::Configured(Arc::new(card))
        }
    };
    let mut headers = Vec::with_capacity(raw.headers.len());
    for (k, v) in &raw.headers {
        let name = HeaderName::from_bytes(k.as_bytes())
            .map_err(|_| ConfigError::at(at("headers"), format!("`{k}` is not a header name")))?;
        let value = HeaderValue::from_str(v)
            .map_err(|_| ConfigError::at(at("headers"), format!("the value of `{k}` is not a header value")))?;
        headers.push((name, value));
    }
    Ok(AgentConfig {
        card_ttl: nonzero(&at("card_ttl"), &raw.card_ttl, Duration::from_secs(300))?,
        timeout: nonzero(&at("timeout"), &raw.timeout, Duration::from_secs(300))?,
        name,
        url,
        card,
        rpm: raw.rpm,
        headers,
        description: raw.description,
    })
}
