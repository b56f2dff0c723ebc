//! How much of a prompt each candidate backend holds: from its engine's KV-cache events where
//! they speak for it (`engines.rs`), else from the gateway's estimate (`prefix.rs`), on one scale
//! so a pool mixing both is compared fairly.

use std::sync::Arc;

use super::affinity::RouteHints;
use super::backend::Backend;
use super::engines::{Engines, EventRun};
use super::prefix::PrefixIndex;

/// The common scale: thousandths of the prompt.
pub const SCALE: usize = 1000;

/// Per candidate, in `candidates` order.
pub struct Holdings {
    /// The estimate's blocks held (what the estimate's index is updated with).
    pub estimate: Vec<usize>,
    /// What decides: thousandths of the prompt held (the events' run weighted by tier where
    /// they speak, the estimate's share elsewhere).
    pub score: Vec<usize>,
    /// The events' run, where they decided the score.
    pub events: Vec<Option<EventRun>>,
    pub best: usize,
    /// The best run ends where other prompts branch off: only a shared prefix is held.
    pub shared: bool,
    /// The model has event-publishing backends: every reason says which figure decided.
    pub labelled: bool,
}

impl Holdings {
    /// `None` when there is nothing to go on (not cache-aware, or no prompt).
    pub fn of(
        prefix: Option<&PrefixIndex>,
        engines: Option<&Engines>,
        hints: &RouteHints,
        candidates: &[&Arc<Backend>],
    ) -> Option<Holdings> {
        let prefix = prefix?;
        let chain = &hints.chain;
        if chain.is_empty() && hints.engine.is_none() {
            return None;
        }
        let ids: Vec<usize> = candidates.iter().map(|b| b.id).collect();
        let estimate = if chain.is_empty() { vec![0; ids.len()] } else { prefix.matches(chain, &ids) };
        let events = match (engines, &hints.engine) {
            (Some(engines), Some(keys)) => engines.runs(keys, &ids),
            _ => vec![None; ids.len()],
        };
        let score: Vec<usize> = estimate
            .iter()
            .zip(&events)
            .map(|(&m, run)| match run {
                Some(run) => (run.fraction * SCALE as f64).round() as usize,
                None if chain.is_empty() => 0,
                None => m * SCALE / chain.len(),
            })
            .collect();
        let best = score.iter().copied().max().unwrap_or(0);
        let shared = best > 0
            && score.iter().position(|&s| s == best).is_some_and(|i| match &events[i] {
                Some(run) => run.shared,
                None => estimate[i] > 0 && prefix.is_shared(chain[estimate[i] - 1]),
            });
        let labelled = engines.is_some_and(|e| ids.iter().any(|&id| e.publishes(id)));
        Some(Holdings { estimate, score, events, best, shared, labelled })
    }

    pub fn fraction(&self, i: usize) -> f64 {
        self.score[i] as f64 / SCALE as f64
    }

    /// Why candidate `i` (`backend`) was chosen for holding the longest prefix.
    pub fn longest(&self, i: usize, backend: &Backend) -> String {
        match &self.events[i] {
            Some(run) => format!("events: {} blocks on {}", run.blocks, backend.name()),
            None => self.label(i, format!("longest cached prefix {:.2}", self.fraction(i))),
        }
    }

    /// `why`, saying which figure stood behind candidate `i` when the pool has event publishers.
    pub fn label(&self, i: usize, why: String) -> String {
        if !self.labelled {
            return why;
        }
        let source = if self.events[i].is_some() { "events" } else { "estimate" };
        format!("{source}: {why}")
    }
}
