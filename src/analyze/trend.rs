//! Trend of a resource over a run: is memory flat, a healthy sawtooth, or growing?
//!
//! A soak's question about RSS, container memory and GPU memory is the same: "a flat or sawtooth
//! profile is healthy; monotonic growth is investigated". [`classify`] answers it for any series of
//! `(t_s, value)` and keeps the figures that decided it, so a reader can check the call.
//!
//! How it decides, in order:
//! - **noise** is estimated from successive differences (robust median absolute deviation), which a
//!   steady trend does not inflate; a drop counts only when it clears 8 times the noise and 2 % of
//!   the series' level, so random jitter never makes a sawtooth.
//! - **growth** is net growth that is still going on: the last third's median sits above the first
//!   third's by more than the tolerance (2 % of the level, and 3 times the noise), and the last
//!   third itself still rises by half that (least squares). A series that grew while caches warmed,
//!   or stepped up once when a model loaded, and then levelled off is not growth. When the series drops back repeatedly, the floors it drops to are compared
//!   instead, so a leak under a garbage collector's sawtooth is still growth.
//! - **sawtooth**: at least two significant drops and no growth.
//! - **flat**: anything else (including a series that shrinks).

use serde::Serialize;

/// Fewer readings than this say nothing about a trend.
pub const MIN_SAMPLES: usize = 6;
/// Net growth below this fraction of the series' level is noise, not a trend.
pub const REL_TOLERANCE: f64 = 0.02;
/// A drop must clear this many noise units to count.
const DROP_NOISE_UNITS: f64 = 8.0;
/// Growth must clear this many noise units to count.
const GROWTH_NOISE_UNITS: f64 = 3.0;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TrendClass {
    Flat,
    Sawtooth,
    Growth,
    TooFewSamples,
}

impl std::fmt::Display for TrendClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TrendClass::Flat => "flat",
            TrendClass::Sawtooth => "sawtooth",
            TrendClass::Growth => "growth",
            TrendClass::TooFewSamples => "too few samples",
        })
    }
}

/// The verdict on one series, with the figures that decided it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Trend {
    pub class: TrendClass,
    /// Least-squares slope, units per second.
    pub slope_per_s: f64,
    pub samples: usize,
    /// Seconds from the first reading to the last.
    pub span_s: f64,
    /// Median of the first, middle and last thirds of the readings.
    pub first_third_median: f64,
    pub middle_third_median: f64,
    pub last_third_median: f64,
    /// Least-squares slope over the last third alone: is it still growing at the end?
    pub last_third_slope_per_s: f64,
    /// (last third − first third) / level; for a sawtooth, (last floor − first floor) / level.
    pub relative_growth: f64,
    /// Drops that cleared the drop threshold.
    pub significant_drops: u32,
    /// One reading's noise, estimated from successive differences.
    pub noise: f64,
    /// The level the relative figures are taken against: the median of |value|.
    pub level: f64,
    /// One sentence: why this class.
    pub detail: String,
}

