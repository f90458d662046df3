//! Timers in the answers that came back: ok latencies and refusals, from the HDR histograms witness
//! keeps anyway (bounded memory, never the requests themselves).
//!
//! - **An ok mode at a timer.** A group of ok requests that took the same time, standing apart from
//!   the rest and sitting at a round number or a named timer (`--timer`, a `--…timeout N` in the
//!   server's command line, a duration in a log line), is a timer that answered them: a fallback
//!   after a timeout, a retry. The 85-second story's rule, applied to what succeeded: "when a latency figure
//!   sits just under 30, 60, 90 or 120 seconds, look for a timer before you look at the code". A
//!   single constant mode is not this (the ladder's "fixed delay" note says it), and a spread of
//!   latencies raises nothing.
//! - **A p99 or max just under a timer**, far above the median.
//! - **Refusals at one duration.** A 503 (or 429) that took as long as a timer is not capacity: a
//!   handler's own timeout answered it. Their durations are kept and shown.
//! - **A rate limit.** The served rate flat across levels while the rest are refused.

use super::{Subject, SuspicionKind};
use std::collections::BTreeMap;

use super::request_timers::{command_line_timers, MIN_CLUSTER};
use super::stats::Summary;
use super::timers::{TimerSource, ROUND_TIMERS};
use super::Suspicion;
use crate::journal::{Event, Outcome, Record};

/// Shorter modes are everyday work (a cache miss, a slow query), not a timer.
pub const MIN_MODE_S: f64 = 0.25;
/// Refusals faster than this are capacity answering at once.
pub const MIN_REFUSAL_S: f64 = 0.5;
/// A connect slower than this waited on TCP's own timer (SYN retransmission, named apart): its
/// time is not the server's answer and is taken out before looking for the server's timers.
const SLOW_CONNECT_S: f64 = 0.5;
/// Round timers under this are everyday request durations for "just under": only named ones count.
const UNDER_ROUND_MIN_S: f64 = 5.0;

/// How wide a mode may be: the clock's resolution plus scheduling, max(20 ms, 2 %).
pub fn tight(d: f64) -> f64 {
    (d * 0.02).max(0.02)
}

/// How far after a named timer a mode may start: the work after the timer fired (a fallback).
pub(crate) fn late_by(t: f64) -> f64 {
    (t * 0.1).max(0.1)
}

/// The timers an answer may sit at: `flags` (`--timer`), then the server's command line, then
/// durations its log lines named.
pub fn candidates(recs: &[Record], flags: &[(f64, TimerSource)]) -> Vec<(f64, TimerSource)> {
    let mut out = flags.to_vec();
    let command = recs.iter().find_map(|r| match &r.event {
        Event::Spawn { command, .. } => Some(command.clone()),
        _ => None,
    });
    out.extend(command_line_timers(&command.unwrap_or_default()));
    for r in recs {
        if let Event::Log {
            line,
            timer_s: Some(t),
            ..
        } = &r.event
        {
            if !out.iter().any(|(x, _)| (x - t).abs() < 1e-9) {
                out.push((*t, TimerSource::LogLine(super::inflight::short_line(line))));
            }
        }
    }
    out
}

/// What one group of requests (a level, a soak kind, an observed method) answered, folded in one
/// pass: ok durations, refusals per status, the span they covered.
#[derive(Clone, Debug, Default)]
pub struct Acc {
    ok: Summary,
    /// Ok requests whose slow connect was taken out of their duration here.
    slow_connects: u64,
    refused: BTreeMap<Option<u16>, Summary>,
    first_start: Option<f64>,
    last_end: f64,
    /// When the first and the last ok request ended: the pace they were served at.
    ok_ends: Option<(f64, f64)>,
}

impl Acc {
    /// Folds one request record in (anything else is ignored).
    pub fn request(&mut self, r: &Record) {
        if let Event::Request {
            start_s,
            duration_s,
            outcome,
            status,
            connect_s,
            ..
        } = &r.event
        {
            self.add(outcome, *status, *start_s, *duration_s, r.t_s, *connect_s);
        }
    }

