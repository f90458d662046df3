//! Latency statistics from HDR histograms (a building block shared by analysis and by the live
//! progress lines of the producers, so it sits outside `analyze/`): bounded memory however long the run, microsecond
//! resolution, no cap on long durations (an 85 s "latency" must show as 85 s, not as a clipped max).

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
}

/// A growing summary of durations in seconds.
#[derive(Clone, Debug)]
pub struct Summary {
    hist: Histogram<u64>,
    /// Exact extremes: the histogram keeps 3 significant figures, the max must not be rounded.
    min: f64,
    max: f64,
    sum: f64,
}

impl Default for Summary {
    fn default() -> Self {
        Self {
            hist: Histogram::new(3).expect("3 significant figures is valid"),
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
        self.min = self.min.min(seconds);
        self.max = self.max.max(seconds);
        self.sum += seconds;
    }

    pub fn add(&mut self, other: &Summary) {
        let _ = self.hist.add(&other.hist);
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

    /// The exact shortest and longest durations recorded (None when empty).
    pub fn extremes(&self) -> Option<(f64, f64)> {
        (!self.hist.is_empty()).then_some((self.min, self.max))
    }

    pub fn latency(&self) -> Option<Latency> {
        if self.hist.is_empty() {
            return None;
        }
        let s = |us: u64| us as f64 / 1e6;
        Some(Latency {
            count: self.hist.len(),
            p50: s(self.hist.value_at_quantile(0.50)),
            p95: s(self.hist.value_at_quantile(0.95)),
            p99: s(self.hist.value_at_quantile(0.99)),
            mean: self.sum / self.hist.len() as f64,
            max: self.max,
            min: self.min,
        })
    }
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

    #[test]
    fn nothing_measured_is_none_not_zero() {
        assert!(latency_of([]).is_none());
    }
}
