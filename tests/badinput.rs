//! Bad input as a hostile user types it: huge, zero, negative and nonsense values, and paths that
//! cannot be used. Each is a clear message naming what was wrong, exit 2, never a panic (101), and
//! nothing is started or written.

use crate::common;

use std::process::{Command, Output};
use std::time::Duration;

use common::*;

fn witness_run(args: &[&str]) -> Output {
    run_bounded(Command::new(witness()).args(args), Duration::from_secs(30))
}

/// Exit 2 with every `needles` in stderr, and no panic or clap's misleading `-- -1` tip.
fn refused(args: &[&str], needles: &[&str]) -> String {
    let out = witness_run(args);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: {n:?} missing from:\n{err}");
    }
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    assert!(!err.contains("'-- -"), "{args:?}: {err}");
    err
}

const URL: &str = "http://127.0.0.1:9/";

fn load_with(extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = ["load", "--url", URL]
        .iter()
        .map(|s| s.to_string())
        .collect();
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(|s| s.as_str()).collect()
}

#[test]
fn every_duration_flag_is_bounded_and_named_in_the_error() {
    let load_flags = [
        "--timeout",
        "--connect-timeout",
        "--settle",
        "--duration",
        "--cliff-slack",
        "--max-connect-floor",
        "--ready-timeout",
        "--health-timeout",
        "--backoff",
        "--healthy-after",
        "--timer",
        "--grace",
    ];
    for flag in load_flags {
        for huge in ["99999999999999999999999", "10000000000000000000s", "721h"] {
            let a = load_with(&[flag, huge]);
            refused(&strs(&a), &[flag, "720h (30 days)"]);
        }
    }
    for unit in ["1y", "1w", "3d", "1ns"] {
        let a = load_with(&["--duration", unit]);
        refused(&strs(&a), &["--duration", "unknown unit", "ms, s, m and h"]);
    }
    for flag in ["--duration", "--interval", "--sample-interval", "--grace"] {
        refused(
            &["soak", "--plan", "p.toml", flag, "800h"],
            &[flag, "720h (30 days)"],
        );
    }
    refused(
        &["soak", "--plan", "p.toml", "--inject", "kill@800h"],
        &["--inject", "720h (30 days)"],
    );
    refused(
        &["wrap", "--grace", "1y", "--", "true"],
        &["--grace", "unknown unit"],
    );
}

#[test]
fn zero_where_zero_means_nothing_is_refused_with_the_range_in_words() {
    for flag in [
        "--duration",
        "--timeout",
        "--health-timeout",
        "--connect-timeout",
        "--ready-timeout",
        "--max-connect-floor",
    ] {
        let a = load_with(&[flag, "0s"]);
        refused(&strs(&a), &[flag, "more than zero"]);
    }
    for bad in ["99999999999", "0", "10001"] {
        let a = load_with(&["--levels", bad]);
        let err = refused(&strs(&a), &["--levels", "from 1 to 10000"]);
        assert!(!err.contains("0..="), "{err}");
    }
    let a = load_with(&["--rounds", "0"]);
    refused(&strs(&a), &["--rounds", "from 1 to 10000000"]);
    refused(
        &["soak", "--plan", "p.toml", "--duration", "0s"],
        &["--duration", "more than zero"],
    );
}

#[test]
fn watch_in_attach_mode_is_refused_whether_or_not_it_compiles() {
    let a = load_with(&["--watch", "("]);
    refused(&strs(&a), &["--watch", "not a valid regular expression"]);
    let a = load_with(&["--watch", "lease lost"]);
    refused(&strs(&a), &["--watch", "never match", "-- CMD"]);
}

#[test]
fn negative_numbers_name_the_flag_not_clap_s_dash_dash_tip() {
    let a = load_with(&["--levels", "-1"]);
    refused(&strs(&a), &["--levels", "negative", "from 1 to 10000"]);
    let a = load_with(&["--timeout", "-1s"]);
    refused(&strs(&a), &["--timeout", "negative"]);
    let a = load_with(&["--levels", "1,-4"]);
    refused(&strs(&a), &["--levels", "negative"]);
    refused(
        &["wrap", "--grace", "-2s", "--", "true"],
        &["--grace", "negative"],
    );
}

