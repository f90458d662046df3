//! `witness load` against the example servers: the 85-second story's two tables, a healthy line, capacity
//! refusals, a stalled listener, and a remote target refused.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::*;

fn load(args: &[&str], report: &std::path::Path) -> std::process::Output {
    run_bounded(
        Command::new(witness())
            .arg("load")
            .args(args)
            .args(per_worker(args))
            .arg("--report")
            .arg(report),
        Duration::from_secs(90),
    )
}

/// `witness load --url http://127.0.0.1:PORT/call ARGS --report R -- toy_server --port PORT SERVER…`
fn load_own(args: &[&str], server: &[&str], report: &std::path::Path) -> std::process::Output {
    let port = free_port().to_string();
    let url = format!("http://127.0.0.1:{port}/call");
    run_bounded(
        Command::new(witness())
            .args(["load", "--url", &url])
            .args(args)
            .args(per_worker(args))
            .arg("--report")
            .arg(report)
            .arg("--")
            .arg(toy())
            .args(["--port", &port])
            .args(server),
        Duration::from_secs(60),
    )
}

fn levels(report: &serde_json::Value) -> &Vec<serde_json::Value> {
    report["levels"].as_array().expect("levels")
}

#[test]
fn a_server_that_never_answers_fails_every_level_with_timeouts_in_bounded_time() {
    let dir = tempdir("hang");
    let r = dir.join("r.json");
    let out = load_own(
        &["--timeout", "1s", "--settle", "200ms"],
        &["--call", "hang"],
        &r,
    );
    assert_eq!(out.status.code(), Some(1));
    let report = json(&r);
    assert_eq!(report["verdict"], "fail");
    let lv = levels(&report);
    assert_eq!(lv.len(), 3);
    for (l, n) in lv.iter().zip([1, 4, 8]) {
        assert_eq!(l["concurrency"], n);
        assert_eq!(l["verdict"], "fail");
        assert_eq!(l["counts"]["timeout"], n);
        assert_eq!(l["counts"]["ok"], 0);
        assert_eq!(l["health_after"], 200);
        assert_eq!(l["restarted"], false);
        // A timeout's duration never becomes latency.
        assert!(l["latency"].is_null());
        assert!(l["failures"][0]["annotation"]
            .as_str()
            .unwrap()
            .contains("witness's own 1s whole-request limit"));
    }
    // The live rows on stdout, under a header naming the columns: n=8, 0 ok, 8 timeouts, no ok
    // request so no max or percentiles, and the time the timeouts took to give up apart.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let header: Vec<&str> = stdout.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header[..8],
        ["n", "ok", "timeout", "error", "rejected", "max", "p50", "p99"],
        "{stdout}"
    );
    let row8: Vec<&str> = stdout
        .lines()
        .find(|l| l.split_whitespace().next() == Some("8"))
        .unwrap_or_else(|| panic!("no row for n=8: {stdout}"))
        .split_whitespace()
        .collect();
    assert_eq!(
        row8[..8],
        ["8", "0", "8", "0", "0", "-", "-", "-"],
        "{stdout}"
    );
    assert!(
        row8[8].starts_with("1.0"),
        "gave up after the 1 s limit: {stdout}"
    );
}

fn seed_table_checks(report: &serde_json::Value) {
    let lv = levels(report);
    assert_eq!(lv[0]["verdict"], "pass", "{:#}", lv[0]);
    assert_eq!(lv[0]["restarted"], false);
    for l in &lv[1..] {
        assert_eq!(l["verdict"], "fail", "{l:#}");
        assert_eq!(l["restarted"], true, "{l:#}");
        assert_eq!(
            l["health_after"], 200,
            "health after looks fine: only restarted tells"
        );
        assert_ne!(l["identity_before"], l["identity_after"]);
        assert!(l["reasons"][0] == "restarted");
    }
}

