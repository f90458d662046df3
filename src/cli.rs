//! Command-line definitions only (clap derive). Values become validated config structs in `cmd/`
//! before any engine sees them.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::server::process::RestartPolicy;
use crate::units::{
    parse_clock_offset, parse_cpus, parse_duration, parse_interval, parse_level,
    parse_memory_limit, parse_percent, parse_positive_duration, parse_proxy, parse_rate,
    parse_rounds, ProxySpec,
};

// Help headings: options grouped by what a user is doing, the same in every subcommand's --help,
// the man pages and the completions (all three come from these definitions).
const H_TARGET: &str = "Target and request";
const H_MCP: &str = "MCP";
const H_HEALTH: &str = "Health and readiness";
const H_SHAPE: &str = "Load shape";
const H_RULES: &str = "Verdict rules";
const H_SAFETY: &str = "Refusals and safety";
const H_SERVER: &str = "The server's command (supervision)";
const H_CONTAINER: &str = "Container target (Docker)";
const H_OUTPUT: &str = "Output files";
const H_TLS: &str = "TLS";
const H_PROTOCOL: &str = "HTTP protocol";
const H_SAMPLING: &str = "Resources (sampling)";
const H_CLIENT: &str = "Client traffic (MCP stdio relay, HTTP proxy)";
const H_PLAN: &str = "Plan";
const H_REPLAY: &str = "The recording's speeds";

#[derive(Parser, Debug)]
#[command(
    name = "witness",
    version,
    about = "Load-test a server while watching it, so no number it prints is a measurement of the harness",
    after_help = "Every run writes a journal (JSON Lines, one clock); `witness report JOURNAL` re-renders it, `witness report` the latest run's, `witness report --list` lists recent runs."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// Parses witness's arguments. A negative value after a flag (`--levels -1`, `--timeout -1s`)
    /// reaches that flag's own parser, which names the flag and the accepted range: clap would
    /// otherwise call it an unknown argument and suggest `-- -1`, which in witness starts the
    /// server's command.
    pub fn parse_args<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
        let err = match Self::try_parse_from(&args) {
            Ok(cli) => return Ok(cli),
            Err(e) => e,
        };
        if let Some(e) = open_loop_conflict(&err) {
            return Err(e);
        }
        if err.kind() != clap::error::ErrorKind::UnknownArgument {
            return Err(err);
        }
        let Some(clap::error::ContextValue::String(bad)) =
            err.get(clap::error::ContextKind::InvalidArg).cloned()
        else {
            return Err(no_trailing_tip(err, &args));
        };
        // The commonest slip: a server's command without the `--` before it.
        if !bad.starts_with('-') {
            return Err(command_without_dash_dash(err, &args, &bad));
        }
        // clap names only the first short-flag piece of "-1s" ("-1"): find the whole word.
        let negative = |a: &std::ffi::OsString| {
            let a = a.to_string_lossy();
            a.starts_with(bad.as_str())
                && a.starts_with('-')
                && a[1..].starts_with(|c: char| c.is_ascii_digit() || c == '.')
        };
        let end = args.iter().position(|a| a == "--").unwrap_or(args.len());
        let at = args[..end].iter().position(negative);
        match at {
            Some(i) if i > 0 && args[i - 1].to_string_lossy().starts_with("--") => {
                let mut joined = args[..i - 1].to_vec();
                let mut pair = args[i - 1].clone();
                pair.push("=");
                pair.push(&args[i]);
                joined.push(pair);
                joined.extend_from_slice(&args[i + 1..]);
                Self::parse_args(joined)
            }
            _ => Err(no_trailing_tip(err, &args)),
        }
    }
}

/// The subcommand the arguments name (`wrap`, `load` …), if any.
fn subcommand(args: &[std::ffi::OsString]) -> Option<String> {
    args.iter()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .find(|a| !a.starts_with('-'))
}

/// Subcommands that run a server's command given after `--`.
const TAKES_COMMAND: [&str; 4] = ["wrap", "load", "soak", "replay"];

/// An unknown flag: clap's tip "to pass '--urll' as a value, use '-- --urll'" would, in witness,
/// start the server's command with that flag. It is replaced by a tip that fits: what `--` means
/// here when one was typed, else where the subcommand's flags are listed; clap's own "a similar
/// argument exists" stays.
fn no_trailing_tip(mut err: clap::Error, args: &[std::ffi::OsString]) -> clap::Error {
    use clap::builder::StyledStr;
    use clap::error::{ContextKind, ContextValue};
    let Some(ContextValue::StyledStrs(tips)) = err.get(ContextKind::Suggested).cloned() else {
        return err;
    };
    let value_tip = |t: &StyledStr| t.to_string().contains("as a value, use '--");
    if !tips.iter().any(value_tip) {
        return err;
    }
    let mut kept: Vec<StyledStr> = tips.into_iter().filter(|t| !value_tip(t)).collect();
    let sub = subcommand(args).unwrap_or_default();
    kept.push(StyledStr::from(if args.iter().any(|a| a == "--") {
        "everything after `--` is the server's command; witness's own flags go before it"
            .to_string()
    } else {
        format!("`witness {sub} --help` lists its flags")
    }));
    err.insert(ContextKind::Suggested, ContextValue::StyledStrs(kept));
    err
}

/// A word witness did not expect where its flags are (`witness wrap --restart on-failure python3 -m
/// http.server`): the server's command, which goes after `--`.
fn command_without_dash_dash(
    mut err: clap::Error,
    args: &[std::ffi::OsString],
    bad: &str,
) -> clap::Error {
    use clap::builder::StyledStr;
    use clap::error::{ContextKind, ContextValue};
    let Some(sub) = subcommand(args).filter(|s| TAKES_COMMAND.contains(&s.as_str())) else {
        return err;
    };
    if args.iter().any(|a| a == "--") {
        return err;
    }
    let at = args.iter().position(|a| a == bad).unwrap_or(args.len());
    let shown = |a: &[std::ffi::OsString]| {
        a.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    };
    let fixed = format!(
        "witness {} -- {}",
        shown(&args[2.min(at)..at]),
        shown(&args[at..])
    )
    .replace("  ", " ");
    err.insert(
        ContextKind::Suggested,
        ContextValue::StyledStrs(vec![StyledStr::from(format!(
            "the server's command goes after `--`, witness's own flags before it: `{}`",
            fixed.replacen("witness ", &format!("witness {sub} "), 1)
        ))]),
    );
    err
}

