//! `telemetry:` — OpenTelemetry traces exported over OTLP/HTTP. Off unless this block or the
//! standard `OTEL_EXPORTER_OTLP_*` variables name a collector; the block wins over the variables,
//! which win over the defaults the OpenTelemetry specification sets.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use serde::Deserialize;

use super::duration::parse_duration;
use super::interpolate::Env;
use super::ConfigError;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTelemetry {
    enabled: Option<bool>,
    /// The collector's base URL (`/v1/traces` is appended), like `OTEL_EXPORTER_OTLP_ENDPOINT`.
    endpoint: Option<String>,
    service_name: Option<String>,
    /// Share of new traces recorded; a caller's `traceparent` decision is always followed.
    sample_ratio: Option<f64>,
    #[serde(default)]
    headers: HashMap<String, String>,
    /// Requests' traces waiting for export; past it new ones are dropped (and counted).
    queue_size: Option<usize>,
    batch_size: Option<usize>,
    /// How long a batch may wait to fill before it is sent.
    batch_delay: Option<String>,
    timeout: Option<String>,
}

/// Which traces are recorded: a caller's sampled flag is followed when there is one
/// (`parentbased_*`), else `ratio` of new traces (by trace id, so every instance agrees).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampler {
    pub ratio: f64,
    pub follow_parent: bool,
}

#[derive(Clone, PartialEq)]
pub struct TelemetryConfig {
    /// Where spans are POSTed (OTLP/HTTP protobuf), e.g. `http://127.0.0.1:4318/v1/traces`.
    pub traces_url: String,
    pub headers: HashMap<String, String>,
    pub service_name: String,
    /// `OTEL_RESOURCE_ATTRIBUTES`.
    pub resource: Vec<(String, String)>,
    pub sampler: Sampler,
    pub queue_size: usize,
    pub batch_size: usize,
    pub batch_delay: Duration,
    pub timeout: Duration,
}

impl fmt::Debug for TelemetryConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Header values are usually API keys of the receiving service.
        f.debug_struct("TelemetryConfig")
            .field("traces_url", &self.traces_url)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("service_name", &self.service_name)
            .field("sampler", &self.sampler)
            .field("queue_size", &self.queue_size)
            .finish_non_exhaustive()
    }
}

/// The telemetry to run, if any, from the `telemetry:` block (absent: `None`) and the environment.
pub fn validate(raw: Option<RawTelemetry>, env: &dyn Env) -> Result<Option<TelemetryConfig>, ConfigError> {
    let var = |name: &str| env.var(name).filter(|v| !v.trim().is_empty());
    let disabled = var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let raw_enabled = raw.as_ref().and_then(|r| r.enabled);
    if raw_enabled == Some(false) || (disabled && raw_enabled != Some(true)) {
        return Ok(None);
    }
    let raw = match raw {
        Some(raw) => raw,
        None if var("OTEL_EXPORTER_OTLP_ENDPOINT").is_some() || var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some() => {
            RawTelemetry::default()
        }
        None => return Ok(None),
    };
    for name in ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"] {
        match var(name).as_deref() {
            None | Some("http/protobuf") => {}
            Some(other) => {
                return Err(ConfigError::at(
                    "telemetry",
                    format!("{name}={other}: only http/protobuf is built in (the collector's port 4318)"),
                ))
            }
        }
    }
    let traces_url =
        match (&raw.endpoint, var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), var("OTEL_EXPORTER_OTLP_ENDPOINT")) {
            (Some(base), _, _) => traces_path(base),
            (None, Some(full), _) => full,
            (None, None, Some(base)) => traces_path(&base),
            (None, None, None) => "http://localhost:4318/v1/traces".to_owned(),
        };
    if !(traces_url.starts_with("http://") || traces_url.starts_with("https://")) {
        return Err(ConfigError::at("telemetry.endpoint", format!("`{traces_url}` is not an http(s) URL")));
    }
    let mut headers = HashMap::new();
    for name in ["OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"] {
        headers.extend(key_values(&var(name).unwrap_or_default()));
    }
    headers.extend(raw.headers);
    let sampler = match raw.sample_ratio {
        Some(ratio) if !(0.0..=1.0).contains(&ratio) => {
            return Err(ConfigError::at("telemetry.sample_ratio", "must be between 0 and 1"))
        }
        Some(ratio) => Sampler { ratio, follow_parent: true },
        None => sampler_from_env(var("OTEL_TRACES_SAMPLER").as_deref(), var("OTEL_TRACES_SAMPLER_ARG").as_deref())?,
    };
    let positive = |path: &str, given: Option<usize>, default: usize| match given {
        Some(0) => Err(ConfigError::at(path, "must be greater than zero")),
        given => Ok(given.unwrap_or(default)),
    };
    let queue_size = positive("telemetry.queue_size", raw.queue_size, 4096)?;
    let batch_size = positive("telemetry.batch_size", raw.batch_size, 512)?;
    let batch_delay = match &raw.batch_delay {
        Some(text) => parse_duration(text).map_err(|m| ConfigError::at("telemetry.batch_delay", m))?,
        None => Duration::from_secs(1),
    };
    let timeout = match &raw.timeout {
        Some(text) => parse_duration(text).map_err(|m| ConfigError::at("telemetry.timeout", m))?,
        None => Duration::from_millis(
            var("OTEL_EXPORTER_OTLP_TIMEOUT").and_then(|v| v.trim().parse().ok()).unwrap_or(10_000),
        ),
    };
    let service_name = raw.service_name.or_else(|| var("OTEL_SERVICE_NAME")).unwrap_or_else(|| "switchyard".to_owned());
    Ok(Some(TelemetryConfig {
        traces_url,
        headers,
        service_name,
        resource: key_values(&var("OTEL_RESOURCE_ATTRIBUTES").unwrap_or_default()),
        sampler,
        queue_size,
        batch_size: batch_size.min(queue_size),
        batch_delay,
        timeout,
    }))
}

