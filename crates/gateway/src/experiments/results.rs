//! An experiment's results: per variant (the shadow too), per metric, the count, the mean and its
//! 95% interval, and the difference to the control with its interval — from the usage records'
//! sums and the scores' (`GET /admin/experiments/{name}`, the console, `switchyard experiments`).

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};
use switchyard_experiments::spec::SHADOW;
use switchyard_experiments::{Estimate, Summary};

use super::Live;
use crate::store::{Store, StoreError, Sums, UsageSums};

fn summary(s: &Sums) -> Summary {
    Summary { count: s.count.max(0.0) as u64, sum: s.sum, sum_sq: s.sum_sq }
}

/// Per variant name, per metric name, the sums.
type Table = BTreeMap<String, BTreeMap<String, Summary>>;

fn usage_metrics(u: &UsageSums) -> [(&'static str, &Sums); 7] {
    [
        ("latency", &u.latency),
        ("ttft", &u.ttft),
        ("cost", &u.cost),
        ("errors", &u.errors),
        ("tokens", &u.tokens),
        ("prompt_tokens", &u.prompt_tokens),
        ("completion_tokens", &u.completion_tokens),
    ]
}

fn estimate_json(e: &Estimate) -> Value {
    json!({"count": e.count, "mean": e.mean, "ci95": e.ci95})
}

/// The results, as the admin API answers them.
pub async fn results(store: &Store, live: &Live) -> Result<Value, StoreError> {
    let spec = &live.spec;
    let state = live.state();
    let mut table = Table::new();
    let mut requests = BTreeMap::new();
    for u in store.usage_sums(&spec.name, i64::MIN).await? {
        requests.insert(u.variant.clone(), u.requests);
        let row = table.entry(u.variant.clone()).or_default();
        for (name, sums) in usage_metrics(&u) {
            row.insert(name.to_owned(), summary(sums));
        }
    }
    for (name, variant, sums) in store.score_sums(&spec.name).await? {
        table.entry(variant).or_default().insert(name, summary(&sums));
    }
    let control = spec.variants[spec.control].name.clone();
    let mut variants = Map::new();
    let shadow = spec.shadow.as_ref().map(|s| (SHADOW.to_owned(), s.model.clone(), None));
    let listed = spec.variants.iter().enumerate().map(|(i, v)| (v.name.clone(), v.model.clone(), Some(i)));
    for (name, model, index) in listed.chain(shadow) {
        let empty = BTreeMap::new();
        let row = table.get(&name).unwrap_or(&empty);
        let base = table.get(&control).filter(|_| name != control);
        let mut metrics = Map::new();
        for (metric, s) in row {
            let mut out = estimate_json(&s.estimate());
            if let Some(difference) = base.and_then(|b| b.get(metric)).and_then(|c| s.minus(c)) {
                out["difference"] = json!({"mean": difference.mean, "ci95": difference.ci95});
            }
            metrics.insert(metric.clone(), out);
        }
        let (share, stopped) = match index {
            Some(i) => (json!(state.shares.get(i)), json!(state.stopped.get(i).cloned().flatten())),
            None => (Value::Null, json!(state.shadow_stopped)),
        };
        variants.insert(
            name.clone(),
            json!({
                "model": model,
                "share": share,
                "requests": requests.get(&name).copied().unwrap_or(0.0) as u64,
                "stopped": stopped,
                "metrics": metrics,
            }),
        );
    }
    let events = store.experiment_events(&spec.name).await?;
    Ok(json!({
        "name": spec.name,
        "model": spec.model,
        "source": live.source,
        "unit": spec.unit,
        "allocation": spec.allocation,
        "control": control,
        "metrics": spec.metrics,
        "winner": state.winner.map(|w| spec.variants[w].name.clone()),
        "variants": variants,
        "adaptive": adaptive_json(live, &state),
        "events": events,
        "spec": spec.raw,
    }))
}

/// The adaptive test's view: each arm's observations and confidence-sequence bounds.
fn adaptive_json(live: &Live, state: &super::State) -> Value {
    let spec = &live.spec;
    if spec.allocation != switchyard_experiments::Allocation::Adaptive {
        return Value::Null;
    }
    let settings = &spec.adaptive;
    let k = state.arms.len();
    let arms: Vec<Value> = state
        .arms
        .iter()
        .zip(&spec.variants)
        .map(|(arm, v)| {
            let radius = settings.radius(arm, k);
            let (lower, upper) = (arm.mean() - radius, arm.mean() + radius);
            json!({"variant": v.name, "observations": arm.n, "mean": arm.mean(),
                   "lower": lower.is_finite().then_some(lower), "upper": upper.is_finite().then_some(upper)})
        })
        .collect();
    json!({
        "metric": spec.metrics.first(),
        "method": "thompson sampling; stopped by anytime-valid confidence sequences",
        "alpha": settings.alpha,
        "floor": settings.floor,
        "range": settings.range,
        "arms": arms,
    })
}
