//! A run made of several sources (journals merged on one clock, k6 results): what each source brought,
//! how far its clock can be trusted, its requests grouped the way the source itself is shaped (a
//! witness ladder by level; k6, which has no levels or phases, by scenario and by time windows), and
//! every correlation made across sources stated with its uncertainty.
//!
//! Requests from any source are tied to the server's exits, worker deaths and log lines exactly as
//! one witness would tie them ([`super::verdict::annotate`]); only the words about the clocks are
//! added.

use super::inflight::{exit_that_cut, Happenings};
use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::verdict::{annotate, Counts, FailedRequest, LoadAnalysis};
use super::ProcessLife;
use crate::journal::clock::SourceInfo;
use crate::journal::{secs, Event, Header, Outcome, Record};
use crate::stats::{Latency, Summary};

/// Failed requests annotated per group in the report; the rest are counted.
const FAILURES_KEPT: usize = 20;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MergedAnalysis {
    pub sources: Vec<SourceRow>,
    /// How each source's requests are grouped, in words ("k6 has no levels ...").
    pub structure: Vec<String>,
    pub groups: Vec<GroupRow>,
    /// Width of the time windows k6's requests are grouped by, when there are any.
    pub window_s: Option<f64>,
    pub windows: Vec<WindowRow>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SourceRow {
    #[serde(flatten)]
    pub info: SourceInfo,
    pub requests: u64,
    pub lifecycle_events: u64,
}

/// One source's requests of one group (a ladder level, a k6 scenario, a soak kind).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GroupRow {
    pub source: String,
    pub origin: u16,
    pub group: String,
    /// What the group is: "ladder level at concurrency 4", "k6 scenario".
    pub shape: String,
    pub counts: Counts,
    /// Over ok requests only.
    pub latency: Option<Latency>,
    /// How long failed requests took to give up: never latency.
    pub time_to_give_up: Option<Latency>,
    pub errors_by_kind: BTreeMap<String, u64>,
    /// Failed while a server process exited (in flight, or failed just before the exit was seen).
    pub died_with_server: u64,
    /// Sent while the server was down (after an exit, before any new process).
    pub sent_while_down: u64,
    pub failures: Vec<FailedRequest>,
    /// Calls a client made through a wrap source: tabled per method or tool in the observed
    /// section too, so the views need not show them twice.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub observed: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WindowRow {
    pub start_s: f64,
    pub end_s: f64,
    pub counts: Counts,
    pub latency: Option<Latency>,
}

struct Acc {
    row: GroupRow,
    ok: Summary,
    failed: Summary,
}

/// Where each source's requests end, first and last (what a first pass learns): k6's time windows
/// are laid out from it before the requests stream through.
#[derive(Clone, Debug, Default)]
pub struct RequestSpans(HashMap<u16, (f64, f64)>);

impl RequestSpans {
    pub fn add(&mut self, r: &Record) {
        if matches!(r.event, Event::Request { .. }) {
            let e = self
                .0
                .entry(r.origin.unwrap_or(u16::MAX))
                .or_insert((r.t_s, r.t_s));
            e.0 = e.0.min(r.t_s);
            e.1 = e.1.max(r.t_s);
        }
    }
}