fn traces_path(base: &str) -> String {
    format!("{}/v1/traces", base.trim_end_matches('/'))
}

/// `OTEL_TRACES_SAMPLER` and its argument, as the specification names them.
fn sampler_from_env(name: Option<&str>, arg: Option<&str>) -> Result<Sampler, ConfigError> {
    let ratio = || -> Result<f64, ConfigError> {
        match arg.map(|a| a.trim().parse::<f64>()) {
            None => Ok(1.0),
            Some(Ok(r)) if (0.0..=1.0).contains(&r) => Ok(r),
            Some(_) => Err(ConfigError::at("telemetry", "OTEL_TRACES_SAMPLER_ARG must be a number between 0 and 1")),
        }
    };
    Ok(match name.unwrap_or("parentbased_always_on") {
        "always_on" => Sampler { ratio: 1.0, follow_parent: false },
        "always_off" => Sampler { ratio: 0.0, follow_parent: false },
        "traceidratio" => Sampler { ratio: ratio()?, follow_parent: false },
        "parentbased_always_on" => Sampler { ratio: 1.0, follow_parent: true },
        "parentbased_always_off" => Sampler { ratio: 0.0, follow_parent: true },
        "parentbased_traceidratio" => Sampler { ratio: ratio()?, follow_parent: true },
        other => return Err(ConfigError::at("telemetry", format!("OTEL_TRACES_SAMPLER={other} is not supported"))),
    })
}

/// `k1=v1,k2=v2` with percent-encoded values (the W3C Baggage form the OTEL_* variables use).
fn key_values(text: &str) -> Vec<(String, String)> {
    text.split(',')
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            let k = k.trim();
            (!k.is_empty()).then(|| (k.to_owned(), percent_decode(v.trim())))
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> HashMap<String, String> {
        vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn off_unless_a_block_or_an_endpoint_variable_says_so() {
        assert!(validate(None, &env(&[])).unwrap().is_none());
        let on = validate(None, &env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/")])).unwrap().unwrap();
        assert_eq!(on.traces_url, "http://c:4318/v1/traces");
        let full =
            env(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:9/x"), ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://d")]);
        assert_eq!(validate(None, &full).unwrap().unwrap().traces_url, "http://c:9/x");
        let disabled = env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"), ("OTEL_SDK_DISABLED", "true")]);
        assert!(validate(None, &disabled).unwrap().is_none());
        let block = RawTelemetry { endpoint: Some("http://e:4318".into()), ..Default::default() };
        let config = validate(Some(block), &env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c")])).unwrap().unwrap();
        assert_eq!(config.traces_url, "http://e:4318/v1/traces");
        assert_eq!(config.sampler, Sampler { ratio: 1.0, follow_parent: true });
        assert_eq!((config.queue_size, config.batch_size), (4096, 512));
    }

    #[test]
    fn headers_resource_and_sampler_come_from_the_standard_variables() {
        let vars = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "api-key=a%2Cb, x=1"),
            ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=prod"),
            ("OTEL_TRACES_SAMPLER", "traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
            ("OTEL_SERVICE_NAME", "gw"),
        ]);
        let c = validate(None, &vars).unwrap().unwrap();
        assert_eq!(c.headers.get("api-key").map(String::as_str), Some("a,b"));
        assert_eq!(c.resource, vec![("deployment.environment".to_owned(), "prod".to_owned())]);
        assert_eq!(c.sampler, Sampler { ratio: 0.25, follow_parent: false });
        assert_eq!(c.service_name, "gw");
        assert!(!format!("{c:?}").contains("a,b"), "header values stay out of Debug");
    }

    #[test]
    fn what_is_not_built_in_is_refused_by_name() {
        let grpc = env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"), ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]);
        assert!(validate(None, &grpc).unwrap_err().message.contains("http/protobuf"));
        let ratio = RawTelemetry { sample_ratio: Some(2.0), ..Default::default() };
        assert_eq!(validate(Some(ratio), &env(&[])).unwrap_err().path, "telemetry.sample_ratio");
        let url = RawTelemetry { endpoint: Some("c:4318".into()), ..Default::default() };
        assert_eq!(validate(Some(url), &env(&[])).unwrap_err().path, "telemetry.endpoint");
    }
}
