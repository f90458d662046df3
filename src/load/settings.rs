//! The load run's settings, below both the ladder and the open loop (which the ladder runs for
//! `--rates` levels): what a level sends and how, validated.

use std::time::Duration;

use hyper::Uri;

use super::client::{Limits, RequestSpec};
use super::mcp::{McpTarget, ToolCall};
use super::outcome::Rejection;

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
    pub replay: Option<std::sync::Arc<super::replay::Replay>>,
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
