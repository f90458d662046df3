//! `witness load`: validate the target (loopback only unless told), start or attach to the server,
//! measure the connect floor, wait for health, run the ladder, stop, and render the views. Exit codes:
//! 0 every level passed, 1 a level failed or was skipped, 2 usage, 3 refused to measure.

use std::net::IpAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{HeaderMap, Method, Uri};

use super::{check_outputs, open_journal, start_measured, target_config, Measured, Signals};
use crate::cli::LoadArgs;
use crate::error::{refuse, usage};
use crate::journal::{Event, Journal, LoadSettings, Settings};
use crate::load::client::{Limits, RequestSpec};
use crate::load::floor;
use crate::load::health::{Health, Prober};
use crate::load::ladder::{run_level, LadderConfig};
use crate::load::mcp::{McpTarget, Pinger, StdioLink, ToolCall};
use crate::load::outcome::Rejection;
use crate::report;
use crate::server::process::State;
use crate::server::Target;

pub async fn run(args: LoadArgs) -> anyhow::Result<i32> {
    let mut cfg = ladder_config(&args)?;
    let call = tool_call(&args, &cfg)?;
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
    let mut target_cfg = (args.container.is_container() || !args.command.is_empty())
        .then(|| {
            target_config(
                &args.supervise,
                &args.container,
                args.command.clone(),
                args.show_output,
            )
        })
        .transpose()?;
    let pipes = match (&mut target_cfg, stdio) {
        (Some(super::TargetConfig::Process(p)), true) => {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            p.stdio = Some(tx);
            Some(rx)
        }
        _ => None,
    };
    if !stdio {
        check_loopback(&cfg.spec.uri, args.allow_remote).await?;
        check_loopback(&cfg.health, args.allow_remote).await?;
    }
    check_outputs(&args.output)?;
    let journal = open_journal("load", &args.output)?;
    // Health: --health-url when given; for MCP otherwise its `ping`.
    let prober = match &call {
        Some(call) => {
            let target = match pipes {
                Some(rx) => {
                    McpTarget::Stdio(StdioLink::new(rx, journal.clone(), call.modern.clone()))
                }
                None => McpTarget::Http(cfg.spec.uri.clone()),
            };
            let health = match args.health_url {
                Some(_) => Health::Http(Prober::new(cfg.health.clone(), args.health_timeout)),
                None => Health::Mcp(Pinger::new(
                    target.clone(),
                    call.clone(),
                    args.health_timeout,
                )),
            };
            cfg.mcp = Some((target, call.clone()));
            health
        }
        None => Health::Http(Prober::new(cfg.health.clone(), args.health_timeout)),
    };
    journal.emit(Event::Settings(Settings {
        timers_s: args.supervise.timers_s(),
        load: Some(LoadSettings {
            url: if stdio {
                "stdio".to_string()
            } else {
                cfg.spec.uri.to_string()
            },
            method: match &call {
                Some(_) => "tools/call".to_string(),
                None => cfg.spec.method.to_string(),
            },
            levels: cfg.levels.clone(),
            timeout_s: cfg.limits.whole.as_secs_f64(),
            connect_timeout_s: cfg.limits.connect.as_secs_f64(),
            settle_s: cfg.settle.as_secs_f64(),
            factor: args.factor,
            cliff_slack_s: args.cliff_slack.as_secs_f64(),
            rounds: args.duration.is_none().then_some(cfg.rounds),
            duration_s: args.duration.map(|d| d.as_secs_f64()),
            mcp: call.as_ref().map(|c| crate::journal::McpSettings {
                tool: c.tool.clone(),
                transport: if stdio { "stdio" } else { "http" }.into(),
            }),
        }),
        extra: serde_json::Value::Null,
    }));
    let port = cfg.spec.uri.port_u16().unwrap_or(80);
    let Measured { target, sampling } =
        match start_measured(&args.gpu, target_cfg, port, &journal, args.sample_interval).await {
            Ok(m) => m,
            Err(ns) => {
                finish(&journal, &args, ns.reason, ns.partial)?;
                return Err(ns.error);
            }
        };

    let mut signals = Signals::install()?;
    let result = {
        let body = measure(&args, &cfg, &target, &prober, &journal);
        tokio::pin!(body);
        tokio::select! {
            r = &mut body => r,
            sig = signals.recv() => Err(Stop::Interrupted(sig.as_str().to_string())),
        }
    };
    sampling.stop().await;
    target.stop("the load run is over").await?;
    match result {
        Ok(()) => {
            let a = finish(&journal, &args, "every level ran", false)?;
            Ok(match a.load.as_ref().map(|l| l.verdict.as_str()) {
                Some("pass") => 0,
                _ => 1,
            })
        }
        Err(Stop::Refused(why)) => {
            finish(&journal, &args, &format!("refused: {why}"), false)?;
            Err(refuse(why))
        }
        Err(Stop::Interrupted(sig)) => {
            finish(&journal, &args, &format!("interrupted by {sig}"), true)?;
            Ok(130)
        }
    }
}

