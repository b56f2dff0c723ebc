//! Weighted: smooth weighted round-robin (as in nginx). Each pick adds every candidate's weight
//! to its running score, takes the highest, and subtracts the candidates' total from the winner.
//! Over any window of total-weight picks each backend gets exactly its share, interleaved
//! (5:1 gives a a b a a a, not a a a a a b).

use std::sync::{Arc, Mutex};

use super::RoutingPolicy;
use crate::route::backend::Backend;

pub struct Weighted {
    /// Running score per backend id; a short critical section, uncontended at these rates.
    scores: Mutex<Vec<i64>>,
}

impl Weighted {
    pub fn new(backend_count: usize) -> Self {
        Weighted { scores: Mutex::new(vec![0; backend_count]) }
    }
}

impl RoutingPolicy for Weighted {
    fn name(&self) -> &'static str {
        "weighted"
    }

    fn select(&self, candidates: &[&Arc<Backend>]) -> Option<usize> {
        if candidates.len() <= 1 {
            return if candidates.is_empty() { None } else { Some(0) };
        }
        let mut scores = self.scores.lock().unwrap_or_else(|p| p.into_inner());
        let mut total = 0i64;
        let mut best: Option<(usize, i64)> = None;
        for (i, b) in candidates.iter().enumerate() {
            let w = i64::from(b.cfg.weight);
            total += w;
            let Some(score) = scores.get_mut(b.id) else { continue };
            *score += w;
            if best.is_none_or(|(_, s)| *score > s) {
                best = Some((i, *score));
            }
        }
        let (winner, _) = best?;
        if let Some(score) = scores.get_mut(candidates[winner].id) {
            *score -= total;
        }
        Some(winner)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{backend, distribution};
    use super::*;

    #[test]
    fn exact_shares_interleaved() {
        let bs = vec![backend(0, 0, 5), backend(1, 0, 1), backend(2, 0, 2)];
        let w = Weighted::new(3);
        assert_eq!(distribution(&w, &bs, 800), vec![500, 100, 200]);
        let refs: Vec<_> = bs.iter().take(2).collect();
        let picks: Vec<_> = (0..6).map(|_| w.select(&refs).unwrap()).collect();
        assert_eq!(picks.iter().filter(|&&p| p == 1).count(), 1);
        assert_ne!(picks[..5], [0, 0, 0, 0, 0], "the light backend is interleaved, not last");
    }
}
