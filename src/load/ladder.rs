//! The concurrency ladder: for each level, probe health (skip a wedged server, never measure it), read
//! the server's identity, run n workers, settle, probe and read identity again. Every request is
//! journalled as it completes with one outcome and one duration; the verdicts are analysis's job.
//! When the run is stopped (a signal, a journal that cannot be written), every request in flight is
//! journalled as `interrupted` — not dropped, and never the server's failure — and the level ends
//! at once, without its settle and after-probe.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::client::{self, Limits};
use super::gate::{self, Gate};
use super::health::Health;
use super::mcp::{McpTarget, ToolCall};
use super::outcome::Rejection;
use super::progress::LevelProgress;
use crate::journal::{group_of_level, ErrorKind, Event, Identity, Journal, Outcome};
use crate::server::process::State;
use crate::server::Target;

pub use super::settings::{stopped, LadderConfig};

/// How many requests a worker sends.
#[derive(Clone, Copy)]
enum Budget {
    Rounds(u32),
    Until(Instant),
}

impl Budget {
    /// When the level stops sending, if it runs for a time.
    fn deadline(self) -> Option<Instant> {
        match self {
            Budget::Until(t) => Some(t),
            Budget::Rounds(_) => None,
        }
    }
}

/// How a level went, for the run's end line.
#[derive(Clone, Debug, PartialEq)]
pub enum LevelRun {
    Ran,
    /// Not measured; why, in the words of what happened to the server.
    Skipped(String),
    /// Stopped sending part-way: the server died and nothing restarts it.
    Stopped(String),
}

/// The server is gone for good (it exited and no restart policy brings it back): the exit status.
fn gone_for_good(target: &Target) -> Option<i32> {
    match &*target.state()?.borrow() {
        State::Finished { status } => Some(*status),
        _ => None,
    }
}

/// "the server died (exit status 137)" in the lifecycle's words when it knows more than the status:
/// "the server died (pid 7 was killed by the kernel OOM killer (OOMKilled, exit 137))".
fn in_lifecycle_words(journal: &Journal, text: String) -> String {
    let Some(rest) = text.split_once("died (exit status ").map(|x| x.1) else {
        return text;
    };
    let Some(status) = rest.split(')').next().and_then(|n| n.parse::<i32>().ok()) else {
        return text;
    };
    let how = journal
        .lifecycle()
        .into_iter()
        .rev()
        .find_map(|r| match r.event {
            Event::Exit {
                pid,
                status: s,
                oom_killed,
                signal,
                ..
            } if s == status => match (oom_killed, signal) {
                (Some(true), _) => Some(format!(
                    "pid {pid} was killed by the kernel OOM killer (OOMKilled, exit {s})"
                )),
                (_, Some(sig)) => Some(format!("pid {pid} was killed by {sig} (exit {s})")),
                _ => None,
            },
            _ => None,
        });
    match how {
        Some(how) => text.replacen(&format!("(exit status {status})"), &format!("({how})"), 1),
        None => text,
    }
}

/// The kernel's state letter of a process ("T" stopped, "R", "S", …).
fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')')
        .next()?
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

/// What witness knows about the server when health before a level failed.
#[derive(Clone, Debug, Default)]
pub struct Seen<'a> {
    pub health: String,
    /// Exited and no restart policy brings it back: its status.
    pub gone_for_good: Option<i32>,
    /// Exited, a restart is on its way: its status.
    pub down: Option<i32>,
    pub owned: bool,
    pub before: Option<&'a Identity>,
    pub now: Option<&'a Identity>,
    /// The kernel's state letter of the process now ("T": stopped).
    pub state: Option<char>,
}

/// Why the server did not answer health before a level, gathered from the target.
pub fn why_unhealthy(
    target: &Target,
    health: &str,
    before: Option<&Identity>,
    now: Option<&Identity>,
) -> String {
    why_unhealthy_words(&Seen {
        health: health.to_string(),
        gone_for_good: gone_for_good(target),
        down: match target.state().map(|s| s.borrow().clone()) {
            Some(State::Down { status }) => Some(status),
            _ => None,
        },
        owned: target.owned(),
        before,
        now,
        state: now.and_then(|id| process_state(id.pid)),
    })
}

