//! The process target: runs the server under test as witness's child, in its own process group, under
//! a restart policy, and journals every spawn, exit, matched log line, signal and restart.
//!
//! One `tokio::select!` loop per child (nextest's executor): wait for exit, control messages (stop,
//! forward a signal, kill now, inject a fault) and the grace timer. Output is drained by two threads
//! per child (see `logs.rs`), so a slow witness can never block the server.
//!
//! The server is a tree (tree.rs): its descendants are journalled as they come and go, witness is
//! their subreaper, and a child that exits 0 leaving a process that now serves is a daemon witness
//! adopts: it watches it, measures it and stops it at the end. Nothing witness started outlives it
//! (guard.rs, over cgroup.rs where privileged and watchdog.rs, a watchdog process). stdin is the
//! caller's when asked (wrap); when it is a terminal the child's process group is made the
//! foreground one, so reading it does not stop the child with SIGTTIN.
//!
//! If witness dies, even by SIGKILL, the child gets SIGKILL from the kernel: `PR_SET_PDEATHSIG` is
//! set in the forked child (spawn.rs, which starts it in the tree's cgroup). That death signal is
//! tied to the *thread* that forked, so children are only spawned from the async supervisor task,
//! which runs on the runtime's long-lived worker threads, never from `spawn_blocking` threads that
//! the runtime retires when idle.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::sync::{mpsc, watch};

use super::exit::{signal_name, ExitInfo};
use super::guard::Guard;
use super::logs::{self, PassThrough, Patterns};
use super::tree;
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
    /// Hand witness's own stdin to the child (wrap: a stdio server reads its client there).
    pub inherit_stdin: bool,
    /// The port the server should serve (load, soak): how a daemon that took over is recognised.
    pub port: Option<u16>,
    /// The server speaks a protocol on its stdin/stdout (MCP over stdio): each spawn's pipes go here,
    /// to the load driver, instead of stdin being closed and stdout drained as log lines. Its stderr
    /// is still the log.
    pub stdio: Option<mpsc::UnboundedSender<StdioPipes>>,
    /// Set once an MCP client closed the server's input for good (wrap's relay saw EOF on its stdin
    /// after JSON-RPC): an exit after it ends the session, and nothing is restarted into a closed
    /// pipe.
    pub input_closed: Option<Arc<std::sync::atomic::AtomicBool>>,
    /// Told of each exit of a child whose stdio is relayed, once the restart policy has decided
    /// (wrap's relay answers the calls left in flight when a restart follows).
    pub on_exit: Option<ExitHook>,
}

/// What the owner of the pipes hears of an exit: who, why, at what age, and whether a restart
/// follows.
#[derive(Clone, Debug, PartialEq)]
pub struct ExitNotice {
    pub pid: u32,
    pub meaning: String,
    pub age_s: f64,
    pub restarting: bool,
}

/// Called on the supervisor's task: it must not block.
pub type ExitHook = Arc<dyn Fn(ExitNotice) + Send + Sync>;

/// One spawn's protocol pipes (MCP over stdio); a restart sends new ones.
#[derive(Debug)]
pub struct StdioPipes {
    pub pid: u32,
    pub stdin: std::os::fd::OwnedFd,
    pub stdout: std::os::fd::OwnedFd,
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
    /// The port the server serves, when known: its identity is the process listening there.
    port: Option<u16>,
    /// Journals each new process seen holding the listening socket; ends with the supervisor.
    listening: Option<tokio::task::JoinHandle<()>>,
}

/// How often the supervisor looks at who holds the server's listening socket: a look is one
/// liveness check of the known listener, and a read of the tree's descriptors only once it is gone.
const LISTEN_POLL: Duration = Duration::from_millis(50);

/// Journals [`Event::Listening`] each time a new process of witness's tree holds the listening
/// socket on `port`: the server is what serves, whatever supervises it.
fn watch_listener(port: u16, journal: Journal) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut known: Option<Identity> = None;
        // The last look that saw nobody listening: the listener began after it.
        let mut unseen: Option<f64> = None;
        loop {
            // Until someone listens, look often: when the server began listening is the start a
            // timer armed then counts from.
            tokio::time::sleep(if known.is_some() {
                LISTEN_POLL
            } else {
                LISTEN_POLL / 5
            })
            .await;
            let k = known.clone();
            let before = journal.now_s();
            let seen = tokio::task::spawn_blocking(move || match k {
                Some(k) if super::identity_of(k.pid).as_ref() == Some(&k) => Some(Some(k)),
                _ => super::our_listener(port).map(Some),
            })
            .await
            .ok()
            .flatten();
            let Some(Some(now)) = seen else {
                unseen = Some(before);
                continue;
            };
            if known.as_ref() != Some(&now) {
                journal.emit(Event::Listening {
                    pid: now.pid,
                    start_time: now.start_time,
                    port,
                    command: tree::command_of(now.pid),
                    unseen_s: unseen.take(),
                });
                known = Some(now);
            }
        }
    })
}

