//! An example MCP client built with the official Rust SDK's client side (`rmcp`) over its
//! child-process transport: it launches a stdio MCP server (or `witness wrap -- SERVER`) as an MCP
//! host does, initializes, lists the tools, and calls one tool N times in turn, timing each call.
//! The Rust twin of examples/py/mcp_client.py (the Python SDK's client), so that two SDKs nobody here
//! wrote talk through witness's relay; scripts/bench-relay.sh reads its `median_us` line.
//!
//! usage: mcp_rs_client [--calls N] [--tool NAME] [--args JSON] [--wait-end] [--timeout SECS] -- CMD ARGS…
//!
//! - `--calls N` (default 1): calls made one after another, each waiting for its answer.
//! - `--tool NAME` (default `echo`): the tool to call; the server must list it. Without `--args`,
//!   `echo` is sent `{"text":"hi N"}` and its answer must be that text (an answer crossed with another
//!   call's would show).
//! - `--args JSON`: the arguments object sent with every call (default: none, but for `echo`).
//! - `--wait-end`: after the N calls, keep calling (every 200 ms, at most 500 calls) until the
//!   connection ends, and say how: a server killed mid-session must be seen to close, not hang.
//! - `--timeout SECS` (default 20): the bound on each step (initialize, the tool list, each call,
//!   the close); a call past it is cancelled (`notifications/cancelled`) and counts as an error.
//!
//! Prints one line per step on stdout: `init ok`, `tools ok NAME,NAME…`, `call N ok MS ms` or
//! `call N error TEXT`, then `median_us N` (the median round trip of the calls that succeeded, in
//! microseconds, measured here around each call; the lower middle one of an even count; `-` for
//! none) and `closed by client`, or with `--wait-end`
//! `ended: REASON`. The server's stderr passes through to this program's stderr.
//!
//! Exit status: 0 when the session went as asked (every call ok and a clean close, or with
//! `--wait-end` the connection ending), 1 otherwise, 2 for a usage error.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientRequest, ServerResult,
};
use rmcp::service::{Peer, PeerRequestOptions, ServiceError};
use rmcp::transport::TokioChildProcess;
use rmcp::RoleClient;
use rmcp::ServiceExt;

struct Config {
    calls: u64,
    tool: String,
    args: Option<serde_json::Map<String, serde_json::Value>>,
    wait_end: bool,
    timeout: Duration,
    cmd: Vec<String>,
}

/// How many calls `--wait-end` makes at most, so a server that never ends cannot keep the client
/// (and the test that runs it) alive: 500 × 200 ms is well past any watchdog a test arms.
const WAIT_END_MAX_CALLS: u64 = 500;
const WAIT_END_PAUSE: Duration = Duration::from_millis(200);

const USAGE: &str = "usage: mcp_rs_client [--calls N] [--tool NAME] [--args JSON] [--wait-end] [--timeout SECS] -- CMD ARGS…";

fn parse_args() -> Result<Config, String> {
    let mut cfg = Config {
        calls: 1,
        tool: "echo".into(),
        args: None,
        wait_end: false,
        timeout: Duration::from_secs(20),
        cmd: Vec::new(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--calls" => {
                let v = value()?;
                cfg.calls = v
                    .parse()
                    .map_err(|_| format!("--calls {v:?} is not a count"))?;
            }
            "--tool" => cfg.tool = value()?,
            "--args" => {
                let v = value()?;
                match serde_json::from_str(&v) {
                    Ok(serde_json::Value::Object(m)) => cfg.args = Some(m),
                    _ => return Err(format!("--args {v:?} is not a JSON object")),
                }
            }
            "--wait-end" => cfg.wait_end = true,
            "--timeout" => {
                let v = value()?;
                cfg.timeout = v
                    .parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s > 0.0)
                    .map(Duration::from_secs_f64)
                    .ok_or_else(|| format!("--timeout {v:?} is not a number of seconds"))?;
            }
            "--" => {
                cfg.cmd = args.collect();
                break;
            }
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown flag {other:?}\n{USAGE}")),
        }
    }
    if cfg.cmd.is_empty() {
        return Err(format!("no server command after --\n{USAGE}"));
    }
    Ok(cfg)
}

