//! What happened while a failed request was in flight, or at its end: a worker that died, a log line
//! the server wrote (with the pid it names). The server's own exit is verdict.rs's; together they
//! make each failure's annotation, so "the server did not exit or restart" is written only when
//! nothing at all was seen.

use std::sync::LazyLock;

use regex::Regex;

use super::ProcessLife;
use crate::journal::{Event, Outcome, Record};

/// A lifecycle event is "at the request's end" this long after it: the request's end and a log line
/// or a reaped worker are noticed by different threads, a few milliseconds apart.
pub const RESOLUTION_S: f64 = 0.25;
/// How long after a request failed the server's exit may still be its cause: the connection (or
/// pipe) closes as the process dies, and the exit is noticed by another thread a moment later.
pub const EXIT_NOTICED_S: f64 = 0.5;

/// A failure an exit makes: the connection or pipe closed with no answer. An answer (a status, a
/// tool error, a JSON-RPC error) or witness's own limit ended the request by itself.
fn cut_off(outcome: &Outcome) -> bool {
    matches!(outcome, Outcome::Error { .. }) && !outcome.is_answer()
}

/// The server process whose exit can have caused a failed request (evidence before a cause): it
/// exited while the request was in flight, or — for a failure an exit makes, with no answer — just
/// after it failed, unasked ([`EXIT_NOTICED_S`]). An exit after an answer or after witness's own
/// limit fired came later and caused nothing (mcp-server-time's clean exit once its client closed
/// stdin, 0.14 s after a tool error). The closest to the request's end wins.
pub fn exit_that_cut<'a>(
    lives: &'a [ProcessLife],
    start: f64,
    end: f64,
    outcome: &Outcome,
) -> Option<&'a ProcessLife> {
    let after = cut_off(outcome);
    lives
        .iter()
        .filter(|l| {
            l.spawn_t_s <= end
                && l.exit_t_s.is_some_and(|x| {
                    x >= start - 0.001
                        && (x <= end || (after && !l.requested && x <= end + EXIT_NOTICED_S))
                })
        })
        .min_by(|a, b| {
            let d = |l: &ProcessLife| (l.exit_t_s.unwrap_or(end) - end).abs();
            d(a).total_cmp(&d(b))
        })
}

/// An unasked exit just after a failure that it did not cause ([`exit_that_cut`] said no): context
/// for the annotation, in words that say "later".
pub fn exit_later<'a>(
    lives: &'a [ProcessLife],
    start: f64,
    end: f64,
    outcome: &Outcome,
) -> Option<&'a ProcessLife> {
    if exit_that_cut(lives, start, end, outcome).is_some() {
        return None;
    }
    lives
        .iter()
        .filter(|l| {
            !l.requested
                && l.spawn_t_s <= end
                && l.exit_t_s
                    .is_some_and(|x| x > end && x <= end + EXIT_NOTICED_S)
        })
        .min_by(|a, b| {
            a.exit_t_s
                .unwrap_or(end)
                .total_cmp(&b.exit_t_s.unwrap_or(end))
        })
}
/// The most happenings one annotation names.
const MOST: usize = 3;
/// Labels of lines that name a cause (a timer firing, a kill) rather than its aftermath.
const CAUSE_LABELS: &[&str] = &["timeout", "watchdog", "killed", "oom"];
/// The most log lines one annotation quotes.
const MOST_LINES: usize = 2;
/// The most of a log line an annotation quotes.
const LINE_CHARS: usize = 160;

static PID_NAMED: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\bpid\b\s*[:=#]?\s*(\d+)|\b(\d+)#\d+:").expect("a valid pattern")
});

/// The pid a log line names ("(pid:29400)", "pid 7", nginx's "12345#0:"), if any.
pub fn pid_named(line: &str) -> Option<u32> {
    let c = PID_NAMED.captures(line)?;
    c.get(1).or(c.get(2))?.as_str().parse().ok()
}

/// A log line as annotations quote it: trimmed and bounded.
pub fn short_line(line: &str) -> String {
    let shown = crate::journal::logline::shown(line);
    let t = shown.trim();
    if t.chars().count() <= LINE_CHARS {
        t.to_string()
    } else {
        let mut s: String = t.chars().take(LINE_CHARS).collect();
        s.push('…');
        s
    }
}

