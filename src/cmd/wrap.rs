//! `witness wrap -- CMD…`: supervise the server, stay transparent, and print the annotated timeline.

use nix::sys::signal::Signal;

use super::{check_outputs, open_journal, process_config, write_views, Signals};
use crate::cli::WrapArgs;
use crate::journal::{Event, Settings};
use crate::report::{self, View};
use crate::target::process::{Control, Supervisor};

pub async fn run(args: WrapArgs) -> anyhow::Result<i32> {
    let cfg = process_config(&args.supervise, args.command.clone(), true)?;
    check_outputs(&args.output)?;
    let journal = open_journal("wrap", &args.output)?;
    journal.emit(Event::Settings(Settings {
        timers_s: args
            .supervise
            .timer
            .iter()
            .map(|d| d.as_secs_f64())
            .collect(),
        ..Default::default()
    }));
    let mut signals = Signals::install()?;
    let sup = match Supervisor::start(cfg, journal.clone()).await {
        Ok(s) => s,
        Err(e) => {
            journal.emit(Event::Note {
                level: "error".into(),
                text: format!("{e:#}"),
            });
            finish(&journal, &args, "the command could not be started", None)?;
            return Err(e);
        }
    };
    let ctl = sup.control();
    let wait = sup.wait();
    tokio::pin!(wait);
    let mut interrupts = 0;
    let status = loop {
        tokio::select! {
            r = &mut wait => break r?,
            sig = signals.recv() => {
                if sig == Signal::SIGINT {
                    interrupts += 1;
                }
                let _ = ctl.send(if interrupts >= 2 { Control::KillNow } else { Control::Forward(sig) });
            }
        }
    };
    finish(&journal, &args, "the server is gone for good", Some(status))?;
    Ok(status)
}

/// Ends the journal, reads it back, and renders the views: the live path is the re-render path.
fn finish(
    journal: &crate::journal::Journal,
    args: &WrapArgs,
    reason: &str,
    status: Option<i32>,
) -> anyhow::Result<()> {
    journal.emit(Event::End {
        reason: reason.into(),
        partial: false,
        exit_code: status,
    });
    journal.flush()?;
    let loaded = crate::journal::read(journal.path())?;
    let analysis = crate::analyze::analyze(&loaded);
    let term = report::terminal::Terminal::for_stderr();
    let text = term.render(&analysis)?;
    eprint!("{}", String::from_utf8_lossy(&text));
    eprintln!("witness: journal: {}", journal.path().display());
    write_views(&args.output, &analysis)
}
