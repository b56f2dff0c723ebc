//! Model routing: requested model → alias → backends that serve it → available ones → policy.
//! The model table is rebuilt whenever discovery changes a backend's model list and swapped in
//! atomically, so the request path only does a hash lookup and a scan of a few candidates.

pub mod admission;
pub mod affinity;
pub mod backend;
pub mod discover;
pub mod engines;
pub mod health;
pub mod holdings;
pub mod keys;
pub mod policy;
pub mod prefix;
pub mod signals;
pub mod sticky;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;

use crate::clock::Clock;
use crate::config::{AffinityConfig, Config, Strategy};
use admission::Admission;
pub use affinity::RouteHints;
use backend::{Backend, InFlight};
use engines::{EngineKeys, Engines};
use holdings::Holdings;
use policy::RoutingPolicy;
use prefix::PrefixIndex;
use sticky::StickyTable;

/// What a backend holds in its KV cache, and where the figure comes from (`events`, from its
/// engine; `estimate`, from what the gateway sent it), for the console.
pub struct CachedBlocks {
    pub source: &'static str,
    /// The events' feed is connected and caught up (always true for the estimate).
    pub live: bool,
    pub blocks: usize,
    /// Blocks per tier: GPU, CPU, further.
    pub tiers: [usize; 3],
}

/// Why a cache-aware pick was made, and whether it holds the longest prefix (nothing given up).
type Reason = (String, bool);

/// A chosen backend, and why when an affinity rule decided (`x-switchyard-route`).
pub struct Selected {
    pub backend: Arc<Backend>,
    pub explain: Option<String>,
    /// The slot taken on `backend` (under its cap): in flight until this drops.
    pub slot: InFlight,
}

type ModelTable = crate::config::FastMap<String, Vec<Arc<Backend>>>;

/// Routing decisions over which "requests routed lately" halves.
const RECENT_WINDOW: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelectError {
    /// No backend has ever said it serves this model.
    UnknownModel,
    /// Backends serve it, but none is available (down, breaker open, or already tried).
    NoneAvailable,
    /// Backends that could serve it are all at their concurrency cap: wait for a slot.
    Full,
}

pub struct Router {
    pub backends: Vec<Arc<Backend>>,
    /// What breaker cool-downs are measured on.
    pub clock: Clock,
    policy: Box<dyn RoutingPolicy>,
    strategy: Strategy,
    affinity: AffinityConfig,
    sticky: Option<StickyTable>,
    /// The prompt prefixes sent to each backend (cache-aware strategy only).
    prefix: Option<PrefixIndex>,
    /// What event-publishing engines hold (`backends[].kv_events`), when any backend publishes.
    pub engines: Option<Engines>,
    turn: AtomicUsize,
    /// Requests routed to each backend lately (halved every `RECENT_WINDOW` decisions).
    recent: Vec<AtomicU64>,
    table: ArcSwap<ModelTable>,
    rebuild_lock: Mutex<()>,
    /// Requests waiting for a slot when every backend of their model is at its cap.
    pub admission: Arc<Admission>,
    /// Prompts sent elsewhere than the backend holding their longest prefix, by reason.
    given_up: [AtomicU64; 4],
}

/// Why a prompt did not go to a backend holding its prefix.
#[derive(Clone, Copy, PartialEq)]
enum GivenUp {
    /// The holder was full, or beyond the balance threshold.
    Load = 0,
    /// The holder was down, or its breaker open.
    Down = 1,
    /// The holder lost it: dropped beyond its cache capacity, or forgotten when it restarted.
    Evicted = 2,
    /// No backend holds it, or only a prefix other conversations share: a new conversation.
    New = 3,
}

impl GivenUp {
    const ALL: [GivenUp; 4] = [GivenUp::Load, GivenUp::Down, GivenUp::Evicted, GivenUp::New];

    fn as_str(self) -> &'static str {
        match self {
            GivenUp::Load => "load",
            GivenUp::Down => "down",
            GivenUp::Evicted => "evicted",
            GivenUp::New => "new",
        }
    }
}

