//! `witness soak --plan PLAN.toml`: read and resolve the plan (secrets by reference), start or attach
//! to the server, wait for health, measure the connect floor, run the workload with its invariants,
//! faults and gauges, then stop and render the views from the journal. A stdio plan starts the
//! server with its stdin/stdout as the MCP connection (no URL, no connect floor). Exit codes: 0
//! pass, 1 fail (a violation, a leak, an undrained gauge, errors), 2 usage, 3 refused to measure,
//! 130 interrupted.

use std::sync::Arc;

use super::load::{check_floor, resolve_target, say_resolutions, wait_ready, Stop};
use super::{check_outputs, open_journal, start_measured, target_config, Measured, Signals};
use crate::analyze::soak::SoakSettings;
use crate::cli::SoakArgs;
use crate::error::{refuse, usage};
use crate::journal::{secs, Event, Journal, Settings};
use crate::load::mcp::{McpTarget, StdioLink};
use crate::server::process::RestartPolicy;
use crate::server::Target;
use crate::soak::health::SoakHealth;
use crate::soak::plan::{self, Overrides, RealSecrets, SoakPlan, Transport};
use crate::soak::run::{Action, Ending, Injector, Soak};

pub async fn run(args: SoakArgs) -> anyhow::Result<i32> {
    let plan = Arc::new(load_plan(&args)?);
    check_injects(&args, &plan)?;
    let stdio = plan.transport == Transport::Stdio;
    if stdio && args.container.is_container() {
        return Err(usage(format!(
            "--plan {}: [target] transport = \"stdio\" speaks MCP over the stdin/stdout of a process witness starts; a container's MCP server is reached over streamable HTTP: set transport = \"http\" with a base_url",
            args.plan.display()
        )));
    }
    if stdio && args.command.is_empty() {
        return Err(usage(format!(
            "--plan {}: [target] transport = \"stdio\" speaks MCP over the server's stdin/stdout, so witness must start it: give its command after `--`, e.g. `witness soak --plan {} -- ./mcp_server`",
            args.plan.display(),
            args.plan.display()
        )));
    }
    // Our own child or container, or (with neither) whatever listens on the base URL's port. The
    // plan's fatal patterns are watched like --watch ones, labelled "fatal".
    let mut sup = args.supervise.clone();
    sup.watch.extend(
        plan.invariants
            .fatal_log
            .iter()
            .map(|r| format!("fatal={r}")),
    );
    let target_cfg = (args.container.is_container() || !args.command.is_empty())
        .then(|| {
            target_config(
                &sup,
                &args.container,
                args.command.clone(),
                args.show_output,
            )
        })
        .transpose()
        .map_err(super::command_is_usage)?;
    // Over stdio each spawn's pipes come to the link (a restart sends new ones).
    let mut target_cfg = target_cfg;
    let pipes = match (&mut target_cfg, stdio) {
        (Some(super::TargetConfig::Process(p)), true) => {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            p.stdio = Some(tx);
            Some(rx)
        }
        _ => None,
    };
    if target_cfg.is_none() {
        // The plan's own fatal patterns need the server's output too, but a plan is shared between
        // modes: only the user's --watch is refused here.
        super::check_attach_watch(&args.supervise.watch)?;
    }
    let in_plan = format!("--plan {}'s URL", args.plan.display());
    for u in plan.urls() {
        resolve_target(u, &in_plan, args.allow_remote).await?;
    }
    check_outputs(&args.output)?;
    // Before anything is written or printed: the plan's secret values are scrubbed everywhere.
    crate::secrets::install(&plan.secret_values)?;
    super::tls_trust(args.tls.cacert.as_deref(), args.tls.insecure)?;
    let journal = open_journal("soak", &args.output)?;
    crate::load::tls::journal_note(&journal);
    // Before anything else is written: no line of the journal may carry a secret's value.
    journal.redact(&plan.secret_values)?;
    say_resolutions(&journal);
    journal.emit(Event::Settings(Settings {
        timers_s: args.supervise.timers_s(),
        asserts: plan.asserts.iter().chain(&args.asserts).cloned().collect(),
        load: None,
        extra: serde_json::json!({ "soak": SoakSettings {
            duration_planned_s: plan.duration.as_secs_f64(),
            interval_s: plan.interval.as_secs_f64(),
            seed: plan.seed,
            max_error_rate: plan.max_error_rate,
            inject: args.inject.iter().map(|i| i.text.clone()).collect(),
            plan_file: Some(args.plan.display().to_string()),
            plan: plan::summary(&plan),
        }}),
    }));
    let link = pipes.map(|rx| {
        McpTarget::Stdio(StdioLink::new(
            rx,
            journal.clone(),
            None,
            plan.ready_timeout,
        ))
    });
    let health = SoakHealth::new(&plan, link.as_ref(), &journal);

    // Only an attached target is found by its port, and a stdio plan is never attached.
    let port = plan.base.as_ref().map_or(80, crate::load::tls::port);
    let Measured { target, sampling } =
        match start_measured(&args.gpu, target_cfg, port, &journal, args.sample_interval).await {
            Ok(m) => m,
            Err(ns) => {
                finish(&journal, &args, ns.reason, ns.partial)?;
                return Err(ns.error);
            }
        };
    let mut signals = Signals::install()?;

    let ready = {
        let body = prepare(&args, &plan, &target, &health, &journal);
        tokio::pin!(body);
        tokio::select! {
            r = &mut body => r.map_err(|s| match s {
                Stop::Refused(why) => Err(why),
                Stop::Interrupted(sig) => Ok(sig),
                Stop::JournalLost(why) | Stop::AssertAbort(why) => Err(why),
            }),
            sig = signals.recv() => Err(Ok(sig.as_str().to_string())),
        }
    };
    let ending = match ready {
        Ok(()) => {
            let against = match &plan.base {
                Some(b) => b.to_string(),
                None => format!(
                    "{} over stdio",
                    args.command.first().map_or("the server", String::as_str)
                ),
            };
            crate::errln!(
                "witness: soak of {} against {}: {} workers, interval {}, seed {} (replay with --seed {})",
                secs(plan.duration.as_secs_f64()),
                against,
                plan.workers(),
                secs(plan.interval.as_secs_f64()),
                plan.seed,
                plan.seed
            );
            let progress = Progress::new(plan.duration);
            let identity = || target.identity();
            let soak = Soak {
                plan: plan.clone(),
                journal: journal.clone(),
                health: &health,
                stdio: link.clone(),
                identity: &identity,
                state: target.state(),
                injector: Injector {
                    control: target.control(),
                    pids: target.pid_source(),
                },
                injects: args.inject.clone(),
                owned: target.owned(),
                progress: &progress,
            };
            // A signal, or a journal that can no longer be written, stops the workload at once;
            // the latter ends the run with exit 4 when finishing finds the journal incomplete.
            let mut failure = journal.failure();
            let interrupt = async {
                tokio::select! {
                    sig = signals.recv() => sig.as_str().to_string(),
                    _ = async {
                        if failure.wait_for(|f| f.is_some()).await.is_err() {
                            std::future::pending::<()>().await;
                        }
                    } => "a journal write failure (the run stopped at once)".to_string(),
                }
            };
            let ending = soak.run(interrupt).await;
            progress.finish();
            Ok(ending)
        }
        Err(e) => Err(e),
    };
    sampling.stop().await;
    target.stop("the soak is over").await?;
    match ending {
        Ok(Ending::Done) => {
            let a = finish(&journal, &args, "the soak ran its whole duration", false)?;
            // A broken threshold fails the soak beside witness's own rules.
            let held = a.asserts.iter().all(|j| j.ok);
            Ok(match a.soak.as_ref().map(|s| s.verdict.as_str()) {
                Some("pass") if held => 0,
                _ => 1,
            })
        }
        Ok(Ending::Violated { interval, reason }) => {
            let why = format!("invariant violated at interval {interval}: {reason}");
            crate::errln!("witness: soak aborted: {}", crate::secrets::scrub(&why));
            finish(&journal, &args, &why, true)?;
            Ok(1)
        }
        Ok(Ending::Interrupted { signal }) | Err(Ok(signal)) => {
            finish(&journal, &args, &format!("interrupted by {signal}"), true)?;
            Ok(130)
        }
        Err(Err(why)) => {
            finish(&journal, &args, "refused", false)?;
            Err(refuse(super::load::said_above(&why)))
        }
    }
}

