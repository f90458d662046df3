//! `witness compare BASE CURRENT`: two analysed runs side by side, each level (or speed, rate, soak
//! kind, kind of call) matched by name. Pure: analyses in, a [`Comparison`] out; views print it.
//!
//! Per group it says whether latency changed beyond noise — a rank test over every ok request's
//! duration the two runs recorded ([`crate::rank`]) and, per percentile, a 95 % distribution-free
//! interval on each side — and whether the failure rate did (Fisher's exact test). A change counts
//! when the test finds it (p below `alpha`, or the two intervals apart) *and* it is larger than the
//! noise allowance (`noise`, relative to BASE's figure): a run on a shared machine differs from the
//! last by a few percent with nothing changed, and thousands of requests make any such difference
//! "significant". Then what changed in the story: timers that appeared or went (with their value
//! and evidence), restarts, exits and their causes, new kinds of failure with the server's words,
//! the process tree.

use std::collections::BTreeMap;

use serde::Serialize;

use super::asserts::{holds, Judged};
use super::Analysis;
use crate::rank::{self, Interval, RankTest};
use crate::stats::{Latency, Summary};
use crate::units::took;

/// Below this p-value a test's difference is more than chance.
pub const ALPHA: f64 = 0.01;
/// The default noise allowance: changes smaller than this fraction of BASE's figure are noise.
pub const NOISE: f64 = 0.10;

/// One run as the comparison names it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunInfo {
    /// The journal's path (or what picked it: "the latest run named nightly").
    pub label: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub mode: String,
    pub started_at: String,
    /// The server's command, as the run recorded it.
    pub command: Vec<String>,
    /// The run's own verdict ("pass", "fail", … or "exit 0" for a wrap run).
    pub verdict: String,
}

/// What a group (a level, a speed, a rate, a soak kind, a kind of call) measured in one run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SideRow {
    pub sent: u64,
    pub ok: u64,
    /// The server's failures: errors and timeouts (capacity refusals apart).
    pub failed: u64,
    pub rejected: u64,
    pub error_rate: f64,
    pub rejected_rate: f64,
    /// Ok answers per second over the group's span, where it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rps: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency: Option<Latency>,
}

/// One percentile compared.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FigureCmp {
    pub figure: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base: Option<Interval>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current: Option<Interval>,
    /// CURRENT ÷ BASE − 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub change: Option<f64>,
    /// "slower", "faster", "no significant change", "too few requests", "not in both runs".
    pub verdict: String,
    /// Why, in words.
    pub why: String,
}

/// A failure rate compared.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RateCmp {
    pub base: f64,
    pub current: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p_value: Option<f64>,
    /// "more", "fewer", "no significant change".
    pub verdict: String,
}

/// One group compared.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GroupCmp {
    /// As every view names it: "8", "200/s", "4×", "GET /api", "tools/call search".
    pub name: String,
    /// "level", "rate", "speed", "kind" or "calls".
    pub what: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base: Option<SideRow>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current: Option<SideRow>,
    pub figures: Vec<FigureCmp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank_test: Option<RankTest>,
    /// The whole distribution of ok durations: "slower", "faster", "no significant change",
    /// "too few requests", "not in both runs".
    pub latency: String,
    pub latency_why: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errors: Option<RateCmp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rejections: Option<RateCmp>,
}

impl GroupCmp {
    /// "level 8", "rate 200/s", "speed 4×", "kind GET /api", "calls tools/call echo".
    pub fn title(&self) -> String {
        format!("{} {}", self.what, self.name)
    }
}

/// A change in what happened, not in a figure.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StoryLine {
    /// "timer", "verdict", "restarts", "exits", "failures", "processes", "resources", "machine".
    pub about: &'static str,
    /// One line: "new: a 2.001s timer at level 8 (request timer)".
    pub text: String,
    /// The evidence behind it, in the report's words (the suspicion's, the server's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence: Option<String>,
    /// Whether it makes CURRENT worse (and the comparison fail).
    pub worse: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    pub base: RunInfo,
    pub current: RunInfo,
    pub test: &'static str,
    pub rate_test: &'static str,
    pub alpha: f64,
    pub noise: f64,
    /// How the two runs were made differently (their commands), if they were.
    pub made_differently: Vec<String>,
    pub groups: Vec<GroupCmp>,
    pub story: Vec<StoryLine>,
    /// "worse", "better", "changed" or "no significant change".
    pub verdict: String,
    /// Each way CURRENT is worse, in words.
    pub worse: Vec<String>,
    /// Each way CURRENT is better, in words.
    pub better: Vec<String>,
    pub asserts: Vec<Judged>,
    /// 1 when CURRENT is worse or a threshold broke, else 0.
    pub exit_code: i32,
}

/// One side's input.
pub struct Side<'a> {
    pub label: String,
    pub name: Option<String>,
    pub analysis: &'a Analysis,
}

