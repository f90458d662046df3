//! The process sampler: RSS, CPU, threads, open fds and child processes of the server's whole process
//! tree, read from /proc (procfs); the root's own RSS apart from its descendants', and the
//! descendants counted by program (how many, how many zombies, their memory), so a soak can tell a
//! server's own heap from a tree that grows.

use std::time::Instant;

use futures_util::future::BoxFuture;

use super::{PidSource, Sampler};
use crate::journal::{Event, Kin};

/// The programs below the server a reading names, the most numerous first.
pub const KIN_ROWS: usize = 4;

pub struct ProcSampler {
    pids: PidSource,
    last: Option<(u32, Instant, u64)>,
}

impl ProcSampler {
    pub fn new(pids: PidSource) -> Self {
        Self { pids, last: None }
    }
}

/// One reading of a process tree.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TreeReading {
    pub rss_bytes: u64,
    pub cpu_ticks: u64,
    pub threads: u64,
    pub fds: u64,
    pub children: u64,
    /// The root's own RSS (the rest of `rss_bytes` is its descendants').
    pub own_rss_bytes: u64,
    /// The descendants by program, the most numerous first, at most [`KIN_ROWS`].
    pub kin: Vec<Kin>,
}

/// `root` and all its descendants with their stat (root first; empty once `root` is gone), walked
/// by each process's list of children (`kin.rs`), so a sample costs the tree's size.
fn tree_stats(root: u32) -> Vec<(procfs::process::Process, procfs::process::Stat)> {
    let stat = |pid: u32| {
        let p = procfs::process::Process::new(pid as i32).ok()?;
        let s = p.stat().ok()?;
        Some((p, s))
    };
    let Some(r) = stat(root) else {
        return vec![];
    };
    std::iter::once(r)
        .chain(super::kin::below(&[root]).into_iter().filter_map(stat))
        .collect()
}

/// `root` and the pids of all its descendants (root first); empty if `root` is gone. The GPU
/// sampler matches NVML's per-process memory against these.
pub fn tree_pids(root: u32) -> Vec<u32> {
    tree_stats(root)
        .into_iter()
        .map(|(_, s)| s.pid as u32)
        .collect()
}

/// Reads `root` and all its descendants. None when `root` is gone, or holds no memory (a process
/// caught exiting, or a zombie): that is not a reading of its memory.
pub fn read_tree(root: u32) -> Option<TreeReading> {
    let page = procfs::page_size();
    let tree = tree_stats(root);
    let (_, root_stat) = tree.first()?;
    if root_stat.rss == 0 {
        return None;
    }
    let mut r = TreeReading {
        own_rss_bytes: root_stat.rss * page,
        ..Default::default()
    };
    // By the kernel's name for the program, which a zombie keeps when its command line is gone.
    let mut by_comm: std::collections::BTreeMap<&str, Kin> = std::collections::BTreeMap::new();
    for (i, (p, s)) in tree.iter().enumerate() {
        r.rss_bytes += s.rss * page;
        r.cpu_ticks += s.utime + s.stime;
        r.threads += s.num_threads.max(0) as u64;
        r.fds += p.fd_count().unwrap_or(0) as u64;
        if i == 0 {
            continue;
        }
        let k = by_comm.entry(s.comm.as_str()).or_default();
        k.count += 1;
        k.rss_bytes += s.rss * page;
        if s.state == 'Z' {
            k.zombies += 1;
        } else if k.command.is_empty() {
            // One command line per program and reading: the first live one's words.
            if let Ok(c) = p.cmdline() {
                if !c.is_empty() {
                    k.command = super::kin::helper_key(&c);
                }
            }
        }
    }
    r.children = tree.len() as u64 - 1;
    let mut kin: Vec<Kin> = by_comm
        .into_iter()
        .map(|(comm, mut k)| {
            if k.command.is_empty() {
                k.command = comm.to_string();
            }
            k
        })
        .collect();
    kin.sort_by(|a, b| b.count.cmp(&a.count).then(b.rss_bytes.cmp(&a.rss_bytes)));
    kin.truncate(KIN_ROWS);
    r.kin = kin;
    Some(r)
}

impl Sampler for ProcSampler {
    fn name(&self) -> &'static str {
        "process"
    }

    fn sample(&mut self) -> BoxFuture<'_, Vec<Event>> {
        Box::pin(async move {
            let Some(pid) = (self.pids)() else {
                return vec![];
            };
            let Some(r) = read_tree(pid) else {
                return vec![];
            };
            let now = Instant::now();
            let cpu_pct = match self.last {
                Some((p, t, ticks)) if p == pid => {
                    let wall = now.duration_since(t).as_secs_f64();
                    let used = r.cpu_ticks.saturating_sub(ticks) as f64
                        / procfs::ticks_per_second() as f64;
                    if wall > 0.0 {
                        (used / wall * 100.0 * 10.0).round() / 10.0
                    } else {
                        0.0
                    }
                }
                _ => 0.0,
            };
            self.last = Some((pid, now, r.cpu_ticks));
            vec![Event::ProcSample {
                pid,
                rss_bytes: r.rss_bytes,
                cpu_pct,
                threads: r.threads,
                fds: r.fds,
                children: r.children,
                own_rss_bytes: Some(r.own_rss_bytes),
                kin: r.kin,
            }]
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_tree_has_memory_threads_and_fds() {
        let r = read_tree(std::process::id()).unwrap();
        assert!(r.rss_bytes > 1 << 20);
        assert!(r.threads >= 1);
        assert!(r.fds >= 3);
    }

    /// Three sleeping children and one zombie (ended, never waited for) of this process: counted
    /// under their program, the zombie apart, and the root's own memory apart from theirs.
    #[test]
    fn a_reading_counts_the_children_by_program_and_their_zombies() {
        let spawn = |a: &str| std::process::Command::new("sleep").arg(a).spawn().unwrap();
        let mut kids: Vec<_> = (0..3).map(|_| spawn("30")).collect();
        let mut quick = spawn("0");
        let pid = quick.id();
        let zombie = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !zombie() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let r = read_tree(std::process::id()).unwrap();
        for k in kids.iter_mut() {
            let _ = k.kill();
            let _ = k.wait();
        }
        let _ = quick.wait();
        let sleep = r
            .kin
            .iter()
            .find(|k| k.command.starts_with("sleep"))
            .unwrap();
        assert!(sleep.count >= 4, "{:?}", r.kin);
        assert!(sleep.zombies >= 1, "{:?}", r.kin);
        assert!(sleep.rss_bytes > 0);
        assert!(r.own_rss_bytes > 1 << 20);
        assert!(r.rss_bytes >= r.own_rss_bytes + sleep.rss_bytes);
        assert!(r.kin.len() <= KIN_ROWS);
    }

    #[test]
    fn tree_pids_holds_the_root_and_its_children_and_nothing_else() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pids = tree_pids(std::process::id());
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(pids[0], std::process::id());
        assert!(pids.contains(&child.id()), "{pids:?}");
        assert!(!pids.contains(&1));
        assert!(tree_pids(u32::MAX - 1).is_empty());
    }
}
