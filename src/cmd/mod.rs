//! One module per subcommand: turn validated arguments into producers, a journal, and views.

pub mod compare;
pub mod completions;
pub mod gpu;
pub mod load;
pub mod man;
pub mod mcp;
pub mod mcp_serve;
pub mod replay;
pub mod report;
pub mod soak;
pub mod wrap;

use std::sync::Arc;

use crate::analyze::Analysis;
use crate::cli::{ContainerArgs, OutputArgs, SuperviseArgs};
use crate::error::usage;
use crate::journal::{Header, Journal};
use crate::report as views;
use crate::server::container::{Container, ContainerConfig, RunSpec, Spec};
use crate::server::logs::Patterns;
use crate::server::process::{ProcessConfig, RestartPolicy, Supervisor};
use crate::server::Target;

/// The supervisor's config from its flags; a bad `--watch` is a usage error naming it.
pub fn process_config(
    args: &SuperviseArgs,
    command: Vec<String>,
    pass_through: bool,
) -> anyhow::Result<ProcessConfig> {
    if command.is_empty() || command[0].is_empty() {
        return Err(usage(
            "no command to run: give it after `--`, e.g. `witness wrap -- ./server --port 8080`",
        ));
    }
    // A command that is not there is said now, in one line, before a journal or a timeline exists.
    crate::server::process::check_startable(&command[0])?;
    Ok(ProcessConfig {
        command,
        restart: args.restart,
        max_restarts: args.max_restarts,
        backoff: args.backoff,
        backoff_max: std::time::Duration::from_secs(30).max(args.backoff),
        healthy_after: args.healthy_after,
        grace: args.grace,
        patterns: Arc::new(Patterns::new(&args.watch)?),
        pass_through,
        inherit_stdin: false,
        port: None,
        stdio: None,
        input_closed: None,
        on_exit: None,
    })
}

/// For load and soak: a server command that cannot be started is configuration to fix (exit 2), in
/// the same words; wrap keeps a shell's 127 and 126, as `timeout` and `tini` do.
pub fn command_is_usage(e: anyhow::Error) -> anyhow::Error {
    match e.downcast_ref::<crate::error::SpawnError>() {
        Some(s) => usage(s.to_string()),
        None => e,
    }
}

/// The container target's config from its flags. witness's own restart policy is for child
/// processes; a container restarts by the engine's (`--docker-restart`), which witness observes.
pub fn container_config(
    sup: &SuperviseArgs,
    args: &ContainerArgs,
    command: Vec<String>,
    pass_through: bool,
) -> anyhow::Result<ContainerConfig> {
    if sup.restart != RestartPolicy::Never {
        return Err(usage(
            "--restart is witness's own restart policy for a child process; for a container use Docker's: --docker-restart on-failure[:N]|always|unless-stopped",
        ));
    }
    let spec = match (&args.image, &args.container) {
        (Some(image), None) => {
            let mut labels = Vec::new();
            for l in &args.labels {
                match l.split_once('=') {
                    Some((k, v)) if !k.is_empty() => labels.push((k.to_string(), v.to_string())),
                    _ => return Err(usage(format!("--label {l:?}: write it KEY=VALUE"))),
                }
            }
            if let Some(e) = args.env.iter().find(|e| e.is_empty() || e.starts_with('=')) {
                return Err(usage(format!(
                    "--env {e:?}: write it KEY=VALUE, or KEY to pass witness's own value"
                )));
            }
            Spec::Run(RunSpec {
                image: image.clone(),
                command,
                memory: args.memory,
                cpus: args.cpus,
                env: args.env.clone(),
                publish: args.publish.clone(),
                restart: args.docker_restart.unwrap_or_default(),
                keep: args.keep,
                labels,
            })
        }
        (None, Some(name)) => {
            if !command.is_empty() {
                return Err(usage(format!(
                    "--container {name} attaches to a running container: it takes no command after `--` (use --image IMAGE -- ARGS to run one)"
                )));
            }
            Spec::Attach(name.clone())
        }
        _ => return Err(usage("give one of --image IMAGE or --container NAME")),
    };
    Ok(ContainerConfig {
        docker_host: args.docker_host.clone(),
        spec,
        patterns: Arc::new(Patterns::new(&sup.watch)?),
        pass_through,
        grace: sup.grace,
    })
}

