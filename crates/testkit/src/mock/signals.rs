//! What a KV-cache mock tells about its load and cache, in llama.cpp server's shapes so a gateway
//! reads it as it reads llama.cpp: `GET /slots` and `GET /metrics` (Prometheus); plus the mock's
//! own `GET /mock/stats` (JSON [`super::KvStats`]) and `POST /mock/reset` (empty cache, zero counters).
//! None of them needs the API key, and none counts as a request.

use std::fmt::Write as _;

use bytes::Bytes;
use http::header::HeaderValue;
use http::{Method, StatusCode};
use serde_json::{json, Value};

use super::body::MockBody;
use super::handlers::State;
use super::kv::KvSim;
use super::MockControl;

const PROMETHEUS: HeaderValue = HeaderValue::from_static("text/plain; version=0.0.4");

/// Answers the signal endpoints; `None` for every other request. `/slots` and `/metrics` exist
/// only with a KV cache (elsewhere they are the API's unknown paths).
pub(crate) fn handle(
    state: &State,
    method: &Method,
    path: &str,
    query: Option<&str>,
) -> Option<http::Response<MockBody>> {
    let control = &state.control;
    match (method, path) {
        (&Method::GET, "/mock/stats") => {
            let mut stats = serde_json::to_value(control.kv_stats()).unwrap_or(Value::Null);
            stats["kv_cache"] = json!(control.kv.is_some());
            Some(state.json(StatusCode::OK, serde_json::to_vec(&stats).unwrap_or_default()))
        }
        (&Method::POST, "/mock/reset") => {
            control.clear_kv_cache();
            control.reset_counters();
            Some(state.json(StatusCode::OK, Bytes::from_static(br#"{"status":"ok"}"#)))
        }
        (&Method::GET, "/slots") => control.kv.as_deref().map(|kv| slots(state, kv, query)),
        (&Method::GET, "/metrics") => {
            let kv = control.kv.as_deref()?;
            Some(state.respond(StatusCode::OK, PROMETHEUS, MockBody::full(metrics(control, kv))))
        }
        _ => None,
    }
}

/// One object per slot, with the fields of llama.cpp's `/slots` a router reads (`id`, `id_task`,
/// `n_ctx`, `is_processing`, `next_token`), plus the mock's prompt counts of the slot's current
/// or last task (`n_prompt_tokens`, `n_prompt_tokens_cache`, `n_prompt_tokens_processed`).
/// `?fail_on_no_slot=1` answers 503 when every slot is busy, as llama.cpp does.
fn slots(state: &State, kv: &KvSim, query: Option<&str>) -> http::Response<MockBody> {
    let slots = kv.slots();
    let fail_on_no_slot = query.is_some_and(|q| q.split('&').any(|p| p == "fail_on_no_slot=1"));
    if fail_on_no_slot && slots.iter().all(|s| s.busy) {
        let body = json!({"error": {"code": 503, "message": "no slot available", "type": "unavailable_error"}});
        return state.json(StatusCode::SERVICE_UNAVAILABLE, serde_json::to_vec(&body).unwrap_or_default());
    }
    let slots: Vec<Value> = slots
        .iter()
        .enumerate()
        .map(|(id, s)| {
            let decoded = s.decoded();
            json!({
                "id": id,
                "id_task": s.id_task,
                "n_ctx": kv.cfg.capacity_tokens,
                "speculative": false,
                "is_processing": s.busy,
                "params": {"n_predict": -1, "stream": true},
                "next_token": {
                    "has_next_token": s.busy,
                    "has_new_line": false,
                    "n_remain": if s.busy { s.n_predict.saturating_sub(decoded) as i64 } else { -1 },
                    "n_decoded": decoded,
                },
                "n_prompt_tokens": s.prompt_tokens,
                "n_prompt_tokens_cache": s.cached_tokens,
                "n_prompt_tokens_processed": s.prompt_tokens - s.cached_tokens,
            })
        })
        .collect();
    state.json(StatusCode::OK, serde_json::to_vec(&slots).unwrap_or_default())
}

/// llama.cpp's metric names: counters of processed prompt and generated tokens and their
/// (simulated) time, gauges of KV-cache use and of requests processing and deferred (waiting for
/// a slot).
fn metrics(control: &MockControl, kv: &KvSim) -> String {
    let stats = control.kv_stats();
    let (prompt_seconds, decode_seconds) = kv.simulated_seconds();
    let usage = if stats.capacity_tokens == 0 { 0.0 } else { stats.cache_tokens as f64 / stats.capacity_tokens as f64 };
    let metrics: [(&str, &str, &str, f64); 8] = [
        ("prompt_tokens_total", "counter", "Number of prompt tokens processed.", stats.prefill_tokens as f64),
        ("prompt_seconds_total", "counter", "Prompt process time", prompt_seconds),
        ("tokens_predicted_total", "counter", "Number of generation tokens processed.", stats.completion_tokens as f64),
        ("tokens_predicted_seconds_total", "counter", "Predict process time", decode_seconds),
        ("kv_cache_usage_ratio", "gauge", "KV-cache usage. 1 means 100 percent usage.", usage),
        ("kv_cache_tokens", "gauge", "KV-cache tokens.", stats.cache_tokens as f64),
        ("requests_processing", "gauge", "Number of requests processing.", stats.processing as f64),
        ("requests_deferred", "gauge", "Number of requests deferred.", stats.deferred as f64),
    ];
    let mut out = String::with_capacity(1024);
    for (name, kind, help, value) in metrics {
        let _ = write!(out, "# HELP llamacpp:{name} {help}\n# TYPE llamacpp:{name} {kind}\nllamacpp:{name} {value}\n");
    }
    out
}