    pub fn add(
        &mut self,
        outcome: &Outcome,
        status: Option<u16>,
        start_s: f64,
        duration_s: f64,
        end_s: f64,
        connect_s: Option<f64>,
    ) {
        self.first_start = Some(self.first_start.map_or(start_s, |s| s.min(start_s)));
        self.last_end = self.last_end.max(end_s);
        if matches!(outcome, Outcome::Ok) {
            self.ok_ends = Some(
                self.ok_ends
                    .map_or((end_s, end_s), |(a, b)| (a.min(end_s), b.max(end_s))),
            );
        }
        match outcome {
            Outcome::Ok => match connect_s.filter(|c| *c >= SLOW_CONNECT_S) {
                Some(c) => {
                    self.slow_connects += 1;
                    self.ok.record((duration_s - c).max(0.0));
                }
                None => self.ok.record(duration_s),
            },
            Outcome::Rejected { status: s, .. } => self
                .refused
                .entry(s.or(status))
                .or_default()
                .record(duration_s),
            _ => {}
        }
    }

    /// When the last request ended.
    pub fn last_end(&self) -> f64 {
        self.last_end
    }

    pub fn served(&self) -> u64 {
        self.ok.count()
    }

    pub fn refused(&self) -> u64 {
        self.refused.values().map(Summary::count).sum()
    }

    /// Ok requests per second: the pace between the first and the last ok answer (n − 1 gaps), so
    /// a limit that lets the first request through at once reads as its own rate, not one more;
    /// with fewer than three ok answers, over the span the group's requests covered.
    pub fn served_rate(&self) -> Option<f64> {
        let n = self.served();
        if let Some((a, b)) = self.ok_ends.filter(|(a, b)| n >= 3 && b > a) {
            return Some((n - 1) as f64 / (b - a));
        }
        let span = self.last_end - self.first_start?;
        (span > 0.0 && n > 0).then(|| n as f64 / span)
    }

    /// Every refusal's duration together (how long refusing took: kept, never latency).
    pub fn refusals(&self) -> Summary {
        let mut all = Summary::default();
        for s in self.refused.values() {
            all.add(s);
        }
        all
    }

    /// The status most refusals carried, in words: "HTTP 429".
    fn refused_as(&self) -> String {
        let top = self
            .refused
            .iter()
            .max_by_key(|(_, s)| s.count())
            .map(|(k, _)| *k);
        match top {
            Some(Some(s)) => format!("HTTP {s}"),
            _ => "refused".into(),
        }
    }
}

/// A run of neighbouring buckets holding a mode.
#[derive(Clone, Copy, Debug)]
struct Window {
    lo: f64,
    hi: f64,
    count: u64,
    /// Bucket indexes, inclusive.
    from: usize,
    to: usize,
}

/// Every maximal tight window starting at a bucket at or above `floor`.
fn windows(b: &[(f64, f64, u64)], floor: f64, exact: (f64, f64)) -> Vec<Window> {
    let mut out = Vec::new();
    for i in 0..b.len() {
        if b[i].1 < floor {
            continue;
        }
        let lo = b[i].0.max(exact.0);
        let mut j = i;
        while j + 1 < b.len() && b[j + 1].1.min(exact.1) - lo <= tight(lo) {
            j += 1;
        }
        // Part of a window that starts lower: the mode is that one.
        let hi = b[j].1.min(exact.1);
        if i > 0 && b[i - 1].1 >= floor && hi - b[i - 1].0.max(exact.0) <= tight(b[i - 1].0) {
            continue;
        }
        out.push(Window {
            lo,
            hi: b[j].1.min(exact.1),
            count: b[i..=j].iter().map(|x| x.2).sum(),
            from: i,
            to: j,
        });
    }
    out
}

