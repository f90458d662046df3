//! wrap as the supervisor an MCP client lives with (issue 30, items 1 and 2): real clients (the
//! official Python SDK's stdio client, the rmcp client) launch `witness wrap … -- SERVER`, where the
//! server (the official Python SDK, tests/peers/watchdog_sdk_server.py) has a watchdog that ends its
//! first process with exit 124 after a few seconds, with a call in flight.
//!
//! With `--restart always`, the call in flight gets witness's JSON-RPC error at once and the client's
//! later calls, sent without initializing again, succeed on the restarted server (witness replayed the
//! client's handshake to it). Without a restart, the client sees the stream close as it does with no
//! witness between.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;

/// How long the first server process lives before its watchdog fires.
const WATCHDOG_S: &str = "6";

fn server() -> PathBuf {
    repo().join("tests/peers/watchdog_sdk_server.py")
}

fn events<'a>(lines: &'a [serde_json::Value], kind: &str) -> Vec<&'a serde_json::Value> {
    lines.iter().filter(|l| l["kind"] == kind).collect()
}

fn notes(lines: &[serde_json::Value]) -> Vec<String> {
    events(lines, "note")
        .iter()
        .filter_map(|n| n["text"].as_str().map(String::from))
        .collect()
}

fn calls(lines: &[serde_json::Value]) -> Vec<&serde_json::Value> {
    lines
        .iter()
        .filter(|l| l["kind"] == "request" && l["group"] == "stdio tools/call nap")
        .collect()
}

fn have_sdk() -> bool {
    have(
        "the official MCP Python SDK (PyPI mcp)",
        "python3 -c 'import mcp.client.stdio, mcp.server.mcpserver'",
    )
}

/// `witness wrap [--restart always] --journal J -- python3 watchdog_sdk_server.py MARKER SECS`, as
/// a client's command line.
fn wrapped(dir: &Path, restart: bool, marker: &Path) -> Vec<String> {
    let mut v = vec![witness().display().to_string(), "wrap".into()];
    if restart {
        v.extend(["--restart".into(), "always".into()]);
    }
    v.extend([
        "--journal".into(),
        dir.join("j.jsonl").display().to_string(),
        "--".into(),
    ]);
    v.extend(direct(marker));
    v
}

fn direct(marker: &Path) -> Vec<String> {
    vec![
        "python3".into(),
        server().display().to_string(),
        marker.display().to_string(),
        WATCHDOG_S.into(),
    ]
}

/// The Python SDK's client making `n` calls of `nap` through `cmd`; its stdout lines and stderr.
fn python_client(n: u32, cmd: &[String]) -> (Vec<String>, String) {
    let mut c = Command::new("python3");
    c.arg(repo().join("tests/peers/sdk_restart_client.py"))
        .arg(n.to_string())
        .arg("nap")
        .args(cmd);
    output(run_bounded(&mut c, Duration::from_secs(120)))
}

/// The rmcp client (examples/mcp_rs_client.rs) making `n` calls of `nap` through `cmd`.
fn rmcp_client(n: u32, cmd: &[String]) -> (Vec<String>, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_mcp_rs_client"));
    c.args([
        "--calls",
        &n.to_string(),
        "--tool",
        "nap",
        "--timeout",
        "20",
        "--",
    ])
    .args(cmd);
    output(run_bounded(&mut c, Duration::from_secs(120)))
}

fn output(out: std::process::Output) -> (Vec<String>, String) {
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    eprintln!("client stdout:\n{stdout}\nclient+witness stderr:\n{stderr}");
    (stdout.lines().map(String::from).collect(), stderr)
}

