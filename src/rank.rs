//! Whether two runs' durations differ by more than noise: a rank test over every recorded duration
//! and an interval for each percentile, both read from bounded [`Summary`]s (their exact values, or
//! their HDR buckets), never from a list that grows with the requests. A building block of
//! `witness compare` ([`crate::analyze::compare`]).
//!
//! - The Mann–Whitney U test (the Wilcoxon rank-sum test), two-sided, normal approximation with the
//!   tie correction and a continuity correction, as `scipy.stats.mannwhitneyu(method="asymptotic")`
//!   computes it — over the histograms' buckets, so a million durations cost what a thousand do.
//!   Both sides are read at the same resolution (3 significant figures), so equal durations tie alike
//!   whatever the sizes of the two runs.
//! - A distribution-free confidence interval for a percentile: the order statistics whose ranks
//!   bracket n·q by z·√(n·q·(1−q)) (the binomial's normal approximation). Where the upper rank
//!   passes the count, the interval is open above: the run had too few requests to bound it.

use serde::Serialize;

use crate::stats::Summary;

/// The test's name, as every view gives it.
pub const TEST: &str = "Mann–Whitney U (two-sided, normal approximation, ties corrected)";

/// The z of a two-sided 95 % interval.
pub const Z95: f64 = 1.959_963_984_540_054;

/// A rank test of CURRENT's durations against BASE's.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RankTest {
    pub n_base: u64,
    pub n_current: u64,
    /// U of CURRENT: how many (base, current) pairs have the current one longer, ties half.
    pub u: f64,
    pub z: f64,
    /// Two-sided: how likely a difference at least this large is when both runs draw from one
    /// distribution.
    pub p_value: f64,
    /// U ÷ (n_base · n_current): the chance that a request of CURRENT took longer than one of
    /// BASE (ties half). 0.5 is no change.
    pub p_longer: f64,
}

/// Mann–Whitney U over two summaries' durations (their HDR buckets: see the module's words).
/// None when either side has no durations.
pub fn mann_whitney(base: &Summary, current: &Summary) -> Option<RankTest> {
    mann_whitney_counts(&base.binned(), &current.binned())
}

/// The same test over two lists of (duration, count), each in rising order of duration.
pub fn mann_whitney_counts(base: &[(f64, u64)], current: &[(f64, u64)]) -> Option<RankTest> {
    let na: u64 = base.iter().map(|(_, n)| n).sum();
    let nb: u64 = current.iter().map(|(_, n)| n).sum();
    if na == 0 || nb == 0 {
        return None;
    }
    let (mut i, mut j) = (0usize, 0usize);
    // Ranks below the tie group now read, the rank sum of CURRENT, and Σ(t³ − t) over ties.
    let mut below = 0f64;
    let mut rank_sum = 0f64;
    let mut ties = 0f64;
    while i < base.len() || j < current.len() {
        let x = match (base.get(i), current.get(j)) {
            (Some(a), Some(b)) => a.0.min(b.0),
            (Some(a), None) => a.0,
            (None, Some(b)) => b.0,
            (None, None) => break,
        };
        let mut ca = 0u64;
        let mut cb = 0u64;
        if base.get(i).is_some_and(|a| a.0 == x) {
            ca = base[i].1;
            i += 1;
        }
        if current.get(j).is_some_and(|b| b.0 == x) {
            cb = current[j].1;
            j += 1;
        }
        let t = (ca + cb) as f64;
        let mid = below + (t + 1.0) / 2.0;
        rank_sum += cb as f64 * mid;
        ties += t * t * t - t;
        below += t;
    }
    let (fa, fb) = (na as f64, nb as f64);
    let n = fa + fb;
    let u = rank_sum - fb * (fb + 1.0) / 2.0;
    let mean = fa * fb / 2.0;
    let var = if n > 1.0 {
        fa * fb / 12.0 * ((n + 1.0) - ties / (n * (n - 1.0)))
    } else {
        0.0
    };
    let (z, p_value) = if var <= 0.0 {
        // Every duration the same: nothing to tell apart.
        (0.0, 1.0)
    } else {
        let d = u - mean;
        // The continuity correction, toward the mean.
        let d = if d.abs() <= 0.5 {
            0.0
        } else {
            d - 0.5 * d.signum()
        };
        let z = d / var.sqrt();
        (z, erfc(z.abs() / std::f64::consts::SQRT_2).min(1.0))
    };
    Some(RankTest {
        n_base: na,
        n_current: nb,
        u,
        z,
        p_value,
        p_longer: u / (fa * fb),
    })
}

