//! `witness load --mcp`, `witness mcp tools` and soaks of MCP kinds against real MCP servers: the
//! example server built with the official Rust SDK (examples/mcp_server.rs) over stdio and
//! streamable HTTP, and the official Python SDK's server (examples/mcp_py_server.py, PyPI `mcp`)
//! with and without sessions (and without `/health`: a soak then asks MCP ping).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;

fn mcp_server() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_mcp_server"))
}

/// `witness load --mcp TOOL ARGS --report R --journal J -- SERVER…`, bounded.
fn load_mcp(args: &[&str], server: &[&str], dir: &Path) -> std::process::Output {
    run_bounded(
        Command::new(witness())
            .arg("load")
            .args(args)
            .args(per_worker(args))
            .arg("--report")
            .arg(dir.join("r.json"))
            .arg("--journal")
            .arg(dir.join("j.jsonl"))
            .arg("--")
            .args(server),
        Duration::from_secs(120),
    )
}

fn levels(report: &serde_json::Value) -> &Vec<serde_json::Value> {
    report["levels"].as_array().expect("levels")
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The official Python SDK, or (outside CI) a reason to skip. Under CI=true a missing SDK fails.
fn python_mcp() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import mcp.server.mcpserver"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            !on_ci(),
            "the Python MCP SDK is missing (pip install mcp): .ci/run installs it"
        );
        eprintln!("skipped: the Python MCP SDK is not installed (pip install mcp)");
    }
    ok
}