/// Compares two analysed runs. `asserts`: delta thresholds (see [`parse_delta`]), already parsed.
pub fn compare(base: &Side, current: &Side, noise: f64, asserts: &[Delta]) -> Comparison {
    let (a, b) = (base.analysis, current.analysis);
    let ga = groups(a);
    let gb = groups(b);
    let mut names: Vec<(&'static str, String)> =
        ga.iter().map(|g| (g.what, g.name.clone())).collect();
    for g in &gb {
        if !names.iter().any(|(w, n)| *w == g.what && *n == g.name) {
            names.push((g.what, g.name.clone()));
        }
    }
    let groups: Vec<GroupCmp> = names
        .into_iter()
        .map(|(what, name)| {
            let x = ga.iter().find(|g| g.what == what && g.name == name);
            let y = gb.iter().find(|g| g.what == what && g.name == name);
            group(what, name, x, y, noise)
        })
        .collect();
    let story = story(a, b, &ga, &gb);
    let mut worse = Vec::new();
    let mut better = Vec::new();
    for g in &groups {
        let t = g.title();
        for (word, list) in [("slower", &mut worse), ("faster", &mut better)] {
            let figs: Vec<String> = g
                .figures
                .iter()
                .filter(|f| f.verdict == word)
                .map(|f| {
                    format!(
                        "{} {}",
                        f.figure,
                        f.change.map(signed_percent).unwrap_or_default()
                    )
                })
                .collect();
            let test = g
                .rank_test
                .as_ref()
                .filter(|_| g.latency == word)
                .map(|r| format!("rank test {}", p_words(r.p_value)));
            if figs.is_empty() && test.is_none() {
                continue;
            }
            let mut parts = figs;
            parts.extend(test);
            list.push(format!("{t} {word} ({})", parts.join(", ")));
        }
        if let Some(e) = &g.errors {
            let words = format!(
                "{t}: failure rate {} → {}",
                percent(e.base),
                percent(e.current)
            );
            match e.verdict.as_str() {
                "more" => worse.push(words),
                "fewer" => better.push(words),
                _ => {}
            }
        }
    }
    worse.extend(story.iter().filter(|s| s.worse).map(|s| s.text.clone()));
    // How busy the machine was is context, not a change of the server.
    let changed = !better.is_empty() || story.iter().any(|s| !s.worse && s.about != "machine");
    let asserts: Vec<Judged> = asserts.iter().map(|d| d.judge(&groups, &story)).collect();
    let held = asserts.iter().all(|j| j.ok);
    let verdict = if !worse.is_empty() {
        "worse"
    } else if !better.is_empty() {
        "better"
    } else if changed {
        "changed"
    } else {
        "no significant change"
    };
    Comparison {
        base: info(base),
        current: info(current),
        test: rank::TEST,
        rate_test: rank::RATE_TEST,
        alpha: ALPHA,
        noise,
        made_differently: made_differently(a, b),
        groups,
        story,
        verdict: verdict.into(),
        exit_code: i32::from(!worse.is_empty() || !held),
        worse,
        better,
        asserts,
    }
}

fn info(s: &Side) -> RunInfo {
    let a = s.analysis;
    RunInfo {
        label: s.label.clone(),
        name: s.name.clone(),
        mode: a.mode.clone(),
        started_at: a.started_at.clone(),
        command: a.command.clone(),
        verdict: run_verdict(a),
    }
}

/// A run's own verdict in one word or two.
pub fn run_verdict(a: &Analysis) -> String {
    if let Some(l) = &a.load {
        return l.verdict.clone();
    }
    if let Some(s) = &a.soak {
        return s.verdict.clone();
    }
    if a.live.is_some() {
        return "still running".into();
    }
    match (a.last_status, a.exit_code) {
        (_, Some(code)) => format!("exit {code}"),
        (Some(s), None) => format!("exit {s}"),
        _ => "no end recorded".into(),
    }
}

/// A group of one run, read from its analysis.
struct Group<'a> {
    what: &'static str,
    name: String,
    /// The journal's group its requests and suspicions carry ("level2", a kind's name).
    journal_group: String,
    row: SideRow,
    durations: Option<&'a Summary>,
    errors_by_kind: BTreeMap<String, u64>,
    /// What the server said for a kind of failure (the first such failure's words).
    said: BTreeMap<String, String>,
    restarted: bool,
    /// When it ran on its run's clock (a level: from its start to its end).
    span: Option<(f64, f64)>,
    /// witness's own wait before each request left it (a level's): how busy the machine was.
    lag: Option<Latency>,
}

fn groups(a: &Analysis) -> Vec<Group<'_>> {
    let mut out = Vec::new();
    if let Some(l) = &a.load {
        for r in &l.levels {
            if r.verdict == "skipped" {
                continue;
            }
            let c = &r.counts;
            let sent = c.ok + c.timeout + c.error + c.rejected;
            let failed = c.timeout + c.error;
            let span = r.end_t_s.map(|e| e - r.start_t_s).filter(|s| *s > 0.0);
            let what = match &r.rate {
                Some(x) if x.speed.is_some() => "speed",
                Some(_) => "rate",
                None => "level",
            };
            let mut said = BTreeMap::new();
            for f in &r.failures {
                said.entry(f.outcome.clone())
                    .or_insert_with(|| f.detail.clone().unwrap_or_else(|| f.annotation.clone()));
            }
            out.push(Group {
                what,
                name: r.name(),
                journal_group: crate::journal::group_of_level(r.index),
                row: SideRow {
                    sent,
                    ok: c.ok,
                    failed,
                    rejected: c.rejected,
                    error_rate: ratio(failed, sent),
                    rejected_rate: ratio(c.rejected, sent),
                    rps: span.map(|s| c.ok as f64 / s),
                    verdict: Some(r.verdict.clone()),
                    latency: r.latency.clone(),
                },
                durations: r.ok_durations.as_ref(),
                errors_by_kind: r.errors_by_kind.clone(),
                said,
                restarted: r.restarted,
                span: Some((r.start_t_s, r.end_t_s.unwrap_or(f64::INFINITY))),
                lag: r.phases.as_ref().and_then(|p| p.lag.clone()),
            });
        }
    }
    if let Some(s) = &a.soak {
        let span = Some(s.duration_achieved_s).filter(|d| *d > 0.0);
        for k in &s.kinds {
            let failed = k.timeouts + k.errors;
            out.push(Group {
                what: "kind",
                name: k.name.clone(),
                journal_group: k.name.clone(),
                row: SideRow {
                    sent: k.requests,
                    ok: k.ok,
                    failed,
                    rejected: k.rejected,
                    error_rate: ratio(failed, k.requests),
                    rejected_rate: ratio(k.rejected, k.requests),
                    rps: span.map(|d| k.ok as f64 / d),
                    verdict: None,
                    latency: k.latency.clone(),
                },
                durations: k.ok_durations.as_ref(),
                errors_by_kind: k
                    .statuses
                    .iter()
                    .filter(|(st, _)| !st.starts_with('2') && !st.starts_with('3'))
                    .map(|(st, n)| (st.clone(), *n))
                    .collect(),
                said: k.said.clone(),
                restarted: false,
                span: None,
                lag: None,
            });
        }
    }
    if let Some(o) = &a.observed {
        for r in &o.calls {
            let c = &r.counts;
            let sent = r.calls;
            let failed = c.error + c.timeout;
            out.push(Group {
                what: "calls",
                name: r.label.clone(),
                journal_group: r.group.clone(),
                row: SideRow {
                    sent,
                    ok: c.ok,
                    failed,
                    rejected: c.rejected,
                    error_rate: ratio(failed, sent),
                    rejected_rate: ratio(c.rejected, sent),
                    rps: None,
                    verdict: None,
                    latency: r.latency.clone(),
                },
                durations: r.ok_durations.as_ref(),
                errors_by_kind: r
                    .failed_by_kind
                    .iter()
                    .map(|k| (k.outcome.clone(), k.count))
                    .collect(),
                said: BTreeMap::new(),
                restarted: false,
                span: None,
                lag: None,
            });
        }
    }
    out
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// "3.2 %", "0 %".
pub fn percent(x: f64) -> String {
    let p = x * 100.0;
    if p == 0.0 {
        "0 %".into()
    } else if p < 0.1 {
        format!("{p:.3} %")
    } else {
        format!("{p:.1} %")
    }
}

