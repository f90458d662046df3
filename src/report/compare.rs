//! The views of `witness compare` (terminal, JSON, HTML, JUnit, GitHub step summary): one
//! [`Comparison`], one decision per figure, the same words in each.

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
use serde::Serialize;

use super::esc;
use crate::analyze::compare::{
    interval_words, p_words, percent, signed_percent, Comparison, FigureCmp, GroupCmp, SideRow,
};
use crate::units::took;

/// How the tests behind every verdict are named, once per view.
pub fn method_words(c: &Comparison) -> String {
    format!(
        "latency: {} over every ok request's duration, a change when p < {} and larger than the {} noise allowance; each percentile with its 95 % distribution-free interval, a change when the two are apart and past the allowance; failure rates: {}, p < {}",
        c.test,
        c.alpha,
        percent(c.noise),
        c.rate_test,
        c.alpha
    )
}

fn run_line(tag: &str, r: &crate::analyze::compare::RunInfo) -> String {
    let started = r
        .started_at
        .split('.')
        .next()
        .unwrap_or(&r.started_at)
        .replace('T', " ");
    format!(
        "  {tag:<8} {}{} — {} run, {started} UTC, {}{}\n",
        r.label,
        r.name
            .as_ref()
            .filter(|n| !r.label.contains(&format!("the latest run named {n}")))
            .map(|n| format!(" (name {n})"))
            .unwrap_or_default(),
        r.mode,
        r.verdict,
        if r.command.is_empty() {
            String::new()
        } else {
            format!(": {}", r.command.join(" "))
        }
    )
}

fn side_words(s: Option<&SideRow>) -> String {
    match s {
        None => "not run".into(),
        Some(s) => format!(
            "{} sent, {} ok, {} failed ({}){}{}",
            s.sent,
            s.ok,
            s.failed,
            percent(s.error_rate),
            if s.rejected > 0 {
                format!(", {} refused for capacity", s.rejected)
            } else {
                String::new()
            },
            s.rps.map(|r| format!(", {r:.1} ok/s")).unwrap_or_default()
        ),
    }
}

fn figure_line(f: &FigureCmp) -> String {
    let side = |i: &Option<crate::rank::Interval>| {
        i.as_ref()
            .map(|i| format!("{} {}", took(i.value), interval_words(i)))
            .unwrap_or_else(|| "-".into())
    };
    match (&f.base, &f.current) {
        (Some(_), Some(_)) => format!(
            "    {:<4} {} → {}  {}  {}\n",
            f.figure,
            side(&f.base),
            side(&f.current),
            f.change.map(signed_percent).unwrap_or_default(),
            mark(&f.verdict)
        ),
        _ => format!("    {:<4} {}: {}\n", f.figure, f.verdict, f.why),
    }
}

/// A verdict as the tables show it.
fn mark(v: &str) -> String {
    match v {
        "slower" => "SLOWER".into(),
        "faster" => "faster".into(),
        "no significant change" => "~ no significant change".into(),
        other => other.into(),
    }
}

fn group_text(o: &mut String, g: &GroupCmp) {
    o.push_str(&format!("{}\n", g.title()));
    o.push_str(&format!(
        "  requests  BASE {}\n            CURRENT {}\n",
        side_words(g.base.as_ref()),
        side_words(g.current.as_ref())
    ));
    if g.base.is_none() || g.current.is_none() {
        o.push_str(&format!("  {}: {}\n", g.latency, g.latency_why));
        return;
    }
    o.push_str(&format!(
        "  latency   {}: {}\n",
        mark(&g.latency),
        g.latency_why
    ));
    for f in &g.figures {
        o.push_str(&figure_line(f));
    }
    if let Some(e) = &g.errors {
        if e.base > 0.0 || e.current > 0.0 {
            o.push_str(&format!(
                "  failures  {} → {}: {}{}\n",
                percent(e.base),
                percent(e.current),
                if e.verdict == "more" {
                    "MORE"
                } else {
                    &e.verdict
                },
                e.p_value
                    .map(|p| format!(" ({})", p_words(p)))
                    .unwrap_or_default()
            ));
        }
    }
    if let Some(e) = &g.rejections {
        if e.base > 0.0 || e.current > 0.0 {
            o.push_str(&format!(
                "  refused for capacity  {} → {}: {}\n",
                percent(e.base),
                percent(e.current),
                e.verdict
            ));
        }
    }
}

