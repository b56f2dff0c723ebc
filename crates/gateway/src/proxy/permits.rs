//! What a request takes before it is sent: its key's rate-limit permit and its budget
//! reservation. In a fleet both are Redis scripts; they are sent together, so the request waits
//! for one round trip, not two (the multiplexed connection pipelines them).

use std::time::Instant;

use crate::app::App;
use crate::auth::{model_allowed, Identity};
use crate::error::GatewayError;
use crate::http::parse::RoutedRequest;
use crate::limit::{period_end, period_start, BudgetPermit, Limits, Permit, Refused, Reserved};

/// The key's permit and budget reservation, or why the request may not go. A model the key may
/// not use is refused before either is asked for; when one refuses, the other is given back.
pub async fn take(
    app: &App,
    principal: &Identity,
    routed: &RoutedRequest,
    deadline: Instant,
) -> Result<(Option<Permit>, Option<BudgetPermit>), GatewayError> {
    let Some(key) = principal.key() else { return Ok((None, None)) };
    if !model_allowed(&key.models, &routed.model) && !model_allowed(&key.models, &routed.requested) {
        return Err(GatewayError::Forbidden {
            message: format!("this key may not use the model `{}`", routed.requested),
            code: "model_not_allowed",
        });
    }
    if key.budget_usd.is_none() {
        return Ok((admit(app, principal, routed, deadline).await?, None));
    }
    let (permit, budget) =
        tokio::join!(admit(app, principal, routed, deadline), reserve_budget(app, principal, routed));
    Ok((permit?, budget?))
}

/// A key's USD budget: reserve the request's estimated cost against spend + reservations.
async fn reserve_budget(
    app: &App,
    principal: &Identity,
    routed: &RoutedRequest,
) -> Result<Option<BudgetPermit>, GatewayError> {
    let Some(key) = principal.key() else { return Ok(None) };
    let Some(budget) = key.budget_usd else { return Ok(None) };
    let now = app.clock.unix_ms();
    let period = key.budget_period.as_deref();
    let start = period_start(period, now);
    let spent_so_far = || async {
        match &app.store {
            Some(store) => store.key_spend(&key.id, start).await.map_err(|e| {
                tracing::error!(error = %e, "could not read a key's spend");
                GatewayError::Internal
            }),
            None => Ok(0.0),
        }
    };
    let prompt = (routed.body.len() as u64).div_ceil(4);
    let estimate = app.config.cost(&routed.model, prompt, 0, routed.max_tokens.unwrap_or(DEFAULT_COMPLETION_ESTIMATE));
    let over_budget = |committed: f64| {
        let retry_after_secs = period_end(period, start).map_or(0, |end| ((end - now).max(1000) / 1000) as u64);
        GatewayError::RateLimited {
            message: format!(
                "this key's budget of ${budget:.2} {} is used up (${committed:.4} spent or reserved)",
                period.map_or("in total".to_owned(), |p| format!("({p})")),
            ),
            code: "budget_exceeded",
            retry_after_secs,
            headers: Box::default(),
        }
    };
    if let Some(shared) = &app.shared_budgets {
        let window = (start, period_end(period, start));
        let mut seed = None;
        loop {
            match shared.reserve(&key.id, window, budget, estimate, seed, now).await {
                Reserved::Held(hold) => return Ok(Some(BudgetPermit::shared(hold))),
                Reserved::Over(committed) => return Err(over_budget(committed as f64 / 1e6)),
                Reserved::NeedsSeed if seed.is_none() => seed = Some(spent_so_far().await?),
                Reserved::NeedsSeed | Reserved::Unavailable => return Err(GatewayError::LimitsUnavailable),
            }
        }
    }
    if app.budgets.needs_load(&key.id, start) {
        app.budgets.load(&key.id, start, spent_so_far().await?);
    }
    app.budgets.reserve(&key.id, start, budget, estimate).map(Some).map_err(|over| over_budget(over.committed))
}

/// Completion tokens assumed for a rate-limit reservation when the client set no `max_tokens`.
const DEFAULT_COMPLETION_ESTIMATE: u64 = 256;

/// A virtual key's rate limits; an admitted request holds its permit.
async fn admit(
    app: &App,
    principal: &Identity,
    routed: &RoutedRequest,
    deadline: Instant,
) -> Result<Option<Permit>, GatewayError> {
    let Some(key) = principal.key() else { return Ok(None) };
    let limits = Limits { rpm: key.rpm, tpm: key.tpm, max_parallel: key.max_parallel };
    if limits.is_unlimited() {
        return Ok(None);
    }
    let estimate = (routed.body.len() as u64).div_ceil(4) + routed.max_tokens.unwrap_or(DEFAULT_COMPLETION_ESTIMATE);
    app.limiter.acquire(&key.id, &limits, estimate, deadline).await.map(Some).map_err(|refused| {
        let r = match refused {
            Refused::Limited(r) => r,
            Refused::Unavailable => return GatewayError::LimitsUnavailable,
        };
        let secs = r.retry_after.as_secs_f64().ceil().max(1.0) as u64;
        GatewayError::RateLimited {
            message: match r.which {
                "parallel" => format!("too many requests in flight for this key (limit {})", r.limit),
                which => format!("rate limit reached: {} {which} per minute; retry in {secs} s", r.limit),
            },
            code: "rate_limit_exceeded",
            retry_after_secs: secs,
            headers: Box::new(r.snapshot.headers()),
        }
    })
}