/// Attach mode (no command, no container): witness reads no output of the server, so a `--watch`
/// pattern could never match. A bad one is named like anywhere else; a good one is refused rather
/// than accepted silently.
pub fn check_attach_watch(watch: &[String]) -> anyhow::Result<()> {
    Patterns::new(watch)?;
    if let Some(w) = watch.first() {
        return Err(usage(format!(
            "--watch {w:?}: witness reads no output from a server it attached to (no command after `--`, no --image/--container), so this pattern would never match; start the server with witness (`-- CMD`) or drop --watch"
        )));
    }
    Ok(())
}

/// The server under test, validated from its flags before anything starts.
pub enum TargetConfig {
    Process(ProcessConfig),
    Container(ContainerConfig),
}

/// A container (`--image` / `--container`) or a child process (the command after `--`); bad flags
/// are usage errors naming the flag. wrap, load and soak all read their target here.
pub fn target_config(
    sup: &SuperviseArgs,
    container: &ContainerArgs,
    command: Vec<String>,
    pass_through: bool,
) -> anyhow::Result<TargetConfig> {
    if container.is_container() {
        return Ok(TargetConfig::Container(container_config(
            sup,
            container,
            command,
            pass_through,
        )?));
    }
    Ok(TargetConfig::Process(process_config(
        sup,
        command,
        pass_through,
    )?))
}

/// Starts the server under test; its first spawn is journalled when this returns.
/// Ends the journal, reads it back, prints the terminal view and writes the requested views: the
/// live path is the re-render path (`witness report` shows the same).
pub fn finish_run(
    journal: &Journal,
    output: &OutputArgs,
    reason: &str,
    partial: bool,
    exit_code: Option<i32>,
) -> anyhow::Result<Analysis> {
    let term = views::terminal::Terminal::for_stderr();
    finish_run_with(journal, output, reason, partial, exit_code, term, &|_| {})
}

/// [`finish_run`] with the terminal view the caller set up (what it already printed live), and
/// `first`, given the final analysis before the summary is printed (load's final table on stdout).
pub fn finish_run_with(
    journal: &Journal,
    output: &OutputArgs,
    reason: &str,
    partial: bool,
    exit_code: Option<i32>,
    term: views::terminal::Terminal,
    first: &dyn Fn(&Analysis),
) -> anyhow::Result<Analysis> {
    journal.emit(crate::journal::Event::End {
        reason: reason.into(),
        partial,
        exit_code,
    });
    if let Err(lost) = journal.flush() {
        // Render what did reach the file (every view labels it partial), then say what is missing.
        if let Err(e) = render_run(journal, output, &term, first) {
            crate::errln!("witness: {e:#}");
        }
        return Err(lost);
    }
    render_run(journal, output, &term, first)
}

/// Reads the journal back, hands the analysis to `first`, prints the terminal view and writes the
/// requested views.
pub fn render_run(
    journal: &Journal,
    output: &OutputArgs,
    term: &views::terminal::Terminal,
    first: &dyn Fn(&Analysis),
) -> anyhow::Result<Analysis> {
    use crate::report::View;
    let file = crate::sources::journal::JournalFile::open(journal.path())?;
    let analysis = crate::analyze::analyze(&file);
    first(&analysis);
    crate::out::write_bytes(crate::out::To::Stderr, &term.render(&analysis)?);
    crate::errln!("witness: journal: {}", journal.path().display());
    write_views(output, &analysis)?;
    Ok(analysis)
}

/// The server under test with its samplers running.
pub struct Measured {
    pub target: Target,
    pub sampling: crate::sample::Sampling,
}

/// Why nothing could be measured: already journalled as a refusal; the caller finishes the run with
/// `reason` (and `partial`) and returns `error`.
pub struct NotStarted {
    pub error: anyhow::Error,
    pub reason: &'static str,
    pub partial: bool,
}

/// An error whose reason the run's REFUSED line already says (its note is journalled, and the views
/// print it): the last line names it by its first words only, so the reason is said once. The
/// error itself stays in the chain and still decides the exit code.
pub(crate) fn said_above(e: anyhow::Error) -> anyhow::Error {
    let words = format!("{e}");
    let head = words.split(": ").next().unwrap_or(&words).to_string();
    let head = head.lines().next().unwrap_or_default().to_string();
    e.context(crate::error::AlreadySaid(format!(
        "refused: {head} (the reason is in the REFUSED line above)"
    )))
}

