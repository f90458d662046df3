//! Timers that start with the request: a proxy's `proxy_read_timeout`, a worker watchdog
//! (gunicorn's `--timeout`). They are the mirror image of the 90 s watchdog that started with the
//! process: each failed request gives up at the same duration, whatever the load. When failed
//! requests' durations cluster tightly at one value (or just after a timer someone named, since a
//! watchdog that checks once a second fires up to a second late), that value is a timer, not the
//! server's work, and the suspicion names the log line that named it when one was logged as they
//! ended. When the server says in its own words that a timeout fired (gunicorn's `[CRITICAL] WORKER
//! TIMEOUT (pid:N)`) as each of them ended, they are that timer however their durations spread: a
//! watchdog that checks on its own beat kills a CPU-bound worker up to a second late.

use super::timers::TimerSource;
use super::Suspicion;
use super::{Subject, SuspicionKind};
use crate::journal::{ErrorKind, Event, Outcome, Record};

/// A handful: fewer failures at one value are a coincidence as often as a timer.
pub const MIN_CLUSTER: usize = 3;
/// Shorter failures are everyday fast errors (an instant 500), not a timer giving up.
pub const MIN_SECONDS: f64 = 0.5;
/// Labels of log lines that name a timer firing.
const TIMER_LABELS: &[&str] = &["timeout", "watchdog", "killed"];
/// Labels of log lines that say, in the server's words, that a timeout fired.
const FIRED_LABELS: &[&str] = &["timeout", "watchdog"];
/// How long before a failure's end its timeout line may be logged (a proxy logs, then answers; an
/// arbiter logs, then kills) and after it (a pipe read a moment late).
const LINE_BEFORE_S: f64 = 1.0;

/// How wide a cluster nobody named may be: the clock's resolution plus scheduling, max(20 ms, 2 %).
fn tight(d: f64) -> f64 {
    (d * 0.02).max(0.02)
}

/// How far after a named timer a request may give up and still be "at" it: a watchdog that checks
/// once a second (gunicorn's arbiter) fires up to a second late; never before the timer.
fn late_by(t: f64) -> f64 {
    (t * 0.1).max(1.1)
}

/// One failed request as the timer analysis sees it.
#[derive(Clone, Copy, Debug)]
struct Failed {
    duration_s: f64,
    end_s: f64,
}

/// A failure the server (or something in front of it) gave: not witness's own limit, not a refusal,
/// not a port nobody listens on.
fn server_gave_up(o: &Outcome) -> bool {
    match o {
        Outcome::Error { error, .. } => !matches!(
            error,
            ErrorKind::ConnectRefused
                | ErrorKind::Connect
                | ErrorKind::Local
                | ErrorKind::Interrupted
                | ErrorKind::Cancelled
                | ErrorKind::SessionGone
        ),
        _ => false,
    }
}

/// Timers the server's command line names: `--timeout 30`, `--graceful-timeout=5`, `-t 2`.
pub fn command_line_timers(command: &[String]) -> Vec<(f64, TimerSource)> {
    let mut out = Vec::new();
    for (i, a) in command.iter().enumerate() {
        let (flag, value) = match a.split_once('=') {
            Some((f, v)) if f.starts_with('-') => (f, Some(v.to_string())),
            _ => (a.as_str(), command.get(i + 1).cloned()),
        };
        let named = flag.starts_with("--") && flag.to_ascii_lowercase().ends_with("timeout");
        if !named || flag.contains("graceful") || flag.contains("keep-alive") {
            continue;
        }
        let Some(v) = value else { continue };
        if let Ok(d) = crate::units::parse_duration(&v).map(|d| d.as_secs_f64()) {
            if d > 0.0 {
                out.push((d, TimerSource::CommandLine(format!("{flag} {v}"))));
            }
        }
    }
    out
}

/// Failed requests kept for clustering at most (16 bytes each): beyond that, the first ones judge.
pub const FAILED_KEPT: usize = 100_000;