/// The merged analysis from the lifecycle records (`recs`) and the requests streamed once
/// (`requests`; anything else in it is ignored), in bounded state: counts and HDR summaries per
/// source and group, the first failures annotated, k6's time windows. The requests an exit cut
/// are told once, with the exit ([`super::cuts`]), whichever sources they came from.
/// None unless the journal was made by merging sources.
pub fn analyze(
    header: &Header,
    recs: &[Record],
    requests: &mut dyn Iterator<Item = Record>,
    spans: &RequestSpans,
    lives: &[ProcessLife],
    load: Option<&mut LoadAnalysis>,
    classes: &super::classify::Classes,
) -> Option<MergedAnalysis> {
    if header.sources.is_empty() {
        return None;
    }
    let info: HashMap<u16, &SourceInfo> = header.sources.iter().map(|s| (s.index, s)).collect();
    let label = |o: Option<u16>| {
        o.and_then(|o| info.get(&o))
            .map(|s| s.label.clone())
            .unwrap_or_else(|| "?".into())
    };
    // Which source journalled each server process, and each ladder level's concurrency.
    let mut pid_origin: HashMap<u32, u16> = HashMap::new();
    let mut concurrency: HashMap<u32, u32> = HashMap::new();
    let mut per_source: HashMap<u16, (u64, u64)> = HashMap::new();
    for r in recs {
        let o = r.origin.unwrap_or(u16::MAX);
        match &r.event {
            Event::Spawn { pid, .. } => {
                pid_origin.insert(*pid, o);
            }
            Event::LevelStart {
                index,
                concurrency: c,
                ..
            } => {
                concurrency.insert(*index, *c);
            }
            _ => {}
        }
        if r.event.is_lifecycle() && !matches!(r.event, Event::Request { .. }) {
            per_source.entry(o).or_default().1 += 1;
        }
    }
    let phrase = |req: Option<u16>, pid: u32| -> Option<String> {
        let srv = pid_origin.get(&pid).copied();
        if req.is_none() || srv.is_none() || req == srv {
            return None;
        }
        let words = |o: Option<u16>| {
            o.and_then(|o| info.get(&o))
                .map(|s| s.correlation.clone())
                .filter(|c| !c.is_empty())
        };
        let w: Vec<String> = [words(req), words(srv)].into_iter().flatten().collect();
        Some(format!("clocks: {}", w.join("; ")))
    };

    let k6_origins: Vec<u16> = header
        .sources
        .iter()
        .filter(|s| s.kind == "k6")
        .map(|s| s.index)
        .collect();
    let mut groups: BTreeMap<(u16, String), Acc> = BTreeMap::new();
    // k6's requests in time windows laid out over their span (all k6 inputs together).
    let k6_span = k6_origins.iter().filter_map(|o| spans.0.get(o)).fold(
        None,
        |acc: Option<(f64, f64)>, &(lo, hi)| {
            Some(acc.map_or((lo, hi), |(a, b)| (a.min(lo), b.max(hi))))
        },
    );
    let mut windows = k6_span.map(|(lo, hi)| Windows::new(lo, hi));
    // The ladder's kept failures, whose source the requests' pass tells.
    let wanted: std::collections::HashSet<u64> = load
        .iter()
        .flat_map(|l| {
            l.levels
                .iter()
                .flat_map(|l| l.failures.iter().map(|f| f.id))
        })
        .collect();
    let mut origin_of: HashMap<u64, (Option<u16>, Outcome)> = HashMap::new();
    // Worker deaths and log lines from every source, for the failures kept.
    let mut seen = Happenings::new(recs);
    let observed = super::observed::Scope::of(header);
    for r in requests {
        let Event::Request {
            id,
            group,
            start_s,
            duration_s,
            outcome,
            detail,
            status,
            ..
        } = &r.event
        else {
            continue;
        };
        // The run's one decision on this request: a refusal a timer answered is a failure at it.
        let at_timer = classes
            .at_timer(group, outcome, *status, *duration_s)
            .map(|(_, rule)| rule.kind());
        let o = r.origin.unwrap_or(u16::MAX);
        per_source.entry(o).or_default().0 += 1;
        if wanted.contains(id) {
            origin_of.insert(*id, (r.origin, outcome.clone()));
        }
        let k6 = k6_origins.contains(&o);
        let acc = groups.entry((o, group.clone())).or_insert_with(|| {
            let seen = observed.observed(&r);
            let shape = match group
                .strip_prefix("level")
                .and_then(|n| n.parse::<u32>().ok())
                .and_then(|n| concurrency.get(&n))
            {
                Some(c) => format!("ladder level at concurrency {c}"),
                None if k6_origins.contains(&o) => "k6 scenario".into(),
                // A real client's calls through a wrap source: their own kind of group, never
                // mistaken for the ladder's or k6's requests.
                None => match &seen {
                    Some(seen) => super::observed::heading(seen.via).into(),
                    None => "request group".into(),
                },
            };
            Acc {
                row: GroupRow {
                    source: label(r.origin),
                    origin: o,
                    group: group.clone(),
                    shape,
                    counts: Counts::default(),
                    latency: None,
                    time_to_give_up: None,
                    errors_by_kind: BTreeMap::new(),
                    died_with_server: 0,
                    sent_while_down: 0,
                    failures: vec![],
                    observed: seen.is_some(),
                },
                ok: Summary::default(),
                failed: Summary::default(),
            }
        });
        let end = r.t_s;
        if outcome.is_answer() {
            seen.answered(end);
        }
        match outcome {
            Outcome::Ok => {
                acc.row.counts.ok += 1;
                acc.ok.record(*duration_s);
            }
            Outcome::Rejected { .. } if at_timer.is_some() => {
                acc.row.counts.error += 1;
                acc.failed.record(*duration_s);
                let kind = at_timer.clone().unwrap_or_default();
                *acc.row.errors_by_kind.entry(kind.clone()).or_default() += 1;
                if acc.row.failures.len() < FAILURES_KEPT {
                    let (annotation, _) =
                        annotate(recs, lives, Some(&seen), *start_s, end, outcome, None);
                    let annotation = match detail.as_deref().filter(|d| !d.is_empty()) {
                        Some(said) => format!("answered {said}; {annotation}"),
                        None => annotation,
                    };
                    acc.row.failures.push(FailedRequest {
                        id: *id,
                        start_s: *start_s,
                        end_s: end,
                        duration_s: *duration_s,
                        outcome: kind,
                        annotation,
                        detail: None,
                    });
                }
            }
            Outcome::Rejected { .. } => acc.row.counts.rejected += 1,
            Outcome::Timeout { .. } | Outcome::Error { .. } => {
                if matches!(outcome, Outcome::Timeout { .. }) {
                    acc.row.counts.timeout += 1;
                } else {
                    acc.row.counts.error += 1;
                }
                acc.failed.record(*duration_s);
                *acc.row
                    .errors_by_kind
                    .entry(outcome.describe())
                    .or_default() += 1;
                let exit = exit_that_cut(lives, *start_s, end, outcome);
                let down = exit.is_none() && down_when_sent(lives, *start_s).is_some();
                acc.row.died_with_server += exit.is_some() as u64;
                acc.row.sent_while_down += down as u64;
                if acc.row.failures.len() < FAILURES_KEPT {
                    let (mut annotation, _) = annotate(
                        recs,
                        lives,
                        Some(&seen),
                        *start_s,
                        end,
                        outcome,
                        detail.as_deref(),
                    );
                    if k6 {
                        // The limit that fired was k6's, not witness's.
                        annotation = annotation.replace("witness's own", "k6's own");
                    }
                    let pid = exit
                        .or_else(|| down_when_sent(lives, *start_s))
                        .map(|l| l.pid);
                    if let Some(p) = pid.and_then(|pid| phrase(r.origin, pid)) {
                        annotation.push_str(&format!(" ({p})"));
                    }
                    acc.row.failures.push(FailedRequest {
                        id: *id,
                        start_s: *start_s,
                        end_s: end,
                        duration_s: *duration_s,
                        outcome: outcome.describe(),
                        annotation,
                        detail: detail.clone(),
                    });
                }
            }
        }
        if let Some(w) = windows.as_mut().filter(|_| k6) {
            let label = if at_timer.is_some() {
                "error"
            } else {
                outcome.label()
            };
            w.add(end, label, *duration_s);
        }
    }

    // Ladder failures: the same correlation, now across sources, gets the same words about clocks.
    if let Some(load) = load {
        for f in load.levels.iter_mut().flat_map(|l| l.failures.iter_mut()) {
            let Some((req, outcome)) = origin_of.get(&f.id) else {
                continue;
            };
            let pid = exit_that_cut(lives, f.start_s, f.end_s, outcome)
                .or_else(|| down_when_sent(lives, f.start_s))
                .map(|l| l.pid);
            let req = *req;
            if let Some(p) = pid.and_then(|pid| phrase(req, pid)) {
                f.annotation.push_str(&format!(" ({p})"));
            }
        }
    }

    let (window_s, windows) = match windows {
        Some(w) => (Some(w.width), w.rows()),
        None => (None, vec![]),
    };
    let mut structure = Vec::new();
    for s in &header.sources {
        let (reqs, _) = per_source.get(&s.index).copied().unwrap_or_default();
        let levels: Vec<String> = groups
            .values()
            .filter(|g| g.row.origin == s.index && g.row.shape.starts_with("ladder"))
            .map(|g| g.row.group.clone())
            .collect();
        let line = if s.kind == "k6" {
            format!(
                "{}: k6 has no levels or phases; its {reqs} requests are grouped by scenario and by {} time windows",
                s.label,
                window_s.map(secs).unwrap_or_else(|| "-".into())
            )
        } else if !levels.is_empty() {
            format!(
                "{}: witness's ladder ({}) in the level table",
                s.label,
                levels.join(", ")
            )
        } else if reqs > 0 && s.kind == "journal" && s.mode == "wrap" {
            format!(
                "{}: {reqs} calls a client made through wrap, per method or tool, kept apart as this source's own",
                s.label
            )
        } else if reqs > 0 {
            format!(
                "{}: {reqs} requests grouped as the source named them",
                s.label
            )
        } else {
            format!("{}: the server's lifecycle, no requests", s.label)
        };
        structure.push(line);
    }
    let sources = header
        .sources
        .iter()
        .map(|s| {
            let (requests, lifecycle_events) =
                per_source.get(&s.index).copied().unwrap_or_default();
            SourceRow {
                info: s.clone(),
                requests,
                lifecycle_events,
            }
        })
        .collect();
    Some(MergedAnalysis {
        sources,
        structure,
        groups: groups
            .into_values()
            .map(|mut a| {
                a.row.latency = a.ok.latency();
                a.row.time_to_give_up = a.failed.latency();
                a.row
            })
            .collect(),
        window_s,
        windows,
    })
}

