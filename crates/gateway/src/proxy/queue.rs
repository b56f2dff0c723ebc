//! Choosing a backend with admission control: when every backend of the model is at its cap,
//! wait in the model's fair queue (`route/admission.rs`) and choose again when a slot frees; a
//! request arriving while others wait queues behind them rather than taking the next slot.

use std::time::{Duration, Instant};

use crate::app::App;
use crate::error::GatewayError;
use crate::route::admission::Refused;
use crate::route::{RouteHints, SelectError, Selected};

/// `Retry-After` for a request the queue could not take (seconds).
const RETRY_AFTER_SECS: u64 = 1;

/// A backend for the request, waiting for a slot if need be. `queue_first`: join the queue
/// if requests for this model already wait (a first attempt; a retry keeps its turn).
pub async fn select(
    app: &App,
    model: &str,
    hints: &RouteHints<'_>,
    tried: &[usize],
    key: &str,
    deadline: Instant,
    queue_first: bool,
) -> Result<Result<Selected, SelectError>, GatewayError> {
    if hints.spare > 0 {
        return Box::pin(spare_slot(app, model, hints, tried, deadline)).await;
    }
    let admission = &app.router.admission;
    let mut wait = queue_first && admission.has_waiters(model);
    loop {
        if wait {
            let limit = deadline.saturating_duration_since(Instant::now());
            // Boxed: the wait is the rare path, and its future would otherwise enlarge every
            // request's future (moved whole, by memcpy, on the hot path).
            // A request whose prompt a backend holds waits for that backend (within the balance rule).
            let lane = app.router.waiting_lane(model, hints, tried);
            let room = || app.router.has_room(model, lane);
            let waited = Box::pin(admission.wait(model, lane, key, limit.max(Duration::from_millis(1)), room));
            if let Err(why) = waited.await {
                if why == Refused::QueueFull {
                    tracing::debug!(model, "admission queue full");
                }
                return Err(GatewayError::Overloaded { model: model.to_owned(), retry_after_secs: RETRY_AFTER_SECS });
            }
        }
        match app.router.select_with(model, hints, tried) {
            Err(SelectError::Full) => wait = true,
            other => return Ok(other),
        }
    }
}

/// How often low-priority work looks again for a slot to spare.
const SPARE_POLL: Duration = Duration::from_millis(5);

/// A backend with a slot to spare after this request (a batch's line): none is taken while
/// interactive requests wait for the model, and the line never joins their queue, where it would
/// take a turn and a freed slot from them; it looks again every few milliseconds instead.
async fn spare_slot(
    app: &App,
    model: &str,
    hints: &RouteHints<'_>,
    tried: &[usize],
    deadline: Instant,
) -> Result<Result<Selected, SelectError>, GatewayError> {
    loop {
        if !app.router.admission.has_waiters(model) {
            match app.router.select_with(model, hints, tried) {
                Err(SelectError::Full) => {}
                other => return Ok(other),
            }
        }
        if hints.never_wait || Instant::now() + SPARE_POLL >= deadline {
            return Err(GatewayError::Overloaded { model: model.to_owned(), retry_after_secs: RETRY_AFTER_SECS });
        }
        tokio::time::sleep(SPARE_POLL).await;
    }
}