/// In words that match what happened: died (gone, nothing restarts it), restarting (down, a restart
/// is on its way), restarted (witness's own child, a new pid) or replaced (another process listens),
/// stopped (SIGSTOP: state T), or wedged (alive, not answering).
pub fn why_unhealthy_words(s: &Seen) -> String {
    let health = &s.health;
    if let Some(status) = s.gone_for_good {
        return format!(
            "the server died (exit status {status}) and nothing restarts it (health before: {health}): not measured"
        );
    }
    if let Some(status) = s.down {
        return format!(
            "the server is down (exit status {status}), a restart is on its way (health before: {health}): not measured"
        );
    }
    match (s.before, s.now) {
        (Some(_), None) => {
            return format!(
                "the server died: nothing listens any more (health before: {health}): not measured"
            )
        }
        (Some(a), Some(b)) if a != b && s.owned => {
            return format!(
                "the server restarted (pid {} → {}) and is not answering yet (health before: {health}): not measured",
                a.pid, b.pid
            )
        }
        (Some(a), Some(b)) if a != b => {
            return format!(
                "the server was replaced: pid {} now listens where pid {} did (health before: {health}): not measured",
                b.pid, a.pid
            )
        }
        _ => {}
    }
    if let (Some(id), Some('T')) = (s.now, s.state) {
        return format!(
            "the server is stopped (pid {} in process state T, SIGSTOP) (health before: {health}): not measured",
            id.pid
        );
    }
    format!(
        "health before was {health} (not 200): the server is wedged (alive, not answering): not measured against a wedged server"
    )
}

