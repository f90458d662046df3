//! Views: each output format is one file behind [`View`], rendering what `analyze` returned. A view
//! never computes a verdict.

pub mod html;
pub mod html_replay;
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

pub use crate::journal::bytes;
