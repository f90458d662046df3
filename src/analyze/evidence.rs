//! Timers behind process exits, claimed from evidence, never from roundness alone. A timer is claimed
//! for an exit only with at least one of:
//! - **a status that means a timer fired**: exit 124 (coreutils `timeout`, many watchdogs), death by
//!   SIGALRM, SIGVTALRM, SIGPROF or SIGXCPU, a kill while a `--timer` was named — of the server or of
//!   a process of its tree (a `timeout` above it);
//! - **the same duration twice or more from a common start**: lives that ended the same way (killed
//!   from outside, or of unknown status as an attached listener's) at one age, round or not;
//! - **the server's own words**: a line that names a timer firing, written as it died;
//! - **a timer in its configuration**: `--timer`, or its command line's `timeout N` / `--timeout N`.
//!
//! Roundness only weighs evidence: it picks which start a timer was armed at (process start, first
//! listen, first line), never makes a claim. An exit that says why it died (an error line and exit 1,
//! a panic, an OOM) is that: a crash is no timer.

use super::timers::{TimerSource, ROUND_TIMERS};
use super::{ProcessLife, Subject, Suspicion, SuspicionKind};
use crate::journal::{Event, Record, Settings};

/// Lives shorter than this are start-up failures, never a timer's.
const MIN_TIMER_S: f64 = 0.5;

/// How close two durations from a common start must be to be "the same": the clock's and the
/// scheduler's jitter, and an attached listener's poll.
fn same(a: f64, b: f64) -> bool {
    (a - b).abs() <= (a.max(b) * 0.015).max(0.12)
}

/// The round value `v` sits at, for roundness to pick among starts: within max(2 %, `slack`
/// seconds), the timer's jitter and how late its start or end was seen (an attached listener's end
/// a poll late, more on a busy machine).
fn near_round_within(v: f64, slack: f64) -> Option<f64> {
    ROUND_TIMERS
        .iter()
        .copied()
        .chain((3..=9).map(f64::from))
        .filter(|r| (v - r).abs() <= (r * 0.02).max(slack))
        .min_by(|a, b| (v - a).abs().total_cmp(&(v - b).abs()))
}

/// How people set timers: 5, 30 or 90 s before 7 s. Of two starts that both make a value round,
/// the one that makes it a value people set is the likelier (an alarm(5) armed at first listen
/// 1.99 s after start reads 6.99 s from the start: 7 s, a coincidence of the start-up's length).
fn conventional(r: f64) -> bool {
    ROUND_TIMERS.contains(&r)
}

/// One process that ended: the server's own lives and the processes of its tree that carry a
/// timer's status.
#[derive(Clone, Debug)]
struct Ended {
    pid: u32,
    /// The process above it in the server's tree, for a descendant.
    ppid: Option<u32>,
    command: String,
    exit_t: f64,
    age: f64,
    code: Option<i32>,
    signal: Option<String>,
    /// Attached: witness saw the listener go, not how it ended.
    unknown: bool,
    /// The process held the server's listening socket.
    serving: bool,
    /// Seconds after its start it first listened, and first wrote a line.
    listen_after: Option<f64>,
    /// How much earlier than `listen_after` it may have begun listening: the time since the last
    /// look that saw nobody.
    listen_early: f64,
    first_line_after: Option<f64>,
    /// A line naming a timer, written as it died: (line, the timer it names).
    words: Option<(String, f64)>,
    /// Its last line before it died.
    last_line: Option<String>,
    /// It said why it died: a panic, an OOM, a traceback's exception.
    said_why: bool,
}

impl Ended {
    /// The status says a timer fired. `flag_fits`: a `--timer` value fits its age from a start, so a
    /// kill at that age is that timer's.
    fn fired(&self, flag_fits: bool) -> Option<String> {
        if self.code == Some(124) && self.signal.is_none() {
            return Some(
                "it exited 124, the status `timeout` and many watchdogs exit with when their timer fires"
                    .into(),
            );
        }
        match self.signal.as_deref() {
            Some(s @ ("SIGALRM" | "SIGVTALRM" | "SIGPROF")) => {
                Some(format!("killed by {s}: a timer of its own expired"))
            }
            Some("SIGXCPU") => Some("killed by SIGXCPU: its CPU-time limit ran out".into()),
            Some(s @ ("SIGKILL" | "SIGTERM")) if flag_fits => {
                Some(format!("killed by {s} at the age of a --timer"))
            }
            _ => None,
        }
    }

