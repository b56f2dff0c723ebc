//! What a backend says about itself, read on the health-probe cadence where it exposes it:
//! llama.cpp server's `/slots` and `/metrics`, vLLM's `/metrics` (waiting requests, KV-cache
//! usage), Ollama's `/api/ps` (which models are loaded). A signal older than a few probe intervals
//! counts as unknown, never as idle.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use crate::clock::mono_ms as now_ms;

/// A signal is trusted for this many milliseconds after it was read.
pub const FRESH_MS: u64 = 10_000;

#[derive(Default)]
pub struct BackendSignals {
    /// Requests the backend has queued (not yet in a slot), as it reported last.
    waiting: AtomicU64,
    /// Requests it is processing.
    processing: AtomicU64,
    /// KV-cache use, in millionths (vLLM's `gpu_cache_usage_perc`, llama.cpp's ratio).
    kv_usage_ppm: AtomicU64,
    /// When the figures above were read (`now_ms`); 0 = never.
    read_at: AtomicU64,
    /// Slots the server has (llama.cpp's `/slots`): how many requests it runs at once; 0 = unknown.
    slots: AtomicU64,
    /// Models the backend has loaded now (Ollama's `/api/ps`), and when that was read.
    loaded: Mutex<(u64, Vec<String>)>,
}

/// One reading of a backend's load.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct LoadReading {
    /// How many slots the server has, when it says (llama.cpp's `/slots`).
    pub slots: Option<usize>,
    pub waiting: u64,
    pub processing: u64,
    pub kv_usage: Option<f64>,
}

impl BackendSignals {
    pub fn record(&self, reading: LoadReading) {
        self.waiting.store(reading.waiting, Relaxed);
        self.processing.store(reading.processing, Relaxed);
        self.kv_usage_ppm.store(reading.kv_usage.map_or(u64::MAX, |u| (u.clamp(0.0, 1.0) * 1e6) as u64), Relaxed);
        self.read_at.store(now_ms().max(1), Relaxed);
        if let Some(slots) = reading.slots {
            self.record_slots(slots);
        }
    }

    fn fresh(&self, read_at: u64) -> bool {
        fresh_at(read_at, now_ms())
    }

    /// Requests waiting at the backend, if a fresh reading says.
    pub fn waiting(&self) -> Option<usize> {
        self.waiting_at(now_ms())
    }

    fn waiting_at(&self, now: u64) -> Option<usize> {
        fresh_at(self.read_at.load(Relaxed), now).then(|| self.waiting.load(Relaxed) as usize)
    }

    pub fn record_slots(&self, slots: usize) {
        self.slots.store(slots as u64, Relaxed);
    }

    /// The server's slot count, once read (kept: a server's slots do not change while it runs).
    pub fn slots(&self) -> Option<usize> {
        Some(self.slots.load(Relaxed) as usize).filter(|&n| n > 0)
    }

    pub fn processing(&self) -> Option<usize> {
        self.fresh(self.read_at.load(Relaxed)).then(|| self.processing.load(Relaxed) as usize)
    }

    pub fn kv_usage(&self) -> Option<f64> {
        let ppm = self.kv_usage_ppm.load(Relaxed);
        (self.fresh(self.read_at.load(Relaxed)) && ppm != u64::MAX).then(|| ppm as f64 / 1e6)
    }

    pub fn record_loaded(&self, models: Vec<String>) {
        *self.loaded.lock().unwrap_or_else(|p| p.into_inner()) = (now_ms().max(1), models);
    }

    /// Whether the backend has `model` loaded now: `None` when it never said or the reading is stale.
    pub fn has_loaded(&self, model: &str) -> Option<bool> {
        let loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        self.fresh(loaded.0).then(|| loaded.1.iter().any(|m| m == model))
    }
}

fn fresh_at(read_at: u64, now: u64) -> bool {
    read_at != 0 && now.saturating_sub(read_at) <= FRESH_MS
}

