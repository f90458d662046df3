//! witness in CI (issue 42): thresholds a team writes down (`--assert`, a soak plan's `asserts`)
//! judged from the run's own figures beside witness's rules, a JUnit report read by a JUnit parser
//! nobody here wrote (PyPI junitparser), and the GitHub Actions step summary. Real servers:
//! Python's http.server and the example toy_server.

use crate::common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::*;
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(90);

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `witness load` of `server` (listening on `port`) with `args`, its JSON report and JUnit XML in
/// `dir`.
fn load(dir: &Path, port: u16, path: &str, args: &[&str], server: &[&str]) -> (Output, Value) {
    let report = dir.join("r.json");
    let out = run_bounded(
        Command::new(witness())
            .args(["load", "--url", &format!("http://127.0.0.1:{port}{path}")])
            .args(["--settle", "50ms", "--gpu", "off", "--report"])
            .arg(&report)
            .arg("--junit")
            .arg(dir.join("r.xml"))
            .arg("--journal")
            .arg(dir.join("j.jsonl"))
            .env("GITHUB_STEP_SUMMARY", dir.join("summary.md"))
            .args(args)
            .arg("--")
            .args(server),
        LIMIT,
    );
    (out, json(&report))
}

/// examples/plans/quick.toml with `asserts = LIST` (TOML), in a folder of its own.
fn quick_plan_with(tag: &str, list: &str) -> std::path::PathBuf {
    let plan = tempdir(tag).join("p.toml");
    let text = std::fs::read_to_string(repo().join("examples/plans/quick.toml"))
        .unwrap()
        .replacen("duration = ", &format!("asserts = {list}\nduration = "), 1);
    std::fs::write(&plan, text).unwrap();
    plan
}

fn judged<'a>(r: &'a Value, expr: &str) -> &'a Value {
    r["asserts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["expr"] == expr)
        .unwrap_or_else(|| panic!("no {expr} in {:#}", r["asserts"]))
}

