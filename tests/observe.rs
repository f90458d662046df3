//! wrap sees the traffic it carries: the stdio relay between a real MCP client and server. Byte-exact
//! both ways over a mix no parser likes, EOF passed on as EOF, back-pressure from a server that never
//! reads, a client that leaves early, and the official Python SDK's client against a server whose
//! watchdog cuts a call off.
//!
//! Needs python3 (and, for the SDK tests, `mcp` from PyPI): `.ci/run` installs it. Missing, a test
//! says SKIPPED, and fails when CI=true.

use crate::common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use sha2::{Digest, Sha256};

fn peer() -> PathBuf {
    repo().join("tests/peers/relay_peer.py")
}

fn events<'a>(lines: &'a [serde_json::Value], kind: &str) -> Vec<&'a serde_json::Value> {
    lines.iter().filter(|l| l["kind"] == kind).collect()
}

fn requests<'a>(lines: &'a [serde_json::Value], group: &str) -> Vec<&'a serde_json::Value> {
    lines
        .iter()
        .filter(|l| l["kind"] == "request" && l["group"] == group)
        .collect()
}

fn hex(d: impl AsRef<[u8]>) -> String {
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// What a client sends: JSON-RPC requests and notifications, a batch, a banner-like line, binary, a
/// line of 6 MiB, and a last line without its newline.
fn client_bytes(seed: u64) -> Vec<u8> {
    let mut x = seed;
    let mut next = move || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 33) as u32
    };
    let mut parts: Vec<Vec<u8>> = vec![
        br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#.to_vec(),
        br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_vec(),
        br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"ARGSECRET42"}}}"#.to_vec(),
        br#"[{"jsonrpc":"2.0","id":2,"method":"ping"},{"jsonrpc":"2.0","id":3,"method":"tools/list"}]"#.to_vec(),
        b"this is not JSON-RPC".to_vec(),
        (0..3000).map(|_| next() as u8).collect(),
    ];
    let mut huge = br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"big","arguments":{"blob":""#.to_vec();
    huge.extend(std::iter::repeat_n(b'z', 6 << 20));
    huge.extend(br#""}}}"#);
    parts.push(huge);
    let mut out = Vec::new();
    for _ in 0..parts.len() {
        let i = next() as usize % parts.len();
        out.extend(&parts[i]);
        out.push(b'\n');
    }
    out.extend(b"the last line has no newline");
    out
}

/// Runs the peer (through `witness wrap --stdin relay` when `journal` is given, else directly),
/// writes `input` in chunks of random sizes with pauses, reads its stdout to the end. Returns what
/// came out, the peer's report (what it read and wrote), and the exit status.
fn relay_run(input: &[u8], journal: Option<&Path>, dir: &Path) -> (Vec<u8>, String, i32) {
    let report = dir.join(format!("peer-{}.txt", journal.is_some()));
    let mut cmd = match journal {
        Some(j) => {
            let mut c = Command::new(witness());
            c.args(["wrap", "--stdin", "relay", "--journal"])
                .arg(j)
                .args(["--", "python3"])
                .arg(peer());
            c
        }
        None => {
            let mut c = Command::new("python3");
            c.arg(peer());
            c
        }
    };
    let mut child = cmd
        .env("REPORT", &report)
        .env("SEED", "7")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let data = input.to_vec();
    let writer = std::thread::spawn(move || {
        let mut x: u64 = 99;
        let mut i = 0;
        while i < data.len() {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            let n = [1usize, 13, 512, 65536, 1 << 20][(x >> 60) as usize % 5].min(data.len() - i);
            stdin.write_all(&data[i..i + n]).unwrap();
            i += n;
            if (x >> 50).is_multiple_of(16) {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        // EOF: the peer's last line comes after it.
    });
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        stdout.read_to_end(&mut out).unwrap();
        out
    });
    let out = wait_bounded(child, Duration::from_secs(60));
    writer.join().unwrap();
    let got = reader.join().unwrap();
    let report = std::fs::read_to_string(&report).unwrap_or_default();
    (got, report, out.status.code().unwrap_or(-1))
}

#[test]
fn the_relay_passes_every_byte_both_ways_unchanged_and_eof_as_eof() {
    if !have("python3", "python3 -c 'import hashlib'") {
        return;
    }
    let dir = tempdir("relay-bytes");
    let input = client_bytes(3);
    let sent = hex(Sha256::digest(&input));
    let journal = dir.join("j.jsonl");
    let (direct_out, direct_report, direct_rc) = relay_run(&input, None, &dir);
    let (out, report, rc) = relay_run(&input, Some(&journal), &dir);
    assert_eq!((direct_rc, rc), (0, 0), "{report}");
    // The peer read exactly what the client wrote, through witness as directly.
    let read_line = format!("read {} {sent}", input.len());
    assert!(direct_report.contains(&read_line), "{direct_report}");
    assert!(report.contains(&read_line), "through witness: {report}");
    // The client read exactly what the peer wrote.
    let wrote = report
        .lines()
        .find(|l| l.starts_with("wrote"))
        .unwrap()
        .to_string();
    let expected_tail = format!("\neof after {} bytes\n", input.len());
    assert!(out.ends_with(expected_tail.as_bytes()));
    assert_eq!(
        format!("wrote {} {}", out.len(), hex(Sha256::digest(&out))),
        wrote
    );
    assert_eq!(out, direct_out, "the same bytes with and without witness");
    // The peer's last line came after the client's EOF, and then witness's stdout closed: EOF order.
    // What witness could not read is said, and how much.
    let lines = journal_lines(&journal);
    let notes: Vec<String> = events(&lines, "note")
        .iter()
        .map(|n| n["text"].as_str().unwrap().to_string())
        .collect();
    let relay = notes.iter().find(|n| n.contains("not JSON-RPC")).unwrap();
    assert!(
        relay.contains("on the server's stdout were not JSON-RPC"),
        "{relay}"
    );
    assert!(relay.contains("longer than 4 MiB"), "{relay}");
    // The arguments' values never reach the journal: the value is searched bare, so it is found
    // raw and JSON-escaped alike (inside a journalled string the call's quotes read `\"`).
    let text = std::fs::read_to_string(&journal).unwrap();
    assert!(
        text.contains("stdio tools/call echo"),
        "the call was journalled: {text}"
    );
    assert!(
        !text.contains("ARGSECRET42"),
        "an argument's value reached the journal"
    );
}

#[test]
fn a_server_that_never_reads_holds_the_client_back_with_bounded_memory_and_no_deadlock() {
    if !have("python3", "python3 -c 'import hashlib'") {
        return;
    }
    let dir = tempdir("relay-never-reads");
    let mut child = Command::new(witness())
        .args(["wrap", "--stdin", "relay", "--journal"])
        .arg(dir.join("j.jsonl"))
        .args(["--", "python3"])
        .arg(peer())
        .env("NEVER_READ", "1")
        .env("HOLD_S", "3")
        .env("REPORT", dir.join("r.txt"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut stdin = child.stdin.take().unwrap();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let a = accepted.clone();
    let writer = std::thread::spawn(move || {
        let block = vec![b'x'; 64 * 1024];
        // 256 MiB offered: far more than any pipe or buffer holds.
        for _ in 0..4096 {
            if stdin.write_all(&block).is_err() {
                return;
            }
            a.fetch_add(block.len(), std::sync::atomic::Ordering::Relaxed);
        }
    });
    // While the server does not read, witness stops reading: the client's writes stall.
    std::thread::sleep(Duration::from_millis(1500));
    let stalled_at = accepted.load(std::sync::atomic::Ordering::Relaxed);
    let rss_kb: u64 = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    let out = wait_bounded(child, Duration::from_secs(30));
    writer.join().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "witness exits with the server's status"
    );
    assert!(
        stalled_at < 16 << 20,
        "witness kept reading a client whose server does not read: {stalled_at} bytes taken"
    );
    assert!(rss_kb < 100 * 1024, "witness grew to {rss_kb} kB");
    assert!(String::from_utf8_lossy(&out.stdout).contains("not reading my stdin"));
}

#[test]
fn a_client_that_leaves_early_ends_the_server_and_witness_with_it() {
    if !have("the MCP Python SDK", "python3 -c 'import mcp.server'") {
        return;
    }
    let dir = tempdir("relay-client-leaves");
    let journal = dir.join("j.jsonl");
    let mut child = Command::new(witness())
        .args(["wrap", "--stdin", "relay", "--journal"])
        .arg(&journal)
        .args(["--", "python3"])
        .arg(py("stdio_mcp.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}
"#)
        .unwrap();
    // The client goes: both its ends close at once.
    drop(stdin);
    drop(child.stdout.take());
    let out = wait_bounded(child, Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(0), "the server's own status");
    let lines = journal_lines(&journal);
    let exits = events(&lines, "exit");
    assert_eq!(exits.len(), 1);
    assert!(!alive(exits[0]["pid"].as_i64().unwrap() as i32));
    assert_eq!(events(&lines, "end").len(), 1);
}

#[test]
fn the_python_sdk_clients_calls_are_journalled_and_the_one_the_watchdog_cut_is_tied_to_the_exit() {
    if !have("the MCP Python SDK", "python3 -c 'import mcp.client.stdio'") {
        return;
    }
    let (stdout, journal, _report) = sdk_session(
        "relay-watchdog",
        12,
        &[("TOOL", "slow"), ("WATCHDOG_S", "6")],
    );
    assert!(stdout.contains("init ok"), "{stdout}");
    assert!(
        stdout.contains("ended:"),
        "the client sees the end: {stdout}"
    );
    let client_ok = stdout.lines().filter(|l| l.contains(" ok ")).count();
    let lines = journal_lines(&journal);
    // The handshake apart, as load journals it.
    let sessions = events(&lines, "mcp_session");
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    assert_eq!(sessions[0]["transport"], "stdio");
    assert_eq!(sessions[0]["ok"], true);
    // Every call the client saw answered is an ok exchange of about the tool's second.
    let calls = requests(&lines, "stdio tools/call slow");
    let ok: Vec<_> = calls
        .iter()
        .filter(|c| c["outcome"]["kind"] == "ok")
        .collect();
    assert_eq!(ok.len(), client_ok, "{calls:?}\n{stdout}");
    assert!(ok.len() >= 3, "{stdout}");
    for c in &ok {
        let d = c["duration_s"].as_f64().unwrap();
        assert!(
            (0.99..3.0).contains(&d),
            "an ok call of the 1 s tool took {d}"
        );
    }
    // The call in flight at the watchdog's exit: connection closed, ended at the exit.
    let exit = events(&lines, "exit")[0];
    assert_eq!(exit["code"], 124);
    let cut: Vec<_> = calls
        .iter()
        .filter(|c| c["outcome"]["kind"] != "ok")
        .collect();
    assert_eq!(cut.len(), 1, "{cut:?}");
    assert_eq!(cut[0]["outcome"]["error"], "closed", "{}", cut[0]);
    let end = cut[0]["t_s"].as_f64().unwrap();
    let exit_t = exit["t_s"].as_f64().unwrap();
    assert!(
        (end - exit_t).abs() < 0.5,
        "the cut call ended at {end}, the exit was at {exit_t}"
    );
    assert!(cut[0]["duration_s"].as_f64().unwrap() < 1.0);
    assert_eq!(
        cut[0]["detail"],
        format!(
            "the server's stdout closed with the call in flight (pid {})",
            exit["pid"]
        ),
        "cut off by the server's own exit"
    );
    assert_report_ties_the_cut_call_to_the_exit(&journal, "tools/call slow", exit, ok.len());
}

/// `witness report` of the journal: the per-tool row with the ok calls at about the tool's second,
/// the cut-off call tied to the exit and its log line, and the timer suspicion.
fn assert_report_ties_the_cut_call_to_the_exit(
    journal: &Path,
    label: &str,
    exit: &serde_json::Value,
    ok: usize,
) {
    let out = run_bounded(
        Command::new(witness()).arg("report").arg(journal),
        Duration::from_secs(30),
    );
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with(label))
        .unwrap_or_else(|| panic!("no row for {label}:\n{text}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    let n = label.split_whitespace().count();
    assert_eq!(cols[n], (ok + 1).to_string(), "calls: {row}");
    assert_eq!(cols[n + 1], ok.to_string(), "ok: {row}");
    let p50: f64 = cols[n + 5].trim_end_matches('s').parse().unwrap();
    assert!((0.99..1.5).contains(&p50), "p50 of the 1 s tool: {row}");
    let pid = exit["pid"].as_i64().unwrap();
    let cut = text
        .lines()
        .find(|l| l.contains(": connection closed after "))
        .unwrap_or_else(|| panic!("no cut-off call:\n{text}"));
    assert!(
        cut.contains(&format!(
            "server pid {pid} exited with 124 (after log line '"
        )),
        "{cut}"
    );
    assert!(
        text.lines().any(|l| l
            .trim_start()
            .starts_with(&format!("! pid {pid} exited at age"))
            && l.contains("timer")),
        "the timer suspicion:\n{text}"
    );
}

#[test]
fn inherit_hands_stdin_over_and_sees_no_calls() {
    if !have("the MCP Python SDK", "python3 -c 'import mcp.client.stdio'") {
        return;
    }
    let dir = tempdir("relay-inherit");
    let journal = dir.join("j.jsonl");
    let mut cmd = Command::new("python3");
    cmd.arg(py("mcp_client.py"))
        .arg("2")
        .arg(witness())
        .args(["wrap", "--stdin", "inherit", "--journal"])
        .arg(&journal)
        .args(["--", "python3"])
        .arg(py("stdio_mcp.py"));
    let started = Instant::now();
    let out = run_bounded(&mut cmd, Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("call 2 ok"),
        "{stdout} after {:?}",
        started.elapsed()
    );
    let lines = journal_lines(&journal);
    assert!(events(&lines, "request").is_empty());
    assert!(events(&lines, "mcp_session").is_empty());
}

fn mcp_server() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_mcp_server"))
}

#[test]
fn after_a_restart_the_wait_for_the_new_server_is_not_a_calls_latency_and_eof_ends_the_session() {
    let dir = tempdir("relay-restart");
    let journal = dir.join("j.jsonl");
    let mut child = Command::new(witness())
        .args([
            "wrap",
            "--stdin",
            "relay",
            "--restart",
            "always",
            "--backoff",
            "1s",
        ])
        .arg("--journal")
        .arg(&journal)
        .arg("--")
        .arg(mcp_server())
        .args(["--watchdog", "1500ms"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        // Each message in one write, so the one read while no server runs is whole.
        let mut send = |s: String| {
            stdin.write_all(format!("{s}\n").as_bytes()).unwrap();
        };
        send(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#.into());
        std::thread::sleep(Duration::from_millis(200));
        send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.into());
        // One call that is surely in flight at the watchdog's exit.
        send(r#"{"jsonrpc":"2.0","id":100,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":5000}}}"#.into());
        // Calls across the watchdog's exit, the 1 s backoff, and the new server.
        for id in 1..=22 {
            send(format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"sleep","arguments":{{"ms":100}}}}}}"#
            ));
            std::thread::sleep(Duration::from_millis(150));
        }
        // EOF: the session is over; nothing is restarted into it.
    });
    let out = wait_bounded(child, Duration::from_secs(30));
    writer.join().unwrap();
    // The restarted server was given the client's replayed handshake, so it served the calls and
    // ended cleanly at the client's EOF (before, never initialized, rmcp's server exited 1).
    assert_eq!(out.status.code(), Some(0), "the last server's own status");
    let lines = journal_lines(&journal);
    let calls = requests(&lines, "stdio tools/call sleep");
    assert_eq!(calls.len(), 23, "every call journalled: {calls:?}");
    let closed: Vec<_> = calls
        .iter()
        .filter(|c| c["outcome"]["error"] == "closed")
        .collect();
    assert!(
        closed.iter().any(|c| c["start_s"].as_f64().unwrap() < 0.5),
        "the long call the watchdog cut: {closed:?}"
    );
    // Every call sent after the watchdog's exit reached the new server after the backoff: none of
    // them holds that wait.
    let first_exit = events(&lines, "exit")[0]["t_s"].as_f64().unwrap();
    for c in calls
        .iter()
        .filter(|c| c["t_s"].as_f64().unwrap() > first_exit + 0.1)
    {
        let d = c["duration_s"].as_f64().unwrap();
        assert!(
            d < 0.9,
            "a call's duration holds the restart's 1 s backoff: {c}"
        );
    }
    let waited: Vec<_> = calls
        .iter()
        .filter(|c| {
            c["detail"]
                .as_str()
                .is_some_and(|d| d.contains("sent once the restarted server was up"))
        })
        .collect();
    assert!(
        !waited.is_empty(),
        "{:#?}",
        calls
            .iter()
            .map(|c| (c["start_s"].clone(), c["detail"].clone()))
            .collect::<Vec<_>>()
    );
    let notes: Vec<&str> = events(&lines, "note")
        .iter()
        .filter_map(|n| n["text"].as_str())
        .collect();
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("not restarted: the client closed")),
        "{notes:?}"
    );
}

