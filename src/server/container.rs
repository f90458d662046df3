//! The container target: the server under test runs in a Docker container, started by witness
//! (`--image`, owned: stopped and removed at the end unless `--keep`) or already running (`--container`,
//! attached: observed only, never signalled, stopped or removed).
//!
//! Everything comes from the engine, through bollard: lifecycle from its event stream (`start`, `die`
//! with the exit code, `oom`, `kill` with the signal, health status) plus `inspect` (`OOMKilled`,
//! `RestartCount`, `StartedAt`, the host pid), and output from its log stream, fed through the same
//! line reader and watch patterns as a child's pipes ([`LineSink`]).
//!
//! A container's identity is its id plus `StartedAt`: a restart by Docker's own policy changes it the
//! way a supervisor's restart changes a pid's start time. The engine emits no `restart` event for a
//! policy restart, so restarts are counted from die/start pairs, each journalled with the engine's
//! `RestartCount`. Times come from the engine (event times, `StartedAt`, log timestamps) and are placed
//! on the run's clock, so a die lines up with the requests that failed around it.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, EventMessage, HostConfig, PortBinding,
    RestartPolicy, RestartPolicyNameEnum,
};
use bollard::query_parameters::{
    EventsOptions, KillContainerOptions, LogsOptions, RemoveContainerOptions,
};
use bollard::Docker;
use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use nix::sys::signal::Signal;
use tokio::sync::{mpsc, watch};

use super::exit::{parse_signal, signal_name, EngineExit};
use super::logs::{LineSink, PassThrough, Patterns};
use super::process::{Control, State};
use crate::error::usage;
use crate::journal::{Event, Identity, Journal, Stream};

/// How long an engine may take to answer the first call before witness says it is not there.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// After a `die`, how long the log stream may take to deliver the last lines before the exit is
/// journalled without them.
const LOG_SETTLE: Duration = Duration::from_secs(2);
/// After a container's last die, how long witness waits for a start by hand (`docker restart`)
/// before it calls the container gone.
const LINGER: Duration = Duration::from_millis(500);
/// The same wait for a container witness only watches: someone restarting it by hand (`docker
/// restart`) is its normal life, and a busy engine can take seconds between the die and the start.
const LINGER_ATTACHED: Duration = Duration::from_secs(5);
/// The label every container witness creates carries, for cleanup by label.
pub const OWNER_LABEL: &str = "witness.owner";

/// Docker's restart policy for a container witness creates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DockerRestart {
    #[default]
    No,
    /// Restart on a non-zero exit, at most N times when given.
    OnFailure(Option<u32>),
    Always,
    UnlessStopped,
}

impl DockerRestart {
    /// `no`, `on-failure`, `on-failure:N`, `always`, `unless-stopped`, as `docker run --restart`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let bad = || {
            format!("{s:?} is not a Docker restart policy; use no, on-failure, on-failure:N, always or unless-stopped")
        };
        Ok(match s.trim() {
            "no" => Self::No,
            "always" => Self::Always,
            "unless-stopped" => Self::UnlessStopped,
            "on-failure" => Self::OnFailure(None),
            t => match t.strip_prefix("on-failure:") {
                Some(n) => Self::OnFailure(Some(n.parse().map_err(|_| bad())?)),
                None => return Err(bad()),
            },
        })
    }

    fn policy(self) -> RestartPolicy {
        let (name, max) = match self {
            Self::No => (RestartPolicyNameEnum::NO, None),
            Self::OnFailure(n) => (RestartPolicyNameEnum::ON_FAILURE, n.map(i64::from)),
            Self::Always => (RestartPolicyNameEnum::ALWAYS, None),
            Self::UnlessStopped => (RestartPolicyNameEnum::UNLESS_STOPPED, None),
        };
        RestartPolicy {
            name: Some(name),
            maximum_retry_count: max,
        }
    }
}

/// One published port: `[IP:]HOST:CONTAINER[/PROTO]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Publish {
    pub host_ip: String,
    pub host_port: u16,
    pub container_port: u16,
    pub proto: String,
}

impl Publish {
    /// Without an IP the port is bound on 127.0.0.1: load goes over loopback, and a server under test
    /// has no business listening on every interface of the host.
    pub fn parse(s: &str) -> Result<Self, String> {
        let bad = || {
            format!("{s:?} is not a port to publish; write it HOST:CONTAINER (8080:80) or IP:HOST:CONTAINER")
        };
        let (spec, proto) = match s.rsplit_once('/') {
            Some((a, p)) if ["tcp", "udp", "sctp"].contains(&p) => (a, p),
            Some(_) => return Err(bad()),
            None => (s, "tcp"),
        };
        let (ip, ports) = match spec.rsplit_once(':').and_then(|(a, _)| a.rsplit_once(':')) {
            Some((ip, _)) => (ip.trim_matches(['[', ']']), &spec[ip.len() + 1..]),
            None => ("127.0.0.1", spec),
        };
        let (h, c) = ports.split_once(':').ok_or_else(bad)?;
        Ok(Self {
            host_ip: ip.to_string(),
            host_port: h.parse().map_err(|_| bad())?,
            container_port: c.parse().map_err(|_| bad())?,
            proto: proto.to_string(),
        })
    }
}

