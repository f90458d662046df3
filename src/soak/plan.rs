//! The soak plan: a TOML file that declares the target, the request kinds (method, path, headers,
//! body templates with variants, weights), the worker groups (drivers cycling through burst, steady
//! and idle phases; readers polling GET endpoints; background workers at a bounded rate), the
//! invariants, checks and gauges, and secrets by reference only.
//!
//! Parsing is two steps. [`parse`] turns the text into [`PlanFile`] and reports any mistake with the
//! line, the column, the key and how to fix it. [`resolve`] turns that into a [`SoakPlan`] the engine
//! runs: URLs joined and parsed, templates split once, secrets read from the environment or a file.
//! A secret's value lives only in the request's header map (marked sensitive) and in the journal's
//! redaction list; the plan names where to find it and never holds a fallback.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{HeaderMap, Method, Uri};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use toml::Spanned;

use crate::load::client::Limits;
use crate::load::outcome::Rejection;

// ---- values with units ---------------------------------------------------------------------------

/// A duration written the way people write them: "500ms", "2s", "1m30s", or a number of seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dur(pub Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = toml::Value::deserialize(d)?;
        dur_of(&v).map(Dur).map_err(D::Error::custom)
    }
}

fn dur_of(v: &toml::Value) -> Result<Duration, String> {
    match v {
        toml::Value::String(s) => crate::units::parse_duration(s).map_err(|e| {
            if e.contains("write it like") {
                e
            } else {
                format!("{e} (a duration)")
            }
        }),
        toml::Value::Integer(n) if *n >= 0 => Ok(Duration::from_secs(*n as u64)),
        toml::Value::Float(f) if f.is_finite() && *f >= 0.0 => Ok(Duration::from_secs_f64(*f)),
        other => Err(format!(
            "{other} is not a duration; write it like \"500ms\", \"2s\" or \"1m30s\""
        )),
    }
}

/// A range to draw from: `["50ms", "400ms"]`, or one value for a fixed one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DurRange {
    pub min: Duration,
    pub max: Duration,
}

impl<'de> Deserialize<'de> for DurRange {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = toml::Value::deserialize(d)?;
        let (min, max) = match &v {
            toml::Value::Array(a) if a.len() == 2 => (
                dur_of(&a[0]).map_err(D::Error::custom)?,
                dur_of(&a[1]).map_err(D::Error::custom)?,
            ),
            toml::Value::Array(_) => {
                return Err(D::Error::custom(
                    "a range is two durations [min, max], e.g. [\"50ms\", \"400ms\"]",
                ))
            }
            one => {
                let x = dur_of(one).map_err(D::Error::custom)?;
                (x, x)
            }
        };
        if min > max {
            return Err(D::Error::custom(format!(
                "the range starts above its end ({} > {}); write it as [min, max]",
                crate::journal::secs(min.as_secs_f64()),
                crate::journal::secs(max.as_secs_f64())
            )));
        }
        Ok(DurRange { min, max })
    }
}

/// A count range: `[3, 6]`, or one number.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CountRange {
    pub min: u32,
    pub max: u32,
}

impl<'de> Deserialize<'de> for CountRange {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = toml::Value::deserialize(d)?;
        let count = |v: &toml::Value| match v {
            toml::Value::Integer(n) if *n >= 1 && *n <= crate::units::MAX_ROUNDS as i64 => {
                Ok(*n as u32)
            }
            other => Err(D::Error::custom(format!(
                "{other} is not a count; counts are whole numbers from 1 to {}",
                crate::units::MAX_ROUNDS
            ))),
        };
        let (min, max) = match &v {
            toml::Value::Array(a) if a.len() == 2 => (count(&a[0])?, count(&a[1])?),
            toml::Value::Array(_) => {
                return Err(D::Error::custom(
                    "a range is two counts [min, max], e.g. [3, 6]",
                ))
            }
            one => {
                let x = count(one)?;
                (x, x)
            }
        };
        if min > max {
            return Err(D::Error::custom(format!(
                "the range starts above its end ({min} > {max}); write it as [min, max]"
            )));
        }
        Ok(CountRange { min, max })
    }
}

/// A size: bytes, or "512MiB", "2GiB", "300MB".
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Size(pub u64);

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = toml::Value::deserialize(d)?;
        match &v {
            toml::Value::Integer(n) if *n > 0 => Ok(Size(*n as u64)),
            toml::Value::String(s) => crate::units::parse_size(s)
                .map(Size)
                .map_err(D::Error::custom),
            other => Err(D::Error::custom(format!(
                "{other} is not a size; write it like \"512MiB\" or \"2GiB\""
            ))),
        }
    }
}

// ---- the file as written -------------------------------------------------------------------------

