//! The fault matrix, "lying reports and data loss" half: each test provokes one fault against a real
//! process (the example server, a supervisor loop, the real witness binary) and checks what witness
//! says about it. docs/reliability.md lists each row with the test that shows it.

use crate::common;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn levels(report: &serde_json::Value) -> &Vec<serde_json::Value> {
    report["levels"].as_array().expect("levels")
}

/// `witness load --url http://127.0.0.1:PORT/call ARGS -- toy_server --port PORT SERVER…`
fn load_own(port: u16, args: &[&str], server: &[&str]) -> Command {
    let url = format!("http://127.0.0.1:{port}/call");
    let mut c = Command::new(witness());
    c.args(["load", "--url", &url])
        .args(args)
        .args(per_worker(args))
        .arg("--")
        .arg(toy())
        .args(["--port", &port.to_string()])
        .args(server);
    c
}

/// The example server's /stats, read with a plain HTTP/1.0 request.
fn stats(port: u16) -> Option<serde_json::Value> {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    c.write_all(b"GET /stats HTTP/1.0\r\n\r\n").ok()?;
    let mut text = String::new();
    c.read_to_string(&mut text).ok()?;
    serde_json::from_str(text.split("\r\n\r\n").nth(1)?).ok()
}

/// A path as an argument.
fn p(path: &Path) -> String {
    path.display().to_string()
}

fn requests(journal: &Path) -> Vec<serde_json::Value> {
    journal_lines(journal)
        .into_iter()
        .filter(|l| l["kind"] == "request")
        .collect()
}

// ---- 1. port already taken -----------------------------------------------------------------------

#[test]
fn a_port_already_taken_is_refused_naming_the_process_that_holds_it() {
    let dir = tempdir("taken");
    let r = dir.join("r.json");
    let port = free_port();
    let other = Bg::start(Command::new(toy()).args(["--port", &port.to_string()]));
    wait_listening(port);
    let out = run_bounded(
        &mut load_own(port, &["--levels", "1", "--report", &p(&r)], &[]),
        Duration::from_secs(60),
    );
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "port {port} is already in use by pid {} (",
            other.0.id()
        )),
        "{stderr}"
    );
    assert!(stderr.contains("toy_server"), "{stderr}");
    assert!(
        stderr.contains("the server witness starts could not listen there"),
        "{stderr}"
    );
    let report = json(&r);
    assert_eq!(report["verdict"], "refused");
    assert!(
        levels(&report).is_empty(),
        "the other process was not measured"
    );
    // Said before anything started: no server was spawned to fail on the taken port.
    assert!(!report["lifecycle"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["kind"] == "spawn"));
}

#[test]
fn a_started_server_that_exits_before_ready_is_refused_with_its_exit_and_last_output() {
    let dir = tempdir("early-exit");
    let r = dir.join("r.json");
    let port = free_port();
    let out = run_bounded(
        &mut load_own(
            port,
            &["--levels", "1", "--report", &p(&r)],
            &["--call", "nonsense"],
        ),
        Duration::from_secs(60),
    );
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("the server exited with 2 before it was ready"),
        "{stderr}"
    );
    assert!(
        stderr.contains("its last line: stderr 'toy_server:"),
        "{stderr}"
    );
    assert!(stderr.contains("--call"), "{stderr}");
    assert_eq!(json(&r)["verdict"], "refused");
}

#[test]
fn readiness_counts_only_a_listener_witness_started() {
    let dir = tempdir("foreign-ready");
    let (r, j) = (dir.join("r.json"), dir.join("j.jsonl"));
    let port = free_port();
    // The started server binds late; another process takes the port first and answers /health.
    let child = load_own(
        port,
        &[
            "--levels",
            "1",
            "--ready-timeout",
            "20s",
            "--journal",
            &p(&j),
            "--report",
            &p(&r),
        ],
        &["--ready-delay", "2s"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    wait_until(
        "witness to start its server",
        Duration::from_secs(20),
        || std::fs::read_to_string(&j).is_ok_and(|t| t.contains("\"kind\":\"spawn\"")),
    );
    let other = Bg::start(Command::new(toy()).args(["--port", &port.to_string()]));
    let out = wait_bounded(child, Duration::from_secs(60));
    let stderr = stderr_of(&out);
    assert_eq!(
        out.status.code(),
        Some(3),
        "measured the other process: {stderr}"
    );
    assert!(
        stderr.contains("the server exited with 1 before it was ready"),
        "{stderr}"
    );
    assert!(stderr.contains("Address already in use"), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "port {port} is already in use by pid {}",
            other.0.id()
        )),
        "{stderr}"
    );
    let report = json(&r);
    assert_eq!(report["verdict"], "refused");
    assert!(levels(&report).is_empty());
}