/// Servers nobody here wrote, from PyPI (the official servers project), with the official SDK's
/// client: every call is journalled under its tool with the server's own outcome.
#[test]
fn third_party_stdio_servers_calls_are_read_as_they_pass() {
    if !have(
        "mcp-server-time and mcp-server-git (PyPI)",
        "command -v mcp-server-time && command -v mcp-server-git && python3 -c 'import mcp.client.stdio'",
    ) {
        return;
    }
    let dir = tempdir("relay-third-party");
    let repo_dir = dir.join("repo");
    let git = |args: &[&str]| {
        assert!(Command::new("git")
            .args(args)
            .current_dir(&repo_dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .status()
            .unwrap()
            .success());
    };
    std::fs::create_dir_all(&repo_dir).unwrap();
    git(&["init", "-q"]);
    git(&["commit", "-q", "--allow-empty", "-m", "first"]);
    let cases: [(&str, String, &str, &str); 2] = [
        (
            "git_status",
            format!(r#"{{"repo_path":"{}"}}"#, repo_dir.display()),
            "mcp-server-git",
            "ok",
        ),
        (
            "get_current_time",
            r#"{"timezone":"Nowhere/Bad"}"#.into(),
            "mcp-server-time",
            "error",
        ),
    ];
    for (tool, args, server, outcome) in cases {
        let journal = dir.join(format!("{server}.jsonl"));
        let mut cmd = Command::new("python3");
        cmd.arg(peer().with_file_name("sdk_calls.py"))
            .args(["3", tool, &args])
            .arg(witness())
            .args(["wrap", "--journal"])
            .arg(&journal)
            .args(["--", server]);
        let out = run_bounded(&mut cmd, Duration::from_secs(120));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(stdout.matches("call ").count(), 3, "{stdout}");
        let lines = journal_lines(&journal);
        let calls = requests(&lines, &format!("stdio tools/call {tool}"));
        assert_eq!(calls.len(), 3, "{server}: {calls:?}");
        for c in &calls {
            assert_eq!(c["outcome"]["kind"], outcome, "{server}: {c}");
        }
        if outcome == "error" {
            assert_eq!(calls[0]["outcome"]["error"], "tool_error");
            assert!(calls[0]["detail"]
                .as_str()
                .unwrap()
                .contains("Invalid timezone"));
        }
        assert_eq!(events(&lines, "mcp_session").len(), 1);
        assert!(!requests(&lines, "stdio tools/list").is_empty());
        // A real wrap of a third-party server: every view tells the same calls.
        crate::one_truth::views_agree(&journal);
    }
}

/// The official Rust SDK's client (rmcp, examples/mcp_rs_client.rs) through the relay against the
/// Rust example server: a 1 s lock per `search`, a 6 s watchdog. Two SDKs nobody here wrote, talking
/// through witness.
#[test]
fn the_rmcp_clients_calls_are_journalled_and_the_one_the_watchdog_cut_is_tied_to_the_exit() {
    let dir = tempdir("relay-rmcp");
    let journal = dir.join("j.jsonl");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mcp_rs_client"));
    cmd.args([
        "--calls",
        "3",
        "--tool",
        "search",
        "--args",
        r#"{"query":"q"}"#,
    ])
    .args(["--wait-end", "--timeout", "20", "--"])
    .arg(witness())
    .args(["wrap", "--journal"])
    .arg(&journal)
    .arg("--")
    .arg(mcp_server())
    .args(["--lock", "1s", "--watchdog", "6s"]);
    let out = run_bounded(&mut cmd, Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(stdout.contains("init ok"), "{stdout}");
    assert!(
        stdout.contains("ended:"),
        "the client sees the end: {stdout}"
    );
    let client_ok = stdout
        .lines()
        .filter(|l| l.starts_with("call ") && l.contains(" ok "))
        .count();
    let lines = journal_lines(&journal);
    let calls = requests(&lines, "stdio tools/call search");
    let ok: Vec<_> = calls
        .iter()
        .filter(|c| c["outcome"]["kind"] == "ok")
        .collect();
    assert_eq!(ok.len(), client_ok, "{calls:?}\n{stdout}");
    assert!(ok.len() >= 3, "{stdout}");
    let exit = events(&lines, "exit")[0];
    assert_eq!(exit["code"], 124);
    let cut: Vec<_> = calls
        .iter()
        .filter(|c| c["outcome"]["kind"] != "ok")
        .collect();
    assert_eq!(cut.len(), 1, "{cut:?}");
    assert_eq!(cut[0]["outcome"]["error"], "closed");
    assert_eq!(events(&lines, "mcp_session").len(), 1);
    assert_report_ties_the_cut_call_to_the_exit(&journal, "tools/call search", exit, ok.len());
}
