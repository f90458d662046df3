//! The container target against the real Docker engine: a watchdog exit, an OOM kill versus a
//! `docker kill`, Docker's own restart policy (under wrap and under load), attaching to a running
//! container, witness as PID 1 of a container, and a missing engine. The images are built here with
//! no registry (tests/docker/README.md). Without an engine these tests fail: CI guarantees one.

use crate::common;
use crate::docker;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use docker::*;

fn events<'a>(journal: &'a [serde_json::Value], kind: &str) -> Vec<&'a serde_json::Value> {
    journal.iter().filter(|e| e["kind"] == kind).collect()
}

/// One HTTP/1.1 request over loopback, bounded; the status, if one came back.
fn http(port: u16, method: &str, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    text.split_whitespace().nth(1)?.parse().ok()
}

/// `witness wrap --image` with the test's label, journal and report.
fn wrap_image(scope: &Scope, dir: &Path, flags: &[&str], args: &[&str]) -> Command {
    let mut c = Command::new(witness());
    c.args(["wrap", "--image", toy_image(), "--label", &scope.label])
        .arg("--journal")
        .arg(dir.join("j.jsonl"))
        .arg("--report")
        .arg(dir.join("r.json"))
        .args(flags)
        .arg("--")
        .args(args);
    c
}

/// What a run's findings are, without the pids and times that differ between runs.
fn findings(report: &serde_json::Value) -> Vec<(String, String, f64, String)> {
    report["suspicions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["kind"].as_str().unwrap().to_string(),
                s["subject"].as_str().unwrap().to_string(),
                s["timer_s"].as_f64().unwrap(),
                s["timer_source"].to_string(),
            )
        })
        .collect()
}

#[test]
fn a_watchdog_exit_124_in_a_container_gives_the_same_findings_as_a_process() {
    let scope = Scope::new("watchdog");
    let dir = tempdir("ct-watchdog");
    let (pdir, cdir) = (dir.join("process"), dir.join("container"));
    std::fs::create_dir_all(&pdir).unwrap();
    std::fs::create_dir_all(&cdir).unwrap();
    let process = run_bounded(
        Command::new(witness())
            .args(["wrap", "--journal"])
            .arg(pdir.join("j.jsonl"))
            .arg("--report")
            .arg(pdir.join("r.json"))
            .arg("--")
            .arg(static_toy())
            .args(["--port", "0", "--watchdog", "2s"]),
        Duration::from_secs(20),
    );
    let html = cdir.join("t.html");
    let container = run_bounded(
        &mut wrap_image(
            &scope,
            &cdir,
            &[
                "--sample-interval",
                "250ms",
                "--html",
                html.to_str().unwrap(),
            ],
            &["--bind", "0.0.0.0", "--watchdog", "2s"],
        ),
        Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&container.stderr);
    assert_eq!(process.status.code(), Some(124));
    assert_eq!(container.status.code(), Some(124), "{stderr}");

    let (p, c) = (json(&pdir.join("r.json")), json(&cdir.join("r.json")));
    assert!(!findings(&c).is_empty(), "{c:#}");
    assert_eq!(
        findings(&p),
        findings(&c),
        "process:\n{p:#}\ncontainer:\n{c:#}"
    );
    assert_eq!(c["exit_status"], 124);
    let life = &c["processes"][0];
    assert_eq!(life["status"], 124);
    assert_eq!(life["log_lines"][0]["label"], "watchdog");
    assert_eq!(life["log_lines"][0]["timer_s"], 2.0);
    assert!(stderr.contains("[oi] process watchdog: force-exiting after 2s (exit 124)"));
    assert!(
        stderr.contains("at the 2s timer named in its log line"),
        "{stderr}"
    );

    let j = journal_lines(&cdir.join("j.jsonl"));
    let spawn = events(&j, "spawn")[0];
    assert_eq!(spawn["container_id"].as_str().unwrap().len(), 64);
    let exit = events(&j, "exit")[0];
    assert_eq!(exit["oom_killed"], false);
    // The engine collects stats once a second: a 2 s life has one or two.
    assert!(
        !events(&j, "container_sample").is_empty(),
        "stats were sampled"
    );
    let page = std::fs::read_to_string(&html).unwrap();
    for chart in ["container memory", "container CPU", "container pids"] {
        assert!(page.contains(chart), "the HTML report charts {chart}");
    }
    assert!(
        scope.containers().is_empty(),
        "witness removed the container it made"
    );
}