/// `--rates` given with a closed-loop flag: which two ways of loading met, and what to keep.
fn open_loop_conflict(err: &clap::Error) -> Option<clap::Error> {
    let kind = clap::error::ErrorKind::ArgumentConflict;
    let text = err.to_string();
    if err.kind() != kind || !text.contains("--rates") {
        return None;
    }
    let other = if text.contains("--rounds") {
        "--rounds (requests per worker): a rate level sends for --duration instead"
    } else {
        "--levels (closed loop: concurrent workers): give --rates for arrival rates or --levels for workers, not both"
    };
    Some(clap::Error::raw(
        kind,
        format!("--rates (open loop: arrival rates) cannot be used with {other}\n"),
    ))
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the server under test as a child (or in a Docker container, or watch a running one): pass
    /// its output through, journal its lifecycle, restart it by policy, and print an annotated
    /// kill/restart timeline. Exits with the server's status.
    Wrap(Box<WrapArgs>),
    /// Drive a concurrency ladder: one outcome and one duration per request, health and the
    /// server's identity before and after every level, and a pass rule that a cliff fails (max ok at n ≤ n × the per-request max at the lowest level × --factor; the p99 in place of the max when every level has 100 ok requests).
    #[command(after_long_help = GLOSSARY, after_help = "Words used here (concurrency ladder, cliff, identity, settle, connect floor, held): see --help")]
    Load(Box<LoadArgs>),
    /// Run a long mixed workload from a plan (drivers in burst/steady/idle phases, readers,
    /// background work), check invariants at every interval, and stop at the first violation with
    /// honest partial evidence: per-kind figures, resources and the memory trend, gauges, faults.
    Soak(Box<SoakArgs>),
    /// Play a session recorded by `wrap --record` (or a HAR) again as load, at each of --speeds:
    /// each recorded request at its recorded offset ÷ the speed (open loop), the server started and
    /// watched as `load` does, and every answer compared with the recorded one.
    Replay(Box<ReplayArgs>),
    /// Re-render any past run from its journal; several journals and k6 results are first put on one
    /// clock and analysed as one run.
    Report(ReportArgs),
    /// Compare two runs level by level (or speed, rate, soak kind, kind of call): whether each
    /// figure changed beyond noise (a rank test over every ok request's duration, 95 % intervals
    /// per percentile, Fisher's exact test on failure rates), and what happened differently —
    /// timers that appeared or went, restarts, exits, new failures. Exits 1 when CURRENT is worse
    /// or a threshold breaks.
    Compare(CompareArgs),
    /// Ask an MCP server what it offers: `witness mcp tools --url URL` or `witness mcp tools -- CMD`.
    Mcp(McpArgs),
    /// Show what NVML sees: devices, driver version, memory, utilisation, temperature, power and
    /// processes. Exits 3 when there is no NVIDIA driver to ask.
    Gpu(GpuCmdArgs),
    /// Print a shell completion script for witness to stdout, e.g.
    /// `witness completions bash > ~/.local/share/bash-completion/completions/witness`.
    Completions(CompletionsArgs),
    /// Print a man page (roff) to stdout: `witness man` for witness(1), `witness man load` for
    /// witness-load(1), e.g. `witness man load | man -l -`.
    Man(ManArgs),
}

/// The words `load`'s help, the terminal and the guide (docs/README.md) use, defined once.
pub const GLOSSARY: &str = "\
Words:
  concurrency ladder  the levels of --levels run in order (1, 4, 8 …): at level n, n workers each
                      send their next request as soon as their last one ended (a closed loop)
  cliff               a level whose slowest ok request (its p99 when every level has 100 ok
                      requests) took more than n × the lowest level's per-request figure ×
                      --factor (+ --cliff-slack): worse than a queue. A server that serves
                      requests one at a time, each waiting its turn, is a line and passes; a
                      cliff is slower than even that (a lock held longer under load, a stall)
  identity            which server answered: the process id and its start time (a container's id
                      and StartedAt); a change between two probes is a restart
  settle              the wait after a level (--settle) before health and identity are probed again
  connect floor       the median time of plain TCP connects to the target, timed before any level;
                      over --max-connect-floor witness refuses to measure (exit 3)
  held                the connections witness itself held to the server at once (workers', pooled,
                      probes'); more than a level's workers means witness took what the load needed";

impl Command {
    /// Whether this run starts the server as witness's child process (wrap -- CMD): its watchdog
    /// is then forked before the runtime starts.
    pub fn starts_a_child(&self) -> bool {
        matches!(self, Command::Wrap(a) if !a.command.is_empty() && !a.container.is_container())
    }

    /// Whether the command's own work runs on threads of its own (the output drains, the process
    /// tree's watcher) and its async runtime only waits: `wrap` with nothing to relay or proxy.
    /// One thread then drives the runtime; the worker threads a busy one needs are not started
    /// (each costs `wrap -- true` about a tenth of a millisecond). A relayed MCP session keeps
    /// them: its calls' bookkeeping is answered by a worker at once.
    pub fn mostly_waits(&self) -> bool {
        matches!(self, Command::Wrap(a) if a.proxy.is_none() && !a.stdin.relays())
    }

    /// The exit code for witness's own failures in this mode.
    pub fn internal_error_code(&self) -> i32 {
        match self {
            Command::Wrap(_) => crate::error::WRAP_INTERNAL,
            Command::Load(_) | Command::Soak(_) | Command::Replay(_) => crate::error::REFUSED,
            _ => 1,
        }
    }
}

/// How the server under test is supervised (shared by wrap, load and soak).
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = H_SERVER)]
pub struct SuperviseArgs {
    /// When a child that exited is started again.
    #[arg(long, value_enum, default_value = "never")]
    pub restart: RestartPolicy,
    /// Give up after this many restarts.
    #[arg(long, value_name = "N")]
    pub max_restarts: Option<u32>,
    /// Delay before the first restart; doubles on each quick failure (up to 30 s), resets after a
    /// process has run for --healthy-after.
    #[arg(long, value_parser = parse_duration, default_value = "1s", value_name = "DURATION")]
    pub backoff: Duration,
    /// A process that ran this long resets the restart backoff.
    #[arg(long, value_parser = parse_duration, default_value = "10s", value_name = "DURATION")]
    pub healthy_after: Duration,
    /// Extra pattern to watch for in the server's output: REGEX or LABEL=REGEX (repeatable).
    #[arg(long = "watch", value_name = "REGEX")]
    pub watch: Vec<String>,
    /// A timer you know of (a watchdog, a proxy timeout): exits and durations near it are flagged.
    #[arg(long = "timer", value_parser = parse_positive_duration, value_name = "DURATION")]
    pub timer: Vec<Duration>,
    /// After asking the server to stop (SIGTERM or a forwarded signal), SIGKILL its process group
    /// this long later.
    #[arg(long, value_parser = parse_duration, default_value = "10s", value_name = "DURATION")]
    pub grace: Duration,
}