/// Classifies a series of `(t_s, value)`, in time order.
pub fn classify(samples: &[(f64, f64)]) -> Trend {
    let n = samples.len();
    let values: Vec<f64> = samples.iter().map(|s| s.1).collect();
    let span_s = match (samples.first(), samples.last()) {
        (Some(a), Some(b)) => b.0 - a.0,
        _ => 0.0,
    };
    let mut t = Trend {
        class: TrendClass::TooFewSamples,
        slope_per_s: slope(samples),
        samples: n,
        span_s,
        first_third_median: 0.0,
        middle_third_median: 0.0,
        last_third_median: 0.0,
        last_third_slope_per_s: 0.0,
        relative_growth: 0.0,
        significant_drops: 0,
        noise: 0.0,
        level: median(&values.iter().map(|v| v.abs()).collect::<Vec<_>>()),
        detail: String::new(),
    };
    if n < MIN_SAMPLES || span_s <= 0.0 || values.iter().any(|v| !v.is_finite()) {
        t.detail = format!(
            "{n} readings over {span_s:.1}s: at least {MIN_SAMPLES} finite readings over some time are needed"
        );
        return t;
    }
    let third = n / 3;
    t.first_third_median = median(&values[..third]);
    t.middle_third_median = median(&values[third..n - third]);
    t.last_third_median = median(&values[n - third..]);
    t.noise = noise(&values);

    // Relative figures need a level; a series of zeros (no GPU memory held) has none, and then any
    // change is measured against the smallest unit that can matter.
    let scale = if t.level > 0.0 { t.level } else { 1.0 };
    let drop_threshold = (DROP_NOISE_UNITS * t.noise).max(REL_TOLERANCE * scale);
    let tolerance = (GROWTH_NOISE_UNITS * t.noise).max(REL_TOLERANCE * scale);
    let (drops, floors) = drawdowns(&values, drop_threshold);
    t.significant_drops = drops;

    if drops >= 2 {
        let first = floors[0];
        let last = *floors.last().unwrap_or(&first);
        t.relative_growth = (last - first) / scale;
        if last - first > tolerance
            && floors.windows(2).filter(|w| w[1] > w[0]).count() * 2 >= floors.len() - 1
        {
            t.class = TrendClass::Growth;
            t.detail = format!(
                "drops back {drops} times, but each floor is higher: from {} to {} (+{:.1}% of the level)",
                num(first),
                num(last),
                t.relative_growth * 100.0
            );
        } else {
            t.class = TrendClass::Sawtooth;
            t.detail = format!(
                "grows and drops back {drops} times; the floors stay within {:.1}% of the level",
                (t.relative_growth.abs().max(0.0)) * 100.0
            );
        }
        return t;
    }

    let net = t.last_third_median - t.first_third_median;
    t.relative_growth = net / scale;
    // Growth that is still going on shows within the last third itself; comparing the last third
    // with the middle one would call a single step (a model loaded halfway through) a leak.
    let tail = &samples[n - third..];
    t.last_third_slope_per_s = slope(tail);
    let tail_rise = t.last_third_slope_per_s * (tail[tail.len() - 1].0 - tail[0].0);
    let still_growing = tail_rise > tolerance / 2.0;
    if net > tolerance && still_growing && t.slope_per_s > 0.0 {
        t.class = TrendClass::Growth;
        t.detail = format!(
            "grew from {} to {} (+{:.1}% of the level, {}/s) and was still growing at the end",
            num(t.first_third_median),
            num(t.last_third_median),
            t.relative_growth * 100.0,
            num(t.slope_per_s)
        );
    } else if net > tolerance {
        t.class = TrendClass::Flat;
        t.detail = format!(
            "grew {:.1}%, then levelled off (the last third rose {:.1}% of the level)",
            t.relative_growth * 100.0,
            tail_rise / scale * 100.0
        );
    } else if net < -tolerance {
        t.class = TrendClass::Flat;
        t.detail = format!(
            "no growth: shrank from {} to {} ({:+.1}% of the level)",
            num(t.first_third_median),
            num(t.last_third_median),
            t.relative_growth * 100.0
        );
    } else {
        t.class = TrendClass::Flat;
        t.detail = format!(
            "no net growth beyond noise ({:+.1}% of the level, tolerance {:.1}%)",
            t.relative_growth * 100.0,
            tolerance / scale * 100.0
        );
    }
    t
}

/// Counts drawdowns of at least `threshold` from a running peak, and returns the floors: the
/// minimum before the first drawdown, then the lowest point of each drawdown.
fn drawdowns(values: &[f64], threshold: f64) -> (u32, Vec<f64>) {
    let mut drops = 0;
    let mut floors = Vec::new();
    let mut peak = values[0];
    let mut floor_before = values[0];
    let mut trough: Option<f64> = None;
    for &v in values {
        match trough {
            None => {
                if v < floor_before && drops == 0 {
                    floor_before = v;
                }
                if peak - v >= threshold {
                    drops += 1;
                    if floors.is_empty() {
                        floors.push(floor_before);
                    }
                    trough = Some(v);
                } else if v > peak {
                    peak = v;
                }
            }
            Some(low) => {
                if v < low {
                    trough = Some(v);
                } else if v - low >= threshold {
                    // Recovered: the drawdown is over, its floor is known, a new climb begins.
                    floors.push(low);
                    trough = None;
                    peak = v;
                }
            }
        }
    }
    if let Some(low) = trough {
        floors.push(low);
    }
    (drops, floors)
}

/// One reading's noise: the robust spread of successive differences, divided by √2 (a difference
/// of two noisy readings carries the noise twice).
fn noise(values: &[f64]) -> f64 {
    let diffs: Vec<f64> = values.windows(2).map(|w| w[1] - w[0]).collect();
    let m = median(&diffs);
    let dev: Vec<f64> = diffs.iter().map(|d| (d - m).abs()).collect();
    1.4826 * median(&dev) / std::f64::consts::SQRT_2
}

fn slope(samples: &[(f64, f64)]) -> f64 {
    let n = samples.len() as f64;
    if samples.len() < 2 {
        return 0.0;
    }
    let mt = samples.iter().map(|s| s.0).sum::<f64>() / n;
    let mv = samples.iter().map(|s| s.1).sum::<f64>() / n;
    let (mut num, mut den) = (0.0, 0.0);
    for (t, v) in samples {
        num += (t - mt) * (v - mv);
        den += (t - mt) * (t - mt);
    }
    if den > 0.0 {
        num / den
    } else {
        0.0
    }
}

/// Median of a slice (0 for an empty one).
pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

