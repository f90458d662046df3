//! The example MCP client on the official Rust SDK (examples/mcp_rs_client.rs) against the example
//! server, directly (no witness): proof that the client the relay's tests and benchmark drive works
//! on its own, so a failure seen through `witness wrap` is the relay's.

use crate::common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::*;

fn client() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_mcp_rs_client"))
}

fn mcp_server() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_mcp_server"))
}

/// Runs the client against the example server; its exit code and stdout lines.
fn session(client_args: &[&str]) -> (Option<i32>, Vec<String>) {
    let mut cmd = Command::new(client());
    cmd.args(client_args).arg("--").arg(mcp_server());
    let out = run_bounded(&mut cmd, Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    eprintln!(
        "client stdout:\n{stdout}\nclient+server stderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        out.status.code(),
        stdout.lines().map(str::to_string).collect(),
    )
}

#[test]
fn the_rmcp_client_initializes_calls_a_tool_and_closes_the_session() {
    let (code, lines) = session(&["--calls", "3", "--tool", "sleep", "--args", r#"{"ms":0}"#]);
    assert_eq!(code, Some(0), "{lines:?}");
    assert_eq!(lines.len(), 7, "one line per step: {lines:?}");
    assert_eq!(lines[0], "init ok");
    let tools: Vec<&str> = lines[1]
        .strip_prefix("tools ok ")
        .unwrap_or_else(|| panic!("the tool list: {lines:?}"))
        .split(',')
        .collect();
    assert!(tools.contains(&"sleep"), "{tools:?}");
    for (n, line) in (1..=3).zip(&lines[2..5]) {
        let ms = line
            .strip_prefix(&format!("call {n} ok "))
            .and_then(|rest| rest.strip_suffix(" ms"))
            .unwrap_or_else(|| panic!("call {n} answered: {lines:?}"));
        assert!(ms.parse::<f64>().is_ok(), "a round trip in ms: {line:?}");
    }
    let median = lines[5]
        .strip_prefix("median_us ")
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("the median in µs: {lines:?}"));
    assert!(median > 0, "{lines:?}");
    assert_eq!(lines[6], "closed by client");
}

#[test]
fn the_rmcp_client_reports_a_tool_error_and_exits_1() {
    let (code, lines) = session(&["--calls", "2", "--tool", "fail"]);
    assert_eq!(code, Some(1), "{lines:?}");
    for n in 1..=2 {
        assert!(
            lines.iter().any(|l| l.starts_with(&format!(
                "call {n} error tool error: search backend unavailable"
            ))),
            "call {n}'s isError result is an error: {lines:?}"
        );
    }
    assert!(
        !lines
            .iter()
            .any(|l| l.starts_with("call ") && l.contains(" ok ")),
        "{lines:?}"
    );
    assert!(lines.contains(&"median_us -".to_string()), "{lines:?}");
    assert!(lines.contains(&"closed by client".to_string()), "{lines:?}");
}
