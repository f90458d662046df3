//! The server as a process tree: its descendants (pre-fork workers, `sh -c` children, daemons), each
//! one's appearance and disappearance journalled as `worker_start` / `worker_exit`.
//!
//! Membership comes from /proc, looked at every [`POLL`]: the descendants of the server's root
//! process, the orphans re-parented to witness (it is their subreaper), and everything in the tree's
//! cgroup when there is one. How a worker died comes from the best source there is, named in the
//! event: the kernel's process-event connector (`proc_connector`, needs CAP_NET_ADMIN), witness's own
//! wait as subreaper (`wait`), the parent's log line naming its pid (`log_line`), else `unknown`
//! ("gone, status unknown").
//!
//! Workers and helpers apart, by each child's own life: a descendant that listens on a socket or
//! lives longer than [`HELPER_AGE_S`] is a worker, journalled as today. A child that exits younger
//! and never listened is a helper (an MCP server's `git` per call), whatever its siblings are: a
//! long-lived `git cat-file` beside the short ones does not make them a pool. A command's first
//! [`HELPERS_JOURNALLED`] helpers are journalled one by one (marked `helper`), the rest only counted
//! per command in bounded state (how many, how long they lived, how they ended) and written as one
//! `helpers` event when the tree stops — except abnormal ends (a signal, a non-zero exit), whose
//! first [`ABNORMAL_EACH`] of each kind per command (at most [`ABNORMAL_JOURNALLED`] in all) are
//! journalled so a failure around one can name it; an end a command's helpers keep having (GitPython
//! ends its `cat-file` with SIGTERM) is their routine and only counted. So a server making helpers
//! per call journals a bounded number of process events whatever the number of calls. Whether a
//! child is a helper is known only when it exits young, so a command's `worker_start` is held back
//! only once that command has been seen short-lived [`HELPERS_JOURNALLED`] times, and written after
//! all should the child outlive the age.
//!
//! The root's own state is watched too: a root in process state T (SIGSTOP, a debugger) is said to
//! be "stopped", which is neither dead nor wedged.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::cgroup::Cgroup;
use super::exit::ExitInfo;
use super::watchdog::Watchdog;
use crate::journal::{Event, Journal};
use crate::sample::kin::helper_key;

/// How often /proc is read for the tree.
pub const POLL: Duration = Duration::from_millis(100);
/// A child that exits younger than this (and never listened) is a helper.
pub const HELPER_AGE_S: f64 = 3.0;
/// A child still running its parent's command line this long after it was forked did not fork to
/// exec something else: it is a pre-fork worker (fork to exec takes milliseconds).
const UNEXECED_S: f64 = 0.5;
/// A command's helpers journalled one by one before the rest are only counted.
pub const HELPERS_JOURNALLED: u64 = 20;
/// A command's abnormal helper ends journalled one by one beyond those, in all.
pub const ABNORMAL_JOURNALLED: u64 = 100;
/// Of those, the most of one kind of end ("SIGTERM", "exit 1") per command: past it, that end is
/// the command's routine, counted in its `helpers` event.
pub const ABNORMAL_EACH: u64 = 10;
/// The most commands counted apart; the rest share one row.
const COMMANDS: usize = 32;

/// One process of the tree, as first seen.
#[derive(Clone, Debug)]
pub struct Member {
    pub pid: u32,
    pub ppid: u32,
    pub start_time: u64,
    pub command: Vec<String>,
    seen: Instant,
    age_when_seen: f64,
    /// It had a listening socket when first seen (a pre-fork worker inherits its parent's).
    listens: bool,
    /// Its `worker_start` is held back (its command has come and gone young before): the run time
    /// it was first seen at.
    held: Option<f64>,
}

impl Member {
    pub fn age_s(&self) -> f64 {
        self.age_when_seen + self.seen.elapsed().as_secs_f64()
    }
}

struct Shared {
    root: AtomicU32,
    stop: AtomicBool,
    members: Mutex<BTreeMap<u32, Member>>,
}

