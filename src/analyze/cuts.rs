//! Requests an exit cut: a failed request whose server process exited while it was in flight (or
//! as it failed, with no answer: [`super::inflight::exit_that_cut`]) did not measure the server's
//! work but how long it waited for the exit. Whatever timer the exit was, it is the process's (its
//! age at exit: a watchdog armed at start, an exit 124), never the nearest round number to each
//! request's duration: requests that joined a process 1.09 s after it started and died with its 6 s
//! watchdog "took" 4.91 s, and 5 s is no timer of theirs.
//!
//! So the requests are told once per exit, with the exit's own suspicion, whichever journal, level
//! or group they came from ("; it cut requests 0–7 at level 8 after 4.67–4.68 s"). An exit that is
//! no timer raises nothing for them, unless their durations sit at a timer someone named (a
//! `--timer`, a duration in the dying process's own log lines): a timer that started with each
//! request and took the process with it.

use std::collections::{BTreeMap, HashMap};

use super::inflight::exit_that_cut;
use super::observed::Scope;
use super::timers::{timer_at, TimerSource};
use super::{ProcessLife, Subject, Suspicion, SuspicionKind};
use crate::journal::{level_name, ErrorKind, Event, Header, Outcome, Record};

/// Groups (source and group) told per exit; requests of more groups are counted together.
const GROUPS_KEPT: usize = 16;
/// Request ids kept per group and exit; the rest are counted ([`super::verdict::id_ranges`] says
/// them as runs).
const IDS_KEPT: usize = 256;

/// The ids kept of `count` requests, as runs, with those not named counted ("3, 9–12, and 250
/// more").
fn ids_words(ids: &[u64], count: u64) -> String {
    let (words, n) = super::verdict::id_ranges(ids);
    let unseen = count.saturating_sub(n as u64);
    if unseen == 0 {
        return words;
    }
    let named_more = words
        .rsplit_once("and ")
        .and_then(|(head, tail)| Some((head, tail.strip_suffix(" more")?.parse::<u64>().ok()?)));
    match named_more {
        Some((head, more)) => format!("{head}and {} more", more + unseen),
        None => format!("{words}, and {unseen} more"),
    }
}

/// The requests one exit cut, of one group.
#[derive(Debug)]
struct Cut {
    origin: Option<u16>,
    group: String,
    ids: Vec<u64>,
    count: u64,
    min_s: f64,
    max_s: f64,
}

/// The requests each exit cut, folded in the requests' streaming pass in bounded state.
pub struct Cuts<'a> {
    lives: &'a [ProcessLife],
    /// Each ladder level's name (its concurrency, or its rate), per source.
    levels: HashMap<(Option<u16>, u32), String>,
    /// The sources' labels, in a merged journal.
    sources: HashMap<u16, String>,
    observed: Scope,
    /// By the exit's index in `lives`.
    exits: BTreeMap<usize, (Vec<Cut>, u64)>,
}

impl<'a> Cuts<'a> {
    pub fn new(header: &Header, recs: &[Record], lives: &'a [ProcessLife]) -> Self {
        let mut rates: HashMap<(Option<u16>, u32), f64> = HashMap::new();
        let mut conc: Vec<((Option<u16>, u32), u32)> = Vec::new();
        for r in recs {
            match &r.event {
                Event::LevelStart {
                    index, concurrency, ..
                } => conc.push(((r.origin, *index), *concurrency)),
                Event::RateLevel {
                    index, rate_per_s, ..
                } => {
                    rates.insert((r.origin, *index), *rate_per_s);
                }
                _ => {}
            }
        }
        let levels = conc
            .into_iter()
            .map(|(k, c)| (k, level_name(c, rates.get(&k).copied())))
            .collect();
        Self {
            lives,
            levels,
            sources: header
                .sources
                .iter()
                .map(|s| (s.index, s.label.clone()))
                .collect(),
            observed: Scope::of(header),
            exits: BTreeMap::new(),
        }
    }

