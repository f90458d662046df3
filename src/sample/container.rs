//! The container sampler: memory, CPU and PIDs of a container, from the engine's stats stream.
//!
//! The engine collects a container's stats once a second, whatever is asked: even a one-shot request
//! waits for the collector's next round, up to a second, which would hold up every other sampler in
//! the loop. So the sampler keeps one stats stream open in the background and each [`Sampler::sample`]
//! takes the newest reading not yet journalled, at once (none when the engine has sent nothing new:
//! the journal holds the engine's readings, never repeats of them).
//!
//! Memory is usage minus page cache, as `docker stats` shows it (`cache` on cgroup v1,
//! `inactive_file` on cgroup v2): page cache the kernel can drop is not the server's memory. CPU % is
//! Docker's formula over consecutive readings: the container's CPU time over the host's, times the
//! CPUs online.

use std::collections::HashMap;
use std::time::Duration;

use bollard::models::ContainerStatsResponse;
use bollard::query_parameters::StatsOptions;
use bollard::Docker;
use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use tokio::sync::watch;

use super::Sampler;
use crate::journal::Event;

pub struct ContainerSampler {
    id: String,
    latest: watch::Receiver<Option<Reading>>,
    task: tokio::task::JoinHandle<()>,
    /// The previous reading's (container CPU ns, host CPU ns).
    last: Option<(u64, u64)>,
}

impl ContainerSampler {
    /// Starts following the container's stats (call inside the runtime).
    pub fn new(docker: Docker, id: String) -> Self {
        let (tx, latest) = watch::channel(None);
        let cid = id.clone();
        let task = tokio::spawn(async move {
            loop {
                let opts = StatsOptions {
                    stream: true,
                    one_shot: false,
                };
                let mut stream = docker.stats(&cid, Some(opts));
                while let Some(Ok(s)) = stream.next().await {
                    if let Some(r) = reading(&s) {
                        tx.send_replace(Some(r));
                    }
                }
                // The stream ends when the container stops; a restart brings it back.
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        Self {
            id,
            latest,
            task,
            last: None,
        }
    }
}

impl Drop for ContainerSampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One reading, reduced to what the journal keeps.
#[derive(Clone, Debug, PartialEq)]
pub struct Reading {
    pub mem_bytes: u64,
    pub mem_limit_bytes: Option<u64>,
    pub pids: u64,
    /// (container CPU ns, host CPU ns, CPUs online)
    pub cpu: Option<(u64, u64, u32)>,
}

/// Memory used without page cache: `cache` on cgroup v1, `inactive_file` on v2.
pub fn mem_without_cache(usage: u64, stats: &HashMap<String, u64>) -> u64 {
    let cache = if let Some(c) = stats.get("cache") {
        *c
    } else {
        stats.get("inactive_file").copied().unwrap_or(0)
    };
    usage.saturating_sub(cache)
}

/// The reading in a stats answer, or None when the container is not running (the engine then answers
/// with empty figures).
pub fn reading(s: &ContainerStatsResponse) -> Option<Reading> {
    let mem = s.memory_stats.as_ref()?;
    let usage = mem.usage?;
    let empty = HashMap::new();
    let cpu = s.cpu_stats.as_ref().and_then(|c| {
        let total = c.cpu_usage.as_ref()?.total_usage?;
        let system = c.system_cpu_usage?;
        let online = c.online_cpus.filter(|n| *n > 0).unwrap_or_else(|| {
            c.cpu_usage
                .as_ref()
                .and_then(|u| u.percpu_usage.as_ref())
                .map_or(1, |v| v.len().max(1) as u32)
        });
        Some((total, system, online))
    });
    Some(Reading {
        mem_bytes: mem_without_cache(usage, mem.stats.as_ref().unwrap_or(&empty)),
        mem_limit_bytes: mem.limit.filter(|l| *l > 0),
        pids: s.pids_stats.as_ref().and_then(|p| p.current).unwrap_or(0),
        cpu,
    })
}

/// Docker's CPU %: the container's share of the host's CPU time between two readings, times the CPUs.
pub fn cpu_pct(prev: (u64, u64), now: (u64, u64), online: u32) -> f64 {
    let (c0, s0) = prev;
    let (c1, s1) = now;
    if c1 < c0 || s1 <= s0 {
        return 0.0;
    }
    let pct = (c1 - c0) as f64 / (s1 - s0) as f64 * online as f64 * 100.0;
    (pct * 10.0).round() / 10.0
}

impl Sampler for ContainerSampler {
    fn name(&self) -> &'static str {
        "container"
    }

    fn sample(&mut self) -> BoxFuture<'_, Vec<Event>> {
        Box::pin(async move {
            if !self.latest.has_changed().unwrap_or(false) {
                return vec![];
            }
            let Some(r) = self.latest.borrow_and_update().clone() else {
                return vec![];
            };
            let cpu_pct = match (self.last, r.cpu) {
                (Some(prev), Some((c, s, n))) => cpu_pct(prev, (c, s), n),
                _ => 0.0,
            };
            self.last = r.cpu.map(|(c, s, _)| (c, s));
            vec![Event::ContainerSample {
                id: self.id.clone(),
                mem_bytes: r.mem_bytes,
                mem_limit_bytes: r.mem_limit_bytes,
                cpu_pct,
                pids: r.pids,
            }]
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(json: serde_json::Value) -> ContainerStatsResponse {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn cgroup_v1_memory_leaves_out_the_page_cache() {
        // Trimmed from a real answer of Docker 20.10 on cgroup v1.
        let s = stats(serde_json::json!({
            "read": "2026-11-30T03:47:26.532351613Z",
            "pids_stats": {"current": 3},
            "cpu_stats": {"cpu_usage": {"total_usage": 28778587u64, "percpu_usage": [1, 2]},
                          "system_cpu_usage": 1511880000000u64, "online_cpus": 2},
            "memory_stats": {"usage": 1847296u64, "limit": 33554432u64,
                             "stats": {"cache": 1318912u64, "inactive_file": 1000u64, "rss": 86016u64}}
        }));
        let r = reading(&s).unwrap();
        assert_eq!(r.mem_bytes, 1847296 - 1318912);
        assert_eq!(r.mem_limit_bytes, Some(32 << 20));
        assert_eq!(r.pids, 3);
        assert_eq!(r.cpu, Some((28778587, 1511880000000, 2)));
    }

    #[test]
    fn cgroup_v2_memory_leaves_out_inactive_file_and_unknown_fields_are_fine() {
        let s = stats(serde_json::json!({
            "memory_stats": {"usage": 50_000_000u64,
                             "stats": {"anon": 40_000_000u64, "inactive_file": 8_000_000u64,
                                       "zswapped": 0, "some_new_kernel_field": 7}},
            "pids_stats": {"current": 1}
        }));
        let r = reading(&s).unwrap();
        assert_eq!(r.mem_bytes, 42_000_000);
        assert_eq!(r.cpu, None);
    }

    #[test]
    fn a_stopped_container_gives_no_reading() {
        let s = stats(serde_json::json!({"read": "0001-01-01T00:00:00Z", "memory_stats": {}}));
        assert!(reading(&s).is_none());
    }

    #[test]
    fn cpu_percent_is_dockers_formula() {
        // Half of one CPU's time on a 2-CPU host over the interval: 50 % of a CPU.
        assert_eq!(cpu_pct((0, 0), (500, 2000), 2), 50.0);
        assert_eq!(
            cpu_pct((100, 100), (50, 200), 2),
            0.0,
            "a restart resets usage"
        );
    }
}