/// The watcher of the server's tree; one per supervisor.
pub struct Tree {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Tree {
    pub fn start(
        journal: Journal,
        watchdog: Option<Arc<Watchdog>>,
        cgroup: Option<Cgroup>,
    ) -> Tree {
        let shared = Arc::new(Shared {
            root: AtomicU32::new(0),
            stop: AtomicBool::new(false),
            members: Mutex::new(BTreeMap::new()),
        });
        let exits = connector::start();
        let how = match exits {
            Some(_) => "the kernel's process-event connector",
            None => "witness's own wait as subreaper, the parent's log lines, or 'gone, status unknown' (the kernel's process-event connector needs CAP_NET_ADMIN)",
        };
        journal.emit(Event::Note {
            level: "info".into(),
            text: format!(
                "watching the server's process tree{}; how a worker died is read from {how}",
                if cgroup.is_some() {
                    " (in its own cgroup)"
                } else {
                    ""
                }
            ),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("tree".into())
            .spawn(move || watch(s, journal, watchdog, cgroup, exits))
            .ok();
        Tree { shared, thread }
    }

    /// The process witness now waits on as the server (a spawn, or an adopted daemon).
    pub fn set_root(&self, pid: u32) {
        self.members().retain(|p, _| *p != pid);
        self.shared.root.store(pid, Ordering::SeqCst);
    }

    fn members(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, Member>> {
        self.shared
            .members
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// The tree's live processes other than the root, as last seen.
    pub fn snapshot(&self) -> Vec<Member> {
        self.members().values().cloned().collect()
    }

    /// Stops watching (after one last look, so exits at the very end are journalled).
    pub fn stop(mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            // Wake it from its poll interval: the last look happens now, not up to POLL later.
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
    }
}

/// A process as /proc shows it.
#[derive(Clone, Debug)]
struct Seen {
    pid: u32,
    ppid: u32,
    start_time: u64,
    state: char,
}

/// The processes the tree can hold. With a cgroup (`cgroup` is its processes): those and everything
/// below them, since every process the server starts is born in it whatever it does afterwards
/// (`setsid`, a double fork, an orphan witness adopts), so witness's own threads — a list of
/// children each, read twice a look — are not walked. Without one: everything below witness too
/// (see `sample/kin.rs`).
fn scan(me: u32, cgroup: Option<&[u32]>) -> Vec<Seen> {
    let mut pids = match cgroup {
        Some(c) => {
            let mut p = crate::sample::kin::below(c);
            p.extend_from_slice(c);
            p
        }
        None => crate::sample::kin::below(&[me]),
    };
    pids.sort_unstable();
    pids.dedup();
    pids.into_iter()
        .filter_map(|pid| procfs::process::Process::new(pid as i32).ok()?.stat().ok())
        .map(|s| Seen {
            pid: s.pid as u32,
            ppid: s.ppid as u32,
            start_time: s.starttime,
            state: s.state,
        })
        .collect()
}

/// The tree's members in `all`: below the root, orphans re-parented to witness that witness did not
/// spawn itself, the cgroup's processes, and everything below those. The root is not a member.
fn members_of(
    all: &[Seen],
    root: u32,
    me: u32,
    cgroup: &[u32],
    own: &dyn Fn(u32) -> bool,
) -> Vec<u32> {
    let mut set: std::collections::BTreeSet<u32> = std::collections::BTreeSet::new();
    if root != 0 {
        set.insert(root);
    }
    for s in all {
        if (s.ppid == me && !own(s.pid)) || cgroup.contains(&s.pid) {
            set.insert(s.pid);
        }
    }
    loop {
        let before = set.len();
        for s in all {
            if set.contains(&s.ppid) {
                set.insert(s.pid);
            }
        }
        if set.len() == before {
            break;
        }
    }
    set.remove(&root);
    set.remove(&me);
    all.iter()
        .filter(|s| set.contains(&s.pid) && s.state != 'Z' && s.state != 'X')
        .map(|s| s.pid)
        .collect()
}

pub fn command_of(pid: u32) -> Vec<String> {
    let Ok(p) = procfs::process::Process::new(pid as i32) else {
        return vec![];
    };
    match p.cmdline() {
        Ok(c) if !c.is_empty() => c,
        _ => p.stat().map(|s| vec![s.comm]).unwrap_or_default(),
    }
}

pub fn age_of(start_time: u64) -> f64 {
    let hz = procfs::ticks_per_second() as f64;
    use procfs::Current;
    let up = procfs::Uptime::current()
        .map(|u| u.uptime)
        .unwrap_or_default();
    (up - start_time as f64 / hz).max(0.0)
}

/// A member that disappeared and whose cause is still being looked for.
struct Vanished {
    member: Member,
    t_s: f64,
    age_s: f64,
    looks: u32,
}

/// Whether a child is (still) a helper by its own life: younger than a helper's age and holding no
/// listening socket. Decided here alone, for the journal and the helpers' count alike; its siblings
/// play no part (a long-lived child of the same command is a worker by its own life, and the short
/// ones beside it stay helpers). Anything else is a worker, journalled as one.
fn is_helper(age_s: f64, listens: bool) -> bool {
    age_s < HELPER_AGE_S && !listens
}

/// One command's helpers, in fixed memory.
struct Book {
    count: u64,
    journalled: u64,
    abnormal_journalled: u64,
    /// Lifetimes in microseconds: fixed memory whatever the count.
    lived: hdrhistogram::Histogram<u64>,
    min_s: f64,
    max_s: f64,
    /// "exit 0", "exit 1", "SIGKILL", "unknown": at most 256 codes and 64 signals.
    ends: BTreeMap<String, u64>,
}

impl Book {
    fn new() -> Book {
        Book {
            count: 0,
            journalled: 0,
            abnormal_journalled: 0,
            lived: hdrhistogram::Histogram::new_with_bounds(1, 3_600_000_000, 2)
                .expect("valid histogram bounds"),
            min_s: f64::INFINITY,
            max_s: 0.0,
            ends: BTreeMap::new(),
        }
    }

    fn count(&mut self, age_s: f64, end: String) {
        self.count += 1;
        let _ = self.lived.record(((age_s * 1e6) as u64).max(1));
        self.min_s = self.min_s.min(age_s);
        self.max_s = self.max_s.max(age_s);
        *self.ends.entry(end).or_default() += 1;
    }

    /// Counts a helper that ended, and says whether it is journalled one by one: its start was
    /// (not held back), or its end is abnormal and not yet the command's routine.
    fn admit(&mut self, age_s: f64, end: String, abnormal: bool, held: bool) -> bool {
        let routine = self.ends.get(&end).copied().unwrap_or(0) >= ABNORMAL_EACH;
        self.count(age_s, end);
        let write =
            !held || (abnormal && !routine && self.abnormal_journalled < ABNORMAL_JOURNALLED);
        if write {
            self.journalled += 1;
            if held {
                self.abnormal_journalled += 1;
            }
        }
        write
    }

    fn event(&self, command: &str) -> Event {
        Event::Helpers {
            command: command.to_string(),
            count: self.count,
            journalled: self.journalled,
            lived_min_s: if self.count == 0 { 0.0 } else { self.min_s },
            // The histogram's bucket can reach past the longest life: kept within min..max.
            lived_median_s: if self.count == 0 {
                0.0
            } else {
                (self.lived.value_at_quantile(0.5) as f64 / 1e6)
                    .max(self.min_s)
                    .min(self.max_s)
            },
            lived_max_s: self.max_s,
            ends: self.ends.clone(),
        }
    }
}

/// The book a command's helpers go in: its own, or past [`COMMANDS`] the shared one.
fn book_for<'a>(books: &'a mut BTreeMap<String, Book>, key: &str) -> &'a mut Book {
    let key = if books.contains_key(key) || books.len() < COMMANDS {
        key.to_string()
    } else {
        "(other commands)".to_string()
    };
    books.entry(key).or_insert_with(Book::new)
}

/// Whether `pid` holds a listening socket (TCP, TCP6 or Unix). `listening` is read at most once per
/// look, and only when some new process holds a socket at all.
fn listens(pid: u32, listening: &mut Option<std::collections::HashSet<u64>>) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    let sockets: Vec<u64> = fds
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            l.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
        })
        .collect();
    if sockets.is_empty() {
        return false;
    }
    let set = listening.get_or_insert_with(listening_inodes);
    sockets.iter().any(|i| set.contains(i))
}

