//! Rules in order — the organisation's, then a team's, then a key's — applied to one request's
//! attributes: the first `allow` or `deny` that holds decides (none: allowed), and every `route`,
//! `set` and `cost` that holds applies. A condition that fails to evaluate (a claim of the wrong
//! type) does not hold, and is counted.

use std::sync::Arc;

use crate::attributes::Phase;
use crate::condition::Bound;
use crate::rule::{Action, Rule, RuleError, Then};

/// One level's rules, in order, checked.
#[derive(Debug, Default, Clone)]
pub struct RuleSet {
    pub rules: Vec<Arc<Rule>>,
    /// Every attribute its rules read, sorted: what a request must provide.
    read: Vec<&'static str>,
}

impl RuleSet {
    pub fn new(rules: Vec<Rule>) -> Result<RuleSet, RuleError> {
        for (i, rule) in rules.iter().enumerate() {
            if rules[..i].iter().any(|r| r.name == rule.name) {
                let message = "two rules have this name".to_owned();
                return Err(RuleError { rule: rule.name.clone(), field: "name", message, at: None });
            }
        }
        let mut set = RuleSet { rules: rules.into_iter().map(Arc::new).collect(), read: Vec::new() };
        let mut read: Vec<&'static str> = set.reads().collect();
        read.sort_unstable();
        read.dedup();
        set.read = read;
        Ok(set)
    }

    /// Whether a rule reads `attribute`, or (with a trailing `.`) any attribute under it.
    pub fn reads_any(&self, attribute: &str) -> bool {
        self.read.iter().any(|a| a.starts_with(attribute))
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether any rule acts in `phase`.
    pub fn any_in(&self, phase: Phase) -> bool {
        self.rules.iter().any(|r| r.when.phase == phase)
    }

    /// Every attribute its rules (conditions and costs) read.
    pub fn reads(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.rules.iter().flat_map(|r| {
            let cost = match &r.action {
                Action::Cost { amount, .. } => amount.reads.as_slice(),
                _ => &[],
            };
            r.when.reads.iter().chain(cost).copied()
        })
    }

    /// `candidate` (a team's or a key's rules) only narrows these (the organisation's, or the
    /// organisation's and a team's): none of its `allow`s could stand where one of these denies.
    /// Rules are evaluated these first, so such an allow would only ever mislead its reader.
    pub fn narrowed_by(&self, candidate: &RuleSet) -> Result<(), RuleError> {
        for rule in candidate.rules.iter().filter(|r| r.raw.then == Then::Allow) {
            let phase = rule.when.phase;
            if let Some(deny) = self.rules.iter().find(|r| r.raw.then == Then::Deny && r.when.phase == phase) {
                let message = format!(
                    "an `allow` here would widen the rule `{}` (a deny) above it: team and key rules may only narrow",
                    deny.name
                );
                return Err(RuleError { rule: rule.name.clone(), field: "then", message, at: None });
            }
        }
        Ok(())
    }
}

/// What the rules made of one request.
#[derive(Debug, Default)]
pub struct Decision {
    /// The `allow` or `deny` that decided.
    pub decided: Option<Arc<Rule>>,
    /// The `route` rules that applied, in order.
    pub routed: Vec<Arc<Rule>>,
    /// The model a `route` rule sent it to (the last one's).
    pub model: Option<String>,
    /// The backends it may go to (every `route` rule's lists intersected).
    pub backends: Option<Vec<String>>,
    pub tags: Vec<String>,
    pub headers: Vec<(String, String)>,
    /// Amounts charged: (rule, quota, amount).
    pub costs: Vec<(Arc<Rule>, f64)>,
    /// Rules whose condition (or cost) could not be evaluated for this request (an attribute it
    /// lacks: a key without a team): they did not apply. `explain` says why.
    pub unevaluated: Vec<Arc<Rule>>,
}

impl Decision {
    /// The deny that decided, if one did: (rule, message).
    pub fn denied(&self) -> Option<(&str, &str)> {
        let rule = self.decided.as_ref()?;
        match &rule.action {
            Action::Deny { message } => Some((&rule.name, message)),
            _ => None,
        }
    }

