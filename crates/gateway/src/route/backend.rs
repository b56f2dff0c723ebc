//! One upstream backend: its config, precomputed request targets and headers, in-flight count,
//! discovered models, and health (up/down plus a consecutive-5xx circuit breaker).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use arc_swap::ArcSwap;
use http::{HeaderName, HeaderValue, Uri};
use tokio::sync::Notify;

use super::admission::Admission;
use super::keys::BackendKeys;
use crate::config::{BackendConfig, BackendKind, HealthConfig};
use crate::translate::Wire;
use crate::upstream::pool::{H1Pool, PoolSettings};
use crate::upstream::sigv4::SigV4;

/// The Messages API version sent to Anthropic backends.
const ANTHROPIC_VERSION: &str = "2023-06-01";

#[derive(Default)]
pub struct BackendStats {
    pub attempts: AtomicU64,
    pub failures: AtomicU64,
    /// Prompts routed here by cache-aware routing, and those of them it already held a prefix of.
    pub prefix_routed: AtomicU64,
    pub prefix_hits: AtomicU64,
    /// Health probes made (the start-up probe and every round since).
    pub probes: AtomicU64,
}

pub struct Backend {
    pub id: usize,
    pub cfg: BackendConfig,
    pub name_header: HeaderValue,
    /// Credentials and version headers sent with every request (`Authorization: Bearer`, or
    /// Anthropic's `x-api-key` and `anthropic-version`).
    pub auth_headers: Vec<(HeaderName, HeaderValue)>,
    /// Upstream URI of every wire this backend speaks, in `Wire::ALL` order, built once.
    targets: Vec<Option<Uri>>,
    pub discovery_uri: Uri,
    pub health: HealthState,
    in_flight: AtomicUsize,
    pub stats: BackendStats,
    models: ArcSwap<Vec<String>>,
    /// What it says it serves (`route/discover.rs`), where it says; configured `capabilities` win.
    discovered: arc_swap::ArcSwapOption<Vec<&'static str>>,
    /// Wakes the prober early, e.g. after a passive failure.
    pub wake: Notify,
    /// Load and cache state the backend reports about itself.
    pub signals: super::signals::BackendSignals,
    /// Told when a slot frees, so a request waiting for one gets it.
    admission: Arc<Admission>,
    /// Bedrock with access keys: every request is SigV4-signed just before it goes.
    signer: Option<SigV4>,
    /// Its own keep-alive connections when it is plain http (https goes through hyper-util's
    /// client: TLS, HTTP/2).
    pub pool: Option<Arc<H1Pool>>,
    /// Its key pool (`api_keys`): each request goes with one of them.
    pub keys: Option<Arc<BackendKeys>>,
}

/// The headers that carry a backend's credentials in its API (`Authorization: Bearer`, or
/// Anthropic's `x-api-key` with its `anthropic-version`, Azure's `api-key`, Gemini's
/// `x-goog-api-key`), with `key` or none.
pub fn credentials(kind: BackendKind, key: Option<&str>, name: &str) -> Result<Vec<(HeaderName, HeaderValue)>, String> {
    let secret = |text: String| {
        let mut v = HeaderValue::from_str(&text)
            .map_err(|_| format!("backend {name}: api_key has characters not allowed in a header"))?;
        v.set_sensitive(true);
        Ok::<_, String>(v)
    };
    let mut headers = Vec::new();
    match (kind, key) {
        (BackendKind::Anthropic, key) => {
            if let Some(key) = key {
                headers.push((HeaderName::from_static("x-api-key"), secret(key.to_owned())?));
            }
            headers.push((HeaderName::from_static("anthropic-version"), HeaderValue::from_static(ANTHROPIC_VERSION)));
        }
        (BackendKind::Azure, Some(key)) => headers.push((HeaderName::from_static("api-key"), secret(key.to_owned())?)),
        (BackendKind::Gemini, Some(key)) => {
            headers.push((HeaderName::from_static("x-goog-api-key"), secret(key.to_owned())?))
        }
        (_, Some(key)) => headers.push((http::header::AUTHORIZATION, secret(format!("Bearer {key}"))?)),
        (_, None) => {}
    }
    Ok(headers)
}

