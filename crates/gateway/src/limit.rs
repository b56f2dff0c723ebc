//! Per-key rate limits: requests/min, tokens/min and parallel requests, reserve-then-settle.
//! In memory by default (`limit/memory.rs`); across a fleet in Redis when `redis:` is
//! configured (`limit/shared.rs`), with the in-memory limiter as its `local_share` fallback.

mod budget;
mod lease;
mod memory;
pub mod quotas;
mod shared;
mod shared_budget;
mod shared_scripts;

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use http::{HeaderMap, HeaderName, HeaderValue};

pub use budget::{period_end, period_start, BudgetPermit, Budgets, OverBudget};
pub use memory::MemoryLimiter;
pub use shared::SharedLimiter;
pub use shared_budget::{micro, Reserved, SharedBudgets};

/// The limiter requests go through: the fleet's when Redis is configured, else this process's.
pub struct Limiter {
    memory: Arc<MemoryLimiter>,
    shared: Option<Arc<SharedLimiter>>,
}

impl Limiter {
    pub fn new(memory: Arc<MemoryLimiter>, shared: Option<Arc<SharedLimiter>>) -> Limiter {
        Limiter { memory, shared }
    }

    /// This process's own limiter (what MCP tool calls are limited by).
    pub fn memory(&self) -> &Arc<MemoryLimiter> {
        &self.memory
    }

    pub fn shared(&self) -> Option<&Arc<SharedLimiter>> {
        self.shared.as_ref()
    }
}

impl Limiter {
    /// Admit or refuse one request at every level it is charged to (`(id, limits)`: a key, its
    /// user, its team). In memory all levels are checked and charged under one lock. In a fleet
    /// each level is its own script, in order; a refusal at a later level gives back what the
    /// earlier ones held (their parallel slots and token reservations), but the request stays
    /// counted against an earlier level's rpm until it leaves the window: a refusal can only
    /// ever make a level admit fewer, never more.
    pub async fn acquire_levels(
        &self,
        levels: &[(&str, Limits)],
        estimate: u64,
        until: std::time::Instant,
    ) -> Result<Permit, Refused> {
        let Some(shared) = &self.shared else {
            return self.memory.acquire_levels(levels, estimate).map_err(Refused::Limited);
        };
        let mut permit: Option<Permit> = None;
        for (i, (id, limits)) in levels.iter().enumerate() {
            let level = match shared.acquire(id, limits, estimate, until).await {
                Ok(level) => level,
                Err(refused) => {
                    if let Some(mut earlier) = permit {
                        earlier.settle(0);
                    }
                    return Err(match refused {
                        Refused::Limited(r) => Refused::Limited(RateLimited { level: i, ..r }),
                        other => other,
                    });
                }
            };
            permit = Some(match permit {
                None => level,
                Some(p) => p.join(level),
            });
        }
        Ok(permit.unwrap_or_else(Permit::unlimited))
    }
}

/// Why a request was not admitted.
#[derive(Debug)]
pub enum Refused {
    Limited(RateLimited),
    /// The shared state is unreachable and the limit's `on_failure` policy is `closed`.
    Unavailable,
}

/// An admitted request: what its client is told about its limits, and its share of them, held
/// until dropped. `settle` corrects the token reservation to the real count.
pub struct Permit {
    pub snapshot: Snapshot,
    hold: Hold,
}

enum Hold {
    Memory(memory::Hold),
    Shared(shared::Hold),
    /// Nothing to give back (a limit left open while Redis is away).
    Nothing,
    /// A request charged at several levels (its key, user and team): each level's hold.
    Levels(Vec<Hold>),
}

impl Permit {
    fn memory(snapshot: Snapshot, hold: memory::Hold) -> Permit {
        Permit { snapshot, hold: Hold::Memory(hold) }
    }

    fn shared(snapshot: Snapshot, hold: shared::Hold) -> Permit {
        Permit { snapshot, hold: Hold::Shared(hold) }
    }

    fn unlimited() -> Permit {
        Permit { snapshot: Snapshot::default(), hold: Hold::Nothing }
    }

    /// One permit for a request admitted at two levels: both holds, and what the client is told
    /// is the tighter of the two (the level with less left).
    pub fn join(self, other: Permit) -> Permit {
        let tighter = |a: Option<(u64, u64, Duration)>, b: Option<(u64, u64, Duration)>| match (a, b) {
            (Some(a), Some(b)) => Some(if b.1 < a.1 { b } else { a }),
            (a, b) => a.or(b),
        };
        let snapshot = Snapshot {
            requests: tighter(self.snapshot.requests, other.snapshot.requests),
            tokens: tighter(self.snapshot.tokens, other.snapshot.tokens),
        };
        let mut holds = match self.hold {
            Hold::Levels(holds) => holds,
            hold => vec![hold],
        };
        holds.push(other.hold);
        Permit { snapshot, hold: Hold::Levels(holds) }
    }

    pub fn settle(&mut self, actual_tokens: u64) {
        self.hold.settle(actual_tokens);
    }

    /// Charge `tokens` used after admission — a realtime session's responses, as each completes —
    /// to every level's tokens-per-minute window now, beside the reservation made at admission.
    pub async fn charge(&self, tokens: u64) {
        let holds = match &self.hold {
            Hold::Levels(holds) => holds.iter().collect(),
            hold => vec![hold],
        };
        for hold in holds {
            match hold {
                Hold::Memory(h) => h.charge(tokens),
                Hold::Shared(h) => h.charge(tokens).await,
                Hold::Nothing | Hold::Levels(_) => {}
            }
        }
    }
}

