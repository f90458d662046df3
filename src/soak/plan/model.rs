//! The resolved plan the engine runs.

use super::*;

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
    /// Where it goes; None: an MCP kind over the server's stdio (a stdio plan's kinds, and only those).
    pub uri: Option<Uri>,
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

/// Where an MCP `ping` goes.
#[derive(Clone, Debug)]
pub enum PingAt {
    /// Over the server's stdin/stdout, sharing the pipe with the calls.
    Stdio,
    /// A streamable HTTP endpoint (the first MCP kind's), with that kind's headers (a server that
    /// wants a bearer token wants it on the ping too).
    Http { uri: Uri, headers: HeaderMap },
}

/// How the soak asks whether the server is healthy: readiness, every interval's invariant, and
/// whether a fault's server is back.
#[derive(Clone, Debug)]
pub enum HealthCheck {
    /// GET, 2xx wanted: the plan's `health`, or `/health` for a plan without MCP kinds.
    Url(Uri),
    /// MCP `ping`: an answer is healthy.
    Ping(PingAt),
    /// GET `/health` (a plan mixing HTTP and MCP kinds, naming no health URL), but `ping` instead
    /// when it answers 404 while the server starts: it has no such endpoint.
    UrlOrPing(Uri, PingAt),
}

impl HealthCheck {
    /// In words, for the journal's plan summary.
    pub fn describe(&self) -> String {
        let ping = |p: &PingAt| match p {
            PingAt::Stdio => "mcp ping (stdio)".to_string(),
            PingAt::Http { uri, .. } => format!("mcp ping {uri}"),
        };
        match self {
            HealthCheck::Url(u) => format!("GET {u}"),
            HealthCheck::Ping(p) => ping(p),
            HealthCheck::UrlOrPing(u, p) => format!("GET {u} ({} if it answers 404)", ping(p)),
        }
    }

    fn urls(&self) -> Vec<&Uri> {
        fn ping(p: &PingAt) -> Option<&Uri> {
            match p {
                PingAt::Stdio => None,
                PingAt::Http { uri, .. } => Some(uri),
            }
        }
        match self {
            HealthCheck::Url(u) => vec![u],
            HealthCheck::Ping(p) => ping(p).into_iter().collect(),
            HealthCheck::UrlOrPing(u, p) => std::iter::once(u).chain(ping(p)).collect(),
        }
    }
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
    /// The plan's thresholds, as written (each parsed when the plan was read).
    pub asserts: Vec<String>,
    pub rejection: Rejection,
    pub transport: Transport,
    /// None over stdio.
    pub base: Option<Uri>,
    pub health: HealthCheck,
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
        let mut v: Vec<&Uri> = self.base.iter().collect();
        v.extend(self.health.urls());
        v.extend(self.kinds.iter().filter_map(|k| k.uri.as_ref()));
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
