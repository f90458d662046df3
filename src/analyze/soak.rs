//! The soak's findings, from the journal alone: per request kind the outcome counts, status
//! distribution and latency (HDR, over ok requests, counted from the *scheduled* send time when a
//! worker fell behind); the server's resources before, after and as a memory trend; gauges with their
//! growth per 1,000 requests and drain results; every invariant's result at every interval; injected
//! faults, the intervals and figures they overlap (not a clean baseline); restarts; and the verdict.
//!
//! Honesty rules from the soak that reported p50 ≈ 2 s: the achieved duration is what the journal shows ran, never the plan;
//! a run that stopped early says so and why; rejections are capacity, never failures — and a
//! refusal a timer inside the server answered is no rejection but an error at that timer
//! ([`super::classify`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::stats::{Latency, Summary};
use super::trend::{classify, Trend, TrendClass};
pub use crate::journal::latency_s;
use crate::journal::{bytes, secs, Event, Kin, Outcome, Record, Settings};

/// What the soak journals about itself in `Settings.extra.soak`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct SoakSettings {
    pub duration_planned_s: f64,
    pub interval_s: f64,
    pub seed: u64,
    #[serde(default)]
    pub max_error_rate: f64,
    #[serde(default)]
    pub inject: Vec<String>,
    #[serde(default)]
    pub plan_file: Option<String>,
    /// The plan's shape (kinds, groups, checks, gauges); never a secret's value.
    #[serde(default)]
    pub plan: serde_json::Value,
}

impl SoakSettings {
    pub fn of(s: &Settings) -> Option<Self> {
        serde_json::from_value(s.extra.get("soak")?.clone()).ok()
    }
}

/// One request kind's figures.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct KindRow {
    pub name: String,
    pub requests: u64,
    pub ok: u64,
    /// Capacity refusals (429, 503, QUEUE_FULL): correct behaviour, never failures. A refusal a
    /// timer inside the server answered is not one: it is an error ([`super::classify`]).
    pub rejected: u64,
    pub timeouts: u64,
    /// Everything else that failed: 5xx, 4xx, refused or reset connections, refusals at a timer.
    pub errors: u64,
    /// Errors of a kind the run decided on: "error: HTTP 503 at a 2 s timer inside the server".
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub errors_by_kind: BTreeMap<String, u64>,
    /// Status codes, or the error's name when there was no response.
    pub statuses: BTreeMap<String, u64>,
    /// For each failing status or error above, what the first such request's answer said (the
    /// server's words, as load's failures quote them): one per key, so bounded.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub said: BTreeMap<String, String>,
    /// Over ok requests, from the scheduled send time when late.
    pub latency: Option<Latency>,
    /// Sends that went more than 5 ms after they were due (the worker was behind).
    pub late_sends: u64,
    pub max_lateness_s: f64,
    /// Requests that overlapped an injected fault.
    pub in_fault_windows: u64,
    /// Failed requests outside any fault window: what the verdict counts.
    pub failed_outside_faults: u64,
    /// False when an injected fault overlapped any of these requests.
    pub clean_baseline: bool,
    /// The ok requests' durations behind `latency` (bounded), for `witness compare`.
    #[serde(skip)]
    pub ok_durations: Option<crate::stats::Summary>,
}

/// One reading of the server's process tree.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProcRow {
    pub t_s: f64,
    pub pid: u32,
    /// The whole tree's.
    pub rss_bytes: u64,
    pub cpu_pct: f64,
    pub threads: u64,
    pub fds: u64,
    pub children: u64,
    /// The server process's own (the rest of `rss_bytes` is its children's), where it was read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub own_rss_bytes: Option<u64>,
    /// The children by program, the most numerous first (kept for the before and after readings).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kin: Vec<Kin>,
}

impl ProcRow {
    /// The server process's own memory: its own where read apart, else the tree's.
    fn own(&self) -> u64 {
        self.own_rss_bytes.unwrap_or(self.rss_bytes)
    }
    /// The children's memory, where the server's own was read apart.
    fn childrens(&self) -> Option<u64> {
        self.own_rss_bytes
            .map(|own| self.rss_bytes.saturating_sub(own))
    }
}