/// For load and soak: the GPU check first (so `--gpu on` without a driver refuses having started
/// nothing), then the target — started from `target_cfg`, or attached to by `port` — then the
/// process or container sampler and the GPU sampler, every `interval`.
pub async fn start_measured(
    gpu: &crate::cli::GpuArgs,
    target_cfg: Option<TargetConfig>,
    port: u16,
    journal: &Journal,
    interval: std::time::Duration,
) -> Result<Measured, NotStarted> {
    use crate::sample::PidSource;
    use std::sync::OnceLock;
    let refused = |e: &anyhow::Error| {
        journal.emit(crate::journal::Event::Note {
            level: "refused".into(),
            text: format!("{e:#}"),
        })
    };
    // The GPU sampler learns the server's pid once the target exists.
    let late: Arc<OnceLock<PidSource>> = Arc::new(OnceLock::new());
    let late_pids: PidSource = {
        let late = late.clone();
        Box::new(move || late.get().and_then(|f| f()))
    };
    let gpu = gpu::gpu_sampler(gpu, late_pids, journal).map_err(|error| {
        refused(&error);
        NotStarted {
            error: said_above(error),
            reason: "refused before starting the server",
            partial: false,
        }
    })?;
    let target = match target_cfg {
        None => Target::Attach(crate::server::attach::Attach::start(port, journal.clone())),
        Some(tcfg) => build_target(tcfg, journal).await.map_err(|e| {
            refused(&e);
            // No engine, no such image: configuration to fix (2), not a refusal to measure.
            let error = if e.chain().any(|c| c.is::<crate::error::UsageError>()) {
                e
            } else {
                crate::error::refuse(format!("{e:#}"))
            };
            NotStarted {
                error: said_above(error),
                reason: "the server could not be started",
                partial: true,
            }
        })?,
    };
    let _ = late.set(target.pid_source());
    // The process tree from /proc, or the engine's container stats; and the GPUs.
    let mut samplers = target.samplers();
    samplers.extend(gpu);
    let sampling = crate::sample::spawn_sampling(samplers, journal.clone(), interval);
    Ok(Measured { target, sampling })
}

pub async fn build_target(cfg: TargetConfig, journal: &Journal) -> anyhow::Result<Target> {
    Ok(match cfg {
        TargetConfig::Process(c) => Target::Process(Supervisor::start(c, journal.clone()).await?),
        TargetConfig::Container(c) => {
            Target::Container(Container::start(c, journal.clone()).await?)
        }
    })
}

/// Refuses, before anything runs, an output that could not be written at the end or that would
/// overwrite another: two flags naming one file (`--journal X --report X` would overwrite the
/// journal), a folder, a missing or unwritable folder. Each is named with its flag.
pub fn check_outputs(out: &OutputArgs) -> anyhow::Result<()> {
    let files = [
        ("--journal", &out.journal),
        ("--report", &out.report),
        ("--html", &out.html),
        ("--trace", &out.trace),
        ("--junit", &out.junit),
    ];
    let mut seen: Vec<(&str, &std::path::Path, Option<std::path::PathBuf>)> = Vec::new();
    for (flag, path) in files {
        let Some(path) = path else { continue };
        if path.is_dir() {
            return Err(usage(format!(
                "{flag} {} is a folder; give a file name inside it",
                path.display()
            )));
        }
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."));
        // The journal's folder is created when missing; the views' must exist.
        if flag != "--journal" || dir.is_dir() {
            if !dir.is_dir() {
                return Err(usage(format!(
                    "{flag} {}: the folder {} does not exist; create it or choose another path",
                    path.display(),
                    dir.display()
                )));
            }
            writable(flag, path)?;
        }
        let same_as = |other: &std::path::Path, other_key: &Option<std::path::PathBuf>| {
            same_file(path, other) || (key(path).is_some() && key(path) == *other_key)
        };
        if let Some((other, p, _)) = seen.iter().find(|(_, p, k)| same_as(p, k)) {
            return Err(usage(format!(
                "{flag} {} and {other} {} name the same file: one would overwrite the other (the journal is the run's only record); give each its own path",
                path.display(),
                p.display()
            )));
        }
        seen.push((flag, path, key(path)));
    }
    Ok(())
}

/// One spelling of a path whose folder exists: the folder made absolute, plus the file name.
fn key(path: &std::path::Path) -> Option<std::path::PathBuf> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    Some(std::fs::canonicalize(dir).ok()?.join(path.file_name()?))
}

