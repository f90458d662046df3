//! Real servers nobody on this project wrote, and the ways witness used to misread them: a timer that
//! starts with each request (gunicorn's worker `--timeout`, nginx's `proxy_read_timeout`), a server
//! that refuses every request, a server limited to a few connections, and a closed stdout.
//!
//! gunicorn (PyPI) and nginx (Debian's nginx-light) are installed by `.ci/run`. Without them a test
//! prints SKIPPED locally, and fails when CI=true: there, a missing tool is a broken setup.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::*;

/// The tool's path, or None (after saying SKIPPED) when it is missing outside CI.
fn levels(report: &serde_json::Value) -> &Vec<serde_json::Value> {
    report["levels"].as_array().expect("levels")
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn annotations(report: &serde_json::Value) -> Vec<String> {
    levels(report)
        .iter()
        .flat_map(|l| l["failures"].as_array().cloned().unwrap_or_default())
        .map(|f| f["annotation"].as_str().unwrap_or("").to_string())
        .collect()
}

fn suspicions(report: &serde_json::Value) -> Vec<String> {
    report["suspicions"]
        .as_array()
        .expect("suspicions")
        .iter()
        .map(|s| s["detail"].as_str().unwrap_or("").to_string())
        .collect()
}

const SLOW_WSGI: &str = r#"
import time
def app(environ, start_response):
    if environ.get("PATH_INFO") == "/slow":
        time.sleep(30)
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]
"#;