/// A percentile and the interval around it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Interval {
    /// The percentile as every view shows it (the summary's own figure).
    pub value: f64,
    pub low: f64,
    pub high: f64,
    /// The upper rank passed the count: `high` is the longest duration, and the true percentile
    /// may be above it.
    pub open_above: bool,
    /// The lower rank fell below 1: `low` is the shortest duration.
    pub open_below: bool,
}

/// The 95 % distribution-free interval of the `q` quantile of `s` around `value` (the figure the
/// views print). None when `s` is empty.
pub fn quantile_interval(s: &Summary, q: f64, value: f64) -> Option<Interval> {
    let ranked = s.ranked();
    let n: u64 = ranked.iter().map(|(_, c)| c).sum();
    if n == 0 {
        return None;
    }
    let nf = n as f64;
    let half = Z95 * (nf * q * (1.0 - q)).sqrt();
    let lo_rank = (nf * q - half).floor();
    let hi_rank = (nf * q + half).ceil() + 1.0;
    let open_below = lo_rank < 1.0;
    let open_above = hi_rank > nf;
    let at = |rank: f64| -> f64 {
        let rank = rank.clamp(1.0, nf) as u64;
        let mut seen = 0u64;
        for (x, c) in &ranked {
            seen += c;
            if seen >= rank {
                return *x;
            }
        }
        ranked.last().map(|(x, _)| *x).unwrap_or(value)
    };
    Some(Interval {
        value,
        low: at(lo_rank).min(value),
        high: at(hi_rank).max(value),
        open_above,
        open_below,
    })
}

/// Two failure rates (failed of sent) compared: Fisher's exact test, two-sided (statrs's), so a
/// handful of failures is judged as exactly as thousands. None when either side sent nothing; 1
/// when neither failed.
pub fn proportions(failed_a: u64, of_a: u64, failed_b: u64, of_b: u64) -> Option<f64> {
    if of_a == 0 || of_b == 0 {
        return None;
    }
    let table = [
        failed_a,
        of_a.saturating_sub(failed_a),
        failed_b,
        of_b.saturating_sub(failed_b),
    ];
    statrs::stats_tests::fishers_exact(&table, statrs::stats_tests::Alternative::TwoSided)
        .ok()
        .map(|p| p.clamp(0.0, 1.0))
}

/// The name of the test on failure rates, as every view gives it.
pub const RATE_TEST: &str = "Fisher's exact test (two-sided)";