#[test]
fn a_leak_past_the_memory_limit_is_reported_as_an_oom_kill() {
    let scope = Scope::new("oom");
    let dir = tempdir("ct-oom");
    let port = free_port();
    let publish = format!("{port}:8080");
    let child = wrap_image(
        &scope,
        &dir,
        &[
            "--memory",
            "32m",
            "--publish",
            &publish,
            "--sample-interval",
            "200ms",
        ],
        &["--bind", "0.0.0.0", "--leak", "4m"],
    )
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let j = dir.join("j.jsonl");
    wait_until(
        "the container's first sample",
        Duration::from_secs(20),
        || std::fs::read_to_string(&j).is_ok_and(|t| t.contains("container_sample")),
    );
    // Each /call keeps 4 MiB: the 32 MiB limit is reached within a dozen calls.
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline
        && !std::fs::read_to_string(&j).is_ok_and(|t| t.contains("\"kind\":\"exit\""))
    {
        http(port, "POST", "/call");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = wait_bounded(child, Duration::from_secs(20));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(137), "{stderr}");

    let j = journal_lines(&j);
    let exit = events(&j, "exit")[0];
    assert_eq!(exit["oom_killed"], true, "{exit}");
    assert_eq!(exit["signal"], "SIGKILL");
    assert!(exit["meaning"]
        .as_str()
        .unwrap()
        .contains("killed by the kernel OOM killer (OOMKilled)"));
    assert!(stderr.contains("OOM killer"), "{stderr}");
    let limits: Vec<_> = events(&j, "container_sample")
        .iter()
        .map(|s| s["mem_limit_bytes"].as_u64())
        .collect();
    assert!(limits.iter().all(|l| *l == Some(32 << 20)), "{limits:?}");
    let report = json(&dir.join("r.json"));
    assert!(
        findings(&report).is_empty(),
        "an OOM kill is not a timer: {report:#}"
    );
}

