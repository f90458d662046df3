//! Which level runs next: the levels given, in order, or (`--find-limit`) the probes of a search
//! for the highest level that passes: double from the lowest given level until one fails, then
//! bisect between the last pass and the first fail until they are within the resolution, within a
//! budget of levels. A level that ends with the server dead, restarted or skipped ends the search:
//! what it found is then said as that, never as a limit (analysis reads the limit from the
//! journal's levels; this only chooses them).

use std::collections::VecDeque;

/// One level to run: a concurrency (closed loop) or an arrival rate (open loop, whose
/// concurrency is the in-flight cap).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Step {
    Workers(u32),
    Rate(f64),
}

/// The search's state: pure, so its choices are unit-tested without a server.
#[derive(Clone, Debug)]
pub struct Search {
    /// Concurrency levels are whole numbers; rates are not.
    whole: bool,
    resolution: f64,
    max_levels: u32,
    ceiling: f64,
    ran: u32,
    pass: Option<f64>,
    fail: Option<f64>,
}

impl Search {
    pub fn new(whole: bool, resolution: f64, max_levels: u32, ceiling: f64) -> Self {
        Self {
            whole,
            resolution,
            max_levels,
            ceiling,
            ran: 0,
            pass: None,
            fail: None,
        }
    }

    /// The level just run at `value` passed or not: the next value to try, or None when the search
    /// is done (within the resolution, out of levels, at the ceiling, or failing from the start).
    pub fn after(&mut self, value: f64, passed: bool) -> Option<f64> {
        self.ran += 1;
        if passed {
            self.pass = Some(self.pass.map_or(value, |p| p.max(value)));
        } else {
            self.fail = Some(self.fail.map_or(value, |f| f.min(value)));
        }
        if self.ran >= self.max_levels {
            return None;
        }
        match (self.pass, self.fail) {
            (Some(p), None) => {
                if p >= self.ceiling {
                    return None;
                }
                let next = if self.whole {
                    (p * 2.0).round()
                } else {
                    p * 2.0
                };
                Some(next.min(self.ceiling))
            }
            (Some(p), Some(f)) if p < f => {
                if (f - p) / p <= self.resolution + 1e-9 {
                    return None;
                }
                let mid = if self.whole {
                    ((p + f) / 2.0).floor()
                } else {
                    // Three significant figures: a rate of 137/s, not 137.109375/s.
                    let m = (p + f) / 2.0;
                    let scale = 10f64.powi(2 - m.log10().floor() as i32);
                    (m * scale).round() / scale
                };
                (mid > p && mid < f).then_some(mid)
            }
            // Failing from the first level (nothing passed), or a pass above a fail (noise): done.
            _ => None,
        }
    }
}

/// The levels of a run, given or searched.
pub struct Plan {
    given: VecDeque<Step>,
    search: Option<Search>,
    next: Option<Step>,
    /// With --rates: the in-flight cap, each rate level's concurrency.
    cap: u32,
}

impl Plan {
    /// `levels` or `rates` (whichever was given; rates win), and with `search` the search's
    /// resolution and level budget: the search starts from the lowest given level.
    pub fn new(levels: &[u32], rates: &[f64], cap: u32, search: Option<(f64, u32)>) -> Self {
        let given: VecDeque<Step> = if rates.is_empty() {
            levels.iter().map(|&n| Step::Workers(n)).collect()
        } else {
            rates.iter().map(|&r| Step::Rate(r)).collect()
        };
        match search {
            None => Self {
                given,
                search: None,
                next: None,
                cap,
            },
            Some((resolution, max_levels)) => {
                let lowest = given
                    .iter()
                    .copied()
                    .min_by(|a, b| value(*a).total_cmp(&value(*b)));
                let whole = rates.is_empty();
                let ceiling = if whole {
                    crate::units::MAX_CONCURRENCY as f64
                } else {
                    crate::units::MAX_RATE
                };
                Self {
                    given: VecDeque::new(),
                    search: Some(Search::new(whole, resolution, max_levels, ceiling)),
                    next: lowest,
                    cap,
                }
            }
        }
    }

    /// The next level to run and its concurrency and rate, or None when the run is done.
    pub fn next_level(&mut self) -> Option<(u32, Option<f64>)> {
        let step = match self.search {
            Some(_) => self.next?,
            None => self.given.pop_front()?,
        };
        Some(match step {
            Step::Workers(n) => (n, None),
            Step::Rate(r) => (self.cap, Some(r)),
        })
    }

