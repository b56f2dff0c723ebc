//! The organisation's rules: the configuration's `policies:`, then those written through
//! `/admin/policies` (stored, so every instance of a fleet reads the same; each re-reads them every
//! second). One set per configuration: a reload compiles the stored rules again under the new one,
//! and a stored rule that no longer checks there (its quota or model gone) is skipped, warned.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use switchyard_policy::{RawRule, RuleError, RuleSet};

use crate::config::Config;
use crate::store::{Store, StoreError, StoredPolicy};

/// How often each instance re-reads the stored rules.
pub const EVERY: Duration = Duration::from_secs(1);

/// The organisation's rules under one configuration.
pub struct Organisation {
    rules: ArcSwap<RuleSet>,
    /// Whether `rules` is empty: what every request reads, one atomic load (an `ArcSwap` load
    /// costs more, and a gateway without rules should pay nothing measurable).
    empty: AtomicBool,
    /// The stored rules `rules` was made of (compiled again only when they change).
    stored: Mutex<Vec<StoredPolicy>>,
}

impl Organisation {
    /// The configuration's rules and `stored`'s (those that check under `config`).
    pub fn new(config: &Config, stored: Vec<StoredPolicy>) -> Organisation {
        let rules = combined(config, &stored).0;
        let empty = AtomicBool::new(rules.is_empty());
        Organisation { rules: ArcSwap::from_pointee(rules), empty, stored: Mutex::new(stored) }
    }

    /// The rules now, in order.
    pub fn rules(&self) -> Arc<RuleSet> {
        self.rules.load_full()
    }

    /// Whether there are none: the one check a gateway without rules pays.
    pub fn is_empty(&self) -> bool {
        self.empty.load(Relaxed)
    }

    /// The stored rules now (a reloaded configuration starts from them).
    pub fn stored(&self) -> Vec<StoredPolicy> {
        self.stored.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Take `stored` (as read from the store), compiling only when it changed.
    pub fn set_stored(&self, config: &Config, stored: Vec<StoredPolicy>) {
        let Ok(mut held) = self.stored.lock() else { return };
        if *held == stored {
            return;
        }
        let (rules, skipped) = combined(config, &stored);
        for (name, e) in skipped {
            tracing::warn!(rule = %name, "a stored policy rule is skipped: {e}");
        }
        self.empty.store(rules.is_empty(), Relaxed);
        self.rules.store(Arc::new(rules));
        *held = stored;
    }
}

/// A stored rule as written.
pub fn raw(stored: &StoredPolicy) -> Result<RawRule, String> {
    serde_json::from_str(&stored.spec).map_err(|e| e.to_string())
}

/// The configuration's rules followed by `stored`'s, with those of `stored` that do not check
/// under `config` (or repeat a name) left out, each with its reason.
pub fn combined(config: &Config, stored: &[StoredPolicy]) -> (RuleSet, Vec<(String, String)>) {
    let mut raws: Vec<RawRule> = config.policies.rules.iter().map(|r| r.raw.clone()).collect();
    let mut skipped = Vec::new();
    for s in stored {
        let checked = raw(s).and_then(|raw| {
            if raws.iter().any(|r| r.name == raw.name) {
                return Err("another rule has this name".to_owned());
            }
            compile(config, vec![raw.clone()]).map_err(|e| e.to_string())?;
            Ok(raw)
        });
        match checked {
            Ok(raw) => raws.push(raw),
            Err(e) => skipped.push((s.name.clone(), e)),
        }
    }
    // Each rule was compiled alone above, and names are distinct: the whole compiles.
    let rules = compile(config, raws).unwrap_or_else(|e| {
        tracing::error!(error = %e, "the organisation's rules did not compile together; only the configuration's apply");
        (*config.policies).clone()
    });
    (rules, skipped)
}

/// `raw` compiled and checked under `config` (quotas, route targets).
pub fn compile(config: &Config, raw: Vec<RawRule>) -> Result<RuleSet, RuleError> {
    crate::config::policies::compile(raw, &config.quotas, &config.backends, &config.aliases)
}

/// Read the stored rules into `organisation`.
pub async fn refresh(organisation: &Organisation, config: &Config, store: &Store) -> Result<(), StoreError> {
    let stored = store.list_policies().await?;
    organisation.set_stored(config, stored);
    Ok(())
}

/// Re-read the stored rules every second until `current` says the gateway is gone.
pub async fn run(store: Store, current: impl Fn() -> Option<(Arc<Organisation>, Arc<Config>)>) {
    loop {
        let Some((organisation, config)) = current() else { return };
        if let Err(e) = refresh(&organisation, &config, &store).await {
            tracing::warn!(error = %e, "the stored policy rules could not be read");
        }
        drop((organisation, config));
        tokio::time::sleep(EVERY).await;
    }
}
