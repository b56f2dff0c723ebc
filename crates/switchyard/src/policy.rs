//! `switchyard policy test --config F --request req.json`: evaluate a configuration's policy
//! rules (and a team's and a key's, when the request gives them) against one request's
//! attributes without serving it, and print what they decide as JSON. The request file mirrors
//! the attribute table: `{"request": {"model": "big", "headers": {"x-data-class": "restricted"}},
//! "key": {"tags": ["intern"]}, "time": {"unix": 1780000000}, "team_policies": [...],
//! "key_policies": [...]}`; with `"mcp": {...}` the tool-call rules are evaluated instead. With
//! `--stored`, the organisation's rules written through `/admin/policies` (read from the
//! configuration's storage) follow the configuration's, as the gateway evaluates them.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde_json::{json, Value};
use switchyard_policy::{decide, Action, Phase, RawRule, Rule, RuleSet, Values};

#[derive(Args, Debug)]
pub struct PolicyArgs {
    #[command(subcommand)]
    action: PolicyAction,
}

#[derive(Subcommand, Debug)]
enum PolicyAction {
    /// Evaluate the rules against a request (a JSON file of its attributes) and print the decision.
    Test {
        /// The gateway's config file (its `policies:` and `quotas:`).
        #[arg(long, short, env = "SWITCHYARD_CONFIG")]
        config: PathBuf,
        /// The request's attributes as JSON (`-` for stdin).
        #[arg(long)]
        request: PathBuf,
        /// Also the organisation's rules written through `/admin/policies` (from the storage).
        #[arg(long)]
        stored: bool,
    },
}

pub async fn run(args: PolicyArgs) -> Result<(), String> {
    let PolicyAction::Test { config, request, stored } = args.action;
    let config = crate::cli::load(&config)?;
    let organisation = match stored {
        false => (*config.policies).clone(),
        true => organisation(&config).await?,
    };
    let text = match request.to_str() {
        Some("-") => std::io::read_to_string(std::io::stdin()).map_err(|e| format!("stdin: {e}"))?,
        _ => std::fs::read_to_string(&request).map_err(|e| format!("{}: {e}", request.display()))?,
    };
    let mut given: Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", request.display()))?;
    let decision = evaluate(&config, &organisation, &mut given)?;
    println!("{}", serde_json::to_string_pretty(&decision).unwrap_or_default());
    Ok(())
}

/// The configuration's rules and the stored ones, as the gateway combines them.
async fn organisation(config: &switchyard_gateway::config::Config) -> Result<RuleSet, String> {
    let store = switchyard_gateway::store::Store::connect(&config.storage.url)
        .await
        .map_err(|e| format!("cannot open the storage: {e}"))?;
    let stored = store.list_policies().await.map_err(|e| format!("cannot read the stored rules: {e}"))?;
    let (rules, skipped) = switchyard_gateway::org_rules::combined(config, &stored);
    for (name, why) in skipped {
        eprintln!("stored rule `{name}` left out: {why}");
    }
    Ok(rules)
}

/// The decision `organisation`'s rules and `given`'s own (its `team_policies` and
/// `key_policies`, taken out of it) give `given`.
fn evaluate(
    config: &switchyard_gateway::config::Config,
    organisation: &RuleSet,
    given: &mut Value,
) -> Result<Value, String> {
    let own = |given: &mut Value, field: &str| -> Result<RuleSet, String> {
        let raw: Vec<RawRule> = match given.as_object_mut().and_then(|o| o.remove(field)) {
            Some(v) => serde_json::from_value(v).map_err(|e| format!("`{field}`: {e}"))?,
            None => Vec::new(),
        };
        let rules = raw.into_iter().map(|r| Rule::compile(r, &|q| config.quotas.contains_key(q)));
        let rules = rules.collect::<Result<Vec<_>, _>>().map_err(|e| format!("`{field}`: {e}"))?;
        RuleSet::new(rules).map_err(|e| format!("`{field}`: {e}"))
    };
    let (team, key) = (own(given, "team_policies")?, own(given, "key_policies")?);
    let phase = if given.get("mcp").is_some() { Phase::Mcp } else { Phase::Request };
    let mut values = Values::from_json(given)?;
    if given.pointer("/time/unix").is_none() {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
        values.set_time(i64::try_from(now).unwrap_or(0));
    }
    let bound = values.bind();
    let d = decide(&[organisation, &team, &key], phase, &bound);
    let unevaluated: Vec<String> =
        d.unevaluated.iter().map(|r| switchyard_policy::decide::explain(r, &bound)).collect();
    let (status, decision) = match (d.denied(), &d.decided) {
        (Some(_), _) => (403, "deny"),
        (None, Some(_)) => (200, "allow"),
        (None, None) => (200, "allowed (no rule decided)"),
    };
    let costs: Vec<Value> = d
        .costs
        .iter()
        .map(|(rule, amount)| {
            let quota = match &rule.action {
                Action::Cost { quota, .. } => quota.as_str(),
                _ => "",
            };
            json!({"rule": rule.name, "quota": quota, "amount": amount})
        })
        .collect();
    Ok(json!({
        "phase": phase.name(),
        "status": status,
        "decision": decision,
        "x-switchyard-policy": d.denied().map(|(rule, _)| rule.to_owned()).or_else(|| d.named()),
        "message": d.denied().map(|(_, m)| m),
        "route": {"model": d.model, "backends": d.backends},
        "set": {"tags": d.tags, "headers": d.headers.iter().cloned().collect::<std::collections::BTreeMap<_, _>>()},
        "costs": costs,
        "unevaluated": unevaluated,
    }))
}