/// The inodes of the listening sockets in witness's network namespace.
fn listening_inodes() -> std::collections::HashSet<u64> {
    let mut set = std::collections::HashSet::new();
    for (file, state_col, inode_col, listen) in [
        ("/proc/net/tcp", 3, 9, "0A"),
        ("/proc/net/tcp6", 3, 9, "0A"),
        // Unix: flags 00010000 (__SO_ACCEPTCON) marks a listener; the inode is the last column.
        ("/proc/net/unix", 3, 6, "00010000"),
    ] {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            if cols.get(state_col) == Some(&listen) {
                if let Some(i) = cols.get(inode_col).and_then(|c| c.parse().ok()) {
                    set.insert(i);
                }
            }
        }
    }
    set
}

/// A helper's end as its book counts it, and whether it is abnormal (worth naming one by one).
fn helper_end(code: Option<i32>, signal: Option<&str>) -> (String, bool) {
    match (code, signal) {
        (_, Some(sig)) => (sig.to_string(), true),
        (Some(c), None) => (format!("exit {c}"), c != 0),
        (None, None) => ("unknown".to_string(), false),
    }
}

fn watch(
    shared: Arc<Shared>,
    journal: Journal,
    watchdog: Option<Arc<Watchdog>>,
    cgroup: Option<Cgroup>,
    exits: Option<connector::Exits>,
) {
    let me = std::process::id();
    let mut pending: Vec<Vanished> = Vec::new();
    let mut books: BTreeMap<String, Book> = BTreeMap::new();
    let mut stopped_root: Option<u32> = None;
    let mut last = false;
    loop {
        if shared.stop.load(Ordering::SeqCst) {
            last = true;
        }
        let root = shared.root.load(Ordering::SeqCst);
        let in_cgroup = cgroup.as_ref().map(|c| c.pids());
        let all = scan(me, in_cgroup.as_deref());
        let in_cgroup = in_cgroup.unwrap_or_default();
        let own = |p: u32| super::reaper::is_own(p);
        let now: Vec<u32> = members_of(&all, root, me, &in_cgroup, &own);
        let t_s = journal.now_s();
        let mut listening = None;
        {
            let mut members = shared.members.lock().unwrap_or_else(|e| e.into_inner());
            // Gone: no longer a live member with the same start time.
            let gone: Vec<u32> = members
                .values()
                .filter(|m| {
                    !now.contains(&m.pid)
                        || all
                            .iter()
                            .find(|s| s.pid == m.pid)
                            .is_none_or(|s| s.start_time != m.start_time)
                })
                .map(|m| m.pid)
                .collect();
            for pid in gone {
                if let Some(m) = members.remove(&pid) {
                    // The root may have adopted it (a daemon): then it did not die.
                    if pid == root {
                        continue;
                    }
                    if let Some(w) = &watchdog {
                        w.forget(pid);
                    }
                    let age_s = m.age_s();
                    pending.push(Vanished {
                        member: m,
                        t_s,
                        age_s,
                        looks: 0,
                    });
                }
            }
            for pid in &now {
                if members.contains_key(pid) {
                    continue;
                }
                let Some(s) = all.iter().find(|s| s.pid == *pid) else {
                    continue;
                };
                let command = command_of(*pid);
                let listens = listens(*pid, &mut listening);
                // Held back until its life says what it is: any child once the tree's helpers
                // have been journalled [`HELPERS_JOURNALLED`] times in all (whatever commands they
                // ran, so their number stays flat as calls grow), and a child caught between its
                // fork and its exec (its parent's command line, its parent's listening socket:
                // a pre-fork worker or a helper about to exec, told apart by how long it lives).
                let capped =
                    books.values().map(|b| b.journalled).sum::<u64>() >= HELPERS_JOURNALLED;
                let unexeced = !command.is_empty() && command_of(s.ppid) == command;
                let m = Member {
                    pid: *pid,
                    ppid: s.ppid,
                    start_time: s.start_time,
                    command,
                    seen: Instant::now(),
                    age_when_seen: age_of(s.start_time),
                    listens,
                    held: ((capped && !listens) || unexeced).then_some(t_s),
                };
                if let Some(w) = &watchdog {
                    w.member(m.pid, m.start_time);
                }
                if m.held.is_none() {
                    journal.emit(start_of(&m));
                }
                members.insert(*pid, m);
            }
            // A child seen between its fork and its exec still had its parent's command line and
            // listening socket (closed on exec): once it has exec'd, it is judged by what it runs.
            for (pid, m) in members.iter_mut() {
                if m.listens && m.age_s() < HELPER_AGE_S {
                    // Its own command line only: a zombie's is empty (and its fds gone), and a
                    // worker that died is never re-judged by its remains.
                    let Some(command) = procfs::process::Process::new(*pid as i32)
                        .and_then(|p| p.cmdline())
                        .ok()
                        .filter(|c| !c.is_empty())
                    else {
                        continue;
                    };
                    if command != m.command {
                        m.listens = listens(*pid, &mut listening);
                        m.command = command;
                    }
                }
            }
            // A held-back child that outlived a helper's age is a worker after all.
            for m in members.values_mut() {
                if let Some(at) = m.held {
                    // One still between fork and exec holds its parent's socket: only its age
                    // tells a pre-fork worker from a helper about to exec.
                    let settled = m.age_s() >= UNEXECED_S || command_of(m.ppid) != m.command;
                    if !is_helper(m.age_s(), m.listens) && settled {
                        journal.emit_at(at, start_of(m));
                        m.held = None;
                    }
                }
            }
        }
        // The root stopped (state T) or resumed.
        let root_state = all.iter().find(|s| s.pid == root).map(|s| s.state);
        match (root_state, stopped_root) {
            (Some('T'), None) if root != 0 => {
                stopped_root = Some(root);
                journal.emit(Event::Note {
                    level: "warn".into(),
                    text: format!(
                        "server pid {root} is stopped (process state T: SIGSTOP or a debugger): alive but frozen, neither dead nor wedged"
                    ),
                });
            }
            (s, Some(p)) if s != Some('T') || p != root => {
                stopped_root = None;
                if s.is_some() && p == root {
                    journal.emit(Event::Note {
                        level: "info".into(),
                        text: format!("server pid {p} is running again (no longer stopped)"),
                    });
                }
            }
            _ => {}
        }
        // Causes: the connector's exit status, witness's own wait, then (after a few looks, so a
        // status that is on its way arrives first) the parent's log line, then unknown.
        pending.retain_mut(|v| {
            v.looks += 1;
            let pid = v.member.pid;
            let status = exits
                .as_ref()
                .and_then(|e| connector::take(e, pid))
                .map(|s| (s, "proc_connector"))
                .or_else(|| super::reaper::take_status(pid).map(|s| (s, "wait")));
            let (how, source, code, signal) = match status {
                Some((raw, source)) => {
                    let info = ExitInfo::from_status(std::process::ExitStatus::from_raw(raw));
                    (info.meaning(), source, info.code, info.signal_name())
                }
                None if v.looks < 4 && !last => return true,
                None => match from_log(&journal, pid, v.t_s) {
                    Some(how) => (how, "log_line", None, None),
                    None if v.looks < 20 && !last => return true,
                    None => ("gone, status unknown".to_string(), "unknown", None, None),
                },
            };
            let helper = is_helper(v.age_s, v.member.listens);
            if helper {
                let (end, abnormal) = helper_end(code, signal.as_deref());
                // Held only until its exec said what it is, with the tree's helpers not yet
                // journalled their number of times: journalled as the first ones are.
                let capped =
                    books.values().map(|b| b.journalled).sum::<u64>() >= HELPERS_JOURNALLED;
                let book = book_for(&mut books, &helper_key(&v.member.command));
                if !book.admit(v.age_s, end, abnormal, v.member.held.is_some() && capped) {
                    return false;
                }
            }
            if let Some(at) = v.member.held {
                journal.emit_at(at, start_of(&v.member));
            }
            journal.emit_at(
                v.t_s,
                Event::WorkerExit {
                    pid,
                    ppid: v.member.ppid,
                    command: v.member.command.clone(),
                    age_s: v.age_s,
                    how,
                    source: source.into(),
                    code,
                    signal,
                    helper,
                },
            );
            false
        });
        if last {
            // Where every helper was journalled one by one, they say it all themselves.
            for (command, book) in books.iter().filter(|(_, b)| b.count > b.journalled) {
                journal.emit(book.event(command));
            }
            return;
        }
        std::thread::park_timeout(POLL);
    }
}

