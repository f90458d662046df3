//! Timers named from evidence, never from round numbers, and the server as whatever serves
//! (issue 39): a false-alarm corpus of ordinary crashes, coreutils' `timeout` in a shell loop
//! (attached and as witness's child), a watchdog armed at first listen on a quiet and a busy machine,
//! and an application's own words at the instant its requests failed.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::common::{self, *};

fn peer(name: &str) -> PathBuf {
    repo().join("tests/peers").join(name)
}

fn report_of(out: &std::process::Output, r: &std::path::Path) -> serde_json::Value {
    // Shown when the test fails: what witness said.
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        r.exists(),
        "no report; stderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    json(r)
}

fn suspicions(report: &serde_json::Value) -> Vec<serde_json::Value> {
    report["suspicions"].as_array().cloned().unwrap_or_default()
}

/// Ordinary crashes — an error line, then exit 1, 2 or 101 — at ages spread over 0.3–2.7 s, where
/// start-up crashes happen: none raises a timer (the old rule called every exit between 0.5 and 2.5 s
/// "the round-number 1 s or 2 s timer"), and each exit's words quote its last line.
#[test]
fn twenty_crashes_that_say_why_raise_no_timer_and_each_exit_quotes_its_last_line() {
    common::have("python3", "python3 -c 'import sys'");
    let dir = tempdir("evidence-crashes");
    let runs: Vec<_> = (0..20)
        .map(|i| {
            let age = 0.3 + 2.4 * i as f64 / 19.0;
            let code = [1, 2, 101][i % 3];
            let line = format!("boom {i}: could not open database /var/db/{i}.sqlite");
            let r = dir.join(format!("r{i}.json"));
            let script = format!(
                "import sys, time; time.sleep({age:.3}); print('starting', flush=True); print({line:?}, file=sys.stderr); sys.exit({code})"
            );
            let r2 = r.clone();
            let h = std::thread::spawn(move || {
                run_bounded(
                    Command::new(witness())
                        .args(["wrap", "--report"])
                        .arg(&r2)
                        .args(["--", "python3", "-c", &script]),
                    Duration::from_secs(60),
                )
            });
            (i, code, line, r, h)
        })
        .collect();
    for (i, code, line, r, h) in runs {
        let out = h.join().unwrap();
        assert_eq!(
            out.status.code(),
            Some(code),
            "crash {i}: wrap exits with its code"
        );
        let report = report_of(&out, &r);
        assert!(
            suspicions(&report).is_empty(),
            "crash {i} (exit {code}) raised a timer: {:#}",
            report["suspicions"]
        );
        let exit = report["lifecycle"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["kind"] == "exit")
            .unwrap_or_else(|| panic!("no exit in {report:#}"))
            .clone();
        assert_eq!(exit["last_line"], line, "crash {i}: {exit:#}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("its last line '{line}'")),
            "crash {i}: the timeline's exit quotes it:\n{stderr}"
        );
    }
}

/// A crash loop under `--restart on-failure`: the same short age four times over, each time after an
/// error line and exit 1. The same age from a common start is no timer when the program ended itself
/// and said why.
#[test]
fn a_crash_loop_at_one_age_is_no_timer() {
    let dir = tempdir("evidence-crash-loop");
    let r = dir.join("r.json");
    let out = run_bounded(
        Command::new(witness())
            .args([
                "wrap",
                "--restart",
                "on-failure",
                "--max-restarts",
                "3",
                "--backoff",
                "50ms",
                "--report",
            ])
            .arg(&r)
            .args([
                "--",
                "sh",
                "-c",
                "sleep 0.6; echo 'error: the config file is missing' >&2; exit 1",
            ]),
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(1));
    let report = report_of(&out, &r);
    assert_eq!(report["processes"].as_array().unwrap().len(), 4);
    assert!(suspicions(&report).is_empty(), "{:#}", report["suspicions"]);
}

