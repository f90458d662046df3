//! One classification per request, made once. A request's outcome is what the protocol saw (a 503
//! is `rejected`); its final class is what the run found it to be. Refusals that a level found
//! clustered at one duration ([`ok_timers::refusal_timers`]) were answered by a timer inside the
//! server, not by a lack of capacity: every refused request of the ladder at the same status and
//! within the same window of durations, in whichever level, is a failure at that timer. The level's
//! counts and verdict, the pictures (HTML, trace) and every view read [`Classes::at_timer`]; none
//! decides it again.
//!
//! The rules come from the levels' per-status refusal histograms (bounded, whatever the number of
//! requests), so a request is classified by its level, status and duration alone, in a pass over the
//! requests once the rules are known.

use std::collections::BTreeSet;

use super::ok_timers::{self, RefusalTimer};
use crate::journal::Outcome;

/// Refusals a timer answered, as one level found them.
#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    /// The level that found them, in words ("level 4"), and its journal group.
    pub found_at: String,
    pub group: String,
    /// When that level ended: the moment of the finding.
    pub t_s: f64,
    pub timer: RefusalTimer,
}

impl Rule {
    /// The durations it covers: the cluster's, widened by the clock's resolution and scheduling
    /// (max(20 ms, 2 %), as wide as a cluster may be), and on the late side by as much as an answer
    /// may come after its timer fired (max(100 ms, 10 %) of the timer: a busy event loop answers
    /// late, never early).
    pub fn window(&self) -> (f64, f64) {
        let (lo, hi) = (self.timer.lo, self.timer.hi);
        let late = ok_timers::tight(hi).max(ok_timers::late_by(self.timer.timer_s));
        (lo - ok_timers::tight(lo), hi + late)
    }

    fn holds(&self, status: Option<u16>, duration_s: f64) -> bool {
        let (lo, hi) = self.window();
        self.timer.status == status && duration_s >= lo && duration_s <= hi
    }

    /// The timer in words: "a 2 s timer inside the server", with where its figure came from when
    /// someone named it.
    pub fn timer_words(&self) -> String {
        format!(
            "a {} timer inside the server{}",
            ok_timers::timer_words(self.timer.timer_s),
            ok_timers::source_words(self.timer.timer_s, &self.timer.source)
        )
    }

    /// The kind of failure, as counts by kind and failure lists say it: "error: HTTP 503 at a 2 s
    /// timer inside the server".
    pub fn kind(&self) -> String {
        format!(
            "error: {} at a {} timer inside the server",
            self.timer.answered,
            ok_timers::timer_words(self.timer.timer_s)
        )
    }

    /// A level's reason for `n` requests at this timer that took `lo`..`hi`; `own`: the level
    /// found the timer itself (else its refusals are the same as the finding's level's).
    pub fn reason(&self, n: u64, lo: f64, hi: f64, own: bool) -> String {
        let (what, each) = if n == 1 {
            ("1 request".to_string(), "")
        } else {
            (format!("{n} requests"), " each")
        };
        let as_at = if own {
            String::new()
        } else {
            format!(", as {}'s refusals were", self.found_at)
        };
        format!(
            "{what} failed at {}: answered {} after {}{each}{as_at}, not a capacity refusal",
            self.timer_words(),
            self.timer.answered,
            ok_timers::range(lo, hi),
        )
    }
}

/// The run's rules, most requests first, and the groups besides the ladder's levels they apply to.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Classes {
    rules: Vec<Rule>,
    /// Soak kinds and observed calls' groups (bounded: a plan's kinds, [`super::observed::GROUPS_KEPT`]
    /// rows): their refusals are classified as a level's are. Other groups (a k6 scenario merged
    /// beside a run) keep their outcome.
    groups: BTreeSet<String>,
}

impl Classes {
    pub fn new(mut rules: Vec<Rule>) -> Self {
        rules.sort_by_key(|r| std::cmp::Reverse(r.timer.count));
        Self {
            rules,
            groups: BTreeSet::new(),
        }
    }