/// The failed requests that may show a timer, folded in one streaming pass.
pub struct Failures {
    /// Unrequested exits: a request that failed as the server process exited died with it (the same
    /// duration for all the requests of a level that started together is one exit, not a timer per
    /// request; the exit's own timer is judged apart, from the process's age).
    exits: Vec<f64>,
    failed: Vec<Failed>,
}

impl Failures {
    pub fn new(recs: &[Record]) -> Self {
        let exits = recs
            .iter()
            .filter_map(|r| match &r.event {
                Event::Exit {
                    requested: false, ..
                } => Some(r.t_s),
                _ => None,
            })
            .collect();
        Self {
            exits,
            failed: Vec::new(),
        }
    }

    pub fn request(&mut self, r: &Record) {
        let Event::Request {
            duration_s,
            outcome,
            ..
        } = &r.event
        else {
            return;
        };
        let end = r.t_s;
        if self.failed.len() >= FAILED_KEPT
            || !server_gave_up(outcome)
            || *duration_s < MIN_SECONDS
            || self
                .exits
                .iter()
                .any(|&x| x >= end - 0.05 && x <= end + 0.25)
        {
            return;
        }
        self.failed.push(Failed {
            duration_s: *duration_s,
            end_s: end,
        });
    }

    pub fn finish(self, recs: &[Record], named: &[(f64, TimerSource)]) -> Vec<Suspicion> {
        clusters(self.failed, recs, named)
    }
}

fn clusters(
    mut failed: Vec<Failed>,
    recs: &[Record],
    named: &[(f64, TimerSource)],
) -> Vec<Suspicion> {
    failed.sort_by(|a, b| a.duration_s.total_cmp(&b.duration_s));
    if failed.len() < MIN_CLUSTER {
        // Too few to cluster: only the server's own word that a timeout fired names a timer.
        return tied_to_timeout_lines(recs, &failed, named)
            .map(|(s, _)| s)
            .into_iter()
            .collect();
    }
    // Timers someone named, and timers the server's own log lines named.
    let mut timers: Vec<(f64, TimerSource)> = named.to_vec();
    for r in recs {
        if let Event::Log {
            line,
            timer_s: Some(t),
            ..
        } = &r.event
        {
            if !timers.iter().any(|(x, _)| (x - t).abs() < 1e-9) {
                timers.push((*t, TimerSource::LogLine(super::inflight::short_line(line))));
            }
        }
    }
    for (t, src) in &timers {
        let at: Vec<Failed> = failed
            .iter()
            .copied()
            .filter(|f| f.duration_s >= t - tight(*t) && f.duration_s <= t + late_by(*t))
            .collect();
        if at.len() >= MIN_CLUSTER {
            return vec![suspicion(recs, &at, Some((*t, src.clone())))];
        }
    }
    // The server said a timeout fired as they ended: that timer, unless as many of them (or more)
    // sit at one value, which then is the closer reading.
    let tied = tied_to_timeout_lines(recs, &failed, named);
    // Nobody named one: the densest tight cluster, round value or not.
    let mut best: &[Failed] = &[];
    let mut j = 0;
    for i in 0..failed.len() {
        j = j.max(i);
        while j + 1 < failed.len()
            && failed[j + 1].duration_s - failed[i].duration_s <= tight(failed[i].duration_s)
        {
            j += 1;
        }
        if j + 1 - i > best.len() {
            best = &failed[i..=j];
        }
    }
    match tied {
        Some((s, n)) if n > best.len() => vec![s],
        _ if best.len() >= MIN_CLUSTER => vec![suspicion(recs, best, None)],
        t => t.map(|(s, _)| s).into_iter().collect(),
    }
}

