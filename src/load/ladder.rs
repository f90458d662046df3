//! The concurrency ladder: for each level, probe health (skip a wedged server, never measure it), read
//! the server's identity, run n workers, settle, probe and read identity again. Every request is
//! journalled as it completes with one outcome and one duration; the verdicts are analysis's job.
//! When the run is stopped (a signal, a journal that cannot be written), every request in flight is
//! journalled as `interrupted` — not dropped, and never the server's failure — and the level ends
//! at once, without its settle and after-probe.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::Uri;

use super::client::{self, Limits, RequestSpec};
use super::health::Prober;
use super::outcome::Rejection;
use crate::journal::{group_of_level, ErrorKind, Event, Journal, Outcome};
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
}

/// How many requests a worker sends.
#[derive(Clone, Copy)]
enum Budget {
    Rounds(u32),
    Until(Instant),
}

/// Runs one level; returns when its LevelEnd is journalled. `on_level_end` lets the caller print.
#[allow(clippy::too_many_arguments)] // the level, what it runs against, and where it records: all needed
pub async fn run_level(
    cfg: &LadderConfig,
    index: u32,
    concurrency: u32,
    target: &Target,
    prober: &Prober,
    journal: &Journal,
    ids: &Arc<AtomicU64>,
    stop: &tokio::sync::watch::Receiver<bool>,
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
        let mut stop = stop.clone();
        workers.spawn(async move {
            let clock = journal.clock();
            let mut sent = 0u32;
            loop {
                match budget {
                    _ if *stop.borrow() => break,
                    Budget::Rounds(r) if sent >= r => break,
                    Budget::Until(t) if Instant::now() >= t => break,
                    _ => {}
                }
                let started = Instant::now();
                let s = tokio::select! {
                    s = client::send(&http, &spec, limits, &rej) => s,
                    _ = stopped(&mut stop) => {
                        let end = Instant::now();
                        journal.emit_at(
                            clock.at(end),
                            Event::Request {
                                id: ids.fetch_add(1, Ordering::Relaxed),
                                group: group.to_string(),
                                worker: w,
                                start_s: clock.at(started),
                                duration_s: end.duration_since(started).as_secs_f64(),
                                outcome: Outcome::Error {
                                    error: ErrorKind::Interrupted,
                                    status: None,
                                },
                                status: None,
                                scheduled_s: None,
                                detail: Some("in flight when witness stopped the run".into()),
                                body_bytes: None,
                                body_cut: false,
                            },
                        );
                        break;
                    }
                };
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
                        body_bytes: s.body_bytes,
                        body_cut: s.body_cut,
                    },
                );
            }
        });
    }
    while workers.join_next().await.is_some() {}
    if *stop.borrow() {
        return;
    }
    tokio::time::sleep(cfg.settle).await;
    let after = prober.probe_journalled(journal, "after").await;
    journal.emit(Event::LevelEnd {
        index,
        concurrency,
        health: after,
        identity: target.identity(),
    });
}

/// Resolves once the run is told to stop (never, if the sender is gone without saying so).
pub async fn stopped(stop: &mut tokio::sync::watch::Receiver<bool>) {
    if stop.wait_for(|s| *s).await.is_err() {
        std::future::pending::<()>().await;
    }
}