/// "+31.2 %", "−4.0 %".
pub fn signed_percent(x: f64) -> String {
    let p = x * 100.0;
    if p < 0.0 {
        format!("−{:.1} %", -p)
    } else {
        format!("+{p:.1} %")
    }
}

const FIGURES: [(&str, f64); 3] = [("p50", 0.50), ("p95", 0.95), ("p99", 0.99)];

fn group(
    what: &'static str,
    name: String,
    x: Option<&Group>,
    y: Option<&Group>,
    noise: f64,
) -> GroupCmp {
    let (Some(x), Some(y)) = (x, y) else {
        let only = if x.is_some() { "BASE" } else { "CURRENT" };
        return GroupCmp {
            name,
            what,
            base: x.map(|g| g.row.clone()),
            current: y.map(|g| g.row.clone()),
            figures: Vec::new(),
            rank_test: None,
            latency: "not in both runs".into(),
            latency_why: format!("only {only} ran it"),
            errors: None,
            rejections: None,
        };
    };
    let figures: Vec<FigureCmp> = FIGURES
        .iter()
        .map(|(f, q)| figure(f, *q, x, y, noise))
        .collect();
    let rank_test = match (x.durations, y.durations) {
        (Some(a), Some(b)) => rank::mann_whitney(a, b),
        _ => None,
    };
    let (latency, latency_why) = latency_verdict(rank_test.as_ref(), x, y, noise);
    let rate = |fa: u64, fb: u64| -> Option<RateCmp> {
        let p = rank::proportions(fa, x.row.sent, fb, y.row.sent)?;
        let (ra, rb) = (ratio(fa, x.row.sent), ratio(fb, y.row.sent));
        Some(RateCmp {
            base: ra,
            current: rb,
            p_value: Some(p),
            verdict: if p < ALPHA && rb > ra {
                "more"
            } else if p < ALPHA && rb < ra {
                "fewer"
            } else {
                "no significant change"
            }
            .into(),
        })
    };
    let errors = rate(x.row.failed, y.row.failed);
    let rejections = rate(x.row.rejected, y.row.rejected);
    // When one run failed (or refused) significantly more of the group's requests, its ok ones are
    // the survivors: their durations are not the same population as the other run's.
    let survivors = [("failed", &errors), ("refused", &rejections)]
        .into_iter()
        .find_map(|(word, r)| {
            r.as_ref().filter(|r| r.verdict != "no significant change").map(|r| {
                format!(
                    "the runs {word} {} and {} of its requests, so the ok ones of one are the survivors of a different run",
                    percent(r.base),
                    percent(r.current)
                )
            })
        });
    let (latency, latency_why, figures) = match survivors {
        Some(why) => (
            "not compared".to_string(),
            why.clone(),
            figures
                .into_iter()
                .map(|mut f: FigureCmp| {
                    if f.base.is_some() && f.current.is_some() {
                        f.verdict = "not compared".into();
                        f.why = why.clone();
                    }
                    f
                })
                .collect(),
        ),
        None => (latency, latency_why, figures),
    };
    GroupCmp {
        errors,
        rejections,
        name,
        what,
        base: Some(x.row.clone()),
        current: Some(y.row.clone()),
        figures,
        rank_test,
        latency,
        latency_why,
    }
}

fn figure_of(l: &Latency, f: &str) -> f64 {
    match f {
        "p50" => l.p50,
        "p95" => l.p95,
        _ => l.p99,
    }
}

/// "[19.8ms, 20.4ms]", "[19.8ms, ≥20.4ms]" (open above: too few requests to bound it).
pub fn interval_words(i: &Interval) -> String {
    format!(
        "[{}, {}{}]",
        took(i.low),
        if i.open_above { "≥" } else { "" },
        took(i.high)
    )
}