#[derive(Clone, Debug)]
enum What {
    WorkerDied {
        pid: u32,
        command: String,
        how: String,
        source: String,
        helper: bool,
        /// It ended by itself with 0, or by witness's own signal: read after a failure, it came
        /// later and caused nothing.
        clean: bool,
    },
    Line {
        text: String,
        pid: Option<u32>,
        /// A timeout, watchdog or kill line: the likeliest cause, told first.
        cause: bool,
        /// A line no pattern matched, kept for its instant: told only at a failure's own instant.
        instant: bool,
    },
}

/// How close to a failure's end a line no pattern matched must be written to be what the server
/// said as it failed: a few milliseconds before it (the server writes, then answers), and up to
/// [`EXIT_NOTICED_S`] after it, as witness reads the server's pipe on a thread of its own, which a
/// busy machine schedules late (a line written before the answer was read 0.3 s after it).
pub const SAID_BEFORE_S: f64 = 0.05;

/// Whether a line read at `t` was written at the instant of a failure that ended at `end`.
pub fn said_at(t: f64, end: f64) -> bool {
    t >= end - SAID_BEFORE_S && t <= end + EXIT_NOTICED_S
}

/// The run's worker exits and matched log lines, read once and asked per failed request.
#[derive(Clone, Debug, Default)]
pub struct Happenings {
    items: Vec<(f64, What)>,
    /// When each server process (or container incarnation) started, oldest first, and when the
    /// first exchange it answered ended (fed as the requests stream past, `answered`).
    lives: Vec<(f64, Option<f64>)>,
}

impl Happenings {
    /// `skip_pids`: processes whose exits verdict.rs already tells (the server itself).
    pub fn new(recs: &[Record]) -> Self {
        // A helper's end is told only when abnormal: a non-zero exit, or a signal witness did not
        // send (its shutdown's SIGTERM reaches every helper in the group).
        let sent: Vec<&str> = recs
            .iter()
            .filter_map(|r| match &r.event {
                Event::SignalSent { signal, .. } => Some(signal.as_str()),
                _ => None,
            })
            .collect();
        let items = recs
            .iter()
            .filter_map(|r| {
                let w = match &r.event {
                    Event::WorkerExit {
                        helper: true,
                        code,
                        signal,
                        ..
                    } if code.is_none_or(|c| c == 0)
                        && signal.as_deref().is_none_or(|s| sent.contains(&s)) =>
                    {
                        return None
                    }
                    Event::WorkerExit {
                        pid,
                        command,
                        how,
                        source,
                        helper,
                        code,
                        signal,
                        ..
                    } => What::WorkerDied {
                        pid: *pid,
                        command: command.join(" "),
                        how: how.clone(),
                        source: source.clone(),
                        helper: *helper,
                        clean: match signal.as_deref() {
                            Some(s) => sent.contains(&s),
                            None => *code == Some(0),
                        },
                    },
                    Event::Log { line, label, .. } => What::Line {
                        pid: pid_named(line),
                        text: short_line(line),
                        cause: CAUSE_LABELS.contains(&label.as_str()),
                        instant: false,
                    },
                    Event::Output { line, .. } => What::Line {
                        pid: pid_named(line),
                        text: short_line(line),
                        cause: false,
                        instant: true,
                    },
                    _ => return None,
                };
                Some((r.t_s, w))
            })
            .collect();
        let mut lives: Vec<(f64, Option<f64>)> = recs
            .iter()
            .filter(|r| matches!(r.event, Event::Spawn { .. }))
            .map(|r| (r.t_s, None))
            .collect();
        lives.sort_by(|a, b| a.0.total_cmp(&b.0));
        Self { items, lives }
    }

    /// An exchange the server answered (any response, ok or not) ended at `end`.
    pub fn answered(&mut self, end: f64) {
        let n = self.lives.partition_point(|(t, _)| *t <= end);
        if let Some((_, first)) = n.checked_sub(1).and_then(|i| self.lives.get_mut(i)) {
            if first.is_none_or(|f| end < f) {
                *first = Some(end);
            }
        }
    }

    /// When the first exchange answered by the process started at `spawn_t_s` ended, if one has
    /// been seen.
    pub fn first_answer(&self, spawn_t_s: f64) -> Option<f64> {
        let n = self.lives.partition_point(|(t, _)| *t <= spawn_t_s + 1e-6);
        n.checked_sub(1).and_then(|i| self.lives[i].1)
    }