fn main() -> ExitCode {
    let cfg = match parse_args() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mcp_rs_client: {e}");
            return ExitCode::from(2);
        }
    };
    // One thread: each round trip is then the transport and the server, not a wake-up handed
    // between runtime threads, and the client's own share of a shared machine stays small.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let ok = rt.block_on(session(cfg));
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// What ended a call that got no result.
enum Failure {
    /// The server answered, but with an error (JSON-RPC error, `isError`, a wrong echo).
    Answered(String),
    /// No answer within `--timeout`; the SDK has sent `notifications/cancelled` for it.
    TimedOut,
    /// The connection is gone: every later call would fail the same way.
    Closed(String),
}

async fn session(cfg: Config) -> bool {
    let mut cmd = tokio::process::Command::new(&cfg.cmd[0]);
    cmd.args(&cfg.cmd[1..]);
    // If this client stops early (a step past --timeout, a panic), the server must not outlive it:
    // the SDK's own clean-up kills from a spawned task, which a runtime shutting down never runs.
    cmd.kill_on_drop(true);
    let transport = match TokioChildProcess::new(cmd) {
        Ok(t) => t,
        Err(e) => {
            println!("ended: could not start {:?}: {e}", cfg.cmd[0]);
            return false;
        }
    };
    let client = match tokio::time::timeout(cfg.timeout, ().serve(transport)).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            println!("ended: initialize failed: {e}");
            return false;
        }
        Err(_) => {
            println!("ended: no answer to initialize within {:?}", cfg.timeout);
            return false;
        }
    };
    println!("init ok");

    match tokio::time::timeout(cfg.timeout, client.list_all_tools()).await {
        Ok(Ok(tools)) => {
            let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
            println!("tools ok {}", names.join(","));
            if !names.contains(&cfg.tool.as_str()) {
                println!(
                    "ended: the server offers no tool {:?} (it offers {})",
                    cfg.tool,
                    names.join(", ")
                );
                close(client, cfg.timeout).await;
                return false;
            }
        }
        Ok(Err(e)) => {
            println!("ended: tools/list failed: {e}");
            close(client, cfg.timeout).await;
            return false;
        }
        Err(_) => {
            println!("ended: no answer to tools/list within {:?}", cfg.timeout);
            close(client, cfg.timeout).await;
            return false;
        }
    }

    // Bounded by --calls (plus WAIT_END_MAX_CALLS with --wait-end), so a Vec is fine here.
    let mut round_trips_us: Vec<u64> = Vec::with_capacity(cfg.calls.min(100_000) as usize);
    let mut all_ok = true;
    let mut n = 0u64;
    let limit = if cfg.wait_end {
        cfg.calls.max(1) + WAIT_END_MAX_CALLS
    } else {
        cfg.calls
    };
    while n < limit {
        n += 1;
        let echo_text = format!("hi {n}");
        let mut params = CallToolRequestParams::new(cfg.tool.clone());
        match (&cfg.args, cfg.tool.as_str()) {
            (Some(a), _) => params = params.with_arguments(a.clone()),
            (None, "echo") => {
                let mut a = serde_json::Map::new();
                a.insert("text".into(), echo_text.clone().into());
                params = params.with_arguments(a);
            }
            (None, _) => {}
        }
        let start = Instant::now();
        let res = call_tool(client.peer(), params, cfg.timeout).await;
        let took = start.elapsed();
        let outcome = match res {
            Err(ServiceError::Timeout { .. }) => Err(Failure::TimedOut),
            Err(ServiceError::McpError(e)) => Err(Failure::Answered(format!(
                "JSON-RPC error {}: {}",
                e.code.0, e.message
            ))),
            Err(e @ (ServiceError::TransportClosed | ServiceError::TransportSend(_))) => {
                Err(Failure::Closed(format!("connection closed ({e})")))
            }
            Err(e) => Err(Failure::Answered(e.to_string())),
            Ok(r) => check(
                &r,
                (cfg.args.is_none() && cfg.tool == "echo").then_some(&echo_text),
            ),
        };
        match outcome {
            Ok(()) => {
                round_trips_us.push(took.as_micros() as u64);
                println!("call {n} ok {:.3} ms", took.as_secs_f64() * 1e3);
            }
            Err(Failure::Answered(why)) => {
                all_ok = false;
                println!("call {n} error {why}");
            }
            Err(Failure::TimedOut) => {
                all_ok = false;
                println!("call {n} error no answer within {:?}", cfg.timeout);
            }
            Err(Failure::Closed(why)) => {
                println!("call {n} error {why}");
                print_median(&mut round_trips_us);
                // The connection ending is what --wait-end waits for; without it, a failure.
                println!("ended: {why} at call {n}");
                return cfg.wait_end && all_ok && n > cfg.calls;
            }
        }
        if cfg.wait_end && n >= cfg.calls {
            if client.is_transport_closed() {
                print_median(&mut round_trips_us);
                println!("ended: connection closed after call {n}");
                return all_ok;
            }
            tokio::time::sleep(WAIT_END_PAUSE).await;
        }
    }
    print_median(&mut round_trips_us);
    if cfg.wait_end {
        println!("ended: never (still open after {n} calls)");
        close(client, cfg.timeout).await;
        return false;
    }
    all_ok & close(client, cfg.timeout).await
}