impl Hold {
    fn settle(&mut self, actual_tokens: u64) {
        match self {
            Hold::Memory(h) => h.settle(actual_tokens),
            Hold::Shared(h) => h.settle(actual_tokens),
            Hold::Nothing => {}
            Hold::Levels(holds) => holds.iter_mut().for_each(|h| h.settle(actual_tokens)),
        }
    }
}

/// The limits of one key; `None` means unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Limits {
    pub rpm: Option<u32>,
    pub tpm: Option<u64>,
    pub max_parallel: Option<u32>,
}

impl Limits {
    pub fn is_unlimited(&self) -> bool {
        self.rpm.is_none() && self.tpm.is_none() && self.max_parallel.is_none()
    }
}

/// What a client is told about its limits (the `x-ratelimit-*` headers).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub requests: Option<(u64, u64, Duration)>,
    pub tokens: Option<(u64, u64, Duration)>,
}

/// A refusal: which limit, and when trying again can succeed.
#[derive(Debug, Clone, PartialEq)]
pub struct RateLimited {
    pub which: &'static str,
    pub limit: u64,
    pub retry_after: Duration,
    pub snapshot: Snapshot,
    /// Which of the levels asked for refused (`acquire_levels`' index; 0 for a single level).
    pub level: usize,
}

static LIMIT_REQUESTS: HeaderName = HeaderName::from_static("x-ratelimit-limit-requests");
static REMAINING_REQUESTS: HeaderName = HeaderName::from_static("x-ratelimit-remaining-requests");
static RESET_REQUESTS: HeaderName = HeaderName::from_static("x-ratelimit-reset-requests");
static LIMIT_TOKENS: HeaderName = HeaderName::from_static("x-ratelimit-limit-tokens");
static REMAINING_TOKENS: HeaderName = HeaderName::from_static("x-ratelimit-remaining-tokens");
static RESET_TOKENS: HeaderName = HeaderName::from_static("x-ratelimit-reset-tokens");

impl Snapshot {
    /// OpenAI-style headers: `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`. Written
    /// straight into the response's map, every value a slice of one small buffer (every admitted
    /// request of a limited key pays for this: one allocation, not one per header).
    pub fn insert_into(&self, headers: &mut HeaderMap) {
        let limits = [
            (self.requests, [&LIMIT_REQUESTS, &REMAINING_REQUESTS, &RESET_REQUESTS]),
            (self.tokens, [&LIMIT_TOKENS, &REMAINING_TOKENS, &RESET_TOKENS]),
        ];
        let mut buf = BytesMut::with_capacity(96);
        for (figures, [limit_name, remaining_name, reset_name]) in limits {
            let Some((limit, remaining, reset)) = figures else { continue };
            put_decimal(&mut buf, limit);
            insert(headers, limit_name, buf.split());
            put_decimal(&mut buf, remaining);
            insert(headers, remaining_name, buf.split());
            write_reset(&mut buf, reset);
            insert(headers, reset_name, buf.split());
        }
    }

    /// The same headers as a map of their own (for a refusal).
    pub fn headers(&self) -> HeaderMap {
        let mut map = HeaderMap::new();
        self.insert_into(&mut map);
        map
    }
}

/// `n` in decimal, without the formatting machinery (rate-limit headers, `server-timing`).
pub(crate) fn put_decimal(buf: &mut impl bytes::BufMut, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf.put_slice(&digits[at..]);
}

fn insert(headers: &mut HeaderMap, name: &HeaderName, value: BytesMut) {
    // Digits, letters and dots only: always a valid header value.
    if let Ok(value) = HeaderValue::from_maybe_shared(value.freeze()) {
        headers.insert(name, value);
    }
}

/// `1.5s`, `12ms` — the format OpenAI uses in its reset headers. Integer arithmetic and
/// `put_decimal` only: `write!` through the formatting machinery cost ~600 instructions a header.
fn write_reset(out: &mut impl bytes::BufMut, d: Duration) {
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let (secs, frac) = (ms / 1000, ms % 1000);
    if secs == 0 {
        put_decimal(out, ms);
        out.put_slice(b"ms");
        return;
    }
    put_decimal(out, secs);
    // The fraction's digits without its trailing zeros: 500 → "5", 250 → "25", 5 → "005".
    let digits = [b'0' + (frac / 100) as u8, b'0' + (frac / 10 % 10) as u8, b'0' + (frac % 10) as u8];
    let kept = match frac {
        0 => 0,
        f if f % 100 == 0 => 1,
        f if f % 10 == 0 => 2,
        _ => 3,
    };
    if kept > 0 {
        out.put_u8(b'.');
        out.put_slice(&digits[..kept]);
    }
    out.put_u8(b's');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn format_reset(d: Duration) -> String {
        let mut buf = BytesMut::new();
        write_reset(&mut buf, d);
        String::from_utf8(buf.to_vec()).unwrap()
    }

    #[test]
    fn decimals() {
        for n in [0, 7, 10, 99, 1_000_000_007, u64::MAX] {
            let mut buf = BytesMut::new();
            put_decimal(&mut buf, n);
            assert_eq!(buf, n.to_string().as_bytes());
        }
    }

    #[test]
    fn reset_format() {
        assert_eq!(format_reset(Duration::from_millis(12)), "12ms");
        assert_eq!(format_reset(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format_reset(Duration::from_secs(60)), "60s");
        assert_eq!(format_reset(Duration::from_millis(59_250)), "59.25s");
        assert_eq!(format_reset(Duration::from_millis(1_005)), "1.005s");
        assert_eq!(format_reset(Duration::from_micros(999_999)), "999ms");
        assert_eq!(format_reset(Duration::from_millis(1_050)), "1.05s");
        assert_eq!(format_reset(Duration::from_millis(10_100)), "10.1s");
        assert_eq!(format_reset(Duration::ZERO), "0ms");
    }
}