/// The process whose exit left the server down when a request was sent (no new process yet).
fn down_when_sent(lives: &[ProcessLife], start: f64) -> Option<&ProcessLife> {
    let l = lives
        .iter()
        .filter(|l| l.exit_t_s.is_some_and(|x| x < start))
        .max_by(|a, b| {
            a.exit_t_s
                .unwrap_or(0.0)
                .total_cmp(&b.exit_t_s.unwrap_or(0.0))
        })?;
    let x = l.exit_t_s?;
    let respawned = lives
        .iter()
        .any(|n| n.spawn_t_s > x && n.spawn_t_s <= start);
    (!respawned).then_some(l)
}

/// k6's requests in time windows: about a dozen windows of a round width over the requests' span.
struct Windows {
    width: f64,
    start: f64,
    rows: Vec<(Counts, Summary)>,
}

impl Windows {
    fn new(lo: f64, hi: f64) -> Self {
        const WIDTHS: &[f64] = &[
            0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0,
            7200.0, 21600.0, 43200.0, 86400.0,
        ];
        let span = hi - lo;
        let w = WIDTHS
            .iter()
            .copied()
            .find(|w| span / w <= 12.0)
            .unwrap_or(86400.0);
        let start = (lo / w).floor() * w;
        let n = (((hi - start) / w).floor() as usize + 1).min(64);
        Self {
            width: w,
            start,
            rows: (0..n).map(|_| Default::default()).collect(),
        }
    }

