//! The soak's findings, from the journal alone: per request kind the outcome counts, status
//! distribution and latency (HDR, over ok requests, counted from the *scheduled* send time when a
//! worker fell behind); the server's resources before, after and as a memory trend; gauges with their
//! growth per 1,000 requests and drain results; every invariant's result at every interval; injected
//! faults, the intervals and figures they overlap (not a clean baseline); restarts; and the verdict.
//!
//! Honesty rules from the soak that reported p50 ≈ 2 s: the achieved duration is what the journal shows ran, never the plan;
//! a run that stopped early says so and why; rejections are capacity, never failures.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::stats::{Latency, Summary};
use super::trend::{classify, Trend, TrendClass};
pub use crate::journal::latency_s;
use crate::journal::{secs, Event, Outcome, Record, Settings};

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
    /// Capacity refusals (429, 503, QUEUE_FULL): correct behaviour, never failures.
    pub rejected: u64,
    pub timeouts: u64,
    /// Everything else that failed: 5xx, 4xx, refused or reset connections.
    pub errors: u64,
    /// Status codes, or the error's name when there was no response.
    pub statuses: BTreeMap<String, u64>,
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
}

/// One reading of the server's process tree.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProcRow {
    pub t_s: f64,
    pub pid: u32,
    pub rss_bytes: u64,
    pub cpu_pct: f64,
    pub threads: u64,
    pub fds: u64,
    pub children: u64,
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
    pub memory_trend: MemoryTrend,
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
}

/// The actions that start a fault window.
const INJECTING: &[&str] = &["kill", "stop", "restart"];

#[derive(Default)]
struct Fold {
    row: KindRow,
    hist: Summary,
    answered: super::ok_timers::Acc,
}

impl Fold {
    fn add(&mut self, r: &Req, in_window: bool) {
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
        match r.outcome {
            Outcome::Ok => {
                k.ok += 1;
                self.hist
                    .record(latency_s(r.start_s, r.duration_s, r.scheduled_s));
            }
            Outcome::Rejected { .. } => k.rejected += 1,
            Outcome::Timeout { .. } => k.timeouts += 1,
            Outcome::Error { .. } => k.errors += 1,
        }
        if r.outcome.is_failure() && !in_window {
            k.failed_outside_faults += 1;
        }
    }
    fn done(mut self) -> KindRow {
        self.row.latency = self.hist.latency();
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
}

/// The soak analysis from the run's lifecycle records (`recs`) and its requests streamed once
/// (`requests`; anything else in it is ignored), folded per kind into bounded summaries; None when
/// the journal is not a soak's.
pub fn analyze_soak(
    recs: &[Record],
    requests: &mut dyn Iterator<Item = Record>,
    settings: &Settings,
    end_s: f64,
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
            ..
        } = &r.event
        else {
            continue;
        };
        let req = Req {
            connect_s: *connect_s,
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
        kinds
            .entry(group.clone())
            .or_insert_with(|| Fold {
                row: KindRow {
                    name: group.clone(),
                    ..Default::default()
                },
                ..Default::default()
            })
            .add(&req, hit.is_some());
        totals.add(&req, hit.is_some());
    }
    let flags: Vec<_> = settings
        .timers_s
        .iter()
        .map(|&t| (t, super::timers::TimerSource::Flag))
        .collect();
    let timers = super::ok_timers::candidates(recs, &flags);
    let mut suspicions = Vec::new();
    for (name, f) in &kinds {
        let what = format!("soak kind {name}");
        suspicions.extend(super::ok_timers::suspicions(
            &what,
            name,
            &f.answered,
            &timers,
            end_s,
        ));
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
    if m.class == TrendClass::Growth && refused.is_none() {
        reasons.push(format!(
            "server memory grows: {}{}",
            m.detail,
            if m.clean_baseline {
                ""
            } else {
                " (an injected fault overlapped these readings)"
            }
        ));
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
    })
}

fn resources(recs: &[Record], t0: Option<f64>, windows: &[(f64, f64)]) -> Resources {
    let mut rows: Vec<ProcRow> = recs
        .iter()
        .filter_map(|r| match &r.event {
            Event::ProcSample {
                pid,
                rss_bytes,
                cpu_pct,
                threads,
                fds,
                children,
            } => Some(ProcRow {
                t_s: r.t_s,
                pid: *pid,
                rss_bytes: *rss_bytes,
                cpu_pct: *cpu_pct,
                threads: *threads,
                fds: *fds,
                children: *children,
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
                }),
                _ => None,
            })
            .collect();
    }
    if rows.is_empty() {
        source = "none";
    }
    let before = match t0 {
        Some(t0) => rows
            .iter()
            .rev()
            .find(|r| r.t_s <= t0)
            .or(rows.first())
            .cloned(),
        None => rows.first().cloned(),
    };
    let peak = (!rows.is_empty()).then(|| Peaks {
        rss_bytes: rows.iter().map(|r| r.rss_bytes).max().unwrap_or(0),
        cpu_pct: rows.iter().map(|r| r.cpu_pct).fold(0.0, f64::max),
        threads: rows.iter().map(|r| r.threads).max().unwrap_or(0),
        fds: rows.iter().map(|r| r.fds).max().unwrap_or(0),
        children: rows.iter().map(|r| r.children).max().unwrap_or(0),
    });
    // The trend of one process's memory: across a restart the series would start over. The workload's
    // readings only (from its start), of the process with the most of them.
    let mut by_pid: Vec<(u32, Vec<(f64, f64)>)> = Vec::new();
    for r in rows.iter().filter(|r| t0.is_none_or(|t| r.t_s >= t)) {
        match by_pid.iter_mut().find(|(p, _)| *p == r.pid) {
            Some((_, v)) => v.push((r.t_s, r.rss_bytes as f64)),
            None => by_pid.push((r.pid, vec![(r.t_s, r.rss_bytes as f64)])),
        }
    }
    let processes = {
        let mut p: Vec<u32> = rows.iter().map(|r| r.pid).collect();
        p.sort_unstable();
        p.dedup();
        p.len()
    };
    let longest = by_pid.iter().max_by_key(|(_, v)| v.len());
    let series: &[(f64, f64)] = longest.map(|(_, v)| v.as_slice()).unwrap_or(&[]);
    let mut figures = classify(series);
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
    let clean = match (series.first(), series.last()) {
        (Some(a), Some(b)) => !windows.iter().any(|&(s, e)| s <= b.0 && e >= a.0),
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
    Resources {
        source: source.into(),
        before,
        after: rows.last().cloned(),
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
}