/// One `tools/call` under the SDK's own request timeout, which sends `notifications/cancelled` for
/// the call and waits until that is written before it returns (`Peer::call_tool` only queues the
/// cancel when its future is dropped, and a close right after can discard it). The outer bound
/// covers the send itself, should the connection's queue be stuck.
async fn call_tool(
    peer: &Peer<RoleClient>,
    params: CallToolRequestParams,
    timeout: Duration,
) -> Result<CallToolResult, ServiceError> {
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let exchange = async {
        peer.send_request_with_option(request, PeerRequestOptions::with_timeout(timeout))
            .await?
            .await_response()
            .await
    };
    match tokio::time::timeout(timeout + Duration::from_secs(1), exchange).await {
        Err(_) => Err(ServiceError::Timeout { timeout }),
        Ok(Err(e)) => Err(e),
        Ok(Ok(ServerResult::CallToolResult(r))) => Ok(r),
        Ok(Ok(_)) => Err(ServiceError::UnexpectedResponse),
    }
}

/// Whether a result is a success, and (for `echo`) the answer to this very call.
fn check(r: &CallToolResult, echo: Option<&String>) -> Result<(), Failure> {
    let text = r
        .content
        .iter()
        .filter_map(|c| c.as_text())
        .map(|t| t.text.as_str())
        .collect::<Vec<_>>()
        .join(" ");
    if r.is_error == Some(true) {
        return Err(Failure::Answered(format!("tool error: {text}")));
    }
    match echo {
        Some(want) if &text != want => Err(Failure::Answered(format!(
            "echo answered {text:?}, not {want:?}"
        ))),
        _ => Ok(()),
    }
}

fn print_median(us: &mut [u64]) {
    if us.is_empty() {
        println!("median_us -");
        return;
    }
    us.sort_unstable();
    println!("median_us {}", us[(us.len() - 1) / 2]);
}

/// The MCP stdio shutdown: close the server's stdin, wait for it to exit (the SDK sends SIGTERM,
/// then SIGKILL, if it does not). True when it closed within `--timeout`.
async fn close<S: rmcp::Service<RoleClient>>(
    mut client: rmcp::service::RunningService<RoleClient, S>,
    timeout: Duration,
) -> bool {
    match client.close_with_timeout(timeout).await {
        Ok(Some(_)) => {
            println!("closed by client");
            true
        }
        Ok(None) => {
            println!("ended: the server did not close within {timeout:?}");
            false
        }
        Err(e) => {
            println!("ended: {e}");
            false
        }
    }
}