    /// Folds one record in: a failed request an exit cut is kept with that exit.
    pub fn request(&mut self, r: &Record) {
        let Event::Request {
            id,
            group,
            start_s,
            duration_s,
            outcome,
            ..
        } = &r.event
        else {
            return;
        };
        // witness's own limit, its own stop, a port nobody listened on: not the exit's doing.
        let cut = match outcome {
            Outcome::Error { error, .. } => !matches!(
                error,
                ErrorKind::ConnectRefused
                    | ErrorKind::Local
                    | ErrorKind::Interrupted
                    | ErrorKind::Cancelled
                    | ErrorKind::SessionGone
            ),
            _ => false,
        };
        if !cut {
            return;
        }
        let Some(life) = exit_that_cut(self.lives, *start_s, r.t_s, outcome) else {
            return;
        };
        let Some(i) = self.lives.iter().position(|l| std::ptr::eq(l, life)) else {
            return;
        };
        let (cuts, others) = self.exits.entry(i).or_default();
        let c = match cuts
            .iter_mut()
            .position(|c| c.origin == r.origin && c.group == *group)
        {
            Some(k) => &mut cuts[k],
            None if cuts.len() < GROUPS_KEPT => {
                cuts.push(Cut {
                    origin: r.origin,
                    group: group.clone(),
                    ids: Vec::new(),
                    count: 0,
                    min_s: f64::INFINITY,
                    max_s: 0.0,
                });
                cuts.last_mut().expect("just pushed")
            }
            None => {
                *others += 1;
                return;
            }
        };
        c.count += 1;
        if c.ids.len() < IDS_KEPT {
            c.ids.push(*id);
        }
        c.min_s = c.min_s.min(*duration_s);
        c.max_s = c.max_s.max(*duration_s);
    }

    /// Tells each exit's cut requests once: in the exit's own suspicion when it has one, else in a
    /// suspicion of their own when their durations sit at a named timer (`named`: the `--timer`s).
    pub fn finish(self, suspicions: &mut Vec<Suspicion>, named: &[(f64, TimerSource)]) {
        for (i, (cuts, others)) in &self.exits {
            let life = &self.lives[*i];
            let Some(x) = life.exit_t_s else { continue };
            let lo = cuts.iter().map(|c| c.min_s).fold(f64::INFINITY, f64::min);
            let hi = cuts.iter().map(|c| c.max_s).fold(0.0, f64::max);
            let what = self.what(cuts, *others);
            let took = if hi - lo < 0.005 {
                format!("{lo:.2} s")
            } else {
                format!("{lo:.2}–{hi:.2} s")
            };
            let exit = suspicions.iter().position(|s| {
                s.subject == Subject::ProcessExit
                    && s.pid == Some(life.pid)
                    && (s.t_s - x).abs() < 1e-6
            });
            let one = cuts.iter().map(|c| c.count).sum::<u64>() + others == 1;
            let theirs = if one {
                "its duration measures"
            } else {
                "their durations measure"
            };
            // A timer someone named at their durations: one that started with each request and
            // took the process with it.
            let mut timers = named.to_vec();
            timers.extend(
                life.log_lines
                    .iter()
                    .filter_map(|g| Some((g.timer_s?, TimerSource::LogLine(g.line.clone())))),
            );
            let at = |d: f64| {
                timer_at(d, &timers).filter(|(t, src)| *src != TimerSource::Round && d <= t + 0.05)
            };
            let at_theirs = match (at(lo), at(hi)) {
                (Some((t, src)), Some((t2, _))) if (t - t2).abs() < 1e-9 => Some((t, src)),
                _ => None,
            };
            // The exit's own timer, unless it is only a round number and theirs was named.
            if let Some(i) = exit.filter(|&i| {
                at_theirs.is_none() || suspicions[i].timer_source != TimerSource::Round
            }) {
                suspicions[i].detail.push_str(&format!(
                    "; it cut {what} after {took}: {theirs} this timer, not the server"
                ));
                continue;
            }
            let Some((t, src)) = at_theirs else {
                continue;
            };
            let group = match cuts.as_slice() {
                [one] if *others == 0 => Some(one.group.clone()),
                _ => None,
            };
            suspicions.push(Suspicion {
                armed_s: None,
                kind: SuspicionKind::RoundTimer,
                subject: Subject::Request,
                seconds: (lo + hi) / 2.0,
                timer_s: t,
                t_s: x,
                pid: Some(life.pid),
                group,
                detail: format!(
                    "{what} ended after {took} — at {} as pid {} exited: {theirs} the timer, not the server",
                    src.describe(t),
                    life.pid
                ),
                timer_source: src,
            });
        }
    }

