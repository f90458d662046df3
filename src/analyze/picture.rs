//! What the pictures need: the run laid out on its one clock as request spans, process bands, markers,
//! health probes, level boundaries and resource series. The HTML timeline and the trace export only
//! draw this; every choice about what a thing *is* (its outcome, its lane, where a timer's deadline
//! falls) is made here, from the journal alone.
//!
//! A long run must still make a small picture, so beyond [`SPAN_LIMIT`] requests the analysis also
//! gives per-bucket counts ([`Aggregate`]) and the HTML draws those instead of one bar per request;
//! resource series are thinned to at most [`SERIES_POINTS`] points, keeping each bucket's extremes so a
//! spike survives.

use super::Subject;
use std::collections::HashMap;

use serde::Serialize;

use super::{ProcessLife, Suspicion};
use crate::journal::{secs, Event, Outcome, Probe, Record};

/// More requests than this are drawn as per-bucket counts, not one bar each.
pub const SPAN_LIMIT: usize = 10_000;
/// More requests than this are not kept one by one at all (only counted and bucketed), to bound
/// memory: about 5.6 MB of spans at most, whatever the run's length.
pub const SPAN_KEEP: usize = 100_000;
/// How many time buckets an aggregate has across the run.
pub const BUCKETS: usize = 300;
/// The most points one resource series keeps.
pub const SERIES_POINTS: usize = 1_200;
/// How many time buckets throughput and latency over time have across the run (coarser than
/// [`BUCKETS`]: a p99 needs a few requests per bucket).
pub const TIME_BUCKETS: usize = 100;
/// Ok latencies are binned on a log axis this many bins to a decade (12 % wide each), from
/// [`LOG_FLOOR_S`] up to 1000 s; the last bin holds anything longer.
pub const LOG_PER_DECADE: usize = 20;
pub const LOG_FLOOR_S: f64 = 1e-6;
pub const LOG_BINS: usize = 9 * LOG_PER_DECADE + 1;

/// The four outcome classes, in the order every count array uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    Ok,
    Timeout,
    Error,
    Rejected,
}

impl Class {
    pub const ALL: [Class; 4] = [Class::Ok, Class::Timeout, Class::Error, Class::Rejected];
    pub fn of(o: &Outcome) -> Self {
        match o {
            Outcome::Ok => Class::Ok,
            Outcome::Timeout { .. } => Class::Timeout,
            Outcome::Error { .. } => Class::Error,
            Outcome::Rejected { .. } => Class::Rejected,
        }
    }
    pub fn index(self) -> usize {
        self as usize
    }
    pub fn label(self) -> &'static str {
        match self {
            Class::Ok => "ok",
            Class::Timeout => "timeout",
            Class::Error => "error",
            Class::Rejected => "rejected",
        }
    }
}

/// One request from its start to its end.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Span {
    pub id: u64,
    /// Index into [`Picture::groups`].
    pub group: u32,
    pub worker: u32,
    /// The worker's row within its group's lane (workers numbered densely from 0).
    pub row: u32,
    pub start_s: f64,
    pub end_s: f64,
    pub class: Class,
    /// The outcome in words, with the HTTP status: empty for a plain ok, to keep big runs small
    /// (a boxed str, not a String: 56 bytes a span rather than 72, 1.6 MB of a run's peak memory).
    pub what: Box<str>,
}

/// A lane of requests: a level ("L4") or a soak request kind.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Group {
    pub name: String,
    /// The concurrency of the load level this lane is, when it is one.
    pub concurrency: Option<u32>,
    /// An open-loop level's arrival rate (its concurrency is then the in-flight cap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// A level's lane as its level is named ([`LevelBand::label`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level_label: Option<String>,
    /// Distinct workers seen, so the lane's height.
    pub rows: u32,
    pub first_s: f64,
    pub last_s: f64,
    /// Requests by [`Class`] index.
    pub counts: [u64; 4],
    /// Set when the lane is calls a real client made through wrap: drawn apart and named so.
    pub observed: Option<ObservedLane>,
}

/// What a lane of observed calls is.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ObservedLane {
    pub via: crate::journal::observed::Via,
    /// "calls seen by wrap (stdio)", "calls seen by wrap (proxy)".
    pub heading: String,
    /// The method or tool: "tools/call echo", "GET /api/items".
    pub label: String,
    /// What one row of the lane is: the stdio relay's one client, or a proxy connection.
    pub row_is: String,
}

/// Requests counted per time bucket, for runs too big to draw one by one.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Aggregate {
    pub bucket_s: f64,
    /// Per group, per bucket: requests that *ended* in the bucket, by class.
    pub counts: Vec<Vec<[u32; 4]>>,
    /// Per group, per bucket: the longest request that ended in it (seconds).
    pub max_duration_s: Vec<Vec<f64>>,
}

/// One server process drawn as a band, on a row that no other band overlaps.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Band {
    pub pid: u32,
    pub row: u32,
    pub start_s: f64,
    /// None: still running when the journal ends.
    pub end_s: Option<f64>,
    pub status: Option<i32>,
    pub meaning: Option<String>,
    pub requested: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MarkerKind {
    Spawn,
    Exit,
    Restart,
    Log,
    Signal,
    Fault,
    Ready,
    Leak,
    Note,
    /// Where a suspected timer fires: the process's spawn plus the timer.
    TimerDeadline,
}

/// A labelled point on the time axis.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Marker {
    pub t_s: f64,
    pub kind: MarkerKind,
    pub pid: Option<u32>,
    /// A few words to print beside it ("exit 124", "restart #1", "2s timer").
    pub label: String,
    /// Everything known about it, for hover.
    pub text: String,
    /// "info", "warn" or "bad".
    pub severity: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProbeMark {
    pub t_s: f64,
    pub purpose: String,
    pub healthy: bool,
    /// The status or the error that stopped it.
    pub result: String,
    pub duration_s: f64,
}

