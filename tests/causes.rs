//! Evidence before a cause, and every timer the evidence points at (issue 29, items 2 and 3), with
//! real processes: a `wrap`ped toy server whose 6 s watchdog cut an attached load's requests, merged
//! into one report; MCP servers under the official Python SDK's client (mcp-server-time from PyPI,
//! and tests/peers/timer_mcp.py, whose watchdog ends it with a silent `os._exit(124)`); gunicorn
//! killing CPU-bound workers late. Each has its false-alarm twin: a healthy spread of latencies, a
//! clean exit after the client closed stdin.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::*;

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn timer_mcp() -> PathBuf {
    repo().join("tests/peers/timer_mcp.py")
}

fn suspicions(report: &serde_json::Value) -> Vec<serde_json::Value> {
    report["suspicions"].as_array().expect("suspicions").clone()
}

/// The official MCP Python SDK's client calls TOOL `calls` times through `witness wrap --journal
/// --report -- SERVER…`; returns witness's report (the client's own exit is not judged: a call the
/// server never answers raises in it).
fn sdk_through_wrap(
    dir: &Path,
    calls: u32,
    tool: &str,
    args: &str,
    server: &[&str],
) -> serde_json::Value {
    let (journal, report) = (dir.join("j.jsonl"), dir.join("r.json"));
    let out = run_bounded(
        Command::new("python3")
            .arg(repo().join("tests/peers/sdk_calls.py"))
            .args([&calls.to_string(), tool, args])
            .arg(witness())
            .args(["wrap", "--journal"])
            .arg(&journal)
            .arg("--report")
            .arg(&report)
            .arg("--")
            .args(server),
        Duration::from_secs(120),
    );
    eprintln!(
        "client stdout:\n{}\nclient+witness stderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        stderr(&out)
    );
    json(&report)
}

/// The calls of one tool the report tabled.
fn row<'a>(report: &'a serde_json::Value, label: &str) -> &'a serde_json::Value {
    report["observed"]["calls"]
        .as_array()
        .expect("observed calls")
        .iter()
        .find(|r| r["label"] == label)
        .unwrap_or_else(|| panic!("no row {label}: {:#}", report["observed"]))
}

fn sdk_available() -> bool {
    have(
        "the official MCP Python SDK",
        "python3 -c 'import mcp.client.stdio'",
    )
}