    /// Ended from outside (a signal nobody in witness sent) or unseen: a life that can repeat a
    /// supervisor's timer. A program's own exit code is its own decision, not a timer.
    fn ended_from_outside(&self) -> bool {
        self.unknown
            || matches!(
                self.signal.as_deref(),
                Some(
                    "SIGTERM" | "SIGKILL" | "SIGINT" | "SIGHUP" | "SIGQUIT" | "SIGUSR1" | "SIGUSR2"
                )
            )
    }

    fn who(&self) -> String {
        if self.command.is_empty() {
            format!("pid {}", self.pid)
        } else {
            format!("pid {} ({})", self.pid, short(&self.command))
        }
    }

    fn how(&self) -> String {
        match (&self.signal, self.code, self.unknown) {
            (_, _, true) => "stopped listening".into(),
            (Some(s), _, _) => format!("was killed by {s}"),
            (None, Some(_), _) => "exited".into(),
            _ => "ended".into(),
        }
    }
}

fn short(s: &str) -> String {
    let t: String = s.chars().take(60).collect();
    if t.len() < s.len() {
        format!("{t}…")
    } else {
        t
    }
}

/// The process lives and tree exits of a run, as the claims need them.
fn ended(recs: &[Record], lives: &[ProcessLife]) -> Vec<Ended> {
    // When it was first seen listening, and the last look before that saw nobody.
    let listen_seen = |pid: u32| {
        recs.iter().find_map(|r| match &r.event {
            Event::Listening {
                pid: p, unseen_s, ..
            } if *p == pid => Some((r.t_s, *unseen_s)),
            _ => None,
        })
    };
    let first_listen = |pid: u32| listen_seen(pid).map(|(t, _)| t);
    let lines_of = |pid: u32, from: f64, to: f64| {
        recs.iter()
            .filter(move |r| r.t_s >= from - 0.001 && r.t_s <= to + 0.5)
            .filter_map(move |r| match &r.event {
                Event::Log {
                    pid: Some(p),
                    line,
                    label,
                    timer_s,
                    ..
                } if *p == pid => Some((r.t_s, line.as_str(), Some(label.as_str()), *timer_s)),
                Event::Output {
                    pid: Some(p), line, ..
                } if *p == pid => Some((r.t_s, line.as_str(), None, None)),
                _ => None,
            })
    };
    let describe = |pid: u32, ppid, command: String, spawn_t: f64, exit_t: f64, age: f64| {
        let lines: Vec<_> = lines_of(pid, spawn_t, exit_t).collect();
        let words = lines
            .iter()
            .rev()
            .filter(|(t, _, label, _)| {
                *t >= exit_t - 2.0 && matches!(label, Some("watchdog" | "timeout" | "killed"))
            })
            .find_map(|(_, l, _, timer)| Some((super::inflight::short_line(l), (*timer)?)));
        let said_why = lines
            .iter()
            .any(|(_, _, label, _)| matches!(label, Some("panic" | "oom" | "traceback")));
        Ended {
            pid,
            ppid,
            command,
            exit_t,
            age,
            code: None,
            signal: None,
            unknown: false,
            serving: first_listen(pid).is_some(),
            listen_after: first_listen(pid).map(|t| t - spawn_t),
            listen_early: listen_seen(pid)
                .map(|(t, unseen)| t - unseen.map_or(t, |u| u.max(spawn_t)))
                .unwrap_or(0.0),
            first_line_after: lines.first().map(|(t, ..)| t - spawn_t),
            words,
            last_line: None,
            said_why,
        }
    };
    let mut out = Vec::new();
    for l in lives {
        let (Some(age), Some(exit_t)) = (l.age_s, l.exit_t_s) else {
            continue;
        };
        // Asked for, or the kernel's OOM killer by the engine's word: a known cause, not a timer.
        if l.requested || l.oom_killed {
            continue;
        }
        let mut e = describe(
            l.pid,
            l.ppid,
            l.command.join(" "),
            exit_t - age,
            exit_t,
            age,
        );
        // The life already carries its last words (process_lives read them once).
        e.last_line = l.last_line.clone();
        e.signal = l.signal.clone();
        e.unknown = l.status == Some(-1);
        e.code = match (l.status, &l.signal) {
            (Some(s), None) if s >= 0 => Some(s),
            _ => None,
        };
        e.serving |= l.listened;
        out.push(e);
    }
    // The tree's other processes that ended with a timer's status (a `timeout` above the server).
    for r in recs {
        let Event::WorkerExit {
            pid,
            ppid,
            command,
            age_s,
            code,
            signal,
            helper: false,
            ..
        } = &r.event
        else {
            continue;
        };
        if lives.iter().any(|l| l.pid == *pid) {
            continue;
        }
        let mut e = describe(
            *pid,
            Some(*ppid),
            command.join(" "),
            r.t_s - age_s,
            r.t_s,
            *age_s,
        );
        e.code = *code;
        e.signal = signal.clone();
        e.last_line = super::timeline::last_line(recs, *pid, r.t_s - age_s, r.t_s);
        if e.fired(false).is_some() {
            out.push(e);
        }
    }
    out
}

