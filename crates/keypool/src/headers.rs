//! What a provider's answer says of a key's limits: OpenAI's (and Azure's, Groq's, Mistral's…)
//! `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, Anthropic's
//! `anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}`, and `retry-after` /
//! `retry-after-ms` on a 429.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::HeaderMap;

/// One limit as the provider reported it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Window {
    pub limit: Option<u64>,
    pub remaining: u64,
    /// When it is full again (Unix ms), if the provider said.
    pub reset_ms: Option<u64>,
}

impl Window {
    /// The share left, 0 to 1 (1 when the limit is unknown but something is left).
    pub fn fraction(&self) -> f64 {
        match self.limit {
            Some(limit) if limit > 0 => (self.remaining as f64 / limit as f64).min(1.0),
            _ if self.remaining == 0 => 0.0,
            _ => 1.0,
        }
    }
}

/// The limits an answer reported, and how long it asked to wait.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Reported {
    pub requests: Option<Window>,
    pub tokens: Option<Window>,
    /// Unix ms until which the provider asked not to be called (`retry-after`).
    pub retry_at_ms: Option<u64>,
}

/// A dimension's headers: OpenAI's `x-ratelimit-{limit,remaining,reset}-…` and Anthropic's
/// `anthropic-ratelimit-…-{limit,remaining,reset}`, in that order of preference.
struct Names {
    limit: [&'static str; 2],
    remaining: [&'static str; 2],
    openai_reset: &'static str,
    anthropic_reset: &'static str,
}

const REQUESTS: Names = Names {
    limit: ["x-ratelimit-limit-requests", "anthropic-ratelimit-requests-limit"],
    remaining: ["x-ratelimit-remaining-requests", "anthropic-ratelimit-requests-remaining"],
    openai_reset: "x-ratelimit-reset-requests",
    anthropic_reset: "anthropic-ratelimit-requests-reset",
};

const TOKENS: Names = Names {
    limit: ["x-ratelimit-limit-tokens", "anthropic-ratelimit-tokens-limit"],
    remaining: ["x-ratelimit-remaining-tokens", "anthropic-ratelimit-tokens-remaining"],
    openai_reset: "x-ratelimit-reset-tokens",
    anthropic_reset: "anthropic-ratelimit-tokens-reset",
};

fn text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim)
}

impl Reported {
    /// Read from an answer's headers at `now_ms`.
    pub fn read(headers: &HeaderMap, now_ms: u64) -> Reported {
        let window = |names: &Names| {
            let first = |pair: [&str; 2]| text(headers, pair[0]).or_else(|| text(headers, pair[1]));
            let remaining = first(names.remaining)?.parse::<u64>().ok()?;
            let limit = first(names.limit).and_then(|l| l.parse().ok());
            let reset_ms = match text(headers, names.openai_reset) {
                Some(after) => humantime::parse_duration(after).ok().map(|d| now_ms + millis(d)),
                None => {
                    text(headers, names.anthropic_reset).and_then(|at| humantime::parse_rfc3339(at).ok()).map(unix_ms)
                }
            };
            Some(Window { limit, remaining, reset_ms })
        };
        let retry_at_ms = retry_after(headers, UNIX_EPOCH + Duration::from_millis(now_ms)).map(|d| now_ms + millis(d));
        Reported { requests: window(&REQUESTS), tokens: window(&TOKENS), retry_at_ms }
    }

    /// Nothing left of a limit: until when (its reset, else a second from now).
    pub fn exhausted_until(&self, now_ms: u64) -> Option<u64> {
        [self.requests, self.tokens]
            .into_iter()
            .flatten()
            .filter(|w| w.remaining == 0)
            .map(|w| w.reset_ms.unwrap_or(now_ms + 1000).max(now_ms))
            .max()
    }
}

/// How long an answer asks its client to wait: `retry-after-ms` (OpenAI, Azure), else
/// `Retry-After` as seconds or an HTTP date (RFC 9110 §10.2.3). The gateway reads a backend's
/// cooldown with it too.
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    if let Some(ms) = text(headers, "retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return (ms.is_finite() && ms >= 0.0).then(|| Duration::from_secs_f64(ms.min(1e9) / 1e3));
    }
    let value = text(headers, "retry-after")?;
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).map_or(0, millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        pairs.iter().map(|(k, v)| (http::HeaderName::from_static(k), v.parse().unwrap())).collect()
    }

    #[test]
    fn openais_and_anthropics_limits_are_read() {
        let now = 1_700_000_000_000;
        let openai = Reported::read(
            &headers(&[
                ("x-ratelimit-limit-requests", "60"),
                ("x-ratelimit-remaining-requests", "15"),
                ("x-ratelimit-reset-requests", "1m30s"),
                ("x-ratelimit-limit-tokens", "1000"),
                ("x-ratelimit-remaining-tokens", "0"),
                ("x-ratelimit-reset-tokens", "20ms"),
            ]),
            now,
        );
        let requests = openai.requests.unwrap();
        assert_eq!((requests.limit, requests.remaining, requests.reset_ms), (Some(60), 15, Some(now + 90_000)));
        assert!((requests.fraction() - 0.25).abs() < 1e-9);
        assert_eq!(openai.exhausted_until(now), Some(now + 20));
        let anthropic = Reported::read(
            &headers(&[
                ("anthropic-ratelimit-requests-limit", "50"),
                ("anthropic-ratelimit-requests-remaining", "0"),
                ("anthropic-ratelimit-requests-reset", "2023-11-14T22:14:00Z"),
                ("retry-after", "7"),
            ]),
            now,
        );
        assert_eq!(anthropic.requests.unwrap().reset_ms, Some(1_700_000_040_000));
        assert_eq!(anthropic.retry_at_ms, Some(now + 7000));
        assert_eq!(Reported::read(&headers(&[("retry-after-ms", "250")]), now).retry_at_ms, Some(now + 250));
        let date = Reported::read(&headers(&[("retry-after", "Tue, 14 Nov 2023 22:14:00 GMT")]), now);
        assert_eq!(date.retry_at_ms, Some(1_700_000_040_000));
        assert_eq!(Reported::read(&HeaderMap::new(), now), Reported::default());
    }
}