/// The terminal view.
pub fn text(c: &Comparison) -> String {
    let mut o = String::from("witness compare\n");
    o.push_str(&run_line("BASE", &c.base));
    o.push_str(&run_line("CURRENT", &c.current));
    for d in &c.made_differently {
        o.push_str(&format!("  made differently: {d}\n"));
    }
    o.push('\n');
    if c.groups.is_empty() {
        o.push_str("nothing to compare figure by figure: neither run has a level, a soak kind or a call wrap saw\n\n");
    }
    for g in &c.groups {
        group_text(&mut o, g);
        o.push('\n');
    }
    if c.story.is_empty() {
        o.push_str("what happened: the same (no timer, restart, exit, new failure or process tree of one run that the other lacks)\n");
    } else {
        o.push_str("what happened differently:\n");
        for s in &c.story {
            o.push_str(&format!(
                "  {} {}\n",
                if s.worse { "✗" } else { "·" },
                s.text
            ));
            if let Some(e) = &s.evidence {
                o.push_str(&format!("      evidence: {}\n", cut(e, 400)));
            }
        }
    }
    if !c.asserts.is_empty() {
        o.push_str("thresholds:\n");
        for j in &c.asserts {
            o.push_str(&format!("  {}\n", j.line()));
        }
    }
    o.push('\n');
    o.push_str(&format!("verdict: {}\n", verdict_words(c)));
    o.push_str(&format!("  how: {}\n", method_words(c)));
    o
}

/// At most `n` characters of `s`, "…" where it was cut.
fn cut(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n).collect();
        t.push('…');
        t
    }
}

/// "NO SIGNIFICANT CHANGE", "WORSE: level 8: p99 slower (…); …".
pub fn verdict_words(c: &Comparison) -> String {
    let broken: Vec<String> = c
        .asserts
        .iter()
        .filter(|j| !j.ok)
        .map(|j| format!("threshold broken: {}", j.line()))
        .collect();
    let mut why: Vec<String> = c.worse.clone();
    why.extend(broken);
    let head = c.verdict.to_uppercase();
    if !why.is_empty() {
        format!("{head} — {}", why.join("; "))
    } else if !c.better.is_empty() {
        format!("{head} — {}", c.better.join("; "))
    } else {
        head
    }
}

#[derive(Serialize)]
struct Json<'a> {
    kind: &'static str,
    #[serde(flatten)]
    comparison: &'a Comparison,
}

/// The JSON view: the comparison as data.
pub fn json(c: &Comparison) -> anyhow::Result<Vec<u8>> {
    let mut v = serde_json::to_vec_pretty(&Json {
        kind: "comparison",
        comparison: c,
    })?;
    v.push(b'\n');
    Ok(v)
}

