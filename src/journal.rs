//! The journal: one append-only JSON Lines file of timestamped events on one clock.
//!
//! Every producer (targets, load driver, samplers) turns what it sees into an [`Event`] stamped with
//! `t_s`, seconds since the run's start on a monotonic clock ([`RunClock`]). The first line is a
//! [`Header`] with the one wall-clock anchor. Lifecycle events are written through to the OS at once;
//! high-rate events (requests, samples) are buffered and flushed at least every [`FLUSH_EVERY`], so a
//! `kill -9` of witness loses no lifecycle event and at most that much of the rest.
//!
//! [`read`] loads a journal back, accepting a last line cut off mid-write (and saying so), which is how
//! `witness report` and every end-of-run view see the run: the live path and the re-render are one.

pub mod clock;
pub mod codec;
pub mod logline;
pub mod meaning;
pub mod observed;
pub mod replay;

pub use replay::{ReadState, RecordPass, Replay};

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// High-rate events reach the file at least this often.
pub const FLUSH_EVERY: Duration = Duration::from_millis(50);

/// The run's one clock: monotonic seconds since the run started.
#[derive(Clone, Copy, Debug)]
pub struct RunClock {
    start: Instant,
}

impl RunClock {
    pub fn start() -> Self {
        Self {
            start: Instant::now(),
        }
    }
    /// Seconds since the run's start, microsecond resolution.
    pub fn now_s(&self) -> f64 {
        self.at(Instant::now())
    }
    /// Where an `Instant` taken by a producer falls on the run's clock.
    pub fn at(&self, i: Instant) -> f64 {
        micros(i.saturating_duration_since(self.start).as_secs_f64())
    }
    pub fn instant(&self) -> Instant {
        self.start
    }
}

/// Rounds to the journal's resolution, one microsecond.
pub fn micros(s: f64) -> f64 {
    (s * 1e6).round() / 1e6
}

/// The first line of every journal.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Header {
    /// Always "header"; lets a reader tell the first line from an event.
    pub kind: String,
    pub witness_version: String,
    /// witness's own command line (secrets never reach argv, so it is safe to keep).
    pub command: Vec<String>,
    /// Wall-clock time of `t_s = 0`, RFC 3339.
    pub started_at: String,
    /// The same instant as Unix seconds, for arithmetic.
    pub started_unix_s: f64,
    pub hostname: String,
    pub pid: u32,
    /// Which subcommand wrote it: wrap, load, soak (or "merged" for `witness report -o`).
    pub mode: String,
    /// The host clock's state when the anchor was taken: how far the anchor can be trusted across
    /// hosts. None in journals written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<clock::ClockState>,
    /// For a merged journal: the journals and foreign results it was made from, each with the shift
    /// that put it on this journal's clock and how far that shift can be trusted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<clock::SourceInfo>,
    /// The directory witness was started from and the user it ran as: a bare `witness report`
    /// prefers the runs of the same user from the same directory. None in older journals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// The name the run was given (`--name`): `witness compare --baseline NAME` finds its latest
    /// run by it, `report --list` shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl Header {
    pub fn new(mode: &str, command: Vec<String>) -> Self {
        let now = SystemTime::now();
        let unix = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        Self {
            kind: "header".into(),
            witness_version: env!("CARGO_PKG_VERSION").into(),
            command,
            started_at: humantime::format_rfc3339_micros(now).to_string(),
            started_unix_s: unix,
            hostname: nix::unistd::gethostname()
                .ok()
                .and_then(|h| h.into_string().ok())
                .unwrap_or_else(|| "unknown".into()),
            pid: std::process::id(),
            mode: mode.into(),
            clock: Some(clock::ClockState::read()),
            sources: Vec::new(),
            cwd: std::env::current_dir()
                .ok()
                .and_then(|d| d.to_str().map(str::to_string)),
            // SAFETY: getuid has no preconditions and cannot fail.
            uid: Some(unsafe { libc::getuid() }),
            name: None,
        }
    }
}

/// Which output stream of the server a line came from.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Stream {
    Stdout,
    Stderr,
}

impl std::fmt::Display for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        })
    }
}

/// Who a server is: a process (pid + start time in clock ticks since boot, which changes on every
/// restart even when a pid is reused) or a container (id + the engine's `StartedAt`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Identity {
    pub pid: u32,
    pub start_time: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_started_at: Option<String>,
    /// When the listener's pid could not be read (witness may not read its /proc/PID/fd): the
    /// listening socket's inode from /proc/net/tcp, which a restarted server replaces. `pid` and
    /// `start_time` are 0 then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket_inode: Option<u64>,
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let (0, Some(ino)) = (self.pid, self.socket_inode) {
            return write!(f, "listening socket inode {ino} (pid unreadable)");
        }
        match (&self.container_id, &self.container_started_at) {
            (Some(id), Some(at)) => write!(f, "container {} started {}", short_id(id), at),
            _ => write!(f, "pid {} (start {})", self.pid, self.start_time),
        }
    }
}

fn short_id(id: &str) -> &str {
    &id[..id.len().min(12)]
}

/// What became of one request: a closed set (docs/design.md).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    /// A response with status below 400, read completely.
    Ok,
    /// The harness's own limit fired.
    Timeout { phase: TimeoutPhase, limit_s: f64 },
    /// The request failed; `status` is kept for HTTP errors.
    Error {
        error: ErrorKind,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<u16>,
    },
    /// The server refused work for capacity (429, 503, a QUEUE_FULL body): correct behaviour, counted
    /// apart and never an error.
    Rejected {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<u16>,
        reason: String,
    },
}

impl Outcome {
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Timeout { .. } => "timeout",
            Outcome::Error { .. } => "error",
            Outcome::Rejected { .. } => "rejected",
        }
    }
    pub fn is_ok(&self) -> bool {
        matches!(self, Outcome::Ok)
    }
    /// The server answered it: a response of any kind (an HTTP status, a tool's or JSON-RPC error),
    /// as against a transport failure or witness's own limit.
    pub fn is_answer(&self) -> bool {
        match self {
            Outcome::Ok | Outcome::Rejected { .. } => true,
            Outcome::Error { status, error } => {
                status.is_some() || matches!(error, ErrorKind::ToolError | ErrorKind::Rpc)
            }
            Outcome::Timeout { .. } => false,
        }
    }
    /// A failure is anything but ok and rejected.
    pub fn is_failure(&self) -> bool {
        matches!(self, Outcome::Timeout { .. } | Outcome::Error { .. })
    }
    /// One phrase for humans: "timeout (request limit 30s)", "error: connect refused".
    pub fn describe(&self) -> String {
        match self {
            Outcome::Ok => "ok".into(),
            Outcome::Timeout { phase, limit_s } => {
                format!(
                    "timeout ({phase} limit {}, the harness's own)",
                    secs(*limit_s)
                )
            }
            Outcome::Error {
                error,
                status: Some(s),
            } => format!("error: {error} {s}"),
            Outcome::Error {
                error,
                status: None,
            } => format!("error: {error}"),
            Outcome::Rejected { reason, .. } => format!("rejected ({reason})"),
        }
    }
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum TimeoutPhase {
    Connect,
    Request,
}