/// Reads and resolves the plan; a mistake in it is a usage error that names line, column and key.
fn load_plan(args: &SoakArgs) -> anyhow::Result<SoakPlan> {
    let src = std::fs::read_to_string(&args.plan).map_err(|e| {
        usage(format!(
            "--plan {}: could not read the plan: {e}",
            args.plan.display()
        ))
    })?;
    let overrides = Overrides {
        duration: args.duration,
        interval: args.interval,
        seed: args.seed,
        base_url: args.base_url.clone(),
    };
    plan::parse(&src, &args.plan)
        .and_then(|p| plan::resolve(p, &src, &args.plan, &overrides, &RealSecrets))
        .map_err(|e| usage(e.to_string()))
}

/// Faults that cannot happen as asked are refused before anything starts.
fn check_injects(args: &SoakArgs, plan: &SoakPlan) -> anyhow::Result<()> {
    for i in &args.inject {
        if i.at >= plan.duration {
            return Err(usage(format!(
                "--inject {}: at {} it would fire after the soak's {} duration",
                i.text,
                secs(i.at.as_secs_f64()),
                secs(plan.duration.as_secs_f64())
            )));
        }
        if args.container.container.is_some() {
            return Err(usage(format!(
                "--inject {}: witness does not own a container it attached to (--container), so it injects no fault there; start it with --image instead",
                i.text
            )));
        }
        let attached = args.command.is_empty() && !args.container.is_container();
        let restarts = args.supervise.restart != RestartPolicy::Never
            || args.container.docker_restart.is_some();
        if matches!(i.action, Action::Kill | Action::Restart) && !attached && !restarts {
            return Err(usage(format!(
                "--inject {}: the server would not come back (--restart never), so the soak would abort; add --restart always (or on-failure)",
                i.text
            )));
        }
    }
    Ok(())
}

