//! The shipped price table: list prices of the common hosted models, in USD per million tokens
//! (input, output, cache reads, cache writes), so spend and budgets are right without typing prices. Entries
//! in `prices:` override these. A model is found by its exact name, else with a provider prefix
//! (`openai/gpt-4o`) or a date suffix (`claude-sonnet-4-5-20250929`, `gpt-4o-2024-08-06`) taken off,
//! and a Bedrock id as the model it names (`us.anthropic.claude-sonnet-4-20250514-v1:0`).
//!
//! The figures are the vendors' published list prices as of October 2025 (standard tier, prompts
//! within the base context tier); vendors change them, so a deployment that bills on them should
//! pin its own in `prices:`.

use std::collections::HashMap;

use serde::Deserialize;

use super::{ConfigError, Price, UnitPrices};

/// (model, input, output, cache read, cache write) per million tokens. No cache-write price: writes
/// cost what input does (OpenAI, Google and DeepSeek charge nothing extra for caching a prompt).
type Shipped = (&'static str, f64, f64, Option<f64>, Option<f64>);
const SHIPPED: &[Shipped] = &[
    // OpenAI
    ("gpt-5", 1.25, 10.0, Some(0.125), None),
    ("gpt-5-mini", 0.25, 2.0, Some(0.025), None),
    ("gpt-5-nano", 0.05, 0.40, Some(0.005), None),
    ("gpt-4.1", 2.0, 8.0, Some(0.50), None),
    ("gpt-4.1-mini", 0.40, 1.60, Some(0.10), None),
    ("gpt-4.1-nano", 0.10, 0.40, Some(0.025), None),
    ("gpt-4o", 2.50, 10.0, Some(1.25), None),
    ("gpt-4o-mini", 0.15, 0.60, Some(0.075), None),
    ("o1", 15.0, 60.0, Some(7.50), None),
    ("o3", 2.0, 8.0, Some(0.50), None),
    ("o3-mini", 1.10, 4.40, Some(0.55), None),
    ("o4-mini", 1.10, 4.40, Some(0.275), None),
    ("text-embedding-3-small", 0.02, 0.0, None, None),
    ("text-embedding-3-large", 0.13, 0.0, None, None),
    // Anthropic (cache reads 0.1x input, 5-minute cache writes 1.25x)
    ("claude-opus-4-1", 15.0, 75.0, Some(1.50), Some(18.75)),
    ("claude-opus-4", 15.0, 75.0, Some(1.50), Some(18.75)),
    ("claude-sonnet-4-5", 3.0, 15.0, Some(0.30), Some(3.75)),
    ("claude-sonnet-4", 3.0, 15.0, Some(0.30), Some(3.75)),
    ("claude-3-7-sonnet", 3.0, 15.0, Some(0.30), Some(3.75)),
    ("claude-haiku-4-5", 1.0, 5.0, Some(0.10), Some(1.25)),
    ("claude-3-5-haiku", 0.80, 4.0, Some(0.08), Some(1.0)),
    // Google
    ("gemini-2.5-pro", 1.25, 10.0, Some(0.125), None),
    ("gemini-2.5-flash", 0.30, 2.50, Some(0.03), None),
    ("gemini-2.5-flash-lite", 0.10, 0.40, Some(0.01), None),
    ("gemini-2.0-flash", 0.10, 0.40, Some(0.025), None),
    // Mistral
    ("mistral-large-latest", 2.0, 6.0, None, None),
    ("mistral-medium-latest", 0.40, 2.0, None, None),
    ("mistral-small-latest", 0.10, 0.30, None, None),
    ("codestral-latest", 0.30, 0.90, None, None),
    // DeepSeek (cached input: cache hits)
    ("deepseek-chat", 0.28, 0.42, Some(0.028), None),
    ("deepseek-reasoner", 0.28, 0.42, Some(0.028), None),
    // Groq
    ("llama-3.3-70b-versatile", 0.59, 0.79, None, None),
    ("llama-3.1-8b-instant", 0.05, 0.08, None, None),
];

/// The shipped table as `prices:` entries.
pub fn shipped() -> impl Iterator<Item = (String, Price)> {
    SHIPPED.iter().map(|&(model, input, output, cached, written)| {
        (
            model.to_owned(),
            Price {
                input_per_million: input,
                output_per_million: output,
                cached_input_per_million: cached,
                cache_write_per_million: written,
                units: super::UnitPrices::default(),
                batch_discount: 1.0,
            },
        )
    })
}

/// `model` without a provider prefix (`openai/`), Bedrock's wrapping (`[geo.]vendor.` and
/// `-vN:M`) or a trailing date (`-20250929`, `-2024-08-06`); None when it has none of them.
pub fn normalized(model: &str) -> Option<&str> {
    let bare = model.rsplit_once('/').map_or(model, |(_, name)| name);
    let undated = strip_date(strip_bedrock(bare));
    (undated.len() != model.len()).then_some(undated)
}

/// A Bedrock model id, `[geo.]vendor.name-vN[:M]`, as `name` (ids without the version suffix are
/// left alone: a dot alone says nothing).
fn strip_bedrock(name: &str) -> &str {
    let Some((head, version)) = name.rsplit_once("-v") else { return name };
    let numbers = version.split(':').collect::<Vec<_>>();
    let versioned =
        numbers.len() <= 2 && numbers.iter().all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    match head.rsplit_once('.') {
        Some((_, model)) if versioned && !model.is_empty() => model,
        _ => name,
    }
}

fn strip_date(name: &str) -> &str {
    // Bytes, not chars: a client may name a model in any script, and only ASCII dates are cut
    // (every cut lands before an ASCII `-`, so on a character boundary).
    let b = name.as_bytes();
    let digits = |s: &[u8]| !s.is_empty() && s.iter().all(u8::is_ascii_digit);
    let n = b.len();
    // -YYYYMMDD
    if n > 9 && b[n - 9] == b'-' && digits(&b[n - 8..]) && b[n - 8..].starts_with(b"20") {
        return &name[..n - 9];
    }
    // -YYYY-MM-DD
    if n > 11
        && b[n - 11] == b'-'
        && b[n - 6] == b'-'
        && b[n - 3] == b'-'
        && digits(&b[n - 10..n - 6])
        && digits(&b[n - 5..n - 3])
        && digits(&b[n - 2..])
    {
        return &name[..n - 11];
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Counted;

    #[test]
    fn dated_and_prefixed_names_find_their_model() {
        assert_eq!(normalized("claude-sonnet-4-5-20250929"), Some("claude-sonnet-4-5"));
        assert_eq!(normalized("gpt-4o-2024-08-06"), Some("gpt-4o"));
        assert_eq!(normalized("openai/gpt-4o-mini"), Some("gpt-4o-mini"));
        assert_eq!(normalized("anthropic/claude-3-5-haiku-20241022"), Some("claude-3-5-haiku"));
        assert_eq!(normalized("anthropic.claude-3-5-haiku-20241022-v1:0"), Some("claude-3-5-haiku"));
        assert_eq!(normalized("us.anthropic.claude-sonnet-4-20250514-v1:0"), Some("claude-sonnet-4"));
        assert_eq!(normalized("mistral.mistral-large-2402-v1:0"), Some("mistral-large-2402"));
        assert_eq!(normalized("my.model-version"), None, "not a Bedrock version");
        assert_eq!(normalized("gpt-4o"), None);
        assert_eq!(normalized("llama3.1:8b"), None);
        assert_eq!(normalized("model-12345678"), None, "not a date");
        // Any script, any length: never a cut inside a character.
        for name in ["модель-2025-08-06", "模型模型模型模型", "ééééééééééé", "x-éé-éé-é", "é-20250929"]
        {
            let _ = normalized(name);
        }
        assert_eq!(normalized("модель-2025-08-06"), Some("модель"));
    }

    #[test]
    fn hosted_models_are_priced_without_configuration_and_prices_override() {
        let c = crate::config::Config::from_yaml(
            "prices: {gpt-4o: {input_per_million: 1.0, output_per_million: 2.0}}",
            &std::collections::HashMap::new(),
        )
        .unwrap();
        // Shipped: 1M prompt tokens of which half cached, and 1M completion tokens.
        let counted =
            |prompt, cache_read, cache_write, completion| Counted { prompt, cache_read, cache_write, completion };
        let sonnet = c.cost("claude-sonnet-4-5-20250929", &counted(1_000_000, 500_000, 0, 1_000_000));
        assert!((sonnet - (1.5 + 0.15 + 15.0)).abs() < 1e-9, "{sonnet}");
        // Cache writes at Anthropic's 1.25x: 0.2M input, 0.3M read, 0.5M written.
        let writes = c.cost("claude-sonnet-4-5", &counted(1_000_000, 300_000, 500_000, 0));
        assert!((writes - (0.6 + 0.09 + 1.875)).abs() < 1e-9, "{writes}");
        assert!((c.cost("openai/gpt-4o-mini", &counted(1_000_000, 0, 0, 0)) - 0.15).abs() < 1e-9);
        // Configured: no cache prices, so cached tokens are billed as input.
        assert!((c.cost("gpt-4o", &counted(1_000_000, 1_000_000, 0, 1_000_000)) - 3.0).abs() < 1e-9);
        assert_eq!(c.cost("llama3.1:8b", &counted(1_000_000, 0, 0, 1_000_000)), 0.0, "self-hosted models cost nothing");
        // `cache_read` and `cache_write` price them, per million as the others.
        let c = crate::config::Config::from_yaml(
            "prices: {m: {input_per_million: 10, output_per_million: 20, cache_read: 1, cache_write: 12.5}}",
            &std::collections::HashMap::new(),
        )
        .unwrap();
        let m = c.cost("m", &counted(4_000_000, 1_000_000, 2_000_000, 1_000_000));
        assert!((m - (10.0 + 1.0 + 25.0 + 20.0)).abs() < 1e-9, "{m}");
    }

    #[test]
    fn every_shipped_price_is_sane() {
        for (model, p) in shipped() {
            assert!(p.input_per_million > 0.0 && p.output_per_million >= 0.0, "{model}");
            assert!(p.cached_input_per_million.is_none_or(|c| c < p.input_per_million), "{model}");
            assert!(p.cache_write_per_million.is_none_or(|w| w > p.input_per_million), "{model}");
            assert!(normalized(&model).is_none(), "{model} is stored under its plain name");
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
/// One `prices:` entry as written.
pub struct RawPrice {
    #[serde(default)]
    input_per_million: f64,
    #[serde(default)]
    output_per_million: f64,
    /// Prompt tokens read from the provider's cache (`cached_input_per_million` is its older name).
    #[serde(alias = "cached_input_per_million")]
    cache_read: Option<f64>,
    /// Prompt tokens written to the provider's cache.
    cache_write: Option<f64>,
    #[serde(default)]
    per_request: f64,
    #[serde(default)]
    per_image: f64,
    #[serde(default)]
    per_search_unit: f64,
    #[serde(default)]
    per_second_audio: f64,
    #[serde(default)]
    per_character: f64,
    /// What a batch's lines cost of the full price (1.0: the same).
    batch_discount: Option<f64>,
}

/// The shipped table (config/prices.rs), then the configured prices over it.
pub fn validate(raw: HashMap<String, RawPrice>) -> Result<HashMap<String, Price>, ConfigError> {
    let mut prices: HashMap<String, Price> = shipped().collect();
    for (model, p) in raw {
        let cached = ("cache_read", p.cache_read.unwrap_or(0.0));
        let units = UnitPrices {
            per_request: p.per_request,
            per_image: p.per_image,
            per_search_unit: p.per_search_unit,
            per_second_audio: p.per_second_audio,
            per_character: p.per_character,
        };
        let fields = [
            ("input_per_million", p.input_per_million),
            ("output_per_million", p.output_per_million),
            cached,
            ("cache_write", p.cache_write.unwrap_or(0.0)),
            ("per_request", units.per_request),
            ("per_image", units.per_image),
            ("per_search_unit", units.per_search_unit),
            ("per_second_audio", units.per_second_audio),
            ("per_character", units.per_character),
            ("batch_discount", p.batch_discount.unwrap_or(1.0)),
        ];
        for (field, v) in fields {
            if !v.is_finite() || v < 0.0 {
                return Err(ConfigError::at(format!("prices.{model}.{field}"), "must be a non-negative number"));
            }
        }
        let (input_per_million, output_per_million) = (p.input_per_million, p.output_per_million);
        let (cached_input_per_million, cache_write_per_million) = (p.cache_read, p.cache_write);
        let batch_discount = p.batch_discount.unwrap_or(1.0);
        let price = Price {
            input_per_million,
            output_per_million,
            cached_input_per_million,
            cache_write_per_million,
            units,
            batch_discount,
        };
        prices.insert(model, price);
    }
    Ok(prices)
}
