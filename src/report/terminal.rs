//! The terminal view: the annotated timeline in aligned columns, then the suspicions. Colour only when
//! the stream is a terminal.

use super::View;
use crate::analyze::resolution::Resolved;
use crate::analyze::soak::SoakAnalysis;
use crate::analyze::verdict::{LevelRow, LoadAnalysis};
use crate::analyze::Analysis;
use crate::units::{took, took_span};

#[derive(Default)]
pub struct Terminal {
    pub colour: bool,
    /// What the live run already printed on this same terminal: not said twice in the summary.
    pub shown_live: ShownLive,
    /// Say why no GPU was sampled (`--gpu on`). Otherwise (the default, for every mode and for
    /// `witness report`) a machine with no GPU gets no GPU words; the JSON still says "not sampled".
    pub say_no_gpu: bool,
}

/// Lines `load` printed while it ran.
#[derive(Clone, Copy, Debug, Default)]
pub struct ShownLive {
    /// Each host name's first lookup (later ones are not said live).
    pub resolution: bool,
    /// The connect floor line.
    pub floor: bool,
    /// The header and one row per level.
    pub level_rows: bool,
}

impl Terminal {
    pub fn for_stderr() -> Self {
        use std::io::IsTerminal;
        Self {
            colour: std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
            ..Self::default()
        }
    }