fn timeout_loop(port: u16) -> String {
    format!("while true; do timeout 7 python3 -m http.server {port} --bind 127.0.0.1; done")
}

/// Levels 1, 2 and 4 of 5 s each cross the kills at 7 s and 14 s.
fn load_args(url: &str) -> Vec<String> {
    [
        "load",
        "--url",
        url,
        "--levels",
        "1,2,4",
        "--duration",
        "5s",
        "--settle",
        "300ms",
        "--timeout",
        "5s",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// The claims of a 7 s timer, with two lives as evidence between them.
fn assert_seven_second_timer(report: &serde_json::Value) {
    let seven: Vec<&serde_json::Value> = report["suspicions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["subject"] == "process_exit" && s["timer_s"] == 7.0)
        .collect();
    assert!(
        !seven.is_empty(),
        "no 7 s timer named: {:#}",
        report["suspicions"]
    );
    assert!(
        seven.iter().any(|s| s["detail"]
            .as_str()
            .unwrap()
            .contains("the same age in 1 other life")),
        "the other life is its evidence: {seven:#?}"
    );
    let levels = report["levels"].as_array().unwrap();
    // The levels each kill crossed say so; the first (0.x–5.x s) crossed none.
    assert_eq!(levels[0]["restarted"], false, "{:#}", levels[0]);
    assert!(
        levels[1..].iter().all(|l| l["restarted"] == true),
        "{levels:#?}"
    );
    // A failure at a kill is tied to that exit, never left as "the server did not exit".
    for l in &levels[1..] {
        for f in l["failures"].as_array().cloned().unwrap_or_default() {
            let a = f["annotation"].as_str().unwrap_or("");
            if f["error"] != "connect_refused" && f["outcome"] != "timeout" {
                assert!(!a.contains("did not exit or restart while"), "{f:#}");
            }
        }
    }
}

#[test]
fn coreutils_timeout_in_a_shell_loop_attached_is_a_7_second_timer_and_a_restart() {
    common::have("python3", "python3 -c 'import http.server'");
    common::have("timeout", "command -v timeout");
    let port = free_port();
    let _server = Bg::start(Command::new("sh").args(["-c", &timeout_loop(port)]));
    wait_listening(port);
    let dir = tempdir("evidence-timeout-attached");
    let r = dir.join("r.json");
    let url = format!("http://127.0.0.1:{port}/");
    let out = run_bounded(
        Command::new(witness())
            .args(load_args(&url))
            .arg("--report")
            .arg(&r),
        Duration::from_secs(90),
    );
    let report = report_of(&out, &r);
    assert_seven_second_timer(&report);
}

#[test]
fn coreutils_timeout_in_a_shell_loop_as_witness_s_child_is_a_7_second_timer_and_a_restart() {
    common::have("python3", "python3 -c 'import http.server'");
    common::have("timeout", "command -v timeout");
    let port = free_port();
    let dir = tempdir("evidence-timeout-child");
    let r = dir.join("r.json");
    let url = format!("http://127.0.0.1:{port}/");
    let out = run_bounded(
        Command::new(witness())
            .args(load_args(&url))
            .arg("--report")
            .arg(&r)
            .args(["--", "sh", "-c", &timeout_loop(port)]),
        Duration::from_secs(90),
    );
    let report = report_of(&out, &r);
    assert_seven_second_timer(&report);
    // The server is what serves: each level's identity is the python that listened, never the
    // shell loop witness started (which lived through every kill).
    let procs = report["processes"].as_array().unwrap();
    let shell = procs[0]["pid"].clone();
    let served: Vec<&serde_json::Value> = procs
        .iter()
        .filter(|p| p["listened"] == true)
        .map(|p| &p["pid"])
        .collect();
    assert!(served.len() >= 2, "two lives that served: {procs:#?}");
    for l in report["levels"].as_array().unwrap() {
        for side in ["identity_before", "identity_after"] {
            let pid = &l[side]["pid"];
            assert_ne!(*pid, shell, "{side} is the shell loop: {l:#}");
            assert!(served.contains(&pid), "{side} {pid} never served: {l:#}");
        }
    }
    // The configuration names it too: the shell loop's `timeout 7`.
    assert!(
        report["suspicions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["detail"].as_str().unwrap().contains("timeout 7")),
        "{:#}",
        report["suspicions"]
    );
}

fn alarm_run(tag: &str) -> serde_json::Value {
    common::have("python3", "python3 -c 'import http.server'");
    let port = free_port();
    let dir = tempdir(tag);
    let r = dir.join("r.json");
    let url = format!("http://127.0.0.1:{port}/");
    let out = run_bounded(
        Command::new(witness())
            .args([
                "load",
                "--url",
                &url,
                "--levels",
                "1,2",
                "--duration",
                "3s",
                "--settle",
                "200ms",
                "--ready-timeout",
                "20s",
                "--report",
            ])
            .arg(&r)
            .args(["--", "python3"])
            .arg(peer("alarm_server.py"))
            .arg(port.to_string()),
        Duration::from_secs(90),
    );
    report_of(&out, &r)
}

fn assert_alarm_at_first_listen(report: &serde_json::Value) {
    let s = report["suspicions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["subject"] == "process_exit")
        .unwrap_or_else(|| panic!("no exit timer: {report:#}"))
        .clone();
    assert_eq!(s["timer_s"], 5.0, "{s:#}");
    let d = s["detail"].as_str().unwrap();
    assert!(d.contains("armed when it began listening"), "{d}");
    assert!(d.contains("killed by SIGALRM"), "{d}");
}

#[test]
fn an_alarm_armed_at_first_listen_is_a_5_second_timer_on_a_quiet_machine() {
    assert_alarm_at_first_listen(&alarm_run("evidence-alarm-quiet"));
}

#[test]
fn an_alarm_armed_at_first_listen_is_a_5_second_timer_on_a_busy_machine() {
    let _hogs = Hogs::start();
    assert_alarm_at_first_listen(&alarm_run("evidence-alarm-busy"));
}

/// The application's library waits out its own lock limit, logs why in an ERROR line (no word
/// "timeout") and answers 500 at that instant: every failure quotes the line, and so does the request
/// timer's finding instead of guessing at a proxy.
#[test]
fn failures_quote_the_line_the_server_wrote_at_their_instant() {
    common::have("python3", "python3 -c 'import http.server'");
    let port = free_port();
    let dir = tempdir("evidence-said");
    let r = dir.join("r.json");
    let url = format!("http://127.0.0.1:{port}/call");
    let health = format!("http://127.0.0.1:{port}/health");
    let out = run_bounded(
        Command::new(witness())
            .args([
                "load",
                "--url",
                &url,
                "--health-url",
                &health,
                "--levels",
                "10",
                "--rounds",
                "1",
                "--settle",
                "100ms",
                "--report",
            ])
            .arg(&r)
            .args(["--", "python3"])
            .arg(peer("locked_app.py"))
            .arg(port.to_string()),
        Duration::from_secs(60),
    );
    let report = report_of(&out, &r);
    let line = "could not reserve the stock row for order 42, giving up";
    let failures = report["levels"][0]["failures"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(failures.len(), 10, "{:#}", report["levels"][0]);
    for f in &failures {
        let a = f["annotation"].as_str().unwrap();
        assert!(
            a.contains(&format!("the server said 'ERROR orders: {line}'")),
            "{a}"
        );
    }
    let timer = report["suspicions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["kind"] == "request_timer")
        .unwrap_or_else(|| panic!("no request timer: {:#}", report["suspicions"]))
        .clone();
    let d = timer["detail"].as_str().unwrap();
    assert!(d.contains(line), "{d}");
    assert!(!d.contains("a proxy or worker timeout?"), "{d}");
}