/// toy_server --watchdog 6s under `wrap` (binding 1 s after it starts), a `load` attached to it, the
/// two journals merged: level 8's requests "took" ~4.9 s as the watchdog ended the process. The report
/// names the 6 s watchdog once, with the requests it cut, and no 5 s timer (it said "at the
/// round-number 5s timer" once per request, twice each in the merged report).
#[test]
fn a_merged_wrap_and_load_name_the_6s_watchdog_once_and_no_5s_timer() {
    let dir = tempdir("causes-merge");
    let (wj, lj) = (dir.join("wrap.jsonl"), dir.join("load.jsonl"));
    let port = free_port();
    let server = Command::new(witness())
        .args(["wrap", "--journal"])
        .arg(&wj)
        .arg("--")
        .arg(toy())
        .args(["--port", &port.to_string(), "--call", "hang"])
        .args(["--watchdog", "6s", "--ready-delay", "1s"])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.join("wrap.out")).unwrap())
        .stderr(std::fs::File::create(dir.join("wrap.err")).unwrap())
        .spawn()
        .expect("spawn witness wrap");
    wait_listening(port);
    let out = run_bounded(
        Command::new(witness())
            .args(["load", "--url", &format!("http://127.0.0.1:{port}/call")])
            .args(["--levels", "8", "--rounds", "1", "--settle", "500ms"])
            .arg("--journal")
            .arg(&lj),
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let wrapped = wait_bounded(server, Duration::from_secs(30));
    assert_eq!(wrapped.status.code(), Some(124), "the watchdog ended it");

    let m = dir.join("m.json");
    let out = run_bounded(
        Command::new(witness())
            .arg("report")
            .args([&wj, &lj])
            .args(["--format", "json", "-o"])
            .arg(&m),
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let m = json(&m);
    let s = suspicions(&m);
    assert_eq!(s.len(), 1, "one cause, said once: {s:#?}");
    let d = s[0]["detail"].as_str().unwrap();
    assert_eq!(s[0]["subject"], "process_exit", "{d}");
    assert_eq!(s[0]["timer_s"], 6.0, "{d}");
    assert!(
        d.contains("at the 6s timer named in its log line '[oi] process watchdog"),
        "{d}"
    );
    assert!(
        d.contains("; it cut requests 0–7 at level 8 of load.jsonl after "),
        "{d}"
    );
    assert!(!d.contains("5s") && !d.contains("round-number"), "{d}");
    // Each failure is still tied to the exit, in its own annotation.
    let failure = m["levels"][0]["failures"][0]["annotation"]
        .as_str()
        .unwrap();
    assert!(
        failure.contains("exited with 124 (after log line"),
        "{failure}"
    );

    // The terminal's words: one suspicion line, the watchdog's.
    let out = run_bounded(
        Command::new(witness()).arg("report").args([&wj, &lj]),
        Duration::from_secs(60),
    );
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    let listed: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("suspicions:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .collect();
    assert_eq!(listed.len(), 1, "{text}");
    assert!(
        listed[0].contains("6s timer") && !listed[0].contains("5s timer"),
        "{text}"
    );
}

/// mcp-server-time (PyPI) asked for an invalid timezone: the tool error is the server's answer, and
/// its clean exit when the client closed stdin came after it. The exit is no cause: the annotation
/// says the server did not exit while the call was in flight, and there is no suspicion. The same
/// with the peer server, whose exit on EOF lands within milliseconds of the last answer: said only
/// as "later".
#[test]
fn a_tool_error_before_a_clean_exit_is_not_tied_to_it() {
    if !sdk_available() {
        return;
    }
    let dir = tempdir("causes-tool-error");
    let report = sdk_through_wrap(
        &dir,
        2,
        "fail",
        "{}",
        &["python3", timer_mcp().to_str().unwrap()],
    );
    let exit = report["lifecycle"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "exit")
        .cloned()
        .expect("the server's exit");
    assert_eq!(exit["code"], 0, "{exit}");
    let r = row(&report, "tools/call fail");
    assert_eq!(r["counts"]["error"], 2, "{r:#}");
    for f in r["failures"].as_array().unwrap() {
        let a = f["annotation"].as_str().unwrap();
        assert!(
            a.starts_with("the server did not exit or restart while it was in flight"),
            "{a}"
        );
        assert!(!a.contains("after this request failed"), "{a}");
        if a.contains("exited") {
            assert!(
                a.ends_with(" s later") && a.contains("exited with 0"),
                "{a}"
            );
        }
    }
    assert!(suspicions(&report).is_empty(), "{:#?}", suspicions(&report));

    if !have("mcp-server-time (PyPI)", "command -v mcp-server-time") {
        return;
    }
    let dir = tempdir("causes-time");
    let report = sdk_through_wrap(
        &dir,
        1,
        "get_current_time",
        r#"{"timezone":"Nowhere/Bad"}"#,
        &["mcp-server-time"],
    );
    let r = row(&report, "tools/call get_current_time");
    let f = &r["failures"][0];
    assert!(
        f["detail"].as_str().unwrap().contains("Invalid timezone"),
        "{f}"
    );
    let a = f["annotation"].as_str().unwrap();
    assert!(
        a.starts_with("the server did not exit or restart while it was in flight"),
        "{a}"
    );
    assert!(!a.contains("after this request failed"), "{a}");
    assert!(suspicions(&report).is_empty(), "{:#?}", suspicions(&report));
}

/// An MCP server whose watchdog ends it silently with os._exit(124) at 8 s, under the official SDK's
/// client through `wrap`: exit 124 says a timer fired, so the process's age is the timer, though 8 is
/// no round number; the call it cut is told with it.
#[test]
fn a_silent_exit_124_at_a_non_round_age_is_a_timer() {
    if !sdk_available() {
        return;
    }
    let dir = tempdir("causes-exit124");
    let peer = timer_mcp();
    let server = ["python3", peer.to_str().unwrap(), "--watchdog", "8"];
    let report = sdk_through_wrap(&dir, 1, "slow", "{}", &server);
    let exit = report["lifecycle"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "exit")
        .cloned()
        .expect("the server's exit");
    assert_eq!(
        (exit["code"].as_i64(), exit["signal"].is_null()),
        (Some(124), true),
        "{exit}"
    );
    let s = suspicions(&report);
    assert_eq!(s.len(), 1, "{s:#?}");
    let d = s[0]["detail"].as_str().unwrap();
    assert_eq!(s[0]["subject"], "process_exit", "{d}");
    assert_eq!(s[0]["timer_source"], "exit124", "{d}");
    let t = s[0]["timer_s"].as_f64().unwrap();
    assert!((8.0..8.6).contains(&t), "timer {t}: {d}");
    assert!(d.contains(" exited 124 at age 8."), "{d}");
    assert!(
        d.contains("(tools/call slow) after 7.") || d.contains("(tools/call slow) after 8."),
        "{d}"
    );
    // The cut call is tied to the exit in its annotation.
    let f = &row(&report, "tools/call slow")["failures"][0];
    assert!(
        f["annotation"]
            .as_str()
            .unwrap()
            .contains("exited with 124"),
        "{f}"
    );
}

/// The false-alarm twin: a healthy MCP server whose answers spread 0.6–1.7 s, ending with a clean exit
/// once the client closed stdin. No timer, no cause.
#[test]
fn a_healthy_spread_of_latencies_and_a_clean_exit_after_stdin_closed_raise_nothing() {
    if !sdk_available() {
        return;
    }
    let dir = tempdir("causes-spread");
    let report = sdk_through_wrap(
        &dir,
        7,
        "spread",
        "{}",
        &["python3", timer_mcp().to_str().unwrap()],
    );
    let r = row(&report, "tools/call spread");
    assert_eq!(r["counts"]["ok"], 7, "{r:#}");
    let lat = &r["latency"];
    assert!(
        lat["max"].as_f64().unwrap() - lat["min"].as_f64().unwrap() > 0.5,
        "{lat}"
    );
    assert!(suspicions(&report).is_empty(), "{:#?}", suspicions(&report));
}

/// A WSGI app whose /slow burns the CPU until the worker is killed, and whose /spread answers after
/// 0.13–0.58 s in turn.
const CPU_WSGI: &str = r#"
import itertools, time
SPREAD = itertools.cycle([0.13, 0.41, 0.27, 0.58, 0.35, 0.19])
def app(environ, start_response):
    if environ.get("PATH_INFO") == "/slow":
        x = 0
        while True:
            x += 1
    if environ.get("PATH_INFO") == "/spread":
        time.sleep(next(SPREAD))
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]
"#;

/// `witness load ARGS` of gunicorn (3 workers, their timeout in a config file, not on its command
/// line) at PATH.
fn gunicorn_load(gunicorn: &Path, tag: &str, path: &str, args: &[&str]) -> serde_json::Value {
    let dir = tempdir(tag);
    std::fs::write(dir.join("cpu_wsgi.py"), CPU_WSGI).unwrap();
    std::fs::write(dir.join("gunicorn_conf.py"), "timeout = 2\n").unwrap();
    let r = dir.join("r.json");
    let port = free_port().to_string();
    let out = run_bounded(
        Command::new(witness())
            .args(["load", "--url", &format!("http://127.0.0.1:{port}{path}")])
            .args(args)
            .args(["--timeout", "20s"])
            .args(["--settle", "300ms", "--ready-timeout", "20s", "--report"])
            .arg(&r)
            .arg("--")
            .arg(gunicorn)
            .arg("-c")
            .arg(dir.join("gunicorn_conf.py"))
            .args(["-w", "3", "-b"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("--chdir")
            .arg(&dir)
            .arg("cpu_wsgi:app"),
        Duration::from_secs(120),
    );
    eprintln!("{}", stderr(&out));
    json(&r)
}

/// gunicorn's arbiter checks its workers once a second, so a CPU-bound worker past its 2 s timeout
/// dies 2–3 s into its request: requests sent every 1.3 s (open loop, so each meets the arbiter at
/// another point of its beat) fail spread over that second, and no two-percent cluster holds them. Each
/// ended as the arbiter logged `[CRITICAL] WORKER TIMEOUT (pid:N)`: the server said a timeout fired,
/// and the suspicion names that line for all of them. Its twin, the same server answering a spread
/// of latencies, raises nothing.
#[test]
fn a_spread_of_failures_tied_to_gunicorn_s_worker_timeout_lines_is_that_timer() {
    let Some(gunicorn) = tool("gunicorn", &[]) else {
        return;
    };
    let rate = ["--rates", "0.77", "--duration", "6s"];
    let report = gunicorn_load(&gunicorn, "causes-gunicorn", "/slow", &rate);
    let failed = report["levels"][0]["counts"]["error"].as_u64().unwrap();
    assert!(failed >= 4, "{:#}", report["levels"]);
    let s = suspicions(&report);
    let timer = s
        .iter()
        .find(|s| s["kind"] == "request_timer")
        .unwrap_or_else(|| panic!("no request timer in {s:#?}"));
    let d = timer["detail"].as_str().unwrap();
    assert!(
        d.starts_with(&format!("{failed} failed requests gave up after ")),
        "{d}"
    );
    assert!(
        d.contains("each as the server logged that a timeout fired ('"),
        "{d}"
    );
    assert!(d.contains("[CRITICAL] WORKER TIMEOUT (pid:"), "{d}");
    let t = timer["timer_s"].as_f64().unwrap();
    assert!((2.0..3.3).contains(&t), "timer {t}: {d}");

    let closed = ["--levels", "1,2", "--rounds", "4"];
    let healthy = gunicorn_load(&gunicorn, "causes-gunicorn-spread", "/spread", &closed);
    for l in healthy["levels"].as_array().unwrap() {
        assert_eq!(l["counts"]["error"], 0, "{l:#}");
    }
    assert!(
        suspicions(&healthy).is_empty(),
        "{:#?}",
        suspicions(&healthy)
    );
}