/// Starts a timer may have been armed at, as (seconds after the process start, words).
/// Starts a timer may have been armed at: (seconds after the process start it was seen, how much
/// earlier it may have been, words).
fn starts(e: &Ended) -> Vec<(f64, f64, String)> {
    let mut s = vec![(0.0, 0.0, "at process start".to_string())];
    if let Some(l) = e.listen_after.filter(|l| *l > 0.05) {
        let early = e.listen_early.min(l);
        let when = if early > 0.05 {
            format!("{:.2}–{l:.2} s", l - early)
        } else {
            format!("{l:.2} s")
        };
        s.push((
            l,
            early,
            format!("when it began listening {when} after start"),
        ));
    }
    if let Some(l) = e
        .first_line_after
        .filter(|l| *l > 0.05 && e.listen_after.is_none_or(|x| (x - l).abs() > 0.05))
    {
        // A line is read off the server's pipe a moment after it was written.
        s.push((
            l,
            0.1,
            format!("at its first output line, {l:.2} s after start"),
        ));
    }
    s
}

/// The timer's value and the start it was armed at: a named value where one fits a start, else the
/// age from the start that makes it round, else the age itself.
fn value_and_start(e: &Ended, named: &[(f64, TimerSource)]) -> (f64, String, Option<TimerSource>) {
    let starts = starts(e);
    // Its own words as it died name the value, whenever it was armed.
    if let Some((line, t)) = e
        .words
        .as_ref()
        .filter(|(_, t)| *t <= e.age + 0.12 && e.code != Some(0))
    {
        let after = e.age - t;
        let armed = starts
            .iter()
            .find(|(off, early, _)| {
                let tol = (t * 0.02).max(0.15);
                after >= off - early - tol && after <= off + tol
            })
            .map(|(_, _, w)| w.clone())
            .unwrap_or_else(|| format!("about {after:.2} s after the process started (its age and the timer differ by {after:.2} s)"));
        return (*t, armed, Some(TimerSource::LogLine(line.clone())));
    }
    // A named timer that fits a start (fires on time, or up to a little late).
    let fit = named
        .iter()
        .flat_map(|(v, src)| {
            starts
                .iter()
                .map(move |(off, early, w)| (*v, src, *off - early / 2.0, w))
        })
        .filter(|(v, _, off, _)| {
            let d = e.age - off - v;
            (-0.12..=(v * 0.1).max(1.1)).contains(&d)
        })
        .min_by(|a, b| {
            (e.age - a.2 - a.0)
                .abs()
                .total_cmp(&(e.age - b.2 - b.0).abs())
        });
    if let Some((v, src, _, w)) = fit {
        return (v, w.clone(), Some(src.clone()));
    }
    // A later start is seen late (witness looks for the listener every few milliseconds, later on
    // a busy machine): the value from it reads short of the timer by that much.
    // The value from a start seen `early` late lies between `v` and `v + early`: a round value in
    // that span (give or take the timer's jitter) is the one the run's evidence allows.
    let from = |off: f64, early: f64| {
        let v = e.age - off;
        near_round_within(v + early / 2.0, early / 2.0 + 0.15)
            .filter(|r| v <= r + (r * 0.02).max(0.15))
    };
    let round = starts
        .iter()
        .filter_map(|(off, early, w)| Some((from(*off, *early)?, off - early / 2.0, w)))
        .min_by(|a, b| {
            conventional(b.0).cmp(&conventional(a.0)).then(
                (e.age - a.1 - a.0)
                    .abs()
                    .total_cmp(&(e.age - b.1 - b.0).abs()),
            )
        });
    match round {
        Some((r, _, w)) => (r, w.clone(), None),
        None => (e.age, starts[0].2.clone(), None),
    }
}

