//! Round-robin: a shared counter modulo the number of candidates. Each backend gets every n-th
//! request, regardless of how busy it is.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use super::RoutingPolicy;
use crate::route::backend::Backend;

#[derive(Default)]
pub struct RoundRobin {
    next: AtomicUsize,
}

impl RoutingPolicy for RoundRobin {
    fn name(&self) -> &'static str {
        "round-robin"
    }

    fn select(&self, candidates: &[&Arc<Backend>]) -> Option<usize> {
        if candidates.is_empty() {
            return None;
        }
        Some(self.next.fetch_add(1, Relaxed) % candidates.len())
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{backend, distribution};
    use super::*;

    #[test]
    fn even_split() {
        let bs: Vec<_> = (0..3).map(|i| backend(i, 0, 1)).collect();
        assert_eq!(distribution(&RoundRobin::default(), &bs, 300), vec![100, 100, 100]);
        assert_eq!(RoundRobin::default().select(&[]), None);
    }
}
