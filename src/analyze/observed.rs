//! The exchanges witness observed: a real client's calls passing through `wrap` (its stdio relay,
//! its recording proxy), summarised per method or tool in bounded state: counts by outcome, latency
//! over ok calls from HDR histograms, failed calls' durations apart (how long something took to give
//! up, never latency), the first failures of each call annotated with what the server did meanwhile
//! ([`verdict::annotate`], the words load's failures get), and the MCP handshakes.
//!
//! Only a wrap journal's requests are observed calls (in a merged journal: those of a wrap source);
//! a load level or a soak kind whose name happens to read like an observed group is not one.

use std::collections::HashMap;

use serde::Serialize;

use super::inflight::Happenings;
use super::timers::TimerSource;
use super::verdict::{self, annotate};
use super::{ProcessLife, Suspicion};
use crate::journal::observed::{Observed, Via, PROXY_ANSWERED};
use crate::journal::{ErrorKind, Event, Header, Outcome, Record};
use crate::stats::{Latency, Summary};

/// Distinct calls (method or tool, per source) given a row; the producers bound them already, this
/// bounds a journal that is only input. Calls of groups beyond it are counted together.
pub const GROUPS_KEPT: usize = 64;
/// Failed calls annotated per row; the rest are counted.
pub const FAILURES_KEPT: usize = 20;

/// What a lane, a table and a heading call the calls seen through one of wrap's pass-throughs.
pub fn heading(via: Via) -> &'static str {
    match via {
        Via::Stdio => "calls seen by wrap (stdio)",
        Via::Http => "calls seen by wrap (proxy)",
    }
}

/// Which records of a journal are observed calls: all of a wrap journal's, or those whose origin is
/// a wrap source of a merged one.
#[derive(Clone, Debug, Default)]
pub struct Scope {
    whole: bool,
    /// Wrap sources of a merged journal, with their labels.
    origins: Vec<(u16, String)>,
}

impl Scope {
    pub fn of(header: &Header) -> Self {
        Self {
            whole: header.sources.is_empty() && header.mode == "wrap",
            origins: header
                .sources
                .iter()
                .filter(|s| s.kind == "journal" && s.mode == "wrap")
                .map(|s| (s.index, s.label.clone()))
                .collect(),
        }
    }

    /// Whether this journal can hold observed calls at all.
    pub fn is_empty(&self) -> bool {
        !self.whole && self.origins.is_empty()
    }

    /// Whether a record came from wrap; `Some(label)` names its source in a merged journal.
    fn source(&self, origin: Option<u16>) -> Option<Option<&str>> {
        if self.whole {
            return Some(None);
        }
        let o = origin?;
        self.origins
            .iter()
            .find(|(i, _)| *i == o)
            .map(|(_, l)| Some(l.as_str()))
    }

    /// The observed call a request record is, if it is one.
    pub fn observed(&self, r: &Record) -> Option<Observed> {
        let Event::Request { group, .. } = &r.event else {
            return None;
        };
        self.observed_group(r.origin, group)
    }

    /// The observed call a group of a source is, if it is one.
    pub fn observed_group(&self, origin: Option<u16>, group: &str) -> Option<Observed> {
        self.source(origin)?;
        Observed::parse(group)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CallCounts {
    pub ok: u64,
    /// The server's failures (and its proxy's answers while it was down): every error but a
    /// cancelled call.
    pub error: u64,
    /// Refused for capacity (429, 503, QUEUE_FULL): correct behaviour, counted apart.
    pub rejected: u64,
    /// The client gave up (`notifications/cancelled`) before an answer.
    pub cancelled: u64,
    /// A limit fired (witness sets none on a real client's call, so this stays 0 from wrap).
    pub timeout: u64,
    /// In flight when witness itself was stopped: neither ok nor the server's failure.
    pub interrupted: u64,
    /// Sent with the MCP session of a server process that had exited: witness's proxy answered 404
    /// so the client initializes again. The restart's consequence, not the server's failure.
    pub session_gone: u64,
}

/// Failed calls of one kind: how many, and how long they took to give up.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FailedKind {
    /// The kind as scripts read it: "closed", "rpc", "tool_error", "cancelled", "timeout", ….
    pub kind: String,
    /// The kind in words: "connection closed", "JSON-RPC error", "HTTP 500".
    pub outcome: String,
    pub count: u64,
    pub min_s: f64,
    pub max_s: f64,
}

/// One failed call with what happened to the server while it was in flight.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ObservedFailure {
    pub id: u64,
    pub worker: u32,
    pub start_s: f64,
    pub end_s: f64,
    pub duration_s: f64,
    /// The outcome in words ("connection closed", "JSON-RPC error").
    pub outcome: String,
    pub annotation: String,
    /// What the server said (a tool error's text, a JSON-RPC error's code and message).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl verdict::Failure for ObservedFailure {
    fn id(&self) -> u64 {
        self.id
    }
    fn duration_s(&self) -> f64 {
        self.duration_s
    }
    fn outcome(&self) -> &str {
        &self.outcome
    }
    fn annotation(&self) -> &str {
        &self.annotation
    }
    fn detail(&self) -> Option<&str> {
        self.detail.as_deref()
    }
}

