//! Calibration: labelled question pairs (same meaning or not), each scored once — its cosine
//! similarity and whether the checks of `verify.rs` let it through — turned into, for each
//! threshold, the false-hit rate (different-meaning pairs that would be served each other's
//! answer) and the hit rate on paraphrases, with and without the checks; and the lowest
//! threshold whose false-hit rate stays under a target.

/// One labelled pair, scored.
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    pub same: bool,
    pub similarity: f32,
    /// The checks passed (the first that failed otherwise).
    pub verified: Result<(), crate::Check>,
}

/// The figures at one threshold.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub threshold: f32,
    /// With the checks: what the gateway serves.
    pub false_hit_rate: f64,
    pub hit_rate: f64,
    /// Similarity alone.
    pub plain_false_hit_rate: f64,
    pub plain_hit_rate: f64,
}

/// The thresholds a calibration reports: 0.50 to 0.95 by 0.05, then finer up to 0.999.
pub fn default_thresholds() -> Vec<f32> {
    let mut t: Vec<f32> = (10..=19).map(|i| i as f32 * 0.05).collect();
    t.extend([0.96, 0.97, 0.98, 0.99, 0.995, 0.998, 0.999]);
    t
}

pub fn sweep(scored: &[Scored], thresholds: &[f32]) -> Vec<Row> {
    let rate = |same: bool, hit: &dyn Fn(&Scored) -> bool| {
        let of: Vec<&Scored> = scored.iter().filter(|s| s.same == same).collect();
        if of.is_empty() {
            return 0.0;
        }
        of.iter().filter(|s| hit(s)).count() as f64 / of.len() as f64
    };
    thresholds
        .iter()
        .map(|&t| {
            let served = |s: &Scored| s.similarity >= t && s.verified.is_ok();
            let plain = |s: &Scored| s.similarity >= t;
            Row {
                threshold: t,
                false_hit_rate: rate(false, &served),
                hit_rate: rate(true, &served),
                plain_false_hit_rate: rate(false, &plain),
                plain_hit_rate: rate(true, &plain),
            }
        })
        .collect()
}

/// The lowest threshold whose false-hit rate (with the checks) is at most `target`.
pub fn recommend(rows: &[Row], target: f64) -> Option<&Row> {
    rows.iter().filter(|r| r.false_hit_rate <= target).min_by(|a, b| a.threshold.total_cmp(&b.threshold))
}

/// The lowest threshold at which similarity alone stays within `target`.
pub fn plain_recommend(rows: &[Row], target: f64) -> Option<&Row> {
    rows.iter().filter(|r| r.plain_false_hit_rate <= target).min_by(|a, b| a.threshold.total_cmp(&b.threshold))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Check;

    #[test]
    fn rates_and_the_recommendation_follow_the_labels() {
        let s = |same, similarity, ok: bool| Scored {
            same,
            similarity,
            verified: if ok { Ok(()) } else { Err(Check::Negation) },
        };
        let scored = [s(true, 0.9, true), s(true, 0.7, true), s(false, 0.95, false), s(false, 0.8, true)];
        let rows = sweep(&scored, &[0.75, 0.85]);
        assert_eq!((rows[0].false_hit_rate, rows[0].hit_rate), (0.5, 0.5));
        assert_eq!((rows[0].plain_false_hit_rate, rows[0].plain_hit_rate), (1.0, 0.5));
        assert_eq!((rows[1].false_hit_rate, rows[1].hit_rate), (0.0, 0.5));
        assert_eq!(recommend(&rows, 0.01).map(|r| r.threshold), Some(0.85));
        assert_eq!(plain_recommend(&rows, 0.01).map(|r| r.threshold), None);
    }
}