/// One level of the ladder, from its start to its end (None: the journal stops inside it).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LevelBand {
    pub index: u32,
    pub concurrency: u32,
    /// An open-loop level's arrival rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// The level as every view names it, short ("8", "200/s", "4×") and whole ("concurrency 8",
    /// "rate 200/s", "speed 4×").
    pub name: String,
    pub label: String,
    pub start_s: f64,
    pub end_s: Option<f64>,
    pub skipped: Option<String>,
    pub health_before: String,
    pub health_after: Option<String>,
    /// The server's identity changed between the level's start and end (restarted under it).
    pub identity_changed: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    Bytes,
    Percent,
    Count,
    Celsius,
    Watts,
    Plain,
}

/// One resource figure over time; a new segment starts where the thing measured changed (a restart
/// makes a new process), so no line is drawn across it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Series {
    pub name: String,
    pub unit: Unit,
    pub segments: Vec<Vec<(f64, f64)>>,
}

impl Series {
    pub fn max(&self) -> f64 {
        self.points().map(|p| p.1).fold(0.0, f64::max)
    }
    pub fn points(&self) -> impl Iterator<Item = &(f64, f64)> {
        self.segments.iter().flatten()
    }
}

/// Everything the HTML timeline and the trace export draw.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Picture {
    /// The time axis: 0 to the last thing that happened.
    pub end_s: f64,
    pub groups: Vec<Group>,
    /// Every request, in journal order, up to [`SPAN_KEEP`].
    pub spans: Vec<Span>,
    /// Requests journalled but not kept as spans (beyond [`SPAN_KEEP`]); still counted.
    pub spans_dropped: u64,
    /// Set beyond [`SPAN_LIMIT`] requests: the HTML draws this, not the spans.
    pub aggregate: Option<Aggregate>,
    pub bands: Vec<Band>,
    pub markers: Vec<Marker>,
    pub probes: Vec<ProbeMark>,
    pub levels: Vec<LevelBand>,
    pub series: Vec<Series>,
    /// All requests by class.
    pub totals: [u64; 4],
    /// What one exchange was, when not a plain HTTP request: "tools/call search" for an MCP run.
    pub exchange: Option<String>,
    /// Per lane with ok requests: the distribution of its ok latencies, with the timers suspected
    /// while it ran marked where they sit.
    pub distributions: Vec<Distribution>,
    /// Completions per second and ok latency (p50, p99) per time bucket, across all lanes.
    pub over_time: OverTime,
}

/// One lane's ok latencies on a log axis.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Distribution {
    /// Index into [`Picture::groups`].
    pub group: usize,
    pub count: u64,
    /// Non-empty bins: (from, to, requests), ascending.
    pub bins: Vec<(f64, f64, u32)>,
    /// From the lane's HDR histogram (what the tables print), not from the bins.
    pub p50: f64,
    pub p99: f64,
    pub min: f64,
    pub max: f64,
    pub timers: Vec<TimerMark>,
}

/// A suspected timer on a latency axis.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TimerMark {
    /// Where the suspicious durations sit.
    pub seconds: f64,
    /// "2s timer".
    pub label: String,
    /// The suspicion's words, for hover.
    pub text: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OverTime {
    pub bucket_s: f64,
    pub points: Vec<TimePoint>,
}

/// One time bucket: requests that ended in it, and its ok latencies' p50 and p99 (binned, so to
/// within 12 %).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TimePoint {
    pub t_s: f64,
    /// Completions by [`Class`] index.
    pub counts: [u32; 4],
    pub p50: Option<f64>,
    pub p99: Option<f64>,
}

/// Counts per log bin, allocated on first use: 724 bytes whatever the number of requests; and the
/// exact shortest and longest duration, which bound every figure it gives.
#[derive(Clone, Debug, Default)]
struct LogHist {
    counts: Vec<u32>,
    n: u64,
    extremes: Option<(f64, f64)>,
}

/// The log bin a duration falls in.
pub fn log_bin(d: f64) -> usize {
    if d.is_nan() || d <= LOG_FLOOR_S {
        return 0;
    }
    (((d / LOG_FLOOR_S).log10() * LOG_PER_DECADE as f64).floor() as usize).min(LOG_BINS - 1)
}

/// Where log bin `i` begins.
pub fn bin_lo(i: usize) -> f64 {
    LOG_FLOOR_S * 10f64.powf(i as f64 / LOG_PER_DECADE as f64)
}

