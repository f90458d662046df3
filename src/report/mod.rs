//! Views: each output format is one file behind [`View`], rendering what `analyze` returned. A view
//! never computes a verdict.

pub mod agent;
pub mod compare;
pub mod html;
pub mod html_replay;
pub mod json;
pub mod junit;
pub mod markdown;
pub mod terminal;
pub mod trace;

use std::path::Path;

use anyhow::Context;

use crate::analyze::Analysis;

/// One output format.
pub trait View {
    fn render(&self, analysis: &Analysis) -> anyhow::Result<Vec<u8>>;
}

/// Renders a view into a file, replacing it whole (written beside it under a new name of witness's
/// own, then renamed; never through a link), so a reader never sees half a report.
pub fn write_file(
    view: &dyn View,
    analysis: &Analysis,
    path: &Path,
    flag: &str,
) -> anyhow::Result<()> {
    let bytes = view.render(analysis)?;
    crate::files::replace(path, &bytes)
        .with_context(|| format!("writing {} ({flag})", path.display()))
}

pub use crate::journal::bytes;

/// A soak's memory slope as every view says it (" (+61.1 KiB/s)"), or nothing beside "too few
/// samples": a slope from too few readings means nothing.
pub fn memory_slope(m: &crate::analyze::soak::MemoryTrend) -> String {
    if m.class == crate::analyze::trend::TrendClass::TooFewSamples {
        return String::new();
    }
    format!(
        " ({}{}/s)",
        if m.slope_bytes_per_s >= 0.0 { "+" } else { "-" },
        bytes(m.slope_bytes_per_s.abs())
    )
}

/// Escapes text for HTML and SVG, attributes included.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => o.push('\u{FFFD}'),
            c => o.push(c),
        }
    }
    o
}

#[cfg(test)]
mod tests {
    // Views render what analysis returned: the analysis is built by analyze's own test helpers, and
    // the rendering is checked here, on the view's side of the line (analysis never imports a view).
    use crate::analyze::tcp_timers::tests::{level, req};

    #[test]
    fn the_html_shows_each_level_s_phases_and_marks_the_retransmission_on_its_distribution() {
        let mut reqs = Vec::new();
        for i in 0..8 {
            reqs.push(req(i, 1.0, 0.002, Some(0.0003), Some(0.0015)));
        }
        for i in 8..14 {
            reqs.push(req(i, 2.0, 1.2, Some(1.0081 + i as f64 * 1e-4), Some(1.2)));
        }
        let a = level(reqs, (353, 364));
        let html = super::html::page(&a);
        assert!(
            html.contains("<p class=\"meta phases\">phases (n=16): connect p50"),
            "no phases line"
        );
        let dist = &html[html.find("id=\"distributions\"").expect("a distribution")..];
        assert!(
            dist.contains(">1s timer</text>"),
            "no SYN mark on the level's distribution"
        );
    }
}