/// The test cases a JUnit parser nobody here wrote reads from `xml`: "NAME\tRESULT\tMESSAGE" each.
pub(crate) fn junit_cases(xml: &Path) -> Vec<(String, String, String)> {
    let script = r#"
import sys
from junitparser import JUnitXml
for suite in JUnitXml.fromfile(sys.argv[1]):
    for case in suite:
        kind = case.result[0].__class__.__name__ if case.result else "Passed"
        msg = case.result[0].message if case.result else ""
        print(f"{case.name}\t{kind}\t{msg}")
"#;
    let out = run_bounded(
        Command::new("python3")
            .args(["-c", script])
            .arg(xml)
            .stderr(Stdio::piped()),
        LIMIT,
    );
    assert!(out.status.success(), "junitparser: {}", text(&out.stderr));
    text(&out.stdout)
        .lines()
        .map(|l| {
            let mut p = l.splitn(3, '\t');
            (
                p.next().unwrap_or_default().to_string(),
                p.next().unwrap_or_default().to_string(),
                p.next().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// Python's http.server: thresholds its figures meet hold (exit 0); one it cannot meet (a p50 under
/// a microsecond) breaks, says what it measured and where, and fails the run (exit 1) with
/// witness's own verdict still PASS; JUnit has a case per level and per threshold.
#[test]
fn thresholds_pass_and_fail_as_their_figures_say_on_python_s_http_server() {
    if !have("python3", "python3 -c 'import junitparser, http.server'") {
        return;
    }
    let dir = tempdir("ci-http-server");
    let port = free_port();
    let server = [
        "python3",
        "-m",
        "http.server",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
    ];
    let held = [
        "error_rate == 0%",
        "restarts == 0",
        "timers == 0",
        "p50@2 < 5s",
    ];
    let mut args = vec!["--levels", "1,2", "--rounds", "5"];
    for a in held {
        args.extend(["--assert", a]);
    }
    let (out, r) = load(&dir, port, "/", &args, &server);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    for a in held {
        assert_eq!(judged(&r, a)["ok"], true, "{a}: {:#}", r["asserts"]);
    }
    assert!(err.contains("✓ p50@2 < 5s: "), "{err}");
    assert!(err.contains("thresholds: all 4 held"), "{err}");
    assert_eq!(
        r["witness_exit_code"], 0,
        "witness's own code, beside the server's"
    );

    let dir = tempdir("ci-http-server-broken");
    let port = free_port();
    let server = [
        "python3",
        "-m",
        "http.server",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
    ];
    let (out, r) = load(
        &dir,
        port,
        "/",
        &[
            "--levels",
            "1,2",
            "--rounds",
            "5",
            "--assert",
            "p50 < 1us",
            "--assert",
            "restarts == 0",
        ],
        &server,
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(r["verdict"], "pass", "witness's own rules still pass");
    assert_eq!(
        r["witness_exit_code"], 1,
        "a broken threshold fails the run"
    );
    let broken = judged(&r, "p50 < 1us");
    assert_eq!(broken["ok"], false);
    assert!(broken["value"].as_f64().unwrap() > 1e-6, "{broken}");
    assert!(err.contains("✗ p50 < 1us: "), "{err}");
    assert!(
        err.contains("thresholds: 1 of 2 broken: the run fails (exit 1)"),
        "{err}"
    );
    // A JUnit parser nobody here wrote: a case per level and per threshold, the broken one failed
    // with the summary's words.
    let cases = junit_cases(&dir.join("r.xml"));
    let names: Vec<&str> = cases.iter().map(|c| c.0.as_str()).collect();
    assert_eq!(
        names,
        [
            "level 1",
            "level 2",
            "assert p50 < 1us",
            "assert restarts == 0"
        ],
        "{cases:?}"
    );
    assert_eq!(cases[0].1, "Passed");
    assert_eq!(cases[2].1, "Failure", "{cases:?}");
    assert!(cases[2].2.starts_with("✗ p50 < 1us: "), "{cases:?}");
    assert_eq!(cases[3].1, "Passed");
    // The step summary a GitHub Actions job shows.
    let md = std::fs::read_to_string(dir.join("summary.md")).unwrap();
    assert!(
        md.starts_with("## witness load: PASS, 1 threshold(s) broken"),
        "{md}"
    );
    assert!(md.contains("- ✗ p50 < 1us: "), "{md}");
    // `witness report` of the journal judges them again, the same way.
    let again = run_bounded(
        Command::new(witness())
            .args(["report", "--format", "json"])
            .arg(dir.join("j.jsonl")),
        LIMIT,
    );
    let again: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(again["asserts"], r["asserts"]);
}

/// toy_server's serialising lock: at 4 workers each call waits for the others, so a bound that
/// holds at 1 breaks at 4, named at that level, with its figure.
#[test]
fn a_threshold_on_a_level_breaks_where_the_lock_queues_calls() {
    let dir = tempdir("ci-lock");
    let port = free_port();
    let p = port.to_string();
    let (out, r) = load(
        &dir,
        port,
        "/call",
        &[
            "--levels",
            "1,4",
            "--rounds",
            "5",
            "--assert",
            "p50@1 < 150ms",
            "--assert",
            "max@4 < 150ms",
            "--assert",
            "p99@4 < 10s",
        ],
        &[
            toy().to_str().unwrap(),
            "--port",
            &p,
            "--call",
            "lock:100ms",
        ],
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let at1 = judged(&r, "p50@1 < 150ms");
    assert_eq!(at1["ok"], true, "{at1}");
    assert_eq!(at1["at"], "level 1");
    let at4 = judged(&r, "max@4 < 150ms");
    assert_eq!(at4["ok"], false, "{at4}");
    assert!(
        at4["value"].as_f64().unwrap() >= 0.3,
        "4 calls queue on a 100 ms lock: {at4}"
    );
    assert!(err.contains("✗ max@4 < 150ms: "), "{err}");
    // Twenty requests are no p99: the threshold fails saying so, rather than pass on a figure that
    // is not there.
    let few = judged(&r, "p99@4 < 10s");
    assert_eq!(few["ok"], false, "{few}");
    assert_eq!(few["measured"], "too few requests for a p99 (n=20)");
}

/// `--assert-abort`: the run stops after the first level whose figures break a threshold, the
/// levels after it not run and the run labelled partial; a threshold broken only by too few
/// requests, or one scoped to a level still to come, does not stop it.
#[test]
fn assert_abort_stops_after_the_first_level_that_breaks_a_threshold() {
    let dir = tempdir("ci-abort");
    let port = free_port();
    let p = port.to_string();
    let toy = toy();
    let server = [toy.to_str().unwrap(), "--port", &p, "--call", "lock:40ms"];
    let (out, r) = load(
        &dir,
        port,
        "/call",
        &[
            "--levels",
            "1,4,8",
            "--rounds",
            "4",
            "--assert",
            "p50@4 < 50ms",
            "--assert",
            "p99 < 1ms",
            "--assert",
            "p50@8 < 10s",
            "--assert-abort",
        ],
        &server,
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    // Level 1 (p99 from 4 requests: too few, no value) went on; level 4 broke p50@4.
    let names: Vec<&Value> = r["levels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| &l["concurrency"])
        .collect();
    assert_eq!(names, [1, 4], "{r:#}");
    assert_eq!(r["levels_not_run"], serde_json::json!([8]));
    assert_eq!(r["verdict"], "partial", "{r:#}");
    assert!(
        r["partial_reason"]
            .as_str()
            .unwrap()
            .contains("stopped after level 4 (--assert-abort): a threshold broken: ✗ p50@4 < 50ms"),
        "{}",
        r["partial_reason"]
    );
    assert!(
        err.contains("witness: stopped after level 4 (--assert-abort)"),
        "{err}"
    );
    assert_eq!(judged(&r, "p50@4 < 50ms")["ok"], false);
    // A threshold on a level never run is not said to hold.
    assert_eq!(judged(&r, "p50@8 < 10s")["ok"], false);
    // Without a broken one, every level runs.
    let port = free_port();
    let p = port.to_string();
    let (out, r) = load(
        &tempdir("ci-abort-held"),
        port,
        "/call",
        &[
            "--levels",
            "1,4",
            "--rounds",
            "3",
            "--assert",
            "p50 < 10s",
            "--assert-abort",
        ],
        &[toy.to_str().unwrap(), "--port", &p],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(r["verdict"], "pass");
    assert_eq!(r["levels"].as_array().unwrap().len(), 2);
}

/// A typo is refused before anything runs (exit 2), with the grammar's fix; so is one in a soak
/// plan, naming where.
#[test]
fn a_typo_in_a_threshold_is_refused_with_the_grammar() {
    let out = run_bounded(
        Command::new(witness()).args([
            "load",
            "--url",
            "http://127.0.0.1:9/",
            "--assert",
            "p59 < 300ms",
        ]),
        LIMIT,
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("'p59' is not a figure witness measures (did you mean p50?)"),
        "{err}"
    );
    assert!(
        err.contains("write FIGURE[@LEVEL|[KIND]] OP VALUE"),
        "{err}"
    );
    let plan = quick_plan_with("ci-plan-typo", r#"["restarts == 0", "p95 < 300"]"#);
    let out = run_bounded(
        Command::new(witness())
            .args(["soak", "--plan"])
            .arg(&plan)
            .args(["--", "true"]),
        LIMIT,
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("asserts[1] 'p95 < 300': '300' has no unit"),
        "{err}"
    );
}

/// A soak's thresholds, from its plan and the command line: a kind's figure and the whole soak's.
#[test]
fn a_soak_s_thresholds_are_judged_per_kind_and_over_the_whole_soak() {
    let plan = quick_plan_with("ci-soak", r#"["restarts == 0", "error_rate < 1%"]"#);
    let dir = plan.parent().unwrap().to_path_buf();
    let port = free_port().to_string();
    let out = run_bounded(
        Command::new(witness())
            .args(["soak", "--plan"])
            .arg(&plan)
            .args(["--duration", "3s", "--gpu", "off"])
            .args(["--base-url", &format!("http://127.0.0.1:{port}")])
            .args(["--assert", "max[embed] < 1us", "--report"])
            .arg(dir.join("r.json"))
            .args(["--", toy().to_str().unwrap(), "--port", &port]),
        LIMIT,
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let r = json(&dir.join("r.json"));
    assert_eq!(judged(&r, "restarts == 0")["ok"], true);
    let all = judged(&r, "error_rate < 1%");
    assert_eq!(
        (all["ok"].clone(), all["at"].clone()),
        (Value::Bool(true), "the whole soak".into())
    );
    let embed = judged(&r, "max[embed] < 1us");
    assert_eq!(embed["ok"], false);
    assert_eq!(embed["at"], "soak kind embed");
    assert!(err.contains("thresholds: 1 of 3 broken"), "{err}");
}
