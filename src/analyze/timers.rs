//! Round-number timers: a process lifetime or a request duration that ends just at 30, 60, 90 s (or a
//! timer the user or a log line named) is more likely a timer firing than work finishing. The 85-second story:
//! "85 s" under a 90 s watchdog armed at process start.

use serde::Serialize;

/// Timers people set: the candidates for a round-number suspicion.
pub const ROUND_TIMERS: &[f64] = &[
    1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0, 300.0, 600.0, 900.0,
    1800.0, 3600.0,
];

/// How close counts as "at" a timer: max(0.5 s, 2 %).
pub fn tolerance(timer_s: f64) -> f64 {
    (timer_s * 0.02).max(0.5)
}

/// Where a timer came from, in words for the suspicion.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TimerSource {
    /// `--timer` on the command line.
    Flag,
    /// Named in one of the server's log lines.
    LogLine(String),
    /// The harness's own per-request limit.
    HarnessLimit,
    /// A round number nobody named.
    Round,
    /// Named by the server's own command line (`--timeout 2`).
    CommandLine(String),
    /// Nobody named it: failed requests clustered at one value.
    Cluster,
    /// One of TCP's own timers, by name ("initial SYN retransmission timeout", "delayed ACK").
    Tcp(String),
    /// Nobody named its value: what the run saw (a status, the same duration twice) shows it.
    Evidence,
    /// The process exited 124, the status that says a timer fired (coreutils `timeout`, many
    /// watchdogs): its age is the timer.
    Exit124,
}

impl TimerSource {
    pub fn describe(&self, timer_s: f64) -> String {
        let t = crate::journal::secs(timer_s);
        match self {
            TimerSource::Flag => format!("the {t} timer given with --timer"),
            TimerSource::LogLine(l) => format!("the {t} timer named in its log line '{l}'"),
            TimerSource::HarnessLimit => format!("witness's own {t} request limit"),
            TimerSource::Round => format!("the round-number {t} timer"),
            TimerSource::CommandLine(a) => format!("the {t} timer in its command line '{a}'"),
            TimerSource::Cluster => format!("a {t} timer nobody named"),
            TimerSource::Tcp(name) => format!("TCP's {t} {name}"),
            TimerSource::Exit124 => format!("the ~{t} timer its exit 124 says fired"),
            TimerSource::Evidence => format!("a {t} timer the run's evidence shows"),
        }
    }
}

/// The timer `seconds` sits at, if any: named timers first, then round numbers; the closest wins.
pub fn timer_at(seconds: f64, named: &[(f64, TimerSource)]) -> Option<(f64, TimerSource)> {
    let near = |t: f64| (seconds - t).abs() <= tolerance(t);
    let closest = |c: &mut dyn Iterator<Item = (f64, TimerSource)>| {
        c.filter(|(t, _)| near(*t))
            .min_by(|a, b| (seconds - a.0).abs().total_cmp(&(seconds - b.0).abs()))
    };
    closest(&mut named.iter().cloned())
        .or_else(|| closest(&mut ROUND_TIMERS.iter().map(|&t| (t, TimerSource::Round))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn just_under_a_round_timer_is_at_it() {
        let (t, s) = timer_at(89.98, &[]).unwrap();
        assert_eq!((t, s), (90.0, TimerSource::Round));
        // 2 % of 90 s is 1.8 s.
        assert_eq!(timer_at(88.3, &[]).unwrap().0, 90.0);
        assert!(timer_at(85.0, &[]).is_none());
        assert!(timer_at(0.2, &[]).is_none());
        assert!(timer_at(7.5, &[]).is_none());
    }

    #[test]
    fn the_closest_of_two_named_timers_wins() {
        // Both within tolerance (0.5 s) of each value: the nearer one is the timer, whichever
        // side of the value it sits on.
        let named = [
            (2.0, TimerSource::Flag),
            (2.5, TimerSource::CommandLine("--timeout 2.5".into())),
        ];
        assert_eq!(timer_at(2.1, &named).unwrap(), (2.0, TimerSource::Flag));
        assert_eq!(timer_at(2.4, &named).unwrap().0, 2.5);
        let reversed = [named[1].clone(), named[0].clone()];
        assert_eq!(timer_at(2.1, &reversed).unwrap().0, 2.0);
        assert_eq!(timer_at(2.4, &reversed).unwrap().0, 2.5);
        assert_eq!(timer_at(2.6, &reversed).unwrap().0, 2.5);
    }

    #[test]
    fn a_named_timer_wins_over_a_round_one() {
        let named = [(3.0, TimerSource::Flag)];
        assert_eq!(timer_at(3.02, &named).unwrap(), (3.0, TimerSource::Flag));
        assert_eq!(timer_at(2.1, &named).unwrap().0, 2.0);
    }
}