impl Backend {
    pub fn new(
        id: usize,
        cfg: BackendConfig,
        health: &HealthConfig,
        admission: Arc<Admission>,
        pool: PoolSettings,
    ) -> Result<Backend, String> {
        let uri = |path: &str| -> Result<Uri, String> {
            format!("{}{path}", cfg.url).parse().map_err(|_| format!("backend {}: bad URL {}", cfg.name, cfg.url))
        };
        // Azure's v1 API is OpenAI's under `/openai`; its deployment-style URLs name the model
        // (`deployment_target`), so they are made per request.
        let prefix = if cfg.kind == BackendKind::Azure { "/openai" } else { "" };
        let targets = Wire::ALL
            .iter()
            .map(|w| if w.spoken_by(cfg.kind) { uri(&format!("{prefix}{}", w.path())).map(Some) } else { Ok(None) })
            .collect::<Result<Vec<_>, _>>()?;
        let discovery_uri = match (&cfg.api_version, cfg.kind) {
            (Some(version), BackendKind::Azure) => uri(&format!("/openai/models?api-version={version}"))?,
            // The model list is on Bedrock's control-plane endpoint, beside the runtime one.
            (_, BackendKind::Bedrock) => {
                format!("{}{}", cfg.url.replacen("bedrock-runtime", "bedrock", 1), cfg.kind.discovery_path())
                    .parse()
                    .map_err(|_| format!("backend {}: bad URL {}", cfg.name, cfg.url))?
            }
            _ => uri(cfg.kind.discovery_path())?,
        };
        let name_header =
            HeaderValue::from_str(&cfg.name).map_err(|_| format!("backend name {} is not a header value", cfg.name))?;
        // A pool's first key answers the prober (a probe is no request of a client's).
        let probe_key = cfg.api_key.as_deref().or(cfg.api_keys.first().map(|k| k.key.as_str()));
        let auth_headers = credentials(cfg.kind, probe_key, &cfg.name)?;
        let keys = match cfg.api_keys.is_empty() {
            true => None,
            false => Some(Arc::new(BackendKeys::new(cfg.kind, &cfg.api_keys, &cfg.name)?)),
        };
        let models = cfg.models.clone().unwrap_or_default();
        let signer = cfg.aws.as_ref().map(|aws| {
            SigV4::new(&aws.access_key_id, &aws.secret_access_key, aws.session_token.as_deref(), &aws.region)
        });
        let pool = cfg.url.parse::<Uri>().ok().and_then(|url| H1Pool::for_url(&url, pool));
        Ok(Backend {
            id,
            name_header,
            auth_headers,
            targets,
            discovery_uri,
            health: HealthState::new(health),
            in_flight: AtomicUsize::new(0),
            stats: BackendStats::default(),
            models: ArcSwap::from_pointee(models),
            discovered: arc_swap::ArcSwapOption::empty(),
            wake: Notify::new(),
            signals: Default::default(),
            admission,
            signer,
            pool,
            keys,
            cfg,
        })
    }

    /// Sign `req` (whose body is `body`) when this backend takes SigV4; otherwise nothing.
    pub fn sign<B>(&self, req: &mut http::Request<B>, body: &[u8]) -> Result<(), String> {
        match &self.signer {
            Some(signer) => signer.sign(req, body, std::time::SystemTime::now()),
            None => Ok(()),
        }
    }

    pub fn name(&self) -> &str {
        &self.cfg.name
    }

    /// Where requests on `wire` go; `None` if this backend does not speak it.
    pub fn target(&self, wire: Wire) -> Option<&Uri> {
        let i = Wire::ALL.iter().position(|w| *w == wire)?;
        self.targets.get(i)?.as_ref()
    }