impl std::fmt::Display for TimeoutPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TimeoutPhase::Connect => "connect",
            TimeoutPhase::Request => "whole-request",
        })
    }
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    ConnectRefused,
    Connect,
    Reset,
    ClosedBeforeResponse,
    Protocol,
    Http4xx,
    Http5xx,
    /// A 3xx the user did not list as accepted (redirects are not followed).
    Http3xx,
    /// MCP: a JSON-RPC error answer (code and message in the detail).
    Rpc,
    /// MCP: a tool result with `isError: true` (the start of its text in the detail).
    ToolError,
    /// The pipe or stream to the server closed (MCP over stdio or SSE).
    Closed,
    /// witness's own failure (out of file descriptors, ...): never the server's error.
    Local,
    /// witness was interrupted while this exchange was in flight.
    Interrupted,
    /// MCP: the client cancelled the call (`notifications/cancelled`) before it was answered: the
    /// client gave up, so its duration is how long it waited, never the server's latency.
    Cancelled,
    /// TLS failed: the handshake (a certificate witness does not trust, no common protocol) or the
    /// encrypted stream after it (a bad record, an alert from the server).
    Tls,
    /// HTTP/2: the server did not process this stream (above its GOAWAY's last-stream-id) on one
    /// connection after another: witness sends such a stream again, at most
    /// [`UNPROCESSED_RESENDS`] times, and only then counts it (the detail says how often).
    Goaway,
    /// HTTP/2: the server reset this stream (RST_STREAM), its error code in the detail; a
    /// REFUSED_STREAM (not processed) only once its resends ran out, as for [`ErrorKind::Goaway`].
    StreamReset,
    /// MCP over streamable HTTP through wrap's proxy: the request carried the session id of a
    /// server process that has exited; the proxy answered 404 so the client initializes again.
    /// The restart's consequence, never the server's failure nor its latency.
    SessionGone,
    Other,
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ErrorKind::ConnectRefused => "connect refused",
            ErrorKind::Connect => "connect failed",
            ErrorKind::Reset => "connection reset",
            ErrorKind::ClosedBeforeResponse => "closed before response",
            ErrorKind::Protocol => "protocol error",
            ErrorKind::Http4xx => "HTTP",
            ErrorKind::Http5xx => "HTTP",
            ErrorKind::Http3xx => "HTTP redirect",
            ErrorKind::Rpc => "JSON-RPC error",
            ErrorKind::ToolError => "tool error",
            ErrorKind::Closed => "connection closed",
            ErrorKind::Local => "witness's own failure",
            ErrorKind::Interrupted => "interrupted",
            ErrorKind::Cancelled => "cancelled by the client",
            ErrorKind::Tls => "TLS",
            ErrorKind::Goaway => "HTTP/2 GOAWAY",
            ErrorKind::StreamReset => "HTTP/2 stream reset",
            ErrorKind::SessionGone => "session ended by a restart (404)",
            ErrorKind::Other => "other",
        })
    }
}

/// The result of one health probe: a status, or the name of the error that stopped it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Probe {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub duration_s: f64,
    /// A TCP connect was the whole question (a server with no health endpoint whose URL is not
    /// for GET): set when it connected.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub connected: bool,
}

impl Probe {
    /// A 2xx answer (an MCP ping that answered is journalled as 200), or a TCP connect that was
    /// the whole question and connected.
    pub fn healthy(&self) -> bool {
        self.status.is_some_and(|s| (200..300).contains(&s))
            || (self.connected && self.error.is_none())
    }
    /// As the report shows it: the status number, or the error's name.
    pub fn shown(&self) -> serde_json::Value {
        match (self.status, &self.error) {
            (Some(s), _) => serde_json::json!(s),
            (None, Some(e)) => serde_json::json!(e),
            (None, None) if self.connected => serde_json::json!("connected"),
            (None, None) => serde_json::Value::Null,
        }
    }
    /// As a person reads it: an MCP ping that answered is "answered" (its 200 is witness's own
    /// shorthand, not anything the server said); otherwise [`Probe::text`].
    pub fn said(&self, mcp: bool) -> String {
        if mcp && self.healthy() {
            "answered".into()
        } else {
            self.text()
        }
    }
    /// The status number, or why no status came, in a person's words ("refused (nothing
    /// listens)", "no answer in time").
    pub fn text(&self) -> String {
        match (self.status, &self.error) {
            (Some(s), _) => s.to_string(),
            (None, Some(e)) => probe_error_words(e, None),
            (None, None) if self.connected => "connected".into(),
            (None, None) => "none".into(),
        }
    }
    /// [`Probe::text`], with the address asked where it tells more ("refused (nothing listens on
    /// 127.0.0.1:8080)").
    pub fn text_at(&self, at: &str) -> String {
        match (self.status, &self.error) {
            (None, Some(e)) => probe_error_words(e, Some(at)),
            _ => self.text(),
        }
    }
}

/// A probe's journalled error name (`ConnectionRefused`, `TimeoutError`, an I/O error kind) in a
/// person's words.
pub fn probe_error_words(name: &str, at: Option<&str>) -> String {
    let on = |what: &str| match at {
        Some(a) => format!("{what} on {a}"),
        None => what.to_string(),
    };
    match name {
        "ConnectionRefused" | "ConnectRefused" => format!("refused ({})", on("nothing listens")),
        "ConnectionReset" => "reset by the server".into(),
        "TimeoutError" => "no answer in time".into(),
        "ClosedBeforeResponse" => "closed before answering".into(),
        "ProtocolError" => "an answer that is not HTTP".into(),
        "ConnectError" => match at {
            Some(a) => format!("could not connect to {a}"),
            None => "could not connect".into(),
        },
        "TlsCertificate" => "its certificate is not trusted".into(),
        "TlsError" => "TLS failed".into(),
        other => {
            // An I/O error kind's name (`AddrNotAvailable`): its words, lower case.
            let mut words = String::new();
            for (i, c) in other.chars().enumerate() {
                if c.is_uppercase() && i > 0 {
                    words.push(' ');
                }
                words.extend(c.to_lowercase());
            }
            words
        }
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// HTTP/2: how often witness sends again a stream the server did not process (above a GOAWAY's
/// last-stream-id, REFUSED_STREAM, or never written because its connection was closing) before the
/// request counts as an error: h2load and oha send such streams again too, since the protocol says
/// the server did nothing with them.
pub const UNPROCESSED_RESENDS: u32 = 3;

/// `witness replay`: one kind of recorded call (`tools/call work`, `GET /items`), in the order the
/// recording first sent it; a replayed request's `worker` is its index among these.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ReplayName {
    pub name: String,
    /// How many of one session's calls are of this kind.
    pub calls: u64,
    /// How long the recorded answers took (request to answer, as recorded): the base a replayed
    /// call's latency is held to. Absent when the recording kept no answer of this kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded_p99_s: Option<f64>,
}

/// `witness replay`: how the answers of one kind of call at one level compared with the recorded
/// ones (`Event::Answers`), counted, with the first few differences in words.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct AnswerCount {
    pub name: String,
    /// Answers compared (a call that got no answer is a failed request, not compared).
    pub compared: u64,
    pub differed: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub first: Vec<String>,
}

/// HTTP/2: the connections of a level that ended one way (`Event::Connections`), counted.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ConnectionEnds {
    /// `goaway`: the server sent GOAWAY (its last-stream-id below 2^31-1); `closed`: it closed the
    /// connection without one; `error`: the connection failed (reset, TLS, protocol).
    pub how: String,
    /// The GOAWAY's error code (`NO_ERROR`, `ENHANCE_YOUR_CALM`), or the failure's kind in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub connections: u64,
    /// The streams each of them took, fewest and most: for a GOAWAY those at or below its
    /// last-stream-id (the ones the server processed), else the streams witness opened on it.
    pub streams_min: u64,
    pub streams_max: u64,
}

/// One address's connect timings, part of the connect floor.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct AddrFloor {
    pub addr: String,
    /// Median connect time over the attempts that succeeded, if any did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_ms: Option<f64>,
    pub attempts: u32,
    pub failures: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What the system's resolver was told when witness resolved a name: /etc/resolv.conf's nameservers
/// and its `options timeout:` and `attempts:` (None: not set, glibc's defaults of 5 s and 2 apply),
/// and whether /etc/hosts names the host.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ResolverConf {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nameservers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub in_hosts: bool,
}