    /// The lowest concurrency among the given closed-loop levels still to run (None in a search,
    /// whose next level depends on the last, and with rates): the cliff rule's base may come from it.
    pub fn workers_to_come(&self) -> Option<u32> {
        self.given
            .iter()
            .filter_map(|s| match s {
                Step::Workers(n) => Some(*n),
                Step::Rate(_) => None,
            })
            .min()
    }

    /// Whether given levels are still to run (a search's next level depends on the last).
    pub fn levels_to_come(&self) -> bool {
        !self.given.is_empty()
    }

    /// How the level just run went: `ended` (the server died, restarted, or the level was
    /// skipped or stopped) ends a search; otherwise whether it passed chooses the next probe.
    pub fn after(&mut self, concurrency: u32, rate: Option<f64>, passed: bool, ended: bool) {
        let Some(search) = self.search.as_mut() else {
            return;
        };
        let v = rate.unwrap_or(concurrency as f64);
        self.next = if ended {
            None
        } else {
            search.after(v, passed).map(|n| match rate {
                Some(_) => Step::Rate(n),
                None => Step::Workers(n as u32),
            })
        };
    }
}

pub use crate::journal::level_name;

fn value(s: Step) -> f64 {
    match s {
        Step::Workers(n) => n as f64,
        Step::Rate(r) => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lowest_given_level_still_to_run_is_known_and_none_in_a_search() {
        let mut p = Plan::new(&[16, 4, 1], &[], 0, None);
        assert_eq!(p.workers_to_come(), Some(1));
        assert_eq!(p.next_level(), Some((16, None)));
        assert_eq!(p.workers_to_come(), Some(1));
        p.next_level();
        p.next_level();
        assert_eq!(p.workers_to_come(), None);
        let p = Plan::new(&[1, 4], &[], 0, Some((0.1, 8)));
        assert_eq!(p.workers_to_come(), None);
        let p = Plan::new(&[], &[10.0, 20.0], 64, None);
        assert_eq!(p.workers_to_come(), None);
    }

    /// Runs a search against a server that holds up to `limit`; returns the values it tried.
    fn against(limit: f64, start: f64, whole: bool, res: f64, budget: u32) -> Vec<f64> {
        let mut s = Search::new(whole, res, budget, 10_000.0);
        let mut v = Some(start);
        let mut tried = vec![];
        while let Some(x) = v {
            tried.push(x);
            v = s.after(x, x <= limit);
        }
        tried
    }

    #[test]
    fn doubles_until_a_fail_then_bisects_to_the_resolution() {
        let t = against(180.0, 10.0, false, 0.1, 20);
        assert_eq!(t[..6], [10.0, 20.0, 40.0, 80.0, 160.0, 320.0]);
        // Then between 160 (pass) and 320 (fail): 240 fails, 200 fails, 180 passes, 190 fails.
        assert_eq!(t[6..], [240.0, 200.0, 180.0, 190.0]);
        let (p, f) = (180.0, 190.0);
        assert!((f - p) / p <= 0.1);
    }

    #[test]
    fn whole_levels_stop_when_pass_and_fail_are_adjacent_and_the_budget_bounds_it() {
        let t = against(5.0, 1.0, true, 0.01, 20);
        assert_eq!(t, [1.0, 2.0, 4.0, 8.0, 6.0, 5.0]);
        assert_eq!(against(1e9, 1.0, true, 0.1, 4).len(), 4);
        // Failing from the start: no limit, and nothing more is tried.
        assert_eq!(against(0.5, 1.0, true, 0.1, 10), [1.0]);
    }

    #[test]
    fn a_plan_ends_its_search_when_the_server_died() {
        let mut p = Plan::new(&[1], &[10.0, 5.0], 100, Some((0.1, 10)));
        assert_eq!(p.next_level(), Some((100, Some(5.0))));
        p.after(100, Some(5.0), true, false);
        assert_eq!(p.next_level(), Some((100, Some(10.0))));
        p.after(100, Some(10.0), false, true);
        assert_eq!(p.next_level(), None);
        let mut given = Plan::new(&[1, 4], &[], 0, None);
        assert_eq!(given.next_level(), Some((1, None)));
        given.after(1, None, false, true);
        assert_eq!(given.next_level(), Some((4, None)));
    }
}