#[test]
fn a_plan_asking_for_a_hundred_million_workers_is_refused_before_anything_starts() {
    let dir = tempdir("plan-count");
    let plan = dir.join("p.toml");
    let src = std::fs::read_to_string(repo().join("examples/plans/quick.toml"))
        .unwrap()
        .replacen("count = 2", "count = 100000000", 1);
    assert!(src.contains("count = 100000000"), "quick.toml changed");
    std::fs::write(&plan, src).unwrap();
    let journal = dir.join("j.jsonl");
    refused(
        &[
            "soak",
            "--plan",
            plan.to_str().unwrap(),
            "--journal",
            journal.to_str().unwrap(),
        ],
        &["workers", "from 1 to 10000", "count"],
    );
    assert!(!journal.exists(), "a refused plan wrote a journal");
}

#[test]
fn a_journal_path_error_is_exit_2_and_no_folder_is_created() {
    let root = std::path::PathBuf::from(format!("/witness-it-nofolder-{}", std::process::id()));
    let j = root.join("sub").join("j.jsonl");
    let js = j.to_str().unwrap();
    refused(
        &["wrap", "--gpu", "off", "--journal", js, "--", "true"],
        &["--journal", "does not exist"],
    );
    let a = load_with(&["--journal", js]);
    refused(&strs(&a), &["--journal", "does not exist"]);
    assert!(
        !root.exists(),
        "witness created {} silently",
        root.display()
    );
    let dir = tempdir("journal-dir");
    refused(
        &["wrap", "--journal", dir.to_str().unwrap(), "--", "true"],
        &["--journal", "is a folder"],
    );
}

#[test]
fn report_on_a_missing_or_foreign_file_is_exit_2_naming_it() {
    let dir = tempdir("report-bad");
    let missing = dir.join("nope.jsonl");
    refused(
        &["report", missing.to_str().unwrap()],
        &["opening the journal", "nope.jsonl"],
    );
    let foreign = dir.join("notes.txt");
    std::fs::write(&foreign, "hello\n").unwrap();
    refused(
        &["report", foreign.to_str().unwrap()],
        &["notes.txt", "is this a journal?"],
    );
    let journal = repo().join("tests/fuzz/trace-overflow-1.jsonl");
    let nowhere = dir.join("no-such-folder").join("r.html");
    refused(
        &[
            "report",
            journal.to_str().unwrap(),
            "--format",
            "html",
            "-o",
            nowhere.to_str().unwrap(),
        ],
        &["-o", "r.html"],
    );
    assert!(!nowhere.parent().unwrap().exists());
}

