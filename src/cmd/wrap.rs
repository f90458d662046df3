//! `witness wrap -- CMD…` (or `--image IMAGE`, `--container NAME`): supervise the server, stay
//! transparent, and print the annotated timeline.
//!
//! witness can be PID 1 of a container in front of the user's server (wrappers/container-entrypoint):
//! it forwards the signals it gets, and with a child process it is a subreaper that reaps the
//! orphans the server leaves (target/reaper.rs) without taking its own child's exit status.

use std::sync::{Arc, OnceLock};

use nix::sys::signal::Signal;
use tokio::sync::watch;

use super::TargetConfig;
use super::{build_target, check_outputs, open_journal, target_config, Signals};
use crate::cli::WrapArgs;
use crate::journal::{Event, Settings};
use crate::sample::{spawn_sampling, PidSource};
use crate::server::process::{Control, State};
use crate::server::reaper::Reaper;

pub async fn run(args: WrapArgs) -> anyhow::Result<i32> {
    let mut cfg = target_config(&args.supervise, &args.container, args.command.clone(), true)?;
    // stdin is the child's: a stdio server reads its client there (bytes and EOF as sent).
    if let TargetConfig::Process(p) = &mut cfg {
        p.inherit_stdin = true;
    }
    check_outputs(&args.output)?;
    let journal = open_journal("wrap", &args.output)?;
    journal.emit(Event::Settings(Settings {
        timers_s: args.supervise.timers_s(),
        ..Default::default()
    }));
    // The GPU check comes before the server starts, so `--gpu on` without a driver refuses
    // without having run anything; the samplers learn the server's pid once it exists.
    let state: Arc<OnceLock<watch::Receiver<State>>> = Arc::new(OnceLock::new());
    let gpu = match super::gpu::choose(&args.gpu, server_pid(&state), &journal) {
        Ok(g) => g,
        Err(e) => {
            journal.emit(Event::Note {
                level: "error".into(),
                text: format!("{e:#}"),
            });
            journal.emit(Event::End {
                reason: "refused before starting the server".into(),
                partial: true,
                exit_code: None,
            });
            journal.flush()?;
            return Err(e);
        }
    };
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
    if let Some(s) = target.state() {
        let _ = state.set(s);
    }
    // The process tree from /proc, or the engine's container stats; and the GPUs.
    let mut samplers = target.samplers();
    // The fake backend's notice waits for the end; "no driver" is the report's gpu line then.
    let gpu_notice = gpu.sampler.is_some().then_some(gpu.message).flatten();
    samplers.extend(gpu.sampler);
    let sampling = spawn_sampling(samplers, journal.clone(), args.sample_interval);
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
    if let Some(m) = gpu_notice {
        eprintln!("{m}");
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
    if let Err(e) = finish(&journal, &args, reason, Some(status)) {
        // wrap stays transparent: the child's output went through and its status is kept; only the
        // record is incomplete, and stderr says so.
        if !e.is::<crate::journal::JournalLost>() {
            return Err(e);
        }
        eprintln!("witness: warning: {e:#}; the server's output was passed through and its exit status {status} is kept");
    }
    Ok(status)
}

/// Whether witness let go of a container it did not own (rather than seeing it end).
fn detached(journal: &crate::journal::Journal) -> bool {
    journal.lifecycle().iter().any(|r| {
        matches!(&r.event, Event::Note { text, .. } if text.starts_with("detached from container"))
    })
}

/// The running server's pid (a container's as the host sees it), once the target has started.
fn server_pid(state: &Arc<OnceLock<watch::Receiver<State>>>) -> PidSource {
    let state = state.clone();
    Box::new(move || match &*state.get()?.borrow() {
        State::Running(id) => Some(id.pid),
        _ => None,
    })
}

/// Ends the journal, reads it back, and renders the views: the live path is the re-render path.
fn finish(
    journal: &crate::journal::Journal,
    args: &WrapArgs,
    reason: &str,
    status: Option<i32>,
) -> anyhow::Result<()> {
    super::finish_run(journal, &args.output, reason, false, status).map(|_| ())
}
