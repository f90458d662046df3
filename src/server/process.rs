//! The process target: runs the server under test as witness's child, in its own process group, under
//! a restart policy, and journals every spawn, exit, matched log line, signal and restart.
//!
//! One `tokio::select!` loop per child (nextest's executor): wait for exit, control messages (stop,
//! forward a signal, kill now, inject a fault) and the grace timer. Output is drained by two threads
//! per child (see `logs.rs`), so a slow witness can never block the server.
//!
//! If witness dies, even by SIGKILL, the child gets SIGKILL from the kernel: `PR_SET_PDEATHSIG` is set
//! in the forked child. That death signal is tied to the *thread* that forked, so children are only
//! spawned from the async supervisor task, which runs on the runtime's long-lived worker threads,
//! never from `spawn_blocking` threads that the runtime retires when idle.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::sync::{mpsc, watch};

use super::exit::{signal_name, ExitInfo};
use super::logs::{self, PassThrough, Patterns};
use crate::journal::{Event, Identity, Journal, Stream};

/// When a child that exited is started again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RestartPolicy {
    Never,
    OnFailure,
    Always,
}

/// Everything the supervisor needs, validated.
#[derive(Clone)]
pub struct ProcessConfig {
    pub command: Vec<String>,
    pub restart: RestartPolicy,
    pub max_restarts: Option<u32>,
    /// The first restart's delay; it doubles on each quick failure, up to `backoff_max`.
    pub backoff: Duration,
    pub backoff_max: Duration,
    /// A process that lived this long resets the backoff.
    pub healthy_after: Duration,
    pub grace: Duration,
    pub patterns: Arc<Patterns>,
    /// Pass the child's output through to witness's own streams (wrap), or only read it.
    pub pass_through: bool,
    /// The server speaks a protocol on its stdin/stdout (MCP over stdio): each spawn's pipes go here,
    /// to the load driver, instead of stdin being closed and stdout drained as log lines. Its stderr
    /// is still the log.
    pub stdio: Option<mpsc::UnboundedSender<StdioPipes>>,
}

/// One spawn's protocol pipes (MCP over stdio); a restart sends new ones.
#[derive(Debug)]
pub struct StdioPipes {
    pub pid: u32,
    pub stdin: tokio::process::ChildStdin,
    pub stdout: tokio::process::ChildStdout,
}

/// What the owner of a supervisor can ask of it.
#[derive(Debug)]
pub enum Control {
    /// Stop for good: SIGTERM to the group, SIGKILL after the grace.
    Stop { reason: String },
    /// Forward a signal witness received; the child is then expected to go, so no restart follows.
    Forward(Signal),
    /// SIGKILL the group now (second Ctrl-C).
    KillNow,
    /// An injected fault: send this signal to the group; the restart policy applies as usual.
    Inject { signal: Signal, label: String },
}

/// The supervised server as its owner sees it.
#[derive(Clone, Debug, PartialEq)]
pub enum State {
    Starting,
    Running(Identity),
    /// Between an exit and the next spawn.
    Down {
        status: i32,
    },
    /// Gone for good; `status` is witness's exit code for `wrap`.
    Finished {
        status: i32,
    },
}

impl State {
    /// Who is running now, if anyone.
    pub fn identity(&self) -> Option<Identity> {
        match self {
            State::Running(id) => Some(id.clone()),
            _ => None,
        }
    }
}

pub struct Supervisor {
    ctl: mpsc::UnboundedSender<Control>,
    state: watch::Receiver<State>,
    task: tokio::task::JoinHandle<anyhow::Result<i32>>,
}

/// The command could not be started at all (exit 127 / 126 like a shell).
#[derive(Debug, thiserror::Error)]
#[error("could not start {command:?}: {source}")]
pub struct SpawnError {
    pub command: String,
    #[source]
    pub source: std::io::Error,
}

impl SpawnError {
    pub fn exit_code(&self) -> i32 {
        match self.source.kind() {
            std::io::ErrorKind::NotFound => 127,
            _ => 126,
        }
    }
}

impl Supervisor {
    /// Starts the first child; fails at once if the command cannot be started.
    pub async fn start(cfg: ProcessConfig, journal: Journal) -> anyhow::Result<Self> {
        let (ctl, rx) = mpsc::unbounded_channel();
        let (state_tx, state) = watch::channel(State::Starting);
        let first = spawn_child(&cfg, &journal, 0)?;
        state_tx.send_replace(State::Running(first.identity.clone()));
        let task = tokio::spawn(supervise(cfg, journal, rx, state_tx, first));
        Ok(Self { ctl, state, task })
    }

    pub fn control(&self) -> mpsc::UnboundedSender<Control> {
        self.ctl.clone()
    }

    pub fn state(&self) -> watch::Receiver<State> {
        self.state.clone()
    }

