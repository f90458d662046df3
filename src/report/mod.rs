//! Views: each output format is one file behind [`View`], rendering what `analyze` returned. A view
//! never computes a verdict.

pub mod html;
pub mod json;
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

/// Bytes for humans, in binary units as memory is sold: "512 B", "1.5 MiB", "79.6 GiB".
pub fn bytes(b: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b;
    let mut u = 0;
    while v.abs() >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}
