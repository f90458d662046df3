//! `witness soak` against the example server: a leak flagged as growth and a healthy server not, a
//! health check turning 500 ending the soak with honest partial evidence, capacity refusals counted
//! apart, injected kill and stop faults seen and labelled, a secret kept out of every output, plan
//! mistakes located, and Ctrl-C. Each soak runs a few seconds with the short phases of
//! examples/plans/quick.toml.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::*;

fn plan(name: &str) -> PathBuf {
    repo().join("examples/plans").join(name)
}

struct Run {
    out: Output,
    report: serde_json::Value,
    journal: PathBuf,
    dir: PathBuf,
}

impl Run {
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }
    fn kind(&self, name: &str) -> &serde_json::Value {
        &self.report["kinds"][name]
    }
}

/// Runs a soak of `plan` against a toy_server this soak starts on a fresh port.
fn soak(tag: &str, plan: &Path, witness_args: &[&str], server_args: &[&str]) -> Run {
    soak_env(tag, plan, witness_args, server_args, &[])
}

fn soak_env(
    tag: &str,
    plan: &Path,
    witness_args: &[&str],
    server_args: &[&str],
    env: &[(&str, &str)],
) -> Run {
    let dir = tempdir(tag);
    let port = free_port().to_string();
    let journal = dir.join("j.jsonl");
    let report = dir.join("r.json");
    let mut cmd = Command::new(witness());
    cmd.arg("soak")
        .arg("--plan")
        .arg(plan)
        .args(["--base-url", &format!("http://127.0.0.1:{port}")])
        .args(["--gpu", "off"])
        .arg("--journal")
        .arg(&journal)
        .arg("--report")
        .arg(&report)
        .arg("--html")
        .arg(dir.join("r.html"))
        .args(witness_args)
        .arg("--")
        .arg(toy())
        .args(["--port", &port])
        .args(server_args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = run_bounded(&mut cmd, Duration::from_secs(90));
    let report = json(&report);
    Run {
        out,
        report,
        journal,
        dir,
    }
}

#[test]
fn a_leaking_server_is_flagged_growth_and_fails_the_soak() {
    let r = soak(
        "leak",
        &plan("quick.toml"),
        &["--duration", "8s", "--sample-interval", "500ms"],
        &["--leak", "256k"],
    );
    assert_eq!(r.out.status.code(), Some(1), "{}", r.stderr());
    let m = &r.report["resources"]["memory_trend"];
    assert_eq!(m["class"], "growth", "{m:#}");
    // About 10 calls a second, 256 KiB each: a slope of megabytes a second.
    assert!(
        m["slope_bytes_per_s"].as_f64().unwrap() > 500_000.0,
        "{m:#}"
    );
    assert_eq!(r.report["verdict"], "fail");
    assert!(r.report["verdict_reasons"][0]
        .as_str()
        .unwrap()
        .contains("server memory grows"));
    let before = r.report["resources"]["before"]["rss_bytes"]
        .as_u64()
        .unwrap();
    let after = r.report["resources"]["after"]["rss_bytes"]
        .as_u64()
        .unwrap();
    assert!(after > before + 10 * (1 << 20), "{before} -> {after}");
    // The leak is visible in the server's own gauge too, per 1,000 requests.
    let leaked = r.report["gauges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "leaked_bytes")
        .unwrap();
    assert!(
        leaked["growth_per_1k_requests"].as_f64().unwrap() > 100e6,
        "{leaked:#}"
    );
    assert!(r.stderr().contains("memory: growth"), "{}", r.stderr());
}

#[test]
fn a_healthy_server_is_flat_or_sawtooth_and_passes() {
    let r = soak(
        "healthy",
        &plan("quick.toml"),
        &["--duration", "8s", "--sample-interval", "500ms"],
        &[],
    );
    assert_eq!(r.out.status.code(), Some(0), "{}", r.stderr());
    let class = r.report["resources"]["memory_trend"]["class"]
        .as_str()
        .unwrap();
    assert!(class == "flat" || class == "sawtooth", "{class}");
    assert_eq!(r.report["verdict"], "pass");
    assert_eq!(r.report["partial"], false);
    assert_eq!(r.report["duration_planned_s"], 8.0);
    let achieved = r.report["duration_achieved_s"].as_f64().unwrap();
    assert!((7.9..=8.0).contains(&achieved), "{achieved}");
    // Every kind of worker ran: drivers, readers, background.
    for k in ["embed", "GET /health", "GET /stats", "collect"] {
        assert!(
            r.kind(k)["ok"].as_u64().unwrap() > 0,
            "{k}: {:#}",
            r.kind(k)
        );
    }
    // The drain gauge drained, and every invariant was checked at every interval.
    let queued = r.report["gauges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "queued")
        .unwrap();
    assert_eq!(queued["drain"]["ok"], true);
    for inv in r.report["invariants"].as_array().unwrap() {
        assert_eq!(inv["checked"], 8, "{inv:#}");
        assert_eq!(inv["failed"], 0);
    }
    // The HTML draws the soak's kinds as lanes.
    let html = std::fs::read_to_string(r.dir.join("r.html")).unwrap();
    assert!(html.contains(">embed<") && html.contains(">GET /stats<"));
    assert!(html.contains(r#"Soak: <span class="v-pass">PASS</span>"#));
}

#[test]
fn health_turning_500_aborts_at_the_next_interval_keeping_everything_measured() {
    let r = soak(
        "health",
        &plan("quick.toml"),
        &["--duration", "30s"],
        &["--health-fail-after", "20"],
    );
    assert_eq!(r.out.status.code(), Some(1), "{}", r.stderr());
    let rep = &r.report;
    assert_eq!(rep["partial"], true);
    assert_eq!(rep["verdict"], "fail");
    let reason = rep["aborted_reason"].as_str().unwrap();
    assert!(reason.contains("health: /health answered 500"), "{reason}");
    let achieved = rep["duration_achieved_s"].as_f64().unwrap();
    assert!(achieved > 0.5 && achieved < 15.0, "achieved {achieved}");
    assert_eq!(rep["duration_planned_s"], 30.0);
    // Nothing measured before the abort is lost: the report counts what the journal holds.
    let lines = journal_lines(&r.journal);
    let requests: Vec<_> = lines.iter().filter(|l| l["kind"] == "request").collect();
    assert_eq!(
        rep["totals"]["requests"].as_u64().unwrap(),
        requests.len() as u64
    );
    assert!(r.kind("embed")["ok"].as_u64().unwrap() >= 20);
    // It stopped at the first interval after health turned: the 20th call's answer, then at most
    // one interval (1 s) and the checks.
    let twentieth = requests
        .iter()
        .filter(|l| l["group"] == "embed" && l["outcome"]["kind"] == "ok")
        .nth(19)
        .unwrap()["t_s"]
        .as_f64()
        .unwrap();
    let interval = rep["aborted_interval"].as_u64().unwrap();
    let seen = lines
        .iter()
        .find(|l| l["kind"] == "interval" && l["index"] == interval)
        .unwrap()["t_s"]
        .as_f64()
        .unwrap();
    assert!(
        seen - twentieth <= 1.6,
        "seen at {seen}, turned after {twentieth}"
    );
    let end = lines.iter().find(|l| l["kind"] == "end").unwrap();
    assert_eq!(end["partial"], true);
    assert!(r.stderr().contains("soak aborted"), "{}", r.stderr());
}

#[test]
fn capacity_rejections_are_counted_apart_and_do_not_fail_the_verdict() {
    let dir = tempdir("capacity-plan");
    let p = dir.join("capacity.toml");
    std::fs::write(
        &p,
        r#"
duration = "6s"
interval = "1s"
timeout = "5s"
[target]
base_url = "http://127.0.0.1:1"
[kinds.embed]
path = "/call"
[[drivers]]
count = 4
cycle = ["steady"]
steady = { requests = 5, gap = ["50ms", "100ms"] }
"#,
    )
    .unwrap();
    let r = soak(
        "capacity",
        &p,
        &[],
        &["--capacity", "1", "--call", "sleep:150ms"],
    );
    let k = r.kind("embed");
    assert!(k["rejected"].as_u64().unwrap() > 0, "{k:#}");
    assert!(k["ok"].as_u64().unwrap() > 0, "{k:#}");
    assert_eq!(k["errors"], 0, "{k:#}");
    assert_eq!(k["statuses"]["429"], k["rejected"]);
    assert_eq!(
        r.out.status.code(),
        Some(0),
        "{:#}\n{}",
        r.report["verdict_reasons"],
        r.stderr()
    );
    assert_eq!(r.report["verdict"], "pass");
    // Rejections have no latency: the HDR summary counts the ok requests only.
    assert_eq!(k["latency"]["count"], k["ok"]);
}

#[test]
fn an_injected_kill_is_seen_labelled_injected_and_its_intervals_marked() {
    let r = soak(
        "kill",
        &plan("quick.toml"),
        &[
            "--duration",
            "8s",
            "--inject",
            "kill@3s",
            "--restart",
            "always",
            "--backoff",
            "200ms",
        ],
        &[],
    );
    let rep = &r.report;
    assert_eq!(
        r.out.status.code(),
        Some(0),
        "{:#}\n{}",
        rep["verdict_reasons"],
        r.stderr()
    );
    assert_eq!(rep["partial"], false);
    let f = &rep["injected"][0];
    assert_eq!(f["action"], "kill");
    assert_eq!(f["recovered"], true, "{f:#}");
    assert_eq!(f["restarts"], 1);
    assert_eq!(rep["restarts"]["injected"], 1);
    assert_eq!(rep["restarts"]["unexpected"], 0);
    let t = f["t_s"].as_f64().unwrap();
    assert!((2.9..3.6).contains(&t), "injected at {t}");
    // The interval it hit is marked as not a clean baseline; the first ones are clean.
    let marked: Vec<u64> = f["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_u64().unwrap())
        .collect();
    assert!(!marked.is_empty());
    for iv in rep["intervals"].as_array().unwrap() {
        let idx = iv["index"].as_u64().unwrap();
        assert_eq!(iv["clean_baseline"], !marked.contains(&idx), "{iv:#}");
    }
    assert_eq!(rep["intervals"][0]["clean_baseline"], true);
    assert_eq!(rep["kinds"]["embed"]["failed_outside_faults"], 0);
    // The identity invariant tolerated the restart and said why.
    let ident = rep["invariants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "same_identity")
        .unwrap();
    assert_eq!(ident["failed"], 0);
    assert!(ident["results"]
        .as_array()
        .unwrap()
        .iter()
        .any(|x| x["detail"]
            .as_str()
            .unwrap()
            .contains("tolerated: injected kill")));
    // Labelled on the timeline.
    assert!(r.stderr().contains("INJECTED kill"), "{}", r.stderr());
    assert!(rep["lifecycle"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["kind"] == "fault" && e["action"] == "recovered"));
}

#[test]
fn an_injected_stop_is_excused_until_sigcont_and_the_server_answers_again() {
    let r = soak(
        "stop",
        &plan("quick.toml"),
        &["--duration", "7s", "--inject", "stop@2s+2s"],
        &[],
    );
    let rep = &r.report;
    assert_eq!(
        r.out.status.code(),
        Some(0),
        "{:#}\n{}",
        rep["verdict_reasons"],
        r.stderr()
    );
    let actions: Vec<&str> = rep["lifecycle"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "fault")
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["stop", "cont", "recovered"]);
    // Recovered no earlier than the SIGCONT: a health probe sent as the stop landed, answered once
    // the server resumed, saw the stop, not the recovery (the window closed where it opened).
    let at = |action: &str| {
        rep["lifecycle"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["kind"] == "fault" && e["action"] == action)
            .and_then(|e| e["t_s"].as_f64())
            .unwrap()
    };
    assert!(at("recovered") >= at("cont"), "{:#}", rep["lifecycle"]);
    assert_eq!(rep["restarts"]["total"], 0, "a stop is not a restart");
    assert_eq!(rep["injected"][0]["recovered"], true);
    // Requests sent while it was stopped waited: they carry that time, inside the fault window. (All
    // kinds together: on a loaded machine the two drivers may sit out the 2 s window between phases,
    // while the readers' polls always fall in it.)
    assert!(
        rep["totals"]["in_fault_windows"].as_u64().unwrap() > 0,
        "{:#}",
        rep["kinds"]
    );
    assert_eq!(rep["totals"]["clean_baseline"], false);
}

#[test]
fn a_secret_from_the_environment_reaches_the_server_and_nowhere_else() {
    let token = format!("tok-{:016x}{:08x}", rand_u64(), std::process::id());
    let r = soak_env(
        "secret",
        &plan("gateway.toml"),
        &["--duration", "4s"],
        &["--require-secret-env", "WITNESS_SOAK_TOKEN"],
        &[("WITNESS_SOAK_TOKEN", &token)],
    );
    assert_eq!(r.out.status.code(), Some(0), "{}", r.stderr());
    let k = r.kind("embed");
    // The server checks the bearer token: every call answered 200, none 401.
    assert!(k["ok"].as_u64().unwrap() > 5, "{k:#}");
    assert_eq!(k["statuses"].as_object().unwrap().len(), 1, "{k:#}");
    assert_eq!(k["statuses"]["200"], k["ok"]);
    let journal = std::fs::read_to_string(&r.journal).unwrap();
    assert!(
        journal.contains("Bearer ${secret.gateway}"),
        "the plan summary shows the header as written, by reference"
    );
    for (what, text) in [
        ("journal", journal),
        (
            "report",
            std::fs::read_to_string(r.dir.join("r.json")).unwrap(),
        ),
        (
            "html",
            std::fs::read_to_string(r.dir.join("r.html")).unwrap(),
        ),
        (
            "stdout",
            String::from_utf8_lossy(&r.out.stdout).into_owned(),
        ),
        ("stderr", r.stderr()),
    ] {
        assert!(!text.contains(&token), "the secret leaked into the {what}");
    }
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(7);
    h.finish()
}

#[test]
fn plan_mistakes_and_missing_secrets_are_usage_errors_that_say_where() {
    let dir = tempdir("plan-errors");
    let p = dir.join("bad.toml");
    let src = std::fs::read_to_string(plan("quick.toml"))
        .unwrap()
        .replace("count = 2", "count = 2\nwieght = 1");
    std::fs::write(&p, &src).unwrap();
    let line = src.lines().position(|l| l == "wieght = 1").unwrap() + 1;
    let out = run_bounded(
        Command::new(witness()).args(["soak", "--plan"]).arg(&p),
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("line {line}, column 1, key `drivers.wieght`")),
        "{err}"
    );
    assert!(err.contains("unknown field `wieght`"), "{err}");

    let out = run_bounded(
        Command::new(witness())
            .args(["soak", "--plan"])
            .arg(plan("gateway.toml"))
            .env_remove("WITNESS_SOAK_TOKEN")
            .arg("--")
            .arg(toy()),
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("secrets.gateway"), "{err}");
    assert!(err.contains("WITNESS_SOAK_TOKEN"), "{err}");
    assert!(err.contains("no fallback"), "{err}");
}

#[test]
fn ctrl_c_ends_the_soak_with_a_partial_report_of_what_ran() {
    let dir = tempdir("sigint");
    let port = free_port().to_string();
    let journal = dir.join("j.jsonl");
    let report = dir.join("r.json");
    let child = Command::new(witness())
        .arg("soak")
        .arg("--plan")
        .arg(plan("quick.toml"))
        .args(["--duration", "60s", "--gpu", "off"])
        .args(["--base-url", &format!("http://127.0.0.1:{port}")])
        .arg("--journal")
        .arg(&journal)
        .arg("--report")
        .arg(&report)
        .arg("--")
        .arg(toy())
        .args(["--port", &port])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until(
        "the soak's second interval",
        Duration::from_secs(30),
        || {
            std::fs::read_to_string(&journal)
                .unwrap_or_default()
                .contains(r#""kind":"interval","index":2"#)
        },
    );
    kill(child.id() as i32, 2);
    let out = wait_bounded(child, Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(130));
    let rep = json(&report);
    assert_eq!(rep["partial"], true);
    assert_eq!(rep["verdict"], "incomplete");
    assert!(rep["aborted_reason"]
        .as_str()
        .unwrap()
        .contains("interrupted by SIGINT"));
    let achieved = rep["duration_achieved_s"].as_f64().unwrap();
    assert!((2.0..10.0).contains(&achieved), "{achieved}");
    assert!(rep["totals"]["ok"].as_u64().unwrap() > 0);
}

#[test]
fn a_fatal_log_line_from_the_server_aborts_the_soak() {
    let dir = tempdir("fatal-plan");
    let p = dir.join("fatal.toml");
    // The server's own startup line stands in for a fatal one.
    let src = std::fs::read_to_string(plan("quick.toml")).unwrap()
        + "\n[invariants]\nfatal_log = [\"listening on\"]\n";
    std::fs::write(&p, src).unwrap();
    let r = soak("fatal", &p, &["--duration", "20s"], &[]);
    assert_eq!(r.out.status.code(), Some(1), "{}", r.stderr());
    assert_eq!(r.report["partial"], true);
    assert_eq!(r.report["aborted_interval"], 1);
    let reason = r.report["aborted_reason"].as_str().unwrap();
    assert!(
        reason.contains("fatal_log: 1 fatal log line(s), first: [fatal] toy_server listening on"),
        "{reason}"
    );
}