    fn paint(&self, severity: &str, s: &str) -> String {
        let code = match severity {
            "bad" => "31",
            "warn" => "33",
            _ => return s.to_string(),
        };
        if self.colour {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }
}

impl View for Terminal {
    fn render(&self, a: &Analysis) -> anyhow::Result<Vec<u8>> {
        let mut o = String::new();
        if let Some(m) = &a.merged {
            o.push_str(&merged_block(self, m));
        }
        if let Some(l) = &a.load {
            o.push_str(&load_block(self, l, &a.resolution));
        }
        if let Some(r) = &a.replay {
            o.push_str(&replay_block(self, r));
        }
        if let Some(w) = &a.observed {
            o.push_str(&observed_block(self, w));
        }
        o.push_str(&timeline(self, a));
        o.push_str(&gpu(self, a));
        if let Some(s) = &a.soak {
            o.push_str(&soak_block(self, s, &a.resolution));
        }
        o.push_str(&thresholds(self, &a.asserts));
        if let Some(l) = &a.load {
            let sev = if l.verdict == "pass" { "info" } else { "bad" };
            o.push_str(&self.paint(sev, &format!("verdict: {}\n", l.verdict.to_uppercase())));
        }
        Ok(o.into_bytes())
    }
}

/// The run's thresholds (`--assert`), a line each with what it measured, then how many broke:
/// beside witness's own verdict, never in its place.
pub fn thresholds(t: &Terminal, judged: &[crate::analyze::asserts::Judged]) -> String {
    if judged.is_empty() {
        return String::new();
    }
    let mut o = String::from("thresholds:\n");
    for j in judged {
        let sev = if j.ok { "info" } else { "bad" };
        o.push_str(&t.paint(sev, &format!("  {}", j.line())));
        o.push('\n');
    }
    let broken = judged.iter().filter(|j| !j.ok).count();
    let line = match broken {
        0 => format!("thresholds: all {} held", judged.len()),
        n => format!(
            "thresholds: {n} of {} broken: the run fails (exit 1)",
            judged.len()
        ),
    };
    o.push_str(&t.paint(if broken == 0 { "info" } else { "bad" }, &line));
    o.push('\n');
    o
}

/// The header naming [`level_line`]'s columns. `max` and the percentiles are over ok requests;
/// `gave up` is how long the failed ones took to fail, never latency.
pub fn level_header() -> String {
    format!(
        "{:>4} {:>6} {:>7} {:>6} {:>8}  {:>8} {:>8} {:>8}  {:>13}  {:<12} {:<9}  verdict",
        "n",
        "ok",
        "timeout",
        "error",
        "rejected",
        "max",
        "p50",
        "p99",
        "gave up",
        "health after",
        "restarted"
    )
}

/// One row per level, as the harness that printed "4 concurrent = 85 s" laid its table out, under [`level_header`].
pub fn level_line(r: &LevelRow) -> String {
    let c = &r.counts;
    let s = |x: Option<f64>| x.map(took).unwrap_or_else(|| "-".into());
    let lat = r.latency.as_ref();
    // A percentile of too few requests is shown as such, "(n=5)", never under that name.
    let pct = |l: Option<&crate::stats::Latency>, name: &str| {
        l.map(|l| l.shown(name, took)).unwrap_or_else(|| "-".into())
    };
    let gave_up = r
        .time_to_give_up
        .as_ref()
        .map(|g| took_span(g.min, g.max))
        .unwrap_or_else(|| "-".into());
    let after = r
        .health_after
        .as_ref()
        .map(|h| h.said(r.mcp_ping))
        .unwrap_or_else(|| "-".into());
    let verdict = match r.verdict.as_str() {
        "pass" if r.reasons.is_empty() => "PASS".to_string(),
        "pass" => format!("PASS ({})", r.reasons.join("; ")),
        v => format!("{} ({})", v.to_uppercase(), r.reasons.join("; ")),
    };
    if r.verdict == "skipped" {
        return format!(
            "{:>4} SKIPPED: health before was {}; {}",
            level_name(r),
            r.health_before.said(r.mcp_ping),
            r.reasons.join("; ")
        );
    }
    let mut apart = String::new();
    if c.no_listener > 0 {
        apart.push_str(&format!(" no_listener={}", c.no_listener));
    }
    if c.not_sent > 0 {
        apart.push_str(&format!(" not_sent={}", c.not_sent));
    }
    if c.interrupted > 0 {
        apart.push_str(&format!(" interrupted={}", c.interrupted));
    }
    // Refusals that took time are worth their durations (a timer may have answered them).
    if let Some(t) = r
        .time_to_refuse
        .as_ref()
        .filter(|t| t.max >= crate::analyze::ok_timers::MIN_REFUSAL_S)
    {
        apart.push_str(&format!(" refused_after={}", took_span(t.min, t.max)));
    }
    let restarted = match (r.restarted, &r.died, &r.identity_unread) {
        (true, ..) => "yes",
        (false, Some(_), _) => "no, died",
        (false, None, Some(_)) => "unknown",
        (false, None, None) => "no",
    };
    format!(
        "{:>4} {:>6} {:>7} {:>6} {:>8}  {:>8} {:>8} {:>8}  {:>13}  {:<12} {:<9}{apart}  {verdict}",
        level_name(r),
        c.ok,
        c.timeout,
        c.error,
        c.rejected,
        s(lat.map(|l| l.max)),
        pct(lat, "p50"),
        pct(lat, "p99"),
        gave_up,
        after,
        restarted,
    )
}

/// A level by its concurrency, or an open-loop level by its rate ("200/s").
fn level_name(r: &LevelRow) -> String {
    r.name()
}

/// `witness replay`: what was played, how each speed's answers compared (per kind of call, the
/// first differences), and the speed that held with why the next failed.
fn replay_block(t: &Terminal, r: &crate::analyze::answers::ReplayAnalysis) -> String {
    use crate::journal::{secs, speed_words};
    let mut o = format!(
        "replay of {} ({}): {} call{} over {} as recorded, compared by {}; {}\n",
        r.file,
        r.transport,
        r.calls,
        if r.calls == 1 { "" } else { "s" },
        secs(r.span_s),
        r.compare,
        r.sessions_how
    );
    for n in &r.notes {
        o.push_str(&t.paint("warn", &format!("  ! {n}\n")));
    }
    for s in &r.speeds {
        let compared: u64 = s.answers.iter().map(|a| a.compared).sum();
        o.push_str(&format!(
            "  {}: {} of {} answers differed from the recording\n",
            speed_words(s.speed),
            s.differed,
            compared
        ));
        for a in s.answers.iter().filter(|a| a.differed > 0) {
            o.push_str(&format!(
                "    {}: {} of {} differed",
                a.name, a.differed, a.compared
            ));
            for d in &a.first {
                o.push_str(&format!("\n      - {d}"));
            }
            o.push('\n');
        }
    }
    let sev = if r.failed_at.is_some() {
        "warn"
    } else {
        "info"
    };
    o.push_str(&t.paint(sev, &format!("replay: {}\n", r.words)));
    o
}

/// Each host name the run resolved, once, and why a slow lookup was slow; what the live run said
/// already (each name's first lookup) is not said again.
fn resolution_block(t: &Terminal, rows: &[Resolved]) -> String {
    let mut o = String::new();
    for r in rows {
        if t.shown_live.resolution && r.again == 0 {
            continue;
        }
        o.push_str(&format!("{}\n", crate::analyze::resolution::line(r)));
        for w in &r.slow {
            o.push_str(&t.paint("warn", &format!("  ! {w}\n")));
        }
    }
    o
}

fn load_block(t: &Terminal, l: &LoadAnalysis, resolved: &[Resolved]) -> String {
    let mut o = resolution_block(t, resolved);
    if let Some(f) = l.floor.as_ref().filter(|_| !t.shown_live.floor) {
        let m = f
            .median_ms
            .map(|m| format!("{m:.2} ms"))
            .unwrap_or_else(|| "unmeasurable".into());
        o.push_str(&format!(
            "connect floor: {m} to {} (limit {:.0} ms)\n",
            crate::load::tls::authority(&f.host, f.port),
            f.limit_ms
        ));
        if let Some(h) = f.handshake_ms {
            o.push_str(&format!(
                "  TLS handshake floor: {h:.2} ms after the connect (a new connection's cost on top of the connect's)\n"
            ));
        }
        if let Some(a) = &f.advice {
            o.push_str(&t.paint("warn", &format!("  ! {a}\n")));
        }
    }
    if let Some(r) = &l.refused {
        o.push_str(&t.paint("bad", &format!("REFUSED: {r}\n")));
    }
    if !l.levels.is_empty() && !t.shown_live.level_rows {
        o.push_str("levels (latency over ok requests; failed requests' time to give up apart):\n");
        o.push_str(&level_header());
        o.push('\n');
    }
    if !l.levels_not_run.is_empty() || !l.rates_not_run.is_empty() {
        let names: Vec<String> = l
            .levels_not_run
            .iter()
            .map(|n| n.to_string())
            .chain(
                l.rates_not_run
                    .iter()
                    .map(|r| crate::journal::rate_words(*r)),
            )
            .collect();
        o.push_str(&t.paint("warn", &format!("levels not run: {}\n", names.join(", "))));
    }
    if l.levels.iter().any(|r| {
        r.latency
            .as_ref()
            .is_some_and(|x| !x.too_few_for.is_empty())
    }) {
        // How to get more, in the flags the run's own command has.
        let more = if l
            .levels
            .iter()
            .any(|r| r.rate.as_ref().is_some_and(|x| x.speed.is_some()))
        {
            "--sessions plays more copies of the session at each speed"
        } else if l.levels.iter().any(|r| r.rate.is_some()) {
            "a longer --duration gives a rate more"
        } else {
            "--duration or --rounds gives a level more"
        };
        o.push_str(&format!(
            "(n=K) in a percentile's column: K ok requests are too few to have one (p50 needs 2, p99 needs 100); {more}\n",
        ));
    }
    for r in &l.levels {
        let sev = if r.verdict == "pass" { "info" } else { "bad" };
        if !t.shown_live.level_rows {
            o.push_str(&t.paint(sev, &level_line(r)));
            o.push('\n');
        } else if !r.failures.is_empty() {
            // The rows are above; only what they could not hold, under the level it belongs to.
            o.push_str(&t.paint(sev, &format!("level {}:", level_name(r))));
            o.push('\n');
        }
        for n in &r.notes {
            o.push_str(&format!("      note: {n}\n"));
        }
        if let Some(p) = r
            .protocol
            .as_deref()
            .filter(|p| p.contains("TLS") || p.contains("HTTP/2"))
        {
            o.push_str(&format!("      protocol (n={}): {p}\n", r.concurrency));
        }
        o.extend(
            r.phases
                .as_ref()
                .and_then(|p| crate::analyze::tcp_timers::phases_line(r.concurrency, p))
                .map(|p| match &r.rate {
                    // A rate level's concurrency is its in-flight cap: named by its rate instead.
                    Some(_) => p.replacen(
                        &format!("(n={})", r.concurrency),
                        &format!("({})", level_name(r)),
                        1,
                    ),
                    None => p,
                })
                .map(|p| format!("      {p}\n")),
        );
        // Failures that say the same are one line; the JSON report keeps each.
        let mut shown = 0;
        for g in crate::analyze::verdict::group_failures(&r.failures)
            .iter()
            .take(3)
        {
            o.push_str(&format!("      {}\n", g.words()));
            if let Some(d) = &g.first.detail {
                o.push_str(&format!("        the server said: {d}\n"));
            }
            shown += g.ids.len();
        }
        let more = (r.counts.timeout + r.counts.error) as usize;
        if more > shown {
            o.push_str(&format!(
                "      … {} more failed requests: `witness report --format json` lists each\n",
                more - shown
            ));
        }
    }
    if let Some(x) = l.levels.iter().find_map(|r| r.rate.as_ref()) {
        o.push_str(&format!(
            "open loop: {} arrivals, seed {}, at most {} in flight; latency counts from each request's intended send\n",
            x.arrivals, x.seed, x.max_in_flight
        ));
    }
    if let Some(lim) = &l.limit {
        let sev = if lim.ended.is_none() && lim.holds.is_some() && !lim.witness_bound {
            "info"
        } else {
            "bad"
        };
        o.push_str(&t.paint(sev, &format!("limit: {}\n", lim.words)));
    }
    if let Some(h) = &l.held {
        let sev = if h.contains("more than its") {
            "warn"
        } else {
            "info"
        };
        o.push_str(&t.paint(sev, &format!("{h}\n")));
    }
    if let Some(c) = &l.cost {
        o.push_str(&t.paint("info", &format!("{c}\n")));
    }
    o
}

/// Failed calls listed per method or tool here (the JSON report keeps more).
const OBSERVED_FAILURES_SHOWN: usize = 5;

/// The calls wrap saw: a table per pass-through (and source), a row per method or tool, then the
/// failed calls with what the server did meanwhile, then the handshakes.
fn observed_block(t: &Terminal, w: &crate::analyze::observed::ObservedAnalysis) -> String {
    use crate::analyze::observed::by_heading;
    let mut o = String::new();
    let s = |x: Option<f64>| x.map(took).unwrap_or_else(|| "-".into());
    // A percentile of too few calls is shown as such, "(n=5)", as load's rows show it.
    let pct = |l: Option<&crate::stats::Latency>, name: &str| {
        l.map(|l| l.shown(name, took)).unwrap_or_else(|| "-".into())
    };
    for (title, rows) in by_heading(w) {
        o.push_str(&format!(
            "{title}, per method or tool (latency over ok calls only; failed calls' durations apart):\n"
        ));
        // A journal is input: a tool name of any length must not become a format width past what
        // `format!` takes; longer names just push the line out.
        let width = rows
            .iter()
            .map(|r| r.label.chars().count())
            .max()
            .unwrap_or(4)
            .clamp(4, 48);
        o.push_str(&format!(
            "  {:<width$} {:>6} {:>6} {:>6} {:>8} {:>9}  {:>8} {:>8} {:>8}  failed (kind, count, time to give up)\n",
            "call", "calls", "ok", "error", "rejected", "cancelled", "p50", "p99", "max"
        ));
        for r in &rows {
            let c = &r.counts;
            let lat = r.latency.as_ref();
            let failed: Vec<String> = r
                .failed_by_kind
                .iter()
                .map(|k| {
                    let after = took_span(k.min_s, k.max_s);
                    format!("{} {} after {after}", k.outcome, k.count)
                })
                .collect();
            let mut apart = String::new();
            if c.timeout > 0 {
                apart.push_str(&format!(" timeout={}", c.timeout));
            }
            if c.interrupted > 0 {
                apart.push_str(&format!(" interrupted={}", c.interrupted));
            }
            if c.session_gone > 0 {
                apart.push_str(&format!(" session_gone={}", c.session_gone));
            }
            let line = format!(
                "  {:<width$} {:>6} {:>6} {:>6} {:>8} {:>9}  {:>8} {:>8} {:>8}  {}{apart}",
                r.label,
                r.calls,
                c.ok,
                c.error,
                c.rejected,
                c.cancelled,
                pct(lat, "p50"),
                pct(lat, "p99"),
                s(lat.map(|l| l.max)),
                if failed.is_empty() {
                    "-".to_string()
                } else {
                    failed.join("; ")
                },
            );
            let sev = if c.error + c.timeout > 0 {
                "bad"
            } else {
                "info"
            };
            o.push_str(&t.paint(sev, line.trim_end()));
            o.push('\n');
        }
        let failing: Vec<_> = rows.iter().filter(|r| !r.failures.is_empty()).collect();
        if !failing.is_empty() {
            o.push_str("  failed calls:\n");
        }
        for r in failing {
            // Calls that failed saying the same are one line, as a level's requests are; the JSON
            // report keeps each.
            let mut shown = 0;
            let what = format!(" {}:", r.label);
            for g in crate::analyze::verdict::group_failures(&r.failures)
                .iter()
                .take(OBSERVED_FAILURES_SHOWN)
            {
                o.push_str(&format!("    {}\n", g.words_as("call", "calls", &what)));
                if let Some(d) = &g.first.detail {
                    o.push_str(&format!("      the server said: {d}\n"));
                }
                shown += g.ids.len();
            }
            let more = r.failures.len().saturating_sub(shown) as u64 + r.failures_not_kept;
            if more > 0 {
                o.push_str(&format!(
                    "    … {more} more failed {} calls in the JSON report\n",
                    r.label
                ));
            }
        }
    }
    if w.calls_not_tabled > 0 {
        o.push_str(&format!(
            "  … {} calls of further methods or tools, counted but not tabled\n",
            w.calls_not_tabled
        ));
    }
    if let Some(h) = &w.handshakes {
        let took = h
            .duration
            .as_ref()
            .map(|d| {
                if d.max - d.min < 0.0005 {
                    format!(", in {}", ms(d.max))
                } else {
                    format!(", in {}–{}", ms(d.min), ms(d.max))
                }
            })
            .unwrap_or_default();
        let version = h
            .protocol_version
            .as_ref()
            .map(|v| format!(" (protocol {v})"))
            .unwrap_or_default();
        let how = match (h.count, h.failed) {
            (1, 0) => "1 MCP initialize, ok".to_string(),
            (1, _) => "1 MCP initialize, failed".to_string(),
            (n, _) => format!("{n} MCP initialize ({} ok, {} failed)", h.ok, h.failed),
        };
        let line = format!(
            "  handshake{}: {how}{took}{version}, timed apart from the calls{}",
            if h.count == 1 { "" } else { "s" },
            h.first_failure
                .as_ref()
                .map(|f| format!("; first failure: {f}"))
                .unwrap_or_default()
        );
        o.push_str(&t.paint(if h.failed > 0 { "bad" } else { "info" }, &line));
        o.push('\n');
    }
    o
}

/// A merged run: its sources and their clocks, then requests grouped as each source is shaped.
fn merged_block(t: &Terminal, m: &crate::analyze::merged::MergedAnalysis) -> String {
    use crate::journal::clock::signed_secs;
    let mut o = String::from("sources, on one clock:\n");
    for s in &m.sources {
        o.push_str(&format!(
            "  {} ({}{}): shift {}, {} requests, {} lifecycle events; {}\n",
            s.info.label,
            s.info.mode,
            s.info
                .hostname
                .as_ref()
                .map(|h| format!(" on {h}"))
                .unwrap_or_default(),
            signed_secs(s.info.shift_s),
            s.requests,
            s.lifecycle_events,
            s.info.clock
        ));
    }
    for line in &m.structure {
        o.push_str(&format!("  {line}\n"));
    }
    if m.groups.iter().any(|g| !g.observed) {
        o.push_str("requests by source and group (latency over ok requests only):\n");
    }
    // The calls a client made through wrap have their own table, per method or tool, below.
    for g in m.groups.iter().filter(|g| !g.observed) {
        let c = &g.counts;
        let lat = g
            .latency
            .as_ref()
            .map(|l| {
                format!(
                    "  ok p50={} p99={} max={}",
                    l.shown("p50", ms),
                    l.shown("p99", ms),
                    ms(l.max)
                )
            })
            .unwrap_or_default();
        let sev = if c.timeout + c.error > 0 {
            "bad"
        } else {
            "info"
        };
        o.push_str(&t.paint(
            sev,
            &format!(
                "  {} {} ({}): ok={} timeout={} error={} rejected={}{lat}\n",
                g.source, g.group, g.shape, c.ok, c.timeout, c.error, c.rejected
            ),
        ));
        if g.died_with_server + g.sent_while_down > 0 {
            o.push_str(&format!(
                "      {} failed as a server process exited, {} were sent while the server was down\n",
                g.died_with_server, g.sent_while_down
            ));
        }
        if let Some(f) = &g.time_to_give_up {
            o.push_str(&format!(
                "      failed requests gave up after {}–{} (time to give up, not latency)\n",
                ms(f.min),
                ms(f.max)
            ));
        }
        for f in g.failures.iter().take(3) {
            o.push_str(&format!(
                "      request {} {} after {}: {}\n",
                f.id,
                f.outcome,
                ms(f.duration_s),
                f.annotation
            ));
        }
    }
    if let Some(w) = m.window_s {
        o.push_str(&format!(
            "k6 requests in {} windows (by end time):\n",
            crate::journal::secs(w)
        ));
        for r in &m.windows {
            let c = &r.counts;
            let lat = r
                .latency
                .as_ref()
                .map(|l| format!("  ok p50={} max={}", l.shown("p50", ms), ms(l.max)))
                .unwrap_or_default();
            o.push_str(&format!(
                "  t={:.1}–{:.1}s  ok={} timeout={} error={} rejected={}{lat}\n",
                r.start_s, r.end_s, c.ok, c.timeout, c.error, c.rejected
            ));
        }
    }
    o
}

fn ms(s: f64) -> String {
    took(s)
}

/// The soak's figures after the timeline: kinds, memory, gauges, invariants, faults, verdict.
fn soak_block(t: &Terminal, s: &SoakAnalysis, resolved: &[Resolved]) -> String {
    use super::bytes;
    use crate::journal::secs;
    let mut o = String::new();
    o.push_str(&format!(
        "soak: {} achieved of {} planned (interval {}, seed {})\n",
        secs(s.duration_achieved_s),
        secs(s.duration_planned_s),
        secs(s.interval_s),
        s.seed
    ));
    if let Some(f) = s.connect_floor_ms {
        o.push_str(&format!("  connect floor {f:.2} ms\n"));
    }
    for line in resolution_block(t, resolved).lines() {
        o.push_str(&format!("  {line}\n"));
    }
    if let Some(r) = &s.refused {
        o.push_str(&t.paint("bad", &format!("REFUSED: {r}\n")));
    }
    let width = s
        .kinds
        .iter()
        .map(|k| k.name.len())
        .max()
        .unwrap_or(4)
        // A journal is input: a kind name of any length must not become a format width past
        // what `format!` takes (found by scripts/fuzz.sh); longer names just push the line out.
        .clamp(4, 60);
    o.push_str("  per kind (latency over ok requests, from the scheduled send when late):\n");
    for k in s.kinds.iter().chain(std::iter::once(&s.totals)) {
        let lat = k
            .latency
            .as_ref()
            .map(|l| {
                format!(
                    "  p50={} p95={} p99={} mean={} max={}",
                    l.shown("p50", ms),
                    l.shown("p95", ms),
                    l.shown("p99", ms),
                    ms(l.mean),
                    ms(l.max)
                )
            })
            .unwrap_or_default();
        let mut line = format!(
            "    {:<width$}  requests={} ok={} rejected={} timeouts={} errors={}{lat}",
            k.name, k.requests, k.ok, k.rejected, k.timeouts, k.errors
        );
        if k.late_sends > 0 {
            line.push_str(&format!("  late={}", k.late_sends));
        }
        if !k.clean_baseline {
            line.push_str(&format!(
                "  [{} in fault windows: not a clean baseline]",
                k.in_fault_windows
            ));
        }
        let sev = if k.failed_outside_faults > 0 {
            "bad"
        } else {
            ""
        };
        o.push_str(&t.paint(sev, &line));
        o.push('\n');
        // What the failures said, once per status (the totals row repeats the kinds': not again).
        if !std::ptr::eq(k, &s.totals) {
            for (status, said) in &k.said {
                let n = k.statuses.get(status).copied().unwrap_or(0);
                // An HTTP status is the server's answer; an error's detail is what failed.
                let what = match status.parse::<u16>() {
                    Ok(code) => format!("HTTP {code}: the server said: {said}"),
                    Err(_) => format!("{status}: {said}"),
                };
                o.push_str(&format!("      {n} × {what}\n"));
            }
        }
    }
    let r = &s.resources;
    let m = &r.memory_trend;
    // A soak that never started has no trend to tell, whatever a sampler read meanwhile.
    if let (Some(a), None) = (&r.after, &s.refused) {
        let sev = if m.class == crate::analyze::trend::TrendClass::Growth {
            "bad"
        } else {
            ""
        };
        // Before the first reading there is no figure: said so, never as 0.
        let was = |f: fn(&crate::analyze::soak::ProcRow) -> String| {
            r.before
                .as_ref()
                .map(f)
                .unwrap_or_else(|| "not read yet".into())
        };
        let own = match (
            r.before.as_ref().and_then(|b| b.own_rss_bytes),
            a.own_rss_bytes,
        ) {
            (Some(b), Some(x)) => format!(
                " (the server's own {} -> {})",
                bytes(b as f64),
                bytes(x as f64)
            ),
            (None, Some(x)) => format!(" (the server's own not read yet -> {})", bytes(x as f64)),
            _ => String::new(),
        };
        let slope = super::memory_slope(m);
        let line = format!(
            "  memory: {}{slope}: {}\n  rss {} -> {}{own} (peak {}); threads {} -> {}; fds {} -> {}; children {} -> {}; {} readings{}",
            m.class,
            m.detail,
            was(|b| bytes(b.rss_bytes as f64)),
            bytes(a.rss_bytes as f64),
            bytes(r.peak.as_ref().map(|p| p.rss_bytes).unwrap_or(0) as f64),
            was(|b| b.threads.to_string()),
            a.threads,
            was(|b| b.fds.to_string()),
            a.fds,
            was(|b| b.children.to_string()),
            a.children,
            r.samples,
            if m.clean_baseline { "" } else { " [not a clean baseline: a fault overlapped]" }
        );
        o.push_str(&t.paint(sev, &line));
        o.push('\n');
        // A server that never had a child has nothing to say about them.
        let had = r.peak.as_ref().is_some_and(|p| p.children > 0);
        if let Some(c) = r.children.as_ref().filter(|_| had) {
            let grows = c.class == crate::analyze::trend::TrendClass::Growth;
            let line = format!("  {}", c.detail);
            o.push_str(&t.paint(if grows { "bad" } else { "" }, &line));
            o.push('\n');
        }
    }
    if !s.gauges.is_empty() {
        o.push_str("  gauges:\n");
    }
    for g in &s.gauges {
        let mut line = format!("    {}:", g.name);
        if let (Some(f), Some(l), Some(mx)) = (g.first, g.last, g.max) {
            line.push_str(&format!(" {f} -> {l} (max {mx})"));
        }
        if let Some(x) = g.growth_per_1k_requests {
            line.push_str(&format!(", {x:+.2} per 1,000 requests"));
        }
        if let Some(tr) = g.trend {
            line.push_str(&format!(", {tr}"));
        }
        if g.errors > 0 {
            line.push_str(&format!(
                ", {} unreadable ({})",
                g.errors,
                g.last_error.as_deref().unwrap_or("")
            ));
        }
        let mut sev = "";
        if let Some(d) = &g.drain {
            line.push_str(&format!(
                "; drain: {} ({})",
                if d.ok { "ok" } else { "NOT DRAINED" },
                d.detail
            ));
            if !d.ok {
                sev = "bad";
            }
        }
        o.push_str(&t.paint(sev, &line));
        o.push('\n');
    }
    let failed: Vec<_> = s.invariants.iter().filter(|i| i.failed > 0).collect();
    o.push_str(&format!(
        "  invariants: {} checked at each of {} intervals; {}\n",
        s.invariants.len(),
        s.intervals.len(),
        if failed.is_empty() {
            "no violation".to_string()
        } else {
            failed
                .iter()
                .map(|i| format!("{} failed {}x", i.name, i.failed))
                .collect::<Vec<_>>()
                .join(", ")
        }
    ));
    for f in &s.injected {
        let until = match f.until_s {
            Some(u) => format!("back at t={u:.3}s"),
            None => "never seen back".into(),
        };
        o.push_str(&t.paint(
            "warn",
            &format!(
                "  injected {} at t={:.3}s (pid {}), {until}; intervals {:?} and {} requests are not a clean baseline\n",
                f.action, f.t_s, f.pid, f.intervals, f.requests_overlapping
            ),
        ));
    }
    if s.restarts.total > 0 {
        o.push_str(&format!(
            "  restarts: {} ({} injected, {} unexpected)\n",
            s.restarts.total, s.restarts.injected, s.restarts.unexpected
        ));
    }
    for w in &s.warnings {
        o.push_str(&t.paint("warn", &format!("  ! {w}\n")));
    }
    if let Some(r) = &s.aborted_reason {
        o.push_str(&t.paint(
            "warn",
            &format!(
                "  partial: {r}; {} of {} ran\n",
                secs(s.duration_achieved_s),
                secs(s.duration_planned_s)
            ),
        ));
    }
    let sev = if s.verdict == "pass" { "info" } else { "bad" };
    let mut v = format!("verdict: {}", s.verdict.to_uppercase());
    if !s.reasons.is_empty() {
        v.push_str(&format!(" ({})", s.reasons.join("; ")));
    }
    o.push_str(&t.paint(sev, &v));
    o.push('\n');
    o
}

/// The timeline block shared by every mode's terminal output.
pub fn timeline(t: &Terminal, a: &Analysis) -> String {
    let mut o = String::new();
    o.push_str(
        "witness: lifecycle timeline (t = seconds since the run began; age = process age)\n",
    );
    o.push_str(&format!(
        "  {:>9}  {:>9}  {:<12} {:>7}  what\n",
        "t", "age", "event", "pid"
    ));
    for e in &a.timeline {
        let age = e
            .age_s
            .map(|x| format!("{x:.2}s"))
            .unwrap_or_else(|| "-".into());
        let pid = e.pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into());
        let line = format!(
            "  {:>8.3}s  {:>9}  {:<12} {:>7}  {}",
            e.t_s, age, e.kind, pid, e.text
        );
        o.push_str(&t.paint(&e.severity, &line));
        o.push('\n');
    }
    if a.restarts > 0 {
        o.push_str(&format!("restarts: {}\n", a.restarts));
    }
    if a.suspicions.is_empty() {
        o.push_str("suspicions: none\n");
    } else {
        o.push_str("suspicions:\n");
        for s in &a.suspicions {
            o.push_str(&t.paint("bad", &format!("  ! {}", s.detail)));
            o.push('\n');
        }
    }
    if let Some(p) = &a.partial {
        o.push_str(&t.paint("warn", p));
        o.push('\n');
    }
    o
}

