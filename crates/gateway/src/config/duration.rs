//! Human durations in config: `250ms`, `2s`, `5m`, `1h`; a bare number means seconds.

use std::time::Duration;

pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num.parse().map_err(|_| format!("`{text}` is not a duration (try 500ms, 2s, 5m, 1h)"))?;
    let secs = match unit.trim() {
        "ms" => value / 1000.0,
        "" | "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        other => return Err(format!("unknown duration unit `{other}` in `{text}` (use ms, s, m or h)")),
    };
    if !secs.is_finite() || !(0.0..=1.0e9).contains(&secs) {
        return Err(format!("`{text}` is out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// `raw` at `path` as a duration, `default` when absent.
pub(super) fn duration(path: &str, raw: &Option<String>, default: Duration) -> Result<Duration, super::ConfigError> {
    match raw {
        None => Ok(default),
        Some(text) => parse_duration(text).map_err(|m| super::ConfigError::at(path, m)),
    }
}

/// As `duration`, and more than zero.
pub(super) fn nonzero(path: &str, raw: &Option<String>, default: Duration) -> Result<Duration, super::ConfigError> {
    match duration(path, raw, default)? {
        d if d.is_zero() => Err(super::ConfigError::at(path, "must be greater than zero")),
        d => Ok(d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2s").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("3d").is_err());
        assert!(parse_duration("").is_err());
    }
}
