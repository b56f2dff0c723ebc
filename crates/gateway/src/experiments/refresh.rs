//! What every instance does each second for its experiments, from the store (so a fleet agrees):
//! read the admin API's experiments, apply events (a stopped variant, a winner), stop a variant
//! whose error rate passed its experiment's threshold, and move adaptive shares (Thompson
//! sampling) or declare a winner (the confidence sequences separate).

use std::sync::Arc;
use std::time::Duration;

use rand::SeedableRng;
use switchyard_experiments::spec::SHADOW;
use switchyard_experiments::{Allocation, Arm, Experiment, RawExperiment};

use super::{Experiments, Live};
use crate::config::Config;
use crate::store::{Store, StoreError, StoredExperiment};

/// The error rate that stops a variant is its rate over this long (what it does now, and a
/// bounded read however long the experiment has run).
pub const ERROR_WINDOW: Duration = Duration::from_secs(300);

/// Shadow pairs kept per experiment (the newest).
pub const MAX_PAIRS: usize = 1000;

/// How often experiments are refreshed.
pub const EVERY: Duration = Duration::from_secs(1);

/// Run until `config` says the gateway is gone.
pub async fn run(experiments: Arc<Experiments>, store: Store, config: impl Fn() -> Option<(Arc<Config>, i64)>) {
    let mut rng = rand::rngs::StdRng::from_os_rng();
    loop {
        let Some((config, now_ms)) = config() else { return };
        if let Err(e) = tick(&experiments, &store, &config, now_ms, &mut rng).await {
            tracing::warn!(error = %e, "experiments could not be refreshed");
        }
        drop(config);
        tokio::time::sleep(EVERY).await;
    }
}

/// The admin API's experiments, read from the store (one that no longer checks, say after its
/// model left the configuration, is skipped with a warning).
pub async fn load_api(experiments: &Experiments, store: &Store, config: &Config) -> Result<(), StoreError> {
    let stored = store.list_experiments().await?;
    let api = stored
        .iter()
        .filter_map(|s| {
            checked(s, config).map_err(|e| tracing::warn!(experiment = %s.name, "experiment skipped: {e}")).ok()
        })
        .collect();
    experiments.set_api(api);
    Ok(())
}

/// One refresh.
pub async fn tick(
    experiments: &Experiments,
    store: &Store,
    config: &Config,
    now_ms: i64,
    rng: &mut impl rand::Rng,
) -> Result<(), StoreError> {
    load_api(experiments, store, config).await?;
    for live in experiments.all() {
        step(&live, store, now_ms, rng).await?;
    }
    Ok(())
}

/// A stored experiment checked against the configuration's models.
pub fn checked(stored: &StoredExperiment, config: &Config) -> Result<Arc<Experiment>, String> {
    let raw: RawExperiment = serde_json::from_str(&stored.spec).map_err(|e| e.to_string())?;
    let known = |m: &str| crate::config::model_known(&config.backends, &config.aliases, m);
    raw.check(&stored.name, &known).map(Arc::new).map_err(|e| e.to_string())
}

async fn step(live: &Live, store: &Store, now_ms: i64, rng: &mut impl rand::Rng) -> Result<(), StoreError> {
    let spec = &live.spec;
    let events = store.experiment_events(&spec.name).await?;
    let index = |name: &str| spec.variants.iter().position(|v| v.name == name);
    live.update(|state| {
        for e in &events {
            match (e.kind.as_str(), e.variant.as_deref()) {
                ("stopped", Some(SHADOW)) => state.shadow_stopped = e.detail.clone(),
                ("stopped", Some(v)) => {
                    if let Some(i) = index(v) {
                        state.stopped[i] = e.detail.clone();
                    }
                }
                ("winner", Some(v)) => state.winner = index(v),
                _ => {}
            }
        }
    });
    stop_failing(live, store, now_ms).await?;
    if spec.shadow.is_some() {
        store.trim_pairs(&spec.name, MAX_PAIRS).await?;
    }
    if spec.allocation == Allocation::Adaptive && live.state().winner.is_none() {
        adapt(live, store, now_ms, rng).await?;
    }
    Ok(())
}

/// Stop each variant (and the shadow) whose error rate over the last `ERROR_WINDOW` passed the
/// threshold.
async fn stop_failing(live: &Live, store: &Store, now_ms: i64) -> Result<(), StoreError> {
    let spec = &live.spec;
    let state = live.state();
    for u in store.usage_sums(&spec.name, now_ms - ERROR_WINDOW.as_millis() as i64).await? {
        let index = spec.variants.iter().position(|v| v.name == u.variant);
        let already = match index {
            Some(i) => state.stopped[i].is_some(),
            None if u.variant == SHADOW => state.shadow_stopped.is_some(),
            None => true,
        };
        let rate = u.errors.sum / u.requests.max(1.0);
        if already || u.requests < spec.stop_min_requests as f64 || rate <= spec.stop_error_rate {
            continue;
        }
        let why = format!("error rate {rate:.3} over {} requests passed {}", u.requests as u64, spec.stop_error_rate);
        tracing::warn!(experiment = %spec.name, variant = %u.variant, "{why}: stopped");
        store.add_experiment_event(&spec.name, Some(&u.variant), "stopped", &why, now_ms).await?;
        live.update(|s| match index {
            Some(i) => s.stopped[i] = Some(why.clone()),
            None => s.shadow_stopped = Some(why.clone()),
        });
    }
    Ok(())
}

/// Adaptive allocation: the metric's scores per variant → a winner, or new shares.
async fn adapt(live: &Live, store: &Store, now_ms: i64, rng: &mut impl rand::Rng) -> Result<(), StoreError> {
    let spec = &live.spec;
    let Some(metric) = spec.metrics.first() else { return Ok(()) };
    let settings = &spec.adaptive;
    let mut arms = vec![Arm::default(); spec.variants.len()];
    let [lo, hi] = settings.range;
    for (name, variant, sums) in store.score_sums(&spec.name).await? {
        let Some(i) = spec.variants.iter().position(|v| v.name == variant).filter(|_| &name == metric) else {
            continue;
        };
        let n = sums.count.max(0.0);
        arms[i] = Arm { n: n as u64, sum: ((sums.sum - n * lo) / (hi - lo)).clamp(0.0, n) };
    }
    let winner = settings.winner(&arms);
    let shares = settings.shares(&arms, rng);
    if let Some(w) = winner {
        let name = &spec.variants[w].name;
        let detail = format!(
            "{name} is better on `{metric}` at error rate {} ({} observations)",
            settings.alpha,
            arms.iter().map(|a| a.n).sum::<u64>()
        );
        store.add_experiment_event(&spec.name, Some(name), "winner", &detail, now_ms).await?;
        tracing::info!(experiment = %spec.name, "{detail}");
    }
    live.update(|state| {
        state.arms = arms;
        state.winner = winner.or(state.winner);
        state.shares = shares;
    });
    Ok(())
}