/// The tree below the server over the soak: how many processes and how much memory, told apart
/// from the server's own heap, and the program that grew.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChildrenTrend {
    /// Growth when their number or their memory grows (and is still growing at the end).
    pub class: TrendClass,
    /// The words the verdict and the views use.
    pub detail: String,
    pub before: u64,
    pub after: u64,
    /// Their memory, where the server's own was read apart from it.
    pub memory_before_bytes: Option<u64>,
    pub memory_after_bytes: Option<u64>,
    /// The program whose processes grew the most ("sleep 600"), its count before and after, and
    /// how many of those after were zombies (ended, never reaped).
    pub command: Option<String>,
    pub command_before: u64,
    pub command_after: u64,
    pub zombies: u64,
    /// The figures that decided it: the number of processes, and their memory.
    pub count: Trend,
    pub memory: Option<Trend>,
    pub clean_baseline: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MemoryTrend {
    /// "flat", "sawtooth", "growth" or "too_few_samples".
    pub class: TrendClass,
    pub slope_bytes_per_s: f64,
    pub detail: String,
    /// The process whose readings were classified (the longest-lived one, across restarts).
    pub pid: Option<u32>,
    pub clean_baseline: bool,
    /// The figures that decided it.
    pub figures: Trend,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Peaks {
    pub rss_bytes: u64,
    pub cpu_pct: f64,
    pub threads: u64,
    pub fds: u64,
    pub children: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Resources {
    /// "process" (the tree from /proc) or "container" (the engine's stats: `rss_bytes` is the
    /// container's memory, `threads` its pids, `pid` 0); "none" when nothing was sampled.
    pub source: String,
    /// The last reading before the workload started (or the first one).
    pub before: Option<ProcRow>,
    /// The last reading.
    pub after: Option<ProcRow>,
    pub samples: usize,
    pub peak: Option<Peaks>,
    /// Distinct server processes seen.
    pub processes: usize,
    /// The server process's own memory (the tree's where its own was not read apart).
    pub memory_trend: MemoryTrend,
    /// The processes below it; None where the tree was not read (a container).
    pub children: Option<ChildrenTrend>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Drain {
    pub ok: bool,
    pub detail: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GaugeRow {
    pub name: String,
    pub samples: usize,
    pub errors: usize,
    pub last_error: Option<String>,
    pub first: Option<f64>,
    pub last: Option<f64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
    /// Least-squares slope of the value against requests completed, per 1,000 requests.
    pub growth_per_1k_requests: Option<f64>,
    pub trend: Option<TrendClass>,
    pub drain: Option<Drain>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CheckResult {
    pub interval: u32,
    pub t_s: f64,
    pub ok: bool,
    pub detail: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct InvariantRow {
    pub name: String,
    pub checked: u32,
    pub failed: u32,
    pub results: Vec<CheckResult>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct IntervalRow {
    pub index: u32,
    pub start_s: f64,
    pub end_s: f64,
    /// Requests completed by the interval's close.
    pub requests: u64,
    pub violations: Vec<String>,
    /// False when an injected fault overlapped it.
    pub clean_baseline: bool,
    pub faults: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Injected {
    pub action: String,
    pub t_s: f64,
    pub pid: u32,
    pub detail: String,
    /// When the server was seen back (healthy, identity settled); None: never within the run.
    pub until_s: Option<f64>,
    pub recovered: bool,
    /// Intervals it overlapped: none of their figures is a clean baseline.
    pub intervals: Vec<u32>,
    pub requests_overlapping: u64,
    pub restarts: u32,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Restarts {
    pub total: u32,
    pub injected: u32,
    pub unexpected: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SoakAnalysis {
    /// "pass", "fail", "incomplete" (stopped early with no violation) or "refused".
    pub verdict: String,
    pub reasons: Vec<String>,
    pub partial: bool,
    pub aborted_reason: Option<String>,
    /// The interval at which the violation that ended the soak was seen.
    pub aborted_interval: Option<u32>,
    pub duration_planned_s: f64,
    pub duration_achieved_s: f64,
    pub interval_s: f64,
    pub seed: u64,
    pub connect_floor_ms: Option<f64>,
    pub refused: Option<String>,
    pub totals: KindRow,
    pub kinds: Vec<KindRow>,
    pub resources: Resources,
    pub gauges: Vec<GaugeRow>,
    pub invariants: Vec<InvariantRow>,
    pub intervals: Vec<IntervalRow>,
    pub injected: Vec<Injected>,
    pub restarts: Restarts,
    /// Things worth a look that do not fail the soak by themselves.
    pub warnings: Vec<String>,
    /// Timers in what each kind answered ([`super::ok_timers`]): listed with the run's suspicions.
    #[serde(skip)]
    pub suspicions: Vec<super::Suspicion>,
    /// Refusals a timer answered, as each kind found them: the run's classes
    /// ([`super::classify`]), with the ladder's and the observed calls'.
    #[serde(skip)]
    pub rules: Vec<super::classify::Rule>,
}

/// The actions that start a fault window.
const INJECTING: &[&str] = &["kill", "stop", "restart"];

#[derive(Default)]
struct Fold {
    row: KindRow,
    hist: Summary,
    answered: super::ok_timers::Acc,
    /// Per rule of the run's classes: how many requests failed at it, their shortest and longest.
    at_timer: BTreeMap<usize, (u64, f64, f64)>,
}

impl Fold {
    /// `at`: the run's decision that this refusal was answered by a timer (a rule's index and
    /// the kind of failure it is).
    fn add(&mut self, r: &Req, in_window: bool, at: Option<(usize, &str)>) {
        let k = &mut self.row;
        k.requests += 1;
        if let Some(due) = r.scheduled_s {
            k.late_sends += 1;
            k.max_lateness_s = k.max_lateness_s.max(r.start_s - due);
        }
        let status = match (&r.status, r.outcome) {
            (Some(s), _) => s.to_string(),
            (None, Outcome::Timeout { .. }) => "timeout".into(),
            (None, Outcome::Error { error, .. }) => error.to_string(),
            (None, o) => o.label().into(),
        };
        if r.outcome.is_failure() || at.is_some() {
            if let Some(d) = r.detail.filter(|d| !d.is_empty()) {
                k.said
                    .entry(status.clone())
                    .or_insert_with(|| d.chars().take(200).collect());
            }
        }
        *k.statuses.entry(status).or_default() += 1;
        if in_window {
            k.in_fault_windows += 1;
        }
        self.answered.add(
            r.outcome,
            r.status,
            r.start_s,
            r.duration_s,
            r.end_s,
            r.connect_s,
        );
        match (r.outcome, at) {
            (Outcome::Ok, _) => {
                k.ok += 1;
                self.hist
                    .record(latency_s(r.start_s, r.duration_s, r.scheduled_s));
            }
            // A refusal a timer inside the server answered: the server's failure, not capacity.
            (Outcome::Rejected { .. }, Some((i, kind))) => {
                k.errors += 1;
                *k.errors_by_kind.entry(kind.to_string()).or_default() += 1;
                let d = r.duration_s;
                let e = self.at_timer.entry(i).or_insert((0, d, d));
                *e = (e.0 + 1, e.1.min(d), e.2.max(d));
            }
            (Outcome::Rejected { .. }, None) => k.rejected += 1,
            (Outcome::Timeout { .. }, _) => k.timeouts += 1,
            (Outcome::Error { .. }, _) => k.errors += 1,
        }
        if (r.outcome.is_failure() || at.is_some()) && !in_window {
            k.failed_outside_faults += 1;
        }
    }
    fn done(mut self) -> KindRow {
        self.row.latency = self.hist.latency();
        self.row.ok_durations = (self.hist.count() > 0).then(|| self.hist.clone());
        self.row.clean_baseline = self.row.in_fault_windows == 0;
        self.row
    }
}

struct Req<'a> {
    start_s: f64,
    end_s: f64,
    duration_s: f64,
    scheduled_s: Option<f64>,
    status: Option<u16>,
    outcome: &'a Outcome,
    connect_s: Option<f64>,
    detail: Option<&'a str>,
}

/// The soak analysis from the run's lifecycle records (`recs`) and its requests streamed once
/// (`requests`; anything else in it is ignored), folded per kind into bounded summaries; None when
/// the journal is not a soak's. `classes`: the run's decision on refusals a timer answered (empty
/// on a first fold; the rules that fold finds are [`SoakAnalysis::rules`]).
pub fn analyze_soak(
    recs: &[Record],
    requests: &mut dyn Iterator<Item = Record>,
    settings: &Settings,
    end_s: f64,
    classes: &super::classify::Classes,
) -> Option<SoakAnalysis> {
    let ss = SoakSettings::of(settings)?;

    // Intervals and the workload's span.
    let mut bounds: Vec<(u32, f64, u64)> = Vec::new();
    for r in recs {
        if let Event::Interval { index, requests } = &r.event {
            bounds.push((*index, r.t_s, *requests));
        }
    }
    let t0 = bounds.first().map(|b| b.1);
    // Workers send nothing past the planned end, so the last close's timer slack is not soak time.
    let achieved = match (bounds.first(), bounds.last()) {
        (Some(a), Some(b)) => (b.1 - a.1).clamp(0.0, ss.duration_planned_s),
        _ => 0.0,
    };

    // Fault windows: an injecting fault opens one, the next "recovered" closes the oldest open one.
    let mut injected: Vec<Injected> = Vec::new();
    for r in recs {
        if let Event::Fault {
            action,
            pid,
            detail,
        } = &r.event
        {
            if INJECTING.contains(&action.as_str()) {
                injected.push(Injected {
                    action: action.clone(),
                    t_s: r.t_s,
                    pid: *pid,
                    detail: detail.clone(),
                    until_s: None,
                    recovered: false,
                    intervals: vec![],
                    requests_overlapping: 0,
                    restarts: 0,
                });
            } else if action == "recovered" {
                if let Some(f) = injected.iter_mut().find(|f| !f.recovered) {
                    f.recovered = true;
                    f.until_s = Some(r.t_s);
                }
            }
        }
    }
    let window = |f: &Injected| (f.t_s, f.until_s.unwrap_or(end_s));
    let windows: Vec<(f64, f64)> = injected.iter().map(window).collect();
    let overlaps = |a: f64, b: f64| windows.iter().position(|&(s, e)| a <= e && b >= s);

    // Requests, folded per kind into bounded summaries.
    let mut kinds: BTreeMap<String, Fold> = BTreeMap::new();
    let mut totals = Fold::default();
    let mut per_fault = vec![0u64; injected.len()];
    for r in requests {
        let Event::Request {
            group,
            start_s,
            duration_s,
            outcome,
            status,
            scheduled_s,
            connect_s,
            detail,
            ..
        } = &r.event
        else {
            continue;
        };
        let req = Req {
            connect_s: *connect_s,
            detail: detail.as_deref(),
            start_s: *start_s,
            end_s: r.t_s,
            duration_s: *duration_s,
            scheduled_s: *scheduled_s,
            status: *status,
            outcome,
        };
        let from = scheduled_s.unwrap_or(*start_s);
        let hit = overlaps(from, req.end_s);
        if let Some(i) = hit {
            per_fault[i] += 1;
        }
        let at = classes
            .at_timer(group, outcome, *status, *duration_s)
            .map(|(i, rule)| (i, rule.kind()));
        let at = at.as_ref().map(|(i, kind)| (*i, kind.as_str()));
        kinds
            .entry(group.clone())
            .or_insert_with(|| Fold {
                row: KindRow {
                    name: group.clone(),
                    ..Default::default()
                },
                ..Default::default()
            })
            .add(&req, hit.is_some(), at);
        totals.add(&req, hit.is_some(), at);
    }
    let flags: Vec<_> = settings
        .timers_s
        .iter()
        .map(|&t| (t, super::timers::TimerSource::Flag))
        .collect();
    let timers = super::ok_timers::candidates(recs, &flags);
    let mut suspicions = Vec::new();
    let mut rules = Vec::new();
    for (name, f) in &kinds {
        let what = format!("soak kind {name}");
        suspicions.extend(super::ok_timers::suspicions(
            &what,
            name,
            &f.answered,
            &timers,
            end_s,
        ));
        rules.extend(
            super::ok_timers::refusal_timers(&f.answered, &timers)
                .into_iter()
                .map(|timer| super::classify::Rule {
                    found_at: what.clone(),
                    group: name.clone(),
                    t_s: end_s,
                    timer,
                }),
        );
    }
    // What the run's decision made of each kind's refusals: the reasons (or warnings) that name
    // the timer, and where each finding counted, said on its suspicion.
    let mut at_timer_words = Vec::new();
    for (k, rule) in classes.rules().iter().enumerate() {
        let counted: Vec<String> = kinds
            .iter()
            .filter(|(_, f)| f.at_timer.contains_key(&k))
            .map(|(name, _)| format!("soak kind {name}"))
            .collect();
        if counted.is_empty() {
            continue;
        }
        if let Some(s) = suspicions.iter_mut().find(|s| {
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
    for (name, f) in &kinds {
        for (k, (n, lo, hi)) in &f.at_timer {
            if let Some(rule) = classes.rules().get(*k) {
                at_timer_words.push(format!(
                    "soak kind {name}: {}",
                    rule.reason(*n, *lo, *hi, rule.group == *name)
                ));
            }
        }
    }
    let kinds: Vec<KindRow> = kinds.into_values().map(Fold::done).collect();
    let mut totals = totals.done();
    totals.name = "all".into();

    // Intervals, and which faults overlap them.
    let mut intervals: Vec<IntervalRow> = bounds
        .windows(2)
        .map(|w| {
            let (start, end) = (w[0].1, w[1].1);
            let faults: Vec<String> = injected
                .iter()
                .filter(|f| {
                    let (s, e) = window(f);
                    s <= end && e > start
                })
                .map(|f| format!("injected {} at t={:.3}s", f.action, f.t_s))
                .collect();
            IntervalRow {
                index: w[1].0,
                start_s: start,
                end_s: end,
                requests: w[1].2,
                violations: vec![],
                clean_baseline: faults.is_empty(),
                faults,
            }
        })
        .collect();
    for (i, f) in injected.iter_mut().enumerate() {
        let (s, e) = window(f);
        f.intervals = intervals
            .iter()
            .filter(|iv| s <= iv.end_s && e > iv.start_s)
            .map(|iv| iv.index)
            .collect();
        f.requests_overlapping = per_fault[i];
    }

    // Invariants per interval.
    let mut invariants: Vec<InvariantRow> = Vec::new();
    let mut first_violation: Option<(u32, String)> = None;
    let mut drains: BTreeMap<String, Drain> = BTreeMap::new();
    for r in recs {
        let Event::Invariant {
            interval,
            name,
            ok,
            detail,
        } = &r.event
        else {
            continue;
        };
        if let Some(g) = name.strip_prefix("drain:") {
            drains.insert(
                g.to_string(),
                Drain {
                    ok: *ok,
                    detail: detail.clone(),
                },
            );
            continue;
        }
        let row = match invariants.iter_mut().position(|x| x.name == *name) {
            Some(i) => &mut invariants[i],
            None => {
                invariants.push(InvariantRow {
                    name: name.clone(),
                    checked: 0,
                    failed: 0,
                    results: vec![],
                });
                invariants.last_mut().expect("just pushed")
            }
        };
        row.checked += 1;
        if !ok {
            row.failed += 1;
            if first_violation.is_none() {
                first_violation = Some((*interval, format!("{name}: {detail}")));
            }
            if let Some(iv) = intervals.iter_mut().find(|iv| iv.index == *interval) {
                iv.violations.push(format!("{name}: {detail}"));
            }
        }
        row.results.push(CheckResult {
            interval: *interval,
            t_s: r.t_s,
            ok: *ok,
            detail: detail.clone(),
        });
    }

    // Restarts: every later spawn, injected when it falls in a fault window.
    let mut restarts = Restarts::default();
    for r in recs {
        if let Event::Spawn { attempt, .. } = &r.event {
            if *attempt == 0 {
                continue;
            }
            restarts.total += 1;
            match injected
                .iter_mut()
                .find(|f| r.t_s >= f.t_s && r.t_s <= f.until_s.unwrap_or(end_s))
            {
                Some(f) => {
                    f.restarts += 1;
                    restarts.injected += 1;
                }
                None => restarts.unexpected += 1,
            }
        }
    }

    let resources = resources(recs, t0, &windows);
    let gauges = gauges(recs, &bounds, drains);

    let refused = recs.iter().find_map(|r| match &r.event {
        Event::Note { level, text } if level == "refused" => Some(text.clone()),
        _ => None,
    });
    let connect_floor_ms = recs.iter().find_map(|r| match &r.event {
        Event::ConnectFloor { median_ms, .. } => *median_ms,
        _ => None,
    });
    let end = recs.iter().rev().find_map(|r| match &r.event {
        Event::End {
            partial, reason, ..
        } => Some((*partial, reason.clone())),
        _ => None,
    });
    let partial = !matches!(end, Some((false, _)));
    let aborted_reason = match &end {
        Some((true, reason)) => Some(reason.clone()),
        Some((false, _)) => None,
        None => Some(format!(
            "the journal ends at t={end_s:.3}s with no end record: witness was stopped or crashed"
        )),
    };

    // The verdict.
    let mut reasons = Vec::new();
    if let Some((i, v)) = &first_violation {
        reasons.push(format!("invariant violated at interval {i}: {v}"));
    }
    for g in &gauges {
        if let Some(d) = g.drain.as_ref().filter(|d| !d.ok) {
            reasons.push(format!("gauge {} did not drain: {}", g.name, d.detail));
        }
    }
    let m = &resources.memory_trend;
    let overlapped = |clean: bool| {
        if clean {
            ""
        } else {
            " (an injected fault overlapped these readings)"
        }
    };
    if m.class == TrendClass::Growth && refused.is_none() {
        reasons.push(format!(
            "server memory grows: {}{}",
            m.detail,
            overlapped(m.clean_baseline)
        ));
    }
    if let Some(c) = resources
        .children
        .as_ref()
        .filter(|c| c.class == TrendClass::Growth && refused.is_none())
    {
        reasons.push(format!("{}{}", c.detail, overlapped(c.clean_baseline)));
    }
    let counted = totals.requests
        - totals.rejected
        - totals
            .in_fault_windows
            .min(totals.requests - totals.rejected);
    let failed = totals.failed_outside_faults;
    if failed > 0 {
        let rate = failed as f64 / counted.max(1) as f64;
        if rate > ss.max_error_rate {
            reasons.push(format!(
                "{failed} request(s) failed outside injected faults ({:.2}% of {counted}, allowed {:.2}%)",
                rate * 100.0,
                ss.max_error_rate * 100.0
            ));
            // Which of them a timer inside the server answered.
            reasons.append(&mut at_timer_words);
        }
    }
    if restarts.unexpected > 0 && first_violation.is_none() {
        reasons.push(format!(
            "{} restart(s) that no injected fault explains",
            restarts.unexpected
        ));
    }
    if totals.requests == 0 && refused.is_none() {
        reasons.push("no request completed".into());
    }
    let verdict = if refused.is_some() {
        "refused"
    } else if !reasons.is_empty() {
        "fail"
    } else if partial {
        reasons.push(format!(
            "stopped early ({}) after {} of {}: no violation seen, but not the whole soak",
            aborted_reason.as_deref().unwrap_or("partial"),
            secs(achieved),
            secs(ss.duration_planned_s)
        ));
        "incomplete"
    } else {
        "pass"
    };

    let mut warnings = Vec::new();
    // Failures at a timer the error rate allowed: errors all the same, said with their timer.
    warnings.append(&mut at_timer_words);
    if totals.late_sends > 0 {
        warnings.push(format!(
            "{} send(s) went late (up to {} behind schedule): the workers fell behind, and those latencies count from when each request was due",
            totals.late_sends,
            secs(totals.max_lateness_s)
        ));
    }
    for g in &gauges {
        if g.trend == Some(TrendClass::Growth) {
            warnings.push(format!(
                "gauge {} kept growing{}: is it bounded by retention?",
                g.name,
                g.growth_per_1k_requests
                    .map(|x| format!(" ({x:+.2} per 1,000 requests)"))
                    .unwrap_or_default()
            ));
        }
    }
    if !injected.is_empty() {
        let marked: Vec<String> = kinds
            .iter()
            .filter(|k| !k.clean_baseline)
            .map(|k| k.name.clone())
            .collect();
        if !marked.is_empty() {
            warnings.push(format!(
                "injected faults overlapped requests of {}: those figures are not a clean baseline",
                marked.join(", ")
            ));
        }
    }

    Some(SoakAnalysis {
        verdict: verdict.into(),
        reasons,
        partial,
        aborted_reason,
        aborted_interval: first_violation.as_ref().map(|v| v.0),
        duration_planned_s: ss.duration_planned_s,
        duration_achieved_s: achieved,
        interval_s: ss.interval_s,
        seed: ss.seed,
        connect_floor_ms,
        refused,
        totals,
        kinds,
        resources,
        gauges,
        invariants,
        intervals,
        injected,
        restarts,
        warnings,
        suspicions,
        rules,
    })
}

fn resources(recs: &[Record], t0: Option<f64>, windows: &[(f64, f64)]) -> Resources {
    let mut rows: Vec<ProcRow> = recs
        .iter()
        .filter_map(|r| match &r.event {
            // RSS 0 is a process caught exiting (or a zombie), not a reading of its memory.
            Event::ProcSample {
                pid,
                rss_bytes,
                cpu_pct,
                threads,
                fds,
                children,
                own_rss_bytes,
                ..
            } if *rss_bytes > 0 => Some(ProcRow {
                t_s: r.t_s,
                pid: *pid,
                rss_bytes: *rss_bytes,
                cpu_pct: *cpu_pct,
                threads: *threads,
                fds: *fds,
                children: *children,
                own_rss_bytes: *own_rss_bytes,
                kin: vec![],
            }),
            _ => None,
        })
        .collect();
    let mut source = "process";
    if rows.is_empty() {
        source = "container";
        rows = recs
            .iter()
            .filter_map(|r| match &r.event {
                Event::ContainerSample {
                    mem_bytes,
                    cpu_pct,
                    pids,
                    ..
                } => Some(ProcRow {
                    t_s: r.t_s,
                    pid: 0,
                    rss_bytes: *mem_bytes,
                    cpu_pct: *cpu_pct,
                    threads: *pids,
                    fds: 0,
                    children: 0,
                    own_rss_bytes: None,
                    kin: vec![],
                }),
                _ => None,
            })
            .collect();
    }
    if rows.is_empty() {
        source = "none";
    }
    // The server when the workload began: the last reading of it ready (a reading while it was
    // still starting is a process half loaded), else its first reading after.
    let ready = recs.iter().find_map(|r| match &r.event {
        Event::Ready { ok: true, .. } => Some(r.t_s),
        _ => None,
    });
    let before = match t0 {
        Some(t0) => rows
            .iter()
            .rev()
            .find(|r| r.t_s <= t0 && ready.is_none_or(|t| r.t_s >= t))
            .or_else(|| rows.iter().find(|r| r.t_s >= t0))
            .or(rows.first()),
        None => rows.first(),
    }
    .map(|r| with_kin(recs, r));
    let after = rows.last().map(|r| with_kin(recs, r));
    let peak = (!rows.is_empty()).then(|| Peaks {
        rss_bytes: rows.iter().map(|r| r.rss_bytes).max().unwrap_or(0),
        cpu_pct: rows.iter().map(|r| r.cpu_pct).fold(0.0, f64::max),
        threads: rows.iter().map(|r| r.threads).max().unwrap_or(0),
        fds: rows.iter().map(|r| r.fds).max().unwrap_or(0),
        children: rows.iter().map(|r| r.children).max().unwrap_or(0),
    });
    // The trend of one process's memory: across a restart the series would start over. The workload's
    // readings only (from its start), of the process with the most of them.
    let mut by_pid: Vec<(u32, Vec<&ProcRow>)> = Vec::new();
    for r in rows.iter().filter(|r| t0.is_none_or(|t| r.t_s >= t)) {
        match by_pid.iter_mut().find(|(p, _)| *p == r.pid) {
            Some((_, v)) => v.push(r),
            None => by_pid.push((r.pid, vec![r])),
        }
    }
    let processes = {
        let mut p: Vec<u32> = rows.iter().map(|r| r.pid).collect();
        p.sort_unstable();
        p.dedup();
        p.len()
    };
    let longest = by_pid.iter().max_by_key(|(_, v)| v.len());
    let readings: &[&ProcRow] = longest.map(|(_, v)| v.as_slice()).unwrap_or(&[]);
    // The server's own memory, apart from its children's where it was read apart.
    let series: Vec<(f64, f64)> = readings.iter().map(|r| (r.t_s, r.own() as f64)).collect();
    let mut figures = classify(&series);
    // A small process's RSS rises in the allocator's steps as load warms it (a few hundred KiB
    // for a 2 MiB server in a 7 s soak): under MIN_RSS_GROWTH_BYTES it is not called a leak,
    // whatever its share of the level.
    let grew = figures.last_third_median - figures.first_third_median;
    if figures.class == TrendClass::Growth && grew < MIN_RSS_GROWTH_BYTES {
        figures.class = TrendClass::Flat;
        figures.detail = format!(
            "{}; but only {:.0} KiB in all, under the 1 MiB a process's allocator takes in steps: not called growth",
            figures.detail,
            grew.max(0.0) / 1024.0
        );
    }
    let clean = match (readings.first(), readings.last()) {
        (Some(a), Some(b)) => !windows.iter().any(|&(s, e)| s <= b.t_s && e >= a.t_s),
        _ => true,
    };
    let mut detail = figures.detail.clone();
    if by_pid.len() > 1 {
        if let Some((pid, v)) = longest {
            detail = format!(
                "{detail} (pid {pid}'s {} readings; {} server processes were seen)",
                v.len(),
                by_pid.len()
            );
        }
    }
    let children = (source == "process" && !readings.is_empty()).then(|| {
        children_trend(
            recs,
            readings,
            before.as_ref().filter(|b| b.pid == readings[0].pid),
            &figures,
            clean,
        )
    });
    Resources {
        source: source.into(),
        before,
        after,
        samples: rows.len(),
        peak,
        processes,
        memory_trend: MemoryTrend {
            class: figures.class,
            slope_bytes_per_s: figures.slope_per_s,
            detail,
            pid: longest.map(|(p, _)| *p),
            clean_baseline: clean,
            figures,
        },
        children,
    }
}

/// `row` with the children by program its reading named (kept for the few rows a report shows).
fn with_kin(recs: &[Record], row: &ProcRow) -> ProcRow {
    let kin = recs
        .iter()
        .find_map(|r| match &r.event {
            Event::ProcSample { pid, kin, .. } if *pid == row.pid && r.t_s == row.t_s => {
                Some(kin.clone())
            }
            _ => None,
        })
        .unwrap_or_default();
    ProcRow { kin, ..row.clone() }
}

/// Children fewer than this more over a soak are a pool settling, not a leak of processes.
pub const MIN_CHILDREN_GROWTH: f64 = 5.0;

/// The tree below the server over `readings` (one server process's, from the workload's start):
/// its process count and its memory, each classified as the server's memory is, and the program
/// that grew named from the first and last readings' children by program.
fn children_trend(
    recs: &[Record],
    readings: &[&ProcRow],
    before: Option<&ProcRow>,
    own: &Trend,
    clean: bool,
) -> ChildrenTrend {
    let count_series: Vec<(f64, f64)> = readings
        .iter()
        .map(|r| (r.t_s, r.children as f64))
        .collect();
    let mut count = classify(&count_series);
    if count.class == TrendClass::Growth
        && count.last_third_median - count.first_third_median < MIN_CHILDREN_GROWTH
    {
        count.class = TrendClass::Flat;
        count.detail = format!(
            "{}; but fewer than {MIN_CHILDREN_GROWTH} processes more: not called growth",
            count.detail
        );
    }
    let memory_series: Option<Vec<(f64, f64)>> = readings
        .iter()
        .map(|r| r.childrens().map(|b| (r.t_s, b as f64)))
        .collect();
    let memory = memory_series.map(|m| {
        let mut t = classify(&m);
        if t.class == TrendClass::Growth
            && t.last_third_median - t.first_third_median < MIN_RSS_GROWTH_BYTES
        {
            t.class = TrendClass::Flat;
        }
        t
    });
    let first = before
        .cloned()
        .unwrap_or_else(|| with_kin(recs, readings[0]));
    let last = with_kin(recs, readings[readings.len() - 1]);
    // The program that grew the most, from the first reading's children to the last's: the same
    // words, else the same program (a reading names one of its processes, which may differ).
    let program = |c: &str| c.split(' ').next().unwrap_or("").to_string();
    let was = |cmd: &str| {
        let k = first.kin.iter().find(|k| k.command == cmd).or_else(|| {
            first
                .kin
                .iter()
                .find(|k| program(&k.command) == program(cmd))
        });
        k.map(|k| k.count).unwrap_or(0)
    };
    let grown: Option<&Kin> = last
        .kin
        .iter()
        .max_by_key(|k| k.count.saturating_sub(was(&k.command)));
    let memory_grows = memory
        .as_ref()
        .is_some_and(|m| m.class == TrendClass::Growth);
    let class = if count.class == TrendClass::Growth || memory_grows {
        TrendClass::Growth
    } else if count.class == TrendClass::TooFewSamples {
        TrendClass::TooFewSamples
    } else if count.class == TrendClass::Sawtooth
        || memory
            .as_ref()
            .is_some_and(|m| m.class == TrendClass::Sawtooth)
    {
        TrendClass::Sawtooth
    } else {
        TrendClass::Flat
    };
    let (b, a) = (first.children, last.children);
    let mem = |r: &ProcRow| r.childrens();
    let their_memory = match (mem(&first), mem(&last)) {
        // No children hold no memory: "0", not a reading of "0 B".
        (Some(x), Some(y)) if x > 0 || y > 0 => {
            let b = |v: u64| if v == 0 { "0".into() } else { bytes(v as f64) };
            format!("; their memory {} -> {}", b(x), b(y))
        }
        _ => String::new(),
    };
    let own_words = match (first.own_rss_bytes, last.own_rss_bytes) {
        (Some(x), Some(y)) if own.class == TrendClass::Growth => format!(
            "; the server's own rss grows too: {} -> {}",
            bytes(x as f64),
            bytes(y as f64)
        ),
        (Some(x), Some(y)) => format!(
            "; the server's own rss {} ({} -> {})",
            match own.class {
                TrendClass::Sawtooth => "rises and falls back",
                TrendClass::TooFewSamples => "was read too few times to tell",
                _ => "stays flat",
            },
            bytes(x as f64),
            bytes(y as f64)
        ),
        _ => String::new(),
    };
    let who = match grown {
        Some(k) => {
            let zombies = match k.zombies {
                0 => "all still running".to_string(),
                z if z == k.count => "all zombies: ended, never reaped".to_string(),
                z => format!("zombies: {z}, ended and never reaped"),
            };
            if k.count == a && was(&k.command) == b {
                format!("{b} -> {a} `{}` processes ({zombies})", k.command)
            } else {
                format!(
                    "{b} -> {a} processes, `{}` {} -> {} of them ({zombies})",
                    k.command,
                    was(&k.command),
                    k.count
                )
            }
        }
        None => format!("{b} -> {a} processes"),
    };
    let detail = if count.class == TrendClass::Growth {
        format!("the server's children grow: {who}{their_memory}{own_words}")
    } else if memory_grows {
        format!("the server's children's memory grows: {who}{their_memory}{own_words}",)
    } else {
        format!("the server's children stay {class}: {who}{their_memory}")
    };
    ChildrenTrend {
        class,
        detail,
        before: b,
        after: a,
        memory_before_bytes: mem(&first),
        memory_after_bytes: mem(&last),
        command: grown.map(|k| k.command.clone()),
        command_before: grown.map(|k| was(&k.command)).unwrap_or(0),
        command_after: grown.map(|k| k.count).unwrap_or(0),
        zombies: grown.map(|k| k.zombies).unwrap_or(0),
        count,
        memory,
        clean_baseline: clean,
    }
}

/// Server memory that grew by less than this over a soak is not a leak (see [`resources`]).
pub const MIN_RSS_GROWTH_BYTES: f64 = 1024.0 * 1024.0;

type Series = (String, Vec<(f64, f64, f64)>, usize, Option<String>);

fn gauges(
    recs: &[Record],
    bounds: &[(u32, f64, u64)],
    mut drains: BTreeMap<String, Drain>,
) -> Vec<GaugeRow> {
    // Per gauge: its readings (t, value, requests completed at the latest interval close before
    // it), how many failed, and the last failure.
    let mut series: Vec<Series> = Vec::new();
    let mut requests_now = 0.0;
    for r in recs {
        match &r.event {
            Event::Interval { requests, .. } => requests_now = *requests as f64,
            Event::Gauge { name, value, error } => {
                let i = match series.iter().position(|s| s.0 == *name) {
                    Some(i) => i,
                    None => {
                        series.push((name.clone(), vec![], 0, None));
                        series.len() - 1
                    }
                };
                match value {
                    Some(v) => series[i].1.push((r.t_s, *v, requests_now)),
                    None => {
                        series[i].2 += 1;
                        series[i].3 = error.clone();
                    }
                }
            }
            _ => {}
        }
    }
    let _ = bounds;
    let mut out: Vec<GaugeRow> = series
        .into_iter()
        .map(|(name, pts, errors, last_error)| {
            let vals: Vec<f64> = pts.iter().map(|p| p.1).collect();
            let by_req: Vec<(f64, f64)> = pts.iter().map(|p| (p.2, p.1)).collect();
            let spread = by_req.iter().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max)
                - by_req.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
            let trend = classify(&pts.iter().map(|p| (p.0, p.1)).collect::<Vec<_>>());
            GaugeRow {
                drain: drains.remove(&name),
                samples: pts.len(),
                errors,
                last_error,
                first: vals.first().copied(),
                last: vals.last().copied(),
                min: vals.iter().copied().reduce(f64::min),
                max: vals.iter().copied().reduce(f64::max),
                growth_per_1k_requests: (pts.len() >= 2 && spread > 0.0)
                    .then(|| slope(&by_req) * 1000.0),
                trend: (trend.class != TrendClass::TooFewSamples).then_some(trend.class),
                name,
            }
        })
        .collect();
    for (name, d) in drains {
        out.push(GaugeRow {
            name,
            samples: 0,
            errors: 0,
            last_error: None,
            first: None,
            last: None,
            min: None,
            max: None,
            growth_per_1k_requests: None,
            trend: None,
            drain: Some(d),
        });
    }
    out
}

/// Least-squares slope of y over x.
fn slope(pts: &[(f64, f64)]) -> f64 {
    let n = pts.len() as f64;
    let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
    let (mut num, mut den) = (0.0, 0.0);
    for (x, y) in pts {
        num += (x - mx) * (y - my);
        den += (x - mx) * (x - mx);
    }
    if den > 0.0 {
        num / den
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyze::tests::loaded;
    use crate::journal::{ErrorKind, Loaded};

    fn settings(planned: f64) -> Event {
        Event::Settings(Settings {
            extra: serde_json::json!({"soak": SoakSettings {
                duration_planned_s: planned,
                interval_s: 1.0,
                seed: 7,
                ..Default::default()
            }}),
            ..Default::default()
        })
    }

    fn req(
        group: &str,
        start: f64,
        dur: f64,
        outcome: Outcome,
        scheduled: Option<f64>,
    ) -> (f64, Event) {
        let status = match &outcome {
            Outcome::Ok => Some(200),
            Outcome::Rejected { status, .. } => *status,
            Outcome::Error { status, .. } => *status,
            _ => None,
        };
        (
            start + dur,
            Event::Request {
                id: 0,
                group: group.into(),
                worker: 0,
                start_s: start,
                duration_s: dur,
                outcome,
                status,
                scheduled_s: scheduled,
                detail: None,
                body_bytes: None,
                body_cut: false,
                connect_s: None,
                headers_s: None,
                handshake_s: None,
                lag_s: None,
                rpc_id: None,
            },
        )
    }

    fn interval(t: f64, index: u32, requests: u64) -> (f64, Event) {
        (t, Event::Interval { index, requests })
    }

    fn inv(t: f64, interval: u32, name: &str, ok: bool) -> (f64, Event) {
        (
            t,
            Event::Invariant {
                interval,
                name: name.into(),
                ok,
                detail: if ok {
                    "fine".into()
                } else {
                    "answered 500, not 200".into()
                },
            },
        )
    }

    fn rss(t: f64, pid: u32, b: u64) -> (f64, Event) {
        (
            t,
            Event::ProcSample {
                pid,
                rss_bytes: b,
                cpu_pct: 1.0,
                threads: 4,
                fds: 9,
                children: 0,
                own_rss_bytes: None,
                kin: vec![],
            },
        )
    }

    fn end(partial: bool, reason: &str) -> (f64, Event) {
        (
            100.0,
            Event::End {
                reason: reason.into(),
                partial,
                exit_code: None,
            },
        )
    }

    fn run(events: Vec<(f64, Event)>) -> SoakAnalysis {
        let mut ev = events;
        ev.sort_by(|a, b| a.0.total_cmp(&b.0));
        let l: Loaded = loaded(ev);
        let settings = crate::analyze::analyze(&l).settings;
        analyze_soak(
            &l.records,
            &mut l.records.iter().cloned(),
            &settings,
            l.end_s(),
            &Default::default(),
        )
        .expect("a soak")
    }

    const MB: u64 = 1 << 20;

    #[test]
    fn a_kind_answered_by_a_timer_is_named_and_a_steady_kind_is_not() {
        let mut ev = vec![(0.0, settings(40.0)), interval(0.0, 0, 0)];
        for i in 0..16 {
            let d = if i % 4 == 3 { 2.004 } else { 0.005 };
            ev.push(req("search", 0.1 + i as f64 * 2.1, d, Outcome::Ok, None));
            ev.push(req("embed", 0.2 + i as f64 * 2.1, 0.005, Outcome::Ok, None));
        }
        ev.push(interval(40.0, 1, 32));
        ev.push(end(false, "done"));
        let s = run(ev).suspicions;
        assert_eq!(s.len(), 1, "{s:?}");
        assert!(
            s[0].detail.starts_with(
                "soak kind search: 4 of 16 ok requests took 2.00 s while the rest took ~5.0 ms: a 2 s timer answered them"
            ),
            "{}",
            s[0].detail
        );
    }

    #[test]
    fn refusals_a_timer_answered_are_errors_at_it_in_every_kind_and_fail_the_soak() {
        let no = |s: u16| Outcome::Rejected {
            status: Some(s),
            reason: format!("HTTP {s}"),
        };
        let mut ev = vec![(0.0, settings(20.0)), interval(0.0, 0, 0)];
        // Kind search: four 503s at 2 s (the finding) among ok requests; kind embed: one 503 at
        // 2 s (alone, the same timer) and one instant 429 (capacity).
        for i in 0..12 {
            let (d, o) = if i % 3 == 2 {
                (2.002, no(503))
            } else {
                (0.005, Outcome::Ok)
            };
            ev.push(req("search", 0.1 + i as f64 * 1.5, d, o, None));
            ev.push(req("embed", 0.2 + i as f64 * 1.5, 0.005, Outcome::Ok, None));
        }
        ev.push(req("embed", 19.0, 2.001, no(503), None));
        ev.push(req("embed", 19.1, 0.001, no(429), None));
        ev.push(interval(20.0, 1, 26));
        ev.push(end(false, "done"));
        ev.sort_by(|a, b| a.0.total_cmp(&b.0));
        let a = crate::analyze::analyze(&loaded(ev));
        let s = a.soak.as_ref().expect("a soak");
        let kind = |n: &str| s.kinds.iter().find(|k| k.name == n).unwrap();
        let at = "error: HTTP 503 at a 2 s timer inside the server";
        let search = kind("search");
        assert_eq!((search.ok, search.rejected, search.errors), (8, 0, 4));
        assert_eq!(search.errors_by_kind[at], 4);
        assert_eq!(search.failed_outside_faults, 4);
        let embed = kind("embed");
        assert_eq!((embed.ok, embed.rejected, embed.errors), (12, 1, 1));
        assert_eq!(embed.errors_by_kind[at], 1);
        assert_eq!((s.totals.rejected, s.totals.errors), (1, 5));
        assert_eq!(s.verdict, "fail");
        assert!(
            s.reasons.contains(
                &"soak kind search: 4 requests failed at a 2 s timer inside the server: answered HTTP 503 after 2.00 s each, not a capacity refusal".to_string()
            ),
            "{:?}",
            s.reasons
        );
        assert!(
            s.reasons.contains(
                &"soak kind embed: 1 request failed at a 2 s timer inside the server: answered HTTP 503 after 2.00 s, as soak kind search's refusals were, not a capacity refusal".to_string()
            ),
            "{:?}",
            s.reasons
        );
        let found: Vec<&str> = a
            .suspicions
            .iter()
            .filter(|s| s.kind == crate::analyze::SuspicionKind::RefusalTimer)
            .map(|s| s.detail.as_str())
            .collect();
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].ends_with(
                "counted as failures at that timer, not refusals (soak kind embed, soak kind search)"
            ),
            "{}",
            found[0]
        );
        // The picture draws them as the failures they are.
        let drawn: Vec<&str> = a
            .picture
            .spans
            .iter()
            .filter(|x| &*x.what == at)
            .map(|x| &*x.what)
            .collect();
        assert_eq!(drawn.len(), 5);
    }

    #[test]
    fn rejections_are_counted_apart_and_do_not_fail_the_verdict() {
        let mut ev = vec![(0.0, settings(3.0)), interval(0.0, 0, 0)];
        for i in 0..8 {
            ev.push(req("embed", 0.1 + i as f64 * 0.1, 0.01, Outcome::Ok, None));
        }
        ev.push(req(
            "embed",
            0.95,
            0.001,
            Outcome::Rejected {
                status: Some(429),
                reason: "HTTP 429".into(),
            },
            None,
        ));
        for (i, t) in [1.0, 2.0, 3.0].iter().enumerate() {
            ev.push(interval(*t, i as u32 + 1, 9));
            ev.push(inv(*t, i as u32 + 1, "health", true));
        }
        ev.push(end(false, "done"));
        let a = run(ev);
        assert_eq!(a.verdict, "pass", "{:?}", a.reasons);
        let k = &a.kinds[0];
        assert_eq!((k.requests, k.ok, k.rejected, k.errors), (9, 8, 1, 0));
        assert_eq!(k.statuses["429"], 1);
        assert_eq!(
            k.latency.as_ref().unwrap().count,
            8,
            "a rejection has no latency"
        );
        assert_eq!(a.duration_achieved_s, 3.0);
        assert_eq!(a.invariants[0].results.len(), 3);
    }

    #[test]
    fn a_violation_makes_the_run_partial_with_reason_interval_and_achieved_duration() {
        let mut ev = vec![(0.0, settings(60.0)), interval(0.0, 0, 0)];
        ev.push(req("embed", 0.5, 0.01, Outcome::Ok, None));
        ev.push(interval(1.0, 1, 1));
        ev.push(inv(1.0, 1, "health", true));
        ev.push(req("embed", 1.5, 0.01, Outcome::Ok, None));
        ev.push(interval(2.0, 2, 2));
        ev.push(inv(2.0, 2, "health", false));
        let mut e = end(
            true,
            "invariant violated at interval 2: health: answered 500",
        );
        e.0 = 2.1;
        ev.push(e);
        let a = run(ev);
        assert!(a.partial);
        assert_eq!(a.verdict, "fail");
        assert_eq!(a.aborted_interval, Some(2));
        assert!(a.aborted_reason.unwrap().contains("health"));
        assert_eq!(a.duration_achieved_s, 2.0, "never the planned 60 s");
        assert_eq!(a.totals.ok, 2, "nothing measured before is lost");
        assert_eq!(a.intervals[1].violations.len(), 1);
    }

    #[test]
    fn a_late_request_counts_latency_from_its_scheduled_time() {
        let ev = vec![
            (0.0, settings(1.0)),
            interval(0.0, 0, 0),
            req("embed", 2.0, 0.1, Outcome::Ok, Some(1.5)),
            interval(3.0, 1, 1),
            end(false, "done"),
        ];
        let a = run(ev);
        let k = &a.kinds[0];
        assert_eq!(k.late_sends, 1);
        assert!((k.max_lateness_s - 0.5).abs() < 1e-9);
        assert!(
            (k.latency.as_ref().unwrap().max - 0.6).abs() < 0.001,
            "{:?}",
            k.latency
        );
        assert!(a.warnings.iter().any(|w| w.contains("went late")));
    }

    #[test]
    fn an_injected_kill_marks_its_intervals_requests_and_restart_and_does_not_fail() {
        let mut ev = vec![(0.0, settings(5.0)), interval(0.0, 0, 0)];
        for t in 1..=5 {
            ev.push(interval(t as f64, t, 0));
            ev.push(inv(t as f64, t, "same_identity", true));
        }
        ev.push((
            2.5,
            Event::Fault {
                action: "kill".into(),
                pid: 10,
                detail: "SIGKILL".into(),
            },
        ));
        ev.push((
            2.6,
            Event::Spawn {
                pid: 11,
                start_time: 5,
                command: vec![],
                attempt: 1,
                container_id: None,
            },
        ));
        ev.push((
            4.0,
            Event::Fault {
                action: "recovered".into(),
                pid: 11,
                detail: "back".into(),
            },
        ));
        ev.push(req("embed", 0.5, 0.01, Outcome::Ok, None));
        ev.push(req(
            "embed",
            2.55,
            0.01,
            Outcome::Error {
                error: ErrorKind::ConnectRefused,
                status: None,
            },
            None,
        ));
        ev.push(req("embed", 4.5, 0.01, Outcome::Ok, None));
        ev.push(end(false, "done"));
        let a = run(ev);
        assert_eq!(a.verdict, "pass", "{:?}", a.reasons);
        let f = &a.injected[0];
        assert_eq!((f.recovered, f.until_s), (true, Some(4.0)));
        assert_eq!(f.intervals, vec![3, 4]);
        assert_eq!(f.requests_overlapping, 1);
        assert_eq!(f.restarts, 1);
        assert_eq!(
            a.restarts,
            Restarts {
                total: 1,
                injected: 1,
                unexpected: 0
            }
        );
        let clean: Vec<bool> = a.intervals.iter().map(|i| i.clean_baseline).collect();
        assert_eq!(clean, [true, true, false, false, true]);
        assert!(!a.kinds[0].clean_baseline);
        assert_eq!(a.kinds[0].failed_outside_faults, 0);
        assert_eq!(a.kinds[0].statuses["connect refused"], 1);
    }

    #[test]
    fn failures_outside_faults_fail_the_verdict() {
        let ev = vec![
            (0.0, settings(1.0)),
            interval(0.0, 0, 0),
            req(
                "embed",
                0.2,
                0.01,
                Outcome::Error {
                    error: ErrorKind::Http5xx,
                    status: Some(500),
                },
                None,
            ),
            req("embed", 0.4, 0.01, Outcome::Ok, None),
            interval(1.0, 1, 2),
            end(false, "done"),
        ];
        let a = run(ev);
        assert_eq!(a.verdict, "fail");
        assert!(
            a.reasons[0].contains("1 request(s) failed outside injected faults"),
            "{:?}",
            a.reasons
        );
    }

    #[test]
    fn a_leak_is_growth_and_fails_while_a_flat_server_passes() {
        let build = |leak: u64| {
            let mut ev = vec![(0.0, settings(30.0)), interval(0.0, 0, 0)];
            for i in 0..30 {
                ev.push(rss(i as f64 + 0.5, 10, 20 * MB + leak * i as u64));
                ev.push(req("embed", i as f64 + 0.2, 0.01, Outcome::Ok, None));
                ev.push(interval(i as f64 + 1.0, i + 1, i as u64 + 1));
            }
            ev.push(end(false, "done"));
            run(ev)
        };
        let leak = build(MB);
        assert_eq!(leak.resources.memory_trend.class, TrendClass::Growth);
        assert!((leak.resources.memory_trend.slope_bytes_per_s - MB as f64).abs() < 1000.0);
        assert_eq!(leak.verdict, "fail");
        assert!(
            leak.reasons[0].contains("memory grows"),
            "{:?}",
            leak.reasons
        );
        // Growth of 240 KiB in all (12 % of a 2 MiB server) is the allocator's steps, not a leak.
        let small = {
            let mut ev = vec![(0.0, settings(30.0)), interval(0.0, 0, 0)];
            for i in 0..30 {
                ev.push(rss(i as f64 + 0.5, 10, 2 * MB + 8 * 1024 * i as u64));
                ev.push(req("embed", i as f64 + 0.2, 0.01, Outcome::Ok, None));
                ev.push(interval(i as f64 + 1.0, i + 1, i as u64 + 1));
            }
            ev.push(end(false, "done"));
            run(ev)
        };
        assert_eq!(small.resources.memory_trend.class, TrendClass::Flat);
        assert!(
            small
                .resources
                .memory_trend
                .detail
                .contains("not called growth"),
            "{}",
            small.resources.memory_trend.detail
        );
        assert_eq!(small.verdict, "pass", "{:?}", small.reasons);
        let flat = build(0);
        assert_eq!(flat.resources.memory_trend.class, TrendClass::Flat);
        assert_eq!(flat.verdict, "pass", "{:?}", flat.reasons);
        assert_eq!(flat.resources.before.as_ref().unwrap().rss_bytes, 20 * MB);
    }

    #[test]
    fn gauges_grow_per_thousand_requests_and_drains_are_judged() {
        let mut ev = vec![(0.0, settings(10.0)), interval(0.0, 0, 0)];
        for i in 1..=10u32 {
            ev.push(interval(i as f64, i, i as u64 * 500));
            ev.push((
                i as f64 + 0.01,
                Event::Gauge {
                    name: "rows".into(),
                    value: Some(100.0 + i as f64 * 1000.0),
                    error: None,
                },
            ));
        }
        ev.push((
            10.5,
            Event::Invariant {
                interval: 10,
                name: "drain:queued".into(),
                ok: false,
                detail: "still 3 after the drain grace 2s".into(),
            },
        ));
        ev.push(req("embed", 0.5, 0.01, Outcome::Ok, None));
        ev.push(end(false, "done"));
        let a = run(ev);
        let rows = a.gauges.iter().find(|g| g.name == "rows").unwrap();
        assert!((rows.growth_per_1k_requests.unwrap() - 2000.0).abs() < 1e-6);
        assert_eq!(rows.trend, Some(TrendClass::Growth));
        let q = a.gauges.iter().find(|g| g.name == "queued").unwrap();
        assert!(!q.drain.as_ref().unwrap().ok);
        assert_eq!(a.verdict, "fail");
        assert!(a.reasons.iter().any(|r| r.contains("queued did not drain")));
        assert!(
            a.invariants.is_empty(),
            "drains are not interval invariants"
        );
    }

    #[test]
    fn an_interrupted_run_without_violation_is_incomplete_not_pass() {
        let ev = vec![
            (0.0, settings(600.0)),
            interval(0.0, 0, 0),
            req("embed", 0.5, 0.01, Outcome::Ok, None),
            interval(4.2, 1, 1),
            end(true, "interrupted by SIGINT"),
        ];
        let a = run(ev);
        assert_eq!(a.verdict, "incomplete");
        assert!(a.reasons[0].contains("4.2s of 10m"), "{:?}", a.reasons);
    }

    /// One reading of a server (own memory `own`) with `kids` children of one program, `zombies`
    /// of them ended, each other holding `each` bytes.
    fn tree(t: f64, own: u64, kids: u64, zombies: u64, each: u64, command: &str) -> (f64, Event) {
        let kid_rss = (kids - zombies) * each;
        (
            t,
            Event::ProcSample {
                pid: 10,
                rss_bytes: own + kid_rss,
                cpu_pct: 1.0,
                threads: 4 + kids,
                fds: 9,
                children: kids,
                own_rss_bytes: Some(own),
                kin: if kids == 0 {
                    vec![]
                } else {
                    vec![Kin {
                        command: command.into(),
                        count: kids,
                        zombies,
                        rss_bytes: kid_rss,
                    }]
                },
            },
        )
    }

    fn soak_of(readings: impl Fn(u32) -> (f64, Event)) -> SoakAnalysis {
        let mut ev = vec![(0.0, settings(30.0)), interval(0.0, 0, 0)];
        for i in 0..30 {
            ev.push(readings(i));
            ev.push(req("embed", i as f64 + 0.2, 0.01, Outcome::Ok, None));
            ev.push(interval(i as f64 + 1.0, i + 1, i as u64 + 1));
        }
        ev.push(end(false, "done"));
        run(ev)
    }

    /// A child per request never reaped: the tree's memory grows, but the server's own does not;
    /// the children and their program are named, with their zombies, and not the server's memory.
    #[test]
    fn children_that_pile_up_are_named_apart_from_the_servers_own_memory() {
        let a = soak_of(|i| {
            tree(
                i as f64 + 0.5,
                30 * MB,
                5 * i as u64,
                2 * i as u64,
                2 * MB,
                "sleep 600",
            )
        });
        assert_eq!(a.verdict, "fail");
        assert_eq!(
            a.resources.memory_trend.class,
            TrendClass::Flat,
            "{:?}",
            a.resources.memory_trend
        );
        let c = a.resources.children.as_ref().unwrap();
        assert_eq!(c.class, TrendClass::Growth);
        assert_eq!(c.command.as_deref(), Some("sleep 600"));
        assert_eq!((c.before, c.after, c.zombies), (0, 145, 58));
        assert_eq!(a.reasons.len(), 1, "{:?}", a.reasons);
        assert_eq!(
            a.reasons[0],
            "the server's children grow: 0 -> 145 `sleep 600` processes (zombies: 58, ended and never reaped); their memory 0 -> 174.0 MiB; the server's own rss stays flat (30.0 MiB -> 30.0 MiB)"
        );
    }

    /// A pre-fork pool of four whose workers' heaps grow: their memory is named, not their number.
    #[test]
    fn a_pools_growing_memory_is_the_childrens_not_the_servers() {
        let a = soak_of(|i| {
            tree(
                i as f64 + 0.5,
                30 * MB,
                4,
                0,
                20 * MB + i as u64 * MB,
                "gunicorn: worker",
            )
        });
        let c = a.resources.children.as_ref().unwrap();
        assert_eq!(c.class, TrendClass::Growth);
        assert_eq!(c.count.class, TrendClass::Flat);
        assert!(
            a.reasons[0].starts_with("the server's children's memory grows: 4 -> 4 `gunicorn: worker` processes (all still running); their memory 80.0 MiB -> 196.0 MiB"),
            "{:?}",
            a.reasons
        );
        // The same pool, steady: nothing to say.
        let a = soak_of(|i| tree(i as f64 + 0.5, 30 * MB, 4, 0, 20 * MB, "gunicorn: worker"));
        assert_eq!(a.verdict, "pass", "{:?}", a.reasons);
        assert_eq!(
            a.resources.children.as_ref().unwrap().class,
            TrendClass::Flat
        );
        // Helpers that come and go (0 to 3 at a time) are not a leak of processes.
        let a = soak_of(|i| tree(i as f64 + 0.5, 30 * MB, (i % 4) as u64, 0, MB, "git"));
        assert_eq!(a.verdict, "pass", "{:?}", a.reasons);
    }

    /// A reading of a process caught exiting (RSS 0) is no reading of its memory, and the figure
    /// before the workload is the server's once ready (here its first reading after the workload
    /// began), not one of it still starting (3 MB, before it answered its health check).
    #[test]
    fn the_reading_before_is_a_ready_servers_never_0_b() {
        let mut ev = vec![
            (0.0, settings(30.0)),
            rss(0.01, 10, 0),
            rss(0.02, 10, 3 * MB),
            (
                0.3,
                Event::Ready {
                    ok: true,
                    waited_s: 0.3,
                    url: "http://x/health".into(),
                    detail: None,
                    output: vec![],
                },
            ),
            interval(0.5, 0, 0),
        ];
        for i in 0..10 {
            ev.push(rss(i as f64 + 1.0, 10, 20 * MB));
            ev.push(interval(i as f64 + 1.5, i + 1, 0));
        }
        ev.push(end(false, "done"));
        let a = run(ev);
        assert_eq!(a.resources.before.as_ref().unwrap().rss_bytes, 20 * MB);
        assert_eq!(a.resources.samples, 11, "the RSS 0 reading is not one");
        // Readings only of a process exiting: none to tell.
        let a = run(vec![
            (0.0, settings(30.0)),
            rss(0.01, 10, 0),
            interval(0.5, 0, 0),
            end(false, "done"),
        ]);
        assert!(a.resources.before.is_none());
        assert_eq!(a.resources.source, "none");
    }
}