    /// Where a request for `model` on `wire` goes: `target`; for Bedrock, the model's
    /// `/model/{modelId}/converse` (or `/converse-stream`), the id percent-encoded as the AWS SDKs
    /// do (`anthropic.claude-3-5-sonnet-20240620-v1%3A0`, an ARN's `/` too); for Gemini, the model's method
    /// (`/v1beta/models/{model}:generateContent`, or `:streamGenerateContent?alt=sse`); for an
    /// Azure backend with an `api_version`, its deployment's URL
    /// (`/openai/deployments/{model}/chat/completions?api-version=`).
    pub fn target_for(&self, wire: Wire, model: &str, stream: bool) -> Option<Uri> {
        let target = self.target(wire)?;
        if wire == Wire::Bedrock {
            let operation = if stream { "converse-stream" } else { "converse" };
            let model = percent_encoding::utf8_percent_encode(model, PATH_SEGMENT);
            return format!("{target}/{model}/{operation}").parse().ok();
        }
        if wire == Wire::Gemini {
            let method = if stream { "streamGenerateContent?alt=sse" } else { "generateContent" };
            return format!("{target}/{model}:{method}").parse().ok();
        }
        if wire == Wire::GeminiCountTokens {
            return format!("{target}/{model}:countTokens").parse().ok();
        }
        let Some(version) = self.cfg.api_version.as_deref().filter(|_| self.cfg.kind == BackendKind::Azure) else {
            return Some(target.clone());
        };
        let operation = wire.path().strip_prefix("/v1")?;
        // A deployment name is one path segment; anything else would change the path.
        if model.is_empty() || !model.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) {
            return None;
        }
        format!("{}/openai/deployments/{model}{operation}?api-version={version}", self.cfg.url).parse().ok()
    }

    /// Whether this backend takes requests of `endpoint`: its type speaks it (or a translation
    /// of it) and its `capabilities` — configured, else as it says itself — name the endpoint's.
    pub fn serves(&self, endpoint: crate::endpoint::Endpoint) -> bool {
        let capability = endpoint.spec().capability;
        let listed = match &self.cfg.capabilities {
            Some(configured) => configured.iter().any(|c| c == capability),
            None => self.discovered.load().as_ref().is_none_or(|d| d.contains(&capability)),
        };
        listed && !matches!(crate::translate::plan(endpoint, self.cfg.kind), crate::translate::Plan::Unsupported(_))
    }

    /// What the backend said it serves (None: it did not say).
    pub fn set_discovered(&self, served: Option<Vec<&'static str>>) {
        if served.is_some() {
            tracing::debug!(backend = self.name(), ?served, "backend says what it serves");
        }
        self.discovered.store(served.map(Arc::new));
    }

    /// What it serves, for the catalogue: its configured capabilities, or what its type speaks.
    pub fn capabilities(&self) -> Vec<&'static str> {
        let mut served: Vec<&'static str> = crate::endpoint::Endpoint::ALL
            .iter()
            .filter(|e| e.names_a_model() && self.serves(**e))
            .map(|e| e.spec().capability)
            .collect();
        served.sort_unstable();
        served.dedup();
        served
    }

    pub fn kind(&self) -> BackendKind {
        self.cfg.kind
    }

    /// Requests waiting for a slot of this backend in particular (its admission lane for `model`).
    pub fn waiting_here(&self, model: &str) -> usize {
        self.admission.lane_len(model, self.id)
    }

    /// This backend went down by a probe: requests waiting for it choose again.
    pub fn scatter_waiters(&self) {
        self.admission.scatter(self.id);
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Relaxed)
    }

    /// Requests this backend takes at once: `max_concurrency`, else the slots it reports.
    pub fn capacity(&self) -> Option<usize> {
        self.cfg.max_concurrency.or_else(|| self.signals.slots())
    }

    /// Whether one more request fits under the cap (always, without one).
    pub fn has_room(&self) -> bool {
        self.has_room_leaving(0)
    }

    /// Whether one more request fits under the cap with `spare` slots still free after it
    /// (always, without a cap). With spare slots asked for (a batch's lines), the requests the
    /// backend says it is processing count too when they are more than this instance's own: in a
    /// fleet, the other instances' requests hold slots this one does not see.
    pub fn has_room_leaving(&self, spare: usize) -> bool {
        self.capacity().is_none_or(|cap| self.busy(spare) + spare < cap)
    }

    /// Room for one more with a slot still left after it: what low-priority work (a batch's
    /// lines) may take, so it never takes a capped backend's last slot.
    pub fn has_spare(&self) -> bool {
        self.has_room_leaving(1)
    }

    /// Slots taken, as the gateway counts them (and, for low-priority work, as the backend does).
    fn busy(&self, spare: usize) -> usize {
        self.in_flight().max(self.reported_busy(spare))
    }

    /// For low-priority work (`spare` > 0), the requests the backend says it is processing (other
    /// instances' among them); 0 for the rest, which count only their own.
    fn reported_busy(&self, spare: usize) -> usize {
        match spare {
            0 => 0,
            _ => self.signals.processing().unwrap_or(0),
        }
    }

    pub fn models(&self) -> Arc<Vec<String>> {
        self.models.load_full()
    }

    /// Replace the discovered model list; true when it changed. Static lists never change.
    pub fn set_models(&self, mut models: Vec<String>) -> bool {
        if self.cfg.models.is_some() {
            return false;
        }
        models.sort();
        models.dedup();
        if **self.models.load() == models {
            return false;
        }
        self.models.store(Arc::new(models));
        true
    }

    /// Count a request as in flight until the returned guard drops, whatever the cap.
    pub fn start(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Relaxed);
        InFlight { backend: self.clone() }
    }

    /// Take one of the backend's slots, if one is free under its cap (always, without a cap).
    /// The check and the increment are one atomic step, so requests choosing this backend at
    /// the same instant can never take more slots than the cap.
    /// With `spare` slots asked for, that many stay free after this one (a batch's line leaves
    /// one), checked in the same one atomic step.
    pub fn try_start_leaving(self: &Arc<Self>, spare: usize) -> Option<InFlight> {
        match self.capacity() {
            None => Some(self.start()),
            Some(cap) => {
                let reported = self.reported_busy(spare);
                self.in_flight
                    .fetch_update(Relaxed, Relaxed, |n| (n.max(reported) + spare < cap).then_some(n + 1))
                    .ok()?;
                Some(InFlight { backend: self.clone() })
            }
        }
    }

    /// Passive failure of the transport kind: take the backend out now and re-probe at once.
    pub fn mark_failed(&self, why: &str) {
        self.stats.failures.fetch_add(1, Relaxed);
        if self.health.set_up(false) {
            tracing::warn!(backend = self.name(), reason = why, "backend marked down");
            // Requests waiting for this backend in particular choose again.
            self.admission.scatter(self.id);
        }
        self.wake.notify_one();
    }
}