    /// The same rules, also applied to the requests of `groups` (a soak's kinds, the calls wrap
    /// observed).
    pub fn applying_to(mut self, groups: impl IntoIterator<Item = String>) -> Self {
        self.groups.extend(groups);
        self
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The decision for one request of journal group `group`: the rule (and its index in
    /// [`Classes::rules`]) it fails at, when it is a refusal of a ladder level at the status and
    /// duration of refusals a timer answered anywhere in the run (its own group's finding first),
    /// or of a soak kind or an observed call the rules apply to ([`Classes::applying_to`]); None
    /// keeps the class its outcome gives it.
    pub fn at_timer(
        &self,
        group: &str,
        outcome: &Outcome,
        status: Option<u16>,
        duration_s: f64,
    ) -> Option<(usize, &Rule)> {
        let Outcome::Rejected { status: s, .. } = outcome else {
            return None;
        };
        let ladder = group
            .strip_prefix("level")
            .is_some_and(|n| n.parse::<u32>().is_ok());
        if !ladder && !self.groups.contains(group) {
            return None;
        }
        let status = s.or(status);
        let fits = |r: &&Rule| r.holds(status, duration_s);
        self.rules
            .iter()
            .enumerate()
            .filter(|(_, r)| r.group == group)
            .find(|(_, r)| fits(r))
            .or_else(|| self.rules.iter().enumerate().find(|(_, r)| fits(r)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyze::timers::TimerSource;

    fn rule(group: &str, status: u16, lo: f64, hi: f64, count: u64) -> Rule {
        Rule {
            found_at: format!("level {}", &group[5..]),
            group: group.into(),
            t_s: 1.0,
            timer: RefusalTimer {
                count,
                refused: count,
                status: Some(status),
                answered: format!("HTTP {status}"),
                lo,
                hi,
                timer_s: 2.0,
                source: TimerSource::Round,
            },
        }
    }

    fn no(status: u16) -> Outcome {
        Outcome::Rejected {
            status: Some(status),
            reason: format!("HTTP {status}"),
        }
    }

    #[test]
    fn a_refusal_at_a_found_timer_s_status_and_duration_is_that_timer_in_any_level() {
        let c = Classes::new(vec![rule("level1", 503, 2.001, 2.004, 4)]);
        // Another level's single refusal at the same status and duration.
        let (_, r) = c.at_timer("level0", &no(503), Some(503), 2.0).unwrap();
        assert_eq!(r.kind(), "error: HTTP 503 at a 2 s timer inside the server");
        assert_eq!(
            r.reason(1, 2.0, 2.0, false),
            "1 request failed at a 2 s timer inside the server: answered HTTP 503 after 2.00 s, as level 1's refusals were, not a capacity refusal"
        );
        // Not at another status, not far from the window, not an instant refusal, not an ok or
        // an error, not outside the ladder.
        assert!(c.at_timer("level0", &no(429), Some(429), 2.0).is_none());
        // A busy loop answers a little late, never early.
        assert!(c.at_timer("level0", &no(503), Some(503), 2.08).is_some());
        assert!(c.at_timer("level0", &no(503), Some(503), 1.9).is_none());
        assert!(c.at_timer("level0", &no(503), Some(503), 2.3).is_none());
        assert!(c.at_timer("level0", &no(503), Some(503), 0.001).is_none());
        assert!(c.at_timer("level0", &Outcome::Ok, Some(503), 2.0).is_none());
        assert!(c.at_timer("search", &no(503), Some(503), 2.0).is_none());
        // A level's own finding is named before another's that also holds.
        let c = Classes::new(vec![
            rule("level2", 503, 2.0, 2.01, 9),
            rule("level1", 503, 2.001, 2.004, 4),
        ]);
        assert_eq!(c.rules()[0].group, "level2", "most requests first");
        let (k, r) = c.at_timer("level1", &no(503), Some(503), 2.002).unwrap();
        assert_eq!((k, r.group.as_str()), (1, "level1"));
        // A soak kind (or an observed call) the rules were applied to is classified the same way.
        let c = c.applying_to(["search".to_string()]);
        let (_, r) = c.at_timer("search", &no(503), Some(503), 2.0).unwrap();
        assert_eq!(r.group, "level2");
        assert!(c.at_timer("other", &no(503), Some(503), 2.0).is_none());
    }
}
