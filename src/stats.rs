//! Latency statistics from HDR histograms (a building block shared by analysis and by the live
//! progress lines of the producers, so it sits outside `analyze/`): bounded memory however long the run, microsecond
//! resolution, no cap on long durations (an 85 s "latency" must show as 85 s, not as a clipped max).
//!
//! No figure that no request had: every percentile lies within the exact min..max. Up to
//! [`EXACT_UP_TO`] durations are kept as they were and their percentiles are exact (nearest rank);
//! beyond that the HDR histogram answers, clamped to min..max (its value at a quantile is a
//! bucket's highest equivalent value, which can exceed the longest duration recorded).

use hdrhistogram::Histogram;
use serde::Serialize;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Latency {
    pub count: u64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub mean: f64,
    pub max: f64,
    pub min: f64,
    /// The percentiles figured from fewer durations than they need (p50: 2, p95: 20, p99: 100):
    /// a p99 of 5 requests is their max, not a p99. Views show these as such.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub too_few_for: Vec<&'static str>,
}

/// Each percentile the summaries give, and how many durations it needs to mean its name: a pQ
/// needs 1 / (1 − Q) of them.
pub const NEEDS: [(&str, u64); 3] = [("p50", 2), ("p95", 20), ("p99", 100)];

/// Whether `count` durations are enough for the percentile `name` ("p50", "p95", "p99") to be
/// called that (see [`NEEDS`]).
pub fn enough(name: &str, count: u64) -> bool {
    NEEDS.iter().all(|(n, needs)| *n != name || count >= *needs)
}

impl Latency {
    /// Whether `name` ("p50", "p95", "p99") rests on enough durations to be called that.
    pub fn enough_for(&self, name: &str) -> bool {
        !self.too_few_for.contains(&name)
    }

    /// A percentile as a person reads it: its figure, or "(n=K)" when K durations are too few for
    /// it ("p99 of 1 request is not a p99").
    pub fn shown(&self, name: &str, figure: impl Fn(f64) -> String) -> String {
        let v = match name {
            "p50" => self.p50,
            "p95" => self.p95,
            "p99" => self.p99,
            _ => return "-".into(),
        };
        if self.enough_for(name) {
            figure(v)
        } else {
            format!("(n={})", self.count)
        }
    }
}

/// Up to this many durations a [`Summary`] keeps each one, and its percentiles are exact.
pub const EXACT_UP_TO: usize = 1024;

/// A growing summary of durations in seconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    hist: Histogram<u64>,
    /// Every duration recorded while there are at most [`EXACT_UP_TO`]; None once there are more
    /// (bounded memory: the histogram answers then).
    exact: Option<Vec<f64>>,
    /// Exact extremes: the histogram keeps 3 significant figures, the max must not be rounded.
    min: f64,
    max: f64,
    sum: f64,
}

impl Default for Summary {
    fn default() -> Self {
        Self {
            hist: Histogram::new(3).expect("3 significant figures is valid"),
            exact: Some(Vec::new()),
            min: f64::INFINITY,
            max: 0.0,
            sum: 0.0,
        }
    }
}

impl Summary {
    pub fn record(&mut self, seconds: f64) {
        let us = (seconds * 1e6).round().max(1.0) as u64;
        // Auto-resizing: any duration fits.
        let _ = self.hist.record(us);
        if let Some(v) = self.exact.as_mut() {
            if v.len() < EXACT_UP_TO {
                v.push(seconds);
            } else {
                self.exact = None;
            }
        }
        self.min = self.min.min(seconds);
        self.max = self.max.max(seconds);
        self.sum += seconds;
    }