    fn add(&mut self, end: f64, label: &str, d: f64) {
        let n = self.rows.len();
        let i = (((end - self.start) / self.width).floor().max(0.0) as usize).min(n - 1);
        let (c, s) = &mut self.rows[i];
        match label {
            "ok" => {
                c.ok += 1;
                s.record(d);
            }
            "timeout" => c.timeout += 1,
            "error" => c.error += 1,
            _ => c.rejected += 1,
        }
    }

    fn rows(self) -> Vec<WindowRow> {
        let (start, w) = (self.start, self.width);
        self.rows
            .into_iter()
            .enumerate()
            .map(|(i, (counts, s))| WindowRow {
                start_s: start + i as f64 * w,
                end_s: start + (i + 1) as f64 * w,
                counts,
                latency: s.latency(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyze::tests::{exit, spawn};
    use crate::analyze::Subject;
    use crate::journal::clock::SourceInfo;
    use crate::journal::{ErrorKind, Loaded, Stream};

    fn source(index: u16, label: &str, kind: &str, correlation: &str) -> SourceInfo {
        SourceInfo {
            index,
            label: label.into(),
            kind: kind.into(),
            mode: kind.into(),
            correlation: correlation.into(),
            ..SourceInfo::default()
        }
    }

    fn req(id: u64, group: &str, start: f64, dur: f64, outcome: Outcome) -> Event {
        Event::bare_request(id, group, start, dur, outcome)
    }

    fn merged(events: Vec<(f64, Option<u16>, Event)>) -> Loaded {
        let mut header = Header::new("merged", vec![]);
        header.sources = vec![
            source(0, "wrap.jsonl", "journal", ""),
            source(1, "results.json", "k6", "within ±2 ms if k6 ran on web"),
        ];
        Loaded {
            header,
            records: events
                .into_iter()
                .map(|(t_s, origin, event)| Record { t_s, event, origin })
                .collect(),
            truncated: None,
            skipped: vec![],
        }
    }

    fn refused() -> Outcome {
        Outcome::Error {
            error: ErrorKind::ConnectRefused,
            status: None,
        }
    }

    #[test]
    fn a_merged_run_s_level_rows_count_refusals_a_timer_answered_as_failures_at_it() {
        use crate::journal::{Identity, LoadSettings, Probe, Settings};
        let probe = Probe {
            status: Some(200),
            error: None,
            duration_s: 0.001,
            connected: false,
        };
        let id = Some(Identity {
            pid: 7,
            start_time: 1,
            container_id: None,
            container_started_at: None,
            socket_inode: None,
        });
        let start = |index: u32, concurrency: u32| Event::LevelStart {
            index,
            concurrency,
            health: probe.clone(),
            identity: id.clone(),
            skipped: None,
        };
        let stop = |index: u32, concurrency: u32| Event::LevelEnd {
            index,
            concurrency,
            health: probe.clone(),
            identity: id.clone(),
            stopped: None,
            not_sent: None,
            held: None,
            witness_cpu_s: None,
            protocol: None,
        };
        let no = Outcome::Rejected {
            status: Some(503),
            reason: "HTTP 503".into(),
        };
        let settings = Event::Settings(Settings {
            load: Some(LoadSettings {
                factor: 1.5,
                cliff_slack_s: 0.05,
                ..Default::default()
            }),
            ..Default::default()
        });
        let mut ev = vec![
            (0.0, Some(0), settings),
            (0.1, Some(0), start(0, 1)),
            (2.1, Some(0), req(1, "level0", 0.1, 2.0, no.clone())),
            (2.2, Some(0), stop(0, 1)),
            (2.3, Some(0), start(1, 4)),
        ];
        for i in 0..4 {
            ev.push((4.3, Some(0), req(2 + i, "level1", 2.3, 2.002, no.clone())));
        }
        ev.push((4.4, Some(0), stop(1, 4)));
        let a = crate::analyze::analyze(&merged(ev));
        let m = a.merged.expect("merged");
        let row = |g: &str| m.groups.iter().find(|r| r.group == g).unwrap();
        for (g, n) in [("level0", 1), ("level1", 4)] {
            let c = &row(g).counts;
            assert_eq!((c.error, c.rejected), (n, 0), "{g}");
            assert_eq!(
                row(g).failures[0].outcome,
                "error: HTTP 503 at a 2 s timer inside the server"
            );
        }
        let l = a.load.unwrap();
        assert_eq!(l.levels[0].counts.error, 1);
    }

    #[test]
    fn k6_requests_that_died_with_the_server_are_tied_to_its_exit_with_the_clock_stated() {
        let watchdog = Event::Log {
            pid: Some(7),
            stream: Stream::Stderr,
            line: "[oi] process watchdog: force-exiting after 3s (exit 124)".into(),
            label: "watchdog".into(),
            truncated: false,
            timer_s: Some(3.0),
        };
        let a = crate::analyze::analyze(&merged(vec![
            (0.0, Some(0), spawn(7)),
            (1.0, Some(1), req(1, "calls", 0.8, 0.2, Outcome::Ok)),
            (2.0, Some(1), req(2, "calls", 1.7, 0.3, Outcome::Ok)),
            (3.0, Some(0), watchdog),
            (3.0, Some(0), exit(7, 124, 3.0, false)),
            (
                3.05,
                Some(1),
                req(
                    3,
                    "calls",
                    2.9,
                    0.15,
                    Outcome::Error {
                        error: ErrorKind::Reset,
                        status: None,
                    },
                ),
            ),
            (3.5, Some(1), req(4, "calls", 3.5, 0.0, refused())),
            (
                4.0,
                Some(1),
                req(
                    5,
                    "slow",
                    3.0,
                    1.0,
                    Outcome::Timeout {
                        phase: crate::journal::TimeoutPhase::Request,
                        limit_s: 1.0,
                    },
                ),
            ),
        ]));
        let m = a.merged.expect("a merged journal has the merged section");
        let calls = m.groups.iter().find(|g| g.group == "calls").unwrap();
        assert_eq!((calls.counts.ok, calls.counts.error), (2, 2));
        assert_eq!(calls.shape, "k6 scenario");
        // Failed requests never count as latency.
        let lat = calls.latency.as_ref().unwrap();
        assert_eq!((lat.count, lat.max), (2, 0.3));
        assert_eq!(calls.died_with_server, 1);
        assert_eq!(calls.sent_while_down, 1);
        let f = &calls.failures[0].annotation;
        assert!(
            f.contains("exited with 124 (after log line '[oi] process watchdog"),
            "{f}"
        );
        assert!(f.contains("clocks: within ±2 ms if k6 ran on web"), "{f}");
        assert!(calls.failures[1]
            .annotation
            .contains("sent while the server was down"));
        let slow = m.groups.iter().find(|g| g.group == "slow").unwrap();
        assert_eq!(slow.counts.timeout, 1);
        assert!(slow.latency.is_none(), "a timeout is not latency");
        assert!(
            m.structure[1].contains("k6 has no levels or phases"),
            "{:?}",
            m.structure
        );
        assert!(m.window_s.is_some() && !m.windows.is_empty());
        let total: u64 = m
            .windows
            .iter()
            .map(|w| w.counts.ok + w.counts.error + w.counts.timeout)
            .sum();
        assert_eq!(total, 5);
        // The exit at the watchdog's age is the timer suspicion.
        assert!(a
            .suspicions
            .iter()
            .any(|s| s.subject == Subject::ProcessExit && s.timer_s == 3.0));
    }

    #[test]
    fn a_correlation_within_one_source_states_no_clock() {
        let a = crate::analyze::analyze(&merged(vec![
            (0.0, Some(0), spawn(7)),
            (1.0, Some(0), exit(7, 1, 1.0, false)),
            (1.05, Some(0), req(1, "x", 0.5, 0.55, refused())),
        ]));
        let m = a.merged.unwrap();
        assert!(!m.groups[0].failures[0].annotation.contains("clocks:"));
    }

    #[test]
    fn a_single_journal_has_no_merged_section() {
        let a = crate::analyze::analyze(&crate::analyze::tests::loaded(vec![(0.0, spawn(1))]));
        assert!(a.merged.is_none());
    }
}
