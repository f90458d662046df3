//! One module per subcommand: turn validated arguments into producers, a journal, and views.

pub mod gpu;
pub mod load;
pub mod report;
pub mod soak;
pub mod wrap;

use std::sync::Arc;

use crate::analyze::Analysis;
use crate::cli::{OutputArgs, SuperviseArgs};
use crate::error::usage;
use crate::journal::{Header, Journal};
use crate::report as views;
use crate::target::logs::Patterns;
use crate::target::process::ProcessConfig;

/// The supervisor's config from its flags; a bad `--watch` is a usage error naming it.
pub fn process_config(
    args: &SuperviseArgs,
    command: Vec<String>,
    pass_through: bool,
) -> anyhow::Result<ProcessConfig> {
    if command.is_empty() || command[0].is_empty() {
        return Err(usage(
            "no command to run: give it after `--`, e.g. `witness wrap -- ./server --port 8080`",
        ));
    }
    Ok(ProcessConfig {
        command,
        restart: args.restart,
        max_restarts: args.max_restarts,
        backoff: args.backoff,
        backoff_max: std::time::Duration::from_secs(30).max(args.backoff),
        healthy_after: args.healthy_after,
        grace: args.grace,
        patterns: Arc::new(Patterns::new(&args.watch)?),
        pass_through,
    })
}

/// Refuses, before the run, an output file that could not be written at its end (a missing folder),
/// naming the flag.
pub fn check_outputs(out: &OutputArgs) -> anyhow::Result<()> {
    let files = [
        ("--report", &out.report),
        ("--html", &out.html),
        ("--trace", &out.trace),
    ];
    for (flag, path) in files {
        let Some(path) = path else { continue };
        if path.is_dir() {
            return Err(usage(format!(
                "{flag} {} is a folder; give a file name inside it",
                path.display()
            )));
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.is_dir() {
                return Err(usage(format!(
                    "{flag} {}: the folder {} does not exist; create it or choose another path",
                    path.display(),
                    dir.display()
                )));
            }
        }
    }
    Ok(())
}

/// Writes the end-of-run files the user asked for: JSON report, HTML timeline, trace. Every one is
/// rendered from the same analysis as the terminal view.
pub fn write_views(out: &OutputArgs, analysis: &Analysis) -> anyhow::Result<()> {
    if let Some(p) = &out.report {
        views::write_file(&views::json::Json, analysis, p, "--report")?;
    }
    if let Some(p) = &out.html {
        views::write_file(&views::html::Html, analysis, p, "--html")?;
        eprintln!("witness: timeline: {}", p.display());
    }
    if let Some(p) = &out.trace {
        views::write_file(&views::trace::Trace, analysis, p, "--trace")?;
        eprintln!("witness: trace (open in ui.perfetto.dev): {}", p.display());
    }
    Ok(())
}

/// Opens the run's journal: the given path or a fresh one in the temp folder.
pub fn open_journal(mode: &str, out: &OutputArgs) -> anyhow::Result<Journal> {
    let path = out
        .journal
        .clone()
        .unwrap_or_else(|| crate::journal::default_path(mode));
    Journal::create(&path, &Header::new(mode, std::env::args().collect()))
}

/// Unix signals witness forwards to the server, as one stream.
///
/// tokio's own signal handling, not signal-hook: the supervisor is one `tokio::select!` loop, and
/// tokio::signal delivers straight into it; signal-hook would add a thread and a bridge for the same.
pub struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    quit: tokio::signal::unix::Signal,
}

impl Signals {
    pub fn install() -> anyhow::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Self {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
            quit: signal(SignalKind::quit())?,
        })
    }

    pub async fn recv(&mut self) -> nix::sys::signal::Signal {
        use nix::sys::signal::Signal;
        tokio::select! {
            _ = self.int.recv() => Signal::SIGINT,
            _ = self.term.recv() => Signal::SIGTERM,
            _ = self.hup.recv() => Signal::SIGHUP,
            _ = self.quit.recv() => Signal::SIGQUIT,
        }
    }
}
