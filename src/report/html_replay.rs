//! `witness replay` in the HTML report: the speed that held and why the next failed, the answers
//! that differed from the recording per kind of call, and the recorded session's pacing beside
//! each speed's (sends per slice of the recording's time, so the rows line up).

use super::esc;
use std::fmt::Write;

use crate::analyze::answers::ReplayAnalysis;
use crate::analyze::Analysis;
use crate::journal::{secs, speed_words};

/// The replay's section, when the run was a replay.
pub fn section(o: &mut String, a: &Analysis) {
    let Some(r) = &a.replay else { return };
    let _ = writeln!(
        o,
        "<h2 class=\"replay\" id=\"replay\">Replay of {}</h2>\n<p class=\"replay-words\"><b>{}</b></p>\n<p class=\"meta\">{} ({}): {} call{} over {} as recorded; answers compared by {}; {}</p>",
        esc(&r.file),
        esc(&r.words),
        esc(&r.file),
        esc(&r.transport),
        r.calls,
        if r.calls == 1 { "" } else { "s" },
        secs(r.span_s),
        esc(&r.compare),
        esc(&r.sessions_how)
    );
    for n in &r.notes {
        let _ = writeln!(o, "<p class=\"note\">{}</p>", esc(n));
    }
    answers(o, r);
    pacing(o, r);
}

fn answers(o: &mut String, r: &ReplayAnalysis) {
    o.push_str("<table class=\"replay-answers\"><tr><th>speed</th><th>verdict</th><th>call</th><th>p99</th><th>recorded p99</th><th>answers compared</th><th>differed</th><th>first differences</th></tr>\n");
    for s in &r.speeds {
        for (i, n) in s.latency.iter().enumerate() {
            let a = s.answers.iter().find(|a| a.name == n.name);
            let first = a
                .map(|a| {
                    a.first
                        .iter()
                        .map(|d| esc(d))
                        .collect::<Vec<_>>()
                        .join("<br>")
                })
                .unwrap_or_default();
            let _ = writeln!(
                o,
                "<tr class=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&s.verdict),
                if i == 0 { speed_words(s.speed) } else { String::new() },
                if i == 0 { esc(&s.verdict) } else { String::new() },
                esc(&n.name),
                n.p99_s.map(secs).unwrap_or_else(|| "–".into()),
                n.recorded_p99_s.map(secs).unwrap_or_else(|| "–".into()),
                a.map_or(0, |a| a.compared),
                a.map_or(0, |a| a.differed),
                first
            );
        }
    }
    o.push_str("</table>\n");
}

/// One row of bars per speed under the recording's own: each bar is the sends in one slice of the
/// recording's time (a call sent late at a speed lands in a later slice).
fn pacing(o: &mut String, r: &ReplayAnalysis) {
    let rows: Vec<(String, &[u32])> = std::iter::once(("recorded".to_string(), &r.pacing[..]))
        .chain(
            r.speeds
                .iter()
                .map(|s| (speed_words(s.speed), &s.pacing[..])),
        )
        .collect();
    let n = r.pacing.len().max(1);
    let top = rows
        .iter()
        .flat_map(|(_, p)| p.iter().copied())
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let (left, width, row_h) = (90.0, 600.0, 28.0);
    let h = row_h * rows.len() as f64 + 30.0;
    let _ = writeln!(
        o,
        "<h3>Pacing: sends per {} of the recording's time</h3>\n<svg class=\"replay-pacing\" width=\"{}\" height=\"{h:.0}\" role=\"img\"><title>the recorded session's pacing beside each speed's</title>",
        secs(r.bucket_s),
        left + width + 10.0
    );
    let bw = width / n as f64;
    for (k, (name, p)) in rows.iter().enumerate() {
        let y0 = row_h * k as f64 + 4.0;
        let _ = write!(
            o,
            "<text x=\"4\" y=\"{:.1}\">{}</text>",
            y0 + row_h * 0.6,
            esc(name)
        );
        for (i, &c) in p.iter().enumerate().filter(|(_, c)| **c > 0) {
            let bh = (row_h - 6.0) * c as f64 / top;
            let _ = write!(
                o,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{bh:.1}\"><title>{c} sent</title></rect>",
                left + bw * i as f64,
                y0 + row_h - 6.0 - bh,
                (bw - 1.0).max(1.0)
            );
        }
    }
    let axis_y = row_h * rows.len() as f64 + 18.0;
    let _ = writeln!(
        o,
        "<text x=\"{left}\" y=\"{axis_y:.0}\">0 s</text><text x=\"{:.0}\" y=\"{axis_y:.0}\" text-anchor=\"end\">{} (recorded time)</text></svg>",
        left + width,
        secs(r.bucket_s * n as f64)
    );
}
