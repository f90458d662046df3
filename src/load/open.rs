//! Open-loop levels (`load --rates`): each level sends at a fixed arrival rate from a schedule that
//! depends only on the rate, the arrivals and the seed, whatever the server does. A closed loop's
//! workers wait for each answer before the next request, so a stalled server is sent less while it
//! stalls and the wait of everyone who would have arrived meanwhile is never measured (coordinated
//! omission). Here each send has its intended time, journalled as `scheduled_s`; latency counts
//! from it. A send goes on an idle connection, or a new one while fewer than `max_in_flight` are
//! in flight; when the cap is full (or witness's own CPU is late) the send goes late, and its
//! lateness (`start_s - scheduled_s`) is in the journal for analysis to say so.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::{watch, Semaphore};

use super::client::{self, Limits, Sent};
use super::gate::{self, Gate};
use super::mcp::{McpTarget, Session, ToolCall};
use super::outcome::Rejection;
use super::progress::Tally;
use super::settings::{stopped, LadderConfig};
pub use super::settings::{Arrivals, OpenConfig, DEFAULT_DURATION};
use crate::journal::{group_of_level, ErrorKind, Event, Journal, Outcome};
use crate::server::Target;

/// A level's send times, as offsets in seconds from the level's start: the same rate, arrivals
/// and seed give the same schedule (a run replays). Drawn as it goes, in bounded memory.
pub struct Schedule {
    rate: f64,
    arrivals: Arrivals,
    rng: StdRng,
    n: u64,
    t: f64,
    end: f64,
}

impl Schedule {
    pub fn new(rate: f64, arrivals: Arrivals, seed: u64, index: u32, duration: Duration) -> Self {
        Self {
            rate,
            arrivals,
            rng: StdRng::seed_from_u64(
                seed ^ (index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
            ),
            n: 0,
            t: 0.0,
            end: duration.as_secs_f64(),
        }
    }
}

impl Iterator for Schedule {
    type Item = f64;
    fn next(&mut self) -> Option<f64> {
        let t = match self.arrivals {
            Arrivals::Constant => self.n as f64 / self.rate,
            Arrivals::Poisson => {
                let u: f64 = self.rng.gen();
                self.t += -(1.0 - u).ln() / self.rate;
                self.t
            }
        };
        self.n += 1;
        (t < self.end).then_some(t)
    }
}

/// One connection's way of making an exchange: an HTTP keep-alive connection or an MCP session.
enum Exchanger {
    Http(super::h1::Http1),
    Mcp(Session),
}

/// What every send of a level shares.
struct Shared {
    req: Arc<client::Prepared>,
    limits: Limits,
    rej: Rejection,
    mcp: Option<(McpTarget, ToolCall)>,
    journal: Journal,
    ids: Arc<AtomicU64>,
    group: String,
    idle: Mutex<Vec<(u32, Exchanger)>>,
    opened: AtomicU32,
    tally: Option<Arc<Tally>>,
}

impl Shared {
    /// An idle connection, or a new one (its connect, or its MCP session's handshake, is the send's).
    async fn take(&self) -> (u32, Exchanger) {
        if let Some(x) = self.idle.lock().expect("idle").pop() {
            return x;
        }
        let slot = self.opened.fetch_add(1, Ordering::Relaxed);
        let ex = match &self.mcp {
            Some((target, call)) => {
                Exchanger::Mcp(target.open(slot, call, Some(&self.journal)).await)
            }
            None => Exchanger::Http(super::h1::Http1::new(&self.req, self.limits)),
        };
        (slot, ex)
    }

    async fn send(&self, ex: &mut Exchanger, started: Instant) -> Sent {
        match ex {
            Exchanger::Http(conn) => conn.send(&self.req, self.limits, &self.rej, started).await,
            Exchanger::Mcp(session) => {
                let call = &self.mcp.as_ref().expect("an MCP level has its call").1;
                session.call_tool(call).await
            }
        }
    }

