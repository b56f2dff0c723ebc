//! KV-cache affinity decisions: keep a session on its pinned backend, or send a prompt where its
//! longest prefix is cached, unless that backend is loaded beyond the balance threshold relative
//! to the least-loaded candidate, in which case load wins. Every decision says why, for the
//! `x-switchyard-route` header.

use std::sync::Arc;

use super::backend::Backend;
use super::engines::EngineKeys;
use super::holdings::{Holdings, SCALE};
use crate::config::AffinityConfig;

/// What routing knows about a request beyond its model.
#[derive(Debug, Default)]
pub struct RouteHints<'a> {
    /// Session key (header or body field), if the client sent one.
    pub session: Option<&'a str>,
    /// Chained block hashes of the prompt (`prefix::chain`); empty unless a strategy needs them.
    pub chain: Vec<u64>,
    /// The prompt keyed as event-publishing engines key it (`engines.rs`), for models that have
    /// such backends and a tokenizer.
    pub engine: Option<EngineKeys>,
    /// The backend the fleet has this conversation pinned to (`shared/affinity.rs`), when
    /// instances share affinity through Redis: it counts as this instance's own sticky pin.
    pub pinned: Option<usize>,
    /// Slots the request leaves free on a capped backend: 0 for interactive requests, 1 for a
    /// batch's lines, which never take a backend's last slot.
    pub spare: usize,
    /// Refused at once when no backend has a slot to spare (an experiment's shadow or judge),
    /// rather than looking again until one frees.
    pub never_wait: bool,
}

/// The load a backend is judged by for `model`: requests in flight through this gateway, plus
/// what the backend itself reports waiting (when its signal is fresh), plus a penalty when it
/// says the model is not loaded (loading one takes seconds; unknown counts as no penalty).
pub fn load(backend: &Backend, model: &str) -> usize {
    let cold = if backend.signals.has_loaded(model) == Some(false) { NOT_LOADED_PENALTY } else { 0 };
    backend.in_flight() + backend.signals.waiting().unwrap_or(0) + cold
}

/// What "the model is not loaded there" weighs, in requests.
const NOT_LOADED_PENALTY: usize = 4;

/// Whether `chosen` is loaded beyond the balance threshold relative to the least-loaded candidate.
pub fn overloaded(
    cfg: &AffinityConfig,
    model: &str,
    chosen: &Backend,
    candidates: &[&Arc<Backend>],
) -> Option<(usize, usize)> {
    let least = candidates.iter().map(|b| load(b, model)).min().unwrap_or(0);
    let mine = load(chosen, model);
    let limit = (least as f64 * cfg.balance_factor).floor() as usize + cfg.balance_slack as usize;
    (mine > limit).then_some((mine, least))
}

/// A cache-aware choice among `candidates`: the index into it, the reason, and whether it went to
/// a holder of the longest prefix (nothing was given up). `recent[id]` is how many requests went
/// to backend `id` lately.
///
/// - A continuation (its longest cached prefix ends inside its own history) goes where that
///   prefix is, unless the backend is loaded beyond the balance threshold (then load wins).
/// - A new conversation that only shares a prefix with others (a common system prompt), or
///   shares nothing, goes to the backend that took the fewest requests lately, preferring one
///   that holds the shared prefix among equals: a shared prefix costs each backend one prefill,
///   while piling every conversation onto its first holder would cost the balance for good.
pub fn cache_aware(
    cfg: &AffinityConfig,
    model: &str,
    held: &Holdings,
    candidates: &[&Arc<Backend>],
    recent: &dyn Fn(usize) -> u64,
    turn: usize,
) -> (usize, String, bool) {
    let matched = &held.score;
    let best = held.best;
    if best == 0 || held.shared {
        // Fewest recent requests first, then most of the prompt held, then least in flight.
        let n = candidates.len();
        let i = (0..n)
            .map(|k| (k + turn) % n)
            .min_by_key(|&i| (recent(candidates[i].id), std::cmp::Reverse(matched[i]), load(candidates[i], model)))
            .unwrap_or(0);
        let why = if best == 0 {
            "new conversation, nothing cached: least recently loaded".to_owned()
        } else {
            format!(
                "new conversation sharing a cached prefix ({:.2}): least recently loaded",
                best as f64 / SCALE as f64
            )
        };
        return (i, held.label(i, why), false);
    }
    // Among the candidates holding the longest prefix, the least loaded (rotating ties).
    let holders = (0..candidates.len()).filter(|&i| matched[i] == best);
    let preferred = super::policy::least_loaded_by(candidates, holders, turn, |b| load(b, model)).unwrap_or(0);
    if let Some((mine, least)) = overloaded(cfg, model, candidates[preferred], candidates) {
        // Load wins; among the least-loaded backends, the one holding the most of the prompt.
        let min_load = candidates.iter().map(|b| load(b, model)).min().unwrap_or(0);
        let i = (0..candidates.len())
            .filter(|&i| load(candidates[i], model) == min_load)
            .max_by_key(|&i| matched[i])
            .unwrap_or(preferred);
        let why = format!(
            "balance: {} held {:.2} but had {mine} in flight vs {least}",
            candidates[preferred].name(),
            held.fraction(preferred)
        );
        return (i, held.label(preferred, why), false);
    }
    (preferred, held.longest(preferred, candidates[preferred]), true)
}

