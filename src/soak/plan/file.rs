//! The plan file as written: every table and key with its default, positions kept for errors.

use super::*;

pub(super) fn d(s: u64) -> Dur {
    Dur(Duration::from_secs(s))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanFile {
    /// How long the workload runs; `--duration` overrides.
    pub duration: Option<Dur>,
    /// The progress interval: invariants, gauges and the progress line; `--interval` overrides.
    pub interval: Option<Dur>,
    /// Seeds every random choice; `--seed` overrides.
    pub seed: Option<u64>,
    /// witness's own limit on one whole request.
    #[serde(default = "default_timeout")]
    pub timeout: Dur,
    pub connect_timeout: Option<Dur>,
    /// witness's own limit on one invariant check or gauge reading.
    #[serde(default = "default_check_timeout")]
    pub check_timeout: Dur,
    /// How long drain gauges get to reach zero after the workload stops.
    #[serde(default = "default_grace")]
    pub drain_grace: Dur,
    /// How long the server gets to come back, healthy, after an injected fault.
    #[serde(default = "default_grace")]
    pub fault_grace: Dur,
    /// Failed (not rejected) requests allowed outside fault windows, as a fraction of the requests
    /// that were not rejected.
    #[serde(default = "zero_rate")]
    pub max_error_rate: Spanned<f64>,
    /// Thresholds the soak must meet, as `--assert` writes them.
    #[serde(default)]
    pub asserts: Vec<Spanned<String>>,
    #[serde(default = "default_reject_status")]
    pub reject_status: Vec<u16>,
    #[serde(default = "default_reject_body")]
    pub reject_body: String,
    pub target: TargetSpec,
    #[serde(default)]
    pub secrets: BTreeMap<String, Spanned<SecretRef>>,
    #[serde(default)]
    pub kinds: BTreeMap<String, Spanned<KindSpec>>,
    #[serde(default)]
    pub drivers: Vec<Spanned<DriverSpec>>,
    #[serde(default)]
    pub readers: Vec<Spanned<ReaderSpec>>,
    #[serde(default)]
    pub background: Vec<Spanned<BackgroundSpec>>,
    #[serde(default)]
    pub invariants: InvariantSpec,
    #[serde(default)]
    pub checks: Vec<Spanned<CheckSpec>>,
    #[serde(default)]
    pub gauges: Vec<Spanned<GaugeSpec>>,
}

pub(super) fn zero_rate() -> Spanned<f64> {
    Spanned::new(0..0, 0.0)
}
pub(super) fn empty_body() -> Spanned<String> {
    Spanned::new(0..0, String::new())
}
pub(super) fn default_timeout() -> Dur {
    d(30)
}
pub(super) fn default_check_timeout() -> Dur {
    d(2)
}
pub(super) fn default_grace() -> Dur {
    d(30)
}
pub(super) fn default_reject_status() -> Vec<u16> {
    vec![429, 503]
}
pub(super) fn default_reject_body() -> String {
    "QUEUE_FULL".into()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetSpec {
    /// `http://127.0.0.1:8000`: kinds' paths are joined to it. `--base-url` overrides. None with
    /// `transport = "stdio"`.
    pub base_url: Option<Spanned<String>>,
    /// The health path or URL; built-in invariant "health" wants 200 from it. Unset: `/health`,
    /// or MCP `ping` for a plan of MCP kinds (see the module's words).
    pub health: Option<Spanned<String>>,
    /// With a command: how long the server gets to answer health 200 before the soak starts.
    #[serde(default = "default_grace")]
    pub ready_timeout: Dur,
    /// How MCP kinds reach the server: `"http"` (streamable HTTP, the default) or `"stdio"` (the
    /// stdin/stdout of the server witness starts from the command after `--`).
    pub transport: Option<Spanned<Transport>>,
}

/// How the plan's MCP kinds reach the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    /// Streamable HTTP at each kind's `path` (joined to the base URL) or `url`.
    Http,
    /// The server's own stdin/stdout: one MCP connection per server process, shared by the workers.
    Stdio,
}

/// The plan's word for a stdio target, as messages quote it.
pub(super) const STDIO: &str = "[target] transport = \"stdio\"";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretRef {
    /// The environment variable that holds the value.
    pub secret_env: Option<String>,
    /// A file whose content (trailing newline removed) is the value.
    pub secret_file: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KindSpec {
    #[serde(default = "default_method")]
    pub method: String,
    /// A path joined to the target's base URL...
    pub path: Option<String>,
    /// ...or a whole URL (another service on loopback).
    pub url: Option<String>,
    /// Header values may name secrets: `"Bearer ${secret.gateway}"`.
    #[serde(default)]
    pub headers: BTreeMap<String, Spanned<String>>,
    /// The body template: `${NAME}` takes one of `vars.NAME` per request, `${id}` the request id.
    #[serde(default = "empty_body")]
    pub body: Spanned<String>,
    /// Variants for the body: each request draws one value per variable.
    #[serde(default)]
    pub vars: BTreeMap<String, Vec<String>>,
    /// How often drivers pick this kind relative to the others (0: only by name).
    #[serde(default = "one")]
    pub weight: u32,
    /// An MCP tool call instead of an HTTP request: the tool's name. `path`/`url` is then the
    /// streamable HTTP endpoint (`/mcp`; neither over stdio) and `body` the arguments object's
    /// template.
    #[serde(default)]
    pub mcp: Option<String>,
}

pub(super) fn default_method() -> String {
    "POST".into()
}
pub(super) fn one() -> u32 {
    1
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BurstSpec {
    #[serde(default = "burst_requests")]
    pub requests: CountRange,
    #[serde(default = "burst_gap")]
    pub gap: DurRange,
}
pub(super) fn burst_requests() -> CountRange {
    CountRange { min: 3, max: 6 }
}
pub(super) fn burst_gap() -> DurRange {
    DurRange {
        min: Duration::from_millis(50),
        max: Duration::from_millis(400),
    }
}
impl Default for BurstSpec {
    fn default() -> Self {
        Self {
            requests: burst_requests(),
            gap: burst_gap(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SteadySpec {
    #[serde(default = "steady_requests")]
    pub requests: CountRange,
    #[serde(default = "steady_gap")]
    pub gap: DurRange,
}
pub(super) fn steady_requests() -> CountRange {
    CountRange { min: 3, max: 8 }
}
pub(super) fn steady_gap() -> DurRange {
    DurRange {
        min: Duration::from_millis(1500),
        max: Duration::from_secs(5),
    }
}
impl Default for SteadySpec {
    fn default() -> Self {
        Self {
            requests: steady_requests(),
            gap: steady_gap(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdleSpec {
    #[serde(default = "idle_for", rename = "for")]
    pub for_: DurRange,
}
pub(super) fn idle_for() -> DurRange {
    DurRange {
        min: Duration::from_secs(8),
        max: Duration::from_secs(25),
    }
}
impl Default for IdleSpec {
    fn default() -> Self {
        Self { for_: idle_for() }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Burst,
    Steady,
    Idle,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DriverSpec {
    #[serde(default = "one")]
    pub count: u32,
    /// The kinds this group draws from, by weight; default: every kind with a weight.
    #[serde(default)]
    pub kinds: Vec<Spanned<String>>,
    /// The phases in the order each driver cycles through them.
    #[serde(default = "default_cycle")]
    pub cycle: Vec<Phase>,
    #[serde(default)]
    pub burst: BurstSpec,
    #[serde(default)]
    pub steady: SteadySpec,
    #[serde(default)]
    pub idle: IdleSpec,
}
pub(super) fn default_cycle() -> Vec<Phase> {
    vec![Phase::Burst, Phase::Steady, Phase::Idle]
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReaderSpec {
    #[serde(default = "one")]
    pub count: u32,
    /// The GET endpoints (paths or URLs) each reader polls in turn.
    pub get: Vec<String>,
    /// The pause between polls.
    #[serde(default = "reader_gap")]
    pub gap: DurRange,
    #[serde(default)]
    pub headers: BTreeMap<String, Spanned<String>>,
}
pub(super) fn reader_gap() -> DurRange {
    DurRange {
        min: Duration::from_millis(500),
        max: Duration::from_secs(2),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackgroundSpec {
    #[serde(default = "one")]
    pub count: u32,
    /// The operational kinds each worker calls in turn.
    pub kinds: Vec<Spanned<String>>,
    /// At most one call this often, per worker: the bounded rate.
    pub every: Dur,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InvariantSpec {
    /// The target's health must answer 200 at every interval.
    #[serde(default = "yes")]
    pub health: bool,
    /// The server must be the same process (pid + start time) unless a fault was injected.
    #[serde(default = "yes")]
    pub same_identity: bool,
    /// The server's process tree RSS must stay under this.
    pub rss_limit: Option<Size>,
    /// Log labels that are fatal when a line of the server's output matches them.
    #[serde(default = "default_fatal_labels")]
    pub fatal_labels: Vec<String>,
    /// More patterns that are fatal (regular expressions), labelled "fatal".
    #[serde(default)]
    pub fatal_log: Vec<String>,
}
pub(super) fn yes() -> bool {
    true
}
pub(super) fn default_fatal_labels() -> Vec<String> {
    vec!["panic".into(), "oom".into()]
}
impl Default for InvariantSpec {
    fn default() -> Self {
        Self {
            health: true,
            same_identity: true,
            rss_limit: None,
            fatal_labels: default_fatal_labels(),
            fatal_log: vec![],
        }
    }
}

/// A user invariant: an HTTP GET with an expected status (and a JSON value), or a command that
/// must exit 0.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckSpec {
    pub name: String,
    pub get: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, Spanned<String>>,
    #[serde(default = "status_200")]
    pub status: u16,
    /// A JSON pointer into the body ("/queued"); then `equals`, `max` or `min` says what it must be.
    pub pointer: Option<String>,
    pub equals: Option<serde_json::Value>,
    pub max: Option<f64>,
    pub min: Option<f64>,
    /// argv of a command that must exit 0.
    pub command: Option<Vec<String>>,
}
pub(super) fn status_200() -> u16 {
    200
}

/// A gauge: a value read every interval from an HTTP GET plus a JSON pointer, or from a command's
/// numeric output.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GaugeSpec {
    pub name: String,
    pub get: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, Spanned<String>>,
    pub pointer: Option<String>,
    pub command: Option<Vec<String>>,
    /// The gauge must reach zero within `drain_grace` once the workload stops.
    #[serde(default)]
    pub drain: bool,
}