/// Ready (for a server witness started), then the connect floor (none over stdio: the pipes are
/// the connection). Once ready, the health question is settled for the run.
async fn prepare(
    args: &SoakArgs,
    plan: &SoakPlan,
    target: &Target,
    health: &SoakHealth,
    journal: &Journal,
) -> Result<(), Stop> {
    if target.owned() {
        let port = plan.base.as_ref().map(crate::load::tls::port);
        let ready = super::load::Ready {
            limit: plan.ready_timeout,
            setting: "ready_timeout",
            port,
            any_answer: false,
        };
        wait_ready(target, health, journal, ready).await?;
    } else if health.unsettled() {
        // Attached to a running server: one question, journalled, settles whether /health exists.
        health.probe_journalled("before the soak").await;
    }
    health.settle();
    match &plan.base {
        Some(base) => check_floor(base, args.max_connect_floor, journal).await,
        None => Ok(()),
    }
}

fn finish(
    journal: &Journal,
    args: &SoakArgs,
    reason: &str,
    partial: bool,
) -> anyhow::Result<crate::analyze::Analysis> {
    super::finish_run(journal, &args.output, reason, partial, None)
}

/// The soak's progress on the terminal: a bar on a terminal, one line per interval otherwise.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
}

impl Progress {
    fn new(planned: std::time::Duration) -> Self {
        use std::io::IsTerminal;
        let bar = std::io::stderr().is_terminal().then(|| {
            let b = indicatif::ProgressBar::new(planned.as_millis() as u64);
            b.set_style(
                indicatif::ProgressStyle::with_template("soak [{bar:24}] {msg}")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                    .progress_chars("=> "),
            );
            b
        });
        Self { bar }
    }

    fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

impl crate::soak::run::Progress for Progress {
    fn interval(&self, elapsed_s: f64, line: &str) {
        match &self.bar {
            Some(b) => {
                b.set_position((elapsed_s * 1000.0) as u64);
                b.set_message(line.to_string());
            }
            None => crate::errln!("witness: soak {line}"),
        }
    }

    fn said(&self, line: &str) {
        match &self.bar {
            Some(b) => b.println(format!("witness: {line}")),
            None => crate::errln!("witness: {line}"),
        }
    }
}
