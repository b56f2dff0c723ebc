//! An experiment as configured (`experiments: {NAME: {...}}`, or through `/admin/experiments`)
//! and its checks: every error names the field it is about.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::adaptive::AdaptiveSettings;

/// What is hashed to keep one variant: the same unit sees the same variant throughout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Unit {
    Key,
    /// The OpenAI `user` field, or the key's user where there is none.
    #[default]
    User,
    /// The request's session (`x-session-id`, or the body's session hint), else the key.
    Session,
    Request,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Allocation {
    #[default]
    Fixed,
    Adaptive,
}

/// The shape written in YAML or JSON.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawExperiment {
    pub model: String,
    #[serde(default)]
    pub unit: Unit,
    #[serde(default)]
    pub allocation: Allocation,
    #[serde(default)]
    pub variants: BTreeMap<String, RawVariant>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<ShadowSpec>,
    #[serde(default)]
    pub metrics: Vec<String>,
    /// When it ends (RFC 3339, e.g. `2027-01-31T00:00:00Z`): after that, requests are not assigned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge: Option<JudgeSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<WebhookSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<RawAdaptive>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<RawStop>,
    /// Only this team's keys take part (an experiment a team admin made).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawVariant {
    pub model: String,
    /// A percentage of the units; variants without one share what is left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ShadowSpec {
    pub model: String,
    /// The share of the experiment's requests also sent to the shadow (0 < sample ≤ 1).
    #[serde(default = "one")]
    pub sample: f64,
}

/// A judge model, asked off the request path with the request and its answer (both answers for a
/// shadow pair), answering a score between 0 and 1.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct JudgeSpec {
    pub model: String,
    pub rubric: String,
    #[serde(default = "one")]
    pub sample: f64,
    /// The metric its scores are (default `judge`).
    #[serde(default = "judge_name")]
    pub name: String,
}

/// A webhook scorer: POSTed the request and its answer off the request path; it answers
/// `{"score": x}` or `{"scores": {"NAME": x}}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WebhookSpec {
    pub url: String,
    #[serde(default = "one")]
    pub sample: f64,
    /// The metric a bare `score` is (default `webhook`).
    #[serde(default = "webhook_name")]
    pub name: String,
    /// How long one call may take (default 10s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Headers sent with each call (`authorization: "Bearer ${EVAL_TOKEN}"`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawAdaptive {
    pub alpha: Option<f64>,
    pub floor: Option<f64>,
    pub range: Option<[f64; 2]>,
}

/// Stop a variant whose error rate passes `error_rate` once it has `min_requests`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawStop {
    pub error_rate: Option<f64>,
    pub min_requests: Option<u64>,
}

fn one() -> f64 {
    1.0
}
fn judge_name() -> String {
    "judge".to_owned()
}
fn webhook_name() -> String {
    "webhook".to_owned()
}

/// One arm: its name, the model that answers for it, its share of units (0..=1).
#[derive(Debug, Clone, PartialEq)]
pub struct Variant {
    pub name: String,
    pub model: String,
    pub share: f64,
}

/// A checked experiment.
#[derive(Debug, Clone, PartialEq)]
pub struct Experiment {
    pub name: String,
    pub model: String,
    pub unit: Unit,
    pub allocation: Allocation,
    /// In name order (the order assignment lays shares out in); never empty.
    pub variants: Vec<Variant>,
    /// The variant differences are measured against.
    pub control: usize,
    pub shadow: Option<ShadowSpec>,
    pub metrics: Vec<String>,
    pub until_ms: Option<i64>,
    pub judge: Option<JudgeSpec>,
    pub webhook: Option<WebhookSpec>,
    pub adaptive: AdaptiveSettings,
    pub stop_error_rate: f64,
    pub stop_min_requests: u64,
    pub team: Option<String>,
    /// As written, for the admin API.
    pub raw: RawExperiment,
}

/// A problem with an experiment: `path` is the field (`experiments.NAME.variants.b.weight`).
#[derive(Debug, Clone, PartialEq)]
pub struct ExperimentError {
    pub path: String,
    pub message: String,
}