impl LogHist {
    fn record(&mut self, d: f64) {
        self.record_n(d, 1);
    }
    fn record_n(&mut self, d: f64, n: u64) {
        if self.counts.is_empty() {
            self.counts = vec![0; LOG_BINS];
        }
        let c = &mut self.counts[log_bin(d)];
        *c = c.saturating_add(u32::try_from(n).unwrap_or(u32::MAX));
        self.n += n;
        self.extremes = Some(match self.extremes {
            Some((lo, hi)) => (lo.min(d), hi.max(d)),
            None => (d, d),
        });
    }
    /// An HDR summary re-binned: its buckets (0.1 % wide) fall whole into the 12 % log bins.
    fn of(sum: &crate::stats::Summary) -> Self {
        let mut h = Self::default();
        for (lo, _, n) in sum.buckets() {
            h.record_n(lo, n);
        }
        h.extremes = sum.extremes();
        h
    }
    /// The geometric middle of the bin holding quantile `q`, within the exact shortest and longest
    /// duration (a bin's middle is no duration any request had: one request is its own figure).
    fn quantile(&self, q: f64) -> Option<f64> {
        let (lo, hi) = self.extremes.filter(|_| self.n > 0)?;
        let want = ((q * self.n as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (i, c) in self.counts.iter().enumerate() {
            seen += *c as u64;
            if seen >= want {
                return Some((bin_lo(i) * bin_lo(i + 1)).sqrt().max(lo).min(hi));
            }
        }
        None
    }
    fn bins(&self) -> Vec<(f64, f64, u32)> {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(i, c)| (bin_lo(i), bin_lo(i + 1), *c))
            .collect()
    }
}

/// The picture from the run's lifecycle records and the requests already folded into `acc`.
pub fn build(
    recs: &[Record],
    lives: &[ProcessLife],
    suspicions: &[Suspicion],
    acc: Requests,
) -> Picture {
    let Requests {
        mut groups,
        spans,
        dropped,
        bucket_s,
        counts,
        max_duration_s,
        ok_summary,
        time_bucket_s,
        time_counts,
        time_hist,
        ..
    } = acc;
    let mcp = super::mcp_pings(recs);
    let levels = levels(recs, mcp);
    for g in groups.iter_mut() {
        g.concurrency = levels
            .iter()
            .find(|l| super::verdict::group_of_level(l.index) == g.name)
            .map(|l| l.concurrency);
        g.rate = levels
            .iter()
            .find(|l| super::verdict::group_of_level(l.index) == g.name)
            .and_then(|l| l.rate);
        g.level_label = levels
            .iter()
            .find(|l| super::verdict::group_of_level(l.index) == g.name)
            .map(|l| l.label.clone());
    }
    let markers = markers(recs, lives, suspicions);
    let end_s = recs
        .iter()
        .map(|r| r.t_s)
        .chain(markers.iter().map(|m| m.t_s))
        .chain(spans.iter().map(|s| s.end_s))
        .chain(groups.iter().map(|g| g.last_s))
        .fold(0.0, f64::max);
    let total: u64 = groups.iter().flat_map(|g| g.counts).sum();
    let aggregate = (total as usize > SPAN_LIMIT).then_some(Aggregate {
        bucket_s,
        counts,
        max_duration_s,
    });
    let mut totals = [0u64; 4];
    for g in &groups {
        for (t, c) in totals.iter_mut().zip(g.counts) {
            *t += c;
        }
    }
    let distributions = ok_summary
        .iter()
        .enumerate()
        .filter_map(|(gi, sum)| {
            let l = sum.latency()?;
            let g = &groups[gi];
            Some(Distribution {
                group: gi,
                count: l.count,
                bins: LogHist::of(sum).bins(),
                p50: l.p50,
                p99: l.p99,
                min: l.min,
                max: l.max,
                timers: timer_marks(suspicions, &g.name, g.first_s, g.last_s),
            })
        })
        .collect();
    let over_time = OverTime {
        bucket_s: time_bucket_s,
        points: time_counts
            .iter()
            .zip(&time_hist)
            .enumerate()
            .filter(|(_, (c, _))| c.iter().any(|n| *n > 0))
            .map(|(i, (c, h))| TimePoint {
                t_s: i as f64 * time_bucket_s,
                counts: *c,
                p50: h.quantile(0.5),
                p99: h.quantile(0.99),
            })
            .collect(),
    };
    Picture {
        distributions,
        over_time,
        end_s,
        groups,
        spans,
        spans_dropped: dropped,
        aggregate,
        bands: bands(lives),
        markers,
        probes: probes(recs, mcp),
        levels,
        series: series(recs),
        totals,
        exchange: exchange(recs),
    }
}

/// The timers suspected of a lane, where their durations sit: the suspicions that name the lane's
/// group, and those about requests of no group (not a process's age at exit, which is no latency)
/// whose moment falls while the lane ran.
fn timer_marks(suspicions: &[Suspicion], group: &str, from: f64, to: f64) -> Vec<TimerMark> {
    let mut out: Vec<TimerMark> = Vec::new();
    for s in suspicions {
        let ours = match &s.group {
            Some(g) => g == group,
            None => s.subject != Subject::ProcessExit && s.t_s >= from - 1e-6 && s.t_s <= to + 1e-6,
        };
        if !ours {
            continue;
        }
        if !(s.seconds.is_finite() && s.seconds > 0.0) {
            continue;
        }
        let label = if s.timer_s > 0.0 {
            format!("{} timer", secs(s.timer_s))
        } else {
            s.kind.as_str().replace('_', " ")
        };
        if out.iter().any(|m| m.label == label) {
            continue;
        }
        out.push(TimerMark {
            seconds: s.seconds,
            label,
            text: s.detail.clone(),
        });
    }
    out
}

/// An MCP load run's exchanges are tool calls, named by their tool.
fn exchange(recs: &[Record]) -> Option<String> {
    recs.iter().find_map(|r| match &r.event {
        Event::Settings(s) => s
            .load
            .as_ref()?
            .mcp
            .as_ref()
            .map(|m| format!("tools/call {}", m.tool)),
        _ => None,
    })
}

/// The requests folded in one streaming pass: groups with their counts, one span per request up to
/// [`SPAN_KEEP`], and per-bucket counts and maxima over the run (`end_s` from a first pass), which
/// the views draw instead of spans beyond [`SPAN_LIMIT`].
pub struct Requests {
    groups: Vec<Group>,
    index: HashMap<String, usize>,
    rows: HashMap<(usize, u32), u32>,
    spans: Vec<Span>,
    dropped: u64,
    bucket_s: f64,
    counts: Vec<Vec<[u32; 4]>>,
    max_duration_s: Vec<Vec<f64>>,
    /// Per group: its ok latencies in HDR (its figures, and its log bins when drawn).
    ok_summary: Vec<crate::stats::Summary>,
    time_bucket_s: f64,
    /// Per time bucket (all groups): completions by class, and ok latencies.
    time_counts: Vec<[u32; 4]>,
    time_hist: Vec<LogHist>,
    /// Which requests are calls wrap observed (None: the journal has none).
    observed: Option<super::observed::Scope>,
    /// The run's decision on refusals a timer answered: such a request is drawn as the failure
    /// it is.
    classes: super::classify::Classes,
}

impl Requests {
    /// `end_s`: the run's last timestamp (the aggregate's buckets span 0..end_s). `observed`: which
    /// requests are calls seen by wrap, whose lanes are named so.
    pub fn new(end_s: f64, observed: Option<super::observed::Scope>) -> Self {
        Self {
            observed,
            groups: Vec::new(),
            index: HashMap::new(),
            rows: HashMap::new(),
            spans: Vec::new(),
            dropped: 0,
            bucket_s: (end_s / BUCKETS as f64).max(1e-6),
            counts: Vec::new(),
            max_duration_s: Vec::new(),
            ok_summary: Vec::new(),
            time_bucket_s: (end_s / TIME_BUCKETS as f64).max(1e-6),
            time_counts: vec![[0; 4]; TIME_BUCKETS],
            time_hist: vec![LogHist::default(); TIME_BUCKETS],
            classes: super::classify::Classes::default(),
        }
    }

