//! The seeded simulation behind BENCHMARKS.md's adaptive-allocation figures:
//! `cargo run --release -p switchyard-experiments --example adaptive [RUNS]`.

use switchyard_experiments::simulate::Simulation;
use switchyard_experiments::AdaptiveSettings;

fn main() {
    let runs: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(200);
    for (rates, floor) in
        [(vec![0.60, 0.66], 0.1), (vec![0.60, 0.66], 0.2), (vec![0.60, 0.60], 0.1), (vec![0.5, 0.55, 0.6], 0.1)]
    {
        let settings = AdaptiveSettings { floor, ..AdaptiveSettings::default() };
        let sim = Simulation { rates: rates.clone(), settings, refresh: 100, max_requests: 200_000 };
        let r = sim.repeat(0..runs);
        println!(
            "rates {rates:?} floor {floor}: {} runs, winner correct {} wrong {} undecided {}; requests to decide median {} p90 {}; best variant's share of traffic {:.1}%",
            r.runs, r.correct, r.wrong, r.undecided, r.median_requests, r.p90_requests, r.best_share * 100.0
        );
    }
}
