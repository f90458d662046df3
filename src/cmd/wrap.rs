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
use crate::cli::{RecordArgs, WrapArgs};
use crate::journal::{Event, Settings};
use crate::observe::record::{HarRecorder, Settings as RecordSettings, StdioRecorder};
use crate::observe::relay::Relay;
use crate::sample::{spawn_sampling, PidSource};
use crate::server::process::{Control, State};
use crate::server::reaper::Reaper;

pub async fn run(args: WrapArgs) -> anyhow::Result<i32> {
    if args.gpu.gpu != crate::cli::GpuMode::Off {
        crate::sample::gpu::open_early();
    }
    let mut cfg = target_config(&args.supervise, &args.container, args.command.clone(), true)?;
    // stdin is the child's: relayed (an MCP client launched witness: every call is read as it
    // passes), or handed over (a terminal, or `--stdin inherit`: bytes and EOF as sent, unread).
    let mut pipes = None;
    if let TargetConfig::Process(p) = &mut cfg {
        if args.stdin.relays() {
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
    let record = record_settings(&args.record)?;
    if record.is_some() && pipes.is_none() && args.proxy.is_none() {
        return Err(crate::error::usage(
            "--record needs traffic to record: an MCP client on witness's stdin (the stdio relay; not with --stdin inherit, a terminal or /dev/null) or --proxy LISTEN=UPSTREAM for HTTP",
        ));
    }
    // LISTEN is bound before the journal and the server exist: a taken port is a usage error, and
    // a client never finds nothing there.
    if args.proxy.is_some_and(|p| p.upstream_tls) {
        super::tls_trust(args.tls.cacert.as_deref(), args.tls.insecure)?;
    }
    let proxy = crate::observe::proxy::bind(args.proxy)?;
    // With --proxy the recording is the HTTP (HAR); else the stdio session (JSONL).
    let har = match (&record, args.proxy.is_some()) {
        (Some(r), true) => Some(Arc::new(HarRecorder::create(r)?)),
        _ => None,
    };
    let stdio_rec = match (&record, args.proxy.is_some()) {
        (Some(r), false) => Some(Arc::new(StdioRecorder::create(r, &args.command)?)),
        _ => None,
    };
    let journal = open_journal("wrap", &args.output)?;
    crate::load::tls::journal_note(&journal);
    // Started before the server, so the client's first bytes wait for it rather than go unread.
    let relay = match pipes {
        Some((mut rx, patterns, closed, cell)) => {
            let relay = Arc::new(
                Relay::start(journal.clone(), patterns, closed, stdio_rec.clone()).map_err(
                    |e| {
                        anyhow::anyhow!(
                            "the stdio relay could not take witness's stdin/stdout: {e}"
                        )
                    },
                )?,
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
    // The samplers and the proxy learn the server's pid once it exists (the proxy: which process
    // an MCP session belongs to).
    let state: Arc<OnceLock<watch::Receiver<State>>> = Arc::new(OnceLock::new());
    let proxy = crate::observe::proxy::start(proxy, &journal, server_pid(&state), har.clone())?;
    let recorded = Recorded {
        stdio: stdio_rec,
        har,
    };
    // The GPU check comes before the server starts, so `--gpu on` without a driver refuses
    // without having run anything.
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
            recorded.finish(&journal);
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
    recorded.finish(&journal);
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
        how_it_ended(
            &journal.lifecycle(),
            args.supervise.restart,
            args.supervise.max_restarts,
        )
    } else {
        "witness let go of the container; it keeps running".to_string()
    };
    if let Err(e) = finish(&journal, &args, &reason, Some(status)) {
        // wrap stays transparent: the child's output went through and its status is kept; only the
        // record is incomplete, and stderr says so.
        if !e.is::<crate::journal::JournalLost>() {
            return Err(e);
        }
        crate::errln!("witness: warning: {e:#}; the server's output was passed through and its exit status {status} is kept");
    }
    Ok(status)
}

/// `--record FILE` and its bounds as the recorders take them.
fn record_settings(a: &RecordArgs) -> anyhow::Result<Option<RecordSettings>> {
    let Some(path) = &a.record else {
        return Ok(None);
    };
    if path.as_os_str().is_empty() || path.is_dir() {
        return Err(crate::error::usage(format!(
            "--record {}: name a file to write the recording to (not a folder)",
            path.display()
        )));
    }
    const MIN: u64 = 4096;
    if a.record_max < MIN {
        return Err(crate::error::usage(format!(
            "--record-max {}: a recording needs at least {MIN} bytes (its header and a few messages)",
            a.record_max
        )));
    }
    if let Some(k) = a
        .record_mask_key
        .iter()
        .find(|k| !k.chars().any(char::is_alphanumeric))
    {
        return Err(crate::error::usage(format!(
            "--record-mask-key {k:?}: name a JSON key (letters or digits), e.g. --record-mask-key pin"
        )));
    }
    Ok(Some(RecordSettings {
        path: path.clone(),
        max_bytes: a.record_max,
        body_bytes: a.record_body_max,
        mask_keys: a.record_mask_key.clone(),
    }))
}

/// The run's recorder, whichever it is.
struct Recorded {
    stdio: Option<Arc<StdioRecorder>>,
    har: Option<Arc<HarRecorder>>,
}

impl Recorded {
    /// Ends the recording (its last note, its last flush) and says on stderr where it is and what
    /// was cut; a failure to write it is noted in the journal too.
    fn finish(&self, journal: &crate::journal::Journal) {
        let summary = match (&self.stdio, &self.har) {
            (Some(s), _) => s.finish(),
            (_, Some(h)) => h.finish(),
            _ => None,
        };
        let Some(s) = summary else { return };
        if let Some(f) = &s.failed {
            journal.emit(Event::Note {
                level: "warn".into(),
                text: format!(
                    "--record {}: writing the recording failed: {f}",
                    s.path.display()
                ),
            });
        }
        crate::errln!("{}", s.line());
    }
}

/// How long the relay waits, once the server is gone, for its stdout to be relayed to the end.
const RELAY_LINGER: std::time::Duration = std::time::Duration::from_secs(2);

/// Whether witness let go of a container it did not own (rather than seeing it end).
fn detached(journal: &crate::journal::Journal) -> bool {
    journal.lifecycle().iter().any(|r| {
        matches!(&r.event, Event::Note { text, .. } if text.starts_with("detached from container"))
    })
}

/// How the run ended, in a supervisor's words, from what the journal holds: the client closed its
/// stdin and the server then exited; witness forwarded a signal it received; the server was killed
/// by a signal witness did not send; or it exited with N and the restart policy (named) did not
/// start it again.
fn how_it_ended(
    lifecycle: &[crate::journal::Record],
    policy: crate::server::process::RestartPolicy,
    max_restarts: Option<u32>,
) -> String {
    use crate::server::process::RestartPolicy;
    let Some((exit_t, code, signal, requested)) =
        lifecycle.iter().rev().find_map(|r| match &r.event {
            Event::Exit {
                code,
                signal,
                requested,
                ..
            } => Some((r.t_s, *code, signal.clone(), *requested)),
            _ => None,
        })
    else {
        return "the server is gone for good".into();
    };
    let ended = match (&signal, code) {
        (Some(sig), _) => format!("was killed by {sig}"),
        (None, Some(c)) => format!("exited with {c}"),
        (None, None) => "ended for an unknown reason".into(),
    };
    let note = |prefix: &str| {
        lifecycle.iter().rev().find_map(|r| match &r.event {
            Event::Note { text, .. } if text.starts_with(prefix) => Some((r.t_s, text.clone())),
            _ => None,
        })
    };
    if requested {
        let asked = lifecycle.iter().rev().find_map(|r| match &r.event {
            Event::SignalSent { reason, signal, .. } if r.t_s <= exit_t => {
                Some((reason.clone(), signal.clone()))
            }
            _ => None,
        });
        return match asked {
            Some((reason, _)) if reason.starts_with("forwarded ") => {
                let sig = reason
                    .split_whitespace()
                    .nth(1)
                    .unwrap_or("a signal")
                    .to_string();
                format!("witness received {sig} (from its parent, e.g. the MCP host, or another process) and forwarded it; the server {ended}")
            }
            Some((reason, _)) if reason.starts_with("asked twice") => {
                format!("witness was interrupted twice and killed the server at once; it {ended}")
            }
            Some((reason, _)) => format!("witness stopped the server ({reason}); it {ended}"),
            None => format!("witness stopped the server; it {ended}"),
        };
    }
    if let Some((eof_t, _)) = note(crate::observe::relay::CLIENT_CLOSED) {
        if eof_t <= exit_t {
            return format!(
                "the client closed its stdin (its session is over) and the server then {ended}"
            );
        }
    }
    let policy_name = clap::ValueEnum::to_possible_value(&policy)
        .map(|v| v.get_name().to_string())
        .unwrap_or_default();
    let restarts = lifecycle
        .iter()
        .filter(|r| matches!(r.event, Event::Restart { .. }))
        .count();
    let why_not = if note("gave up after").is_some() {
        format!(
            "was not restarted again (--max-restarts {} was reached after {restarts} restart(s))",
            max_restarts.unwrap_or(0)
        )
    } else if note("restart failed").is_some() {
        "could not be restarted (the note above says why)".into()
    } else {
        match (policy, code) {
            (RestartPolicy::Never, _) => "was not restarted (--restart never)".into(),
            (RestartPolicy::OnFailure, Some(0)) => {
                "was not restarted (--restart on-failure restarts only a failure)".into()
            }
            _ => format!("was not restarted (witness was stopping; --restart {policy_name})"),
        }
    };
    match signal {
        Some(sig) => format!(
            "the server was killed by {sig}, a signal witness did not send (another process, or the kernel), and {why_not}"
        ),
        None => format!("the server {ended} and {why_not}"),
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::Record;
    use crate::server::process::RestartPolicy;

    fn rec(t_s: f64, event: Event) -> Record {
        Record {
            t_s,
            event,
            origin: None,
        }
    }

    fn exit(t_s: f64, code: Option<i32>, signal: Option<&str>, requested: bool) -> Record {
        rec(
            t_s,
            Event::Exit {
                pid: 7,
                code,
                signal: signal.map(String::from),
                core_dumped: false,
                age_s: t_s,
                status: code.unwrap_or(137),
                requested,
                meaning: String::new(),
                oom_killed: None,
            },
        )
    }

    fn eof(t_s: f64) -> Record {
        rec(
            t_s,
            Event::Note {
                level: "info".into(),
                text: crate::observe::relay::CLIENT_CLOSED.into(),
            },
        )
    }

    #[test]
    fn the_client_closing_first_is_said_and_a_close_after_the_exit_is_not() {
        let first = [eof(1.0), exit(1.2, Some(0), None, false)];
        assert_eq!(
            how_it_ended(&first, RestartPolicy::Always, None),
            "the client closed its stdin (its session is over) and the server then exited with 0"
        );
        // The server died first; the client closed because its stdout did: the exit is the cause.
        let after = [exit(1.0, Some(3), None, false), eof(1.1)];
        assert_eq!(
            how_it_ended(&after, RestartPolicy::Never, None),
            "the server exited with 3 and was not restarted (--restart never)"
        );
    }

    #[test]
    fn a_signal_is_named_with_who_sent_it() {
        let theirs = [exit(2.0, None, Some("SIGKILL"), false)];
        assert_eq!(
            how_it_ended(&theirs, RestartPolicy::Never, None),
            "the server was killed by SIGKILL, a signal witness did not send (another process, or the kernel), and was not restarted (--restart never)"
        );
        let forwarded = [
            rec(
                1.0,
                Event::SignalSent {
                    pid: 7,
                    signal: "SIGTERM".into(),
                    reason: "forwarded SIGTERM that witness received".into(),
                },
            ),
            exit(1.1, Some(0), None, true),
        ];
        assert_eq!(
            how_it_ended(&forwarded, RestartPolicy::Always, None),
            "witness received SIGTERM (from its parent, e.g. the MCP host, or another process) and forwarded it; the server exited with 0"
        );
        assert_eq!(
            how_it_ended(&[], RestartPolicy::Never, None),
            "the server is gone for good"
        );
    }
}