pub use crate::error::SpawnError;

impl Supervisor {
    /// Starts the first child; fails at once if the command cannot be started.
    pub async fn start(cfg: ProcessConfig, journal: Journal) -> anyhow::Result<Self> {
        let (ctl, rx) = mpsc::unbounded_channel();
        let (state_tx, state) = watch::channel(State::Starting);
        let guard = Guard::start(&journal);
        let first = match spawn_child(&cfg, &journal, 0, &guard) {
            Ok(f) => f,
            Err(e) => {
                guard.finish(&journal).await;
                return Err(e);
            }
        };
        state_tx.send_replace(State::Running(first.identity.clone()));
        let port = cfg.port;
        let listening = port.map(|p| watch_listener(p, journal.clone()));
        let task = tokio::spawn(async move {
            let r = supervise(cfg, journal.clone(), rx, state_tx, first, &guard).await;
            guard.finish(&journal).await;
            r
        });
        Ok(Self {
            ctl,
            state,
            task,
            port,
            listening,
        })
    }

    pub fn control(&self) -> mpsc::UnboundedSender<Control> {
        self.ctl.clone()
    }

    pub fn state(&self) -> watch::Receiver<State> {
        self.state.clone()
    }

    /// Who the server is now: the process of witness's tree listening on its port (a shell loop or
    /// `timeout` above it only supervises it), else witness's own child while one runs.
    pub fn identity(&self) -> Option<Identity> {
        let child = self.state.borrow().identity();
        child.as_ref()?;
        self.port.and_then(super::our_listener).or(child)
    }

    pub fn send(&self, c: Control) {
        let _ = self.ctl.send(c);
    }

    /// Waits until the supervisor is done (child gone for good); returns the child's last status.
    pub async fn wait(self) -> anyhow::Result<i32> {
        let r = self.task.await?;
        if let Some(l) = self.listening {
            l.abort();
        }
        r
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
    /// None for an adopted daemon: witness is its subreaper, the reaper takes its status.
    child: Option<super::spawn::Child>,
    pid: u32,
    identity: Identity,
    spawned: Instant,
    /// The threads draining its stdout and stderr.
    readers: Vec<Reader>,
    /// The child was given the terminal's foreground.
    tty: bool,
}

/// Whether `program` (the command's first word) could be executed, checked before anything starts
/// the way `execvp` looks for it: a path with a `/` as it is, a bare name in each folder of PATH.
/// A file that is not there is [`SpawnError`] NotFound (127 in wrap); one that is there but not an
/// executable file is PermissionDenied (126). Where the answer is unsure (no PATH, an empty entry
/// meaning the current folder), it says yes and the spawn decides.
pub fn check_startable(program: &str) -> Result<(), SpawnError> {
    use std::path::Path;
    let fail = |source: std::io::Error| SpawnError {
        command: program.to_string(),
        source,
    };
    let denied = || fail(std::io::Error::from_raw_os_error(libc::EACCES));
    let runnable = |p: &Path| {
        let Ok(c) = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()) else {
            return false;
        };
        // SAFETY: access only reads the NUL-terminated path it is given.
        p.is_file() && unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0
    };
    if program.contains('/') {
        let p = Path::new(program);
        return match std::fs::metadata(p) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(fail(e)),
            Ok(_) if !runnable(p) => Err(denied()),
            _ => Ok(()),
        };
    }
    let Some(path) = std::env::var_os("PATH") else {
        return Ok(());
    };
    let dirs: Vec<_> = std::env::split_paths(&path).collect();
    if dirs.iter().any(|d| d.as_os_str().is_empty()) {
        return Ok(());
    }
    let found: Vec<_> = dirs
        .iter()
        .map(|d| d.join(program))
        .filter(|p| p.exists())
        .collect();
    if found.iter().any(|p| runnable(p)) {
        Ok(())
    } else if found.is_empty() {
        Err(fail(std::io::ErrorKind::NotFound.into()))
    } else {
        Err(denied())
    }
}