impl SuperviseArgs {
    /// The `--timer` values in seconds, as the journal's settings carry them.
    pub fn timers_s(&self) -> Vec<f64> {
        self.timer.iter().map(|d| d.as_secs_f64()).collect()
    }
}

/// Where the run's records go.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = H_OUTPUT)]
pub struct OutputArgs {
    /// The journal (JSON Lines); default: a new file in $XDG_STATE_HOME/witness (else
    /// ~/.local/state/witness), named at the end. Never written through a symbolic link.
    #[arg(long, value_name = "FILE")]
    pub journal: Option<PathBuf>,
    /// Write the JSON report here at the end.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Write the HTML timeline here at the end (one self-contained file; open it in a browser).
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Write a Chrome Trace Event file here at the end (open it in ui.perfetto.dev or
    /// chrome://tracing).
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Write a JUnit XML report here at the end, for a CI system: a test case per level (or
    /// speed, or the soak) and per threshold, failures in the summary's words.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Give the run a name (kept in its journal; `witness report --list` shows it): `witness
    /// compare --baseline NAME` compares with the latest run of that name.
    #[arg(long, value_name = "NAME", value_parser = parse_run_name)]
    pub name: Option<String>,
}

/// A run's name: letters, digits and `-_.:/@+`, 1 to 100 of them (a branch name fits).
fn parse_run_name(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() <= 100
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.:/@+".contains(c));
    if ok && s != "last" && !s.starts_with("last:") {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{s:?} is not a run name: use 1 to 100 letters, digits or -_.:/@+ (not `last`, which `witness compare` reads as the latest run), e.g. --name main or --name nightly-2026-12-07"
        ))
    }
}

/// Whom witness trusts over https:// (shared by load, soak, mcp tools and wrap --proxy).
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = H_TLS)]
pub struct TlsArgs {
    /// Trust this PEM file's certificates (a development CA, or the server's self-signed
    /// certificate) beside the system's trust store.
    #[arg(long, value_name = "FILE")]
    pub cacert: Option<PathBuf>,
    /// Do not verify the server's TLS certificate at all (said on the terminal and in the report).
    #[arg(long)]
    pub insecure: bool,
}

/// Which HTTP `load` speaks.
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = H_PROTOCOL)]
pub struct ProtocolArgs {
    /// Speak HTTP/2: over TLS by ALPN for https://, with prior knowledge (h2c) for http://. A level
    /// of n sends n concurrent streams over --connections connections.
    #[arg(long)]
    pub http2: bool,
    /// With --http2: how many connections a level's streams share (as oha's -p).
    #[arg(long, value_name = "N", default_value = "1", requires = "http2", value_parser = clap::value_parser!(u32).range(1..=10000))]
    pub connections: u32,
}

/// Whether NVIDIA GPUs are sampled (shared by wrap, load and soak).
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = H_SAMPLING)]
pub struct GpuArgs {
    /// Sample NVIDIA GPUs through NVML: `auto` when a driver is present (one line on stderr when
    /// not), `on` requires one (exit 3 without), `off` never.
    #[arg(long, value_enum, default_value = "auto", value_name = "MODE")]
    pub gpu: GpuMode,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuMode {
    Auto,
    On,
    Off,
}

/// The server in a Docker container instead of a child process (shared by wrap, load and soak).
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = H_CONTAINER)]
pub struct ContainerArgs {
    /// Run the server in a new container from this image (already on the engine; witness never
    /// pulls). Arguments after `--` become its command. The container is removed at the end unless
    /// --keep.
    #[arg(long, value_name = "IMAGE", conflicts_with = "container")]
    pub image: Option<String>,
    /// Watch a running container by name or id, without owning it: its logs, lifecycle and stats are
    /// journalled, and it is never stopped, signalled or removed.
    #[arg(long, value_name = "NAME|ID")]
    pub container: Option<String>,
    /// Memory limit of the new container (512m, 1g; b/k/m/g as docker takes them). Swap is capped at
    /// the same value, so the limit is what the server gets.
    #[arg(long, value_parser = parse_memory_limit, value_name = "SIZE", requires = "image")]
    pub memory: Option<i64>,
    /// CPUs the new container may use (1.5 = one and a half cores).
    #[arg(long, value_parser = parse_cpus, value_name = "N", requires = "image")]
    pub cpus: Option<f64>,
    /// Environment of the new container: K=V, or K alone to pass witness's own value (repeatable).
    #[arg(long = "env", value_name = "K=V", requires = "image")]
    pub env: Vec<String>,
    /// Publish a container port: HOST:CONTAINER or IP:HOST:CONTAINER (repeatable). Without an IP
    /// the port is bound on 127.0.0.1 only.
    #[arg(long = "publish", value_parser = crate::server::container::Publish::parse, value_name = "HOST:CONTAINER", requires = "image")]
    pub publish: Vec<crate::server::container::Publish>,
    /// Docker's own restart policy for the new container: no, on-failure[:N], always, unless-stopped.
    /// witness counts the engine's restarts (its --restart is for child processes only).
    #[arg(long = "docker-restart", value_parser = crate::server::container::DockerRestart::parse, value_name = "POLICY", requires = "image")]
    pub docker_restart: Option<crate::server::container::DockerRestart>,
    /// Leave the new container in place at the end (stopped), for `docker logs` or `docker inspect`.
    #[arg(long, requires = "image")]
    pub keep: bool,
    /// A label on the new container: K=V (repeatable); every container witness creates also carries
    /// `witness.owner=witness`.
    #[arg(long = "label", value_name = "K=V", requires = "image")]
    pub labels: Vec<String>,
    /// The Docker engine to use (unix:///path/docker.sock, tcp://HOST:2375); default: $DOCKER_HOST,
    /// else unix:///var/run/docker.sock.
    #[arg(long = "docker-host", value_name = "URL")]
    pub docker_host: Option<String>,
}

impl ContainerArgs {
    /// Whether the server runs in (or is) a container.
    pub fn is_container(&self) -> bool {
        self.image.is_some() || self.container.is_some()
    }
}