/// The timers the run's evidence shows behind its exits, one claim per exit (a process killed by the
/// `timeout` above it is one claim with it).
pub fn exit_claims(recs: &[Record], lives: &[ProcessLife], settings: &Settings) -> Vec<Suspicion> {
    let all = ended(recs, lives);
    // A --timer value that fits a process's age from one of its starts.
    let flag_fits = |e: &Ended| {
        settings.timers_s.iter().any(|v| {
            starts(e).iter().any(|(off, early, _)| {
                let d = e.age - (off - early / 2.0) - v;
                (-0.12..=(v * 0.1).max(1.1)).contains(&d)
            })
        })
    };
    let mut configured: Vec<(f64, TimerSource)> = settings
        .timers_s
        .iter()
        .map(|&t| (t, TimerSource::Flag))
        .collect();
    // The command lines of the server and its tree: `timeout 7 …`, `--timeout 5`.
    let mut commands: Vec<Vec<String>> = lives.iter().map(|l| l.command.clone()).collect();
    commands.extend(all.iter().map(|e| shell_words(&e.command)));
    for c in &commands {
        for t in config_timers(c) {
            if !configured.iter().any(|(v, _)| (v - t.0).abs() < 1e-9) {
                configured.push(t);
            }
        }
    }
    // One unit per ending: a supervisor that fired as the server it ran died is one claim with it,
    // told of the server.
    let mut units: Vec<(&Ended, Option<&Ended>)> = Vec::new();
    let mut told: Vec<usize> = Vec::new();
    for (i, e) in all.iter().enumerate() {
        if told.contains(&i) {
            continue;
        }
        let partner = all.iter().enumerate().find(|(j, o)| {
            *j != i
                && !told.contains(j)
                && (o.exit_t - e.exit_t).abs() <= 0.25
                && (o.ppid == Some(e.pid) || e.ppid == Some(o.pid))
        });
        units.push(match partner {
            Some((j, o)) if o.serving && !e.serving => {
                told.push(j);
                (o, Some(e))
            }
            Some((j, o)) => {
                told.push(j);
                (e, Some(o))
            }
            None => (e, None),
        });
    }
    // The age a unit's timer ran for: the supervisor's when it fired (`timeout` ran exactly its
    // timer; the server it started began a moment later), else the process's own. And whether its
    // end can repeat a timer: ended from outside, or with a timer's status.
    let timed = |(e, p): &(&Ended, Option<&Ended>)| -> (f64, bool) {
        match p.filter(|p| p.fired(flag_fits(p)).is_some()) {
            Some(p) => (p.age, true),
            None => (
                e.age,
                e.ended_from_outside() || e.fired(flag_fits(e)).is_some(),
            ),
        }
    };
    let mut out = Vec::new();
    for (k, unit) in units.iter().enumerate() {
        let (e, partner) = (unit.0, unit.1);
        let mut evidence: Vec<String> = Vec::new();
        if let Some(w) = e.fired(flag_fits(e)) {
            evidence.push(w);
        }
        if let Some(p) = partner {
            if let Some(w) = p.fired(flag_fits(p)) {
                evidence.push(format!(
                    "{} above it {} at the same instant: {w}",
                    p.who(),
                    p.how()
                ));
            }
        }
        let mut named = configured.clone();
        // A clean exit after a line naming a timer chose to end: the line is no timer firing.
        let words = e.words.as_ref().filter(|_| e.code != Some(0));
        if let Some((line, t)) = words {
            evidence.push(format!("its own words as it died: '{line}'"));
            named.insert(0, (*t, TimerSource::LogLine(line.clone())));
        }
        // A clean exit, or one that said why (a crash), is the program's own doing unless its own
        // words or a status name a timer.
        if evidence.is_empty() && (e.said_why || !e.ended_from_outside()) && partner.is_none() {
            continue;
        }
        if e.age < MIN_TIMER_S && evidence.is_empty() {
            continue;
        }
        // The same duration from a common start, in other lives that ended the same way.
        let (age, can_repeat) = timed(unit);
        let repeated: Vec<(&Ended, f64)> = units
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != k)
            .map(|(_, u)| (u.0, timed(u)))
            .filter(|(o, (a, repeats))| {
                *repeats
                    && *a >= MIN_TIMER_S
                    && age >= MIN_TIMER_S
                    && o.serving == e.serving
                    && same(*a, age)
            })
            .map(|(o, (a, _))| (o, a))
            .collect();
        if !repeated.is_empty() && can_repeat {
            let others: Vec<String> = repeated
                .iter()
                .take(4)
                .map(|(o, a)| format!("{} at {a:.2} s", o.who()))
                .collect();
            evidence.push(format!(
                "the same age in {} other {}: {}",
                repeated.len(),
                if repeated.len() == 1 { "life" } else { "lives" },
                others.join(", ")
            ));
        }
        let (mut value, mut armed, source) = value_and_start(e, &named);
        // Only repeated: the timer is the shortest of the ages (a timer fires on time; its end is
        // seen late), rounded where a poll's lateness allows.
        if source.is_none() && evidence.len() == 1 && !repeated.is_empty() {
            let shortest = repeated.iter().map(|(_, a)| *a).fold(age, f64::min);
            if let Some(r) = near_round_within(shortest, 0.3) {
                value = r;
                armed = "at process start".into();
            }
        }
        if let Some(src @ (TimerSource::Flag | TimerSource::CommandLine(_))) = &source {
            evidence.push(format!("its configuration: {}", src.describe(value)));
        }
        // Configuration alone (a `--timeout` that happens to fit) is not a status, words or a
        // repetition: it names the value of a timer the rest shows.
        let shown = evidence.iter().any(|w| !w.starts_with("its configuration"));
        if !shown {
            continue;
        }
        let source = source.unwrap_or(if e.code == Some(124) && e.signal.is_none() {
            TimerSource::Exit124
        } else {
            TimerSource::Evidence
        });
        let armed_s = e.age - value;
        let last = e
            .last_line
            .as_ref()
            .filter(|l| e.words.as_ref().is_none_or(|(w, _)| w != *l))
            .map(|l| format!("; its last line: '{l}'"))
            .unwrap_or_default();
        out.push(Suspicion {
            armed_s: (armed_s.abs() > 0.05).then_some(armed_s),
            kind: SuspicionKind::RoundTimer,
            subject: Subject::ProcessExit,
            seconds: e.age,
            timer_s: value,
            t_s: e.exit_t,
            pid: Some(e.pid),
            group: None,
            detail: format!(
                "pid {} {} at age {:.2} s — at {}, armed {armed}; evidence: {}{last}",
                e.pid,
                if source == TimerSource::Exit124 {
                    "exited 124".to_string()
                } else {
                    e.how()
                },
                e.age,
                source.describe(value),
                evidence.join("; "),
            ),
            timer_source: source,
        });
    }
    out
}

