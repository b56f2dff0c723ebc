//! The policy phase (issue 58), after parsing and before experiments and admission: the
//! organisation's rules, then the key's team's, then the key's, over the request's attributes.
//! A deny is a 403 naming its rule; a `route` puts another model in place (decided again, so a
//! route never reaches what a deny covers) or narrows the backends; `set` adds record tags and
//! headers for the backend; `cost` charges its quota (a 429 naming the rule when spent). Without
//! rules for the request's phase this is one check of an empty list.

use http::{HeaderName, HeaderValue};
use switchyard_policy::{Action, Phase, RuleSet, Values};

use super::Inbound;
use crate::app::App;
use crate::auth::Identity;
use crate::endpoint::ModelIn;
use crate::error::GatewayError;
use crate::http::parse::{with_model, RoutedRequest};
use crate::records::UsageRecord;

/// What the rules made of a request, as the later phases use it.
pub(crate) struct Applied {
    /// The rules that decided or routed (`x-switchyard-policy`, the record's `policy`).
    pub named: Option<String>,
    /// Backends a `route: {backends}` rule left out (ids): never tried.
    pub excluded: Vec<usize>,
    /// Headers sent to the backend.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Tags added to the request's record.
    pub tags: Vec<String>,
}

/// Apply the rules to a parsed request. None when no rule applies.
pub(super) async fn apply(
    app: &App,
    inbound: &Inbound<'_>,
    identity: &Identity,
    routed: &mut RoutedRequest,
) -> Result<Option<Box<Applied>>, GatewayError> {
    // The gateway's own calls (a guard's classifier, a shadow, a judge) were decided as the
    // request they serve.
    if inbound.guard_call.is_some() || inbound.experiment.is_some() || !crate::policy::any(app, identity) {
        return Ok(None);
    }
    let organisation = app.organisation.rules();
    let levels = crate::policy::levels(&organisation, identity);
    if !levels.iter().any(|l| l.any_in(Phase::Request)) {
        return Ok(None);
    }
    let now_ms = app.clock.unix_ms();
    match applied(app, &levels, (inbound, identity), routed, now_ms).await {
        Ok(applied) => Ok(Some(applied)),
        Err((rule, e)) => {
            record_refusal(app, (inbound, identity), routed, (&rule, e.status().as_u16()), now_ms);
            Err(e)
        }
    }
}

