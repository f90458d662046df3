//! The concurrency ladder: for each level, probe health (skip a wedged server, never measure it), read
//! the server's identity, run n workers, settle, probe and read identity again. Every request is
//! journalled as it completes with one outcome and one duration; the verdicts are analysis's job.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::Uri;

use super::client::{self, Limits, RequestSpec};
use super::health::Health;
use super::mcp::{McpTarget, ToolCall};
use super::outcome::Rejection;
use crate::journal::{group_of_level, Event, Journal};
use crate::server::Target;

/// The ladder's settings, validated.
#[derive(Clone, Debug)]
pub struct LadderConfig {
    pub spec: RequestSpec,
    pub health: Uri,
    pub levels: Vec<u32>,
    pub rounds: u32,
    pub duration: Option<Duration>,
    pub limits: Limits,
    pub settle: Duration,
    pub rejection: Rejection,
    /// Tool calls instead of plain HTTP requests (`--mcp`); `spec` is then unused.
    pub mcp: Option<(McpTarget, ToolCall)>,
}

/// How many requests a worker sends.
#[derive(Clone, Copy)]
enum Budget {
    Rounds(u32),
    Until(Instant),
}

/// Runs one level; returns when its LevelEnd is journalled. `on_level_end` lets the caller print.
pub async fn run_level(
    cfg: &LadderConfig,
    index: u32,
    concurrency: u32,
    target: &Target,
    prober: &Health,
    journal: &Journal,
    ids: &Arc<AtomicU64>,
) {
    let before = prober.probe_journalled(journal, "before").await;
    let identity = target.identity();
    if !before.healthy() {
        journal.emit(Event::LevelStart {
            index,
            concurrency,
            health: before.clone(),
            identity,
            skipped: Some(format!(
                "health before was {} (not 200): not measured against a wedged server",
                before.text()
            )),
        });
        // A server coming back from a restart gets the settle time before the next level's probe.
        tokio::time::sleep(cfg.settle).await;
        return;
    }
    journal.emit(Event::LevelStart {
        index,
        concurrency,
        health: before,
        identity,
        skipped: None,
    });
    let budget = match cfg.duration {
        Some(d) => Budget::Until(Instant::now() + d),
        None => Budget::Rounds(cfg.rounds),
    };
    if let Some((mcp, call)) = &cfg.mcp {
        run_mcp_workers(mcp, call, budget, concurrency, index, journal, ids).await;
        return finish_level(cfg, index, concurrency, target, prober, journal).await;
    }
    let http = client::client(cfg.limits, concurrency as usize);
    let group: Arc<str> = group_of_level(index).into();
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..concurrency {
        let http = http.clone();
        let spec = cfg.spec.clone();
        let rej = cfg.rejection.clone();
        let limits = cfg.limits;
        let journal = journal.clone();
        let ids = ids.clone();
        let group = group.clone();
        workers.spawn(async move {
            let clock = journal.clock();
            let mut sent = 0u32;
            loop {
                match budget {
                    Budget::Rounds(r) if sent >= r => break,
                    Budget::Until(t) if Instant::now() >= t => break,
                    _ => {}
                }
                let s = client::send(&http, &spec, limits, &rej).await;
                sent += 1;
                journal.emit_at(
                    clock.at(s.end),
                    Event::Request {
                        id: ids.fetch_add(1, Ordering::Relaxed),
                        group: group.to_string(),
                        worker: w,
                        start_s: clock.at(s.start),
                        duration_s: s.end.duration_since(s.start).as_secs_f64(),
                        outcome: s.outcome,
                        status: s.status,
                        scheduled_s: None,
                        detail: s.detail,
                    },
                );
            }
        });
    }
    while workers.join_next().await.is_some() {}
    finish_level(cfg, index, concurrency, target, prober, journal).await;
}

/// After the workers: settle, then health and identity again.
async fn finish_level(
    cfg: &LadderConfig,
    index: u32,
    concurrency: u32,
    target: &Target,
    prober: &Health,
    journal: &Journal,
) {
    tokio::time::sleep(cfg.settle).await;
    let after = prober.probe_journalled(journal, "after").await;
    journal.emit(Event::LevelEnd {
        index,
        concurrency,
        health: after,
        identity: target.identity(),
    });
}

/// MCP workers: each opens its session once (timed apart), then calls the tool back to back. Over
/// stdio they share the process's one connection, so level n is n calls outstanding on it.
async fn run_mcp_workers(
    target: &McpTarget,
    call: &ToolCall,
    budget: Budget,
    concurrency: u32,
    index: u32,
    journal: &Journal,
    ids: &Arc<AtomicU64>,
) {
    let group: Arc<str> = group_of_level(index).into();
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..concurrency {
        let target = target.clone();
        let call = call.clone();
        let journal = journal.clone();
        let ids = ids.clone();
        let group = group.clone();
        workers.spawn(async move {
            let clock = journal.clock();
            let mut session = target.open(w, &call, Some(&journal)).await;
            let mut sent = 0u32;
            loop {
                match budget {
                    Budget::Rounds(r) if sent >= r => break,
                    Budget::Until(t) if Instant::now() >= t => break,
                    _ => {}
                }
                let s = session.call_tool(&call).await;
                sent += 1;
                journal.emit_at(
                    clock.at(s.end),
                    Event::Request {
                        id: ids.fetch_add(1, Ordering::Relaxed),
                        group: group.to_string(),
                        worker: w,
                        start_s: clock.at(s.start),
                        duration_s: s.end.duration_since(s.start).as_secs_f64(),
                        outcome: s.outcome,
                        status: s.status,
                        scheduled_s: None,
                        detail: s.detail,
                    },
                );
            }
        });
    }
    while workers.join_next().await.is_some() {}
}