/// One method or tool as the client called it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CallRow {
    /// The journal it came from, in a merged run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    pub via: Via,
    /// "calls seen by wrap (stdio)".
    pub heading: String,
    /// The journal's group: "stdio tools/call echo".
    pub group: String,
    /// As a person reads it: "tools/call echo", "server → client: sampling/createMessage".
    pub label: String,
    pub method: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The server asked the client (sampling, elicitation, roots).
    pub to_client: bool,
    pub calls: u64,
    pub counts: CallCounts,
    /// Over ok calls only.
    pub latency: Option<Latency>,
    /// How long failed calls (errors, cancelled, timeouts) took to give up: never latency.
    pub time_to_give_up: Option<Latency>,
    /// The same, per kind of failure, in the order first seen.
    pub failed_by_kind: Vec<FailedKind>,
    /// The first failed calls, annotated.
    pub failures: Vec<ObservedFailure>,
    /// Failed calls beyond those annotated.
    pub failures_not_kept: u64,
    /// The ok calls' durations behind `latency` (bounded), for `witness compare`.
    #[serde(skip)]
    pub ok_durations: Option<crate::stats::Summary>,
}

/// The MCP `initialize` handshakes wrap saw, timed apart from the calls.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Handshakes {
    pub count: u64,
    pub ok: u64,
    pub failed: u64,
    /// How long they took (ok or not).
    pub duration: Option<Latency>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<String>,
    /// The first failed handshake's detail.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_failure: Option<String>,
}

/// Everything the views show about the calls wrap observed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ObservedAnalysis {
    /// One row per method or tool (and source), in the order first seen.
    pub calls: Vec<CallRow>,
    /// Calls of groups beyond [`GROUPS_KEPT`]: counted, not tabled.
    pub calls_not_tabled: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handshakes: Option<Handshakes>,
}

struct RowAcc {
    row: CallRow,
    ok: Summary,
    failed: Summary,
    answered: super::ok_timers::Acc,
    /// Rules of the run's classes this row's calls failed at ([`super::classify`]).
    at_timer: std::collections::BTreeSet<usize>,
}

/// The observed calls folded in the requests' one streaming pass: `new` reads the context, `request`
/// folds a record in (anything that is not an observed call is ignored), `finish` gives the rows.
pub struct Acc<'a> {
    scope: Scope,
    recs: &'a [Record],
    lives: &'a [ProcessLife],
    named: &'a [(f64, TimerSource)],
    seen: Happenings,
    rows: Vec<RowAcc>,
    /// Rows by source and group: looked up by the record's own strings, no copy per call.
    index: HashMap<Option<u16>, HashMap<String, usize>>,
    not_tabled: u64,
    suspicions: Vec<Suspicion>,
    /// The run's decision on refusals a timer answered: such a call is a failure at that timer.
    classes: super::classify::Classes,
}

impl<'a> Acc<'a> {
    /// None when the journal cannot hold observed calls (not a wrap journal, no wrap source).
    pub fn new(
        header: &Header,
        recs: &'a [Record],
        lives: &'a [ProcessLife],
        named: &'a [(f64, TimerSource)],
    ) -> Option<Self> {
        let scope = Scope::of(header);
        if scope.is_empty() {
            return None;
        }
        Some(Self {
            scope,
            recs,
            lives,
            named,
            seen: Happenings::new(recs),
            rows: Vec::new(),
            index: HashMap::new(),
            not_tabled: 0,
            suspicions: Vec::new(),
            classes: Default::default(),
        })
    }

    /// The same accumulator, classifying each call by `classes` (the rules an earlier fold of the
    /// same requests found).
    pub fn classified(mut self, classes: super::classify::Classes) -> Self {
        self.classes = classes;
        self
    }