/// What the rules made of the request, or the rule that refused it and why.
async fn applied(
    app: &App,
    levels: &[&RuleSet],
    (inbound, identity): (&Inbound<'_>, &Identity),
    routed: &mut RoutedRequest,
    now_ms: i64,
) -> Result<Box<Applied>, (String, GatewayError)> {
    let decision = decide(app, levels, inbound, identity, routed, now_ms);
    if let Some((rule, message)) = decision.denied() {
        return Err((rule.to_owned(), denied(app, rule, message)));
    }
    if let Some(model) = decision.model.as_deref().filter(|m| *m != routed.requested) {
        let routed_by = decision.routed.last().map_or("", |r| r.name.as_str()).to_owned();
        route_to(app, inbound, routed, model).map_err(|e| (routed_by, e))?;
        // A route never takes a request where a deny stands: decide again for the new model.
        let again = decide(app, levels, inbound, identity, routed, now_ms);
        if let Some((rule, message)) = again.denied() {
            return Err((rule.to_owned(), denied(app, rule, message)));
        }
    }
    for (rule, amount) in &decision.costs {
        charge(app, rule, *amount, (now_ms, inbound.deadline)).await.map_err(|e| (rule.name.clone(), e))?;
    }
    let excluded = match &decision.backends {
        Some(names) => {
            app.router.backends.iter().filter(|b| !names.iter().any(|n| n == b.name())).map(|b| b.id).collect()
        }
        None => Vec::new(),
    };
    let headers = decision
        .headers
        .iter()
        .filter_map(|(n, v)| Some((HeaderName::from_bytes(n.as_bytes()).ok()?, HeaderValue::from_str(v).ok()?)))
        .collect();
    let named = decision.named();
    for rule in decision.decided.iter().chain(&decision.routed) {
        app.metrics.count_policy(&rule.name, rule.raw.then.name());
    }
    Ok(Box::new(Applied { named, excluded, headers, tags: decision.tags }))
}

/// A request a rule refused still has its record: who, which model, the status and the rule.
fn record_refusal(
    app: &App,
    (inbound, identity): (&Inbound<'_>, &Identity),
    routed: &RoutedRequest,
    (rule, status): (&str, u16),
    now_ms: i64,
) {
    let Some(journal) = &app.journal else { return };
    let id = inbound.request_id.to_str().unwrap_or_default().to_owned();
    let started = UsageRecord::started(id, now_ms, identity.key(), &routed.requested, &routed.model);
    let record = UsageRecord { status, policy: Some(rule.to_owned()), ..started };
    if let Err(e) = journal.append(record) {
        tracing::error!(error = %e, "could not journal a refused request's record");
    }
}

fn decide(
    app: &App,
    levels: &[&RuleSet],
    inbound: &Inbound<'_>,
    identity: &Identity,
    routed: &RoutedRequest,
    now_ms: i64,
) -> switchyard_policy::Decision {
    let values = values(levels, inbound, identity, routed, now_ms).bind();
    let decision = switchyard_policy::decide(levels, Phase::Request, &values);
    for rule in &decision.unevaluated {
        app.metrics.count_policy(&rule.name, "unevaluated");
        tracing::debug!(error = %switchyard_policy::decide::explain(rule, &values), "a policy rule did not apply");
    }
    decision
}

fn denied(app: &App, rule: &str, message: &str) -> GatewayError {
    app.metrics.count_policy(rule, "deny");
    GatewayError::PolicyDenied { rule: rule.to_owned(), message: message.to_owned() }
}

/// Put `model` in place of the one asked for (its own fallbacks, cache entries and permission
/// then apply: a key that may not use it is refused by admission, never let through).
fn route_to(app: &App, inbound: &Inbound<'_>, routed: &mut RoutedRequest, model: &str) -> Result<(), GatewayError> {
    let resolved = app.config.resolve_alias(model).to_owned();
    if inbound.endpoint.spec().model_in != ModelIn::Path {
        routed.body = with_model(&routed.body, &resolved)?;
    }
    routed.requested = model.to_owned();
    routed.model = resolved;
    Ok(())
}

/// Charge `rule`'s amount against its quota: a 429 naming the rule when it is spent.
async fn charge(
    app: &App,
    rule: &switchyard_policy::Rule,
    amount: f64,
    (now_ms, until): (i64, std::time::Instant),
) -> Result<(), GatewayError> {
    let Action::Cost { quota: name, .. } = &rule.action else { return Ok(()) };
    let Some(quota) = app.config.quotas.get(name) else { return Ok(()) };
    let now = u64::try_from(now_ms).unwrap_or(0);
    if app.quotas.charge(app.shared.as_deref(), (name, quota), amount, now, until).await {
        return Ok(());
    }
    app.metrics.count_policy(&rule.name, "quota_exceeded");
    let period_ms = (quota.period.as_millis() as u64).max(1);
    let retry_after_secs = (period_ms - now % period_ms).div_ceil(1000);
    let mut headers = http::HeaderMap::new();
    if let Ok(v) = HeaderValue::from_str(&rule.name) {
        headers.insert(crate::http::POLICY_HEADER.clone(), v);
    }
    Err(GatewayError::RateLimited {
        message: format!("quota `{name}` is spent for this period (policy `{}`)", rule.name),
        code: "quota_exceeded",
        retry_after_secs,
        headers: Box::new(headers),
    })
}

/// The request's attributes (`switchyard_policy::attributes`).
fn values(
    levels: &[&RuleSet],
    inbound: &Inbound<'_>,
    identity: &Identity,
    routed: &RoutedRequest,
    now_ms: i64,
) -> Values {
    let mut v = crate::policy::caller_values(levels, identity, inbound.headers, inbound.peer, now_ms);
    v.set("request.method", "POST")
        .set("request.path", inbound.path.to_owned())
        .set("request.endpoint", inbound.endpoint.as_str())
        .set("request.model", routed.requested.clone())
        .set("request.resolved_model", routed.model.clone())
        .set("request.stream", routed.stream)
        .set("request.size", routed.body.len() as i64);
    if crate::policy::reads(levels, "request.estimated_tokens") {
        v.set("request.estimated_tokens", crate::usage::estimate_tokens(routed.body.len()) as i64);
    }
    v
}

/// The rules' names for `x-switchyard-policy`, when any decided or routed the request.
pub(crate) fn named_header(applied: Option<&Applied>) -> Option<HeaderValue> {
    HeaderValue::from_str(applied?.named.as_deref()?).ok()
}
