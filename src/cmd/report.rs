//! `witness report JOURNAL`: re-render any past run, finished or cut off.

use std::io::Write;

use crate::cli::{ReportArgs, ReportFormat};
use crate::report::{self, View};

pub fn run(args: ReportArgs) -> anyhow::Result<i32> {
    let loaded = crate::journal::read(&args.journal)?;
    let analysis = crate::analyze::analyze(&loaded);
    let view: Box<dyn View> = match args.format {
        ReportFormat::Text => Box::new(report::terminal::Terminal { colour: false }),
        ReportFormat::Json => Box::new(report::json::Json),
    };
    match &args.output {
        Some(path) => report::write_file(view.as_ref(), &analysis, path, "-o")?,
        None => std::io::stdout().write_all(&view.render(&analysis)?)?,
    }
    Ok(0)
}
