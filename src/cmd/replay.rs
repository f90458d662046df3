//! `witness replay FILE`: a recording (`wrap --record`'s MCP stdio JSONL, or a HAR) played again as
//! load. The recording is read and checked against the way it is to be played (a stdio session
//! needs the server's command, a HAR a `--url`), then `load` runs it: its levels are the speeds,
//! each an open-loop level whose schedule is the recording's (load/replay.rs), with the same
//! supervision, health, identity, verdicts and views, and the answers compared with the recorded
//! ones. Exit codes are `load`'s.

use crate::analyze::answers::Compare;
use crate::cli::{CompareMode, LoadArgs, OpenArgs, ProtocolArgs, ReplayArgs};
use crate::error::usage;
use crate::observe::record::Recording;

pub async fn run(a: ReplayArgs) -> anyhow::Result<i32> {
    let file = a.file.display().to_string();
    let recording = crate::observe::record::open(&a.file).map_err(|e| {
        usage(format!(
            "{e}. witness replays what `witness wrap --record FILE` wrote (MCP over stdio), or a HAR file"
        ))
    })?;
    let stdio = matches!(recording, Recording::Stdio(_));
    if stdio && a.url.is_some() {
        return Err(usage(format!(
            "{file} is an MCP session recorded over stdio: it replays against the server's command after `--` (e.g. `witness replay {file} -- python3 server.py`), not --url"
        )));
    }
    if stdio && a.command.is_empty() {
        return Err(usage(format!(
            "{file} is an MCP session recorded over stdio: give the server's command after `--`, e.g. `witness replay {file} -- python3 server.py`"
        )));
    }
    if !stdio && a.url.is_none() {
        return Err(usage(format!(
            "{file} is an HTTP recording (HAR): give --url http://127.0.0.1:PORT/ (its scheme, host and port replace the recorded ones)"
        )));
    }
    let compare = match a.compare {
        CompareMode::Outcome => Compare::Outcome,
        CompareMode::Shape => Compare::Shape,
        CompareMode::Exact => Compare::Exact,
    };
    let plan = super::load::ReplayPlan {
        file,
        recording,
        sessions: a.sessions,
        compare,
    };
    super::load::run_with(load_args(a, stdio), Some(plan)).await
}

/// `load`'s arguments for a replay: one rate level per speed (the speed stands for its rate), MCP
/// over stdio for a stdio recording, plain HTTP to --url for a HAR.
fn load_args(a: ReplayArgs, stdio: bool) -> LoadArgs {
    LoadArgs {
        url: a.url,
        mcp: stdio.then(|| "(replay)".to_string()),
        tool_args: None,
        mcp_protocol: None,
        method: None,
        body: None,
        header: a.header,
        secret_header: a.secret_header,
        header_env: a.header_env,
        health_url: a.health_url,
        levels: vec![1],
        rounds: None,
        duration: None,
        timeout: a.timeout,
        connect_timeout: a.connect_timeout,
        settle: a.settle,
        factor: a.factor,
        cliff_slack: a.cliff_slack,
        max_connect_floor: a.max_connect_floor,
        allow_remote: a.allow_remote,
        reject_status: a.reject_status,
        reject_body: a.reject_body,
        accept_status: a.accept_status,
        max_body: a.max_body,
        ready_timeout: a.ready_timeout,
        health_timeout: a.health_timeout,
        sample_interval: a.sample_interval,
        show_output: a.show_output,
        open: OpenArgs {
            rates: a.speeds,
            arrivals: crate::cli::Arrivals::Constant,
            seed: Some(0),
            max_in_flight: a.max_in_flight,
            find_limit: a.find_limit,
            resolution: a.resolution,
            max_levels: a.max_levels,
        },
        gpu: a.gpu,
        supervise: a.supervise,
        container: a.container,
        output: a.output,
        tls: a.tls,
        protocol: ProtocolArgs::default(),
        command: a.command,
    }
}
