//! `witness report JOURNAL…`: re-render any past run, finished or cut off, in any view; several
//! journals and k6 results are first put on one clock (`sources::merge`) and analysed as one run.

use std::io::IsTerminal;

use crate::cli::{ReportArgs, ReportFormat};
use crate::report::{self, View};

pub fn run(mut args: ReportArgs) -> anyhow::Result<i32> {
    if args.list {
        return list();
    }
    if args.journals.is_empty() && args.k6.is_empty() {
        args.journals.push(latest(args.last.unwrap_or(1))?);
    }
    let format = args.format.unwrap_or_else(|| match &args.output {
        Some(p) if p.extension().is_some_and(|e| e == "jsonl") => ReportFormat::Journal,
        _ => ReportFormat::Text,
    });
    let merging = args.journals.len() != 1
        || !args.k6.is_empty()
        || !args.clock_offset.is_empty()
        || format == ReportFormat::Journal;
    let analysis = if merging {
        if format == ReportFormat::Journal {
            return write_journal(merge(&args)?, args.output.as_deref());
        }
        let merged = crate::sources::MergedReplay::open(&specs(&args)?, std::env::args().collect())
            .map_err(|e| crate::error::usage(format!("{e:#}")))?;
        let analysis = crate::analyze::analyze(&merged);
        for text in reading_notes(&analysis) {
            crate::errln!("witness: {text}");
        }
        analysis
    } else {
        let journal = &args.journals[0];
        if args.follow {
            follow(journal);
        }
        let file = crate::sources::journal::JournalFile::open(journal)
            .map_err(|e| crate::error::usage(format!("{e:#}")))?;
        let mut analysis = crate::analyze::analyze(&file);
        for text in reading_notes(&analysis) {
            crate::errln!("witness: {}: {text}", journal.display());
        }
        // A run still going is live, not cut off: what its journal holds so far.
        if let Some(pid) = crate::runs::live(journal) {
            crate::analyze::still_running(&mut analysis, pid);
            crate::errln!(
                "witness: {} is a run still going (witness pid {pid}): this is its journal so far; `witness report --follow` waits for its end",
                journal.display()
            );
        }
        analysis
    };
    let to_terminal = args.output.is_none() && std::io::stdout().is_terminal();
    let view: Box<dyn View> = match format {
        ReportFormat::Text => Box::new(report::terminal::Terminal {
            colour: to_terminal && std::env::var_os("NO_COLOR").is_none(),
            ..Default::default()
        }),
        ReportFormat::Json => Box::new(report::json::Json),
        ReportFormat::Html => Box::new(report::html::Html),
        ReportFormat::Trace => Box::new(report::trace::Trace),
        ReportFormat::Journal => unreachable!("written above"),
    };
    match &args.output {
        Some(path) => {
            // Where the user asked it to go: a path that cannot be written is theirs to fix (2).
            report::write_file(view.as_ref(), &analysis, path, "-o")
                .map_err(|e| crate::error::usage(format!("{e:#}")))?;
            if let Some(p) = &analysis.partial {
                crate::errln!("witness: {p}");
            }
        }
        // A reader that stopped reading (`| head`) ends the printing, not the command.
        None => {
            crate::out::write_bytes(crate::out::To::Stdout, &view.render(&analysis)?);
        }
    }
    Ok(0)
}

/// `--follow`: waits while the run is still going, saying once that it does, and how far its
/// journal has grown now and then.
fn follow(journal: &std::path::Path) {
    let Some(pid) = crate::runs::live(journal) else {
        return;
    };
    crate::errln!(
        "witness: following {} (witness pid {pid} still runs); the report comes when the run ends (Ctrl-C stops following)",
        journal.display()
    );
    let mut said = std::time::Instant::now();
    while crate::runs::live(journal).is_some() {
        std::thread::sleep(std::time::Duration::from_millis(200));
        if said.elapsed() >= std::time::Duration::from_secs(10) {
            let size = std::fs::metadata(journal).map(|m| m.len()).unwrap_or(0);
            crate::errln!(
                "witness: still running; its journal holds {}",
                crate::journal::bytes(size as f64)
            );
            said = std::time::Instant::now();
        }
    }
}

/// What analysis noted about reading the inputs (cut-off or unreadable lines), for stderr.
fn reading_notes(a: &crate::analyze::Analysis) -> impl Iterator<Item = &str> {
    a.notes
        .iter()
        .filter_map(|(_, _, text)| text.strip_prefix(crate::analyze::READING))
}

fn merge(args: &ReportArgs) -> anyhow::Result<crate::sources::Merged> {
    crate::sources::merge(&specs(args)?, std::env::args().collect())
        .map_err(|e| crate::error::usage(format!("{e:#}")))
}