impl Router {
    pub fn new(config: &Config) -> Result<Router, String> {
        Router::with_clock(config, Clock::system())
    }

    pub fn with_clock(config: &Config, clock: Clock) -> Result<Router, String> {
        let admission =
            Arc::new(Admission::new(config.max_queue, config.queue_timeout, config.affinity.balance_slack as usize));
        let backends = config
            .backends
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let pool = crate::upstream::pool::PoolSettings::of(config);
                Backend::new(i, b.clone(), &config.health, admission.clone(), pool).map(Arc::new)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let affinity = config.affinity.clone();
        let router = Router {
            policy: policy::for_strategy(config.strategy, backends.len()),
            strategy: config.strategy,
            sticky: affinity.sticky_sessions.then(|| StickyTable::new(affinity.session_ttl, affinity.max_sessions)),
            prefix: (config.strategy == Strategy::CacheAware)
                .then(|| PrefixIndex::new(&config.backends.iter().map(|b| b.cache_tokens).collect::<Vec<_>>())),
            engines: Engines::new(config)?,
            affinity,
            turn: AtomicUsize::new(0),
            recent: (0..backends.len()).map(|_| AtomicU64::new(0)).collect(),
            backends,
            clock,
            table: ArcSwap::from_pointee(ModelTable::default()),
            given_up: Default::default(),
            rebuild_lock: Mutex::new(()),
            admission,
        };
        router.rebuild_table();
        Ok(router)
    }