    /// The rules that decided or routed, for `x-switchyard-policy` and the record.
    pub fn named(&self) -> Option<String> {
        let names: Vec<&str> = self.decided.iter().chain(&self.routed).map(|r| r.name.as_str()).collect();
        (!names.is_empty()).then(|| names.join(", "))
    }

    /// Whether any rule applied at all.
    pub fn is_empty(&self) -> bool {
        self.decided.is_none()
            && self.routed.is_empty()
            && self.tags.is_empty()
            && self.headers.is_empty()
            && self.costs.is_empty()
    }
}

/// Why `rule` could not be evaluated for `values` (for logs and `switchyard policy test`).
pub fn explain(rule: &Rule, values: &Bound) -> String {
    let why = match (rule.when.holds(values), &rule.action) {
        (Err(e), _) => e,
        (Ok(_), Action::Cost { amount, .. }) => match amount.number(values) {
            Ok(n) => format!("a cost of {n} is below zero"),
            Err(e) => e,
        },
        (Ok(_), _) => "it evaluates now".to_owned(),
    };
    format!("policy `{}`: {why}", rule.name)
}

/// Apply `levels`' rules of `phase`, in order, to `values`.
pub fn decide(levels: &[&RuleSet], phase: Phase, values: &Bound) -> Decision {
    let mut decision = Decision::default();
    for rule in levels.iter().flat_map(|l| &l.rules).filter(|r| r.when.phase == phase) {
        if rule.decides() && decision.decided.is_some() {
            continue;
        }
        match rule.when.check(values) {
            Some(true) => {}
            Some(false) => continue,
            None => {
                decision.unevaluated.push(rule.clone());
                continue;
            }
        }
        if apply(rule, values, &mut decision) {
            break;
        }
    }
    decision
}

/// Apply a rule that holds; true when it ends the evaluation (a deny).
fn apply(rule: &Arc<Rule>, values: &Bound, decision: &mut Decision) -> bool {
    match &rule.action {
        Action::Allow => decision.decided = Some(rule.clone()),
        Action::Deny { .. } => {
            decision.decided = Some(rule.clone());
            return true;
        }
        Action::Route { model, backends } => {
            if let Some(model) = model {
                decision.model = Some(model.clone());
            }
            if let Some(backends) = backends {
                decision.backends = Some(match decision.backends.take() {
                    Some(before) => before.into_iter().filter(|b| backends.contains(b)).collect(),
                    None => backends.clone(),
                });
            }
            decision.routed.push(rule.clone());
        }
        Action::Set { tags, headers } => {
            decision.tags.extend(tags.iter().cloned());
            decision.headers.extend(headers.iter().map(|(n, v)| (n.clone(), v.clone())));
        }
        Action::Cost { amount, .. } => match amount.value(values) {
            Some(n) if n >= 0.0 => decision.costs.push((rule.clone(), n)),
            _ => decision.unevaluated.push(rule.clone()),
        },
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::condition::Values;
    use crate::rule::RawRule;

    fn rules(yaml: &[(&str, &str, Then)]) -> RuleSet {
        let compiled = yaml
            .iter()
            .map(|(name, when, then)| {
                let mut raw: RawRule = RawRule {
                    name: (*name).into(),
                    when: (*when).into(),
                    then: *then,
                    message: None,
                    route: None,
                    set: None,
                    cost: None,
                    quota: None,
                    phase: None,
                };
                if *then == Then::Route {
                    raw.route = Some(crate::rule::RawRoute { model: Some("small".into()), backends: None });
                }
                Rule::compile(raw, &|_| true).expect("valid")
            })
            .collect();
        RuleSet::new(compiled).expect("unique")
    }

    #[test]
    fn the_first_allow_or_deny_decides_and_every_route_applies() {
        let org = rules(&[
            ("interns-small", "'intern' in key.tags", Then::Route),
            ("no-big", "request.model == 'big'", Then::Deny),
            ("staff", "'staff' in key.tags", Then::Allow),
            ("never", "true", Then::Deny),
        ]);
        let values = |tags: &[&str], model: &str| {
            let mut v = Values::default();
            let tags: Vec<cel::Value> = tags.iter().map(|t| cel::Value::from(*t)).collect();
            v.set("key.tags", tags).set("request.model", model.to_owned());
            v.bind()
        };
        let d = decide(&[&org], Phase::Request, &values(&["intern", "staff"], "gpt"));
        assert_eq!(d.named().as_deref(), Some("staff, interns-small"));
        assert_eq!(d.model.as_deref(), Some("small"));
        assert!(d.denied().is_none());
        let d = decide(&[&org], Phase::Request, &values(&["staff"], "big"));
        assert_eq!(d.denied(), Some(("no-big", "denied by policy `no-big`")));
        let d = decide(&[&org], Phase::Request, &values(&[], "gpt"));
        assert_eq!(d.denied().map(|d| d.0), Some("never"));
        // MCP rules are not applied to model requests.
        let mcp = rules(&[("no-delete", "mcp.tool.startsWith('delete')", Then::Deny)]);
        assert!(decide(&[&mcp], Phase::Request, &values(&[], "gpt")).is_empty());
        assert!(mcp.any_in(Phase::Mcp) && !mcp.any_in(Phase::Request));
    }

    #[test]
    fn a_team_allow_under_an_organisation_deny_is_refused() {
        let org = rules(&[("no-big", "request.model == 'big'", Then::Deny)]);
        let team = rules(&[("all", "true", Then::Allow)]);
        let e = org.narrowed_by(&team).expect_err("widens");
        assert_eq!((e.rule.as_str(), e.field), ("all", "then"));
        assert!(e.message.contains("no-big"), "{e}");
        assert!(org.narrowed_by(&rules(&[("deny-more", "true", Then::Deny)])).is_ok());
    }

    #[test]
    fn rules_check_their_siblings_and_phase() {
        let raw = |yaml: &str| -> RawRule { serde_json::from_str(yaml).expect("shape") };
        let cases = [
            (
                r#"{"name":"r","when":"mcp.tool == 'x'","then":"route","route":{"model":"m"}}"#,
                "when",
                "known only in the mcp phase",
            ),
            (r#"{"name":"r","then":"deny","route":{"model":"m"}}"#, "route", "belongs to a `then: route` rule"),
            (r#"{"name":"r","then":"cost","cost":"request.size","quota":"q2"}"#, "quota", "no quota `q2`"),
            (r#"{"name":"r","then":"cost","cost":"request.model","quota":"q"}"#, "cost", "it must be int or double"),
            (r#"{"name":"r","then":"set","set":{"headers":{"authorization":"x"}}}"#, "set", "the gateway's to set"),
            (r#"{"name":"r","then":"route"}"#, "route", "needs `route:"),
            (
                r#"{"name":"r","when":"request.modle == 'x'","then":"deny","phase":"request"}"#,
                "when",
                "unknown attribute",
            ),
        ];
        for (yaml, field, expected) in cases {
            let e = Rule::compile(raw(yaml), &|q| q == "q").expect_err(yaml);
            assert_eq!(e.field, field, "{yaml}: {e}");
            assert!(e.message.contains(expected), "{yaml}: {e}");
        }
        let mcp = Rule::compile(raw(r#"{"name":"r","when":"mcp.tool == 'x'","then":"deny"}"#), &|_| true);
        assert_eq!(mcp.expect("valid").when.phase, Phase::Mcp);
    }
}