fn spawn_child(
    cfg: &ProcessConfig,
    journal: &Journal,
    attempt: u32,
    guard: &Guard,
) -> anyhow::Result<Running> {
    // A terminal on stdin, with witness in its foreground: the child's group takes the foreground.
    let tty = cfg.inherit_stdin && terminal_is_ours();
    let spec = super::spawn::Spec {
        argv: &cfg.command,
        input: match (cfg.stdio.is_some(), cfg.inherit_stdin) {
            (true, _) => super::spawn::Input::Piped,
            (false, true) => super::spawn::Input::Inherit,
            (false, false) => super::spawn::Input::Null,
        },
        cgroup: guard.cgroup.as_ref().map(|c| c.dir.as_path()),
        // witness may have raised its own open-file limit for the ladder: the server gets the original.
        nofile: crate::server::fds::original(),
        foreground: tty,
    };
    // Registered before the reaper can look, so it never takes this child's exit status.
    let mut own = super::reaper::spawn_guard();
    let mut child = super::spawn::spawn(&spec).map_err(|source| SpawnError {
        command: cfg.command[0].clone(),
        source,
    })?;
    let spawned = Instant::now();
    let pid = child.pid;
    own.register(pid);
    drop(own);
    let identity = super::identity_of(pid).unwrap_or(Identity {
        pid,
        start_time: 0,
        container_id: None,
        container_started_at: None,
        socket_inode: None,
    });
    // Journalled first: the tree's watcher may hold its lock for a whole look, and a server that
    // listens within a millisecond must find its spawn already written.
    journal.emit(Event::Spawn {
        pid,
        start_time: identity.start_time,
        command: cfg.command.clone(),
        attempt,
        container_id: None,
    });
    guard.tree.set_root(pid);
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
        (stdout, Stream::Stdout),
        (child.stderr.take(), Stream::Stderr),
    ];
    for (fd, stream) in streams {
        let Some(fd) = fd else { continue };
        use std::os::fd::AsFd;
        logs::widen_pipe(fd.as_fd());
        let file = std::fs::File::from(fd);
        let patterns = cfg.patterns.clone();
        let journal = journal.clone();
        let pass = if cfg.pass_through {
            PassThrough::Own(stream)
        } else {
            PassThrough::Discard
        };
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let said = done.clone();
        std::thread::Builder::new()
            .name(format!("drain-{stream}-{pid}"))
            .spawn(move || {
                logs::drain(file, stream, pass, Some(pid), patterns, journal);
                said.store(true, std::sync::atomic::Ordering::SeqCst);
                READER_ENDED.notify_waiters();
            })?;
        readers.push(Reader { done });
    }
    if let Some(w) = &guard.watchdog {
        w.member(pid, identity.start_time);
    }
    Ok(Running {
        child: Some(child),
        pid,
        identity,
        spawned,
        readers,
        tty,
    })
}

/// stdin is a terminal and witness's process group is its foreground one.
fn terminal_is_ours() -> bool {
    // SAFETY: isatty / tcgetpgrp / getpgrp on fd 0 only read.
    unsafe { libc::isatty(0) == 1 && libc::tcgetpgrp(0) == libc::getpgrp() }
}

/// Takes the terminal back for witness's own group once the child that had it is gone.
fn take_terminal_back() {
    // SAFETY: signal mask of this thread only, restored at once; tcsetpgrp on fd 0.
    unsafe {
        let mut block: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut block);
        libc::sigaddset(&mut block, libc::SIGTTOU);
        libc::pthread_sigmask(libc::SIG_BLOCK, &block, &mut old);
        libc::tcsetpgrp(0, libc::getpgrp());
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    }
}

