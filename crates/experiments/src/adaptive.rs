//! Adaptive allocation: traffic moves toward the variant that looks better, and a winner is
//! declared only when the evidence says so at a stated error rate.
//!
//! - **Allocation: Thompson sampling.** Each arm's score (scaled into [0, 1]) has a Beta posterior;
//!   an arm's share is the probability that it is the best (estimated by drawing from the
//!   posteriors), lifted to at least `floor`. It moves traffic early, when one arm leads, and keeps
//!   every arm observed, which the stopping rule needs.
//! - **Stopping: anytime-valid confidence sequences.** Per arm, Robbins' normal-mixture boundary
//!   for 1/2-sub-Gaussian observations (any value in [0, 1] is; Howard, Ramdas, McAuliffe and
//!   Sekhon 2021): with probability at least 1 − α/k the arm's true mean stays inside
//!   `mean ± sqrt(2σ²(n + n₀)(ln(k/α) + ½ ln(1 + n/n₀))) / n` at every `n` at once. Because it
//!   holds uniformly over time, the results may be looked at after every observation, and because
//!   each arm's bound uses only its own observations, it holds whatever the allocation did. A
//!   winner is declared when one arm's lower bound clears every other arm's upper bound: the
//!   chance of declaring a worse arm is at most α.
//!
//! Why not Thompson sampling's own posterior as the stopping rule: "probability best ≥ 95%"
//! checked after every observation is not a 5% error rate (optional stopping); the confidence
//! sequences are.

use rand::Rng;
use rand_distr::{Beta, Distribution};

/// The mixture's scale: the boundary is tightest near this many observations per arm.
const MIXTURE_N0: f64 = 500.0;
/// Draws from the posteriors per share estimate.
const DRAWS: usize = 512;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdaptiveSettings {
    /// The chance of declaring a worse arm the winner (default 0.05).
    pub alpha: f64,
    /// Each arm's least share of traffic while the test runs (default 0.1).
    pub floor: f64,
    /// The metric's lowest and highest values (default [0, 1]); scores are scaled into [0, 1].
    pub range: [f64; 2],
}

impl Default for AdaptiveSettings {
    fn default() -> Self {
        AdaptiveSettings { alpha: 0.05, floor: 0.1, range: [0.0, 1.0] }
    }
}

/// One arm's observations, scaled into [0, 1].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Arm {
    pub n: u64,
    pub sum: f64,
}

impl Arm {
    pub fn mean(&self) -> f64 {
        if self.n == 0 {
            0.5
        } else {
            self.sum / self.n as f64
        }
    }
}

impl AdaptiveSettings {
    /// A metric's value scaled into [0, 1] (clamped).
    pub fn scale(&self, value: f64) -> f64 {
        ((value - self.range[0]) / (self.range[1] - self.range[0])).clamp(0.0, 1.0)
    }

    /// Each arm's share of traffic now: its probability of being the best, at least `floor`.
    pub fn shares(&self, arms: &[Arm], rng: &mut impl Rng) -> Vec<f64> {
        let k = arms.len();
        if k == 0 {
            return Vec::new();
        }
        let posteriors: Vec<Option<Beta<f64>>> =
            arms.iter().map(|a| Beta::new(1.0 + a.sum, 1.0 + (a.n as f64 - a.sum).max(0.0)).ok()).collect();
        let mut wins = vec![0usize; k];
        for _ in 0..DRAWS {
            let mut best = (0, f64::MIN);
            for (i, posterior) in posteriors.iter().enumerate() {
                let draw = posterior.as_ref().map_or(0.5, |p| p.sample(rng));
                if draw > best.1 {
                    best = (i, draw);
                }
            }
            wins[best.0] += 1;
        }
        let spread = 1.0 - self.floor * k as f64;
        wins.iter().map(|w| self.floor + spread * *w as f64 / DRAWS as f64).collect()
    }

    /// The half-width of an arm's confidence sequence among `k` arms (infinite with none).
    pub fn radius(&self, arm: &Arm, k: usize) -> f64 {
        if arm.n == 0 {
            return f64::INFINITY;
        }
        let (n, sigma2) = (arm.n as f64, 0.25);
        let log = (k.max(1) as f64 / self.alpha).ln() + 0.5 * (1.0 + n / MIXTURE_N0).ln();
        (2.0 * sigma2 * (n + MIXTURE_N0) * log).sqrt() / n
    }

    /// The arm whose lower bound clears every other's upper bound, if one does.
    pub fn winner(&self, arms: &[Arm]) -> Option<usize> {
        let k = arms.len();
        if k < 2 {
            return None;
        }
        let bounds: Vec<(f64, f64)> = arms
            .iter()
            .map(|a| {
                let r = self.radius(a, k);
                (a.mean() - r, a.mean() + r)
            })
            .collect();
        (0..k).find(|&i| (0..k).filter(|&j| j != i).all(|j| bounds[i].0 > bounds[j].1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn shares_favour_the_leader_and_keep_the_floor() {
        let settings = AdaptiveSettings::default();
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let arms = [Arm { n: 400, sum: 240.0 }, Arm { n: 400, sum: 280.0 }];
        let shares = settings.shares(&arms, &mut rng);
        assert!(shares[1] > 0.8 && shares[0] >= 0.1, "{shares:?}");
        assert!((shares.iter().sum::<f64>() - 1.0).abs() < 1e-9);
    }

    #[test]
    fn no_winner_without_evidence_and_one_with_it() {
        let settings = AdaptiveSettings::default();
        assert_eq!(settings.winner(&[Arm { n: 50, sum: 30.0 }, Arm { n: 50, sum: 33.0 }]), None);
        assert_eq!(settings.winner(&[Arm { n: 20_000, sum: 12_000.0 }, Arm { n: 20_000, sum: 13_200.0 }]), Some(1));
    }
}