/// Runs one level; returns when its LevelEnd is journalled. `previous`: who the server was when
/// the last level (or the ladder) began, to tell a restart or a replacement from a wedge.
/// With `live` (stderr is a terminal) a progress line shows elapsed time, outcomes so far and
/// requests in flight while it runs. `rate`: an open-loop level at this arrival rate (its
/// `concurrency` is then the in-flight cap), sent by [`super::open`].
#[allow(clippy::too_many_arguments)]
pub async fn run_level(
    cfg: &LadderConfig,
    index: u32,
    concurrency: u32,
    rate: Option<f64>,
    target: &Target,
    prober: &Health,
    journal: &Journal,
    ids: &Arc<AtomicU64>,
    previous: Option<&Identity>,
    live: bool,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> LevelRun {
    let before = prober.probe_journalled(journal, "before").await;
    let identity = target.identity();
    if !before.healthy() {
        let why = in_lifecycle_words(
            journal,
            why_unhealthy(target, &before.text(), previous, identity.as_ref()),
        );
        journal.emit(Event::LevelStart {
            index,
            concurrency,
            health: before.clone(),
            identity,
            skipped: Some(why.clone()),
        });
        rate_level(cfg, journal, index, rate);
        // A server coming back from a restart gets the settle time before the next level's probe.
        tokio::time::sleep(cfg.settle).await;
        return LevelRun::Skipped(why);
    }
    // witness is never the load: the probe's connection is closed for the level (the after-probe
    // opens one again), so level n holds n connections to the server, counted from here.
    prober.close().await;
    client::held::mark();
    let cpu_at_start = own_cpu_s();
    journal.emit(Event::LevelStart {
        index,
        concurrency,
        health: before,
        identity,
        skipped: None,
    });
    rate_level(cfg, journal, index, rate);
    listen(cfg, journal, index, "before");
    let budget = match cfg.duration {
        Some(d) => Budget::Until(Instant::now() + d),
        None => Budget::Rounds(cfg.rounds),
    };
    let what = match rate {
        Some(r) if cfg.replay.is_some() => crate::journal::speed_words(r),
        Some(r) => crate::journal::rate_words(r),
        None => format!("n={concurrency}"),
    };
    let progress = LevelProgress::start(live, index, what);
    let mut spoke: Option<Box<dyn FnOnce() -> String + Send>> = None;
    let open = cfg.open.as_ref().zip(rate);
    let not_sent = if let (Some(replay), Some(speed)) = (&cfg.replay, rate) {
        let tally = progress.is_live().then(|| progress.tally.clone());
        super::replay::run_speed_level(cfg, replay, speed, index, target, journal, ids, tally, stop)
            .await
    } else if let Some((open, rate)) = open {
        let tally = progress.is_live().then(|| progress.tally.clone());
        super::open::run_rate_level(cfg, open, rate, index, target, journal, ids, tally, stop).await
    } else if let Some((mcp, call)) = &cfg.mcp {
        if let McpTarget::Http(uri) = mcp {
            let tls = uri.scheme_str() == Some("https");
            let words = match (call.http2, tls) {
                (true, true) => "MCP over HTTP/2 over TLS (ALPN h2), a connection per session",
                (true, false) => "MCP over HTTP/2 cleartext (h2c), a connection per session",
                (false, true) => "MCP over HTTP/1.1 over TLS",
                (false, false) => "MCP over HTTP/1.1",
            };
            spoke = Some(Box::new(move || words.to_string()));
        }
        run_mcp_workers(
            mcp,
            call,
            budget,
            concurrency,
            index,
            target,
            journal,
            ids,
            stop,
        )
        .await
    } else {
        let pool = cfg
            .http2
            .map(|c| Arc::new(super::h2::Pool::new(cfg.limits, c.min(concurrency))));
        spoke = Some(protocol(cfg, pool.as_deref()));
        let not_sent = run_http_workers(
            cfg,
            pool.clone(),
            budget,
            concurrency,
            index,
            target,
            journal,
            ids,
            &progress,
            stop,
        )
        .await;
        // How the level's HTTP/2 connections ended, and the streams sent again: one event.
        if let Some(p) = &pool {
            journal.emit(p.connections(index));
        }
        not_sent
    };
    progress.finish();
    let cpu_s = crate::journal::micros(own_cpu_s() - cpu_at_start);
    listen(cfg, journal, index, "after");
    // The most connections witness held while the level's load ran (the probes' are closed).
    let held = client::held::peak();
    if *stop.borrow() {
        return LevelRun::Stopped("witness was stopped during this level".into());
    }
    let stopped = gone_for_good(target).map(|status| {
        in_lifecycle_words(
            journal,
            format!("the server died (exit status {status}) and nothing restarts it: the level stopped sending"),
        )
    });
    tokio::time::sleep(cfg.settle).await;
    let after = prober.probe_journalled(journal, "after").await;
    // Over stdio witness holds a pipe, not connections.
    let stdio = matches!(&cfg.mcp, Some((McpTarget::Stdio(_), _)));
    journal.emit(Event::LevelEnd {
        index,
        concurrency,
        health: after,
        identity: target.identity(),
        stopped: stopped.clone(),
        not_sent: (stopped.is_some() || not_sent > 0).then_some(not_sent),
        held: (!stdio).then_some(held),
        witness_cpu_s: Some(cpu_s),
        protocol: spoke.map(|s| s()),
    });
    match stopped {
        Some(why) => LevelRun::Stopped(why),
        None => LevelRun::Ran,
    }
}

/// What a level's HTTP spoke, said once it ran (the connections it opened).
fn protocol(
    cfg: &LadderConfig,
    pool: Option<&super::h2::Pool>,
) -> Box<dyn FnOnce() -> String + Send> {
    let tls = cfg.spec.uri.scheme_str() == Some("https");
    match pool {
        None => Box::new(move || if tls { "HTTP/1.1 over TLS" } else { "HTTP/1.1" }.to_string()),
        Some(p) => {
            let spoke = if tls {
                super::h2::Spoke::Tls
            } else {
                super::h2::Spoke::Cleartext
            };
            let asked = cfg.http2.unwrap_or(1);
            let n = p.opened_counter();
            Box::new(move || {
                let opened = n.load(Ordering::Relaxed);
                format!(
                    "{}: streams over {asked} connection{} ({opened} opened)",
                    spoke.words(),
                    if asked == 1 { "" } else { "s" }
                )
            })
        }
    }
}

/// An open-loop level's rate and schedule, journalled right after its start.
fn rate_level(cfg: &LadderConfig, journal: &Journal, index: u32, rate: Option<f64>) {
    // A replay's level: the recording's calls at its speed, over the recorded span ÷ the speed.
    if let (Some(replay), Some(speed)) = (&cfg.replay, rate) {
        let duration_s = replay.span_s / speed;
        journal.emit(Event::RateLevel {
            index,
            rate_per_s: replay.sends() as f64 / duration_s.max(1e-3),
            arrivals: "replay".into(),
            seed: 0,
            max_in_flight: replay.max_in_flight,
            duration_s,
        });
        return;
    }
    if let (Some(open), Some(rate)) = (&cfg.open, rate) {
        journal.emit(Event::RateLevel {
            index,
            rate_per_s: rate,
            arrivals: open.arrivals.name().into(),
            seed: open.seed,
            max_in_flight: open.max_in_flight,
            duration_s: open.duration.as_secs_f64(),
        });
    }
}

/// What every HTTP worker of a level shares (cheap to clone: counted references).
#[derive(Clone)]
struct Shared {
    req: Arc<client::Prepared>,
    limits: Limits,
    rej: Arc<Rejection>,
    budget: Budget,
    journal: Journal,
    ids: Arc<AtomicU64>,
    group: Arc<str>,
    /// The live line's counts, when there is a live line.
    tally: Option<Arc<super::progress::Tally>>,
    dead: Option<tokio::sync::watch::Receiver<State>>,
    stop: tokio::sync::watch::Receiver<bool>,
    /// `--http2`: the level's shared connections (else each worker has its own HTTP/1.1 one).
    h2: Option<Arc<super::h2::Pool>>,
    /// When the level's workers were meant to start: each one's first request is due then, and
    /// how long after it witness got to that request's first system call is witness's own lag.
    begun: Instant,
}

/// How many threads send a level's requests: one per core (as wrk and oha do), never more than
/// there are workers.
fn sender_threads(concurrency: u32) -> u32 {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
    cores.clamp(1, concurrency.max(1))
}

/// Plain HTTP workers, each with its own keep-alive connection, sending back to back; returns how
/// many requests were not sent because the server died and nothing restarts it. The workers are
/// spread over one single-threaded runtime per core, each thread owning its share of the
/// connections: a response wakes the worker on the thread that reads it, with no pool, no work
/// stealing and no wake-up across threads between a request's end and its record.
#[allow(clippy::too_many_arguments)]
async fn run_http_workers(
    cfg: &LadderConfig,
    h2: Option<Arc<super::h2::Pool>>,
    budget: Budget,
    concurrency: u32,
    index: u32,
    target: &Target,
    journal: &Journal,
    ids: &Arc<AtomicU64>,
    progress: &LevelProgress,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> u64 {
    let shared = Shared {
        req: Arc::new(client::Prepared::new(&cfg.spec)),
        limits: cfg.limits,
        rej: Arc::new(cfg.rejection.clone()),
        budget,
        journal: journal.clone(),
        ids: ids.clone(),
        group: group_of_level(index).into(),
        tally: progress.is_live().then(|| progress.tally.clone()),
        // Set when the server died and nothing restarts it: the level stops sending (a request
        // to a port nobody listens on measures nothing) and counts what it did not send.
        dead: target.state(),
        stop: stop.clone(),
        h2,
        begun: Instant::now(),
    };
    // HTTP/2's streams share connections whose tasks must outlive every worker using them: all on
    // the main runtime.
    let threads = if shared.h2.is_some() {
        0
    } else {
        sender_threads(concurrency)
    };
    let mut done = Vec::new();
    let mut here = tokio::task::JoinSet::new();
    if threads == 0 {
        for w in 0..concurrency {
            here.spawn(http_worker(shared.clone(), w));
        }
    }
    for t in 0..threads {
        let mine: Vec<u32> = (t..concurrency).step_by(threads as usize).collect();
        let (tx, rx) = tokio::sync::oneshot::channel::<u64>();
        let sh = shared.clone();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build();
        let spawned = rt.map_err(|e| e.to_string()).and_then(|rt| {
            let ws = mine.clone();
            std::thread::Builder::new()
                .name("witness-load".into())
                .spawn(move || {
                    let n = rt.block_on(async move {
                        let mut set = tokio::task::JoinSet::new();
                        for w in ws {
                            set.spawn(http_worker(sh.clone(), w));
                        }
                        let mut n = 0u64;
                        while let Some(r) = set.join_next().await {
                            n += r.unwrap_or(0);
                        }
                        n
                    });
                    let _ = tx.send(n);
                })
                .map_err(|e| e.to_string())
        });
        match spawned {
            Ok(_) => done.push(rx),
            // No thread to spare: these workers run on the main runtime instead.
            Err(_) => {
                for w in mine {
                    here.spawn(http_worker(shared.clone(), w));
                }
            }
        }
    }
    let mut not_sent = 0u64;
    while let Some(n) = here.join_next().await {
        not_sent += n.unwrap_or(0);
    }
    for rx in done {
        not_sent += rx.await.unwrap_or(0);
    }
    not_sent
}

/// One HTTP worker: its own connection, requests back to back until the budget is spent, the run
/// stops, or the server is gone for good (then: how many of its rounds it did not send).
async fn http_worker(sh: Shared, w: u32) -> u64 {
    let Shared {
        req,
        limits,
        rej,
        budget,
        journal,
        ids,
        group,
        tally,
        mut dead,
        mut stop,
        h2,
        begun,
    } = sh;
    let clock = journal.clock();
    let mut conn = super::h1::Http1::new(&req, limits);
    let mut sent = 0u32;
    // When the next request is due: the level's start for the first (a worker that runs later than
    // that, behind a thousand others on a few threads, is witness's lag), then the last request's
    // end — the budget's clock between requests, without another reading.
    let mut now = begun;
    loop {
        match budget {
            _ if *stop.borrow() => break,
            Budget::Rounds(r) if sent >= r => break,
            Budget::Until(t) if now >= t => break,
            _ => {}
        }
        // Never the harness's wait: while the server is down with a restart on its way, the
        // request waits for the new process, and its clock starts then; past the level's end it
        // is not sent.
        if let Some(state) = dead.as_mut() {
            let until = budget.deadline();
            let gate = tokio::select! {
                biased;
                _ = stopped(&mut stop) => break,
                g = gate::server_up(state, until) => g,
            };
            match gate {
                // Due once the new process runs: the wait for it is the restart's, not a lag.
                Gate::Go { waited: true } => now = Instant::now(),
                Gate::Go { waited: false } => {}
                Gate::Expired => return 1,
                Gate::Gone => {
                    return match budget {
                        Budget::Rounds(r) => (r - sent) as u64,
                        Budget::Until(_) => 0,
                    }
                }
            }
        }
        if let Some(t) = &tally {
            t.started();
        }
        // The request's clock starts here, just before its first system call (the connect, or the
        // write on the kept-alive connection); what lies between when it was due and now is
        // witness's own.
        let started = Instant::now();
        let lag_s = crate::journal::micros(started.saturating_duration_since(now).as_secs_f64());
        let mut s = tokio::select! {
            biased;
            s = async {
                match &h2 {
                    Some(pool) => super::h2::send(pool, w, &req, limits, &rej, started).await,
                    None => conn.send(&req, limits, &rej, started).await,
                }
            } => s,
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
                        connect_s: None,
                        headers_s: None,
                        handshake_s: None,
                        lag_s: Some(lag_s),
                        rpc_id: None,
                    },
                );
                break;
            }
        };
        s.lag_s = Some(lag_s);
        if let Some(t) = &tally {
            t.finished(&s.outcome);
        }
        sent += 1;
        now = s.end;
        // Refused: nobody listens. If the server witness started just died, its supervisor says
        // so in a moment; wait for that (bounded) rather than hammer a dead port. After a lost
        // connection the server may be dying (its sockets close before its exit is reaped): a
        // reconnect now would only meet its closing listener and fail too, so wait a moment for
        // the supervisor (250 ms if the process is already a zombie, else 50 ms).
        let refused = matches!(
            &s.outcome,
            Outcome::Error {
                error: ErrorKind::ConnectRefused,
                ..
            }
        );
        let lost = matches!(
            &s.outcome,
            Outcome::Error {
                error: ErrorKind::Reset | ErrorKind::ClosedBeforeResponse | ErrorKind::Closed,
                ..
            }
        );
        journal_exchange(&journal, &ids, &group, w, s);
        let dying = lost
            && dead.as_ref().is_some_and(|d| match &*d.borrow() {
                State::Running(id) => matches!(process_state(id.pid), None | Some('Z' | 'X')),
                _ => false,
            });
        if let Some(state) = dead.as_mut() {
            if refused || dying {
                let gone = |s: &State| matches!(s, State::Finished { .. });
                wait_for_supervisor(state, Duration::from_millis(250), gone).await;
                now = Instant::now();
            } else if lost {
                let not_running = |s: &State| !matches!(s, State::Running(_));
                wait_for_supervisor(state, Duration::from_millis(50), not_running).await;
                now = Instant::now();
            }
        }
    }
    0
}

