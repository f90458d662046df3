//! `witness wrap` against real children: exit meanings, watchdog lines, timer suspicions, restarts,
//! signal forwarding, kill -9 of witness, and transparency of the output.

use crate::common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn lifecycle_of<'a>(report: &'a serde_json::Value, kind: &str) -> Vec<&'a serde_json::Value> {
    report["lifecycle"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == kind)
        .collect()
}

#[test]
fn a_watchdog_exit_124_is_labelled_explained_and_suspected() {
    let dir = tempdir("wd");
    let (j, r) = (dir.join("j.jsonl"), dir.join("r.json"));
    let port = free_port();
    let out = run_bounded(
        Command::new(witness())
            .args(["wrap", "--journal"])
            .arg(&j)
            .arg("--report")
            .arg(&r)
            .arg("--")
            .arg(toy())
            .args(["--port", &port.to_string(), "--watchdog", "3s"]),
        Duration::from_secs(20),
    );
    assert_eq!(
        out.status.code(),
        Some(124),
        "witness exits with the child's code"
    );
    let report = json(&r);
    let logs = lifecycle_of(&report, "log");
    assert_eq!(logs.len(), 1, "{report:#}");
    assert_eq!(logs[0]["label"], "watchdog");
    assert!(logs[0]["line"]
        .as_str()
        .unwrap()
        .contains("process watchdog: force-exiting after 3s"));
    let exits = lifecycle_of(&report, "exit");
    assert_eq!(exits[0]["code"], 124);
    assert!(exits[0]["signal"].is_null());
    assert!(exits[0]["meaning"]
        .as_str()
        .unwrap()
        .contains("timeout or watchdog"));
    let age = exits[0]["age_s"].as_f64().unwrap();
    assert!((2.9..3.6).contains(&age), "age {age}");
    let s = &report["suspicions"][0];
    assert_eq!(s["kind"], "round_timer");
    assert_eq!(s["subject"], "process_exit");
    assert_eq!(s["timer_s"], 3.0);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("at the 3s timer named in its log line"),
        "{stderr}"
    );
    // The journal is the same story, line by line.
    let lines = journal_lines(&j);
    assert_eq!(lines[0]["kind"], "header");
    assert!(lines
        .iter()
        .any(|l| l["kind"] == "exit" && l["code"] == 124));
}

#[test]
fn death_by_sigalrm_is_named_and_exits_142() {
    let dir = tempdir("alrm");
    let r = dir.join("r.json");
    let out = run_bounded(
        Command::new(witness())
            .args(["wrap", "--report"])
            .arg(&r)
            .arg("--")
            .arg(toy())
            .args(["--port", &free_port().to_string(), "--alarm", "2"]),
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(142));
    let report = json(&r);
    let exit = lifecycle_of(&report, "exit")[0];
    assert_eq!(exit["signal"], "SIGALRM");
    assert!(exit["code"].is_null());
    assert!(
        lifecycle_of(&report, "log").is_empty(),
        "no log line was printed"
    );
    assert_eq!(report["suspicions"][0]["timer_s"], 2.0);
    assert_eq!(report["suspicions"][0]["timer_source"], "evidence");
    let d = report["suspicions"][0]["detail"].as_str().unwrap();
    assert!(
        d.contains("killed by SIGALRM: a timer of its own expired"),
        "{d}"
    );
}

#[test]
fn restart_always_counts_restarts_and_backs_off() {
    let dir = tempdir("restart");
    let r = dir.join("r.json");
    let out = run_bounded(
        Command::new(witness())
            .args([
                "wrap",
                "--restart",
                "always",
                "--max-restarts",
                "3",
                "--backoff",
                "200ms",
                "--report",
            ])
            .arg(&r)
            .args(["--", "sh", "-c", "sleep 1; exit 3"]),
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(3));
    let report = json(&r);
    assert_eq!(report["restarts"], 3);
    let spawns: Vec<f64> = lifecycle_of(&report, "spawn")
        .iter()
        .map(|e| e["t_s"].as_f64().unwrap())
        .collect();
    let exits: Vec<f64> = lifecycle_of(&report, "exit")
        .iter()
        .map(|e| e["t_s"].as_f64().unwrap())
        .collect();
    assert_eq!((spawns.len(), exits.len()), (4, 4));
    // The wait between an exit and the next spawn doubles: 0.2 s, 0.4 s, 0.8 s.
    let gaps: Vec<f64> = (0..3).map(|i| spawns[i + 1] - exits[i]).collect();
    assert!((0.15..0.45).contains(&gaps[0]), "{gaps:?}");
    assert!(
        gaps[1] > gaps[0] * 1.5 && gaps[2] > gaps[1] * 1.5,
        "{gaps:?}"
    );
}