#[derive(Args, Debug)]
pub struct WrapArgs {
    #[command(flatten)]
    pub supervise: SuperviseArgs,
    /// What the child's stdin is. `auto`: relayed when witness's stdin is a pipe, socket or file
    /// (an MCP client launched witness), handed over when it is a terminal or /dev/null. `relay`: witness reads its stdin and
    /// writes the child's, and the child's stdout back, byte for byte, reading the JSON-RPC that
    /// passes (MCP over stdio); the child gets new pipes on each restart. `inherit`: the child gets
    /// witness's own stdin and stdout descriptors; witness sees none of the traffic.
    #[arg(help_heading = H_CLIENT,
        long = "stdin",
        value_enum,
        default_value = "auto",
        value_name = "MODE"
    )]
    pub stdin: StdinMode,
    /// Record the HTTP that passes: listen on LISTEN and forward every request unchanged to
    /// UPSTREAM (where the server is told to listen), journalling each exchange; while nothing
    /// listens on UPSTREAM the proxy answers 502 and says the server was down. Loopback
    /// addresses: `--proxy 127.0.0.1:8080=127.0.0.1:8081`; `=https://127.0.0.1:8443` speaks TLS to
    /// the server (the client still speaks plain HTTP to LISTEN).
    #[arg(help_heading = H_CLIENT, long, value_parser = parse_proxy, value_name = "LISTEN=UPSTREAM")]
    pub proxy: Option<ProxySpec>,
    #[command(flatten)]
    pub record: RecordArgs,
    #[command(flatten)]
    pub container: ContainerArgs,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub tls: TlsArgs,
    #[command(flatten)]
    pub gpu: GpuArgs,
    /// How often the server's resources (process tree or container stats, GPUs) are read. The
    /// engine collects a container's stats once a second, so they come no faster than that.
    #[arg(help_heading = H_SAMPLING, long, value_parser = parse_interval, default_value = "1s", value_name = "DURATION")]
    pub sample_interval: Duration,
    /// The server to run, after `--` (with --image: the container's command).
    #[arg(help_heading = H_SERVER, last = true, required_unless_present_any = ["image", "container"], value_name = "CMD")]
    pub command: Vec<String>,
}

/// `wrap --record FILE` and its bounds.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Recording the session")]
pub struct RecordArgs {
    /// Write the session that passes to FILE as it goes, so `witness replay` can play it again:
    /// over stdio, every JSON-RPC message the client sends with its offset and the server's
    /// answers (JSONL); through --proxy, every HTTP exchange (HAR 1.2). Credential headers, the
    /// run's secrets and the values of JSON keys naming a secret (token, password, secret,
    /// api_key, authorization, …) are masked.
    #[arg(long, value_name = "FILE")]
    pub record: Option<std::path::PathBuf>,
    /// The recording's cap: past it, messages are counted, not kept, and a note says how many.
    #[arg(long, value_parser = crate::units::parse_size, default_value = "64MiB", value_name = "SIZE", requires = "record")]
    pub record_max: u64,
    /// The most of one answer's result (stdio) or one HTTP body (HAR) that is kept; a longer one
    /// is marked as cut.
    #[arg(long, value_parser = crate::units::parse_size, default_value = "256KiB", value_name = "SIZE", requires = "record")]
    pub record_body_max: u64,
    /// Also mask the values of JSON keys (and headers, query parameters) named NAME, matched
    /// case-insensitively and as a part of a key (`pin` masks `user_pin`). Repeatable.
    #[arg(long = "record-mask-key", value_name = "NAME", requires = "record")]
    pub record_mask_key: Vec<String>,
}

/// `wrap --stdin`: how the child's stdin and stdout meet witness's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StdinMode {
    Auto,
    Relay,
    Inherit,
}

impl StdinMode {
    /// Whether the child's stdin and stdout are relayed (and read) rather than handed over.
    pub fn relays(self) -> bool {
        match self {
            StdinMode::Relay => true,
            StdinMode::Inherit => false,
            // A terminal is a person's; /dev/null is no client at all (a CI step, a service
            // manager): nothing could pass, and the child reads the same EOF from it directly.
            // SAFETY: isatty only reads fd 0's state.
            StdinMode::Auto => (unsafe { libc::isatty(0) != 1 }) && !is_dev_null(0),
        }
    }
}

/// Whether `fd` is /dev/null (the character device 1:3, whatever its path).
fn is_dev_null(fd: libc::c_int) -> bool {
    // SAFETY: fstat fills a plain struct through a valid pointer.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::fstat(fd, &mut st) == 0
            && st.st_mode & libc::S_IFMT == libc::S_IFCHR
            && st.st_rdev == libc::makedev(1, 3)
    }
}

