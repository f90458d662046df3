//! Nothing witness started outlives witness, however witness ends (kill -9 included).
//!
//! [`Guard`] holds it all for one supervisor: witness as subreaper (the reaping loop), the tree
//! watcher, and two layers, the strongest the privilege allows:
//! - **a cgroup** (v2, where witness may create one): the server starts in `witness-<pid>-<n>`
//!   (created there by clone3, or moved there before it execs), so every descendant is in it
//!   whatever it does (`setsid`, double fork); ending the tree is one write to `cgroup.kill` (the
//!   kernel kills the whole group), or a kill of every pid in `cgroup.procs` on kernels without it.
//! - **a watchdog**: a process of witness's (forked early, or `witness __watchdog`), in its own
//!   session, reading a pipe from witness. witness tells it the cgroup and every process of the
//!   tree it sees; if the pipe ends without witness saying "done" (witness was killed), the
//!   watchdog freezes what it was told (SIGSTOP, so nothing forks any more), adds their
//!   descendants, kills them all and the cgroup.
//!
//! Without root there is no cgroup: the watchdog's pid list (and witness as subreaper while it lives)
//! is the guarantee, which a process that forks away between two of witness's looks could escape.
//!
//! The cgroup and the watchdog are rooms of their own ([`super::cgroup`], [`super::watchdog`]), below
//! both the guard and the tree watcher, so the guard holds the tree and nothing points back.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use nix::unistd::Pid;

use super::cgroup::Cgroup;
use super::tree::Tree;
use super::watchdog::Watchdog;
use crate::journal::{Event, Journal};

/// What keeps the server's tree witness's: the subreaper's reaping loop (unless wrap runs one),
/// the watchdog, the cgroup where witness may make one, and the tree watcher.
pub struct Guard {
    reaper: Option<super::reaper::Reaper>,
    pub watchdog: Option<Arc<Watchdog>>,
    pub cgroup: Option<Cgroup>,
    pub tree: Tree,
    /// A daemon was adopted: the end says what became of it.
    pub adopted: std::sync::atomic::AtomicBool,
}

impl Guard {
    pub fn start(journal: &Journal) -> Guard {
        let reaper = if super::reaper::running() {
            None
        } else {
            match super::reaper::Reaper::start() {
                Ok(r) => Some(r),
                Err(e) => {
                    journal.emit(Event::Note {
                        level: "warn".into(),
                        text: format!("witness could not become the server's subreaper: {e}"),
                    });
                    None
                }
            }
        };
        let watchdog = Watchdog::start().map(Arc::new);
        let cgroup = Cgroup::create(0);
        if let (Some(w), Some(c)) = (&watchdog, &cgroup) {
            w.cgroup(c);
        }
        let guarantee = match (&cgroup, &watchdog) {
            (Some(c), _) => format!("the server runs in its own cgroup ({}); if witness is killed, a watchdog has the kernel end that whole cgroup", c.dir.display()),
            (None, Some(_)) => "no cgroup (needs root and a writable cgroup v2): a watchdog process kills the server tree witness saw if witness is killed".to_string(),
            (None, None) => "neither a cgroup nor a watchdog could be set up: if witness is killed, only its direct child is sure to end".to_string(),
        };
        journal.emit(Event::Note {
            level: if watchdog.is_none() { "warn" } else { "info" }.into(),
            text: guarantee,
        });
        let tree = Tree::start(journal.clone(), watchdog.clone(), cgroup.clone());
        Guard {
            reaper,
            watchdog,
            cgroup,
            tree,
            adopted: Default::default(),
        }
    }

    /// The tree's live processes now: members seen, the cgroup's, and whatever is below them.
    fn left(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self.tree.snapshot().iter().map(|m| m.pid).collect();
        if let Some(c) = &self.cgroup {
            pids.extend(c.pids());
        }
        let below = crate::sample::kin::below(&pids);
        pids.extend(below);
        pids.sort();
        pids.dedup();
        pids.retain(|p| alive(*p));
        pids
    }

    /// At the end: nothing the server started is left running, and the journal says so.
    pub async fn finish(self, journal: &Journal) {
        let left = self.left();
        if !left.is_empty() {
            for p in &left {
                let _ = nix::sys::signal::kill(Pid::from_raw(*p as i32), Signal::SIGKILL);
            }
            if let Some(c) = &self.cgroup {
                c.kill_all();
            }
            let shown: Vec<String> = left.iter().take(10).map(|p| p.to_string()).collect();
            journal.emit(Event::Note {
                level: "warn".into(),
                text: format!(
                    "killed {} process(es) the server left running (pid {}{})",
                    left.len(),
                    shown.join(", "),
                    if left.len() > 10 { ", …" } else { "" }
                ),
            });
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        while !self.left().is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let still = self.left();
        let said = !left.is_empty() || self.adopted.load(std::sync::atomic::Ordering::SeqCst);
        journal.emit(Event::Note {
            level: match (still.is_empty(), said) {
                (false, _) => "error",
                (true, true) => "notice",
                (true, false) => "info",
            }
            .into(),
            text: if still.is_empty() {
                "nothing the server started is left running".to_string()
            } else {
                format!(
                    "{} process(es) the server started could not be ended: {still:?}",
                    still.len()
                )
            },
        });
        let tree = self.tree;
        let _ = tokio::task::spawn_blocking(move || tree.stop()).await;
        if let Some(c) = &self.cgroup {
            c.kill_all();
        }
        if let Some(w) = self.watchdog {
            w.done();
        }
        if let Some(r) = self.reaper {
            r.stop();
        }
    }
}

/// Alive and not a zombie.
fn alive(pid: u32) -> bool {
    procfs::process::Process::new(pid as i32)
        .and_then(|p| p.stat())
        .is_ok_and(|s| s.state != 'Z' && s.state != 'X')
}