fn suspicion(recs: &[Record], at: &[Failed], timer: Option<(f64, TimerSource)>) -> Suspicion {
    let lo = at
        .iter()
        .map(|f| f.duration_s)
        .fold(f64::INFINITY, f64::min);
    let hi = at.iter().map(|f| f.duration_s).fold(0.0, f64::max);
    let mid = at[at.len() / 2].duration_s;
    let range = if hi - lo < 0.01 {
        format!("{lo:.2} s")
    } else {
        format!("{lo:.2}–{hi:.2} s")
    };
    let line = log_line_near(recs, at);
    let (timer_s, source) = match (&timer, &line) {
        (Some((t, s)), _) => (*t, s.clone()),
        (None, Some(l)) => (mid, TimerSource::LogLine(l.clone())),
        (None, None) => (mid, TimerSource::Cluster),
    };
    // The server's own words at their instants say more than a guess at whose timer it is.
    let said = said_at(recs, at).filter(|_| line.is_none());
    let mut detail = match &said {
        Some((l, n)) => format!(
            "{} failed requests all gave up at {range}: a timer that starts with each request; the server said '{l}' as {} of them failed",
            at.len(),
            if *n == at.len() { "each".to_string() } else { n.to_string() }
        ),
        None => format!(
            "{} failed requests all gave up at {range}: a timer that starts with each request (a proxy or worker timeout?)",
            at.len()
        ),
    };
    if let Some((t, s)) = &timer {
        detail.push_str(&format!(" — at {}", s.describe(*t)));
    }
    if let (Some(l), false) = (&line, matches!(source, TimerSource::LogLine(_))) {
        detail.push_str(&format!("; log line '{l}' as they ended"));
    } else if let (Some(l), None) = (&line, &timer) {
        detail.push_str(&format!(" — log line '{l}' as they ended"));
    }
    Suspicion {
        armed_s: None,
        kind: SuspicionKind::RequestTimer,
        subject: Subject::Request,
        seconds: mid,
        timer_s,
        timer_source: source,
        t_s: at.iter().map(|f| f.end_s).fold(0.0, f64::max),
        pid: None,
        group: None,
        detail,
    }
}

/// The line the server wrote at the most of these failures' instants
/// ([`super::inflight::said_at`]), matched by a pattern or not, when it was written
/// at half of them or more: what the server said as they failed. With how many it was written at.
fn said_at(recs: &[Record], at: &[Failed]) -> Option<(String, usize)> {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for f in at {
        let mut here: Vec<String> = recs
            .iter()
            .filter(|r| super::inflight::said_at(r.t_s, f.end_s))
            .filter_map(|r| match &r.event {
                Event::Log { line, .. } | Event::Output { line, .. } => {
                    Some(super::inflight::short_line(line))
                }
                _ => None,
            })
            .collect();
        here.dedup();
        for l in here {
            match counts.iter_mut().find(|(c, _)| *c == l) {
                Some((_, n)) => *n += 1,
                None => counts.push((l, 1)),
            }
        }
    }
    counts
        .into_iter()
        .max_by_key(|(_, n)| *n)
        .filter(|(_, n)| 2 * n >= at.len())
}

/// A line saying a timeout fired: when, the line, the duration it names.
type TimeoutLine<'a> = (f64, &'a str, Option<f64>);