    /// The same fold, each request classified by `classes` ([`super::classify`]).
    pub fn classified(mut self, classes: super::classify::Classes) -> Self {
        self.classes = classes;
        self
    }

    pub fn request(&mut self, r: &Record) {
        let Event::Request {
            id,
            group,
            worker,
            start_s,
            duration_s,
            outcome,
            status,
            ..
        } = &r.event
        else {
            return;
        };
        let end_s = start_s + duration_s;
        let g = match self.index.get(group.as_str()) {
            Some(&g) => g,
            None => {
                let observed =
                    self.observed
                        .as_ref()
                        .and_then(|s| s.observed(r))
                        .map(|o| ObservedLane {
                            via: o.via,
                            heading: super::observed::heading(o.via).into(),
                            label: o.label(),
                            row_is: match o.via {
                                crate::journal::observed::Via::Stdio => "client",
                                crate::journal::observed::Via::Http => "connection",
                            }
                            .into(),
                        });
                self.groups.push(Group {
                    name: group.clone(),
                    concurrency: None,
                    rate: None,
                    level_label: None,
                    rows: 0,
                    first_s: *start_s,
                    last_s: end_s,
                    counts: [0; 4],
                    observed,
                });
                self.counts.push(vec![[0u32; 4]; BUCKETS]);
                self.max_duration_s.push(vec![0.0f64; BUCKETS]);
                self.ok_summary.push(crate::stats::Summary::default());
                self.index.insert(group.clone(), self.groups.len() - 1);
                self.groups.len() - 1
            }
        };
        let next = self.groups[g].rows;
        let row = *self.rows.entry((g, *worker)).or_insert(next);
        let grp = &mut self.groups[g];
        grp.rows = grp.rows.max(row + 1);
        grp.first_s = grp.first_s.min(*start_s);
        grp.last_s = grp.last_s.max(end_s);
        let at_timer = self
            .classes
            .at_timer(group, outcome, *status, *duration_s)
            .map(|(_, rule)| rule.kind());
        let class = match at_timer {
            Some(_) => Class::Error,
            None => Class::of(outcome),
        };
        grp.counts[class.index()] += 1;
        let b = ((end_s / self.bucket_s) as usize).min(BUCKETS - 1);
        self.counts[g][b][class.index()] += 1;
        let m = &mut self.max_duration_s[g][b];
        *m = m.max(*duration_s);
        let tb = ((end_s / self.time_bucket_s) as usize).min(TIME_BUCKETS - 1);
        self.time_counts[tb][class.index()] += 1;
        if class == Class::Ok {
            self.ok_summary[g].record(*duration_s);
            self.time_hist[tb].record(*duration_s);
        }
        if self.spans.len() >= SPAN_KEEP {
            self.dropped += 1;
            return;
        }
        let what = match (class, status) {
            _ if at_timer.is_some() => at_timer.unwrap_or_default(),
            (Class::Ok, None) => String::new(),
            (Class::Ok, Some(s)) if *s == 200 => String::new(),
            (Class::Ok, Some(s)) => format!("ok {s}"),
            _ => outcome.describe(),
        };
        self.spans.push(Span {
            id: *id,
            group: g as u32,
            worker: *worker,
            row,
            start_s: *start_s,
            end_s,
            class,
            what: what.into(),
        });
    }
}

/// Bands on the fewest rows with no overlap (a restarted server's lives follow one another on one row).
fn bands(lives: &[ProcessLife]) -> Vec<Band> {
    let mut row_ends: Vec<f64> = Vec::new();
    lives
        .iter()
        .map(|l| {
            let row = match row_ends.iter().position(|&e| e <= l.spawn_t_s) {
                Some(r) => r,
                None => {
                    row_ends.push(f64::NEG_INFINITY);
                    row_ends.len() - 1
                }
            };
            row_ends[row] = l.exit_t_s.unwrap_or(f64::INFINITY);
            Band {
                pid: l.pid,
                row: row as u32,
                start_s: l.spawn_t_s,
                end_s: l.exit_t_s,
                status: l.status,
                meaning: l.meaning.clone(),
                requested: l.requested,
            }
        })
        .collect()
}

fn markers(recs: &[Record], lives: &[ProcessLife], suspicions: &[Suspicion]) -> Vec<Marker> {
    let mut out = Vec::new();
    let mut push = |t_s, kind, pid, label: String, text: String, severity: &str| {
        out.push(Marker {
            t_s,
            kind,
            pid,
            label,
            text,
            severity: severity.into(),
        })
    };
    for r in recs {
        let t = r.t_s;
        match &r.event {
            Event::Spawn {
                pid,
                command,
                attempt,
                container_id,
                ..
            } => {
                let what = match container_id {
                    Some(id) => format!("container {}", &id[..id.len().min(12)]),
                    None => command.join(" "),
                };
                push(
                    t,
                    MarkerKind::Spawn,
                    Some(*pid),
                    format!("start pid {pid}"),
                    format!("t={t:.3}s: started pid {pid} (attempt {attempt}): {what}"),
                    "info",
                );
            }
            Event::Exit {
                pid,
                code,
                signal,
                age_s,
                status,
                requested,
                meaning,
                oom_killed,
                ..
            } => {
                let label = match (code, signal) {
                    (_, Some(sig)) => format!("{sig} ({status})"),
                    (Some(c), None) => format!("exit {c}"),
                    // Not witness's child (attached): gone, with a status nobody can read.
                    (None, None) if *status < 0 => "gone".to_string(),
                    (None, None) => format!("exit {status}"),
                };
                let oom = if *oom_killed == Some(true) {
                    " — OOM-killed"
                } else {
                    ""
                };
                push(
                    t,
                    MarkerKind::Exit,
                    Some(*pid),
                    label,
                    format!(
                        "t={t:.3}s: pid {pid} {meaning}{oom}, at age {}{}",
                        secs(*age_s),
                        if *requested {
                            " (witness asked it to stop)"
                        } else {
                            ""
                        }
                    ),
                    // Asked to stop, or ended cleanly on its own (exit 0: a stdio server whose
                    // client closed its stdin): not a failure.
                    if *requested || (*code == Some(0) && signal.is_none()) {
                        "info"
                    } else {
                        "bad"
                    },
                );
            }
            Event::Restart {
                attempt, reason, ..
            } => push(
                t,
                MarkerKind::Restart,
                None,
                format!("restart #{attempt}"),
                format!("t={t:.3}s: restart #{attempt}: {reason}"),
                "warn",
            ),
            Event::Log {
                pid,
                stream,
                line,
                label,
                ..
            } => push(
                t,
                MarkerKind::Log,
                *pid,
                format!("log: {label}"),
                format!(
                    "t={t:.3}s: [{label}] {stream}: {}",
                    crate::journal::logline::shown(line)
                ),
                "warn",
            ),
            Event::SignalSent {
                pid,
                signal,
                reason,
            } => push(
                t,
                MarkerKind::Signal,
                Some(*pid),
                signal.clone(),
                format!("t={t:.3}s: sent {signal} to process group {pid}: {reason}"),
                "info",
            ),
            Event::Fault {
                action,
                pid,
                detail,
            } => push(
                t,
                MarkerKind::Fault,
                Some(*pid),
                format!("fault: {action}"),
                format!(
                    "t={t:.3}s: {}",
                    super::timeline::fault_words(action, detail)
                ),
                "warn",
            ),
            Event::Ready {
                ok,
                waited_s,
                url,
                detail,
                ..
            } => push(
                t,
                MarkerKind::Ready,
                None,
                if *ok { "ready" } else { "never ready" }.into(),
                format!(
                    "t={t:.3}s: {url} {} after {}",
                    match (*ok, url.starts_with("mcp ping"), detail) {
                        (true, false, Some(d)) => d.as_str(),
                        (true, true, _) => "answered",
                        (true, false, None) => "answered 200",
                        (false, true, _) => "did not answer",
                        (false, false, _) => "did not answer 2xx",
                    },
                    secs(*waited_s)
                ),
                if *ok { "info" } else { "bad" },
            ),
            Event::Leak { pid, detail } => push(
                t,
                MarkerKind::Leak,
                Some(*pid),
                "pipes held".into(),
                format!("t={t:.3}s: {detail}"),
                "warn",
            ),
            Event::Note { level, text } if level != "info" => push(
                t,
                MarkerKind::Note,
                None,
                clip(text, 32),
                format!("t={t:.3}s: {text}"),
                "warn",
            ),
            _ => {}
        }
    }
    // A timer armed at process start fires at spawn + timer: drawn there, it is the line the requests
    // died on. A request that ended at a timer is told in words only: its line would sit on the exit's.
    for s in suspicions
        .iter()
        .filter(|s| s.subject == Subject::ProcessExit)
    {
        let life = s.pid.and_then(|p| {
            lives
                .iter()
                .rev()
                .find(|l| l.pid == p && l.spawn_t_s <= s.t_s)
        });
        // Armed later than the start (the words say how much later): drawn where that puts it.
        let armed = s.armed_s.unwrap_or(0.0);
        let (t, from) = match life {
            Some(l) if armed > 0.0 => (
                l.spawn_t_s + armed + s.timer_s,
                format!(
                    "t={:.3}s, {} after pid {}'s start at t={:.3}s,",
                    l.spawn_t_s + armed,
                    secs(armed),
                    l.pid,
                    l.spawn_t_s
                ),
            ),
            Some(l) => (
                l.spawn_t_s + s.timer_s,
                format!("pid {}'s start at t={:.3}s", l.pid, l.spawn_t_s),
            ),
            None => {
                let start = s.t_s - s.seconds + armed;
                (start + s.timer_s, format!("t={start:.3}s"))
            }
        };
        out.push(Marker {
            t_s: t,
            kind: MarkerKind::TimerDeadline,
            pid: s.pid,
            label: format!("{} timer", secs(s.timer_s)),
            text: format!(
                "t={t:.3}s: a {} timer armed at {from} fires here. {}",
                secs(s.timer_s),
                s.detail
            ),
            severity: "bad".into(),
        });
    }
    out.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
    out
}

/// The first `n` characters, with an ellipsis when cut.
fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        return s.to_string();
    }
    let mut t: String = s.chars().take(n - 1).collect();
    t.push('…');
    t
}

