//! Priority: only candidates with the highest `priority` value take traffic; lower tiers are
//! fallbacks used when every higher one is down or tried. Within a tier, least-connections.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use super::{least_loaded, RoutingPolicy};
use crate::route::backend::Backend;

#[derive(Default)]
pub struct Priority {
    turn: AtomicUsize,
}

impl RoutingPolicy for Priority {
    fn name(&self) -> &'static str {
        "priority"
    }

    fn select(&self, candidates: &[&Arc<Backend>]) -> Option<usize> {
        let top = candidates.iter().map(|b| b.cfg.priority).max()?;
        let tier = (0..candidates.len()).filter(|&i| candidates[i].cfg.priority == top);
        least_loaded(candidates, tier, self.turn.fetch_add(1, Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{backend, distribution};
    use super::*;

    #[test]
    fn top_tier_only_then_fallback() {
        let bs = vec![backend(0, 10, 1), backend(1, 100, 1), backend(2, 100, 1)];
        assert_eq!(distribution(&Priority::default(), &bs, 100), vec![0, 50, 50]);
        let fallback = vec![bs[0].clone()];
        assert_eq!(distribution(&Priority::default(), &fallback, 3), vec![3]);
    }
}