pub(crate) enum Stop {
    Refused(String),
    Interrupted(String),
}

/// Everything between start and stop: ready, floor, levels.
async fn measure(
    args: &LoadArgs,
    cfg: &LadderConfig,
    target: &Target,
    prober: &Health,
    journal: &Journal,
) -> Result<(), Stop> {
    if let (true, Some(state)) = (target.owned(), target.state()) {
        wait_ready(state, prober, journal, args.ready_timeout).await?;
    }
    // Over stdio there is no connect to measure: the pipes are the connection.
    if !matches!(&cfg.mcp, Some((McpTarget::Stdio(_), _))) {
        check_floor(&cfg.spec.uri, args.max_connect_floor, journal).await?;
    }
    let refuse_with = |why: String| {
        refused_note(journal, &why);
        Err(Stop::Refused(why))
    };
    // A target unhealthy before the first level: nothing could be measured honestly (a later level
    // that finds the server wedged is skipped instead, since earlier levels did measure).
    let first = prober.probe_journalled(journal, "before the ladder").await;
    if !first.healthy() {
        return refuse_with(format!(
            "the target was unhealthy before the first level: {} answered {} (not 200)",
            prober.describe(),
            first.text()
        ));
    }
    let ids = Arc::new(AtomicU64::new(0));
    for (index, &n) in cfg.levels.iter().enumerate() {
        run_level(cfg, index as u32, n, target, prober, journal, &ids).await;
        if let Some(line) = after_level(journal, args, index as u32) {
            println!("{line}");
        }
    }
    Ok(())
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
    });
    let why = match f.median_ms {
        Some(m) if m <= limit_ms => {
            eprintln!(
                "witness: connect floor {m:.2} ms to {}:{} (limit {limit_ms:.0} ms)",
                f.host, f.port
            );
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
pub(crate) fn refused_note(journal: &Journal, text: &str) {
    journal.emit(Event::Note {
        level: "refused".into(),
        text: text.into(),
    });
}

/// Waits until the started server answers 200, journalled as time-to-ready.
pub(crate) async fn wait_ready(
    mut state: tokio::sync::watch::Receiver<State>,
    prober: &impl crate::load::health::Probes,
    journal: &Journal,
    limit: Duration,
) -> Result<(), Stop> {
    let start = Instant::now();
    loop {
        let p = prober.probe().await;
        if p.healthy() {
            journal.emit(Event::Ready {
                ok: true,
                waited_s: start.elapsed().as_secs_f64(),
                url: prober.describe(),
                detail: None,
            });
            return Ok(());
        }
        let gone = matches!(&*state.borrow_and_update(), State::Finished { .. });
        if gone || start.elapsed() >= limit {
            let detail = if gone {
                "the server exited before it was ready".to_string()
            } else {
                format!(
                    "health was {} after --ready-timeout {}",
                    p.text(),
                    crate::journal::secs(limit.as_secs_f64())
                )
            };
            journal.emit(Event::Ready {
                ok: false,
                waited_s: start.elapsed().as_secs_f64(),
                url: prober.describe(),
                detail: Some(detail.clone()),
            });
            journal.emit(Event::Note {
                level: "refused".into(),
                text: format!("the server never became ready: {detail}"),
            });
            return Err(Stop::Refused(format!(
                "the server never became ready at {}: {detail}",
                prober.describe()
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// After each level: the report is rewritten (so a killed run still leaves an up-to-date one, labelled
/// partial), and the level's terminal line comes from the same analysis of the journal so far.
fn after_level(journal: &Journal, args: &LoadArgs, index: u32) -> Option<String> {
    journal.flush().ok()?;
    let loaded = crate::journal::read(journal.path()).ok()?;
    let a = crate::analyze::analyze(&loaded);
    if let Some(p) = &args.output.report {
        if let Err(e) = report::write_file(&report::json::Json, &a, p, "--report") {
            eprintln!("witness: {e:#}");
        }
    }
    let row = a.load?.levels.into_iter().find(|l| l.index == index)?;
    Some(report::terminal::level_line(&row))
}

fn finish(
    journal: &Journal,
    args: &LoadArgs,
    reason: &str,
    partial: bool,
) -> anyhow::Result<crate::analyze::Analysis> {
    super::finish_run(journal, &args.output, reason, partial, None)
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
    }))
}

fn ladder_config(a: &LoadArgs) -> anyhow::Result<LadderConfig> {
    // Over stdio there is no URL; the HTTP request spec is then never used.
    let url = a.url.as_deref().unwrap_or("http://127.0.0.1/");
    let uri: Uri = url
        .parse()
        .map_err(|e| usage(format!("--url {url:?} is not a URL: {e}")))?;
    if uri.scheme_str() != Some("http") || uri.host().is_none() {
        return Err(usage(format!(
            "--url {url:?} must be an http:// URL with a host (https is not supported yet)"
        )));
    }
    let health: Uri = match &a.health_url {
        Some(h) => h
            .parse()
            .map_err(|e| usage(format!("--health-url {h:?} is not a URL: {e}")))?,
        None => format!(
            "http://{}/health",
            uri.authority().map(|x| x.as_str()).unwrap_or("")
        )
        .parse()
        .map_err(|e| usage(format!("could not derive the health URL from --url: {e}")))?,
    };
    let method = Method::from_bytes(a.method.to_ascii_uppercase().as_bytes())
        .map_err(|_| usage(format!("--method {:?} is not an HTTP method", a.method)))?;
    let body = match a.body.strip_prefix('@') {
        Some(path) => Bytes::from(
            std::fs::read(path)
                .map_err(|e| usage(format!("--body @{path}: could not read the file: {e}")))?,
        ),
        None => Bytes::from(a.body.clone()),
    };
    let mut headers = HeaderMap::new();
    for h in &a.header {
        let (k, v) = h
            .split_once(':')
            .ok_or_else(|| usage(format!("--header {h:?} must look like 'Name: value'")))?;
        let name = HeaderName::from_bytes(k.trim().as_bytes()).map_err(|_| {
            usage(format!(
                "--header {h:?}: {:?} is not a header name",
                k.trim()
            ))
        })?;
        let value = HeaderValue::from_str(v.trim()).map_err(|_| {
            usage(format!(
                "--header {h:?}: the value has characters a header cannot carry"
            ))
        })?;
        headers.append(name, value);
    }
    if a.levels.is_empty() || a.levels.contains(&0) {
        return Err(usage("--levels must be positive concurrencies, e.g. 1,4,8"));
    }
    if a.factor <= 0.0 || !a.factor.is_finite() {
        return Err(usage("--factor must be a positive number, e.g. 1.5"));
    }
    if a.rounds == Some(0) {
        return Err(usage("--rounds must be at least 1"));
    }
    if a.timeout.is_zero() {
        return Err(usage("--timeout must be more than zero"));
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
        duration: a.duration,
        limits: Limits {
            connect: a
                .connect_timeout
                .unwrap_or(a.timeout.min(Duration::from_secs(5))),
            whole: a.timeout,
        },
        settle: a.settle,
        rejection: Rejection {
            statuses: a.reject_status.clone(),
            body_marker: (!a.reject_body.is_empty()).then(|| a.reject_body.clone()),
        },
        mcp: None,
    })
}

/// A load test aimed at the wrong host is an outage: loopback only, unless --allow-remote.
pub async fn check_loopback(uri: &Uri, allow_remote: bool) -> anyhow::Result<()> {
    if allow_remote {
        return Ok(());
    }
    let host = uri.host().unwrap_or("").trim_matches(['[', ']']);
    let addrs: Vec<IpAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![ip],
        Err(_) => tokio::net::lookup_host((host, uri.port_u16().unwrap_or(80)))
            .await
            .map(|a| a.map(|s| s.ip()).collect())
            .map_err(|e| usage(format!("could not resolve {host:?} in {uri}: {e}")))?,
    };
    if let Some(bad) = addrs.iter().find(|ip| !ip.is_loopback()) {
        return Err(usage(format!(
            "refusing to send load to {uri}: {host} is {bad}, not a loopback address. A load test aimed at the wrong host is an outage; pass --allow-remote if you mean it"
        )));
    }
    if addrs.is_empty() {
        return Err(usage(format!("{host:?} in {uri} resolves to no address")));
    }
    Ok(())
}