/// What the journal of a run across the watchdog's exit and a restart must show: the exit, the
/// restart, witness's answer to the call in flight within 2 s of the exit, the replayed handshake,
/// and every later call ok on the restarted process.
fn journal_shows_a_survived_restart(journal: &Path) {
    let lines = journal_lines(journal);
    let exits = events(&lines, "exit");
    assert!(
        !exits.is_empty() && exits[0]["code"] == 124,
        "the watchdog's exit: {exits:?}"
    );
    let exit_t = exits[0]["t_s"].as_f64().unwrap();
    let first_pid = exits[0]["pid"].as_u64().unwrap();
    assert_eq!(events(&lines, "restart").len(), 1, "one restart");
    let calls = calls(&lines);
    let answered: Vec<_> = calls
        .iter()
        .filter(|c| {
            c["detail"]
                .as_str()
                .is_some_and(|d| d.contains("witness answered the client at once"))
        })
        .collect();
    assert_eq!(answered.len(), 1, "the call the watchdog cut: {calls:#?}");
    let a = answered[0];
    let end = a["start_s"].as_f64().unwrap() + a["duration_s"].as_f64().unwrap();
    assert!(
        end >= exit_t - 0.01 && end - exit_t < 2.0,
        "witness answered {:.3} s after the exit: {a}",
        end - exit_t
    );
    let detail = a["detail"].as_str().unwrap();
    assert!(
        detail.contains("exited 124") && detail.contains("witness is restarting it"),
        "{detail}"
    );
    let notes = notes(&lines);
    assert!(
        notes.iter().any(|n| n.contains(&format!(
            "witness answered 1 call(s) in flight to pid {first_pid} with JSON-RPC error -32000"
        ))),
        "{notes:#?}"
    );
    assert!(
        notes.iter().any(|n| n.starts_with(
            "relay: replayed the client's initialize and notifications/initialized to the restarted server"
        ) && n.contains("not forwarded to the client")
            && n.contains("capabilities as in the first answer")),
        "{notes:#?}"
    );
    let later: Vec<_> = calls
        .iter()
        .filter(|c| c["start_s"].as_f64().unwrap() > exit_t)
        .collect();
    assert!(later.len() >= 2, "{calls:#?}");
    for c in later {
        assert_eq!(c["outcome"]["kind"], "ok", "a call after the restart: {c}");
    }
    // One handshake, the client's: the replayed one is not the client's session.
    assert_eq!(events(&lines, "mcp_session").len(), 1);
}

/// The report says nothing of a server that "did not exit or restart" for what a restart did.
fn report_blames_the_exit(stderr: &str) {
    assert!(
        !stderr.contains("did not exit or restart"),
        "a restart's consequence annotated as unrelated: {stderr}"
    );
    assert!(stderr.contains("exited with 124"), "{stderr}");
}

#[test]
fn the_python_sdk_client_survives_a_restart_and_its_call_in_flight_gets_an_error_at_once() {
    if !have_sdk() {
        return;
    }
    let dir = tempdir("supervise-py");
    let marker = dir.join("armed");
    let (lines, stderr) = python_client(3, &wrapped(&dir, true, &marker));
    assert_eq!(
        lines.first().map(String::as_str),
        Some("init ok"),
        "{lines:?}"
    );
    let call0 = lines
        .iter()
        .find(|l| l.starts_with("call 0 "))
        .unwrap_or_else(|| panic!("{lines:?}"));
    assert!(
        call0.starts_with("call 0 error ")
            && call0.contains("exited 124: a timeout or watchdog fired")
            && call0.contains("witness is restarting it"),
        "the call in flight gets witness's error, not the client's own limit: {call0}"
    );
    // It waited for the watchdog (6 s from the server's start), not for the client's 20 s limit.
    let took: f64 = call0.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(took < 15.0, "{call0}");
    for i in 1..3 {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(&format!("call {i} ok 'awake in pid"))),
            "call {i} succeeds on the restarted server without a new initialize: {lines:?}"
        );
    }
    assert_eq!(lines.last().map(String::as_str), Some("closed by client"));
    journal_shows_a_survived_restart(&dir.join("j.jsonl"));
    report_blames_the_exit(&stderr);
}

#[test]
fn the_rmcp_client_survives_a_restart_and_its_call_in_flight_gets_an_error_at_once() {
    if !have_sdk() {
        return;
    }
    let dir = tempdir("supervise-rmcp");
    let marker = dir.join("armed");
    let (lines, stderr) = rmcp_client(3, &wrapped(&dir, true, &marker));
    assert_eq!(
        lines.first().map(String::as_str),
        Some("init ok"),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(
            |l| l.starts_with("call 1 error JSON-RPC error -32000: the server (pid ")
                && l.contains("witness is restarting it")
        ),
        "{lines:?}"
    );
    for i in 2..=3 {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(&format!("call {i} ok "))),
            "call {i} succeeds on the restarted server: {lines:?}"
        );
    }
    assert_eq!(lines.last().map(String::as_str), Some("closed by client"));
    journal_shows_a_survived_restart(&dir.join("j.jsonl"));
    report_blames_the_exit(&stderr);
}

