//! Reaping orphans, so witness can be PID 1 in a container (and a good parent anywhere).
//!
//! Processes the server leaves behind are re-parented to PID 1, or to the nearest ancestor that
//! declared itself a child subreaper; `wrap` does that ([`become_subreaper`]), so the server's
//! orphans come to witness whether or not it is PID 1. When one exits it stays a zombie until its
//! parent waits on it, and a container whose PID 1 never does fills its pid table.
//!
//! The trap: a blanket `waitpid(-1)` would also take the exit status of witness's own child, which
//! tokio waits on by pid. So the reaper only ever waits on a zombie *by its pid*, and only when that
//! pid is not one witness spawned itself ([`SpawnGuard`] registers those, under the same lock the
//! reaper holds while it scans, so a child that exits the instant it is spawned is never mistaken for
//! an orphan).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Pids witness spawned and waits on itself.
static OWN: Mutex<BTreeSet<u32>> = Mutex::new(BTreeSet::new());

fn own() -> MutexGuard<'static, BTreeSet<u32>> {
    OWN.lock().unwrap_or_else(|p| p.into_inner())
}

/// Held from just before a spawn until the child's pid is registered.
pub struct SpawnGuard(MutexGuard<'static, BTreeSet<u32>>);

impl SpawnGuard {
    pub fn register(&mut self, pid: u32) {
        self.0.insert(pid);
    }
}

/// Take this before spawning a child witness will wait on, and register its pid with it.
pub fn spawn_guard() -> SpawnGuard {
    SpawnGuard(own())
}

/// Once witness has waited on its child, the pid may be reused by anything.
pub fn forget(pid: u32) {
    own().remove(&pid);
}

/// Makes orphans of witness's descendants come to witness rather than to PID 1 of the host.
pub fn become_subreaper() -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Waits on every zombie child of witness that witness did not spawn itself. Returns their pids.
pub fn reap_orphans() -> Vec<u32> {
    let own = own();
    let me = std::process::id() as i32;
    let Ok(all) = procfs::process::all_processes() else {
        return vec![];
    };
    let mut reaped = Vec::new();
    for p in all.flatten() {
        let Ok(stat) = p.stat() else { continue };
        if stat.ppid != me || stat.state != 'Z' || own.contains(&(stat.pid as u32)) {
            continue;
        }
        let pid = nix::unistd::Pid::from_raw(stat.pid);
        let flags = Some(nix::sys::wait::WaitPidFlag::WNOHANG);
        if let Ok(s) = nix::sys::wait::waitpid(pid, flags) {
            if s != nix::sys::wait::WaitStatus::StillAlive {
                reaped.push(stat.pid as u32);
            }
        }
    }
    reaped
}

/// The reaping loop: on every SIGCHLD, reap the orphans; counts them for the journal.
pub struct Reaper {
    count: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Reaper {
    /// Becomes a subreaper and starts reaping on SIGCHLD.
    pub fn start() -> std::io::Result<Self> {
        become_subreaper()?;
        let mut sigchld = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())?;
        let count = Arc::new(AtomicU64::new(0));
        let n = count.clone();
        let task = tokio::spawn(async move {
            loop {
                // A signal that arrives while we scan wakes the next round: none is lost.
                if sigchld.recv().await.is_none() {
                    return;
                }
                let reaped = tokio::task::spawn_blocking(reap_orphans)
                    .await
                    .unwrap_or_default();
                n.fetch_add(reaped.len() as u64, Ordering::Relaxed);
            }
        });
        Ok(Self { count, task })
    }

    /// Stops reaping (after one last round); returns how many orphans were reaped in all.
    pub fn stop(self) -> u64 {
        self.task.abort();
        let last = reap_orphans().len() as u64;
        self.count.load(Ordering::Relaxed) + last
    }
}