/// The timer a mode starting at `lo` sits at: named ones (the mode may start a little after, the
/// work after the timer fired), then round numbers (tight on both sides).
fn timer_of(lo: f64, timers: &[(f64, TimerSource)]) -> Option<(f64, TimerSource)> {
    let named = timers
        .iter()
        .filter(|(t, _)| lo >= t - tight(*t) && lo <= t + late_by(*t))
        .min_by(|a, b| (lo - a.0).abs().total_cmp(&(lo - b.0).abs()))
        .cloned();
    named.or_else(|| {
        ROUND_TIMERS
            .iter()
            .find(|&&t| (lo - t).abs() <= tight(t))
            .map(|&t| (t, TimerSource::Round))
    })
}

/// "2 s", "500 ms": a timer as the words of these findings say it.
pub fn timer_words(t: f64) -> String {
    if t >= 1.0 {
        let s = format!("{t:.2}");
        format!("{} s", s.trim_end_matches('0').trim_end_matches('.'))
    } else {
        format!("{:.0} ms", t * 1000.0)
    }
}

/// "2.00–2.01 s", or "2.00 s" when both ends read the same.
pub(crate) fn range(lo: f64, hi: f64) -> String {
    let (a, b) = (format!("{lo:.2}"), format!("{hi:.2}"));
    if a == b {
        format!("{a} s")
    } else {
        format!("{a}–{b} s")
    }
}

/// "~5 ms", "~0.4 ms", "~1.30 s".
fn about(s: f64) -> String {
    if s >= 1.0 {
        format!("~{s:.2} s")
    } else if s >= 0.01 {
        format!("~{:.0} ms", s * 1000.0)
    } else {
        format!("~{:.1} ms", s * 1000.0)
    }
}

/// An ok mode at a timer, as the finding states it.
#[derive(Clone, Debug, PartialEq)]
pub struct Mode {
    pub count: u64,
    pub of: u64,
    pub lo: f64,
    pub hi: f64,
    /// The typical duration of the others (their median).
    pub rest_s: f64,
    pub timer_s: f64,
    pub source: TimerSource,
}

/// The densest group of ok durations that stands apart from the rest and sits at a timer.
pub fn ok_mode(ok: &Summary, timers: &[(f64, TimerSource)]) -> Option<Mode> {
    let n = ok.count();
    let exact = ok.extremes()?;
    // All of them at one value, give or take the jitter a timer is allowed on each side, is the
    // ladder's "fixed delay", said apart: a straggler a busy machine made 40 ms late behind five at
    // 2.00 s is not a mode of five against "the rest".
    if exact.1 - exact.0 <= 2.0 * tight(exact.0) {
        return None;
    }
    let b: Vec<(f64, f64, u64)> = ok.buckets().collect();
    let apart = |w: &Window| {
        // Few durations near it on either side: a mode, not the middle of a spread.
        let near: u64 = b
            .iter()
            .enumerate()
            .filter(|(k, x)| {
                (*k < w.from && x.1 >= w.lo * 0.5 && x.1 < w.lo - tight(w.lo))
                    || (*k > w.to && x.0 <= w.hi * 1.5 && x.0 > w.hi + tight(w.hi))
            })
            .map(|(_, x)| x.2)
            .sum();
        near * 4 <= w.count
    };
    let best = windows(&b, MIN_MODE_S, exact)
        .into_iter()
        .filter(|w| w.count >= MIN_CLUSTER as u64 && w.count * 100 >= n)
        // All of them at one value is the ladder's "fixed delay", said apart.
        .filter(|w| w.count < n)
        .filter(apart)
        // At the timer, or at it after the work every request does (the fastest one's duration,
        // when that is small beside the mode): a 2 s fallback behind a 45 ms delayed ACK.
        .filter_map(|w| {
            timer_of(w.lo, timers)
                .or_else(|| {
                    (exact.0 <= w.lo * 0.1)
                        .then(|| timer_of(w.lo - exact.0, timers))
                        .flatten()
                })
                .map(|t| (w, t))
        })
        .max_by_key(|(w, _)| w.count)?;
    let (w, (timer_s, source)) = best;
    // The others' median, from the buckets outside the mode.
    let rest = n - w.count;
    let mut seen = 0;
    let mut rest_s = 0.0;
    for (k, x) in b.iter().enumerate() {
        if k >= w.from && k <= w.to {
            continue;
        }
        seen += x.2;
        if seen * 2 >= rest {
            rest_s = (x.0 + x.1) / 2.0;
            break;
        }
    }
    Some(Mode {
        count: w.count,
        of: n,
        lo: w.lo,
        hi: w.hi,
        rest_s: rest_s.clamp(exact.0, exact.1),
        timer_s,
        source,
    })
}

