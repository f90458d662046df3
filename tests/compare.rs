//! `witness compare BASE CURRENT` (issue 42): two real runs of a real server side by side. The same
//! server with the same settings is "no significant change" on every figure — with two CPU hogs
//! beside one of the runs too; the example server made 30 % slower per request is slower at every
//! level, with the test and the intervals; nginx in front of a queueing server, its
//! `proxy_read_timeout` cut from 10 s to 2 s, is a new 2 s timer at level 8 with its evidence (not
//! only a changed p99). Runs are found by name (`--name`, `--baseline`), thresholds on the
//! difference judged, a typo refused with the grammar; JUnit read by PyPI junitparser.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::*;
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(120);

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `witness load` of the example server started with `server` (levels 1,4,8), its journal in
/// `dir/TAG.jsonl`; `state` is witness's journal folder (where `--name` is looked up).
fn run(dir: &Path, tag: &str, server: &[&str], extra: &[&str]) -> PathBuf {
    let journal = dir.join(format!("{tag}.jsonl"));
    let port = free_port().to_string();
    let out = run_bounded(
        Command::new(witness())
            .env("XDG_STATE_HOME", dir.join("state"))
            .args(["load", "--url", &format!("http://127.0.0.1:{port}/call")])
            .args(if extra.contains(&"--levels") {
                &[][..]
            } else {
                &["--levels", "1,4,8"][..]
            })
            .args(["--settle", "50ms", "--gpu", "off"])
            .arg("--journal")
            .arg(&journal)
            .args(extra)
            .arg("--")
            .arg(toy())
            .args(["--port", &port])
            .args(server),
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(0), "{tag}: {}", text(&out.stderr));
    journal
}

/// `witness compare ARGS --format json` (in `dir`'s journal folder): its exit, its JSON and stderr.
fn compare(dir: &Path, args: &[&str]) -> (Output, Value) {
    let out = run_bounded(
        Command::new(witness())
            .env("XDG_STATE_HOME", dir.join("state"))
            .arg("compare")
            .args(args)
            .args(["--format", "json"]),
        LIMIT,
    );
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "compare's JSON: {e}: {}\n{}",
            text(&out.stdout),
            text(&out.stderr)
        )
    });
    (out, v)
}

