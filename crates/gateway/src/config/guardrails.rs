//! `guardrails:` — named content checks and where they apply. Each guard has a `type` (`pii`,
//! `secrets`, `keywords`, `patterns`, `webhook`, `model`), an
//! `action` (`mask`, `block`, `log`, `pseudonymize`) and the directions it watches (`on: [request, response,
//! tool_call, tool_result]`). `guardrails.default` lists the guards every request gets; a model's
//! own list (`models: {NAME: {guardrails: [...]}}`) adds to it, and so do a key's and its team's.

use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;
use switchyard_guardrails::{Engine, GuardSpec, Kind};

use super::ConfigError;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGuard {
    #[serde(rename = "type")]
    kind: String,
    action: Option<String>,
    on: Option<Vec<String>>,
    /// `pii`: which kinds (default all).
    kinds: Option<Vec<String>>,
    /// `keywords`: the deny list.
    keywords: Option<Vec<String>>,
    /// `patterns`: name → regex.
    patterns: Option<BTreeMap<String, String>>,
    /// `webhook`: where to POST the texts, how long to wait, what a failure means, extra headers.
    url: Option<String>,
    timeout: Option<String>,
    on_error: Option<String>,
    headers: Option<BTreeMap<String, String>>,
    /// `model`: the classifier (a model served through the gateway), the categories that block,
    /// and whether it runs `before` the call or `parallel` with it.
    model: Option<String>,
    categories: Option<Vec<String>>,
    mode: Option<String>,
    /// `model`: `chat` (a Llama Guard-style classifier, the default) or `moderations`.
    api: Option<String>,
}

/// `models: {NAME: {...}}`: settings of a model as clients name it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawModel {
    #[serde(default)]
    guardrails: Vec<String>,
    /// The directory of the model's `tokenizer.json` and chat template (`config/engines.rs`).
    tokenizer: Option<String>,
}

