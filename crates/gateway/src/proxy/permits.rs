//! What a request takes before it is sent: rate-limit permits and budget reservations at every
//! level it is charged to — its key, the key's user and the key's team. In a fleet both are
//! Redis scripts; rate limits and budgets are asked for together, so a request whose key has no
//! team waits for one round trip, not two (the multiplexed connection pipelines them).

use std::time::Instant;

use crate::app::App;
use crate::auth::Identity;
use crate::config::Counted;
use crate::error::GatewayError;
use crate::http::parse::RoutedRequest;
use crate::limit::{period_end, period_start, BudgetPermit, Limits, Permit, Refused, Reserved};
use crate::records::{KeyRecord, LevelLimits};

/// The permits and budget reservations, or why the request may not go. A model the key (or its
/// team) may not use is refused before either is asked for; when one refuses, the other is
/// given back.
pub async fn take(
    app: &App,
    principal: &Identity,
    routed: &RoutedRequest,
    deadline: Instant,
) -> Result<(Option<Permit>, Option<BudgetPermit>), GatewayError> {
    let Some(key) = principal.key() else { return Ok((None, None)) };
    if !key.allows_model(&routed.model) && !key.allows_model(&routed.requested) {
        return Err(GatewayError::Forbidden {
            message: format!("this key may not use the model `{}`", routed.requested),
            code: "model_not_allowed",
        });
    }
    take_allowed(app, principal, routed, deadline).await
}

/// Admission for a request whose permission was checked otherwise (a passthrough's backend):
/// every level's limits and budgets.
pub async fn take_allowed(
    app: &App,
    principal: &Identity,
    routed: &RoutedRequest,
    deadline: Instant,
) -> Result<(Option<Permit>, Option<BudgetPermit>), GatewayError> {
    let Some(key) = principal.key() else { return Ok((None, None)) };
    let budgets = budget_levels(key);
    if budgets.iter().all(Option::is_none) {
        return Ok((admit(app, key, routed, deadline).await?, None));
    }
    let (permit, budget) = tokio::join!(admit(app, key, routed, deadline), reserve_budgets(app, &budgets, routed));
    Ok((permit?, budget?))
}

/// Whose spend a budget is checked against: usage is recorded under a key's id, a user's
/// email and a team's name.
#[derive(Clone, Copy)]
enum Spender<'a> {
    Key(&'a str),
    User { id: &'a str, email: &'a str },
    Team { id: &'a str, name: &'a str },
}

impl<'a> Spender<'a> {
    /// The id its counters are kept under (keys, users and teams have distinct id forms).
    fn id(self) -> &'a str {
        match self {
            Spender::Key(id) | Spender::User { id, .. } | Spender::Team { id, .. } => id,
        }
    }

    fn what(self) -> &'static str {
        match self {
            Spender::Key(_) => "key",
            Spender::User { .. } => "user",
            Spender::Team { .. } => "team",
        }
    }
}

/// One level's budget: who, how much, per which period.
struct BudgetLevel<'a> {
    spender: Spender<'a>,
    budget: f64,
    period: Option<&'a str>,
}

/// The key's, its user's and its team's budgets, those that are set.
fn budget_levels(key: &KeyRecord) -> [Option<BudgetLevel<'_>>; 3] {
    fn level<'a>(spender: Spender<'a>, limits: &'a LevelLimits) -> Option<BudgetLevel<'a>> {
        Some(BudgetLevel { spender, budget: limits.budget_usd?, period: limits.budget_period.as_deref() })
    }
    let own = key.budget_usd.map(|budget| BudgetLevel {
        spender: Spender::Key(&key.id),
        budget,
        period: key.budget_period.as_deref(),
    });
    let user = key.owners.user.as_deref().and_then(|u| level(Spender::User { id: &u.id, email: &u.email }, &u.limits));
    let team = key.owners.team.as_deref().and_then(|t| level(Spender::Team { id: &t.id, name: &t.name }, &t.limits));
    [own, user, team]
}