fn start_of(m: &Member) -> Event {
    Event::WorkerStart {
        pid: m.pid,
        ppid: m.ppid,
        start_time: m.start_time,
        command: m.command.clone(),
    }
}

/// How a worker died, from a log line near its end that names its pid (gunicorn's
/// "WORKER TIMEOUT (pid:123)", "Worker (pid:123) was sent SIGKILL!").
fn from_log(journal: &Journal, pid: u32, t_s: f64) -> Option<String> {
    let lines: Vec<String> = journal
        .lifecycle()
        .into_iter()
        .filter(|r| r.t_s >= t_s - 5.0 && r.t_s <= t_s + 2.0)
        .filter_map(|r| match r.event {
            Event::Log { line, .. } => Some(line),
            _ => None,
        })
        .collect();
    how_from_lines(&lines, pid)
}

/// The words for a worker's end from the log lines that name its pid, the most telling first.
pub fn how_from_lines(lines: &[String], pid: u32) -> Option<String> {
    let naming: Vec<&String> = lines.iter().filter(|l| names_pid(l, pid)).collect();
    let has = |l: &&String, words: &[&str]| {
        let l = l.to_ascii_lowercase();
        words.iter().any(|w| l.contains(w))
    };
    // The line that says the most decides, and is the one quoted.
    let telling: [(&[&str], &str); 3] = [
        (&["sigkill", "signal 9"], "killed by SIGKILL"),
        (
            &["timeout", "timed out"],
            "killed by its parent after a timeout",
        ),
        (&["signal"], "killed by a signal"),
    ];
    let (what, line) = telling
        .iter()
        .find_map(|(words, what)| naming.iter().find(|l| has(l, words)).map(|l| (*what, *l)))
        .or_else(|| naming.last().map(|l| ("gone", *l)))?;
    Some(format!("{what} (the server logged '{}')", line.trim()))
}

