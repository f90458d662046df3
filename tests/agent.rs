//! `witness mcp serve` (issue 43): witness's runs behind an MCP server of its own, spoken to by the
//! official MCP Python SDK's stdio client (every schema checked by PyPI jsonschema, every structured
//! result validated against its tool's output schema) and the official Rust SDK's client (rmcp).
//! The demo's run (the watchdog behind the 85 seconds, in miniature) is found through `runs`,
//! `story` and `explain`; `load` is refused unless allowed, refused for a remote URL or a command
//! not allowed at start-up, and with `--allow-load` runs against Python's http.server with
//! progress notifications.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

const LIMIT: Duration = Duration::from_secs(180);

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The demo's run (scripts/demo.sh with the build's binaries) in `state`'s journal folder.
fn demo_run(state: &Path) {
    let port = free_port().to_string();
    let out = run_bounded(
        Command::new(witness())
            .env("XDG_STATE_HOME", state)
            .args(["load", "--url", &format!("http://127.0.0.1:{port}/call")])
            .args(["--rounds", "1", "--restart", "always", "--backoff", "200ms"])
            .args(["--gpu", "off", "--settle", "200ms", "--"])
            .arg(toy())
            .args(["--port", &port, "--call", "lock:1s", "--watchdog", "6s"]),
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
}

/// The Python SDK's client against `witness mcp serve SERVE…`, making `calls`: its lines, parsed.
fn agent(state: &Path, serve: &[&str], calls: Value) -> Vec<Value> {
    if !have(
        "the MCP Python SDK and jsonschema",
        "python3 -c 'import mcp.client.stdio, jsonschema'",
    ) {
        return Vec::new();
    }
    let out = run_bounded(
        Command::new("python3")
            .env("XDG_STATE_HOME", state)
            .arg(py("agent_client.py"))
            .arg(calls.to_string())
            .arg("--")
            .arg(witness())
            .args(["mcp", "serve"])
            .args(serve),
        LIMIT,
    );
    assert!(
        out.status.success(),
        "agent_client: {}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The result of the call to `tool` among `lines` (the n-th such call).
fn call<'a>(lines: &'a [Value], tool: &str, n: usize) -> &'a Value {
    lines
        .iter()
        .filter(|l| l["tool"] == tool)
        .nth(n)
        .unwrap_or_else(|| panic!("no call {n} of {tool} in {lines:#?}"))
}

#[test]
fn the_sdk_client_finds_the_watchdog_exit_124_and_the_6s_timer_behind_the_demo_s_figures() {
    let dir = tempdir("agent-demo");
    let state = dir.join("state");
    demo_run(&state);
    let lines = agent(
        &state,
        &[],
        json!([
            {"tool": "runs", "args": {}},
            {"tool": "story", "args": {"run": "last"}},
            {"tool": "explain", "args": {"run": "last", "which": "failed", "limit": 3}},
            {"tool": "explain", "args": {"run": "last", "which": "slowest_ok"}},
            {"tool": "story", "args": {"run": "no-such-run"}},
            {"tool": "compare", "args": {"base": "last", "current": "last"}},
            {"resources": true},
        ]),
    );
    if lines.is_empty() {
        return;
    }
    assert_eq!(
        lines[0]["tools"],
        json!(["runs", "story", "explain", "compare", "load"])
    );
    for l in &lines[1..] {
        if l.get("tool").is_some() && l["is_error"] == false {
            assert_eq!(l["valid"], true, "{l:#}");
        }
    }
    let runs = &call(&lines, "runs", 0)["structured"]["runs"];
    assert_eq!(runs.as_array().unwrap().len(), 1, "{runs:#}");
    assert_eq!(runs[0]["mode"], "load");
    assert_eq!(runs[0]["verdict"], "fail");
    assert_eq!(runs[0]["live"], false);
    let id = runs[0]["id"].as_str().unwrap().to_string();
    // The story: exit 124, its watchdog line, and the 6 s timer with its evidence.
    let story = &call(&lines, "story", 0)["structured"];
    assert_eq!(story["run"], id.as_str());
    assert_eq!(story["verdict"], "fail");
    let exits = story["exits"].as_array().unwrap();
    let watchdog = exits
        .iter()
        .find(|e| e["status"] == 124)
        .unwrap_or_else(|| panic!("no exit 124 in {exits:#?}"));
    assert_eq!(watchdog["asked_by_witness"], false);
    assert!(
        watchdog["last_line"]
            .as_str()
            .unwrap_or_default()
            .contains("process watchdog"),
        "{watchdog:#}"
    );
    let timer = story["suspicions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| (s["timer_s"].as_f64().unwrap() - 6.0).abs() < 0.01)
        .unwrap_or_else(|| panic!("no 6 s timer in {:#}", story["suspicions"]));
    assert!(
        timer["evidence"].as_str().unwrap().contains("watchdog"),
        "{timer:#}"
    );
    assert!(story["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r.as_str().unwrap().contains("restarted")));
    // A failed request explained: what happened to the server meanwhile.
    let failed = &call(&lines, "explain", 0)["structured"]["exchanges"];
    let first = &failed[0];
    assert_eq!(first["ok"], false, "{first:#}");
    let meanwhile = first["meanwhile"].as_str().unwrap_or_default();
    assert!(
        meanwhile.contains("124") || meanwhile.contains("watchdog"),
        "{first:#}"
    );
    let slowest = &call(&lines, "explain", 1)["structured"]["exchanges"][0];
    assert_eq!(slowest["ok"], true);
    assert!(
        slowest["phases"]["witness_lag_s"].is_number(),
        "{slowest:#}"
    );
    // Bad input: the tool's own error, with the fix.
    let bad = call(&lines, "story", 1);
    assert_eq!(bad["is_error"], true);
    assert!(bad["text"]
        .as_str()
        .unwrap()
        .contains("an id from the `runs` tool"));
    // A run compared with itself: nothing changed, as data that validates.
    let same = call(&lines, "compare", 0);
    assert_eq!(same["valid"], true, "{same:#}");
    assert_eq!(same["structured"]["verdict"], "no significant change");
    // Each run's journal and report are resources.
    let uris = lines.last().unwrap()["resources"].as_array().unwrap();
    assert!(uris.contains(&json!(format!("witness://runs/{id}/journal.jsonl"))));
    assert!(uris.contains(&json!(format!("witness://runs/{id}/report.html"))));
}

#[test]
fn load_is_refused_unless_allowed_and_then_runs_loopback_only_with_progress() {
    if !have("python3", "python3 -c 'import http.server'") {
        return;
    }
    let dir = tempdir("agent-load");
    let state = dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    let port = free_port();
    let _server = Bg::start(
        Command::new("python3")
            .args([
                "-m",
                "http.server",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
            ])
            .current_dir(&dir),
    );
    wait_listening(port);
    let url = format!("http://127.0.0.1:{port}/");
    let load = json!({"tool": "load", "args": {"url": url, "levels": [1, 2], "duration_s": 0.5}});
    let lines = agent(&state, &[], json!([load]));
    if lines.is_empty() {
        return;
    }
    let off = call(&lines, "load", 0);
    assert_eq!(off["is_error"], true);
    assert!(
        off["text"].as_str().unwrap().contains("--allow-load"),
        "{off:#}"
    );
    let lines = agent(
        &state,
        &["--allow-load", "--max-duration", "10s"],
        json!([
            load,
            {"tool": "runs", "args": {}},
            {"tool": "load", "args": {"url": "http://10.1.2.3:8080/", "duration_s": 0.5}},
            {"tool": "load", "args": {"url": url, "command": "sleep 30"}},
            {"tool": "load", "args": {"url": url, "levels": [1, 2, 4], "duration_s": 5}},
        ]),
    );
    let ran = call(&lines, "load", 0);
    assert_eq!(ran["is_error"], false, "{ran:#}");
    assert_eq!(ran["valid"], true, "{ran:#}");
    let story = &ran["structured"];
    assert_eq!(story["mode"], "load");
    let names: Vec<&Value> = story["levels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| &l["name"])
        .collect();
    assert_eq!(names, [&json!("1"), &json!("2")], "{story:#}");
    let progress = ran["progress"].as_array().unwrap();
    assert!(
        progress[0].as_str().unwrap().starts_with("started run "),
        "{progress:?}"
    );
    assert!(
        progress
            .iter()
            .any(|p| p.as_str().unwrap().starts_with("level 2 done")),
        "{progress:?}"
    );
    // It is a run like any other.
    let runs = &call(&lines, "runs", 0)["structured"]["runs"];
    assert_eq!(runs[0]["id"], story["run"], "{runs:#}");
    let remote = call(&lines, "load", 1);
    assert_eq!(remote["is_error"], true);
    assert!(
        remote["text"]
            .as_str()
            .unwrap()
            .contains("not a loopback address"),
        "{remote:#}"
    );
    let command = call(&lines, "load", 2);
    assert_eq!(command["is_error"], true);
    assert!(
        command["text"]
            .as_str()
            .unwrap()
            .contains("not a command this server was started with"),
        "{command:#}"
    );
    let long = call(&lines, "load", 3);
    assert_eq!(long["is_error"], true);
    assert!(long["text"].as_str().unwrap().contains("--max-duration"));
    // No run was started by the refused calls.
    let journals = std::fs::read_dir(state.join("witness"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".jsonl")
        })
        .count();
    assert_eq!(journals, 1);
}

/// The Rust SDK's client (examples/mcp_rs_client.rs, rmcp's child-process transport) lists the
/// tools (rmcp reads each schema into its types) and calls each read-only tool.
#[test]
fn the_rmcp_client_lists_the_tools_and_calls_them() {
    let dir = tempdir("agent-rmcp");
    let state = dir.join("state");
    demo_run(&state);
    let client = PathBuf::from(env!("CARGO_BIN_EXE_mcp_rs_client"));
    for (tool, args) in [
        ("runs", "{}"),
        ("story", r#"{"run":"last"}"#),
        ("explain", r#"{"run":"last","which":"failed"}"#),
    ] {
        let out = run_bounded(
            Command::new(&client)
                .env("XDG_STATE_HOME", &state)
                .args(["--tool", tool, "--args", args, "--"])
                .arg(witness())
                .args(["mcp", "serve"]),
            LIMIT,
        );
        let said = text(&out.stdout);
        assert!(
            out.status.success(),
            "{tool}: {said}\n{}",
            text(&out.stderr)
        );
        assert!(
            said.contains("tools ok runs,story,explain,compare,load"),
            "{said}"
        );
        assert!(said.contains("call 1 ok"), "{tool}: {said}");
    }
}

/// A relayed call cut off by a restart (the server's watchdog, `wrap --restart always`), explained:
/// the exit that cut it, and the answer witness gave the client in the server's place.
#[test]
fn explain_of_a_relayed_call_cut_off_by_a_restart_names_the_exit_and_witness_s_answer() {
    use std::io::Write;
    let dir = tempdir("agent-cut");
    let state = dir.join("state");
    let mut child = Command::new(witness())
        .env("XDG_STATE_HOME", &state)
        .args([
            "wrap",
            "--stdin",
            "relay",
            "--restart",
            "always",
            "--backoff",
            "200ms",
        ])
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_mcp_server"))
        .args(["--watchdog", "1500ms"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let mut send = |s: &str| stdin.write_all(format!("{s}\n").as_bytes()).unwrap();
        send(
            r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#,
        );
        std::thread::sleep(Duration::from_millis(200));
        send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        // In flight at the watchdog's exit.
        send(
            r#"{"jsonrpc":"2.0","id":100,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":5000}}}"#,
        );
        std::thread::sleep(Duration::from_millis(2500));
        // One call to the restarted server, then EOF.
        send(
            r#"{"jsonrpc":"2.0","id":101,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":10}}}"#,
        );
        std::thread::sleep(Duration::from_millis(500));
    });
    let out = wait_bounded(child, Duration::from_secs(30));
    writer.join().unwrap();
    // The client saw witness's answer to call 100.
    let seen = text(&out.stdout);
    assert!(seen.contains(r#""id":100"#), "{seen}");
    let lines = agent(
        &state,
        &[],
        json!([
            {"tool": "explain", "args": {"run": "last", "rpc_id": 100, "at": "tools/call sleep"}},
            {"tool": "explain", "args": {"run": "last", "rpc_id": "101"}},
            {"tool": "explain", "args": {"run": "last", "rpc_id": 999}},
        ]),
    );
    if lines.is_empty() {
        return;
    }
    let r = call(&lines, "explain", 0);
    assert_eq!(r["valid"], true, "{r:#}");
    let cut = &r["structured"]["exchanges"][0];
    assert_eq!(cut["rpc_id"], "100", "{cut:#}");
    assert_eq!(cut["at"], "tools/call sleep", "{cut:#}");
    assert_eq!(cut["ok"], false);
    let said = cut["said"].as_str().unwrap();
    assert!(
        said.contains("witness answered the client at once: JSON-RPC error"),
        "{said}"
    );
    let meanwhile = cut["meanwhile"].as_str().unwrap_or_default();
    let lifecycle = cut["lifecycle"].to_string();
    assert!(
        meanwhile.contains("124") || lifecycle.contains("124"),
        "the exit that cut it: {cut:#}"
    );
    // The call to the restarted server, by its id written as a string: answered.
    let next = &call(&lines, "explain", 1)["structured"]["exchanges"][0];
    assert_eq!(
        (next["rpc_id"].as_str(), next["ok"].as_bool()),
        (Some("101"), Some(true)),
        "{next:#}"
    );
    let none = call(&lines, "explain", 2);
    assert_eq!(none["is_error"], true);
    assert!(
        none["text"]
            .as_str()
            .unwrap()
            .contains("no call with JSON-RPC id 999"),
        "{none:#}"
    );
}

/// Both revisions witness speaks reach the tools: 2025-11-25 (`initialize`) and 2026-07-28
/// (sessionless: `server/discover`, the envelope on every request), through witness's own client.
#[test]
fn both_revisions_list_the_tools() {
    let dir = tempdir("agent-revisions");
    for revision in ["2025-11-25", "2026-07-28"] {
        let out = run_bounded(
            Command::new(witness())
                .env("XDG_STATE_HOME", dir.join("state"))
                .args(["mcp", "tools", "--json", "--mcp-protocol", revision, "--"])
                .arg(witness())
                .args(["mcp", "serve"]),
            LIMIT,
        );
        assert!(out.status.success(), "{revision}: {}", text(&out.stderr));
        let listed: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{revision}: {e}: {}", text(&out.stdout)));
        let names: Vec<&str> = listed
            .as_array()
            .or_else(|| listed["tools"].as_array())
            .unwrap_or_else(|| panic!("{revision}: {listed:#}"))
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            ["runs", "story", "explain", "compare", "load"],
            "{revision}"
        );
    }
}