impl ResolverConf {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// The settings of a run that its analysis depends on. Sections belong to the modes that use them.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Settings {
    /// Timers the user named (`--timer`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timers_s: Vec<f64>,
    /// The load ladder's settings, for `load`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<LoadSettings>,
    /// Anything else a mode records about itself (soak plan summary, GPU mode...).
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub extra: serde_json::Value,
    /// The thresholds the run was given (`--assert`, a soak plan's `asserts`), as written: every
    /// report of the journal judges them again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub asserts: Vec<String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct LoadSettings {
    pub url: String,
    pub method: String,
    pub levels: Vec<u32>,
    /// `--rates` without a search: the arrival rates planned, requests/s (level i is rate i).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rates_per_s: Vec<f64>,
    pub timeout_s: f64,
    pub connect_timeout_s: f64,
    pub settle_s: f64,
    pub factor: f64,
    /// Added to the cliff rule's allowance: differences this small are scheduling noise, not a cliff.
    #[serde(default)]
    pub cliff_slack_s: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rounds: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<f64>,
    /// The exchange was an MCP tool call (`--mcp`), not a plain HTTP request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<McpSettings>,
}

/// What an MCP load run called, and how.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct McpSettings {
    pub tool: String,
    /// `stdio` or `http`.
    pub transport: String,
}