/// The inputs as specs, each --clock-offset matched to one of them (a typo is a usage error).
fn specs(args: &ReportArgs) -> anyhow::Result<Vec<crate::sources::Spec>> {
    use crate::sources::{Kind, Spec};
    let mut specs: Vec<Spec> = args
        .journals
        .iter()
        .map(|p| (p, Kind::Journal))
        .chain(args.k6.iter().map(|p| (p, Kind::K6)))
        .map(|(p, kind)| Spec {
            path: p.clone(),
            kind,
            user_offset_s: None,
        })
        .collect();
    for (file, d) in &args.clock_offset {
        let hits: Vec<usize> = specs
            .iter()
            .enumerate()
            .filter(|(_, s)| s.path == *file || s.path.file_name() == Some(file.as_os_str()))
            .map(|(i, _)| i)
            .collect();
        match hits.as_slice() {
            [i] => specs[*i].user_offset_s = Some(*d),
            [] => {
                return Err(crate::error::usage(format!(
                    "--clock-offset names {}, which is not one of the inputs ({}); give the file as you gave it",
                    file.display(),
                    specs
                        .iter()
                        .map(|s| s.path.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )))
            }
            _ => {
                return Err(crate::error::usage(format!(
                    "--clock-offset {} matches several inputs; give the path as you gave the input",
                    file.display()
                )))
            }
        }
    }
    for s in &specs {
        if !s.path.is_file() {
            let flag = if s.kind == Kind::K6 { "--k6 " } else { "" };
            return Err(crate::error::usage(format!(
                "{flag}{}: no such file",
                s.path.display()
            )));
        }
    }
    Ok(specs)
}

fn write_journal(
    merged: crate::sources::Merged,
    output: Option<&std::path::Path>,
) -> anyhow::Result<i32> {
    use anyhow::Context;
    let warnings = match output {
        Some(path) => {
            let tmp = path.with_extension("witness-tmp");
            let file = std::fs::File::create(&tmp)
                .with_context(|| format!("creating {} (-o)", path.display()))?;
            let mut out = std::io::BufWriter::with_capacity(256 * 1024, file);
            let w = merged.write_to(&mut out)?;
            drop(out);
            std::fs::rename(&tmp, path)
                .with_context(|| format!("writing {} (-o)", path.display()))?;
            w
        }
        None => merged.write_to(&mut std::io::BufWriter::new(crate::out::Sink(
            crate::out::To::Stdout,
        )))?,
    };
    for w in warnings {
        crate::errln!("witness: {w}");
    }
    Ok(0)
}

/// `witness report --list`: the recent runs, newest first (each journal's header and end only).
fn list() -> anyhow::Result<i32> {
    let dir = crate::files::state_dir();
    let runs = crate::runs::recent(&dir);
    if runs.is_empty() {
        return Err(none_found(&dir));
    }
    let shown: Vec<crate::runs::RunSummary> = runs
        .iter()
        .take(crate::runs::LIST)
        .map(|p| crate::runs::summary(p))
        .collect();
    let text = crate::runs::render_list(&dir, &shown, runs.len());
    crate::out::write_bytes(crate::out::To::Stdout, text.as_bytes());
    Ok(0)
}

/// The `n`-th most recent run's journal (1: the latest), said on stderr.
/// Of the runs this user started from this directory when there are any, else of every run
/// recorded: which one is opened is said.
pub(crate) fn latest(n: u32) -> anyhow::Result<std::path::PathBuf> {
    let dir = crate::files::state_dir();
    let runs = crate::runs::recent(&dir);
    if runs.is_empty() {
        return Err(none_found(&dir));
    }
    let here = crate::runs::from_here(&runs);
    // Of the runs from here when there are enough of them; else of every run, said as such.
    let (pool, whose) = if here.len() >= n as usize {
        (&here, "started from this directory by you")
    } else if here.is_empty() {
        (
            &runs,
            "of any directory (none was started from this one by you)",
        )
    } else {
        (
            &runs,
            "of any directory (too few were started from this one by you)",
        )
    };
    let Some(path) = pool.get(n as usize - 1) else {
        return Err(crate::error::usage(format!(
            "--last {n}: only {} run(s) are recorded in {} (see `witness report --list`)",
            pool.len(),
            dir.display()
        )));
    };
    let which = if n == 1 {
        format!("the latest run {whose}")
    } else {
        format!("run {n} back (--last {n}) {whose}")
    };
    crate::errln!("witness: reading {which}: {}", path.display());
    Ok(path.clone())
}

fn none_found(dir: &std::path::Path) -> anyhow::Error {
    crate::error::usage(format!(
        "no journal found in {} (witness's journal folder, where runs without --journal write and runs with --journal are recorded); give one: `witness report JOURNAL`",
        dir.display()
    ))
}