fn figure(f: &'static str, q: f64, x: &Group, y: &Group, noise: f64) -> FigureCmp {
    let none = |verdict: &str, why: String| FigureCmp {
        figure: f,
        base: None,
        current: None,
        change: None,
        verdict: verdict.into(),
        why,
    };
    let (Some(la), Some(lb), Some(sa), Some(sb)) = (
        x.row.latency.as_ref(),
        y.row.latency.as_ref(),
        x.durations,
        y.durations,
    ) else {
        return none(
            "not in both runs",
            "no ok request in one of the runs".into(),
        );
    };
    for (side, l) in [("BASE", la), ("CURRENT", lb)] {
        if !l.enough_for(f) {
            return none(
                "too few requests",
                format!(
                    "{side} has {} ok requests: too few for a {f} (it needs {})",
                    l.count,
                    crate::stats::NEEDS
                        .iter()
                        .find(|(n, _)| *n == f)
                        .map(|(_, k)| *k)
                        .unwrap_or(0)
                ),
            );
        }
    }
    let (va, vb) = (figure_of(la, f), figure_of(lb, f));
    let (Some(ia), Some(ib)) = (
        rank::quantile_interval(sa, q, va),
        rank::quantile_interval(sb, q, vb),
    ) else {
        return none(
            "not in both runs",
            "no ok request in one of the runs".into(),
        );
    };
    let change = if va > 0.0 { vb / va - 1.0 } else { 0.0 };
    let apart_above = ib.low > ia.high && !ia.open_above;
    let apart_below = ib.high < ia.low && !ib.open_above;
    // What a busier machine explains: how much longer witness itself waited, at this percentile,
    // before its requests left it (its own scheduling, the same run queue the server's threads
    // wait in). A figure is slower only past the noise allowance and that.
    let busier = match (&x.lag, &y.lag) {
        (Some(la), Some(lb)) => (figure_of(lb, f) - figure_of(la, f)).max(0.0),
        _ => 0.0,
    };
    let beyond = |d: f64| d > noise * va + busier;
    let (verdict, why) = if apart_above && change > noise && beyond(vb - va) {
        (
            "slower",
            format!(
                "{} → {}, {}; 95 % intervals {} and {} apart",
                took(va),
                took(vb),
                signed_percent(change),
                interval_words(&ia),
                interval_words(&ib)
            ),
        )
    } else if apart_below && change < -noise {
        (
            "faster",
            format!(
                "{} → {}, {}; 95 % intervals {} and {} apart",
                took(va),
                took(vb),
                signed_percent(change),
                interval_words(&ia),
                interval_words(&ib)
            ),
        )
    } else if apart_above && change > noise {
        (
            "no significant change",
            format!(
                "{} → {} ({}): the intervals are apart, but a busier machine explains it: witness's own wait before sending ({f}) grew by {} during CURRENT",
                took(va),
                took(vb),
                signed_percent(change),
                took(busier)
            ),
        )
    } else if apart_above || apart_below {
        (
            "no significant change",
            format!(
                "{} → {} ({}): the intervals are apart but the change is within the {} noise allowance",
                took(va),
                took(vb),
                signed_percent(change),
                percent(noise)
            ),
        )
    } else if ia.open_above || ib.open_above {
        (
            "no significant change",
            format!(
                "{} → {} ({}): too few requests to bound the {f} from above, so no change can be told from noise",
                took(va),
                took(vb),
                signed_percent(change)
            ),
        )
    } else {
        (
            "no significant change",
            format!(
                "{} → {} ({}): the 95 % intervals {} and {} overlap",
                took(va),
                took(vb),
                signed_percent(change),
                interval_words(&ia),
                interval_words(&ib)
            ),
        )
    };
    FigureCmp {
        figure: f,
        base: Some(ia),
        current: Some(ib),
        change: Some(change),
        verdict: verdict.into(),
        why,
    }
}

/// "p = 0.0031", "p < 0.0001".
pub fn p_words(p: f64) -> String {
    if p < 1e-4 {
        "p < 0.0001".into()
    } else {
        format!("p = {p:.4}")
    }
}

fn latency_verdict(t: Option<&RankTest>, x: &Group, y: &Group, noise: f64) -> (String, String) {
    let Some(t) = t else {
        return (
            "not in both runs".into(),
            "no ok request in one of the runs".into(),
        );
    };
    if t.n_base < 2 || t.n_current < 2 {
        return (
            "too few requests".into(),
            format!(
                "{} and {} ok requests: too few for a rank test",
                t.n_base, t.n_current
            ),
        );
    }
    let median = |g: &Group| g.row.latency.as_ref().map(|l| l.p50).unwrap_or(0.0);
    let (ma, mb) = (median(x), median(y));
    let shift = if ma > 0.0 { mb / ma - 1.0 } else { 0.0 };
    let words = format!(
        "{}; a request of CURRENT took longer than one of BASE {:.0} % of the time (50 % is no change); median {} → {} ({})",
        p_words(t.p_value),
        t.p_longer * 100.0,
        took(ma),
        took(mb),
        signed_percent(shift)
    );
    // As for each percentile: what a busier machine explains (witness's own median wait before
    // sending grew by it) is not charged to the server.
    let busier = match (&x.lag, &y.lag) {
        (Some(la), Some(lb)) => (lb.p50 - la.p50).max(0.0),
        _ => 0.0,
    };
    let verdict = if t.p_value >= ALPHA {
        "no significant change"
    } else if shift > noise && t.p_longer > 0.5 && mb - ma > noise * ma + busier {
        "slower"
    } else if shift < -noise && t.p_longer < 0.5 {
        "faster"
    } else {
        return (
            "no significant change".into(),
            format!(
                "{words}: a difference the test finds, within the {} noise allowance",
                percent(noise)
            ),
        );
    };
    (verdict.into(), words)
}

/// The witness command lines of the two runs, without where their outputs went.
fn made_differently(a: &Analysis, b: &Analysis) -> Vec<String> {
    let mut out = Vec::new();
    if a.mode != b.mode {
        out.push(format!(
            "BASE is a {} run and CURRENT a {} run",
            a.mode, b.mode
        ));
    }
    let (wa, sa) = split_command(&a.command);
    let (wb, sb) = split_command(&b.command);
    if sa != sb {
        out.push(format!(
            "the server: BASE ran `{}`, CURRENT `{}`",
            words(&sa),
            words(&sb)
        ));
    }
    if wa != wb {
        out.push(format!(
            "witness's settings: BASE `{}`, CURRENT `{}`",
            words(&wa),
            words(&wb)
        ));
    }
    let la = a.settings.load.as_ref();
    let lb = b.settings.load.as_ref();
    if let (Some(x), Some(y)) = (la, lb) {
        if x.levels != y.levels {
            out.push(format!(
                "the levels: BASE {:?}, CURRENT {:?}",
                x.levels, y.levels
            ));
        }
        if x.rates_per_s != y.rates_per_s {
            out.push(format!(
                "the rates: BASE {:?}/s, CURRENT {:?}/s",
                x.rates_per_s, y.rates_per_s
            ));
        }
    }
    out
}