#[test]
fn docker_kill_is_reported_as_sigkill_and_not_as_an_oom_kill() {
    let scope = Scope::new("kill");
    let dir = tempdir("ct-kill");
    let child = wrap_image(&scope, &dir, &[], &["--bind", "0.0.0.0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let j = dir.join("j.jsonl");
    wait_until("the container to start", Duration::from_secs(20), || {
        std::fs::read_to_string(&j).is_ok_and(|t| t.contains("\"kind\":\"spawn\""))
    });
    let id = scope
        .containers()
        .pop()
        .expect("the container witness made");
    docker_ok(&["kill", &id]);
    let out = wait_bounded(child, Duration::from_secs(20));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(137), "{stderr}");
    let j = journal_lines(&j);
    let exit = events(&j, "exit")[0];
    assert_eq!(exit["signal"], "SIGKILL", "{exit}");
    assert_eq!(exit["oom_killed"], false);
    assert_eq!(exit["requested"], false);
    let meaning = exit["meaning"].as_str().unwrap();
    assert!(
        meaning.contains("SIGKILL sent through the engine"),
        "{meaning}"
    );
    assert!(meaning.contains("not an OOM kill"), "{meaning}");
    assert!(
        stderr.contains("the engine delivered SIGKILL"),
        "the kill from outside is on the timeline: {stderr}"
    );
}

#[test]
fn restarts_by_dockers_own_policy_are_counted_with_the_engines_count() {
    let scope = Scope::new("restart");
    let dir = tempdir("ct-restart");
    let out = run_bounded(
        &mut wrap_image(
            &scope,
            &dir,
            &["--docker-restart", "on-failure:2"],
            &[
                "--bind",
                "0.0.0.0",
                "--die-after",
                "500ms",
                "--die-code",
                "3",
            ],
        ),
        Duration::from_secs(40),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let j = journal_lines(&dir.join("j.jsonl"));
    let restarts = events(&j, "restart");
    let counts: Vec<_> = restarts
        .iter()
        .map(|r| r["engine_restart_count"].as_u64())
        .collect();
    assert_eq!(counts, vec![Some(1), Some(2)], "{stderr}");
    let spawns = events(&j, "spawn");
    assert_eq!(spawns.len(), 3);
    let ids: std::collections::BTreeSet<_> = spawns
        .iter()
        .map(|s| s["container_id"].to_string())
        .collect();
    assert_eq!(ids.len(), 1, "one container, three starts");
    let pids: std::collections::BTreeSet<_> = spawns.iter().map(|s| s["pid"].to_string()).collect();
    assert_eq!(pids.len(), 3, "each start is a new process");
    assert_eq!(events(&j, "exit").len(), 3);
    let report = json(&dir.join("r.json"));
    assert_eq!(report["restarts"], 2);
    assert!(
        stderr.contains("restart #2 by the engine (RestartCount 2)"),
        "{stderr}"
    );
}

#[test]
fn a_container_restarted_by_docker_mid_load_marks_the_level_restarted() {
    let scope = Scope::new("load-restart");
    let dir = tempdir("ct-load");
    let port = free_port();
    let (url, publish) = (
        format!("http://127.0.0.1:{port}/call"),
        format!("{port}:8080"),
    );
    let r = dir.join("r.json");
    let out = run_bounded(
        Command::new(witness())
            .args(["load", "--url", &url, "--levels", "2", "--duration", "4s"])
            .args(["--settle", "1s", "--timeout", "2s", "--grace", "1s"])
            .args(["--image", toy_image(), "--label", &scope.label])
            .args(["--publish", &publish, "--docker-restart", "on-failure:1"])
            .arg("--report")
            .arg(&r)
            .arg("--journal")
            .arg(dir.join("j.jsonl"))
            .args([
                "--",
                "--bind",
                "0.0.0.0",
                "--call",
                "sleep:50ms",
                "--die-after",
                "3s",
            ]),
        Duration::from_secs(60),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "the level fails: {stderr}");
    let report = json(&r);
    let level = &report["levels"][0];
    assert_eq!(level["restarted"], true, "{report:#}");
    let j = journal_lines(&dir.join("j.jsonl"));
    let restart = events(&j, "restart")[0];
    assert_eq!(restart["engine_restart_count"], 1);
    let first_pid = events(&j, "spawn")[0]["pid"].as_u64().unwrap();
    let failures = level["failures"].as_array().expect("failed requests");
    assert!(!failures.is_empty(), "{level:#}");
    for f in failures {
        let a = f["annotation"].as_str().unwrap();
        assert!(
            a.contains(&format!("pid {first_pid}")),
            "each failure is tied to the die of the first container process: {a}"
        );
    }
    assert!(
        scope.containers().is_empty(),
        "witness removed its container"
    );
}

#[test]
fn attaching_to_a_running_container_follows_logs_and_stats_and_leaves_it_running() {
    let scope = Scope::new("attach");
    let dir = tempdir("ct-attach");
    let port = free_port();
    let id = docker_ok(&[
        "run",
        "-d",
        "--label",
        &scope.label,
        "-p",
        &format!("127.0.0.1:{port}:8080"),
        toy_image(),
        "--bind",
        "0.0.0.0",
        "--access-log",
    ]);
    wait_until(
        "the server in the container",
        Duration::from_secs(10),
        || http(port, "GET", "/health") == Some(200),
    );
    let j = dir.join("j.jsonl");
    let child = Command::new(witness())
        .args(["wrap", "--container", &id, "--sample-interval", "200ms"])
        .args(["--watch", "probe=GET /nope"])
        .args(["--watch", "listening=toy_server listening"])
        .arg("--journal")
        .arg(&j)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("witness to attach", Duration::from_secs(10), || {
        std::fs::read_to_string(&j).is_ok_and(|t| t.contains("\"kind\":\"spawn\""))
    });
    wait_until(
        "a matched log line from the container",
        Duration::from_secs(10),
        || {
            http(port, "GET", "/nope");
            std::fs::read_to_string(&j).is_ok_and(|t| t.contains("\"label\":\"probe\""))
        },
    );
    wait_until("two stats samples", Duration::from_secs(10), || {
        std::fs::read_to_string(&j).is_ok_and(|t| t.matches("container_sample").count() >= 2)
    });
    // A restart by hand is a new identity (same id, new StartedAt), seen like a supervisor's.
    docker_ok(&["restart", "-t", "1", &id]);
    wait_until(
        "the restart to be journalled",
        Duration::from_secs(15),
        || std::fs::read_to_string(&j).is_ok_and(|t| t.matches("\"kind\":\"spawn\"").count() == 2),
    );
    // The restarted server's first line has reached witness (journalled as it is passed through).
    wait_until(
        "the restarted server's listening line",
        Duration::from_secs(15),
        || std::fs::read_to_string(&j).is_ok_and(|t| t.contains("\"label\":\"listening\"")),
    );
    kill(child.id() as i32, 2);
    let out = wait_bounded(child, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("GET /nope 404"), "passed through: {stdout}");
    assert_eq!(
        stdout.matches("toy_server listening").count(),
        1,
        "only the restarted server's line: history from before the attach is not replayed: {stdout}"
    );
    assert_eq!(
        docker_ok(&["inspect", "--format", "{{.State.Running}}", &id]),
        "true",
        "witness leaves a container it did not start running"
    );
    let lines = journal_lines(&j);
    assert!(
        events(&lines, "signal_sent").is_empty(),
        "nothing was signalled"
    );
    let exits = events(&lines, "exit");
    assert_eq!(exits.len(), 1, "the restart's stop, not witness's");
    assert_eq!(exits[0]["requested"], false);
    assert_eq!(events(&lines, "restart").len(), 1);
    let end = events(&lines, "end")[0];
    assert!(
        end["reason"].as_str().unwrap().contains("keeps running"),
        "{end}"
    );
    let s = events(&lines, "container_sample")[0];
    assert!(s["mem_bytes"].as_u64().unwrap() > 0 && s["pids"].as_u64().unwrap() >= 1);
}

#[test]
fn witness_as_pid_1_reaps_orphans_and_forwards_docker_stop() {
    let scope = Scope::new("pid1");
    let dir = tempdir("ct-pid1");
    // Three orphans: each ( … & ) subshell exits at once and leaves its child to PID 1.
    let script = r#"(/bin/sh -c "exit 0" &); (/bin/sh -c "exit 0" &); (/bin/sh -c "exit 0" &); exec /toy_server --bind 0.0.0.0"#;
    let id = docker_ok(&[
        "run",
        "-d",
        "--label",
        &scope.label,
        "-v",
        &format!("{}:/witness", dir.display()),
        entry_image(),
        "/bin/sh",
        "-c",
        script,
    ]);
    let j = dir.join("journal.jsonl");
    wait_until(
        "the server to start under witness",
        Duration::from_secs(20),
        || std::fs::read_to_string(&j).is_ok_and(|t| t.contains("\"kind\":\"spawn\"")),
    );
    let pid1 = host_pid(&id);
    assert!(pid1 > 0);
    wait_until(
        "no zombie children of PID 1",
        Duration::from_secs(10),
        || zombie_children(pid1).is_empty(),
    );
    docker_ok(&["stop", "-t", "10", &id]);
    assert_eq!(
        docker_ok(&["inspect", "--format", "{{.State.ExitCode}}", &id]),
        "143",
        "the server died of the forwarded SIGTERM and witness exits 128+15"
    );
    let lines = journal_lines(&j);
    let exit = events(&lines, "exit")[0];
    assert_eq!(exit["signal"], "SIGTERM", "{exit}");
    assert_eq!(exit["requested"], true);
    let reaped: u64 = events(&lines, "note")
        .iter()
        .filter_map(|n| {
            n["text"]
                .as_str()?
                .strip_prefix("reaped ")?
                .split(' ')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    assert!(reaped >= 3, "the three orphans were reaped: {lines:#?}");
    let logs = docker_ok(&["logs", &id]);
    let all = logs + &String::from_utf8_lossy(&docker(&["logs", &id]).stderr);
    assert!(
        all.contains("forwarded SIGTERM that witness received"),
        "{all}"
    );
}

#[test]
fn no_engine_is_a_usage_error_naming_the_socket_and_docker_host() {
    let dir = tempdir("ct-noengine");
    let out = run_bounded(
        Command::new(witness())
            .env(
                "DOCKER_HOST",
                "unix:///nonexistent/witness-test/docker.sock",
            )
            .args(["wrap", "--image", "anything"])
            .arg("--journal")
            .arg(dir.join("j.jsonl")),
        Duration::from_secs(20),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("no Docker engine answered at unix:///nonexistent/witness-test/docker.sock (DOCKER_HOST)"),
        "{stderr}"
    );
    assert!(stderr.contains("--docker-host"), "{stderr}");
}

#[test]
fn a_container_oom_killed_under_load_is_said_so_in_every_annotation_and_died_not_restarted() {
    let scope = Scope::new("load-oom");
    let dir = tempdir("ct-load-oom");
    let port = free_port();
    let (url, publish) = (
        format!("http://127.0.0.1:{port}/call"),
        format!("{port}:8080"),
    );
    let r = dir.join("r.json");
    let out = run_bounded(
        Command::new(witness())
            .args(["load", "--url", &url, "--levels", "2", "--duration", "6s"])
            .args(["--settle", "500ms", "--timeout", "2s", "--grace", "1s"])
            .args(["--image", toy_image(), "--label", &scope.label])
            .args(["--publish", &publish, "--memory", "32m"])
            .arg("--report")
            .arg(&r)
            .arg("--journal")
            .arg(dir.join("j.jsonl"))
            .args(["--", "--bind", "0.0.0.0", "--leak", "4m"]),
        Duration::from_secs(60),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report = json(&r);
    let j = journal_lines(&dir.join("j.jsonl"));
    let exit = events(&j, "exit")[0];
    assert_eq!(exit["oom_killed"], true, "{exit}\n{stderr}");
    let level = &report["levels"][0];
    assert_eq!(level["restarted"], false, "nothing took over: {level:#}");
    assert!(
        level["died"]
            .as_str()
            .is_some_and(|d| d.contains("killed by the kernel OOM killer (OOMKilled, exit 137)")),
        "{level:#}"
    );
    let reasons = level["reasons"].to_string();
    assert!(!reasons.contains("exit status 137"), "{reasons}");
    assert!(reasons.contains("OOM killer"), "{reasons}");
    let failures = level["failures"].as_array().expect("failed requests");
    let by_exit: Vec<&str> = failures
        .iter()
        .map(|f| f["annotation"].as_str().unwrap())
        .filter(|a| a.starts_with("server pid"))
        .collect();
    assert!(!by_exit.is_empty(), "{level:#}");
    for a in by_exit {
        assert!(
            a.contains("was killed by the kernel OOM killer (OOMKilled, exit 137)"),
            "{a}"
        );
    }
    assert!(!stderr.contains(" yes "), "{stderr}");
}