fn groups(v: &Value) -> &Vec<Value> {
    v["groups"].as_array().expect("groups")
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn two_runs_of_one_server_are_no_significant_change_even_with_two_cpu_hogs_beside_one() {
    let dir = tempdir("compare-same");
    // 15, 60 and 120 requests: a p95 bounded at level 8.
    let server = ["--call", "sleep:100ms"];
    let base = run(&dir, "base", &server, &["--rounds", "15"]);
    for i in 0..2 {
        let hogs = (i == 1).then(Hogs::start);
        let current = run(&dir, &format!("current{i}"), &server, &["--rounds", "15"]);
        drop(hogs);
        let (out, v) = compare(&dir, &[p(&base), p(&current)]);
        assert_eq!(
            (out.status.code(), v["verdict"].as_str()),
            (Some(0), Some("no significant change")),
            "try {i}: {v:#}"
        );
        assert_eq!(groups(&v).len(), 3, "{v:#}");
        for g in groups(&v) {
            assert_eq!(g["latency"], "no significant change", "try {i}: {g:#}");
            for f in g["figures"].as_array().unwrap() {
                assert!(
                    f["verdict"] == "no significant change" || f["verdict"] == "too few requests",
                    "try {i}: {f:#}"
                );
            }
            assert_eq!(g["errors"]["verdict"], "no significant change", "{g:#}");
        }
        // Nothing happened differently; a busier machine is said as such.
        for s in v["story"].as_array().unwrap() {
            assert_eq!(s["about"], "machine", "{s:#}");
        }
    }
}

#[test]
fn the_example_server_thirty_percent_slower_per_request_is_slower_at_every_level() {
    let dir = tempdir("compare-slower");
    let rounds = ["--rounds", "10"];
    let base = run(&dir, "base", &["--call", "sleep:50ms"], &rounds);
    let current = run(&dir, "slower", &["--call", "sleep:65ms"], &rounds);
    let (out, v) = compare(
        &dir,
        &[
            p(&base),
            p(&current),
            "--assert",
            "p50_delta < 10%",
            "--assert",
            "p50_delta < 50%",
            "--junit",
            p(&dir.join("c.xml")),
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{v:#}");
    assert_eq!(v["verdict"], "worse");
    let names: Vec<&str> = groups(&v)
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["1", "4", "8"]);
    for g in groups(&v) {
        assert_eq!(g["latency"], "slower", "{g:#}");
        let t = &g["rank_test"];
        assert!(t["p_value"].as_f64().unwrap() < 0.01, "{t:#}");
        assert!(t["p_longer"].as_f64().unwrap() > 0.9, "{t:#}");
        let p50 = &g["figures"][0];
        assert_eq!(p50["figure"], "p50");
        assert_eq!(p50["verdict"], "slower", "{p50:#}");
        // The interval on each side, apart: CURRENT's lowest above BASE's highest.
        assert!(
            p50["current"]["low"].as_f64().unwrap() > p50["base"]["high"].as_f64().unwrap(),
            "{p50:#}"
        );
        let change = p50["change"].as_f64().unwrap();
        assert!((0.2..0.45).contains(&change), "{p50:#}");
    }
    // The thresholds on the difference: one broken, one held, each with what it measured.
    let asserts = v["asserts"].as_array().unwrap();
    assert_eq!(asserts[0]["ok"], false, "{asserts:#?}");
    assert!(asserts[0]["measured"].as_str().unwrap().starts_with('+'));
    assert_eq!(asserts[1]["ok"], true, "{asserts:#?}");
    // The test is named with the verdict.
    assert!(v["test"].as_str().unwrap().starts_with("Mann–Whitney U"));
    // The terminal says the same, level by level.
    let t = run_bounded(
        Command::new(witness())
            .arg("compare")
            .arg(&base)
            .arg(&current),
        LIMIT,
    );
    let words = text(&t.stdout);
    assert_eq!(t.status.code(), Some(1));
    for level in ["level 1 slower", "level 4 slower", "level 8 slower"] {
        assert!(words.contains(level), "{words}");
    }
    assert!(words.contains("sleep:50ms`, CURRENT `"), "{words}");
    // One decision in every view: the HTML says "slower" exactly where the JSON does.
    let html = dir.join("c.html");
    let h = run_bounded(
        Command::new(witness())
            .arg("compare")
            .arg(&base)
            .arg(&current)
            .args(["--format", "html", "-o"])
            .arg(&html),
        LIMIT,
    );
    assert_eq!(h.status.code(), Some(1));
    let page = std::fs::read_to_string(&html).unwrap();
    let slower_in_json: usize = groups(&v)
        .iter()
        .map(|g| {
            usize::from(g["latency"] == "slower")
                + g["figures"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|f| f["verdict"] == "slower")
                    .count()
        })
        .sum();
    assert_eq!(
        page.matches(">slower</td>").count(),
        slower_in_json,
        "{page}"
    );
    assert_eq!(
        words.matches("SLOWER").count(),
        slower_in_json,
        "the terminal marks each slower figure once: {words}"
    );
    // JUnit, read by a parser nobody here wrote: a case per level's latency, failed.
    let cases = crate::ci::junit_cases(&dir.join("c.xml"));
    for level in ["1", "4", "8"] {
        let c = cases
            .iter()
            .find(|(n, _, _)| *n == format!("level {level} latency"))
            .unwrap_or_else(|| panic!("no case for level {level} in {cases:?}"));
        assert_eq!(c.1, "Failure", "{c:?}");
        assert!(c.2.starts_with("SLOWER: p "), "{c:?}");
    }
    assert!(
        cases
            .iter()
            .any(|(n, r, _)| n == "assert p50_delta < 50%" && r == "Passed"),
        "{cases:?}"
    );
}

/// nginx in front of a server that answers one call at a time (300 ms each): at level 8 the last
/// call waits 2.4 s. With `proxy_read_timeout 10s` every call is answered; with 2s, level 8's
/// waits pass nginx's timer and it answers 504 at 2 s.
#[test]
fn a_proxy_timer_that_starts_firing_at_level_8_is_a_new_timer_there_with_its_evidence() {
    let Some(nginx) = tool("nginx", &["/usr/sbin", "/usr/local/sbin"]) else {
        return;
    };
    let dir = tempdir("compare-timer");
    let upstream = free_port().to_string();
    let _lock = Bg::start(Command::new(toy()).args(["--port", &upstream, "--call", "lock:300ms"]));
    wait_listening(upstream.parse().unwrap());
    let run_nginx = |timeout: &str| -> PathBuf {
        let port = free_port().to_string();
        let conf = nginx_proxy_conf(&dir, &port, &upstream, timeout);
        let journal = dir.join(format!("nginx-{timeout}.jsonl"));
        let out = run_bounded(
            Command::new(witness())
                .args(["load", "--url", &format!("http://127.0.0.1:{port}/call")])
                .args(["--levels", "4,8", "--rounds", "2", "--timeout", "15s"])
                .args(["--settle", "300ms", "--gpu", "off", "--journal"])
                .arg(&journal)
                .arg("--")
                .arg(&nginx)
                .args(["-e", "stderr", "-c"])
                .arg(&conf),
            LIMIT,
        );
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "{}",
            text(&out.stderr)
        );
        journal
    };
    let base = run_nginx("10s");
    let current = run_nginx("2s");
    let (out, v) = compare(
        &dir,
        &[p(&base), p(&current), "--assert", "new_timers == 0"],
    );
    assert_eq!(out.status.code(), Some(1), "{v:#}");
    let story = v["story"].as_array().unwrap();
    let timer = story
        .iter()
        .find(|s| s["about"] == "timer")
        .unwrap_or_else(|| panic!("no timer in the story: {story:#?}"));
    let said = timer["text"].as_str().unwrap();
    assert!(said.starts_with("new: a 2."), "{said}");
    assert!(said.contains("timer at level 8"), "{said}");
    assert_eq!(timer["worse"], true);
    let evidence = timer["evidence"].as_str().unwrap();
    assert!(evidence.contains(" 2.0"), "{evidence}");
    assert!(evidence.contains("upstream timed out"), "{evidence}");
    // Its failures are new at level 8 with nginx's words. (Level 4's longest wait, 1.2 s, is
    // under the timer; a machine slow enough to push it past 2 s would make level 4's 504s new
    // too, and then level 4 is not asserted unchanged below.)
    let failures: Vec<&str> = story
        .iter()
        .filter(|s| s["about"] == "failures")
        .map(|s| s["text"].as_str().unwrap())
        .collect();
    assert!(
        failures
            .iter()
            .any(|f| f.starts_with("new failure at level 8: error: HTTP 504")),
        "{failures:?}"
    );
    let four_failed = failures
        .iter()
        .any(|f| f.starts_with("new failure at level 4"));
    // The ok survivors of level 8 are not called faster.
    let eight = groups(&v).iter().find(|g| g["name"] == "8").unwrap();
    assert_eq!(eight["latency"], "not compared", "{eight:#}");
    assert_eq!(eight["errors"]["verdict"], "more");
    let four = groups(&v).iter().find(|g| g["name"] == "4").unwrap();
    if !four_failed {
        assert_eq!(four["latency"], "no significant change", "{four:#}");
    }
    assert_eq!(v["asserts"][0]["ok"], false);
    assert_eq!(v["asserts"][0]["measured"], "1");
}

#[test]
fn runs_kept_by_name_are_found_listed_and_compared_and_a_typo_is_refused_with_the_grammar() {
    let dir = tempdir("compare-names");
    let quick = ["--levels", "1", "--rounds", "3"];
    let server = ["--call", "sleep:50ms"];
    let older = run(
        &dir,
        "main-1",
        &server,
        &[&quick[..], &["--name", "main"]].concat(),
    );
    let main = run(
        &dir,
        "main-2",
        &server,
        &[&quick[..], &["--name", "main"]].concat(),
    );
    let _other = run(&dir, "pr", &server, &quick);
    let list = run_bounded(
        Command::new(witness())
            .env("XDG_STATE_HOME", dir.join("state"))
            .args(["report", "--list"]),
        LIMIT,
    );
    let listed = text(&list.stdout);
    assert_eq!(listed.matches("name: main").count(), 2, "{listed}");
    // --baseline: the latest run of that name, CURRENT the latest run.
    let (out, v) = compare(&dir, &["--baseline", "main"]);
    assert_eq!(out.status.code(), Some(0), "{}\n{v:#}", text(&out.stderr));
    assert!(
        v["base"]["label"]
            .as_str()
            .unwrap()
            .contains("main-2.jsonl"),
        "{:#}",
        v["base"]
    );
    assert_eq!(v["base"]["name"], "main");
    assert!(v["current"]["label"].as_str().unwrap().contains("pr.jsonl"));
    assert!(text(&out.stderr).contains("the latest run of that name"));
    // A run of that name compared with --baseline of the same name: the one before it.
    let (out, v) = compare(&dir, &[p(&main), "--baseline", "main"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(v["base"]["label"]
        .as_str()
        .unwrap()
        .contains("main-1.jsonl"));
    let _ = older;
    // Bad input: exit 2, the fix in the words.
    for (args, says) in [
        (
            vec!["--baseline", "nightly"],
            "the names recorded are: main",
        ),
        (vec!["--assert", "p99 < 10%"], "p99_delta"),
        (
            vec!["--assert", "p99_delta@8 < 10"],
            "FIGURE_delta[@NAME] OP VALUE",
        ),
        (vec![p(&main)], "name BASE too"),
        (vec![p(&main), p(&main)], "the same journal"),
        (vec!["/nowhere/x.jsonl", p(&main)], "no such journal"),
    ] {
        let out = run_bounded(
            Command::new(witness())
                .env("XDG_STATE_HOME", dir.join("state"))
                .arg("compare")
                .args(&args),
            LIMIT,
        );
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains(says),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    // The HTML: both runs' strips for the level, aligned, and the same verdict.
    let html = dir.join("c.html");
    let out = run_bounded(
        Command::new(witness())
            .env("XDG_STATE_HOME", dir.join("state"))
            .args(["compare", "--baseline", "main", "--format", "html", "-o"])
            .arg(&html),
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let page = std::fs::read_to_string(&html).unwrap();
    for run in ["BASE", "CURRENT"] {
        assert!(
            page.contains(&format!("data-run=\"{run}\" data-group=\"1\"")),
            "{run}"
        );
    }
    assert!(page.contains("id=\"verdict\">NO SIGNIFICANT CHANGE<"));
}