    /// The line (matched by no pattern) the server wrote at the instant a failure ended at `end`,
    /// the nearest, in words: "'ERROR …' as it failed".
    pub fn said(&self, end: f64) -> Option<String> {
        self.items
            .iter()
            .filter(|(t, w)| matches!(w, What::Line { instant: true, .. }) && said_at(*t, end))
            .min_by(|a, b| (a.0 - end).abs().total_cmp(&(b.0 - end).abs()))
            .and_then(|(_, w)| match w {
                What::Line { text, .. } => Some(format!("'{text}' as it failed")),
                _ => None,
            })
    }

    /// What happened between `start` and `end` (plus the clock's resolution), in words, oldest first.
    /// Lines already told (the dying server's last words) are left out. Of the log lines, those that
    /// name a cause (a timeout, a kill) and those nearest the end are told. A worker's death or a
    /// line read just after the end may still have come first: a helper killed makes its server
    /// answer 500, and the death is read by another thread a few milliseconds later.
    pub fn during(&self, start: f64, end: f64, told: &[&str]) -> Vec<String> {
        let inside: Vec<&(f64, What)> = self
            .items
            .iter()
            .filter(|(t, _)| *t >= start - 0.001 && *t <= end + RESOLUTION_S)
            .collect();
        let mut lines: Vec<&(f64, What)> = inside
            .iter()
            .copied()
            .filter(|(_, w)| match w {
                What::Line { text, instant, .. } => {
                    !instant && !told.iter().any(|l| l.trim() == text.as_str())
                }
                _ => false,
            })
            .collect();
        lines.sort_by(|a, b| {
            let cause = |w: &What| matches!(w, What::Line { cause: true, .. });
            cause(&b.1)
                .cmp(&cause(&a.1))
                .then((a.0 - end).abs().total_cmp(&(b.0 - end).abs()))
        });
        // One line said over and over (each of a burst of failures logs it) is told once, nearest.
        let mut texts: Vec<&str> = Vec::new();
        lines.retain(|(_, w)| match w {
            What::Line { text, .. } if texts.contains(&text.as_str()) => false,
            What::Line { text, .. } => {
                texts.push(text);
                true
            }
            _ => true,
        });
        lines.truncate(MOST_LINES);
        let mut out: Vec<String> = Vec::new();
        for item in &inside {
            let (t, w) = item;
            let when = when(*t, end);
            let text = match w {
                What::WorkerDied {
                    pid,
                    command,
                    how,
                    source,
                    helper,
                    clean,
                } => {
                    let cmd = short_line(command);
                    let who = if *helper { "helper" } else { "worker" };
                    if *clean && *t > end + 0.005 {
                        // Evidence before a cause: a clean end read after the failure is context.
                        format!(
                            "{who} pid {pid} ({cmd}) ended {:.2} s later: {how} (context, not its cause)",
                            t - end
                        )
                    } else {
                        format!("{who} pid {pid} ({cmd}) died: {how} (source: {source}) {when}")
                    }
                }
                What::Line { text, pid, .. } => {
                    if !lines.iter().any(|l| std::ptr::eq(*l, *item)) {
                        continue;
                    }
                    match pid {
                        Some(p) => format!("log line '{text}' naming pid {p} {when}"),
                        None => format!("log line '{text}' {when}"),
                    }
                }
            };
            if !out.contains(&text) {
                out.push(text);
            }
            if out.len() >= MOST {
                break;
            }
        }
        out
    }
}