pub(crate) fn source_words(t: f64, src: &TimerSource) -> String {
    match src {
        TimerSource::Round => String::new(),
        s => format!(" ({})", s.describe(t)),
    }
}

/// The ok-timer suspicions of one group: a mode at a timer, else a p99 or max just under one.
/// `what` names the group ("level 4", "soak kind search", "calls seen by wrap (stdio) tools/call x").
pub fn ok_suspicion(
    what: &str,
    acc: &Acc,
    timers: &[(f64, TimerSource)],
    t_s: f64,
) -> Option<Suspicion> {
    let ok = &acc.ok;
    let connects = if acc.slow_connects > 0 {
        format!(
            " ({} slow connects, TCP's own timer, not counted in these durations)",
            acc.slow_connects
        )
    } else {
        String::new()
    };
    if let Some(m) = ok_mode(ok, timers) {
        return Some(Suspicion {
            armed_s: None,
            kind: SuspicionKind::OkTimer,
            subject: Subject::Request,
            seconds: (m.lo + m.hi) / 2.0,
            timer_s: m.timer_s,
            t_s,
            pid: None,
            group: None,
            detail: format!(
                "{what}: {} of {} ok requests took {} while the rest took {}: a {} timer answered them (a fallback after a timeout? a retry?){}{connects}",
                m.count,
                m.of,
                range(m.lo, m.hi),
                about(m.rest_s),
                timer_words(m.timer_s),
                source_words(m.timer_s, &m.source),
            ),
            timer_source: m.source,
        });
    }
    let lat = ok.latency()?;
    for (name, v) in [
        ("the slowest ok request took", lat.max),
        ("p99 of ok requests is", lat.p99),
    ] {
        if v < MIN_MODE_S || v < 4.0 * lat.p50 {
            continue;
        }
        let under = |t: f64| v >= t - (t * 0.02).max(0.05) && v <= t + 0.05;
        let named = timers
            .iter()
            .filter(|(t, _)| under(*t))
            .min_by(|a, b| (v - a.0).abs().total_cmp(&(v - b.0).abs()))
            .cloned();
        let at = named.or_else(|| {
            ROUND_TIMERS
                .iter()
                .find(|&&t| t >= UNDER_ROUND_MIN_S && under(t))
                .map(|&t| (t, TimerSource::Round))
        });
        if let Some((t, src)) = at {
            return Some(Suspicion {
                armed_s: None,
                kind: SuspicionKind::OkTimer,
                subject: Subject::Request,
                seconds: v,
                timer_s: t,
                t_s,
                pid: None,
                group: None,
                detail: format!(
                    "{what}: {name} {v:.2} s, just under {}, while the median took {}: look for a timer before the code (a lock, a retry or a fallback that waited it out?){connects}",
                    src.describe(t),
                    about(lat.p50),
                ),
                timer_source: src,
            });
        }
    }
    None
}