/// A command line's words, with a shell's `-c` script split into words too.
fn shell_words(command: &str) -> Vec<String> {
    command
        .split(|c: char| c.is_whitespace() || c == ';' || c == '&' || c == '|')
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

/// Timers a command line configures: coreutils' `timeout [OPTION…] DURATION COMMAND`, and flags
/// named `--…timeout N` (`--timeout 5`, `--graceful-timeout=5` is a shutdown's, not one).
pub fn config_timers(command: &[String]) -> Vec<(f64, TimerSource)> {
    let words: Vec<String> = command.iter().flat_map(|w| shell_words(w)).collect();
    let mut out = super::request_timers::command_line_timers(&words);
    for (i, w) in words.iter().enumerate() {
        if w.rsplit('/').next() != Some("timeout") {
            continue;
        }
        // Its options come first; the first word that is a duration is the timer.
        let d = words[i + 1..]
            .iter()
            .take(6)
            .filter(|a| !a.starts_with('-'))
            .find_map(|a| coreutils_duration(a));
        if let Some(d) = d {
            out.push((
                d,
                TimerSource::CommandLine(format!("timeout {}", short(&words[i + 1..].join(" ")))),
            ));
        }
    }
    out
}

/// `7`, `7s`, `1.5m`, `2h`, `1d`: coreutils `timeout`'s durations.
fn coreutils_duration(a: &str) -> Option<f64> {
    let (num, mult) = match a.chars().last()? {
        's' => (&a[..a.len() - 1], 1.0),
        'm' => (&a[..a.len() - 1], 60.0),
        'h' => (&a[..a.len() - 1], 3600.0),
        'd' => (&a[..a.len() - 1], 86400.0),
        _ => (a, 1.0),
    };
    let v: f64 = num.parse().ok()?;
    (v > 0.0 && v.is_finite()).then_some(v * mult)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coreutils_timeout_in_a_shell_loop_is_configuration() {
        let cmd = vec![
            "sh".to_string(),
            "-c".to_string(),
            "while true; do timeout -s TERM 7 python3 -m http.server 8000; done".to_string(),
        ];
        let t = config_timers(&cmd);
        assert_eq!(t.len(), 1, "{t:?}");
        assert_eq!(t[0].0, 7.0);
        assert!(config_timers(&["python3".into(), "app.py".into()]).is_empty());
    }

    fn ended(code: Option<i32>, signal: Option<&str>) -> Ended {
        Ended {
            pid: 7,
            ppid: None,
            command: "srv".into(),
            exit_t: 5.0,
            age: 5.0,
            code,
            signal: signal.map(str::to_string),
            unknown: false,
            serving: true,
            listen_after: None,
            listen_early: 0.0,
            first_line_after: None,
            words: None,
            last_line: None,
            said_why: false,
        }
    }

    /// Each status that means a timer fired is read as one, and only those: the alarm signals, a
    /// CPU-time limit, exit 124, and a kill at a --timer's age (only when the flag fits).
    #[test]
    fn a_status_names_a_timer_only_when_it_means_one_fired() {
        for sig in ["SIGALRM", "SIGVTALRM", "SIGPROF"] {
            let why = ended(None, Some(sig)).fired(false);
            assert_eq!(
                why.as_deref(),
                Some(format!("killed by {sig}: a timer of its own expired").as_str())
            );
        }
        assert_eq!(
            ended(None, Some("SIGXCPU")).fired(false).as_deref(),
            Some("killed by SIGXCPU: its CPU-time limit ran out")
        );
        assert!(ended(Some(124), None).fired(false).is_some());
        for sig in ["SIGKILL", "SIGTERM"] {
            assert_eq!(
                ended(None, Some(sig)).fired(true),
                Some(format!("killed by {sig} at the age of a --timer"))
            );
            assert_eq!(ended(None, Some(sig)).fired(false), None, "{sig}");
        }
        for (code, sig) in [
            (Some(1), None),
            (Some(0), None),
            (Some(137), None),
            (None, Some("SIGSEGV")),
            (None, Some("SIGINT")),
        ] {
            assert_eq!(ended(code, sig).fired(true), None, "{code:?} {sig:?}");
        }
    }

    #[test]
    fn roundness_picks_a_start_but_claims_nothing_alone() {
        assert_eq!(near_round_within(5.01, 0.15), Some(5.0));
        assert_eq!(near_round_within(7.03, 0.15), Some(7.0));
        assert_eq!(near_round_within(1.48, 0.15), None);
    }
}