#[test]
fn a_command_that_cannot_start_is_said_once_and_a_bare_name_names_path() {
    let dir = tempdir("spawn");
    let j = dir.join("j.jsonl");
    let out = witness_run(&[
        "wrap",
        "--gpu",
        "off",
        "--journal",
        j.to_str().unwrap(),
        "--",
        "witness-surely-not-a-command",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(127), "{err}");
    // Said once on the whole of stderr (the timeline, the note and the error line do not repeat it).
    assert_eq!(err.matches("no such command in PATH").count(), 1, "{err}");
    let out = witness_run(&[
        "wrap",
        "--gpu",
        "off",
        "--journal",
        j.to_str().unwrap(),
        "--",
        "/etc/passwd",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(126), "{err}");
    assert_eq!(err.matches("(os error 13)").count(), 1, "{err}");
}

/// The reason on the REFUSED line is on the whole of stderr once: the timeline, the notes and the
/// last error line do not say it again (that line names the refusal by its first words only).
fn refusal_said_once(what: &str, err: &str) {
    let line = err
        .lines()
        .find_map(|l| l.strip_prefix("REFUSED: "))
        .unwrap_or_else(|| panic!("{what}: no REFUSED line in:\n{err}"));
    // The words after the refusal's first clause: the part a repeat would quote.
    let reason = line.split_once(": ").map_or(line, |(_, r)| r);
    assert!(reason.len() > 10, "{what}: {line}");
    assert_eq!(err.matches(reason).count(), 1, "{what}: said again:\n{err}");
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("witness: error: refused: ")
            && last.ends_with("(the reason is in the REFUSED line above)"),
        "{what}: the last line points up: {last}"
    );
}

#[test]
fn start_up_refusals_are_said_once() {
    // A port another process holds, before the server witness would start there.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let url = format!("http://127.0.0.1:{port}/");
    let out = witness_run(&[
        "load",
        "--url",
        &url,
        "--levels",
        "1",
        "--rounds",
        "1",
        "--gpu",
        "off",
        "--",
        toy().to_str().unwrap(),
        "--port",
        &port,
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("already in use by"), "{err}");
    refusal_said_once("a port already taken", &err);
    drop(taken);

    // A container the engine does not have (or no engine at all: refused the same way).
    let out = witness_run(&[
        "load",
        "--url",
        "http://127.0.0.1:9/",
        "--gpu",
        "off",
        "--container",
        "witness-surely-no-such-container",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(matches!(out.status.code(), Some(2 | 3)), "{err}");
    refusal_said_once("a container that is not there", &err);

    // `--gpu on` without a GPU, for load and soak alike.
    let dir = tempdir("said-once");
    let plan = repo().join("examples/plans/quick.toml");
    for args in [
        vec!["load", "--url", "http://127.0.0.1:9/", "--gpu", "on"],
        vec![
            "soak",
            "--plan",
            plan.to_str().unwrap(),
            "--base-url",
            "http://127.0.0.1:9",
            "--gpu",
            "on",
            "--journal",
        ],
    ] {
        let mut args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        if args[0] == "soak" {
            args.push(dir.join("soak.jsonl").to_string_lossy().into_owned());
        }
        let out = witness_run(&strs(&args));
        let err = String::from_utf8_lossy(&out.stderr);
        if !err.contains("--gpu on, but") {
            skipped(&format!("{}: this machine has a GPU to sample", args[0]));
            continue;
        }
        assert_eq!(out.status.code(), Some(3), "{err}");
        refusal_said_once(&format!("{} --gpu on", args[0]), &err);
    }
}

/// Every input `scripts/fuzz.sh` found a panic with (tests/fuzz/) renders in every format without
/// one: a hostile journal is bad input, never a crash.
#[test]
fn journals_the_fuzzer_crashed_on_render_in_every_format() {
    let dir = repo().join("tests/fuzz");
    let mut n = 0;
    for f in std::fs::read_dir(&dir).unwrap().flatten() {
        let path = f.path();
        if path.extension().is_none_or(|e| e != "jsonl") {
            continue;
        }
        n += 1;
        let rendered = tempdir("fuzz-render").join("out");
        for format in ["text", "json", "html", "trace"] {
            // To a file: run_bounded does not read stdout while it waits.
            let out = witness_run(&[
                "report",
                path.to_str().unwrap(),
                "--format",
                format,
                "-o",
                rendered.to_str().unwrap(),
            ]);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                matches!(out.status.code(), Some(0) | Some(2)),
                "{} --format {format}: {:?}\n{err}",
                path.display(),
                out.status
            );
            assert!(!err.contains("panicked"), "{}: {err}", path.display());
        }
    }
    assert!(
        n >= 3,
        "the fuzz regressions are missing from {}",
        dir.display()
    );
}

#[test]
fn open_loop_flags_name_what_was_wrong_and_how_to_fix_it() {
    refused(
        &strs(&load_with(&["--rates", "0/s"])),
        &["--rates", "too low", "200/s"],
    );
    refused(
        &strs(&load_with(&["--rates", "10/x"])),
        &["--rates", "unknown unit /x", "200/s"],
    );
    refused(
        &strs(&load_with(&["--rates", "10/s", "--levels", "4"])),
        &["--rates", "--levels", "not both"],
    );
    refused(
        &strs(&load_with(&["--rates", "10/s", "--rounds", "3"])),
        &["--rounds", "--duration"],
    );
    refused(
        &strs(&load_with(&["--rates", "10/s", "--http2"])),
        &["--http2", "--rates", "--levels"],
    );
    refused(
        &strs(&load_with(&["--rates", "10/s", "--arrivals", "bursty"])),
        &["--arrivals", "bursty", "constant, poisson"],
    );
    refused(
        &strs(&load_with(&["--rates", "10/s", "--max-in-flight", "0"])),
        &["--max-in-flight", "from 1 to 10000"],
    );
    refused(
        &strs(&load_with(&["--find-limit", "--resolution", "0%"])),
        &["--resolution", "from 1% to 100%"],
    );
}
