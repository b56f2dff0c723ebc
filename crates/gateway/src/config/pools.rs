//! Backends that are pools of endpoints, and the endpoint picker (issue 55):
//! `backends[].endpoints | dns` (with `epp:` to follow another picker's choice among them) and
//! the top-level `epp:` (serve as the picker Envoy-based gateways call). A pool is a template
//! backend and where its members come from; each member becomes a backend of its own
//! (`expand_pools`), so every strategy, load signal and breaker applies to it unchanged.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;
use switchyard_epp::discover::dns::DnsTarget;

use super::backend::RawBackend;
use super::raw::duration;
use super::{BackendConfig, Config, ConfigError};

/// `dns: {name, port, interval, nameserver}`: a headless Service's records.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDns {
    name: String,
    port: u16,
    interval: Option<String>,
    nameserver: Option<String>,
}

/// `backends[].epp: {endpoint, failure_mode, timeout}`: the picker this pool follows.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFollow {
    endpoint: String,
    failure_mode: Option<String>,
    timeout: Option<String>,
}

/// `epp:` — serve the Endpoint Picker protocol.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEpp {
    listen: String,
    health_listen: Option<String>,
    /// Endpoints named after the pick for the data plane to go on to (0: the pick alone).
    fallbacks: Option<usize>,
    pools: Vec<RawEppPool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEppPool {
    name: String,
    models: Option<Vec<String>>,
    endpoints: Option<Vec<String>>,
    dns: Option<RawDns>,
    inference_pool: Option<RawInferencePool>,
    max_concurrency: Option<usize>,
    cache_tokens: Option<usize>,
    /// Each member's KV-cache events: `{host}` in the endpoints is the member's address.
    kv_events: Option<super::engines::RawKvEvents>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInferencePool {
    name: String,
    namespace: Option<String>,
}

/// Where a pool's members come from.
#[derive(Debug, Clone, PartialEq)]
pub enum Members {
    Static(Vec<String>),
    Dns(DnsTarget),
    /// An `InferencePool` and its ready Pods, through the Kubernetes API.
    InferencePool {
        name: String,
        namespace: Option<String>,
    },
}

/// A pool: the backend each member becomes (its `url` filled per member), and its members.
#[derive(Debug, Clone)]
pub struct PoolSpec {
    pub name: String,
    pub template: BackendConfig,
    pub members: Members,
    /// The picker this pool follows (`backends[].epp`).
    pub follow: Option<FollowConfig>,
}

/// Following another picker: where it is, and what happens when it cannot be asked.
#[derive(Debug, Clone, PartialEq)]
pub struct FollowConfig {
    pub endpoint: String,
    /// `failure_mode: open`: the gateway's own routing serves when the picker fails; `closed`
    /// (the default): a 503.
    pub fail_open: bool,
    pub timeout: Duration,
}

/// A member backend's pool and endpoint (`ip:port` or `host:port`).
#[derive(Debug, Clone, PartialEq)]
pub struct PoolMember {
    pub pool: String,
    pub endpoint: String,
}

/// `epp:` validated.
#[derive(Debug, Clone, PartialEq)]
pub struct EppConfig {
    pub listen: SocketAddr,
    pub health_listen: Option<SocketAddr>,
    /// How many endpoints follow the pick in its answer. 0 by default: Envoy's ORIGINAL_DST
    /// cluster (the inference extension's own configuration) takes one address, not a list;
    /// a data plane routing on `envoy.lb` metadata with override_host takes the list.
    pub fallbacks: usize,
    /// The pools served, by name, with the models each serves (None: any model asked of it).
    pub pools: Vec<(String, Option<Vec<String>>)>,
}

/// The model every member of pool `pool` serves besides its own: what the picker routes a
/// request by when the pool was configured without `models` (any model).
pub fn pool_model(pool: &str) -> String {
    format!("epp:{pool}")
}

/// `backends:` and `epp:` validated: single backends, pools, the picker.
pub struct Validated {
    pub backends: Vec<BackendConfig>,
    pub pools: Vec<PoolSpec>,
    pub epp: Option<EppConfig>,
}

/// `backends:` (pools apart from single backends) and `epp:`.
pub fn validate_backends(
    raw: Vec<RawBackend>,
    epp: Option<RawEpp>,
    names: &mut HashSet<String>,
) -> Result<Validated, ConfigError> {
    let mut backends = Vec::with_capacity(raw.len());
    let mut pools = Vec::new();
    for (i, b) in raw.into_iter().enumerate() {
        if b.is_pool() {
            pools.push(pool_backend(i, b, names)?);
        } else {
            backends.push(super::backend::validate_backend(i, b, names)?);
        }
    }
    let epp = epp.map(|e| validate_epp(e, &mut pools, names)).transpose()?;
    Ok(Validated { backends, pools, epp })
}

/// A backend entry with `endpoints` or `dns` is a pool: its template validated as a backend of
/// its own (its `url` a placeholder, each member's given at expansion).
pub fn pool_backend(i: usize, mut b: RawBackend, names: &mut HashSet<String>) -> Result<PoolSpec, ConfigError> {
    let at = |field: &str| format!("backends[{i}].{field}");
    let (endpoints, dns, follow) = (b.endpoints.take(), b.dns.take(), b.epp.take());
    if b.url.is_some() {
        return Err(ConfigError::at(at("url"), "a pool's members are its `endpoints` (or `dns`): give no `url`"));
    }
    b.url = Some("http://pool.invalid".to_owned());
    let members = members(&at, endpoints, dns, None, false)?;
    let template = super::backend::validate_backend(i, b, names)?;
    let follow = follow.map(|f| validate_follow(&at, f)).transpose()?;
    Ok(PoolSpec { name: template.name.clone(), template, members, follow })
}

fn validate_follow(at: &dyn Fn(&str) -> String, f: RawFollow) -> Result<FollowConfig, ConfigError> {
    host_port(&at("epp.endpoint"), &f.endpoint, false)?;
    let fail_open = match f.failure_mode.as_deref() {
        None | Some("closed") => false,
        Some("open") => true,
        Some(other) => return Err(ConfigError::at(at("epp.failure_mode"), format!("`{other}`: use closed or open"))),
    };
    let timeout = duration(&at("epp.timeout"), &f.timeout, Duration::from_secs(2))?;
    Ok(FollowConfig { endpoint: f.endpoint, fail_open, timeout })
}

/// Exactly one source of members; endpoints are `ip:port` (`host:port` where `hosts` allows).
fn members(
    at: &dyn Fn(&str) -> String,
    endpoints: Option<Vec<String>>,
    dns: Option<RawDns>,
    inference_pool: Option<RawInferencePool>,
    ip_only: bool,
) -> Result<Members, ConfigError> {
    match (endpoints, dns, inference_pool) {
        (Some(list), None, None) => {
            if list.is_empty() {
                return Err(ConfigError::at(at("endpoints"), "name at least one endpoint"));
            }
            for (j, e) in list.iter().enumerate() {
                host_port(&at(&format!("endpoints[{j}]")), e, ip_only)?;
            }
            Ok(Members::Static(list))
        }
        (None, Some(d), None) => {
            if d.name.is_empty() || d.port == 0 {
                return Err(ConfigError::at(at("dns"), "give the name to resolve and a port"));
            }
            let nameserver = d
                .nameserver
                .map(|n| n.parse().map_err(|_| ConfigError::at(at("dns.nameserver"), "expected ip:port")))
                .transpose()?;
            let interval = duration(&at("dns.interval"), &d.interval, Duration::from_secs(5))?;
            Ok(Members::Dns(DnsTarget { name: d.name, port: d.port, interval, nameserver }))
        }
        (None, None, Some(p)) => Ok(Members::InferencePool { name: p.name, namespace: p.namespace }),
        _ => Err(ConfigError::at(at("endpoints"), "give one of `endpoints`, `dns` or `inference_pool`")),
    }
}

fn host_port(at: &str, text: &str, ip_only: bool) -> Result<(), ConfigError> {
    if text.parse::<SocketAddr>().is_ok() {
        return Ok(());
    }
    let authority = text.parse::<http::uri::Authority>().ok().filter(|a| a.port_u16().is_some());
    match authority {
        Some(_) if !ip_only => Ok(()),
        _ if ip_only => Err(ConfigError::at(at, format!("`{text}`: expected ip:port"))),
        _ => Err(ConfigError::at(at, format!("`{text}`: expected host:port"))),
    }
}

/// `epp:`: its listeners, and its pools (added to `pools`, their members serving the pool's
/// models and the pool's own model).
pub fn validate_epp(
    raw: RawEpp,
    pools: &mut Vec<PoolSpec>,
    names: &mut HashSet<String>,
) -> Result<EppConfig, ConfigError> {
    let listen = raw.listen.parse().map_err(|_| ConfigError::at("epp.listen", "expected ip:port"))?;
    let health_listen = raw
        .health_listen
        .map(|h| h.parse().map_err(|_| ConfigError::at("epp.health_listen", "expected ip:port")))
        .transpose()?;
    if raw.pools.is_empty() {
        return Err(ConfigError::at("epp.pools", "name at least one pool"));
    }
    let mut served = Vec::with_capacity(raw.pools.len());
    for (i, p) in raw.pools.into_iter().enumerate() {
        let at = |field: &str| format!("epp.pools[{i}].{field}");
        let members = members(&at, p.endpoints, p.dns, p.inference_pool, true)?;
        let mut models = p.models.clone().unwrap_or_default();
        models.push(pool_model(&p.name));
        let template = RawBackend::for_pool(p.name.clone(), models, p.max_concurrency, p.cache_tokens, p.kv_events);
        let template = super::backend::validate_backend(i, template, names)
            .map_err(|e| ConfigError::at(e.path.replacen("backends", "epp.pools", 1), e.message))?;
        served.push((p.name.clone(), p.models));
        pools.push(PoolSpec { name: p.name, template, members, follow: None });
    }
    let fallbacks = raw.fallbacks.unwrap_or(0);
    if fallbacks > 8 {
        return Err(ConfigError::at("epp.fallbacks", "at most 8"));
    }
    Ok(EppConfig { listen, health_listen, fallbacks, pools: served })
}

/// A member's backend name: the pool's, then its endpoint (a plain token: metrics and logs).
fn member_name(pool: &str, endpoint: &str) -> String {
    let endpoint: String =
        endpoint.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' }).collect();
    format!("{pool}.{endpoint}")
}

impl Config {
    /// Every pool's members as backends of their own: a static pool's endpoints, a discovered
    /// one's as last found (`found`, by pool name). Member backends from an earlier expansion
    /// are replaced.
    pub fn expand_pools(&mut self, found: &HashMap<String, Vec<String>>) {
        self.backends.retain(|b| b.member.is_none());
        for pool in &self.pools {
            let endpoints = match &pool.members {
                Members::Static(list) => list.as_slice(),
                _ => found.get(&pool.name).map_or(&[][..], Vec::as_slice),
            };
            for endpoint in endpoints {
                let mut member = pool.template.clone();
                member.name = member_name(&pool.name, endpoint);
                member.url = format!("http://{endpoint}");
                member.member = Some(PoolMember { pool: pool.name.clone(), endpoint: endpoint.clone() });
                if let Some(feed) = &mut member.kv_events {
                    // A pool's engines publish on their own addresses: `{host}` is this member's.
                    let host = endpoint.rsplit_once(':').map_or(endpoint.as_str(), |(host, _)| host);
                    feed.endpoint = feed.endpoint.replace("{host}", host);
                    feed.replay_endpoint = feed.replay_endpoint.as_ref().map(|r| r.replace("{host}", host));
                }
                self.backends.push(member);
            }
        }
    }

    /// The pool named `name`.
    pub fn pool(&self, name: &str) -> Option<&PoolSpec> {
        self.pools.iter().find(|p| p.name == name)
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, ProcessEnv};

    fn load(yaml: &str) -> Result<Config, String> {
        Config::from_yaml(yaml, &ProcessEnv).map_err(|e| e.to_string())
    }

    #[test]
    fn a_pool_becomes_a_backend_per_member_with_its_events_on_the_members_host() {
        let c = load(
            "epp:\n  listen: 127.0.0.1:9002\n  pools:\n    - name: p\n      models: [m]\n      endpoints: ['10.0.0.5:8000', '10.0.0.6:8000']\n      kv_events: {endpoint: 'tcp://{host}:5557', replay_endpoint: 'tcp://{host}:5558'}\n",
        )
        .unwrap();
        let names: Vec<&str> = c.backends.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["p.10.0.0.5_8000", "p.10.0.0.6_8000"]);
        assert_eq!(c.backends[1].url, "http://10.0.0.6:8000");
        let feed = c.backends[1].kv_events.as_ref().unwrap();
        assert_eq!(feed.endpoint, "tcp://10.0.0.6:5557");
        assert_eq!(feed.replay_endpoint.as_deref(), Some("tcp://10.0.0.6:5558"));
        assert!(c.backends[0].models.as_ref().unwrap().contains(&"epp:p".to_owned()));
        assert_eq!(c.epp.as_ref().unwrap().fallbacks, 0);
    }

    #[test]
    fn mistakes_are_refused_with_their_place() {
        let cases = [
            ("backends: [{name: p, url: 'http://x:1', endpoints: ['10.0.0.1:80']}]", "backends[0].url"),
            ("backends: [{name: p, endpoints: ['nohost']}]", "backends[0].endpoints[0]"),
            ("backends: [{name: p, endpoints: []}]", "backends[0].endpoints"),
            ("backends: [{name: p, endpoints: ['h:1'], dns: {name: x, port: 1}}]", "backends[0].endpoints"),
            (
                "backends: [{name: p, endpoints: ['h:1'], epp: {endpoint: 'e:9002', failure_mode: maybe}}]",
                "backends[0].epp.failure_mode",
            ),
            ("backends: [{name: p, endpoints: ['h:1'], epp: {endpoint: 'nope'}}]", "backends[0].epp.endpoint"),
            ("backends: [{name: p, dns: {name: x, port: 0}}]", "backends[0].dns"),
            ("backends: [{name: p, dns: {name: x, port: 1, nameserver: here}}]", "backends[0].dns.nameserver"),
            ("epp: {listen: nowhere, pools: [{name: p, endpoints: ['10.0.0.1:80']}]}", "epp.listen"),
            ("epp: {listen: '127.0.0.1:1', pools: []}", "epp.pools"),
            ("epp: {listen: '127.0.0.1:1', pools: [{name: p, endpoints: ['host:80']}]}", "epp.pools[0].endpoints[0]"),
            (
                "epp: {listen: '127.0.0.1:1', fallbacks: 9, pools: [{name: p, endpoints: ['10.0.0.1:80']}]}",
                "epp.fallbacks",
            ),
            ("epp: {listen: '127.0.0.1:1', pools: [{name: 'p/q', endpoints: ['10.0.0.1:80']}]}", "epp.pools[0].name"),
        ];
        for (yaml, place) in cases {
            let e = load(yaml).unwrap_err();
            assert!(e.starts_with(place), "{yaml}: {e}");
        }
    }

    #[test]
    fn a_discovered_pool_has_no_members_until_found() {
        let mut c = load("backends: [{name: p, models: [m], dns: {name: vllm.local, port: 8000}}]").unwrap();
        assert!(c.backends.is_empty());
        let found = [("p".to_owned(), vec!["10.0.0.9:8000".to_owned()])].into_iter().collect();
        c.expand_pools(&found);
        assert_eq!(c.backends.len(), 1);
        assert_eq!(c.backends[0].member.as_ref().unwrap().endpoint, "10.0.0.9:8000");
        c.expand_pools(&Default::default());
        assert!(c.backends.is_empty(), "members replaced, not added to");
    }
}