    pub fn policy_name(&self) -> &'static str {
        self.policy.name()
    }

    /// Recompute model → backends from every backend's current model list.
    pub fn rebuild_table(&self) {
        let _serialised = self.rebuild_lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut table = ModelTable::default();
        for b in &self.backends {
            for m in b.models().iter() {
                table.entry(m.clone()).or_default().push(b.clone());
            }
        }
        self.table.store(Arc::new(table));
    }

    /// The id of the backend named `name`.
    pub fn id_of(&self, name: &str) -> Option<usize> {
        self.backends.iter().find(|b| b.name() == name).map(|b| b.id)
    }

    /// How many backends serve `model` (healthy or not): with one, there is no choice to share.
    pub fn backends_serving(&self, model: &str) -> usize {
        self.table.load().get(model).map_or(0, Vec::len)
    }

    /// How long until the first of `model`'s backends that are only cooling down (after a 429, or
    /// a 503 with `Retry-After`; up otherwise) takes requests again; None when none is cooling.
    pub fn soonest_cooldown_end(&self, model: &str) -> Option<Duration> {
        let now = self.clock.mono_ms();
        let table = self.table.load();
        let until =
            table.get(model)?.iter().filter(|b| b.health.is_up()).filter_map(|b| b.health.cooling_until(now)).min()?;
        Some(Duration::from_millis(until - now))
    }

    /// Whether an available backend of `model` has a slot to spare (`Backend::has_spare`).
    pub fn has_spare(&self, model: &str) -> bool {
        let now = self.clock.mono_ms();
        self.table.load().get(model).is_some_and(|all| all.iter().any(|b| b.health.available(now) && b.has_spare()))
    }

    /// Whether some backend of `model` takes requests of `endpoint` (healthy or not).
    pub fn serves(&self, model: &str, endpoint: crate::endpoint::Endpoint) -> bool {
        self.table.load().get(model).is_some_and(|all| all.iter().any(|b| b.serves(endpoint)))
    }

    /// A backend of `model` that is the hosted `provider` (`backends[].provider`), up ones first.
    pub fn provider_backend(&self, model: &str, provider: &str) -> Option<Arc<Backend>> {
        let table = self.table.load();
        let hosted = table.get(model)?.iter().filter(|b| b.cfg.provider.as_deref() == Some(provider));
        hosted.clone().find(|b| b.health.is_up()).or_else(|| hosted.clone().next()).cloned()
    }

    pub fn knows_model(&self, model: &str) -> bool {
        self.table.load().contains_key(model)
    }

    /// Pick a backend for `model`, skipping ids in `tried`.
    pub fn select(&self, model: &str, tried: &[usize]) -> Result<Arc<Backend>, SelectError> {
        self.select_with(model, &RouteHints::default(), tried).map(|s| s.backend)
    }

    /// Which prompt hashes `select_with` can use: none, the first 512 bytes, or the whole prompt.
    pub fn prefix_bytes_needed(&self) -> Option<usize> {
        match self.strategy {
            Strategy::CacheAware => Some(usize::MAX),
            Strategy::PrefixHash => Some(512),
            _ => None,
        }
    }

    /// Pick a backend for `model` with what is known of the request's session and prompt:
    /// a sticky session's backend first, then the strategy.
    pub fn select_with(&self, model: &str, hints: &RouteHints, tried: &[usize]) -> Result<Selected, SelectError> {
        let table = self.table.load();
        let all = table.get(model).ok_or(SelectError::UnknownModel)?;
        let now = self.clock.mono_ms();
        let mut full = false;
        let mut candidates: Vec<&Arc<Backend>> = all
            .iter()
            .filter(|b| !tried.contains(&b.id) && b.health.available(now))
            .filter(|b| {
                let room = b.has_room_leaving(hints.spare);
                full |= !room;
                room
            })
            .collect();
        let session = hints.session.filter(|_| self.sticky.is_some());
        let mut repin_why = None;
        // The fleet's pin (shared through Redis) outranks this instance's own table: another
        // instance may have routed the conversation's last turn.
        let local_pin = match (&self.sticky, session) {
            (Some(sticky), Some(session)) => sticky.get(model, session, Instant::now()),
            _ => None,
        };
        let pin =
            hints.pinned.map(|id| (id, "pinned here by the fleet")).or(local_pin.map(|id| (id, "session pinned here")));
        if let Some((id, pinned_why)) = pin {
            match candidates.iter().position(|b| b.id == id) {
                Some(i) => match affinity::overloaded(&self.affinity, model, candidates[i], &candidates) {
                    None => match candidates[i].try_start_leaving(hints.spare) {
                        Some(slot) if candidates[i].health.claim(now) => {
                            let chosen = candidates[i].clone();
                            if let (Some(sticky), Some(session)) = (&self.sticky, session) {
                                sticky.pin(model, session, chosen.id, Instant::now());
                            }
                            self.remember(&chosen, hints, None);
                            let explain = affinity::explain("sticky", &chosen, 0, 0, pinned_why);
                            return Ok(Selected { backend: chosen, explain: Some(explain), slot });
                        }
                        Some(_) => repin_why = Some("re-pinned: the pinned backend is in a breaker trial"),
                        None => {
                            // Its last slot went to another request a moment ago.
                            full = true;
                            candidates.swap_remove(i);
                            repin_why = Some("re-pinned: the pinned backend is full");
                        }
                    },
                    Some(_) => repin_why = Some("re-pinned: the pinned backend is overloaded"),
                },
                None => repin_why = Some("re-pinned: the pinned backend is unavailable"),
            }
        }
        loop {
            let none = if full { SelectError::Full } else { SelectError::NoneAvailable };
            let (i, held, why) = self.choose(model, hints, &candidates).ok_or(none)?;
            let chosen = candidates[i];
            // Its last slot may have gone to another request since the filter above. (Taken
            // before the breaker's trial is claimed: a claimed trial must be used.)
            let Some(slot) = chosen.try_start_leaving(hints.spare) else {
                full = true;
                candidates.swap_remove(i);
                continue;
            };
            // Only one request wins the half-open trial of a recovering breaker.
            if !chosen.health.claim(now) {
                candidates.swap_remove(i);
                continue;
            }
            let chosen = chosen.clone();
            if let (Some(sticky), Some(session)) = (&self.sticky, session) {
                sticky.pin(model, session, chosen.id, Instant::now());
            }
            let (matched, score) = held.as_ref().map_or((0, 0), |h| (h.estimate[i], h.score[i]));
            let why = match why {
                Some((why, longest)) if candidates.len() < all.len() || !longest => Some(
                    self.given_up(all, hints, &chosen, score, now)
                        .map_or_else(|| why.clone(), |left| format!("{why}; {left}")),
                ),
                why => why.map(|(why, _)| why),
            };
            self.remember(&chosen, hints, held.as_ref().map(|_| matched));
            let explain = match (why, repin_why) {
                (Some(why), _) => {
                    Some(affinity::explain(self.strategy.as_str(), &chosen, score, holdings::SCALE, &why))
                }
                (None, Some(repin)) => Some(affinity::explain(self.strategy.as_str(), &chosen, 0, 0, repin)),
                (None, None) if session.is_some() => {
                    Some(affinity::explain(self.strategy.as_str(), &chosen, 0, 0, "session pinned now"))
                }
                (None, None) => None,
            };
            return Ok(Selected { backend: chosen, explain, slot });
        }
    }

    /// When a prompt goes elsewhere than a backend holding its longest (unshared) prefix: the
    /// backend it left and why, counted for `switchyard_affinity_given_up_total{reason}` (a new
    /// conversation is counted and says nothing more).
    fn given_up(
        &self,
        all: &[Arc<Backend>],
        hints: &RouteHints,
        chosen: &Backend,
        chosen_score: usize,
        now: u64,
    ) -> Option<String> {
        let index = self.prefix.as_ref()?;
        let everyone: Vec<&Arc<Backend>> = all.iter().collect();
        let held = Holdings::of(Some(index), self.engines.as_ref(), hints, &everyone)?;
        let (at, best) = held.score.iter().copied().enumerate().max_by_key(|&(_, m)| m)?;
        let fresh = best == 0 || held.shared;
        let (holder, reason) = if !fresh {
            if best <= chosen_score {
                return None;
            }
            let holder = all.get(at).filter(|h| h.id != chosen.id)?;
            (Some(holder), if holder.health.available(now) { GivenUp::Load } else { GivenUp::Down })
        } else if let Some(id) = index.lost_by(&hints.chain, held.estimate.iter().copied().max().unwrap_or(0)) {
            (all.iter().find(|b| b.id == id), GivenUp::Evicted)
        } else {
            (None, GivenUp::New)
        };
        self.given_up[reason as usize].fetch_add(1, Relaxed);
        let holder = holder.filter(|_| reason != GivenUp::New)?;
        let went = if holder.id == chosen.id { "back on" } else { "left" };
        Some(format!("{went} {} ({})", holder.name(), reason.as_str()))
    }

    /// Prometheus lines: prompts that left the backend holding their prefix, by reason.
    pub fn render_affinity(&self, out: &mut String) {
        use std::fmt::Write;
        if self.prefix.is_none() {
            return;
        }
        let _ = writeln!(
            out,
            "# HELP switchyard_affinity_given_up_total Prompts routed by load rather than to a backend holding their prefix: load, down (the holder was busy or unavailable), evicted (it lost the prefix), new (nobody holds it).\n\
             # TYPE switchyard_affinity_given_up_total counter"
        );
        for reason in GivenUp::ALL {
            let n = self.given_up[reason as usize].load(Relaxed);
            let _ = writeln!(out, "switchyard_affinity_given_up_total{{reason=\"{}\"}} {n}", reason.as_str());
        }
    }

    /// The backend a request that must wait for a slot should wait for (see
    /// `affinity::waiting_lane`); `None`: the model's common line.
    pub fn waiting_lane(&self, model: &str, hints: &RouteHints, tried: &[usize]) -> Option<usize> {
        if self.prefix.is_none() && hints.pinned.is_none() {
            return None;
        }
        let table = self.table.load();
        let now = self.clock.mono_ms();
        let candidates: Vec<&Arc<Backend>> =
            table.get(model)?.iter().filter(|b| !tried.contains(&b.id) && b.health.available(now)).collect();
        let held = Holdings::of(self.prefix.as_ref(), self.engines.as_ref(), hints, &candidates);
        affinity::waiting_lane(&self.affinity, model, held.as_ref(), hints, &candidates)
    }

    /// Whether a request waiting in `lane` (a backend's, or the model's common line) could take a
    /// slot now.
    pub fn has_room(&self, model: &str, lane: Option<usize>) -> bool {
        let table = self.table.load();
        let now = self.clock.mono_ms();
        let Some(all) = table.get(model) else { return true };
        let mut open = all.iter().filter(|b| b.health.available(now) && b.has_room());
        match lane {
            Some(id) => open.any(|b| b.id == id),
            None => open.next().is_some(),
        }
    }

    /// The strategy's pick: index into `candidates`, what each candidate holds of the prompt
    /// (cache-aware), and the reason when the strategy explains itself (with whether the pick
    /// holds the longest prefix).
    fn choose(
        &self,
        model: &str,
        hints: &RouteHints,
        candidates: &[&Arc<Backend>],
    ) -> Option<(usize, Option<Holdings>, Option<Reason>)> {
        if candidates.is_empty() {
            return None;
        }
        let turn = self.turn.fetch_add(1, Relaxed);
        if let Some(held) = Holdings::of(self.prefix.as_ref(), self.engines.as_ref(), hints, candidates) {
            let recent = |id: usize| self.recent.get(id).map_or(0, |r| r.load(Relaxed));
            let (i, why, longest) = affinity::cache_aware(&self.affinity, model, &held, candidates, &recent, turn);
            return Some((i, Some(held), Some((why, longest))));
        }
        match self.strategy {
            Strategy::PrefixHash if !hints.chain.is_empty() => {
                // Deliberately naive: the hash of the first 512 bytes, modulo the candidates.
                let head = hints.chain[hints.chain.len().min(512 / prefix::BLOCK_BYTES) - 1];
                Some(((head % candidates.len() as u64) as usize, None, None))
            }
            _ => self.policy.select(candidates).map(|i| (i, None, None)),
        }
    }

    /// The block size of `model`'s event-publishing engines, when its prompts are keyed for
    /// them: cache-aware routing, a backend of the model publishing events, the model's tokenizer.
    pub fn engine_block_size(&self, model: &str) -> Option<usize> {
        let engines = self.engines.as_ref().filter(|e| self.prefix.is_some() && e.tokenizes(model))?;
        let table = self.table.load();
        engines.block_size_of(table.get(model)?.iter().map(|b| b.id))
    }

    /// The prompt keyed as `model`'s event-publishing engines key it (`engine_block_size`);
    /// `body` is an OpenAI chat request.
    pub async fn engine_keys(&self, model: &str, body: &bytes::Bytes, block_size: usize) -> Option<EngineKeys> {
        self.engines.as_ref()?.prompt_keys(model, body, block_size).await
    }

    /// The first backend of `ids`, in their order, not in `tried` that is available and has a
    /// slot: another endpoint picker's order, followed as given.
    pub fn select_listed(&self, ids: &[usize], tried: &[usize]) -> Result<Selected, SelectError> {
        let now = self.clock.mono_ms();
        let mut full = false;
        for backend in ids.iter().filter(|id| !tried.contains(id)).filter_map(|&id| self.backends.get(id)) {
            if !backend.health.available(now) {
                continue;
            }
            match backend.try_start_leaving(0) {
                Some(slot) if backend.health.claim(now) => {
                    let explain = Some(format!("backend={}; why=picked by the endpoint picker", backend.name()));
                    return Ok(Selected { backend: backend.clone(), explain, slot });
                }
                Some(_) => {}
                None => full = true,
            }
        }
        Err(if full { SelectError::Full } else { SelectError::NoneAvailable })
    }

    /// Up to `n` available backends of `model` besides `tried`, least loaded first (the endpoint
    /// picker's fallbacks after its pick).
    pub fn least_loaded(&self, model: &str, tried: &[usize], n: usize) -> Vec<Arc<Backend>> {
        let table = self.table.load();
        let now = self.clock.mono_ms();
        let mut open: Vec<&Arc<Backend>> = table
            .get(model)
            .into_iter()
            .flatten()
            .filter(|b| !tried.contains(&b.id) && b.health.available(now) && b.has_room())
            .collect();
        open.sort_by_key(|b| affinity::load(b, model));
        open.into_iter().take(n).cloned().collect()
    }

    /// Note that a prompt (its block chain) went to `backend` after all: the data plane served
    /// it from a fallback.
    pub fn remember_at(&self, backend: &Backend, chain: &[u64]) {
        let hints = RouteHints { chain: chain.to_vec(), ..RouteHints::default() };
        self.remember(backend, &hints, None);
    }

    /// Note that the prompt went to `backend` (cache-aware only); `matched` blocks it already held.
    fn remember(&self, backend: &Backend, hints: &RouteHints, matched: Option<usize>) {
        if let Some(count) = self.recent.get(backend.id) {
            count.fetch_add(1, Relaxed);
            // Every so many decisions, halve every count: "lately" fades, so a backend added or
            // restarted later is not flooded while it catches up with a lifetime's total.
            if self.turn.load(Relaxed).is_multiple_of(RECENT_WINDOW) {
                for r in &self.recent {
                    r.store(r.load(Relaxed) / 2, Relaxed);
                }
            }
        }
        if let Some(index) = &self.prefix {
            if !hints.chain.is_empty() {
                let known = matched.unwrap_or_else(|| index.matches(&hints.chain, &[backend.id])[0]);
                backend.stats.prefix_routed.fetch_add(1, Relaxed);
                if known > 0 {
                    backend.stats.prefix_hits.fetch_add(1, Relaxed);
                }
                index.insert(backend.id, &hints.chain, known);
            }
        }
    }

    /// What backend `id` holds in its KV cache, for the console: from its engine's events where
    /// it publishes them, else the estimate's blocks (cache-aware only).
    pub fn cached_blocks(&self, id: usize) -> Option<CachedBlocks> {
        if let Some((live, tiers)) = self.engines.as_ref().and_then(|e| e.describe(id)) {
            let blocks = tiers.iter().sum();
            return Some(CachedBlocks { source: "events", live, blocks, tiers });
        }
        let blocks = self.prefix.as_ref()?.held(id);
        Some(CachedBlocks { source: "estimate", live: true, blocks, tiers: [blocks, 0, 0] })
    }

    /// A backend went down: whatever it had cached is gone.
    pub fn forget_cache(&self, backend: &Backend) {
        if let Some(index) = &self.prefix {
            index.forget(backend.id);
        }
        if let Some(engines) = &self.engines {
            engines.forget(backend.id);
        }
    }

    /// De-duplicated catalogue of every model served by a backend that is up: model → backend names.
    /// What each model's healthy backends serve together (`chat`, `rerank`, ...).
    pub fn capabilities(&self) -> BTreeMap<String, Vec<&'static str>> {
        let mut out: BTreeMap<String, Vec<&'static str>> = BTreeMap::new();
        for b in self.backends.iter().filter(|b| b.health.is_up()) {
            let served = b.capabilities();
            for m in b.models().iter() {
                let entry = out.entry(m.clone()).or_default();
                entry.extend_from_slice(&served);
                entry.sort_unstable();
                entry.dedup();
            }
        }
        out
    }

    pub fn catalogue(&self) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for b in self.backends.iter().filter(|b| b.health.is_up()) {
            for m in b.models().iter() {
                out.entry(m.clone()).or_default().push(b.name().to_owned());
            }
        }
        out
    }

    pub fn healthy_count(&self) -> usize {
        self.backends.iter().filter(|b| b.health.is_up()).count()
    }
}

#[cfg(test)]
mod tests;
