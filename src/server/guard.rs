//! Nothing witness started outlives witness, however witness ends (kill -9 included).
//!
//! [`Guard`] holds it all for one supervisor: witness as subreaper (the reaping loop), the tree
//! watcher, and two layers, the strongest the privilege allows:
//! - **a cgroup** (v2, where witness may create one): the server is moved into
//!   `witness-<pid>` before it execs, so every descendant is in it whatever it does (`setsid`, double
//!   fork); ending the tree is one write to `cgroup.kill` (the kernel kills the whole group), or a
//!   kill of every pid in `cgroup.procs` on kernels without it.
//! - **a watchdog**: witness re-executes itself as `witness __watchdog`, in its own session, reading
//!   a pipe from witness. witness tells it the cgroup and every process of the tree it sees; if the
//!   pipe ends without witness saying "done" (witness was killed), the watchdog freezes what it was
//!   told (SIGSTOP, so nothing forks any more), adds their descendants, kills them all and the cgroup.
//!
//! Without root there is no cgroup: the watchdog's pid list (and witness as subreaper while it lives)
//! is the guarantee, which a process that forks away between two of witness's looks could escape.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use nix::unistd::Pid;

use super::tree::Tree;
use crate::journal::{Event, Journal};

/// A cgroup holding the server tree.
#[derive(Clone, Debug)]
pub struct Cgroup {
    pub dir: PathBuf,
}

impl Cgroup {
    /// Creates `witness-<pid>-<n>` next to (below) witness's own cgroup v2, when witness may.
    /// `WITNESS_CGROUP=off` declines it, to run (and test) the unprivileged guarantee as root.
    pub fn create(n: u32) -> Option<Cgroup> {
        if std::env::var_os("WITNESS_CGROUP").is_some_and(|v| v == "off") {
            return None;
        }
        let base = v2_own_dir()?;
        let dir = base.join(format!("witness-{}-{n}", std::process::id()));
        std::fs::create_dir(&dir).ok()?;
        // A cgroup we cannot move a process into is no use: test with the `cgroup.procs` file.
        if !dir.join("cgroup.procs").exists() {
            let _ = std::fs::remove_dir(&dir);
            return None;
        }
        Some(Cgroup { dir })
    }

    /// The path of `cgroup.procs`, prepared before fork (the child only writes "0" to it).
    pub fn procs_path(&self) -> std::ffi::CString {
        use std::os::unix::ffi::OsStrExt;
        std::ffi::CString::new(self.dir.join("cgroup.procs").as_os_str().as_bytes())
            .unwrap_or_default()
    }

    pub fn pids(&self) -> Vec<u32> {
        pids_in(&self.dir)
    }

    /// Kills every process in the cgroup and removes it once empty. Returns how many were left.
    pub fn kill_all(&self) -> usize {
        kill_cgroup(&self.dir)
    }
}

fn pids_in(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

fn kill_cgroup(dir: &Path) -> usize {
    let left = pids_in(dir);
    if !left.is_empty() && std::fs::write(dir.join("cgroup.kill"), "1").is_err() {
        for p in &left {
            // SAFETY: kill with plain integers.
            unsafe { libc::kill(*p as i32, libc::SIGKILL) };
        }
    }
    // The kernel takes a moment to empty it; rmdir succeeds once it is.
    for _ in 0..200 {
        if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    left.len()
}

/// witness's own cgroup v2 folder, from /proc/self/mountinfo and /proc/self/cgroup.
fn v2_own_dir() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = mounts.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        post.starts_with("cgroup2 ")
            .then(|| pre.split(' ').nth(4).map(PathBuf::from))?
    })?;
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = own.lines().find_map(|l| l.strip_prefix("0::"))?;
    let dir = mount.join(rel.trim_start_matches('/'));
    dir.is_dir().then_some(dir)
}

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
        let below = descendants(&pids);
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
            let _ = tokio::task::spawn_blocking(move || w.done()).await;
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

/// witness's end of the watchdog's pipe.
pub struct Watchdog {
    pipe: Mutex<Option<std::process::ChildStdin>>,
    child: Mutex<Option<std::process::Child>>,
}

