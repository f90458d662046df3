//! `witness load`: validate the target (loopback only unless told), start or attach to the server,
//! measure the connect floor, wait for health, run the ladder, stop, and render the views. Exit codes:
//! 0 every level passed, 1 a level failed or was skipped, 2 usage, 3 refused to measure, 4 the journal
//! could not be written (the run stopped at once), 130 interrupted.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{HeaderMap, Method, Uri};

use super::{
    check_outputs, open_journal, start_measured, target_config, Measured, Signals, TargetConfig,
};
use crate::cli::LoadArgs;
use crate::error::{refuse, usage};
use crate::journal::{Event, Journal, LoadSettings, Settings};
use crate::load::client::{Limits, RequestSpec};
use crate::load::floor;
use crate::load::health::{Health, Prober};
use crate::load::ladder::{run_level, LadderConfig, LevelRun};
use crate::load::mcp::{McpTarget, Pinger, StdioLink, ToolCall};
use crate::load::outcome::Rejection;
use crate::report;
use crate::server::process::State;
use crate::server::Target;

pub async fn run(args: LoadArgs) -> anyhow::Result<i32> {
    run_with(args, None).await
}

/// `witness replay`: the recording `load` plays at each of its levels (the levels' "rates" are
/// the speeds) instead of one request, made ready by cmd/replay.rs.
pub(crate) struct ReplayPlan {
    pub file: String,
    pub replay: crate::load::settings::Replay,
}

pub(crate) async fn run_with(args: LoadArgs, plan: Option<ReplayPlan>) -> anyhow::Result<i32> {
    // Before anything is written or printed: credential values are scrubbed from every artifact.
    let (_, secrets) = request_headers(&args)?;
    crate::secrets::install(&secrets).map_err(|e| usage(format!("{e:#}")))?;
    super::tls_trust(args.tls.cacert.as_deref(), args.tls.insecure)?;
    let mut cfg = ladder_config(&args)?;
    let call = tool_call(&args, &cfg)?;
    let replay_file = plan.as_ref().map(|p| p.file.clone());
    cfg.replay = plan.map(|p| Arc::new(p.replay));
    // MCP over stdio: `--mcp TOOL -- CMD` without --url. The server's stdin/stdout are the protocol.
    let stdio = call.is_some() && args.url.is_none();
    if stdio && args.command.is_empty() {
        return Err(usage(
            "--mcp without --url speaks MCP over stdio to a server witness starts: give its command after `--` (or --url http://127.0.0.1:PORT/mcp for streamable HTTP)",
        ));
    }
    if stdio && args.container.is_container() {
        return Err(usage(
            "--mcp over stdio needs a child process (the command after `--`); a container's MCP server is reached with --url",
        ));
    }
    // Our own child or container, or (with neither) whatever listens on the URL's port.
    let target_cfg = (args.container.is_container() || !args.command.is_empty())
        .then(|| {
            target_config(
                &args.supervise,
                &args.container,
                args.command.clone(),
                args.show_output,
            )
        })
        .transpose()
        .map_err(super::command_is_usage)?;
    // A server that daemonizes is recognised by the port it then serves (not over stdio).
    let mut target_cfg = target_cfg.map(|mut t| {
        if let TargetConfig::Process(p) = &mut t {
            p.port = (!stdio).then(|| crate::load::tls::port(&cfg.spec.uri));
        }
        t
    });
    if target_cfg.is_none() {
        super::check_attach_watch(&args.supervise.watch)?;
    }
    let pipes = match (&mut target_cfg, stdio) {
        (Some(super::TargetConfig::Process(p)), true) => {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            p.stdio = Some(tx);
            Some(rx)
        }
        _ => None,
    };
    if !stdio {
        resolve_target(&cfg.spec.uri, "--url", args.allow_remote).await?;
        let derived = if args.health_url.is_some() {
            "--health-url"
        } else {
            "the health URL (from --url)"
        };
        resolve_target(&cfg.health, derived, args.allow_remote).await?;
    }
    check_outputs(&args.output)?;
    // witness's own descriptors, before anything runs: its EMFILE must never pass as the server's.
    let (top, what) = most_held(&cfg, &args);
    crate::server::fds::ensure(crate::server::fds::needed(top), &what).map_err(refuse)?;
    let mode = if replay_file.is_some() {
        "replay"
    } else {
        "load"
    };
    let journal = open_journal(mode, &args.output)?;
    crate::load::tls::journal_note(&journal);
    say_resolutions(&journal);
    // Health: --health-url when given; for MCP otherwise its `ping`.
    let prober = match &call {
        Some(call) => {
            let target = match pipes {
                Some(rx) => {
                    let link = StdioLink::new(
                        rx,
                        journal.clone(),
                        call.modern.clone(),
                        args.ready_timeout,
                    );
                    // A replay opens its session as recorded.
                    if let Some(init) = cfg.replay.as_ref().and_then(|r| r.initialize.clone()) {
                        link.initialize_as(init);
                    }
                    McpTarget::Stdio(link)
                }
                None => McpTarget::Http(cfg.spec.uri.clone()),
            };
            let health = match args.health_url {
                Some(_) => Health::Http(
                    Prober::new(cfg.health.clone(), args.health_timeout).h2c(args.protocol.http2),
                ),
                None => Health::Mcp(Pinger::new(
                    target.clone(),
                    call.clone(),
                    args.health_timeout,
                )),
            };
            cfg.mcp = Some((target, call.clone()));
            health
        }
        None => Health::Http(
            Prober::new(cfg.health.clone(), args.health_timeout).h2c(args.protocol.http2),
        ),
    };
    journal.emit(Event::Settings(Settings {
        timers_s: args.supervise.timers_s(),
        asserts: args.asserts.clone(),
        load: Some(LoadSettings {
            url: if stdio {
                "stdio".to_string()
            } else {
                cfg.spec.uri.to_string()
            },
            method: match &call {
                _ if cfg.replay.is_some() => "replay".to_string(),
                Some(_) => "tools/call".to_string(),
                None => cfg.spec.method.to_string(),
            },
            // Rate levels and a search's probes are journalled as they start, not planned here.
            levels: if cfg.open.is_some() || args.open.find_limit {
                vec![]
            } else {
                cfg.levels.clone()
            },
            rates_per_s: if args.open.find_limit {
                vec![]
            } else {
                args.open.rates.clone()
            },
            timeout_s: cfg.limits.whole.as_secs_f64(),
            connect_timeout_s: cfg.limits.connect.as_secs_f64(),
            settle_s: cfg.settle.as_secs_f64(),
            factor: args.factor,
            cliff_slack_s: args.cliff_slack.as_secs_f64(),
            rounds: cfg
                .duration
                .or(args.duration)
                .is_none()
                .then_some(cfg.rounds),
            duration_s: cfg.duration.or(args.duration).map(|d| d.as_secs_f64()),
            mcp: call.as_ref().map(|c| crate::journal::McpSettings {
                tool: c.tool.clone(),
                transport: if stdio { "stdio" } else { "http" }.into(),
            }),
        }),
        extra: serde_json::Value::Null,
    }));
    if let (Some(r), Some(file)) = (&cfg.replay, &replay_file) {
        journal.emit(r.event(file));
        crate::errln!(
            "witness: replaying {}: {} call{} over {} as recorded; {}",
            file,
            r.calls.len(),
            if r.calls.len() == 1 { "" } else { "s" },
            crate::journal::secs(r.span_s),
            r.sessions_how()
        );
        for n in &r.notes {
            crate::errln!("witness: ! {n}");
        }
    }
    if args.open.find_limit {
        journal.emit(Event::Search {
            over: if cfg.replay.is_some() {
                "speeds"
            } else if cfg.open.is_some() {
                "rates"
            } else {
                "levels"
            }
            .into(),
            resolution: args.open.resolution,
            max_levels: args.open.max_levels,
        });
    }
    let live = Live::new();
    let port = crate::load::tls::port(&cfg.spec.uri);
    // A server witness is to start would fail to bind, and the health probe would find the other
    // process: said plainly, before anything starts.
    if let (Some(super::TargetConfig::Process(_)), false) = (&target_cfg, stdio) {
        if let Some(taken) = foreign_listener(port) {
            let why = format!(
                "{taken}: the server witness starts could not listen there, and witness would measure that process instead. Stop it, or give the server and --url another port"
            );
            refused_note(&journal, &why);
            finish(
                &journal,
                &args,
                "refused before starting the server",
                false,
                &live,
            )?;
            // The REFUSED line just printed says why: the last line names the port only.
            return Err(refuse(why).context(crate::error::AlreadySaid(format!(
                "refused: port {port} is taken by another process (the reason is in the REFUSED line above)"
            ))));
        }
    }
    let Measured { target, sampling } =
        match start_measured(&args.gpu, target_cfg, port, &journal, args.sample_interval).await {
            Ok(m) => m,
            Err(ns) => {
                finish(&journal, &args, ns.reason, ns.partial, &live)?;
                return Err(ns.error);
            }
        };

    let mut signals = Signals::install()?;
    let mut failure = journal.failure();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let result = {
        let body = measure(&args, &cfg, &target, &prober, &journal, &live, &stop_rx);
        tokio::pin!(body);
        let why = tokio::select! {
            r = &mut body => Err(r),
            sig = signals.recv() => Ok(Stop::Interrupted(sig.as_str().to_string())),
            f = failure.wait_for(|f| f.is_some()) => Ok(Stop::JournalLost(
                f.ok().and_then(|f| f.clone()).unwrap_or_default(),
            )),
        };
        match why {
            Err(r) => r,
            Ok(why) => {
                // Stop sending at once; the requests in flight are journalled as interrupted.
                let _ = stop_tx.send(true);
                let _ = tokio::time::timeout(Duration::from_secs(2), &mut body).await;
                Err(why)
            }
        }
    };
    sampling.stop().await;
    let owned = target.owned();
    target.stop("the load run is over").await?;
    match result {
        Ok(end) => {
            let a = finish(&journal, &args, &end, false, &live)?;
            // A broken threshold fails the run beside witness's own rules.
            let held = a.asserts.iter().all(|j| j.ok);
            Ok(match a.load.as_ref().map(|l| l.verdict.as_str()) {
                Some("pass") if held => 0,
                _ => 1,
            })
        }
        Err(Stop::Refused(why)) => {
            // The reason is in the REFUSED line of the report just printed: said once.
            finish(&journal, &args, "refused", false, &live)?;
            Err(refuse(said_above(&why)))
        }
        Err(Stop::AssertAbort(why)) => {
            crate::errln!("witness: {why}");
            finish(&journal, &args, &why, true, &live)?;
            Ok(1)
        }
        Err(Stop::Interrupted(sig)) => {
            finish(
                &journal,
                &args,
                &format!("interrupted by {sig}"),
                true,
                &live,
            )?;
            Ok(130)
        }
        Err(Stop::JournalLost(_)) => {
            let lost = finish(
                &journal,
                &args,
                "the journal could not be written",
                true,
                &live,
            )
            .err()
            .unwrap_or_else(|| anyhow::anyhow!("the journal could not be written"));
            crate::errln!(
                "witness: the run stopped at once: no more requests were sent{}; what the views show is what reached the journal",
                if owned { " and the server witness started was stopped" } else { "" }
            );
            Err(lost)
        }
    }
}

