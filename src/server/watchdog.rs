//! The watchdog: witness re-executes itself as `witness __watchdog`, in a session of its own, reading a
//! pipe from witness. witness tells it the cgroup and every process of the tree it sees; if the pipe
//! ends without witness saying "done" (witness was killed), the watchdog freezes what it was told
//! (SIGSTOP, so nothing forks any more), adds their descendants, kills them all and the cgroup.
//! The guard ([`super::guard`]) starts it and the tree watcher tells it what it sees: it depends on
//! neither.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;

use super::cgroup::{kill_cgroup, Cgroup};

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
        // No pre_exec hook, so the standard library can use posix_spawn (a vfork: the parent's
        // memory is not copied); the watchdog starts its own session itself.
        cmd.arg("__watchdog")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
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

    /// witness ended the tree itself: the watchdog leaves. Once "done" is in the pipe, witness
    /// need not wait for it to go (it reads it and exits whatever witness does next): a thread of
    /// its own takes its status, and never the reaping loop, which would count it as the server's.
    pub fn done(&self) {
        self.say("done\n");
        self.pipe.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(mut c) = self.child.lock().unwrap_or_else(|e| e.into_inner()).take() {
            // Without a thread, it stays a zombie until witness exits: harmless.
            let _ = std::thread::Builder::new()
                .name("watchdog-wait".into())
                .spawn(move || {
                    let pid = c.id();
                    let _ = c.wait();
                    super::reaper::forget(pid);
                });
        }
    }
}

/// The watchdog process: reads witness's messages until the pipe ends; unless the last one was
/// "done", kills what it was told about.
pub fn watchdog_main() -> i32 {
    use std::io::BufRead;
    // Its own session: a terminal's Ctrl-C to witness's group, or a hang-up, does not reach it.
    // SAFETY: setsid takes no arguments; it fails only for a group leader, which this is not.
    unsafe { libc::setsid() };
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
    let mut more = crate::sample::kin::below(&victims);
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
