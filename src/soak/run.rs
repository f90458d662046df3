//! The soak engine: the plan's workers send on a schedule, and at every progress interval witness
//! closes the interval in the journal, checks every invariant and reads every gauge; the first
//! violation ends the soak at once, with everything measured so far kept.
//!
//! Workers are drivers (cycling burst, steady and idle phases), readers (polling GET endpoints) and
//! background workers (operational calls at a bounded rate). Each keeps a [`Schedule`]: the next send
//! is due a drawn gap after the previous one was *due*, not after it finished, so a slow answer makes
//! the following sends late instead of silently thinning the load (coordinated omission). A late send
//! goes at once and is journalled with its `scheduled_s`; its latency counts from then.
//!
//! Faults witness injects on purpose (`--inject kill@5m`) are journalled as `fault` events; while one
//! is in effect, the server being down, restarted or unhealthy is expected, not a violation, until it
//! is seen back (a `recovered` fault event) or `fault_grace` runs out.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::Signal;
use rand::distributions::{Distribution, WeightedIndex};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::mpsc::UnboundedSender;

use super::gauge::{first_line, value_at, Reader};
use super::health::SoakHealth;
use super::plan::{Check, CountRange, DurRange, Expect, Phase, SoakPlan, Source};
use crate::journal::{latency_s, secs, Event, Identity, Journal, RunClock};
use crate::load::client::{self, HttpClient, RequestSpec};
use crate::load::gate::{self, Gate};
use crate::load::mcp::{McpTarget, Session, ToolCall};
use crate::report::bytes;
use crate::sample::PidSource;
use crate::server::process::{Control, State};
use crate::stats::Summary;

/// A send more than this behind its schedule is late: its latency counts from when it was due.
/// (Timers fire a little after their deadline; that slack is not the server's.)
pub const LATE_AFTER_S: f64 = 0.005;

/// When a worker's next send is due, on the run's clock.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Schedule {
    pub next_s: f64,
}

impl Schedule {
    /// A send that goes at `now_s`: Some(when it was due) if it is late.
    pub fn late(&self, now_s: f64) -> Option<f64> {
        (now_s - self.next_s > LATE_AFTER_S).then_some(self.next_s)
    }
    /// The next send is due `gap_s` after this one was due (not after it finished).
    pub fn advance(&mut self, gap_s: f64) {
        self.next_s += gap_s;
    }
}

// ---- faults --------------------------------------------------------------------------------------

/// A fault witness performs on purpose.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Action {
    /// SIGKILL.
    Kill,
    /// SIGSTOP, then SIGCONT after `hold`.
    Stop { hold: Duration },
    /// SIGTERM; the restart policy (or the outside supervisor) brings it back.
    Restart,
}

impl Action {
    pub fn name(&self) -> &'static str {
        match self {
            Action::Kill => "kill",
            Action::Stop { .. } => "stop",
            Action::Restart => "restart",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Inject {
    pub action: Action,
    pub at: Duration,
    /// As the user wrote it.
    pub text: String,
}

/// `kill@5m`, `stop@2m+10s`, `restart@90s`.
pub fn parse_inject(s: &str) -> Result<Inject, String> {
    let hint = "write it like kill@5m, stop@2m+10s (SIGSTOP, SIGCONT 10 s later) or restart@90s";
    let (what, when) = s
        .split_once('@')
        .ok_or_else(|| format!("{s:?} has no @TIME; {hint}"))?;
    let (at, hold) = match when.split_once('+') {
        Some((a, h)) => (a, Some(h)),
        None => (when, None),
    };
    let at = crate::units::parse_duration(at).map_err(|e| format!("{s:?}: {e}"))?;
    let action = match (what.trim(), hold) {
        ("kill", None) => Action::Kill,
        ("restart", None) => Action::Restart,
        ("stop", Some(h)) => {
            let hold = crate::units::parse_duration(h).map_err(|e| format!("{s:?}: {e}"))?;
            if hold.is_zero() {
                return Err(format!("{s:?}: the stop must last more than zero"));
            }
            Action::Stop { hold }
        }
        ("stop", None) => {
            return Err(format!(
                "{s:?}: say how long the server stays stopped, e.g. stop@2m+10s"
            ))
        }
        ("kill" | "restart", Some(_)) => {
            return Err(format!("{s:?}: only stop takes +DURATION; {hint}"))
        }
        (other, _) => return Err(format!("{s:?}: unknown fault {other:?}; {hint}")),
    };
    Ok(Inject {
        action,
        at,
        text: s.to_string(),
    })
}

/// A fault in effect: from its injection until the server is seen back.
#[derive(Clone, Debug)]
struct Active {
    action: Action,
    label: String,
    t_s: f64,
    /// Who the server was when the fault hit.
    before: Option<Identity>,
    /// When the server could start coming back (the SIGCONT of a stop; the fault itself otherwise).
    resumed_s: Option<f64>,
}

#[derive(Default)]
struct Faults {
    active: Vec<Active>,
    /// A SIGSTOP whose SIGCONT has not been sent yet (the pid it went to).
    stopped: Option<u32>,
}

/// How witness reaches the server to hurt it.
pub struct Injector {
    /// The supervisor's control channel, for a server witness owns (signals go to its group).
    pub control: Option<UnboundedSender<Control>>,
    /// The server's pid now.
    pub pids: PidSource,
}

impl Injector {
    fn signal(&self, sig: Signal, label: &str) -> Option<u32> {
        let pid = (self.pids)()?;
        match &self.control {
            Some(ctl) => {
                let _ = ctl.send(Control::Inject {
                    signal: sig,
                    label: label.to_string(),
                });
            }
            None => {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig);
            }
        }
        Some(pid)
    }
}

// ---- live figures for the progress line ----------------------------------------------------------

#[derive(Default)]
struct Live {
    requests: u64,
    ok: u64,
    rejected: u64,
    failed: u64,
    late: u64,
    latency: Summary,
}

/// What the progress line shows.
#[derive(Clone, Debug)]
pub struct Tally {
    pub requests: u64,
    pub ok: u64,
    pub rejected: u64,
    pub failed: u64,
    pub late: u64,
    /// The ok requests' p95 so far as every view shows it ("3.37ms", or "(n=12)" from too few).
    pub p95: Option<String>,
}

struct Shared {
    plan: Arc<SoakPlan>,
    journal: Journal,
    clock: RunClock,
    http: HttpClient,
    ids: AtomicU64,
    in_flight: AtomicU64,
    live: Mutex<Live>,
    /// MCP kinds over streamable HTTP: one session per worker and kind, opened at its first call
    /// (handshake journalled apart), reused after.
    mcp: tokio::sync::Mutex<HashMap<(u32, usize), SharedSession>>,
    /// MCP kinds over stdio: the server's pipes, one connection shared by every worker (ids keep
    /// their answers apart; a restart's new pipes get a new session).
    stdio: Option<McpTarget>,
    /// The supervised server's state (a process or container witness runs).
    state: Option<tokio::sync::watch::Receiver<State>>,
    /// The server process now running and when witness first saw it running (run clock): no send
    /// counts as due before it. Keyed by identity, so a return seen late (by the watcher or by a
    /// send) is never mistaken for an earlier process's.
    back: Mutex<Option<(Identity, f64)>>,
}

/// One worker's MCP session for one kind.
type SharedSession = Arc<tokio::sync::Mutex<Session>>;

impl Shared {
    /// The server process running now, if witness supervises one and one runs.
    fn running(&self) -> Option<Identity> {
        self.state.as_ref().and_then(|s| s.borrow().identity())
    }