// ---- 2. witness's own fd limit -------------------------------------------------------------------

fn with_nofile(cmd: &mut Command, soft: u64, hard: u64) -> &mut Command {
    // Never above the test's own hard limit: only root may raise that.
    let mut mine = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut mine) };
    let hard = hard.min(mine.rlim_max);
    // SAFETY: setrlimit is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            let l = libc::rlimit {
                rlim_cur: soft,
                rlim_max: hard,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &l) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

#[test]
fn an_fd_limit_too_low_for_the_ladder_is_refused_with_the_numbers() {
    let dir = tempdir("nofile-low");
    let r = dir.join("r.json");
    let port = free_port();
    let out = run_bounded(
        with_nofile(
            &mut load_own(port, &["--levels", "1000", "--report", &p(&r)], &[]),
            256,
            256,
        ),
        Duration::from_secs(60),
    );
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("--levels up to 1000 needs about 2064 open files"),
        "{stderr}"
    );
    assert!(stderr.contains("256 (soft) / 256 (hard)"), "{stderr}");
    assert!(!r.exists(), "refused before anything ran");
}

#[test]
fn witness_raises_its_own_soft_fd_limit_so_its_emfile_never_becomes_the_server_s_error() {
    let dir = tempdir("nofile-raise");
    let r = dir.join("r.json");
    let port = free_port();
    // The server runs with the test's own (ample) limit; witness starts at a soft limit of 256 and
    // opens 300 connections: without raising it, its own EMFILE would come first.
    let _server =
        Bg::start(Command::new(toy()).args(["--port", &port.to_string(), "--call", "sleep:300ms"]));
    wait_listening(port);
    let url = format!("http://127.0.0.1:{port}/call");
    let out = run_bounded(
        with_nofile(
            Command::new(witness())
                .args(["load", "--url", &url, "--levels", "300", "--rounds", "1"])
                .args(["--settle", "0s", "--report", &p(&r)]),
            256,
            8192,
        ),
        Duration::from_secs(90),
    );
    let stderr = stderr_of(&out);
    let report = json(&r);
    let l = &levels(&report)[0];
    assert_eq!(l["counts"]["ok"], 300, "{l:#}\n{stderr}");
    assert_eq!(l["counts"]["error"], 0, "{l:#}");
    assert_eq!(l["restarted"], false, "{l:#}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}

#[test]
fn the_server_witness_starts_keeps_the_user_s_fd_limit_when_witness_raises_its_own() {
    // 100 workers need 264 descriptors of witness (over 256: raised); the server, at 256, needs ~210.
    let dir = tempdir("nofile-child");
    let j = dir.join("j.jsonl");
    let port = free_port();
    let child = with_nofile(
        &mut load_own(
            port,
            &[
                "--levels",
                "100",
                "--rounds",
                "1",
                "--settle",
                "2s",
                "--journal",
                &p(&j),
            ],
            &["--call", "sleep:100ms"],
        ),
        256,
        8192,
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let mut limits = String::new();
    wait_until(
        "the started server's limits",
        Duration::from_secs(30),
        || {
            let Some(pid) = std::fs::read_to_string(&j).ok().and_then(|t| {
                t.lines()
                    .filter_map(journal_value)
                    .find(|l| l["kind"] == "spawn")
                    .and_then(|l| l["pid"].as_u64())
            }) else {
                return false;
            };
            limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap_or_default();
            !limits.is_empty()
        },
    );
    let out = wait_bounded(child, Duration::from_secs(60));
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .to_string();
    assert_eq!(
        line.split_whitespace().nth(3),
        Some("256"),
        "the server got witness's raised limit: {line}"
    );
    assert_eq!(out.status.code(), Some(0));
}

// ---- 3. unprivileged identity --------------------------------------------------------------------

/// witness as the unprivileged user `nobody`, from a copy of the binary it may execute.
fn as_nobody(dir: &Path) -> Command {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("witness");
    std::fs::copy(witness(), &bin).unwrap();
    for p in [dir, bin.as_path()] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let mut c = Command::new(bin);
    // SAFETY: setgroups/setgid/setuid are async-signal-safe.
    unsafe {
        c.pre_exec(|| {
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(65534) != 0
                || libc::setuid(65534) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    c
}

#[test]
fn an_unprivileged_witness_says_identity_could_not_be_read_and_still_sees_restarts() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        assert!(
            !on_ci(),
            "this test runs the server as root and witness as nobody: CI runs as root"
        );
        skipped("needs root to run witness as another user than the server");
        return;
    }
    let dir = tempdir("nobody");
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
    let out = run_bounded(
        as_nobody(&dir)
            .args(["load", "--url", &url, "--rounds", "1", "--settle", "500ms"])
            .arg("--journal")
            .arg(dir.join("j.jsonl"))
            .arg("--report")
            .arg(&r),
        Duration::from_secs(90),
    );
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let report = json(&r);
    let notes = report["notes"].to_string();
    assert!(notes.contains("identity could not be read"), "{notes}");
    assert!(notes.contains("permission denied"), "{notes}");
    assert!(notes.contains("socket's inode"), "{notes}");
    let lv = levels(&report);
    assert_eq!(lv[0]["verdict"], "pass", "{:#}", lv[0]);
    for l in &lv[1..] {
        assert_eq!(
            l["restarted"], true,
            "never 'not restarted' without evidence: {l:#}"
        );
        assert_ne!(l["identity_before"], l["identity_after"]);
        assert!(l["identity_before"]["socket_inode"].is_u64(), "{l:#}");
    }
}

// ---- 4. port out of range ------------------------------------------------------------------------

#[test]
fn a_port_out_of_range_is_a_usage_error_not_port_80() {
    let dir = tempdir("port-range");
    let r = dir.join("r.json");
    let out = run_bounded(
        Command::new(witness())
            .args(["load", "--url", "http://127.0.0.1:99999/", "--report"])
            .arg(&r),
        Duration::from_secs(30),
    );
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("port 99999 is out of range"), "{stderr}");
    assert!(stderr.contains("1 to 65535"), "{stderr}");
    assert!(!r.exists());
}

// ---- 5. a killed run's report --------------------------------------------------------------------

#[test]
fn a_killed_run_s_report_is_partial_never_pass_and_lists_the_levels_not_run() {
    let dir = tempdir("killed");
    let (r, j) = (dir.join("r.json"), dir.join("j.jsonl"));
    let port = free_port();
    let child = load_own(
        port,
        &[
            "--levels",
            "1,4,8",
            "--settle",
            "5s",
            "--journal",
            &p(&j),
            "--report",
            &p(&r),
        ],
        &["--call", "sleep:100ms"],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    // The report is rewritten after each level: kill witness once the first level's is there.
    wait_until("the first level's report", Duration::from_secs(30), || {
        std::fs::read_to_string(&r)
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .is_some_and(|v| v["levels"].as_array().is_some_and(|l| !l.is_empty()))
    });
    kill(child.id() as i32, 9);
    let _ = wait_bounded(child, Duration::from_secs(10));
    let report = json(&r);
    assert_eq!(report["partial"], true);
    assert_eq!(report["verdict"], "partial", "{report:#}");
    assert_eq!(report["levels_not_run"], serde_json::json!([4, 8]));
    assert_eq!(levels(&report)[0]["verdict"], "pass");
    // The re-render from the journal says the same.
    let out = run_bounded(
        Command::new(witness())
            .args(["report", "--format", "json"])
            .arg(&j),
        Duration::from_secs(30),
    );
    let again: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(again["verdict"], "partial", "{again:#}");
    // The journal may hold the start of level 4 (it began right after the report was written).
    let not_run = again["levels_not_run"].as_array().unwrap();
    assert_eq!(not_run.last(), Some(&serde_json::json!(8)), "{again:#}");
}

// ---- 6. unexpected 3xx ---------------------------------------------------------------------------

#[test]
fn a_server_redirecting_every_call_fails_unless_the_status_is_accepted() {
    let dir = tempdir("redirect");
    let r = dir.join("r.json");
    let out = run_bounded(
        &mut load_own(
            free_port(),
            &["--levels", "1,2", "--settle", "0s", "--report", &p(&r)],
            &["--call", "redirect"],
        ),
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));
    let report = json(&r);
    assert_eq!(report["verdict"], "fail");
    let l = &levels(&report)[0];
    assert_eq!(l["counts"]["ok"], 0, "{l:#}");
    assert_eq!(l["errors_by_kind"]["error: HTTP redirect 302"], 1, "{l:#}");

    let r2 = dir.join("r2.json");
    let out = run_bounded(
        &mut load_own(
            free_port(),
            &[
                "--levels",
                "1,2",
                "--settle",
                "0s",
                "--accept-status",
                "301,302",
                "--report",
                &p(&r2),
            ],
            &["--call", "redirect"],
        ),
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(json(&r2)["verdict"], "pass");
}

// ---- 7. SIGINT during a level --------------------------------------------------------------------

#[test]
fn sigint_during_a_level_is_interrupted_not_fail_and_the_request_in_flight_is_journalled() {
    let dir = tempdir("sigint");
    let (r, j) = (dir.join("r.json"), dir.join("j.jsonl"));
    let port = free_port();
    let child = load_own(
        port,
        &[
            "--levels",
            "2",
            "--timeout",
            "60s",
            "--journal",
            &p(&j),
            "--report",
            &p(&r),
        ],
        &["--call", "hang"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    wait_until(
        "both requests in flight at the server",
        Duration::from_secs(30),
        || stats(port).is_some_and(|s| s["in_flight"] == 2),
    );
    kill(child.id() as i32, 2);
    let out = wait_bounded(child, Duration::from_secs(30));
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("verdict: INTERRUPTED"), "{stderr}");
    // stdout, where a script reads the levels, has the interrupted level too, as the report does.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let row = stdout
        .lines()
        .find(|l| l.split_whitespace().next() == Some("2"))
        .unwrap_or_else(|| panic!("no row for level 2 on stdout:\n{stdout}"));
    assert!(row.contains("INTERRUPTED"), "{row}");
    let report = json(&r);
    assert_eq!(report["verdict"], "interrupted");
    let l = &levels(&report)[0];
    assert_eq!(l["verdict"], "interrupted", "{l:#}");
    assert_eq!(l["counts"]["interrupted"], 2, "{l:#}");
    assert_eq!(l["counts"]["error"], 0, "{l:#}");
    assert!(
        l["latency"].is_null(),
        "an interrupted request is not latency"
    );
    let reqs = requests(&j);
    assert_eq!(reqs.len(), 2);
    for q in reqs {
        assert_eq!(q["outcome"]["error"], "interrupted", "{q}");
    }
}

// ---- 8. disk full --------------------------------------------------------------------------------

/// A file-size limit makes the journal's writes fail mid-run (EFBIG), as a full disk would (ENOSPC):
/// the same failed write(2), without root or a mount.
fn with_file_limit(cmd: &mut Command, bytes: u64) -> &mut Command {
    // SAFETY: signal and setrlimit are async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            // Ignored, so the write fails with EFBIG instead of the signal killing the process.
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let l = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &l) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// Events a load may still produce once its journal failed: the 4 workers' requests in flight, the
/// level's end, health and samples taken meanwhile, the notes and the end — 10 here, and room for
/// a slow machine to notice late (the toy server answers ~10 k requests a second: 1 000 is a
/// tenth of a second of going on, where the minute would be 600 k).
const LOST_AT_MOST: u64 = 1_000;
/// The same for the soak, whose plan sends ~20 requests a second: 100 is five seconds of it (6
/// here; the whole minute would be 1 300).
const SOAK_LOST_AT_MOST: u64 = 100;

/// "N event(s) after that point were not written", as the run says it: at most `bound`.
fn lost_at_most(stderr: &str, bound: u64) {
    let lost: u64 = stderr
        .split(" event(s) after that point were not written")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("how many events were lost: {stderr}"));
    eprintln!("{lost} event(s) lost after the journal failed");
    assert!(
        lost <= bound,
        "{lost} events after the journal failed: the run went on\n{stderr}"
    );
}

#[test]
fn a_journal_that_cannot_be_written_stops_the_load_at_once_with_exit_4() {
    let dir = tempdir("journal-full");
    let (r, j) = (dir.join("r.json"), dir.join("j.jsonl"));
    let port = free_port();
    // A minute of load if witness went on after the journal failed (tens of thousands of requests
    // against the toy server): what it says it could not write shows whether it stopped. The
    // time limit is only there so a hang cannot hold the suite.
    let out = run_bounded(
        with_file_limit(
            &mut load_own(
                port,
                &[
                    "--levels",
                    "4",
                    "--duration",
                    "60s",
                    "--journal",
                    &p(&j),
                    "--report",
                    &p(&r),
                ],
                &[],
            ),
            64 * 1024,
        ),
        Duration::from_secs(120),
    );
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("writing the journal"), "{stderr}");
    assert!(stderr.contains("is incomplete"), "{stderr}");
    // "N event(s) after that point were not written": what was in flight as it failed and the
    // run's end, where going on for the minute would be hundreds of thousands.
    lost_at_most(&stderr, LOST_AT_MOST);
    assert!(stderr.contains("the run stopped at once"), "{stderr}");
    let text = std::fs::read_to_string(&j).unwrap();
    assert!(text.len() <= 64 * 1024);
    // The server witness started was stopped: its stop signal is the last thing it got, and no
    // toy_server on that port is left.
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the server was left running"
    );
}

#[test]
fn a_journal_that_cannot_be_written_stops_a_soak_at_once_with_exit_4() {
    let dir = tempdir("soak-full");
    let (r, j) = (dir.join("r.json"), dir.join("j.jsonl"));
    let port = free_port().to_string();
    // A minute of soak if witness went on after the journal failed: what it says it could not
    // write shows whether it stopped (the time limit only keeps a hang from holding the suite).
    let out = run_bounded(
        with_file_limit(
            Command::new(witness())
                .args(["soak", "--plan"])
                .arg(repo().join("examples/plans/quick.toml"))
                .args(["--duration", "60s", "--gpu", "off"])
                .args(["--base-url", &format!("http://127.0.0.1:{port}")])
                .args(["--journal", &p(&j), "--report", &p(&r)])
                .arg("--")
                .arg(toy())
                .args(["--port", &port]),
            16 * 1024,
        ),
        Duration::from_secs(120),
    );
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("is incomplete"), "{stderr}");
    lost_at_most(&stderr, SOAK_LOST_AT_MOST);
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port.parse::<u16>().unwrap())).is_err(),
        "the server was left running"
    );
}

