//! The gateway's one source of time. Everything that asks "what time is it" (rate-limit
//! windows, budget periods, breaker cool-downs, key expiry, usage timestamps) asks a `Clock`, so
//! a test can swap in virtual time (`Clock::manual`) and move it by hand instead of sleeping.
//!
//! Two readings: a monotonic one in milliseconds since the process (or the manual clock) started,
//! for intervals; and wall time since the Unix epoch, for anything stored or shown. The system
//! clock is a `None` check away from the OS calls, so the request path pays nothing for the
//! injection point.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A handle on the time: the system's (the default) or a manual one shared by every clone.
#[derive(Clone, Default)]
pub struct Clock(Option<Arc<ManualTime>>);

struct ManualTime {
    mono_ms: AtomicU64,
    unix_ms: AtomicI64,
}

impl Clock {
    pub fn system() -> Clock {
        Clock(None)
    }

    /// Virtual time standing still at `unix_ms` (wall) and 0 (monotonic) until `advance`d.
    pub fn manual(unix_ms: i64) -> Clock {
        Clock(Some(Arc::new(ManualTime { mono_ms: AtomicU64::new(0), unix_ms: AtomicI64::new(unix_ms) })))
    }

    /// Move a manual clock forward (both readings). The system clock cannot be moved: false.
    pub fn advance(&self, by: Duration) -> bool {
        let Some(m) = &self.0 else { return false };
        m.mono_ms.fetch_add(by.as_millis() as u64, Relaxed);
        m.unix_ms.fetch_add(by.as_millis() as i64, Relaxed);
        true
    }

    /// Monotonic milliseconds (since the process started, for the system clock).
    #[inline]
    pub fn mono_ms(&self) -> u64 {
        match &self.0 {
            None => mono_ms(),
            Some(m) => m.mono_ms.load(Relaxed),
        }
    }

    /// Milliseconds since the Unix epoch.
    #[inline]
    pub fn unix_ms(&self) -> i64 {
        match &self.0 {
            None => unix_ms(),
            Some(m) => m.unix_ms.load(Relaxed),
        }
    }

    /// Seconds since the Unix epoch.
    #[inline]
    pub fn unix_secs(&self) -> i64 {
        self.unix_ms().div_euclid(1000)
    }
}

/// The system's monotonic milliseconds since the first call in this process. For readings that
/// only compare with each other on the system clock (backend load signals' freshness).
pub fn mono_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// The system's wall time in milliseconds since the Unix epoch (0 if the clock is before it).
pub fn unix_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told_and_every_clone_sees_it() {
        let clock = Clock::manual(1_000_000);
        let other = clock.clone();
        assert_eq!((clock.mono_ms(), clock.unix_ms(), clock.unix_secs()), (0, 1_000_000, 1_000));
        assert!(clock.advance(Duration::from_millis(1_500)));
        assert_eq!((other.mono_ms(), other.unix_ms(), other.unix_secs()), (1_500, 1_001_500, 1_001));
    }

    #[test]
    fn the_system_clock_reads_the_os_and_cannot_be_moved() {
        let clock = Clock::system();
        assert!(!clock.advance(Duration::from_secs(3600)));
        let (before, now) = (clock.mono_ms(), clock.unix_ms());
        // 2026-01-01 or later, and within a minute of what the OS says.
        assert!(now > 1_767_225_600_000 && (now - unix_ms()).abs() < 60_000, "{now}");
        assert!(clock.mono_ms() >= before);
    }
}