/// A container witness creates and owns.
#[derive(Clone, Debug, Default)]
pub struct RunSpec {
    pub image: String,
    /// Replaces the image's CMD (its ENTRYPOINT stays), as `docker run IMAGE ARGS` does.
    pub command: Vec<String>,
    pub memory: Option<i64>,
    pub cpus: Option<f64>,
    pub env: Vec<String>,
    pub publish: Vec<Publish>,
    pub restart: DockerRestart,
    pub keep: bool,
    pub labels: Vec<(String, String)>,
}

/// Start a new container, or watch one that runs already.
#[derive(Clone, Debug)]
pub enum Spec {
    Run(RunSpec),
    Attach(String),
}

/// Everything the container target needs, validated.
#[derive(Clone)]
pub struct ContainerConfig {
    /// `--docker-host`; else `DOCKER_HOST`; else the default socket.
    pub docker_host: Option<String>,
    pub spec: Spec,
    pub patterns: Arc<Patterns>,
    pub pass_through: bool,
    /// After asking the container to stop, SIGKILL it this long later.
    pub grace: Duration,
}

/// Which engine witness talks to and why: (address, where it came from).
pub fn engine_address(flag: Option<&str>) -> (String, String) {
    let (addr, from) = match (flag, std::env::var("DOCKER_HOST").ok()) {
        (Some(f), _) => (f.to_string(), "--docker-host".to_string()),
        (None, Some(h)) if !h.is_empty() => (h, "DOCKER_HOST".to_string()),
        _ => (
            "unix:///var/run/docker.sock".to_string(),
            "the default; DOCKER_HOST is not set".to_string(),
        ),
    };
    let addr = if addr.starts_with('/') {
        format!("unix://{addr}")
    } else {
        addr
    };
    (addr, from)
}

/// Connects to the engine and agrees on an API version; if no engine answers, the error names the
/// address tried and how to point witness elsewhere (a usage error: the fix is configuration).
pub async fn connect(flag: Option<&str>) -> anyhow::Result<Docker> {
    let (addr, from) = engine_address(flag);
    let how = "start the engine, or point witness at one with DOCKER_HOST=unix:///path/to/docker.sock (or tcp://HOST:2375) or --docker-host URL";
    let docker = Docker::connect_with_host(&addr).map_err(|e| match e {
        bollard::errors::Error::SocketNotFoundError(path) => usage(format!(
            "no Docker engine answered at {addr} ({from}): there is no socket at {path}; {how}"
        )),
        e => usage(format!(
            "the Docker engine address {addr:?} ({from}) is not one witness can use: {}; {how}",
            chain(&e)
        )),
    })?;
    match tokio::time::timeout(CONNECT_TIMEOUT, docker.negotiate_version()).await {
        Ok(Ok(d)) => Ok(d),
        Ok(Err(e)) => Err(usage(format!(
            "no Docker engine answered at {addr} ({from}): {}; {how}",
            chain(&e)
        ))),
        Err(_) => Err(usage(format!(
            "no Docker engine answered at {addr} ({from}) within {}s; {how}",
            CONNECT_TIMEOUT.as_secs()
        ))),
    }
}

/// An error with its causes, on one line (bollard's own message is often only the outer layer).
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