impl std::fmt::Display for ExperimentError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

impl std::error::Error for ExperimentError {}

/// The name a variant with no `variants:` gets (an experiment with only a shadow).
pub const CONTROL: &str = "control";
/// The variant name of a shadow's calls in records and results.
pub const SHADOW: &str = "shadow";

impl RawExperiment {
    /// Check it: `known(model)` says whether the gateway serves a model.
    pub fn check(self, name: &str, known: &dyn Fn(&str) -> bool) -> Result<Experiment, ExperimentError> {
        let at = |field: &str, message: String| ExperimentError { path: format!("experiments.{name}{field}"), message };
        if !valid_name(name) {
            return Err(at("", "an experiment's name is letters, digits, `-`, `_` and `.` (at most 64)".into()));
        }
        model_known(&self.model, known).map_err(|m| at(".model", m))?;
        let variants = self.checked_variants(known, &at)?;
        let control = self.checked_control(&variants, &at)?;
        if let Some(shadow) = &self.shadow {
            model_known(&shadow.model, known).map_err(|m| at(".shadow.model", m))?;
            sample(shadow.sample).map_err(|m| at(".shadow.sample", m))?;
        }
        if self.shadow.is_none() && self.variants.is_empty() {
            return Err(at(".variants", "an experiment needs variants, a shadow, or both".into()));
        }
        self.checked_metrics(&at)?;
        let until_ms = match &self.until {
            Some(until) => Some(
                humantime::parse_rfc3339_weak(until)
                    .map_err(|e| at(".until", format!("`{until}` is not an RFC 3339 time: {e}")))?
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as i64),
            ),
            None => None,
        };
        self.checked_scorers(known, &at)?;
        let adaptive = self.checked_adaptive(&variants, &at)?;
        let stop = self.stop.clone().unwrap_or_default();
        let stop_error_rate = stop.error_rate.unwrap_or(0.5);
        if !(stop_error_rate > 0.0 && stop_error_rate <= 1.0) {
            return Err(at(".stop.error_rate", "must be more than 0 and at most 1".into()));
        }
        Ok(Experiment {
            name: name.to_owned(),
            model: self.model.clone(),
            unit: self.unit,
            allocation: self.allocation,
            variants,
            control,
            shadow: self.shadow.clone(),
            metrics: self.metrics.clone(),
            until_ms,
            judge: self.judge.clone(),
            webhook: self.webhook.clone(),
            adaptive,
            stop_error_rate,
            stop_min_requests: stop.min_requests.unwrap_or(20),
            team: self.team.clone(),
            raw: self,
        })
    }

    /// Weights are percentages: given ones may not pass 100, variants without one share the rest,
    /// and when every variant has one they add up to 100.
    fn checked_variants(
        &self,
        known: &dyn Fn(&str) -> bool,
        at: &dyn Fn(&str, String) -> ExperimentError,
    ) -> Result<Vec<Variant>, ExperimentError> {
        if self.variants.is_empty() {
            return Ok(vec![Variant { name: CONTROL.to_owned(), model: self.model.clone(), share: 1.0 }]);
        }
        let mut given = 0.0;
        for (name, v) in &self.variants {
            if !valid_name(name) || name == SHADOW {
                return Err(at(
                    &format!(".variants.{name}"),
                    "a variant's name is letters, digits, `-`, `_` and `.` (not `shadow`)".into(),
                ));
            }
            model_known(&v.model, known).map_err(|m| at(&format!(".variants.{name}.model"), m))?;
            if let Some(w) = v.weight {
                if !(w > 0.0 && w <= 100.0) {
                    return Err(at(
                        &format!(".variants.{name}.weight"),
                        format!("a weight is a percentage above 0 and at most 100, not {w}"),
                    ));
                }
                given += w;
            }
        }
        let unweighted = self.variants.values().filter(|v| v.weight.is_none()).count();
        let rest = 100.0 - given;
        if rest < -1e-9 {
            return Err(at(".variants", format!("weights are percentages: they add up to {given}, more than 100")));
        }
        if unweighted == 0 && rest.abs() > 1e-9 {
            return Err(at(".variants", format!("weights are percentages: they add up to {given}, not 100")));
        }
        if unweighted > 0 && rest <= 1e-9 {
            return Err(at(
                ".variants",
                "the weights given take 100: the variants without one would get nothing".into(),
            ));
        }
        let each = if unweighted > 0 { rest / unweighted as f64 } else { 0.0 };
        Ok(self
            .variants
            .iter()
            .map(|(name, v)| Variant {
                name: name.clone(),
                model: v.model.clone(),
                share: v.weight.unwrap_or(each) / 100.0,
            })
            .collect())
    }

    fn checked_control(
        &self,
        variants: &[Variant],
        at: &dyn Fn(&str, String) -> ExperimentError,
    ) -> Result<usize, ExperimentError> {
        match &self.control {
            Some(control) => variants
                .iter()
                .position(|v| &v.name == control)
                .ok_or_else(|| at(".control", format!("`{control}` is not one of the variants"))),
            None => Ok(variants.iter().position(|v| v.model == self.model).unwrap_or(0)),
        }
    }

    fn checked_metrics(&self, at: &dyn Fn(&str, String) -> ExperimentError) -> Result<(), ExperimentError> {
        for (i, metric) in self.metrics.iter().enumerate() {
            if !valid_name(metric) {
                return Err(at(
                    &format!(".metrics[{i}]"),
                    format!("`{metric}` is not a metric name (letters, digits, `-`, `_`, `.`)"),
                ));
            }
        }
        Ok(())
    }

    fn checked_scorers(
        &self,
        known: &dyn Fn(&str) -> bool,
        at: &dyn Fn(&str, String) -> ExperimentError,
    ) -> Result<(), ExperimentError> {
        if let Some(judge) = &self.judge {
            model_known(&judge.model, known).map_err(|m| at(".judge.model", m))?;
            sample(judge.sample).map_err(|m| at(".judge.sample", m))?;
            if judge.rubric.trim().is_empty() {
                return Err(at(".judge.rubric", "the judge needs a rubric".into()));
            }
        }
        if let Some(hook) = &self.webhook {
            if !(hook.url.starts_with("http://") || hook.url.starts_with("https://")) {
                return Err(at(".webhook.url", format!("`{}` is not an http(s) URL", hook.url)));
            }
            sample(hook.sample).map_err(|m| at(".webhook.sample", m))?;
            for (name, value) in &hook.headers {
                let valid = !name.is_empty()
                    && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b))
                    && value.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b));
                if !valid {
                    return Err(at(&format!(".webhook.headers.{name}"), "not a valid header".into()));
                }
            }
            if let Some(timeout) = &hook.timeout {
                humantime::parse_duration(timeout).map_err(|e| at(".webhook.timeout", format!("`{timeout}`: {e}")))?;
            }
        }
        Ok(())
    }

    fn checked_adaptive(
        &self,
        variants: &[Variant],
        at: &dyn Fn(&str, String) -> ExperimentError,
    ) -> Result<AdaptiveSettings, ExperimentError> {
        let raw = self.adaptive.clone().unwrap_or_default();
        let mut settings = AdaptiveSettings::default();
        settings.alpha = raw.alpha.unwrap_or(settings.alpha);
        settings.floor = raw.floor.unwrap_or(settings.floor);
        settings.range = raw.range.unwrap_or(settings.range);
        if !(settings.alpha > 0.0 && settings.alpha < 0.5) {
            return Err(at(".adaptive.alpha", "the error rate must be above 0 and below 0.5".into()));
        }
        if !(settings.floor >= 0.0 && settings.floor * variants.len() as f64 <= 1.0) {
            return Err(at(".adaptive.floor", "each arm's floor share times the arms must be at most 1".into()));
        }
        if settings.range[1] <= settings.range[0] || settings.range.iter().any(|x| !x.is_finite()) {
            return Err(at(".adaptive.range", "a range is [low, high] with low < high".into()));
        }
        if self.allocation == Allocation::Adaptive {
            if self.variants.len() < 2 {
                return Err(at(".allocation", "adaptive allocation needs two variants or more".into()));
            }
            match self.metrics.as_slice() {
                [metric] if !crate::USAGE_METRICS.contains(&metric.as_str()) => {}
                [metric] => {
                    return Err(at(".metrics", format!("adaptive allocation optimises a score where higher is better, and `{metric}` is a usage figure")));
                }
                _ => return Err(at(".metrics", "adaptive allocation optimises one metric: name exactly one".into())),
            }
        }
        Ok(settings)
    }
}