    /// The refusals that clustered at a timer in each row's calls: rules of the run's classes.
    pub fn rules(&self) -> Vec<super::classify::Rule> {
        let timers = super::ok_timers::candidates(self.recs, self.named);
        self.rows
            .iter()
            .flat_map(|a| {
                super::ok_timers::refusal_timers(&a.answered, &timers)
                    .into_iter()
                    .map(|timer| super::classify::Rule {
                        found_at: format!("{} {}", a.row.heading, a.row.label),
                        group: a.row.group.clone(),
                        t_s: a.answered.last_end(),
                        timer,
                    })
            })
            .collect()
    }

    /// The groups of the calls tabled: the rules apply to them.
    pub fn groups(&self) -> impl Iterator<Item = String> + '_ {
        self.rows.iter().map(|a| a.row.group.clone())
    }

    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// Folds a record in; true when it was an observed call.
    pub fn request(&mut self, r: &Record) -> bool {
        let Event::Request {
            id,
            group,
            worker,
            start_s,
            duration_s,
            outcome,
            detail,
            status,
            ..
        } = &r.event
        else {
            return false;
        };
        let Some(source) = self.scope.source(r.origin) else {
            return false;
        };
        let known = self
            .index
            .get(&r.origin)
            .and_then(|m| m.get(group.as_str()))
            .copied();
        let i = match known {
            Some(i) => i,
            None => {
                let Some(o) = Observed::parse(group) else {
                    return false;
                };
                if self.rows.len() >= GROUPS_KEPT {
                    self.not_tabled += 1;
                    return true;
                }
                self.rows.push(RowAcc {
                    row: CallRow {
                        source: source.map(str::to_string),
                        via: o.via,
                        heading: heading(o.via).into(),
                        group: group.clone(),
                        label: o.label(),
                        method: o.method.clone(),
                        name: o.name.clone(),
                        to_client: o.to_client,
                        calls: 0,
                        counts: CallCounts::default(),
                        latency: None,
                        time_to_give_up: None,
                        failed_by_kind: Vec::new(),
                        failures: Vec::new(),
                        failures_not_kept: 0,
                        ok_durations: None,
                    },
                    ok: Summary::default(),
                    failed: Summary::default(),
                    answered: Default::default(),
                    at_timer: Default::default(),
                });
                self.index
                    .entry(r.origin)
                    .or_default()
                    .insert(group.clone(), self.rows.len() - 1);
                self.rows.len() - 1
            }
        };
        let at_timer = self
            .classes
            .at_timer(group, outcome, *status, *duration_s)
            .map(|(k, rule)| (k, rule.kind()));
        let acc = &mut self.rows[i];
        acc.answered.request(r);
        let row = &mut acc.row;
        row.calls += 1;
        let end = r.t_s;
        if outcome.is_answer() {
            self.seen.answered(end);
        }
        match outcome {
            Outcome::Ok => {
                row.counts.ok += 1;
                acc.ok.record(*duration_s);
                return true;
            }
            // A refusal a timer inside the server answered: the server's failure, not capacity.
            Outcome::Rejected { .. } if at_timer.is_some() => {
                row.counts.error += 1;
            }
            Outcome::Rejected { .. } => {
                row.counts.rejected += 1;
                return true;
            }
            Outcome::Error {
                error: ErrorKind::Interrupted,
                ..
            } => {
                // Cut short by witness's own stop: not the server's failure, and never latency.
                row.counts.interrupted += 1;
                return true;
            }
            Outcome::Error {
                error: ErrorKind::Cancelled,
                ..
            } => row.counts.cancelled += 1,
            Outcome::Error {
                error: ErrorKind::SessionGone,
                ..
            } => row.counts.session_gone += 1,
            Outcome::Error { .. } => row.counts.error += 1,
            Outcome::Timeout { .. } => row.counts.timeout += 1,
        }
        acc.failed.record(*duration_s);
        let (kind, words) = match at_timer {
            Some((k, kind)) => {
                acc.at_timer.insert(k);
                ("at_timer".to_string(), kind)
            }
            None => kind_of(outcome),
        };
        match row.failed_by_kind.iter_mut().find(|k| k.kind == kind) {
            Some(k) => {
                k.count += 1;
                k.min_s = k.min_s.min(*duration_s);
                k.max_s = k.max_s.max(*duration_s);
            }
            None => row.failed_by_kind.push(FailedKind {
                kind,
                outcome: words.clone(),
                count: 1,
                min_s: *duration_s,
                max_s: *duration_s,
            }),
        }
        let kept = row.failures.len() < FAILURES_KEPT;
        // The server's words go into the annotation; the proxy's own answer (502 while the server
        // was down, 404 for a session a restart ended) is witness's, said in its words first.
        let own = detail
            .as_deref()
            .filter(|d| row.via == Via::Http && d.contains(PROXY_ANSWERED));
        let said = detail.as_deref().filter(|_| {
            own.is_none()
                && !matches!(
                    outcome,
                    Outcome::Error {
                        error: ErrorKind::ConnectRefused,
                        ..
                    }
                )
        });
        let (annotation, _) = annotate(
            self.recs,
            self.lives,
            kept.then_some(&self.seen),
            *start_s,
            end,
            outcome,
            said,
        );
        let annotation = match own {
            // The session's words name both processes already.
            Some(words)
                if matches!(
                    outcome,
                    Outcome::Error {
                        error: ErrorKind::SessionGone,
                        ..
                    }
                ) =>
            {
                words.to_string()
            }
            Some(words) => own_words(words, &annotation),
            None => annotation,
        };
        if kept {
            row.failures.push(ObservedFailure {
                id: *id,
                worker: *worker,
                start_s: *start_s,
                end_s: end,
                duration_s: *duration_s,
                outcome: words,
                annotation,
                detail: verdict::server_words(outcome, detail),
            });
        } else {
            row.failures_not_kept += 1;
        }
        true
    }

    /// The rows, and the suspicions raised by calls a timer answered (the calls an exit cut are
    /// told with the exit, [`super::cuts`]). None when wrap saw
    /// neither a call nor a handshake.
    pub fn finish(mut self) -> (Option<ObservedAnalysis>, Vec<Suspicion>) {
        let handshakes = handshakes(&self.scope, self.recs);
        let timers = super::ok_timers::candidates(self.recs, self.named);
        for a in &self.rows {
            let what = format!("{} {}", a.row.heading, a.row.label);
            let t_s = a.answered.last_end();
            self.suspicions.extend(super::ok_timers::suspicions(
                &what,
                &a.row.group,
                &a.answered,
                &timers,
                t_s,
            ));
        }
        // Where each finding of refusals at a timer counted as failures, said on its suspicion.
        for (k, rule) in self.classes.rules().iter().enumerate() {
            let counted: Vec<String> = self
                .rows
                .iter()
                .filter(|a| a.at_timer.contains(&k))
                .map(|a| format!("{} {}", a.row.heading, a.row.label))
                .collect();
            if counted.is_empty() {
                continue;
            }
            if let Some(s) = self.suspicions.iter_mut().find(|s| {
                s.kind == super::SuspicionKind::RefusalTimer
                    && s.group.as_deref() == Some(rule.group.as_str())
                    && s.seconds == (rule.timer.lo + rule.timer.hi) / 2.0
            }) {
                s.detail.push_str(&format!(
                    "; counted as failures at that timer, not refusals ({})",
                    counted.join(", ")
                ));
            }
        }
        let calls: Vec<CallRow> = self
            .rows
            .into_iter()
            .map(|mut a| {
                a.row.latency = a.ok.latency();
                a.row.ok_durations = (a.ok.count() > 0).then(|| a.ok.clone());
                a.row.time_to_give_up = a.failed.latency();
                a.row
            })
            .collect();
        if calls.is_empty() && self.not_tabled == 0 && handshakes.is_none() {
            return (None, self.suspicions);
        }
        (
            Some(ObservedAnalysis {
                calls,
                calls_not_tabled: self.not_tabled,
                handshakes,
            }),
            self.suspicions,
        )
    }
}