/// The GPU block: one line per figure and device, or why no GPU was sampled. Nothing at all for a
/// journal that never mentions GPUs.
pub fn gpu(t: &Terminal, a: &Analysis) -> String {
    use super::bytes;
    let g = &a.gpu;
    let mut o = String::new();
    if g.is_empty() {
        return o;
    }
    if let Some(why) = &g.not_sampled {
        if t.say_no_gpu {
            o.push_str(&format!("gpu: {why}\n"));
        }
        return o;
    }
    o.push_str("gpu (min / median / max; before -> after):\n");
    for d in &g.devices {
        o.push_str(&format!(
            "  GPU {} {}, {} total: {} readings over {}\n",
            d.device,
            d.name,
            bytes(d.mem_total_bytes as f64),
            d.samples,
            crate::journal::secs(d.last_t_s - d.first_t_s)
        ));
        let m = &d.mem_used_bytes;
        let trend = match d.mem_trend.class {
            crate::analyze::trend::TrendClass::TooFewSamples => d.mem_trend.class.to_string(),
            c => format!(
                "{c} ({}{}/s)",
                if d.mem_trend.slope_per_s >= 0.0 {
                    "+"
                } else {
                    ""
                },
                bytes(d.mem_trend.slope_per_s)
            ),
        };
        let line = format!(
            "    memory used    {} / {} / {}; {} -> {}; trend {}",
            bytes(m.min),
            bytes(m.median),
            bytes(m.max),
            bytes(m.before),
            bytes(m.after),
            trend
        );
        let sev = if d.mem_trend.class == crate::analyze::trend::TrendClass::Growth {
            "warn"
        } else {
            ""
        };
        o.push_str(&t.paint(sev, &line));
        o.push('\n');
        if let Some(s) = &d.server_mem_bytes {
            o.push_str(&format!(
                "    server's own   {} / {} / {}; {} -> {}\n",
                bytes(s.min),
                bytes(s.median),
                bytes(s.max),
                bytes(s.before),
                bytes(s.after)
            ));
        }
        for (label, stat, unit) in [
            ("gpu util", &d.gpu_util_pct, "%"),
            ("memory util", &d.mem_util_pct, "%"),
            ("temperature", &d.temperature_c, " C"),
            ("power", &d.power_w, " W"),
        ] {
            if let Some(s) = stat {
                o.push_str(&format!(
                    "    {label:<14} {:.0} / {:.0} / {:.0}{unit}; {:.0} -> {:.0}{unit}\n",
                    s.min, s.median, s.max, s.before, s.after
                ));
            }
        }
    }
    for u in &g.unavailable {
        o.push_str(&t.paint("warn", &format!("  ! t={:.3}s {}", u.t_s, u.reason)));
        o.push('\n');
    }
    o
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::analyze::analyze;
    use crate::analyze::tests::{end, loaded};
    use crate::journal::{ErrorKind, Event, LoadSettings, Outcome, Probe, Settings};

    /// One level of 2: an ok request of 1 s, and a request that gave up after 6 s (its server died).
    pub(crate) fn level_with_a_slow_failure() -> Analysis {
        let probe = Probe {
            status: Some(200),
            error: None,
            duration_s: 0.001,
            connected: false,
        };
        let req = |id, dur: f64, outcome| {
            (
                0.1 + dur,
                Event::Request {
                    id,
                    group: crate::journal::group_of_level(0),
                    worker: id as u32,
                    start_s: 0.1,
                    duration_s: dur,
                    outcome,
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
                },
            )
        };
        analyze(&loaded(vec![
            (
                0.0,
                Event::Settings(Settings {
                    load: Some(LoadSettings {
                        factor: 1.5,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
            ),
            (
                0.0,
                Event::GpuUnavailable {
                    reason: "no NVIDIA driver".into(),
                    device: None,
                },
            ),
            (
                0.1,
                Event::LevelStart {
                    index: 0,
                    concurrency: 2,
                    health: probe.clone(),
                    identity: None,
                    skipped: None,
                },
            ),
            req(0, 1.0, Outcome::Ok),
            req(
                1,
                6.0,
                Outcome::Error {
                    error: ErrorKind::ClosedBeforeResponse,
                    status: None,
                },
            ),
            (
                6.5,
                Event::LevelEnd {
                    index: 0,
                    concurrency: 2,
                    health: probe,
                    identity: None,
                    stopped: None,
                    not_sent: None,
                    held: None,
                    witness_cpu_s: None,
                    protocol: None,
                },
            ),
            (6.6, end()),
        ]))
    }

    #[test]
    fn a_slow_lookup_is_said_beside_the_floor_in_every_view_and_once_after_a_live_run() {
        let resolved = |t_s: f64, took_s: f64, again: Option<&str>| {
            (
                t_s,
                Event::Resolved {
                    host: "app.test".into(),
                    addrs: vec!["127.0.0.1".into()],
                    took_s,
                    again: again.map(Into::into),
                    error: None,
                    resolver: crate::journal::ResolverConf {
                        nameservers: vec!["10.0.0.9".into(), "127.0.0.1".into()],
                        ..Default::default()
                    },
                },
            )
        };
        let settings = (
            0.0,
            Event::Settings(Settings {
                load: Some(LoadSettings::default()),
                ..Default::default()
            }),
        );
        let a = analyze(&loaded(vec![
            settings.clone(),
            resolved(0.0, 5.01, None),
            (0.1, end()),
        ]));
        let words = "resolving app.test took 5.0 s: the first nameserver in /etc/resolv.conf (10.0.0.9) did not answer (the resolver's 5 s timeout, glibc's default)";
        let term = String::from_utf8(Terminal::default().render(&a).unwrap()).unwrap();
        assert!(
            term.contains("resolution: app.test → 127.0.0.1 in 5.0 s (once, not in any latency)"),
            "{term}"
        );
        assert!(term.contains(&format!("  ! {words}")), "{term}");
        let json = String::from_utf8(super::super::json::Json.render(&a).unwrap()).unwrap();
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["resolution"][0]["slow"][0], words, "{v:#}");
        let html = String::from_utf8(super::super::html::Html.render(&a).unwrap()).unwrap();
        assert!(
            html.contains(&super::super::html::esc(words)),
            "the HTML says it too"
        );
        // Said live already: only a later lookup is said in the summary.
        let live = Terminal {
            shown_live: ShownLive {
                resolution: true,
                ..Default::default()
            },
            ..Default::default()
        };
        let summary = String::from_utf8(live.render(&a).unwrap()).unwrap();
        assert!(!summary.contains("resolution:"), "{summary}");
        let again = analyze(&loaded(vec![
            settings,
            resolved(0.0, 0.001, None),
            resolved(20.0, 5.02, Some("every address stopped answering")),
            (21.0, end()),
        ]));
        let summary = String::from_utf8(live.render(&again).unwrap()).unwrap();
        assert!(
            summary.contains("then 1 more time after every address stopped answering"),
            "{summary}"
        );
        assert!(
            summary.contains("! again: resolving app.test took 5.0 s"),
            "{summary}"
        );
    }

    #[test]
    fn the_rows_max_is_the_slowest_ok_request_and_the_give_up_time_stands_apart() {
        let a = level_with_a_slow_failure();
        let row = level_line(&a.load.as_ref().unwrap().levels[0]);
        let head = level_header();
        let col = |line: &str, name: &str| -> String {
            // The header's column ends where its name ends; the row's value is right-aligned to it.
            let end = head.find(name).unwrap() + name.len();
            let upto: String = line.chars().take(end).collect();
            upto.split_whitespace().last().unwrap().to_string()
        };
        assert_eq!(col(&row, "max"), "1.000s", "{head}\n{row}");
        assert_eq!(col(&row, "gave up"), "6.000s", "{head}\n{row}");
    }

    #[test]
    fn rows_shown_live_on_this_terminal_are_not_repeated_and_no_gpu_words_without_a_gpu() {
        let a = level_with_a_slow_failure();
        let row = level_line(&a.load.as_ref().unwrap().levels[0]);
        let full = String::from_utf8(Terminal::default().render(&a).unwrap()).unwrap();
        assert_eq!(full.matches(&row).count(), 1, "{full}");
        assert_eq!(full.matches(&level_header()).count(), 1, "{full}");
        let after_live = Terminal {
            shown_live: ShownLive {
                resolution: true,
                floor: true,
                level_rows: true,
            },
            say_no_gpu: false,
            ..Default::default()
        };
        let summary = String::from_utf8(after_live.render(&a).unwrap()).unwrap();
        assert!(!summary.contains(&row), "{summary}");
        assert!(!summary.contains(&level_header()), "{summary}");
        assert!(
            summary.contains("request 1 error"),
            "the failure still annotated: {summary}"
        );
        assert!(!summary.to_lowercase().contains("gpu"), "{summary}");
        assert!(!full.contains("gpu: not sampled"), "{full}");
        // Asked for (`--gpu on`), why none was sampled is said.
        let asked = Terminal {
            say_no_gpu: true,
            ..Default::default()
        };
        let said = String::from_utf8(asked.render(&a).unwrap()).unwrap();
        assert!(said.contains("gpu: not sampled"), "{said}");
    }

    #[test]
    fn calls_wrap_saw_fail_together_are_one_line() {
        let a = analyze(&loaded(
            crate::analyze::observed::tests::cut_off_together_story(),
        ));
        let out = String::from_utf8(Terminal::default().render(&a).unwrap()).unwrap();
        let lines: Vec<&str> = out
            .lines()
            .filter(|l| l.trim_start().starts_with("call"))
            .filter(|l| l.contains("tools/call slow:"))
            .collect();
        assert_eq!(lines.len(), 2, "{out}");
        assert!(
            lines[0].trim_start().starts_with(
                "calls 3–7 (5) tools/call slow: connection closed after 1.960–2.000s: server pid 1234"
            ),
            "{out}"
        );
        assert!(
            lines[1]
                .trim_start()
                .starts_with("call 9 tools/call slow: JSON-RPC error after 10.0ms"),
            "{out}"
        );
        assert!(
            out.contains("      the server said: -32000 busy\n"),
            "{out}"
        );
        assert!(
            !out.contains("more failed"),
            "all six are on the two lines: {out}"
        );
    }

    #[test]
    fn a_wrap_run_s_calls_are_tabled_per_tool_with_the_cut_off_call_annotated() {
        use crate::analyze::observed::tests::{watchdog_story, WATCHDOG};
        let a = analyze(&loaded(watchdog_story()));
        let out = String::from_utf8(Terminal::default().render(&a).unwrap()).unwrap();
        let head = out
            .lines()
            .find(|l| l.trim_start().starts_with("call "))
            .expect("the table's header");
        let row = out
            .lines()
            .find(|l| l.trim_start().starts_with("tools/call slow"))
            .unwrap_or_else(|| panic!("a row for the tool:\n{out}"));
        let col = |name: &str| -> String {
            let end = head.find(name).unwrap() + name.len();
            let upto: String = row.chars().take(end).collect();
            upto.split_whitespace().last().unwrap().to_string()
        };
        assert_eq!(
            [col("calls"), col("ok"), col("error"), col("cancelled")],
            ["6", "5", "1", "0"],
            "{head}\n{row}"
        );
        assert_eq!(
            [col("p50"), col("p99"), col("max")],
            ["1.003s", "(n=5)", "1.005s"],
            "{head}\n{row}"
        );
        assert!(
            row.ends_with("connection closed 1 after 840ms"),
            "failed durations apart: {row}"
        );
        assert!(
            out.contains(&format!(
                "call 6 tools/call slow: connection closed after 840ms: server pid 1234 exited with 124 (after log line '{WATCHDOG}')"
            )),
            "{out}"
        );
        assert!(
            out.contains("  handshake: 1 MCP initialize, ok, in 12.0ms (protocol 2025-06-18)"),
            "{out}"
        );
        assert!(
            out.contains("! pid 1234 exited at age 6.00 s — at the 6s timer named in its log line"),
            "{out}"
        );
    }
}