fn model_known(model: &str, known: &dyn Fn(&str) -> bool) -> Result<(), String> {
    if model.is_empty() {
        return Err("a model is required".into());
    }
    if !known(model) {
        return Err(format!("`{model}` is not a model any backend serves"));
    }
    Ok(())
}

fn sample(sample: f64) -> Result<(), String> {
    if sample > 0.0 && sample <= 1.0 {
        Ok(())
    } else {
        Err(format!("a sample is a share above 0 and at most 1, not {sample}"))
    }
}

/// Names: letters, digits, `-`, `_`, `.`, at most 64.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 64 && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<Experiment, ExperimentError> {
        let raw: RawExperiment = yaml_serde::from_str(yaml).expect("yaml");
        raw.check("exp", &|m| m.starts_with("m"))
    }

    #[test]
    fn unweighted_variants_share_what_is_left() {
        let e = parse("model: m\nvariants: {a: {model: m1}, b: {model: m2, weight: 20}}").expect("valid");
        let shares: Vec<_> = e.variants.iter().map(|v| (v.name.as_str(), v.share)).collect();
        assert_eq!(shares, vec![("a", 0.8), ("b", 0.2)]);
        assert_eq!(e.control, 0, "no variant has the experiment's model: the first is the control");
    }

    #[test]
    fn bad_input_names_the_field() {
        let cases = [
            ("model: x\nvariants: {a: {model: m1}}", "experiments.exp.model"),
            ("model: m\nvariants: {a: {model: zz}}", "experiments.exp.variants.a.model"),
            (
                "model: m\nvariants: {a: {model: m1, weight: 70}, b: {model: m2, weight: 40}}",
                "experiments.exp.variants",
            ),
            (
                "model: m\nvariants: {a: {model: m1, weight: 70}, b: {model: m2, weight: 20}}",
                "experiments.exp.variants",
            ),
            ("model: m\nvariants: {a: {model: m1, weight: -1}}", "experiments.exp.variants.a.weight"),
            ("model: m\nshadow: {model: m3, sample: 1.5}", "experiments.exp.shadow.sample"),
            ("model: m\nshadow: {model: nope}", "experiments.exp.shadow.model"),
            ("model: m", "experiments.exp.variants"),
            ("model: m\nallocation: adaptive\nvariants: {a: {model: m1}, b: {model: m2}}", "experiments.exp.metrics"),
            (
                "model: m\nallocation: adaptive\nmetrics: [latency]\nvariants: {a: {model: m1}, b: {model: m2}}",
                "experiments.exp.metrics",
            ),
            ("model: m\nuntil: tomorrow\nshadow: {model: m3}", "experiments.exp.until"),
            ("model: m\ncontrol: z\nvariants: {a: {model: m1}}", "experiments.exp.control"),
        ];
        for (yaml, path) in cases {
            let e = parse(yaml).expect_err(yaml);
            assert_eq!(e.path, path, "{yaml}: {e}");
        }
    }

    #[test]
    fn a_shadow_alone_answers_with_the_experiments_model() {
        let e = parse("model: m\nshadow: {model: m3, sample: 0.1}\nuntil: 2030-01-01T00:00:00Z").expect("valid");
        assert_eq!(e.variants, vec![Variant { name: CONTROL.into(), model: "m".into(), share: 1.0 }]);
        assert_eq!(e.until_ms, Some(1_893_456_000_000));
    }
}
