//! First contact: a user's own server works with nothing but `--url` (issue 28, part 1 and 2).
//! Python's http.server has no /health and answers POST with 501: witness must send GET, find
//! that the server has no health endpoint, ask the URL itself instead, and run levels long enough
//! for their percentiles. A server that listens elsewhere than the URL says so within seconds.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A folder with a file for http.server to serve.
fn site(tag: &str) -> std::path::PathBuf {
    let dir = tempdir(tag);
    std::fs::write(dir.join("index.txt"), "hello from a file\n").unwrap();
    std::fs::write(dir.join("index.html"), "<p>hello from a file</p>\n").unwrap();
    dir
}

/// The README's first two commands (its first use is a load against the user's own server with
/// only `--url`, near the top): attached, then started by witness. A `$ ` prompt is not a word.
fn readme_commands() -> (Vec<String>, Vec<String>) {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let head: Vec<&str> = readme.lines().take(60).collect();
    let loads: Vec<Vec<String>> = head
        .iter()
        .map(|l| l.strip_prefix("$ ").unwrap_or(l))
        .filter(|l| l.starts_with("witness load "))
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect();
    assert!(
        loads.len() >= 2,
        "the README's first lines show no load: {head:#?}"
    );
    for l in &loads[..2] {
        // Nothing but --url (and, for the second, the server's command after `--`).
        let flags: Vec<&String> = l
            .iter()
            .take_while(|w| *w != "--")
            .filter(|w| w.starts_with("--"))
            .collect();
        assert_eq!(flags, ["--url"], "{l:?}");
    }
    (loads[0].clone(), loads[1].clone())
}

/// A README command with its port made free and witness's files named, for a test.
fn as_test(words: &[String], port: u16, dir: &Path) -> Command {
    let words: Vec<String> = words
        .iter()
        .map(|w| w.replace("8000", &port.to_string()))
        .collect();
    let mut c = Command::new(witness());
    c.arg(&words[1])
        .arg("--report")
        .arg(dir.join("r.json"))
        .arg("--journal")
        .arg(dir.join("j.jsonl"))
        .args(&words[2..])
        .current_dir(dir);
    c
}