/// Failures each of which ended as the server logged that a timeout fired: that timer, however
/// their durations spread. Its value is the line's own duration when it names one, else at most
/// the shortest of them (a timer fires on time or late, never early). `failed` is sorted by
/// duration. Two at least, or every failure when there is only one. With how many it covers.
fn tied_to_timeout_lines(
    recs: &[Record],
    failed: &[Failed],
    named: &[(f64, TimerSource)],
) -> Option<(Suspicion, usize)> {
    let lines: Vec<TimeoutLine> = recs
        .iter()
        .filter_map(|r| match &r.event {
            Event::Log {
                line,
                label,
                timer_s,
                ..
            } if FIRED_LABELS.contains(&label.as_str()) => Some((r.t_s, line.as_str(), *timer_s)),
            _ => None,
        })
        .collect();
    let line_of = |f: &Failed| {
        lines
            .iter()
            .find(|(t, _, _)| {
                *t >= f.end_s - LINE_BEFORE_S && *t <= f.end_s + super::inflight::RESOLUTION_S
            })
            .copied()
    };
    let tied: Vec<(Failed, TimeoutLine)> = failed
        .iter()
        .filter_map(|f| Some((*f, line_of(f)?)))
        .collect();
    if tied.is_empty() || (tied.len() < 2 && failed.len() > 1) {
        return None;
    }
    let lo = tied[0].0.duration_s;
    let hi = tied[tied.len() - 1].0.duration_s;
    let mid = tied[tied.len() / 2].0.duration_s;
    let line = super::inflight::short_line(tied[0].1 .1);
    let range = if hi - lo < 0.01 {
        format!("{lo:.2} s")
    } else {
        format!("{lo:.2}–{hi:.2} s")
    };
    let n = tied.len();
    let (noun, each) = if n == 1 {
        ("failed request", "")
    } else {
        ("failed requests", "each ")
    };
    // The line's own duration, or a timer someone named that the shortest sits at, or the shortest.
    let own = tied.iter().find_map(|(_, (_, _, t))| *t);
    let named_at = named
        .iter()
        .find(|(t, _)| lo >= t - tight(*t) && lo <= t + late_by(*t))
        .cloned();
    let (timer_s, source, value) = match (own, named_at) {
        (Some(t), _) => (
            t,
            TimerSource::LogLine(line.clone()),
            format!(", the {} its line names", crate::journal::secs(t)),
        ),
        (None, Some((t, src))) => (t, src.clone(), format!(", at {}", src.describe(t))),
        (None, None) => (
            lo,
            TimerSource::LogLine(line.clone()),
            format!(" of at most {lo:.2} s"),
        ),
    };
    let spread = if hi - lo > tight(lo) {
        "; a watchdog that checks on its own beat fires late, so their durations spread"
    } else {
        ""
    };
    let s = Suspicion {
        armed_s: None,
        kind: SuspicionKind::RequestTimer,
        subject: Subject::Request,
        seconds: mid,
        timer_s,
        timer_source: source,
        t_s: tied.iter().map(|(f, _)| f.end_s).fold(0.0, f64::max),
        pid: None,
        group: None,
        detail: format!(
            "{n} {noun} gave up after {range}, {each}as the server logged that a timeout fired ('{line}'): a timer that starts with each request (a proxy or worker timeout){value}{spread}"
        ),
    };
    Some((s, n))
}