#[derive(Args, Debug)]
pub struct LoadArgs {
    /// The URL every request goes to, http:// or https:// (with --mcp: the streamable HTTP
    /// endpoint, e.g. http://127.0.0.1:8000/mcp). Loopback only, unless --allow-remote.
    #[arg(help_heading = H_TARGET, long, required_unless_present = "mcp")]
    pub url: Option<String>,
    /// Call this MCP tool instead of sending HTTP requests: over streamable HTTP with --url, over
    /// stdio (witness starts the command after `--` with pipes) without. Each worker opens its own
    /// session once, then calls the tool with unique request ids.
    #[arg(help_heading = H_MCP, long, value_name = "TOOL")]
    pub mcp: Option<String>,
    /// The tool's arguments: a JSON object, or @FILE to read it from a file (with --mcp).
    #[arg(help_heading = H_MCP, long = "args", value_name = "JSON|@FILE", requires = "mcp")]
    pub tool_args: Option<String>,
    /// The MCP revision to speak: 2025-11-25 (the default: `initialize`, and `Mcp-Session-Id` when
    /// the server keeps sessions; the server may negotiate an older one) or 2026-07-28 (no
    /// `initialize` and no protocol sessions: `server/discover`, then the envelope on every request).
    #[arg(help_heading = H_MCP, long, value_name = "VERSION", requires = "mcp")]
    pub mcp_protocol: Option<String>,
    /// HTTP method [default: GET, or POST when --body is given].
    #[arg(help_heading = H_TARGET, long)]
    pub method: Option<String>,
    /// Request body: TEXT, or @FILE to read it from a file (implies POST unless --method says
    /// otherwise). Without it: no body for GET, HEAD, DELETE and OPTIONS (a server that does not
    /// read a GET's body would take it for the start of the next request), `{}` for POST, PUT and
    /// PATCH.
    #[arg(help_heading = H_TARGET, long)]
    pub body: Option<String>,
    /// Extra request header 'Name: value' (repeatable). The values of Authorization,
    /// Proxy-Authorization, Cookie and any --secret-header are secrets: they appear in no file and
    /// no line witness prints (shown as ***).
    #[arg(help_heading = H_TARGET, long = "header", value_name = "'K: V'")]
    pub header: Vec<String>,
    /// Treat this header's value as a secret too, like Authorization (repeatable).
    #[arg(help_heading = H_TARGET, long = "secret-header", value_name = "NAME")]
    pub secret_header: Vec<String>,
    /// A request header whose value is read from an environment variable, 'Name=VAR' (repeatable):
    /// always a secret, and not in witness's argv where `ps` could read it.
    #[arg(help_heading = H_TARGET, long = "header-env", value_name = "NAME=VAR")]
    pub header_env: Vec<String>,
    /// Health probe URL (a GET answered 2xx is healthy). Default: the URL's origin + /health when
    /// the server has one; otherwise a GET of the URL itself when the method is GET, else a TCP
    /// connect to the URL's port (witness says which it chose).
    #[arg(help_heading = H_HEALTH, long)]
    pub health_url: Option<String>,
    /// Concurrency levels, in order.
    #[arg(help_heading = H_SHAPE, long, value_delimiter = ',', default_value = "1,4,8", value_parser = parse_level)]
    pub levels: Vec<u32>,
    /// Requests each worker sends per level, instead of a level's --duration (`--rounds 1`: one
    /// request per worker).
    #[arg(help_heading = H_SHAPE, long, conflicts_with = "duration", value_parser = parse_rounds)]
    pub rounds: Option<u32>,
    /// How long each level sends, every worker back to back [default: 5s, as wrk and oha run for a
    /// time, so a level's percentiles rest on many requests; rate levels: 10s].
    #[arg(help_heading = H_SHAPE, long, value_parser = parse_positive_duration)]
    pub duration: Option<Duration>,
    /// witness's own limit on one whole request (connect included).
    #[arg(help_heading = H_SHAPE, long, value_parser = parse_positive_duration, default_value = "30s")]
    pub timeout: Duration,
    /// witness's own limit on connecting; default: the smaller of --timeout and 5s.
    #[arg(help_heading = H_SHAPE, long, value_parser = parse_positive_duration)]
    pub connect_timeout: Option<Duration>,
    /// Settle: wait this long after a level before probing health and identity again (the server
    /// finishes what it was doing).
    #[arg(help_heading = H_SHAPE, long, value_parser = parse_duration, default_value = "2s")]
    pub settle: Duration,
    /// A threshold the run must meet, beside witness's own rules (repeatable): FIGURE[@LEVEL] OP
    /// VALUE, e.g. 'p95@8 < 300ms', 'error_rate < 1%', 'restarts == 0', 'timers == 0'. A broken one
    /// fails the run (exit 1); figures: p50 p95 p99 max mean error_rate timeout_rate rejected_rate
    /// rps restarts timers exits.
    #[arg(help_heading = H_RULES, long = "assert", value_name = "EXPR", value_parser = parse_assert)]
    pub asserts: Vec<String>,
    /// Stop the run at the first level after which a threshold is broken by a measured value (not
    /// by too few requests): the levels after it are not run, and the run is labelled partial.
    #[arg(help_heading = H_RULES, long, requires = "asserts")]
    pub assert_abort: bool,
    /// The cliff rule: max ok duration at n ≤ n × (per-request max at the lowest level) × factor (the
    /// p99 in place of the max when every level has 100 ok requests or more).
    #[arg(help_heading = H_RULES, long, default_value_t = 1.5)]
    pub factor: f64,
    /// Added to the cliff rule's allowance: below this, a difference is scheduling noise.
    #[arg(help_heading = H_RULES, long, value_parser = parse_duration, default_value = "50ms")]
    pub cliff_slack: Duration,
    /// Refuse to run (exit 3) if the connect floor (the median TCP connect to the target, timed
    /// before any level) exceeds this.
    #[arg(help_heading = H_SAFETY, long, value_parser = parse_positive_duration, default_value = "100ms")]
    pub max_connect_floor: Duration,
    /// Allow a target that is not a loopback address (a load test aimed at the wrong host is an outage).
    #[arg(help_heading = H_SAFETY, long)]
    pub allow_remote: bool,
    /// Statuses that mean a capacity refusal (counted as rejected, not errors).
    #[arg(help_heading = H_RULES, long, value_delimiter = ',', default_value = "429,503")]
    pub reject_status: Vec<u16>,
    /// A response body containing this is a capacity refusal; empty to disable.
    #[arg(help_heading = H_RULES, long, default_value = "QUEUE_FULL")]
    pub reject_body: String,
    /// Statuses that count as ok besides 1xx/2xx, e.g. 301,302 (redirects are not followed, so an
    /// unexpected 3xx is an error).
    #[arg(help_heading = H_RULES, long, value_delimiter = ',', value_name = "STATUS,...")]
    pub accept_status: Vec<u16>,
    /// Keep at most this much of each response body in memory (the whole body is still read and its
    /// size recorded; a longer one is marked cut). 4MiB, 64k, 1g.
    #[arg(help_heading = H_RULES, long, value_parser = crate::units::parse_size, default_value = "4MiB", value_name = "SIZE")]
    pub max_body: u64,
    /// With a command: how long to wait for health to answer 200 before the first level.
    #[arg(help_heading = H_HEALTH, long, value_parser = parse_positive_duration, default_value = "30s")]
    pub ready_timeout: Duration,
    /// witness's own limit on one health probe.
    #[arg(help_heading = H_HEALTH, long, value_parser = parse_positive_duration, default_value = "5s")]
    pub health_timeout: Duration,
    /// How often the server's resources are sampled.
    #[arg(help_heading = H_SAMPLING, long, value_parser = parse_interval, default_value = "1s")]
    pub sample_interval: Duration,
    /// Pass the started server's output through to witness's stderr.
    #[arg(help_heading = H_SERVER, long)]
    pub show_output: bool,
    #[command(flatten)]
    pub open: OpenArgs,
    #[command(flatten)]
    pub gpu: GpuArgs,
    #[command(flatten)]
    pub supervise: SuperviseArgs,
    #[command(flatten)]
    pub container: ContainerArgs,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub tls: TlsArgs,
    #[command(flatten)]
    pub protocol: ProtocolArgs,
    /// Start the server with this command (after `--`; with --image, the container's command);
    /// without a command, --image or --container, attach to whatever listens on the URL's port.
    #[arg(help_heading = H_SERVER, last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
pub struct SoakArgs {
    /// The soak plan (TOML): target, request kinds, worker groups, invariants, gauges and secrets by
    /// reference. See examples/plans/.
    #[arg(help_heading = H_PLAN, long, value_name = "PLAN.toml")]
    pub plan: PathBuf,
    /// How long the workload runs (overrides the plan's `duration`).
    #[arg(help_heading = H_PLAN, long, value_parser = parse_positive_duration)]
    pub duration: Option<Duration>,
    /// Seeds every random choice, so a soak can be replayed (default: the plan's, else random and
    /// printed).
    #[arg(help_heading = H_PLAN, long)]
    pub seed: Option<u64>,
    /// The progress interval: invariants, gauges and the progress line (overrides the plan's).
    #[arg(help_heading = H_PLAN, long, value_parser = parse_interval)]
    pub interval: Option<Duration>,
    /// A fault witness performs on purpose, to prove the harness notices: kill@5m, stop@2m+10s
    /// (SIGSTOP, SIGCONT 10 s later), restart@90s (SIGTERM; the restart policy brings it back).
    /// Repeatable.
    #[arg(help_heading = H_PLAN, long = "inject", value_name = "FAULT@TIME", value_parser = crate::soak::run::parse_inject)]
    pub inject: Vec<crate::soak::run::Inject>,
    /// The base URL the plan's paths are joined to (overrides the plan's target.base_url).
    #[arg(help_heading = H_PLAN, long, value_name = "URL")]
    pub base_url: Option<String>,
    /// A threshold the soak must meet (repeatable; added to the plan's `asserts`): FIGURE[[KIND]]
    /// OP VALUE, e.g. 'p99[GET /api] < 500ms', 'error_rate < 1%', 'restarts == 0'. A broken one
    /// fails the soak (exit 1).
    #[arg(help_heading = H_PLAN, long = "assert", value_name = "EXPR", value_parser = parse_assert)]
    pub asserts: Vec<String>,
    /// How often the server's resources (process tree, GPUs) are read.
    #[arg(help_heading = H_SAMPLING, long, value_parser = parse_interval, default_value = "1s")]
    pub sample_interval: Duration,
    /// Refuse to run (exit 3) if the median TCP connect to the target exceeds this.
    #[arg(help_heading = H_SAFETY, long, value_parser = parse_positive_duration, default_value = "100ms")]
    pub max_connect_floor: Duration,
    /// Allow targets that are not loopback addresses.
    #[arg(help_heading = H_SAFETY, long)]
    pub allow_remote: bool,
    /// Pass the started server's output through to witness's stderr.
    #[arg(help_heading = H_SERVER, long)]
    pub show_output: bool,
    #[command(flatten)]
    pub gpu: GpuArgs,
    #[command(flatten)]
    pub supervise: SuperviseArgs,
    #[command(flatten)]
    pub container: ContainerArgs,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub tls: TlsArgs,
    /// Start the server with this command (after `--`; with --image, the container's command);
    /// without a command, --image or --container, attach to whatever listens on the base URL's port.
    #[arg(help_heading = H_SERVER, last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Journals written by wrap, load or soak (complete, or cut off by a crash). Several are put on
    /// one clock by their wall-clock anchors and analysed as one run. None: the latest run's
    /// journal (see --last), found in witness's journal folder ($XDG_STATE_HOME/witness, else
    /// ~/.local/state/witness) and its index of runs given --journal elsewhere: of the runs you
    /// started from this directory when there are any, else of every run recorded there.
    #[arg(value_name = "JOURNAL")]
    pub journals: Vec<PathBuf>,
    /// A run still going: keep reading its journal until it ends, then report the whole run (a run
    /// that already ended is reported at once).
    #[arg(long, conflicts_with_all = ["list", "k6", "clock_offset"])]
    pub follow: bool,
    /// Without JOURNAL: open the N-th most recent run's journal (1: the latest, the default).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), conflicts_with_all = ["journals", "k6", "list"])]
    pub last: Option<u32>,
    /// List the recent runs (the 20 latest, newest first): when each started, its command, how it
    /// ended and its journal's path; `--last N` opens the N-th.
    #[arg(long, conflicts_with_all = ["journals", "k6", "clock_offset", "format", "output"])]
    pub list: bool,
    /// k6 results (`k6 run --out json=FILE`, plain or gzipped) read as a load source; repeat for the
    /// outputs of several k6 instances.
    #[arg(long, value_name = "FILE")]
    pub k6: Vec<PathBuf>,
    /// Correct one input's clock (another host's skew): FILE=±DURATION is added to that file's times,
    /// e.g. results.json=+1.5s.
    #[arg(long = "clock-offset", value_name = "FILE=±D", value_parser = parse_clock_offset)]
    pub clock_offset: Vec<(PathBuf, f64)>,
    /// Output format (default: text; `journal` when -o names a .jsonl file).
    #[arg(long, value_enum)]
    pub format: Option<ReportFormat>,
    /// Write here instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct CompareArgs {
    /// BASE then CURRENT, each a journal, `last` (the latest run), `last:N` (the N-th latest) or a
    /// name given with --name (its latest run). None: the two latest runs (BASE the older); one:
    /// CURRENT, compared with --baseline's run.
    #[arg(value_name = "RUN", num_args = 0..=2)]
    pub runs: Vec<String>,
    /// BASE is the latest run named NAME (`--name NAME` on load, soak, replay or wrap), other than
    /// CURRENT.
    #[arg(long, value_name = "NAME")]
    pub baseline: Option<String>,
    /// A threshold on the difference (repeatable): 'p99_delta@8 < 10%' (relative to BASE),
    /// 'p50_delta < 5ms', 'error_rate_delta < 1%' (points), 'new_timers == 0', 'new_failures ==
    /// 0', 'new_exits == 0'. A broken one exits 1.
    #[arg(long = "assert", value_name = "EXPR")]
    pub asserts: Vec<String>,
    /// A change smaller than this share of BASE's figure is noise, whatever a test says (runs on
    /// one machine differ by a few percent with nothing changed) [default: 10%].
    #[arg(long, value_name = "PCT", value_parser = parse_percent)]
    pub noise: Option<f64>,
    /// Output format (default: text).
    #[arg(long, value_enum)]
    pub format: Option<CompareFormat>,
    /// Write here instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Also write a JUnit XML report here: a test case per level's latency, per percentile, per
    /// failure rate, per change that makes CURRENT worse and per threshold.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CompareFormat {
    /// Side by side, as a person reads it.
    Text,
    /// The comparison as data.
    Json,
    /// One self-contained page: both runs' levels aligned, the figures, what happened.
    Html,
}

#[derive(Args, Debug)]
pub struct GpuCmdArgs {}

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum, value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

#[derive(Args, Debug)]
pub struct ManArgs {
    /// A subcommand's page (wrap, load, soak, report, mcp, gpu, completions); none: witness(1).
    #[arg(value_name = "SUBCOMMAND")]
    pub subcommand: Option<String>,
}

#[derive(Args, Debug)]
pub struct McpArgs {
    #[command(subcommand)]
    pub command: McpCommand,
}

#[derive(Subcommand, Debug)]
pub enum McpCommand {
    /// List the server's tools and their input schemas: the first thing to run to know what to call.
    Tools(McpToolsArgs),
    /// Serve witness's own runs to an agent over MCP (stdio): tools runs, story, explain, compare
    /// (and load, with --allow-load), each run's journal and HTML report as resources. Read-only
    /// unless --allow-load.
    Serve(McpServeArgs),
}

#[derive(Args, Debug)]
pub struct McpServeArgs {
    /// Offer the `load` tool: bounded load against loopback URLs only (off by default).
    #[arg(long)]
    pub allow_load: bool,
    /// A server command the `load` tool may start, exactly as written here (repeatable; its words
    /// are split on spaces). No other command is ever started.
    #[arg(long = "allow-command", value_name = "CMD", requires = "allow_load")]
    pub allow_command: Vec<String>,
    /// The longest load the `load` tool may run, all levels together.
    #[arg(long, value_parser = parse_positive_duration, default_value = "60s")]
    pub max_duration: Duration,
}

#[derive(Args, Debug)]
pub struct McpToolsArgs {
    /// The streamable HTTP endpoint (e.g. http://127.0.0.1:8000/mcp); without it, the command after
    /// `--` is started and spoken to over stdio.
    #[arg(long, required_unless_present = "command")]
    pub url: Option<String>,
    /// witness's own limit on each exchange (and on the server starting).
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    pub timeout: Duration,
    /// Print the tools as JSON (name, description, inputSchema) instead of text.
    #[arg(long)]
    pub json: bool,
    /// The MCP revision to speak: 2025-11-25 (default, `initialize`) or 2026-07-28 (sessionless).
    #[arg(long, value_name = "VERSION")]
    pub mcp_protocol: Option<String>,
    #[command(flatten)]
    pub tls: TlsArgs,
    /// The MCP server to start, after `--` (stdio; with --url, started and spoken to over HTTP).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportFormat {
    /// The annotated timeline, as wrap and load print it.
    Text,
    /// The JSON report.
    Json,
    /// The HTML timeline: one self-contained file.
    Html,
    /// Chrome Trace Event JSON, for Perfetto or chrome://tracing.
    Trace,
    /// The journal itself, JSON Lines: several inputs merged on one clock, re-renderable with
    /// `witness report`.
    Journal,
}

/// Open-loop levels (`--rates`) and the search for the highest level that holds (`--find-limit`).
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = H_SHAPE)]
pub struct OpenArgs {
    /// Open loop: arrival rates, in order (200/s, 30/m), instead of concurrency levels. Each level
    /// sends on a schedule made in advance, whatever the server does, for --duration (default 10s).
    #[arg(long, value_delimiter = ',', value_parser = parse_rate, value_name = "RATE,...",
          conflicts_with_all = ["levels", "rounds"])]
    pub rates: Vec<f64>,
    /// How the sends of a rate level are spaced: evenly, or as a Poisson process (random gaps).
    #[arg(long, value_enum, default_value = "constant", requires = "rates")]
    pub arrivals: Arrivals,
    /// Seeds the arrival schedule, so a run replays (default: random, stated in the journal).
    #[arg(long, requires = "rates")]
    pub seed: Option<u64>,
    /// The most requests a rate level holds in flight at once (witness's connections to the
    /// server); a send that finds the cap full goes late, and the level says so.
    #[arg(long, default_value_t = 1000, value_parser = parse_level, requires = "rates")]
    pub max_in_flight: u32,
    /// Search for the highest level that passes: double from the lowest given level until one
    /// fails, then bisect between the last pass and the first fail.
    #[arg(long)]
    pub find_limit: bool,
    /// With --find-limit: stop bisecting when the last pass and the first fail are this close.
    #[arg(long, value_parser = parse_percent, default_value = "10%", requires = "find_limit")]
    pub resolution: f64,
    /// With --find-limit: the most levels the search runs.
    #[arg(long, default_value_t = 12, value_parser = parse_max_levels, requires = "find_limit")]
    pub max_levels: u32,
}