/// The GitHub Actions step summary.
pub fn markdown(c: &Comparison) -> String {
    let cell = |s: &str| s.replace('|', "\\|").replace('\n', " ");
    let mut o = format!(
        "## witness compare: {}\n\nBASE `{}` ({}), CURRENT `{}` ({})\n\n",
        c.verdict.to_uppercase(),
        cell(&c.base.label),
        c.base.verdict,
        cell(&c.current.label),
        c.current.verdict
    );
    o.push_str(
        "| | requests | failed | p50 | p95 | p99 | latency |\n|---|---:|---:|---:|---:|---:|---|\n",
    );
    for g in &c.groups {
        let fig = |name: &str| {
            g.figures
                .iter()
                .find(|f| f.figure == name)
                .map(|f| match (&f.base, &f.current) {
                    (Some(a), Some(b)) => format!(
                        "{} → {} {}",
                        took(a.value),
                        took(b.value),
                        if f.verdict == "slower" {
                            "**slower**".to_string()
                        } else if f.verdict == "faster" {
                            "faster".into()
                        } else {
                            "~".into()
                        }
                    ),
                    _ => f.verdict.clone(),
                })
                .unwrap_or_else(|| "-".into())
        };
        let n = |s: Option<&SideRow>| s.map(|s| s.sent.to_string()).unwrap_or("-".into());
        let e = |s: Option<&SideRow>| s.map(|s| percent(s.error_rate)).unwrap_or("-".into());
        o.push_str(&format!(
            "| {} | {} → {} | {} → {} | {} | {} | {} | {} |\n",
            cell(&g.title()),
            n(g.base.as_ref()),
            n(g.current.as_ref()),
            e(g.base.as_ref()),
            e(g.current.as_ref()),
            fig("p50"),
            fig("p95"),
            fig("p99"),
            cell(&g.latency)
        ));
    }
    o.push('\n');
    for s in &c.story {
        o.push_str(&format!(
            "- {} {}\n",
            if s.worse { "✗" } else { "·" },
            cell(&s.text)
        ));
    }
    for j in &c.asserts {
        o.push_str(&format!("- {}\n", cell(&j.line())));
    }
    o.push('\n');
    o
}

/// The JUnit view: a case per group's latency, per percentile, per failure rate, per change in
/// the story that makes CURRENT worse, and per threshold.
pub fn junit(c: &Comparison) -> anyhow::Result<Vec<u8>> {
    let mut suite = TestSuite::new("witness compare");
    let case = |name: String, failed: bool, why: String| {
        let status = if failed {
            let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
            s.set_message(why);
            s
        } else {
            TestCaseStatus::success()
        };
        TestCase::new(name, status)
    };
    for g in &c.groups {
        let t = g.title();
        suite.add_test_case(case(
            format!("{t} latency"),
            g.latency == "slower",
            format!("{}: {}", g.latency.to_uppercase(), g.latency_why),
        ));
        for f in &g.figures {
            suite.add_test_case(case(
                format!("{t} {}", f.figure),
                f.verdict == "slower",
                format!("{}: {}", f.verdict.to_uppercase(), f.why),
            ));
        }
        if let Some(e) = &g.errors {
            suite.add_test_case(case(
                format!("{t} failure rate"),
                e.verdict == "more",
                format!(
                    "{}: {} → {}",
                    e.verdict.to_uppercase(),
                    percent(e.base),
                    percent(e.current)
                ),
            ));
        }
    }
    for s in c.story.iter().filter(|s| s.worse) {
        suite.add_test_case(case(
            format!("what happened: {}", s.about),
            true,
            s.text.clone(),
        ));
    }
    for j in &c.asserts {
        suite.add_test_case(case(format!("assert {}", j.expr), !j.ok, j.line()));
    }
    let mut report = Report::new("witness");
    report.add_test_suite(suite);
    Ok(report.to_string()?.into_bytes())
}

/// Where a duration sits on the HTML's shared log axis (0..1), between `lo` and `hi`.
fn at(x: f64, lo: f64, hi: f64) -> f64 {
    let (x, lo, hi) = (x.max(1e-7), lo.max(1e-7), hi.max(2e-7));
    ((x.ln() - lo.ln()) / (hi.ln() - lo.ln())).clamp(0.0, 1.0)
}