/// Where a request that must wait (every backend at its cap) should wait: the backend holding
/// the longest prefix of a continuation's prompt, or the one it is pinned to, when that backend's
/// load counting its own waiters is within the balance threshold of the least loaded candidate's.
/// `None`: the model's common line (a new conversation, a shared prefix only, or affinity has
/// given way to load).
pub fn waiting_lane(
    cfg: &AffinityConfig,
    model: &str,
    held: Option<&Holdings>,
    hints: &RouteHints,
    candidates: &[&Arc<Backend>],
) -> Option<usize> {
    let queued = |b: &Backend| load(b, model) + b.waiting_here(model);
    let preferred = match (hints.pinned, held) {
        (Some(id), _) => candidates.iter().position(|b| b.id == id)?,
        (None, Some(held)) => {
            if held.best == 0 || held.shared {
                return None;
            }
            (0..candidates.len()).filter(|&i| held.score[i] == held.best).min_by_key(|&i| queued(candidates[i]))?
        }
        _ => return None,
    };
    let least = candidates.iter().map(|b| queued(b)).min().unwrap_or(0);
    let limit = (least as f64 * cfg.balance_factor).floor() as usize + cfg.balance_slack as usize;
    let chosen = candidates[preferred];
    (queued(chosen) <= limit).then_some(chosen.id)
}

pub fn explain(strategy: &str, backend: &Backend, matched: usize, chain_len: usize, why: &str) -> String {
    let fraction = if chain_len == 0 { 0.0 } else { matched as f64 / chain_len as f64 };
    format!("strategy={strategy}; backend={}; match={fraction:.2}; why={why}", backend.name())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::policy::test_support::backend;
    use crate::route::prefix::{chain, PrefixIndex};
    use crate::route::signals::LoadReading;

    fn held(index: &PrefixIndex, chain: Vec<u64>, both: &[&Arc<Backend>]) -> Holdings {
        let hints = RouteHints { chain, ..RouteHints::default() };
        Holdings::of(Some(index), None, &hints, both).unwrap()
    }

    fn cfg() -> AffinityConfig {
        AffinityConfig {
            sticky_sessions: false,
            session_ttl: std::time::Duration::from_secs(60),
            max_sessions: 10,
            balance_factor: 1.5,
            balance_slack: 2,
        }
    }

    #[test]
    fn balance_threshold_counts_reported_queues_and_cold_models() {
        let (a, b) = (backend(0, 0, 1), backend(1, 0, 1));
        let both = [&a, &b];
        assert_eq!(overloaded(&cfg(), "m", &a, &both), None);
        // 1.5 × 0 + 2 = 2 allowed; the backend reports 3 queued.
        a.signals.record(LoadReading { slots: None, waiting: 3, processing: 1, kv_usage: None });
        assert_eq!(overloaded(&cfg(), "m", &a, &both), Some((3, 0)));
        // A model it says it has not loaded weighs like a queue.
        b.signals.record_loaded(vec!["other".into()]);
        assert_eq!(load(&b, "m"), NOT_LOADED_PENALTY);
        assert_eq!(overloaded(&cfg(), "m", &a, &both), None, "3 vs 4: within the threshold");
    }

    #[test]
    fn continuation_stays_unless_overloaded_and_new_conversations_spread() {
        let (a, b) = (backend(0, 0, 1), backend(1, 0, 1));
        let both = [&a, &b];
        let index = PrefixIndex::new(&[1 << 20, 1 << 20]);
        let system = vec![b's'; 640];
        let conversation = |tail: u8| [system.clone(), vec![tail; 640]].concat();
        let one = chain(&[&conversation(1)]);
        index.insert(0, &one, 0);
        let next_turn = chain(&[&[conversation(1), vec![b'x'; 128]].concat()]);
        let no_recent = |_: usize| 0;
        let h = held(&index, next_turn.clone(), &both);
        let (i, why, _) = cache_aware(&cfg(), "m", &h, &both, &no_recent, 1);
        assert_eq!((i, h.estimate[0]), (0, one.len()), "{why}");
        assert!(why.starts_with("longest cached prefix"), "{why}");
        // A second conversation branches after the system prompt: now it is a shared prefix, and
        // a third goes to the backend with fewer recent requests.
        let two = chain(&[&conversation(2)]);
        index.insert(0, &two, index.matches(&two, &[0])[0]);
        let three = chain(&[&conversation(3)]);
        let recent = |id: usize| if id == 0 { 2 } else { 0 };
        let (i, why, _) = cache_aware(&cfg(), "m", &held(&index, three, &both), &both, &recent, 0);
        assert_eq!(i, 1, "{why}");
        assert!(why.starts_with("new conversation sharing a cached prefix"), "{why}");
        // The continuation moves only when its backend is beyond the balance threshold.
        a.signals.record(LoadReading { slots: None, waiting: 5, processing: 1, kv_usage: None });
        let (i, why, _) = cache_aware(&cfg(), "m", &held(&index, next_turn, &both), &both, &no_recent, 0);
        assert_eq!(i, 1);
        assert!(why.starts_with("balance: b0 held"), "{why}");
    }
}