fn when(t: f64, end: f64) -> String {
    let d = end - t;
    if d.abs() < 0.005 {
        "as it failed".into()
    } else if d > 0.0 {
        format!("{d:.2} s before it failed")
    } else {
        format!("{:.2} s after it failed", -d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::Stream;

    fn log(t: f64, line: &str) -> Record {
        Record {
            t_s: t,
            event: Event::Log {
                pid: Some(1),
                stream: Stream::Stderr,
                line: line.into(),
                label: "timeout".into(),
                truncated: false,
                timer_s: None,
            },
            origin: None,
        }
    }

    #[test]
    fn the_pid_a_line_names() {
        assert_eq!(
            pid_named("[2026-12-01] [29104] [CRITICAL] WORKER TIMEOUT (pid:29400)"),
            Some(29400)
        );
        assert_eq!(
            pid_named("2026/12/01 10:00:00 [error] 4242#4242: *1 upstream timed out"),
            Some(4242)
        );
        assert_eq!(pid_named("Worker exiting (pid: 7)"), Some(7));
        assert_eq!(pid_named("request timed out after 2s"), None);
    }

    #[test]
    fn a_worker_death_and_a_line_inside_the_window_are_told_and_nothing_outside() {
        let recs = vec![
            log(0.5, "WORKER TIMEOUT (pid:10)"),
            log(2.99, "[CRITICAL] WORKER TIMEOUT (pid:11)"),
            Record {
                t_s: 3.02,
                event: Event::WorkerExit {
                    pid: 11,
                    ppid: 1,
                    command: vec!["gunicorn:".into(), "worker".into()],
                    age_s: 3.5,
                    how: "killed by SIGABRT".into(),
                    source: "wait".into(),
                    code: None,
                    signal: Some("SIGABRT".into()),
                    helper: false,
                },
                origin: None,
            },
            log(3.4, "late line (pid:12)"),
        ];
        let h = Happenings::new(&recs);
        let d = h.during(1.0, 3.0, &[]);
        assert_eq!(d.len(), 2, "{d:?}");
        assert_eq!(
            d[0],
            "log line '[CRITICAL] WORKER TIMEOUT (pid:11)' naming pid 11 0.01 s before it failed"
        );
        assert_eq!(
            d[1],
            "worker pid 11 (gunicorn: worker) died: killed by SIGABRT (source: wait) 0.02 s after it failed"
        );
        assert!(h.during(3.5, 4.0, &[]).is_empty());
    }

    /// Evidence before a cause: a worker that ended cleanly 0.11 s after a failure (nginx's worker
    /// at its shutdown) is said as later context, never as what the request died of; one that
    /// died of a signal just after may still have come first.
    #[test]
    fn a_clean_worker_end_after_a_failure_is_later_context_not_its_cause() {
        let exit = |t: f64, pid: u32, code: Option<i32>, signal: Option<&str>| Record {
            t_s: t,
            event: Event::WorkerExit {
                pid,
                ppid: 1,
                command: vec!["nginx:".into(), "worker".into()],
                age_s: 3.5,
                how: match signal {
                    Some(s) => format!("killed by {s}"),
                    None => "exited cleanly (0)".into(),
                },
                source: "wait".into(),
                code,
                signal: signal.map(Into::into),
                helper: false,
            },
            origin: None,
        };
        let clean = Happenings::new(&[exit(3.11, 11, Some(0), None)]).during(1.0, 3.0, &[]);
        assert_eq!(
            clean,
            ["worker pid 11 (nginx: worker) ended 0.11 s later: exited cleanly (0) (context, not its cause)"]
        );
        let killed =
            Happenings::new(&[exit(3.11, 12, None, Some("SIGKILL"))]).during(1.0, 3.0, &[]);
        assert_eq!(
            killed,
            ["worker pid 12 (nginx: worker) died: killed by SIGKILL (source: wait) 0.11 s after it failed"]
        );
    }
}

#[cfg(test)]
mod helper_tests {
    use super::*;

    fn helper(t: f64, pid: u32, code: Option<i32>, signal: Option<&str>) -> Record {
        Record {
            t_s: t,
            event: Event::WorkerExit {
                pid,
                ppid: 1,
                command: vec!["git".into(), "cat-file".into()],
                age_s: 0.01,
                how: "whatever".into(),
                source: "proc_connector".into(),
                code,
                signal: signal.map(Into::into),
                helper: true,
            },
            origin: None,
        }
    }

    #[test]
    fn a_helper_is_named_only_when_it_died_abnormally() {
        let recs = vec![
            helper(1.0, 20, Some(0), None),
            helper(1.1, 21, Some(1), None),
            helper(1.2, 22, None, Some("SIGKILL")),
            Record {
                t_s: 1.25,
                event: Event::SignalSent {
                    pid: 1,
                    signal: "SIGTERM".into(),
                    reason: "shutdown".into(),
                },
                origin: None,
            },
            helper(1.3, 23, None, Some("SIGTERM")),
        ];
        let d = Happenings::new(&recs).during(0.9, 1.3, &[]);
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(
            d[0].starts_with("helper pid 21 (git cat-file) died"),
            "{d:?}"
        );
        assert!(
            d[1].starts_with("helper pid 22 (git cat-file) died"),
            "{d:?}"
        );
    }
}