/// Parse Prometheus text for the figures a router uses (llama.cpp server and vLLM names).
pub fn parse_metrics(text: &str) -> Option<LoadReading> {
    let mut reading = LoadReading::default();
    let mut seen = false;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let mut parts = line.split_whitespace();
        let (Some(name), Some(value)) = (parts.next(), parts.next()) else { continue };
        let Ok(value) = value.parse::<f64>() else { continue };
        // vLLM labels its series (`vllm:num_requests_waiting{model_name="..."}`): sum over labels.
        let name = name.split('{').next().unwrap_or(name);
        match name {
            "llamacpp:requests_deferred" | "vllm:num_requests_waiting" => reading.waiting += value as u64,
            "llamacpp:requests_processing" | "vllm:num_requests_running" => reading.processing += value as u64,
            "llamacpp:kv_cache_usage_ratio" | "vllm:gpu_cache_usage_perc" | "vllm:kv_cache_usage_perc" => {
                reading.kv_usage = Some(value)
            }
            _ => continue,
        }
        seen = true;
    }
    seen.then_some(reading)
}

/// llama.cpp server's `/slots`: one object per slot, `is_processing` true while busy.
pub fn parse_slots(body: &[u8]) -> Option<LoadReading> {
    #[derive(serde::Deserialize)]
    struct Slot {
        #[serde(default)]
        is_processing: bool,
    }
    let slots: Vec<Slot> = serde_json::from_slice(body).ok()?;
    Some(LoadReading {
        slots: Some(slots.len()),
        processing: slots.iter().filter(|s| s.is_processing).count() as u64,
        ..LoadReading::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_llamacpp_and_vllm_metrics() {
        let llama = "# HELP x\nllamacpp:requests_processing 2\nllamacpp:requests_deferred 5\nllamacpp:kv_cache_usage_ratio 0.25\n";
        assert_eq!(
            parse_metrics(llama),
            Some(LoadReading { slots: None, waiting: 5, processing: 2, kv_usage: Some(0.25) })
        );
        let vllm = "vllm:num_requests_waiting{model_name=\"m\"} 3.0\nvllm:num_requests_running{model_name=\"m\"} 1.0\nvllm:gpu_cache_usage_perc{model_name=\"m\"} 0.5\n";
        assert_eq!(
            parse_metrics(vllm),
            Some(LoadReading { slots: None, waiting: 3, processing: 1, kv_usage: Some(0.5) })
        );
        assert_eq!(parse_metrics("other_metric 1\n"), None);
        let slots = br#"[{"id":0,"is_processing":true},{"id":1,"is_processing":false}]"#;
        assert_eq!(parse_slots(slots).map(|r| r.processing), Some(1));
    }

    /// Raw answers of a real llama.cpp `llama-server` (see the fixtures' README).
    #[test]
    fn reads_a_real_llama_server() {
        const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/llama-server/");
        let read = |name: &str| std::fs::read(format!("{DIR}{name}")).unwrap();
        let text = |name: &str| String::from_utf8(read(name)).unwrap();
        // This llama.cpp exports no KV-cache ratio: unknown, not zero.
        let idle = LoadReading { slots: None, waiting: 0, processing: 0, kv_usage: None };
        assert_eq!(parse_metrics(&text("metrics-idle.txt")), Some(idle));
        assert_eq!(parse_metrics(&text("metrics-busy.txt")), Some(LoadReading { processing: 1, ..idle }));
        let no_slots = |r: Option<LoadReading>| r.map(|r| LoadReading { slots: None, ..r });
        assert_eq!(no_slots(parse_slots(&read("slots-idle.json"))), Some(idle));
        assert_eq!(no_slots(parse_slots(&read("slots-idle-after-request.json"))), Some(idle));
        assert_eq!(no_slots(parse_slots(&read("slots-busy.json"))), Some(LoadReading { processing: 1, ..idle }));
        assert!(parse_slots(&read("slots-busy.json")).and_then(|r| r.slots).is_some_and(|n| n >= 1));
    }

    #[test]
    fn stale_or_missing_signals_are_unknown_not_idle() {
        let s = BackendSignals::default();
        assert_eq!(s.waiting(), None, "never read");
        s.record(LoadReading { slots: None, waiting: 4, processing: 1, kv_usage: None });
        assert_eq!((s.waiting(), s.processing(), s.kv_usage()), (Some(4), Some(1), None));
        assert_eq!(s.waiting_at(now_ms() + 2 * FRESH_MS), None, "a stale reading is unknown");
        s.record_loaded(vec!["m".into()]);
        assert_eq!((s.has_loaded("m"), s.has_loaded("x")), (Some(true), Some(false)));
    }
}