fn probes(recs: &[Record], mcp: bool) -> Vec<ProbeMark> {
    let mark = |t_s: f64, purpose: String, p: &Probe| ProbeMark {
        t_s,
        purpose,
        healthy: p.healthy(),
        result: p.said(mcp),
        duration_s: p.duration_s,
    };
    recs.iter()
        .filter_map(|r| match &r.event {
            Event::Health { purpose, probe, .. } => Some(mark(r.t_s, purpose.clone(), probe)),
            _ => None,
        })
        .collect()
}

fn levels(recs: &[Record], mcp: bool) -> Vec<LevelBand> {
    let mut out: Vec<LevelBand> = Vec::new();
    let mut start_ids = HashMap::new();
    for r in recs {
        match &r.event {
            Event::LevelStart {
                index,
                concurrency,
                health,
                identity,
                skipped,
            } => {
                start_ids.insert(*index, identity.clone());
                out.push(LevelBand {
                    index: *index,
                    concurrency: *concurrency,
                    rate: None,
                    name: concurrency.to_string(),
                    label: format!("concurrency {concurrency}"),
                    start_s: r.t_s,
                    end_s: skipped.as_ref().map(|_| r.t_s),
                    skipped: skipped.clone(),
                    health_before: health.said(mcp),
                    health_after: None,
                    identity_changed: false,
                });
            }
            Event::RateLevel {
                index, rate_per_s, ..
            } => {
                if let Some(l) = out.iter_mut().rev().find(|l| l.index == *index) {
                    l.rate = Some(*rate_per_s);
                    // A replay's speed, when it has one, names it instead (below).
                    if !l.label.starts_with("speed") {
                        l.name = crate::journal::rate_words(*rate_per_s);
                        l.label = format!("rate {}", l.name);
                    }
                }
            }
            Event::ReplayLevel { index, speed, .. } => {
                if let Some(l) = out.iter_mut().rev().find(|l| l.index == *index) {
                    l.name = crate::journal::speed_words(*speed);
                    l.label = format!("speed {}", l.name);
                }
            }
            Event::LevelEnd {
                index,
                health,
                identity,
                ..
            } => {
                if let Some(l) = out
                    .iter_mut()
                    .rev()
                    .find(|l| l.index == *index && l.health_after.is_none())
                {
                    l.end_s = Some(r.t_s);
                    l.health_after = Some(health.said(mcp));
                    let before = start_ids.get(index).cloned().flatten();
                    l.identity_changed = match (before, identity) {
                        (Some(a), Some(b)) => a != *b,
                        (Some(_), None) => true,
                        _ => false,
                    };
                }
            }
            _ => {}
        }
    }
    out
}