/// Figures in details: plain, with three significant digits' worth of precision.
fn num(x: f64) -> String {
    let a = x.abs();
    if a >= 1e9 {
        format!("{:.2}G", x / 1e9)
    } else if a >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if a >= 1e3 {
        format!("{:.2}k", x / 1e3)
    } else {
        format!("{x:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic noise source, so the tests never flake.
    fn jitter(seed: &mut u64) -> f64 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        (*seed % 2001) as f64 / 1000.0 - 1.0
    }

    fn series(n: usize, f: impl Fn(usize) -> f64) -> Vec<(f64, f64)> {
        (0..n).map(|i| (i as f64, f(i))).collect()
    }

    const MB: f64 = 1e6;

    #[test]
    fn flat_memory_with_noise_is_flat() {
        let mut s = 7u64;
        let v: Vec<f64> = (0..300)
            .map(|_| 200.0 * MB + 1.5 * MB * jitter(&mut s))
            .collect();
        let t = classify(&series(300, |i| v[i]));
        assert_eq!(t.class, TrendClass::Flat, "{t:?}");
        assert_eq!(t.significant_drops, 0);
        assert!(t.relative_growth.abs() < REL_TOLERANCE, "{t:?}");
    }

    #[test]
    fn a_sawtooth_that_drops_back_to_the_same_floor_is_sawtooth() {
        // A GC heap: climbs 2 MB a second for 30 s, collected back to 100 MB, five times over.
        let t = classify(&series(150, |i| 100.0 * MB + (i % 30) as f64 * 2.0 * MB));
        assert_eq!(t.class, TrendClass::Sawtooth, "{t:?}");
        assert_eq!(t.significant_drops, 4);
        assert!(t.detail.contains("drops back 4 times"), "{}", t.detail);
    }

    #[test]
    fn a_sawtooth_with_noise_is_still_sawtooth() {
        let mut s = 11u64;
        let noisy: Vec<f64> = (0..200)
            .map(|i| 100.0 * MB + (i % 40) as f64 * MB + 0.3 * MB * jitter(&mut s))
            .collect();
        let t = classify(&series(200, |i| noisy[i]));
        assert_eq!(t.class, TrendClass::Sawtooth, "{t:?}");
        assert_eq!(t.significant_drops, 4);
    }

    #[test]
    fn a_linear_leak_is_growth_with_its_slope() {
        let t = classify(&series(120, |i| 50.0 * MB + i as f64 * 0.5 * MB));
        assert_eq!(t.class, TrendClass::Growth, "{t:?}");
        assert!((t.slope_per_s - 0.5 * MB).abs() < 1.0, "{}", t.slope_per_s);
        assert!(t.detail.contains("still growing"), "{}", t.detail);
    }

    #[test]
    fn a_leak_under_noise_is_growth() {
        let mut s = 3u64;
        let v: Vec<f64> = (0..600)
            .map(|i| 400.0 * MB + i as f64 * 0.05 * MB + 4.0 * MB * jitter(&mut s))
            .collect();
        let t = classify(&series(600, |i| v[i]));
        assert_eq!(t.class, TrendClass::Growth, "{t:?}");
        assert!(
            t.slope_per_s > 0.04 * MB && t.slope_per_s < 0.06 * MB,
            "{t:?}"
        );
    }

    #[test]
    fn a_leak_under_a_sawtooth_is_growth() {
        // Each collection leaves 3 MB more behind.
        let t = classify(&series(200, |i| {
            100.0 * MB + (i / 40) as f64 * 3.0 * MB + (i % 40) as f64 * MB
        }));
        assert_eq!(t.class, TrendClass::Growth, "{t:?}");
        assert!(t.significant_drops >= 2);
        assert!(t.detail.contains("each floor is higher"), "{}", t.detail);
    }

    #[test]
    fn warming_up_then_levelling_off_is_not_growth() {
        let t = classify(&series(300, |i| 100.0 * MB + (i.min(60) as f64) * 0.5 * MB));
        assert_eq!(t.class, TrendClass::Flat, "{t:?}");
        assert!(t.detail.contains("levelled off"), "{}", t.detail);
    }

    #[test]
    fn one_step_up_halfway_is_not_growth() {
        // A model loaded into GPU memory halfway through the run: a step, then flat.
        let t = classify(&series(100, |i| if i < 50 { 2e9 } else { 18e9 }));
        assert_eq!(t.class, TrendClass::Flat, "{t:?}");
        assert!(t.detail.contains("levelled off"), "{}", t.detail);
    }

    #[test]
    fn too_few_samples_say_so() {
        let t = classify(&series(4, |i| i as f64 * MB));
        assert_eq!(t.class, TrendClass::TooFewSamples);
        assert!(t.detail.contains("at least 6"), "{}", t.detail);
        assert_eq!(classify(&[]).class, TrendClass::TooFewSamples);
    }

    #[test]
    fn a_series_of_zeros_is_flat() {
        let t = classify(&series(20, |_| 0.0));
        assert_eq!(t.class, TrendClass::Flat, "{t:?}");
    }

    #[test]
    fn one_release_is_not_a_sawtooth() {
        let t = classify(&series(
            60,
            |i| if i < 30 { 300.0 * MB } else { 200.0 * MB },
        ));
        assert_eq!(t.class, TrendClass::Flat, "{t:?}");
        assert_eq!(t.significant_drops, 1);
    }
}