/// The HTML view: one self-contained page. Both runs' levels aligned row by row, each a strip on
/// one log axis of duration (the p50's interval as a box, the p95 and p99 as ticks, BASE above
/// CURRENT), then the figures, what happened differently, the thresholds and the verdict.
pub fn html(c: &Comparison) -> String {
    let mut o = String::new();
    o.push_str("<!doctype html><html><head><meta charset=\"utf-8\"><title>witness compare</title><style>body{font:14px system-ui,sans-serif;margin:24px;color:#222}table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}th{background:#f4f4f4}.worse{color:#b00020;font-weight:600}.better{color:#1b7f3b}.same{color:#555}svg text{font:11px system-ui,sans-serif}</style></head><body>");
    o.push_str(&format!(
        "<h1>witness compare: <span class=\"{}\" id=\"verdict\">{}</span></h1>",
        match c.verdict.as_str() {
            "worse" => "worse",
            "better" => "better",
            _ => "same",
        },
        esc(&c.verdict.to_uppercase())
    ));
    o.push_str("<table>");
    for (tag, r) in [("BASE", &c.base), ("CURRENT", &c.current)] {
        o.push_str(&format!(
            "<tr><th>{tag}</th><td>{}{}</td><td>{} run</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&r.label),
            r.name
                .as_ref()
                .map(|n| format!(" (name {})", esc(n)))
                .unwrap_or_default(),
            esc(&r.mode),
            esc(&r.started_at),
            esc(&r.verdict),
            esc(&r.command.join(" "))
        ));
    }
    o.push_str("</table>");
    for d in &c.made_differently {
        o.push_str(&format!("<p>Made differently: {}</p>", esc(d)));
    }
    // The aligned strips.
    let mut lo = f64::INFINITY;
    let mut hi: f64 = 0.0;
    for g in &c.groups {
        for s in [&g.base, &g.current].into_iter().flatten() {
            if let Some(l) = &s.latency {
                lo = lo.min(l.min);
                hi = hi.max(l.max);
            }
        }
    }
    if hi > 0.0 && lo.is_finite() {
        let (lo, hi) = (lo * 0.8, hi * 1.25);
        let w = 640.0;
        let left = 150.0;
        let row = 18.0;
        let height = 30.0 + c.groups.len() as f64 * (2.0 * row + 10.0);
        o.push_str(&format!(
            "<h2>Latency, level by level</h2><svg id=\"strips\" width=\"{}\" height=\"{height}\" role=\"img\" aria-label=\"ok requests' durations of BASE and CURRENT per level\">",
            left + w + 20.0
        ));
        // The axis: decades between lo and hi.
        let mut tick = 10f64.powf(lo.log10().floor());
        while tick <= hi {
            if tick >= lo {
                let x = left + at(tick, lo, hi) * w;
                o.push_str(&format!(
                    "<line x1=\"{x:.1}\" y1=\"14\" x2=\"{x:.1}\" y2=\"{height}\" stroke=\"#eee\"/><text x=\"{x:.1}\" y=\"11\" text-anchor=\"middle\">{}</text>",
                    esc(&took(tick))
                ));
            }
            tick *= 10.0;
        }
        let mut y = 24.0;
        for g in &c.groups {
            o.push_str(&format!(
                "<text x=\"4\" y=\"{:.1}\" class=\"{}\">{}</text>",
                y + row,
                if g.latency == "slower" {
                    "worse"
                } else {
                    "same"
                },
                esc(&g.title())
            ));
            for (tag, s, colour) in [
                ("BASE", &g.base, "#888"),
                ("CURRENT", &g.current, "#1f5fbf"),
            ] {
                if let Some(l) = s.as_ref().and_then(|s| s.latency.as_ref()) {
                    let x = |v: f64| left + at(v, lo, hi) * w;
                    let p50i = g.figures.iter().find(|f| f.figure == "p50").and_then(|f| {
                        if tag == "BASE" {
                            f.base.as_ref()
                        } else {
                            f.current.as_ref()
                        }
                    });
                    o.push_str(&format!(
                        "<g data-run=\"{tag}\" data-group=\"{}\"><title>{tag} {}: p50 {}, p95 {}, p99 {}, max {} (n={})</title><line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"{colour}\"/>",
                        esc(&g.name),
                        esc(&g.title()),
                        took(l.p50),
                        took(l.p95),
                        took(l.p99),
                        took(l.max),
                        l.count,
                        x(l.min),
                        y + row / 2.0,
                        x(l.max),
                        y + row / 2.0
                    ));
                    if let Some(i) = p50i {
                        o.push_str(&format!(
                            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{colour}\" opacity=\"0.5\"/>",
                            x(i.low),
                            y + 3.0,
                            (x(i.high) - x(i.low)).max(2.0),
                            row - 6.0
                        ));
                    }
                    for v in [l.p50, l.p95, l.p99] {
                        o.push_str(&format!(
                            "<line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"{colour}\" stroke-width=\"2\"/>",
                            x(v),
                            y + 1.0,
                            x(v),
                            y + row - 1.0
                        ));
                    }
                    o.push_str(&format!(
                        "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"{colour}\">{tag}</text></g>",
                        left + w + 4.0,
                        y + row - 5.0
                    ));
                }
                y += row;
            }
            y += 10.0;
        }
        o.push_str("</svg><p class=\"same\">Each strip: min to max of the ok requests; the box is the p50's 95 % interval; ticks at p50, p95 and p99. BASE grey, CURRENT blue.</p>");
    }
    o.push_str("<h2>Figures</h2><table id=\"figures\"><tr><th></th><th>requests</th><th>failed</th><th>figure</th><th>BASE</th><th>CURRENT</th><th>change</th><th>verdict</th></tr>");
    for g in &c.groups {
        let n = |s: Option<&SideRow>| s.map(|s| s.sent.to_string()).unwrap_or("-".into());
        let e = |s: Option<&SideRow>| s.map(|s| percent(s.error_rate)).unwrap_or("-".into());
        let rows = g.figures.len().max(1) + 1;
        o.push_str(&format!(
            "<tr data-group=\"{}\"><th rowspan=\"{rows}\">{}</th><td rowspan=\"{rows}\">{} → {}</td><td rowspan=\"{rows}\">{} → {}</td><td>latency</td><td colspan=\"3\">{}</td><td class=\"{}\">{}</td></tr>",
            esc(&g.name),
            esc(&g.title()),
            n(g.base.as_ref()),
            n(g.current.as_ref()),
            e(g.base.as_ref()),
            e(g.current.as_ref()),
            esc(&g.latency_why),
            class(&g.latency),
            esc(&g.latency)
        ));
        for f in &g.figures {
            let side = |i: &Option<crate::rank::Interval>| {
                i.as_ref()
                    .map(|i| format!("{} {}", took(i.value), interval_words(i)))
                    .unwrap_or_else(|| "-".into())
            };
            o.push_str(&format!(
                "<tr data-figure=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"{}\" title=\"{}\">{}</td></tr>",
                f.figure,
                f.figure,
                esc(&side(&f.base)),
                esc(&side(&f.current)),
                f.change.map(signed_percent).unwrap_or_default(),
                class(&f.verdict),
                esc(&f.why),
                esc(&f.verdict)
            ));
        }
        if g.figures.is_empty() {
            o.push_str("<tr><td colspan=\"5\"></td></tr>");
        }
    }
    o.push_str("</table>");
    o.push_str("<h2>What happened differently</h2><ul id=\"story\">");
    if c.story.is_empty() {
        o.push_str("<li class=\"same\">the same: no timer, restart, exit, new failure or process tree of one run that the other lacks</li>");
    }
    for s in &c.story {
        o.push_str(&format!(
            "<li class=\"{}\" data-about=\"{}\">{}{}</li>",
            if s.worse { "worse" } else { "same" },
            s.about,
            esc(&s.text),
            s.evidence
                .as_ref()
                .map(|e| format!("<br><small>evidence: {}</small>", esc(e)))
                .unwrap_or_default()
        ));
    }
    o.push_str("</ul>");
    if !c.asserts.is_empty() {
        o.push_str("<h2>Thresholds</h2><ul id=\"asserts\">");
        for j in &c.asserts {
            o.push_str(&format!(
                "<li class=\"{}\">{}</li>",
                if j.ok { "better" } else { "worse" },
                esc(&j.line())
            ));
        }
        o.push_str("</ul>");
    }
    o.push_str(&format!(
        "<h2>Verdict</h2><p>{}</p><p class=\"same\">How: {}</p></body></html>\n",
        esc(&verdict_words(c)),
        esc(&method_words(c))
    ));
    o
}

fn class(verdict: &str) -> &'static str {
    match verdict {
        "slower" | "more" => "worse",
        "faster" | "fewer" => "better",
        _ => "same",
    }
}
