//! Hosted APIs by name (`backends[].provider`), so a user writes a name and a key, not a URL:
//! each preset is the provider's documented base URL (the gateway appends `/v1/...`) and the API
//! it speaks. Every one of these lists its models (at `/v1/models`, Gemini's at `/v1beta/models`), so discovery works as for a
//! self-hosted server.

pub struct Preset {
    pub name: &'static str,
    pub url: &'static str,
    /// The backend type: `openai` (OpenAI-compatible) or `anthropic`.
    pub kind: &'static str,
}

const PRESETS: &[Preset] = &[
    Preset { name: "openai", url: "https://api.openai.com", kind: "openai" },
    Preset { name: "anthropic", url: "https://api.anthropic.com", kind: "anthropic" },
    Preset { name: "mistral", url: "https://api.mistral.ai", kind: "openai" },
    Preset { name: "groq", url: "https://api.groq.com/openai", kind: "openai" },
    Preset { name: "deepseek", url: "https://api.deepseek.com", kind: "openai" },
    Preset { name: "openrouter", url: "https://openrouter.ai/api", kind: "openai" },
    Preset { name: "together", url: "https://api.together.xyz", kind: "openai" },
    Preset { name: "fireworks", url: "https://api.fireworks.ai/inference", kind: "openai" },
    Preset { name: "gemini", url: "https://generativelanguage.googleapis.com", kind: "gemini" },
];

pub fn find(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name.eq_ignore_ascii_case(name))
}

/// The known names, for an error message.
pub fn names() -> String {
    PRESETS.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use crate::config::{BackendKind, Config};
    use std::collections::HashMap;

    fn load(yaml: &str) -> Result<Config, String> {
        Config::from_yaml(yaml, &HashMap::new()).map_err(|e| e.to_string())
    }

    #[test]
    fn a_provider_name_and_a_key_make_a_backend() {
        let c = load(
            "backends:\n  - {name: g, provider: groq, api_key: gsk-1}\n  - {name: c, provider: Anthropic, api_key: sk-ant-1}\n  - {name: o, provider: openrouter, api_key: k, url: 'https://proxy.example/api'}\n",
        )
        .unwrap();
        let (g, c2, o) = (&c.backends[0], &c.backends[1], &c.backends[2]);
        assert_eq!((g.url.as_str(), g.kind), ("https://api.groq.com/openai", BackendKind::OpenAi));
        assert_eq!((c2.url.as_str(), c2.kind), ("https://api.anthropic.com", BackendKind::Anthropic));
        assert_eq!(o.url, "https://proxy.example/api", "a given url wins over the preset's");
        assert_eq!(g.api_key.as_deref(), Some("gsk-1"));
    }

    #[test]
    fn an_unknown_provider_a_missing_key_or_no_url_is_refused() {
        let e = load("backends:\n  - {name: x, provider: nope, api_key: k}\n").unwrap_err();
        assert!(e.contains("backends[0].provider") && e.contains("groq"), "{e}");
        let e = load("backends:\n  - {name: x, provider: mistral}\n").unwrap_err();
        assert!(e.contains("backends[0].api_key"), "{e}");
        let e = load("backends:\n  - {name: x}\n").unwrap_err();
        assert!(e.contains("backends[0].url"), "{e}");
    }

    #[test]
    fn a_key_pool_is_named_keys_with_limits_instead_of_one_key() {
        let c = load(
            "backends:\n  - {name: o, provider: openai, api_keys: [{name: prod, key: sk-1, rpm: 500, tpm: 90000}, {name: batch, key: sk-2}]}\n",
        )
        .unwrap();
        let keys = &c.backends[0].api_keys;
        assert_eq!((keys[0].name.as_str(), keys[0].rpm, keys[0].tpm), ("prod", Some(500), Some(90000)));
        assert_eq!((keys[1].name.as_str(), keys[1].key.as_str(), keys[1].rpm), ("batch", "sk-2", None));
        assert!(!format!("{:?}", c.backends[0].api_keys).contains("sk-1"), "no secret in debug output");
        for (pool, field) in [
            ("api_key: k, api_keys: [{name: a, key: k1}]", "backends[0].api_keys"),
            ("api_keys: []", "backends[0].api_keys"),
            ("api_keys: [{name: a, key: k1}, {name: a, key: k2}]", "backends[0].api_keys[1].name"),
            ("api_keys: [{name: a, key: ''}]", "backends[0].api_keys[0].key"),
            ("api_keys: [{name: a, key: k, rpm: 0}]", "backends[0].api_keys[0].rpm"),
            ("api_keys: [{name: a, secret: k}]", "backends[0]"),
        ] {
            let e = load(&format!("backends:\n  - {{name: x, url: 'http://h', {pool}}}\n")).unwrap_err();
            assert!(e.contains(field), "{pool}: {e}");
        }
    }
}