/// The complementary error function (statrs's: accurate in the far tail, where p-values live).
fn erfc(x: f64) -> f64 {
    statrs::function::erf::erfc(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(v: &[f64]) -> Summary {
        let mut s = Summary::default();
        v.iter().for_each(|d| s.record(*d));
        s
    }

    /// R's `wilcox.test(1:5, 6:10, exact = FALSE)` (and scipy's asymptotic mannwhitneyu): U = 25
    /// for the second sample, p = 0.01219.
    #[test]
    fn a_clear_shift_matches_scipy() {
        let a = summary(&[0.001, 0.002, 0.003, 0.004, 0.005]);
        let b = summary(&[0.006, 0.007, 0.008, 0.009, 0.010]);
        let t = mann_whitney(&a, &b).unwrap();
        assert_eq!(t.u, 25.0);
        assert!((t.p_value - 0.012_186).abs() < 1e-5, "{t:?}");
        assert_eq!(t.p_longer, 1.0);
        // And the other way round.
        let t = mann_whitney(&b, &a).unwrap();
        assert_eq!(t.u, 0.0);
        assert!((t.p_value - 0.012_186).abs() < 1e-5, "{t:?}");
    }

    /// With ties: `wilcox.test(c(1,2,2,3,3,3), c(2,3,3,4,4,5), exact = FALSE)`: W = 7 for the first,
    /// so U = 36 − 7 = 29 for the second, p = 0.0784 (tie-corrected, continuity-corrected).
    #[test]
    fn ties_are_corrected_as_scipy_does() {
        let a = summary(&[0.001, 0.002, 0.002, 0.003, 0.003, 0.003]);
        let b = summary(&[0.002, 0.003, 0.003, 0.004, 0.004, 0.005]);
        let t = mann_whitney(&a, &b).unwrap();
        assert_eq!(t.u, 29.0, "{t:?}");
        assert!((t.p_value - 0.078_40).abs() < 1e-4, "{t:?}");
    }

    #[test]
    fn the_same_durations_are_no_difference_at_any_count() {
        let v: Vec<f64> = (0..5000).map(|i| 0.010 + (i % 97) as f64 * 1e-5).collect();
        let a = summary(&v);
        let b = summary(&v);
        let t = mann_whitney(&a, &b).unwrap();
        assert_eq!(t.p_value, 1.0, "{t:?}");
        assert_eq!(t.p_longer, 0.5);
        let one = summary(&[0.02; 10]);
        assert_eq!(mann_whitney(&one, &one).unwrap().p_value, 1.0);
    }

    #[test]
    fn a_thirty_percent_slower_run_of_thousands_is_found_past_the_exact_store() {
        let v: Vec<f64> = (0..3000).map(|i| 0.020 + (i % 113) as f64 * 2e-5).collect();
        let a = summary(&v);
        let b = summary(&v.iter().map(|d| d * 1.3).collect::<Vec<_>>());
        let t = mann_whitney(&a, &b).unwrap();
        assert!(t.p_value < 1e-10, "{t:?}");
        assert!(t.p_longer > 0.99, "{t:?}");
    }

    #[test]
    fn a_percentile_s_interval_brackets_it_and_opens_where_the_requests_run_out() {
        let v: Vec<f64> = (1..=1000).map(|i| i as f64 / 1000.0).collect();
        let s = summary(&v);
        let l = s.latency().unwrap();
        let i = quantile_interval(&s, 0.5, l.p50).unwrap();
        // n·q = 500 ± 1.96·√250 = 31: ranks 469 and 532.
        assert_eq!((i.low, i.high), (0.469, 0.532), "{i:?}");
        assert!(!i.open_above && !i.open_below);
        let i = quantile_interval(&s, 0.99, l.p99).unwrap();
        assert!(i.low < l.p99 && l.p99 < i.high, "{i:?}");
        // 100 durations: the p99's upper rank is past the 100th.
        let s = summary(&v[..100]);
        let i = quantile_interval(&s, 0.99, s.latency().unwrap().p99).unwrap();
        assert!(i.open_above, "{i:?}");
        assert_eq!(i.high, 0.1);
    }

    #[test]
    fn error_rates_differ_only_past_noise() {
        assert_eq!(proportions(0, 500, 0, 500), Some(1.0));
        assert!(proportions(1, 500, 2, 500).unwrap() > 0.5);
        assert!(proportions(0, 800, 60, 800).unwrap() < 1e-6);
        // R: fisher.test(matrix(c(0, 40, 4, 36), 2))$p.value = 0.1156.
        assert!((proportions(0, 40, 4, 40).unwrap() - 0.115_6).abs() < 1e-3);
        assert_eq!(proportions(0, 0, 1, 5), None);
    }
}