#[test]
fn the_seed_table_attached_to_a_server_kept_alive_by_a_supervisor_loop() {
    let dir = tempdir("seed-attach");
    let r = dir.join("r.json");
    let port = free_port().to_string();
    let _server = Bg::start(
        Command::new(repo().join("wrappers/supervise-loop"))
            .arg(toy())
            .args([
                "--port",
                &port,
                "--call",
                "lock:500ms",
                "--watchdog",
                "2500ms",
            ]),
    );
    wait_listening(port.parse().unwrap());
    let url = format!("http://127.0.0.1:{port}/call");
    let out = load(&["--url", &url, "--settle", "500ms"], &r);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = json(&r);
    seed_table_checks(&report);
    // Exits seen from outside are journalled, with the age the process reached.
    let exits: Vec<_> = report["lifecycle"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "exit")
        .collect();
    assert!(!exits.is_empty());
    let age = exits[0]["age_s"].as_f64().unwrap();
    assert!((2.3..3.0).contains(&age), "age {age}");
}

#[test]
fn the_seed_table_with_witness_supervising_shows_the_watchdog_and_the_suspicion() {
    let dir = tempdir("seed-own");
    let r = dir.join("r.json");
    let out = load_own(
        &[
            "--settle",
            "500ms",
            "--restart",
            "always",
            "--backoff",
            "100ms",
        ],
        &["--call", "lock:500ms", "--watchdog", "2500ms"],
        &r,
    );
    assert_eq!(out.status.code(), Some(1));
    let report = json(&r);
    seed_table_checks(&report);
    let lifecycle = report["lifecycle"].as_array().unwrap();
    assert!(lifecycle
        .iter()
        .any(|e| e["kind"] == "exit" && e["code"] == 124 && e["requested"] == false));
    assert!(lifecycle.iter().any(|e| e["kind"] == "log"
        && e["label"] == "watchdog"
        && e["line"]
            .as_str()
            .unwrap()
            .contains("force-exiting after 2500ms")));
    let s = report["suspicions"].as_array().unwrap();
    assert!(
        s.iter()
            .any(|s| s["subject"] == "process_exit" && s["timer_s"] == 2.5),
        "{s:#?}"
    );
    // The failed requests are correlated with the exit.
    let failure = &levels(&report)[1]["failures"][0]["annotation"];
    assert!(
        failure
            .as_str()
            .unwrap()
            .contains("exited with 124 (after log line '[oi] process watchdog"),
        "{failure}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("armed at process start"), "{stderr}");
}

#[test]
fn a_healthy_lock_serialised_server_passes_every_level() {
    let dir = tempdir("line");
    let r = dir.join("r.json");
    let out = load_own(&["--settle", "100ms"], &["--call", "lock:200ms"], &r);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = json(&r);
    assert_eq!(report["verdict"], "pass");
    for l in levels(&report) {
        assert_eq!(l["verdict"], "pass");
        let n = l["concurrency"].as_f64().unwrap();
        let max = l["latency"]["max"].as_f64().unwrap();
        // Serialised: the last of n waits for the n-1 before it. A line, not a cliff.
        assert!(
            max > 0.2 * n * 0.9 && max < 0.2 * n * 1.5,
            "n={n} max={max}"
        );
    }
    assert!(report["connect_floor_ms"].as_f64().unwrap() < 100.0);
    // witness says what its own CPU cost while each level sent, and per request at the busiest.
    for l in levels(&report) {
        let cpu = l["witness_cpu_s"].as_f64().unwrap_or(-1.0);
        assert!((0.0..10.0).contains(&cpu), "{l:#}");
    }
    let cost = report["witness_cost"].as_str().unwrap_or_default();
    // A lock-serialised server answers a few requests a level: the figure is the level's, not one
    // per request (those would carry the level's fixed costs).
    assert!(
        cost.starts_with("witness's own CPU while it sent: ")
            && cost.contains("too few for a per-request figure"),
        "{cost}"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains(cost));
}

#[test]
fn capacity_refusals_are_rejected_not_errors() {
    let dir = tempdir("cap");
    let r = dir.join("r.json");
    let out = load_own(
        &["--levels", "8", "--rounds", "2", "--settle", "100ms"],
        &["--call", "sleep:300ms", "--capacity", "2"],
        &r,
    );
    let report = json(&r);
    let l = &levels(&report)[0];
    assert!(l["counts"]["rejected"].as_u64().unwrap() >= 6, "{l:#}");
    assert_eq!(l["counts"]["error"], 0);
    assert_eq!(
        l["verdict"], "pass",
        "refusing unsafe work is correct behaviour"
    );
    assert_eq!(out.status.code(), Some(0));
}

/// A capacity refusal recognised by its status alone: the body carries no QUEUE_FULL marker.
fn plain_refusals_by_status(status: &str) {
    let dir = tempdir(&format!("plain{status}"));
    let r = dir.join("r.json");
    let out = load_own(
        &["--levels", "8", "--rounds", "2", "--settle", "100ms"],
        &[
            "--call",
            "sleep:300ms",
            "--capacity",
            "2",
            "--reject-status",
            status,
            "--reject-body",
            "busy, try later",
        ],
        &r,
    );
    let report = json(&r);
    let l = &levels(&report)[0];
    assert!(l["counts"]["rejected"].as_u64().unwrap() >= 6, "{l:#}");
    assert_eq!(
        l["counts"]["error"], 0,
        "HTTP {status} is a refusal, not an error: {l:#}"
    );
    assert_eq!(l["verdict"], "pass", "{l:#}");
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn a_plain_429_without_a_body_marker_is_rejected_by_its_status() {
    plain_refusals_by_status("429");
}

#[test]
fn a_plain_503_without_a_body_marker_is_rejected_by_its_status() {
    plain_refusals_by_status("503");
}

#[test]
fn a_listener_whose_connects_stall_is_refused_with_the_floor_printed() {
    let dir = tempdir("stall");
    let r = dir.join("r.json");
    let port = free_port().to_string();
    let _server = Bg::start(Command::new(toy()).args(["--port", &port, "--never-accept"]));
    wait_until("the stalled listener", Duration::from_secs(10), || {
        witness::server::listener_of(port.parse().unwrap()).is_some()
    });
    let url = format!("http://127.0.0.1:{port}/call");
    let out = load(&["--url", &url], &r);
    assert_eq!(out.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the connect floor to 127.0.0.1"),
        "{stderr}"
    );
    assert!(
        stderr.contains("over --max-connect-floor 100 ms"),
        "{stderr}"
    );
    let report = json(&r);
    assert_eq!(report["verdict"], "refused");
    assert!(report["connect_floor_ms"].as_f64().unwrap() > 100.0);
    assert!(levels(&report).is_empty(), "no level was measured");
}

#[test]
fn a_remote_address_is_refused_before_any_request() {
    let dir = tempdir("remote");
    let r = dir.join("r.json");
    // 192.0.2.0/24 is TEST-NET-1: documentation only, never routed.
    let out = load(&["--url", "http://192.0.2.10:8080/call"], &r);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not a loopback address"), "{stderr}");
    assert!(stderr.contains("--allow-remote"), "{stderr}");
    assert!(!r.exists(), "nothing was run, so nothing was reported");
}

/// Runs `witness load --url http://localhost:PORT/call` against a toy server in a mount namespace of
/// its own whose /etc/hosts is `hosts` (`unshare -m`, a bind mount: needs root), so the case does not
/// depend on the machine's hosts file. None (after saying SKIPPED) where that cannot be done here;
/// with CI=true that is a failure, since CI runs as root.
fn load_localhost_with_hosts(tag: &str, hosts: &str) -> Option<(u16, serde_json::Value, i32)> {
    let dir = tempdir(tag);
    let (r, hosts_file) = (dir.join("r.json"), dir.join("hosts"));
    std::fs::write(&hosts_file, hosts).unwrap();
    let probe = Command::new("unshare")
        .args(["-m", "sh", "-c", "mount --bind \"$0\" /etc/hosts"])
        .arg(&hosts_file)
        .output();
    if !probe.as_ref().is_ok_and(|o| o.status.success()) {
        let why = match probe {
            Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
            Err(e) => format!("unshare: {e}"),
        };
        assert!(
            !on_ci(),
            "CI=true: the localhost test needs a mount namespace (root, unshare -m): {why}"
        );
        skipped(&format!(
            "{tag}: no mount namespace for a private /etc/hosts ({why}); run as root"
        ));
        return None;
    }
    let port = free_port();
    let url = format!("http://localhost:{port}/call");
    let out = run_bounded(
        Command::new("unshare")
            .args([
                "-m",
                "sh",
                "-c",
                "mount --bind \"$0\" /etc/hosts && exec \"$@\"",
            ])
            .arg(&hosts_file)
            .arg(witness())
            .args([
                "load", "--url", &url, "--levels", "1", "--rounds", "1", "--settle", "0s",
                "--report",
            ])
            .arg(&r)
            .arg("--")
            .arg(toy())
            .args(["--port", &port.to_string()]),
        Duration::from_secs(30),
    );
    let code = out.status.code().unwrap_or(-1);
    assert!(
        r.exists(),
        "no report; witness said:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some((port, json(&r), code))
}

#[test]
fn localhost_resolving_to_an_unused_ipv6_first_is_named_with_the_fix() {
    // Debian's and Ubuntu's stock hosts file: `::1 localhost` present, so ::1 comes first, where the
    // toy server (127.0.0.1 only) refuses.
    let debian = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n";
    let Some((port, report, code)) = load_localhost_with_hosts("localhost-v6", debian) else {
        return;
    };
    let a = report["connect_floor"]["advice"]
        .as_str()
        .unwrap_or_else(|| panic!("advice when ::1 comes first and refuses: {report:#}"));
    assert!(a.contains("localhost resolves to [::1] first"), "{a}");
    assert!(a.contains("connection refused"), "{a}");
    assert!(a.contains(&format!("use http://127.0.0.1:{port}")), "{a}");
    assert_eq!(code, 0, "the requests still reach 127.0.0.1");
}

#[test]
fn localhost_resolving_to_127_0_0_1_only_gets_no_advice() {
    let Some((_, report, code)) =
        load_localhost_with_hosts("localhost-v4", "127.0.0.1\tlocalhost\n")
    else {
        return;
    };
    assert!(
        report["connect_floor"]["advice"].is_null(),
        "127.0.0.1 first: nothing to advise: {report:#}"
    );
    assert_eq!(code, 0);
}

#[test]
fn ctrl_c_mid_run_keeps_what_was_measured_labelled_partial_and_stops_the_server() {
    let dir = tempdir("int");
    let (r, j) = (dir.join("r.json"), dir.join("j.jsonl"));
    let port = free_port().to_string();
    let url = format!("http://127.0.0.1:{port}/call");
    let child = Command::new(witness())
        .args([
            "load",
            "--url",
            &url,
            "--levels",
            "1,4",
            "--rounds",
            "1",
            "--timeout",
            "20s",
            "--report",
        ])
        .arg(&r)
        .arg("--journal")
        .arg(&j)
        .arg("--")
        .arg(toy())
        .args(["--port", &port, "--call", "sleep:300ms"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Interrupt once the first level has finished and the second is under way.
    wait_until("level 1 to end", Duration::from_secs(20), || {
        std::fs::read_to_string(&j).is_ok_and(|t| t.contains("\"kind\":\"level_end\""))
    });
    let server = journal_lines(&j)
        .iter()
        .find(|l| l["kind"] == "spawn")
        .map(|l| l["pid"].as_i64().unwrap() as i32)
        .unwrap();
    kill(child.id() as i32, 2);
    let out = wait_bounded(child, Duration::from_secs(20));
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = json(&r);
    assert_eq!(report["partial"], true);
    assert!(report["partial_reason"]
        .as_str()
        .unwrap()
        .contains("interrupted by SIGINT"));
    // Level 1 was measured before the interrupt and is all there.
    assert_eq!(levels(&report)[0]["counts"]["ok"], 1);
    assert_eq!(levels(&report)[0]["verdict"], "pass");
    wait_until("the server to be stopped", Duration::from_secs(5), || {
        !alive(server)
    });
}

#[test]
fn kill_9_during_a_load_loses_at_most_the_last_flush_interval_of_requests() {
    let dir = tempdir("kill9load");
    let j = dir.join("j.jsonl");
    let port = free_port().to_string();
    let url = format!("http://127.0.0.1:{port}/call");
    // Four workers, 10 ms per request: requests are always in flight. No resource or GPU samples
    // in the window, so nothing but the journal's own flusher writes the requests out.
    let child = Command::new(witness())
        .args(["load", "--url", &url, "--levels", "4", "--duration", "30s"])
        .args(["--sample-interval", "60s", "--gpu", "off", "--journal"])
        .arg(&j)
        .arg("--")
        .arg(toy())
        .args(["--port", &port, "--call", "sleep:10ms"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A failed wait below must not leave witness and its server running.
    let _guard = KillTree::new(child.id() as i32);
    // Wait on the server's own count, not on the journal: the kill must not be timed by a flush.
    let stats = || -> Option<serde_json::Value> {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(("127.0.0.1", port.parse().unwrap())).ok()?;
        c.write_all(b"GET /stats HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .ok()?;
        let mut body = String::new();
        c.read_to_string(&mut body).ok()?;
        serde_json::from_str(body.split("\r\n\r\n").nth(1)?).ok()
    };
    wait_until(
        "the server to answer 300 calls, with more in flight",
        Duration::from_secs(30),
        || {
            stats().is_some_and(|s| {
                s["requests"].as_u64().unwrap_or(0) >= 300
                    && s["in_flight"].as_u64().unwrap_or(0) > 0
            })
        },
    );
    let started = journal_lines(&j)[0]["started_unix_s"].as_f64().unwrap();
    let unix_now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
    };
    let kill_t = unix_now() - started;
    kill(child.id() as i32, 9);
    let out = wait_bounded(child, Duration::from_secs(10));
    assert_eq!(out.status.code(), None, "killed by SIGKILL");

    // A kill can cut the last line mid-write: read the complete ones.
    let text = std::fs::read_to_string(&j).unwrap();
    let lines: Vec<serde_json::Value> = text.lines().filter_map(journal_value).collect();
    assert!(
        !lines.iter().any(|l| l["kind"] == "level_end"),
        "witness was killed mid-level, with requests in flight"
    );
    let ends: Vec<f64> = lines
        .iter()
        .filter(|l| l["kind"] == "request")
        .map(|l| l["t_s"].as_f64().unwrap())
        .collect();
    let last = ends.iter().copied().fold(0.0, f64::max);
    // The flusher writes at least every 50 ms; the rest is scheduling on a busy machine.
    let flush_interval = 0.05;
    let slack = 0.25;
    eprintln!(
        "killed at t={kill_t:.3}s; the last request on disk ended at t={last:.3}s ({} requests)",
        ends.len()
    );
    assert!(
        last >= kill_t - flush_interval - slack,
        "the journal's last request ended at t={last:.3}s, but witness was killed at t={kill_t:.3}s: \
         more than the {flush_interval} s flush interval of requests was lost ({} requests on disk)",
        ends.len()
    );
    // Every request up to the last one on disk is there: the ids have no gap but at the tail.
    let mut ids: Vec<u64> = lines
        .iter()
        .filter(|l| l["kind"] == "request")
        .map(|l| l["id"].as_u64().unwrap())
        .collect();
    ids.sort_unstable();
    let gaps = ids.windows(2).filter(|w| w[1] != w[0] + 1).count();
    assert!(gaps <= 1, "{gaps} gaps in the request ids on disk");
    // And `witness report` renders it, labelled partial.
    let out = run_bounded(
        Command::new(witness()).arg("report").arg(&j),
        Duration::from_secs(10),
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("partial: journal ends at t="));
    // witness's own server died with it (its own process group, its death signal).
    let server = lines
        .iter()
        .find(|l| l["kind"] == "spawn")
        .and_then(|l| l["pid"].as_i64())
        .unwrap() as i32;
    wait_until(
        "the server to die with witness",
        Duration::from_secs(5),
        || !alive(server),
    );
}

#[test]
fn a_target_unhealthy_before_the_first_level_is_refused_with_exit_3() {
    let dir = tempdir("unhealthy");
    let r = dir.join("r.json");
    let port = free_port().to_string();
    let _server =
        Bg::start(Command::new(toy()).args(["--port", &port, "--health-fail-after", "0"]));
    wait_listening(port.parse().unwrap());
    let url = format!("http://127.0.0.1:{port}/call");
    let out = load(&["--url", &url], &r);
    assert_eq!(out.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("unhealthy before the first level"),
        "{stderr}"
    );
    assert!(stderr.contains("answered 500"), "{stderr}");
    let report = json(&r);
    assert_eq!(report["verdict"], "refused");
    assert!(levels(&report).is_empty());
}

/// Runs `witness ARGS` on a pseudo-terminal (util-linux `script`), stdout and stderr both on it, as
/// a user at a terminal sees it. None (after saying SKIPPED) without `script`; a failure with CI=true.
fn on_a_terminal(args: &[String]) -> Option<String> {
    let have_script = Command::new("script")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_script {
        assert!(
            !on_ci(),
            "CI=true but no `script` (util-linux) to give witness a terminal"
        );
        skipped("load on a terminal: no `script` command (util-linux)");
        return None;
    }
    let quote = |s: &str| format!("'{}'", s.replace('\'', "'\\''"));
    let cmd = std::iter::once(witness().display().to_string())
        .chain(args.iter().cloned())
        .map(|a| quote(&a))
        .collect::<Vec<_>>()
        .join(" ");
    let out = run_bounded(
        Command::new("script")
            .args(["-q", "-e", "-c", &cmd, "/dev/null"])
            .env("TERM", "xterm")
            .env("WITNESS_NVML_LIB", "/nonexistent/libnvidia-ml.so.1")
            .env_remove("WITNESS_FAKE_GPU"),
        Duration::from_secs(60),
    );
    Some(String::from_utf8_lossy(&out.stdout).replace('\r', ""))
}

#[test]
fn load_on_a_terminal_shows_live_progress_and_says_each_thing_once() {
    let dir = tempdir("tty");
    let port = free_port().to_string();
    let args: Vec<String> = [
        "load",
        "--url",
        &format!("http://127.0.0.1:{port}/call"),
        "--levels",
        "1,2",
        "--rounds",
        "3",
        "--settle",
        "0s",
        "--report",
        &dir.join("r.json").display().to_string(),
        "--",
        &toy().display().to_string(),
        "--port",
        &port,
        "--call",
        "sleep:400ms",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let Some(screen) = on_a_terminal(&args) else {
        return;
    };
    // Within a level (1.2 s each), the progress line: elapsed, outcomes so far, in flight.
    assert!(
        screen.contains("level 2 (n=2)") && screen.contains("in flight=2"),
        "no live progress within a level:\n{screen}"
    );
    // Each thing once: the column header, each level's row, the connect floor.
    assert_eq!(
        screen.matches("health after restarted").count(),
        1,
        "{screen}"
    );
    for n in ["1", "2"] {
        let rows = screen
            .lines()
            // The progress line is erased in place (ESC [2K) before the row is written.
            .flat_map(|l| l.split('\x1b'))
            .map(|p| p.trim_start_matches("[2K"))
            .filter(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.first() == Some(&n) && f.last() == Some(&"PASS")
            })
            .count();
        assert_eq!(rows, 1, "the row for n={n} once:\n{screen}");
    }
    assert_eq!(screen.matches("connect floor").count(), 1, "{screen}");
    assert!(screen.contains("verdict: PASS"), "{screen}");
    // No NVIDIA driver here (NVML pointed at nothing) and no --gpu on: no GPU words at all.
    assert!(!screen.to_lowercase().contains("gpu"), "{screen}");
}