pub(crate) enum Stop {
    Refused(String),
    /// `--assert-abort`: a threshold broke after a level; the rest of the plan is not run.
    AssertAbort(String),
    Interrupted(String),
    /// The journal could not be written: the run stops at once (exit 4).
    JournalLost(String),
}

/// Everything between start and stop: ready, floor, levels.
async fn measure(
    args: &LoadArgs,
    cfg: &LadderConfig,
    target: &Target,
    prober: &Health,
    journal: &Journal,
    live: &Live,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> Result<String, Stop> {
    // Plain HTTP with no --health-url: witness finds out what answers for the server's health.
    let decide = args.health_url.is_none() && cfg.mcp.is_none();
    // What the probe answered when the server became ready (none when attached).
    let mut ready_answer = None;
    if target.owned() {
        // Over stdio there is no port: the pipes are the server's only door.
        let stdio = matches!(&cfg.mcp, Some((McpTarget::Stdio(_), _)));
        let port = (!stdio).then(|| crate::load::tls::port(&cfg.spec.uri));
        let ready = Ready {
            limit: args.ready_timeout,
            setting: "--ready-timeout",
            port,
            any_answer: decide,
        };
        ready_answer = wait_ready(target, prober, journal, ready).await?;
    }
    let chosen = match decide {
        true => choose_health(args, cfg, prober, ready_answer, journal).await,
        false => None,
    };
    let prober = chosen.as_ref().unwrap_or(prober);
    // Over stdio there is no connect to measure: the pipes are the connection.
    if !matches!(&cfg.mcp, Some((McpTarget::Stdio(_), _))) {
        check_floor(&cfg.spec.uri, args.max_connect_floor, journal).await?;
    }
    live.floor_shown.store(true, Ordering::Relaxed);
    let refuse_with = |why: String| {
        refused_note(journal, &why);
        Err(Stop::Refused(why))
    };
    // A target unhealthy before the first level: nothing could be measured honestly (a later level
    // that finds the server wedged is skipped instead, since earlier levels did measure).
    let first = prober.probe_journalled(journal, "before the ladder").await;
    if !first.healthy() {
        return refuse_with(format!(
            "the target was unhealthy before the first level: {} answered {} (not 2xx)",
            prober.describe(),
            first.text()
        ));
    }
    let ids = Arc::new(AtomicU64::new(0));
    let mut previous = target.identity();
    let mut not_run = Vec::new();
    let mut plan = crate::load::search::Plan::new(
        &cfg.levels,
        &args.open.rates,
        args.open.max_in_flight,
        args.open
            .find_limit
            .then_some((args.open.resolution, args.open.max_levels)),
    );
    let mut index = 0usize;
    while let Some((n, rate)) = plan.next_level() {
        let run = run_level(
            cfg,
            index as u32,
            n,
            rate,
            target,
            prober,
            journal,
            &ids,
            previous.as_ref(),
            live.progress,
            stop,
        )
        .await;
        if *stop.borrow() {
            return Ok(String::new());
        }
        let name = match (&cfg.replay, rate) {
            (Some(_), Some(speed)) => crate::journal::speed_words(speed),
            _ => crate::load::search::level_name(n, rate),
        };
        let ran = run == LevelRun::Ran;
        match run {
            LevelRun::Ran => {}
            LevelRun::Skipped(why) => not_run.push(format!("level {name} skipped: {why}")),
            LevelRun::Stopped(why) => not_run.push(format!("level {name}: {why}")),
        }
        previous = target.identity().or(previous);
        // The last level of a given plan: its row comes from the run's final analysis, which
        // follows at once, rather than from one more analysis of the whole journal here (reading
        // every request back twice was most of what a run cost after its last request).
        let last = !args.open.find_limit && !plan.levels_to_come();
        let (row, broken) = if last {
            *live.deferred.lock().unwrap_or_else(|e| e.into_inner()) = Some(index as u32);
            (None, Vec::new())
        } else {
            after_level(
                journal,
                args,
                index as u32,
                plan.workers_to_come(),
                plan.levels_to_come(),
            )
        };
        if let Some(row) = &row {
            live.print(row);
        }
        if !broken.is_empty() {
            let lines: Vec<String> = broken.iter().map(|j| j.line()).collect();
            return Err(Stop::AssertAbort(format!(
                "stopped after {} {name} (--assert-abort): {} broken: {}",
                if cfg.replay.is_some() {
                    "speed"
                } else {
                    "level"
                },
                if lines.len() == 1 {
                    "a threshold"
                } else {
                    "thresholds"
                },
                lines.join("; ")
            )));
        }
        // A search ends with a server that died or restarted: that is said, not a limit.
        let passed = row.as_ref().is_some_and(|r| r.verdict == "pass");
        let ended = !ran || row.as_ref().is_none_or(|r| r.restarted || r.died.is_some());
        plan.after(n, rate, passed, ended);
        index += 1;
    }
    if args.open.find_limit {
        let also = not_run.iter().map(|w| format!("; {w}")).collect::<String>();
        return Ok(format!("the search ran {index} levels{also}"));
    }
    // "every level ran" only when it is true.
    Ok(match not_run.len() {
        0 => "every level ran".into(),
        k => format!(
            "{} of {} levels ran; {}",
            index - k,
            index,
            not_run.join("; ")
        ),
    })
}

/// The connect floor, journalled; a floor over the limit (or no connect at all) is a refusal, with
/// the fix named when a host name resolves to a slow address first.
pub(crate) async fn check_floor(
    uri: &Uri,
    max_floor: Duration,
    journal: &Journal,
) -> Result<(), Stop> {
    let f = floor::measure(uri, max_floor).await;
    let limit_ms = max_floor.as_secs_f64() * 1000.0;
    journal.emit(Event::ConnectFloor {
        host: f.host.clone(),
        port: f.port,
        addrs: f.addrs.clone(),
        median_ms: f.median_ms,
        limit_ms,
        advice: f.advice.clone(),
        handshake_ms: f.handshake_ms,
    });
    if let Some(t) = &f.tls {
        let why = t.refusal();
        refused_note(journal, &why);
        return Err(Stop::Refused(why));
    }
    let why = match f.median_ms {
        Some(m) if m <= limit_ms => {
            crate::errln!(
                "witness: connect floor {m:.2} ms to {} (limit {limit_ms:.0} ms)",
                crate::load::tls::authority(&f.host, f.port)
            );
            if let Some(h) = f.handshake_ms {
                crate::errln!("witness: TLS handshake floor {h:.2} ms after the connect (each new connection pays it; a reused one does not)");
            }
            if let Some(a) = &f.advice {
                crate::errln!("witness: ! {a}");
            }
            return Ok(());
        }
        Some(m) => format!(
            "the connect floor to {}:{} is {m:.1} ms (median of plain TCP connects), over --max-connect-floor {limit_ms:.0} ms: every latency would carry the harness's own connect cost",
            f.host, f.port
        ),
        None => format!(
            "no TCP connect to {}:{} succeeded: nothing to measure (is the server listening there?)",
            f.host, f.port
        ),
    };
    let why = match &f.advice {
        Some(a) => format!("{why}. {a}"),
        None => why,
    };
    refused_note(journal, &why);
    Err(Stop::Refused(why))
}

/// Journals why witness refuses to measure; analysis reads it back as the run's refusal.
/// The error line of a refusal whose reason the report (printed just before, on stderr) already
/// says: its first clause, not the reason again.
pub(crate) fn said_above(why: &str) -> String {
    let head = why.split(": ").next().unwrap_or(why);
    format!("refused: {head} (the reason is in the REFUSED line above)")
}

pub(crate) fn refused_note(journal: &Journal, text: &str) {
    journal.emit(Event::Note {
        level: "refused".into(),
        text: text.into(),
    });
}

/// What waiting for a started server to be ready asks.
pub(crate) struct Ready {
    /// `--ready-timeout` (a plan's `ready_timeout`).
    pub limit: Duration,
    /// The limit as the user set it: `--ready-timeout` or a plan's `ready_timeout`.
    pub setting: &'static str,
    /// The port the server is to listen on (None over stdio).
    pub port: Option<u16>,
    /// Any HTTP answer below 500 means ready (the server answers requests, whether or not it has a
    /// health endpoint); otherwise only a healthy probe (2xx) does.
    pub any_answer: bool,
}

/// How long a server witness started may listen on other ports only, once seen doing so, before
/// witness refuses: a server that opens an admin port first gets this long to open the URL's.
const ELSEWHERE_GRACE: Duration = Duration::from_secs(3);

/// Waits until the started server is ready, journalled as time-to-ready: it answers the probe
/// (2xx; with `any_answer`, any status below 500), and the process listening on `port` is witness's
/// own (the server or a descendant): otherwise another process holds the port and would be measured
/// instead. A server that exits first is a refusal naming its exit and last output lines; one that
/// listens only on other ports than the URL's is said at once, and refused after a short grace.
/// Returns the probe's answer that made it ready (None when there is no process to wait for).
pub(crate) async fn wait_ready(
    target: &Target,
    prober: &impl crate::load::health::Probes,
    journal: &Journal,
    ready: Ready,
) -> Result<Option<crate::journal::Probe>, Stop> {
    let Ready {
        limit,
        setting,
        port,
        any_answer,
    } = ready;
    let Some(mut state) = target.state() else {
        return Ok(None);
    };
    let start = Instant::now();
    let mut elsewhere: Option<Instant> = None;
    loop {
        if let (Some(port), Target::Process(_)) = (port, target) {
            if let Some(why) = listens_elsewhere(port, journal, &mut elsewhere) {
                refused_note(journal, &why);
                return Err(Stop::Refused(why));
            }
        }
        let p = prober.probe().await;
        let answered = p.healthy() || (any_answer && p.status.is_some_and(|s| s < 500));
        // A certificate witness does not trust will not become trusted by waiting.
        if p.error.as_deref() == Some("TlsCertificate") {
            if let Some(t) = crate::load::tls::last_untrusted() {
                let why = t.refusal();
                refused_note(journal, &why);
                return Err(Stop::Refused(why));
            }
        }
        // Ready only while the server witness started (or the daemon it became) runs: an answer
        // while it is down, or deciding whether it daemonized, comes from someone else. And whose
        // listener answered, when witness can tell (a process target on a known port).
        let running = matches!(&*state.borrow(), State::Running(_));
        let foreign = match (answered, port, target) {
            (true, Some(port), Target::Process(_)) => foreign_listener(port),
            _ => None,
        };
        if answered && running && foreign.is_none() {
            journal.emit(Event::Ready {
                ok: true,
                waited_s: start.elapsed().as_secs_f64(),
                url: prober.describe(),
                // An answer that is not a health endpoint's yes: what it said.
                detail: (!p.healthy())
                    .then(|| format!("answered {} (the server answers)", p.text())),
                output: Vec::new(),
            });
            return Ok(Some(p));
        }
        let finished = match &*state.borrow_and_update() {
            State::Finished { status } => Some(*status),
            _ => None,
        };
        if finished.is_some() || start.elapsed() >= limit {
            let mut output = Vec::new();
            let mut detail = match finished {
                Some(status) => {
                    let (why, lines) = last_output(journal).await;
                    output = lines;
                    format!(
                        "the server exited with {status} before it was ready{why}; witness had waited {} of {setting} {} for {} to answer",
                        crate::journal::secs(start.elapsed().as_secs_f64()),
                        crate::journal::secs(limit.as_secs_f64()),
                        prober.describe()
                    )
                }
                None => format!(
                    "{} was {} after {setting} {}",
                    prober.describe(),
                    p.text(),
                    crate::journal::secs(limit.as_secs_f64())
                ),
            };
            let other = foreign.or_else(|| port.and_then(foreign_listener));
            if let Some(other) = other {
                detail.push_str(&format!("; {other}"));
            }
            // The reason is said once, in the refusal; the ready row says only that it never was,
            // and keeps the last lines for the report.
            journal.emit(Event::Ready {
                ok: false,
                waited_s: start.elapsed().as_secs_f64(),
                url: prober.describe(),
                detail: None,
                output,
            });
            refused_note(journal, &format!("the server never became ready: {detail}"));
            return Err(Stop::Refused(format!(
                "the server never became ready at {}: {detail}",
                prober.describe()
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A server witness started that listens, but only on other ports than the URL's: said once as
/// soon as it is seen ("the server listens on 127.0.0.1:8081, not on the URL's port 8080"), and the
/// refusal's reason once that has lasted [`ELSEWHERE_GRACE`].
fn listens_elsewhere(port: u16, journal: &Journal, seen: &mut Option<Instant>) -> Option<String> {
    let ours = crate::server::our_listeners();
    if ours.is_empty() || ours.iter().any(|a| a.port() == port) {
        *seen = None;
        return None;
    }
    let list: Vec<String> = ours.iter().map(|a| a.to_string()).collect();
    let words = format!(
        "the server listens on {}, not on the URL's port {port}",
        list.join(" and ")
    );
    match seen {
        Some(since) if since.elapsed() >= ELSEWHERE_GRACE => {
            let other = ours[0].port();
            Some(format!(
                "{words}: give --url with port {other}, or start the server on port {port}"
            ))
        }
        Some(_) => None,
        None => {
            crate::errln!("witness: {words}");
            journal.emit(Event::Note {
                level: "warn".into(),
                text: words,
            });
            *seen = Some(Instant::now());
            None
        }
    }
}

/// Plain HTTP with no `--health-url`: `/health` when the server has one (it answers 2xx, or 5xx:
/// a health endpoint saying no), else a GET of the URL when the load's method is GET, else a TCP
/// connect to the URL's port. Said once, in words. None: `/health` it stays. `seen`: what `/health`
/// answered when the server became ready, so it is not asked twice.
async fn choose_health(
    args: &LoadArgs,
    cfg: &LadderConfig,
    health: &Health,
    seen: Option<crate::journal::Probe>,
    journal: &Journal,
) -> Option<Health> {
    let Health::Http(h) = health else {
        return None;
    };
    let p = match seen {
        Some(p) => p,
        None => h.probe().await,
    };
    let status = p.status?;
    if p.healthy() || status >= 500 {
        return None;
    }
    // Its kept-alive connection is nobody's now: the server must not count it during a level.
    h.close().await;
    let url = cfg.spec.uri.clone();
    let (prober, what) = if cfg.spec.method == Method::GET {
        let p = Prober::new(url.clone(), args.health_timeout).h2c(args.protocol.http2);
        (p, format!("a GET of the URL ({url})"))
    } else {
        let p = Prober::new(url.clone(), args.health_timeout).connect_only();
        let what = format!(
            "{} (the URL is for {}, which a probe must not send)",
            p.describe(),
            cfg.spec.method
        );
        (p, what)
    };
    let words = format!(
        "no {} here ({status}): health is {what}; --health-url to name one",
        h.url.path()
    );
    crate::errln!("witness: {words}");
    journal.emit(Event::Note {
        level: "info".into(),
        text: words,
    });
    Some(Health::Http(prober))
}

/// ": ModuleNotFoundError: No module named 'x'": the one line of the server's last output that
/// says why (see [`decisive_line`]), or its last line; and its last lines ("stderr: …"), kept in
/// the report. The output pipes are read by other threads: give them a moment (at most a second,
/// on a loaded machine) to reach the lines written just before the exit.
async fn last_output(journal: &Journal) -> (String, Vec<String>) {
    let deadline = Instant::now() + Duration::from_millis(1000);
    let mut tail = journal.tail();
    while tail.iter().all(|(_, l)| l.is_empty()) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        tail = journal.tail();
    }
    let lines: Vec<String> = tail
        .iter()
        .flat_map(|(s, l)| l.iter().map(move |l| format!("{s}: {l}")))
        .collect();
    let logged: Vec<(String, String)> = journal
        .lifecycle()
        .into_iter()
        .filter_map(|r| match r.event {
            Event::Log { label, line, .. } => Some((label, line)),
            _ => None,
        })
        .collect();
    let raw: Vec<&str> = tail
        .iter()
        .flat_map(|(_, l)| l.iter().map(String::as_str))
        .collect();
    let why = match crate::journal::meaning::decisive_line(&logged, &raw) {
        Some(d) => format!(": {d}"),
        None => match tail.iter().find_map(|(s, l)| Some((s, l.last()?))) {
            Some((s, l)) => format!("; its last line: {s} '{l}'"),
            None => " (it wrote nothing)".into(),
        },
    };
    (why, lines)
}

/// "port N is already in use by pid M (command)" when a process that is not witness's own listens
/// on the port; None when the listener is witness's (or nobody listens, or it cannot be seen).
pub(crate) fn foreign_listener(port: u16) -> Option<String> {
    match crate::server::look(port) {
        crate::server::Seen::Listener(id) if !crate::server::is_ours(id.pid) => Some(format!(
            "port {port} is already in use by {}",
            crate::server::describe_pid(id.pid)
        )),
        crate::server::Seen::SocketOnly { .. } => Some(format!(
            "port {port} is already in use by a process witness may not inspect (another user's)"
        )),
        _ => None,
    }
}

/// After each level but a given plan's last (whose row and report the run's end makes): the report is
/// rewritten (so a killed run still leaves an up-to-date one, labelled partial), and the level's
/// terminal line comes from the same analysis of the journal so far. A
/// verdict a lower level still to run (`lowest_to_come`, from the plan) may change reads "pending",
/// in the row and in the report alike; so does a pass with refusals that took time while levels are
/// still to run (`more_to_come`), as one of them may name the timer that answered them.
/// After a level: its row from an analysis of the journal so far (the JSON report rewritten), and
/// with `--assert-abort` the thresholds that analysis finds already broken.
fn after_level(
    journal: &Journal,
    args: &LoadArgs,
    index: u32,
    lowest_to_come: Option<u32>,
    more_to_come: bool,
) -> (
    Option<crate::analyze::verdict::LevelRow>,
    Vec<crate::analyze::asserts::Judged>,
) {
    if journal.flush().is_err() {
        return (None, Vec::new());
    }
    let Ok(file) = crate::sources::journal::JournalFile::open(journal.path()) else {
        return (None, Vec::new());
    };
    let mut a = crate::analyze::analyze(&file);
    let broken = if args.assert_abort {
        crate::analyze::asserts::broken_so_far(&args.asserts, &a)
    } else {
        Vec::new()
    };
    if let Some(l) = a.load.as_mut() {
        crate::analyze::verdict::await_cliff_base(l, lowest_to_come);
        crate::analyze::verdict::await_refusal_timers(l, more_to_come);
    }
    if let Some(p) = &args.output.report {
        if let Err(e) = report::write_file(&report::json::Json, &a, p, "--report") {
            crate::errln!("witness: {e:#}");
        }
    }
    let row = a
        .load
        .and_then(|l| l.levels.into_iter().find(|l| l.index == index));
    (row, broken)
}

fn finish(
    journal: &Journal,
    args: &LoadArgs,
    reason: &str,
    partial: bool,
    live: &Live,
) -> anyhow::Result<crate::analyze::Analysis> {
    use crate::cli::GpuMode;
    let deferred = live
        .deferred
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    let mut term = report::terminal::Terminal::for_stderr();
    term.shown_live = report::terminal::ShownLive {
        // Each name's first lookup was said as the journal opened.
        resolution: true,
        floor: live.floor_shown.load(Ordering::Relaxed),
        level_rows: (live.rows_shown.load(Ordering::Relaxed) || deferred.is_some())
            && live.rows_on_stderr_terminal,
    };
    term.say_no_gpu = args.gpu.gpu == GpuMode::On;
    super::finish_run_with(journal, &args.output, reason, partial, None, term, &|a| {
        let last = deferred.and_then(|i| a.load.as_ref()?.levels.iter().find(|l| l.index == i));
        if let Some(row) = last {
            live.print(row);
        }
        final_table(a, live)
    })
}

/// The verdicts the report keeps, as a table on stdout after the last level, whenever a row printed
/// live was pending or now says something else (another verdict, or other counts and reasons: a
/// later level found the timer that answered this one's refusals): what a script reads last on
/// stdout is what counts, and it agrees with the report and the summary.
fn final_table(a: &crate::analyze::Analysis, live: &Live) {
    let Some(load) = &a.load else {
        return;
    };
    let shown = live.verdicts.lock().unwrap_or_else(|e| e.into_inner());
    let changed = shown.iter().any(|(index, said, line)| {
        said == "pending"
            || load
                .levels
                .iter()
                .find(|l| l.index == *index)
                .is_none_or(|l| l.verdict != *said || report::terminal::level_line(l) != *line)
    });
    if !changed {
        // A level no row was printed for (one a signal interrupted, even the first): its row,
        // as the report has it, after the others.
        let unseen: Vec<_> = load
            .levels
            .iter()
            .filter(|l| !shown.iter().any(|(index, ..)| *index == l.index))
            .collect();
        drop(shown);
        for r in unseen {
            live.print(r);
        }
        return;
    }
    crate::outln!("final verdicts:");
    crate::outln!("{}", report::terminal::level_header());
    for r in &load.levels {
        crate::outln!("{}", report::terminal::level_line(r));
    }
}

/// What `load` prints while it runs, so the summary at the end does not say it twice.
struct Live {
    /// stderr is a terminal: a progress line within each level.
    progress: bool,
    /// The level rows (stdout) land on the same terminal or file as the summary (stderr).
    rows_on_stderr_terminal: bool,
    floor_shown: AtomicBool,
    rows_shown: AtomicBool,
    /// Each level printed live (stdout), the verdict its row said and the row.
    verdicts: std::sync::Mutex<Vec<(u32, String, String)>>,
    /// The last level, whose row the run's final analysis prints.
    deferred: std::sync::Mutex<Option<u32>>,
}

impl Live {
    fn new() -> Self {
        use std::io::IsTerminal;
        Self {
            progress: std::io::stderr().is_terminal(),
            rows_on_stderr_terminal: same_file(1, 2),
            floor_shown: AtomicBool::new(false),
            rows_shown: AtomicBool::new(false),
            verdicts: std::sync::Mutex::new(Vec::new()),
            deferred: std::sync::Mutex::new(None),
        }
    }

    /// A level's row on stdout (after the header, once).
    fn print(&self, row: &crate::analyze::verdict::LevelRow) {
        if !self.rows_shown.swap(true, Ordering::Relaxed) {
            crate::outln!("{}", report::terminal::level_header());
        }
        crate::outln!("{}", report::terminal::level_line(row));
        self.shown(row);
    }

    fn shown(&self, row: &crate::analyze::verdict::LevelRow) {
        let mut v = self.verdicts.lock().unwrap_or_else(|e| e.into_inner());
        v.push((
            row.index,
            row.verdict.clone(),
            report::terminal::level_line(row),
        ));
    }
}

/// Whether two descriptors are the same terminal, pipe or file (`2>&1`, or both on one tty).
fn same_file(a: i32, b: i32) -> bool {
    let stat = |fd: i32| {
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: fstat writes a stat into the buffer it is given and reports failure by -1.
        (unsafe { libc::fstat(fd, st.as_mut_ptr()) } == 0).then(|| {
            // SAFETY: fstat returned 0, so it filled the struct.
            let st = unsafe { st.assume_init() };
            (st.st_dev, st.st_ino, st.st_rdev)
        })
    };
    matches!((stat(a), stat(b)), (Some(x), Some(y)) if x == y)
}

/// The tool call every MCP worker makes (`--mcp TOOL --args JSON|@FILE`), or none for plain HTTP.
fn tool_call(a: &LoadArgs, cfg: &LadderConfig) -> anyhow::Result<Option<ToolCall>> {
    let Some(tool) = &a.mcp else { return Ok(None) };
    if tool.trim().is_empty() {
        return Err(usage("--mcp needs a tool name (see `witness mcp tools`)"));
    }
    let text = match a.tool_args.as_deref().map(|t| (t, t.strip_prefix('@'))) {
        None => "{}".to_string(),
        Some((_, Some(path))) => std::fs::read_to_string(path)
            .map_err(|e| usage(format!("--args @{path}: could not read the file: {e}")))?,
        Some((t, None)) => t.to_string(),
    };
    let arguments: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        usage(format!(
            "--args is not JSON ({e}): give the tool's arguments as an object, e.g. --args '{{\"query\":\"x\"}}'"
        ))
    })?;
    if !arguments.is_object() {
        return Err(usage(
            "--args must be a JSON object (the tool's named arguments), e.g. --args '{\"query\":\"x\"}'",
        ));
    }
    Ok(Some(ToolCall {
        tool: tool.clone(),
        arguments,
        limits: cfg.limits,
        rejection: cfg.rejection.clone(),
        modern: crate::load::mcp::revision(a.mcp_protocol.as_deref()).map_err(usage)?,
        headers: cfg.spec.headers.clone(),
        http2: a.protocol.http2,
    }))
}

/// How long a level of the ladder sends when neither --duration nor --rounds is given: long enough
/// for its percentiles to rest on many requests (wrk runs 10 s, oha 200 requests).
pub const DEFAULT_LEVEL_DURATION: Duration = Duration::from_secs(5);

fn ladder_config(a: &LoadArgs) -> anyhow::Result<LadderConfig> {
    // The whole request's limit includes its connect: a longer connect limit could never fire.
    if let Some(c) = a.connect_timeout.filter(|c| *c > a.timeout) {
        return Err(usage(format!(
            "--connect-timeout {} is longer than --timeout {}, which includes the connect, so it could never fire: give --connect-timeout at most {} (or a longer --timeout)",
            crate::journal::secs(c.as_secs_f64()),
            crate::journal::secs(a.timeout.as_secs_f64()),
            crate::journal::secs(a.timeout.as_secs_f64()),
        )));
    }
    // Over stdio there is no URL; the HTTP request spec is then never used.
    let url = a.url.as_deref().unwrap_or("http://127.0.0.1/");
    let uri = crate::load::url::http_url("--url", url).map_err(usage)?;
    check_port(&uri, "--url")?;
    let health: Uri = match &a.health_url {
        Some(h) => crate::load::url::http_url("--health-url", h).map_err(usage)?,
        None => format!(
            "{}://{}/health",
            uri.scheme_str().unwrap_or("http"),
            uri.authority().map(|x| x.as_str()).unwrap_or("")
        )
        .parse()
        .map_err(|e| usage(format!("could not derive the health URL from --url: {e}")))?,
    };
    check_port(&health, "--health-url")?;
    if let Some(bad) = a.accept_status.iter().find(|s| !(100..=599).contains(*s)) {
        return Err(usage(format!(
            "--accept-status {bad} is not an HTTP status: give statuses from 100 to 599, e.g. 301,302"
        )));
    }
    // GET, as curl, wrk, oha and k6 send, unless a body is given (then POST, as curl -d does).
    let method = match (&a.method, &a.body) {
        (Some(m), _) => Method::from_bytes(m.to_ascii_uppercase().as_bytes()).map_err(|_| {
            usage(format!(
                "--method {m:?} is not an HTTP method: give GET, POST, PUT, …"
            ))
        })?,
        (None, Some(_)) => Method::POST,
        (None, None) => Method::GET,
    };
    let body = match a.body.as_deref().map(|b| (b, b.strip_prefix('@'))) {
        Some((_, Some(path))) => Bytes::from(
            std::fs::read(path)
                .map_err(|e| usage(format!("--body @{path}: could not read the file: {e}")))?,
        ),
        Some((text, None)) => Bytes::from(text.to_string()),
        None => default_body(&method),
    };
    let (headers, _) = request_headers(a)?;
    if a.levels.is_empty() {
        return Err(usage(
            "--levels needs at least one concurrency (1 to 10000), e.g. 1,4,8",
        ));
    }
    if a.factor <= 0.0 || !a.factor.is_finite() {
        return Err(usage("--factor must be a positive number, e.g. 1.5"));
    }
    Ok(LadderConfig {
        spec: RequestSpec {
            method,
            uri,
            headers,
            body,
        },
        health,
        levels: a.levels.clone(),
        rounds: a.rounds.unwrap_or(1),
        // A level runs for a time unless --rounds counts its requests (rate levels: their own
        // --duration, in `open`).
        duration: match (a.rounds, a.open.rates.is_empty()) {
            (None, true) => Some(a.duration.unwrap_or(DEFAULT_LEVEL_DURATION)),
            _ => a.duration,
        },
        limits: Limits {
            connect: a
                .connect_timeout
                .unwrap_or(a.timeout.min(Duration::from_secs(5))),
            whole: a.timeout,
            max_body: usize::try_from(a.max_body).unwrap_or(usize::MAX),
        },
        settle: a.settle,
        rejection: Rejection {
            statuses: a.reject_status.clone(),
            body_marker: (!a.reject_body.is_empty()).then(|| a.reject_body.clone()),
            accepted: a.accept_status.clone(),
        },
        mcp: None,
        http2: a.protocol.http2.then_some(a.protocol.connections),
        open: open_config(a)?,
        replay: None,
    })
}

/// The most connections a level may hold, and the flag that says so: the in-flight cap of rate
/// levels, the highest concurrency given, or the highest a search may reach.
fn most_held(cfg: &LadderConfig, args: &LoadArgs) -> (u32, String) {
    if let Some(o) = &cfg.open {
        return (
            o.max_in_flight,
            format!("--max-in-flight {}", o.max_in_flight),
        );
    }
    let top = cfg.levels.iter().copied().max().unwrap_or(1);
    if args.open.find_limit {
        let reach = (top as u64) << args.open.max_levels.min(20);
        let reach = reach.min(crate::units::MAX_CONCURRENCY as u64) as u32;
        return (
            reach,
            format!("--find-limit from --levels {top} (up to {reach})"),
        );
    }
    (top, format!("--levels up to {top}"))
}

/// The open loop's settings (`--rates`), or none for the concurrency ladder.
fn open_config(a: &LoadArgs) -> anyhow::Result<Option<crate::load::open::OpenConfig>> {
    use crate::load::open::{Arrivals, OpenConfig};
    let o = &a.open;
    if o.rates.is_empty() {
        return Ok(None);
    }
    if a.rounds.is_some() {
        return Err(usage(
            "--rounds counts a worker's requests, and --rates has no workers: give --duration (how long each rate level sends) instead",
        ));
    }
    if a.protocol.http2 {
        return Err(usage(
            "--http2 is not supported with --rates yet (rate levels speak HTTP/1.1 and HTTPS): drop --http2, or give --levels for HTTP/2 streams",
        ));
    }
    Ok(Some(OpenConfig {
        arrivals: match o.arrivals {
            crate::cli::Arrivals::Constant => Arrivals::Constant,
            crate::cli::Arrivals::Poisson => Arrivals::Poisson,
        },
        // A random seed is journalled with each level, so the run still replays.
        seed: o.seed.unwrap_or_else(rand::random),
        max_in_flight: o.max_in_flight,
        duration: a.duration.unwrap_or(crate::load::open::DEFAULT_DURATION),
    }))
}

/// A port the URL names must be one a TCP socket can have: 1 to 65535. (The URL parser accepts any
/// digits and would otherwise fall back to port 80 — loading a different server than the one named.)
pub fn check_port(uri: &Uri, flag: &str) -> anyhow::Result<()> {
    let authority = uri.authority().map(|a| a.as_str()).unwrap_or("");
    let after_host = authority.rsplit_once(']').map_or(authority, |(_, p)| p);
    let Some((_, digits)) = after_host.rsplit_once(':') else {
        return Ok(());
    };
    match digits.parse::<u32>() {
        Ok(p) if (1..=65535).contains(&p) => Ok(()),
        _ if digits.is_empty() => Err(usage(format!(
            "{flag} {uri}: the port after ':' is missing; give one from 1 to 65535"
        ))),
        _ => Err(usage(format!(
            "{flag} {uri}: port {digits} is out of range; a TCP port is from 1 to 65535"
        ))),
    }
}

/// Headers whose values are credentials whatever the user says.
const CREDENTIAL_HEADERS: [&str; 3] = ["authorization", "proxy-authorization", "cookie"];

/// The request's extra headers from `--header` and `--header-env`, and the secret values among
/// them (with each credential's own parts: the token after "Bearer ", a cookie's value), which
/// the run keeps out of every artifact. No message here repeats a header's value.
/// The body sent when `--body` is not given: none for the methods whose requests carry none (GET,
/// HEAD, DELETE, OPTIONS, TRACE, CONNECT), `{}` for the others (POST, PUT, PATCH, …).
pub fn default_body(method: &Method) -> Bytes {
    let bodiless = [
        Method::GET,
        Method::HEAD,
        Method::DELETE,
        Method::OPTIONS,
        Method::TRACE,
        Method::CONNECT,
    ];
    if bodiless.contains(method) {
        Bytes::new()
    } else {
        Bytes::from_static(b"{}")
    }
}

pub(crate) fn request_headers(a: &LoadArgs) -> anyhow::Result<(HeaderMap, Vec<String>)> {
    let marked: Vec<String> = a
        .secret_header
        .iter()
        .map(|n| n.trim().to_ascii_lowercase())
        .collect();
    if let Some(bad) = marked
        .iter()
        .find(|n| HeaderName::from_bytes(n.as_bytes()).is_err())
    {
        return Err(usage(format!(
            "--secret-header {bad:?} is not a header name"
        )));
    }
    let mut entries: Vec<(String, String, &str, bool)> = Vec::new();
    for h in &a.header {
        let (k, v) = h.split_once(':').ok_or_else(|| {
            usage("--header takes 'Name: value' (a colon between name and value); one of them has no colon")
        })?;
        entries.push((
            k.trim().to_string(),
            v.trim().to_string(),
            "--header",
            false,
        ));
    }
    for h in &a.header_env {
        let (k, var) = h
            .split_once('=')
            .ok_or_else(|| usage(format!("--header-env {h:?} must look like 'Name=ENV_VAR'")))?;
        let v = std::env::var(var.trim()).map_err(|_| {
            usage(format!(
                "--header-env {h:?}: the environment variable {:?} is not set (or not UTF-8); export it first",
                var.trim()
            ))
        })?;
        entries.push((
            k.trim().to_string(),
            v.trim().to_string(),
            "--header-env",
            true,
        ));
    }
    let mut headers = HeaderMap::new();
    let mut secrets = Vec::new();
    for (k, v, flag, from_env) in entries {
        let name = HeaderName::from_bytes(k.as_bytes())
            .map_err(|_| usage(format!("{flag}: {k:?} is not a header name")))?;
        let secret = from_env
            || CREDENTIAL_HEADERS.contains(&name.as_str())
            || marked.iter().any(|m| m == name.as_str());
        let mut value = HeaderValue::from_str(&v).map_err(|_| {
            usage(format!(
                "{flag} {k}: the value has characters a header cannot carry"
            ))
        })?;
        if secret {
            if v.len() < crate::secrets::MIN_LEN {
                return Err(usage(format!(
                    "{flag} {k}: the value is a secret of {} bytes, too short to keep out of witness's output (at least {})",
                    v.len(),
                    crate::secrets::MIN_LEN
                )));
            }
            value.set_sensitive(true);
            secrets.push(v.clone());
            // The parts a server may log on their own: the token after a scheme, cookie values.
            let parts = v.split_whitespace().skip(1).chain(
                v.split(';')
                    .filter_map(|c| c.split_once('=').map(|(_, x)| x.trim())),
            );
            secrets.extend(
                parts
                    .filter(|p| p.len() >= crate::secrets::MIN_LEN)
                    .map(str::to_string),
            );
        }
        headers.append(name, value);
    }
    Ok((headers, secrets))
}

/// Resolves the URL's host name once, before anything runs (an address is taken as it is), pins its
/// addresses for every connection after ([`crate::load::resolve`]), and checks they are loopback
/// unless --allow-remote: a load test aimed at the wrong host is an outage.
///
/// The rule for a lookup that goes wrong: a name the resolver says does not exist (or that gives no
/// address) is a usage error (exit 2) naming the host, the flag and the resolver's nameservers; a
/// resolver that gave no answer at all (no nameserver answered, or not within
/// [`crate::load::resolve::LIMIT`]) is a refusal (exit 3): nothing can be measured without an
/// address. A slow lookup is neither: it is made once and no latency, connect floor or health
/// timeout holds it, so it is said, with its figure and cause, and the run goes on.
pub async fn resolve_target(uri: &Uri, flag: &str, allow_remote: bool) -> anyhow::Result<()> {
    use crate::load::resolve;
    let host = uri.host().unwrap_or("").trim_matches(['[', ']']);
    let addrs: Vec<IpAddr> = match (host.parse::<IpAddr>(), resolve::pinned(host)) {
        (Ok(ip), _) => vec![ip],
        (Err(_), Some(a)) => a,
        (Err(_), None) => {
            let r = resolve::lookup(host).await;
            if let Some(e) = &r.error {
                return Err(unresolved(uri, flag, &r, e));
            }
            resolve::pin(&r);
            r.addrs
        }
    };
    if allow_remote {
        return Ok(());
    }
    if let Some(bad) = addrs.iter().find(|ip| !ip.is_loopback()) {
        // An address given as such is not said twice ("10.1.2.3 is 10.1.2.3").
        let what = match host.parse::<IpAddr>() {
            Ok(_) => format!("{host} is not a loopback address"),
            Err(_) => format!("{host} is {bad}, not a loopback address"),
        };
        return Err(usage(format!(
            "refusing to send load to {uri}: {what}. A load test aimed at the wrong host is an outage; pass --allow-remote if you mean it"
        )));
    }
    Ok(())
}

/// A lookup that gave no address, in words: a refusal when no nameserver answered, else a usage
/// error (the name does not exist), each naming the host, the flag and the resolver.
fn unresolved(
    uri: &Uri,
    flag: &str,
    r: &crate::load::resolve::Resolution,
    e: &str,
) -> anyhow::Error {
    use crate::analyze::resolution::{cause, figure, unanswered_cause, SLOW_S};
    let (host, took) = (&r.host, r.took.as_secs_f64());
    if r.unanswered {
        return refuse(format!(
            "resolving {host} (the host of {flag} {uri}) gave no address after {}: {e}; {}. Nothing can be measured without an address: fix /etc/resolv.conf, or give an address in {flag}",
            figure(took),
            unanswered_cause(took, &r.resolver)
        ));
    }
    let asked = match r.resolver.nameservers.is_empty() {
        true => "/etc/hosts; no nameserver is set in /etc/resolv.conf".to_string(),
        false => format!(
            "/etc/hosts and the nameservers in /etc/resolv.conf: {}",
            r.resolver.nameservers.join(", ")
        ),
    };
    let slow = match took >= SLOW_S {
        true => format!(", after {}: {}", figure(took), cause(took, &r.resolver)),
        false => String::new(),
    };
    usage(format!(
        "{flag} {uri}: {host} does not resolve ({e}; asked {asked}{slow}): fix the host name, add it to /etc/hosts, or give an address such as 127.0.0.1"
    ))
}

/// Journals the host names resolved before the journal opened (and every later lookup as it
/// happens), and says each: its addresses and figure, and for a slow one its cause.
pub(crate) fn say_resolutions(journal: &Journal) {
    use crate::analyze::resolution::{line, slow_words, Resolved};
    for r in crate::load::resolve::journal_to(journal) {
        let took_s = r.took.as_secs_f64();
        let row = Resolved {
            host: r.host.clone(),
            addrs: r.addrs.iter().map(IpAddr::to_string).collect(),
            took_s,
            again: 0,
            slow: Vec::new(),
            error: r.error.clone(),
        };
        crate::errln!("witness: {}", line(&row));
        if let Some(w) = slow_words(&r.host, took_s, &r.resolver) {
            crate::errln!("witness: ! {w}");
        }
    }
}