/// What a user's first run must show: every level passes, every request ok, GET sent, health
/// asked of the URL itself (the server has no /health), and the level a timed one.
fn assert_first_contact(out: &std::process::Output, dir: &Path, started: bool) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let report = json(&dir.join("r.json"));
    let levels = report["levels"].as_array().expect("levels");
    assert_eq!(
        levels
            .iter()
            .map(|l| l["concurrency"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [1, 4, 8],
        "the default ladder"
    );
    for l in levels {
        assert_eq!(l["verdict"], "pass", "{l:#}");
        let ok = l["counts"]["ok"].as_u64().unwrap();
        assert_eq!(l["counts"]["error"], 0, "{l:#}");
        assert_eq!(l["counts"]["timeout"], 0, "{l:#}");
        // A level that runs for a time, not one request per worker.
        assert!(
            ok > 2 * l["concurrency"].as_u64().unwrap(),
            "a default level sent only {ok} requests: {l:#}"
        );
    }
    let j = journal_lines(&dir.join("j.jsonl"));
    let settings = j.iter().find(|e| e["kind"] == "settings").unwrap();
    assert_eq!(settings["load"]["method"], "GET", "{settings:#}");
    assert!(
        settings["load"]["duration_s"].as_f64().is_some(),
        "{settings:#}"
    );
    // Health: the URL itself, said once, in words.
    let said = "no /health here (404): health is a GET of the URL";
    assert_eq!(err.matches(said).count(), 1, "{err}");
    let health: Vec<&serde_json::Value> = j.iter().filter(|e| e["kind"] == "health").collect();
    assert!(!health.is_empty());
    for h in health {
        assert!(
            h["url"].as_str().unwrap().ends_with("/index.html"),
            "health asked of {h:#}"
        );
    }
    if started {
        let ready = j.iter().find(|e| e["kind"] == "ready").expect("ready");
        assert_eq!(ready["ok"], true, "{ready:#}");
    }
}

#[test]
fn python_http_server_started_and_attached_passes_with_nothing_but_the_url() {
    let (attached, started) = readme_commands();
    // Both runs take the default ladder (three levels of 5 s): side by side, to keep the suite short.
    let started = std::thread::spawn(move || {
        let dir = site("fc-started");
        let out = run_bounded(
            &mut as_test(&started, free_port(), &dir),
            Duration::from_secs(120),
        );
        (out, dir)
    });
    let dir = site("fc-attached");
    let port = free_port();
    let _server = Bg::start(
        Command::new("python3")
            .args(["-m", "http.server", "--bind", "127.0.0.1"])
            .arg(port.to_string())
            .arg("--directory")
            .arg(&dir)
            .stderr(std::process::Stdio::null()),
    );
    wait_listening(port);
    let out = run_bounded(
        &mut as_test(&attached, port, &dir),
        Duration::from_secs(120),
    );
    assert_first_contact(&out, &dir, false);
    let (out, dir) = started.join().unwrap();
    assert_first_contact(&out, &dir, true);
}

#[test]
fn a_post_url_with_no_health_endpoint_is_probed_by_a_tcp_connect_not_a_post() {
    let dir = site("fc-post");
    let port = free_port().to_string();
    let out = run_bounded(
        Command::new(witness())
            .args([
                "load",
                "--url",
                &format!("http://127.0.0.1:{port}/index.txt"),
            ])
            .args(["--body", "x=1", "--levels", "1", "--duration", "500ms"])
            .args(["--settle", "100ms", "--report"])
            .arg(dir.join("r.json"))
            .arg("--journal")
            .arg(dir.join("j.jsonl"))
            .args(["--", "python3", "-m", "http.server", "--bind", "127.0.0.1"])
            .arg(&port)
            .arg("--directory")
            .arg(&dir),
        Duration::from_secs(60),
    );
    let err = stderr(&out);
    // http.server answers POST with 501: the level fails, and says so — but the run measured it.
    assert_eq!(out.status.code(), Some(1), "{err}");
    let j = journal_lines(&dir.join("j.jsonl"));
    let settings = j.iter().find(|e| e["kind"] == "settings").unwrap();
    assert_eq!(settings["load"]["method"], "POST", "--body implies POST");
    let said = format!("no /health here (404): health is a TCP connect to 127.0.0.1:{port}");
    assert_eq!(err.matches(&said).count(), 1, "{err}");
    let after: Vec<&serde_json::Value> = j
        .iter()
        .filter(|e| e["kind"] == "health" && e["purpose"] == "after")
        .collect();
    assert!(!after.is_empty());
    for h in after {
        assert_eq!(h["connected"], true, "{h:#}");
    }
    let report = json(&dir.join("r.json"));
    let l = &report["levels"][0];
    assert!(l["counts"]["error"].as_u64().unwrap() > 0, "{l:#}");
    assert!(
        l["errors_by_kind"].to_string().contains("501"),
        "the 501s are the server's answer: {l:#}"
    );
}

#[test]
fn a_server_listening_on_another_port_is_refused_within_seconds_naming_its_port() {
    let dir = tempdir("fc-elsewhere");
    let (url_port, real) = (free_port(), free_port());
    let start = Instant::now();
    let out = run_bounded(
        Command::new(witness())
            .args(["load", "--url", &format!("http://127.0.0.1:{url_port}/")])
            .arg("--report")
            .arg(dir.join("r.json"))
            .args(["--", "python3", "-m", "http.server", "--bind", "127.0.0.1"])
            .arg(real.to_string()),
        Duration::from_secs(60),
    );
    let took = start.elapsed();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    let said = format!("the server listens on 127.0.0.1:{real}, not on the URL's port {url_port}");
    assert!(err.contains(&said), "{err}");
    assert!(
        err.contains(&format!("give --url with port {real}")),
        "the refusal names the fix: {err}"
    );
    // --ready-timeout is 30 s: the refusal comes from seeing the port, not from waiting it out.
    assert!(took < Duration::from_secs(20), "took {took:?}: {err}");
}
