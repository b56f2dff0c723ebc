//! Waiting out a backend's "not now". A 429, or a 503 that says `Retry-After`, cools the backend
//! down for as long as it asked (`Retry-After` in seconds or as an HTTP date, or `retry-after-ms`;
//! a 429 without either: the exponential backoff), so other requests go elsewhere meanwhile. A
//! request whose every backend is cooling waits for the first to come back — at least the
//! backoff (doubling from `routing.retry_backoff`, with jitter), at most `routing.retry_after_max`
//! and never past its deadline — instead of failing; when that is too long, the backend's own
//! answer (with its `Retry-After`) goes to the client at once. A request that found its backends
//! unreachable (a connection error) and has no fallback left waits the same backoff for one to
//! come back (a restart) before it fails.

use std::time::{Duration, Instant, SystemTime};

use http::{HeaderMap, StatusCode};

use crate::app::App;
use crate::route::backend::Backend;

/// The longest a backend is left alone on its word, however long it asks for.
const MAX_COOLDOWN: Duration = Duration::from_secs(600);

/// How long the answer asks the client to wait: the same reading a key pool rests a key by.
pub use switchyard_keypool::retry_after;

/// `base` doubled `n` times, less up to half of it at random, so clients that failed together do
/// not come back together.
pub fn backoff(base: Duration, n: u32) -> Duration {
    let full = base.saturating_mul(1u32 << n.min(16));
    let mut random = [0u8; 8];
    // No randomness (never seen): no jitter, the full wait.
    let unit = match getrandom::getrandom(&mut random) {
        Ok(()) => (u64::from_le_bytes(random) >> 11) as f64 / (1u64 << 53) as f64,
        Err(_) => 0.0,
    };
    full.mul_f64(1.0 - unit / 2.0)
}

/// The backend answered `status` with `headers`: cool it down when it asked for time.
pub fn on_answer(app: &App, backend: &Backend, status: StatusCode, headers: &HeaderMap, retries: u32) {
    // Every answer passes here: the headers are read only for the two statuses that ask for time.
    if status != StatusCode::TOO_MANY_REQUESTS && status != StatusCode::SERVICE_UNAVAILABLE {
        return;
    }
    let asked = retry_after(headers, SystemTime::now());
    let cooldown = match (status, asked) {
        (StatusCode::TOO_MANY_REQUESTS, asked) => asked.unwrap_or_else(|| backoff(app.config.retry_backoff, retries)),
        (StatusCode::SERVICE_UNAVAILABLE, Some(asked)) => asked,
        _ => return,
    };
    let cooldown = cooldown.min(MAX_COOLDOWN);
    if !cooldown.is_zero() {
        app.metrics.count_error("upstream_cooldown");
        backend.health.cool_down(app.clock.mono_ms() + cooldown.as_millis() as u64);
    }
}

pub enum Wait {
    /// A backend is back: try again.
    Waited,
    /// One will be back only after this long: more than the request may wait.
    TooLong(Duration),
    /// None of the model's backends is cooling down: waiting would not help.
    Nothing,
}

/// Every backend of `model` is busy or tried: when some are only cooling down, wait for the
/// first to come back if that fits `routing.retry_after_max` and the deadline.
pub async fn wait_for_cooldown(app: &App, model: &str, waits: u32, deadline: Instant) -> Wait {
    let Some(left) = app.router.soonest_cooldown_end(model) else { return Wait::Nothing };
    let wait = left.max(backoff(app.config.retry_backoff, waits));
    if wait > app.config.retry_after_max || Instant::now() + wait >= deadline {
        return Wait::TooLong(left);
    }
    tokio::time::sleep(wait).await;
    Wait::Waited
}

/// After a connection error, when no backend of the model is left: wait the backoff (doubling
/// from `routing.retry_backoff`, with jitter) so a restarting backend can come back, if that fits
/// `routing.retry_after_max` and the deadline. Whether it waited.
pub async fn wait_backoff(app: &App, waits: u32, deadline: Instant) -> bool {
    let wait = backoff(app.config.retry_backoff, waits);
    if wait > app.config.retry_after_max || Instant::now() + wait >= deadline {
        return false;
    }
    tokio::time::sleep(wait).await;
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_milliseconds_seconds_and_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let headers = |pairs: &[(&'static str, &str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.insert(*k, v.parse().unwrap());
            }
            h
        };
        assert_eq!(retry_after(&headers(&[("retry-after", "2")]), now), Some(Duration::from_secs(2)));
        assert_eq!(
            retry_after(&headers(&[("retry-after", "2"), ("retry-after-ms", "350")]), now),
            Some(Duration::from_millis(350))
        );
        let later = httpdate::fmt_http_date(now + Duration::from_secs(7));
        assert_eq!(retry_after(&headers(&[("retry-after", &later)]), now), Some(Duration::from_secs(7)));
        let earlier = httpdate::fmt_http_date(now - Duration::from_secs(7));
        assert_eq!(retry_after(&headers(&[("retry-after", &earlier)]), now), Some(Duration::ZERO));
        for bad in ["soon", "-1", ""] {
            assert_eq!(retry_after(&headers(&[("retry-after", bad)]), now), None, "{bad}");
        }
        assert_eq!(retry_after(&headers(&[("retry-after-ms", "NaN")]), now), None);
    }

    #[test]
    fn backoff_doubles_with_up_to_half_taken_off() {
        let base = Duration::from_millis(100);
        for n in 0..5 {
            let full = base * (1 << n);
            let got = backoff(base, n);
            assert!(got <= full && got >= full / 2, "{n}: {got:?}");
        }
        assert!(backoff(base, 40) <= base * (1 << 16), "the doubling stops");
    }
}
