//! One backend's keys and this instance's view of each: requests and tokens this minute, what
//! the provider last reported, until when it rests, whether it was refused.

use std::sync::{Mutex, MutexGuard};

use http::HeaderMap;

use crate::headers::Reported;

const MINUTE_MS: u64 = 60_000;
/// How long a rate-limited key rests when the provider did not say, and at most however long it
/// asks (as a backend's cooldown is bounded).
const DEFAULT_REST_MS: u64 = 1000;
const MAX_REST_MS: u64 = 600_000;

/// A key as configured: its name (what records and metrics show; never the secret) and the
/// limits the operator knows it has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySpec {
    pub name: String,
    pub rpm: Option<u64>,
    pub tpm: Option<u64>,
}

/// What became of a key after an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It may take more requests (perhaps fewer: what is left was noted).
    Served,
    /// It rests until then (Unix ms): the request goes to another key.
    RateLimited { until_ms: u64 },
    /// The provider refused it (401): out of the pool.
    Refused,
}

/// A key's state, for metrics and the admin view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyState {
    Up,
    Resting { until_ms: u64 },
    Refused,
}

#[derive(Debug, Default)]
struct Counts {
    /// The minute (Unix ms / 60 000) the counts are of.
    minute: u64,
    requests: u64,
    tokens: u64,
    reported: Reported,
    /// When the report was read; a report older than a minute is forgotten.
    reported_at_ms: u64,
    resting_until_ms: u64,
    refused: bool,
}

impl Counts {
    fn roll(&mut self, now_ms: u64) {
        let minute = now_ms / MINUTE_MS;
        if minute != self.minute {
            (self.minute, self.requests, self.tokens) = (minute, 0, 0);
        }
        if now_ms.saturating_sub(self.reported_at_ms) > MINUTE_MS {
            self.reported = Reported::default();
        }
    }
}

#[derive(Debug)]
pub struct KeyPool {
    specs: Vec<KeySpec>,
    counts: Vec<Mutex<Counts>>,
}

impl KeyPool {
    pub fn new(specs: Vec<KeySpec>) -> KeyPool {
        let counts = specs.iter().map(|_| Mutex::default()).collect();
        KeyPool { specs, counts }
    }

    pub fn len(&self) -> usize {
        self.specs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }

    pub fn spec(&self, key: usize) -> &KeySpec {
        &self.specs[key]
    }

