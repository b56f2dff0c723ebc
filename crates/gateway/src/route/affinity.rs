//! KV-cache affinity decisions: keep a session on its pinned backend, or send a prompt where its
//! longest prefix is cached, unless that backend is loaded beyond the balance threshold relative
//! to the least-loaded candidate, in which case load wins. Every decision says why, for the
//! `x-switchyard-route` header.

use std::sync::Arc;

use super::backend::Backend;
use super::prefix::PrefixIndex;
use crate::config::AffinityConfig;

/// What routing knows about a request beyond its model.
#[derive(Debug, Default)]
pub struct RouteHints<'a> {
    /// Session key (header or body field), if the client sent one.
    pub session: Option<&'a str>,
    /// Chained block hashes of the prompt (`prefix::chain`); empty unless a strategy needs them.
    pub chain: Vec<u64>,
}

/// The load a backend is judged by: requests in flight through this gateway, plus what the
/// backend itself reports waiting (when its signal is fresh).
pub fn load(backend: &Backend) -> usize {
    backend.in_flight() + backend.signals.waiting().unwrap_or(0)
}

/// Whether `chosen` is loaded beyond the balance threshold relative to the least-loaded candidate.
pub fn overloaded(cfg: &AffinityConfig, chosen: &Backend, candidates: &[&Arc<Backend>]) -> Option<(usize, usize)> {
    let least = candidates.iter().map(|b| load(b)).min().unwrap_or(0);
    let mine = load(chosen);
    let limit = (least as f64 * cfg.balance_factor).floor() as usize + cfg.balance_slack as usize;
    (mine > limit).then_some((mine, least))
}

/// A cache-aware choice among `candidates`: the index into it, the blocks of the prompt it
/// holds, and the reason. `recent[id]` is how many requests went to backend `id` lately.
///
/// - A continuation (its longest cached prefix ends inside its own history) goes where that
///   prefix is, unless the backend is loaded beyond the balance threshold (then load wins).
/// - A new conversation that only shares a prefix with others (a common system prompt), or
///   shares nothing, goes to the backend that took the fewest requests lately, preferring one
///   that holds the shared prefix among equals: a shared prefix costs each backend one prefill,
///   while piling every conversation onto its first holder would cost the balance for good.
pub fn cache_aware(
    cfg: &AffinityConfig,
    index: &PrefixIndex,
    chain: &[u64],
    candidates: &[&Arc<Backend>],
    recent: &dyn Fn(usize) -> u64,
    turn: usize,
) -> (usize, usize, String) {
    let ids: Vec<usize> = candidates.iter().map(|b| b.id).collect();
    let matched = index.matches(chain, &ids);
    let best = matched.iter().copied().max().unwrap_or(0);
    let fraction = |m: usize| if chain.is_empty() { 0.0 } else { m as f64 / chain.len() as f64 };
    let shared = best > 0 && index.is_shared(chain[best - 1]);
    if best == 0 || shared {
        // Fewest recent requests first, then most of the prompt held, then least in flight.
        let n = candidates.len();
        let i = (0..n)
            .map(|k| (k + turn) % n)
            .min_by_key(|&i| (recent(candidates[i].id), std::cmp::Reverse(matched[i]), load(candidates[i])))
            .unwrap_or(0);
        let why = if best == 0 {
            "new conversation, nothing cached: least recently loaded".to_owned()
        } else {
            format!("new conversation sharing a cached prefix ({:.2}): least recently loaded", fraction(best))
        };
        return (i, matched[i], why);
    }
    // Among the candidates holding the longest prefix, the least loaded (rotating ties).
    let holders = (0..candidates.len()).filter(|&i| matched[i] == best);
    let preferred = super::policy::least_loaded_by(candidates, holders, turn, load).unwrap_or(0);
    if let Some((mine, least)) = overloaded(cfg, candidates[preferred], candidates) {
        // Load wins; among the least-loaded backends, the one holding the most of the prompt.
        let min_load = candidates.iter().map(|b| load(b)).min().unwrap_or(0);
        let i = (0..candidates.len())
            .filter(|&i| load(candidates[i]) == min_load)
            .max_by_key(|&i| matched[i])
            .unwrap_or(preferred);
        let why = format!(
            "balance: {} held {:.2} but had {mine} in flight vs {least}",
            candidates[preferred].name(),
            fraction(best)
        );
        return (i, matched[i], why);
    }
    (preferred, best, format!("longest cached prefix {:.2}", fraction(best)))
}

/// `x-switchyard-route` text: `strategy=cache-aware; backend=b1; match=0.83; why=...`.
pub fn explain(strategy: &str, backend: &Backend, matched: usize, chain_len: usize, why: &str) -> String {
    let fraction = if chain_len == 0 { 0.0 } else { matched as f64 / chain_len as f64 };
    format!("strategy={strategy}; backend={}; match={fraction:.2}; why={why}", backend.name())
}