pub struct InFlight {
    backend: Arc<Backend>,
}

impl InFlight {
    pub fn backend(&self) -> &Arc<Backend> {
        &self.backend
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.backend.in_flight.fetch_sub(1, Relaxed);
        if self.backend.admission.waiting() > 0 {
            self.backend.admission.release(self.backend.id, &self.backend.models());
        }
    }
}

const CLOSED: u8 = 0;
const OPEN: u8 = 1;
const HALF_OPEN: u8 = 2;

/// Up/down from probes and transport failures, and a breaker that opens after
/// `failure_threshold` consecutive 5xx responses (fast 5xx must not attract more traffic),
/// lets one trial request through after `breaker_cooldown`, and closes on its success.
pub struct HealthState {
    up: AtomicBool,
    consecutive_5xx: AtomicU32,
    breaker: AtomicU8,
    breaker_since_ms: AtomicU64,
    threshold: u32,
    cooldown_ms: u64,
    /// Until when (monotonic ms) the backend asked to be left alone: a 429, or a 503 with
    /// `Retry-After`. Requests go elsewhere meanwhile.
    cool_until_ms: AtomicU64,
}

impl HealthState {
    pub fn new(cfg: &HealthConfig) -> Self {
        HealthState {
            up: AtomicBool::new(false),
            consecutive_5xx: AtomicU32::new(0),
            breaker: AtomicU8::new(CLOSED),
            breaker_since_ms: AtomicU64::new(0),
            threshold: cfg.failure_threshold,
            cooldown_ms: cfg.breaker_cooldown.as_millis() as u64,
            cool_until_ms: AtomicU64::new(0),
        }
    }

    /// Leave the backend alone until `until_ms` (monotonic); a later end wins over an earlier one.
    pub fn cool_down(&self, until_ms: u64) {
        self.cool_until_ms.fetch_max(until_ms, Relaxed);
    }

    /// When the backend's cooldown ends, if it has not yet at `now_ms`.
    pub fn cooling_until(&self, now_ms: u64) -> Option<u64> {
        let until = self.cool_until_ms.load(Relaxed);
        (until > now_ms).then_some(until)
    }

    pub fn is_up(&self) -> bool {
        self.up.load(Relaxed)
    }