/// Flags that say where a run's outputs went or what it is called: no difference in how it ran.
const OUTPUT_FLAGS: [&str; 7] = [
    "--journal",
    "--report",
    "--html",
    "--trace",
    "--junit",
    "--name",
    "-o",
];

/// A witness command line split into witness's own settings (without its output flags and
/// argv[0]) and the server's command (after `--`).
fn split_command(argv: &[String]) -> (Vec<String>, Vec<String>) {
    let cut = argv.iter().position(|w| w == "--").unwrap_or(argv.len());
    let server = argv.get(cut + 1..).unwrap_or_default().to_vec();
    let mut own = Vec::new();
    let mut skip = false;
    for w in argv.iter().take(cut).skip(1) {
        if skip {
            skip = false;
            continue;
        }
        if OUTPUT_FLAGS.contains(&w.as_str()) {
            skip = true;
            continue;
        }
        if OUTPUT_FLAGS.iter().any(|f| w.starts_with(&format!("{f}="))) {
            continue;
        }
        own.push(w.clone());
    }
    (own, server)
}

fn words(v: &[String]) -> String {
    if v.is_empty() {
        "(none)".into()
    } else {
        v.join(" ")
    }
}

/// A timer suspicion as the comparison matches it: what it is about, where, and its value.
struct TimerKey {
    kind: &'static str,
    subject: super::Subject,
    place: String,
    timer_s: f64,
    text: String,
    evidence: String,
}

/// A suspicion's kind in words.
fn timer_kind_words(k: super::SuspicionKind) -> &'static str {
    use super::SuspicionKind as K;
    match k {
        K::RoundTimer => "a process's life or a request at a timer",
        K::RequestTimer => "failed requests giving up together",
        K::OkTimer => "ok answers at a timer",
        K::RefusalTimer => "refusals at a timer inside the server",
        K::RateLimit => "a rate limit",
        K::SynRetransmit => "connects at TCP's retransmission timeout",
        K::NagleDelayedAck => "bodies one delayed ACK after their headers",
    }
}

fn timers(a: &Analysis, gs: &[Group]) -> Vec<TimerKey> {
    a.suspicions
        .iter()
        .map(|s| {
            // Its group, else the level it happened in (a request timer's failures end at t_s).
            let place = s
                .group
                .as_ref()
                .map(|g| {
                    gs.iter()
                        .find(|x| &x.journal_group == g)
                        .map(|x| format!("{} {}", x.what, x.name))
                        .unwrap_or_else(|| g.clone())
                })
                .or_else(|| {
                    (s.subject != super::Subject::ProcessExit)
                        .then(|| {
                            gs.iter()
                                .find(|x| x.span.is_some_and(|(a, b)| a <= s.t_s && s.t_s <= b))
                                .map(|x| format!("{} {}", x.what, x.name))
                        })
                        .flatten()
                })
                .unwrap_or_else(|| "the run".into());
            TimerKey {
                kind: s.kind.as_str(),
                subject: s.subject,
                text: format!(
                    "a {} timer at {place} ({})",
                    took(s.timer_s),
                    timer_kind_words(s.kind)
                ),
                evidence: s.detail.clone(),
                place,
                timer_s: s.timer_s,
            }
        })
        .collect()
}

fn same_timer(x: &TimerKey, y: &TimerKey) -> bool {
    x.kind == y.kind
        && x.subject == y.subject
        && x.place == y.place
        && (x.timer_s - y.timer_s).abs() <= 0.1 * x.timer_s.max(y.timer_s)
}

/// Exits nobody asked for, in the lifecycle's words, counted by what ended them.
fn unasked_exits(a: &Analysis) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for p in &a.processes {
        if p.requested || p.exit_t_s.is_none() {
            continue;
        }
        let words = if p.oom_killed {
            "killed by the OOM killer".to_string()
        } else if let Some(m) = &p.meaning {
            m.clone()
        } else if let Some(sig) = &p.signal {
            format!("killed by {sig}")
        } else {
            match p.status {
                Some(s) => format!("exited with {s}"),
                None => "exited".into(),
            }
        };
        *out.entry(words).or_default() += 1;
    }
    out
}

/// What each run's server processes were, by program: "toy_server ×1, sh ×8".
fn programs(a: &Analysis) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for p in &a.processes {
        let prog = p
            .command
            .first()
            .map(|c| {
                std::path::Path::new(c)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| c.clone())
            })
            .unwrap_or_else(|| format!("pid {}", p.pid));
        *out.entry(prog).or_default() += 1;
    }
    out
}

