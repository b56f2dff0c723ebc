//! Chart axes: nice round ticks over a linear range, 1-2-5 ticks over a logarithmic one.

/// An axis: its range, whether it is logarithmic, its labelled ticks and its unlabelled (minor) ones.
pub(super) struct Axis {
    pub(super) min: f64,
    pub(super) max: f64,
    pub(super) log: bool,
    pub(super) ticks: Vec<(f64, String)>,
    pub(super) minor: Vec<f64>,
}

impl Axis {
    /// Position of `v` along the axis, 0.0 at `min` and 1.0 at `max`.
    pub(super) fn frac(&self, v: f64) -> f64 {
        if self.log {
            (v.log10() - self.min.log10()) / (self.max.log10() - self.min.log10())
        } else {
            (v - self.min) / (self.max - self.min)
        }
    }
}

fn nice_step(raw: f64) -> f64 {
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let nice = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 2.5 {
        2.5
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

/// Formats a tick value with as many decimals as `step` needs, in thousands/millions when `step` is large.
fn fmt_num(v: f64, step: f64) -> String {
    let (scale, suffix) = if step >= 1e6 {
        (1e6, "M")
    } else if step >= 1e3 {
        (1e3, "k")
    } else {
        (1.0, "")
    };
    let (v, step) = (v / scale, step / scale);
    if v.abs() < step * 1e-6 {
        return "0".to_owned();
    }
    let decimals = (1.0 - step.log10().floor()).clamp(0.0, 9.0) as usize;
    let mut s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.truncate(s.trim_end_matches('0').trim_end_matches('.').len());
    }
    s + suffix
}

/// A linear axis over nice round ticks covering `lo..=hi`; `headroom` leaves a little space above the top tick.
pub(super) fn linear_axis(lo: f64, hi: f64, headroom: bool) -> Axis {
    let (mut lo, mut hi) = (lo, hi);
    if hi - lo <= f64::EPSILON * hi.abs().max(1.0) {
        let pad = (lo.abs() * 0.1).max(1.0);
        hi = lo + pad;
        lo = if lo >= 0.0 && lo - pad < 0.0 { 0.0 } else { lo - pad };
    }
    let step = nice_step((hi - lo) / 6.0);
    let (min, max) = ((lo / step).floor() * step, (hi / step).ceil() * step);
    let n = ((max - min) / step).round() as i64;
    let ticks = (0..=n).map(|i| min + i as f64 * step).map(|v| (v, fmt_num(v, step))).collect();
    let max = if headroom { max + (max - min) * 0.04 } else { max };
    Axis { min, max, log: false, ticks, minor: Vec::new() }
}

/// A log axis from the 1-2-5 value at or below `lo` to the one at or above `hi`; decades are labelled,
/// and so are the 2s and 5s when the axis spans about two decades or less.
pub(super) fn log_axis(lo: f64, hi: f64) -> Axis {
    let decade = |v: f64| 10f64.powi(v.log10().floor() as i32);
    let snap_down = |v: f64| [5.0, 2.0, 1.0].into_iter().map(|m| m * decade(v)).find(|&c| c <= v * (1.0 + 1e-9));
    let snap_up = |v: f64| [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * decade(v)).find(|&c| c >= v * (1.0 - 1e-9));
    let min = snap_down(lo).unwrap_or(lo);
    let mut max = snap_up(hi).unwrap_or(hi);
    if max <= min * (1.0 + 1e-9) {
        max = snap_up(min * 1.001).unwrap_or(min * 10.0);
    }
    let label_25 = (max / min).log10() <= 2.2;
    let (first, last) = (min.log10().floor() as i32, max.log10().ceil() as i32);
    let (mut ticks, mut minor) = (Vec::new(), Vec::new());
    for e in first..=last.min(first + 40) {
        let d = 10f64.powi(e);
        for m in 1..10 {
            let v = f64::from(m) * d;
            if v < min * (1.0 - 1e-9) || v > max * (1.0 + 1e-9) {
                continue;
            }
            if m == 1 || (label_25 && (m == 2 || m == 5)) {
                ticks.push((v, fmt_num(v, d)));
            } else {
                minor.push(v);
            }
        }
    }
    Axis { min, max, log: true, ticks, minor }
}