/// `witness replay`: a recording played again as load. Its other options are `load`'s.
#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// The recording: `wrap --record`'s JSONL (MCP over stdio) or a HAR 1.2 file (`wrap --proxy
    /// --record`, a browser's export, mitmproxy's).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// The speeds to play it at, in order: 1x as recorded, 2x twice as fast (each offset halved).
    #[arg(help_heading = H_REPLAY, long, value_delimiter = ',', value_parser = crate::units::parse_speed, default_value = "1x", value_name = "SPEED,...")]
    pub speeds: Vec<f64>,
    /// Search for the highest speed that holds: double from the lowest given speed until one
    /// fails, then bisect.
    #[arg(help_heading = H_REPLAY, long)]
    pub find_limit: bool,
    /// With --find-limit: stop bisecting when the last pass and the first fail are this close.
    #[arg(help_heading = H_REPLAY, long, value_parser = parse_percent, default_value = "10%", requires = "find_limit")]
    pub resolution: f64,
    /// With --find-limit: the most speeds the search plays.
    #[arg(help_heading = H_REPLAY, long, default_value_t = 8, value_parser = parse_max_levels, requires = "find_limit")]
    pub max_levels: u32,
    /// Copies of the session played at once (over stdio: multiplexed on witness's one session with
    /// the server, request ids rewritten).
    #[arg(help_heading = H_REPLAY, long, default_value_t = 1, value_parser = parse_sessions)]
    pub sessions: u32,
    /// What of each answer is compared with the recorded one: `outcome` (ok, the JSON-RPC error
    /// code, a tool error, the HTTP status), `shape` (also the result's keys and value types) or
    /// `exact` (also its text).
    #[arg(help_heading = H_REPLAY, long, value_enum, default_value = "shape")]
    pub compare: CompareMode,
    /// An HTTP recording's server: its scheme, host and port replace the recorded ones (loopback
    /// only, unless --allow-remote). An MCP stdio recording replays against the command after `--`.
    #[arg(help_heading = H_TARGET, long)]
    pub url: Option<String>,
    /// The most requests held in flight at once; a call that finds the cap full goes late.
    #[arg(help_heading = H_TARGET, long, default_value_t = 1000, value_parser = parse_level)]
    pub max_in_flight: u32,
    /// Extra request header 'Name: value' on every HTTP request (repeatable), e.g. the credential
    /// the recording masked. Authorization, Cookie and --secret-header values are secrets.
    #[arg(help_heading = H_TARGET, long = "header", value_name = "'K: V'")]
    pub header: Vec<String>,
    /// Treat this header's value as a secret too, like Authorization (repeatable).
    #[arg(help_heading = H_TARGET, long = "secret-header", value_name = "NAME")]
    pub secret_header: Vec<String>,
    /// A request header whose value is read from an environment variable, 'Name=VAR' (repeatable).
    #[arg(help_heading = H_TARGET, long = "header-env", value_name = "NAME=VAR")]
    pub header_env: Vec<String>,
    /// Health probe URL (HTTP); over stdio health is MCP's ping.
    #[arg(help_heading = H_HEALTH, long)]
    pub health_url: Option<String>,
    /// witness's own limit on one whole request.
    #[arg(help_heading = H_SHAPE, long, value_parser = parse_positive_duration, default_value = "30s")]
    pub timeout: Duration,
    /// witness's own limit on connecting; default: the smaller of --timeout and 5s.
    #[arg(help_heading = H_SHAPE, long, value_parser = parse_positive_duration)]
    pub connect_timeout: Option<Duration>,
    /// Wait after a speed before probing health and identity again.
    #[arg(help_heading = H_HEALTH, long, value_parser = parse_duration, default_value = "2s")]
    pub settle: Duration,
    /// A threshold the run must meet, beside witness's own rules (repeatable): FIGURE[@SPEED] OP
    /// VALUE, e.g. 'p95@4x < 300ms', 'error_rate < 1%', 'restarts == 0', 'timers == 0'. A broken one
    /// fails the run (exit 1); figures: p50 p95 p99 max mean error_rate timeout_rate rejected_rate
    /// rps restarts timers exits.
    #[arg(help_heading = H_RULES, long = "assert", value_name = "EXPR", value_parser = parse_assert)]
    pub asserts: Vec<String>,
    /// Stop the replay at the first speed after which a threshold is broken by a measured value:
    /// the speeds after it are not run, and the run is labelled partial.
    #[arg(help_heading = H_RULES, long, requires = "asserts")]
    pub assert_abort: bool,
    /// A kind of call fails its speed when its p99 (from the intended send) exceeds this × its
    /// recorded p99 + --cliff-slack.
    #[arg(help_heading = H_RULES, long, default_value_t = 1.5)]
    pub factor: f64,
    /// Added to that allowance: below this, a difference is scheduling noise.
    #[arg(help_heading = H_RULES, long, value_parser = parse_duration, default_value = "50ms")]
    pub cliff_slack: Duration,
    /// Refuse to run (exit 3) if the median TCP connect to the target exceeds this.
    #[arg(help_heading = H_SAFETY, long, value_parser = parse_positive_duration, default_value = "100ms")]
    pub max_connect_floor: Duration,
    /// Allow a target that is not a loopback address.
    #[arg(help_heading = H_SAFETY, long)]
    pub allow_remote: bool,
    /// Statuses that mean a capacity refusal (counted as rejected, not errors).
    #[arg(help_heading = H_RULES, long, value_delimiter = ',', default_value = "429,503")]
    pub reject_status: Vec<u16>,
    /// A response body (or JSON-RPC error) containing this is a capacity refusal; empty to disable.
    #[arg(help_heading = H_RULES, long, default_value = "QUEUE_FULL")]
    pub reject_body: String,
    /// Statuses that count as ok besides 1xx/2xx.
    #[arg(help_heading = H_RULES, long, value_delimiter = ',', value_name = "STATUS,...")]
    pub accept_status: Vec<u16>,
    /// Keep at most this much of each response body (a longer one is not compared).
    #[arg(help_heading = H_SHAPE, long, value_parser = crate::units::parse_size, default_value = "4MiB", value_name = "SIZE")]
    pub max_body: u64,
    /// With a command: how long to wait for the server to be ready before the first speed.
    #[arg(help_heading = H_HEALTH, long, value_parser = parse_positive_duration, default_value = "30s")]
    pub ready_timeout: Duration,
    /// witness's own limit on one health probe.
    #[arg(help_heading = H_HEALTH, long, value_parser = parse_positive_duration, default_value = "5s")]
    pub health_timeout: Duration,
    /// How often the server's resources are sampled.
    #[arg(help_heading = H_SAMPLING, long, value_parser = parse_interval, default_value = "1s")]
    pub sample_interval: Duration,
    /// Pass the started server's output through to witness's stderr.
    #[arg(help_heading = H_SERVER, long)]
    pub show_output: bool,
    #[command(flatten)]
    pub gpu: GpuArgs,
    #[command(flatten)]
    pub supervise: SuperviseArgs,
    #[command(flatten)]
    pub container: ContainerArgs,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub tls: TlsArgs,
    /// The server to start (after `--`): an MCP stdio recording's server, spoken to over its
    /// pipes; for a HAR, the server that listens on --url's port. Without one (HAR), witness
    /// attaches to whatever listens there.
    #[arg(help_heading = H_SERVER, last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// `replay --compare`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompareMode {
    Outcome,
    Shape,
    Exact,
}