/// Every timer in what one group answered: an ok mode (or tail) at a timer, refusals at one.
/// `group`: the journal group the requests were (a level's, a soak kind's, an observed method's),
/// kept on each suspicion so a view can draw it on that group's picture.
pub fn suspicions(
    what: &str,
    group: &str,
    acc: &Acc,
    timers: &[(f64, TimerSource)],
    t_s: f64,
) -> Vec<Suspicion> {
    let mut out: Vec<Suspicion> = ok_suspicion(what, acc, timers, t_s).into_iter().collect();
    out.extend(refusal_timer(acc, timers).map(|r| refusal_suspicion(what, &r, t_s)));
    for s in &mut out {
        s.group = Some(group.to_string());
    }
    out
}

/// Refusals that clustered at one duration: a timer inside the server answered them.
#[derive(Clone, Debug, PartialEq)]
pub struct RefusalTimer {
    pub count: u64,
    pub refused: u64,
    /// The status they carried (None: a refusal with none, as MCP's QUEUE_FULL).
    pub status: Option<u16>,
    /// "HTTP 503".
    pub answered: String,
    pub lo: f64,
    pub hi: f64,
    pub timer_s: f64,
    pub source: TimerSource,
}

impl RefusalTimer {
    /// "4 requests were answered HTTP 503 after 2.00 s each: a 2 s timer inside the server, not a
    /// capacity refusal".
    pub fn words(&self) -> String {
        let of = if self.count < self.refused {
            format!(" (of {} refused)", self.refused)
        } else {
            String::new()
        };
        format!(
            "{} requests{of} were answered {} after {} each: a {} timer inside the server, not a capacity refusal{}",
            self.count,
            self.answered,
            range(self.lo, self.hi),
            timer_words(self.timer_s),
            source_words(self.timer_s, &self.source),
        )
    }
}

/// The refusals of one status that cluster at one duration of at least [`MIN_REFUSAL_S`]: at
/// least [`MIN_CLUSTER`] of them, and at least half of that status's refusals. The largest such
/// cluster of any status.
pub fn refusal_timer(acc: &Acc, timers: &[(f64, TimerSource)]) -> Option<RefusalTimer> {
    refusal_timers(acc, timers)
        .into_iter()
        .max_by_key(|r| r.count)
}

/// Every status's cluster of refusals at one duration (see [`refusal_timer`]), in status order.
pub fn refusal_timers(acc: &Acc, timers: &[(f64, TimerSource)]) -> Vec<RefusalTimer> {
    let refused = acc.refused();
    acc.refused
        .iter()
        .filter_map(|(status, s)| {
            let b: Vec<(f64, f64, u64)> = s.buckets().collect();
            let w = windows(&b, MIN_REFUSAL_S, s.extremes()?)
                .into_iter()
                .filter(|w| w.count >= MIN_CLUSTER as u64 && w.count * 2 >= s.count())
                .max_by_key(|w| w.count)?;
            let (timer_s, source) =
                timer_of(w.lo, timers).unwrap_or(((w.lo + w.hi) / 2.0, TimerSource::Cluster));
            Some(RefusalTimer {
                count: w.count,
                refused,
                status: *status,
                answered: status
                    .map(|s| format!("HTTP {s}"))
                    .unwrap_or_else(|| "a refusal".into()),
                lo: w.lo,
                hi: w.hi,
                timer_s,
                source,
            })
        })
        .collect()
}

/// The suspicion for refusals at a timer.
pub fn refusal_suspicion(what: &str, r: &RefusalTimer, t_s: f64) -> Suspicion {
    Suspicion {
        armed_s: None,
        kind: SuspicionKind::RefusalTimer,
        subject: Subject::Request,
        seconds: (r.lo + r.hi) / 2.0,
        timer_s: r.timer_s,
        timer_source: r.source.clone(),
        t_s,
        pid: None,
        group: None,
        detail: format!("{what}: {}", r.words()),
    }
}

