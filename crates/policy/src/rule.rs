//! A rule as written (`{name, when, then, ...}`) and as checked: its condition compiled for its
//! phase, its action with the siblings that action takes and no others. Every error names the
//! rule, the field and, for an expression, where in it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::attributes::{Phase, Type};
use crate::check::CheckError;
use crate::condition::{Condition, Expression};

/// A rule as the configuration or the admin API gives it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawRule {
    pub name: String,
    /// A CEL condition; a rule without one always applies.
    #[serde(default = "always")]
    pub when: String,
    pub then: Then,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<RawRoute>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set: Option<RawSet>,
    /// A CEL expression: the amount charged against `quota`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<String>,
    /// `request` or `mcp`; by default `mcp` when the condition reads an `mcp.*` attribute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<PhaseName>,
}

fn always() -> String {
    "true".to_owned()
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Then {
    Allow,
    Deny,
    Route,
    Set,
    Cost,
}

impl Then {
    pub fn name(self) -> &'static str {
        match self {
            Then::Allow => "allow",
            Then::Deny => "deny",
            Then::Route => "route",
            Then::Set => "set",
            Then::Cost => "cost",
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum PhaseName {
    Request,
    Mcp,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backends: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawSet {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

/// Why a rule cannot load: which rule, which of its fields, what, and where in an expression.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleError {
    pub rule: String,
    pub field: &'static str,
    pub message: String,
    pub at: Option<(u32, u32)>,
}

impl std::fmt::Display for RuleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "policy `{}`, `{}`: {}", self.rule, self.field, self.message)?;
        match self.at {
            Some((from, to)) => write!(f, " (at characters {from}–{to})"),
            None => Ok(()),
        }
    }
}

/// What a rule does when its condition holds.
#[derive(Debug)]
pub enum Action {
    Allow,
    Deny { message: String },
    Route { model: Option<String>, backends: Option<Vec<String>> },
    Set { tags: Vec<String>, headers: Vec<(String, String)> },
    Cost { amount: Expression, quota: String },
}

/// A checked rule.
#[derive(Debug)]
pub struct Rule {
    pub name: String,
    pub when: Condition,
    pub action: Action,
    pub raw: RawRule,
}

impl Rule {
    /// Check `raw`; `quota_known` says whether a `quota:` name is configured.
    pub fn compile(raw: RawRule, quota_known: &dyn Fn(&str) -> bool) -> Result<Rule, RuleError> {
        let name = raw.name.clone();
        let fail = |field: &'static str, message: String| RuleError { rule: name.clone(), field, message, at: None };
        let at = |field: &'static str| {
            let rule = name.clone();
            move |e: CheckError| RuleError { rule, field, message: e.message, at: e.at }
        };
        if name.trim().is_empty() {
            return Err(fail("name", "a rule needs a name".into()));
        }
        stray_siblings(&raw).map_err(|(field, message)| fail(field, message))?;
        // Routing, headers and cost act on a model request: only its attributes are known there.
        let phase = match (raw.then, raw.phase) {
            (Then::Allow | Then::Deny, Some(PhaseName::Mcp)) => Phase::Mcp,
            (Then::Allow | Then::Deny, None) => {
                Condition::compile(&raw.when, Phase::Mcp).map_err(at("when"))?.phase_read()
            }
            (_, Some(PhaseName::Mcp)) => {
                return Err(fail(
                    "phase",
                    format!("a `{}` rule acts on model requests: its phase is request", raw.then.name()),
                ))
            }
            _ => Phase::Request,
        };
        let when = Condition::compile(&raw.when, phase).map_err(at("when"))?;
        let action = match raw.then {
            Then::Allow => Action::Allow,
            Then::Deny => {
                Action::Deny { message: raw.message.clone().unwrap_or_else(|| format!("denied by policy `{name}`")) }
            }
            Then::Route => route(&raw).map_err(|(field, message)| fail(field, message))?,
            Then::Set => set(&raw).map_err(|(field, message)| fail(field, message))?,
            Then::Cost => {
                let source = raw
                    .cost
                    .as_deref()
                    .ok_or_else(|| fail("cost", "a `cost` rule needs `cost:` (a CEL number)".into()))?;
                let amount =
                    Expression::compile(source, Phase::Request, &[Type::Int, Type::Double]).map_err(at("cost"))?;
                let quota = raw
                    .quota
                    .clone()
                    .ok_or_else(|| fail("quota", "a `cost` rule needs `quota:` (a name under `quotas:`)".into()))?;
                if !quota_known(&quota) {
                    return Err(fail("quota", format!("no quota `{quota}` under `quotas:`")));
                }
                Action::Cost { amount, quota }
            }
        };
        Ok(Rule { name, when, action, raw })
    }

    /// Whether it decides (an allow or a deny).
    pub fn decides(&self) -> bool {
        matches!(self.action, Action::Allow | Action::Deny { .. })
    }
}

/// A sibling that belongs to another `then` is a mistake, not something to ignore.
fn stray_siblings(raw: &RawRule) -> Result<(), (&'static str, String)> {
    let present = [
        ("message", raw.message.is_some(), Then::Deny),
        ("route", raw.route.is_some(), Then::Route),
        ("set", raw.set.is_some(), Then::Set),
        ("cost", raw.cost.is_some(), Then::Cost),
        ("quota", raw.quota.is_some(), Then::Cost),
    ];
    match present.iter().find(|(_, given, owner)| *given && *owner != raw.then) {
        Some((field, _, owner)) => Err((
            field,
            format!("`{field}` belongs to a `then: {}` rule, not `then: {}`", owner.name(), raw.then.name()),
        )),
        None => Ok(()),
    }
}

fn route(raw: &RawRule) -> Result<Action, (&'static str, String)> {
    let r = raw.route.clone().unwrap_or_default();
    if r.model.is_none() && r.backends.is_none() {
        return Err(("route", "a `route` rule needs `route: {model: M}` or `route: {backends: [...]}`".into()));
    }
    if r.model.as_deref().is_some_and(str::is_empty) || r.backends.as_ref().is_some_and(Vec::is_empty) {
        return Err(("route", "`route.model` and `route.backends` may not be empty".into()));
    }
    Ok(Action::Route { model: r.model, backends: r.backends })
}

fn set(raw: &RawRule) -> Result<Action, (&'static str, String)> {
    let s = raw.set.clone().unwrap_or_default();
    if s.tags.is_empty() && s.headers.is_empty() {
        return Err(("set", "a `set` rule needs `set: {tags: [...]}` or `set: {headers: {...}}`".into()));
    }
    let token = |c: char| c.is_ascii_alphanumeric() || "-_.".contains(c);
    if let Some((name, _)) = s.headers.iter().find(|(n, _)| n.is_empty() || !n.chars().all(token)) {
        return Err(("set", format!("`{name}` is not a header name")));
    }
    if let Some((name, _)) = s.headers.iter().find(|(_, v)| v.chars().any(char::is_control)) {
        return Err(("set", format!("header `{name}`'s value has a control character")));
    }
    let reserved = ["authorization", "host", "content-length", "transfer-encoding", "connection", "x-api-key"];
    if let Some((name, _)) = s.headers.iter().find(|(n, _)| reserved.contains(&n.to_ascii_lowercase().as_str())) {
        return Err(("set", format!("`{name}` is the gateway's to set, not a policy's")));
    }
    let headers = s.headers.into_iter().map(|(n, v)| (n.to_ascii_lowercase(), v)).collect();
    Ok(Action::Set { tags: s.tags, headers })
}