    /// When `id` came back: the first time witness saw it running (recorded now if this is that time).
    fn back_for(&self, id: &Identity) -> f64 {
        let mut b = self.back.lock().unwrap_or_else(|p| p.into_inner());
        match &*b {
            Some((seen, t)) if seen == id => *t,
            _ => {
                let t = self.clock.now_s();
                *b = Some((id.clone(), t));
                t
            }
        }
    }

    async fn send(&self, kind: usize, worker: u32, sched: &Schedule, rng: &mut StdRng) {
        let k = &self.plan.kinds[kind];
        // Never the harness's wait: a send due while the server is down waits for the new
        // process, and counts as due no earlier than when it came back.
        let mut due = *sched;
        let before = self.running();
        if let Some(id) = &before {
            self.back_for(id);
        }
        if let Some(mut state) = self.state.clone() {
            if let Gate::Go { waited: true } = gate::server_up(&mut state, None).await {
                due.next_s = due.next_s.max(self.clock.now_s());
            }
        }
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        let body = k.render(id, &mut |n| rng.gen_range(0..n));
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        let s = match (&k.tool, &k.uri) {
            (None, Some(uri)) => {
                let spec = RequestSpec {
                    method: k.method.clone(),
                    uri: uri.clone(),
                    headers: k.headers.clone(),
                    body,
                };
                client::send(&self.http, &spec, self.plan.limits, &self.plan.rejection).await
            }
            (Some(tool), uri) => {
                self.call_tool(kind, worker, tool, uri.as_ref(), &k.headers, &body)
                    .await
            }
            // The plan refuses an HTTP kind without a URL; were one here, it is witness's fault.
            (None, None) => local_failure("a plain HTTP kind without a URL".into()),
        };
        let start_s = self.clock.at(s.start);
        let duration_s = s.end.duration_since(s.start).as_secs_f64();
        // Late or not is judged when the exchange really began, and never from before the
        // server's last return: a send that itself waited for a restart (a stdio call waits inside
        // the link for a process that died under it, and its new session) is due when it went; one
        // made late by an earlier send's wait is due from the server's return.
        let after = self.running();
        let back_s = match &after {
            // The process changed during this send: it waited for the new one, due when it went.
            _ if after != before => Some(start_s),
            Some(id) => Some(self.back_for(id).min(start_s)),
            None => None,
        };
        if let Some(b) = back_s {
            due.next_s = due.next_s.max(b);
        }
        let scheduled = due.late(start_s);
        {
            let mut l = self.live.lock().unwrap_or_else(|p| p.into_inner());
            l.requests += 1;
            l.late += scheduled.is_some() as u64;
            match &s.outcome {
                crate::journal::Outcome::Ok => {
                    l.ok += 1;
                    l.latency.record(latency_s(start_s, duration_s, scheduled));
                }
                crate::journal::Outcome::Rejected { .. } => l.rejected += 1,
                _ => l.failed += 1,
            }
        }
        self.journal.emit_at(
            self.clock.at(s.end),
            Event::Request {
                id,
                group: k.name.clone(),
                worker,
                start_s,
                duration_s,
                outcome: s.outcome,
                status: s.status,
                scheduled_s: scheduled,
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
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
    }

    /// An MCP kind: the rendered body is the tool's arguments (checked to be an object when the plan
    /// was read; a variant that is not JSON is witness's own failure, never the server's).
    /// `uri`: the streamable HTTP endpoint; None over the server's stdio.
    async fn call_tool(
        &self,
        kind: usize,
        worker: u32,
        tool: &str,
        uri: Option<&hyper::Uri>,
        headers: &hyper::HeaderMap,
        body: &[u8],
    ) -> client::Sent {
        let arguments = if body.is_empty() {
            Ok(serde_json::json!({}))
        } else {
            serde_json::from_slice::<serde_json::Value>(body)
        };
        let arguments = match arguments {
            Ok(a) => a,
            Err(e) => return local_failure(format!("the plan's arguments are not JSON: {e}")),
        };
        let call = ToolCall {
            tool: tool.to_string(),
            arguments,
            limits: self.plan.limits,
            rejection: self.plan.rejection.clone(),
            modern: None,
            headers: headers.clone(),
            http2: false,
        };
        let Some(uri) = uri else {
            // Over stdio every worker's session is the link itself: nothing to open or keep.
            return match &self.stdio {
                Some(link) => {
                    let mut s = link.open(worker, &call, Some(&self.journal)).await;
                    s.call_tool(&call).await
                }
                None => local_failure("an MCP kind over stdio, but no pipes to the server".into()),
            };
        };
        let session = {
            let mut m = self.mcp.lock().await;
            match m.get(&(worker, kind)) {
                Some(s) => s.clone(),
                None => {
                    let s = McpTarget::Http(uri.clone())
                        .open(worker, &call, Some(&self.journal))
                        .await;
                    let s = Arc::new(tokio::sync::Mutex::new(s));
                    m.insert((worker, kind), s.clone());
                    s
                }
            }
        };
        let mut s = session.lock().await;
        s.call_tool(&call).await
    }

    /// Sleeps until the schedule says; false when that is past the end of the workload.
    async fn wait(&self, sched: &Schedule, end_s: f64) -> bool {
        if sched.next_s >= end_s {
            return false;
        }
        let due = self.clock.instant() + Duration::from_secs_f64(sched.next_s.max(0.0));
        tokio::time::sleep_until(due.into()).await;
        true
    }

    fn tally(&self) -> Tally {
        let l = self.live.lock().unwrap_or_else(|p| p.into_inner());
        Tally {
            requests: l.requests,
            ok: l.ok,
            rejected: l.rejected,
            failed: l.failed,
            late: l.late,
            p95: l
                .latency
                .latency()
                .map(|x| x.shown("p95", crate::units::took)),
        }
    }
}

/// A send witness itself could not make: its own failure, never the server's.
fn local_failure(detail: String) -> client::Sent {
    let now = std::time::Instant::now();
    client::Sent {
        start: now,
        end: now,
        outcome: crate::journal::Outcome::Error {
            error: crate::journal::ErrorKind::Local,
            status: None,
        },
        status: None,
        detail: Some(detail),
        body_bytes: None,
        body_cut: false,
        connect_s: None,
        headers_s: None,
        handshake_s: None,
        lag_s: None,
    }
}

fn draw(rng: &mut StdRng, r: &DurRange) -> f64 {
    let (a, b) = (r.min.as_secs_f64(), r.max.as_secs_f64());
    if b > a {
        rng.gen_range(a..=b)
    } else {
        a
    }
}

fn count(rng: &mut StdRng, r: &CountRange) -> u32 {
    rng.gen_range(r.min..=r.max)
}

/// The seeded random source of one worker: the same seed replays the same choices.
pub fn worker_rng(seed: u64, worker: u32) -> StdRng {
    StdRng::seed_from_u64(seed ^ (worker as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// Which group a worker belongs to.
#[derive(Clone, Copy, Debug)]
enum Role {
    Driver(usize),
    Reader(usize),
    Background(usize),
}

async fn worker(sh: Arc<Shared>, role: Role, worker: u32, t0_s: f64, end_s: f64) {
    let plan = sh.plan.clone();
    let mut rng = worker_rng(plan.seed, worker);
    match role {
        Role::Driver(i) => {
            let d = &plan.drivers[i];
            let weights = WeightedIndex::new(d.kinds.iter().map(|k| k.1))
                .expect("the plan guarantees a positive weight");
            // Drivers start spread out, each at its own point of the cycle.
            let mut sched = Schedule {
                next_s: t0_s
                    + draw(
                        &mut rng,
                        &DurRange {
                            min: Duration::ZERO,
                            max: d.steady.1.max,
                        },
                    ),
            };
            let mut phase = rng.gen_range(0..d.cycle.len());
            loop {
                let (n, gap) = match d.cycle[phase] {
                    Phase::Burst => (count(&mut rng, &d.burst.0), d.burst.1),
                    Phase::Steady => (count(&mut rng, &d.steady.0), d.steady.1),
                    Phase::Idle => {
                        sched.advance(draw(&mut rng, &d.idle));
                        (0, d.idle)
                    }
                };
                for _ in 0..n {
                    if !sh.wait(&sched, end_s).await {
                        return;
                    }
                    let kind = d.kinds[weights.sample(&mut rng)].0;
                    sh.send(kind, worker, &sched, &mut rng).await;
                    sched.advance(draw(&mut rng, &gap));
                }
                if sched.next_s >= end_s {
                    return;
                }
                phase = (phase + 1) % d.cycle.len();
            }
        }
        Role::Reader(i) => {
            let r = &plan.readers[i];
            let mut sched = Schedule {
                next_s: t0_s
                    + draw(
                        &mut rng,
                        &DurRange {
                            min: Duration::ZERO,
                            max: r.gap.max,
                        },
                    ),
            };
            let mut next = worker as usize % r.kinds.len();
            while sh.wait(&sched, end_s).await {
                sh.send(r.kinds[next], worker, &sched, &mut rng).await;
                next = (next + 1) % r.kinds.len();
                sched.advance(draw(&mut rng, &r.gap));
            }
        }
        Role::Background(i) => {
            let b = &plan.background[i];
            let every = b.every.as_secs_f64();
            let mut sched = Schedule {
                next_s: t0_s + rng.gen_range(0.0..=every),
            };
            let mut next = 0;
            while sh.wait(&sched, end_s).await {
                sh.send(b.kinds[next], worker, &sched, &mut rng).await;
                next = (next + 1) % b.kinds.len();
                sched.advance(every);
            }
        }
    }
}

// ---- progress ------------------------------------------------------------------------------------

/// Where the soak's progress goes, line by line: a view the command gives it (the engine prints
/// nothing itself).
pub trait Progress {
    /// An interval's progress line, `elapsed_s` into the soak.
    fn interval(&self, elapsed_s: f64, line: &str);
    /// A line that stays (what the last interval's line could not count yet).
    fn said(&self, line: &str);
}

/// The progress line's text.
pub fn progress_line(
    elapsed_s: f64,
    planned_s: f64,
    t: &Tally,
    rss: Option<u64>,
    index: u32,
) -> String {
    format!(
        "{}/{}  interval {index}  requests={} ok={} rejected={} errors={}{}  p95={}  rss={}",
        secs(elapsed_s.round()),
        secs(planned_s),
        t.requests,
        t.ok,
        t.rejected,
        t.failed,
        if t.late > 0 {
            format!(" late={}", t.late)
        } else {
            String::new()
        },
        t.p95.as_deref().unwrap_or("-"),
        rss.map(|b| bytes(b as f64)).unwrap_or_else(|| "-".into()),
    )
}

// ---- the run -------------------------------------------------------------------------------------

/// How a soak ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Ending {
    /// Ran its whole duration.
    Done,
    /// An invariant failed at this interval.
    Violated { interval: u32, reason: String },
    /// A signal stopped it.
    Interrupted { signal: String },
}

/// What the engine needs from its caller.
pub struct Soak<'a> {
    pub plan: Arc<SoakPlan>,
    pub journal: Journal,
    /// The health question: the plan's URL, or MCP ping.
    pub health: &'a SoakHealth,
    /// A stdio plan's pipes to the server (its MCP kinds' one connection).
    pub stdio: Option<McpTarget>,
    pub identity: &'a (dyn Fn() -> Option<Identity> + Sync),
    /// The supervised server's state, when witness supervises it: sends wait out its restarts.
    pub state: Option<tokio::sync::watch::Receiver<State>>,
    pub injector: Injector,
    pub injects: Vec<Inject>,
    /// Whether witness reads the server's output (fatal log lines can be seen).
    pub owned: bool,
    pub progress: &'a dyn Progress,
}

/// One check's result at one interval.
struct Verdict {
    name: String,
    ok: bool,
    detail: String,
    /// Whether an injected fault in effect explains a failure of it.
    excusable: bool,
}

impl Verdict {
    fn new(name: &str, ok: bool, detail: String, excusable: bool) -> Self {
        Self {
            name: name.into(),
            ok,
            detail,
            excusable,
        }
    }
}

impl Soak<'_> {
    /// Runs the workload for the plan's duration, or until a violation or `interrupt` resolves.
    pub async fn run(self, interrupt: impl Future<Output = String>) -> Ending {
        let plan = self.plan.clone();
        let journal = self.journal.clone();
        let clock = journal.clock();
        let interval_s = plan.interval.as_secs_f64();
        let planned_s = plan.duration.as_secs_f64();
        let shared = Arc::new(Shared {
            plan: plan.clone(),
            journal: journal.clone(),
            clock,
            http: client::client(plan.limits, plan.workers() as usize),
            ids: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            live: Mutex::new(Live::default()),
            mcp: Default::default(),
            stdio: self.stdio.clone(),
            state: self.state.clone(),
            // The first process is the soak's own start: it was there before any send was due.
            back: Mutex::new(
                self.state
                    .as_ref()
                    .and_then(|s| s.borrow().identity())
                    .map(|id| (id, 0.0)),
            ),
        });
        // Notes when the server comes back from each restart: no send counts as due before it.
        let watch_back = self.state.clone().map(|mut state| {
            let sh = shared.clone();
            tokio::spawn(async move {
                while state.changed().await.is_ok() {
                    let running = state.borrow_and_update().identity();
                    if let Some(id) = running {
                        sh.back_for(&id);
                    }
                }
            })
        });
        let reader = Reader::new(plan.check_timeout);
        let faults = Arc::new(Mutex::new(Faults::default()));
        let mut baseline = (self.identity)();

        let t0_s = journal.emit(Event::Interval {
            index: 0,
            requests: 0,
        });
        let end_s = t0_s + planned_s;
        let mut workers = tokio::task::JoinSet::new();
        let roles = plan
            .drivers
            .iter()
            .enumerate()
            .flat_map(|(i, d)| (0..d.count).map(move |_| Role::Driver(i)))
            .chain(
                plan.readers
                    .iter()
                    .enumerate()
                    .flat_map(|(i, r)| (0..r.count).map(move |_| Role::Reader(i))),
            )
            .chain(
                plan.background
                    .iter()
                    .enumerate()
                    .flat_map(|(i, b)| (0..b.count).map(move |_| Role::Background(i))),
            );
        for (w, role) in roles.enumerate() {
            workers.spawn(worker(shared.clone(), role, w as u32, t0_s, end_s));
        }
        let injector = Arc::new(self.injector);
        let mut injections = tokio::task::JoinSet::new();
        for inj in self.injects.iter().cloned() {
            injections.spawn(inject(
                inj,
                injector.clone(),
                faults.clone(),
                journal.clone(),
                t0_s,
            ));
        }

        let fatal: BTreeSet<String> = plan
            .invariants
            .fatal_labels
            .iter()
            .cloned()
            .chain((!plan.invariants.fatal_log.is_empty()).then(|| "fatal".to_string()))
            .collect();
        let mut logs_seen = 0usize;
        let mut interrupt = std::pin::pin!(interrupt);
        let mut index = 0u32;
        // Requests the last progress line counted: the ones still in flight then finish after it.
        let mut shown = 0u64;
        let ending = loop {
            index += 1;
            let close_s = (t0_s + index as f64 * interval_s).min(end_s);
            let due = clock.instant() + Duration::from_secs_f64(close_s);
            let interrupted = tokio::select! {
                _ = tokio::time::sleep_until(due.into()) => None,
                sig = &mut interrupt => Some(sig),
            };
            let t = journal.emit(Event::Interval {
                index,
                requests: shared.tally().requests,
            });
            if let Some(signal) = interrupted {
                break Ending::Interrupted { signal };
            }
            let now_id = (self.identity)();
            let (health, health_why) = self.health.probe_journalled("invariant").await;
            let pid = now_id.as_ref().map(|i| i.pid);
            // Read inline, as the process sampler does: a few reads of /proc, and no blocking
            // thread (each new one can claim a fresh malloc arena: witness's own memory would creep).
            let rss = pid
                .and_then(crate::sample::proc::read_tree)
                .map(|r| r.rss_bytes);
            let mut results = Vec::new();
            if plan.invariants.same_identity {
                let same = now_id.is_some() && now_id == baseline;
                let what = match (&baseline, &now_id) {
                    (Some(b), Some(n)) if b == n => format!("{n}"),
                    (Some(b), Some(n)) => format!("was {b}, now {n}"),
                    (Some(b), None) => format!("{b} is not running"),
                    (None, Some(n)) => format!("now {n}"),
                    (None, None) => "no server process".into(),
                };
                results.push(Verdict::new("same_identity", same, what, true));
            }
            if plan.invariants.health {
                results.push(Verdict::new(
                    "health",
                    health.healthy(),
                    self.health.words(&health, health_why.as_deref()),
                    true,
                ));
            }
            if self.owned && !fatal.is_empty() {
                let life = journal.lifecycle();
                let lines: Vec<String> = life[logs_seen.min(life.len())..]
                    .iter()
                    .filter_map(|r| match &r.event {
                        Event::Log { label, line, .. } if fatal.contains(label) => {
                            Some(format!("[{label}] {line}"))
                        }
                        _ => None,
                    })
                    .collect();
                logs_seen = life.len();
                let detail = match lines.first() {
                    None => "no fatal log line".into(),
                    Some(l) => format!("{} fatal log line(s), first: {l}", lines.len()),
                };
                // A fault witness injects never makes a server print a panic: never excused.
                results.push(Verdict::new("fatal_log", lines.is_empty(), detail, false));
            }
            if let Some(limit) = plan.invariants.rss_limit {
                results.push(match rss {
                    Some(r) => Verdict::new(
                        "rss_limit",
                        r <= limit,
                        format!(
                            "{} {} the limit {}",
                            bytes(r as f64),
                            if r <= limit { "within" } else { "over" },
                            bytes(limit as f64)
                        ),
                        false,
                    ),
                    None => {
                        Verdict::new("rss_limit", true, "no server process to read".into(), false)
                    }
                });
            }
            let checks =
                futures_util::future::join_all(plan.checks.iter().map(|c| check(&reader, c))).await;
            results.extend(checks);
            let gauges = futures_util::future::join_all(
                plan.gauges.iter().map(|g| reader.number(&g.source)),
            )
            .await;
            for (g, v) in plan.gauges.iter().zip(gauges) {
                let (value, error) = match v {
                    Ok(x) => (Some(x), None),
                    Err(e) => (None, Some(e)),
                };
                journal.emit(Event::Gauge {
                    name: g.name.clone(),
                    value,
                    error,
                });
            }

            // Faults decide last, so one injected while the checks ran excuses what they saw. A fault
            // in effect excuses the server being down, restarted or failing its checks, until it is
            // seen back healthy (then its new identity is the baseline) or fault_grace runs out.
            let excuse = {
                let mut f = faults.lock().unwrap_or_else(|p| p.into_inner());
                let mut excuse = None;
                let mut still = Vec::new();
                for a in f.active.drain(..) {
                    let back = match a.action {
                        Action::Kill | Action::Restart => now_id.is_some() && now_id != a.before,
                        // Readings that began before the SIGCONT (a health probe the stopped
                        // server answered once resumed) saw the stop, not the recovery: the window
                        // would close where it opened.
                        Action::Stop { .. } => {
                            a.resumed_s.is_some_and(|r| r <= t) && now_id.is_some()
                        }
                    } && health.healthy();
                    if back {
                        // Seen back in the readings taken at this interval's close.
                        journal.emit_at(
                            t,
                            Event::Fault {
                                action: "recovered".into(),
                                pid: pid.unwrap_or(0),
                                detail: format!(
                                    "the server is back and healthy as {} {} after the injected {}",
                                    now_id.as_ref().map(|i| i.to_string()).unwrap_or_default(),
                                    secs(t - a.t_s),
                                    a.label
                                ),
                            },
                        );
                        baseline = now_id.clone();
                        // This interval's readings still saw the fault's doing.
                        excuse.get_or_insert_with(|| {
                            format!(
                                "tolerated: injected {} at t={:.3}s, now recovered",
                                a.label, a.t_s
                            )
                        });
                        continue;
                    }
                    let waited = a.resumed_s.map(|r| t - r).unwrap_or(0.0);
                    if waited > plan.fault_grace.as_secs_f64() {
                        results.push(Verdict::new(
                            "recovery",
                            false,
                            format!(
                                "the server did not come back healthy within fault_grace {} of the injected {} (health {}, {})",
                                secs(plan.fault_grace.as_secs_f64()),
                                a.label,
                                health.text(),
                                now_id
                                    .as_ref()
                                    .map(|i| i.to_string())
                                    .unwrap_or_else(|| "no process running".into())
                            ),
                            false,
                        ));
                    }
                    excuse.get_or_insert_with(|| {
                        format!("tolerated: injected {} at t={:.3}s", a.label, a.t_s)
                    });
                    still.push(a);
                }
                f.active = still;
                excuse
            };
            for r in results.iter_mut().filter(|r| !r.ok) {
                match (&excuse, r.excusable) {
                    (Some(x), true) => {
                        r.ok = true;
                        r.detail = format!("{} ({x})", r.detail);
                    }
                    _ if r.name == "same_identity" => {
                        r.detail.push_str(", and no fault was injected")
                    }
                    // A ping's words already say it failed; a status is not one.
                    _ if r.name == "health" && !self.health.is_ping() => {
                        r.detail.push_str(", not 200")
                    }
                    _ => {}
                }
            }
            let mut violated = None;
            for r in results {
                if !r.ok && violated.is_none() {
                    violated = Some(format!("{}: {}", r.name, r.detail));
                }
                journal.emit(Event::Invariant {
                    interval: index,
                    name: r.name,
                    ok: r.ok,
                    detail: r.detail,
                });
            }
            let tally = shared.tally();
            shown = tally.requests;
            self.progress.interval(
                t - t0_s,
                &progress_line(t - t0_s, planned_s, &tally, rss, index),
            );
            if let Some(reason) = violated {
                break Ending::Violated {
                    interval: index,
                    reason,
                };
            }
            if close_s >= end_s {
                break Ending::Done;
            }
        };

        injections.abort_all();
        while injections.join_next().await.is_some() {}
        if let Some(w) = watch_back {
            w.abort();
        }
        // A server left stopped would hang the stop and every later reading.
        let stopped = faults
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .stopped
            .take();
        if let Some(pid) = stopped {
            injector.signal(Signal::SIGCONT, "SIGCONT at the end of the soak");
            journal.emit(Event::Fault {
                action: "cont".into(),
                pid,
                detail: "SIGCONT sent as the soak ended, so the server can be stopped".into(),
            });
        }

        if ending == Ending::Done {
            // In-flight requests are measurements: let them finish, within their own limit.
            let wait = plan.limits.whole + Duration::from_secs(1);
            let _ =
                tokio::time::timeout(wait, async { while workers.join_next().await.is_some() {} })
                    .await;
        }
        let total = shared.tally().requests;
        if total > shown && index > 0 {
            self.progress.said(&format!(
                "soak: {} more request(s), in flight at the last interval, finished after it: {total} in all",
                total - shown
            ));
        }
        let abandoned = shared.in_flight.load(Ordering::Relaxed);
        workers.abort_all();
        while workers.join_next().await.is_some() {}
        if abandoned > 0 {
            journal.emit(Event::Note {
                level: "warn".into(),
                text: format!(
                    "{abandoned} request(s) still in flight when the soak stopped were abandoned, not counted"
                ),
            });
        }
        if ending == Ending::Done {
            drain(&plan, &journal, &reader, index).await;
        }
        ending
    }
}

/// Drain checks: every drain gauge must reach zero within the grace once the workload stops.
async fn drain(plan: &SoakPlan, journal: &Journal, reader: &Reader, interval: u32) {
    {
        let gauges: Vec<_> = plan.gauges.iter().filter(|g| g.drain).collect();
        if gauges.is_empty() {
            return;
        }
        let start = tokio::time::Instant::now();
        let deadline = start + plan.drain_grace;
        let mut pending: Vec<_> = gauges
            .into_iter()
            .map(|g| (g, None::<Result<f64, String>>))
            .collect();
        loop {
            for (g, last) in pending.iter_mut() {
                if matches!(last, Some(Ok(v)) if *v == 0.0) {
                    continue;
                }
                let v = reader.number(&g.source).await;
                if matches!(v, Ok(x) if x == 0.0) {
                    journal.emit(Event::Gauge {
                        name: g.name.clone(),
                        value: Some(0.0),
                        error: None,
                    });
                    journal.emit(Event::Invariant {
                        interval,
                        name: format!("drain:{}", g.name),
                        ok: true,
                        detail: format!(
                            "reached 0 {} after the workload stopped",
                            secs(start.elapsed().as_secs_f64())
                        ),
                    });
                }
                *last = Some(v);
            }
            let open = pending
                .iter()
                .any(|(_, l)| !matches!(l, Some(Ok(v)) if *v == 0.0));
            if !open {
                return;
            }
            if tokio::time::Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        for (g, last) in pending {
            let detail = match last {
                Some(Ok(0.0)) => continue,
                Some(Ok(v)) => {
                    journal.emit(Event::Gauge {
                        name: g.name.clone(),
                        value: Some(v),
                        error: None,
                    });
                    format!(
                        "still {v} after the drain grace {}",
                        secs(plan.drain_grace.as_secs_f64())
                    )
                }
                Some(Err(e)) => format!("could not be read: {e}"),
                None => "never read".into(),
            };
            journal.emit(Event::Invariant {
                interval,
                name: format!("drain:{}", g.name),
                ok: false,
                detail,
            });
        }
    }
}

/// One of the plan's own invariant checks.
async fn check(reader: &Reader, c: &Check) -> Verdict {
    let verdict = |ok: bool, detail: String| Verdict {
        name: c.name.clone(),
        ok,
        detail,
        excusable: true,
    };
    match &c.source {
        Source::Command(argv) => match reader.run(argv).await {
            Ok(r) if r.code == Some(0) => verdict(true, "exit 0".into()),
            Ok(r) => verdict(
                false,
                format!(
                    "{} ended with {}{}",
                    argv[0],
                    r.status_text(),
                    first_line(&r.stderr)
                        .map(|l| format!(": {l}"))
                        .unwrap_or_default()
                ),
            ),
            Err(e) => verdict(false, e),
        },
        Source::Http {
            uri,
            headers,
            pointer,
        } => {
            let f = match reader.get(uri, headers).await {
                Ok(f) => f,
                Err(e) => return verdict(false, format!("GET {}: {e}", uri.path())),
            };
            if f.status != c.status {
                return verdict(
                    false,
                    format!(
                        "GET {} answered {}, expected {}",
                        uri.path(),
                        f.status,
                        c.status
                    ),
                );
            }
            let (Some(ptr), Some(expect)) = (pointer, &c.expect) else {
                return verdict(true, format!("GET {} answered {}", uri.path(), f.status));
            };
            let v = match value_at(&f.body, ptr) {
                Ok(v) => v,
                Err(e) => return verdict(false, e),
            };
            let (ok, want) = expectation_met(&v, expect);
            verdict(
                ok,
                format!(
                    "{ptr} is {v}{}",
                    if ok {
                        String::new()
                    } else {
                        format!(", expected {want}")
                    }
                ),
            )
        }
    }
}

/// Whether a value meets an expectation, and the expectation in words.
pub fn expectation_met(v: &serde_json::Value, e: &Expect) -> (bool, String) {
    match e {
        Expect::Equals(want) => {
            let ok = match (v.as_f64(), want.as_f64()) {
                (Some(a), Some(b)) => a == b,
                _ => v == want,
            };
            (ok, format!("{want}"))
        }
        Expect::Range { min, max } => {
            let words = match (min, max) {
                (Some(a), Some(b)) => format!("between {a} and {b}"),
                (Some(a), None) => format!("at least {a}"),
                (None, Some(b)) => format!("at most {b}"),
                (None, None) => "anything".into(),
            };
            let ok = v
                .as_f64()
                .is_some_and(|x| min.is_none_or(|m| x >= m) && max.is_none_or(|m| x <= m));
            (ok, words)
        }
    }
}

/// Waits for the fault's time, performs it, and journals it.
async fn inject(
    inj: Inject,
    injector: Arc<Injector>,
    faults: Arc<Mutex<Faults>>,
    journal: Journal,
    t0_s: f64,
) {
    let clock = journal.clock();
    let due = clock.instant() + Duration::from_secs_f64(t0_s) + inj.at;
    tokio::time::sleep_until(due.into()).await;
    let label = format!("{} (--inject {})", inj.action.name(), inj.text);
    let before = (injector.pids)().and_then(crate::server::identity_of);
    let sig = match inj.action {
        Action::Kill => Signal::SIGKILL,
        Action::Stop { .. } => Signal::SIGSTOP,
        Action::Restart => Signal::SIGTERM,
    };
    // In effect before the signal goes, so no check can see its effect unexcused.
    let t = journal.now_s();
    {
        let mut f = faults.lock().unwrap_or_else(|p| p.into_inner());
        f.active.push(Active {
            action: inj.action,
            label: inj.action.name().to_string(),
            t_s: t,
            before,
            resumed_s: (!matches!(inj.action, Action::Stop { .. })).then_some(t),
        });
    }
    let Some(pid) = injector.signal(sig, &label) else {
        faults
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .active
            .retain(|a| a.t_s != t);
        journal.emit(Event::Note {
            level: "warn".into(),
            text: format!(
                "--inject {}: no server process was running at that moment; nothing was injected",
                inj.text
            ),
        });
        return;
    };
    if matches!(inj.action, Action::Stop { .. }) {
        faults.lock().unwrap_or_else(|p| p.into_inner()).stopped = Some(pid);
    }
    journal.emit_at(
        t,
        Event::Fault {
            action: inj.action.name().into(),
            pid,
            detail: match inj.action {
                Action::Kill => format!("SIGKILL to pid {pid} on purpose (--inject {})", inj.text),
                Action::Restart => format!(
                    "SIGTERM to pid {pid} on purpose, for the restart policy to bring it back (--inject {})",
                    inj.text
                ),
                Action::Stop { hold } => format!(
                    "SIGSTOP to pid {pid} on purpose; SIGCONT in {} (--inject {})",
                    secs(hold.as_secs_f64()),
                    inj.text
                ),
            },
        },
    );
    if let Action::Stop { hold } = inj.action {
        tokio::time::sleep(hold).await;
        let mut f = faults.lock().unwrap_or_else(|p| p.into_inner());
        if f.stopped.take().is_none() {
            return;
        }
        injector.signal(Signal::SIGCONT, &format!("SIGCONT after {label}"));
        let t = journal.emit(Event::Fault {
            action: "cont".into(),
            pid,
            detail: format!(
                "SIGCONT to pid {pid}, {} after the injected stop",
                secs(hold.as_secs_f64())
            ),
        });
        for a in f.active.iter_mut() {
            if matches!(a.action, Action::Stop { .. }) && a.resumed_s.is_none() {
                a.resumed_s = Some(t);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_late_send_keeps_its_due_time_and_the_schedule_does_not_drift() {
        let mut s = Schedule { next_s: 10.0 };
        // On time (timer slack under the threshold): not late.
        assert_eq!(s.late(10.003), None);
        s.advance(0.5);
        // The previous request took 2 s: this send, due at 10.5, goes at 12.0.
        assert_eq!(s.late(12.0), Some(10.5));
        // Its latency counts from 10.5: 1.5 s behind plus its own 0.1 s.
        assert!((latency_s(12.0, 0.1, Some(10.5)) - 1.6).abs() < 1e-9);
        // The next is due a gap after the *due* time, so the worker catches up rather than drifting.
        s.advance(0.5);
        assert_eq!(s.next_s, 11.0);
        assert_eq!(s.late(12.2), Some(11.0));
        assert!((latency_s(12.0, 0.1, None) - 0.1).abs() < 1e-9);
    }

    #[test]
    fn injections_parse_with_clear_errors() {
        let k = parse_inject("kill@5m").unwrap();
        assert_eq!((k.action, k.at), (Action::Kill, Duration::from_secs(300)));
        let s = parse_inject("stop@2m+10s").unwrap();
        assert_eq!(
            s.action,
            Action::Stop {
                hold: Duration::from_secs(10)
            }
        );
        assert_eq!(s.at, Duration::from_secs(120));
        assert_eq!(
            parse_inject("restart@1.5s").unwrap().action,
            Action::Restart
        );
        assert!(parse_inject("stop@2m").unwrap_err().contains("stop@2m+10s"));
        assert!(parse_inject("kill").unwrap_err().contains("no @TIME"));
        assert!(parse_inject("kill@5m+1s")
            .unwrap_err()
            .contains("only stop"));
        assert!(parse_inject("nuke@5s")
            .unwrap_err()
            .contains("unknown fault"));
    }

    #[test]
    fn the_same_seed_draws_the_same_choices() {
        let a: Vec<u32> = (0..20)
            .map({
                let mut r = worker_rng(42, 3);
                move |_| r.gen_range(0..1000)
            })
            .collect();
        let b: Vec<u32> = (0..20)
            .map({
                let mut r = worker_rng(42, 3);
                move |_| r.gen_range(0..1000)
            })
            .collect();
        let c: Vec<u32> = (0..20)
            .map({
                let mut r = worker_rng(42, 4);
                move |_| r.gen_range(0..1000)
            })
            .collect();
        assert_eq!(a, b);
        assert_ne!(a, c, "each worker has its own stream");
    }

    #[test]
    fn expectations_compare_numbers_as_numbers() {
        use serde_json::json;
        assert!(expectation_met(&json!(0), &Expect::Equals(json!(0.0))).0);
        assert!(!expectation_met(&json!("x"), &Expect::Equals(json!("y"))).0);
        let r = Expect::Range {
            min: None,
            max: Some(5.0),
        };
        assert_eq!(expectation_met(&json!(7), &r), (false, "at most 5".into()));
        assert!(expectation_met(&json!(5), &r).0);
    }
}