    pub fn add(&mut self, other: &Summary) {
        let _ = self.hist.add(&other.hist);
        self.exact = match (self.exact.take(), &other.exact) {
            (Some(mut a), Some(b)) if a.len() + b.len() <= EXACT_UP_TO => {
                a.extend_from_slice(b);
                Some(a)
            }
            _ => None,
        };
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.sum += other.sum;
    }

    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    /// The recorded buckets in rising order: each bucket's lowest and highest value (seconds) and
    /// how many durations fell in it. Bounded by the histogram's resolution, never by the count.
    pub fn buckets(&self) -> impl Iterator<Item = (f64, f64, u64)> + '_ {
        self.hist.iter_recorded().map(|v| {
            let x = v.value_iterated_to();
            let lo = self.hist.lowest_equivalent(x) as f64 / 1e6;
            let hi = self.hist.highest_equivalent(x) as f64 / 1e6;
            (lo, hi, v.count_at_value())
        })
    }

    /// The distinct durations in rising order, each with how many requests took it: every one
    /// while they are kept exactly, else the histogram's buckets (each at its highest equivalent
    /// value, clamped to the exact min..max, as [`Summary::latency`] reads them). Bounded.
    pub fn ranked(&self) -> Vec<(f64, u64)> {
        match &self.exact {
            Some(v) if v.len() as u64 == self.count() => {
                let mut v = v.clone();
                v.sort_by(f64::total_cmp);
                let mut out: Vec<(f64, u64)> = Vec::new();
                for d in v {
                    match out.last_mut() {
                        Some((x, n)) if *x == d => *n += 1,
                        _ => out.push((d, 1)),
                    }
                }
                out
            }
            _ => self.binned(),
        }
    }

    /// The histogram's buckets in rising order (each at its highest equivalent value, unclamped)
    /// with their counts: the same resolution (3 significant figures) and the same value for a
    /// bucket in any two summaries, whatever their sizes, so a rank test over two of them ties
    /// alike.
    pub fn binned(&self) -> Vec<(f64, u64)> {
        let mut out: Vec<(f64, u64)> = Vec::new();
        for v in self.hist.iter_recorded() {
            let x = self.hist.highest_equivalent(v.value_iterated_to()) as f64 / 1e6;
            match out.last_mut() {
                Some((y, n)) if *y == x => *n += v.count_at_value(),
                _ => out.push((x, v.count_at_value())),
            }
        }
        out
    }

    /// The exact shortest and longest durations recorded (None when empty).
    pub fn extremes(&self) -> Option<(f64, f64)> {
        (!self.hist.is_empty()).then_some((self.min, self.max))
    }

    /// The figures: exact percentiles (nearest rank) while every duration is kept, else the
    /// histogram's, clamped to the exact min..max.
    pub fn latency(&self) -> Option<Latency> {
        if self.hist.is_empty() {
            return None;
        }
        let sorted = self.exact.as_ref().map(|v| {
            let mut v = v.clone();
            v.sort_by(f64::total_cmp);
            v
        });
        let at = |q: f64| match &sorted {
            Some(v) if !v.is_empty() => nearest_rank(v, q),
            // max then min, never clamp: no panic whatever was recorded.
            _ => (self.hist.value_at_quantile(q) as f64 / 1e6)
                .max(self.min)
                .min(self.max),
        };
        Some(Latency {
            count: self.hist.len(),
            p50: at(0.50),
            p95: at(0.95),
            p99: at(0.99),
            mean: self.sum / self.hist.len() as f64,
            max: self.max,
            min: self.min,
            too_few_for: NEEDS
                .iter()
                .map(|(name, _)| *name)
                .filter(|name| !enough(name, self.hist.len()))
                .collect(),
        })
    }
}

/// The nearest-rank percentile of sorted, non-empty `v`: the smallest value with at least `q` of
/// them at or below it (always one of them).
fn nearest_rank(v: &[f64], q: f64) -> f64 {
    // The epsilon keeps 0.95 × 20 = 19.000000000000004 at rank 19.
    let rank = ((q * v.len() as f64) - 1e-9).ceil().max(1.0) as usize;
    v[rank.min(v.len()) - 1]
}

