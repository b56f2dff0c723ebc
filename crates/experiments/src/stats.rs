//! Means with 95% confidence intervals, from counts, sums and sums of squares (what a database
//! adds up), and the difference of two means with its interval (Welch's, for unequal variances).

use serde::Serialize;

/// A metric's observations in one variant, as sums.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Summary {
    pub count: u64,
    pub sum: f64,
    pub sum_sq: f64,
}

/// A mean and its 95% interval (none with fewer than two observations).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Estimate {
    pub count: u64,
    pub mean: f64,
    pub ci95: Option<[f64; 2]>,
}

impl Summary {
    pub fn add(&mut self, x: f64) {
        self.count += 1;
        self.sum += x;
        self.sum_sq += x * x;
    }

    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum / self.count as f64
        }
    }

    /// The sample variance (n − 1).
    pub fn variance(&self) -> f64 {
        if self.count < 2 {
            return 0.0;
        }
        let n = self.count as f64;
        ((self.sum_sq - self.sum * self.sum / n) / (n - 1.0)).max(0.0)
    }

    pub fn estimate(&self) -> Estimate {
        let mean = self.mean();
        let ci95 = (self.count >= 2).then(|| {
            let half = t975(self.count as f64 - 1.0) * (self.variance() / self.count as f64).sqrt();
            [mean - half, mean + half]
        });
        Estimate { count: self.count, mean, ci95 }
    }

    /// `self`'s mean minus `control`'s, with Welch's interval.
    pub fn minus(&self, control: &Summary) -> Option<Estimate> {
        if self.count < 2 || control.count < 2 {
            return None;
        }
        let (va, vb) = (self.variance() / self.count as f64, control.variance() / control.count as f64);
        let se2 = va + vb;
        let mean = self.mean() - control.mean();
        // Welch–Satterthwaite degrees of freedom; with no variance at all, the difference is exact.
        let df = if se2 > 0.0 {
            se2 * se2 / (va * va / (self.count as f64 - 1.0) + vb * vb / (control.count as f64 - 1.0))
        } else {
            f64::INFINITY
        };
        let half = t975(df) * se2.sqrt();
        Some(Estimate { count: self.count, mean, ci95: Some([mean - half, mean + half]) })
    }
}

/// Student's t distribution's 97.5th percentile for `df` degrees of freedom: a table to 30, then
/// the Cornish–Fisher expansion around the normal's 1.96 (within 0.001 from there on).
pub fn t975(df: f64) -> f64 {
    const TABLE: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
    ];
    if !df.is_finite() {
        return 1.959_964;
    }
    if df < 30.5 {
        let i = (df.round().max(1.0) as usize).min(30) - 1;
        return TABLE[i];
    }
    let z: f64 = 1.959_964;
    z + (z.powi(3) + z) / (4.0 * df) + (5.0 * z.powi(5) + 16.0 * z.powi(3) + 3.0 * z) / (96.0 * df * df)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mean_and_its_interval() {
        let mut s = Summary::default();
        for x in [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0] {
            s.add(x);
        }
        let e = s.estimate();
        assert_eq!(e.mean, 5.0);
        // sd = 2.138, se = 0.756, t(7) = 2.365
        let [lo, hi] = e.ci95.expect("interval");
        assert!((hi - lo - 2.0 * 2.365 * 0.7559).abs() < 0.01, "{lo} {hi}");
    }

    #[test]
    fn a_difference_excludes_zero_only_when_the_means_differ() {
        let (mut a, mut b, mut c) = (Summary::default(), Summary::default(), Summary::default());
        for i in 0..200 {
            let noise = (i % 10) as f64;
            a.add(10.0 + noise);
            b.add(12.0 + noise);
            c.add(10.0 + ((i + 3) % 10) as f64);
        }
        let [lo, _] = b.minus(&a).and_then(|d| d.ci95).expect("interval");
        assert!(lo > 0.0);
        let [lo, hi] = c.minus(&a).and_then(|d| d.ci95).expect("interval");
        assert!(lo < 0.0 && hi > 0.0);
    }

    #[test]
    fn t_quantiles_approach_the_normal() {
        assert!((t975(60.0) - 2.000).abs() < 0.002);
        assert!((t975(120.0) - 1.980).abs() < 0.002);
        assert!((t975(f64::INFINITY) - 1.96).abs() < 0.001);
    }
}