/// Whether a log line names `pid` as a process ("pid:123", "pid 123", "(123)", "[123]"), not merely
/// contains the number (a port, a size).
pub fn names_pid(line: &str, pid: u32) -> bool {
    let n = pid.to_string();
    let lower = line.to_ascii_lowercase();
    let mut from = 0;
    while let Some(i) = lower[from..].find(&n) {
        let at = from + i;
        let end = at + n.len();
        from = end;
        let before = &lower[..at];
        let after = lower[end..].chars().next();
        if after.is_some_and(|c| c.is_ascii_digit())
            || before.chars().last().is_some_and(|c| c.is_ascii_digit())
        {
            continue;
        }
        let b = before.trim_end_matches([' ', ':', '=', '#']);
        if b.ends_with("pid")
            || b.ends_with("process")
            || b.ends_with("worker")
            || b.ends_with("child")
        {
            return true;
        }
        if (before.ends_with('(') && after == Some(')'))
            || (before.ends_with('[') && after == Some(']'))
        {
            return true;
        }
    }
    false
}

/// The kernel's process-event connector: the exit status of every process that exits, as it exits
/// (netlink, CN_IDX_PROC). Needs CAP_NET_ADMIN; None without it.
mod connector {
    use super::*;

    pub type Exits = Arc<Mutex<BTreeMap<u32, (i32, Instant)>>>;