/// Every level's budget, one after another: a refusal releases the reservations already made.
async fn reserve_budgets(
    app: &App,
    levels: &[Option<BudgetLevel<'_>>; 3],
    routed: &RoutedRequest,
) -> Result<Option<BudgetPermit>, GatewayError> {
    let mut held: Option<BudgetPermit> = None;
    for level in levels.iter().flatten() {
        let permit = reserve_budget(app, level, routed).await?;
        held = Some(match held {
            None => permit,
            Some(earlier) => earlier.join(permit),
        });
    }
    Ok(held)
}

/// One level's USD budget: reserve the request's estimated cost against spend + reservations.
async fn reserve_budget(
    app: &App,
    level: &BudgetLevel<'_>,
    routed: &RoutedRequest,
) -> Result<BudgetPermit, GatewayError> {
    let (id, budget, period) = (level.spender.id(), level.budget, level.period);
    let now = app.clock.unix_ms();
    let start = period_start(period, now);
    let spent_so_far = || async {
        let Some(store) = &app.store else { return Ok(0.0) };
        let spend = match level.spender {
            Spender::Key(id) => store.key_spend(id, start).await,
            Spender::User { email, .. } => store.user_spend(email, start).await,
            Spender::Team { name, .. } => store.team_spend(name, start).await,
        };
        spend.map_err(|e| {
            tracing::error!(error = %e, "could not read a budget's spend");
            GatewayError::Internal
        })
    };
    let prompt = (routed.body.len() as u64).div_ceil(4);
    let completion = routed.max_tokens.unwrap_or(DEFAULT_COMPLETION_ESTIMATE);
    let estimate = app.config.cost(&routed.model, &Counted { prompt, completion, ..Counted::default() });
    let over_budget = |committed: f64| {
        let retry_after_secs = period_end(period, start).map_or(0, |end| ((end - now).max(1000) / 1000) as u64);
        GatewayError::RateLimited {
            message: format!(
                "this {}'s budget of ${budget:.2} {} is used up (${committed:.4} spent or reserved)",
                level.spender.what(),
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
            match shared.reserve(id, window, budget, estimate, seed, now).await {
                Reserved::Held(hold) => return Ok(BudgetPermit::shared(hold)),
                Reserved::Over(committed) => return Err(over_budget(committed as f64 / 1e6)),
                Reserved::NeedsSeed if seed.is_none() => seed = Some(spent_so_far().await?),
                Reserved::NeedsSeed | Reserved::Unavailable => return Err(GatewayError::LimitsUnavailable),
            }
        }
    }
    if app.budgets.needs_load(id, start) {
        app.budgets.load(id, start, spent_so_far().await?);
    }
    app.budgets.reserve(id, start, budget, estimate).map_err(|over| over_budget(over.committed))
}

/// Completion tokens assumed for a rate-limit reservation when the client set no `max_tokens`.
const DEFAULT_COMPLETION_ESTIMATE: u64 = 256;

/// The rate limits at every level the request is charged to (key, user, team); an admitted
/// request holds its permit.
async fn admit(
    app: &App,
    key: &KeyRecord,
    routed: &RoutedRequest,
    deadline: Instant,
) -> Result<Option<Permit>, GatewayError> {
    let rates = |l: &LevelLimits| Limits { rpm: l.rpm, tpm: l.tpm, max_parallel: l.max_parallel };
    let candidates = [
        (key.id.as_str(), Limits { rpm: key.rpm, tpm: key.tpm, max_parallel: key.max_parallel }, "key"),
        key.owners
            .user
            .as_deref()
            .map_or(("", Limits::default(), "user"), |u| (u.id.as_str(), rates(&u.limits), "user")),
        key.owners
            .team
            .as_deref()
            .map_or(("", Limits::default(), "team"), |t| (t.id.as_str(), rates(&t.limits), "team")),
    ];
    let mut levels = [("", Limits::default()); 3];
    let mut whose = ["key"; 3];
    let mut n = 0;
    for (id, limits, what) in candidates {
        if !limits.is_unlimited() {
            (levels[n], whose[n]) = ((id, limits), what);
            n += 1;
        }
    }
    if n == 0 {
        return Ok(None);
    }
    let estimate = (routed.body.len() as u64).div_ceil(4) + routed.max_tokens.unwrap_or(DEFAULT_COMPLETION_ESTIMATE);
    app.limiter.acquire_levels(&levels[..n], estimate, deadline).await.map(Some).map_err(|refused| {
        let r = match refused {
            Refused::Limited(r) => r,
            Refused::Unavailable => return GatewayError::LimitsUnavailable,
        };
        let level = whose[r.level.min(n - 1)];
        let secs = r.retry_after.as_secs_f64().ceil().max(1.0) as u64;
        GatewayError::RateLimited {
            message: match r.which {
                "parallel" => format!("too many requests in flight for this {level} (limit {})", r.limit),
                which => {
                    format!("rate limit reached: {} {which} per minute for this {level}; retry in {secs} s", r.limit)
                }
            },
            code: "rate_limit_exceeded",
            retry_after_secs: secs,
            headers: Box::new(r.snapshot.headers()),
        }
    })
}