/// A process the exited child left that now serves (or, with no port to check, still runs): an
/// orphan witness adopted as subreaper, or one in the tree's cgroup. Waits a moment for it to listen.
async fn find_daemon(cfg: &ProcessConfig, guard: &Guard) -> Option<(Identity, bool)> {
    let me = std::process::id();
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        // The cgroup's processes (every one the server started is born there); without a cgroup,
        // witness's children (the orphans it adopted as subreaper).
        let (in_cgroup, pids) = match guard.cgroup.as_ref().map(|c| c.pids()) {
            Some(c) => (c.clone(), c),
            None => (Vec::new(), crate::sample::kin::children(me)),
        };
        let stats: Vec<procfs::process::Stat> = pids
            .into_iter()
            .filter_map(|pid| procfs::process::Process::new(pid as i32).ok()?.stat().ok())
            .collect();
        let mut candidates: Vec<Identity> = Some(stats)
            .map(|all| {
                all.into_iter()
                    .filter(|s| s.state != 'Z' && s.state != 'X')
                    .filter(|s| {
                        let pid = s.pid as u32;
                        (s.ppid as u32 == me && !super::reaper::is_own(pid))
                            || in_cgroup.contains(&pid)
                    })
                    .filter_map(|s| super::identity_of(s.pid as u32))
                    .collect()
            })
            .unwrap_or_default();
        if candidates.is_empty() {
            return None;
        }
        candidates.sort_by_key(|i| (i.start_time, i.pid));
        let Some(port) = cfg.port else {
            // No port to check (wrap): a daemon is one that left witness's session (setsid), as
            // daemons do; a background job the server left in its group is not one.
            let own_session = unsafe { libc::getsid(0) };
            let daemon = candidates.into_iter().find(|c| {
                procfs::process::Process::new(c.pid as i32)
                    .and_then(|p| p.stat())
                    .is_ok_and(|s| s.session != own_session)
            });
            return daemon.map(|i| (i, false));
        };
        if let Some(l) = super::listener_of(port) {
            let mine = |pid: u32| {
                candidates.iter().any(|c| c.pid == pid)
                    || crate::sample::kin::below(
                        &candidates.iter().map(|c| c.pid).collect::<Vec<_>>(),
                    )
                    .contains(&pid)
            };
            if mine(l.pid) {
                return Some((l, true));
            }
        }
        if Instant::now() >= deadline {
            return candidates.into_iter().next().map(|i| (i, false));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn supervise(
    cfg: ProcessConfig,
    journal: Journal,
    mut ctl: mpsc::UnboundedReceiver<Control>,
    state: watch::Sender<State>,
    first: Running,
    guard: &Guard,
) -> anyhow::Result<i32> {
    let mut run = first;
    let mut attempt = 0u32;
    let mut backoff = cfg.backoff;
    let mut stopping: Option<String> = None;
    loop {
        let status = wait_child(&cfg, &journal, &mut run, &mut ctl, &mut stopping).await;
        let exit_t = journal.now_s();
        if run.tty {
            take_terminal_back();
        }
        super::reaper::forget(run.pid);
        let age = run.spawned.elapsed();
        let info = ExitInfo::from_status(status);
        let requested = stopping.is_some();
        // Nobody serves for witness until it knows whether a daemon took over.
        state.send_replace(State::Down {
            status: info.status(),
        });
        // A clean exit that leaves a process serving: the server daemonized.
        let daemon = if !requested && info.code == Some(0) {
            find_daemon(&cfg, guard).await
        } else {
            None
        };
        if daemon.is_none() {
            // Its last words (a watchdog line) are still in the pipe: read them before journalling
            // the exit. (A daemon keeps the pipes: nothing to wait for.)
            drain_pipes(&run).await;
        }
        let daemon_what = |serves: bool| match (serves, cfg.port) {
            (true, Some(p)) => format!("now serves port {p}"),
            (_, Some(p)) => format!("keeps running (not listening on port {p})"),
            _ => "keeps running".to_string(),
        };
        let meaning = match &daemon {
            Some((d, serves)) => format!(
                "{}: daemonized: pid {} (started by the server) {}",
                info.meaning(),
                d.pid,
                daemon_what(*serves)
            ),
            None => info.meaning(),
        };
        // Its last words, whether or not a pattern matched them: an exit that says why it died
        // (an error line, then exit 1) is that, not a timer.
        let spawn_t = exit_t - age.as_secs_f64();
        if let Some((stream, line)) = journal.last_line_since(spawn_t) {
            journal.emit_at(
                exit_t,
                Event::Output {
                    pid: Some(run.pid),
                    stream,
                    line,
                },
            );
        }
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
                meaning,
                oom_killed: None,
            },
        );
        if let Some((d, serves)) = daemon {
            if let Some(hook) = &cfg.on_exit {
                hook(ExitNotice {
                    pid: run.pid,
                    meaning: info.meaning(),
                    age_s: age.as_secs_f64(),
                    restarting: false,
                });
            }
            let command = tree::command_of(d.pid);
            let what = daemon_what(serves);
            guard
                .adopted
                .store(true, std::sync::atomic::Ordering::SeqCst);
            journal.emit(Event::Note {
                level: "notice".into(),
                text: format!(
                    "daemonized: pid {} (started by the server) {what}; witness adopted it as subreaper, measures it as the server and stops it at the end ({})",
                    d.pid,
                    command.join(" ")
                ),
            });
            // The daemon's life begins for the analysis here: later levels are measured against it.
            journal.emit(Event::Spawn {
                pid: d.pid,
                start_time: d.start_time,
                command,
                attempt,
                container_id: None,
            });
            guard.tree.set_root(d.pid);
            if let Some(w) = &guard.watchdog {
                w.member(d.pid, d.start_time);
            }
            state.send_replace(State::Running(d.clone()));
            run = Running {
                child: None,
                pid: d.pid,
                spawned: Instant::now() - Duration::from_secs_f64(tree::age_of(d.start_time)),
                identity: d,
                readers: std::mem::take(&mut run.readers),
                tty: false,
            };
            continue;
        }
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
        let input_closed = cfg
            .input_closed
            .as_ref()
            .is_some_and(|c| c.load(std::sync::atomic::Ordering::SeqCst));
        if restart && input_closed {
            journal.emit(Event::Note {
                level: "info".into(),
                text: format!(
                    "not restarted: the client closed the server's stdin, so pid {} ended with its session",
                    run.pid
                ),
            });
        }
        let gives_up = cfg.max_restarts.is_some_and(|m| attempt >= m);
        if let Some(hook) = &cfg.on_exit {
            hook(ExitNotice {
                pid: run.pid,
                meaning: info.meaning(),
                age_s: age.as_secs_f64(),
                restarting: restart && !input_closed && !gives_up,
            });
        }
        if !restart || input_closed {
            state.send_replace(State::Finished { status });
            return Ok(status);
        }
        if gives_up {
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
        run = match spawn_child(&cfg, &journal, attempt, guard) {
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
            st = exited(&mut run.child, run.pid, run.identity.start_time) => {
                return st;
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

/// The child's exit; an adopted daemon's from the reaper (witness is its subreaper).
async fn exited(
    child: &mut Option<super::spawn::Child>,
    pid: u32,
    start_time: u64,
) -> std::process::ExitStatus {
    use std::os::unix::process::ExitStatusExt;
    if let Some(c) = child {
        return c
            .wait()
            .await
            .unwrap_or_else(|_| std::process::ExitStatus::from_raw(1 << 8));
    }
    let mut gone_looks = 0;
    loop {
        if let Some(raw) = super::reaper::take_status(pid) {
            return std::process::ExitStatus::from_raw(raw);
        }
        if super::identity_of(pid).is_none_or(|i| i.start_time != start_time) {
            gone_looks += 1;
            // Reaped by someone else: gone, status unknown (reported as a clean 0 would be a lie;
            // 255 is "unknown" in the exit table).
            if gone_looks > 20 {
                return std::process::ExitStatus::from_raw(255 << 8);
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn send_group(journal: &Journal, pgid: Pid, sig: Signal, reason: &str) {
    // A daemon that did not start its own group: signal the process itself.
    let sent = killpg(pgid, sig).is_ok() || nix::sys::signal::kill(pgid, sig).is_ok();
    if sent {
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
    let deadline = tokio::time::Instant::now() + Duration::from_millis(300);
    loop {
        // Registered before the look, so a reader that ends in between still wakes it.
        let ended = READER_ENDED.notified();
        tokio::pin!(ended);
        ended.as_mut().enable();
        if run.readers.iter().all(Reader::is_finished) {
            return;
        }
        if tokio::time::timeout_at(deadline, ended).await.is_err() {
            return;
        }
    }
}

/// A thread draining one of the child's pipes; done at the pipe's EOF.
struct Reader {
    done: Arc<std::sync::atomic::AtomicBool>,
}

impl Reader {
    fn is_finished(&self) -> bool {
        self.done.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Told whenever any reader ends: the supervisor waits on it for the pipes' EOF after an exit.
static READER_ENDED: tokio::sync::Notify = tokio::sync::Notify::const_new();

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