fn not_found(e: &bollard::errors::Error) -> bool {
    matches!(
        e,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

/// The server in a container, as its owner sees it.
pub struct Container {
    docker: Docker,
    pub id: String,
    pub name: String,
    owned: bool,
    keep: bool,
    ctl: mpsc::UnboundedSender<Control>,
    state: watch::Receiver<State>,
    task: tokio::task::JoinHandle<anyhow::Result<i32>>,
    journal: Journal,
}

impl Container {
    /// Creates and starts the container (or finds the running one), and starts watching it. Returns
    /// once the first incarnation is journalled.
    pub async fn start(cfg: ContainerConfig, journal: Journal) -> anyhow::Result<Self> {
        let docker = connect(cfg.docker_host.as_deref()).await?;
        let (id, owned, keep) = match &cfg.spec {
            Spec::Run(run) => (create(&docker, run, &journal).await?, true, run.keep),
            Spec::Attach(name) => (find_running(&docker, name).await?, false, true),
        };
        let started = match begin(&docker, &id, owned).await {
            Ok(s) => s,
            Err(e) => {
                if owned {
                    let _ = remove(&docker, &id).await;
                }
                return Err(e);
            }
        };
        let insp = started.inspect;
        let name = insp
            .name
            .clone()
            .unwrap_or_default()
            .trim_start_matches('/')
            .to_string();
        if !owned {
            journal.emit(Event::Note {
                level: "info".into(),
                text: format!(
                    "attached to container {name} ({}); witness observes it only and leaves it running",
                    short(&id)
                ),
            });
        }
        let (ctl, rx) = mpsc::unbounded_channel();
        let (state_tx, state) = watch::channel(State::Starting);
        let mut w = Watcher {
            docker: docker.clone(),
            id: id.clone(),
            owned,
            cfg,
            journal: journal.clone(),
            wall0: SystemTime::now(),
            t0: journal.now_s(),
            state: state_tx,
            life: None,
            attempt: 0,
            last_exit: None,
            last_log: None,
            kill_signal: None,
            oom_seen: false,
            ours: VecDeque::new(),
            stopping: None,
        };
        w.on_started(&insp);
        let task = tokio::spawn(w.run(started.events, rx));
        Ok(Self {
            docker,
            id,
            name,
            owned,
            keep,
            ctl,
            state,
            task,
            journal,
        })
    }

    pub fn docker(&self) -> &Docker {
        &self.docker
    }

    pub fn owned(&self) -> bool {
        self.owned
    }

    pub fn control(&self) -> mpsc::UnboundedSender<Control> {
        self.ctl.clone()
    }

    pub fn state(&self) -> watch::Receiver<State> {
        self.state.clone()
    }

    pub fn identity(&self) -> Option<Identity> {
        self.state.borrow().identity()
    }

    /// Waits until the container is gone for good (or witness let go of it); removes an owned one
    /// unless `--keep`. Returns its last status (0 when witness detached from a running one).
    pub async fn wait(self) -> anyhow::Result<i32> {
        let status = self.task.await?;
        if self.owned && !self.keep {
            if let Err(e) = remove(&self.docker, &self.id).await {
                self.journal.emit(Event::Note {
                    level: "warn".into(),
                    text: format!(
                        "could not remove container {} at the end: {}",
                        short(&self.id),
                        chain(&e)
                    ),
                });
            }
        } else if self.owned {
            self.journal.emit(Event::Note {
                level: "info".into(),
                text: format!("kept container {} (--keep)", self.name),
            });
        }
        status
    }

    /// Stops an owned container (TERM, grace, KILL) or lets go of an attached one, and waits.
    pub async fn stop(self, reason: &str) -> anyhow::Result<i32> {
        let _ = self.ctl.send(Control::Stop {
            reason: reason.into(),
        });
        self.wait().await
    }
}

async fn remove(docker: &Docker, id: &str) -> Result<(), bollard::errors::Error> {
    let opts = RemoveContainerOptions {
        v: true,
        force: true,
        link: false,
    };
    match docker.remove_container(id, Some(opts)).await {
        Err(e) if !not_found(&e) => Err(e),
        _ => Ok(()),
    }
}

fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}

/// Creates the container; the image must be on the engine already (witness never pulls: a pull in
/// the middle of a measurement is a measurement of the registry).
async fn create(docker: &Docker, run: &RunSpec, journal: &Journal) -> anyhow::Result<String> {
    if let Err(e) = docker.inspect_image(&run.image).await {
        return Err(if not_found(&e) {
            usage(format!(
                "--image {}: no such image on the Docker engine, and witness never pulls; build, load or import it first (docker build -t {0} . / docker load / docker import)",
                run.image
            ))
        } else {
            anyhow::anyhow!("inspecting image {}: {}", run.image, chain(&e))
        });
    }
    let mut env = Vec::new();
    for e in &run.env {
        if e.contains('=') {
            env.push(e.clone());
        } else if let Ok(v) = std::env::var(e) {
            // `--env K` passes witness's own value, so a secret never appears in an argv.
            env.push(format!("{e}={v}"));
        }
    }
    let mut labels: HashMap<String, String> = run.labels.iter().cloned().collect();
    labels.insert(OWNER_LABEL.into(), "witness".into());
    labels.insert("witness.pid".into(), std::process::id().to_string());
    let mut bindings: HashMap<String, Option<Vec<PortBinding>>> = HashMap::new();
    for p in &run.publish {
        bindings
            .entry(format!("{}/{}", p.container_port, p.proto))
            .or_default()
            .get_or_insert_with(Vec::new)
            .push(PortBinding {
                host_ip: Some(p.host_ip.clone()),
                host_port: Some(p.host_port.to_string()),
            });
    }
    let body = ContainerCreateBody {
        image: Some(run.image.clone()),
        cmd: (!run.command.is_empty()).then(|| run.command.clone()),
        env: Some(env),
        labels: Some(labels),
        exposed_ports: (!bindings.is_empty()).then(|| bindings.keys().cloned().collect()),
        host_config: Some(HostConfig {
            memory: run.memory,
            // Swap as large as the limit: the limit is then what the server really gets.
            memory_swap: run.memory,
            nano_cpus: run.cpus.map(|c| (c * 1e9).round() as i64),
            port_bindings: (!bindings.is_empty()).then_some(bindings),
            restart_policy: Some(run.restart.policy()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let made = docker
        .create_container(None, body)
        .await
        .map_err(|e| anyhow::anyhow!("creating a container from {}: {}", run.image, chain(&e)))?;
    for w in made.warnings.iter().filter(|w| !w.is_empty()) {
        journal.emit(Event::Note {
            level: "warn".into(),
            text: format!("the engine warns: {w}"),
        });
    }
    Ok(made.id)
}

/// The id of a running container, by name or id.
async fn find_running(docker: &Docker, name: &str) -> anyhow::Result<String> {
    let insp = docker.inspect_container(name, None).await.map_err(|e| {
        if not_found(&e) {
            usage(format!(
                "--container {name}: no such container on the Docker engine (see `docker ps`)"
            ))
        } else {
            anyhow::anyhow!("inspecting container {name}: {}", chain(&e))
        }
    })?;
    let running = insp.state.as_ref().and_then(|s| s.running) == Some(true);
    if !running {
        let status = insp
            .state
            .as_ref()
            .and_then(|s| s.status)
            .map(|s| s.to_string())
            .unwrap_or_default();
        return Err(usage(format!(
            "--container {name}: the container is not running (status {status:?}); witness attaches only to a running container (start it, or use --image to have witness run one)"
        )));
    }
    insp.id
        .ok_or_else(|| anyhow::anyhow!("the engine gave no id for container {name}"))
}

struct Begun {
    events: BoxStream<'static, Result<EventMessage, bollard::errors::Error>>,
    inspect: ContainerInspectResponse,
}

/// Starts an owned container and subscribes to its events. The subscription asks for events since
/// the container's creation (owned) or its current start (attached), on the engine's own clock, so a
/// container that dies before the stream is first read is still seen.
async fn begin(docker: &Docker, id: &str, owned: bool) -> anyhow::Result<Begun> {
    let before = docker
        .inspect_container(id, None)
        .await
        .map_err(|e| anyhow::anyhow!("inspecting container {}: {}", short(id), chain(&e)))?;
    let since = if owned {
        before.created.clone()
    } else {
        before.state.as_ref().and_then(|s| s.started_at.clone())
    };
    // The engine takes `since` as Unix seconds (with nanoseconds), not as RFC 3339.
    let since = since
        .as_deref()
        .and_then(parse_time)
        .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map(|d| format!("{}.{:09}", d.as_secs(), d.subsec_nanos()));
    if owned {
        docker
            .start_container(id, None)
            .await
            .map_err(|e| anyhow::anyhow!("starting container {}: {}", short(id), chain(&e)))?;
    }
    let events = docker
        .events(Some(EventsOptions {
            since,
            until: None,
            filters: Some(HashMap::from([
                ("container".to_string(), vec![id.to_string()]),
                ("type".to_string(), vec!["container".to_string()]),
            ])),
        }))
        .boxed();
    let inspect = docker
        .inspect_container(id, None)
        .await
        .map_err(|e| anyhow::anyhow!("inspecting container {}: {}", short(id), chain(&e)))?;
    Ok(Begun { events, inspect })
}

/// One run of the container's process, from a start to its die.
struct Life {
    identity: Identity,
    started: SystemTime,
    logs: Option<tokio::task::JoinHandle<Option<SystemTime>>>,
}

/// The one loop per container: engine events, control messages, the grace timer.
struct Watcher {
    docker: Docker,
    id: String,
    owned: bool,
    cfg: ContainerConfig,
    journal: Journal,
    /// The wall clock at run time `t0`: engine times are placed on the run's clock through it.
    wall0: SystemTime,
    t0: f64,
    state: watch::Sender<State>,
    life: Option<Life>,
    attempt: u32,
    /// The last exit: its meaning, when, and its status.
    last_exit: Option<(String, SystemTime, i32)>,
    /// The newest log timestamp passed on, so a reopened log stream repeats nothing.
    last_log: Option<SystemTime>,
    kill_signal: Option<i32>,
    oom_seen: bool,
    /// Signals witness sent through the engine whose `kill` events are still to come.
    ours: VecDeque<i32>,
    stopping: Option<String>,
}

enum Next {
    Continue,
    Finished(i32),
}

impl Watcher {
    /// An engine time on the run's clock, never in the future and never before the run.
    fn t(&self, at: SystemTime) -> f64 {
        let d = match at.duration_since(self.wall0) {
            Ok(d) => d.as_secs_f64(),
            Err(e) => -e.duration().as_secs_f64(),
        };
        (self.t0 + d).clamp(0.0, self.journal.now_s())
    }

    fn note(&self, level: &str, text: String) {
        self.journal.emit(Event::Note {
            level: level.into(),
            text,
        });
    }

    fn current_pid(&self) -> u32 {
        self.life.as_ref().map_or(0, |l| l.identity.pid)
    }

    async fn run(
        mut self,
        mut events: BoxStream<'static, Result<EventMessage, bollard::errors::Error>>,
        mut ctl: mpsc::UnboundedReceiver<Control>,
    ) -> anyhow::Result<i32> {
        let mut deadline: Option<tokio::time::Instant> = None;
        let mut ctl_open = true;
        loop {
            let grace = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                ev = events.next() => match ev {
                    Some(Ok(m)) => {
                        if let Next::Finished(status) = self.on_event(m).await {
                            if self.stopping.is_some() || !self.linger(&mut events).await {
                                return Ok(self.finish(status));
                            }
                        }
                    }
                    Some(Err(e)) => {
                        self.abort_logs();
                        return Err(anyhow::anyhow!("lost the Docker engine's event stream for container {}: {}", short(&self.id), chain(&e)));
                    }
                    None => {
                        self.abort_logs();
                        return Err(anyhow::anyhow!("the Docker engine closed the event stream for container {}", short(&self.id)));
                    }
                },
                c = ctl.recv(), if ctl_open => {
                    let Some(c) = c else { ctl_open = false; continue };
                    if !self.owned {
                        match c {
                            Control::Inject { label, .. } => {
                                self.note("warn", format!("not injecting {label}: witness does not own container {}", short(&self.id)));
                                continue;
                            }
                            _ => {
                                self.abort_logs();
                                self.note("info", format!("detached from container {}; it keeps running (witness never stops a container it did not start)", short(&self.id)));
                                return Ok(self.finish(0));
                            }
                        }
                    }
                    let (sig, reason) = match c {
                        Control::Stop { reason } => (Signal::SIGTERM, reason),
                        Control::Forward(sig) => (sig, format!("forwarded {} that witness received", sig.as_str())),
                        Control::KillNow => (Signal::SIGKILL, "asked twice to stop: killing at once".to_string()),
                        Control::Inject { signal, label } => {
                            self.send(signal, &format!("injected fault: {label}")).await;
                            continue;
                        }
                    };
                    if self.life.is_none() && self.stopping.is_none() {
                        // Down between a die and the engine's restart: nothing to signal, and no
                        // restart is wanted any more.
                        let status = self.last_exit.as_ref().map_or(0, |e| e.2);
                        self.stopping = Some(reason);
                        return Ok(self.finish(status));
                    }
                    if self.stopping.is_none() {
                        self.stopping = Some(reason.clone());
                    }
                    self.send(sig, &reason).await;
                    if sig != Signal::SIGKILL && deadline.is_none() {
                        deadline = Some(tokio::time::Instant::now() + self.cfg.grace);
                    }
                }
                _ = grace => {
                    let why = format!("still running {} after it was asked to stop (--grace)", crate::journal::secs(self.cfg.grace.as_secs_f64()));
                    self.send(Signal::SIGKILL, &why).await;
                    deadline = None;
                }
            }
        }
    }

    /// After a die the engine will not follow with a restart of its own, a `docker restart` (or a
    /// `docker start` by hand) may still bring it back at once: wait [`LINGER`] (an attached
    /// container: [`LINGER_ATTACHED`]) for a start. True if one came.
    async fn linger(
        &mut self,
        events: &mut BoxStream<'static, Result<EventMessage, bollard::errors::Error>>,
    ) -> bool {
        let wait = if self.owned { LINGER } else { LINGER_ATTACHED };
        let until = tokio::time::Instant::now() + wait;
        while let Ok(Some(Ok(m))) = tokio::time::timeout_at(until, events.next()).await {
            if m.action.as_deref() == Some("destroy") {
                return false;
            }
            let _ = self.on_event(m).await;
            if self.life.is_some() {
                return true;
            }
        }
        false
    }

    fn finish(&mut self, status: i32) -> i32 {
        self.state.send_replace(State::Finished { status });
        status
    }

    fn abort_logs(&mut self) {
        if let Some(h) = self.life.as_mut().and_then(|l| l.logs.take()) {
            h.abort();
        }
    }

    /// Sends a signal through the engine, so it shows as a `kill` event like any other.
    async fn send(&mut self, sig: Signal, reason: &str) {
        let opts = KillContainerOptions {
            signal: sig.as_str().to_string(),
        };
        match self.docker.kill_container(&self.id, Some(opts)).await {
            Ok(()) => {
                self.ours.push_back(sig as i32);
                self.journal.emit(Event::SignalSent {
                    pid: self.current_pid(),
                    signal: signal_name(sig as i32),
                    reason: format!(
                        "{reason} (through the engine, to container {})",
                        short(&self.id)
                    ),
                });
            }
            // 409: not running any more; the die is on its way.
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 409, ..
            }) => {}
            Err(e) => self.note(
                "warn",
                format!(
                    "could not send {} to container {}: {}",
                    sig.as_str(),
                    short(&self.id),
                    chain(&e)
                ),
            ),
        }
    }

    async fn inspect(&self) -> Option<ContainerInspectResponse> {
        self.docker.inspect_container(&self.id, None).await.ok()
    }

    async fn on_event(&mut self, m: EventMessage) -> Next {
        let action = m.action.clone().unwrap_or_default();
        let attrs = m
            .actor
            .as_ref()
            .and_then(|a| a.attributes.clone())
            .unwrap_or_default();
        let at = m
            .time_nano
            .filter(|n| *n > 0)
            .map(|n| SystemTime::UNIX_EPOCH + Duration::from_nanos(n as u64))
            .or_else(|| {
                m.time
                    .map(|s| SystemTime::UNIX_EPOCH + Duration::from_secs(s.max(0) as u64))
            })
            .unwrap_or_else(SystemTime::now);
        match action.as_str() {
            "start" => {
                if let Some(insp) = self.inspect().await {
                    self.on_started(&insp);
                }
            }
            "die" => {
                let code = attrs
                    .get("exitCode")
                    .and_then(|c| c.parse::<i32>().ok())
                    .unwrap_or(-1);
                return self.on_die(code, at).await;
            }
            "kill" => {
                let sig = attrs
                    .get("signal")
                    .and_then(|s| parse_signal(s))
                    .map(|s| s as i32);
                let Some(sig) = sig else {
                    return Next::Continue;
                };
                if self.life.as_ref().is_some_and(|l| at < l.started) {
                    return Next::Continue;
                }
                self.kill_signal = Some(sig);
                if self.ours.front() == Some(&sig) {
                    self.ours.pop_front();
                } else {
                    self.note(
                        "warn",
                        format!(
                            "the engine delivered {} to container {} (docker kill or docker stop, not witness)",
                            signal_name(sig),
                            short(&self.id)
                        ),
                    );
                }
            }
            "oom" => {
                self.oom_seen = true;
                self.note(
                    "warn",
                    format!(
                        "the engine reports the kernel OOM killer fired in container {}",
                        short(&self.id)
                    ),
                );
            }
            "destroy" => {
                self.abort_logs();
                self.note("warn", format!("container {} was removed", short(&self.id)));
                let status = self.last_exit.as_ref().map_or(-1, |e| e.2);
                return Next::Finished(status);
            }
            a if a.starts_with("health_status") => {
                let status = a
                    .trim_start_matches("health_status")
                    .trim_start_matches(':');
                let status = status.trim();
                self.note(
                    if status == "healthy" { "info" } else { "warn" },
                    format!(
                        "the engine's health check says container {} is {status}",
                        short(&self.id)
                    ),
                );
            }
            _ => {}
        }
        Next::Continue
    }

    /// A new incarnation: journal the restart (if one came before) and the spawn, and follow its
    /// logs. An incarnation already known (same `StartedAt`) is ignored.
    fn on_started(&mut self, insp: &ContainerInspectResponse) {
        let Some(st) = insp.state.as_ref() else {
            return;
        };
        let (Some(started_at), Some(pid)) = (st.started_at.clone(), st.pid) else {
            return;
        };
        if pid <= 0 || st.running != Some(true) {
            return;
        }
        if self
            .life
            .as_ref()
            .is_some_and(|l| l.identity.container_started_at.as_deref() == Some(&started_at))
        {
            return;
        }
        let Some(started) = parse_time(&started_at) else {
            return;
        };
        if self.life.is_some() {
            // A start with no die seen for the last one: journal that end as unknown.
            self.abort_logs();
            self.life = None;
        }
        let pid = pid as u32;
        let start_time = super::identity_of(pid).map_or(0, |i| i.start_time);
        let identity = Identity {
            pid,
            start_time,
            container_id: Some(self.id.clone()),
            container_started_at: Some(started_at),
            socket_inode: None,
        };
        let t = self.t(started);
        if let Some((meaning, died, _)) = &self.last_exit {
            self.attempt += 1;
            self.journal.emit_at(
                t,
                Event::Restart {
                    attempt: self.attempt,
                    backoff_s: started
                        .duration_since(*died)
                        .map_or(0.0, |d| d.as_secs_f64()),
                    reason: format!("container {} {meaning}", short(&self.id)),
                    engine_restart_count: insp.restart_count.map(|n| n.max(0) as u64),
                },
            );
        }
        let mut command: Vec<String> = insp.path.iter().cloned().collect();
        command.extend(insp.args.iter().flatten().cloned());
        self.journal.emit_at(
            t,
            Event::Spawn {
                pid,
                start_time,
                command,
                attempt: self.attempt,
                container_id: Some(self.id.clone()),
            },
        );
        self.state.send_replace(State::Running(identity.clone()));
        // An attached container's history is someone else's run: follow only what comes next.
        let history = self.owned || self.last_exit.is_some();
        // Everything up to the last line passed on, and up to the last die, belongs to earlier runs.
        let after = match (self.last_log, self.last_exit.as_ref().map(|e| e.1)) {
            (Some(l), Some(d)) => Some(l.max(d)),
            (l, d) => l.or(d),
        };
        let logs = tokio::spawn(follow_logs(
            self.docker.clone(),
            self.id.clone(),
            history,
            after,
            pid,
            self.cfg.patterns.clone(),
            self.cfg.pass_through,
            self.journal.clone(),
        ));
        self.life = Some(Life {
            identity,
            started,
            logs: Some(logs),
        });
    }

    async fn on_die(&mut self, code: i32, at: SystemTime) -> Next {
        let Some(mut life) = self.life.take() else {
            return Next::Continue;
        };
        if at < life.started {
            // A die from before this incarnation, replayed by the subscription.
            self.life = Some(life);
            return Next::Continue;
        }
        // The last lines before the death come before it in the journal.
        if let Some(mut h) = life.logs.take() {
            match tokio::time::timeout(LOG_SETTLE, &mut h).await {
                Ok(Ok(last)) => self.last_log = last.or(self.last_log),
                _ => h.abort(),
            }
        }
        let insp = self.inspect().await;
        let st = insp.as_ref().and_then(|i| i.state.as_ref());
        let same = st.and_then(|s| s.started_at.as_deref())
            == life.identity.container_started_at.as_deref();
        // The engine's FinishedAt is containerd's own exit time, taken when the process was reaped;
        // the die event's time is when the daemon got round to it, which lags on a busy machine (a
        // request cut by the death would then seem to fail before the server died). It belongs to
        // this incarnation while it is after its start and not after the event.
        let at = st
            .and_then(|s| s.finished_at.as_deref())
            .and_then(parse_time)
            .filter(|f| *f >= life.started && *f <= at)
            .unwrap_or(at);
        let oom = self.oom_seen || (same && st.and_then(|s| s.oom_killed) == Some(true));
        let ex = EngineExit {
            code,
            oom_killed: oom,
            kill_signal: self.kill_signal.take(),
        };
        self.oom_seen = false;
        self.ours.clear();
        let info = ex.info();
        let status = info.status();
        let meaning = ex.meaning();
        self.journal.emit_at(
            self.t(at),
            Event::Exit {
                pid: life.identity.pid,
                code: info.code,
                signal: info.signal_name(),
                core_dumped: false,
                age_s: at
                    .duration_since(life.started)
                    .map_or(0.0, |d| d.as_secs_f64()),
                status,
                requested: self.stopping.is_some(),
                meaning: meaning.clone(),
                oom_killed: Some(oom),
            },
        );
        self.state.send_replace(State::Down { status });
        self.last_exit = Some((meaning, at, status));
        let restarting = st.and_then(|s| s.restarting) == Some(true);
        let running_again = !same && st.and_then(|s| s.running) == Some(true);
        if running_again {
            if let Some(i) = insp.as_ref() {
                self.on_started(i);
            }
            return Next::Continue;
        }
        if restarting {
            return Next::Continue;
        }
        Next::Finished(status)
    }
}

/// RFC 3339 as the engine writes it (nanoseconds, UTC); its zero time reads as None.
pub fn parse_time(s: &str) -> Option<SystemTime> {
    let t = humantime::parse_rfc3339(s).ok()?;
    (t > SystemTime::UNIX_EPOCH).then_some(t)
}

/// Splits the engine's timestamp off a log frame (`timestamps=true`).
fn split_timestamp(frame: &[u8]) -> (Option<SystemTime>, &[u8]) {
    let Some(sp) = frame.iter().take(40).position(|&b| b == b' ') else {
        return (None, frame);
    };
    match std::str::from_utf8(&frame[..sp]).ok().and_then(parse_time) {
        Some(t) => (Some(t), &frame[sp + 1..]),
        None => (None, frame),
    }
}

/// Follows one incarnation's output until its log stream ends (at its die). `history`: from the
/// start of the container's log (skipping what `after` says was passed on already), else only new
/// lines. Returns the newest timestamp passed on.
#[allow(clippy::too_many_arguments)]
async fn follow_logs(
    docker: Docker,
    id: String,
    history: bool,
    after: Option<SystemTime>,
    pid: u32,
    patterns: Arc<Patterns>,
    pass_through: bool,
    journal: Journal,
) -> Option<SystemTime> {
    let pass = |s: Stream| {
        if pass_through {
            PassThrough::Own(s)
        } else {
            PassThrough::Discard
        }
    };
    let mut out = LineSink::new(
        Stream::Stdout,
        pass(Stream::Stdout),
        Some(pid),
        patterns.clone(),
        journal.clone(),
    );
    let mut err = LineSink::new(
        Stream::Stderr,
        pass(Stream::Stderr),
        Some(pid),
        patterns,
        journal,
    );
    let since = after
        .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs() as i32);
    let opts = LogsOptions {
        follow: true,
        stdout: true,
        stderr: true,
        since,
        until: 0,
        timestamps: true,
        tail: if history { "all" } else { "0" }.to_string(),
    };
    let mut last = after;
    let mut frames = docker.logs(&id, Some(opts));
    while let Some(Ok(frame)) = frames.next().await {
        use bollard::container::LogOutput;
        let (sink, bytes) = match frame {
            LogOutput::StdOut { message } | LogOutput::Console { message } => (&mut out, message),
            LogOutput::StdErr { message } => (&mut err, message),
            LogOutput::StdIn { .. } => continue,
        };
        let (ts, body) = split_timestamp(&bytes);
        if let Some(ts) = ts {
            if after.is_some_and(|a| ts <= a) {
                continue;
            }
            last = Some(ts);
        }
        sink.push(body);
    }
    out.finish();
    err.finish();
    last
}

/// Sanity for the pieces that need no engine.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_policies_parse_as_docker_takes_them() {
        assert_eq!(DockerRestart::parse("no").unwrap(), DockerRestart::No);
        assert_eq!(
            DockerRestart::parse("on-failure:3").unwrap(),
            DockerRestart::OnFailure(Some(3))
        );
        assert_eq!(
            DockerRestart::parse("on-failure").unwrap(),
            DockerRestart::OnFailure(None)
        );
        assert_eq!(
            DockerRestart::parse("unless-stopped").unwrap(),
            DockerRestart::UnlessStopped
        );
        let e = DockerRestart::parse("sometimes").unwrap_err();
        assert!(e.contains("on-failure:N"), "{e}");
        assert!(DockerRestart::parse("on-failure:x").is_err());
    }

    #[test]
    fn published_ports_default_to_loopback() {
        let p = Publish::parse("18080:8080").unwrap();
        assert_eq!(
            (
                p.host_ip.as_str(),
                p.host_port,
                p.container_port,
                p.proto.as_str()
            ),
            ("127.0.0.1", 18080, 8080, "tcp")
        );
        let p = Publish::parse("0.0.0.0:80:8080/udp").unwrap();
        assert_eq!((p.host_ip.as_str(), p.proto.as_str()), ("0.0.0.0", "udp"));
        let p = Publish::parse("[::1]:80:8080").unwrap();
        assert_eq!(p.host_ip, "::1");
        assert!(Publish::parse("8080")
            .unwrap_err()
            .contains("HOST:CONTAINER"));
        assert!(Publish::parse("a:b").is_err());
    }

    #[test]
    fn engine_times_and_log_timestamps_parse_to_the_nanosecond() {
        let t = parse_time("2026-11-30T03:49:31.931424317Z").unwrap();
        let ns = t
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        assert_eq!(ns, 931_424_317);
        assert!(parse_time("0001-01-01T00:00:00Z").is_none());
        let (ts, body) = split_timestamp(b"2026-11-30T03:49:31.9Z hello world\n");
        assert!(ts.is_some());
        assert_eq!(body, b"hello world\n");
        let (ts, body) = split_timestamp(b"no timestamp here\n");
        assert!(ts.is_none());
        assert_eq!(body, b"no timestamp here\n");
    }

    #[test]
    fn the_engine_address_says_where_it_came_from() {
        let (a, from) = engine_address(Some("/tmp/d.sock"));
        assert_eq!(a, "unix:///tmp/d.sock");
        assert_eq!(from, "--docker-host");
    }
}