/// Waits, at most `limit`, until the supervisor's state of the server satisfies `until`.
async fn wait_for_supervisor(
    state: &mut tokio::sync::watch::Receiver<State>,
    limit: Duration,
    until: impl FnMut(&State) -> bool,
) {
    let _ = tokio::time::timeout(limit, state.wait_for(until)).await;
}

/// MCP workers: each opens its session once (timed apart), then calls the tool back to back. Over
/// stdio they share the process's one connection, so level n is n calls outstanding on it. Returns
/// how many calls were not sent (the server died and nothing restarts it, or the level ended while
/// it restarted).
#[allow(clippy::too_many_arguments)]
async fn run_mcp_workers(
    target: &McpTarget,
    call: &ToolCall,
    budget: Budget,
    concurrency: u32,
    index: u32,
    server: &Target,
    journal: &Journal,
    ids: &Arc<AtomicU64>,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> u64 {
    let group: Arc<str> = group_of_level(index).into();
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..concurrency {
        let target = target.clone();
        let call = call.clone();
        let journal = journal.clone();
        let ids = ids.clone();
        let group = group.clone();
        let mut stop = stop.clone();
        let mut state = server.state();
        workers.spawn(async move {
            // Who the session was opened on: an HTTP session dies with its process.
            let mut opened_on = state.as_ref().and_then(|s| s.borrow().identity());
            let mut session = target.open(w, &call, Some(&journal)).await;
            let mut sent = 0u32;
            loop {
                match budget {
                    _ if *stop.borrow() => break,
                    Budget::Rounds(r) if sent >= r => break,
                    Budget::Until(t) if Instant::now() >= t => break,
                    _ => {}
                }
                // As for HTTP: a call waits for a restarted server before its clock starts.
                if let Some(st) = state.as_mut() {
                    let until = budget.deadline();
                    let gate = tokio::select! {
                        biased;
                        _ = stopped(&mut stop) => break,
                        g = gate::server_up(st, until) => g,
                    };
                    match gate {
                        // The old process's HTTP session died with it (its calls would only be
                        // refused as an unknown session, witness's doing): a new one on the new.
                        Gate::Go { .. } => {
                            let now_on = st.borrow().identity();
                            if matches!(target, McpTarget::Http(_)) && now_on != opened_on {
                                session = target.open(w, &call, Some(&journal)).await;
                                opened_on = now_on;
                                if !session.opened() {
                                    // Not listening yet: tried again (after a moment) before
                                    // the next call; this one goes and fails as it will.
                                    opened_on = None;
                                    let was = st.borrow().clone();
                                    wait_for_supervisor(st, Duration::from_millis(250), |s| {
                                        *s != was
                                    })
                                    .await;
                                }
                            }
                        }
                        Gate::Expired => return 1,
                        Gate::Gone => {
                            return match budget {
                                Budget::Rounds(r) => (r - sent) as u64,
                                Budget::Until(_) => 0,
                            }
                        }
                    }
                }
                let s = session.call_tool(&call).await;
                sent += 1;
                // Nobody listens (the server is dying, or its new process not listening yet):
                // wait a moment for the supervisor rather than hammer the port, as HTTP does.
                let unreachable = matches!(
                    &s.outcome,
                    Outcome::Error {
                        error: ErrorKind::Connect | ErrorKind::ConnectRefused,
                        ..
                    }
                );
                journal_exchange(&journal, &ids, &group, w, s);
                if let (true, Some(st)) = (unreachable, state.as_mut()) {
                    let changed = st.borrow().clone();
                    wait_for_supervisor(st, Duration::from_millis(250), |s| *s != changed).await;
                }
            }
            0
        });
    }
    let mut not_sent = 0;
    while let Some(n) = workers.join_next().await {
        not_sent += n.unwrap_or(0);
    }
    not_sent
}

/// witness's own CPU time so far, user and system, all threads (getrusage RUSAGE_SELF).
fn own_cpu_s() -> f64 {
    // SAFETY: getrusage fills the struct it is given; a zeroed rusage is a valid one.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// One exchange's record, HTTP or MCP alike: one outcome and one duration, stamped at its end.
fn journal_exchange(journal: &Journal, ids: &AtomicU64, group: &str, worker: u32, s: client::Sent) {
    let clock = journal.clock();
    journal.emit_at(
        clock.at(s.end),
        Event::Request {
            id: ids.fetch_add(1, Ordering::Relaxed),
            group: group.to_string(),
            worker,
            start_s: clock.at(s.start),
            duration_s: s.end.duration_since(s.start).as_secs_f64(),
            outcome: s.outcome,
            status: s.status,
            scheduled_s: None,
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

/// The kernel's listen-queue counters and the target's listener, journalled for a level when the
/// target is a TCP host and port (HTTP, MCP over HTTP): the evidence beside a SYN retransmission.
fn listen(cfg: &LadderConfig, journal: &Journal, index: u32, when: &str) {
    let uri = match &cfg.mcp {
        Some((McpTarget::Http(u), _)) => Some(u),
        Some((McpTarget::Stdio(_), _)) => None,
        None => Some(&cfg.spec.uri),
    };
    crate::sample::listen::journal_listen(journal, index, when, uri);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(pid: u32) -> Identity {
        Identity {
            pid,
            start_time: 1000 + pid as u64,
            container_id: None,
            container_started_at: None,
            socket_inode: None,
        }
    }

    #[test]
    fn a_skipped_level_says_which_of_died_restarted_replaced_stopped_wedged() {
        let (a, b) = (id(7), id(8));
        let base = Seen {
            health: "ConnectionRefused".into(),
            owned: true,
            before: Some(&a),
            now: Some(&a),
            ..Default::default()
        };
        let w = |s: Seen| why_unhealthy_words(&s);
        assert!(w(Seen {
            gone_for_good: Some(1),
            now: None,
            ..base.clone()
        })
        .starts_with("the server died (exit status 1) and nothing restarts it"));
        assert!(w(Seen {
            down: Some(124),
            now: None,
            ..base.clone()
        })
        .starts_with("the server is down (exit status 124), a restart is on its way"));
        assert!(w(Seen {
            now: Some(&b),
            ..base.clone()
        })
        .starts_with("the server restarted (pid 7 → 8)"));
        assert!(w(Seen {
            now: Some(&b),
            owned: false,
            ..base.clone()
        })
        .starts_with("the server was replaced: pid 8 now listens where pid 7 did"));
        assert!(w(Seen {
            now: None,
            owned: false,
            ..base.clone()
        })
        .starts_with("the server died: nothing listens any more"));
        assert!(w(Seen {
            state: Some('T'),
            ..base.clone()
        })
        .starts_with("the server is stopped (pid 7 in process state T, SIGSTOP)"));
        assert!(w(Seen {
            state: Some('S'),
            health: "TimeoutError".into(),
            ..base
        })
        .contains("the server is wedged (alive, not answering)"));
    }
}