    fn counts(&self, key: usize, now_ms: u64) -> MutexGuard<'_, Counts> {
        let mut counts = self.counts[key].lock().unwrap_or_else(|p| p.into_inner());
        counts.roll(now_ms);
        counts
    }

    /// What is left of the key now, 0 to 1 (the smaller of its own limits' and the provider's
    /// last word); None when it may not be used (resting, refused, or nothing left).
    pub fn headroom(&self, key: usize, now_ms: u64) -> Option<f64> {
        let spec = &self.specs[key];
        let c = self.counts(key, now_ms);
        if c.refused || c.resting_until_ms > now_ms {
            return None;
        }
        let own = |used: u64, limit: Option<u64>| limit.map(|l| l.saturating_sub(used) as f64 / l.max(1) as f64);
        let left = [
            own(c.requests, spec.rpm),
            own(c.tokens, spec.tpm),
            c.reported.requests.map(|w| w.fraction()),
            c.reported.tokens.map(|w| w.fraction()),
        ]
        .into_iter()
        .flatten()
        .fold(1.0_f64, f64::min);
        (left > 0.0).then_some(left)
    }

    /// The usable key with the most headroom that is not in `tried` (of equals, the one that took
    /// fewest requests this minute, then the first), the request counted on it; None when none
    /// has any left.
    pub fn take(&self, now_ms: u64, tried: &[usize]) -> Option<usize> {
        let best = (0..self.len())
            .filter(|k| !tried.contains(k))
            .filter_map(|k| Some((k, self.headroom(k, now_ms)?, self.counts(k, now_ms).requests)))
            .fold(None::<(usize, f64, u64)>, |best, (k, left, taken)| match best {
                Some((_, most, fewest)) if most > left || (most == left && fewest <= taken) => best,
                _ => Some((k, left, taken)),
            })?;
        self.counts(best.0, now_ms).requests += 1;
        Some(best.0)
    }

    /// Count a request on `key` that was chosen elsewhere (by the fleet's shared choice).
    pub fn count_request(&self, key: usize, now_ms: u64) {
        self.counts(key, now_ms).requests += 1;
    }

    /// The answer `key` got: what the provider said of its limits is noted; a 429 (or nothing
    /// left) rests it, a 401 takes it out.
    pub fn observe(&self, key: usize, status: u16, headers: &HeaderMap, now_ms: u64) -> Outcome {
        let reported = Reported::read(headers, now_ms);
        let mut c = self.counts(key, now_ms);
        if status == 401 {
            c.refused = true;
            return Outcome::Refused;
        }
        (c.reported, c.reported_at_ms) = (reported, now_ms);
        let rest = match status {
            429 => Some(reported.retry_at_ms.or(reported.exhausted_until(now_ms)).unwrap_or(now_ms + DEFAULT_REST_MS)),
            _ => reported.exhausted_until(now_ms),
        };
        match rest.map(|until_ms| until_ms.min(now_ms + MAX_REST_MS)) {
            Some(until_ms) if until_ms > now_ms || status == 429 => {
                c.resting_until_ms = c.resting_until_ms.max(until_ms.max(now_ms + 1));
                Outcome::RateLimited { until_ms: c.resting_until_ms }
            }
            _ => Outcome::Served,
        }
    }

    /// Tokens `key` spent (counted against its `tpm` this minute).
    pub fn add_tokens(&self, key: usize, tokens: u64, now_ms: u64) {
        let mut c = self.counts(key, now_ms);
        c.tokens = c.tokens.saturating_add(tokens);
    }

    /// Another instance of the fleet saw `key` rate-limited until then, or refused.
    pub fn rest(&self, key: usize, until_ms: u64, now_ms: u64) {
        let mut c = self.counts(key, now_ms);
        c.resting_until_ms = c.resting_until_ms.max(until_ms);
    }

    pub fn refuse(&self, key: usize, now_ms: u64) {
        self.counts(key, now_ms).refused = true;
    }

    pub fn state(&self, key: usize, now_ms: u64) -> KeyState {
        let c = self.counts(key, now_ms);
        match (c.refused, c.resting_until_ms) {
            (true, _) => KeyState::Refused,
            (false, until_ms) if until_ms > now_ms => KeyState::Resting { until_ms },
            _ => KeyState::Up,
        }
    }

    /// When a key may be usable again (Unix ms): the end of the first rest, or of this minute for
    /// a key whose own limits are spent; None when every key was refused.
    pub fn back_ms(&self, now_ms: u64) -> Option<u64> {
        let next_minute = (now_ms / MINUTE_MS + 1) * MINUTE_MS;
        (0..self.len())
            .filter_map(|k| match self.state(k, now_ms) {
                KeyState::Resting { until_ms } => Some(until_ms),
                KeyState::Up => Some(next_minute),
                KeyState::Refused => None,
            })
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(limits: &[(Option<u64>, Option<u64>)]) -> KeyPool {
        let specs =
            limits.iter().enumerate().map(|(i, &(rpm, tpm))| KeySpec { name: format!("k{i}"), rpm, tpm }).collect();
        KeyPool::new(specs)
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        pairs.iter().map(|(k, v)| (http::HeaderName::from_static(k), v.parse().unwrap())).collect()
    }

    const NOW: u64 = 1_700_000_000_000;

    #[test]
    fn requests_spread_by_headroom_and_stop_at_each_keys_limits() {
        let p = pool(&[(Some(4), None), (Some(2), None)]);
        let taken: Vec<Option<usize>> = (0..7).map(|_| p.take(NOW, &[])).collect();
        // The key with more left first (of equals, the less used); 6 requests fit, the seventh does not.
        assert_eq!(taken, [Some(0), Some(1), Some(0), Some(1), Some(0), Some(0), None]);
        assert_eq!(p.back_ms(NOW), Some(NOW - NOW % MINUTE_MS + MINUTE_MS), "spent until the next minute");
        let unknown = pool(&[(None, None), (None, None), (None, None)]);
        let spread: Vec<Option<usize>> = (0..4).map(|_| unknown.take(NOW, &[])).collect();
        assert_eq!(spread, [Some(0), Some(1), Some(2), Some(0)], "no limits known: in turn");
        assert_eq!(p.take(NOW + MINUTE_MS, &[]), Some(0), "a new minute");
        assert_eq!(p.take(NOW + MINUTE_MS, &[0]), Some(1), "skips a key already tried");
        let t = pool(&[(None, Some(100)), (None, Some(100))]);
        t.add_tokens(0, 90, NOW);
        assert_eq!(t.take(NOW, &[]), Some(1));
        t.add_tokens(1, 100, NOW);
        assert_eq!((t.take(NOW, &[]), t.take(NOW, &[1])), (Some(0), Some(0)));
    }

    #[test]
    fn the_providers_word_rests_or_steers_and_a_refused_key_is_out() {
        let p = pool(&[(None, None), (None, None)]);
        let low = headers(&[("x-ratelimit-limit-requests", "100"), ("x-ratelimit-remaining-requests", "10")]);
        assert_eq!(p.observe(0, 200, &low, NOW), Outcome::Served);
        assert_eq!(p.take(NOW, &[]), Some(1), "the key with more left");
        let limited = headers(&[("retry-after", "3")]);
        assert_eq!(p.observe(1, 429, &limited, NOW), Outcome::RateLimited { until_ms: NOW + 3000 });
        assert_eq!(p.state(1, NOW + 1), KeyState::Resting { until_ms: NOW + 3000 });
        assert_eq!(p.take(NOW + 1, &[]), Some(0));
        assert_eq!(p.back_ms(NOW), Some(NOW + 3000));
        assert_eq!(p.observe(0, 401, &HeaderMap::new(), NOW), Outcome::Refused);
        assert_eq!(p.take(NOW + 1, &[]), None, "one refused, one resting");
        p.refuse(1, NOW);
        assert_eq!(p.back_ms(NOW), None, "every key refused");
        let p = pool(&[(None, None), (None, None)]);
        p.observe(0, 401, &HeaderMap::new(), NOW);
        p.observe(1, 429, &limited, NOW);
        assert_eq!(p.take(NOW + 3000, &[]), Some(1), "back after its rest");
        let empty = headers(&[("anthropic-ratelimit-tokens-remaining", "0")]);
        assert_eq!(p.observe(1, 200, &empty, NOW + 3000), Outcome::RateLimited { until_ms: NOW + 4000 });
        let bare = pool(&[(None, None)]);
        assert_eq!(bare.observe(0, 429, &HeaderMap::new(), NOW), Outcome::RateLimited { until_ms: NOW + 1000 });
    }
}