impl Watchdog {
    /// Starts `witness __watchdog` in its own session. None when it cannot start (then the subreaper
    /// alone holds the tree while witness lives).
    pub fn start() -> Option<Watchdog> {
        let exe = std::env::current_exe().ok()?;
        let mut cmd = std::process::Command::new(exe);
        cmd.arg("__watchdog")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        // SAFETY: setsid is async-signal-safe.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        let mut own = super::reaper::spawn_guard();
        let mut child = cmd.spawn().ok()?;
        own.register(child.id());
        drop(own);
        let pipe = child.stdin.take();
        Some(Watchdog {
            pipe: Mutex::new(pipe),
            child: Mutex::new(Some(child)),
        })
    }

    fn say(&self, line: &str) {
        let mut p = self.pipe.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(w) = p.as_mut() {
            if w.write_all(line.as_bytes()).is_err() {
                *p = None;
            }
        }
    }

    pub fn cgroup(&self, c: &Cgroup) {
        self.say(&format!("cgroup {}\n", c.dir.display()));
    }

    /// A process of the server tree (pid and start time, so a reused pid is never killed).
    pub fn member(&self, pid: u32, start_time: u64) {
        self.say(&format!("pid {pid} {start_time}\n"));
    }

    pub fn forget(&self, pid: u32) {
        self.say(&format!("gone {pid}\n"));
    }

    /// witness ended the tree itself: the watchdog leaves.
    pub fn done(&self) {
        self.say("done\n");
        self.pipe.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(mut c) = self.child.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let pid = c.id();
            let _ = c.wait();
            super::reaper::forget(pid);
        }
    }
}

/// The watchdog process: reads witness's messages until the pipe ends; unless the last one was
/// "done", kills what it was told about.
pub fn watchdog_main() -> i32 {
    use std::io::BufRead;
    let mut cgroups: Vec<PathBuf> = Vec::new();
    let mut pids: std::collections::BTreeMap<u32, u64> = Default::default();
    let mut done = false;
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let mut w = line.split(' ');
        match (w.next(), w.next(), w.next()) {
            (Some("cgroup"), Some(_), _) => cgroups.push(PathBuf::from(&line[7..])),
            (Some("pid"), Some(p), Some(st)) => {
                if let (Ok(p), Ok(st)) = (p.parse(), st.parse()) {
                    pids.insert(p, st);
                }
            }
            (Some("gone"), Some(p), _) => {
                if let Ok(p) = p.parse::<u32>() {
                    pids.remove(&p);
                }
            }
            (Some("done"), _, _) => done = true,
            _ => {}
        }
    }
    if done {
        return 0;
    }
    // Freeze first, so nothing forks away while we look for descendants.
    let alive = |p: u32, st: u64| start_time(p) == Some(st);
    let mut victims: Vec<u32> = pids
        .iter()
        .filter(|(p, st)| alive(**p, **st))
        .map(|(p, _)| *p)
        .collect();
    for p in &victims {
        // SAFETY: kill with plain integers.
        unsafe { libc::kill(*p as i32, libc::SIGSTOP) };
    }
    let mut more = descendants(&victims);
    victims.append(&mut more);
    for p in &victims {
        // SAFETY: kill with plain integers.
        unsafe { libc::kill(*p as i32, libc::SIGKILL) };
    }
    for c in &cgroups {
        kill_cgroup(c);
    }
    0
}

fn start_time(pid: u32) -> Option<u64> {
    let p = procfs::process::Process::new(pid as i32).ok()?;
    let s = p.stat().ok()?;
    (s.state != 'Z').then_some(s.starttime)
}

/// Every live process below `roots` (by parent pid), found in /proc.
pub fn descendants(roots: &[u32]) -> Vec<u32> {
    let Ok(all) = procfs::process::all_processes() else {
        return vec![];
    };
    let parents: Vec<(u32, u32)> = all
        .flatten()
        .filter_map(|p| p.stat().ok())
        .map(|s| (s.pid as u32, s.ppid as u32))
        .collect();
    let mut set: std::collections::BTreeSet<u32> = roots.iter().copied().collect();
    let mut found = Vec::new();
    loop {
        let before = found.len();
        for (pid, ppid) in &parents {
            if set.contains(ppid) && set.insert(*pid) {
                found.push(*pid);
            }
        }
        if found.len() == before {
            return found;
        }
    }
}