/// The proxy's own answer in its journalled words, then what the lifecycle adds; the lifecycle's
/// "did not exit or restart while it was in flight" is dropped, since the proxy answered without
/// the server (what matters is before it, and the words say it).
fn own_words(words: &str, context: &str) -> String {
    let rest = context
        .strip_prefix(verdict::NOT_CUT)
        .map(|r| r.trim_start_matches("; "))
        .unwrap_or(context);
    if rest.is_empty() {
        words.to_string()
    } else {
        format!("{words}; {rest}")
    }
}

/// A failed outcome's kind, for scripts and in words.
fn kind_of(o: &Outcome) -> (String, String) {
    match o {
        Outcome::Error { error, status } => {
            let kind = serde_json::to_value(error)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_else(|| "other".into());
            let words = match (error, status) {
                // The status of an HTTP error is its kind; a proxy's 502 while the server was down
                // is only how the refusal reached the client.
                (ErrorKind::Http3xx | ErrorKind::Http4xx | ErrorKind::Http5xx, Some(s)) => {
                    format!("{error} {s}")
                }
                _ => error.to_string(),
            };
            let kind = match (error, status) {
                (ErrorKind::Http3xx | ErrorKind::Http4xx | ErrorKind::Http5xx, Some(s)) => {
                    format!("http_{s}")
                }
                _ => kind,
            };
            (kind, words)
        }
        Outcome::Timeout { .. } => ("timeout".into(), o.describe()),
        // Not failures; named for completeness.
        Outcome::Ok | Outcome::Rejected { .. } => (o.label().into(), o.describe()),
    }
}