/// A level's reason when it refused most of what it sent: "refused most of its requests: 42
/// served (21.0/s), 17276 refused (HTTP 429)"; None when it served at least as many as it refused.
pub fn refused_most(acc: &Acc) -> Option<String> {
    let (ok, no) = (acc.served(), acc.refused());
    if no == 0 || no <= ok {
        return None;
    }
    let rate = acc
        .served_rate()
        .map(|r| format!(" ({r:.1}/s)"))
        .unwrap_or_default();
    Some(format!(
        "refused most of its requests: {ok} served{rate}, {no} refused ({})",
        acc.refused_as()
    ))
}

/// A rate limit: levels of different concurrency that each refused most of their requests while
/// serving about the same number per second. `levels`: (concurrency, what it answered), in order.
pub fn rate_limit(levels: &[(u32, &Acc)], t_s: f64) -> Option<Suspicion> {
    let limited: Vec<(u32, &Acc, f64)> = levels
        .iter()
        .filter(|(_, a)| a.refused() > a.served())
        .filter_map(|(n, a)| Some((*n, *a, a.served_rate()?)))
        .collect();
    let (lo, hi) = limited.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), x| {
        (lo.min(x.2), hi.max(x.2))
    });
    let distinct = {
        let mut n: Vec<u32> = limited.iter().map(|x| x.0).collect();
        n.dedup();
        n.len()
    };
    // Flat: the fastest level served at most 30 % more per second than the slowest.
    if distinct < 2 || hi > lo * 1.3 {
        return None;
    }
    let rate = limited.iter().map(|x| x.2).sum::<f64>() / limited.len() as f64;
    let served: u64 = limited.iter().map(|x| x.1.served()).sum();
    let refused: u64 = limited.iter().map(|x| x.1.refused()).sum();
    let at: Vec<String> = limited.iter().map(|x| x.0.to_string()).collect();
    let as_ = limited
        .iter()
        .max_by_key(|x| x.1.refused())
        .map(|x| x.1.refused_as())
        .unwrap_or_default();
    Some(Suspicion {
        armed_s: None,
        kind: SuspicionKind::RateLimit,
        subject: Subject::Request,
        seconds: 1.0 / rate,
        timer_s: 1.0 / rate,
        timer_source: TimerSource::Cluster,
        t_s,
        pid: None,
        group: None,
        detail: format!(
            "a rate limit: about {} requests/s served at every level ({lo:.1}–{hi:.1}/s at levels {}), the rest refused ({as_}): {served} served, {refused} refused",
            rate.round(),
            at.join(", "),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acc_of(ok: &[f64]) -> Acc {
        let mut a = Acc::default();
        for (i, d) in ok.iter().enumerate() {
            a.add(&Outcome::Ok, Some(200), i as f64, *d, i as f64 + d, None);
        }
        a
    }

    fn mixed(fast: usize, slow: usize, slow_s: f64) -> Vec<f64> {
        let mut v: Vec<f64> = (0..fast)
            .map(|i| 0.004 + 0.0001 * (i % 10) as f64)
            .collect();
        v.extend((0..slow).map(|i| slow_s + 0.0005 * (i % 10) as f64));
        v
    }

    #[test]
    fn a_quarter_of_ok_requests_at_two_seconds_is_a_timer_that_answered_them() {
        let a = acc_of(&mixed(48, 16, 2.001));
        let s = ok_suspicion("level 4", &a, &[], 9.0).expect("a 2 s mode");
        assert_eq!(s.kind.as_str(), "ok_timer");
        assert_eq!(s.timer_s, 2.0);
        assert_eq!(s.timer_source, TimerSource::Round);
        assert!(
            s.detail.starts_with(
                "level 4: 16 of 64 ok requests took 2.00–2.01 s while the rest took ~4.4 ms: a 2 s timer answered them (a fallback after a timeout? a retry?)"
            ),
            "{}",
            s.detail
        );
    }

    #[test]
    fn a_fixed_delay_with_a_late_straggler_is_no_mode() {
        // The constant 2 s server on a busy machine (a CI run): five at 2.00–2.02 s, one 40 ms late.
        let d = [2.001, 2.004, 2.009, 2.013, 2.018, 2.045];
        assert_eq!(ok_mode(&acc_of(&d).ok, &[]), None);
        // A real mode still is one when the rest are far from it.
        let mut d = d.to_vec();
        d.extend([
            0.004, 0.005, 0.004, 0.006, 0.005, 0.004, 0.005, 0.004, 0.004, 0.005,
        ]);
        assert!(ok_mode(&acc_of(&d).ok, &[]).is_some());
    }

    #[test]
    fn a_mode_at_a_timer_after_the_work_every_request_does_is_the_timer() {
        // Every request pays ~45 ms (a delayed ACK); a quarter wait 2 s more.
        let mut d = Vec::new();
        for i in 0..64 {
            let base = 0.045 + (i % 5) as f64 * 0.001;
            d.push(if i % 4 == 0 { base + 2.0 } else { base });
        }
        let m = ok_mode(&acc_of(&d).ok, &[]).expect("a mode");
        assert_eq!((m.count, m.timer_s), (16, 2.0), "{m:?}");
    }

    #[test]
    fn a_named_timer_takes_a_mode_that_starts_a_little_after_it() {
        let a = acc_of(&mixed(30, 10, 1.58));
        // 1.58 s is no round number, but --timer 1.5 names it: the fallback ran 80 ms after.
        assert!(ok_suspicion("level 1", &a, &[], 1.0).is_none());
        let s = ok_suspicion("level 1", &a, &[(1.5, TimerSource::Flag)], 1.0).unwrap();
        assert!(
            s.detail.contains("a 1.5 s timer answered them"),
            "{}",
            s.detail
        );
        assert!(s.detail.contains("given with --timer"), "{}", s.detail);
    }

    #[test]
    fn one_constant_mode_a_spread_and_a_fast_bimodal_raise_nothing() {
        // All at 2 s: the ladder's fixed-delay note, not this.
        let all: Vec<f64> = (0..20).map(|i| 2.0 + 0.0005 * i as f64).collect();
        assert!(ok_suspicion("level 1", &acc_of(&all), &[], 1.0).is_none());
        // A spread from 10 ms to 3 s passes through 2 s without a mode there.
        let spread: Vec<f64> = (0..300).map(|i| 0.01 + 0.01 * i as f64).collect();
        assert!(ok_suspicion("level 1", &acc_of(&spread), &[], 1.0).is_none());
        // A cache miss at 120 ms is everyday work.
        assert!(ok_suspicion("level 1", &acc_of(&mixed(40, 20, 0.12)), &[], 1.0).is_none());
        // A mode at 1.37 s is apart but at no timer.
        assert!(ok_suspicion("level 1", &acc_of(&mixed(40, 20, 1.37)), &[], 1.0).is_none());
        // Two slow ones are not a mode.
        assert!(ok_suspicion("level 1", &acc_of(&mixed(40, 2, 2.0)), &[], 1.0).is_none());
    }

    #[test]
    fn a_max_just_under_a_round_timer_far_above_the_median_is_named() {
        let mut v = mixed(200, 0, 0.0);
        v.push(29.93);
        let s = ok_suspicion("level 8", &acc_of(&v), &[], 1.0).unwrap();
        assert!(
            s.detail.starts_with("level 8: the slowest ok request took 29.93 s, just under the round-number 30s timer, while the median took ~4.5 ms"),
            "{}",
            s.detail
        );
        // 27 s is under no timer; 1.98 s is under a round 2 s, everyday below 5 s.
        let mut v = mixed(200, 0, 0.0);
        v.push(27.0);
        assert!(ok_suspicion("level 8", &acc_of(&v), &[], 1.0).is_none());
        let mut v = mixed(200, 0, 0.0);
        v.push(1.98);
        assert!(ok_suspicion("level 8", &acc_of(&v), &[], 1.0).is_none());
    }

    #[test]
    fn slow_connects_are_taken_out_before_looking_for_the_server_s_timer() {
        let mut a = Acc::default();
        for i in 0..40 {
            a.add(&Outcome::Ok, Some(200), 0.0, 0.005, 1.0, None);
            if i % 4 == 0 {
                // TCP's 1 s SYN retransmission, then a fast answer: not the server's 1 s timer.
                a.add(&Outcome::Ok, Some(200), 0.0, 1.006, 1.0, Some(1.001));
            }
        }
        assert!(ok_suspicion("level 4", &a, &[], 1.0).is_none());
    }

    fn refuse(a: &mut Acc, status: u16, d: f64, at: f64) {
        a.add(
            &Outcome::Rejected {
                status: Some(status),
                reason: format!("HTTP {status}"),
            },
            Some(status),
            at,
            d,
            at + d,
            None,
        );
    }

    #[test]
    fn refusals_at_one_duration_are_a_timer_and_instant_ones_are_capacity() {
        let mut a = Acc::default();
        for i in 0..4 {
            refuse(&mut a, 503, 2.001 + 0.001 * i as f64, i as f64 * 2.0);
        }
        let r = refusal_timer(&a, &[]).unwrap();
        assert_eq!(
            r.words(),
            "4 requests were answered HTTP 503 after 2.00 s each: a 2 s timer inside the server, not a capacity refusal"
        );
        let s = refusal_suspicion("level 1", &r, 9.0);
        assert_eq!(s.kind.as_str(), "refusal_timer");
        let mut fast = Acc::default();
        for i in 0..40 {
            refuse(&mut fast, 429, 0.0004, i as f64 * 0.01);
        }
        assert!(refusal_timer(&fast, &[]).is_none());
        // Spread slow refusals are a queue, not a timer.
        let mut spread = Acc::default();
        for i in 0..10 {
            refuse(&mut spread, 503, 0.6 + 0.3 * i as f64, i as f64);
        }
        assert!(refusal_timer(&spread, &[]).is_none());
    }

    #[test]
    fn a_flat_served_rate_across_levels_is_a_rate_limit() {
        let level = |ok: u64, no: u64, gap: f64| {
            let mut a = Acc::default();
            for i in 0..ok {
                let t = i as f64 * gap;
                a.add(&Outcome::Ok, Some(200), t, 0.001, t + 0.001, None);
            }
            for i in 0..no {
                refuse(&mut a, 429, 0.0003, i as f64 * 2.0 / no as f64);
            }
            a
        };
        let (one, four) = (level(40, 9000, 0.05), level(41, 30000, 0.05));
        let s = rate_limit(&[(1, &one), (4, &four)], 5.0).unwrap();
        assert!(
            s.detail
                .starts_with("a rate limit: about 20 requests/s served at every level"),
            "{}",
            s.detail
        );
        assert!(
            s.detail
                .contains("the rest refused (HTTP 429): 81 served, 39000 refused"),
            "{}",
            s.detail
        );
        assert_eq!(
            refused_most(&one).unwrap(),
            "refused most of its requests: 40 served (20.0/s), 9000 refused (HTTP 429)"
        );
        // One level is no "every level"; a rate that grows with the level is no limit.
        assert!(rate_limit(&[(1, &one)], 5.0).is_none());
        let eight = level(160, 9000, 0.0125);
        assert!(rate_limit(&[(1, &one), (8, &eight)], 5.0).is_none());
        // A server at its throughput (the same rate at every level, nothing refused) is no limit.
        let (sat1, sat4) = (level(40, 0, 0.05), level(40, 0, 0.05));
        assert!(rate_limit(&[(1, &sat1), (4, &sat4)], 5.0).is_none());
        // A level that served most of what it sent is not said to refuse.
        assert!(refused_most(&level(40, 3, 0.05)).is_none());
    }
}
