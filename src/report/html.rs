//! The HTML timeline: one self-contained file (inline CSS, inline SVG, a few lines of inline script;
//! no network) that draws [`Picture`] on one time axis: requests coloured by outcome in lanes by
//! level, process lifetimes as bands, exits, restarts, matched log lines and suspected timer
//! deadlines as labelled markers, health probes, and resource charts underneath. Hover text comes
//! from SVG `<title>` elements, so the picture reads the same with scripts off.
//!
//! It draws only what the analysis decided; the one thing it chooses is layout.

pub use super::esc;
use crate::units::{took, took_span};
use std::fmt::Write;

use super::View;
use crate::analyze::picture::{Class, Distribution, Group, MarkerKind, Picture, Series, Unit};
use crate::analyze::verdict::LoadAnalysis;
use crate::analyze::Analysis;
use crate::journal::secs;

pub struct Html;

impl View for Html {
    fn render(&self, a: &Analysis) -> anyhow::Result<Vec<u8>> {
        Ok(page(a).into_bytes())
    }
}

const WIDTH: f64 = 1200.0;
const RIGHT: f64 = 24.0;
const LABEL_ROWS: usize = 4;
const LABEL_ROW_H: f64 = 14.0;
/// The tallest a lane of individual requests grows, however many workers it has.
const LANE_MAX_H: f64 = 160.0;
const AGG_LANE_H: f64 = 80.0;
const CHART_H: f64 = 44.0;
/// Lifecycle entries listed under the chart; a long soak's are summarised beyond this.
const TABLE_ROWS: usize = 2_000;