/// Two existing paths that are one file (a link, another spelling).
fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// Whether witness can create (or append to) the file: tried for real, so a read-only mount, a
/// folder witness may not write in, or a special file is found now and not after the run. A file
/// the check created is removed again.
fn writable(flag: &str, path: &std::path::Path) -> anyhow::Result<()> {
    let existed = path.exists();
    match std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
    {
        Ok(_) => {
            if !existed {
                let _ = std::fs::remove_file(path);
            }
            Ok(())
        }
        Err(e) => Err(usage(format!(
            "{flag} {}: cannot be written ({e}); choose a path in a folder you can write",
            path.display()
        ))),
    }
}

/// Writes the end-of-run files the user asked for: JSON report, HTML timeline, trace. Every one is
/// rendered from the same analysis as the terminal view.
pub fn write_views(out: &OutputArgs, analysis: &Analysis) -> anyhow::Result<()> {
    if let Some(p) = &out.report {
        views::write_file(&views::json::Json, analysis, p, "--report")?;
    }
    if let Some(p) = &out.html {
        views::write_file(&views::html::Html, analysis, p, "--html")?;
        crate::errln!("witness: timeline: {}", p.display());
    }
    if let Some(p) = &out.trace {
        views::write_file(&views::trace::Trace, analysis, p, "--trace")?;
        crate::errln!("witness: trace (open in ui.perfetto.dev): {}", p.display());
    }
    if let Some(p) = &out.junit {
        views::write_file(&views::junit::Junit, analysis, p, "--junit")?;
    }
    // Under GitHub Actions, the run's summary on its page.
    if let Some(p) = std::env::var_os("GITHUB_STEP_SUMMARY").filter(|p| !p.is_empty()) {
        use crate::report::View;
        use std::io::Write;
        let text = views::markdown::Markdown.render(analysis)?;
        let appended = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&p)
            .and_then(|mut f| f.write_all(&text));
        if let Err(e) = appended {
            crate::errln!(
                "witness: could not append the step summary to $GITHUB_STEP_SUMMARY ({}): {e}",
                std::path::Path::new(&p).display()
            );
        }
    }
    Ok(())
}

/// Opens the run's journal: the given path, or a new file (created exclusively) in the per-user
/// state folder ($XDG_STATE_HOME/witness or ~/.local/state/witness), never a shared /tmp name.
pub fn open_journal(mode: &str, out: &OutputArgs) -> anyhow::Result<Journal> {
    let mut header = Header::new(mode, std::env::args().collect());
    header.name = out.name.clone();
    let dir = crate::files::state_dir();
    if let Some(path) = &out.journal {
        let journal = Journal::create(path, &header)?;
        // `witness report` finds it by the index, as it finds the folder's own.
        crate::runs::record(&dir, path, header.started_unix_s);
        return Ok(journal);
    }
    crate::files::ensure_state_dir(&dir).map_err(|e| {
        usage(format!(
            "could not create witness's state folder {} for the journal: {e}; set XDG_STATE_HOME or pass --journal FILE",
            dir.display()
        ))
    })?;
    let mut attempt = 0;
    loop {
        let path = crate::journal::default_path(&dir, mode, attempt);
        match Journal::create_new(&path, &header) {
            Err(e) if path.symlink_metadata().is_ok() && attempt < 100 => {
                let _ = e;
                attempt += 1;
            }
            Ok(journal) => {
                crate::runs::record(&dir, &path, header.started_unix_s);
                return Ok(journal);
            }
            r => return r,
        }
    }
}

/// Unix signals witness forwards to the server, as one stream.
///
/// tokio's own signal handling, not signal-hook: the supervisor is one `tokio::select!` loop, and
/// tokio::signal delivers straight into it; signal-hook would add a thread and a bridge for the same.
pub struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    quit: tokio::signal::unix::Signal,
}

impl Signals {
    pub fn install() -> anyhow::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Self {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
            quit: signal(SignalKind::quit())?,
        })
    }

    pub async fn recv(&mut self) -> nix::sys::signal::Signal {
        use nix::sys::signal::Signal;
        tokio::select! {
            _ = self.int.recv() => Signal::SIGINT,
            _ = self.term.recv() => Signal::SIGTERM,
            _ = self.hup.recv() => Signal::SIGHUP,
            _ = self.quit.recv() => Signal::SIGQUIT,
        }
    }
}

/// The run's TLS trust from its flags (bad usage names the flag, exit 2); `--insecure` is said once
/// on the terminal.
pub(crate) fn tls_trust(cacert: Option<&std::path::Path>, insecure: bool) -> anyhow::Result<()> {
    crate::load::tls::from_flags(cacert, insecure)?;
    if insecure {
        crate::errln!("witness: ! {}", crate::load::tls::INSECURE_NOTE);
    }
    Ok(())
}