#[test]
fn stdio_the_seed_table_watchdog_kills_the_server_and_the_failed_calls_are_tied_to_it() {
    let dir = tempdir("mcp-seed");
    let lock = "1s";
    let out = load_mcp(
        &[
            "--mcp",
            "search",
            "--args",
            r#"{"query":"egress"}"#,
            "--settle",
            "1s",
            "--restart",
            "always",
            "--backoff",
            "100ms",
        ],
        &[
            mcp_server().to_str().unwrap(),
            "--lock",
            lock,
            "--watchdog",
            "6s",
        ],
        &dir,
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = json(&dir.join("r.json"));
    let lv = levels(&report);
    assert_eq!(lv.len(), 3);
    assert_eq!(lv[0]["verdict"], "pass", "{:#}", lv[0]);
    assert_eq!(lv[0]["restarted"], false);
    for l in &lv[1..] {
        assert_eq!(l["verdict"], "fail", "{l:#}");
        assert_eq!(l["restarted"], true, "{l:#}");
        assert_eq!(l["health_after"], 200, "ping answers: only restarted tells");
    }
    let lifecycle = report["lifecycle"].as_array().unwrap();
    assert!(lifecycle
        .iter()
        .any(|e| e["kind"] == "exit" && e["code"] == 124 && e["requested"] == false));
    assert!(lifecycle.iter().any(|e| e["kind"] == "log"
        && e["label"] == "watchdog"
        && e["line"]
            .as_str()
            .unwrap()
            .contains("force-exiting after 6s (exit 124)")));
    // Level 8 outlives the watchdog: its calls die with the pipe, tied to the exit.
    let l8 = &lv[2];
    assert!(l8["counts"]["error"].as_u64().unwrap() > 0, "{l8:#}");
    let f = &l8["failures"][0];
    assert_eq!(f["outcome"], "error: connection closed", "{f:#}");
    assert!(
        f["annotation"]
            .as_str()
            .unwrap()
            .contains("exited with 124 (after log line '[oi] process watchdog"),
        "{f:#}"
    );
    let s = report["suspicions"].as_array().unwrap();
    assert!(
        s.iter()
            .any(|s| s["subject"] == "process_exit" && s["timer_s"] == 6.0),
        "{s:#?}"
    );
    assert!(
        stderr(&out).contains("armed at process start"),
        "{}",
        stderr(&out)
    );
    // The handshake is journalled apart, never as a call.
    let j = journal_lines(&dir.join("j.jsonl"));
    assert!(j
        .iter()
        .any(|e| e["kind"] == "mcp_session" && e["transport"] == "stdio" && e["ok"] == true));
    let settings = j.iter().find(|e| e["kind"] == "settings").unwrap();
    assert_eq!(settings["load"]["mcp"]["tool"], "search");
}

#[test]
fn stdio_a_healthy_lock_passes_every_level_and_the_max_grows_as_a_line() {
    let dir = tempdir("mcp-line");
    let html = dir.join("t.html");
    let out = load_mcp(
        &[
            "--mcp",
            "search",
            "--settle",
            "100ms",
            "--html",
            html.to_str().unwrap(),
        ],
        &[mcp_server().to_str().unwrap(), "--lock", "300ms"],
        &dir,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = json(&dir.join("r.json"));
    assert_eq!(report["verdict"], "pass");
    for l in levels(&report) {
        assert_eq!(l["verdict"], "pass", "{l:#}");
        let n = l["concurrency"].as_f64().unwrap();
        assert_eq!(l["counts"]["ok"].as_f64().unwrap(), n);
        let max = l["latency"]["max"].as_f64().unwrap();
        // n calls outstanding on one connection, serialised by the lock: the last waits for the
        // n-1 before it.
        assert!(
            max > 0.3 * n * 0.9 && max < 0.3 * n * 1.5,
            "n={n} max={max}"
        );
    }
    // The HTML timeline shows the calls like requests, labelled by tool.
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("tools/call search ok in"),
        "a call's hover text"
    );
    assert!(
        page.contains("8 tools/call search · 8 workers"),
        "a lane's label"
    );
}

#[test]
fn outcomes_is_error_and_unknown_tool_are_errors_with_their_text() {
    let dir = tempdir("mcp-fail");
    let out = load_mcp(
        &["--mcp", "fail", "--levels", "2", "--settle", "100ms"],
        &[mcp_server().to_str().unwrap()],
        &dir,
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = json(&dir.join("r.json"));
    let l = &levels(&report)[0];
    assert_eq!(l["counts"]["error"], 2, "{l:#}");
    let f = &l["failures"][0];
    assert_eq!(f["outcome"], "error: tool error");
    assert!(
        f["detail"]
            .as_str()
            .unwrap()
            .contains("search backend unavailable"),
        "{f:#}"
    );
    assert!(stderr(&out).contains("the server said: tool error: search backend unavailable"));

    let dir = tempdir("mcp-nope");
    let out = load_mcp(
        &[
            "--mcp",
            "no_such_tool",
            "--levels",
            "1",
            "--settle",
            "100ms",
        ],
        &[mcp_server().to_str().unwrap()],
        &dir,
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = json(&dir.join("r.json"));
    let f = &levels(&report)[0]["failures"][0];
    assert_eq!(f["outcome"], "error: JSON-RPC error", "{f:#}");
    let d = f["detail"].as_str().unwrap();
    assert!(d.contains("-32602") && d.contains("no_such_tool"), "{d}");
}

#[test]
fn outcomes_a_call_that_never_answers_is_a_timeout_and_the_server_receives_the_cancel() {
    let dir = tempdir("mcp-hang");
    let out = load_mcp(
        &[
            "--mcp",
            "hang",
            "--levels",
            "2",
            "--timeout",
            "1s",
            "--settle",
            "100ms",
            "--watch",
            "cancelled=cancelled request",
        ],
        &[mcp_server().to_str().unwrap()],
        &dir,
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = json(&dir.join("r.json"));
    let l = &levels(&report)[0];
    assert_eq!(l["counts"]["timeout"], 2, "{l:#}");
    assert_eq!(l["restarted"], false);
    // Each timed-out id reached the server as notifications/cancelled (its own log line says so).
    let j = journal_lines(&dir.join("j.jsonl"));
    let cancels: Vec<_> = j
        .iter()
        .filter(|e| e["kind"] == "log" && e["label"] == "cancelled")
        .collect();
    assert_eq!(cancels.len(), 2, "{cancels:#?}");
    assert!(cancels[0]["line"]
        .as_str()
        .unwrap()
        .contains("no answer within --timeout"));
}

#[test]
fn capacity_refusals_are_rejected_not_errors() {
    let dir = tempdir("mcp-cap");
    let out = load_mcp(
        &[
            "--mcp",
            "sleep",
            "--args",
            r#"{"ms":300}"#,
            "--levels",
            "4",
            "--settle",
            "100ms",
        ],
        &[mcp_server().to_str().unwrap(), "--capacity", "2"],
        &dir,
    );
    let report = json(&dir.join("r.json"));
    let l = &levels(&report)[0];
    assert_eq!(l["counts"]["ok"], 2, "{l:#} {}", stderr(&out));
    assert_eq!(l["counts"]["rejected"], 2, "{l:#}");
    assert_eq!(l["counts"]["error"], 0, "{l:#}");
}

/// Every ok call took at least the tool's own sleep: no call got another's (earlier) answer.
fn assert_own_latencies(j: &[serde_json::Value], sleep_s: f64, expected_ok: usize) {
    let ok: Vec<f64> = j
        .iter()
        .filter(|e| e["kind"] == "request" && e["outcome"]["kind"] == "ok")
        .map(|e| e["duration_s"].as_f64().unwrap())
        .collect();
    assert_eq!(ok.len(), expected_ok);
    assert!(ok.iter().all(|d| *d >= sleep_s), "{ok:?}");
}

/// `sessionless`: speak the 2026-07-28 revision (server/discover, the envelope, no sessions).
fn http_python(stateless: bool, sessionless: bool) {
    if !python_mcp() {
        return;
    }
    let dir = tempdir(if stateless {
        "py-stateless"
    } else {
        "py-sessions"
    });
    let port = free_port().to_string();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let script = repo().join("examples/mcp_py_server.py");
    let mut server = vec!["python3", script.to_str().unwrap(), "http", &port];
    if stateless {
        server.push("--stateless");
    }
    let mut args = vec![
        "--mcp",
        "sleep",
        "--args",
        r#"{"ms":500}"#,
        "--url",
        &url,
        "--rounds",
        "2",
        "--settle",
        "100ms",
    ];
    if sessionless {
        args.extend(["--mcp-protocol", "2026-07-28"]);
    }
    let out = load_mcp(&args, &server, &dir);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let j = journal_lines(&dir.join("j.jsonl"));
    assert_own_latencies(&j, 0.5, 2 * (1 + 4 + 8));
    // One session per worker per level, each with its own Mcp-Session-Id when the server keeps them.
    let sessions: Vec<_> = j
        .iter()
        .filter(|e| e["kind"] == "mcp_session" && e["ok"] == true)
        .collect();
    assert_eq!(sessions.len(), 1 + 4 + 8);
    assert!(sessions
        .iter()
        .all(|s| s["session"] == !(stateless || sessionless)));
    if sessionless {
        assert!(sessions
            .iter()
            .all(|s| s["protocol_version"] == "2026-07-28"));
    }
    let report = json(&dir.join("r.json"));
    for l in levels(&report) {
        // The tool sleeps 0.5 s without a lock: concurrent calls overlap, so no level's max is
        // anywhere near n × 0.5 s (that would be one call waiting on another's answer).
        let n = l["concurrency"].as_f64().unwrap();
        let max = l["latency"]["max"].as_f64().unwrap();
        assert!(n == 1.0 || max < 0.5 * n * 0.8, "n={n} max={max}");
    }
}

#[test]
fn http_python_sdk_with_sessions_gives_each_call_its_own_latency() {
    http_python(false, false);
}

#[test]
fn http_python_sdk_2026_07_28_without_protocol_sessions_gives_each_call_its_own_latency() {
    http_python(false, true);
}

#[test]
fn http_python_sdk_stateless_gives_each_call_its_own_latency() {
    http_python(true, false);
}

#[test]
fn http_the_rust_example_server_timeout_sends_the_cancel_over_http() {
    let dir = tempdir("mcp-http-hang");
    let port = free_port().to_string();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let out = load_mcp(
        &[
            "--mcp",
            "hang",
            "--url",
            &url,
            "--levels",
            "1",
            "--timeout",
            "1s",
            "--settle",
            "300ms",
            "--watch",
            "cancelled=cancelled request",
        ],
        &[mcp_server().to_str().unwrap(), "--http", &port],
        &dir,
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = json(&dir.join("r.json"));
    assert_eq!(levels(&report)[0]["counts"]["timeout"], 1);
    let j = journal_lines(&dir.join("j.jsonl"));
    assert!(
        j.iter()
            .any(|e| e["kind"] == "log" && e["label"] == "cancelled"),
        "{}",
        stderr(&out)
    );
}

fn tools(args: &[&str]) -> String {
    let out = run_bounded(
        Command::new(witness()).args(["mcp", "tools"]).args(args),
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn mcp_tools_lists_the_example_servers_tools_over_both_transports() {
    let server = mcp_server();
    let stdio = tools(&["--", server.to_str().unwrap()]);
    let port = free_port().to_string();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let http = tools(&[
        "--url",
        &url,
        "--",
        server.to_str().unwrap(),
        "--http",
        &port,
    ]);
    for out in [&stdio, &http] {
        for t in ["search", "sleep", "hang", "fail"] {
            assert!(
                out.lines().any(|l| l.starts_with(&format!("{t}  "))),
                "{t} in {out}"
            );
        }
        assert!(out.contains(r#"input: {"properties":{"ms":{"minimum":0,"type":"integer"}}"#));
    }
    assert_eq!(stdio, http);
    // The sessionless revision: server/discover instead of initialize, over both transports.
    let modern = tools(&[
        "--mcp-protocol",
        "2026-07-28",
        "--",
        server.to_str().unwrap(),
    ]);
    assert_eq!(modern, stdio);
    let port = free_port().to_string();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let modern_http = tools(&[
        "--mcp-protocol",
        "2026-07-28",
        "--url",
        &url,
        "--",
        server.to_str().unwrap(),
        "--http",
        &port,
    ]);
    assert_eq!(modern_http, stdio);
}

/// `mcp tools --mcp-protocol 2026-07-28` against the official Python SDK, which speaks that
/// revision: the pipes are copied as they pass (`tee`), so the test reads what witness asked and
/// what the SDK answered, not what witness says of itself.
#[test]
fn mcp_tools_speaks_the_sessionless_revision_to_the_python_sdk_when_asked() {
    if !python_mcp() {
        return;
    }
    let dir = tempdir("py-tools-modern");
    let (asked, answered) = (dir.join("asked.jsonl"), dir.join("answered.jsonl"));
    let script = repo().join("examples/mcp_py_server.py");
    let relay = format!(
        "tee '{}' | python3 '{}' stdio | tee '{}'",
        asked.display(),
        script.display(),
        answered.display()
    );
    let modern = tools(&["--mcp-protocol", "2026-07-28", "--", "sh", "-c", &relay]);
    let lines = |p: &std::path::Path| -> Vec<serde_json::Value> {
        std::fs::read_to_string(p)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    };
    let (asked, answered) = (lines(&asked), lines(&answered));
    // server/discover, never initialize; every request carries the revision in its envelope.
    assert_eq!(asked[0]["method"], "server/discover", "{asked:#?}");
    assert!(
        asked.iter().all(|m| m["method"] != "initialize"),
        "{asked:#?}"
    );
    assert!(
        asked.iter().all(
            |m| m["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
        ),
        "{asked:#?}"
    );
    let answer_to = |method: &str| {
        let id = &asked
            .iter()
            .find(|m| m["method"] == method)
            .unwrap_or_else(|| panic!("{method} asked: {asked:#?}"))["id"];
        answered
            .iter()
            .find(|a| &a["id"] == id)
            .unwrap_or_else(|| panic!("{method} answered: {answered:#?}"))
            .clone()
    };
    // The SDK answers the revision: it lists it, and its tools/list has that revision's shape.
    let discover = answer_to("server/discover");
    assert!(
        discover["result"]["supportedVersions"]
            .as_array()
            .is_some_and(|v| v.iter().any(|v| v == "2026-07-28")),
        "{discover:#}"
    );
    let list = answer_to("tools/list");
    assert_eq!(list["result"]["resultType"], "complete", "{list:#}");
    // And the listing is the one the revision before it gives.
    let classic = tools(&["--", "python3", script.to_str().unwrap(), "stdio"]);
    assert_eq!(modern, classic);
    for t in ["sleep", "fail", "hang"] {
        assert!(
            modern.lines().any(|l| l.starts_with(&format!("{t}  "))),
            "{t} in {modern}"
        );
    }
}

#[test]
fn bad_mcp_input_is_a_usage_error_naming_the_fix() {
    let out = run_bounded(
        Command::new(witness()).args(["load", "--mcp", "search", "--args", "[1]", "--", "x"]),
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("--args must be a JSON object"),
        "{}",
        stderr(&out)
    );
    let out = run_bounded(
        Command::new(witness()).args(["load", "--mcp", "search"]),
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("give its command after `--`"),
        "{}",
        stderr(&out)
    );
    let out = run_bounded(
        Command::new(witness()).args(["mcp", "tools"]),
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_short_soak_with_mcp_kinds_reports_per_tool_figures() {
    let dir = tempdir("mcp-soak");
    let port = free_port().to_string();
    let out = run_bounded(
        Command::new(witness())
            .args(["soak", "--plan"])
            .arg(repo().join("examples/plans/mcp.toml"))
            .args(["--duration", "4s", "--gpu", "off"])
            .args(["--base-url", &format!("http://127.0.0.1:{port}")])
            .arg("--report")
            .arg(dir.join("r.json"))
            .arg("--journal")
            .arg(dir.join("j.jsonl"))
            .arg("--")
            .arg(mcp_server())
            .args(["--http", &port, "--lock", "50ms"]),
        Duration::from_secs(90),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = json(&dir.join("r.json"));
    for kind in ["search", "nap"] {
        let k = &report["kinds"][kind];
        let ok = k["ok"].as_u64().unwrap_or(0);
        assert!(ok > 0, "{kind}: {k:#}");
        assert_eq!(k["requests"].as_u64().unwrap(), ok, "{kind}: {k:#}");
        // Each call's latency is its own: search holds a 50 ms lock, so none answers faster.
        if kind == "search" {
            assert!(k["latency"]["min"].as_f64().unwrap() >= 0.05, "{k:#}");
        }
    }
    let j = journal_lines(&dir.join("j.jsonl"));
    let sessions = j
        .iter()
        .filter(|e| e["kind"] == "mcp_session" && e["ok"] == true && e["session"] == true)
        .count();
    assert!(
        (2..=4).contains(&sessions),
        "one per worker and kind: {sessions}"
    );
}

#[test]
fn a_soak_secret_header_reaches_the_mcp_server_and_nowhere_else() {
    let dir = tempdir("mcp-secret");
    let token = format!("mcp-tok-{}-{}", std::process::id(), free_port());
    let plan = dir.join("plan.toml");
    let src = std::fs::read_to_string(repo().join("examples/plans/mcp.toml"))
        .unwrap()
        .replace(
            "[kinds.search]",
            "[secrets.gw]\nsecret_env = \"WITNESS_MCP_TOKEN\"\n\n[kinds.search]\nheaders = { Authorization = \"Bearer ${secret.gw}\" }",
        );
    std::fs::write(&plan, src).unwrap();
    let port = free_port().to_string();
    let out = run_bounded(
        Command::new(witness())
            .args(["soak", "--plan"])
            .arg(&plan)
            .args(["--duration", "3s", "--gpu", "off"])
            .args(["--base-url", &format!("http://127.0.0.1:{port}")])
            .arg("--report")
            .arg(dir.join("r.json"))
            .arg("--journal")
            .arg(dir.join("j.jsonl"))
            .env("WITNESS_MCP_TOKEN", &token)
            .arg("--")
            .arg(mcp_server())
            .args(["--http", &port, "--lock", "20ms"])
            .args(["--require-secret-env", "WITNESS_MCP_TOKEN"]),
        Duration::from_secs(90),
    );
    let report = json(&dir.join("r.json"));
    // The server checks the bearer token: search calls (which carry it) succeed; `nap` carries none
    // and is refused with 401, counted as errors.
    let search = &report["kinds"]["search"];
    assert!(search["ok"].as_u64().unwrap() > 0, "{search:#}");
    assert_eq!(search["errors"], 0, "{search:#}");
    assert!(report["kinds"]["nap"]["errors"].as_u64().unwrap() > 0);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    for (what, text) in [
        (
            "journal",
            std::fs::read_to_string(dir.join("j.jsonl")).unwrap(),
        ),
        (
            "report",
            std::fs::read_to_string(dir.join("r.json")).unwrap(),
        ),
        ("stdout", String::from_utf8_lossy(&out.stdout).into_owned()),
        ("stderr", stderr(&out)),
    ] {
        assert!(!text.contains(&token), "the secret leaked into the {what}");
    }
}

/// `witness soak --plan PLAN --gpu off --report --journal [ARGS…] [-- SERVER…]`, bounded.
fn soak_mcp(plan: &Path, args: &[&str], server: &[&str], dir: &Path) -> std::process::Output {
    let mut cmd = Command::new(witness());
    cmd.args(["soak", "--plan"])
        .arg(plan)
        .args(["--gpu", "off"])
        .arg("--report")
        .arg(dir.join("r.json"))
        .arg("--journal")
        .arg(dir.join("j.jsonl"))
        .args(args);
    if !server.is_empty() {
        cmd.arg("--").args(server);
    }
    run_bounded(&mut cmd, Duration::from_secs(90))
}

fn of_kind<'a>(j: &'a [serde_json::Value], kind: &str) -> Vec<&'a serde_json::Value> {
    j.iter().filter(|e| e["kind"] == kind).collect()
}

fn invariant<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["invariants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == name)
        .unwrap_or_else(|| panic!("no {name} invariant: {:#}", report["invariants"]))
}

#[test]
fn a_soak_over_stdio_calls_its_tools_on_the_servers_pipes_and_pings_for_health() {
    let dir = tempdir("mcp-soak-stdio");
    let out = soak_mcp(
        &repo().join("examples/plans/mcp-stdio.toml"),
        &["--duration", "4s"],
        &[mcp_server().to_str().unwrap(), "--lock", "50ms"],
        &dir,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = json(&dir.join("r.json"));
    assert_eq!(report["verdict"], "pass");
    for kind in ["search", "nap"] {
        let k = &report["kinds"][kind];
        let ok = k["ok"].as_u64().unwrap_or(0);
        assert!(ok > 0, "{kind}: {k:#}");
        assert_eq!(k["requests"].as_u64().unwrap(), ok, "{kind}: {k:#}");
    }
    // Each call's latency is its own: search holds a 50 ms lock, so none answers faster.
    assert!(
        report["kinds"]["search"]["latency"]["min"]
            .as_f64()
            .unwrap()
            >= 0.05
    );
    let j = journal_lines(&dir.join("j.jsonl"));
    // One server process, one connection: every worker's calls shared its one session.
    let sessions = of_kind(&j, "mcp_session");
    assert_eq!(sessions.len(), 1, "{sessions:#?}");
    assert_eq!(sessions[0]["transport"], "stdio");
    assert_eq!(sessions[0]["ok"], true);
    // Ready by ping, and every interval's health is a ping on the pipe, journalled with its purpose.
    let ready = of_kind(&j, "ready");
    assert_eq!(ready[0]["url"], "mcp ping (stdio)", "{ready:#?}");
    assert_eq!(ready[0]["ok"], true);
    let pings = of_kind(&j, "health");
    let intervals = invariant(&report, "health")["checked"].as_u64().unwrap();
    assert_eq!(pings.len() as u64, intervals, "{pings:#?}");
    assert!(intervals >= 4, "{intervals}");
    for p in &pings {
        assert_eq!(p["url"], "mcp ping (stdio)", "{p:#}");
        assert_eq!(p["purpose"], "invariant");
        assert_eq!(p["status"], 200, "{p:#}");
    }
    assert!(invariant(&report, "health")["results"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["ok"] == true && r["detail"] == "mcp ping (stdio) answered"));
    // No TCP connect to measure over a pipe.
    assert!(of_kind(&j, "connect_floor").is_empty());
    assert!(
        stderr(&out).contains("over stdio"),
        "the start line says how the server is reached: {}",
        stderr(&out)
    );
}

#[test]
fn a_soak_over_streamable_http_against_the_python_sdk_without_health_is_ready_by_ping() {
    if !python_mcp() {
        return;
    }
    let dir = tempdir("mcp-soak-py");
    let port = free_port().to_string();
    // The Python SDK's server has /mcp and nothing else: the plan names no health URL.
    let plan = dir.join("py.toml");
    std::fs::write(
        &plan,
        r#"
duration = "4s"
interval = "1s"
timeout = "5s"
check_timeout = "2s"
[target]
base_url = "http://127.0.0.1:1"
ready_timeout = "30s"
[kinds.nap]
mcp = "sleep"
path = "/mcp"
body = '{"ms": ${ms}}'
vars.ms = ["20", "50"]
[[drivers]]
count = 2
burst = { requests = [2, 3], gap = ["20ms", "50ms"] }
steady = { requests = 2, gap = ["100ms", "200ms"] }
idle = { for = ["100ms", "200ms"] }
"#,
    )
    .unwrap();
    let script = repo().join("examples/mcp_py_server.py");
    let out = soak_mcp(
        &plan,
        &["--base-url", &format!("http://127.0.0.1:{port}")],
        &["python3", script.to_str().unwrap(), "http", &port],
        &dir,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = json(&dir.join("r.json"));
    assert_eq!(report["verdict"], "pass");
    let k = &report["kinds"]["nap"];
    assert!(k["ok"].as_u64().unwrap() > 0, "{k:#}");
    assert_eq!(k["requests"], k["ok"], "{k:#}");
    let ping = format!("mcp ping http://127.0.0.1:{port}/mcp");
    let j = journal_lines(&dir.join("j.jsonl"));
    let ready = of_kind(&j, "ready");
    assert_eq!(ready[0]["url"], ping.as_str(), "{ready:#?}");
    assert_eq!(ready[0]["ok"], true);
    let pings = of_kind(&j, "health");
    assert!(!pings.is_empty());
    assert!(
        pings
            .iter()
            .all(|p| p["url"] == ping.as_str() && p["status"] == 200),
        "{pings:#?}"
    );
    assert_eq!(invariant(&report, "health")["failed"], 0);
    // The ping has a session of its own, never journalled as one of the workers'.
    assert!(of_kind(&j, "mcp_session")
        .iter()
        .all(|s| s["worker"].as_u64().unwrap() < 2));
}

#[test]
fn a_stdio_server_that_dies_mid_soak_fails_its_health_ping_with_the_reason() {
    let dir = tempdir("mcp-soak-dies");
    let out = soak_mcp(
        &repo().join("examples/plans/mcp-stdio.toml"),
        &["--duration", "20s"],
        &[
            mcp_server().to_str().unwrap(),
            "--lock",
            "50ms",
            "--watchdog",
            "2s",
        ],
        &dir,
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = json(&dir.join("r.json"));
    assert_eq!(report["partial"], true);
    assert_eq!(report["verdict"], "fail");
    // Healthy by ping while it ran, then a failed ping naming why, at the interval that ended it.
    let health = invariant(&report, "health");
    let results = health["results"].as_array().unwrap();
    assert_eq!(results[0]["ok"], true, "{health:#}");
    let last = results.last().unwrap();
    assert_eq!(last["ok"], false, "{health:#}");
    assert_eq!(last["interval"], report["aborted_interval"], "{health:#}");
    let detail = last["detail"].as_str().unwrap();
    assert!(detail.starts_with("mcp ping (stdio) failed: "), "{detail}");
    // Which words depends on when the ping went: into the dying server's stdin, on the closing
    // pipe, or after the exit.
    assert!(
        [
            "stdin failed",
            "stdout closed",
            "no running server",
            "gone for good"
        ]
        .iter()
        .any(|w| detail.contains(w)),
        "{detail}"
    );
    let j = journal_lines(&dir.join("j.jsonl"));
    let pings = of_kind(&j, "health");
    let failed = pings.last().unwrap();
    assert_eq!(failed["error"], "Closed", "{pings:#?}");
    assert!(failed.get("status").is_none());
    // The watchdog's exit is what happened to the server.
    assert!(report["lifecycle"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["kind"] == "exit" && e["code"] == 124));
}

#[test]
fn a_stdio_soak_without_a_command_or_with_an_http_kind_is_refused_naming_the_fix() {
    let dir = tempdir("mcp-soak-bad");
    let stdio = repo().join("examples/plans/mcp-stdio.toml");
    let out = soak_mcp(&stdio, &[], &[], &dir);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("give its command after `--`"),
        "{}",
        stderr(&out)
    );
    assert!(
        !dir.join("j.jsonl").exists(),
        "a refused soak wrote a journal"
    );
    let out = soak_mcp(
        &stdio,
        &["--base-url", "http://127.0.0.1:8000"],
        &[mcp_server().to_str().unwrap()],
        &dir,
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("contradicts"), "{}", stderr(&out));
    // A plain HTTP kind has nowhere to go over stdio: named, with the fix.
    let plan = dir.join("http-kind.toml");
    let src = std::fs::read_to_string(&stdio).unwrap().replace(
        "[kinds.nap]",
        "[kinds.stats]\nmethod = \"GET\"\npath = \"/stats\"\n\n[kinds.nap]",
    );
    std::fs::write(&plan, src).unwrap();
    let out = soak_mcp(&plan, &[], &[mcp_server().to_str().unwrap()], &dir);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("kinds.stats is a plain HTTP request"), "{err}");
    assert!(err.contains("fix: give the kind mcp = \"TOOL\""), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        !dir.join("j.jsonl").exists(),
        "a refused soak wrote a journal"
    );
}

#[test]
fn a_stdio_server_killed_on_purpose_comes_back_on_new_pipes_with_a_new_session() {
    let dir = tempdir("mcp-soak-restart");
    let out = soak_mcp(
        &repo().join("examples/plans/mcp-stdio.toml"),
        &[
            "--duration",
            "5s",
            "--inject",
            "kill@2s",
            "--restart",
            "always",
            "--backoff",
            "200ms",
        ],
        &[mcp_server().to_str().unwrap(), "--lock", "50ms"],
        &dir,
    );
    let report = json(&dir.join("r.json"));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{:#}\n{}",
        report["verdict_reasons"],
        stderr(&out)
    );
    let f = &report["injected"][0];
    assert_eq!(f["recovered"], true, "{f:#}");
    assert_eq!(report["restarts"]["unexpected"], 0);
    let j = journal_lines(&dir.join("j.jsonl"));
    // One session per server process: the restarted one was opened on its own pipes.
    let sessions = of_kind(&j, "mcp_session");
    assert_eq!(sessions.len(), 2, "{sessions:#?}");
    assert!(sessions.iter().all(|s| s["ok"] == true));
    let spawns = of_kind(&j, "spawn");
    let second = spawns[1]["t_s"].as_f64().unwrap();
    // Calls and pings went on after the restart, on the new process.
    assert!(of_kind(&j, "request")
        .iter()
        .any(|r| r["t_s"].as_f64().unwrap() > second && r["outcome"]["kind"] == "ok"));
    let last = *of_kind(&j, "health").last().unwrap();
    assert!(
        last["t_s"].as_f64().unwrap() > second && last["status"] == 200,
        "{last:#}"
    );
}

/// A Python MCP server may take longer to import than a health check's limit (on a busy machine,
/// seconds): witness's own `initialize` waits the plan's `ready_timeout`, never `check_timeout`, and
/// its pipes stay open while it waits. mcp-server-time (PyPI) here starts 2.5 s late, as a slow
/// import would, behind a 1 s `check_timeout`.
#[test]
fn a_stdio_soak_of_mcp_server_time_waits_ready_timeout_for_a_slow_start_not_check_timeout() {
    if !have("mcp-server-time (PyPI)", "command -v mcp-server-time") {
        return;
    }
    let dir = tempdir("mcp-soak-slow-start");
    let plan = dir.join("time.toml");
    std::fs::write(
        &plan,
        r#"
duration = "3s"
interval = "1s"
timeout = "5s"
check_timeout = "1s"

[target]
transport = "stdio"
ready_timeout = "20s"

[kinds.now]
mcp = "get_current_time"
body = '{"timezone": "Europe/Paris"}'

[[drivers]]
count = 2
burst = { requests = [2, 3], gap = ["20ms", "50ms"] }
steady = { requests = [2, 3], gap = ["100ms", "200ms"] }
idle = { for = ["100ms", "200ms"] }

[invariants]
health = true
same_identity = true
"#,
    )
    .unwrap();
    let out = soak_mcp(
        &plan,
        &[],
        &["sh", "-c", "sleep 2.5; exec mcp-server-time"],
        &dir,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = json(&dir.join("r.json"));
    assert_eq!(report["verdict"], "pass", "{}", stderr(&out));
    let now = &report["kinds"]["now"];
    assert!(now["ok"].as_u64().unwrap_or(0) > 0, "{now:#}");
    assert_eq!(now["requests"], now["ok"], "{now:#}");
    let j = journal_lines(&dir.join("j.jsonl"));
    // One process, one session: the slow start was waited for, not closed and started again.
    assert_eq!(of_kind(&j, "spawn").len(), 1, "{:#?}", of_kind(&j, "spawn"));
    let sessions = of_kind(&j, "mcp_session");
    assert_eq!(sessions.len(), 1, "{sessions:#?}");
    assert!(
        sessions[0]["duration_s"].as_f64().unwrap() > 2.0,
        "{sessions:#?}"
    );
}

/// A stdio server that exits before it answers: the refusal says what witness waited for, how
/// long, and under which setting.
#[test]
fn a_stdio_server_that_exits_before_it_answers_is_refused_saying_what_witness_waited_for() {
    let dir = tempdir("mcp-soak-exits-first");
    let out = soak_mcp(
        &repo().join("examples/plans/mcp-stdio.toml"),
        &[],
        &["sh", "-c", "sleep 0.3; exit 3"],
        &dir,
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("exited with 3 before it was ready"), "{err}");
    assert!(
        err.contains("of ready_timeout 10s for mcp ping (stdio) to answer"),
        "{err}"
    );
}