    fn record(&self, slot: u32, s: Sent, due: Instant) {
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        journal_scheduled(&self.journal, id, &self.group, slot, s, due);
    }
}

/// Journals an open-loop request (a rate level's, a replay's): its duration as sent, and the
/// moment it was due, from which its latency counts.
pub(super) fn journal_scheduled(
    journal: &Journal,
    id: u64,
    group: &str,
    worker: u32,
    s: Sent,
    due: Instant,
) {
    let clock = journal.clock();
    journal.emit_at(
        clock.at(s.end),
        Event::Request {
            id,
            group: group.to_string(),
            worker,
            start_s: clock.at(s.start),
            duration_s: s.end.duration_since(s.start).as_secs_f64(),
            outcome: s.outcome,
            status: s.status,
            scheduled_s: Some(clock.at(due)),
            detail: s.detail,
            body_bytes: s.body_bytes,
            body_cut: s.body_cut,
            connect_s: s.connect_s,
            headers_s: s.headers_s,
            handshake_s: s.handshake_s,
            lag_s: s.lag_s,
            rpc_id: None,
        },
    );
}

/// Sends one rate level's schedule; returns how many of its sends were not sent (the server died
/// and nothing restarts it, a restart outlasted the level, or the cap stayed full past the level's
/// end by more than the whole-request limit). The sends run as tasks on the caller's runtime;
/// the level ends when the last answer is in.
#[allow(clippy::too_many_arguments)]
pub async fn run_rate_level(
    cfg: &LadderConfig,
    open: &OpenConfig,
    rate: f64,
    index: u32,
    target: &Target,
    journal: &Journal,
    ids: &Arc<AtomicU64>,
    tally: Option<Arc<Tally>>,
    stop: &watch::Receiver<bool>,
) -> u64 {
    let shared = Arc::new(Shared {
        req: Arc::new(client::Prepared::new(&cfg.spec)),
        limits: cfg.limits,
        rej: cfg.rejection.clone(),
        mcp: cfg.mcp.clone(),
        journal: journal.clone(),
        ids: ids.clone(),
        group: group_of_level(index),
        idle: Mutex::new(Vec::new()),
        opened: AtomicU32::new(0),
        tally,
    });
    let schedule = Schedule::new(rate, open.arrivals, open.seed, index, open.duration);
    let start = Instant::now();
    let timing = Timing {
        start,
        deadline: start + open.duration,
        max_in_flight: open.max_in_flight,
        whole: cfg.limits.whole,
    };
    drive(
        schedule.map(|o| (o, ())),
        timing,
        target,
        stop,
        |(), due, stop| {
            let sh = shared.clone();
            async move { sh.send_one(due, stop).await }
        },
    )
    .await
}

impl Shared {
    /// One send of a rate level: on an idle connection (or a new one), journalled.
    async fn send_one(&self, due: Instant, mut stop: watch::Receiver<bool>) {
        let (slot, mut ex) = self.take().await;
        if let Some(t) = &self.tally {
            t.started();
        }
        let started = Instant::now();
        let s = tokio::select! {
            biased;
            s = self.send(&mut ex, started) => s,
            _ = stopped(&mut stop) => interrupted(started),
        };
        if let Some(t) = &self.tally {
            t.finished(&s.outcome);
        }
        self.record(slot, s, due);
        self.idle.lock().expect("idle").push((slot, ex));
    }
}

/// A send cut short by witness's own stop: journalled as interrupted, never the server's failure.
pub(super) fn interrupted(started: Instant) -> Sent {
    Sent::whole(
        started,
        Instant::now(),
        Outcome::Error {
            error: ErrorKind::Interrupted,
            status: None,
        },
        None,
        Some("in flight when witness stopped the run".into()),
    )
}

/// When an open-loop level's schedule starts and ends, and what bounds its sends.
#[derive(Clone, Copy)]
pub(super) struct Timing {
    pub start: Instant,
    /// The schedule's end: a send due after a restart outlasting it is not sent.
    pub deadline: Instant,
    pub max_in_flight: u32,
    /// The whole-request limit: a send the cap kept back this long past the deadline is not sent.
    pub whole: Duration,
}

/// The open loop itself, whatever is sent: each item of `schedule` (an offset in seconds from
/// `timing.start`, and what to send) is handed to `send` at its time, as a task, with its intended
/// send time; late when the in-flight cap is full or witness is behind. Returns how many were not
/// sent (the server died and nothing restarts it, a restart outlasted the level, or the cap stayed
/// full past the level's end by more than the whole-request limit). Ends when the last send is done.
pub(super) async fn drive<T, F, Fut>(
    mut schedule: impl Iterator<Item = (f64, T)>,
    timing: Timing,
    target: &Target,
    stop: &watch::Receiver<bool>,
    send: F,
) -> u64
where
    F: Fn(T, Instant, watch::Receiver<bool>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let mut stop = stop.clone();
    let mut state = target.state();
    let cap = Arc::new(Semaphore::new(timing.max_in_flight as usize));
    let Timing {
        start, deadline, ..
    } = timing;
    // A send the cap kept back this long after the level's end is not sent: the level is bounded.
    let give_up = deadline + timing.whole;
    let mut sends = tokio::task::JoinSet::new();
    let mut not_sent = 0u64;
    while let Some((offset, item)) = schedule.next() {
        let mut due = start + Duration::from_secs_f64(offset);
        // A send already due (witness is behind) goes at once, without a timer's round trip.
        if due > Instant::now() {
            tokio::select! {
                biased;
                _ = stopped(&mut stop) => break,
                _ = tokio::time::sleep_until(due.into()) => {}
            }
        } else if *stop.borrow() {
            break;
        }
        // Never the harness's wait: a send due while the server restarts goes to the new process,
        // and its clock starts there.
        if let Some(st) = state.as_mut() {
            let gate = tokio::select! {
                biased;
                _ = stopped(&mut stop) => break,
                g = gate::server_up(st, Some(deadline)) => g,
            };
            match gate {
                Gate::Go { waited: true } => due = Instant::now(),
                Gate::Go { waited: false } => {}
                Gate::Expired | Gate::Gone => {
                    not_sent += 1 + schedule.count() as u64;
                    break;
                }
            }
        }
        let permit = match cap.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => tokio::select! {
                biased;
                _ = stopped(&mut stop) => break,
                p = cap.clone().acquire_owned() => p.expect("the cap is never closed"),
                _ = tokio::time::sleep_until(give_up.into()) => {
                    not_sent += 1 + schedule.count() as u64;
                    break;
                }
            },
        };
        let work = send(item, due, stop.clone());
        sends.spawn(async move {
            let _permit = permit;
            work.await;
        });
        // Finished sends are reaped as the level goes: the set holds at most the cap.
        while sends.try_join_next().is_some() {}
    }
    while sends.join_next().await.is_some() {}
    not_sent
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schedule_replays_from_its_seed_and_keeps_its_rate() {
        let d = Duration::from_secs(10);
        let c: Vec<f64> = Schedule::new(20.0, Arrivals::Constant, 1, 0, d).collect();
        assert_eq!(c.len(), 200);
        assert!((c[1] - 0.05).abs() < 1e-12 && c[0] == 0.0);
        let p = |seed, index| Schedule::new(20.0, Arrivals::Poisson, seed, index, d).collect();
        let a: Vec<f64> = p(7, 0);
        assert_eq!(a, p(7, 0), "the same seed replays");
        assert_ne!(a, p(8, 0), "another seed, another schedule");
        assert_ne!(a, p(7, 1), "each level its own draw");
        // About 200 arrivals in 10 s at 20/s (the Poisson count's sd is about 14).
        assert!((140..260).contains(&a.len()), "{}", a.len());
        assert!(a.windows(2).all(|w| w[0] <= w[1]) && a.iter().all(|&t| t < 10.0));
    }
}