const CSS: &str = r#"
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:16px 24px;color:#1d2330;background:#fff}
h1{font-size:20px;margin:0 0 4px}h2{font-size:15px;margin:18px 0 6px}
.meta{color:#555;margin:0 0 8px;font-size:13px}.meta code{font-size:12px}
.partial{background:#fff3cd;border:1px solid #e0b400;padding:6px 10px;font-weight:600;margin:8px 0}
.sus{color:#8a1538;margin:2px 0;font-weight:600}
.v-pass{color:#2e7d32}.v-fail,.v-refused{color:#b3261e}
#lanes.spans rect{stroke:#fff;stroke-width:.6}
.none{color:#3a7a4a}
table{border-collapse:collapse;font-size:13px;margin:4px 0}
th,td{padding:2px 10px 2px 0;text-align:left;vertical-align:top}th{border-bottom:1px solid #ccc}
td.n{text-align:right;font-variant-numeric:tabular-nums}
tr.bad td{color:#b3261e}tr.warn td{color:#8a5a00}
.legend span{display:inline-block;margin-right:14px}.legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-1px}
svg{display:block;max-width:100%;height:auto;border:1px solid #e3e6ea;margin-top:6px}
svg text{font:11px system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;fill:#1d2330}
svg .lane{font-weight:600}svg .sub{fill:#666;font-size:10px}
.ok{fill:#3a9a5b}.timeout{fill:#e69b00}.error{fill:#d1343a}.rejected{fill:#6a5acd}
.band{fill:#c9d6e8;stroke:#6b88b0}.band.gone{fill:#f2cfd1;stroke:#b3261e}
.grid{stroke:#eef0f3}.axis{stroke:#9aa3ad}
.exit{stroke:#b3261e;stroke-width:1.5}.exit.asked{stroke:#8892a0;stroke-dasharray:2 2}
.deadline{stroke:#8a1538;stroke-width:2;stroke-dasharray:6 3}
.lbl-bad{fill:#b3261e;font-weight:600}.lbl-deadline{fill:#8a1538;font-weight:700}.lbl-warn{fill:#8a5a00}.lbl-info{fill:#3b4a5e}
.lead{stroke:#c3c9d1;stroke-width:.7}
.levelbg{fill:#f4f6fb}.levelbg.alt{fill:#e9edf6}.level{fill:#dfe5f2;stroke:#9fb0d0}.level.skipped{fill:#f2cfd1}
.series{fill:none;stroke:#2f6db5;stroke-width:1.2}.chartbg{fill:#fafbfc;stroke:#e3e6ea}
.probe-ok{fill:#3a9a5b}.probe-bad{fill:#d1343a}
.g-log{fill:#e69b00}.g-restart{fill:#2f6db5}.g-spawn,.g-ready{fill:#3a9a5b}.g-signal,.g-fault,.g-leak,.g-note{fill:#5b6675}circle.bad,path.bad{fill:#b3261e}
.wide{overflow-x:auto}.wide svg{min-width:800px}
.legend svg.sw{display:inline-block;border:0;margin:0 4px 0 0;vertical-align:-2px;min-width:0;max-width:none}
svg .axis-title{fill:#5b6675;font-size:10px;font-style:italic}
#cursor{stroke:#1d2330;stroke-width:.6;pointer-events:none}#cursor-t{font-weight:600}
svg .tick{fill:#5b6675;font-size:10px}.lat{fill:none;stroke-width:1.4}.lat.p50{stroke:#2f6db5}.lat.p99{stroke:#d1343a}
.lat-name{font-size:10px;font-weight:600}.lat-name.p50{fill:#2f6db5}.lat-name.p99{fill:#d1343a}.lat-pt{fill:#d1343a}.lat-pt.p50{fill:#2f6db5}
.pct{fill:#1d2330}
"#;

/// Colour classes per outcome, in [`Class`] order.
const CLASS_CSS: [&str; 4] = ["ok", "timeout", "error", "rejected"];
/// The same colours for the HTML legend (kept equal to the CSS above).
const CLASS_COLOUR: [&str; 4] = ["#3a9a5b", "#e69b00", "#d1343a", "#6a5acd"];

pub fn page(a: &Analysis) -> String {
    let p = &a.picture;
    let mut o = String::with_capacity(64 * 1024 + p.spans.len().min(20_000) * 120);
    o.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">");
    let _ = writeln!(
        o,
        "<title>witness {} timeline{}</title><style>{CSS}</style></head><body>",
        esc(&a.mode),
        match (&a.partial, a.live) {
            (_, Some(_)) => " (live)",
            (Some(_), None) => " (partial)",
            (None, None) => "",
        }
    );
    let _ = write!(
        o,
        "<h1>witness {} — timeline</h1>\n<p class=\"meta\">started {} on {} · {} long · <code>{}</code></p>\n",
        esc(&a.mode),
        esc(&a.started_at),
        esc(&a.hostname),
        secs(a.end_s),
        esc(&a.command.join(" "))
    );
    if let Some(why) = &a.partial {
        let _ = writeln!(o, "<p class=\"partial\" id=\"partial\">{}</p>", esc(why));
    }
    thresholds(&mut o, a);
    suspicions(&mut o, a);
    soak_summary(&mut o, a);
    levels_table(&mut o, a);
    super::html_replay::section(&mut o, a);
    observed_tables(&mut o, a);
    if a.load.is_none() {
        // A load run's verdict table already counts its requests per level.
        groups_table(&mut o, p);
    }
    let timeline = chart(a);
    legend(&mut o, p, &timeline);
    o.push_str(&timeline);
    o.push('\n');
    distributions(&mut o, a);
    lifecycle_table(&mut o, a);
    notes(&mut o, a);
    o.push_str(SCRIPT);
    o.push_str("</body></html>\n");
    o
}

/// A soak's verdict and the figures that decided it, above the picture (the kinds are its lanes).
fn soak_summary(o: &mut String, a: &Analysis) {
    let Some(s) = &a.soak else { return };
    let class = match s.verdict.as_str() {
        "pass" => "v-pass",
        _ => "v-fail",
    };
    let _ = writeln!(
        o,
        "<h2>Soak: <span class=\"{class}\">{}</span></h2>\n<p class=\"meta\">{} achieved of {} planned · interval {} · seed {}</p>",
        esc(&s.verdict.to_uppercase()),
        secs(s.duration_achieved_s),
        secs(s.duration_planned_s),
        secs(s.interval_s),
        s.seed
    );
    for r in &s.reasons {
        let _ = writeln!(o, "<p class=\"sus\">{}</p>", esc(r));
    }
    let m = &s.resources.memory_trend;
    if let Some(why) = &s.refused {
        let _ = writeln!(o, "<p class=\"sus\">refused to measure: {}</p>", esc(why));
    }
    resolution(o, &a.resolution);
    // A soak that never started has no trend to tell.
    if s.refused.is_none() {
        let slope = super::memory_slope(m);
        let _ = writeln!(
            o,
            "<p>server memory: <b>{}</b>{slope}: {}</p>",
            m.class,
            esc(&m.detail)
        );
        let had = s.resources.peak.as_ref().is_some_and(|p| p.children > 0);
        if let Some(c) = s.resources.children.as_ref().filter(|_| had) {
            let _ = writeln!(
                o,
                "<p{}>server's children: <b>{}</b>: {}</p>",
                if c.class == crate::analyze::trend::TrendClass::Growth {
                    " class=\"sus\""
                } else {
                    ""
                },
                c.class,
                esc(&c.detail)
            );
        }
    }
    o.push_str("<table><tr><th>kind</th><th>requests</th><th>ok</th><th>rejected</th><th>timeouts</th><th>errors</th><th>p50</th><th>p95</th><th>p99</th><th>max</th><th>baseline</th></tr>\n");
    for k in s.kinds.iter().chain(std::iter::once(&s.totals)) {
        // As the terminal shows them: a percentile of too few requests is "(n=K)".
        let l = |name: &str| {
            k.latency
                .as_ref()
                .map(|x| match name {
                    "max" => took(x.max),
                    _ => x.shown(name, took),
                })
                .unwrap_or_else(|| "-".into())
        };
        let _ = writeln!(
            o,
            "<tr{}><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
            if k.failed_outside_faults > 0 { " class=\"bad\"" } else if !k.clean_baseline { " class=\"warn\"" } else { "" },
            esc(&k.name),
            k.requests,
            k.ok,
            k.rejected,
            k.timeouts,
            k.errors,
            l("p50"),
            l("p95"),
            l("p99"),
            l("max"),
            if k.clean_baseline { "clean".to_string() } else { format!("{} in fault windows", k.in_fault_windows) }
        );
    }
    o.push_str("</table>\n");
    for f in &s.injected {
        let _ = writeln!(
            o,
            "<p class=\"sus\">injected {} at t={:.3}s: intervals {:?} are not a clean baseline ({})</p>",
            esc(&f.action),
            f.t_s,
            f.intervals,
            match f.until_s {
                Some(u) => format!("server back at t={u:.3}s"),
                None => "never seen back".into(),
            }
        );
    }
}

fn suspicions(o: &mut String, a: &Analysis) {
    o.push_str("<h2>Suspicions</h2>\n");
    if a.suspicions.is_empty() {
        o.push_str("<p class=\"none\">none: no exit or failed requests' duration sits at a known, round-number or clustered timer</p>\n");
    }
    for s in &a.suspicions {
        let _ = writeln!(o, "<p class=\"sus\">! {}</p>", esc(&s.detail));
    }
    if a.restarts > 0 {
        let _ = writeln!(
            o,
            "<p class=\"sus\">the server was restarted {} time{} during the run: numbers measured across a restart are not the server's</p>",
            a.restarts,
            if a.restarts == 1 { "" } else { "s" }
        );
    }
}

/// The load ladder's verdicts as the analysis gave them; without one (a journal of levels but no load
/// settings), the levels as the journal recorded them.
fn levels_table(o: &mut String, a: &Analysis) {
    if let Some(load) = &a.load {
        verdict_table(o, load, &a.resolution);
        return;
    }
    let p = &a.picture;
    if p.levels.is_empty() {
        return;
    }
    o.push_str("<h2>Levels</h2>\n<table><tr><th>level</th><th>concurrency</th><th>from</th><th>to</th><th>health before</th><th>health after</th><th>restarted under it</th><th>note</th></tr>\n");
    for l in &p.levels {
        let bad = l.identity_changed || l.skipped.is_some() || l.health_after.is_none();
        let _ = writeln!(
            o,
            "<tr class=\"{}\"><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{:.3}s</td><td class=\"n\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            if bad { "bad" } else { "" },
            l.index,
            l.concurrency,
            l.start_s,
            l.end_s.map(|e| format!("{e:.3}s")).unwrap_or_else(|| "—".into()),
            esc(&l.health_before),
            esc(l.health_after.as_deref().unwrap_or("none (journal ends)")),
            if l.identity_changed { "yes" } else { "no" },
            esc(l.skipped.as_deref().unwrap_or("")),
        );
    }
    o.push_str("</table>\n");
}

/// Each host name the run resolved (once, in no latency), and why a slow lookup was slow.
fn resolution(o: &mut String, rows: &[crate::analyze::resolution::Resolved]) {
    for r in rows {
        let _ = writeln!(
            o,
            "<p class=\"meta\">{}</p>",
            esc(&crate::analyze::resolution::line(r))
        );
        for w in &r.slow {
            let _ = writeln!(o, "<p class=\"sus\">{}</p>", esc(w));
        }
    }
}

fn verdict_table(
    o: &mut String,
    l: &LoadAnalysis,
    resolved: &[crate::analyze::resolution::Resolved],
) {
    let _ = writeln!(
        o,
        "<h2>Verdict: <span class=\"v-{}\">{}</span></h2>",
        esc(&l.verdict),
        esc(&l.verdict.to_uppercase())
    );
    if let Some(why) = &l.refused {
        let _ = writeln!(o, "<p class=\"sus\">refused to measure: {}</p>", esc(why));
    }
    if let Some(f) = &l.floor {
        let _ = writeln!(
            o,
            "<p class=\"meta\">connect floor to {}: {} (limit {} ms)</p>",
            esc(&crate::load::tls::authority(&f.host, f.port)),
            f.median_ms
                .map(|m| format!("{m:.2} ms"))
                .unwrap_or_else(|| "no connect succeeded".into()),
            f.limit_ms
        );
    }
    resolution(o, resolved);
    if l.levels.is_empty() {
        return;
    }
    o.push_str("<table><tr><th>concurrency or rate</th><th>verdict</th><th>ok</th><th>timeout</th><th>error</th><th>rejected</th><th>ok max</th><th>ok p50</th><th>ok p99</th><th>failed gave up after</th><th>health before</th><th>health after</th><th>restarted</th><th>why</th></tr>\n");
    let s = |x: Option<f64>| x.map(took).unwrap_or_else(|| "-".into());
    // A percentile of too few requests is shown as such, "(n=5)", never under that name.
    let pct = |l: Option<&crate::stats::Latency>, name: &str| {
        l.map(|l| l.shown(name, took)).unwrap_or_else(|| "-".into())
    };
    for r in &l.levels {
        let class = match r.verdict.as_str() {
            "pass" => "",
            "skipped" => "warn",
            _ => "bad",
        };
        let c = &r.counts;
        let _ = writeln!(
            o,
            "<tr class=\"{class}\"><td class=\"n\">{}</td><td><b>{}</b></td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            r.name(),
            esc(&r.verdict.to_uppercase()),
            c.ok,
            c.timeout,
            c.error,
            c.rejected,
            s(r.latency.as_ref().map(|l| l.max)),
            pct(r.latency.as_ref(), "p50"),
            pct(r.latency.as_ref(), "p99"),
            r.time_to_give_up
                .as_ref()
                .map(|g| took_span(g.min, g.max))
                .unwrap_or_else(|| "-".into()),
            esc(&r.health_before.said(r.mcp_ping)),
            esc(&r.health_after.as_ref().map(|h| h.said(r.mcp_ping)).unwrap_or_else(|| "-".into())),
            match (r.restarted, &r.died) {
                (true, _) => "yes",
                (false, Some(_)) => "no: died",
                (false, None) => "no",
            },
            esc(&r.reasons.join("; ")),
        );
    }
    o.push_str("</table>\n<p class=\"meta\">Latency is over ok requests only; a failed request's duration is how long something took to give up.</p>\n");
    if l.levels.iter().any(|r| r.rate.is_some()) {
        o.push_str("<p class=\"meta\">A rate level (200/s) is an open loop: its latency counts from each request's intended send.</p>\n");
    }
    if let Some(lim) = &l.limit {
        let class = if lim.ended.is_none() && lim.holds.is_some() && !lim.witness_bound {
            "meta"
        } else {
            "fail"
        };
        let _ = writeln!(o, "<p class=\"{class}\">limit: {}</p>", esc(&lim.words));
    }
    // The same words as the terminal and the JSON report: what happened while each failed.
    for r in &l.levels {
        if let Some(p) = r
            .protocol
            .as_deref()
            .filter(|p| p.contains("TLS") || p.contains("HTTP/2"))
        {
            let _ = writeln!(
                o,
                "<p class=\"meta protocol\">protocol (n={}): {}</p>",
                r.concurrency,
                esc(p)
            );
        }
        if let Some(p) = r
            .phases
            .as_ref()
            .and_then(|p| crate::analyze::tcp_timers::phases_line(r.concurrency, p))
            .map(|p| match &r.rate {
                // A rate level's concurrency is its in-flight cap: named as every view names it.
                Some(_) => p.replacen(
                    &format!("(n={})", r.concurrency),
                    &format!("({})", r.name()),
                    1,
                ),
                None => p,
            })
        {
            let _ = writeln!(o, "<p class=\"meta phases\">{}</p>", esc(&p));
        }
        for n in &r.notes {
            let _ = writeln!(o, "<p class=\"meta\">note: {}</p>", esc(n));
        }
        // Failures that say the same are one line; the JSON report keeps each.
        for g in crate::analyze::verdict::group_failures(&r.failures)
            .iter()
            .take(FAILURES_SHOWN)
        {
            let _ = writeln!(
                o,
                "<p class=\"fail\">level {}: {}</p>",
                r.name(),
                esc(&g.words())
            );
        }
    }
}

/// Failed requests the page lists per level (the JSON report keeps more).
const FAILURES_SHOWN: usize = 5;

/// The run's thresholds (`--assert`), with the terminal's words: a line each, red when broken.
fn thresholds(o: &mut String, a: &Analysis) {
    if a.asserts.is_empty() {
        return;
    }
    o.push_str("<h2 id=\"thresholds\">Thresholds</h2>\n<ul class=\"thresholds\">\n");
    for j in &a.asserts {
        let _ = writeln!(
            o,
            "<li class=\"{}\">{}</li>",
            if j.ok { "pass" } else { "bad" },
            esc(&j.line())
        );
    }
    o.push_str("</ul>\n");
}

/// The calls wrap saw, with the terminal's and the JSON report's words: a table per pass-through,
/// a row per method or tool, the failed calls annotated, the handshakes.
fn observed_tables(o: &mut String, a: &Analysis) {
    let Some(w) = &a.observed else { return };
    let s = |x: Option<f64>| x.map(took).unwrap_or_else(|| "-".into());
    // A percentile of too few calls is shown as such, "(n=5)", as the terminal shows it.
    let pct = |l: Option<&crate::stats::Latency>, name: &str| {
        l.map(|l| l.shown(name, took)).unwrap_or_else(|| "-".into())
    };
    for (title, rows) in crate::analyze::observed::by_heading(w) {
        let _ = writeln!(o, "<h2 class=\"observed\">{}</h2>", esc(&cap(&title)));
        o.push_str("<table><tr><th>call</th><th>calls</th><th>ok</th><th>error</th><th>rejected</th><th>cancelled</th><th>ok p50</th><th>ok p99</th><th>ok max</th><th>failed (kind, count, time to give up)</th></tr>\n");
        for r in &rows {
            let c = &r.counts;
            let failed: Vec<String> = r
                .failed_by_kind
                .iter()
                .map(|k| {
                    format!(
                        "{} {} after {}",
                        k.outcome,
                        k.count,
                        took_span(k.min_s, k.max_s)
                    )
                })
                .collect();
            let lat = r.latency.as_ref();
            let _ = writeln!(
                o,
                "<tr class=\"{}\"><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
                if c.error + c.timeout > 0 { "bad" } else { "" },
                esc(&r.label),
                r.calls,
                c.ok,
                c.error,
                c.rejected,
                c.cancelled,
                pct(lat, "p50"),
                pct(lat, "p99"),
                s(lat.map(|l| l.max)),
                esc(&if failed.is_empty() { "-".to_string() } else { failed.join("; ") }),
            );
        }
        o.push_str("</table>\n<p class=\"meta\">Latency is over ok calls only; a failed call's duration is how long something took to give up.</p>\n");
        // Calls that failed saying the same are one line, as a level's requests are.
        for r in &rows {
            let what = format!(" {}:", r.label);
            for g in crate::analyze::verdict::group_failures(&r.failures)
                .iter()
                .take(FAILURES_SHOWN)
            {
                let _ = writeln!(
                    o,
                    "<p class=\"fail\">{}</p>",
                    esc(&g.words_as("call", "calls", &what))
                );
                if let Some(d) = &g.first.detail {
                    let _ = writeln!(o, "<p class=\"meta\">the server said: {}</p>", esc(d));
                }
            }
        }
    }
    if let Some(h) = &w.handshakes {
        let how = match (h.count, h.failed) {
            (1, 0) => "1 MCP initialize, ok".to_string(),
            (1, _) => "1 MCP initialize, failed".to_string(),
            (n, _) => format!("{n} MCP initialize ({} ok, {} failed)", h.ok, h.failed),
        };
        let _ = writeln!(
            o,
            "<p class=\"{}\">handshake{}: {how}{}{}, timed apart from the calls{}</p>",
            if h.failed > 0 { "sus" } else { "meta" },
            if h.count == 1 { "" } else { "s" },
            h.duration
                .as_ref()
                .map(|d| if d.max - d.min < 0.0005 {
                    format!(", in {}", secs(d.max))
                } else {
                    format!(", in {}–{}", secs(d.min), secs(d.max))
                })
                .unwrap_or_default(),
            h.protocol_version
                .as_ref()
                .map(|v| format!(" (protocol {})", esc(v)))
                .unwrap_or_default(),
            h.first_failure
                .as_ref()
                .map(|f| format!("; first failure: {}", esc(f)))
                .unwrap_or_default()
        );
    }
}

/// "1 call", "6 calls".
fn calls(n: u64) -> String {
    format!("{n} call{}", if n == 1 { "" } else { "s" })
}

/// A heading's first letter in capitals.
fn cap(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

fn groups_table(o: &mut String, p: &Picture) {
    // Observed calls have their own tables above.
    if p.groups.iter().all(|g| g.observed.is_some()) {
        return;
    }
    o.push_str("<h2>Requests</h2>\n<table><tr><th>lane</th><th>requests</th><th>ok</th><th>timeout</th><th>error</th><th>rejected</th><th>from</th><th>to</th></tr>\n");
    for g in p.groups.iter().filter(|g| g.observed.is_none()) {
        let total: u64 = g.counts.iter().sum();
        let class = if g.counts[Class::Error.index()] + g.counts[Class::Timeout.index()] > 0 {
            "bad"
        } else {
            ""
        };
        let _ = write!(
            o,
            "<tr class=\"{class}\"><td>{}</td><td class=\"n\">{total}</td>",
            esc(&lane_name(g))
        );
        for c in g.counts {
            let _ = write!(o, "<td class=\"n\">{c}</td>");
        }
        let _ = writeln!(
            o,
            "<td class=\"n\">{:.3}s</td><td class=\"n\">{:.3}s</td></tr>",
            g.first_s, g.last_s
        );
    }
    o.push_str("</table>\n");
    if p.spans_dropped > 0 {
        let _ = writeln!(
            o,
            "<p class=\"meta\">{} requests beyond the first {} are counted but not kept one by one.</p>",
            p.spans_dropped,
            p.spans.len()
        );
    }
}

/// The legend: the four outcome colours with their counts, then a swatch and its meaning for each
/// glyph the timeline draws (and only those), drawn with the picture's own classes.
fn legend(o: &mut String, p: &Picture, svg: &str) {
    o.push_str("<h2>Timeline</h2>\n<p class=\"legend\" id=\"legend\">");
    for c in Class::ALL {
        let _ = write!(
            o,
            "<span data-glyph=\"{}\"><i style=\"background:{}\"></i>{} {}</span>",
            CLASS_CSS[c.index()],
            CLASS_COLOUR[c.index()],
            c.label(),
            p.totals[c.index()]
        );
    }
    let used = classes_in(svg);
    for (class, shape, words) in GLYPHS {
        if !used.contains(class) {
            continue;
        }
        let _ = write!(
            o,
            "<span data-glyph=\"{class}\"><svg class=\"sw\" width=\"16\" height=\"14\" viewBox=\"0 0 16 14\">{shape}</svg>{words}</span>"
        );
    }
    if p.aggregate.is_some() {
        o.push_str("<span>(more than 10,000 requests: each lane shows completions per time bucket, stacked by outcome)</span>");
    } else {
        o.push_str("<span>(hover a bar for its request)</span>");
    }
    o.push_str("</p>\n");
}

/// Each glyph class the timeline can draw: its class, its swatch, what it means. A swatch names
/// its class last, so `<line class="exit"` finds the picture's exits, never the legend's.
const GLYPHS: &[(&str, &str, &str)] = &[
    (
        "band",
        "<rect x=\"1\" y=\"3\" width=\"14\" height=\"8\" rx=\"2\" class=\"band\"/>",
        "server process, start to end",
    ),
    (
        "gone",
        "<rect x=\"1\" y=\"3\" width=\"14\" height=\"8\" rx=\"2\" class=\"band gone\"/>",
        "process that ended unasked",
    ),
    (
        "level",
        "<rect x=\"1\" y=\"3\" width=\"14\" height=\"8\" class=\"level\"/>",
        "load level",
    ),
    (
        "skipped",
        "<rect x=\"1\" y=\"3\" width=\"14\" height=\"8\" class=\"level skipped\"/>",
        "level skipped",
    ),
    (
        "exit",
        "<line x1=\"8\" x2=\"8\" y1=\"0\" y2=\"14\" class=\"exit\"/>",
        "process exit",
    ),
    (
        "asked",
        "<line x1=\"8\" x2=\"8\" y1=\"0\" y2=\"14\" class=\"exit asked\"/>",
        "exit witness asked for",
    ),
    (
        "deadline",
        "<line x1=\"8\" x2=\"8\" y1=\"0\" y2=\"14\" class=\"deadline\"/>",
        "suspected timer deadline",
    ),
    (
        "g-spawn",
        "<path d=\"M4 2l8 5-8 5z\" class=\"g-spawn\"/>",
        "start",
    ),
    (
        "g-ready",
        "<circle cx=\"8\" cy=\"7\" r=\"4.5\" class=\"g-ready\"/>",
        "ready",
    ),
    (
        "g-restart",
        "<circle cx=\"8\" cy=\"7\" r=\"4.5\" class=\"g-restart\"/>",
        "restart",
    ),
    (
        "g-log",
        "<path d=\"M8 2l5 5-5 5-5-5z\" class=\"g-log\"/>",
        "log line matched",
    ),
    (
        "g-signal",
        "<circle cx=\"8\" cy=\"7\" r=\"4.5\" class=\"g-signal\"/>",
        "signal sent",
    ),
    (
        "g-fault",
        "<circle cx=\"8\" cy=\"7\" r=\"4.5\" class=\"g-fault\"/>",
        "fault injected",
    ),
    (
        "g-leak",
        "<circle cx=\"8\" cy=\"7\" r=\"4.5\" class=\"g-leak\"/>",
        "leak",
    ),
    (
        "g-note",
        "<circle cx=\"8\" cy=\"7\" r=\"4.5\" class=\"g-note\"/>",
        "note",
    ),
    (
        "bad",
        "<circle cx=\"8\" cy=\"7\" r=\"4.5\" class=\"g-note bad\"/>",
        "red mark: went wrong",
    ),
    (
        "probe-ok",
        "<circle cx=\"8\" cy=\"7\" r=\"4\" class=\"probe-ok\"/>",
        "health probe ok",
    ),
    (
        "probe-bad",
        "<circle cx=\"8\" cy=\"7\" r=\"4\" class=\"probe-bad\"/>",
        "health probe failed",
    ),
    (
        "p50",
        "<line x1=\"1\" x2=\"15\" y1=\"7\" y2=\"7\" class=\"lat p50\"/>",
        "p50",
    ),
    (
        "p99",
        "<line x1=\"1\" x2=\"15\" y1=\"7\" y2=\"7\" class=\"lat p99\"/>",
        "p99",
    ),
    (
        "series",
        "<polyline points=\"1,11 6,6 10,8 15,3\" class=\"series\"/>",
        "resource sampled",
    ),
];

/// Every class token on the page's drawn shapes (the glyphs the legend has to explain).
fn classes_in(svg: &str) -> std::collections::BTreeSet<&str> {
    let mut out = std::collections::BTreeSet::new();
    for tag in ["<rect ", "<line ", "<circle ", "<path ", "<polyline "] {
        for part in svg.split(tag).skip(1) {
            if let Some(v) = part
                .strip_prefix("class=\"")
                .and_then(|r| r.split('"').next())
            {
                out.extend(v.split_whitespace());
            }
        }
    }
    out
}

fn lifecycle_table(o: &mut String, a: &Analysis) {
    o.push_str("<details open><summary><b>Lifecycle</b> (t = seconds since the run began; age = process age)</summary>\n<table><tr><th>t</th><th>age</th><th>event</th><th>pid</th><th>what</th></tr>\n");
    for e in a.timeline.iter().take(TABLE_ROWS) {
        let _ = writeln!(
            o,
            "<tr class=\"{}\"><td class=\"n\">{:.3}s</td><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
            if e.severity == "info" { "" } else { e.severity.as_str() },
            e.t_s,
            e.age_s.map(|x| format!("{x:.2}s")).unwrap_or_else(|| "-".into()),
            esc(&e.kind),
            e.pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
            esc(&e.text)
        );
    }
    if a.timeline.len() > TABLE_ROWS {
        let _ = writeln!(
            o,
            "<tr><td colspan=\"5\">… and {} more (see the journal or the JSON report)</td></tr>",
            a.timeline.len() - TABLE_ROWS
        );
    }
    o.push_str("</table></details>\n");
}

fn notes(o: &mut String, a: &Analysis) {
    let warn: Vec<_> = a.notes.iter().filter(|n| n.1 != "info").collect();
    if warn.is_empty() {
        return;
    }
    o.push_str("<h2>Notes</h2>\n");
    for (t, level, text) in warn {
        let _ = writeln!(o, "<p>t={t:.3}s {}: {}</p>", esc(level), esc(text));
    }
}

/// The time axis's scale and the SVG being built, top to bottom.
struct Canvas {
    end_s: f64,
    y: f64,
    body: String,
    /// The left column for lane names and scales: as wide as the longest name needs, within bounds.
    gutter: f64,
}

impl Canvas {
    fn x(&self, t: f64) -> f64 {
        self.gutter + (t / self.end_s).clamp(0.0, 1.0) * self.plot_w()
    }
    fn plot_w(&self) -> f64 {
        WIDTH - self.gutter - RIGHT
    }
    /// Opens a lane's group, `<g class="lane" data-lane="ID">`, with its name and its axis title
    /// (what the rows or the values are, with the unit) in the gutter. A value lane (`unit` given)
    /// leaves room on the gutter's right for its scale. Close it with [`Canvas::close_lane`].
    fn open_lane(&mut self, y: f64, id: &str, name: &str, axis: &str, unit: Option<&str>) {
        let _ = write!(
            self.body,
            "<g class=\"lane\" data-lane=\"{}\" data-kind=\"{}\"{}>",
            esc(id),
            if unit.is_some() { "value" } else { "rows" },
            unit.map(|u| format!(" data-unit=\"{}\"", esc(u)))
                .unwrap_or_default()
        );
        let room = self.gutter - 12.0 - if unit.is_some() { TICK_W } else { 0.0 };
        let _ = write!(
            self.body,
            "<text class=\"lane\" x=\"8\" y=\"{:.1}\">{}</text>",
            y + 12.0,
            fitted(name, room, NAME_PX)
        );
        // The axis title, a line or two under the name.
        for (i, line) in axis.lines().enumerate() {
            let _ = write!(
                self.body,
                "<text class=\"sub lane-axis\" x=\"8\" y=\"{:.1}\">{}</text>",
                y + 24.0 + 11.0 * i as f64,
                fitted(line, room, SUB_PX)
            );
        }
    }
    fn close_lane(&mut self) {
        self.body.push_str("</g>");
    }
    /// A value lane's scale: a tick label right-aligned against the plot, kept inside the lane
    /// (`top`..`bottom`) so it never reads as the neighbour's.
    fn scale_tick(&mut self, y: f64, top: f64, bottom: f64, label: &str) {
        let _ = write!(
            self.body,
            "<line class=\"grid\" x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\"/><text class=\"tick\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            self.gutter,
            WIDTH - RIGHT,
            self.gutter - 4.0,
            (y + 3.5).clamp(top + 8.0, bottom - 1.0),
            esc(label)
        );
    }
    /// The time axis: a tick label per step and its title at the gutter's left.
    fn time_axis(&mut self, ticks: &[f64], y: f64, id: &str) {
        let step = ticks.get(1).copied().unwrap_or(1.0);
        let _ = write!(
            self.body,
            "<g class=\"time-axis\" id=\"{id}\"><text class=\"axis-title\" x=\"8\" y=\"{:.1}\">{TIME_AXIS_TITLE}</text>",
            y + 12.0
        );
        for &t in ticks {
            let _ = write!(
                self.body,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                self.x(t),
                y + 12.0,
                tick_label(t, step)
            );
        }
        self.body.push_str("</g>");
    }
}

/// The time axis's title, at the top of the timeline and at its foot.
const TIME_AXIS_TITLE: &str = "seconds since start";
/// The gutter's bounds: names wider than the widest are cut, with their full text on hover.
const GUTTER_MIN: f64 = 190.0;
const GUTTER_MAX: f64 = 340.0;
/// The room a value lane's scale takes on the gutter's right ("66.1 MiB", "200/s").
const TICK_W: f64 = 50.0;
/// About how wide one character is: a lane name (11 px, bold), a sub line or a tick (10 px).
const NAME_PX: f64 = 6.9;
const SUB_PX: f64 = 6.0;

/// `s` escaped, cut to fit `room` pixels at `px` per character; a cut text carries its full text
/// in a `<title>`, so hovering it reads the whole name.
fn fitted(s: &str, room: f64, px: f64) -> String {
    let n = ((room / px).floor() as usize).max(4);
    if s.chars().count() <= n {
        esc(s)
    } else {
        format!("<title>{}</title>{}", esc(s), esc(&clip(s, n)))
    }
}

/// A lane's id in the page (`data-lane`): its name, lower case, words joined by '-'.
fn slug(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for ch in s.chars().flat_map(char::to_lowercase) {
        if ch.is_alphanumeric() {
            o.push(ch);
        } else if !o.is_empty() && !o.ends_with('-') {
            o.push('-');
        }
    }
    o.trim_end_matches('-').to_string()
}

/// The gutter that shows every lane's name and axis title whole, within [GUTTER_MIN, GUTTER_MAX].
fn gutter_for(p: &Picture) -> f64 {
    let width = |s: &str, px: f64| s.chars().count() as f64 * px;
    // A value lane's name shares its line with the scale; a lane of requests has the gutter whole.
    let values = p
        .series
        .iter()
        .map(|s| width(&s.name, NAME_PX) + TICK_W)
        .fold(0.0, f64::max);
    let rows = p
        .groups
        .iter()
        .map(|g| width(&lane_name(g), NAME_PX).max(width(&lane_sub(p, g), SUB_PX)))
        .fold(0.0, f64::max);
    (values.max(rows) + 16.0).clamp(GUTTER_MIN, GUTTER_MAX)
}

/// What a lane of requests' rows are: "8 req · 8 workers", "6 calls · one client".
fn lane_sub(p: &Picture, g: &Group) -> String {
    let total: u64 = g.counts.iter().sum();
    let plural = |n: u32, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    match &g.observed {
        // One client on the stdio relay: its row needs no count.
        Some(o) if g.rows <= 1 => format!("{} · one {}", calls(total), o.row_is),
        Some(o) => format!("{} · {}", calls(total), plural(g.rows, &o.row_is)),
        None => format!(
            "{total} {} · {}",
            p.exchange.as_deref().unwrap_or("req"),
            plural(g.rows, "worker")
        ),
    }
}

/// The marker kinds drawn as glyphs on the events row, by their class.
fn glyph_class(kind: MarkerKind) -> &'static str {
    match kind {
        MarkerKind::Spawn => "g-spawn",
        MarkerKind::Ready => "g-ready",
        MarkerKind::Restart => "g-restart",
        MarkerKind::Log => "g-log",
        MarkerKind::Signal => "g-signal",
        MarkerKind::Fault => "g-fault",
        MarkerKind::Leak => "g-leak",
        MarkerKind::Note => "g-note",
        MarkerKind::Exit => "exit",
        MarkerKind::TimerDeadline => "deadline",
    }
}

fn chart(a: &Analysis) -> String {
    let p = &a.picture;
    let mut c = Canvas {
        end_s: p.end_s.max(1e-3),
        y: 0.0,
        body: String::new(),
        gutter: gutter_for(p),
    };
    // Time axis.
    let ticks = ticks(c.end_s);
    let axis_y = 18.0;
    c.time_axis(&ticks, 0.0, "time-axis");
    let _ = write!(
        c.body,
        "<line class=\"axis\" x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{axis_y}\" y2=\"{axis_y}\"/>",
        c.gutter,
        WIDTH - RIGHT
    );
    c.y = axis_y + 4.0;

    // Labels of markers, on rows where they do not collide; the most telling first.
    let labels_top = c.y;
    if !p.markers.is_empty() {
        c.y += LABEL_ROWS as f64 * LABEL_ROW_H + 4.0;
    }
    // The server's processes, a bar each, when the journal has any.
    if !p.bands.is_empty() {
        let top = c.y;
        let rows = p.bands.iter().map(|b| b.row + 1).max().unwrap_or(0);
        let h = ((rows.max(1) as f64) * 18.0).max(28.0);
        c.open_lane(
            top,
            "server",
            "server",
            &format!(
                "{} process{} · a bar each",
                p.bands.len(),
                if p.bands.len() == 1 { "" } else { "es" }
            ),
            None,
        );
        for b in &p.bands {
            let y = top + b.row as f64 * 18.0 + 2.0;
            let x0 = c.x(b.start_s);
            let x1 = c.x(b.end_s.unwrap_or(p.end_s)).max(x0 + 1.0);
            // Ended by itself and not cleanly (a clean exit 0, or a stop witness asked for, is not).
            let gone = b.end_s.is_some() && !b.requested && b.status != Some(0);
            let ran = b.end_s.unwrap_or(p.end_s) - b.start_s;
            let _ = write!(
                c.body,
                "<g><title>pid {}: from t={:.3}s to {}, ran {}{}</title><rect class=\"band{}\" x=\"{x0:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"14\" rx=\"2\"/>",
                b.pid,
                b.start_s,
                b.end_s.map(|e| format!("t={e:.3}s")).unwrap_or_else(|| "the journal's end (still running)".into()),
                secs(ran),
                b.meaning.as_deref().map(|m| format!("; {m}")).unwrap_or_default(),
                if gone { " gone" } else { "" },
                x1 - x0
            );
            if x1 - x0 > 60.0 {
                let _ = write!(
                    c.body,
                    "<text x=\"{:.1}\" y=\"{:.1}\">pid {}</text>",
                    x0 + 4.0,
                    y + 11.0,
                    b.pid
                );
            }
            c.body.push_str("</g>");
        }
        c.close_lane();
        c.y = top + h + 4.0;
    }
    // The events row: a glyph per spawn, restart, log line, signal … (exits and timer deadlines are
    // lines across the whole picture, drawn last).
    let glyph_y = c.y + 12.0;
    let glyph_markers: Vec<_> = p
        .markers
        .iter()
        .filter(|m| !matches!(m.kind, MarkerKind::Exit | MarkerKind::TimerDeadline))
        .collect();
    if !glyph_markers.is_empty() {
        c.open_lane(c.y, "events", "events", "a mark each (legend)", None);
        for m in &glyph_markers {
            let x = c.x(m.t_s);
            let class = format!(
                "{}{}",
                glyph_class(m.kind),
                if m.severity == "bad" { " bad" } else { "" }
            );
            let shape = match m.kind {
                MarkerKind::Log => format!(
                    "<path class=\"{class}\" d=\"M{x:.1} {:.1}l5 5-5 5-5-5z\"/>",
                    glyph_y - 5.0
                ),
                MarkerKind::Spawn => format!(
                    "<path class=\"{class}\" d=\"M{x:.1} {:.1}l8 5-8 5z\"/>",
                    glyph_y - 5.0
                ),
                _ => format!(
                    "<circle class=\"{class}\" cx=\"{x:.1}\" cy=\"{glyph_y:.1}\" r=\"4.5\"/>"
                ),
            };
            let _ = write!(c.body, "<g><title>{}</title>{shape}</g>", esc(&m.text));
        }
        c.close_lane();
        c.y += 30.0;
    }

    // Levels row; faint bands behind the request lanes go in once the lanes' height is known.
    if !p.levels.is_empty() {
        let ly = c.y;
        c.open_lane(
            ly,
            "levels",
            "levels",
            if p.levels.iter().any(|l| l.rate.is_some()) {
                "rate or c = concurrency"
            } else {
                "c = concurrency"
            },
            None,
        );
        for l in &p.levels {
            let x0 = c.x(l.start_s);
            let x1 = c.x(l.end_s.unwrap_or(p.end_s)).max(x0 + 2.0);
            let _ = write!(
                c.body,
                "<g><title>level {} ({}): t={:.3}s to {}; health before {}, after {}{}{}</title><rect class=\"level{}\" x=\"{x0:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"16\"/>",
                l.name,
                l.label,
                l.start_s,
                l.end_s.map(|e| format!("t={e:.3}s")).unwrap_or_else(|| "the journal's end".into()),
                esc(&l.health_before),
                esc(l.health_after.as_deref().unwrap_or("none")),
                if l.identity_changed { "; the server was restarted under it" } else { "" },
                l.skipped.as_deref().map(|s| format!("; skipped: {}", esc(s))).unwrap_or_default(),
                if l.skipped.is_some() { " skipped" } else { "" },
                ly + 1.0,
                x1 - x0
            );
            if x1 - x0 > 34.0 {
                let _ = write!(
                    c.body,
                    "<text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
                    x0 + 3.0,
                    ly + 13.0,
                    esc(&l.name)
                );
            }
            c.body.push_str("</g>");
        }
        c.close_lane();
        c.y += 30.0;
    }
    let lanes_top = c.y;
    let levelbg_at = c.body.len();
    let mut ids = std::collections::BTreeSet::new();
    let mut lane_id = |g: &Group| {
        let base = slug(&lane_name(g));
        let mut id = base.clone();
        let mut n = 2;
        while !ids.insert(id.clone()) {
            id = format!("{base}-{n}");
            n += 1;
        }
        id
    };
    let _ = write!(
        c.body,
        "<g id=\"lanes\" class=\"{}\">",
        if p.aggregate.is_some() {
            "agg"
        } else {
            "spans"
        }
    );
    if let Some(agg) = &p.aggregate {
        let mut heading = None;
        for (gi, g) in p.groups.iter().enumerate() {
            observed_heading(&mut c, &mut heading, g);
            let top = c.y;
            let total: u64 = g.counts.iter().sum();
            let sub = match &g.observed {
                Some(_) => calls(total),
                None => format!(
                    "{} · {total} {}",
                    g.name,
                    p.exchange.as_deref().unwrap_or("req")
                ),
            };
            let peak = agg.counts[gi]
                .iter()
                .map(|b| b.iter().sum::<u32>())
                .max()
                .unwrap_or(1)
                .max(1) as f64;
            c.open_lane(top, &lane_id(g), &lane_name(g), &sub, None);
            // The bars' scale: the tallest is this many completions in one bucket.
            let _ = write!(
                c.body,
                "<text class=\"sub scale\" x=\"8\" y=\"{:.1}\">bar = {} per {}</text>",
                top + 36.0,
                peak as u32,
                lat_label(agg.bucket_s)
            );
            let bw = (c.x(agg.bucket_s) - c.x(0.0)).max(1.0);
            for (bi, b) in agg.counts[gi].iter().enumerate() {
                let n: u32 = b.iter().sum();
                if n == 0 {
                    continue;
                }
                let t0 = bi as f64 * agg.bucket_s;
                let x = c.x(t0);
                let _ = write!(
                    c.body,
                    "<g><title>{}: t={:.2}–{:.2}s: {} ended: {} ok, {} timeout, {} error, {} rejected; longest {}</title>",
                    esc(&g.name),
                    t0,
                    t0 + agg.bucket_s,
                    n,
                    b[0],
                    b[1],
                    b[2],
                    b[3],
                    secs(agg.max_duration_s[gi][bi])
                );
                let mut base = top + AGG_LANE_H - 2.0;
                // Failures on top of the stack, where the eye lands.
                for ci in [0usize, 3, 1, 2] {
                    if b[ci] == 0 {
                        continue;
                    }
                    // A few failures among thousands must still show: never thinner than 3 px.
                    let least = if ci == 0 { 1.0 } else { 3.0 };
                    let h = (b[ci] as f64 / peak * (AGG_LANE_H - 6.0)).max(least);
                    base -= h;
                    let _ = write!(
                        c.body,
                        "<rect class=\"{}\" x=\"{x:.1}\" y=\"{base:.1}\" width=\"{bw:.1}\" height=\"{h:.1}\"/>",
                        CLASS_CSS[ci]
                    );
                }
                c.body.push_str("</g>");
            }
            c.close_lane();
            c.y = top + AGG_LANE_H + 4.0;
        }
    } else {
        // Each lane's bars, drawn inside its group.
        let mut bars = vec![String::new(); p.groups.len()];
        let row_h: Vec<f64> = p
            .groups
            .iter()
            .map(|g| (LANE_MAX_H / g.rows.max(1) as f64).clamp(2.0, 12.0).floor())
            .collect();
        let mut tops = vec![0.0; p.groups.len()];
        {
            // Where each lane starts, as the loop below lays them out (headings included).
            let mut y = c.y;
            let mut heading: Option<&str> = None;
            for (gi, g) in p.groups.iter().enumerate() {
                let now = g.observed.as_ref().map(|o| o.heading.as_str());
                if now.is_some() && now != heading {
                    y += 20.0;
                }
                heading = now;
                tops[gi] = y;
                y += (g.rows.max(1) as f64 * row_h[gi]).max(28.0) + 4.0;
            }
        }
        for s in &p.spans {
            let g = s.group as usize;
            let (top, rh) = (tops[g], row_h[g]);
            let x0 = c.x(s.start_s);
            let w = (c.x(s.end_s) - x0).max(1.0);
            let y = top + s.row as f64 * rh + 0.5;
            let what = if s.what.is_empty() { "ok" } else { &s.what };
            let what = match &p.exchange {
                Some(x) => format!("{x} {what}"),
                None => what.to_string(),
            };
            let _ = write!(
                bars[g],
                "<rect class=\"{}\" x=\"{x0:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{:.1}\"><title>#{} worker {}: {} in {} (t={:.3}→{:.3}s)</title></rect>",
                CLASS_CSS[s.class.index()],
                (rh - 1.0).max(1.0),
                s.id,
                s.worker,
                esc(&what),
                secs(s.end_s - s.start_s),
                s.start_s,
                s.end_s
            );
        }
        let mut heading = None;
        for (gi, g) in p.groups.iter().enumerate() {
            observed_heading(&mut c, &mut heading, g);
            let h = (g.rows.max(1) as f64 * row_h[gi]).max(28.0);
            let workers = lane_sub(p, g);
            c.open_lane(c.y, &lane_id(g), &lane_name(g), &workers, None);
            c.body.push_str(&bars[gi]);
            c.close_lane();
            c.y += h + 4.0;
        }
    }
    c.body.push_str("</g>");
    let lanes_bottom = c.y;
    if !p.levels.is_empty() {
        let mut bg = String::from("<g class=\"levelbgs\">");
        for (i, l) in p.levels.iter().enumerate() {
            let x0 = c.x(l.start_s);
            let x1 = c.x(l.end_s.unwrap_or(p.end_s)).max(x0 + 2.0);
            let _ = write!(
                bg,
                "<rect class=\"levelbg{}\" x=\"{x0:.1}\" y=\"{lanes_top:.1}\" width=\"{:.1}\" height=\"{:.1}\"/>",
                if i % 2 == 1 { " alt" } else { "" },
                x1 - x0,
                (lanes_bottom - lanes_top).max(0.0)
            );
        }
        bg.push_str("</g>");
        c.body.insert_str(levelbg_at, &bg);
    }
    if p.groups.is_empty() {
        let _ = write!(
            c.body,
            "<text class=\"sub\" x=\"{:.1}\" y=\"{:.1}\">no requests in this journal (wrap records the server's lifecycle; load and soak add requests)</text>",
            c.gutter,
            c.y + 12.0
        );
        c.y += 20.0;
    }

    // Throughput and latency over time, under the lanes, on the same clock.
    over_time(&mut c, p);

    // Health probes.
    if !p.probes.is_empty() {
        let y = c.y;
        c.open_lane(y, "health", "health", "a dot per probe", None);
        for h in &p.probes {
            let _ = write!(
                c.body,
                "<circle class=\"{}\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"4\"><title>t={:.3}s health ({}): {} in {}</title></circle>",
                if h.healthy { "probe-ok" } else { "probe-bad" },
                c.x(h.t_s),
                y + 9.0,
                h.t_s,
                esc(&h.purpose),
                esc(&h.result),
                secs(h.duration_s)
            );
        }
        c.close_lane();
        c.y += 30.0;
    }
    let markers_bottom = c.y;

    // Resource charts on the same time scale.
    for s in &p.series {
        series_chart(&mut c, s);
    }

    // Exits and timer deadlines: lines across the picture, over the lanes they cut.
    let mut lines = String::from("<g id=\"markers\">");
    for m in &p.markers {
        let x = c.x(m.t_s);
        match m.kind {
            MarkerKind::Exit => {
                let _ = write!(
                    lines,
                    "<line class=\"exit{}\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{labels_top:.1}\" y2=\"{markers_bottom:.1}\"><title>{}</title></line>",
                    if m.severity == "bad" { "" } else { " asked" },
                    esc(&m.text)
                );
            }
            MarkerKind::TimerDeadline => {
                let _ = write!(
                    lines,
                    "<line class=\"deadline\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{labels_top:.1}\" y2=\"{markers_bottom:.1}\"><title>{}</title></line>",
                    esc(&m.text)
                );
            }
            _ => {}
        }
    }
    lines.push_str("</g>");
    c.body.push_str(&lines);
    c.body.push_str(&marker_labels(&c, p, labels_top, glyph_y));

    // The time axis again at the foot, where a reader of the resource charts looks for it.
    let foot = c.y + 2.0;
    let _ = write!(
        c.body,
        "<line class=\"axis\" x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{foot:.1}\" y2=\"{foot:.1}\"/>",
        c.gutter,
        WIDTH - RIGHT
    );
    c.time_axis(&ticks, foot + 2.0, "time-axis-foot");
    c.y = foot + 20.0;

    // Gridlines go under everything: prepend.
    let height = c.y + 4.0;
    let mut grid = String::new();
    for &t in &ticks {
        let x = c.x(t);
        let _ = write!(
            grid,
            "<line class=\"grid\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{axis_y}\" y2=\"{foot:.1}\"/>"
        );
    }
    let mut svg = String::with_capacity(c.body.len() + grid.len() + 512);
    let _ = write!(
        svg,
        "<div class=\"wide\"><svg id=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {WIDTH} {height:.0}\" width=\"{WIDTH}\" height=\"{height:.0}\" data-end-s=\"{}\" data-gutter=\"{:.1}\" data-plot-w=\"{:.1}\">",
        c.end_s,
        c.gutter,
        c.plot_w()
    );
    svg.push_str(&grid);
    svg.push_str(&c.body);
    let _ = write!(
        svg,
        "<line id=\"cursor\" x1=\"-10\" x2=\"-10\" y1=\"{axis_y}\" y2=\"{height:.1}\"/><text id=\"cursor-t\" x=\"-100\" y=\"30\"></text></svg></div>"
    );
    svg
}

/// Height of the throughput lane and of the latency-over-time lane.
const RATE_H: f64 = 56.0;
const LAT_H: f64 = 84.0;

/// A latency for an axis: the unit that keeps it short ("250µs", "40ms", "2s").
/// A percentile's label, or "(n=K)" when K requests are too few for it (as the tables say).
fn pct_label(name: &str, v: f64, count: u64) -> String {
    if crate::stats::enough(name, count) {
        lat_label(v)
    } else {
        format!("(n={count})")
    }
}

fn lat_label(s: f64) -> String {
    let (v, unit) = if s >= 1.0 {
        (s, "s")
    } else if s >= 1e-3 {
        (s * 1e3, "ms")
    } else {
        (s * 1e6, "µs")
    };
    let t = if v >= 10.0 || (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    };
    format!("{t}{unit}")
}

/// A round number at or above `v` (1, 2, 5 × a power of ten), for an axis's top.
fn nice_ceil(v: f64) -> f64 {
    if v <= 0.0 {
        return 1.0;
    }
    let mag = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|x| *x >= v * 0.999)
        .unwrap_or(10.0 * mag)
}

/// The decades a log axis from `lo` to `hi` spans, widened to whole decades.
fn decades(lo: f64, hi: f64) -> (f64, f64) {
    let lo = 10f64.powf(lo.max(1e-6).log10().floor());
    let mut hi = 10f64.powf(hi.max(lo).log10().ceil());
    if hi <= lo {
        hi = lo * 10.0;
    }
    (lo, hi)
}

/// Two lanes under the requests: completions per second, stacked by outcome, with a scale; and the
/// ok latencies' p50 and p99 per time bucket on a log axis with its decades labelled.
fn over_time(c: &mut Canvas, p: &Picture) {
    let ot = &p.over_time;
    if ot.points.is_empty() {
        return;
    }
    let per_s = |n: u32| n as f64 / ot.bucket_s;
    let peak = ot
        .points
        .iter()
        .map(|q| per_s(q.counts.iter().sum()))
        .fold(0.0, f64::max);
    let top_rate = nice_ceil(peak);
    let top = c.y;
    c.open_lane(
        top,
        "throughput",
        "throughput",
        &format!("completions per s\n{} buckets", lat_label(ot.bucket_s)),
        Some("/s"),
    );
    let plot_w = c.plot_w();
    let _ = write!(
        c.body,
        "<g id=\"throughput\"><rect class=\"chartbg\" x=\"{:.1}\" y=\"{top:.1}\" width=\"{plot_w:.1}\" height=\"{RATE_H}\"/>",
        c.gutter
    );
    for (v, y) in [
        (top_rate, top),
        (top_rate / 2.0, top + RATE_H / 2.0),
        (0.0, top + RATE_H),
    ] {
        c.scale_tick(y, top, top + RATE_H, &format!("{}/s", rate_label(v)));
    }
    let bw = (c.x(ot.bucket_s) - c.x(0.0)).max(1.0);
    for q in &ot.points {
        let x = c.x(q.t_s);
        let total: u32 = q.counts.iter().sum();
        let _ = write!(
            c.body,
            "<g><title>t={:.2}–{:.2}s: {:.0} completions/s ({} ok, {} timeout, {} error, {} rejected)</title>",
            q.t_s,
            q.t_s + ot.bucket_s,
            per_s(total),
            q.counts[0],
            q.counts[1],
            q.counts[2],
            q.counts[3]
        );
        let mut base = top + RATE_H;
        for ci in [0usize, 3, 1, 2] {
            if q.counts[ci] == 0 {
                continue;
            }
            let h = (per_s(q.counts[ci]) / top_rate * RATE_H).max(if ci == 0 { 0.5 } else { 2.0 });
            base -= h;
            let _ = write!(
                c.body,
                "<rect class=\"{} tp\" x=\"{x:.1}\" y=\"{base:.1}\" width=\"{bw:.1}\" height=\"{h:.1}\"/>",
                CLASS_CSS[ci]
            );
        }
        c.body.push_str("</g>");
    }
    c.body.push_str("</g>");
    c.close_lane();
    c.y = top + RATE_H + 8.0;

    // Latency over time: p50 and p99 of the ok requests that ended in each bucket.
    let oks: Vec<(f64, f64, f64)> = ot
        .points
        .iter()
        .filter_map(|q| Some((q.t_s + ot.bucket_s / 2.0, q.p50?, q.p99?)))
        .collect();
    // A line runs only between neighbouring buckets: an idle stretch (a settle, a restart) is a gap.
    let runs: Vec<&[(f64, f64, f64)]> =
        oks.chunk_by(|a, b| b.0 - a.0 < ot.bucket_s * 1.5).collect();
    if oks.is_empty() {
        return;
    }
    let lo = oks.iter().map(|o| o.1).fold(f64::INFINITY, f64::min);
    let hi = oks.iter().map(|o| o.2).fold(0.0, f64::max);
    let (lo, hi) = decades(lo, hi);
    let top = c.y;
    let y_of = |v: f64| {
        let f = (v.max(lo).log10() - lo.log10()) / (hi.log10() - lo.log10());
        top + LAT_H - f.clamp(0.0, 1.0) * LAT_H
    };
    c.open_lane(
        top,
        "latency",
        "ok latency",
        "p50 · p99 per bucket\nlog scale",
        Some("s"),
    );
    let _ = write!(
        c.body,
        "<g id=\"latency\"><rect class=\"chartbg\" x=\"{:.1}\" y=\"{top:.1}\" width=\"{plot_w:.1}\" height=\"{LAT_H}\"/>",
        c.gutter
    );
    let mut d = lo;
    while d <= hi * 1.0001 {
        c.scale_tick(y_of(d), top, top + LAT_H, &lat_label(d));
        d *= 10.0;
    }
    for (class, pick, name) in [("p50", 1usize, "p50"), ("p99", 2usize, "p99")] {
        for run in &runs {
            let _ = write!(c.body, "<polyline class=\"lat {class}\" points=\"");
            for o in run.iter() {
                let v = if pick == 1 { o.1 } else { o.2 };
                let _ = write!(c.body, "{:.1},{:.1} ", c.x(o.0), y_of(v));
            }
            let _ = write!(
                c.body,
                "\"><title>{name} of ok latencies per bucket</title></polyline>"
            );
        }
    }
    // The lines' names at their ends, apart when the two ends meet.
    if let Some(last) = oks.last() {
        let (mut y50, mut y99) = (y_of(last.1) + 3.0, y_of(last.2) + 3.0);
        if y50 - y99 < 10.0 {
            let mid = (y50 + y99) / 2.0;
            (y50, y99) = (mid + 5.0, mid - 5.0);
        }
        let x = (c.x(last.0) + 3.0).min(WIDTH - 18.0);
        for (class, y) in [("p50", y50), ("p99", y99)] {
            let _ = write!(
                c.body,
                "<text class=\"lat-name {class}\" x=\"{x:.1}\" y=\"{:.1}\">{class}</text>",
                y.clamp(top + 8.0, top + LAT_H - 1.0)
            );
        }
    }
    for o in &oks {
        let _ = write!(
            c.body,
            "<circle class=\"lat-pt p50\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"1.4\"/>",
            c.x(o.0),
            y_of(o.1)
        );
        let _ = write!(
            c.body,
            "<circle class=\"lat-pt p99\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"1.6\"><title>t≈{:.2}s: p50 {}, p99 {}</title></circle>",
            c.x(o.0),
            y_of(o.2),
            o.0,
            lat_label(o.1),
            lat_label(o.2)
        );
    }
    c.body.push_str("</g>");
    c.close_lane();
    c.y = top + LAT_H + 8.0;
}

fn rate_label(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if v >= 10.0 || v == 0.0 || (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

const DIST_W: f64 = 384.0;
const DIST_H: f64 = 174.0;
const DIST_PLOT_H: f64 = 96.0;
/// The room left of a histogram for its count scale.
const DIST_LEFT: f64 = 30.0;

/// Per lane, the distribution of its ok latencies: a histogram on a log axis (bins 12 % wide),
/// p50 and p99 ticked under it, and each timer suspected while the lane ran drawn where it sits,
/// so a 2 s mode or a SYN-retransmit tail is seen at a glance.
fn distributions(o: &mut String, a: &Analysis) {
    let p = &a.picture;
    if p.distributions.is_empty() {
        return;
    }
    o.push_str("<h2>Ok latencies per lane</h2>\n<p class=\"meta\">How the ok requests' durations spread, on a log axis (each bar 12 % wide; the height is how many requests; a lone request still shows). Dashed lines: timers suspected while the lane ran, where the durations sit.</p>\n");
    let per_row = 3usize;
    let rows = p.distributions.len().div_ceil(per_row);
    let height = rows as f64 * DIST_H + 4.0;
    let _ = write!(
        o,
        "<div class=\"wide\"><svg id=\"distributions\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {WIDTH} {height:.0}\" width=\"{WIDTH}\" height=\"{height:.0}\">"
    );
    for (i, d) in p.distributions.iter().enumerate() {
        let ox = (i % per_row) as f64 * (DIST_W + 8.0) + 4.0;
        let oy = (i / per_row) as f64 * DIST_H + 4.0;
        distribution(o, p, d, ox, oy);
    }
    o.push_str("</svg></div>\n");
}

/// The decades a log axis labels, every `k`-th, so that no two labels come closer than their
/// width: (position, label, anchor). The first label reads rightwards from its line and the last
/// leftwards, so neither runs past the plot into a neighbour's.
fn decade_labels(lo: f64, hi: f64, x_of: impl Fn(f64) -> f64) -> Vec<(f64, String, &'static str)> {
    let mut all = Vec::new();
    let mut dec = lo;
    while dec <= hi * 1.0001 {
        all.push((x_of(dec), lat_label(dec)));
        dec *= 10.0;
    }
    let widest = all
        .iter()
        .map(|(_, l)| l.chars().count() as f64 * SUB_PX)
        .fold(0.0, f64::max);
    let gap = if all.len() > 1 {
        (all[all.len() - 1].0 - all[0].0) / (all.len() - 1) as f64
    } else {
        f64::INFINITY
    };
    // Centred labels need a label's width between centres; the two ends, anchored outwards,
    // need a little more.
    let k = (1..=all.len().max(1))
        .find(|k| gap * *k as f64 >= widest + 8.0)
        .unwrap_or(all.len().max(1));
    let last = all.len().saturating_sub(1);
    all.into_iter()
        .enumerate()
        .filter(|(i, _)| i % k == 0)
        .map(|(i, (x, l))| {
            let anchor = if i == 0 {
                "start"
            } else if i == last {
                "end"
            } else {
                "middle"
            };
            (x, l, anchor)
        })
        .collect()
}

fn distribution(o: &mut String, p: &Picture, d: &Distribution, ox: f64, oy: f64) {
    let g = &p.groups[d.group];
    let marks_hi = d.timers.iter().map(|m| m.seconds).fold(0.0, f64::max);
    let marks_lo = d
        .timers
        .iter()
        .map(|m| m.seconds)
        .fold(f64::INFINITY, f64::min);
    let (lo, hi) = decades(d.min.min(marks_lo), d.max.max(marks_hi));
    let (x0, x1) = (ox + DIST_LEFT, ox + DIST_W - 8.0);
    let plot_top = oy + 32.0;
    let base = plot_top + DIST_PLOT_H;
    let x_of = |v: f64| {
        let f = (v.max(lo).log10() - lo.log10()) / (hi.log10() - lo.log10());
        x0 + f.clamp(0.0, 1.0) * (x1 - x0)
    };
    let summary = format!(
        "{} ok · p50 {} · p99 {} · max {}",
        d.count,
        pct_label("p50", d.p50, d.count),
        pct_label("p99", d.p99, d.count),
        lat_label(d.max)
    );
    // The lane's name and its figures share a line when both fit; else the figures go under it.
    let summary_w = summary.chars().count() as f64 * SUB_PX;
    let room = x1 - ox - 8.0;
    let name = lane_name(g);
    let (name_room, summary_at, anchor) =
        if name.chars().count() as f64 * NAME_PX + 10.0 + summary_w <= room {
            (room - summary_w - 10.0, (x1, oy + 13.0), "end")
        } else {
            (room, (ox + 8.0, oy + 25.0), "start")
        };
    let _ = write!(
        o,
        "<g class=\"dist\" data-lane=\"{}\"><text class=\"lane\" x=\"{:.1}\" y=\"{:.1}\">{}</text><text class=\"sub\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\">{}</text>",
        esc(&g.name),
        ox + 8.0,
        oy + 13.0,
        fitted(&name, name_room, NAME_PX),
        summary_at.0,
        summary_at.1,
        esc(&summary)
    );
    let _ = write!(
        o,
        "<rect class=\"chartbg\" x=\"{x0:.1}\" y=\"{plot_top:.1}\" width=\"{:.1}\" height=\"{DIST_PLOT_H}\"/>",
        x1 - x0
    );
    let mut dec = lo;
    while dec <= hi * 1.0001 {
        let x = x_of(dec);
        let _ = write!(
            o,
            "<line class=\"grid\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{plot_top:.1}\" y2=\"{base:.1}\"/>"
        );
        dec *= 10.0;
    }
    for (x, label, anchor) in decade_labels(lo, hi, x_of) {
        let _ = write!(
            o,
            "<text class=\"tick\" x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\">{label}</text>",
            base + 12.0
        );
    }
    // The count scale, left of the plot: the tallest bar's count and zero.
    let peak = d.bins.iter().map(|b| b.2).max().unwrap_or(1).max(1) as f64;
    for (y, v) in [(plot_top + 8.0, peak as u32), (base, 0)] {
        let _ = write!(
            o,
            "<text class=\"tick count\" x=\"{:.1}\" y=\"{y:.1}\" text-anchor=\"end\">{v}</text>",
            x0 - 3.0
        );
    }
    let _ = write!(
        o,
        "<text class=\"sub lane-axis\" x=\"{x0:.1}\" y=\"{:.1}\">ok latency (log) · bar height = requests</text>",
        base + 37.0
    );
    for &(from, to, n) in &d.bins {
        let (bx0, bx1) = (x_of(from), x_of(to));
        let h = (n as f64 / peak * (DIST_PLOT_H - 4.0)).max(2.0);
        let _ = write!(
            o,
            "<rect class=\"ok bar\" x=\"{bx0:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{h:.1}\"><title>{n} ok between {} and {}</title></rect>",
            base - h,
            (bx1 - bx0).max(1.0),
            lat_label(from),
            lat_label(to)
        );
    }
    // A percentile of too few requests is no mark on the axis; two close marks' names part.
    let marks: Vec<(&str, f64)> = [("p50", d.p50), ("p99", d.p99)]
        .into_iter()
        .filter(|(name, _)| crate::stats::enough(name, d.count))
        .collect();
    let close = marks.len() == 2 && (x_of(marks[1].1) - x_of(marks[0].1)).abs() < 24.0;
    for (i, (name, v)) in marks.iter().enumerate() {
        let x = x_of(*v);
        let (tx, anchor) = match (close, i) {
            (true, 0) => (x - 1.0, "end"),
            (true, _) => (x + 1.0, "start"),
            _ => (x, "middle"),
        };
        let _ = write!(
            o,
            "<path class=\"pct\" d=\"M{x:.1} {base:.1}l-3 5h6z\"><title>{name} {}</title></path><text class=\"tick pct\" x=\"{tx:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\">{name}</text>",
            lat_label(*v),
            base + 24.0
        );
    }
    for (k, m) in d.timers.iter().enumerate() {
        let x = x_of(m.seconds);
        let _ = write!(
            o,
            "<g class=\"timer-mark\"><title>{}</title><line class=\"deadline\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{plot_top:.1}\" y2=\"{base:.1}\"/><text class=\"lbl-deadline\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text></g>",
            esc(&m.text),
            x - 3.0,
            plot_top + 12.0 + 12.0 * k as f64,
            esc(&m.label)
        );
    }
    o.push_str("</g>");
}

/// A level's lane is named by its concurrency, the figure people compare; an observed call's by its
/// method or tool (its heading says where it passed); others by their group.
fn lane_name(g: &Group) -> String {
    match (&g.level_label, &g.observed) {
        (Some(l), _) => l.clone(),
        (None, Some(o)) => o.label.clone(),
        (None, None) => g.name.clone(),
    }
}

/// Above the first lane of observed calls (and wherever the pass-through changes), a row saying
/// whose calls these are: "calls seen by wrap (stdio)".
fn observed_heading<'a>(c: &mut Canvas, current: &mut Option<&'a str>, g: &'a Group) {
    let now = g.observed.as_ref().map(|o| o.heading.as_str());
    if now.is_some() && now != *current {
        let _ = write!(
            c.body,
            "<text class=\"lane observed\" x=\"8\" y=\"{:.1}\">{}</text><line class=\"axis\" x1=\"8\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\"/>",
            c.y + 13.0,
            esc(now.unwrap_or_default()),
            WIDTH - RIGHT,
            c.y + 17.0,
            c.y + 17.0
        );
        c.y += 20.0;
    }
    *current = now;
}

/// Places marker labels on the label rows, most telling first, skipping any that would collide (the
/// glyph and its hover text remain).
fn marker_labels(c: &Canvas, p: &Picture, top: f64, glyph_y: f64) -> String {
    let rank = |k: MarkerKind| match k {
        MarkerKind::TimerDeadline => 0,
        MarkerKind::Exit => 1,
        MarkerKind::Log => 2,
        MarkerKind::Restart | MarkerKind::Fault => 3,
        _ => 4,
    };
    let mut order: Vec<_> = p.markers.iter().collect();
    order.sort_by_key(|m| rank(m.kind));
    let mut taken: Vec<Vec<(f64, f64)>> = vec![Vec::new(); LABEL_ROWS];
    let mut out = String::new();
    for m in order {
        let x = c.x(m.t_s);
        let w = m.label.chars().count() as f64 * 6.3 + 6.0;
        // Labels read rightwards from their line, unless that runs off the chart.
        let (x0, anchor) = if x + w > WIDTH - 2.0 {
            (x - w, "end")
        } else {
            (x, "start")
        };
        let span = (x0 - 2.0, x0 + w);
        let Some(row) =
            (0..LABEL_ROWS).find(|&r| taken[r].iter().all(|&(a, b)| span.1 <= a || span.0 >= b))
        else {
            continue;
        };
        taken[row].push(span);
        let y = top + row as f64 * LABEL_ROW_H + 11.0;
        let class = match (m.kind, m.severity.as_str()) {
            (MarkerKind::TimerDeadline, _) => "lbl-deadline",
            (_, "bad") => "lbl-bad",
            (_, "warn") => "lbl-warn",
            _ => "lbl-info",
        };
        if !matches!(m.kind, MarkerKind::Exit | MarkerKind::TimerDeadline) {
            let _ = write!(
                out,
                "<line class=\"lead\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{:.1}\" y2=\"{:.1}\"/>",
                y + 2.0,
                glyph_y - 5.0
            );
        }
        let tx = if anchor == "end" { x - 3.0 } else { x + 3.0 };
        let _ = write!(
            out,
            "<text class=\"{class}\" x=\"{tx:.1}\" y=\"{y:.1}\" text-anchor=\"{anchor}\"><title>{}</title>{}</text>",
            esc(&m.text),
            esc(&m.label)
        );
    }
    out
}

fn series_chart(c: &mut Canvas, s: &Series) {
    // A lane only for a figure that was sampled.
    if s.points().next().is_none() {
        return;
    }
    let top = c.y;
    let max = s.max();
    let scale = scale_top(max, s.unit);
    let (unit, word) = match s.unit {
        Unit::Bytes => ("bytes", "memory"),
        Unit::Percent => ("%", "percent"),
        Unit::Count => ("count", "count"),
        Unit::Celsius => ("°C", "degrees Celsius"),
        Unit::Watts => ("W", "watts"),
        Unit::Plain => ("plain", "value"),
    };
    c.open_lane(
        top,
        &slug(&s.name),
        &s.name,
        &format!("{word} · max {}", amount(max, s.unit)),
        Some(unit),
    );
    let _ = write!(
        c.body,
        "<rect class=\"chartbg\" x=\"{:.1}\" y=\"{top:.1}\" width=\"{:.1}\" height=\"{CHART_H}\"/>",
        c.gutter,
        c.plot_w()
    );
    let y_of = |v: f64| top + CHART_H - v / scale * (CHART_H - 2.0);
    c.scale_tick(y_of(scale), top, top + CHART_H, &amount(scale, s.unit));
    c.scale_tick(y_of(0.0), top, top + CHART_H, "0");
    for seg in &s.segments {
        if seg.is_empty() {
            continue;
        }
        c.body.push_str("<polyline class=\"series\" points=\"");
        for &(t, v) in seg {
            let _ = write!(c.body, "{:.1},{:.1} ", c.x(t), y_of(v));
        }
        let (lt, lv) = seg[seg.len() - 1];
        let _ = write!(
            c.body,
            "\"><title>{}: last {} at t={lt:.1}s</title></polyline>",
            esc(&s.name),
            amount(lv, s.unit)
        );
    }
    c.close_lane();
    c.y = top + CHART_H + 6.0;
}

/// A resource chart's top: a round figure at or above its peak, round in the unit it is read in
/// (5 MiB, not 5,000,000 bytes).
fn scale_top(max: f64, unit: Unit) -> f64 {
    if max <= 0.0 {
        return 1.0;
    }
    match unit {
        Unit::Bytes => {
            let div = [1024.0 * 1024.0 * 1024.0, 1024.0 * 1024.0, 1024.0]
                .into_iter()
                .find(|d| max >= *d)
                .unwrap_or(1024.0);
            nice_ceil(max / div) * div
        }
        Unit::Percent if max <= 100.0 && max > 50.0 => 100.0,
        _ => nice_ceil(max),
    }
}

/// A figure with its unit, as a person reads it.
fn amount(v: f64, unit: Unit) -> String {
    match unit {
        Unit::Bytes => {
            let mib = v / (1024.0 * 1024.0);
            if mib >= 1024.0 {
                format!("{:.2} GiB", mib / 1024.0)
            } else if mib >= 1.0 {
                format!("{mib:.1} MiB")
            } else {
                format!("{:.0} KiB", v / 1024.0)
            }
        }
        Unit::Percent => format!("{v:.1}%"),
        Unit::Count => format!("{v:.0}"),
        Unit::Celsius => format!("{v:.0} °C"),
        Unit::Watts => format!("{v:.0} W"),
        Unit::Plain => format!("{v}"),
    }
}

/// About ten round tick values from 0 to `end`.
fn ticks(end: f64) -> Vec<f64> {
    let raw = end / 10.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    (0..)
        .map(|i| i as f64 * step)
        .take_while(|t| *t <= end + 1e-9)
        .collect()
}

/// Seconds with as many decimals as the step needs, the same unit on every tick.
fn tick_label(t: f64, step: f64) -> String {
    let decimals = (-step.log10().floor()).max(0.0) as usize;
    format!("{t:.decimals$}s")
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

/// A time cursor that follows the mouse and reads out t; it marks the page as rendered when it ran,
/// which is how the headless-browser test knows the script threw nothing.
const SCRIPT: &str = r#"<script>
(function(){
  var svg=document.getElementById('timeline');
  var line=document.getElementById('cursor'),label=document.getElementById('cursor-t');
  var end=parseFloat(svg.dataset.endS),g=parseFloat(svg.dataset.gutter),w=parseFloat(svg.dataset.plotW);
  svg.addEventListener('mousemove',function(ev){
    var pt=svg.createSVGPoint();pt.x=ev.clientX;pt.y=ev.clientY;
    var p=pt.matrixTransform(svg.getScreenCTM().inverse());
    if(p.x<g||p.x>g+w){line.setAttribute('x1',-10);line.setAttribute('x2',-10);label.textContent='';return;}
    var t=(p.x-g)/w*end;
    line.setAttribute('x1',p.x);line.setAttribute('x2',p.x);
    label.setAttribute('x',p.x+4);label.textContent='t='+t.toFixed(3)+'s';
  });
  document.documentElement.setAttribute('data-witness-rendered','yes');
})();
</script>
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyze::analyze;
    use crate::analyze::tests::{end, exit, loaded, spawn};
    use crate::journal::{ErrorKind, Event, Outcome, Stream};

    fn seed_like() -> Analysis {
        let req = |id, w, start: f64, end: f64, o| {
            (
                end,
                Event::Request {
                    id,
                    group: "L4".into(),
                    worker: w,
                    start_s: start,
                    duration_s: end - start,
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
                },
            )
        };
        let reset = Outcome::Error {
            error: ErrorKind::Reset,
            status: None,
        };
        analyze(&loaded(vec![
            (0.0, spawn(7)),
            req(1, 0, 1.0, 2.5, Outcome::Ok),
            (
                6.0,
                Event::Log {
                    pid: Some(7),
                    stream: Stream::Stderr,
                    line: "[oi] process watchdog: force-exiting after 6s (exit 124) <&>".into(),
                    label: "watchdog".into(),
                    truncated: false,
                    timer_s: Some(6.0),
                },
            ),
            (6.01, exit(7, 124, 6.01, false)),
            req(2, 1, 3.0, 6.02, reset.clone()),
            req(3, 2, 3.5, 6.02, reset),
            (6.5, end()),
        ]))
    }

    #[test]
    fn the_page_is_self_contained_and_shows_the_exit_the_log_line_and_the_suspicion() {
        let html = page(&seed_like());
        for needle in ["http://", "https://", "src=", "<link", "@import"] {
            let outside = html
                .match_indices(needle)
                .any(|(i, _)| !html[..i].ends_with("xmlns=\""));
            assert!(!outside, "the page reaches out with {needle:?}");
        }
        assert!(html.contains(">exit 124</text>"), "an exit label");
        assert!(html.contains("class=\"exit\""), "an unrequested exit line");
        assert!(html.contains("force-exiting after 6s (exit 124) &lt;&amp;&gt;"));
        assert!(html.contains(">6s timer</text>"), "the deadline label");
        assert!(html.contains("class=\"sus\">! pid 7 exited at age 6.01 s"));
        let errors = html.matches("<rect class=\"error\"").count();
        assert_eq!(errors, 2, "the two requests that died at the watchdog");
        assert!(html.contains("<rect class=\"ok\""));
        assert!(!html.contains("class=\"partial\""));
    }

    #[test]
    fn a_partial_run_says_so_at_the_top() {
        let mut a = seed_like();
        a.partial = Some("partial: journal ends at t=6.500s".into());
        let html = page(&a);
        assert!(html
            .contains("<p class=\"partial\" id=\"partial\">partial: journal ends at t=6.500s</p>"));
        assert!(html.contains("<title>witness wrap timeline (partial)</title>"));
    }

    /// The value of `attr="…"` in the first tag that starts with `tag_start`.
    fn attr_of(html: &str, tag_start: &str, attr: &str) -> f64 {
        let tag = html
            .split(tag_start)
            .nth(1)
            .unwrap_or_else(|| panic!("no {tag_start:?} in the page"));
        let v = tag
            .split(&format!(" {attr}=\""))
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or_else(|| panic!("no {attr} in {tag_start:?}"));
        v.parse().unwrap()
    }

    #[test]
    fn the_deadline_line_sits_on_the_6s_tick_where_the_failed_requests_end() {
        // What a reader sees: the dashed deadline stands on the axis's "6s" tick, and the two bars
        // of the requests that died at the watchdog end against it.
        let html = page(&seed_like());
        let tick = html
            .split("<text x=\"")
            .find_map(|t| {
                let (x, rest) = t.split_once('"')?;
                rest.split("</text>")
                    .next()?
                    .ends_with(">6s")
                    .then(|| x.parse::<f64>().ok())?
            })
            .expect("an axis tick labelled 6s");
        let deadline = attr_of(&html, "<line class=\"deadline\"", "x1");
        assert!(
            (deadline - tick).abs() < 0.15,
            "deadline at x={deadline}, the 6s tick at x={tick}"
        );
        let ends: Vec<f64> = html
            .split("<rect class=\"error\"")
            .skip(1)
            .map(|r| {
                let r = format!("<rect{r}");
                attr_of(&r, "<rect", "x") + attr_of(&r, "<rect", "width")
            })
            .collect();
        assert_eq!(ends.len(), 2, "{ends:?}");
        for e in ends {
            assert!(
                (e - deadline).abs() < 5.0,
                "a failed bar ends at x={e}, the deadline at x={deadline}"
            );
        }
    }

    #[test]
    fn a_timer_armed_after_the_start_is_drawn_where_its_words_put_it_not_at_start_plus_timer() {
        // wrap's toy_server with a 6 s watchdog armed 0.68 s after the process started: the words
        // say so, and the dashed deadline stands on the exit, not 0.68 s before it.
        let a = analyze(&loaded(vec![
            (0.0, spawn(7)),
            (
                6.67,
                Event::Log {
                    pid: Some(7),
                    stream: Stream::Stderr,
                    line: "[oi] process watchdog: force-exiting after 6s (exit 124)".into(),
                    label: "watchdog".into(),
                    truncated: false,
                    timer_s: Some(6.0),
                },
            ),
            (6.68, exit(7, 124, 6.68, false)),
            (7.5, end()),
        ]));
        let html = page(&a);
        assert!(
            html.contains("armed about 0.68 s after the process started"),
            "the words"
        );
        let deadline = attr_of(&html, "<line class=\"deadline\"", "x1");
        let exit = attr_of(&html, "<line class=\"exit\"", "x1");
        assert!(
            (deadline - exit).abs() < 0.15,
            "deadline at x={deadline}, the exit at x={exit}"
        );
        assert!(html.contains(
            "a 6s timer armed at t=0.680s, 680ms after pid 7&#39;s start at t=0.000s, fires here"
        ));
    }

    #[test]
    fn the_level_tables_max_is_the_slowest_ok_request_and_give_up_time_has_its_own_column() {
        let a = crate::report::terminal::tests::level_with_a_slow_failure();
        let html = page(&a);
        let row = html
            .split("<tr class=\"bad\"><td class=\"n\">2</td>")
            .nth(1)
            .expect("the level's row")
            .split("</tr>")
            .next()
            .unwrap();
        let cells: Vec<&str> = row
            .split("<td")
            .skip(1)
            .map(|c| c.split('>').nth(1).unwrap().trim_end_matches("</td"))
            .collect();
        // verdict, ok, timeout, error, rejected, ok max, ok p50, ok p99, gave up after, …
        assert_eq!(cells[5], "1.000s", "{row}");
        assert_eq!(cells[8], "6.000s", "{row}");
        assert!(html.contains("<th>ok max</th>"));
    }

    #[test]
    fn tick_labels_keep_one_unit() {
        assert_eq!(tick_label(300.0, 100.0), "300s");
        assert_eq!(tick_label(1.5, 0.5), "1.5s");
        assert_eq!(tick_label(0.04, 0.02), "0.04s");
    }

    #[test]
    fn ticks_are_round() {
        assert_eq!(
            ticks(10.0),
            [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]
        );
        assert_eq!(ticks(95.0)[1], 10.0);
        assert_eq!(ticks(4.2)[1], 0.5);
    }

    /// A lane whose ok requests took either ~5 ms or 2.00 s, and three failures giving up at 2 s.
    fn two_modes() -> Analysis {
        let settings = Event::Settings(crate::journal::Settings {
            load: Some(crate::journal::LoadSettings {
                factor: 1.5,
                cliff_slack_s: 0.05,
                ..Default::default()
            }),
            ..Default::default()
        });
        let mut evs = vec![(0.0, settings), (0.0, spawn(7))];
        let req = |id: u64, start: f64, dur: f64, o: Outcome| {
            (
                start + dur,
                Event::Request {
                    id,
                    group: "L4".into(),
                    worker: (id % 4) as u32,
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
                },
            )
        };
        for i in 0..64u64 {
            let dur = if i % 4 == 0 { 2.004 } else { 0.005 };
            evs.push(req(i, 1.0 + i as f64 * 0.1, dur, Outcome::Ok));
        }
        for i in 64..67u64 {
            let reset = Outcome::Error {
                error: ErrorKind::Reset,
                status: None,
            };
            evs.push(req(i, 3.0, 2.0, reset));
        }
        evs.sort_by(|a, b| a.0.total_cmp(&b.0));
        evs.push((9.0, end()));
        analyze(&loaded(evs))
    }

    /// The x of a value on a distribution's log axis, from the decade lines the chart drew.
    fn x_on_dist(html: &str, v: f64) -> f64 {
        let dist = &html[html.find("<g class=\"dist\"").expect("a distribution")..];
        let ticks: Vec<(f64, f64)> = dist
            .split("<text class=\"tick\" x=\"")
            .skip(1)
            .filter_map(|t| {
                let (x, rest) = t.split_once('"')?;
                let label = rest.split_once('>')?.1.split_once('<')?.0;
                let secs = if let Some(n) = label.strip_suffix("ms") {
                    n.parse::<f64>().ok()? / 1e3
                } else if let Some(n) = label.strip_suffix("µs") {
                    n.parse::<f64>().ok()? / 1e6
                } else {
                    label.strip_suffix('s')?.parse::<f64>().ok()?
                };
                Some((secs, x.parse().ok()?))
            })
            .collect();
        let (a, b) = (ticks[0], ticks[ticks.len() - 1]);
        a.1 + (v.log10() - a.0.log10()) / (b.0.log10() - a.0.log10()) * (b.1 - a.1)
    }

    #[test]
    fn a_lane_s_ok_latencies_are_drawn_on_a_log_axis_with_the_suspected_timer_where_it_sits() {
        let a = two_modes();
        assert!(
            a.suspicions
                .iter()
                .any(|s| s.kind == crate::analyze::SuspicionKind::RequestTimer),
            "{:?}",
            a.suspicions
        );
        let html = page(&a);
        let dist = &html[html
            .find("id=\"distributions\"")
            .expect("the distributions")..];
        assert!(
            // 64 requests are too few for a p99: said as such, and not marked on the axis.
            dist.contains("64 ok · p50 5ms · p99 (n=64) · max 2.0s")
                && !dist.contains("<title>p99 "),
            "{}",
            &dist[..600]
        );
        // Two clusters of bars: 48 near 5 ms, 16 near 2 s.
        assert!(dist.contains("<title>48 ok between"), "{dist}");
        assert!(dist.contains("<title>16 ok between"), "{dist}");
        // The timer is marked at 2 s on the axis.
        let mark = &dist[dist.find("class=\"timer-mark\"").expect("a timer mark")..];
        assert!(mark.contains(">2s timer</text>"), "{}", &mark[..400]);
        let x: f64 = mark
            .split("x1=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let want = x_on_dist(&html, 2.0);
        assert!((x - want).abs() < 1.5, "mark at x={x}, 2 s is at x={want}");
    }

    #[test]
    fn throughput_and_latency_over_time_have_scales() {
        let html = page(&two_modes());
        let tp = &html[html
            .find("<g id=\"throughput\">")
            .expect("a throughput lane")..];
        let tp = &tp[..tp.find("</g></g>").unwrap_or(tp.len())];
        assert!(tp.contains("/s</text>"), "{tp}");
        let lat = &html[html.find("<g id=\"latency\">").expect("a latency lane")..];
        for label in [">1ms</text>", ">10ms</text>", ">1s</text>", ">10s</text>"] {
            assert!(lat.contains(label), "{label} missing from the latency axis");
        }
        assert!(lat.contains("class=\"lat p50\""));
        assert!(lat.contains("class=\"lat p99\""));
    }

    #[test]
    fn lat_labels_keep_short_units() {
        assert_eq!(lat_label(2.0), "2s");
        assert_eq!(lat_label(0.04), "40ms");
        assert_eq!(lat_label(0.0025), "2.5ms");
        assert_eq!(lat_label(0.0001), "100µs");
        assert_eq!(nice_ceil(37.0), 50.0);
        assert_eq!(decades(0.004, 2.1), (1e-3, 10.0));
    }

    #[test]
    fn decade_labels_are_thinned_to_their_width_and_the_ends_read_inwards() {
        // Nine decades on 200 px: every label would touch its neighbour, so every other goes.
        let labels = decade_labels(1e-6, 1e3, |v| (v.log10() + 6.0) / 9.0 * 200.0);
        assert_eq!(labels[0].1, "1µs");
        assert_eq!(labels[0].2, "start");
        assert!(labels.len() < 10, "{labels:?}");
        for w in labels.windows(2) {
            let width = w[0].1.chars().count().max(w[1].1.chars().count()) as f64 * SUB_PX;
            assert!(w[1].0 - w[0].0 >= width, "{labels:?}");
        }
        // Two decades have room: both labelled, each read from the plot's edge inwards.
        let two = decade_labels(1.0, 10.0, |v| v.log10() * 300.0);
        let anchors: Vec<_> = two.iter().map(|l| (l.1.as_str(), l.2)).collect();
        assert_eq!(anchors, [("1s", "start"), ("10s", "end")]);
    }

    #[test]
    fn names_fit_their_room_or_carry_their_whole_text() {
        assert_eq!(fitted("concurrency 8", 200.0, NAME_PX), "concurrency 8");
        let cut = fitted("tools/call get_current_weather", 100.0, NAME_PX);
        assert!(
            cut.starts_with("<title>tools/call get_current_weather</title>tools/call")
                && cut.ends_with('…'),
            "{cut}"
        );
        assert_eq!(slug("server RSS"), "server-rss");
        assert_eq!(slug("GPU0 memory (server)"), "gpu0-memory-server");
        assert_eq!(slug("concurrency 8"), "concurrency-8");
    }

    #[test]
    fn the_legend_explains_the_glyphs_drawn_and_only_those() {
        let html = page(&seed_like());
        let legend = html
            .split("id=\"legend\">")
            .nth(1)
            .unwrap()
            .split("</p>")
            .next()
            .unwrap();
        for g in [
            "data-glyph=\"exit\"",
            "data-glyph=\"deadline\"",
            "data-glyph=\"g-log\"",
            "data-glyph=\"g-spawn\"",
        ] {
            assert!(legend.contains(g), "{g} missing: {legend}");
        }
        assert!(
            !legend.contains("data-glyph=\"probe-bad\""),
            "no failed probe was drawn"
        );
        assert!(
            !legend.contains("data-glyph=\"g-fault\""),
            "no fault was drawn"
        );
    }

    #[test]
    fn a_journal_with_nothing_in_it_still_renders() {
        let html = page(&analyze(&loaded(vec![])));
        assert!(html.contains("no requests in this journal"));
        assert!(html.ends_with("</html>\n"));
    }

    #[test]
    fn calls_wrap_saw_fail_together_are_one_line_on_the_page() {
        let a = analyze(&loaded(
            crate::analyze::observed::tests::cut_off_together_story(),
        ));
        let html = page(&a);
        let fails: Vec<&str> = html
            .lines()
            .filter(|l| l.starts_with("<p class=\"fail\">call"))
            .collect();
        assert_eq!(fails.len(), 2, "{fails:#?}");
        assert!(
            fails[0].starts_with(
                "<p class=\"fail\">calls 3–7 (5) tools/call slow: connection closed after 1.960–2.000s: server pid 1234"
            ),
            "{fails:#?}"
        );
    }

    #[test]
    fn observed_calls_get_their_own_table_and_lanes_under_the_wrap_heading() {
        let a = analyze(&loaded(crate::analyze::observed::tests::watchdog_story()));
        let html = page(&a);
        assert!(html.contains("<h2 class=\"observed\">Calls seen by wrap (stdio)</h2>"));
        let row = html
            .split("<tr class=\"bad\"><td>tools/call slow</td>")
            .nth(1)
            .expect("the tool's row, red for its failed call")
            .split("</tr>")
            .next()
            .unwrap();
        assert!(
            row.starts_with("<td class=\"n\">6</td><td class=\"n\">5</td><td class=\"n\">1</td>"),
            "{row}"
        );
        assert!(row.contains("connection closed 1 after 840ms"), "{row}");
        assert!(html.contains("<p class=\"fail\">call 6 tools/call slow: connection closed after 840ms: server pid 1234 exited with 124"));
        // The lanes: a heading row, then one lane per tool named by the tool, not its group.
        assert!(
            html.contains(">calls seen by wrap (stdio)</text>"),
            "the lanes' heading"
        );
        assert!(html.contains("<text class=\"lane\" x=\"8\" y=\""));
        assert!(html.contains(">tools/call slow</text>"));
        assert!(html.contains(">6 calls · one client</text>"));
        assert!(!html.contains(">stdio tools/call slow</text>"));
        assert!(
            !html.contains("<h2>Requests</h2>"),
            "no second table of the same calls"
        );
        assert_eq!(html.matches("<rect class=\"error\"").count(), 1);
        assert_eq!(html.matches("<rect class=\"ok\"").count(), 5);
    }
}