fn d(s: u64) -> Dur {
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

fn zero_rate() -> Spanned<f64> {
    Spanned::new(0..0, 0.0)
}
fn empty_body() -> Spanned<String> {
    Spanned::new(0..0, String::new())
}
fn default_timeout() -> Dur {
    d(30)
}
fn default_check_timeout() -> Dur {
    d(2)
}
fn default_grace() -> Dur {
    d(30)
}
fn default_reject_status() -> Vec<u16> {
    vec![429, 503]
}
fn default_reject_body() -> String {
    "QUEUE_FULL".into()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetSpec {
    /// `http://127.0.0.1:8000`: kinds' paths are joined to it. `--base-url` overrides.
    pub base_url: Option<Spanned<String>>,
    /// The health path or URL; built-in invariant "health" wants 200 from it.
    #[serde(default = "default_health")]
    pub health: Spanned<String>,
    /// With a command: how long the server gets to answer health 200 before the soak starts.
    #[serde(default = "default_grace")]
    pub ready_timeout: Dur,
}

fn default_health() -> Spanned<String> {
    Spanned::new(0..0, "/health".into())
}

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
    /// streamable HTTP endpoint (`/mcp`) and `body` the arguments object's template.
    #[serde(default)]
    pub mcp: Option<String>,
}

fn default_method() -> String {
    "POST".into()
}
fn one() -> u32 {
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
fn burst_requests() -> CountRange {
    CountRange { min: 3, max: 6 }
}
fn burst_gap() -> DurRange {
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
fn steady_requests() -> CountRange {
    CountRange { min: 3, max: 8 }
}
fn steady_gap() -> DurRange {
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
fn idle_for() -> DurRange {
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
fn default_cycle() -> Vec<Phase> {
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
fn reader_gap() -> DurRange {
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
fn yes() -> bool {
    true
}
fn default_fatal_labels() -> Vec<String> {
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
fn status_200() -> u16 {
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

// ---- errors --------------------------------------------------------------------------------------

/// A mistake in the plan, located (boxed: it travels in every `Result` of the resolver).
#[derive(Debug, Clone, PartialEq)]
pub struct PlanError(pub Box<Located>);

impl std::ops::Deref for PlanError {
    type Target = Located;
    fn deref(&self) -> &Located {
        &self.0
    }
}

impl std::ops::DerefMut for PlanError {
    fn deref_mut(&mut self) -> &mut Located {
        &mut self.0
    }
}

/// Where and what: line and column (1-based), the key, what is wrong, how to fix it.
#[derive(Debug, Clone, PartialEq)]
pub struct Located {
    pub file: PathBuf,
    pub line: usize,
    pub column: usize,
    /// The key as a dotted path ("drivers.burst.gap"), when it can be told.
    pub key: Option<String>,
    pub message: String,
    pub fix: Option<String>,
    /// The offending line of the plan.
    pub text: String,
}

impl std::fmt::Display for PlanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "plan {}: line {}, column {}",
            self.file.display(),
            self.line,
            self.column
        )?;
        if let Some(k) = &self.key {
            write!(f, ", key `{k}`")?;
        }
        write!(f, ": {}", self.message)?;
        if !self.text.is_empty() {
            write!(f, "\n  {:>4} | {}", self.line, self.text)?;
        }
        if let Some(x) = &self.fix {
            write!(f, "\n  fix: {x}")?;
        }
        Ok(())
    }
}

impl std::error::Error for PlanError {}

/// Locates a byte span of the plan: line, column, the line's text and the dotted key there.
pub fn locate(src: &str, file: &Path, span: Range<usize>, message: &str) -> PlanError {
    let at = span.start.min(src.len());
    let line_start = src[..at].rfind('\n').map(|i| i + 1).unwrap_or(0);
    let line_no = src[..line_start].matches('\n').count() + 1;
    let text = src[line_start..]
        .split('\n')
        .next()
        .unwrap_or("")
        .trim_end_matches('\r');
    let column = src[line_start..at].chars().count() + 1;
    PlanError(Box::new(Located {
        file: file.to_owned(),
        line: line_no,
        column,
        key: key_at(src, line_start, text),
        message: message.trim().to_string(),
        fix: None,
        text: text.trim().to_string(),
    }))
}

/// The dotted key a line sets, prefixed by the table it is in.
fn key_at(src: &str, line_start: usize, text: &str) -> Option<String> {
    let header = |l: &str| -> Option<String> {
        let l = l.trim();
        let inner = l
            .strip_prefix("[[")
            .and_then(|r| r.strip_suffix("]]"))
            .or_else(|| l.strip_prefix('[').and_then(|r| r.strip_suffix(']')))?;
        Some(inner.trim().replace(['"', ' '], ""))
    };
    if let Some(h) = header(text) {
        return Some(h);
    }
    let table = src[..line_start].lines().rev().find_map(header);
    let key = text
        .split_once('=')
        .map(|(k, _)| k.trim().trim_matches('"').to_string())
        .filter(|k| {
            !k.is_empty()
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_-.\" ".contains(c))
        });
    match (table, key) {
        (Some(t), Some(k)) => Some(format!("{t}.{k}")),
        (None, Some(k)) => Some(k),
        (Some(t), None) => Some(t),
        (None, None) => None,
    }
}

/// The fix that goes with a message, when one is known.
fn fix_for(message: &str) -> Option<String> {
    if message.contains("unknown field") {
        Some("check the spelling against the fields listed; examples/plans/ has a plan that uses every one".into())
    } else if message.contains("missing field") {
        Some("add it to this table".into())
    } else if message.contains("duration") {
        Some("write durations as strings with a unit: \"250ms\", \"2s\", \"1m30s\"".into())
    } else if message.contains("range") {
        Some("write ranges as [min, max] with min ≤ max".into())
    } else {
        None
    }
}

/// Parses the plan's text; every error names its line, column and key.
pub fn parse(src: &str, file: &Path) -> Result<PlanFile, PlanError> {
    toml::from_str::<PlanFile>(src).map_err(|e| {
        let mut err = locate(src, file, e.span().unwrap_or(0..0), e.message());
        err.fix = fix_for(e.message());
        err
    })
}

// ---- the resolved plan ---------------------------------------------------------------------------

/// One piece of a template.
#[derive(Clone, Debug, PartialEq)]
pub enum Part {
    Lit(String),
    /// Index into the kind's vars.
    Var(usize),
    Id,
}

/// A request kind, ready to send.
#[derive(Clone, Debug)]
pub struct Kind {
    pub name: String,
    pub method: Method,
    pub uri: Uri,
    /// Secrets already substituted, and marked sensitive.
    pub headers: HeaderMap,
    /// The headers as the plan wrote them (`Bearer ${secret.gateway}`): what the journal may show.
    pub shown_headers: BTreeMap<String, String>,
    pub body: Vec<Part>,
    pub vars: Vec<(String, Vec<String>)>,
    pub weight: u32,
    /// An MCP tool call (the tool's name): `uri` is the endpoint, the body its arguments.
    pub tool: Option<String>,
}

impl Kind {
    /// The body for one request, with a variant drawn for each variable.
    pub fn render(&self, id: u64, pick: &mut impl FnMut(usize) -> usize) -> Bytes {
        if self.body.is_empty() {
            return Bytes::new();
        }
        let mut out = String::new();
        for p in &self.body {
            match p {
                Part::Lit(s) => out.push_str(s),
                Part::Var(i) => {
                    let vals = &self.vars[*i].1;
                    out.push_str(&vals[pick(vals.len())]);
                }
                Part::Id => out.push_str(&id.to_string()),
            }
        }
        Bytes::from(out)
    }
}

#[derive(Clone, Debug)]
pub struct Driver {
    pub count: u32,
    /// Indices into the plan's kinds, with weights.
    pub kinds: Vec<(usize, u32)>,
    pub cycle: Vec<Phase>,
    pub burst: (CountRange, DurRange),
    pub steady: (CountRange, DurRange),
    pub idle: DurRange,
}

#[derive(Clone, Debug)]
pub struct Reader {
    pub count: u32,
    /// Indices into the plan's kinds (one GET kind per endpoint).
    pub kinds: Vec<usize>,
    pub gap: DurRange,
}

#[derive(Clone, Debug)]
pub struct Background {
    pub count: u32,
    pub kinds: Vec<usize>,
    pub every: Duration,
}

/// What a check or gauge reads.
#[derive(Clone, Debug)]
pub enum Source {
    Http {
        uri: Uri,
        headers: HeaderMap,
        pointer: Option<String>,
    },
    Command(Vec<String>),
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Expect {
    Equals(serde_json::Value),
    Range { min: Option<f64>, max: Option<f64> },
}

#[derive(Clone, Debug)]
pub struct Check {
    pub name: String,
    pub source: Source,
    pub status: u16,
    pub expect: Option<Expect>,
}

#[derive(Clone, Debug)]
pub struct Gauge {
    pub name: String,
    pub source: Source,
    pub drain: bool,
}

#[derive(Clone, Debug)]
pub struct Invariants {
    pub health: bool,
    pub same_identity: bool,
    pub rss_limit: Option<u64>,
    pub fatal_labels: Vec<String>,
    pub fatal_log: Vec<String>,
}

/// The plan the engine runs.
#[derive(Clone, Debug)]
pub struct SoakPlan {
    pub duration: Duration,
    pub interval: Duration,
    pub seed: u64,
    pub limits: Limits,
    pub check_timeout: Duration,
    pub drain_grace: Duration,
    pub fault_grace: Duration,
    pub max_error_rate: f64,
    pub rejection: Rejection,
    pub base: Uri,
    pub health: Uri,
    pub ready_timeout: Duration,
    pub kinds: Vec<Kind>,
    pub drivers: Vec<Driver>,
    pub readers: Vec<Reader>,
    pub background: Vec<Background>,
    pub invariants: Invariants,
    pub checks: Vec<Check>,
    pub gauges: Vec<Gauge>,
    /// Secret values, only for the journal's redaction list.
    pub secret_values: Vec<String>,
}

impl SoakPlan {
    /// Every URL the plan sends to, for the loopback check.
    pub fn urls(&self) -> Vec<&Uri> {
        let mut v = vec![&self.base, &self.health];
        v.extend(self.kinds.iter().map(|k| &k.uri));
        for s in self
            .checks
            .iter()
            .map(|c| &c.source)
            .chain(self.gauges.iter().map(|g| &g.source))
        {
            if let Source::Http { uri, .. } = s {
                v.push(uri);
            }
        }
        v
    }

    /// How many workers of every group together.
    pub fn workers(&self) -> u32 {
        self.drivers.iter().map(|d| d.count).sum::<u32>()
            + self.readers.iter().map(|r| r.count).sum::<u32>()
            + self.background.iter().map(|b| b.count).sum::<u32>()
    }
}

/// What the command line says over the plan.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    pub duration: Option<Duration>,
    pub interval: Option<Duration>,
    pub seed: Option<u64>,
    pub base_url: Option<String>,
}

/// Where secret values come from; the real one reads the environment and files.
pub trait SecretSource {
    fn env(&self, name: &str) -> Option<String>;
    fn file(&self, path: &Path) -> std::io::Result<String>;
}

pub struct RealSecrets;

impl SecretSource for RealSecrets {
    fn env(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
    fn file(&self, path: &Path) -> std::io::Result<String> {
        std::fs::read_to_string(path)
    }
}

/// Turns a parsed plan into the one the engine runs. `src` and `file` locate any error.
pub fn resolve(
    p: PlanFile,
    src: &str,
    file: &Path,
    o: &Overrides,
    secrets: &dyn SecretSource,
) -> Result<SoakPlan, PlanError> {
    let at = |span: Range<usize>, msg: String, fix: &str| {
        let mut e = locate(src, file, span, &msg);
        if !fix.is_empty() {
            e.fix = Some(fix.to_string());
        }
        e
    };
    let top = |msg: String, fix: &str| {
        PlanError(Box::new(Located {
            file: file.to_owned(),
            line: 1,
            column: 1,
            key: None,
            message: msg,
            fix: (!fix.is_empty()).then(|| fix.to_string()),
            text: String::new(),
        }))
    };

    let duration = o.duration.or(p.duration.map(|d| d.0)).ok_or_else(|| {
        top(
            "no duration: the plan has no `duration` and --duration was not given".into(),
            "add `duration = \"10m\"` at the top of the plan, or pass --duration 10m",
        )
    })?;
    if duration.is_zero() {
        return Err(top(
            "the duration is zero".into(),
            "give a positive duration, e.g. --duration 10m",
        ));
    }
    let interval = o
        .interval
        .or(p.interval.map(|d| d.0))
        .unwrap_or(Duration::from_secs(10));
    if interval < Duration::from_millis(100) {
        return Err(top(
            format!(
                "the progress interval {} is under 100ms",
                crate::journal::secs(interval.as_secs_f64())
            ),
            "set `interval` (or --interval) to 100ms or more; 10s suits most soaks",
        ));
    }
    if !(0.0..=1.0).contains(p.max_error_rate.get_ref()) {
        return Err(at(
            p.max_error_rate.span(),
            format!(
                "max_error_rate {} is not a fraction",
                p.max_error_rate.get_ref()
            ),
            "write it between 0 and 1, e.g. 0.001 for one in a thousand",
        ));
    }
    if p.timeout.0.is_zero() || p.check_timeout.0.is_zero() {
        return Err(top(
            "timeout and check_timeout must be more than zero".into(),
            "e.g. timeout = \"30s\"",
        ));
    }

    // Secrets: each must be found now; there is no fallback.
    let mut values: BTreeMap<String, String> = BTreeMap::new();
    for (name, r) in &p.secrets {
        let span = r.span();
        let r = r.get_ref();
        let v = match (&r.secret_env, &r.secret_file) {
            (Some(var), None) => match secrets.env(var) {
                Some(v) if !v.is_empty() => v,
                _ => {
                    return Err(at(
                        span,
                        format!(
                            "secrets.{name}: the environment variable {var} (secret_env) is not set or is empty"
                        ),
                        &format!("export {var} before running witness; the plan holds no fallback on purpose"),
                    ))
                }
            },
            (None, Some(path)) => {
                let v = secrets.file(path).map_err(|e| {
                    at(
                        span.clone(),
                        format!(
                            "secrets.{name}: could not read secret_file {}: {e}",
                            path.display()
                        ),
                        "point secret_file at a readable file holding only the secret",
                    )
                })?;
                let v = v.trim_end_matches(['\n', '\r']).to_string();
                if v.is_empty() {
                    return Err(at(
                        span,
                        format!("secrets.{name}: secret_file {} is empty", path.display()),
                        "put the secret in the file",
                    ));
                }
                v
            }
            _ => {
                return Err(at(
                    span,
                    format!("secrets.{name} must name exactly one of secret_env or secret_file"),
                    "write secret_env = \"NAME\" or secret_file = \"PATH\"",
                ))
            }
        };
        if v.len() < 4 {
            return Err(at(
                span,
                format!(
                    "secrets.{name} is {} bytes long: too short to redact safely",
                    v.len()
                ),
                "use a real credential (4 bytes or more)",
            ));
        }
        if HeaderValue::from_str(&v).is_err() {
            return Err(at(
                span,
                format!("secrets.{name} holds characters a header cannot carry"),
                "remove control characters and newlines from the secret",
            ));
        }
        values.insert(name.clone(), v);
    }

    let base_text = match (&o.base_url, &p.target.base_url) {
        (Some(b), _) => b.clone(),
        (None, Some(b)) => b.get_ref().clone(),
        (None, None) => {
            return Err(top(
                "no base URL: [target] has no base_url and --base-url was not given".into(),
                "add base_url = \"http://127.0.0.1:8000\" under [target]",
            ))
        }
    };
    let base_span = p.target.base_url.as_ref().map(|b| b.span()).unwrap_or(0..0);
    let base: Uri = base_text
        .trim_end_matches('/')
        .parse()
        .ok()
        .filter(|u: &Uri| u.scheme_str() == Some("http") && u.host().is_some())
        .ok_or_else(|| {
            at(
                base_span.clone(),
                format!("base URL {base_text:?} is not an http:// URL with a host"),
                "write it like http://127.0.0.1:8000 (https is not supported yet)",
            )
        })?;
    let join = |path_or_url: &str, span: Range<usize>| -> Result<Uri, PlanError> {
        let text = if path_or_url.starts_with('/') {
            format!("{}{}", base.to_string().trim_end_matches('/'), path_or_url)
        } else {
            path_or_url.to_string()
        };
        text.parse::<Uri>()
            .ok()
            .filter(|u| u.scheme_str() == Some("http") && u.host().is_some())
            .ok_or_else(|| {
                at(
                    span,
                    format!("{path_or_url:?} is neither a path starting with / nor an http:// URL"),
                    "write a path like \"/v1/embed\" or a URL like \"http://127.0.0.1:9000/x\"",
                )
            })
    };
    let headers_of = |h: &BTreeMap<String, Spanned<String>>| -> Result<HeaderMap, PlanError> {
        let mut map = HeaderMap::new();
        for (k, v) in h {
            let name = HeaderName::from_bytes(k.as_bytes()).map_err(|_| {
                at(
                    v.span(),
                    format!("{k:?} is not a header name"),
                    "header names are letters, digits and dashes",
                )
            })?;
            let (text, secret) = substitute_secrets(v.get_ref(), &values).map_err(|m| {
                at(
                    v.span(),
                    m,
                    "declare it under [secrets.NAME] with secret_env or secret_file",
                )
            })?;
            let mut value = HeaderValue::from_str(&text).map_err(|_| {
                at(
                    v.span(),
                    format!("the value of header {k} has characters a header cannot carry"),
                    "",
                )
            })?;
            if secret {
                value.set_sensitive(true);
            }
            map.append(name, value);
        }
        Ok(map)
    };

    let health = join(p.target.health.get_ref(), p.target.health.span())?;

    // Kinds, in name order.
    let mut kinds = Vec::new();
    let mut kind_index: BTreeMap<String, usize> = BTreeMap::new();
    for (name, k) in &p.kinds {
        let span = k.span();
        let k = k.get_ref();
        let method =
            Method::from_bytes(k.method.to_ascii_uppercase().as_bytes()).map_err(|_| {
                at(
                    span.clone(),
                    format!("kinds.{name}: {:?} is not an HTTP method", k.method),
                    "",
                )
            })?;
        let uri = match (&k.path, &k.url) {
            (Some(p), None) | (None, Some(p)) => join(p, span.clone())?,
            _ => {
                return Err(at(
                    span,
                    format!("kinds.{name} needs exactly one of path or url"),
                    "write path = \"/v1/embed\" (joined to the base URL) or url = \"http://…\"",
                ))
            }
        };
        if k.body.get_ref().contains("${secret.") {
            return Err(at(
                k.body.span(),
                format!("kinds.{name}: the body names a secret"),
                "secrets go in headers only, so no body, URL or journal line can carry one",
            ));
        }
        let vars: Vec<(String, Vec<String>)> =
            k.vars.iter().map(|(a, b)| (a.clone(), b.clone())).collect();
        if let Some((v, _)) = vars.iter().find(|(_, vals)| vals.is_empty()) {
            return Err(at(
                span,
                format!("kinds.{name}.vars.{v} has no values"),
                "give at least one variant, e.g. [\"[1]\", \"[1,2]\"]",
            ));
        }
        let body = split_template(k.body.get_ref(), &vars).map_err(|m| {
            at(
                k.body.span(),
                format!("kinds.{name}: {m}"),
                "declare it under vars, or use ${id}",
            )
        })?;
        kind_index.insert(name.clone(), kinds.len());
        kinds.push(Kind {
            name: name.clone(),
            method,
            uri,
            headers: headers_of(&k.headers)?,
            shown_headers: as_written(&k.headers),
            body,
            vars,
            weight: k.weight,
            tool: k.mcp.clone(),
        });
        if let Some(tool) = &k.mcp {
            mcp_kind_check(&kinds[kinds.len() - 1], tool, span.clone(), &at)?;
        }
    }
    let lookup = |names: &[Spanned<String>],
                  kind_index: &BTreeMap<String, usize>|
     -> Result<Vec<usize>, PlanError> {
        names
            .iter()
            .map(|n| {
                kind_index.get(n.get_ref()).copied().ok_or_else(|| {
                    at(
                        n.span(),
                        format!("there is no kind named {:?}", n.get_ref()),
                        &format!(
                            "declare [kinds.{}], or use one of: {}",
                            n.get_ref(),
                            kind_index.keys().cloned().collect::<Vec<_>>().join(", ")
                        ),
                    )
                })
            })
            .collect()
    };

    let mut drivers = Vec::new();
    for dspec in &p.drivers {
        let span = dspec.span();
        let ds = dspec.get_ref();
        let chosen: Vec<(usize, u32)> = if ds.kinds.is_empty() {
            kinds
                .iter()
                .enumerate()
                .filter(|(_, k)| k.weight > 0)
                .map(|(i, k)| (i, k.weight))
                .collect()
        } else {
            lookup(&ds.kinds, &kind_index)?
                .into_iter()
                .map(|i| (i, kinds[i].weight.max(1)))
                .collect()
        };
        if chosen.is_empty() {
            return Err(at(
                span,
                "this driver group has no kind to send".into(),
                "declare a [kinds.NAME] with weight above 0, or list kinds = [\"NAME\"]",
            ));
        }
        if ds.cycle.is_empty() || ds.cycle.iter().all(|ph| *ph == Phase::Idle) {
            return Err(at(
                span,
                "the driver's cycle sends nothing".into(),
                "cycle needs burst or steady, e.g. cycle = [\"burst\", \"steady\", \"idle\"]",
            ));
        }
        if ds.count == 0 {
            return Err(at(
                span,
                "count is 0".into(),
                "remove the group or set count = 1",
            ));
        }
        drivers.push(Driver {
            count: ds.count,
            kinds: chosen,
            cycle: ds.cycle.clone(),
            burst: (ds.burst.requests, ds.burst.gap),
            steady: (ds.steady.requests, ds.steady.gap),
            idle: ds.idle.for_,
        });
    }
    let mut readers = Vec::new();
    for rspec in &p.readers {
        let span = rspec.span();
        let rs = rspec.get_ref();
        if rs.get.is_empty() || rs.count == 0 {
            return Err(at(
                span,
                "a reader group needs count ≥ 1 and at least one endpoint in get".into(),
                "e.g. get = [\"/health\", \"/stats\"]",
            ));
        }
        let headers = headers_of(&rs.headers)?;
        let mut ix = Vec::new();
        for g in &rs.get {
            let uri = join(g, span.clone())?;
            let name = format!("GET {g}");
            let i = match kind_index.get(&name) {
                Some(&i) => i,
                None => {
                    kind_index.insert(name.clone(), kinds.len());
                    kinds.push(Kind {
                        name,
                        method: Method::GET,
                        uri,
                        headers: headers.clone(),
                        shown_headers: as_written(&rs.headers),
                        body: vec![],
                        vars: vec![],
                        weight: 0,
                        tool: None,
                    });
                    kinds.len() - 1
                }
            };
            ix.push(i);
        }
        readers.push(Reader {
            count: rs.count,
            kinds: ix,
            gap: rs.gap,
        });
    }
    let mut background = Vec::new();
    for bspec in &p.background {
        let span = bspec.span();
        let bs = bspec.get_ref();
        if bs.kinds.is_empty() || bs.count == 0 || bs.every.0.is_zero() {
            return Err(at(
                span,
                "a background group needs count ≥ 1, at least one kind and every > 0".into(),
                "e.g. kinds = [\"collect\"], every = \"5s\"",
            ));
        }
        background.push(Background {
            count: bs.count,
            kinds: lookup(&bs.kinds, &kind_index)?,
            every: bs.every.0,
        });
    }
    if drivers.is_empty() && readers.is_empty() && background.is_empty() {
        return Err(top(
            "the plan has no workers: no [[drivers]], [[readers]] or [[background]]".into(),
            "add a [[drivers]] group (it sends every kind with a weight)",
        ));
    }
    let total: u64 = drivers.iter().map(|d| d.count as u64).sum::<u64>()
        + readers.iter().map(|r| r.count as u64).sum::<u64>()
        + background.iter().map(|b| b.count as u64).sum::<u64>();
    let max = crate::units::MAX_CONCURRENCY;
    if total > max as u64 {
        return Err(top(
            format!("the plan asks for {total} workers in all (drivers, readers and background counts); witness runs from 1 to {max}"),
            "lower the groups' count values so they add up to at most 10000",
        ));
    }

    let source = |get: &Option<String>,
                  command: &Option<Vec<String>>,
                  headers: &BTreeMap<String, Spanned<String>>,
                  pointer: &Option<String>,
                  what: &str,
                  span: Range<usize>|
     -> Result<Source, PlanError> {
        if let Some(ptr) = pointer {
            if !ptr.is_empty() && !ptr.starts_with('/') {
                return Err(at(
                    span,
                    format!("{what}: pointer {ptr:?} is not a JSON pointer"),
                    "JSON pointers start with /, e.g. \"/queue/depth\"",
                ));
            }
        }
        match (get, command) {
            (Some(g), None) => Ok(Source::Http {
                uri: join(g, span)?,
                headers: headers_of(headers)?,
                pointer: pointer.clone(),
            }),
            (None, Some(c)) if !c.is_empty() && pointer.is_none() => Ok(Source::Command(c.clone())),
            _ => Err(at(
                span,
                format!("{what} needs exactly one of get (with an optional pointer) or command"),
                "e.g. get = \"/stats\", pointer = \"/queued\"; or command = [\"sh\", \"-c\", \"…\"]",
            )),
        }
    };
    let mut checks = Vec::new();
    for c in &p.checks {
        let span = c.span();
        let c = c.get_ref();
        let what = format!("check {:?}", c.name);
        let expect = match (&c.equals, c.min, c.max) {
            (None, None, None) => None,
            (Some(v), None, None) => Some(Expect::Equals(v.clone())),
            (None, min, max) => Some(Expect::Range { min, max }),
            _ => {
                return Err(at(
                    span,
                    format!("{what}: equals cannot go with min or max"),
                    "use equals for an exact value, min/max for bounds",
                ))
            }
        };
        if expect.is_some() && c.pointer.is_none() {
            return Err(at(
                span,
                format!("{what}: equals/min/max need a pointer into the JSON body"),
                "add pointer = \"/field\"",
            ));
        }
        checks.push(Check {
            name: c.name.clone(),
            source: source(&c.get, &c.command, &c.headers, &c.pointer, &what, span)?,
            status: c.status,
            expect,
        });
    }
    let mut gauges = Vec::new();
    for g in &p.gauges {
        let span = g.span();
        let g = g.get_ref();
        let what = format!("gauge {:?}", g.name);
        if let Source::Http { pointer: None, .. } = source(
            &g.get,
            &g.command,
            &g.headers,
            &g.pointer,
            &what,
            span.clone(),
        )? {
            return Err(at(
                span,
                format!("{what}: an HTTP gauge needs a pointer to the number"),
                "add pointer = \"/field\"",
            ));
        }
        gauges.push(Gauge {
            name: g.name.clone(),
            source: source(&g.get, &g.command, &g.headers, &g.pointer, &what, span)?,
            drain: g.drain,
        });
    }
    let mut names = std::collections::BTreeSet::new();
    for n in checks
        .iter()
        .map(|c| &c.name)
        .chain(gauges.iter().map(|g| &g.name))
    {
        if !names.insert(n.clone()) {
            return Err(top(
                format!("two checks or gauges are both named {n:?}"),
                "give each check and gauge its own name",
            ));
        }
    }

    let inv = &p.invariants;
    Ok(SoakPlan {
        duration,
        interval,
        seed: o.seed.or(p.seed).unwrap_or_else(rand::random),
        limits: Limits {
            connect: p
                .connect_timeout
                .map(|d| d.0)
                .unwrap_or(p.timeout.0.min(Duration::from_secs(5))),
            whole: p.timeout.0,
            max_body: crate::load::client::DEFAULT_MAX_BODY,
        },
        check_timeout: p.check_timeout.0,
        drain_grace: p.drain_grace.0,
        fault_grace: p.fault_grace.0,
        max_error_rate: *p.max_error_rate.get_ref(),
        rejection: Rejection {
            statuses: p.reject_status.clone(),
            body_marker: (!p.reject_body.is_empty()).then(|| p.reject_body.clone()),
            accepted: Vec::new(),
        },
        base,
        health,
        ready_timeout: p.target.ready_timeout.0,
        kinds,
        drivers,
        readers,
        background,
        invariants: Invariants {
            health: inv.health,
            same_identity: inv.same_identity,
            rss_limit: inv.rss_limit.map(|s| s.0),
            fatal_labels: inv.fatal_labels.clone(),
            fatal_log: inv.fatal_log.clone(),
        },
        checks,
        gauges,
        secret_values: values.into_values().collect(),
    })
}

/// An MCP kind names a tool, and its body (every first variant, `${id}` as 0) is a JSON object.
fn mcp_kind_check(
    k: &Kind,
    tool: &str,
    span: Range<usize>,
    at: &impl Fn(Range<usize>, String, &str) -> PlanError,
) -> Result<(), PlanError> {
    if tool.trim().is_empty() {
        return Err(at(
            span,
            format!("kinds.{}: mcp needs a tool name", k.name),
            "write mcp = \"search\" (see `witness mcp tools`)",
        ));
    }
    if k.body.is_empty() {
        return Ok(());
    }
    let text = k.render(0, &mut |_| 0);
    match serde_json::from_slice::<serde_json::Value>(&text) {
        Ok(v) if v.is_object() => Ok(()),
        _ => Err(at(
            span,
            format!(
                "kinds.{}: an MCP kind's body is the tool's arguments and must be a JSON object; with the first variants it reads {:?}",
                k.name,
                String::from_utf8_lossy(&text)
            ),
            "write body = '{\"query\": \"${q}\"}' with vars.q = [...]",
        )),
    }
}

fn as_written(h: &BTreeMap<String, Spanned<String>>) -> BTreeMap<String, String> {
    h.iter()
        .map(|(k, v)| (k.clone(), v.get_ref().clone()))
        .collect()
}

/// Replaces `${secret.NAME}` with its value; says whether any was used. An unknown name is an error.
fn substitute_secrets(
    text: &str,
    values: &BTreeMap<String, String>,
) -> Result<(String, bool), String> {
    let mut out = String::new();
    let mut rest = text;
    let mut used = false;
    while let Some(i) = rest.find("${secret.") {
        out.push_str(&rest[..i]);
        let after = &rest[i + "${secret.".len()..];
        let end = after
            .find('}')
            .ok_or_else(|| "an unclosed ${secret.… reference".to_string())?;
        let name = &after[..end];
        let v = values.get(name).ok_or_else(|| {
            format!("the header names secret {name:?}, which [secrets] does not declare")
        })?;
        out.push_str(v);
        used = true;
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok((out, used))
}

/// Splits a body template into literal text, variables and `${id}`.
pub fn split_template(text: &str, vars: &[(String, Vec<String>)]) -> Result<Vec<Part>, String> {
    let mut parts = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("${") {
        if i > 0 {
            parts.push(Part::Lit(rest[..i].to_string()));
        }
        let after = &rest[i + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| "the body has an unclosed ${".to_string())?;
        let name = &after[..end];
        if name == "id" {
            parts.push(Part::Id);
        } else {
            let ix = vars
                .iter()
                .position(|(n, _)| n == name)
                .ok_or_else(|| format!("the body uses ${{{name}}}, but vars has no {name:?}"))?;
            parts.push(Part::Var(ix));
        }
        rest = &after[end + 1..];
    }
    if !rest.is_empty() {
        parts.push(Part::Lit(rest.to_string()));
    }
    Ok(parts)
}

/// What the journal keeps about the plan: shapes and names, never a secret's value.
pub fn summary(p: &SoakPlan) -> serde_json::Value {
    let kinds: Vec<serde_json::Value> = p
        .kinds
        .iter()
        .map(|k| {
            serde_json::json!({
                "name": k.name,
                "method": k.method.as_str(),
                "url": k.uri.to_string(),
                "weight": k.weight,
                "headers": k.shown_headers,
                "variants": k.vars.iter().map(|(n, v)| (n.clone(), v.len())).collect::<BTreeMap<_, _>>(),
            })
        })
        .collect();
    let range = |r: &DurRange| [r.min.as_secs_f64(), r.max.as_secs_f64()];
    serde_json::json!({
        "base_url": p.base.to_string(),
        "health_url": p.health.to_string(),
        "kinds": kinds,
        "drivers": p.drivers.iter().map(|d| serde_json::json!({
            "count": d.count,
            "kinds": d.kinds.iter().map(|(i, w)| serde_json::json!([p.kinds[*i].name, w])).collect::<Vec<_>>(),
            "cycle": d.cycle,
            "burst": {"requests": [d.burst.0.min, d.burst.0.max], "gap_s": range(&d.burst.1)},
            "steady": {"requests": [d.steady.0.min, d.steady.0.max], "gap_s": range(&d.steady.1)},
            "idle_s": range(&d.idle),
        })).collect::<Vec<_>>(),
        "readers": p.readers.iter().map(|r| serde_json::json!({
            "count": r.count,
            "kinds": r.kinds.iter().map(|i| p.kinds[*i].name.clone()).collect::<Vec<_>>(),
            "gap_s": range(&r.gap),
        })).collect::<Vec<_>>(),
        "background": p.background.iter().map(|b| serde_json::json!({
            "count": b.count,
            "kinds": b.kinds.iter().map(|i| p.kinds[*i].name.clone()).collect::<Vec<_>>(),
            "every_s": b.every.as_secs_f64(),
        })).collect::<Vec<_>>(),
        "checks": p.checks.iter().map(|c| c.name.clone()).collect::<Vec<_>>(),
        "gauges": p.gauges.iter().map(|g| serde_json::json!({"name": g.name, "drain": g.drain})).collect::<Vec<_>>(),
        "rss_limit_bytes": p.invariants.rss_limit,
        "timeout_s": p.limits.whole.as_secs_f64(),
        "secrets": p.secret_values.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file() -> PathBuf {
        PathBuf::from("plan.toml")
    }

    const GOOD: &str = r#"
duration = "30s"
interval = "1s"

[target]
base_url = "http://127.0.0.1:8000"

[secrets.gateway]
secret_env = "WITNESS_TEST_TOKEN"

[kinds.embed]
method = "POST"
path = "/call"
headers = { Authorization = "Bearer ${secret.gateway}", "Content-Type" = "application/json" }
body = '{"inputs": ${inputs}, "n": ${id}}'
vars.inputs = ['["a"]', '["a","b"]']
weight = 3

[kinds.collect]
path = "/collect"
weight = 0

[[drivers]]
count = 2
burst = { requests = [2, 3], gap = ["20ms", "50ms"] }

[[readers]]
get = ["/stats", "/health"]

[[background]]
kinds = ["collect"]
every = "2s"

[[gauges]]
name = "queued"
get = "/stats"
pointer = "/queued"
drain = true
"#;

    struct Fake;
    impl SecretSource for Fake {
        fn env(&self, name: &str) -> Option<String> {
            (name == "WITNESS_TEST_TOKEN").then(|| "t0ken-value".to_string())
        }
        fn file(&self, path: &Path) -> std::io::Result<String> {
            Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{} not found", path.display()),
            ))
        }
    }

    fn resolved(src: &str) -> Result<SoakPlan, PlanError> {
        let p = parse(src, &file())?;
        resolve(p, src, &file(), &Overrides::default(), &Fake)
    }

    #[test]
    fn a_good_plan_resolves_with_its_kinds_groups_and_secret() {
        let p = resolved(GOOD).unwrap();
        assert_eq!(p.duration, Duration::from_secs(30));
        let names: Vec<_> = p.kinds.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names, ["collect", "embed", "GET /stats", "GET /health"]);
        let embed = &p.kinds[1];
        let auth = embed.headers.get("authorization").unwrap();
        assert!(auth.is_sensitive());
        assert_eq!(auth.to_str().unwrap(), "Bearer t0ken-value");
        // Only weighted kinds are drawn by default drivers.
        assert_eq!(p.drivers[0].kinds, vec![(1, 3)]);
        assert_eq!(p.drivers[0].burst.0, CountRange { min: 2, max: 3 });
        assert_eq!(p.drivers[0].steady.1, steady_gap(), "defaults stay");
        assert_eq!(p.secret_values, vec!["t0ken-value".to_string()]);
        let mut n = 0;
        let body = embed.render(7, &mut |len| {
            n += 1;
            len - 1
        });
        assert_eq!(&body[..], br#"{"inputs": ["a","b"], "n": 7}"#);
        let s = summary(&p).to_string();
        assert!(!s.contains("t0ken"), "{s}");
        assert!(s.contains("Bearer ${secret.gateway}"), "{s}");
    }

    #[test]
    fn worker_and_request_counts_are_bounded_with_the_range_in_words() {
        let src = GOOD.replace("count = 2", "count = 100000000");
        let e = resolved(&src).unwrap_err().to_string();
        assert!(
            e.contains("100000002 workers") && e.contains("from 1 to 10000"),
            "{e}"
        );
        let src = GOOD.replace("requests = [2, 3]", "requests = [2, 99999999999]");
        let e = resolved(&src).unwrap_err().to_string();
        assert!(e.contains("from 1 to 10000000"), "{e}");
        let src = GOOD.replace("count = 2", "count = 9998");
        assert!(resolved(&src).is_ok());
    }

    #[test]
    fn an_mcp_kind_names_its_tool_and_its_body_must_be_an_arguments_object() {
        let src = GOOD.replace("weight = 3", "weight = 3\nmcp = \"search\"");
        let p = resolved(&src).unwrap();
        assert_eq!(p.kinds[1].tool.as_deref(), Some("search"));
        assert_eq!(p.kinds[0].tool, None);
        let src = GOOD
            .replace("weight = 3", "weight = 3\nmcp = \"search\"")
            .replace(
                r#"body = '{"inputs": ${inputs}, "n": ${id}}'"#,
                "body = '[${id}]'",
            );
        let e = resolved(&src).unwrap_err();
        assert!(e.message.contains("must be a JSON object"), "{e}");
        assert!(e.message.contains("kinds.embed"), "{e}");
    }

    #[test]
    fn a_misspelt_key_names_its_line_column_and_key() {
        let src = GOOD.replace("weight = 3", "wieght = 3");
        let e = resolved(&src).unwrap_err();
        let line = src.lines().position(|l| l.starts_with("wieght")).unwrap() + 1;
        assert_eq!(e.line, line);
        assert_eq!(e.column, 1);
        assert_eq!(e.key.as_deref(), Some("kinds.embed.wieght"));
        assert!(e.message.contains("unknown field `wieght`"), "{e}");
        let text = e.to_string();
        assert!(text.contains(&format!("line {line}, column 1")), "{text}");
        assert!(text.contains("fix:"), "{text}");
    }

    #[test]
    fn a_backwards_range_is_located_and_explained() {
        let src = GOOD.replace(r#"gap = ["20ms", "50ms"]"#, r#"gap = ["400ms", "50ms"]"#);
        let e = resolved(&src).unwrap_err();
        assert!(
            e.message.contains("starts above its end (400ms > 50ms)"),
            "{e}"
        );
        assert_eq!(e.key.as_deref(), Some("drivers.burst"));
        assert!(e.column > 10, "{e:?}");
        assert!(e.to_string().contains("[min, max]"), "{e}");
    }

    #[test]
    fn a_bad_duration_says_how_to_write_one() {
        let src = GOOD.replace(r#"every = "2s""#, r#"every = "2 parsecs""#);
        let e = resolved(&src).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("background.every"));
        assert!(e.message.contains("unknown unit \"parsecs\""), "{e}");
        assert!(e.fix.as_deref().unwrap().contains("\"250ms\""), "{e}");
        assert_eq!(e.column, 9);
    }

    #[test]
    fn an_unset_secret_env_is_an_error_naming_the_key_with_no_fallback() {
        let src = GOOD.replace("WITNESS_TEST_TOKEN", "WITNESS_SURELY_UNSET_VAR");
        let e = resolved(&src).unwrap_err();
        assert!(e.message.contains("secrets.gateway"), "{e}");
        assert!(e.message.contains("WITNESS_SURELY_UNSET_VAR"), "{e}");
        assert!(e.fix.as_deref().unwrap().contains("no fallback"));
        // And a fallback value cannot even be written.
        let src = GOOD.replace(
            "secret_env = \"WITNESS_TEST_TOKEN\"",
            "secret_env = \"WITNESS_TEST_TOKEN\"\ndefault = \"hunter2\"",
        );
        let e = resolved(&src).unwrap_err();
        assert!(e.message.contains("unknown field `default`"), "{e}");
    }

    #[test]
    fn a_secret_file_is_read_without_its_newline_and_a_missing_one_is_named() {
        struct File;
        impl SecretSource for File {
            fn env(&self, _: &str) -> Option<String> {
                None
            }
            fn file(&self, path: &Path) -> std::io::Result<String> {
                match path.to_str() {
                    Some("/run/secrets/gw") => Ok("fr0m-file\n".into()),
                    _ => Err(std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "no such file",
                    )),
                }
            }
        }
        let src = GOOD.replace(
            "secret_env = \"WITNESS_TEST_TOKEN\"",
            "secret_file = \"/run/secrets/gw\"",
        );
        let p = resolve(
            parse(&src, &file()).unwrap(),
            &src,
            &file(),
            &Overrides::default(),
            &File,
        )
        .unwrap();
        let auth = p.kinds[1].headers.get("authorization").unwrap();
        assert_eq!(auth.to_str().unwrap(), "Bearer fr0m-file");
        let src = src.replace("/run/secrets/gw", "/nope");
        let e = resolve(
            parse(&src, &file()).unwrap(),
            &src,
            &file(),
            &Overrides::default(),
            &File,
        )
        .unwrap_err();
        assert!(
            e.message
                .contains("secrets.gateway: could not read secret_file /nope"),
            "{e}"
        );
        let src = src.replace(
            "secret_file = \"/nope\"",
            "secret_file = \"/nope\"\nsecret_env = \"X\"",
        );
        let e = resolve(
            parse(&src, &file()).unwrap(),
            &src,
            &file(),
            &Overrides::default(),
            &File,
        )
        .unwrap_err();
        assert!(
            e.message
                .contains("exactly one of secret_env or secret_file"),
            "{e}"
        );
    }

    #[test]
    fn a_secret_in_a_body_or_an_unknown_secret_is_refused() {
        let src = GOOD.replace("\"n\": ${id}", "\"k\": \"${secret.gateway}\"");
        let e = resolved(&src).unwrap_err();
        assert!(
            e.fix.as_deref().unwrap().contains("headers only"),
            "{}",
            e.message
        );
        let src = GOOD.replace("${secret.gateway}", "${secret.other}");
        let e = resolved(&src).unwrap_err();
        assert!(e.message.contains("\"other\""), "{e}");
    }

    #[test]
    fn references_to_missing_kinds_and_vars_are_located() {
        let src = GOOD.replace(r#"kinds = ["collect"]"#, r#"kinds = ["colect"]"#);
        let e = resolved(&src).unwrap_err();
        assert!(e.message.contains("no kind named \"colect\""), "{e}");
        assert!(e.fix.as_deref().unwrap().contains("collect"));
        assert_eq!(e.key.as_deref(), Some("background.kinds"));
        let src = GOOD.replace("${inputs}", "${batch}");
        let e = resolved(&src).unwrap_err();
        assert!(e.message.contains("vars has no \"batch\""), "{e}");
    }

    #[test]
    fn a_plan_without_duration_or_workers_says_what_to_add() {
        let src = GOOD.replace("duration = \"30s\"", "");
        let e = resolved(&src).unwrap_err();
        assert!(e.fix.as_deref().unwrap().contains("--duration"));
        let p = parse(&src, &file()).unwrap();
        let o = Overrides {
            duration: Some(Duration::from_secs(5)),
            seed: Some(9),
            ..Default::default()
        };
        let r = resolve(p, &src, &file(), &o, &Fake).unwrap();
        assert_eq!((r.duration, r.seed), (Duration::from_secs(5), 9));
        let src = "duration = \"1s\"\n[target]\nbase_url = \"http://127.0.0.1:1\"\n";
        let e = resolved(src).unwrap_err();
        assert!(e.message.contains("no workers"), "{e}");
    }
}
