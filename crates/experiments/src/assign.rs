//! Which variant a unit gets: a point in [0, 1) from a hash of the experiment's name and the unit
//! (so one user keeps one variant, and two experiments split users independently), laid on the
//! variants' shares in name order.

use sha2::{Digest, Sha256};

/// Where `unit` falls in [0, 1) for `experiment`.
pub fn point(experiment: &str, unit: &str) -> f64 {
    let mut hasher = Sha256::new();
    hasher.update(experiment.as_bytes());
    hasher.update([0]);
    hasher.update(unit.as_bytes());
    let digest = hasher.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    // 53 bits: every value exactly representable, and below 1.
    (u64::from_be_bytes(first) >> 11) as f64 / (1u64 << 53) as f64
}

/// The index of the share `point` falls in; shares need not add up to 1 (they are scaled), and a
/// zero share is never chosen. `None` when every share is zero.
pub fn pick(shares: &[f64], point: f64) -> Option<usize> {
    let total: f64 = shares.iter().filter(|s| **s > 0.0).sum();
    if total <= 0.0 {
        return None;
    }
    let mut edge = 0.0;
    let target = point * total;
    let mut last = None;
    for (i, share) in shares.iter().enumerate().filter(|(_, s)| **s > 0.0) {
        edge += share;
        last = Some(i);
        if target < edge {
            return Some(i);
        }
    }
    last
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_unit_keeps_its_variant_and_shares_follow_the_weights() {
        let shares = [0.8, 0.2];
        let mut counts = [0usize; 2];
        for user in 0..5000 {
            let unit = format!("user-{user}");
            let chosen = pick(&shares, point("exp", &unit)).expect("a variant");
            assert_eq!(pick(&shares, point("exp", &unit)), Some(chosen));
            counts[chosen] += 1;
        }
        let share_b = counts[1] as f64 / 5000.0;
        assert!((share_b - 0.2).abs() < 0.02, "b got {share_b}");
    }

    #[test]
    fn a_zero_share_is_never_picked() {
        for i in 0..1000 {
            let p = point("e", &i.to_string());
            assert_ne!(pick(&[0.5, 0.0, 0.5], p), Some(1));
        }
        assert_eq!(pick(&[0.0, 0.0], 0.3), None);
    }
}
