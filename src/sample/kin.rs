//! Who is below whom, read from each process's own list of children
//! (`/proc/PID/task/TID/children`) instead of from every process on the machine: walking a tree
//! costs the tree's size, not the machine's process count (`witness wrap -- true` read all of
//! /proc several times over, most of its 35 ms). Where the kernel keeps no such list
//! (CONFIG_PROC_CHILDREN off), the same answers come from reading every process's parent in /proc.

use std::collections::BTreeSet;
use std::sync::OnceLock;

/// Whether this kernel lists a task's children.
fn listed() -> bool {
    static LISTED: OnceLock<bool> = OnceLock::new();
    *LISTED.get_or_init(|| std::path::Path::new("/proc/thread-self/children").exists())
}

/// `pid`'s children (empty once the process is gone).
pub fn children(pid: u32) -> Vec<u32> {
    if !listed() {
        return parents()
            .into_iter()
            .filter(|&(_, ppid)| ppid == pid)
            .map(|(c, _)| c)
            .collect();
    }
    listed_children(pid)
}

/// From every one of `pid`'s threads' lists: a child belongs to the thread that forked it, and an
/// orphan to the thread that adopted it. A thread that ends hands its children to another thread
/// of the process: read while that happens, they would be in neither list (a threaded server whose
/// connections' threads end together lost a third of its children from one reading). So the lists
/// are read again, a few times at most, until the threads are the same before and after.
fn listed_children(pid: u32) -> Vec<u32> {
    let tasks = || -> Option<Vec<std::path::PathBuf>> {
        let mut t: Vec<_> = std::fs::read_dir(format!("/proc/{pid}/task"))
            .ok()?
            .flatten()
            .map(|e| e.path())
            .collect();
        t.sort();
        Some(t)
    };
    let mut out = Vec::new();
    let Some(mut before) = tasks() else {
        return out;
    };
    for _ in 0..4 {
        out.clear();
        for t in &before {
            if let Ok(s) = std::fs::read_to_string(t.join("children")) {
                out.extend(
                    s.split_ascii_whitespace()
                        .filter_map(|x| x.parse::<u32>().ok()),
                );
            }
        }
        match tasks() {
            Some(after) if after != before => before = after,
            _ => break,
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The command a helper is counted under: the program's name and up to two more words, bounded (a
/// per-call argument such as a commit id would otherwise make a row per call).
pub fn helper_key(command: &[String]) -> String {
    let mut words = command.iter();
    let Some(prog) = words.next() else {
        return "(gone before its command was read)".into();
    };
    let prog = prog.rsplit('/').next().unwrap_or(prog);
    std::iter::once(prog)
        .chain(words.map(|w| w.as_str()).take(2))
        .map(|w| w.chars().take(40).collect::<String>())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Every process below `roots` (children, theirs, and so on), roots excluded.
pub fn below(roots: &[u32]) -> Vec<u32> {
    if !listed() {
        return below_in_all(roots);
    }
    let mut seen: BTreeSet<u32> = roots.iter().copied().collect();
    let mut found = Vec::new();
    let mut queue: Vec<u32> = roots.to_vec();
    while let Some(p) = queue.pop() {
        for c in listed_children(p) {
            if seen.insert(c) {
                found.push(c);
                queue.push(c);
            }
        }
    }
    found
}

/// Every process's (pid, parent pid), from the whole of /proc.
fn parents() -> Vec<(u32, u32)> {
    let Ok(all) = procfs::process::all_processes() else {
        return vec![];
    };
    all.flatten()
        .filter_map(|p| p.stat().ok())
        .map(|s| (s.pid as u32, s.ppid as u32))
        .collect()
}

/// [`below`] asked of every process in /proc, by parent pid.
fn below_in_all(roots: &[u32]) -> Vec<u32> {
    let parents = parents();
    let mut set: BTreeSet<u32> = roots.iter().copied().collect();
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A shell with a grandchild: both are found below this process, as the whole /proc says.
    #[test]
    fn the_walk_finds_children_and_grandchildren_as_the_whole_proc_does() {
        let mut sh = std::process::Command::new("sh")
            .args(["-c", "sleep 5 & sleep 5; :"])
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
        let me = std::process::id();
        assert!(listed(), "this kernel lists children");
        let walked = below(&[me]);
        let whole = below_in_all(&[me]);
        let kids = children(me);
        let mut whole_kids: Vec<u32> = parents()
            .into_iter()
            .filter(|&(_, ppid)| ppid == me)
            .map(|(c, _)| c)
            .collect();
        let _ = sh.kill();
        let _ = sh.wait();
        let (mut a, mut b) = (walked.clone(), whole.clone());
        a.sort();
        b.sort();
        assert!(a.contains(&sh.id()), "{a:?}");
        assert!(a.len() >= 3, "the shell and its two sleeps: {a:?}");
        assert_eq!(a, b);
        let mut kids = kids;
        kids.sort();
        whole_kids.sort();
        assert_eq!(kids, whole_kids);
    }
}