    /// Returns true when the state changed.
    pub fn set_up(&self, up: bool) -> bool {
        self.up.swap(up, Relaxed) != up
    }

    pub fn breaker_open(&self) -> bool {
        self.breaker.load(Relaxed) != CLOSED
    }

    /// May a request be routed here? An open breaker past its cooldown (or a half-open trial
    /// that never reported back) counts as available; `claim` then decides who gets the trial.
    pub fn available(&self, now_ms: u64) -> bool {
        if !self.is_up() || self.cooling_until(now_ms).is_some() {
            return false;
        }
        match self.breaker.load(Relaxed) {
            CLOSED => true,
            _ => now_ms >= self.breaker_since_ms.load(Relaxed) + self.cooldown_ms,
        }
    }

    /// Called for the selected backend: a closed breaker always admits; otherwise exactly one
    /// caller wins the half-open trial.
    pub fn claim(&self, now_ms: u64) -> bool {
        let state = self.breaker.load(Relaxed);
        if state == CLOSED {
            return true;
        }
        if now_ms < self.breaker_since_ms.load(Relaxed) + self.cooldown_ms {
            return false;
        }
        if self.breaker.compare_exchange(state, HALF_OPEN, Relaxed, Relaxed).is_ok() {
            self.breaker_since_ms.store(now_ms, Relaxed);
            true
        } else {
            false
        }
    }

    pub fn on_success(&self) {
        self.consecutive_5xx.store(0, Relaxed);
        if self.breaker.swap(CLOSED, Relaxed) != CLOSED {
            tracing::info!("circuit breaker closed");
        }
    }

    /// Returns true when this response opened the breaker.
    pub fn on_server_error(&self, now_ms: u64) -> bool {
        let n = self.consecutive_5xx.fetch_add(1, Relaxed) + 1;
        let state = self.breaker.load(Relaxed);
        let trip = state == HALF_OPEN || (state == CLOSED && n >= self.threshold);
        if trip && self.breaker.compare_exchange(state, OPEN, Relaxed, Relaxed).is_ok() {
            self.breaker_since_ms.store(now_ms, Relaxed);
            return true;
        }
        false
    }
}

/// What a model id keeps of itself in a URI path segment: RFC 3986's unreserved characters; every
/// other byte (`:` of `...-v1:0`, `/` of an ARN) is percent-encoded, as the AWS SDKs do.
const PATH_SEGMENT: &percent_encoding::AsciiSet =
    &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn health() -> HealthState {
        let cfg = crate::config::Config::empty().unwrap().health;
        let mut h = HealthState::new(&HealthConfig {
            failure_threshold: 3,
            breaker_cooldown: Duration::from_millis(100),
            ..cfg
        });
        h.set_up(true);
        h.threshold = 3;
        h
    }

    #[test]
    fn breaker_opens_after_threshold_and_half_opens_once() {
        let h = health();
        assert!(!h.on_server_error(0));
        assert!(!h.on_server_error(0));
        assert!(h.on_server_error(10));
        assert!(!h.available(50));
        assert!(!h.claim(50));
        assert!(h.available(110));
        assert!(h.claim(110));
        assert!(!h.claim(111), "only one trial at a time");
        assert!(!h.available(150));
        // failed trial re-opens
        assert!(h.on_server_error(150));
        assert!(!h.available(200));
        assert!(h.claim(260));
        h.on_success();
        assert!(!h.breaker_open());
        assert!(h.available(261));
    }

    #[test]
    fn success_resets_the_count() {
        let h = health();
        h.on_server_error(0);
        h.on_server_error(0);
        h.on_success();
        assert!(!h.on_server_error(0));
        assert!(!h.breaker_open());
    }

    #[test]
    fn a_cooling_backend_is_unavailable_until_its_cooldown_ends() {
        let h = health();
        h.cool_down(1_000);
        h.cool_down(500);
        assert!(!h.available(999));
        assert_eq!(h.cooling_until(999), Some(1_000));
        assert!(h.available(1_000));
        assert_eq!(h.cooling_until(1_000), None);
    }

    #[test]
    fn down_is_unavailable() {
        let h = health();
        assert!(h.set_up(false));
        assert!(!h.set_up(false));
        assert!(!h.available(0));
    }
}
