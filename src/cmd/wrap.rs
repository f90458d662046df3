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
use crate::cli::{StdinMode, WrapArgs};
use crate::journal::{Event, Settings};
use crate::observe::relay::Relay;
use crate::sample::{spawn_sampling, PidSource};
use crate::server::process::{Control, State};
use crate::server::reaper::Reaper;

pub async fn run(args: WrapArgs) -> anyhow::Result<i32> {
    let mut cfg = target_config(&args.supervise, &args.container, args.command.clone(), true)?;
    // stdin is the child's: relayed (an MCP client launched witness: every call is read as it
    // passes), or handed over (a terminal, or `--stdin inherit`: bytes and EOF as sent, unread).
    let mut pipes = None;
    if let TargetConfig::Process(p) = &mut cfg {
        if relays(args.stdin) {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            p.stdio = Some(tx);
            let closed = Arc::new(std::sync::atomic::AtomicBool::new(false));
            p.input_closed = Some(closed.clone());
            // The supervisor's word on each exit reaches the relay, which answers the calls in
            // flight when a restart follows.
            let relay: Arc<OnceLock<Arc<Relay>>> = Arc::new(OnceLock::new());
            let r = relay.clone();
            p.on_exit = Some(Arc::new(move |n| {
                if let Some(r) = r.get() {
                    r.exited(n);
                }
            }));
            pipes = Some((rx, p.patterns.clone(), closed, relay));
        } else {
            p.inherit_stdin = true;
        }
    }
    check_outputs(&args.output)?;
    // LISTEN is bound before the journal and the server exist: a taken port is a usage error, and
    // a client never finds nothing there.
    if args.proxy.is_some_and(|p| p.upstream_tls) {
        crate::load::tls::from_flags(args.tls.cacert.as_deref(), args.tls.insecure)?;
    }
    let proxy = crate::observe::proxy::bind(args.proxy)?;
    let journal = open_journal("wrap", &args.output)?;
    crate::load::tls::journal_note(&journal);
    // Started before the server, so the client's first bytes wait for it rather than go unread.
    let relay = match pipes {
        Some((mut rx, patterns, closed, cell)) => {
            let relay = Arc::new(
                Relay::start(journal.clone(), patterns, closed).map_err(|e| {
                    anyhow::anyhow!("the stdio relay could not take witness's stdin/stdout: {e}")
                })?,
            );
            let _ = cell.set(relay.clone());
            let r = relay.clone();
            tokio::spawn(async move {
                while let Some(p) = rx.recv().await {
                    r.attach(p);
                }
            });
            Some(relay)
        }
        None => None,
    };
    journal.emit(Event::Settings(Settings {
        timers_s: args.supervise.timers_s(),
        ..Default::default()
    }));
    let proxy = crate::observe::proxy::start(proxy, &journal)?;
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
            return Err(e.context(crate::error::AlreadySaid(
                "the server could not be started (the reason is in the note above)".into(),
            )));
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
    crate::observe::proxy::stop(proxy).await;
    sampling.stop().await;
    if let Some(relay) = relay {
        // The last server's answers reach the client before witness ends; a grandchild holding its
        // stdout open is not waited for long.
        tokio::task::spawn_blocking(move || Relay::stop(&relay, RELAY_LINGER))
            .await
            .ok();
    }
    if let Some(n) = reaper.map(Reaper::stop).filter(|n| *n > 0) {
        journal.emit(Event::Note {
            level: "info".into(),
            text: format!(
                "reaped {n} orphaned process(es) the server left behind (witness is their subreaper)"
            ),
        });
    }
    if let Some(m) = gpu_notice {
        crate::errln!("{m}");
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
        crate::errln!("witness: warning: {e:#}; the server's output was passed through and its exit status {status} is kept");
    }
    Ok(status)
}

/// How long the relay waits, once the server is gone, for its stdout to be relayed to the end.
const RELAY_LINGER: std::time::Duration = std::time::Duration::from_secs(2);

/// Whether the child's stdin and stdout are relayed (and read) rather than handed over.
fn relays(mode: StdinMode) -> bool {
    match mode {
        StdinMode::Relay => true,
        StdinMode::Inherit => false,
        // SAFETY: isatty only reads fd 0's state.
        StdinMode::Auto => unsafe { libc::isatty(0) != 1 },
    }
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