    /// The requests, in words: "requests 0–7 at level 8", "call 6 (tools/call slow)", "requests
    /// 3, 9 at level 8 of load.jsonl and 2 more in other groups".
    fn what(&self, cuts: &[Cut], others: u64) -> String {
        let mut parts: Vec<String> = cuts
            .iter()
            .map(|c| {
                let ids = ids_words(&c.ids, c.count);
                let many = c.count > 1;
                let from = c
                    .origin
                    .and_then(|o| self.sources.get(&o))
                    .map(|l| format!(" of {l}"))
                    .unwrap_or_default();
                let level = c
                    .group
                    .strip_prefix("level")
                    .and_then(|n| n.parse::<u32>().ok())
                    .and_then(|n| self.levels.get(&(c.origin, n)));
                // Only a wrap source's groups are calls a client made.
                let call = self.observed.observed_group(c.origin, &c.group);
                match (level, call.map(|o| o.label())) {
                    (Some(l), _) => format!(
                        "{} {ids} at level {l}{from}",
                        if many { "requests" } else { "request" }
                    ),
                    (None, Some(label)) => format!(
                        "{} {ids} ({label}){from}",
                        if many { "calls" } else { "call" }
                    ),
                    (None, None) => format!(
                        "{} {ids} ({}){from}",
                        if many { "requests" } else { "request" },
                        c.group
                    ),
                }
            })
            .collect();
        if others > 0 {
            parts.push(format!("{others} more in other groups"));
        }
        match parts.len() {
            0 => String::new(),
            1 => parts.remove(0),
            _ => {
                let last = parts.pop().expect("two or more");
                format!("{} and {last}", parts.join(", "))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::analyze::tests::{end, exit, loaded, spawn};
    use crate::analyze::{analyze, Subject, TimerSource};
    use crate::journal::clock::SourceInfo;
    use crate::journal::{
        ErrorKind, Event, Header, LoadSettings, Loaded, Outcome, Record, Settings, Stream,
    };

    fn call(id: u64, group: &str, start: f64, dur: f64, outcome: Outcome) -> Event {
        Event::bare_request(id, group, start, dur, outcome)
    }

    fn closed() -> Outcome {
        Outcome::Error {
            error: ErrorKind::ClosedBeforeResponse,
            status: None,
        }
    }

    fn tool_error() -> Outcome {
        Outcome::Error {
            error: ErrorKind::ToolError,
            status: None,
        }
    }

    fn settings(timers_s: Vec<f64>) -> Event {
        Event::Settings(Settings {
            timers_s,
            load: Some(LoadSettings {
                factor: 1.5,
                cliff_slack_s: 0.05,
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    fn watchdog_line(t: f64) -> Event {
        Event::Log {
            pid: Some(7),
            stream: Stream::Stderr,
            line: format!("[oi] process watchdog: force-exiting after {t}s (exit 124)"),
            label: "watchdog".into(),
            truncated: false,
            timer_s: Some(t),
        }
    }

    fn source(index: u16, label: &str, mode: &str) -> SourceInfo {
        SourceInfo {
            index,
            label: label.into(),
            kind: "journal".into(),
            mode: mode.into(),
            correlation: "within ±2 ms on one host".into(),
            ..SourceInfo::default()
        }
    }

    /// toy_server --watchdog 6s under `wrap`, a `load` attached 1.09 s into its life, merged: the
    /// level's 8 requests "took" 4.91 s as the watchdog ended the process. One cause, told once:
    /// the exit at its 6 s watchdog, with the requests it cut; no 5 s timer, no copy per journal.
    #[test]
    fn requests_cut_by_a_watchdog_exit_are_told_once_with_the_exit_in_a_merged_run() {
        let mut header = Header::new("merged", vec![]);
        header.sources = vec![
            source(0, "wrap.jsonl", "wrap"),
            source(1, "load.jsonl", "load"),
        ];
        let mut events: Vec<(f64, Option<u16>, Event)> = vec![
            (0.0, Some(0), spawn(7)),
            (0.05, Some(1), settings(vec![])),
            (
                1.09,
                Some(1),
                Event::LevelStart {
                    index: 0,
                    concurrency: 8,
                    health: crate::journal::Probe {
                        status: Some(200),
                        error: None,
                        duration_s: 0.001,
                        connected: false,
                    },
                    identity: None,
                    skipped: None,
                },
            ),
            (6.0, Some(0), watchdog_line(6.0)),
            (6.01, Some(0), exit(7, 124, 6.01, false)),
        ];
        for i in 0..8 {
            events.push((6.0, Some(1), call(i, "level0", 1.09, 4.91, closed())));
        }
        events.push((6.6, Some(0), end()));
        events.sort_by(|a, b| a.0.total_cmp(&b.0));
        let a = analyze(&Loaded {
            header,
            records: events
                .into_iter()
                .map(|(t_s, origin, event)| Record { t_s, event, origin })
                .collect(),
            truncated: None,
            skipped: vec![],
        });
        assert_eq!(a.suspicions.len(), 1, "{:#?}", a.suspicions);
        let s = &a.suspicions[0];
        assert_eq!(
            (s.subject, s.timer_s, s.pid),
            (Subject::ProcessExit, 6.0, Some(7))
        );
        assert!(
            s.detail
                .starts_with("pid 7 exited at age 6.01 s — at the 6s timer named in its log line"),
            "{}",
            s.detail
        );
        assert!(
            s.detail.ends_with("; it cut requests 0–7 at level 8 of load.jsonl after 4.91 s: their durations measure this timer, not the server"),
            "{}",
            s.detail
        );
        assert!(!s.detail.contains("5s"), "{}", s.detail);
    }

    #[test]
    fn ids_beyond_those_kept_are_counted_with_the_runs_not_named() {
        assert_eq!(super::ids_words(&[3, 4, 5, 9], 4), "3–5, 9");
        assert_eq!(super::ids_words(&[3, 4, 5, 9], 10), "3–5, 9, and 6 more");
        let every_other: Vec<u64> = (0..20).map(|i| i * 2).collect();
        assert_eq!(
            super::ids_words(&every_other, 100),
            "0, 2, 4, 6, 8, 10, and 94 more"
        );
    }

    /// An exit that is no timer (exit 1 at 47.3 s): the requests it cut are a timer's only when
    /// their durations sit at one someone named.
    #[test]
    fn an_exit_at_no_timer_names_one_for_its_requests_only_when_someone_named_it() {
        let story = |timers: Vec<f64>| {
            analyze(&loaded(vec![
                (0.0, settings(timers)),
                (0.0, spawn(7)),
                (47.3, call(1, "level0", 17.32, 29.98, closed())),
                (47.3, exit(7, 1, 47.3, false)),
                (47.4, end()),
            ]))
        };
        let named = story(vec![30.0]);
        assert_eq!(named.suspicions.len(), 1, "{:?}", named.suspicions);
        let s = &named.suspicions[0];
        assert_eq!((s.subject, s.timer_s), (Subject::Request, 30.0));
        assert_eq!(s.timer_source, TimerSource::Flag);
        assert!(
            s.detail.starts_with("request 1 (level0) ended after 29.98 s — at the 30s timer given with --timer as pid 7 exited"),
            "{}",
            s.detail
        );
        // 30 s is a round number, but nobody named it and the exit is no timer: nothing.
        assert!(story(vec![]).suspicions.is_empty());
    }

    /// An exit only at a round number (SIGKILL at 30.0 s) does not take requests whose durations
    /// sit at a timer someone named: theirs is the closer reading.
    #[test]
    fn requests_at_a_named_timer_are_not_taken_by_an_exit_at_a_mere_round_number() {
        let a = analyze(&loaded(vec![
            (0.0, settings(vec![2.0])),
            (0.0, spawn(7)),
            (30.0, call(1, "level0", 28.02, 1.98, closed())),
            (30.0, call(2, "level0", 28.01, 1.99, closed())),
            (30.0, exit(7, 137, 30.0, false)),
            (30.1, end()),
        ]));
        // An exit 137 at 30.0 s says nothing of a timer: a round age alone is no evidence.
        assert_eq!(a.suspicions.len(), 1, "{:#?}", a.suspicions);
        assert!(a
            .suspicions
            .iter()
            .all(|s| s.subject != Subject::ProcessExit));
        let req = &a
            .suspicions
            .iter()
            .find(|s| s.subject == Subject::Request)
            .unwrap();
        assert_eq!(req.timer_s, 2.0);
        assert!(
            req.detail.starts_with("requests 1, 2 (level0) ended after 1.98–1.99 s — at the 2s timer given with --timer as pid 7 exited"),
            "{}",
            req.detail
        );
    }

    /// mcp-server-time's story: a tool error, then the clean exit once the client closed stdin
    /// 0.14 s later. The exit came after the answer: context, said as later, never the cause; no
    /// suspicion. A call the same exit cut off (no answer) is tied to it.
    #[test]
    fn an_exit_after_the_answer_is_later_context_and_one_after_a_closed_call_is_its_cause() {
        let g = "stdio tools/call get_current_time";
        let a = analyze(&loaded(vec![
            (0.0, spawn(7)),
            (1.0, call(1, g, 0.99, 0.01, tool_error())),
            (1.14, exit(7, 0, 1.14, false)),
            (1.2, end()),
        ]));
        let f = &a.observed.as_ref().unwrap().calls[0].failures[0];
        assert_eq!(
            f.annotation,
            "the server did not exit or restart while it was in flight; server pid 7 exited with 0 0.14 s later"
        );
        assert!(a.suspicions.is_empty(), "{:?}", a.suspicions);
        // The grouped words keep "later" and drop the figure.
        let said = crate::analyze::verdict::group_failures(&[f.clone(), {
            let mut g = f.clone();
            g.id = 2;
            g.annotation = g.annotation.replace("0.14 s later", "0.09 s later");
            g
        }])[0]
            .words();
        assert!(
            said.ends_with("; server pid 7 exited with 0 later"),
            "{said}"
        );
        let cut = analyze(&loaded(vec![
            (0.0, spawn(7)),
            (
                1.0,
                call(
                    1,
                    g,
                    0.5,
                    0.5,
                    Outcome::Error {
                        error: ErrorKind::Closed,
                        status: None,
                    },
                ),
            ),
            (1.14, exit(7, 0, 1.14, false)),
            (1.2, end()),
        ]));
        let f = &cut.observed.as_ref().unwrap().calls[0].failures[0];
        assert!(
            f.annotation
                .starts_with("server pid 7 exited with 0 0.14 s after this request failed"),
            "{}",
            f.annotation
        );
        // Beyond the moment an exit takes to be noticed, not even that.
        let late = analyze(&loaded(vec![
            (0.0, spawn(7)),
            (
                1.0,
                call(
                    1,
                    g,
                    0.5,
                    0.5,
                    Outcome::Error {
                        error: ErrorKind::Closed,
                        status: None,
                    },
                ),
            ),
            (1.7, exit(7, 0, 1.7, false)),
            (1.8, end()),
        ]));
        let f = &late.observed.as_ref().unwrap().calls[0].failures[0];
        assert_eq!(
            f.annotation,
            "the server did not exit or restart while it was in flight"
        );
    }

    /// A silent exit 124 at a non-round age is a timer: its age, round or not. Another status at
    /// the same age is not.
    #[test]
    fn a_silent_exit_124_is_a_timer_at_its_age() {
        let story = |code: i32| {
            analyze(&loaded(vec![
                (0.0, spawn(7)),
                (8.04, exit(7, code, 8.04, false)),
                (8.1, end()),
            ]))
        };
        let a = story(124);
        assert_eq!(a.suspicions.len(), 1, "{:?}", a.suspicions);
        let s = &a.suspicions[0];
        assert_eq!(
            (s.subject, s.timer_s, &s.timer_source),
            (Subject::ProcessExit, 8.0, &TimerSource::Exit124)
        );
        assert!(
            s.detail.starts_with(
                "pid 7 exited 124 at age 8.04 s — at the ~8s timer its exit 124 says fired"
            ),
            "{}",
            s.detail
        );
        assert!(story(1).suspicions.is_empty());
        assert!(story(0).suspicions.is_empty());
    }
}