/// Everything witness knows, one variant per kind of fact. Later capabilities add variants here.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    // ---- lifecycle: flushed at once -------------------------------------------------------------
    /// A server process (or container) was started; `start_time` is read from /proc.
    Spawn {
        pid: u32,
        start_time: u64,
        command: Vec<String>,
        attempt: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        container_id: Option<String>,
    },
    /// A server process ended. `status` is the shell's view: the code, or 128+N for signal N.
    Exit {
        pid: u32,
        code: Option<i32>,
        signal: Option<String>,
        core_dumped: bool,
        age_s: f64,
        status: i32,
        /// witness asked it to stop (shutdown, forwarded signal): not a finding in itself.
        requested: bool,
        meaning: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        oom_killed: Option<bool>,
    },
    /// A line of the server's output that matched a watch pattern.
    Log {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pid: Option<u32>,
        stream: Stream,
        line: String,
        label: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        truncated: bool,
        /// A duration the line names ("after 90s", "timeout=30"): a known timer.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timer_s: Option<f64>,
    },
    /// A line of the server's output that matched no watch pattern, kept (a bounded number per
    /// stream, [`crate::server::logs::OUTPUT_KEPT`]) so that a failure or an exit can quote what the
    /// server said at its instant: the last line before an exit, an error logged as a request failed.
    /// Only quoted, never shown as a lifecycle event of its own.
    Output {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pid: Option<u32>,
        stream: Stream,
        line: String,
    },
    /// The process holding the server's listening socket, first seen holding it: the server is what
    /// serves (a shell loop, `timeout` or a process manager above it are its supervisors). A new one
    /// is a restart of the server even when witness's own child lives on.
    Listening {
        pid: u32,
        start_time: u64,
        port: u16,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        command: Vec<String>,
        /// When (the run's clock) witness last looked and saw nobody listening: it began listening
        /// between then and this event (a busy machine looks late).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        unseen_s: Option<f64>,
    },
    /// witness sent a signal to the server's process group.
    SignalSent {
        pid: u32,
        signal: String,
        reason: String,
    },
    /// The server is being started again under the restart policy (or the engine's).
    Restart {
        attempt: u32,
        backoff_s: f64,
        reason: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        engine_restart_count: Option<u64>,
    },
    /// A descendant of the server appeared: a pre-fork worker, an `sh -c` child, a daemon.
    WorkerStart {
        pid: u32,
        ppid: u32,
        start_time: u64,
        command: Vec<String>,
    },
    /// A descendant of the server disappeared. `how` says how it died where it can be known and
    /// `source` how that was learnt: "proc_connector", "wait" (witness reaped it as subreaper),
    /// "log_line" (the parent said so), or "unknown" ("gone, status unknown").
    WorkerExit {
        pid: u32,
        ppid: u32,
        command: Vec<String>,
        age_s: f64,
        how: String,
        source: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<i32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<String>,
        /// A helper: a short-lived child that comes and goes (one per request), not a worker. Its end
        /// is a finding only when abnormal; its command's [`Event::Helpers`] counts it.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        helper: bool,
    },
    /// The helpers of one command, counted in bounded state (most are not journalled one by one):
    /// how many ended, how long they lived, how they ended ("exit 0", "SIGKILL", "unknown" → count).
    /// Written when the tree stops; each one replaces the last for its command.
    Helpers {
        command: String,
        #[serde(default)]
        count: u64,
        /// Of `count`, those also journalled as `worker_start` / `worker_exit`.
        #[serde(default)]
        journalled: u64,
        #[serde(default)]
        lived_min_s: f64,
        #[serde(default)]
        lived_median_s: f64,
        #[serde(default)]
        lived_max_s: f64,
        #[serde(default)]
        ends: std::collections::BTreeMap<String, u64>,
    },
    /// The server exited but something (a grandchild) still holds its output pipes.
    Leak { pid: u32, detail: String },
    /// The server answered its readiness probe (or never did).
    Ready {
        ok: bool,
        waited_s: f64,
        url: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
        /// Never ready because it exited: its last output lines ("stderr: …"), for the report (the
        /// refusal quotes only the line that says why).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        output: Vec<String>,
    },
    /// A fault witness injected on purpose.
    Fault {
        action: String,
        pid: u32,
        detail: String,
    },
    /// Something worth saying that is not a measurement (a warning, a refused run).
    Note { level: String, text: String },
    /// The run's settings that analysis needs (timers, limits): the journal alone must suffice.
    Settings(Settings),
    /// The run ended; `partial` when it stopped before its plan was done.
    End {
        reason: String,
        partial: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
    },

    // ---- load ------------------------------------------------------------------------------------
    /// A host name witness resolved, timed: once per run, before the first probe, and again only
    /// once every address it had stopped answering (`again` says why). Every connection after (the
    /// connect floor, health probes, requests) goes to these addresses, so no figure holds a lookup.
    /// The resolver's settings (/etc/resolv.conf) are kept beside it, so a slow lookup can be named.
    Resolved {
        host: String,
        /// The addresses in the order the system's resolver gave them (the order connects try).
        addrs: Vec<String>,
        took_s: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        again: Option<String>,
        /// The lookup failed (no address): the resolver's words.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        #[serde(default, skip_serializing_if = "ResolverConf::is_empty")]
        resolver: ResolverConf,
    },
    /// Plain TCP connect timings to the target before any level.
    ConnectFloor {
        host: String,
        port: u16,
        addrs: Vec<AddrFloor>,
        median_ms: Option<f64>,
        limit_ms: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        advice: Option<String>,
        /// https: the median TLS handshake after those connects (not in `median_ms`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        handshake_ms: Option<f64>,
    },
    /// A health probe and why it was made (ready, before, after, invariant).
    Health {
        url: String,
        purpose: String,
        #[serde(flatten)]
        probe: Probe,
    },
    /// A level of the ladder begins (after its health probe and identity read).
    LevelStart {
        index: u32,
        concurrency: u32,
        health: Probe,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        identity: Option<Identity>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        skipped: Option<String>,
    },
    /// A level ends, after settle: health and identity again.
    LevelEnd {
        index: u32,
        concurrency: u32,
        health: Probe,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        identity: Option<Identity>,
        /// Why the level stopped sending early (the server died and nothing restarts it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stopped: Option<String>,
        /// Requests the level meant to send and did not, once it stopped.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        not_sent: Option<u64>,
        /// The most connections to the server witness itself held open at once during the level
        /// (its workers' and any probe's): what it was, as load, counted.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        held: Option<u32>,
        /// witness's own CPU time (user + system, all its threads, from the kernel's accounting of
        /// the process) from the level's start to the end of its sending: what the level's
        /// requests cost the client, on a machine it may share with the server.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        witness_cpu_s: Option<f64>,
        /// What HTTP the level spoke: "HTTP/1.1", "HTTP/1.1 over TLS", "HTTP/2 over TLS (ALPN
        /// h2): streams over 1 connection (1 opened)"; absent for MCP and journals from before.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        protocol: Option<String>,
    },
    /// HTTP/2 (`--http2`): how a level's connections ended and what became of the streams the
    /// server did not process; journalled once, as the level's sending ends (before its
    /// `level_end`). Counts only: a level of a million connections writes one line.
    Connections {
        level: u32,
        /// The connections the level opened.
        opened: u64,
        /// Those the server (or the network) ended while the level sent, by how; the ones still
        /// open when it ended are not here. At most a few entries (one per way and reason).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        ends: Vec<ConnectionEnds>,
        /// Streams the server did not process (above its GOAWAY's last-stream-id, REFUSED_STREAM,
        /// or never written because their connection was closing), sent again on another
        /// connection: each sending again counted once. Such a request counts once, with one
        /// duration from its first sending to its answer.
        resent: u64,
        /// Requests whose stream was still not processed after [`UNPROCESSED_RESENDS`] resends:
        /// counted as errors (`goaway`, `stream_reset`).
        #[serde(default, skip_serializing_if = "is_zero")]
        gave_up: u64,
    },
    /// An open-loop level (`load --rates`): journalled right after its `level_start`. Its requests
    /// go at a fixed arrival rate from a seeded schedule, each with its intended send time in
    /// `scheduled_s`; `concurrency` in its start and end is `max_in_flight`, the in-flight cap.
    RateLevel {
        index: u32,
        rate_per_s: f64,
        /// `constant` or `poisson`.
        arrivals: String,
        seed: u64,
        max_in_flight: u32,
        duration_s: f64,
    },
    /// `witness replay`: the recording whose calls the levels send, journalled once before the
    /// first level. Each level plays it at a speed (`replay_level`); its requests' `worker` is the
    /// index of their kind in `names`, their `scheduled_s` the recorded offset ÷ the speed.
    Replay {
        file: String,
        /// `stdio` (MCP JSON-RPC) or `http` (HAR).
        transport: String,
        /// Copies of the session played at once, and how (over stdio: multiplexed on witness's one
        /// session with ids rewritten).
        sessions: u32,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        sessions_how: String,
        /// `outcome`, `shape` or `exact`: what of each answer is compared with the recorded one.
        compare: String,
        /// One session's timed calls (the handshake excluded), and the recorded span from the first
        /// call's send to the last's.
        calls: u64,
        span_s: f64,
        names: Vec<ReplayName>,
        /// The recorded session's sends per `bucket_s` (its pacing), at most a hundred buckets.
        pacing: Vec<u32>,
        bucket_s: f64,
        /// What of the recording was not replayed, in words (masked values, notifications, cut answers).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        notes: Vec<String>,
    },
    /// `witness replay`: a level plays the recording at `speed` (2: twice as fast), its schedule
    /// starting at `start_s`. Journalled after the level's `rate_level`.
    ReplayLevel {
        index: u32,
        speed: f64,
        start_s: f64,
    },
    /// `witness replay`: how a level's answers compared with the recorded ones, per kind of call;
    /// journalled once the level's last answer is in (before its `level_end`).
    Answers {
        level: u32,
        by_name: Vec<AnswerCount>,
    },
    /// `load --find-limit`: the levels that follow are the probes of a search for the highest
    /// level that passes (`over`: `levels` or `rates`), to `resolution` (0.1: 10 %) within
    /// `max_levels` probes.
    Search {
        over: String,
        resolution: f64,
        max_levels: u32,
    },
    /// One request, journalled when it completes (`t_s` is its end).
    Request {
        id: u64,
        /// The level ("L4") or the soak request kind.
        group: String,
        worker: u32,
        start_s: f64,
        duration_s: f64,
        outcome: Outcome,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<u16>,
        /// When it was meant to go, if it went late (coordinated omission).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        scheduled_s: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
        /// Body bytes read once a status arrived (all of them, though only a bounded prefix is kept).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        body_bytes: Option<u64>,
        /// The body was longer than the prefix witness keeps (`--max-body`): counted, not kept.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        body_cut: bool,
        /// The phases, where the protocol has them. `connect_s`: how long opening a new connection
        /// took (absent when the request went on a kept-alive one); whole µs.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        connect_s: Option<f64>,
        /// From the request's start to its response's headers (connect included); the rest of
        /// `duration_s` is the body's. Whole µs.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        headers_s: Option<f64>,
        /// The TLS handshake of the new connection the request opened, after its TCP connect
        /// (absent over plain HTTP and on a reused connection). Inside `headers_s` like the
        /// connect, never in a reused connection's duration. Whole µs.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        handshake_s: Option<f64>,
        /// witness's own wait before this request left it: from when it meant to send it (the
        /// level's start for a worker's first request, the previous answer's end for the next) to
        /// its first system call for it (the connect, or the write on a kept-alive connection).
        /// Never inside `duration_s` or a phase: `start_s` is that first system call. Whole µs.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lag_s: Option<f64>,
        /// A relayed MCP call's JSON-RPC id, as the client wrote it (`7`, `"abc"`): what the
        /// client and the server's own logs call it. None for witness's own requests.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rpc_id: Option<String>,
    },
    /// The kernel's listen-queue counters and the target's listener, read before and after a level
    /// (`when`: "before" or "after"). `overflows`/`drops`: /proc/net/netstat's TcpExt
    /// ListenOverflows and ListenDrops, system-wide. `backlog`/`queued`: the listening socket's
    /// maximum and current accept queue (/proc/net/tcp{,6}), when the port's listener is visible.
    Listen {
        level: u32,
        when: String,
        port: u16,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        overflows: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        drops: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        backlog: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        queued: Option<u64>,
        /// /proc/net/netstat's TcpExt TCPSynRetrans (SYNs and SYN-ACKs sent again), system-wide.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        syn_retrans: Option<u64>,
    },

    // ---- samples -------------------------------------------------------------------------------
    /// The server process tree's resources from /proc: `rss_bytes`, `threads` and `fds` are the
    /// whole tree's, `children` its processes below the root (zombies included).
    ProcSample {
        pid: u32,
        rss_bytes: u64,
        cpu_pct: f64,
        threads: u64,
        fds: u64,
        children: u64,
        /// The root process's own resident memory; the rest of `rss_bytes` is its descendants'.
        /// Absent in journals from before it was read apart.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        own_rss_bytes: Option<u64>,
        /// The descendants by program, the most numerous first (at most a few).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        kin: Vec<Kin>,
    },
    /// A container's resources from the engine's stats.
    ContainerSample {
        id: String,
        mem_bytes: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mem_limit_bytes: Option<u64>,
        cpu_pct: f64,
        pids: u64,
    },
    /// One GPU's figures from NVML.
    GpuSample {
        device: u32,
        name: String,
        mem_used_bytes: u64,
        mem_free_bytes: u64,
        mem_total_bytes: u64,
        /// None when NVML does not report it (MIG slices, some older boards): never a made-up 0.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        gpu_util_pct: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mem_util_pct: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        temperature_c: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        power_w: Option<f64>,
        /// GPU memory held by the server's own processes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        server_mem_bytes: Option<u64>,
    },
    /// GPUs were not sampled (no driver, `--gpu off`), or one stopped answering mid-run: `device`
    /// names the GPU that disappeared, None means the whole backend.
    GpuUnavailable {
        reason: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        device: Option<u32>,
    },
    /// A user-declared gauge (soak).
    Gauge {
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        value: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// One invariant checked at one progress interval (soak).
    Invariant {
        interval: u32,
        name: String,
        ok: bool,
        detail: String,
    },
    /// A progress interval closed (soak).
    Interval { index: u32, requests: u64 },
    /// An MCP client opened its session (the `initialize` handshake): timed apart from tool calls,
    /// never mixed into their latency. `worker` is the ladder worker (stdio: the one shared client).
    McpSession {
        worker: u32,
        /// `stdio` or `http`.
        transport: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        protocol_version: Option<String>,
        /// Whether the server gave an `Mcp-Session-Id` (streamable HTTP, stateful).
        #[serde(default)]
        session: bool,
        duration_s: f64,
        ok: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
}

/// Analysis's unit tests build requests with only these set.
#[cfg(test)]
impl Event {
    pub fn bare_request(
        id: u64,
        group: &str,
        start_s: f64,
        duration_s: f64,
        outcome: Outcome,
    ) -> Event {
        Event::Request {
            id,
            group: group.into(),
            worker: 0,
            start_s,
            duration_s,
            outcome,
            status: None,
            scheduled_s: None,
            detail: None,
            body_bytes: None,
            body_cut: false,
            connect_s: None,
            headers_s: None,
            handshake_s: None,
            lag_s: None,
            rpc_id: None,
        }
    }
}

impl Event {
    /// Lifecycle events are written through at once; losing one would change a verdict.
    pub fn is_lifecycle(&self) -> bool {
        !matches!(
            self,
            Event::Request { .. }
                | Event::ProcSample { .. }
                | Event::ContainerSample { .. }
                | Event::GpuSample { .. }
                | Event::Gauge { .. }
        )
    }
    /// Lifecycle events are also kept in memory for producers to ask about, except the ones a soak
    /// writes every interval: a day-long soak must not grow witness's memory by them.
    pub fn is_retained(&self) -> bool {
        !matches!(
            self,
            Event::Interval { .. }
                | Event::Invariant { .. }
                | Event::Health { .. }
                | Event::Output { .. }
        )
    }
    pub fn kind(&self) -> &'static str {
        match self {
            Event::Spawn { .. } => "spawn",
            Event::Exit { .. } => "exit",
            Event::Log { .. } => "log",
            Event::Output { .. } => "output",
            Event::Listening { .. } => "listening",
            Event::SignalSent { .. } => "signal_sent",
            Event::Restart { .. } => "restart",
            Event::Leak { .. } => "leak",
            Event::WorkerStart { .. } => "worker_start",
            Event::WorkerExit { .. } => "worker_exit",
            Event::Helpers { .. } => "helpers",
            Event::Ready { .. } => "ready",
            Event::Fault { .. } => "fault",
            Event::Note { .. } => "note",
            Event::Settings(_) => "settings",
            Event::End { .. } => "end",
            Event::Resolved { .. } => "resolved",
            Event::ConnectFloor { .. } => "connect_floor",
            Event::Health { .. } => "health",
            Event::LevelStart { .. } => "level_start",
            Event::LevelEnd { .. } => "level_end",
            Event::Listen { .. } => "listen",
            Event::Request { .. } => "request",
            Event::ProcSample { .. } => "proc_sample",
            Event::ContainerSample { .. } => "container_sample",
            Event::GpuSample { .. } => "gpu_sample",
            Event::GpuUnavailable { .. } => "gpu_unavailable",
            Event::Gauge { .. } => "gauge",
            Event::Invariant { .. } => "invariant",
            Event::Interval { .. } => "interval",
            Event::McpSession { .. } => "mcp_session",
            Event::RateLevel { .. } => "rate_level",
            Event::Connections { .. } => "connections",
            Event::Search { .. } => "search",
            Event::Replay { .. } => "replay",
            Event::ReplayLevel { .. } => "replay_level",
            Event::Answers { .. } => "answers",
        }
    }
}