    /// The current identity, when a process is running.
    pub fn identity(&self) -> Option<Identity> {
        self.state.borrow().identity()
    }

    pub fn send(&self, c: Control) {
        let _ = self.ctl.send(c);
    }

    /// Waits until the supervisor is done (child gone for good); returns the child's last status.
    pub async fn wait(self) -> anyhow::Result<i32> {
        self.task.await?
    }

    /// Stops the child (TERM, grace, KILL) and waits.
    pub async fn stop(self, reason: &str) -> anyhow::Result<i32> {
        self.send(Control::Stop {
            reason: reason.into(),
        });
        self.wait().await
    }
}

struct Running {
    child: tokio::process::Child,
    pid: u32,
    identity: Identity,
    spawned: Instant,
    readers: Vec<std::thread::JoinHandle<u64>>,
}

fn spawn_child(cfg: &ProcessConfig, journal: &Journal, attempt: u32) -> anyhow::Result<Running> {
    let mut cmd = tokio::process::Command::new(&cfg.command[0]);
    cmd.args(&cfg.command[1..])
        .stdin(if cfg.stdio.is_some() {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        })
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(false);
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: only async-signal-safe calls (prctl, getppid, _exit) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // witness may have died between fork and prctl: then nobody would kill us later.
            if libc::getppid() != parent {
                libc::_exit(137);
            }
            Ok(())
        });
    }
    // Registered before the reaper can look, so it never takes this child's exit status.
    let mut own = super::reaper::spawn_guard();
    let mut child = cmd.spawn().map_err(|source| SpawnError {
        command: cfg.command[0].clone(),
        source,
    })?;
    let spawned = Instant::now();
    let pid = child.id().unwrap_or(0);
    own.register(pid);
    drop(own);
    let identity = super::identity_of(pid).unwrap_or(Identity {
        pid,
        start_time: 0,
        container_id: None,
        container_started_at: None,
    });
    journal.emit(Event::Spawn {
        pid,
        start_time: identity.start_time,
        command: cfg.command.clone(),
        attempt,
        container_id: None,
    });
    let mut readers = Vec::new();
    let stdout = match &cfg.stdio {
        Some(sink) => {
            if let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) {
                let _ = sink.send(StdioPipes { pid, stdin, stdout });
            }
            None
        }
        None => child.stdout.take(),
    };
    let streams = [
        (stdout.map(|s| s.into_owned_fd()), Stream::Stdout),
        (
            child.stderr.take().map(|s| s.into_owned_fd()),
            Stream::Stderr,
        ),
    ];
    for (fd, stream) in streams {
        let Some(Ok(fd)) = fd else { continue };
        let file = std::fs::File::from(fd);
        let patterns = cfg.patterns.clone();
        let journal = journal.clone();
        let pass = if cfg.pass_through {
            PassThrough::Own(stream)
        } else {
            PassThrough::Discard
        };
        readers.push(
            std::thread::Builder::new()
                .name(format!("drain-{stream}-{pid}"))
                .spawn(move || logs::drain(file, stream, pass, Some(pid), patterns, journal))?,
        );
    }
    Ok(Running {
        child,
        pid,
        identity,
        spawned,
        readers,
    })
}

