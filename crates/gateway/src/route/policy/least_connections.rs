//! Least-connections: the candidate with the fewest requests in flight through this gateway.
//! Ties rotate, so idle backends share work evenly at low concurrency.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use super::{least_loaded, RoutingPolicy};
use crate::route::backend::Backend;

#[derive(Default)]
pub struct LeastConnections {
    turn: AtomicUsize,
}

impl RoutingPolicy for LeastConnections {
    fn name(&self) -> &'static str {
        "least-connections"
    }

    fn select(&self, candidates: &[&Arc<Backend>]) -> Option<usize> {
        least_loaded(candidates, 0..candidates.len(), self.turn.fetch_add(1, Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{backend, distribution};
    use super::*;

    #[test]
    fn prefers_the_idle_backend() {
        let bs: Vec<_> = (0..3).map(|i| backend(i, 0, 1)).collect();
        let _busy = [bs[0].start(), bs[0].start(), bs[2].start()];
        let refs: Vec<_> = bs.iter().collect();
        for _ in 0..10 {
            assert_eq!(LeastConnections::default().select(&refs), Some(1));
        }
    }

    #[test]
    fn ties_rotate() {
        let bs: Vec<_> = (0..2).map(|i| backend(i, 0, 1)).collect();
        assert_eq!(distribution(&LeastConnections::default(), &bs, 100), vec![50, 50]);
    }
}