/// One journal line after the header.
/// One program's processes below the server in one reading of its tree.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Kin {
    /// The program and its first words as one of them runs ("sleep 600"), or the kernel's name for
    /// it when every one is a zombie.
    pub command: String,
    pub count: u64,
    /// Of `count`, ended but never reaped by their parent.
    #[serde(default)]
    pub zombies: u64,
    #[serde(default)]
    pub rss_bytes: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Record {
    pub t_s: f64,
    #[serde(flatten)]
    pub event: Event,
    /// In a merged journal: which of the header's `sources` this record came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<u16>,
}

struct Sink {
    out: BufWriter<File>,
    dirty: bool,
    error: Option<String>,
    /// Events not written because the journal had already failed.
    lost: u64,
}

struct Inner {
    sink: Mutex<Sink>,
    /// Lifecycle events kept in memory too (few, and producers ask about them while running).
    lifecycle: Mutex<Vec<Record>>,
    /// The last lines of each server output stream, matched or not: what a start-up failure shows.
    /// Per stream: its last bytes, and when (the run's clock) it was last written.
    tails: Mutex<Vec<(Stream, Vec<u8>, f64)>>,
    clock: RunClock,
    path: PathBuf,
    /// Secret values as they would appear inside a JSON string: every line is scrubbed of them
    /// before it is written, whoever produced it (a request's error text, a server's log line).
    redact: std::sync::OnceLock<Vec<Finder>>,
    /// Set once, when a write or flush first fails: "at t=…s: why". Producers stop on it.
    failure: tokio::sync::watch::Sender<Option<String>>,
}

/// The writer handle; cheap to clone and share between producers.
#[derive(Clone)]
pub struct Journal {
    inner: Arc<Inner>,
}

impl Journal {
    /// Creates the file the user named (never through a symlink, and never creating folders: a
    /// missing folder is a usage error naming `--journal`), writes the header, and starts the
    /// background flusher. The run's secrets ([`crate::secrets`]) are scrubbed from every line,
    /// the header's argv included.
    pub fn create(path: &Path, header: &Header) -> anyhow::Result<Self> {
        Self::create_file(path, header, false)
    }

    /// Like [`Journal::create`] for a name witness chose: the file must not exist yet.
    pub fn create_new(path: &Path, header: &Header) -> anyhow::Result<Self> {
        Self::create_file(path, header, true)
    }