/// Resource series, one per figure and thing measured, in the order first seen.
fn series(recs: &[Record]) -> Vec<Series> {
    // name -> (what the last point measured, segments)
    type Segments = Vec<Vec<(f64, f64)>>;
    let mut order: Vec<(String, Unit)> = Vec::new();
    let mut data: HashMap<String, (String, Segments)> = HashMap::new();
    let mut add = |name: String, unit: Unit, key: String, t: f64, v: f64| {
        let entry = data.entry(name.clone()).or_insert_with(|| {
            order.push((name, unit));
            (key.clone(), vec![Vec::new()])
        });
        if entry.0 != key {
            entry.0 = key;
            entry.1.push(Vec::new());
        }
        entry.1.last_mut().expect("one segment").push((t, v));
    };
    for r in recs {
        let t = r.t_s;
        match &r.event {
            Event::ProcSample {
                pid,
                rss_bytes,
                cpu_pct,
                ..
            } => {
                let k = pid.to_string();
                // A live process always has resident pages: RSS 0 is a process caught exiting (a
                // zombie, its memory already gone), not memory falling to zero. Not drawn.
                if *rss_bytes > 0 {
                    add(
                        "server RSS".into(),
                        Unit::Bytes,
                        k.clone(),
                        t,
                        *rss_bytes as f64,
                    );
                }
                add("server CPU".into(), Unit::Percent, k, t, *cpu_pct);
            }
            Event::ContainerSample {
                id,
                mem_bytes,
                cpu_pct,
                pids,
                ..
            } => {
                add(
                    "container memory".into(),
                    Unit::Bytes,
                    id.clone(),
                    t,
                    *mem_bytes as f64,
                );
                add(
                    "container CPU".into(),
                    Unit::Percent,
                    id.clone(),
                    t,
                    *cpu_pct,
                );
                add(
                    "container pids".into(),
                    Unit::Count,
                    id.clone(),
                    t,
                    *pids as f64,
                );
            }
            Event::GpuSample {
                device,
                gpu_util_pct,
                mem_used_bytes,
                server_mem_bytes,
                ..
            } => {
                let k = String::new();
                // NVML may not report utilisation; a missing figure is no point, never a 0 %.
                if let Some(u) = gpu_util_pct {
                    add(format!("GPU{device} util"), Unit::Percent, k.clone(), t, *u);
                }
                add(
                    format!("GPU{device} memory used"),
                    Unit::Bytes,
                    k.clone(),
                    t,
                    *mem_used_bytes as f64,
                );
                if let Some(m) = server_mem_bytes {
                    add(
                        format!("GPU{device} memory (server)"),
                        Unit::Bytes,
                        k,
                        t,
                        *m as f64,
                    );
                }
            }
            Event::Gauge {
                name,
                value: Some(v),
                ..
            } => add(format!("gauge {name}"), Unit::Plain, String::new(), t, *v),
            _ => {}
        }
    }
    order
        .into_iter()
        .map(|(name, unit)| {
            let (_, segments) = data.remove(&name).expect("named series");
            Series {
                segments: thin(segments, SERIES_POINTS),
                name,
                unit,
            }
        })
        .collect()
}

