//! A seeded simulation of adaptive allocation: variants that succeed with known rates, requests
//! assigned by the current shares, shares recomputed as the gateway does (every `refresh`
//! observations), until a winner is declared. `repeat` runs it over many seeds and reports how
//! often the declared winner was the better variant and how fast.

use rand::{Rng, SeedableRng};

use crate::adaptive::{AdaptiveSettings, Arm};

#[derive(Debug, Clone)]
pub struct Simulation {
    /// Each variant's chance of a success (score 1; else 0).
    pub rates: Vec<f64>,
    pub settings: AdaptiveSettings,
    /// Observations between two recomputations of the shares.
    pub refresh: u64,
    /// Requests after which a run gives up undecided.
    pub max_requests: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub winner: Option<usize>,
    pub requests: u64,
    /// Requests each variant answered.
    pub traffic: Vec<u64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub runs: usize,
    /// Runs that declared the variant with the highest rate.
    pub correct: usize,
    pub wrong: usize,
    pub undecided: usize,
    pub median_requests: u64,
    pub p90_requests: u64,
    /// The best variant's share of all requests, over all runs.
    pub best_share: f64,
}

impl Simulation {
    pub fn run(&self, seed: u64) -> Outcome {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let k = self.rates.len();
        let mut arms = vec![Arm::default(); k];
        let mut traffic = vec![0u64; k];
        let mut shares = vec![1.0 / k as f64; k];
        for request in 1..=self.max_requests {
            let point: f64 = rng.random();
            let arm = crate::assign::pick(&shares, point).unwrap_or(0);
            traffic[arm] += 1;
            let success = rng.random::<f64>() < self.rates[arm];
            arms[arm].n += 1;
            arms[arm].sum += if success { 1.0 } else { 0.0 };
            if request % self.refresh == 0 {
                if let Some(winner) = self.settings.winner(&arms) {
                    return Outcome { winner: Some(winner), requests: request, traffic };
                }
                shares = self.settings.shares(&arms, &mut rng);
            }
        }
        Outcome { winner: None, requests: self.max_requests, traffic }
    }

    pub fn repeat(&self, seeds: std::ops::Range<u64>) -> Report {
        let best = (0..self.rates.len()).max_by(|a, b| self.rates[*a].total_cmp(&self.rates[*b])).unwrap_or(0);
        let outcomes: Vec<Outcome> = seeds.map(|seed| self.run(seed)).collect();
        let mut requests: Vec<u64> = outcomes.iter().map(|o| o.requests).collect();
        requests.sort_unstable();
        let at = |q: f64| requests.get(((requests.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0);
        let total: u64 = outcomes.iter().map(|o| o.requests).sum();
        let to_best: u64 = outcomes.iter().map(|o| o.traffic[best]).sum();
        Report {
            runs: outcomes.len(),
            correct: outcomes.iter().filter(|o| o.winner == Some(best)).count(),
            wrong: outcomes.iter().filter(|o| o.winner.is_some_and(|w| w != best)).count(),
            undecided: outcomes.iter().filter(|o| o.winner.is_none()).count(),
            median_requests: at(0.5),
            p90_requests: at(0.9),
            best_share: to_best as f64 / total.max(1) as f64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_better_of_060_and_066_wins_within_the_error_rate_and_gets_most_traffic() {
        let sim = Simulation {
            rates: vec![0.60, 0.66],
            settings: AdaptiveSettings::default(),
            refresh: 100,
            max_requests: 200_000,
        };
        let report = sim.repeat(0..40);
        // α = 0.05: over 40 seeds, at most a few wrong calls are expected (the bound is loose).
        assert!(report.wrong <= 2, "{report:?}");
        assert_eq!(report.undecided, 0, "{report:?}");
        assert!(report.best_share > 0.6, "{report:?}");
    }

    #[test]
    fn equal_variants_are_rarely_called() {
        let sim = Simulation {
            rates: vec![0.6, 0.6],
            settings: AdaptiveSettings::default(),
            refresh: 100,
            max_requests: 30_000,
        };
        let report = sim.repeat(100..130);
        // Any winner here is an error; the rate is bounded by α = 0.05.
        assert!(report.correct + report.wrong <= 2, "{report:?}");
    }
}
