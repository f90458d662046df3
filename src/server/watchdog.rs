//! The watchdog: a process of witness's in a session of its own (forked from `main` before the
//! runtime's threads exist for `wrap -- CMD`, else `witness __watchdog` started again), reading a
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
    pipe: Mutex<Option<std::fs::File>>,
    /// The watchdog's pid, until its exit is waited for.
    pid: Mutex<Option<u32>>,
}

/// The watchdog [`fork_early`] made, for the first guard to take.
static EARLY: Mutex<Option<Watchdog>> = Mutex::new(None);

/// Forks the watchdog while witness has one thread (main, before the runtime starts): the copy may
/// then run ordinary code, so it needs no exec of witness's 20 MiB binary, which on two busy cores
/// took a tenth of `wrap -- true`. [`Watchdog::start`] takes it; where the fork fails, it starts one
/// the usual way.
pub fn fork_early() {
    let Ok((read, write)) = super::spawn::pipe() else {
        return;
    };
    let mut own = super::reaper::spawn_guard();
    // SAFETY: witness has a single thread here, so the child is a whole copy of it and may run any
    // code; it never returns from this branch.
    match unsafe { libc::fork() } {
        0 => {
            drop(write);
            // It holds nothing of witness's: a client's pipes on 0, 1, 2 must see EOF when witness
            // goes.
            // SAFETY: open and dup2 on plain paths and fds.
            unsafe {
                let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
                for fd in 0..3 {
                    libc::dup2(null, fd);
                }
                if null > 2 {
                    libc::close(null);
                }
            }
            // Named for `ps` and `top`, whose command line is still witness's.
            // SAFETY: prctl with a NUL-terminated name.
            unsafe { libc::prctl(libc::PR_SET_NAME, c"witness-watch".as_ptr(), 0, 0, 0) };
            let code = serve(std::fs::File::from(read));
            // SAFETY: ends this copy only, without running witness's exit handlers.
            unsafe { libc::_exit(code) }
        }
        -1 => {}
        pid => {
            own.register(pid as u32);
            *EARLY.lock().unwrap_or_else(|e| e.into_inner()) = Some(Watchdog {
                pipe: Mutex::new(Some(std::fs::File::from(write))),
                pid: Mutex::new(Some(pid as u32)),
            });
        }
    }
}

impl Watchdog {
    /// The watchdog [`fork_early`] made, or `witness __watchdog` started now in its own session.
    /// None when it cannot start (then the subreaper alone holds the tree while witness lives).
    pub fn start() -> Option<Watchdog> {
        if let Some(w) = EARLY.lock().unwrap_or_else(|e| e.into_inner()).take() {
            return Some(w);
        }
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
        let pipe = child
            .stdin
            .take()
            .map(|p| std::fs::File::from(std::os::fd::OwnedFd::from(p)));
        Some(Watchdog {
            pipe: Mutex::new(pipe),
            pid: Mutex::new(Some(child.id())),
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
        if let Some(pid) = self.pid.lock().unwrap_or_else(|e| e.into_inner()).take() {
            // Not waited for here: its status is nobody's, and the reaping loop takes it once it
            // is gone, without counting it as the server's orphan.
            super::reaper::unwanted(pid);
        }
    }
}

/// The watchdog process: reads witness's messages until the pipe ends; unless the last one was
/// "done", kills what it was told about.
pub fn watchdog_main() -> i32 {
    serve(std::io::stdin())
}

/// The watchdog's work, on the read end of witness's pipe.
fn serve(from: impl std::io::Read) -> i32 {
    use std::io::BufRead;
    // Its own session: a terminal's Ctrl-C to witness's group, or a hang-up, does not reach it.
    // SAFETY: setsid takes no arguments; it fails only for a group leader, which this is not.
    unsafe { libc::setsid() };
    let mut cgroups: Vec<PathBuf> = Vec::new();
    let mut pids: std::collections::BTreeMap<u32, u64> = Default::default();
    let mut done = false;
    for line in std::io::BufReader::new(from).lines() {
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
