//! `witness wrap -- CMD…` (or `--image IMAGE`, `--container NAME`): supervise the server, stay
//! transparent, and print the annotated timeline.
//!
//! witness can be PID 1 of a container in front of the user's server (wrappers/container-entrypoint):
//! it forwards the signals it gets, and with a child process it is a subreaper that reaps the
//! orphans the server leaves (target/reaper.rs) without taking its own child's exit status.

use nix::sys::signal::Signal;

use super::{build_target, open_journal, target_config, Signals, TargetConfig};
use crate::cli::WrapArgs;
use crate::journal::{Event, Settings};
use crate::report::{self, View};
use crate::sample::spawn_sampling;
use crate::target::process::Control;
use crate::target::reaper::Reaper;

pub async fn run(args: WrapArgs) -> anyhow::Result<i32> {
    let cfg = target_config(&args.supervise, &args.container, args.command.clone(), true)?;
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
    // A child's orphans come to witness (and to PID 1 in a container anyway): reap them.
    let reaper = match &cfg {
        TargetConfig::Process(_) => match Reaper::start() {
            Ok(r) => Some(r),
            Err(e) => {
                journal.emit(Event::Note {
                    level: "warn".into(),
                    text: format!("orphans of the server will not be reaped by witness: {e}"),
                });
                None
            }
        },
        TargetConfig::Container(_) => None,
    };
    let target = match build_target(cfg, &journal).await {
        Ok(t) => t,
        Err(e) => {
            journal.emit(Event::Note {
                level: "error".into(),
                text: format!("{e:#}"),
            });
            finish(&journal, &args, "the server could not be started", None)?;
            return Err(e);
        }
    };
    let sampling = spawn_sampling(target.samplers(), journal.clone(), args.sample_interval);
    let owned = target.owned();
    let ctl = target.control();
    let wait = target.wait();
    tokio::pin!(wait);
    let mut interrupts = 0;
    let ended = loop {
        tokio::select! {
            r = &mut wait => break r,
            sig = signals.recv() => {
                if sig == Signal::SIGINT {
                    interrupts += 1;
                }
                if let Some(ctl) = &ctl {
                    let _ = ctl.send(if interrupts >= 2 { Control::KillNow } else { Control::Forward(sig) });
                }
            }
        }
    };
    sampling.stop().await;
    if let Some(n) = reaper.map(Reaper::stop).filter(|n| *n > 0) {
        journal.emit(Event::Note {
            level: "info".into(),
            text: format!(
                "reaped {n} orphaned process(es) the server left behind (witness is their subreaper)"
            ),
        });
    }
    let status = match ended {
        Ok(s) => s,
        Err(e) => {
            journal.emit(Event::Note {
                level: "error".into(),
                text: format!("{e:#}"),
            });
            finish(&journal, &args, "witness lost sight of the server", None)?;
            return Err(e);
        }
    };
    let reason = if owned || !detached(&journal) {
        "the server is gone for good"
    } else {
        "witness let go of the container; it keeps running"
    };
    finish(&journal, &args, reason, Some(status))?;
    Ok(status)
}

/// Whether witness let go of a container it did not own (rather than seeing it end).
fn detached(journal: &crate::journal::Journal) -> bool {
    journal.lifecycle().iter().any(|r| {
        matches!(&r.event, Event::Note { text, .. } if text.starts_with("detached from container"))
    })
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
    if let Some(p) = &args.output.report {
        report::write_file(&report::json::Json, &analysis, p, "--report")?;
    }
    Ok(())
}
