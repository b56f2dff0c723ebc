//! Active health checks and model discovery, one task per backend. A probe is a GET of the
//! backend's model list (`/v1/models` or Ollama's `/api/tags`), so every successful probe also
//! refreshes discovery. Up: probe every `interval`. Down: re-probe on a short doubling backoff
//! (`down_backoff_min`..`down_backoff_max`) so a restarted backend is back within a few hundred ms.
//! A passive failure wakes the task at once.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use switchyard_protocol::{ollama::TagList, openai::ModelList};

use super::backend::Backend;
use super::Router;
use crate::config::{BackendKind, HealthConfig};
use crate::upstream::UpstreamClient;

/// Largest model-list body we read; a backend listing more is misbehaving.
const MAX_DISCOVERY_BYTES: usize = 4 * 1024 * 1024;
/// Probes in a row after which a backend that never said anything about its load (no
/// `/metrics`, `/slots` or `/api/ps`: a hosted API, a llama.cpp without them) is not asked again
/// until it restarts or its models change: two requests fewer on every probe.
const SILENT_PROBES: u32 = 3;

/// Probe once: `Ok(models)` when the backend answered 2xx (models empty if the body did not parse).
pub async fn probe(client: &UpstreamClient, backend: &Backend, timeout: Duration) -> Result<Vec<String>, String> {
    let mut req = http::Request::get(backend.discovery_uri.clone());
    for (name, value) in &backend.auth_headers {
        req = req.header(name, value.clone());
    }
    let mut req = req.body(Full::new(Bytes::new())).map_err(|e| e.to_string())?;
    backend.sign(&mut req, b"")?;
    let fetch = async {
        let resp = client.request(req).await.map_err(|e| format!("probe failed: {e}"))?;
        if backend.cfg.kind == BackendKind::Bedrock && resp.status().is_client_error() {
            // Bedrock's model list is another action (and endpoint) than Converse: credentials
            // allowed to converse but not to list still mean the service is there.
            return Ok(Vec::new());
        }
        if !resp.status().is_success() {
            return Err(format!("probe answered {}", resp.status()));
        }
        let body = Limited::new(resp.into_body(), MAX_DISCOVERY_BYTES)
            .collect()
            .await
            .map_err(|e| format!("probe body: {e}"))?
            .to_bytes();
        Ok(parse_models(backend.cfg.kind, &body))
    };
    tokio::time::timeout(timeout, fetch).await.map_err(|_| "probe timed out".to_owned())?
}

