//! The process sampler: RSS, CPU, threads, open fds and child processes of the server's whole process
//! tree, read from /proc (procfs).

use std::time::Instant;

use futures_util::future::BoxFuture;

use super::{PidSource, Sampler};
use crate::journal::Event;

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

/// Reads `root` and all its descendants.
pub fn read_tree(root: u32) -> Option<TreeReading> {
    let page = procfs::page_size();
    let tree = tree_stats(root);
    if tree.is_empty() {
        return None;
    }
    let mut r = TreeReading::default();
    for (p, s) in &tree {
        r.rss_bytes += s.rss * page;
        r.cpu_ticks += s.utime + s.stime;
        r.threads += s.num_threads.max(0) as u64;
        r.fds += p.fd_count().unwrap_or(0) as u64;
    }
    r.children = tree.len() as u64 - 1;
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