pub fn latency_of(durations: impl IntoIterator<Item = f64>) -> Option<Latency> {
    let mut s = Summary::default();
    for d in durations {
        s.record(d);
    }
    s.latency()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_durations_are_not_clipped() {
        let l = latency_of([0.001, 0.002, 85.0]).unwrap();
        assert_eq!(l.max, 85.0, "{l:?}");
        assert_eq!(l.min, 0.001);
        assert_eq!(l.count, 3);
        assert!((l.p50 - 0.002).abs() < 0.0001);
    }

    fn within(l: &Latency) {
        for (name, p) in [("p50", l.p50), ("p95", l.p95), ("p99", l.p99)] {
            assert!(
                l.min <= p && p <= l.max,
                "{name} {p} outside {}..{}: {l:?}",
                l.min,
                l.max
            );
        }
        assert!(l.p50 <= l.p95 && l.p95 <= l.p99, "{l:?}");
    }

    #[test]
    fn one_request_is_its_own_every_percentile() {
        // The demo printed p50 1.001471, p99 1.001471 beside max 1.001189674.
        let l = latency_of([1.001189674]).unwrap();
        assert_eq!(
            (l.p50, l.p95, l.p99),
            (1.001189674, 1.001189674, 1.001189674)
        );
        assert_eq!((l.min, l.max, l.count), (1.001189674, 1.001189674, 1));
    }

    #[test]
    fn two_and_three_requests_are_exact_nearest_rank() {
        let l = latency_of([8.01, 4.002]).unwrap();
        assert_eq!((l.p50, l.p95, l.p99), (4.002, 8.01, 8.01), "{l:?}");
        let l = latency_of([0.0031, 8.013, 4.0021]).unwrap();
        assert_eq!((l.p50, l.p95, l.p99), (4.0021, 8.013, 8.013), "{l:?}");
        assert_eq!((l.min, l.max), (0.0031, 8.013));
        // Nearest rank: 19 of 20 at or below p95, not the 20th (0.95 × 20 in floating point).
        let l = latency_of((1..=20).map(|i| i as f64)).unwrap();
        assert_eq!((l.p50, l.p95, l.p99), (10.0, 19.0, 20.0), "{l:?}");
    }

    #[test]
    fn many_requests_take_the_histogram_clamped_to_the_exact_extremes() {
        // Past the exact store the histogram answers: its bucket's highest equivalent value for
        // 1.001189674 s is above it, and must not be printed.
        let d = 1.001189674;
        let n = EXACT_UP_TO as u64 + 1;
        let mut s = Summary::default();
        for _ in 0..n {
            s.record(d);
        }
        assert!(
            s.exact.is_none(),
            "bounded: no exact store past {EXACT_UP_TO}"
        );
        assert!(
            s.hist.value_at_quantile(0.99) as f64 / 1e6 > d,
            "the unclamped figure is above the max"
        );
        let l = s.latency().unwrap();
        assert_eq!(l.count, n);
        assert_eq!((l.p50, l.p99, l.max), (d, d, d), "{l:?}");
        // Up to the bound, every duration is kept.
        let mut s = Summary::default();
        for _ in 0..EXACT_UP_TO {
            s.record(d);
        }
        assert_eq!(s.exact.as_ref().map(Vec::len), Some(EXACT_UP_TO));
    }

    #[test]
    fn every_percentile_lies_within_min_and_max_at_any_count() {
        // A deterministic spread over five decades, at counts either side of the exact bound.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            1e-4 * 10f64.powf((x % 5_000) as f64 / 1_000.0)
        };
        for n in [1usize, 2, 3, 7, 100, EXACT_UP_TO, EXACT_UP_TO + 1, 5_000] {
            let v: Vec<f64> = (0..n).map(|_| next()).collect();
            within(&latency_of(v.iter().copied()).unwrap());
            // The same, folded from two halves.
            let (a, b) = v.split_at(n / 2);
            let mut s = Summary::default();
            let mut t = Summary::default();
            a.iter().for_each(|d| s.record(*d));
            b.iter().for_each(|d| t.record(*d));
            s.add(&t);
            let l = s.latency().unwrap();
            within(&l);
            let whole = latency_of(v.iter().copied()).unwrap();
            let figures = |l: &Latency| (l.count, l.p50, l.p95, l.p99, l.min, l.max);
            assert_eq!(figures(&l), figures(&whole), "n={n}");
        }
    }

    #[test]
    fn added_summaries_stay_exact_only_while_small() {
        let mut a = Summary::default();
        let mut b = Summary::default();
        a.record(0.002);
        b.record(0.004);
        b.record(0.003);
        a.add(&b);
        let l = a.latency().unwrap();
        assert_eq!((l.p50, l.p99, l.count), (0.003, 0.004, 3));
        let mut big = Summary::default();
        for _ in 0..EXACT_UP_TO {
            big.record(0.001);
        }
        a.add(&big);
        assert!(a.exact.is_none());
        within(&a.latency().unwrap());
    }

    #[test]
    fn nothing_measured_is_none_not_zero() {
        assert!(latency_of([]).is_none());
    }
}
