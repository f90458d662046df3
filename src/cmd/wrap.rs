//! `witness wrap -- CMD…`: supervise the server, stay transparent, and print the annotated timeline.

use std::sync::{Arc, OnceLock};

use nix::sys::signal::Signal;
use tokio::sync::watch;

use super::{check_outputs, open_journal, process_config, write_views, Signals};
use crate::cli::WrapArgs;
use crate::error::usage;
use crate::journal::{Event, Settings};
use crate::report::{self, View};
use crate::sample::{proc::ProcSampler, spawn_sampling, PidSource};
use crate::target::process::{Control, State, Supervisor};

pub async fn run(args: WrapArgs) -> anyhow::Result<i32> {
    let cfg = process_config(&args.supervise, args.command.clone(), true)?;
    check_outputs(&args.output)?;
    if args.sample_interval.is_zero() {
        return Err(usage(
            "--sample-interval must be more than zero, e.g. --sample-interval 500ms",
        ));
    }
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
    let _ = state.set(sup.state());
    let mut samplers: Vec<Box<dyn crate::sample::Sampler>> =
        vec![Box::new(ProcSampler::new(server_pid(&state)))];
    // The fake backend's notice waits for the end; "no driver" is the report's gpu line then.
    let gpu_notice = gpu.sampler.is_some().then_some(gpu.message).flatten();
    samplers.extend(gpu.sampler);
    let sampling = spawn_sampling(samplers, journal.clone(), args.sample_interval);
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
    sampling.stop().await;
    if let Some(m) = gpu_notice {
        eprintln!("{m}");
    }
    finish(&journal, &args, "the server is gone for good", Some(status))?;
    Ok(status)
}

/// The running server's pid, once the supervisor has started it.
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
