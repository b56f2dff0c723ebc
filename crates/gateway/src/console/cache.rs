//! `GET /ui/api/cache`: the response cache as the console's cache page shows it — the exact
//! layer's hits, misses and memory; the semantic layer's hits, misses, candidates refused by each
//! check, what its hits saved, its threshold, and, when `cache.semantic.calibration` names the
//! file `switchyard cache calibrate --write` left, the false-hit and paraphrase hit rates
//! measured at the configured threshold.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use http::{Response, StatusCode};
use serde_json::{json, Value};
use switchyard_semcache::Check;

use crate::app::App;
use crate::config::SemanticConfig;
use crate::http::{json_value, GatewayBody};

pub fn cache(app: &Arc<App>) -> Response<GatewayBody> {
    let exact = app.cache.as_ref().map(|c| c.stats());
    let semantic = match (&app.semantic, app.config.cache.semantic.as_deref()) {
        (Some(cache), Some(config)) => {
            let c = &cache.counters;
            let rejected: serde_json::Map<String, Value> = Check::ALL
                .iter()
                .zip(&c.rejected)
                .map(|(check, n)| (check.name().to_owned(), json!(n.load(Relaxed))))
                .collect();
            json!({
                "embedding_model": config.embedding_model,
                "threshold": config.threshold,
                "store": cache.store.kind(),
                "entries": cache.store.len(),
                "hits": c.hits.load(Relaxed),
                "misses": c.misses.load(Relaxed),
                "stores": c.stores.load(Relaxed),
                "errors": c.errors.load(Relaxed),
                "rejected": rejected,
                "saved_tokens": c.saved_tokens.load(Relaxed),
                "saved_usd": c.saved_micro_usd.load(Relaxed) as f64 / 1e6,
                "calibration": calibration(config),
            })
        }
        _ => Value::Null,
    };
    json_value(StatusCode::OK, &json!({"exact": exact, "semantic": semantic}))
}

/// The calibration file's figures, with the row of the threshold configured now (a calibration
/// made at another threshold still has a row for it when that threshold was among those swept).
fn calibration(config: &SemanticConfig) -> Value {
    let Some(path) = &config.calibration else { return Value::Null };
    let Some(report) = std::fs::read(path).ok().and_then(|b| serde_json::from_slice::<Value>(&b).ok()) else {
        return json!({"error": format!("cannot read {}", path.display())});
    };
    let at_threshold = report["rows"]
        .as_array()
        .and_then(|rows| {
            rows.iter()
                .find(|r| r["threshold"].as_f64().is_some_and(|t| (t - f64::from(config.threshold)).abs() < 1e-6))
        })
        .cloned()
        .unwrap_or(Value::Null);
    json!({
        "pairs": report["pairs"],
        "target": report["target"],
        "calibrated_ms": report["calibrated_ms"],
        "at_threshold": at_threshold,
        "recommended": report["recommended"],
    })
}