#[test]
fn sigterm_to_witness_is_forwarded_and_no_grandchild_survives() {
    let dir = tempdir("term");
    let pidfile = dir.join("grandchild.pid");
    let record = dir.join("grandchild.signal");
    // The grandchild records the signal it got: TERM proves the *group* was signalled; a grandchild
    // that dies of the clean-up SIGKILL after its parent writes nothing. It writes its own pid once
    // its trap is set (its parent writing `$!` raced it: a SIGTERM before the trap killed it mute).
    let script = format!(
        "sh -c 'trap \"echo TERM > {rec}; exit 0\" TERM; echo $$ > {pid}; while :; do sleep 0.05; done' & wait",
        rec = record.display(),
        pid = pidfile.display()
    );
    let child = Command::new(witness())
        .args(["wrap", "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the grandchild's pid", Duration::from_secs(10), || {
        std::fs::read_to_string(&pidfile).is_ok_and(|s| s.ends_with('\n'))
    });
    let grandchild: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(grandchild));
    kill(child.id() as i32, 15);
    let out = wait_bounded(child, Duration::from_secs(15));
    assert_eq!(
        out.status.code(),
        Some(143),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until("the grandchild to be gone", Duration::from_secs(2), || {
        !alive(grandchild)
    });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("sent SIGTERM to process group"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(&record).unwrap_or_default().trim(),
        "TERM",
        "the grandchild itself received SIGTERM (not only the clean-up SIGKILL); witness said:\n{stderr}"
    );
}

#[test]
fn a_chatty_child_passed_through_cannot_hang_the_test_harness() {
    // 4 MB through witness's stdout: far more than a pipe holds, so a harness that reads the output
    // only after the exit would wait forever on a witness blocked writing it.
    let out = run_bounded(
        Command::new(witness())
            .args(["wrap", "--"])
            .arg(spew())
            .args(["--long-line", "0", "--lines", "4m"]),
        Duration::from_secs(60),
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout.len(), 4 << 20, "every byte passed through");
}

#[test]
fn kill_9_of_witness_takes_the_child_down_and_the_journal_still_parses() {
    let dir = tempdir("kill9");
    let j = dir.join("j.jsonl");
    let port = free_port();
    let child = Command::new(witness())
        .args(["wrap", "--journal"])
        .arg(&j)
        .arg("--")
        .arg(toy())
        .args(["--port", &port.to_string(), "--access-log"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // A failed wait below must not leave witness and its server running.
    let _guard = KillTree::new(child.id() as i32);
    wait_listening(port);
    // The spawn is a lifecycle event, flushed as it is written; witness writes it a moment after
    // the fork, which a busy machine may stretch past the server's first listen.
    let spawned = || {
        journal_lines(&j)
            .iter()
            .find(|l| l["kind"] == "spawn")
            .map(|l| l["pid"].as_i64().unwrap() as i32)
    };
    wait_until("the spawn to be journalled", Duration::from_secs(5), || {
        spawned().is_some()
    });
    let server = spawned().expect("the spawn is journalled");
    assert!(alive(server));
    kill(child.id() as i32, 9);
    let _ = wait_bounded(child, Duration::from_secs(5));
    let t = Instant::now();
    wait_until(
        "the server to die with witness",
        Duration::from_secs(1),
        || !alive(server),
    );
    assert!(t.elapsed() < Duration::from_secs(1));
    let lines = journal_lines(&j);
    assert_eq!(lines[0]["kind"], "header");
    // `witness report` labels the cut-off run partial.
    let out = run_bounded(
        Command::new(witness()).arg("report").arg(&j),
        Duration::from_secs(10),
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("partial: journal ends at t="));
}

#[test]
fn output_passes_through_unchanged_including_a_last_line_without_newline() {
    let out = run_bounded(
        Command::new(witness()).args([
            "wrap",
            "--",
            "sh",
            "-c",
            r"printf 'one\ntwo\377 bytes\nno newline'; printf 'to stderr\n' >&2",
        ]),
        Duration::from_secs(10),
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(out.stdout, b"one\ntwo\xff bytes\nno newline");
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("to stderr\n"));
}

#[test]
fn a_bad_watch_pattern_is_a_usage_error_naming_it() {
    let out = run_bounded(
        Command::new(witness()).args(["wrap", "--watch", "lease=(unclosed", "--", "true"]),
        Duration::from_secs(10),
    );
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("--watch \"lease=(unclosed\" is not a valid regular expression"),
        "{e}"
    );
}

#[test]
fn a_missing_command_exits_127_like_a_shell() {
    let out = run_bounded(
        Command::new(witness()).args(["wrap", "--", "/nonexistent/server"]),
        Duration::from_secs(10),
    );
    assert_eq!(out.status.code(), Some(127));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("could not start \"/nonexistent/server\"")
    );
}

#[test]
fn a_matched_line_names_a_known_timer_and_user_patterns_are_labelled() {
    let dir = tempdir("watch");
    let r = dir.join("r.json");
    let out = run_bounded(
        Command::new(witness())
            .args(["wrap", "--watch", "lease=lease lost", "--report"])
            .arg(&r)
            .args([
                "--",
                "sh",
                "-c",
                "echo 'lease lost'; echo 'request timeout=30' >&2",
            ]),
        Duration::from_secs(10),
    );
    assert_eq!(out.status.code(), Some(0));
    let report = json(&r);
    let logs = lifecycle_of(&report, "log");
    let lease = logs
        .iter()
        .find(|l| l["label"] == "lease")
        .expect("user label");
    assert_eq!(lease["stream"], "stdout");
    let t = logs
        .iter()
        .find(|l| l["label"] == "timeout")
        .expect("built-in timeout label");
    assert_eq!(t["timer_s"], 30.0);
}

#[test]
fn a_grandchild_holding_the_pipes_is_reported_as_a_leak_and_does_not_outlive_the_child() {
    let dir = tempdir("leak");
    let r = dir.join("r.json");
    let pidfile = dir.join("gc.pid");
    let script = format!("sleep 300 & echo $! > {}; exit 0", pidfile.display());
    let out = run_bounded(
        Command::new(witness())
            .args(["wrap", "--report"])
            .arg(&r)
            .args(["--", "sh", "-c", &script]),
        Duration::from_secs(15),
    );
    assert_eq!(out.status.code(), Some(0));
    let report = json(&r);
    let leaks = lifecycle_of(&report, "leak");
    assert_eq!(leaks.len(), 1, "{report:#}");
    assert!(leaks[0]["detail"]
        .as_str()
        .unwrap()
        .contains("output pipes stay open"));
    let gc: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    wait_until(
        "the grandchild to be cleared",
        Duration::from_secs(2),
        || !alive(gc),
    );
}

#[test]
fn a_second_ctrl_c_kills_a_child_that_ignores_the_first_at_once() {
    let dir = tempdir("int2");
    let (ready, j) = (dir.join("ready"), dir.join("j.jsonl"));
    let script = format!("trap '' INT; touch {}; sleep 60", ready.display());
    let child = Command::new(witness())
        .args(["wrap", "--grace", "30s", "--journal"])
        .arg(&j)
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until(
        "the child to ignore SIGINT",
        Duration::from_secs(10),
        || ready.exists(),
    );
    kill(child.id() as i32, 2);
    wait_until(
        "the first SIGINT to be forwarded",
        Duration::from_secs(5),
        || std::fs::read_to_string(&j).is_ok_and(|t| t.contains("\"signal\":\"SIGINT\"")),
    );
    kill(child.id() as i32, 2);
    let t = Instant::now();
    let out = wait_bounded(child, Duration::from_secs(10));
    assert!(t.elapsed() < Duration::from_secs(5), "not the 30 s grace");
    assert_eq!(
        out.status.code(),
        Some(137),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("asked twice to stop"));
}

/// `--stdin auto` hands /dev/null over as it is (no client can be behind it: nothing is relayed,
/// and the end is not blamed on a client closing its stdin), and relays a pipe.
#[test]
fn stdin_from_dev_null_is_handed_over_and_a_pipe_is_relayed() {
    let dir = tempdir("stdin-null");
    let script = "readlink /proc/self/fd/0; cat; echo done";
    let run = |stdin: Stdio, j: &std::path::Path| {
        let child = Command::new(witness())
            .args(["wrap", "--journal"])
            .arg(j)
            .args(["--", "sh", "-c", script])
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_bounded(child, Duration::from_secs(20))
    };
    let null = run(Stdio::null(), &dir.join("null.jsonl"));
    let (out, err) = (
        String::from_utf8_lossy(&null.stdout).to_string(),
        String::from_utf8_lossy(&null.stderr).to_string(),
    );
    assert_eq!(null.status.code(), Some(0), "{err}");
    assert_eq!(
        out, "/dev/null\ndone\n",
        "the child's stdin is witness's /dev/null\n{err}"
    );
    assert!(!err.contains("client closed its stdin"), "{err}");
    assert!(err.contains("run ends: the server exited with 0"), "{err}");
    // A pipe (what an MCP client gives): relayed, so the child reads a pipe of witness's.
    let (r, mut w) = std::io::pipe().unwrap();
    std::io::Write::write_all(
        &mut w,
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n",
    )
    .unwrap();
    drop(w);
    let piped = run(Stdio::from(r), &dir.join("pipe.jsonl"));
    let out = String::from_utf8_lossy(&piped.stdout).to_string();
    assert!(
        out.starts_with("pipe:[") && out.ends_with("\ndone\n"),
        "{out}"
    );
    // The relay saw the client's ping and EOF (journalled whichever came first, it or the exit);
    // with /dev/null there was no client to see.
    let closed = |j: &str| {
        std::fs::read_to_string(dir.join(j))
            .unwrap()
            .contains("the client closed its stdin")
    };
    assert!(
        closed("pipe.jsonl"),
        "{}",
        String::from_utf8_lossy(&piped.stderr)
    );
    assert!(!closed("null.jsonl"));
    let _ = std::fs::remove_dir_all(&dir);
}