impl RawModel {
    pub fn tokenizer(&self) -> Option<&str> {
        self.tokenizer.as_deref()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardAction {
    /// Replace each match with a placeholder naming its kind (`[EMAIL]`).
    Mask,
    /// Refuse the request (400 `content_blocked`), or end the answer with an error.
    Block,
    /// Record the verdict only.
    Log,
    /// Replace each match with a placeholder stable within the request (`<EMAIL_1>`) and give
    /// the client the values back in the answer (`guard/pseudonym.rs`).
    Pseudonymize,
}

/// Which traffic a guard watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Directions {
    pub request: bool,
    pub response: bool,
    pub tool_call: bool,
    pub tool_result: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GuardKind {
    /// Personal data; `None`: every kind.
    Pii(Option<Vec<Kind>>),
    Secrets,
    Keywords(Vec<String>),
    /// (name, regex)
    Patterns(Vec<(String, String)>),
    /// An HTTP service that judges the texts (`guard/webhook.rs`).
    Webhook(Webhook),
    /// A classifier model served through the gateway itself (`guard/model.rs`).
    Model(Classifier),
}

/// A `model` guard's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classifier {
    /// The classifier, as clients would name it (routed like any model).
    pub model: String,
    /// The categories that block (`S1`, `S2`…; a moderation model's names); empty: any unsafe verdict.
    pub categories: Vec<String>,
    pub timeout: std::time::Duration,
    /// `on_error: open`: a classifier that cannot answer lets the request through (else 503).
    pub fail_open: bool,
    /// `mode: parallel`: the call goes ahead while the classifier judges; the answer is held
    /// until it has (`before`, the default: the call waits for the verdict).
    pub parallel: bool,
    /// `api: moderations`: asked through `/v1/moderations` (an OpenAI-compatible moderation
    /// model), not as a chat classifier.
    pub moderations: bool,
}

/// A `webhook` guard's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Webhook {
    pub url: http::Uri,
    pub timeout: std::time::Duration,
    /// `on_error: open`: a webhook that cannot answer lets the request through (else 503).
    pub fail_open: bool,
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardConfig {
    pub name: String,
    pub kind: GuardKind,
    pub action: GuardAction,
    pub on: Directions,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GuardrailsConfig {
    /// Every guard, by name order.
    pub guards: Vec<GuardConfig>,
    /// Indexes into `guards` that every request gets.
    pub default: Vec<usize>,
    /// A model (as clients name it) → indexes of the guards it adds.
    pub per_model: HashMap<String, Vec<usize>>,
}

impl GuardrailsConfig {
    pub fn is_empty(&self) -> bool {
        self.guards.is_empty()
    }

    /// What each guard asks the detection engine for, in `guards`' order.
    pub fn specs(&self) -> Vec<GuardSpec> {
        self.guards.iter().map(GuardConfig::spec).collect()
    }
}

impl GuardConfig {
    fn spec(&self) -> GuardSpec {
        let name = self.name.as_str();
        match &self.kind {
            GuardKind::Pii(None) => GuardSpec::pii(name),
            GuardKind::Pii(Some(kinds)) => GuardSpec::new(name).kinds(kinds.iter().copied()),
            GuardKind::Secrets => GuardSpec::secrets(name),
            GuardKind::Keywords(words) => GuardSpec::new(name).keywords(words.iter().cloned()),
            GuardKind::Patterns(patterns) => patterns
                .iter()
                .fold(GuardSpec::new(name), |spec, (pattern, regex)| spec.pattern(pattern.clone(), regex.clone())),
            // No detectors: the webhook or the classifier judges (an empty spec keeps the
            // engine's guard indexes).
            GuardKind::Webhook(_) | GuardKind::Model(_) => GuardSpec::new(name),
        }
    }
}

fn directions(on: Option<Vec<String>>, at: &str) -> Result<Directions, ConfigError> {
    let Some(on) = on else {
        return Ok(Directions { request: true, response: true, tool_call: true, tool_result: true });
    };
    let mut d = Directions::default();
    for o in on {
        match o.as_str() {
            "request" => d.request = true,
            "response" => d.response = true,
            "tool_call" => d.tool_call = true,
            "tool_result" => d.tool_result = true,
            _ => return Err(ConfigError::at(at, "entries must be request, response, tool_call or tool_result")),
        }
    }
    Ok(d)
}

fn guard(name: String, raw: RawGuard) -> Result<GuardConfig, ConfigError> {
    let at = |field: &str| format!("guardrails.{name}.{field}");
    let kind = match raw.kind.as_str() {
        "pii" => GuardKind::Pii(
            raw.kinds
                .map(|kinds| kinds.iter().map(|k| k.parse::<Kind>()).collect::<Result<Vec<_>, _>>())
                .transpose()
                .map_err(|e| ConfigError::at(at("kinds"), e.to_string()))?,
        ),
        "secrets" => GuardKind::Secrets,
        "keywords" => match raw.keywords.filter(|k| !k.is_empty() && k.iter().all(|w| !w.trim().is_empty())) {
            Some(words) => GuardKind::Keywords(words),
            None => return Err(ConfigError::at(at("keywords"), "a `keywords` guard needs a list of non-empty words")),
        },
        "patterns" => match raw.patterns.filter(|p| !p.is_empty()) {
            Some(p) => GuardKind::Patterns(p.into_iter().collect()),
            None => return Err(ConfigError::at(at("patterns"), "a `patterns` guard needs `patterns: {NAME: REGEX}`")),
        },
        "webhook" => GuardKind::Webhook(webhook(&raw, &at)?),
        "model" => GuardKind::Model(classifier(&raw, &at)?),
        _ => return Err(ConfigError::at(at("type"), "must be pii, secrets, keywords, patterns, webhook or model")),
    };
    let remote = matches!(kind, GuardKind::Webhook(_) | GuardKind::Model(_));
    let pseudonymize = raw.action.as_deref() == Some("pseudonymize");
    let on = match raw.on {
        // A webhook or a classifier is asked about requests unless told otherwise: each answer
        // or tool call it watches waits on the network for its verdict.
        None if remote => Directions { request: true, ..Directions::default() },
        // Values are pseudonymized in requests and come back in their answers.
        None if pseudonymize => Directions { request: true, response: true, ..Directions::default() },
        on => directions(on, &at("on"))?,
    };
    // A classifier's verdict has nothing to mask: it blocks unless told to log.
    let default_action = if matches!(kind, GuardKind::Model(_)) { "block" } else { "mask" };
    let action = match raw.action.as_deref().unwrap_or(default_action) {
        "mask" => GuardAction::Mask,
        "block" => GuardAction::Block,
        "log" => GuardAction::Log,
        "pseudonymize" if !remote => GuardAction::Pseudonymize,
        "pseudonymize" => {
            return Err(ConfigError::at(
                at("action"),
                "only a guard that finds values (pii, secrets, keywords, patterns) pseudonymizes",
            ))
        }
        _ => return Err(ConfigError::at(at("action"), "must be mask, block, log or pseudonymize")),
    };
    if matches!(kind, GuardKind::Model(_)) && action == GuardAction::Mask {
        return Err(ConfigError::at(at("action"), "a model guard blocks or logs (`action: block` or `log`)"));
    }
    Ok(GuardConfig { on, name, kind, action })
}

/// A remote guard's `timeout` (or its default) and `on_error` (`open`: true).
fn waiting(
    raw: &RawGuard,
    at: &dyn Fn(&str) -> String,
    default: std::time::Duration,
) -> Result<(std::time::Duration, bool), ConfigError> {
    let timeout = match raw.timeout.as_deref() {
        None => default,
        Some(t) => super::duration::parse_duration(t).map_err(|e| ConfigError::at(at("timeout"), e))?,
    };
    let fail_open = match raw.on_error.as_deref().unwrap_or("closed") {
        "open" => true,
        "closed" => false,
        _ => return Err(ConfigError::at(at("on_error"), "must be open or closed")),
    };
    Ok((timeout, fail_open))
}

fn classifier(raw: &RawGuard, at: &dyn Fn(&str) -> String) -> Result<Classifier, ConfigError> {
    let model = match raw.model.as_deref().map(str::trim) {
        Some(m) if !m.is_empty() => m.to_owned(),
        _ => return Err(ConfigError::at(at("model"), "a model guard needs the classifier's `model`")),
    };
    let (timeout, fail_open) = waiting(raw, at, std::time::Duration::from_secs(2))?;
    let parallel = match raw.mode.as_deref().unwrap_or("before") {
        "before" => false,
        "parallel" => true,
        _ => return Err(ConfigError::at(at("mode"), "must be before or parallel")),
    };
    let moderations = match raw.api.as_deref().unwrap_or("chat") {
        "chat" => false,
        "moderations" => true,
        _ => return Err(ConfigError::at(at("api"), "must be chat or moderations")),
    };
    let categories = raw.categories.clone().unwrap_or_default();
    if categories.iter().any(|c| c.trim().is_empty()) {
        return Err(ConfigError::at(at("categories"), "categories must not be empty"));
    }
    Ok(Classifier { model, categories, timeout, fail_open, parallel, moderations })
}

fn webhook(raw: &RawGuard, at: &dyn Fn(&str) -> String) -> Result<Webhook, ConfigError> {
    let url: http::Uri = match raw.url.as_deref().map(str::parse::<http::Uri>) {
        Some(Ok(url)) if matches!(url.scheme_str(), Some("http" | "https")) && url.host().is_some() => url,
        _ => return Err(ConfigError::at(at("url"), "a webhook guard needs an http(s) `url`")),
    };
    let (timeout, fail_open) = waiting(raw, at, std::time::Duration::from_millis(300))?;
    let mut headers = Vec::new();
    for (name, value) in raw.headers.iter().flatten() {
        let parsed = (http::HeaderName::try_from(name.as_str()), http::HeaderValue::try_from(value.as_str()));
        let (Ok(name), Ok(mut value)) = parsed else {
            return Err(ConfigError::at(at("headers"), format!("`{name}` is not a valid header")));
        };
        value.set_sensitive(true);
        headers.push((name, value));
    }
    Ok(Webhook { url, timeout, fail_open, headers })
}

/// `guardrails:` (a map of guards plus `default`) and the models' lists.
pub fn validate(
    raw: Option<BTreeMap<String, serde_json::Value>>,
    models: HashMap<String, RawModel>,
) -> Result<GuardrailsConfig, ConfigError> {
    let mut raw = raw.unwrap_or_default();
    let default: Vec<String> = match raw.remove("default") {
        None => Vec::new(),
        Some(v) => serde_json::from_value(v)
            .map_err(|_| ConfigError::at("guardrails.default", "must be a list of guard names"))?,
    };
    let mut guards = Vec::new();
    for (name, value) in raw {
        let parsed: RawGuard =
            serde_json::from_value(value).map_err(|e| ConfigError::at(format!("guardrails.{name}"), e.to_string()))?;
        guards.push(guard(name, parsed)?);
    }
    let index = |name: &str, at: &str| {
        guards
            .iter()
            .position(|g| g.name == name)
            .ok_or_else(|| ConfigError::at(at, format!("names `{name}`, which is not a guard under `guardrails`")))
    };
    let default = default.iter().map(|n| index(n, "guardrails.default")).collect::<Result<Vec<_>, _>>()?;
    let mut per_model = HashMap::new();
    for (model, settings) in models {
        let at = format!("models.{model}.guardrails");
        let list = settings.guardrails.iter().map(|n| index(n, &at)).collect::<Result<Vec<_>, _>>()?;
        per_model.insert(model, list);
    }
    let config = GuardrailsConfig { guards, default, per_model };
    // Compiled once here too, so `switchyard check` and a reload refuse a bad pattern.
    Engine::new(&config.specs()).map_err(|e| ConfigError::at("guardrails", e.to_string()))?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str, models: &str) -> Result<GuardrailsConfig, ConfigError> {
        let raw = yaml_serde::from_str(yaml).map_err(|e| ConfigError::at("guardrails", e.to_string()))?;
        let models = yaml_serde::from_str(models).map_err(|e| ConfigError::at("models", e.to_string()))?;
        validate(Some(raw), models)
    }

    #[test]
    fn the_issues_shape_parses_and_mistakes_name_their_place() {
        let ok = parse(
            "{default: [pii, secrets], pii: {type: pii, action: mask, on: [request, response]}, \
             secrets: {type: secrets, action: block}, blocker: {type: keywords, keywords: [nightingale]}}",
            "{gpt-4o: {guardrails: [blocker]}}",
        )
        .unwrap();
        assert_eq!(ok.guards.iter().map(|g| g.name.as_str()).collect::<Vec<_>>(), ["blocker", "pii", "secrets"]);
        assert_eq!(ok.default, [1, 2]);
        assert_eq!(ok.per_model["gpt-4o"], [0]);
        assert!(ok.guards[1].on.request && !ok.guards[1].on.tool_call);
        assert_eq!(ok.guards[2].action, GuardAction::Block);
        // A pseudonymizing guard watches requests and their answers unless told otherwise.
        let p = parse("{default: [p], p: {type: pii, action: pseudonymize}}", "{}").unwrap();
        let on = p.guards[0].on;
        assert_eq!(
            (p.guards[0].action, on.request, on.response, on.tool_call),
            (GuardAction::Pseudonymize, true, true, false)
        );
        for (yaml, models, place) in [
            ("{default: [nope]}", "{}", "guardrails.default"),
            ("{x: {type: regex}}", "{}", "guardrails.x.type"),
            ("{x: {type: webhook}}", "{}", "guardrails.x.url"),
            ("{x: {type: webhook, url: 'ftp://h'}}", "{}", "guardrails.x.url"),
            ("{x: {type: webhook, url: 'http://h', on_error: maybe}}", "{}", "guardrails.x.on_error"),
            ("{x: {type: webhook, url: 'http://h', timeout: soon}}", "{}", "guardrails.x.timeout"),
            ("{x: {type: model}}", "{}", "guardrails.x.model"),
            ("{x: {type: model, model: g, mode: later}}", "{}", "guardrails.x.mode"),
            ("{x: {type: model, model: g, api: completions}}", "{}", "guardrails.x.api"),
            ("{x: {type: model, model: g, action: mask}}", "{}", "guardrails.x.action"),
            ("{x: {type: model, model: g, categories: ['']}}", "{}", "guardrails.x.categories"),
            ("{x: {type: pii, action: shout}}", "{}", "guardrails.x.action"),
            ("{x: {type: pii, on: [sideways]}}", "{}", "guardrails.x.on"),
            ("{x: {type: keywords}}", "{}", "guardrails.x.keywords"),
            ("{x: {type: pii}}", "{m: {guardrails: [y]}}", "models.m.guardrails"),
            ("{x: {type: pii, kinds: [emial]}}", "{}", "guardrails.x.kinds"),
            ("{x: {type: patterns, patterns: {p: '('}}}", "{}", "guardrails"),
            ("{x: {type: webhook, url: 'http://h', action: pseudonymize}}", "{}", "guardrails.x.action"),
        ] {
            let e = parse(yaml, models).unwrap_err().to_string();
            assert!(e.contains(place), "{yaml}: {e}");
        }
    }
}