/// The MCP handshakes of the observed sources.
fn handshakes(scope: &Scope, recs: &[Record]) -> Option<Handshakes> {
    let mut h: Option<(Handshakes, Summary)> = None;
    for r in recs {
        let Event::McpSession {
            protocol_version,
            duration_s,
            ok,
            detail,
            ..
        } = &r.event
        else {
            continue;
        };
        if scope.source(r.origin).is_none() {
            continue;
        }
        let (s, d) = h.get_or_insert_with(|| {
            (
                Handshakes {
                    count: 0,
                    ok: 0,
                    failed: 0,
                    duration: None,
                    protocol_version: None,
                    first_failure: None,
                },
                Summary::default(),
            )
        });
        s.count += 1;
        d.record(*duration_s);
        if *ok {
            s.ok += 1;
            if protocol_version.is_some() {
                s.protocol_version = protocol_version.clone();
            }
        } else {
            s.failed += 1;
            if s.first_failure.is_none() {
                s.first_failure = Some(detail.clone().unwrap_or_else(|| "no detail".into()));
            }
        }
    }
    h.map(|(mut s, d)| {
        s.duration = d.latency();
        s
    })
}

/// The rows grouped under their headings (and sources), in the order first seen: one table each in
/// the views.
pub fn by_heading(a: &ObservedAnalysis) -> Vec<(String, Vec<&CallRow>)> {
    let mut out: Vec<(String, Vec<&CallRow>)> = Vec::new();
    for r in &a.calls {
        let title = match &r.source {
            Some(s) => format!("{} in {s}", r.heading),
            None => r.heading.clone(),
        };
        match out.iter_mut().find(|(t, _)| *t == title) {
            Some((_, rows)) => rows.push(r),
            None => out.push((title, vec![r])),
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::analyze::analyze;
    use crate::analyze::tests::{end, exit, loaded, spawn};
    use crate::analyze::{Subject, SuspicionKind};
    use crate::journal::Stream;

    /// An observed call journalled as wrap's relay does: `t_s` is its end.
    pub fn call(id: u64, group: &str, start: f64, dur: f64, outcome: Outcome) -> (f64, Event) {
        (
            start + dur,
            Event::bare_request(id, group, start, dur, outcome),
        )
    }

    fn with_detail(mut c: (f64, Event), d: &str) -> (f64, Event) {
        if let Event::Request { detail, .. } = &mut c.1 {
            *detail = Some(d.into());
        }
        c
    }

    fn error(error: ErrorKind) -> Outcome {
        Outcome::Error {
            error,
            status: None,
        }
    }

    pub const WATCHDOG: &str = "[slow] watchdog: no progress after 6s, exiting (exit 124)";

    /// The acceptance's shape: an MCP client's handshake, five ok calls of a 1 s tool, and a sixth
    /// cut off 0.84 s in, as the server's 6 s watchdog ends it with 124 right after saying so.
    pub fn watchdog_story() -> Vec<(f64, Event)> {
        let mut ev = vec![
            (0.0, spawn(1234)),
            (
                0.05,
                Event::McpSession {
                    worker: 0,
                    transport: "stdio".into(),
                    protocol_version: Some("2025-06-18".into()),
                    session: false,
                    duration_s: 0.012,
                    ok: true,
                    detail: None,
                },
            ),
        ];
        for i in 0..5 {
            let start = 0.1 + i as f64 * 1.012;
            ev.push(call(
                i + 1,
                "stdio tools/call slow",
                start,
                1.001 + 0.001 * i as f64,
                Outcome::Ok,
            ));
        }
        ev.push((
            5.999,
            Event::Log {
                pid: Some(1234),
                stream: Stream::Stderr,
                line: WATCHDOG.into(),
                label: "watchdog".into(),
                truncated: false,
                timer_s: Some(6.0),
            },
        ));
        ev.push(with_detail(
            call(
                6,
                "stdio tools/call slow",
                5.16,
                0.84,
                error(ErrorKind::Closed),
            ),
            "connection closed: the server exited",
        ));
        ev.push((6.002, exit(1234, 124, 6.002, false)));
        ev.push((6.1, end()));
        ev
    }

    /// Five calls of one tool in flight (a client that pipelines) cut off together as the server
    /// exits with 137, then a sixth that answers a JSON-RPC error of its own.
    pub fn cut_off_together_story() -> Vec<(f64, Event)> {
        let mut ev = vec![(0.0, spawn(1234))];
        for i in 0..5u64 {
            let start = 1.0 + 0.01 * i as f64;
            ev.push(call(
                i + 3,
                "stdio tools/call slow",
                start,
                3.0 - start,
                error(ErrorKind::Closed),
            ));
        }
        ev.push((3.001, exit(1234, 137, 3.001, false)));
        ev.push(with_detail(
            call(9, "stdio tools/call slow", 3.5, 0.01, error(ErrorKind::Rpc)),
            "-32000 busy",
        ));
        ev.push((4.0, end()));
        ev
    }

    #[test]
    fn calls_cut_off_together_are_kept_each_and_group_as_one() {
        let a = analyze(&loaded(cut_off_together_story()));
        let r = &a.observed.as_ref().unwrap().calls[0];
        // Each is kept (the JSON report lists them all) ...
        assert_eq!(
            r.failures.iter().map(|f| f.id).collect::<Vec<_>>(),
            [3, 4, 5, 6, 7, 9]
        );
        // ... and the views' groups say the five once, the sixth apart.
        let g = verdict::group_failures(&r.failures);
        assert_eq!(
            g.iter().map(|g| g.ids.clone()).collect::<Vec<_>>(),
            [vec![3, 4, 5, 6, 7], vec![9]]
        );
        let words = g[0].words_as("call", "calls", " tools/call slow:");
        assert!(
            words.starts_with(
                "calls 3–7 (5) tools/call slow: connection closed after 1.960–2.000s: server pid 1234 exited with 137"
            ),
            "{words}"
        );
    }

    #[test]
    fn a_watchdog_cutting_off_a_call_shows_in_the_row_the_annotation_and_the_suspicion() {
        let a = analyze(&loaded(watchdog_story()));
        let w = a.observed.as_ref().expect("a wrap journal with calls");
        assert_eq!(w.calls.len(), 1);
        let r = &w.calls[0];
        assert_eq!((r.label.as_str(), r.via), ("tools/call slow", Via::Stdio));
        assert_eq!(r.heading, "calls seen by wrap (stdio)");
        assert_eq!((r.calls, r.counts.ok, r.counts.error), (6, 5, 1));
        // The cut-off call's 0.84 s is time to give up, never latency.
        let lat = r.latency.as_ref().unwrap();
        assert_eq!(lat.count, 5);
        assert!((lat.p50 - 1.003).abs() < 0.002, "{lat:?}");
        assert_eq!(lat.max, 1.005);
        assert_eq!(lat.min, 1.001);
        assert_eq!(r.failed_by_kind.len(), 1);
        let k = &r.failed_by_kind[0];
        assert_eq!(
            (k.kind.as_str(), k.outcome.as_str(), k.count, k.min_s),
            ("closed", "connection closed", 1, 0.84)
        );
        let f = &r.failures[0];
        assert_eq!((f.id, f.outcome.as_str()), (6, "connection closed"));
        assert!(
            f.annotation.starts_with(&format!(
                "server pid 1234 exited with 124 (after log line '{WATCHDOG}')"
            )),
            "{}",
            f.annotation
        );
        // The suspicion: the server's exit sits at the 6 s timer its log line named.
        let s: Vec<_> = a
            .suspicions
            .iter()
            .filter(|s| s.subject == Subject::ProcessExit)
            .collect();
        assert_eq!(s.len(), 1, "{:?}", a.suspicions);
        assert_eq!((s[0].timer_s, s[0].pid), (6.0, Some(1234)));
        assert!(
            s[0].detail.starts_with(
                "pid 1234 exited at age 6.00 s — at the 6s timer named in its log line"
            ),
            "{}",
            s[0].detail
        );
        // 0.84 s is no timer: the cut-off call raises no suspicion of its own.
        assert_eq!(a.suspicions.len(), 1, "{:?}", a.suspicions);
        let h = w.handshakes.as_ref().unwrap();
        assert_eq!((h.count, h.ok, h.failed), (1, 1, 0));
        assert_eq!(h.protocol_version.as_deref(), Some("2025-06-18"));
        assert_eq!(h.duration.as_ref().unwrap().max, 0.012);
    }

    #[test]
    fn calls_answered_by_a_timer_are_named_per_method() {
        let g = "stdio tools/call fetch";
        let mut ev = vec![(0.0, spawn(7))];
        for i in 0..16 {
            let d = if i % 4 == 3 { 2.003 } else { 0.004 };
            ev.push(call(i, g, i as f64 * 2.1, d, Outcome::Ok));
        }
        ev.push((40.0, end()));
        let a = analyze(&loaded(ev));
        let s: Vec<_> = a
            .suspicions
            .iter()
            .filter(|s| s.kind == SuspicionKind::OkTimer)
            .collect();
        assert_eq!(s.len(), 1, "{:?}", a.suspicions);
        assert!(
            s[0].detail.starts_with(
                "calls seen by wrap (stdio) tools/call fetch: 4 of 16 ok requests took 2.00 s while the rest took ~4.0 ms: a 2 s timer answered them"
            ),
            "{}",
            s[0].detail
        );
    }

    #[test]
    fn cancelled_rejected_and_interrupted_calls_are_counted_apart_and_never_latency() {
        let g = "stdio tools/call search";
        let a = analyze(&loaded(vec![
            (0.0, spawn(7)),
            call(1, g, 0.1, 0.2, Outcome::Ok),
            call(2, g, 0.3, 9.0, error(ErrorKind::Cancelled)),
            call(
                3,
                g,
                0.4,
                0.001,
                Outcome::Rejected {
                    status: None,
                    reason: "QUEUE_FULL".into(),
                },
            ),
            call(4, g, 0.5, 7.0, error(ErrorKind::Interrupted)),
            with_detail(
                call(5, g, 0.6, 0.05, error(ErrorKind::ToolError)),
                "no such index",
            ),
            (10.0, end()),
        ]));
        let r = &a.observed.unwrap().calls[0];
        let c = &r.counts;
        assert_eq!(
            (c.ok, c.error, c.cancelled, c.rejected, c.interrupted),
            (1, 1, 1, 1, 1)
        );
        assert_eq!(r.latency.as_ref().unwrap().max, 0.2);
        let kinds: Vec<_> = r.failed_by_kind.iter().map(|k| k.kind.as_str()).collect();
        assert_eq!(kinds, ["cancelled", "tool_error"]);
        assert_eq!(r.time_to_give_up.as_ref().unwrap().max, 9.0);
        // The tool's own words are kept as the server's; the interrupted call is not a failure.
        assert_eq!(r.failures.len(), 2);
        assert_eq!(r.failures[1].detail.as_deref(), Some("no such index"));
        assert_eq!(r.failures[0].outcome, "cancelled by the client");
    }

    #[test]
    fn the_proxy_s_answers_while_the_server_was_down_say_so_in_witness_s_words() {
        let down = Outcome::Error {
            error: ErrorKind::ConnectRefused,
            status: Some(502),
        };
        let a = analyze(&loaded(vec![
            (0.0, spawn(7)),
            (1.0, exit(7, 1, 1.0, false)),
            with_detail(
                call(1, "http GET /api/items", 1.3, 0.001, down),
                "the server was down: connect refused",
            ),
            (2.0, end()),
        ]));
        let r = &a.observed.unwrap().calls[0];
        assert_eq!((r.via, r.label.as_str()), (Via::Http, "GET /api/items"));
        assert_eq!(r.heading, "calls seen by wrap (proxy)");
        let f = &r.failures[0];
        assert_eq!(f.outcome, "connect refused");
        assert!(
            f.annotation
                .starts_with("sent while the server was down: pid 7 exited with 1"),
            "{}",
            f.annotation
        );
    }

    #[test]
    fn the_proxy_s_502_before_the_server_listened_keeps_its_words_not_an_exit_it_never_saw() {
        let words =
            "the server was down (nothing listening on 127.0.0.1:9); witness's proxy answered 502";
        let a = analyze(&loaded(vec![
            (0.0, spawn(7)),
            with_detail(
                call(
                    1,
                    "http GET /api/items",
                    0.3,
                    0.001,
                    error(ErrorKind::ConnectRefused),
                ),
                words,
            ),
            (2.0, end()),
        ]));
        let f = &a.observed.unwrap().calls[0].failures[0];
        assert_eq!(f.annotation, words);
        // The server's words are only the server's: none here.
        assert_eq!(f.detail, None);
        // After an exit the journal's words come first, then the exit.
        let a = analyze(&loaded(vec![
            (0.0, spawn(7)),
            (1.0, exit(7, 1, 1.0, false)),
            with_detail(
                call(
                    1,
                    "http GET /api/items",
                    1.3,
                    0.001,
                    error(ErrorKind::ConnectRefused),
                ),
                words,
            ),
            (2.0, end()),
        ]));
        let f = &a.observed.unwrap().calls[0].failures[0];
        assert!(
            f.annotation.starts_with(&format!(
                "{words}; sent while the server was down: pid 7 exited with 1"
            )),
            "{}",
            f.annotation
        );
    }

    #[test]
    fn a_session_a_restart_ended_is_counted_apart_from_the_server_s_errors() {
        let words = "the MCP session was issued by server pid 7, which has exited (the server runs now as pid 8): the restart ended it; witness's proxy answered 404 so the client initializes again";
        let a = analyze(&loaded(vec![
            (0.0, spawn(7)),
            call(1, "http tools/call echo", 0.5, 0.01, Outcome::Ok),
            (1.0, exit(7, 124, 1.0, false)),
            (2.0, spawn(8)),
            with_detail(
                call(
                    2,
                    "http tools/call echo",
                    3.0,
                    0.001,
                    error(ErrorKind::SessionGone),
                ),
                words,
            ),
            call(3, "http tools/call echo", 3.1, 0.01, Outcome::Ok),
            (4.0, end()),
        ]));
        let r = &a.observed.unwrap().calls[0];
        assert_eq!(
            (r.counts.ok, r.counts.error, r.counts.session_gone),
            (2, 0, 1)
        );
        assert_eq!(r.latency.as_ref().unwrap().count, 2);
        let f = &r.failures[0];
        assert_eq!(f.outcome, "session ended by a restart (404)");
        assert_eq!(f.annotation, words);
        assert_eq!(r.failed_by_kind[0].kind, "session_gone");
    }

    #[test]
    fn failed_calls_giving_up_together_at_a_timer_are_a_request_timer_suspicion() {
        // A wrap journal has no load settings; its calls are still searched for a timer.
        let mut ev = vec![(0.0, spawn(7))];
        for i in 0..4 {
            ev.push(with_detail(
                call(
                    i,
                    "stdio tools/call fetch",
                    1.0 + 3.0 * i as f64,
                    2.001 + 0.001 * i as f64,
                    error(ErrorKind::Rpc),
                ),
                "-32001: upstream timed out",
            ));
        }
        ev.push((20.0, end()));
        let a = analyze(&loaded(ev));
        let s: Vec<_> = a
            .suspicions
            .iter()
            .filter(|s| s.kind == SuspicionKind::RequestTimer)
            .collect();
        assert_eq!(s.len(), 1, "{:?}", a.suspicions);
        assert!(
            s[0].detail
                .starts_with("4 failed requests all gave up at 2.00 s"),
            "{}",
            s[0].detail
        );
        let r = &a.observed.unwrap().calls[0];
        assert_eq!(
            r.failures[0].detail.as_deref(),
            Some("-32001: upstream timed out")
        );
    }

    #[test]
    fn only_a_wrap_journal_s_calls_are_observed() {
        // A load journal's level, or a soak kind that reads like an observed group, is not one.
        let ev = vec![
            call(1, "level0", 0.0, 0.1, Outcome::Ok),
            call(2, "stdio tools/call x", 0.0, 0.1, Outcome::Ok),
            (1.0, end()),
        ];
        let mut j = loaded(ev.clone());
        j.header.mode = "soak".into();
        assert!(analyze(&j).observed.is_none());
        let w = analyze(&loaded(ev)).observed.unwrap();
        assert_eq!(w.calls.len(), 1, "{:?}", w.calls);
        assert_eq!(w.calls[0].group, "stdio tools/call x");
        // A wrap journal with neither calls nor a handshake has no observed section.
        assert!(analyze(&loaded(vec![(0.0, spawn(7))])).observed.is_none());
    }

    #[test]
    fn rows_and_annotated_failures_are_bounded_whatever_the_journal() {
        let mut ev = vec![];
        for i in 0..(GROUPS_KEPT as u64 + 36) {
            ev.push(call(
                i,
                &format!("stdio tools/call t{i}"),
                0.0,
                0.1,
                Outcome::Ok,
            ));
        }
        for i in 0..(FAILURES_KEPT as u64 + 10) {
            ev.push(call(
                1000 + i,
                "stdio tools/call t0",
                1.0,
                0.1,
                error(ErrorKind::Rpc),
            ));
        }
        ev.push((5.0, end()));
        let w = analyze(&loaded(ev)).observed.unwrap();
        assert_eq!(w.calls.len(), GROUPS_KEPT);
        assert_eq!(w.calls_not_tabled, 36);
        let r = &w.calls[0];
        assert_eq!(r.failures.len(), FAILURES_KEPT);
        assert_eq!(r.failures_not_kept, 10);
        assert_eq!(r.counts.error, FAILURES_KEPT as u64 + 10);
    }
}