#[test]
fn wrap_keeps_the_child_s_output_and_exit_code_when_the_journal_cannot_be_written() {
    let dir = tempdir("wrap-full");
    let j = dir.join("j.jsonl");
    let out = run_bounded(
        with_file_limit(
            Command::new(witness())
                .args(["wrap", "--watch", "line=line-", "--journal"])
                .arg(&j)
                .args([
                    "--",
                    "sh",
                    "-c",
                    "i=0; while [ $i -lt 500 ]; do i=$((i+1)); echo line-$i-padding-to-fill-the-journal; done; exit 7",
                ]),
            16 * 1024,
        ),
        Duration::from_secs(60),
    );
    let stderr = stderr_of(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(7), "{stderr}");
    // 500 lines of output (under a pipe's buffer: the test reads it at the end) make ~75 KiB of
    // journal, past the 16 KiB limit.
    assert!(stdout.contains("line-500-"), "every line passed through");
    assert!(stderr.contains("is incomplete"), "{stderr}");
    assert!(stderr.contains("exit status 7 is kept"), "{stderr}");
}

// ---- 9. outputs that collide or cannot be written ------------------------------------------------

#[test]
fn outputs_that_name_one_file_or_cannot_be_written_are_refused_before_anything_runs() {
    let dir = tempdir("collide");
    let x = dir.join("x.jsonl");
    let port = free_port();
    let out = run_bounded(
        &mut load_own(
            port,
            &[
                "--levels",
                "1",
                "--journal",
                &p(&x),
                "--report",
                &p(&dir.join(".").join("x.jsonl")),
            ],
            &[],
        ),
        Duration::from_secs(30),
    );
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("name the same file"), "{stderr}");
    assert!(stderr.contains("--report"), "{stderr}");
    assert!(!x.exists(), "nothing ran, nothing was written");

    let out = run_bounded(
        &mut load_own(
            port,
            &["--levels", "1", "--html", "/proc/witness-timeline.html"],
            &[],
        ),
        Duration::from_secs(30),
    );
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--html /proc/witness-timeline.html: cannot be written"),
        "{stderr}"
    );

    let out = run_bounded(
        &mut load_own(port, &["--levels", "1", "--journal", &p(&dir)], &[]),
        Duration::from_secs(30),
    );
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("is a folder"), "{stderr}");
}

