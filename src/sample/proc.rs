//! The process sampler: RSS, CPU, threads, open fds and child processes of the server's whole process
//! tree, read from /proc (procfs).

use std::collections::HashMap;
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

/// Reads `root` and all its descendants.
pub fn read_tree(root: u32) -> Option<TreeReading> {
    let page = procfs::page_size();
    let all: Vec<_> = procfs::process::all_processes()
        .ok()?
        .flatten()
        .filter_map(|p| p.stat().ok().map(|s| (p, s)))
        .collect();
    let mut kids: HashMap<i32, Vec<usize>> = HashMap::new();
    let mut root_ix = None;
    for (i, (_, s)) in all.iter().enumerate() {
        kids.entry(s.ppid).or_default().push(i);
        if s.pid == root as i32 {
            root_ix = Some(i);
        }
    }
    let mut stack = vec![root_ix?];
    let mut r = TreeReading::default();
    let mut seen = 0u64;
    while let Some(i) = stack.pop() {
        let (p, s) = &all[i];
        seen += 1;
        r.rss_bytes += s.rss * page;
        r.cpu_ticks += s.utime + s.stime;
        r.threads += s.num_threads.max(0) as u64;
        r.fds += p.fd_count().unwrap_or(0) as u64;
        if let Some(k) = kids.get(&s.pid) {
            stack.extend(k);
        }
    }
    r.children = seen - 1;
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
}
