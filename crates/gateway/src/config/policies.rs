//! `policies:` and `quotas:` — policies as code (issue 58): the organisation's rules, compiled
//! and checked when the configuration loads (an error names the rule, its field and where in the
//! expression), and the quotas their `cost` rules charge. The rules' shape, check and semantics
//! are the `switchyard-policy` crate's.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use switchyard_policy::{Action, RawRule, Rule, RuleError, RuleSet};

use super::{BackendConfig, ConfigError, FastMap};

pub type RawPolicies = Vec<RawRule>;
pub type RawQuotas = BTreeMap<String, RawQuota>;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawQuota {
    pub limit: f64,
    /// A duration (`1h`, `24h`) or `minute`, `hour`, `day`, `week`.
    pub period: String,
}

/// A quota: at most `limit` charged per fixed `period` window (aligned to the Unix epoch), one
/// counter for the whole gateway (the fleet's, in Redis, with `redis:`).
#[derive(Debug, Clone, PartialEq)]
pub struct Quota {
    pub limit: f64,
    pub period: Duration,
}

pub fn quotas(raw: RawQuotas) -> Result<FastMap<String, Quota>, ConfigError> {
    let mut out = FastMap::default();
    for (name, q) in raw {
        let path = |field: &str| format!("quotas.{name}.{field}");
        if !(q.limit.is_finite() && q.limit >= 0.0) {
            return Err(ConfigError::at(path("limit"), "a quota's limit is a number, zero or more"));
        }
        let period = match q.period.as_str() {
            "minute" => Duration::from_secs(60),
            "hour" => Duration::from_secs(3600),
            "day" => Duration::from_secs(86_400),
            "week" => Duration::from_secs(7 * 86_400),
            other => super::duration::parse_duration(other).map_err(|m| ConfigError::at(path("period"), m))?,
        };
        if period < Duration::from_secs(1) {
            return Err(ConfigError::at(path("period"), "a quota's period is a second or more"));
        }
        out.insert(name, Quota { limit: q.limit, period });
    }
    Ok(out)
}

/// The error of a rule at `level` (`policies`, or a team's or key's) in the configuration's terms.
pub fn rule_error(level: &str, e: RuleError) -> ConfigError {
    let at = match e.at {
        Some((from, to)) => format!(" (at characters {from}–{to})"),
        None => String::new(),
    };
    ConfigError::at(format!("{level}.{}.{}", e.rule, e.field), format!("{}{at}", e.message))
}

/// Compile `raw` rules; `route` targets must be models and backends the configuration has.
pub fn compile(
    raw: RawPolicies,
    quotas: &FastMap<String, Quota>,
    backends: &[BackendConfig],
    aliases: &FastMap<String, String>,
) -> Result<RuleSet, RuleError> {
    let mut rules = Vec::with_capacity(raw.len());
    for raw in raw {
        let rule = Rule::compile(raw, &|q| quotas.contains_key(q))?;
        check_route(&rule, backends, aliases)?;
        rules.push(rule);
    }
    RuleSet::new(rules)
}

fn check_route(rule: &Rule, backends: &[BackendConfig], aliases: &FastMap<String, String>) -> Result<(), RuleError> {
    let Action::Route { model, backends: names } = &rule.action else { return Ok(()) };
    let fail = |message: String| RuleError { rule: rule.name.clone(), field: "route", message, at: None };
    if let Some(model) = model.as_deref().filter(|m| !super::model_known(backends, aliases, m)) {
        return Err(fail(format!("no backend serves `{model}`")));
    }
    if let Some(name) = names.iter().flatten().find(|n| !backends.iter().any(|b| &b.name == *n)) {
        return Err(fail(format!("no backend is named `{name}`")));
    }
    Ok(())
}

pub fn validate(
    raw: RawPolicies,
    quotas: &FastMap<String, Quota>,
    backends: &[BackendConfig],
    aliases: &FastMap<String, String>,
) -> Result<Arc<RuleSet>, ConfigError> {
    compile(raw, quotas, backends, aliases).map(Arc::new).map_err(|e| rule_error("policies", e))
}
