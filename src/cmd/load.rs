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
use crate::load::health::Prober;
use crate::load::ladder::{run_level, LadderConfig};
use crate::load::outcome::Rejection;
use crate::report;
use crate::server::process::State;
use crate::server::Target;

pub async fn run(args: LoadArgs) -> anyhow::Result<i32> {
    // Before anything is written or printed: credential values are scrubbed from every artifact.
    let (_, secrets) = request_headers(&args)?;
    crate::secrets::install(&secrets).map_err(|e| usage(format!("{e:#}")))?;
    let cfg = ladder_config(&args)?;
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
        .transpose()?;
    if target_cfg.is_none() {
        super::check_attach_watch(&args.supervise.watch)?;
    }
    check_loopback(&cfg.spec.uri, args.allow_remote).await?;
    check_loopback(&cfg.health, args.allow_remote).await?;
    check_outputs(&args.output)?;
    let journal = open_journal("load", &args.output)?;
    journal.emit(Event::Settings(Settings {
        timers_s: args.supervise.timers_s(),
        load: Some(LoadSettings {
            url: cfg.spec.uri.to_string(),
            method: cfg.spec.method.to_string(),
            levels: cfg.levels.clone(),
            timeout_s: cfg.limits.whole.as_secs_f64(),
            connect_timeout_s: cfg.limits.connect.as_secs_f64(),
            settle_s: cfg.settle.as_secs_f64(),
            factor: args.factor,
            cliff_slack_s: args.cliff_slack.as_secs_f64(),
            rounds: args.duration.is_none().then_some(cfg.rounds),
            duration_s: args.duration.map(|d| d.as_secs_f64()),
        }),
        extra: serde_json::Value::Null,
    }));
    let prober = Prober::new(cfg.health.clone(), args.health_timeout);
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
    prober: &Prober,
    journal: &Journal,
) -> Result<(), Stop> {
    if let (true, Some(state)) = (target.owned(), target.state()) {
        wait_ready(state, prober, journal, args.ready_timeout).await?;
    }
    check_floor(&cfg.spec.uri, args.max_connect_floor, journal).await?;
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
            prober.url,
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
    prober: &Prober,
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
                url: prober.url.to_string(),
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
                url: prober.url.to_string(),
                detail: Some(detail.clone()),
            });
            journal.emit(Event::Note {
                level: "refused".into(),
                text: format!("the server never became ready: {detail}"),
            });
            return Err(Stop::Refused(format!(
                "the server never became ready at {}: {detail}",
                prober.url
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

fn ladder_config(a: &LoadArgs) -> anyhow::Result<LadderConfig> {
    let uri: Uri = a
        .url
        .parse()
        .map_err(|e| usage(format!("--url {:?} is not a URL: {e}", a.url)))?;
    if uri.scheme_str() != Some("http") || uri.host().is_none() {
        return Err(usage(format!(
            "--url {:?} must be an http:// URL with a host (https is not supported yet)",
            a.url
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
    })
}

/// Headers whose values are credentials whatever the user says.
const CREDENTIAL_HEADERS: [&str; 3] = ["authorization", "proxy-authorization", "cookie"];

/// The request's extra headers from `--header` and `--header-env`, and the secret values among
/// them (with each credential's own parts: the token after "Bearer ", a cookie's value), which
/// the run keeps out of every artifact. No message here repeats a header's value.
fn request_headers(a: &LoadArgs) -> anyhow::Result<(HeaderMap, Vec<String>)> {
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