#[test]
fn gunicorn_s_worker_timeout_is_a_timer_that_starts_with_each_request() {
    let Some(gunicorn) = tool("gunicorn", &[]) else {
        return;
    };
    let dir = tempdir("gunicorn");
    std::fs::write(dir.join("slow_wsgi.py"), SLOW_WSGI).unwrap();
    let r = dir.join("r.json");
    let html = dir.join("t.html");
    let port = free_port().to_string();
    let out = run_bounded(
        Command::new(witness())
            .args(["load", "--url", &format!("http://127.0.0.1:{port}/slow")])
            .args(["--levels", "1,2", "--rounds", "2", "--timeout", "10s"])
            .args(["--settle", "300ms", "--ready-timeout", "20s", "--report"])
            .arg(&r)
            .arg("--html")
            .arg(&html)
            .arg("--")
            .arg(gunicorn)
            .args(["--timeout", "2", "-w", "2", "-b"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("--chdir")
            .arg(&dir)
            .arg("slow_wsgi:app"),
        Duration::from_secs(90),
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = json(&r);
    let lv = levels(&report);
    for l in lv {
        assert_eq!(l["verdict"], "fail", "{l:#}");
        assert_eq!(l["counts"]["ok"], 0);
        // The master lived: its workers died and were respawned, the server was not restarted.
        assert_eq!(l["restarted"], false, "{l:#}");
    }
    // Each failure is tied to the WORKER TIMEOUT line and the worker pid it names.
    let notes = annotations(&report);
    assert!(notes.len() >= 4, "{notes:?}");
    for a in &notes {
        assert!(
            a.contains("WORKER TIMEOUT") && a.contains("naming pid "),
            "{a}"
        );
        assert!(!a.contains("did not exit or restart"), "{a}");
        assert!(a.contains("answered HTTP 500 '"), "{a}");
    }
    // And to the worker's death itself, as the process tree saw it (not only the master's words).
    assert!(
        notes
            .iter()
            .any(|a| a.contains("worker pid ") && a.contains(" died: ")),
        "no failure names the worker that died: {notes:?}"
    );
    // The suspicion names the 2 s request timer, from gunicorn's own command line.
    let s = suspicions(&report);
    let timer = s
        .iter()
        .find(|d| d.contains("a timer that starts with each request"))
        .unwrap_or_else(|| panic!("no request-timer suspicion in {s:?}"));
    assert!(
        timer.contains("the 2s timer in its command line '--timeout 2'"),
        "{timer}"
    );
    assert!(timer.contains("WORKER TIMEOUT"), "{timer}");
    // "Perhaps out of memory?" is gunicorn's guess, not an OOM.
    let lines: Vec<_> = report["lifecycle"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "log")
        .collect();
    assert!(lines.iter().all(|e| e["label"] != "oom"), "{lines:?}");
    // The report and the HTML carry the same words.
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("a timer that starts with each request"));
    assert!(page.contains("WORKER TIMEOUT"));
}

#[test]
fn nginx_s_proxy_read_timeout_is_a_timer_that_starts_with_each_request() {
    let Some(nginx) = tool("nginx", &["/usr/sbin", "/usr/local/sbin"]) else {
        return;
    };
    let dir = tempdir("nginx");
    let upstream = free_port().to_string();
    let _slow = Bg::start(Command::new(toy()).args(["--port", &upstream, "--call", "sleep:30s"]));
    wait_listening(upstream.parse().unwrap());
    let port = free_port().to_string();
    let conf = nginx_proxy_conf(&dir, &port, &upstream, "2s");
    let r = dir.join("r.json");
    let out = run_bounded(
        Command::new(witness())
            .args(["load", "--url", &format!("http://127.0.0.1:{port}/call")])
            .args(["--levels", "1,3", "--rounds", "2", "--timeout", "10s"])
            .args(["--timer", "2s", "--settle", "300ms", "--report"])
            .arg(&r)
            .arg("--")
            .arg(nginx)
            .args(["-e", "stderr", "-c"])
            .arg(&conf),
        Duration::from_secs(90),
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = json(&r);
    for l in levels(&report) {
        assert_eq!(l["counts"]["ok"], 0, "{l:#}");
        assert!(l["counts"]["error"].as_u64().unwrap() >= 2, "{l:#}");
        assert_eq!(l["restarted"], false);
    }
    for a in annotations(&report) {
        assert!(a.starts_with("answered HTTP 504 '"), "{a}");
        assert!(a.contains("upstream timed out"), "{a}");
        assert!(!a.contains("did not exit or restart"), "{a}");
    }
    let s = suspicions(&report);
    let timer = s
        .iter()
        .find(|d| d.contains("a timer that starts with each request"))
        .unwrap_or_else(|| panic!("no request-timer suspicion in {s:?}"));
    assert!(
        timer.starts_with("8 failed requests all gave up at 2.0"),
        "{timer}"
    );
    assert!(timer.contains("upstream timed out"), "{timer}");
    // --timer does for request durations what it does for exits.
    assert!(
        timer.contains("at the 2s timer given with --timer"),
        "{timer}"
    );
    // The terminal says so too.
    assert!(stderr(&out).contains("a timer that starts with each request"));
}

#[test]
fn a_server_that_refuses_every_request_passes_no_level_and_says_why() {
    let dir = tempdir("refuse-all");
    let r = dir.join("r.json");
    let port = free_port().to_string();
    let out = run_bounded(
        Command::new(witness())
            .args(["load", "--url", &format!("http://127.0.0.1:{port}/call")])
            .args([
                "--levels", "1,2", "--rounds", "1", "--settle", "100ms", "--report",
            ])
            .arg(&r)
            .arg("--")
            .arg(toy())
            .args(["--port", &port, "--capacity", "0", "--reject-status", "503"]),
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = json(&r);
    assert_eq!(report["verdict"], "fail");
    for l in levels(&report) {
        assert_eq!(l["verdict"], "fail", "{l:#}");
        assert_eq!(l["counts"]["ok"], 0);
        assert!(l["counts"]["rejected"].as_u64().unwrap() > 0);
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(
            r#"served nothing: the server refused every request (HTTP 503 '{"error":"QUEUE_FULL"}')"#
        ),
        "{stdout}"
    );
}

#[test]
fn a_server_limited_to_four_connections_is_measured_below_its_limit() {
    let dir = tempdir("max-conns");
    let r = dir.join("r.json");
    let port = free_port().to_string();
    let out = run_bounded(
        Command::new(witness())
            .args(["load", "--url", &format!("http://127.0.0.1:{port}/call")])
            .args(["--levels", "1,2,3", "--rounds", "5", "--settle", "100ms"])
            .arg("--report")
            .arg(&r)
            .arg("--")
            .arg(toy())
            .args(["--port", &port, "--max-conns", "4", "--call", "sleep:20ms"]),
        Duration::from_secs(60),
    );
    let report = json(&r);
    // Three load connections plus witness's one kept-alive health connection fit in four; the
    // twenty connect-floor probes were closed, and seen closed, before the first health probe.
    assert_eq!(report["verdict"], "pass", "{report:#}\n{}", stderr(&out));
    for l in levels(&report) {
        assert_eq!(l["counts"]["rejected"], 0, "{l:#}");
        assert_eq!(l["counts"]["ok"], l["concurrency"].as_u64().unwrap() * 5);
    }
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn a_closed_stdout_stops_the_printing_not_the_run() {
    let dir = tempdir("head");
    let r = dir.join("r.json");
    let j = dir.join("j.jsonl");
    let port = free_port().to_string();
    let script = format!(
        "'{w}' load --url http://127.0.0.1:{port}/call --levels 1,2,4,8 --settle 200ms --report '{r}' --journal '{j}' -- '{t}' --port {port} | head -1; echo \"witness-rc=${{PIPESTATUS[0]}}\" >&2",
        w = witness().display(),
        r = r.display(),
        j = j.display(),
        t = toy().display(),
    );
    let out = run_bounded(
        Command::new("bash").args(["-c", &script]),
        Duration::from_secs(60),
    );
    let err = stderr(&out);
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains("witness-rc=0"), "{err}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    // The report and the journal are complete: every level, and the end record.
    let report = json(&r);
    assert_eq!(levels(&report).len(), 4);
    assert_eq!(report["partial"], false, "{report:#}");
    let end = journal_lines(&j);
    assert_eq!(end.last().unwrap()["kind"], "end");
}

#[test]
fn after_a_death_with_no_restart_policy_the_level_stops_sending_and_says_so() {
    let dir = tempdir("died");
    let r = dir.join("r.json");
    let port = free_port().to_string();
    let out = run_bounded(
        Command::new(witness())
            .args(["load", "--url", &format!("http://127.0.0.1:{port}/call")])
            .args(["--levels", "1,2", "--rounds", "40", "--settle", "100ms"])
            .arg("--report")
            .arg(&r)
            .arg("--")
            .arg(toy())
            .args([
                "--port",
                &port,
                "--call",
                "sleep:100ms",
                "--die-after",
                "1500ms",
            ]),
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = json(&r);
    let lv = levels(&report);
    let first = &lv[0];
    assert_eq!(first["verdict"], "fail");
    let not_sent = first["counts"]["not_sent"].as_u64().unwrap();
    assert!(not_sent > 0 && not_sent < 40, "{first:#}");
    // Nothing the server did: a connect to a port nobody listens on is not its error.
    assert!(
        first["counts"]["error"].as_u64().unwrap() <= 1,
        "at most the request in flight when it died: {first:#}"
    );
    assert_eq!(lv[1]["verdict"], "skipped");
    let why = lv[1]["reasons"][0].as_str().unwrap();
    assert!(
        why.starts_with("the server died (exit status 1) and nothing restarts it"),
        "{why}"
    );
    let err = stderr(&out);
    assert!(!err.contains("every level ran"), "{err}");
    assert!(err.contains("run ends: 0 of 2 levels ran"), "{err}");
    assert!(err.contains("requests not sent"), "{err}");
}

#[test]
fn a_start_up_failure_shows_the_server_s_last_output_lines() {
    let port = free_port().to_string();
    let out = run_bounded(
        Command::new(witness())
            .args(["load", "--url", &format!("http://127.0.0.1:{port}/call")])
            .arg("--")
            .arg(toy())
            .args(["--port", &port, "--call", "bogus"]),
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(3));
    let err = stderr(&out);
    // The line matches no watch pattern: it is shown because it was the server's last word, once.
    let said =
        "before it was ready; its last line: stderr 'toy_server: --call: invalid value 'bogus'";
    assert!(err.contains(said), "{err}");
    assert_eq!(
        err.matches("invalid value 'bogus'").count(),
        1,
        "said once: {err}"
    );
}