/// The log line that names the timer: one labelled as a timeout (or watchdog, kill) logged as the
/// clustered requests ended (up to a second before, as a proxy logs then answers; a moment after, as
/// pipes are read late). The line seen at the most of their ends wins.
fn log_line_near(recs: &[Record], at: &[Failed]) -> Option<String> {
    let mut best: Option<(usize, &str)> = None;
    for r in recs {
        let Event::Log { line, label, .. } = &r.event else {
            continue;
        };
        if !TIMER_LABELS.contains(&label.as_str()) {
            continue;
        }
        let near = at
            .iter()
            .filter(|f| r.t_s >= f.end_s - 1.0 && r.t_s <= f.end_s + 0.5)
            .count();
        if near > 0 && best.is_none_or(|(n, _)| near > n) {
            best = Some((near, line.as_str()));
        }
    }
    best.map(|(_, l)| super::inflight::short_line(l))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The suspicions of a hand-built journal: its requests folded in one pass, as `analyze` does.
    fn suspicions(recs: &[Record], named: &[(f64, TimerSource)]) -> Vec<Suspicion> {
        let mut acc = Failures::new(recs);
        for r in recs {
            acc.request(r);
        }
        acc.finish(recs, named)
    }
    use crate::journal::Stream;

    fn failed(t_end: f64, d: f64, status: u16) -> Record {
        Record {
            t_s: t_end,
            event: Event::Request {
                id: 0,
                group: "level0".into(),
                worker: 0,
                start_s: t_end - d,
                duration_s: d,
                outcome: Outcome::Error {
                    error: ErrorKind::Http5xx,
                    status: Some(status),
                },
                status: Some(status),
                scheduled_s: None,
                detail: None,
                body_bytes: None,
                body_cut: false,
                connect_s: None,
                headers_s: None,
                handshake_s: None,
                lag_s: None,
                rpc_id: None,
            },
            origin: None,
        }
    }

    fn log(t: f64, line: &str, label: &str) -> Record {
        Record {
            t_s: t,
            event: Event::Log {
                pid: Some(1),
                stream: Stream::Stderr,
                line: line.into(),
                label: label.into(),
                truncated: false,
                timer_s: None,
            },
            origin: None,
        }
    }

    #[test]
    fn failures_at_one_value_name_the_log_line_logged_as_they_ended() {
        let mut recs = vec![];
        for i in 0..5 {
            let end = 3.0 + i as f64 * 2.1;
            recs.push(log(
                end - 0.001,
                "[error] 9#9: *3 upstream timed out (110: Connection timed out)",
                "timeout",
            ));
            recs.push(failed(end, 2.001 + i as f64 * 0.001, 504));
        }
        let s = suspicions(&recs, &[]);
        assert_eq!(s.len(), 1, "{s:?}");
        assert!(
            s[0].detail.starts_with(
                "5 failed requests all gave up at 2.00 s: a timer that starts with each request"
            ),
            "{}",
            s[0].detail
        );
        assert!(
            s[0].detail.contains("upstream timed out"),
            "{}",
            s[0].detail
        );
        assert!((s[0].timer_s - 2.003).abs() < 0.01);
    }

    /// gunicorn with its `timeout = 5` in a config file and a CPU-bound handler: the arbiter checks
    /// once a second and the worker dies late, so the failures spread 5.06–6.08 s, each as the
    /// arbiter logged `WORKER TIMEOUT`. The server said a timeout fired: that is the timer.
    #[test]
    fn failures_each_tied_to_a_timeout_line_are_that_timer_however_they_spread() {
        let story = |line_before: f64, label: &str, line: &dyn Fn(usize) -> String| {
            let mut recs = vec![];
            for (i, d) in [5.06, 5.12, 5.79, 5.80, 5.35, 6.08].iter().enumerate() {
                let end = 10.0 * (i + 1) as f64;
                recs.push(log(end - line_before, &line(i), label));
                recs.push(failed(end, *d, 500));
            }
            recs.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
            suspicions(&recs, &[])
        };
        let gunicorn = |i: usize| {
            format!(
                "[2026-12-03 18:09:00 +0000] [17661] [CRITICAL] WORKER TIMEOUT (pid:{})",
                100 + i
            )
        };
        let s = story(0.01, "timeout", &gunicorn);
        assert_eq!(s.len(), 1, "{s:?}");
        assert_eq!(s[0].kind, SuspicionKind::RequestTimer);
        assert_eq!(s[0].timer_s, 5.06);
        assert!(matches!(s[0].timer_source, TimerSource::LogLine(_)));
        assert_eq!(
            s[0].detail,
            "6 failed requests gave up after 5.06–6.08 s, each as the server logged that a timeout fired ('[2026-12-03 18:09:00 +0000] [17661] [CRITICAL] WORKER TIMEOUT (pid:100)'): a timer that starts with each request (a proxy or worker timeout) of at most 5.06 s; a watchdog that checks on its own beat fires late, so their durations spread"
        );
        // The same spread with the line logged long before each failure, or a line that says no
        // timeout fired (a kill): ordinary slow failures.
        assert!(story(3.0, "timeout", &gunicorn).is_empty());
        assert!(story(0.01, "killed", &|i| format!(
            "Worker (pid:{i}) was sent SIGKILL!"
        ))
        .is_empty());
    }

    #[test]
    fn a_timeout_line_s_own_duration_is_the_timer_of_the_failures_tied_to_it() {
        let mut recs = vec![];
        for (i, d) in [2.04, 2.61, 2.93].iter().enumerate() {
            let end = 5.0 * (i + 1) as f64;
            let mut l = log(end - 0.002, "request timed out after 2s", "timeout");
            if let Event::Log { timer_s, .. } = &mut l.event {
                *timer_s = Some(2.0);
            }
            recs.push(l);
            recs.push(failed(end, *d, 504));
        }
        let s = suspicions(&recs, &[]);
        assert_eq!(s.len(), 1, "{s:?}");
        assert_eq!(s[0].timer_s, 2.0);
        // The named 2 s timer takes failures up to a second late: the line's timer, said as such.
        assert!(
            s[0].detail
                .contains("the 2s timer named in its log line 'request timed out after 2s'"),
            "{}",
            s[0].detail
        );
        // One failure alone with its timeout line is still that timer.
        let one = suspicions(&recs[..2], &[]);
        assert_eq!(one.len(), 1, "{one:?}");
        assert!(
            one[0].detail.starts_with(
                "1 failed request gave up after 2.04 s, as the server logged that a timeout fired"
            ),
            "{}",
            one[0].detail
        );
    }

    #[test]
    fn a_value_that_is_not_round_still_counts_and_a_spread_does_not() {
        let recs: Vec<Record> = (0..4)
            .map(|i| failed(10.0 * i as f64 + 8.0, 7.31, 500))
            .collect();
        let s = suspicions(&recs, &[]);
        assert_eq!(s.len(), 1);
        assert!(s[0].detail.contains("at 7.31 s"), "{}", s[0].detail);
        assert_eq!(s[0].timer_source, TimerSource::Cluster);
        // Spread out: ordinary slow failures.
        let recs: Vec<Record> = [1.0, 1.5, 2.2, 3.1, 4.0]
            .iter()
            .enumerate()
            .map(|(i, d)| failed(10.0 * i as f64 + 5.0, *d, 500))
            .collect();
        assert!(suspicions(&recs, &[]).is_empty());
        // Two are not a handful; fast 500s are not a timer.
        let recs: Vec<Record> = (0..2).map(|i| failed(i as f64 + 3.0, 2.0, 500)).collect();
        assert!(suspicions(&recs, &[]).is_empty());
        let recs: Vec<Record> = (0..9).map(|i| failed(i as f64, 0.002, 500)).collect();
        assert!(suspicions(&recs, &[]).is_empty());
    }

    /// Each of witness's own outcomes alone, clustered at 2 s in numbers well over the cluster size:
    /// none is the server's timer, while the same cluster of resets is.
    #[test]
    fn every_one_of_witness_s_own_outcomes_is_left_out_of_the_cluster() {
        let at_two = |outcome: Outcome| -> Vec<Record> {
            (0..6)
                .map(|i| Record {
                    t_s: i as f64 * 3.0 + 2.0,
                    event: Event::Request {
                        id: i,
                        group: "level0".into(),
                        worker: i as u32,
                        start_s: i as f64 * 3.0,
                        duration_s: 2.0,
                        outcome: outcome.clone(),
                        status: None,
                        scheduled_s: None,
                        detail: None,
                        body_bytes: None,
                        body_cut: false,
                        connect_s: None,
                        headers_s: None,
                        handshake_s: None,
                        lag_s: None,
                        rpc_id: None,
                    },
                    origin: None,
                })
                .collect()
        };
        let err = |error| Outcome::Error {
            error,
            status: None,
        };
        for own in [
            ErrorKind::ConnectRefused,
            ErrorKind::Connect,
            ErrorKind::Local,
            ErrorKind::Interrupted,
            ErrorKind::Cancelled,
        ] {
            assert!(
                suspicions(&at_two(err(own)), &[]).is_empty(),
                "{own:?} was taken for the server's timer"
            );
        }
        let timeout = Outcome::Timeout {
            phase: crate::journal::TimeoutPhase::Connect,
            limit_s: 2.0,
        };
        assert!(suspicions(&at_two(timeout), &[]).is_empty());
        assert_eq!(suspicions(&at_two(err(ErrorKind::Reset)), &[]).len(), 1);
    }

    #[test]
    fn a_named_timer_takes_failures_up_to_a_second_late_and_none_early() {
        // gunicorn's arbiter checks once a second: a 2 s --timeout kills at 2.1–2.9 s.
        let recs: Vec<Record> = [2.13, 2.86, 2.21, 2.3, 2.5]
            .iter()
            .enumerate()
            .map(|(i, d)| failed(5.0 * i as f64 + 3.0, *d, 500))
            .collect();
        let named = [(2.0, TimerSource::Flag)];
        let s = suspicions(&recs, &named);
        assert_eq!(s.len(), 1);
        assert!(
            s[0].detail.contains("all gave up at 2.13–2.86 s"),
            "{}",
            s[0].detail
        );
        assert!(
            s[0].detail.contains("the 2s timer given with --timer"),
            "{}",
            s[0].detail
        );
        assert_eq!(s[0].timer_s, 2.0);
        // A 3 s timer cannot have ended requests at 2.1–2.9 s.
        assert!(suspicions(&recs, &[(3.0, TimerSource::Flag)]).is_empty());
    }

    #[test]
    fn witness_s_own_limit_and_refused_connects_are_not_the_server_s_timer() {
        let mut recs = vec![];
        for i in 0..5 {
            recs.push(Record {
                t_s: i as f64 * 3.0 + 2.0,
                event: Event::Request {
                    id: i,
                    group: "level0".into(),
                    worker: 0,
                    start_s: i as f64 * 3.0,
                    duration_s: 2.0,
                    outcome: if i % 2 == 0 {
                        Outcome::Timeout {
                            phase: crate::journal::TimeoutPhase::Request,
                            limit_s: 2.0,
                        }
                    } else {
                        Outcome::Error {
                            error: ErrorKind::ConnectRefused,
                            status: None,
                        }
                    },
                    status: None,
                    scheduled_s: None,
                    detail: None,
                    body_bytes: None,
                    body_cut: false,
                    connect_s: None,
                    headers_s: None,
                    handshake_s: None,
                    lag_s: None,
                    rpc_id: None,
                },
                origin: None,
            });
        }
        assert!(suspicions(&recs, &[]).is_empty());
    }

    #[test]
    fn the_server_s_command_line_names_its_timers() {
        let cmd: Vec<String> = [
            "gunicorn",
            "--timeout",
            "2",
            "-w",
            "2",
            "--graceful-timeout=5",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let t = command_line_timers(&cmd);
        assert_eq!(t.len(), 1, "{t:?}");
        assert_eq!(t[0].0, 2.0);
        assert_eq!(
            t[0].1.describe(2.0),
            "the 2s timer in its command line '--timeout 2'"
        );
        let cmd = vec!["srv".to_string(), "--read-timeout=1.5s".to_string()];
        assert_eq!(command_line_timers(&cmd)[0].0, 1.5);
    }

    #[test]
    fn requests_that_died_with_the_server_are_no_request_timer() {
        let mut recs = vec![];
        for i in 0..4 {
            recs.push(failed(12.26 + 0.001 * i as f64, 4.21, 500));
        }
        recs.push(Record {
            t_s: 12.259,
            event: Event::Exit {
                pid: 7,
                code: Some(124),
                signal: None,
                core_dumped: false,
                age_s: 6.01,
                status: 124,
                requested: false,
                meaning: "exited 124".into(),
                oom_killed: None,
            },
            origin: None,
        });
        assert!(suspicions(&recs, &[]).is_empty());
        // The same failures spread over time, with no exit: a timer that starts with each request.
        let spread: Vec<Record> = (0..4)
            .map(|i| failed(10.0 + 3.0 * i as f64, 4.21, 500))
            .collect();
        assert_eq!(suspicions(&spread, &[]).len(), 1);
    }
}
