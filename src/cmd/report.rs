//! `witness report JOURNAL`: re-render any past run, finished or cut off, in any view.

use std::io::{IsTerminal, Write};

use crate::cli::{ReportArgs, ReportFormat};
use crate::report::{self, View};

pub fn run(args: ReportArgs) -> anyhow::Result<i32> {
    // A missing or unreadable file is the user's to fix (exit 2), like any other bad input.
    let loaded =
        crate::journal::read(&args.journal).map_err(|e| crate::error::usage(format!("{e:#}")))?;
    for s in &loaded.skipped {
        eprintln!(
            "witness: {}: skipped an unreadable {s}",
            args.journal.display()
        );
    }
    let analysis = crate::analyze::analyze(&loaded);
    let to_terminal = args.output.is_none() && std::io::stdout().is_terminal();
    let view: Box<dyn View> = match args.format {
        ReportFormat::Text => Box::new(report::terminal::Terminal {
            colour: to_terminal && std::env::var_os("NO_COLOR").is_none(),
        }),
        ReportFormat::Json => Box::new(report::json::Json),
        ReportFormat::Html => Box::new(report::html::Html),
        ReportFormat::Trace => Box::new(report::trace::Trace),
    };
    match &args.output {
        Some(path) => {
            // Where the user asked it to go: a path that cannot be written is theirs to fix (2).
            report::write_file(view.as_ref(), &analysis, path, "-o")
                .map_err(|e| crate::error::usage(format!("{e:#}")))?;
            if let Some(p) = &analysis.partial {
                eprintln!("witness: {p}");
            }
        }
        None => std::io::stdout().write_all(&view.render(&analysis)?)?,
    }
    Ok(0)
}