fn parse_sessions(s: &str) -> Result<u32, String> {
    crate::units::parse_bounded(s, 1, 1000, "--sessions")
}

/// How a rate level's sends are spaced.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrivals {
    Constant,
    Poisson,
}

fn parse_max_levels(s: &str) -> Result<u32, String> {
    crate::units::parse_bounded(s, 2, 100, "--max-levels")
}

/// `--assert EXPR`: parsed once here (a typo is a usage error naming the grammar), kept as written.
fn parse_assert(s: &str) -> Result<String, String> {
    crate::analyze::asserts::parse(s).map(|a| a.text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_flags_need_an_image_and_wrap_takes_image_or_command() {
        let ok = Cli::try_parse_from(["witness", "wrap", "--image", "img", "--memory", "32m"]);
        assert!(ok.is_ok(), "{ok:?}");
        let e =
            Cli::try_parse_from(["witness", "wrap", "--memory", "32m", "--", "srv"]).unwrap_err();
        assert!(e.to_string().contains("--image"), "{e}");
        let e = Cli::try_parse_from(["witness", "wrap", "--image", "a", "--container", "b"])
            .unwrap_err();
        assert!(e.to_string().contains("cannot be used with"), "{e}");
        assert!(Cli::try_parse_from(["witness", "wrap"]).is_err());
        assert!(Cli::try_parse_from(["witness", "wrap", "--container", "c"]).is_ok());
    }

    #[test]
    fn a_negative_value_reaches_the_flags_own_parser() {
        let e = Cli::parse_args([
            "witness",
            "load",
            "--url",
            "http://127.0.0.1:1/",
            "--levels",
            "-1",
        ])
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("--levels") && e.contains("from 1 to 10000"),
            "{e}"
        );
        assert!(!e.contains("'-- -1'"), "{e}");
        let e = Cli::parse_args(["witness", "load", "--url", "u", "--timeout", "-1s"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--timeout") && e.contains("negative"), "{e}");
        // A value that only looks negative to clap is still the flag's value.
        let ok = Cli::parse_args(["witness", "load", "--url", "u", "--factor", "-1.5"]).unwrap();
        let Command::Load(l) = ok.command else {
            panic!("not load")
        };
        assert_eq!(l.factor, -1.5);
    }

    #[test]
    fn the_cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