    fn create_file(path: &Path, header: &Header, exclusive: bool) -> anyhow::Result<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.is_dir() {
                return Err(crate::error::usage(format!(
                    "--journal {}: the folder {} does not exist; create it or choose another path",
                    path.display(),
                    dir.display()
                )));
            }
        }
        if path.is_dir() {
            return Err(crate::error::usage(format!(
                "--journal {} is a folder; give a file name inside it",
                path.display()
            )));
        }
        let opened = if exclusive {
            crate::files::create_new(path)
        } else {
            crate::files::create_named(path)
        };
        let file = opened.map_err(|e| {
            crate::error::usage(format!(
                "--journal {}: could not create the journal: {e}",
                path.display()
            ))
        })?;
        let redact = std::sync::OnceLock::new();
        let forms = json_forms(crate::secrets::values())?;
        if !forms.is_empty() {
            let _ = redact.set(forms);
        }
        let mut head = serde_json::to_vec(header)?;
        if let Some(forms) = redact.get() {
            head = scrub(head, forms);
        }
        let mut out = BufWriter::with_capacity(256 * 1024, file);
        out.write_all(&head)?;
        out.write_all(b"\n")?;
        out.flush()
            .with_context(|| format!("writing the journal {}", path.display()))?;
        let inner = Arc::new(Inner {
            sink: Mutex::new(Sink {
                out,
                dirty: false,
                error: None,
                lost: 0,
            }),
            lifecycle: Mutex::new(Vec::new()),
            tails: Mutex::new(Vec::new()),
            clock: RunClock::start(),
            path: path.to_owned(),
            redact,
            failure: tokio::sync::watch::channel(None).0,
        });
        spawn_flusher(Arc::downgrade(&inner));
        Ok(Self { inner })
    }

    pub fn clock(&self) -> RunClock {
        self.inner.clock
    }
    pub fn now_s(&self) -> f64 {
        self.inner.clock.now_s()
    }
    /// Most lines [`Journal::tail`] gives per stream.
    pub const TAIL_LINES: usize = 8;
    /// Raw bytes kept per stream for [`Journal::tail`]: plenty for eight lines of a dying server's
    /// words, and a copy small enough to make per read of a flood.
    const TAIL_BYTES: usize = 4096;
    /// Longest line [`Journal::tail`] gives, in characters.
    const TAIL_LINE: usize = 300;

    /// Keeps the end of what the server wrote on `stream` (raw bytes, parsed into lines only when
    /// asked): a line whose newline comes in a later read is whole again, and a flood costs a
    /// bounded copy per read.
    pub fn keep_tail(&self, stream: Stream, bytes: &[u8]) {
        let now = self.now_s();
        let mut t = self.inner.tails.lock().unwrap_or_else(|e| e.into_inner());
        let i = match t.iter().position(|(s, _, _)| *s == stream) {
            Some(i) => i,
            None => {
                t.push((stream, Vec::new(), now));
                t.len() - 1
            }
        };
        t[i].2 = now;
        let v = &mut t[i].1;
        v.extend_from_slice(&bytes[bytes.len().saturating_sub(Self::TAIL_BYTES)..]);
        if v.len() > Self::TAIL_BYTES {
            let cut = v.len() - Self::TAIL_BYTES;
            v.drain(..cut);
        }
    }

    /// The server's last output lines per stream, oldest first (not journalled: said where needed).
    pub fn tail(&self) -> Vec<(Stream, Vec<String>)> {
        let t = self.inner.tails.lock().unwrap_or_else(|e| e.into_inner());
        t.iter()
            .map(|(s, raw, _)| {
                let text = String::from_utf8_lossy(raw);
                let mut lines: Vec<String> = text
                    .rsplit('\n')
                    .map(|l| {
                        l.trim_end()
                            .chars()
                            .take(Self::TAIL_LINE)
                            .collect::<String>()
                    })
                    .filter(|l| !l.is_empty())
                    .take(Self::TAIL_LINES)
                    .collect();
                lines.reverse();
                (*s, lines)
            })
            .collect()
    }

    /// The last line the server wrote since `since_s` (the run's clock), stderr first, a JSON-RPC
    /// message never: its last words before an exit, masked of the run's secrets.
    pub fn last_line_since(&self, since_s: f64) -> Option<(Stream, String)> {
        let fresh: Vec<Stream> = {
            let t = self.inner.tails.lock().unwrap_or_else(|e| e.into_inner());
            t.iter()
                .filter(|(_, raw, at)| *at >= since_s && !raw.is_empty())
                .map(|(s, _, _)| *s)
                .collect()
        };
        let tails = self.tail();
        [Stream::Stderr, Stream::Stdout]
            .into_iter()
            .filter(|s| fresh.contains(s))
            .find_map(|s| {
                let (_, lines) = tails.iter().find(|(t, _)| *t == s)?;
                let last = lines.last()?;
                let jsonrpc = last.trim_start().starts_with('{') && last.contains("\"jsonrpc\"");
                (!jsonrpc).then(|| (s, crate::secrets::scrub(last).into_owned()))
            })
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// From now on, every line written has these values replaced by `***` (set once, before any
    /// producer could see a secret). Values shorter than 4 bytes are refused: scrubbing them would
    /// mangle ordinary text and hide nothing.
    pub fn redact(&self, secrets: &[String]) -> anyhow::Result<()> {
        let forms = json_forms(secrets)?;
        // Set at creation from the run's secrets: asking again for the same (or fewer) is fine.
        if let Some(set) = self.inner.redact.get() {
            if forms
                .iter()
                .all(|f| set.iter().any(|g| g.needle() == f.needle()))
            {
                return Ok(());
            }
        }
        self.inner
            .redact
            .set(forms)
            .map_err(|_| anyhow::anyhow!("the journal's redactions were already set"))
    }

    /// `text` scrubbed of this journal's secrets, for a line witness prints about the run.
    pub fn scrub_text(&self, text: &str) -> String {
        match self.inner.redact.get() {
            Some(_) => crate::secrets::scrub(text).into_owned(),
            None => text.to_string(),
        }
    }

    /// Appends one event stamped `t_s`. Encoding (into a reused per-thread buffer) and scrubbing
    /// happen outside the lock; under it the line is only copied into the file's buffer.
    pub fn emit_at(&self, t_s: f64, event: Event) {
        thread_local! {
            static LINE: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        let lifecycle = event.is_lifecycle();
        let rec = Record {
            t_s: micros(t_s),
            event,
            origin: None,
        };
        LINE.with(|cell| {
            // Never re-entered (nothing here emits), but a fresh buffer is the safe answer if it were.
            let mut fresh = Vec::new();
            let mut held = cell.try_borrow_mut();
            let line = match held.as_deref_mut() {
                Ok(l) => l,
                Err(_) => &mut fresh,
            };
            line.clear();
            if let Err(e) = codec::encode(&rec, line) {
                crate::errln!("witness: could not encode a journal event: {e}");
                return;
            }
            if let Some(forms) = self.inner.redact.get() {
                scrub_in_place(line, forms);
            }
            line.push(b'\n');
            self.append(line, lifecycle);
            // One huge line (a long log line) must not keep its buffer alive for the whole run.
            if line.capacity() > 64 * 1024 {
                *line = Vec::new();
            }
        });
        if lifecycle && rec.event.is_retained() {
            self.inner
                .lifecycle
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(rec);
        }
    }

    /// Copies one finished line into the file's buffer; a lifecycle line is written through.
    fn append(&self, line: &[u8], lifecycle: bool) {
        let mut sink = self.inner.sink.lock().unwrap_or_else(|p| p.into_inner());
        if sink.error.is_some() {
            // Nothing more reaches a failed journal; count what is lost so the run can say so.
            sink.lost += 1;
            return;
        }
        let res =
            sink.out.write_all(line).and_then(
                |_| {
                    if lifecycle {
                        sink.out.flush()
                    } else {
                        Ok(())
                    }
                },
            );
        sink.dirty = !lifecycle;
        if let Err(e) = res {
            sink.lost += 1;
            self.inner.failed(&mut sink, &e);
        }
    }

    /// Appends one event stamped now.
    pub fn emit(&self, event: Event) -> f64 {
        let t = self.now_s();
        self.emit_at(t, event);
        t
    }

    /// The lifecycle events so far, in the order they were written.
    pub fn lifecycle(&self) -> Vec<Record> {
        self.inner
            .lifecycle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Flushes whatever is buffered; returns [`JournalLost`] if any write failed.
    pub fn flush(&self) -> anyhow::Result<()> {
        let mut sink = self.inner.sink.lock().unwrap_or_else(|p| p.into_inner());
        if sink.error.is_none() {
            if let Err(e) = sink.out.flush() {
                self.inner.failed(&mut sink, &e);
            }
        }
        sink.dirty = false;
        if let Some(e) = &sink.error {
            return Err(JournalLost {
                path: self.inner.path.clone(),
                why: e.clone(),
                lost: sink.lost,
            }
            .into());
        }
        Ok(())
    }

    /// Changes to Some("at t=…s: why") when the journal first fails to write: a run stops on it.
    pub fn failure(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        self.inner.failure.subscribe()
    }
}

pub use crate::error::JournalLost;

impl Inner {
    /// Records the first write failure, says it once on stderr, and wakes whoever stops the run.
    fn failed(&self, sink: &mut Sink, e: &std::io::Error) {
        if sink.error.is_some() {
            return;
        }
        let why = format!("at t={:.3}s: {e}", self.clock.now_s());
        crate::errln!(
            "witness: writing the journal {} failed {why}",
            self.path.display()
        );
        sink.error = Some(why.clone());
        self.failure.send_replace(Some(why));
    }
}

/// A secret's form inside a JSON string, with its searcher built once (not once per line).
type Finder = memchr::memmem::Finder<'static>;

/// Secret values as they appear inside a JSON string, longest first; values too short to scrub
/// safely are refused.
fn json_forms(secrets: &[String]) -> anyhow::Result<Vec<Finder>> {
    let mut forms = Vec::new();
    for s in secrets {
        anyhow::ensure!(
            s.len() >= crate::secrets::MIN_LEN,
            "a secret of {} bytes is too short to keep out of the journal",
            s.len()
        );
        let quoted = serde_json::to_string(s)?;
        forms.push(quoted.as_bytes()[1..quoted.len() - 1].to_vec());
    }
    forms.sort_by_key(|f| std::cmp::Reverse(f.len()));
    Ok(forms
        .iter()
        .map(|f| memchr::memmem::Finder::new(f).into_owned())
        .collect())
}

/// Replaces every occurrence of each form with `***`.
fn scrub(mut line: Vec<u8>, forms: &[Finder]) -> Vec<u8> {
    scrub_in_place(&mut line, forms);
    line
}

/// [`scrub`] on a buffer that is kept: a line without a secret is only searched, never copied.
fn scrub_in_place(line: &mut Vec<u8>, forms: &[Finder]) {
    for f in forms {
        if f.find(line).is_none() {
            continue;
        }
        let mut out = Vec::with_capacity(line.len());
        let mut last = 0;
        for at in f.find_iter(line) {
            if at < last {
                continue;
            }
            out.extend_from_slice(&line[last..at]);
            out.extend_from_slice(b"***");
            last = at + f.needle().len();
        }
        out.extend_from_slice(&line[last..]);
        *line = out;
    }
}

fn spawn_flusher(inner: Weak<Inner>) {
    std::thread::Builder::new()
        .name("journal-flush".into())
        .spawn(move || loop {
            std::thread::sleep(FLUSH_EVERY);
            let Some(inner) = inner.upgrade() else { return };
            let mut sink = inner.sink.lock().unwrap_or_else(|p| p.into_inner());
            if sink.dirty && sink.error.is_none() {
                if let Err(e) = sink.out.flush() {
                    inner.failed(&mut sink, &e);
                }
                sink.dirty = false;
            }
        })
        .expect("spawning the journal flusher");
}

/// A journal read back from disk.
#[derive(Clone, Debug)]
pub struct Loaded {
    pub header: Header,
    pub records: Vec<Record>,
    /// Set when the last line was cut off mid-write (witness was killed): says where.
    pub truncated: Option<String>,
    /// Lines in the middle that could not be read, with their numbers; kept out of the analysis.
    pub skipped: Vec<String>,
}

impl Loaded {
    /// The run's last timestamp seen.
    pub fn end_s(&self) -> f64 {
        self.records.iter().map(|r| r.t_s).fold(0.0, f64::max)
    }
    /// The run ended without an `end` event or mid-line: what every view labels "partial".
    pub fn is_partial(&self) -> bool {
        self.truncated.is_some()
            || !self
                .records
                .iter()
                .any(|r| matches!(r.event, Event::End { partial: false, .. }))
    }
}

/// Reads a journal, tolerating a cut-off last line.
pub fn read(path: &Path) -> anyhow::Result<Loaded> {
    let file =
        File::open(path).with_context(|| format!("opening the journal {}", path.display()))?;
    read_from(BufReader::new(file))
        .with_context(|| format!("reading the journal {}", path.display()))
}

pub fn read_from(mut input: impl BufRead) -> anyhow::Result<Loaded> {
    let mut first = String::new();
    input.read_line(&mut first)?;
    let header: Header = serde_json::from_str(first.trim_end()).map_err(|e| {
        anyhow::anyhow!("its first line is not a witness journal header ({e}); is this a journal?")
    })?;
    let mut records = Vec::new();
    let mut skipped = Vec::new();
    let mut truncated = None;
    let mut buf = Vec::new();
    let mut lineno = 1;
    loop {
        buf.clear();
        let n = input.read_until(b'\n', &mut buf)?;
        if n == 0 {
            break;
        }
        lineno += 1;
        let complete = buf.last() == Some(&b'\n');
        let text = String::from_utf8_lossy(&buf);
        let text = text.trim_end();
        if text.is_empty() {
            continue;
        }
        match codec::decode(text.as_bytes()) {
            Ok(r) => records.push(r),
            Err(_) if !complete => {
                truncated = Some(format!(
                    "line {lineno} was cut off mid-write ({} bytes kept out); witness was probably killed",
                    buf.len()
                ));
            }
            Err(e) => skipped.push(format!("line {lineno}: {e}")),
        }
    }
    Ok(Loaded {
        header,
        records,
        truncated,
        skipped,
    })
}

/// The default journal name in `dir` (a per-user folder, [`crate::files::state_dir`]), named for
/// the mode and time; `attempt` > 0 adds a suffix when that name is taken.
pub fn default_path(dir: &Path, mode: &str, attempt: u32) -> PathBuf {
    let stamp = humantime::format_rfc3339_seconds(SystemTime::now())
        .to_string()
        .replace([':', '-'], "");
    let suffix = if attempt > 0 {
        format!("-{attempt}")
    } else {
        String::new()
    };
    dir.join(format!(
        "witness-{mode}-{}-{}{suffix}.jsonl",
        stamp.trim_end_matches('Z'),
        std::process::id()
    ))
}

/// "1.5s", "90s", "2m", "250ms": durations for humans.
/// Bytes for humans, in binary units as memory is sold: "512 B", "1.5 MiB", "79.6 GiB".
pub fn bytes(b: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b;
    let mut u = 0;
    while v.abs() >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

pub fn secs(s: f64) -> String {
    if s >= 120.0 && (s % 60.0).abs() < 1e-9 {
        format!("{}m", (s / 60.0) as u64)
    } else if s >= 1.0 || s == 0.0 {
        let t = format!("{s:.2}");
        let t = t.trim_end_matches('0').trim_end_matches('.');
        format!("{t}s")
    } else {
        format!("{}ms", micros(s * 1000.0).round() as u64)
    }
}

/// Latency as the soak counts it: from when the request was due, if it went late.
pub fn latency_s(start_s: f64, duration_s: f64, scheduled_s: Option<f64>) -> f64 {
    match scheduled_s {
        Some(due) => duration_s + (start_s - due).max(0.0),
        None => duration_s,
    }
}

/// An arrival rate in words: "200/s", "0.5/s", "137.5/s".
pub fn rate_words(per_s: f64) -> String {
    let t = format!("{per_s:.2}");
    let t = t.trim_end_matches('0').trim_end_matches('.');
    format!("{t}/s")
}

/// A replay's speed in words: "2×", "0.5×", "1.25×".
pub fn speed_words(speed: f64) -> String {
    let t = format!("{speed:.2}");
    let t = t.trim_end_matches('0').trim_end_matches('.');
    format!("{t}×")
}

/// A level as the lines about it name it: "8" (workers) or "200/s" (an open-loop level).
pub fn level_name(concurrency: u32, rate: Option<f64>) -> String {
    match rate {
        Some(r) => rate_words(r),
        None => concurrency.to_string(),
    }
}

/// The request group a level's requests carry.
pub fn group_of_level(index: u32) -> String {
    format!("level{index}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Event> {
        vec![
            Event::Spawn {
                pid: 10,
                start_time: 99,
                command: vec!["srv".into()],
                attempt: 0,
                container_id: None,
            },
            Event::Request {
                id: 1,
                group: "L1".into(),
                worker: 0,
                start_s: 0.5,
                duration_s: 0.25,
                outcome: Outcome::Timeout {
                    phase: TimeoutPhase::Request,
                    limit_s: 30.0,
                },
                status: None,
                scheduled_s: None,
                detail: None,
                body_bytes: None,
                body_cut: false,
                connect_s: None,
                headers_s: None,
                handshake_s: None,
                lag_s: None,
                rpc_id: None,
            },
            Event::Health {
                url: "http://127.0.0.1:1/health".into(),
                purpose: "before".into(),
                probe: Probe {
                    status: Some(200),
                    error: None,
                    duration_s: 0.001,
                    connected: false,
                },
            },
        ]
    }

    #[test]
    fn events_round_trip_through_a_file() {
        let dir = tempdir();
        let path = dir.join("j.jsonl");
        let j = Journal::create(&path, &Header::new("wrap", vec!["witness".into()])).unwrap();
        for e in sample() {
            j.emit(e);
        }
        j.flush().unwrap();
        let loaded = read(&path).unwrap();
        assert_eq!(loaded.header.mode, "wrap");
        let events: Vec<Event> = loaded.records.into_iter().map(|r| r.event).collect();
        assert_eq!(events, sample());
        assert!(loaded.truncated.is_none());
    }

    #[test]
    fn a_line_cut_off_mid_write_is_reported_not_fatal() {
        let header = serde_json::to_string(&Header::new("load", vec![])).unwrap();
        let good = r#"{"t_s":1.0,"kind":"note","level":"info","text":"x"}"#;
        let text = format!("{header}\n{good}\n{{\"t_s\":2.0,\"kind\":\"no");
        let loaded = read_from(text.as_bytes()).unwrap();
        assert_eq!(loaded.records.len(), 1);
        assert!(loaded.truncated.as_ref().unwrap().contains("line 3"));
        assert!(loaded.is_partial());
    }

    #[test]
    fn a_redacted_secret_never_reaches_the_file_whoever_wrote_it() {
        let dir = tempdir();
        let path = dir.join("j.jsonl");
        let j = Journal::create(&path, &Header::new("soak", vec!["witness".into()])).unwrap();
        j.redact(&["s3cr\"et-token".into()]).unwrap();
        j.emit(Event::Note {
            level: "warn".into(),
            text: "header was Bearer s3cr\"et-token and s3cr\"et-token again".into(),
        });
        let request = |detail: &str| Event::Request {
            id: 1,
            group: "L1".into(),
            worker: 0,
            start_s: 0.5,
            duration_s: 0.25,
            outcome: Outcome::Error {
                error: ErrorKind::Http4xx,
                status: Some(401),
            },
            status: Some(401),
            scheduled_s: None,
            detail: Some(detail.into()),
            body_bytes: None,
            body_cut: false,
            connect_s: None,
            headers_s: None,
            handshake_s: None,
            lag_s: None,
            rpc_id: None,
        };
        j.emit_at(0.75, request("401: token s3cr\"et-token refused"));
        j.flush().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("s3cr"), "{text}");
        let loaded = read(&path).unwrap();
        assert_eq!(
            loaded.records[0].event,
            Event::Note {
                level: "warn".into(),
                text: "header was Bearer *** and *** again".into()
            }
        );
        assert_eq!(loaded.records[1].event, request("401: token *** refused"));
        assert!(j.redact(&["abcd".into()]).is_err(), "set once");
        let k = Journal::create(&dir.join("k.jsonl"), &Header::new("soak", vec![])).unwrap();
        assert!(k.redact(&["abc".into()]).is_err(), "too short to scrub");
    }

    #[test]
    fn a_file_that_is_not_a_journal_says_so() {
        let err = read_from("hello\n".as_bytes()).unwrap_err();
        assert!(format!("{err:#}").contains("not a witness journal header"));
    }

    #[test]
    fn t_s_is_kept_to_the_microsecond() {
        assert_eq!(micros(1.23456789), 1.234568);
    }

    #[test]
    fn durations_read_like_a_person_wrote_them() {
        assert_eq!(secs(90.0), "90s");
        assert_eq!(secs(1.5), "1.5s");
        assert_eq!(secs(0.25), "250ms");
        assert_eq!(secs(300.0), "5m");
    }

    /// What one request record costs to journal, the old way (serde with `flatten`, a fresh
    /// `Vec` per line) and now, in turns in one process:
    /// `cargo test --release --lib emit_cost -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn emit_cost() {
        const N: u64 = 1_000_000;
        let dir = tempdir();
        let ev = |id: u64| Event::Request {
            id,
            group: "level4".into(),
            worker: (id % 64) as u32,
            start_s: micros(id as f64 * 1e-5),
            duration_s: 0.000123456 + (id % 1000) as f64 * 1e-9,
            outcome: Outcome::Ok,
            status: Some(200),
            scheduled_s: None,
            detail: None,
            body_bytes: Some(2),
            body_cut: false,
            connect_s: None,
            headers_s: None,
            handshake_s: None,
            lag_s: None,
            rpc_id: None,
        };
        // The old emit path, as it was: serialise with serde into a fresh Vec, scrub, lock, write.
        let old = |path: &Path| {
            let sink = Mutex::new(BufWriter::with_capacity(
                256 * 1024,
                File::create(path).unwrap(),
            ));
            let forms: Vec<Vec<u8>> = vec![b"s3cret-token".to_vec()];
            // The old scrub: a searcher built per line and form.
            let scrub = |line: Vec<u8>, forms: &[Vec<u8>]| {
                let mut line = line;
                for f in forms {
                    if memchr::memmem::find(&line, f).is_none() {
                        continue;
                    }
                    let mut out = Vec::with_capacity(line.len());
                    let mut last = 0;
                    for at in memchr::memmem::find_iter(&line, f) {
                        if at < last {
                            continue;
                        }
                        out.extend_from_slice(&line[last..at]);
                        out.extend_from_slice(b"***");
                        last = at + f.len();
                    }
                    out.extend_from_slice(&line[last..]);
                    line = out;
                }
                line
            };
            let t = Instant::now();
            for id in 0..N {
                let rec = Record {
                    t_s: micros(id as f64 * 1e-5 + 0.000123),
                    event: ev(id),
                    origin: None,
                };
                let mut line = serde_json::to_vec(&rec).unwrap();
                line = scrub(line, &forms);
                line.push(b'\n');
                sink.lock().unwrap().write_all(&line).unwrap();
            }
            sink.lock().unwrap().flush().unwrap();
            t.elapsed()
        };
        let new = |path: &Path| {
            let j = Journal::create(path, &Header::new("load", vec![])).unwrap();
            j.redact(&["s3cret-token".into()]).unwrap();
            let t = Instant::now();
            for id in 0..N {
                j.emit_at(id as f64 * 1e-5 + 0.000123, ev(id));
            }
            j.flush().unwrap();
            t.elapsed()
        };
        let (mut olds, mut news) = (Vec::new(), Vec::new());
        for round in 0..7 {
            let (a, b) = (dir.join("old.jsonl"), dir.join("new.jsonl"));
            let to = old(&a);
            let tn = new(&b);
            let per = |d: Duration| d.as_nanos() as f64 / N as f64;
            let size = |p: &Path| std::fs::metadata(p).unwrap().len() as f64 / N as f64;
            crate::errln!(
                "round {round}: old {:.0} ns/record {:.1} B/record, new {:.0} ns/record {:.1} B/record, old/new {:.2}",
                per(to),
                size(&a),
                per(tn),
                size(&b),
                per(to) / per(tn)
            );
            olds.push(per(to));
            news.push(per(tn));
        }
        let min = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
        crate::errln!(
            "best of 7: old {:.0} ns/record, new {:.0} ns/record, old/new {:.2}",
            min(&olds),
            min(&news),
            min(&olds) / min(&news)
        );
        let back = read(&dir.join("new.jsonl")).unwrap();
        assert_eq!(back.records.len() as u64, N);
        let _ = std::fs::remove_dir_all(&dir);
    }

    pub(crate) fn tempdir() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "witness-test-{}-{}",
            std::process::id(),
            rand::random::<u64>()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}