async fn supervise(
    cfg: ProcessConfig,
    journal: Journal,
    mut ctl: mpsc::UnboundedReceiver<Control>,
    state: watch::Sender<State>,
    first: Running,
) -> anyhow::Result<i32> {
    let mut run = first;
    let mut attempt = 0u32;
    let mut backoff = cfg.backoff;
    let mut stopping: Option<String> = None;
    loop {
        let status = wait_child(&cfg, &journal, &mut run, &mut ctl, &mut stopping).await;
        let exit_t = journal.now_s();
        super::reaper::forget(run.pid);
        let age = run.spawned.elapsed();
        let info = ExitInfo::from_status(status);
        let requested = stopping.is_some();
        // Its last words (a watchdog line) are still in the pipe: read them before journalling the exit.
        drain_pipes(&run).await;
        journal.emit_at(
            exit_t,
            Event::Exit {
                pid: run.pid,
                code: info.code,
                signal: info.signal_name(),
                core_dumped: info.core_dumped,
                age_s: age.as_secs_f64(),
                status: info.status(),
                requested,
                meaning: info.meaning(),
                oom_killed: None,
            },
        );
        clear_group(&journal, &mut run);
        state.send_replace(State::Down {
            status: info.status(),
        });
        let status = info.status();

        let failed = status != 0;
        let restart = stopping.is_none()
            && match cfg.restart {
                RestartPolicy::Never => false,
                RestartPolicy::OnFailure => failed,
                RestartPolicy::Always => true,
            };
        if !restart {
            state.send_replace(State::Finished { status });
            return Ok(status);
        }
        if cfg.max_restarts.is_some_and(|m| attempt >= m) {
            journal.emit(Event::Note {
                level: "warn".into(),
                text: format!(
                    "gave up after {attempt} restarts (--max-restarts {})",
                    cfg.max_restarts.unwrap_or(0)
                ),
            });
            state.send_replace(State::Finished { status });
            return Ok(status);
        }
        if age >= cfg.healthy_after {
            backoff = cfg.backoff;
        }
        attempt += 1;
        journal.emit(Event::Restart {
            attempt,
            backoff_s: backoff.as_secs_f64(),
            reason: format!("pid {} {}", run.pid, info.meaning()),
            engine_restart_count: None,
        });
        // Wait out the backoff, but a stop request during it ends the supervisor at once.
        let sleep = tokio::time::sleep(backoff);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                _ = &mut sleep => break,
                c = ctl.recv() => match c {
                    Some(Control::Inject { .. }) => continue,
                    _ => {
                        state.send_replace(State::Finished { status });
                        return Ok(status);
                    }
                },
            }
        }
        backoff = (backoff * 2).min(cfg.backoff_max);
        run = match spawn_child(&cfg, &journal, attempt) {
            Ok(r) => r,
            Err(e) => {
                journal.emit(Event::Note {
                    level: "error".into(),
                    text: format!("restart failed: {e:#}"),
                });
                state.send_replace(State::Finished { status });
                return Ok(status);
            }
        };
        state.send_replace(State::Running(run.identity.clone()));
    }
}

/// Waits for the child to exit while serving control messages and the grace timer.
async fn wait_child(
    cfg: &ProcessConfig,
    journal: &Journal,
    run: &mut Running,
    ctl: &mut mpsc::UnboundedReceiver<Control>,
    stopping: &mut Option<String>,
) -> std::process::ExitStatus {
    let pgid = Pid::from_raw(run.pid as i32);
    let mut deadline: Option<tokio::time::Instant> = None;
    let mut ctl_open = true;
    loop {
        let grace = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            st = run.child.wait() => {
                return st.unwrap_or_else(|_| std::os::unix::process::ExitStatusExt::from_raw(1 << 8));
            }
            c = ctl.recv(), if ctl_open => {
                let Some(c) = c else { ctl_open = false; continue };
                let (sig, reason) = match c {
                    Control::Stop { reason } => (Signal::SIGTERM, reason),
                    Control::Forward(sig) => (sig, format!("forwarded {} that witness received", sig.as_str())),
                    Control::KillNow => (Signal::SIGKILL, "asked twice to stop: killing at once".to_string()),
                    Control::Inject { signal, label } => {
                        send_group(journal, pgid, signal, &format!("injected fault: {label}"));
                        continue;
                    }
                };
                if stopping.is_none() {
                    *stopping = Some(reason.clone());
                }
                send_group(journal, pgid, sig, &reason);
                if sig != Signal::SIGKILL && deadline.is_none() {
                    deadline = Some(tokio::time::Instant::now() + cfg.grace);
                }
            }
            _ = grace => {
                send_group(journal, pgid, Signal::SIGKILL, &format!("still running {} after it was asked to stop (--grace)", crate::journal::secs(cfg.grace.as_secs_f64())));
                deadline = None;
            }
        }
    }
}

fn send_group(journal: &Journal, pgid: Pid, sig: Signal, reason: &str) {
    if killpg(pgid, sig).is_ok() {
        journal.emit(Event::SignalSent {
            pid: pgid.as_raw() as u32,
            signal: signal_name(sig as i32),
            reason: reason.into(),
        });
    }
}

/// After an exit: give the pipes a moment to reach EOF, so the process's last lines are journalled
/// before its exit.
async fn drain_pipes(run: &Running) {
    let deadline = Instant::now() + Duration::from_millis(300);
    while Instant::now() < deadline && run.readers.iter().any(|r| !r.is_finished()) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Pipes still open after the drain mean a grandchild holds them (a leak worth saying). Then clear
/// the whole group, so nothing the child started outlives it.
fn clear_group(journal: &Journal, run: &mut Running) {
    let open = run.readers.iter().filter(|r| !r.is_finished()).count();
    if open > 0 {
        journal.emit(Event::Leak {
            pid: run.pid,
            detail: format!(
                "pid {} exited but {open} of its output pipes stay open: a process it started still holds them",
                run.pid
            ),
        });
    }
    let pgid = Pid::from_raw(run.pid as i32);
    if killpg(pgid, None).is_ok() {
        send_group(
            journal,
            pgid,
            Signal::SIGKILL,
            "the server exited; clearing what it left running in its process group",
        );
    }
    run.readers.retain(|r| !r.is_finished());
}