fn parse_models(kind: BackendKind, body: &[u8]) -> Vec<String> {
    match kind {
        // Anthropic's model list has the same `data[].id` as OpenAI's.
        BackendKind::OpenAi | BackendKind::Anthropic | BackendKind::Azure => serde_json::from_slice::<ModelList>(body)
            .map(|l| l.data.into_iter().map(|m| m.id).collect())
            .unwrap_or_default(),
        BackendKind::Ollama => serde_json::from_slice::<TagList>(body)
            .map(|l| l.models.into_iter().map(|m| m.name).collect())
            .unwrap_or_default(),
        // Gemini names its models `models/gemini-2.5-flash`; requests name them without the prefix.
        BackendKind::Gemini => serde_json::from_slice::<TagList>(body)
            .map(|l| l.models.into_iter().map(|m| m.name.trim_start_matches("models/").to_owned()).collect())
            .unwrap_or_default(),
        // ListFoundationModels; requests use the configured ids (which may be inference profiles).
        BackendKind::Bedrock => serde_json::from_slice::<FoundationModels>(body)
            .map(|l| l.model_summaries.into_iter().map(|m| m.model_id).collect())
            .unwrap_or_default(),
    }
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct FoundationModels {
    #[serde(default)]
    model_summaries: Vec<FoundationModel>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct FoundationModel {
    model_id: String,
}

/// Apply a probe result to the backend; returns true when its model list changed.
pub fn apply(backend: &Backend, result: Result<Vec<String>, String>) -> bool {
    match result {
        Ok(models) => {
            if backend.health.set_up(true) {
                tracing::info!(backend = backend.name(), models = models.len(), "backend up");
            }
            !models.is_empty() && backend.set_models(models)
        }
        Err(why) => {
            if backend.health.set_up(false) {
                tracing::warn!(backend = backend.name(), reason = why, "backend down");
            }
            false
        }
    }
}

/// Probe every backend once, concurrently, so the gateway starts with a known model table.
pub async fn probe_all(router: &Router, client: &UpstreamClient, cfg: &HealthConfig) {
    let mut probes = tokio::task::JoinSet::new();
    for b in &router.backends {
        let (b, client, timeout) = (b.clone(), client.clone(), cfg.timeout);
        probes.spawn(async move {
            let changed = apply(&b, probe(&client, &b, timeout).await);
            b.stats.probes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            // Its load signals (slots included) at once: a gateway's first seconds route as the
            // rest of its life does.
            if b.health.is_up() {
                read_signals(&client, &b, timeout).await;
                super::discover::discover(&client, &b, timeout).await;
            }
            changed
        });
    }
    let mut changed = false;
    while let Some(r) = probes.join_next().await {
        changed |= r.unwrap_or(false);
    }
    if changed {
        router.rebuild_table();
    }
}

/// The per-backend loop. Runs until aborted.
pub async fn run(router: Arc<Router>, backend: Arc<Backend>, client: UpstreamClient, cfg: HealthConfig) {
    let mut backoff = cfg.down_backoff_min;
    // Whether the last probe was answered: a backend that stops answering probes, or answers
    // again, has likely restarted and lost its cache. One marked down by a single failed request
    // that answers the next probe (woken at once) keeps it: a closed connection is not a restart.
    let mut answered = backend.health.is_up();
    // Probes in a row whose signal reads found nothing.
    let mut silent = 0;
    loop {
        let wait = if backend.health.is_up() {
            backoff = cfg.down_backoff_min;
            cfg.interval
        } else {
            let w = backoff;
            backoff = (backoff * 2).min(cfg.down_backoff_max);
            w
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = backend.wake.notified() => {}
        }
        let was_up = backend.health.is_up();
        let probed = probe(&client, &backend, cfg.timeout).await;
        let answers = probed.is_ok();
        let changed = apply(&backend, probed);
        backend.stats.probes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if changed || (answers && !answered) {
            // Another model, or a restart: it may serve other endpoints now, and say other things.
            super::discover::discover(&client, &backend, cfg.timeout).await;
            silent = 0;
        }
        if changed {
            tracing::info!(backend = backend.name(), "model list changed");
            router.rebuild_table();
        }
        if answers != answered {
            router.forget_cache(&backend);
        }
        answered = answers;
        if was_up && !backend.health.is_up() {
            backend.scatter_waiters();
        }
        if backend.health.is_up() && silent < SILENT_PROBES {
            silent = if read_signals(&client, &backend, cfg.timeout).await { 0 } else { silent + 1 };
        }
        if let Some(pool) = &backend.pool {
            pool.evict_idle();
        }
    }
}

/// Read what the backend says about its own load and loaded models, where it says anything:
/// Prometheus `/metrics` (llama.cpp server, vLLM), else llama.cpp's `/slots`; Ollama's `/api/ps`.
/// True when it said something.
async fn read_signals(client: &UpstreamClient, backend: &Backend, timeout: Duration) -> bool {
    match backend.cfg.kind {
        BackendKind::OpenAi => {
            if let Some(reading) = fetch(client, backend, "/metrics", timeout)
                .await
                .and_then(|b| std::str::from_utf8(&b).ok().and_then(super::signals::parse_metrics))
            {
                backend.signals.record(reading);
                if backend.signals.slots().is_none() && backend.cfg.max_concurrency.is_none() {
                    // llama.cpp's metrics do not say how many slots it has; its /slots does.
                    if let Some(slots) = fetch(client, backend, "/slots", timeout)
                        .await
                        .and_then(|b| super::signals::parse_slots(&b))
                        .and_then(|r| r.slots)
                    {
                        backend.signals.record_slots(slots);
                    }
                }
                true
            } else if let Some(reading) =
                fetch(client, backend, "/slots", timeout).await.and_then(|b| super::signals::parse_slots(&b))
            {
                backend.signals.record(reading);
                true
            } else {
                false
            }
        }
        BackendKind::Ollama => {
            let Some(list) = fetch(client, backend, "/api/ps", timeout)
                .await
                .and_then(|b| serde_json::from_slice::<TagList>(&b).ok())
            else {
                return false;
            };
            backend.signals.record_loaded(list.models.into_iter().map(|m| m.name).collect());
            true
        }
        BackendKind::Anthropic | BackendKind::Azure | BackendKind::Gemini | BackendKind::Bedrock => false,
    }
}

/// GET `path` on the backend; the body of a 2xx answer.
pub(super) async fn fetch(client: &UpstreamClient, backend: &Backend, path: &str, timeout: Duration) -> Option<Bytes> {
    let uri: http::Uri = format!("{}{path}", backend.cfg.url).parse().ok()?;
    let mut req = http::Request::get(uri);
    for (name, value) in &backend.auth_headers {
        req = req.header(name, value.clone());
    }
    let req = req.body(Full::new(Bytes::new())).ok()?;
    let fetch = async {
        let resp = client.request(req).await.ok()?;
        if !resp.status().is_success() {
            return None;
        }
        Some(Limited::new(resp.into_body(), MAX_DISCOVERY_BYTES).collect().await.ok()?.to_bytes())
    };
    tokio::time::timeout(timeout, fetch).await.ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::route::{prefix, RouteHints};
    use std::collections::HashMap;
    use std::sync::atomic::Ordering::Relaxed;

    /// Wait (polling the backend's probe counter) for the probe after the `seen`th.
    async fn next_probe(backend: &Backend, seen: u64) -> u64 {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while backend.stats.probes.load(Relaxed) <= seen {
            assert!(std::time::Instant::now() < deadline, "no probe within 10 s");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        backend.stats.probes.load(Relaxed)
    }

    #[tokio::test]
    async fn one_failed_request_keeps_the_cache_and_a_backend_that_stops_answering_probes_loses_it() {
        let listen = "127.0.0.1:0".parse().unwrap();
        let cfg = switchyard_testkit::MockConfig { models: vec!["m".into()], ..Default::default() };
        let mock = switchyard_testkit::MockServer::start(listen, cfg).await.unwrap();
        let yaml = format!(
            "routing: {{strategy: cache-aware}}\nhealth: {{interval: 1h}}\nbackends:\n - {{name: a, url: '{}', models: [m]}}",
            mock.url()
        );
        let config = Config::from_yaml(&yaml, &HashMap::<String, String>::new()).unwrap();
        let router = Arc::new(Router::new(&config).unwrap());
        let backend = router.backends[0].clone();
        backend.health.set_up(true);
        let prompt = vec![b'x'; 640];
        let hints = RouteHints { chain: prefix::chain(&[&prompt]), ..RouteHints::default() };
        drop(router.select_with("m", &hints, &[]).unwrap());
        let held = || router.prefix.as_ref().map_or(0, |p| p.held(0));
        assert_eq!(held(), 10);
        let client = crate::upstream::build(Duration::from_secs(1)).unwrap();
        let prober = tokio::spawn(run(router.clone(), backend.clone(), client, config.health.clone()));
        // One turn of this single-threaded runtime: the prober starts (the backend up, as after
        // the start-up probe) and waits for its interval or a wake-up.
        tokio::task::yield_now().await;
        // A request failed (a connection closed under it): marked down, the probe woken at once
        // finds it answering. Not a restart: what it cached stays.
        backend.mark_failed("test");
        let seen = next_probe(&backend, 0).await;
        assert!(backend.health.is_up());
        assert_eq!(held(), 10, "one failed request cost the backend its cache");
        // It stops answering probes (it died, and will come back empty).
        mock.kill();
        backend.mark_failed("test");
        next_probe(&backend, seen).await;
        assert!(!backend.health.is_up());
        assert_eq!(held(), 0, "a backend that stopped answering probes kept its cache");
        prober.abort();
    }

    #[test]
    fn parses_both_list_shapes() {
        assert_eq!(
            parse_models(BackendKind::OpenAi, br#"{"object":"list","data":[{"id":"a"},{"id":"b"}]}"#),
            vec!["a", "b"]
        );
        assert_eq!(parse_models(BackendKind::Ollama, br#"{"models":[{"name":"llama3.2:1b"}]}"#), vec!["llama3.2:1b"]);
        let anthropic = br#"{"data":[{"type":"model","id":"claude-x","display_name":"X","created_at":"2025-01-01T00:00:00Z"}],"has_more":false,"first_id":"claude-x","last_id":"claude-x"}"#;
        assert_eq!(parse_models(BackendKind::Anthropic, anthropic), vec!["claude-x"]);
        assert!(parse_models(BackendKind::OpenAi, b"not json").is_empty());
    }
}