/// Keeps at most about `max` points across all segments: per time bucket, the first, lowest and
/// highest point, so peaks and troughs survive the thinning.
fn thin(segments: Vec<Vec<(f64, f64)>>, max: usize) -> Vec<Vec<(f64, f64)>> {
    let total: usize = segments.iter().map(Vec::len).sum();
    if total <= max {
        return segments;
    }
    // Three points survive per bucket.
    let per = (total * 3).div_ceil(max);
    segments
        .into_iter()
        .map(|seg| {
            let mut out = Vec::new();
            for chunk in seg.chunks(per) {
                let lo = chunk.iter().min_by(|a, b| a.1.total_cmp(&b.1)).unwrap();
                let hi = chunk.iter().max_by(|a, b| a.1.total_cmp(&b.1)).unwrap();
                let mut keep = vec![chunk[0], *lo, *hi];
                keep.sort_by(|a, b| a.0.total_cmp(&b.0));
                keep.dedup();
                out.extend(keep);
            }
            out
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyze::analyze;
    use crate::analyze::tests::{end, exit, loaded, spawn};
    use crate::journal::{ErrorKind, Identity, Stream, TimeoutPhase};

    #[test]
    fn a_time_buckets_figures_lie_within_its_durations() {
        // One request: its own p50 and p99, not its bin's middle.
        let mut h = LogHist::default();
        h.record(1.001189674);
        assert_eq!(h.quantile(0.5), Some(1.001189674));
        assert_eq!(h.quantile(0.99), Some(1.001189674));
        let mut h = LogHist::default();
        for d in [0.0101, 0.0102, 0.0103, 4.002, 8.01] {
            h.record(d);
        }
        for q in [0.5, 0.99] {
            let v = h.quantile(q).unwrap();
            assert!((0.0101..=8.01).contains(&v), "{q}: {v}");
        }
        assert_eq!(LogHist::default().quantile(0.5), None);
    }

    pub fn request(id: u64, group: &str, worker: u32, start: f64, dur: f64, o: Outcome) -> Event {
        Event::Request {
            id,
            group: group.into(),
            worker,
            start_s: start,
            duration_s: dur,
            outcome: o,
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
        }
    }

    fn reset() -> Outcome {
        Outcome::Error {
            error: ErrorKind::Reset,
            status: None,
        }
    }

    fn probe(status: u16) -> Probe {
        Probe {
            status: Some(status),
            error: None,
            duration_s: 0.001,
            connected: false,
        }
    }

    fn watchdog_log(pid: u32) -> Event {
        Event::Log {
            pid: Some(pid),
            stream: Stream::Stderr,
            line: "[oi] process watchdog: force-exiting after 6s (exit 124)".into(),
            label: "watchdog".into(),
            truncated: false,
            timer_s: Some(6.0),
        }
    }

    #[test]
    fn requests_become_spans_in_lanes_by_group_with_a_row_per_worker() {
        let a = analyze(&loaded(vec![
            (1.0, request(1, "L1", 0, 0.5, 0.5, Outcome::Ok)),
            (2.0, request(2, "L4", 7, 1.5, 0.5, Outcome::Ok)),
            (2.1, request(3, "L4", 3, 1.5, 0.6, reset())),
            (2.7, request(4, "L4", 7, 2.0, 0.7, Outcome::Ok)),
            (3.0, end()),
        ]));
        let p = &a.picture;
        assert_eq!(
            p.groups.iter().map(|g| &g.name).collect::<Vec<_>>(),
            ["L1", "L4"]
        );
        assert_eq!(p.groups[1].rows, 2, "two distinct workers in L4");
        assert_eq!(p.groups[1].counts, [2, 0, 1, 0]);
        let s3 = p.spans.iter().find(|s| s.id == 3).unwrap();
        assert_eq!((s3.group, s3.row, s3.class), (1, 1, Class::Error));
        assert_eq!(s3.end_s, 2.1);
        assert_eq!(&*s3.what, "error: connection reset");
        let s4 = p.spans.iter().find(|s| s.id == 4).unwrap();
        assert_eq!(s4.row, 0, "worker 7 keeps its row");
        assert_eq!(p.totals, [3, 0, 1, 0]);
        assert!(p.aggregate.is_none());
    }

    #[test]
    fn a_watchdog_timer_deadline_is_measured_from_the_process_start() {
        // The process started at t=10, so its 6 s watchdog fires at t=16, where its requests die.
        let a = analyze(&loaded(vec![
            (10.0, spawn(7)),
            (15.0, request(1, "L4", 0, 12.0, 3.0, Outcome::Ok)),
            (16.0, watchdog_log(7)),
            (16.01, exit(7, 124, 6.01, false)),
            (16.02, request(2, "L4", 1, 13.0, 3.02, reset())),
            (17.0, end()),
        ]));
        let p = &a.picture;
        let deadline = p
            .markers
            .iter()
            .find(|m| m.kind == MarkerKind::TimerDeadline)
            .expect("a deadline marker");
        assert_eq!(deadline.t_s, 16.0);
        assert_eq!(deadline.label, "6s timer");
        assert!(deadline.text.contains("pid 7's start at t=10.000s"));
        let exit = p
            .markers
            .iter()
            .find(|m| m.kind == MarkerKind::Exit)
            .unwrap();
        assert_eq!((exit.t_s, exit.label.as_str()), (16.01, "exit 124"));
        assert_eq!(exit.severity, "bad");
        assert!(p
            .markers
            .iter()
            .any(|m| m.kind == MarkerKind::Log && m.text.contains("force-exiting after 6s")));
        assert_eq!(p.bands.len(), 1);
        assert_eq!(p.bands[0].end_s, Some(16.01));
    }

    #[test]
    fn a_timer_armed_after_the_start_is_drawn_where_its_words_put_it() {
        // The process started at t=2; its 6 s watchdog was armed 0.68 s later (the words say
        // so), so it fires at t=8.68, where the process exits: not at its start + 6 s.
        let a = analyze(&loaded(vec![
            (2.0, spawn(7)),
            (8.67, watchdog_log(7)),
            (8.68, exit(7, 124, 6.68, false)),
            (9.0, end()),
        ]));
        let s = &a.suspicions[0];
        assert!(
            s.detail
                .contains("armed about 0.68 s after the process started"),
            "{}",
            s.detail
        );
        let deadline = a
            .picture
            .markers
            .iter()
            .find(|m| m.kind == MarkerKind::TimerDeadline)
            .expect("a deadline marker");
        assert!((deadline.t_s - 8.68).abs() < 1e-9, "{deadline:?}");
        assert!(
            deadline.text.starts_with(
                "t=8.680s: a 6s timer armed at t=2.680s, 680ms after pid 7's start at t=2.000s, fires here."
            ),
            "{}",
            deadline.text
        );
    }

    #[test]
    fn a_restarted_server_stays_on_one_row_and_a_running_one_has_no_end() {
        let a = analyze(&loaded(vec![
            (0.0, spawn(7)),
            (2.0, exit(7, 124, 2.0, false)),
            (2.2, spawn(8)),
        ]));
        let rows: Vec<_> = a.picture.bands.iter().map(|b| (b.pid, b.row)).collect();
        assert_eq!(rows, [(7, 0), (8, 0)]);
        assert_eq!(a.picture.bands[1].end_s, None);
    }

    #[test]
    fn levels_pair_start_and_end_and_notice_a_changed_identity() {
        let id = |pid| Identity {
            pid,
            start_time: 1,
            container_id: None,
            container_started_at: None,
            socket_inode: None,
        };
        let a = analyze(&loaded(vec![
            (
                1.0,
                Event::LevelStart {
                    index: 0,
                    concurrency: 1,
                    health: probe(200),
                    identity: Some(id(7)),
                    skipped: None,
                },
            ),
            (
                3.0,
                Event::LevelEnd {
                    index: 0,
                    concurrency: 1,
                    health: probe(200),
                    identity: Some(id(7)),
                    stopped: None,
                    not_sent: None,
                    held: None,
                    witness_cpu_s: None,
                    protocol: None,
                },
            ),
            (
                4.0,
                Event::LevelStart {
                    index: 1,
                    concurrency: 4,
                    health: probe(200),
                    identity: Some(id(7)),
                    skipped: None,
                },
            ),
            (
                9.0,
                Event::LevelEnd {
                    index: 1,
                    concurrency: 4,
                    health: probe(200),
                    identity: Some(id(9)),
                    stopped: None,
                    not_sent: None,
                    held: None,
                    witness_cpu_s: None,
                    protocol: None,
                },
            ),
            (
                9.5,
                Event::Health {
                    url: "http://127.0.0.1:1/health".into(),
                    purpose: "after".into(),
                    probe: Probe {
                        status: None,
                        error: Some("ConnectRefused".into()),
                        duration_s: 0.01,
                        connected: false,
                    },
                },
            ),
        ]));
        let l = &a.picture.levels;
        assert_eq!(l.len(), 2);
        assert_eq!((l[0].start_s, l[0].end_s), (1.0, Some(3.0)));
        assert!(!l[0].identity_changed);
        assert!(l[1].identity_changed, "pid 7 became pid 9 under level 4");
        let p = &a.picture.probes;
        assert_eq!(p.len(), 1);
        assert!(!p[0].healthy);
        assert_eq!(p[0].result, "refused (nothing listens)");
    }

    #[test]
    fn beyond_the_span_limit_requests_are_also_counted_per_bucket() {
        let n = SPAN_LIMIT as u64 + 500;
        let mut ev: Vec<(f64, Event)> = (0..n)
            .map(|i| {
                let start = i as f64 * 0.01;
                let o = if i % 100 == 0 {
                    Outcome::Timeout {
                        phase: TimeoutPhase::Request,
                        limit_s: 1.0,
                    }
                } else {
                    Outcome::Ok
                };
                (
                    start + 0.005,
                    request(i, "soak", (i % 8) as u32, start, 0.005, o),
                )
            })
            .collect();
        ev.push((n as f64 * 0.01 + 1.0, end()));
        let a = analyze(&loaded(ev));
        let agg = a.picture.aggregate.as_ref().expect("aggregated");
        assert_eq!(agg.counts.len(), 1);
        assert_eq!(agg.counts[0].len(), BUCKETS);
        let summed: [u64; 4] = agg.counts[0].iter().fold([0; 4], |mut acc, b| {
            for (a, c) in acc.iter_mut().zip(b) {
                *a += *c as u64;
            }
            acc
        });
        assert_eq!(summed, [n - 105, 105, 0, 0]);
        assert_eq!(summed, a.picture.totals);
        assert!(agg.max_duration_s[0].iter().all(|d| *d <= 0.005 + 1e-12));
    }

    #[test]
    fn a_long_series_is_thinned_but_keeps_its_spike_and_breaks_at_a_restart() {
        let sample = |pid, rss| Event::ProcSample {
            pid,
            rss_bytes: rss,
            cpu_pct: 1.0,
            threads: 1,
            fds: 3,
            children: 0,
            own_rss_bytes: None,
            kin: vec![],
        };
        let mut ev: Vec<(f64, Event)> = (0..5000)
            .map(|i| {
                (
                    i as f64,
                    sample(7, if i == 2345 { 9_000_000 } else { 1_000 }),
                )
            })
            .collect();
        ev.extend((5000..5010).map(|i| (i as f64, sample(8, 2_000))));
        let a = analyze(&loaded(ev));
        let rss = a
            .picture
            .series
            .iter()
            .find(|s| s.name == "server RSS")
            .unwrap();
        assert_eq!(rss.unit, Unit::Bytes);
        assert_eq!(rss.segments.len(), 2, "a new pid starts a new segment");
        assert!(rss.points().count() <= SERIES_POINTS + 3);
        assert_eq!(rss.max(), 9_000_000.0);
        assert!(a.picture.series.iter().any(|s| s.name == "server CPU"));
    }

    #[test]
    fn a_dying_process_read_at_rss_0_is_not_drawn_as_memory_falling_to_zero() {
        let sample = |pid, rss| Event::ProcSample {
            pid,
            rss_bytes: rss,
            cpu_pct: 1.0,
            threads: 1,
            fds: 3,
            children: 0,
            own_rss_bytes: None,
            kin: vec![],
        };
        // pid 7 grows to 5 MB, is read once more as it exits (RSS 0), and pid 8 takes over at 2 MB.
        let ev = vec![
            (1.0, sample(7, 4_000_000)),
            (2.0, sample(7, 5_000_000)),
            (3.0, sample(7, 0)),
            (3.5, exit(7, 124, 3.5, false)),
            (4.0, sample(8, 2_000_000)),
        ];
        let a = analyze(&loaded(ev));
        let rss = a
            .picture
            .series
            .iter()
            .find(|s| s.name == "server RSS")
            .unwrap();
        let drawn: Vec<(f64, f64)> = rss.points().copied().collect();
        assert_eq!(
            drawn,
            [(1.0, 4e6), (2.0, 5e6), (4.0, 2e6)],
            "the chart ends pid 7 at its last real reading"
        );
        assert!(
            drawn.iter().all(|p| p.1 > 0.0),
            "no fall to zero: {drawn:?}"
        );
    }
}
