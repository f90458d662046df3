//! The load run's settings, below both the ladder and the open loop (which the ladder runs for
//! `--rates` levels): what a level sends and how, validated; for `witness replay`, the recording
//! made ready to play (its calls, their kinds and what was recorded of their answers).

use std::time::Duration;

use bytes::Bytes;
use hyper::{HeaderMap, Method, Uri};
use serde_json::Value;

use super::client::{Limits, RequestSpec};
use super::mcp::{McpTarget, ToolCall};
use super::outcome::Rejection;
use crate::analyze::answers::{Compare, Said};
use crate::journal::{Event, ReplayName};

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
    /// `--http2`: the streams of a level share this many connections.
    pub http2: Option<u32>,
    /// Open-loop levels (`--rates`): how their schedules are made.
    pub open: Option<OpenConfig>,
    /// `witness replay`: the recording each level plays, at the level's speed (its "rate").
    pub replay: Option<std::sync::Arc<Replay>>,
}

/// How the sends of a rate level are spaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrivals {
    /// Evenly: one every 1/rate seconds.
    Constant,
    /// A Poisson process: exponential gaps of mean 1/rate, drawn from the seed.
    Poisson,
}

impl Arrivals {
    pub fn name(self) -> &'static str {
        match self {
            Arrivals::Constant => "constant",
            Arrivals::Poisson => "poisson",
        }
    }
}

/// How long a rate level sends when --duration is not given.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(10);

/// The open loop's settings, validated.
#[derive(Clone, Debug)]
pub struct OpenConfig {
    pub arrivals: Arrivals,
    pub seed: u64,
    pub max_in_flight: u32,
    /// How long each level's schedule runs.
    pub duration: Duration,
}

/// Resolves once the run is told to stop (never, if the sender is gone without saying so).
pub async fn stopped(stop: &mut tokio::sync::watch::Receiver<bool>) {
    if stop.wait_for(|s| *s).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// How many buckets the recording's pacing is drawn in.
const PACING_BUCKETS: usize = 50;

/// What a replayed call sends.
#[derive(Debug)]
pub enum Send {
    /// A JSON-RPC request over the stdio session.
    Mcp { method: String, params: Value },
    /// An HTTP request.
    Http {
        method: Method,
        uri: Uri,
        headers: HeaderMap,
        body: Bytes,
    },
}

/// One recorded call: when it went (seconds after the first call), its kind (index into
/// [`Replay::names`]), what it sends and what the recording says it got.
#[derive(Debug)]
pub struct Call {
    pub offset_s: f64,
    pub name: usize,
    pub send: Send,
    /// None: no answer was recorded (the recording was cut), so none is compared.
    pub recorded: Option<Said>,
}

/// A recording made ready to play.
#[derive(Debug)]
pub struct Replay {
    pub calls: Vec<Call>,
    pub names: Vec<ReplayName>,
    /// `stdio` or `http`.
    pub transport: &'static str,
    pub sessions: u32,
    pub compare: Compare,
    /// From the first call's send to the last's, as recorded.
    pub span_s: f64,
    pub max_in_flight: u32,
    /// The recorded `initialize` params (stdio), sent as recorded to open the session.
    pub initialize: Option<Value>,
    /// What of the recording is not replayed, in words.
    pub notes: Vec<String>,
}

impl Replay {
    /// The requests one level sends: every call of every session.
    pub fn sends(&self) -> u64 {
        self.calls.len() as u64 * self.sessions as u64
    }

    /// How the sessions are played, in words.
    pub fn sessions_how(&self) -> String {
        match (self.transport, self.sessions) {
            ("stdio", 1) => "one session over stdio, opened with the recorded initialize; request ids are witness's own".into(),
            ("stdio", n) => format!(
                "{n} sessions multiplexed on witness's one stdio session (one server process serves one client), request ids rewritten"
            ),
            (_, 1) => "one session".into(),
            (_, n) => format!("{n} copies of the session at once, on witness's pooled connections"),
        }
    }

    /// The journal's record of the recording played.
    pub fn event(&self, file: &str) -> Event {
        let buckets = if self.span_s > 0.0 { PACING_BUCKETS } else { 1 };
        let bucket_s = if self.span_s > 0.0 {
            self.span_s / PACING_BUCKETS as f64
        } else {
            1.0
        };
        let mut pacing = vec![0u32; buckets];
        for c in &self.calls {
            let at = ((c.offset_s / bucket_s) as usize).min(buckets - 1);
            pacing[at] += self.sessions;
        }
        Event::Replay {
            file: file.into(),
            transport: self.transport.into(),
            sessions: self.sessions,
            sessions_how: self.sessions_how(),
            compare: self.compare.name().into(),
            calls: self.calls.len() as u64,
            span_s: self.span_s,
            names: self.names.clone(),
            pacing,
            bucket_s,
            notes: self.notes.clone(),
        }
    }
}