fn counted(m: &BTreeMap<String, u64>) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.iter()
        .map(|(k, n)| format!("{k} ×{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn story(a: &Analysis, b: &Analysis, ga: &[Group], gb: &[Group]) -> Vec<StoryLine> {
    let mut out = Vec::new();
    let (va, vb) = (run_verdict(a), run_verdict(b));
    if va != vb {
        out.push(StoryLine {
            about: "verdict",
            text: format!("the run's verdict: {va} → {vb}"),
            evidence: None,
            worse: va == "pass" || vb == "fail",
        });
    }
    for y in gb {
        let Some(x) = ga.iter().find(|x| x.what == y.what && x.name == y.name) else {
            continue;
        };
        let (Some(v1), Some(v2)) = (&x.row.verdict, &y.row.verdict) else {
            continue;
        };
        if v1 != v2 {
            out.push(StoryLine {
                about: "verdict",
                text: format!("{} {}: {v1} → {v2}", y.what, y.name),
                evidence: None,
                worse: v1 == "pass",
            });
        }
        if y.restarted && !x.restarted {
            out.push(StoryLine {
                about: "restarts",
                text: format!(
                    "{} {}: the server restarted during it (it did not in BASE)",
                    y.what, y.name
                ),
                evidence: None,
                worse: true,
            });
        }
        for (kind, n) in &y.errors_by_kind {
            if x.errors_by_kind.contains_key(kind) {
                continue;
            }
            out.push(StoryLine {
                about: "failures",
                text: format!("new failure at {} {}: {kind} ×{n}", y.what, y.name),
                evidence: y.said.get(kind).cloned(),
                worse: true,
            });
        }
    }
    let (ta, tb) = (timers(a, ga), timers(b, gb));
    for t in &tb {
        if !ta.iter().any(|x| same_timer(x, t)) {
            out.push(StoryLine {
                about: "timer",
                text: format!("new: {}", t.text),
                evidence: Some(t.evidence.clone()),
                worse: true,
            });
        }
    }
    for t in &ta {
        if !tb.iter().any(|y| same_timer(t, y)) {
            out.push(StoryLine {
                about: "timer",
                text: format!("gone: {}", t.text),
                evidence: Some(t.evidence.clone()),
                worse: false,
            });
        }
    }
    if a.restarts != b.restarts {
        out.push(StoryLine {
            about: "restarts",
            text: format!("restarts: {} → {}", a.restarts, b.restarts),
            evidence: None,
            worse: b.restarts > a.restarts,
        });
    }
    let (ea, eb) = (unasked_exits(a), unasked_exits(b));
    if ea != eb {
        let more = eb.iter().any(|(k, n)| ea.get(k).copied().unwrap_or(0) < *n);
        out.push(StoryLine {
            about: "exits",
            text: format!(
                "exits nobody asked for: {} → {}",
                counted(&ea),
                counted(&eb)
            ),
            evidence: None,
            worse: more,
        });
    }
    // How busy the machine was: witness's own wait before sending, at its worst level.
    let lag99 = |gs: &[Group]| {
        gs.iter()
            .filter_map(|g| {
                g.lag
                    .as_ref()
                    .map(|l| (l.p99, format!("{} {}", g.what, g.name)))
            })
            .fold(None::<(f64, String)>, |m, x| match m {
                Some(m) if m.0 >= x.0 => Some(m),
                _ => Some(x),
            })
    };
    if let (Some((la, _)), Some((lb, at))) = (lag99(ga), lag99(gb)) {
        if lb > 3.0 * la && lb - la > 0.001 {
            out.push(StoryLine {
                about: "machine",
                text: format!(
                    "the machine was busier during CURRENT: witness's own wait before sending, p99 {} → {} (at its worst, {at}); figures that moved no more than that are not charged to the server",
                    took(la),
                    took(lb)
                ),
                evidence: None,
                worse: false,
            });
        }
    }
    // The server's memory at its highest (the sampled tree's RSS): said when it moved by half.
    let peak = |x: &Analysis| {
        x.picture
            .series
            .iter()
            .find(|s| s.name == "server RSS")
            .map(|s| s.max())
            .filter(|m| *m > 0.0)
    };
    if let (Some(ma), Some(mb)) = (peak(a), peak(b)) {
        if mb > ma * 1.5 || ma > mb * 1.5 {
            out.push(StoryLine {
                about: "resources",
                text: format!(
                    "the server's peak memory (RSS, sampled): {} → {}",
                    crate::journal::bytes(ma),
                    crate::journal::bytes(mb)
                ),
                evidence: None,
                worse: false,
            });
        }
    }
    let (pa, pb) = (programs(a), programs(b));
    // The same programs in about the same numbers are the same tree (a pre-fork server's worker
    // count varies with recycling): said when a program appears or goes, or its count doubles.
    let differs = pa.keys().ne(pb.keys())
        || pa.iter().any(|(k, n)| {
            let m = pb.get(k).copied().unwrap_or(0);
            m > 2 * n || *n > 2 * m
        });
    if differs {
        out.push(StoryLine {
            about: "processes",
            text: format!(
                "the server's processes: {} → {}",
                counted(&pa),
                counted(&pb)
            ),
            evidence: None,
            worse: false,
        });
    }
    out
}

/// A threshold on a difference between the runs (`--assert` of `witness compare`).
#[derive(Clone, Debug, PartialEq)]
pub struct Delta {
    pub text: String,
    figure: &'static str,
    scope: Option<String>,
    op: &'static str,
    value: f64,
    /// The value was a percentage of BASE's figure (else an absolute amount in the figure's unit).
    relative: bool,
}

/// The grammar of a comparison's thresholds, as a usage error shows it.
pub const DELTA_GRAMMAR: &str = "FIGURE_delta[@NAME] OP VALUE or COUNT OP N, e.g. 'p99_delta@8 < 10%', 'p50_delta < 5ms', 'error_rate_delta < 1%', 'new_timers == 0'; FIGURE is one of p50, p95, p99, mean, max, error_rate, rps; COUNT one of new_timers, new_failures, new_exits; OP one of < <= > >= == !=";

const DELTA_FIGURES: [&str; 7] = ["p50", "p95", "p99", "mean", "max", "error_rate", "rps"];
const COUNTS: [&str; 3] = ["new_timers", "new_failures", "new_exits"];

/// Parses one comparison threshold; the error names what was wrong and the grammar.
pub fn parse_delta(text: &str) -> Result<Delta, String> {
    let t = text.trim();
    let bad = |why: String| format!("{why}; write {DELTA_GRAMMAR}");
    let end = t
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(t.len());
    let name = &t[..end];
    let mut rest = t[end..].trim_start();
    let (figure, is_count) = if let Some(c) = COUNTS.iter().find(|c| **c == name) {
        (*c, true)
    } else if let Some(f) = name
        .strip_suffix("_delta")
        .and_then(|f| DELTA_FIGURES.iter().find(|x| **x == f))
    {
        (*f, false)
    } else if DELTA_FIGURES.contains(&name) {
        return Err(bad(format!(
            "'{name}' is a figure of one run; a comparison's threshold is on its change: {name}_delta"
        )));
    } else {
        return Err(bad(format!(
            "'{name}' is not a difference witness compares"
        )));
    };
    let scope = if let Some(r) = rest.strip_prefix('@') {
        let e = r
            .find(|c: char| c.is_whitespace() || "<>=!".contains(c))
            .unwrap_or(r.len());
        if e == 0 {
            return Err(bad("'@' names no level".into()));
        }
        if is_count {
            return Err(bad(format!(
                "{figure} counts the whole run: it takes no scope"
            )));
        }
        let s = r[..e].replace('x', "×");
        rest = r[e..].trim_start();
        Some(s)
    } else {
        None
    };
    let op = ["<=", ">=", "==", "!=", "<", ">"]
        .into_iter()
        .find(|o| rest.starts_with(o))
        .ok_or_else(|| bad(format!("no comparison after {name}")))?;
    let v = rest[op.len()..].trim();
    if v.is_empty() {
        return Err(bad("no value to compare with".into()));
    }
    let num = |s: &str| -> Result<f64, String> {
        s.trim()
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite())
            .ok_or_else(|| bad(format!("'{v}' is not a value")))
    };
    let (value, relative) = if is_count {
        (num(v)?, false)
    } else if let Some(p) = v.strip_suffix('%') {
        (num(p)? / 100.0, figure != "error_rate")
    } else if figure == "error_rate" {
        (num(v)?, false)
    } else if figure == "rps" {
        (num(v.strip_suffix("/s").unwrap_or(v))?, false)
    } else {
        let mut found = None;
        for (suffix, scale) in [("ms", 1e-3), ("us", 1e-6), ("µs", 1e-6), ("s", 1.0)] {
            if let Some(n) = v.strip_suffix(suffix) {
                found = Some(num(n)? * scale);
                break;
            }
        }
        match found {
            Some(x) => (x, false),
            None => {
                return Err(bad(format!(
                    "'{v}' has no unit: a change is a percentage of BASE's figure (10%) or a time (5ms)"
                )))
            }
        }
    };
    Ok(Delta {
        text: t.to_string(),
        figure,
        scope,
        op,
        value,
        relative,
    })
}