// ---- 10. huge and stalled bodies -----------------------------------------------------------------

/// Peak resident memory of a running process (VmHWM), in bytes.
fn peak_rss(pid: u32) -> Option<u64> {
    let st = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 = st
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb * 1024)
}

#[test]
fn a_huge_body_is_read_streaming_counted_whole_and_kept_only_as_a_prefix() {
    let dir = tempdir("huge");
    let (r, j) = (dir.join("r.json"), dir.join("j.jsonl"));
    let size: u64 = 512 * 1024 * 1024;
    let mut child = load_own(
        free_port(),
        &[
            "--levels",
            "1",
            "--rounds",
            "2",
            "--settle",
            "0s",
            "--max-body",
            "1MiB",
            "--journal",
            &p(&j),
            "--report",
            &p(&r),
        ],
        &["--call", "big:512m"],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let pid = child.id();
    let mut peak = 0;
    wait_until("witness to finish", Duration::from_secs(120), || {
        if let Some(p) = peak_rss(pid) {
            peak = peak.max(p);
        }
        child.try_wait().unwrap().is_some()
    });
    assert_eq!(child.wait().unwrap().code(), Some(0));
    assert!(
        peak < size / 4,
        "witness held {peak} bytes for a {size}-byte body"
    );
    let reqs = requests(&j);
    assert_eq!(reqs.len(), 2);
    for q in &reqs {
        assert_eq!(q["outcome"]["kind"], "ok", "{q}");
        assert_eq!(q["body_bytes"], size, "{q}");
        assert_eq!(q["body_cut"], true, "{q}");
    }
}

#[test]
fn a_body_that_stalls_after_the_status_is_a_timeout_that_keeps_the_status() {
    let dir = tempdir("stall-body");
    let j = dir.join("j.jsonl");
    let out = run_bounded(
        &mut load_own(
            free_port(),
            &[
                "--levels",
                "1",
                "--timeout",
                "1s",
                "--settle",
                "0s",
                "--journal",
                &p(&j),
            ],
            &["--call", "stall-body"],
        ),
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));
    let reqs = requests(&j);
    assert_eq!(reqs.len(), 1);
    let q = &reqs[0];
    assert_eq!(q["outcome"]["kind"], "timeout", "{q}");
    assert_eq!(q["status"], 200, "{q}");
    assert_eq!(q["body_bytes"], 10, "{q}");
    assert!(
        q["detail"]
            .as_str()
            .unwrap()
            .contains("status 200 arrived, then the body stalled after 10 bytes"),
        "{q}"
    );
}
