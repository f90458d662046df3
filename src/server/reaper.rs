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

use std::collections::{BTreeMap, BTreeSet};
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

/// Whether witness spawned `pid` itself (its server root or a helper), rather than adopted it.
pub fn is_own(pid: u32) -> bool {
    own().contains(&pid)
}

/// Wait statuses of orphans witness reaped, for the tree watcher to say how they died.
static REAPED: Mutex<BTreeMap<u32, i32>> = Mutex::new(BTreeMap::new());

fn statuses() -> MutexGuard<'static, BTreeMap<u32, i32>> {
    REAPED.lock().unwrap_or_else(|p| p.into_inner())
}

/// The wait status of an orphan witness reaped, taken once.
pub fn take_status(pid: u32) -> Option<i32> {
    statuses().remove(&pid)
}

fn raw_status(s: nix::sys::wait::WaitStatus) -> Option<i32> {
    use nix::sys::wait::WaitStatus;
    match s {
        WaitStatus::Exited(_, code) => Some((code & 0xff) << 8),
        WaitStatus::Signaled(_, sig, core) => Some(sig as i32 | if core { 0x80 } else { 0 }),
        _ => None,
    }
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
    if !any_zombie_child() {
        // Nothing has ended: no need to list witness's children (a read per thread of witness).
        return Vec::new();
    }
    let own = own();
    let me = std::process::id() as i32;
    let stats: Vec<procfs::process::Stat> = crate::sample::kin::children(me as u32)
        .into_iter()
        .filter_map(|pid| procfs::process::Process::new(pid as i32).ok()?.stat().ok())
        .collect();
    let mut reaped = Vec::new();
    for stat in stats {
        if stat.ppid != me || stat.state != 'Z' || own.contains(&(stat.pid as u32)) {
            continue;
        }
        let pid = nix::unistd::Pid::from_raw(stat.pid);
        let flags = Some(nix::sys::wait::WaitPidFlag::WNOHANG);
        if let Ok(s) = nix::sys::wait::waitpid(pid, flags) {
            if s != nix::sys::wait::WaitStatus::StillAlive {
                if let Some(raw) = raw_status(s) {
                    let mut r = statuses();
                    // Nobody asks about most of them: keep the map bounded.
                    if r.len() > 1024 {
                        r.clear();
                    }
                    r.insert(stat.pid as u32, raw);
                }
                reaped.push(stat.pid as u32);
            }
        }
    }
    reaped
}

/// witness's own children whose status nobody will ask for (a watchdog told it is done): taken
/// on the way by [`any_zombie_child`] once they are gone, or with witness's exit.
static UNWANTED: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// `pid`, a child of witness's own, will not be waited for by its owner.
pub fn unwanted(pid: u32) {
    let mut u = UNWANTED.lock().unwrap_or_else(|e| e.into_inner());
    // Those already gone are taken now, so the list never grows.
    u.retain(|&p| !reap_unwanted(p));
    u.push(pid);
}

/// Takes an unwanted child's status if it is gone (true then: it is forgotten), never blocking.
fn reap_unwanted(pid: u32) -> bool {
    let mut status = 0;
    // SAFETY: waitpid on witness's own child, WNOHANG: never blocks.
    if unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG) } == 0 {
        return false;
    }
    forget(pid);
    true
}

/// Takes the status of `pid` if it is an unwanted child: true when it was one.
fn take_unwanted(pid: u32) -> bool {
    let mut u = UNWANTED.lock().unwrap_or_else(|e| e.into_inner());
    let Some(i) = u.iter().position(|&p| p == pid) else {
        return false;
    };
    // Seen as a zombie: its status is there to take.
    reap_unwanted(pid);
    u.swap_remove(i);
    true
}

/// Whether any child of witness has ended and waits to be reaped (asked without reaping it). An
/// unwanted one is taken on the way.
fn any_zombie_child() -> bool {
    loop {
        // SAFETY: waitid with WNOWAIT only looks; `info` is a plain struct the kernel fills.
        let pid = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let r = libc::waitid(
                libc::P_ALL,
                0,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            );
            if r != 0 || info.si_pid() == 0 {
                return false;
            }
            info.si_pid() as u32
        };
        if !take_unwanted(pid) {
            return true;
        }
    }
}

static RUNNING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether a reaping loop runs already (wrap starts one before the server; load and soak get one
/// from the supervisor).
pub fn running() -> bool {
    RUNNING.load(Ordering::SeqCst)
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
        RUNNING.store(true, Ordering::SeqCst);
        let mut sigchld = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())?;
        let count = Arc::new(AtomicU64::new(0));
        let n = count.clone();
        let task = tokio::spawn(async move {
            loop {
                // A signal that arrives while we scan wakes the next round: none is lost.
                if sigchld.recv().await.is_none() {
                    return;
                }
                if !any_zombie_child() {
                    // Already waited for by its owner (witness's own child): nothing to list.
                    continue;
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
        RUNNING.store(false, Ordering::SeqCst);
        let last = reap_orphans().len() as u64;
        self.count.load(Ordering::Relaxed) + last
    }
}