impl Delta {
    fn judge(&self, groups: &[GroupCmp], story: &[StoryLine]) -> Judged {
        let judged = |ok: bool, value: Option<f64>, measured: String, at: String| Judged {
            expr: self.text.clone(),
            ok,
            value,
            measured,
            at,
        };
        if COUNTS.contains(&self.figure) {
            let n = story
                .iter()
                .filter(|s| match self.figure {
                    "new_timers" => s.about == "timer" && s.worse,
                    "new_failures" => s.about == "failures",
                    _ => s.about == "exits" && s.worse,
                })
                .count() as f64;
            return judged(
                holds(n, self.op, self.value),
                Some(n),
                format!("{n}"),
                String::new(),
            );
        }
        let mut worst: Option<(f64, String, String)> = None;
        let mut missing = Vec::new();
        let mut too_few: Option<String> = None;
        for g in groups {
            if self.scope.as_ref().is_some_and(|s| *s != g.name) {
                continue;
            }
            let (Some(x), Some(y)) = (&g.base, &g.current) else {
                continue;
            };
            // A percentile from too few requests is not one: the threshold fails, saying so.
            if matches!(self.figure, "p50" | "p95" | "p99") {
                let few = [x, y].into_iter().find_map(|s| {
                    s.latency
                        .as_ref()
                        .filter(|l| !l.enough_for(self.figure))
                        .map(|l| l.count)
                });
                if let Some(n) = few {
                    too_few.get_or_insert(format!(
                        "too few requests for a {} at {} (n={n})",
                        self.figure,
                        g.title()
                    ));
                    continue;
                }
            }
            let pair = match self.figure {
                "error_rate" => Some((x.error_rate, y.error_rate)),
                "rps" => x.rps.zip(y.rps),
                f => x
                    .latency
                    .as_ref()
                    .zip(y.latency.as_ref())
                    .map(|(a, b)| match f {
                        "mean" => (a.mean, b.mean),
                        "max" => (a.max, b.max),
                        _ => (figure_of(a, f), figure_of(b, f)),
                    }),
            };
            let Some((a, b)) = pair else {
                missing.push(g.title());
                continue;
            };
            let d = if self.relative {
                if a > 0.0 {
                    b / a - 1.0
                } else {
                    0.0
                }
            } else {
                b - a
            };
            let shown = match (self.relative, self.figure) {
                (true, _) => signed_percent(d),
                (false, "error_rate") => format!("{} points", signed_percent(d).replace(" %", "")),
                (false, "rps") => format!("{d:+.1}/s"),
                (false, _) => {
                    if d < 0.0 {
                        format!("−{}", took(-d))
                    } else {
                        format!("+{}", took(d))
                    }
                }
            };
            // The worst is the one that most nearly breaks it: the largest for < and <=.
            let worse = |new: f64, old: f64| match self.op {
                ">" | ">=" => new < old,
                _ => new > old,
            };
            if worst.as_ref().is_none_or(|(w, _, _)| worse(d, *w)) {
                worst = Some((d, shown, g.title()));
            }
        }
        if let Some(why) = too_few {
            return judged(false, None, why, String::new());
        }
        match worst {
            Some((d, shown, at)) => judged(holds(d, self.op, self.value), Some(d), shown, at),
            None => judged(
                false,
                None,
                match &self.scope {
                    Some(s) => format!("no {s} in both runs"),
                    None if !missing.is_empty() => {
                        format!("no {} in both runs", self.figure)
                    }
                    None => "nothing in both runs to compare".into(),
                },
                String::new(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A level of `n` ok durations spread over 1 % around `centre` seconds.
    fn level(n: u64, centre: f64, failed: u64) -> (Summary, SideRow) {
        let mut s = Summary::default();
        for i in 0..n {
            s.record(centre * (1.0 + (i % 101) as f64 / 10_000.0));
        }
        let row = SideRow {
            sent: n + failed,
            ok: n,
            failed,
            rejected: 0,
            error_rate: ratio(failed, n + failed),
            rejected_rate: 0.0,
            rps: None,
            verdict: Some("pass".into()),
            latency: s.latency(),
        };
        (s, row)
    }

    fn group_of<'a>(s: &'a Summary, row: &SideRow) -> Group<'a> {
        Group {
            what: "level",
            name: "8".into(),
            journal_group: "level2".into(),
            row: row.clone(),
            durations: Some(s),
            errors_by_kind: BTreeMap::new(),
            said: BTreeMap::new(),
            restarted: false,
            span: None,
            lag: None,
        }
    }

    /// Thousands of requests make a 3 % shift "significant" to the rank test and set the
    /// intervals apart: within the noise allowance it is no change; under a 1 % allowance it is.
    #[test]
    fn a_difference_the_tests_find_is_a_change_only_past_the_noise_allowance() {
        let (sa, ra) = level(3000, 0.050, 0);
        let (sb, rb) = level(3000, 0.0515, 0);
        let (x, y) = (group_of(&sa, &ra), group_of(&sb, &rb));
        let g = group("level", "8".into(), Some(&x), Some(&y), NOISE);
        let t = g.rank_test.as_ref().unwrap();
        assert!(t.p_value < 1e-6, "{t:?}");
        assert_eq!(g.latency, "no significant change", "{}", g.latency_why);
        assert!(g.latency_why.contains("within the 10.0 % noise allowance"));
        for f in &g.figures {
            assert_eq!(f.verdict, "no significant change", "{f:?}");
        }
        assert_eq!(g.figures[0].figure, "p50");
        assert!(g.figures[0].why.contains("apart but the change is within"));
        let g = group("level", "8".into(), Some(&x), Some(&y), 0.01);
        assert_eq!(g.latency, "slower", "{}", g.latency_why);
        assert_eq!(g.figures[0].verdict, "slower", "{:?}", g.figures[0]);
        // And the other way: faster.
        let g = group("level", "8".into(), Some(&y), Some(&x), 0.01);
        assert_eq!(g.latency, "faster");
        assert_eq!(g.figures[0].verdict, "faster");
    }

    /// Overlapping intervals are no change however far apart the figures look; a percentile from
    /// too few requests is said to be one.
    #[test]
    fn overlapping_intervals_and_too_few_requests_are_no_change() {
        let (sa, ra) = level(15, 0.050, 0);
        let (sb, rb) = level(15, 0.050, 0);
        let (x, y) = (group_of(&sa, &ra), group_of(&sb, &rb));
        let g = group("level", "8".into(), Some(&x), Some(&y), NOISE);
        assert_eq!(g.figures[0].verdict, "no significant change");
        assert_eq!(
            g.figures[1].verdict, "too few requests",
            "{:?}",
            g.figures[1]
        );
        assert!(g.figures[1].why.contains("too few for a p95 (it needs 20)"));
        assert_eq!(g.latency, "no significant change");
    }

    /// When one run failed far more of a level's requests, its ok ones are survivors: their
    /// latency is not compared (not called faster), and the failure rate is what changed.
    #[test]
    fn survivors_of_a_failing_level_are_not_compared() {
        let (sa, ra) = level(200, 0.050, 0);
        let (sb, rb) = level(50, 0.020, 150);
        let (x, y) = (group_of(&sa, &ra), group_of(&sb, &rb));
        let g = group("level", "8".into(), Some(&x), Some(&y), NOISE);
        assert_eq!(g.errors.as_ref().unwrap().verdict, "more");
        assert_eq!(g.latency, "not compared", "{}", g.latency_why);
        assert!(g.latency_why.contains("survivors"));
        assert_eq!(g.figures[0].verdict, "not compared");
    }

    /// A delta threshold on a percentile from too few requests fails, saying so, rather than
    /// compare two maxima; with enough it holds or breaks on the change.
    #[test]
    fn a_delta_threshold_on_too_few_requests_fails_saying_so() {
        let (sa, ra) = level(20, 0.050, 0);
        let (sb, rb) = level(20, 0.050, 0);
        let (x, y) = (group_of(&sa, &ra), group_of(&sb, &rb));
        let g = group("level", "8".into(), Some(&x), Some(&y), NOISE);
        let j = parse_delta("p99_delta < 10%")
            .unwrap()
            .judge(std::slice::from_ref(&g), &[]);
        assert!(!j.ok);
        assert_eq!(j.measured, "too few requests for a p99 at level 8 (n=20)");
        let j = parse_delta("p50_delta < 10%").unwrap().judge(&[g], &[]);
        assert!(j.ok, "{j:?}");
        assert_eq!(j.at, "level 8");
    }

    #[test]
    fn delta_thresholds_parse_with_their_units_and_refuse_with_the_grammar() {
        let d = parse_delta("p99_delta@8 < 10%").unwrap();
        assert_eq!(
            (d.figure, d.scope.as_deref(), d.op),
            ("p99", Some("8"), "<")
        );
        assert!(d.relative && (d.value - 0.1).abs() < 1e-12);
        let d = parse_delta("p50_delta < 5ms").unwrap();
        assert!(!d.relative && (d.value - 0.005).abs() < 1e-12);
        let d = parse_delta("error_rate_delta < 1%").unwrap();
        assert!(!d.relative && (d.value - 0.01).abs() < 1e-12);
        assert_eq!(parse_delta("new_timers == 0").unwrap().figure, "new_timers");
        assert_eq!(
            parse_delta("p99_delta@4x < 10%").unwrap().scope.as_deref(),
            Some("4×")
        );
        for (bad, says) in [
            ("p99 < 10%", "p99_delta"),
            ("p98_delta < 10%", "not a difference"),
            ("p99_delta < 10", "no unit"),
            ("new_timers@8 == 0", "takes no scope"),
            ("p99_delta@ < 1%", "names no level"),
            ("p99_delta 10%", "no comparison"),
        ] {
            let e = parse_delta(bad).unwrap_err();
            assert!(
                e.contains(says) && e.contains("write FIGURE_delta"),
                "{bad}: {e}"
            );
        }
    }
}