    const CN_IDX_PROC: u32 = 1;
    const CN_VAL_PROC: u32 = 1;
    const PROC_CN_MCAST_LISTEN: u32 = 1;
    const PROC_EVENT_EXIT: u32 = 0x8000_0000;
    const NLMSG_DONE: u16 = 3;
    /// nlmsghdr (16) + cn_msg (20) + proc_event's what, cpu, timestamp (16).
    const DATA: usize = 52;

    pub fn take(e: &Exits, pid: u32) -> Option<i32> {
        e.lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&pid)
            .map(|(s, _)| s)
    }

    pub fn start() -> Option<Exits> {
        use std::os::fd::AsRawFd;
        // Closed when dropped: on a refusal below, or when the reading thread ends.
        let owned = crate::server::netlink_socket(libc::NETLINK_CONNECTOR).ok()?;
        let fd = owned.as_raw_fd();
        // SAFETY (below): plain socket calls on that descriptor; buffers outlive the calls.
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as u16;
        addr.nl_groups = CN_IDX_PROC;
        let len = std::mem::size_of::<libc::sockaddr_nl>() as u32;
        if unsafe { libc::bind(fd, &addr as *const _ as *const libc::sockaddr, len) } != 0 {
            return None;
        }
        let mut msg = Vec::with_capacity(40);
        msg.extend_from_slice(&40u32.to_ne_bytes());
        msg.extend_from_slice(&NLMSG_DONE.to_ne_bytes());
        msg.extend_from_slice(&0u16.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes());
        msg.extend_from_slice(&CN_IDX_PROC.to_ne_bytes());
        msg.extend_from_slice(&CN_VAL_PROC.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes());
        msg.extend_from_slice(&4u16.to_ne_bytes());
        msg.extend_from_slice(&0u16.to_ne_bytes());
        msg.extend_from_slice(&PROC_CN_MCAST_LISTEN.to_ne_bytes());
        if unsafe { libc::send(fd, msg.as_ptr() as *const libc::c_void, msg.len(), 0) } < 0 {
            return None;
        }
        // Unprivileged, the subscription is accepted but nothing arrives: check the capability.
        if !has_net_admin() {
            return None;
        }
        let tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 200_000,
        };
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                &tv as *const _ as *const libc::c_void,
                std::mem::size_of::<libc::timeval>() as u32,
            )
        };
        let exits: Exits = Arc::new(Mutex::new(BTreeMap::new()));
        let out = exits.clone();
        let weak = Arc::downgrade(&exits);
        std::thread::Builder::new()
            .name("proc-connector".into())
            .spawn(move || {
                let _owned = owned;
                let mut buf = vec![0u8; 8192];
                // Ends when the tree watcher drops its handle.
                while let Some(exits) = weak.upgrade() {
                    let n = unsafe {
                        libc::recv(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len(), 0)
                    };
                    if n < DATA as isize + 16 {
                        continue;
                    }
                    let u = |o: usize| u32::from_ne_bytes(buf[o..o + 4].try_into().unwrap());
                    if u(36) != PROC_EVENT_EXIT {
                        continue;
                    }
                    let (pid, tgid, code) = (u(DATA), u(DATA + 4), u(DATA + 8));
                    // Threads exit too; only a whole process's end counts.
                    if pid != tgid {
                        continue;
                    }
                    let mut m = exits.lock().unwrap_or_else(|p| p.into_inner());
                    m.insert(pid, (code as i32, Instant::now()));
                    // Every process on the machine reports here: keep only the last moments.
                    if m.len() > 4096 {
                        m.retain(|_, (_, t)| t.elapsed() < Duration::from_secs(10));
                    }
                }
            })
            .ok()?;
        Some(out)
    }

    /// CAP_NET_ADMIN in the effective set (/proc/self/status `CapEff`, bit 12).
    fn has_net_admin() -> bool {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("CapEff:"))
                    .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            })
            .is_some_and(|caps| caps & (1 << 12) != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pid_is_named_only_as_a_process() {
        assert!(names_pid("[CRITICAL] WORKER TIMEOUT (pid:1234)", 1234));
        assert!(names_pid(
            "Worker (pid:1234) was sent SIGKILL! Perhaps out of memory?",
            1234
        ));
        assert!(names_pid("child 1234 exited", 1234));
        assert!(names_pid("worker process 1234 exited on signal 9", 1234));
        assert!(!names_pid("listening on port 1234", 1234));
        assert!(!names_pid("WORKER TIMEOUT (pid:12345)", 1234));
        assert!(!names_pid("WORKER TIMEOUT (pid:91234)", 1234));
    }

    #[test]
    fn the_parents_words_say_how_the_worker_died() {
        let lines = vec![
            "[CRITICAL] WORKER TIMEOUT (pid:77)".to_string(),
            "[ERROR] Worker (pid:77) was sent SIGKILL! Perhaps out of memory?".to_string(),
            "[INFO] Booting worker with pid: 78".to_string(),
        ];
        let how = how_from_lines(&lines, 77).unwrap();
        assert!(how.starts_with("killed by SIGKILL"), "{how}");
        assert!(how.contains("was sent SIGKILL"), "{how}");
        let exiting = vec![
            lines[0].clone(),
            "[INFO] Worker exiting (pid: 77)".to_string(),
        ];
        let how = how_from_lines(&exiting, 77).unwrap();
        assert!(
            how.contains("WORKER TIMEOUT"),
            "the telling line is quoted: {how}"
        );
        let how = how_from_lines(&lines[..1], 77).unwrap();
        assert!(
            how.starts_with("killed by its parent after a timeout"),
            "{how}"
        );
        assert_eq!(how_from_lines(&lines, 79), None);
    }

    #[test]
    fn a_helper_is_counted_under_its_program_and_first_words() {
        let c = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            helper_key(&c(&["/usr/bin/git", "cat-file", "--batch-check", "HEAD"])),
            "git cat-file --batch-check"
        );
        assert_eq!(helper_key(&c(&["true"])), "true");
        assert_eq!(helper_key(&[]), "(gone before its command was read)");
        assert_eq!(helper_end(Some(0), None), ("exit 0".into(), false));
        assert_eq!(helper_end(Some(1), None), ("exit 1".into(), true));
        assert_eq!(helper_end(None, Some("SIGKILL")), ("SIGKILL".into(), true));
        assert_eq!(helper_end(None, None), ("unknown".into(), false));
    }

    #[test]
    fn a_child_is_a_helper_by_its_own_life() {
        assert!(is_helper(0.12, false));
        assert!(
            !is_helper(0.12, true),
            "it listened: a pre-fork worker, however young"
        );
        assert!(!is_helper(HELPER_AGE_S, false), "it stayed");
    }

    /// GitPython ends half its `cat-file` helpers with SIGTERM: the first few are journalled, then
    /// that end is the command's routine and only counted; a first SIGKILL after it still is.
    #[test]
    fn an_end_a_commands_helpers_keep_having_is_counted_not_journalled() {
        let mut b = Book::new();
        let mut written = 0;
        for i in 0..10_000u64 {
            let (end, abnormal) = if i % 2 == 0 {
                helper_end(None, Some("SIGTERM"))
            } else {
                helper_end(Some(0), None)
            };
            // The first helpers are journalled from their start; the rest are held back.
            written += b.admit(0.12, end, abnormal, i >= HELPERS_JOURNALLED) as u64;
        }
        assert_eq!(written, b.journalled);
        assert!(
            written <= HELPERS_JOURNALLED + ABNORMAL_EACH,
            "{written} journalled of 10 000"
        );
        assert_eq!(b.count, 10_000);
        assert_eq!(b.ends["SIGTERM"], 5_000);
        let (end, abnormal) = helper_end(None, Some("SIGKILL"));
        assert!(
            b.admit(0.12, end, abnormal, true),
            "a first SIGKILL is named"
        );
        let (end, abnormal) = helper_end(Some(0), None);
        assert!(!b.admit(0.12, end, abnormal, true));
    }

    #[test]
    fn a_book_holds_the_same_whatever_the_count() {
        let mut b = Book::new();
        for i in 0..10_000u64 {
            b.count(0.003 + (i % 38) as f64 * 0.001, "exit 0".into());
        }
        b.count(0.5, "SIGKILL".into());
        let Event::Helpers {
            count,
            lived_min_s,
            lived_median_s,
            lived_max_s,
            ends,
            ..
        } = b.event("git")
        else {
            unreachable!()
        };
        assert_eq!(count, 10_001);
        assert!((lived_min_s - 0.003).abs() < 1e-9);
        assert!((lived_max_s - 0.5).abs() < 1e-9);
        assert!((lived_median_s - 0.021).abs() < 0.001, "{lived_median_s}");
        assert_eq!(ends.len(), 2);
        assert_eq!(ends["SIGKILL"], 1);
    }

    #[test]
    fn members_are_below_the_root_or_orphaned_to_witness() {
        let s = |pid, ppid| Seen {
            pid,
            ppid,
            start_time: 1,
            state: 'S',
        };
        // 10 root, 11/12 its workers, 13 a grandchild; 20 an orphan of witness (5); 30 a stranger;
        // 40 witness's own helper.
        let all = vec![
            s(10, 5),
            s(11, 10),
            s(12, 10),
            s(13, 12),
            s(20, 5),
            s(21, 20),
            s(30, 1),
            s(40, 5),
        ];
        let own = |p: u32| p == 10 || p == 40;
        let mut m = members_of(&all, 10, 5, &[], &own);
        m.sort();
        assert_eq!(m, vec![11, 12, 13, 20, 21]);
        let m = members_of(&all, 10, 5, &[30], &own);
        assert!(m.contains(&30));
    }
}