/// Without a restart the client sees what it sees with no witness between: the stream closes with
/// the call in flight, and witness answers nothing in the server's place.
#[test]
fn without_a_restart_the_client_sees_the_stream_close_as_it_does_directly() {
    if !have_sdk() {
        return;
    }
    let dir = tempdir("supervise-norestart");
    let (direct_lines, _) = python_client(3, &direct(&dir.join("armed-direct")));
    let (lines, stderr) = python_client(3, &wrapped(&dir, false, &dir.join("armed")));
    let words = |ls: &[String]| -> Vec<String> {
        // The lines without their timings.
        ls.iter()
            .map(|l| match l.rsplit_once(' ') {
                Some((w, t)) if t.parse::<f64>().is_ok() => w.to_string(),
                _ => l.clone(),
            })
            .collect()
    };
    assert_eq!(words(&lines), words(&direct_lines));
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("call 0 error 'Connection closed'")),
        "{lines:?}"
    );
    assert!(lines.last().unwrap().starts_with("ended: "), "{lines:?}");
    let journal = journal_lines(&dir.join("j.jsonl"));
    assert!(events(&journal, "restart").is_empty());
    let calls = calls(&journal);
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["outcome"]["error"], "closed");
    assert!(
        !calls[0]["detail"]
            .as_str()
            .unwrap()
            .contains("witness answered"),
        "{}",
        calls[0]
    );
    assert!(
        !notes(&journal)
            .iter()
            .any(|n| n.contains("witness answered")),
        "{:#?}",
        notes(&journal)
    );
    report_blames_the_exit(&stderr);
}

/// The false-alarm twin: under `--restart always`, a server that never dies gets no replay, and
/// witness answers no call in its place.
#[test]
fn a_healthy_session_under_restart_always_is_relayed_untouched() {
    if !have_sdk() {
        return;
    }
    let dir = tempdir("supervise-healthy");
    let marker = dir.join("armed");
    // The marker is there: the server arms no watchdog.
    std::fs::write(&marker, "").unwrap();
    let (lines, _) = python_client(3, &wrapped(&dir, true, &marker));
    for i in 0..3 {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(&format!("call {i} ok 'awake in pid"))),
            "{lines:?}"
        );
    }
    let journal = journal_lines(&dir.join("j.jsonl"));
    assert!(events(&journal, "restart").is_empty());
    let notes = notes(&journal);
    assert!(
        !notes
            .iter()
            .any(|n| n.contains("witness answered") || n.contains("replayed")),
        "{notes:#?}"
    );
    assert!(calls(&journal).iter().all(|c| c["outcome"]["kind"] == "ok"));
}

/// What the client reads, byte for byte, across a restart: one answer to its `initialize` (the
/// replayed one's answer never reaches it), witness's JSON-RPC error for the call in flight under
/// the call's own id, then the restarted server's answer to the next call.
#[test]
fn the_client_reads_one_initialize_answer_and_an_error_under_its_calls_own_id() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::Stdio;
    if !have_sdk() {
        return;
    }
    let dir = tempdir("supervise-raw");
    let marker = dir.join("armed");
    let mut child = Command::new(witness())
        .args(["wrap", "--restart", "always", "--journal"])
        .arg(dir.join("j.jsonl"))
        .arg("--")
        .args(direct(&marker))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<serde_json::Value>();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str(&line) {
                let _ = tx.send(v);
            }
        }
    });
    let mut send = |s: &str| stdin.write_all(format!("{s}\n").as_bytes()).unwrap();
    let mut seen = Vec::new();
    let answer = |id: serde_json::Value, seen: &mut Vec<serde_json::Value>| loop {
        let v = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("no answer for id {id}: {seen:#?}"));
        seen.push(v.clone());
        if v["id"] == id {
            return v;
        }
    };
    send(
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#,
    );
    assert!(answer(0.into(), &mut seen)["result"]["protocolVersion"].is_string());
    send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    send(
        r#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"nap","arguments":{}}}"#,
    );
    let cut = answer("a".into(), &mut seen);
    assert_eq!(cut["error"]["code"], -32000, "{cut}");
    assert!(
        cut["error"]["message"]
            .as_str()
            .unwrap()
            .contains("witness is restarting it"),
        "{cut}"
    );
    send(
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"nap","arguments":{}}}"#,
    );
    let ok = answer(2.into(), &mut seen);
    assert!(
        ok["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("awake in pid")),
        "{ok}"
    );
    drop(stdin);
    let _ = wait_bounded(child, Duration::from_secs(30));
    reader.join().unwrap();
    seen.extend(rx.try_iter());
    let zeros = seen.iter().filter(|v| v["id"] == 0).count();
    assert_eq!(
        zeros, 1,
        "the replayed initialize's answer reached the client: {seen:#?}"
    );
    let ids: Vec<String> = seen
        .iter()
        .filter(|v| !v["id"].is_null())
        .map(|v| v["id"].to_string())
        .collect();
    assert_eq!(ids, ["0", "\"a\"", "2"], "{seen:#?}");
}
