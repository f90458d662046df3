//! `witness load --rates` (the open loop) and `--find-limit` against real servers: a stall that an
//! open loop measures for everyone who arrived during it and a closed loop for one request per
//! worker; witness falling behind its schedule when its in-flight cap is too low; the limit of a
//! capacity-limited gunicorn found within the resolution; a search that meets a dying server ends
//! saying so. Counts, outcomes and ordering only: no wall-clock figure is asserted.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::*;

/// `witness load --url http://127.0.0.1:PORT/call ARGS --report R --journal J -- toy_server --port PORT SERVER…`
fn load_toy(args: &[&str], server: &[&str], dir: &Path) -> Output {
    let port = free_port().to_string();
    run_bounded(
        Command::new(witness())
            .args(["load", "--url", &format!("http://127.0.0.1:{port}/call")])
            .args(args)
            .args(per_worker(args))
            .arg("--report")
            .arg(dir.join("r.json"))
            .arg("--journal")
            .arg(dir.join("j.jsonl"))
            .arg("--")
            .arg(toy())
            .args(["--port", &port])
            .args(server),
        Duration::from_secs(120),
    )
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Every request of the journal: (scheduled or start, start, duration, outcome kind).
struct Req {
    due: f64,
    start: f64,
    duration: f64,
    ok: bool,
    scheduled: bool,
}

fn requests(j: &Path) -> Vec<Req> {
    journal_lines(j)
        .iter()
        .filter(|e| e["kind"] == "request")
        .map(|e| Req {
            due: e["scheduled_s"]
                .as_f64()
                .unwrap_or(e["start_s"].as_f64().unwrap()),
            start: e["start_s"].as_f64().unwrap(),
            duration: e["duration_s"].as_f64().unwrap(),
            ok: e["outcome"]["kind"] == "ok",
            scheduled: e["scheduled_s"].is_number(),
        })
        .collect()
}

impl Req {
    /// From when it was meant to go (open loop) or went (closed loop) to its answer.
    fn latency(&self) -> f64 {
        self.duration + (self.start - self.due).max(0.0)
    }
}

const STALL_S: f64 = 2.0;

#[test]
fn a_stall_holds_every_open_loop_request_due_during_it_and_one_per_closed_loop_worker() {
    // The 30th /call opens a 2 s stall: everything arriving until it ends waits for its end.
    let server = ["--stall-once", "30:2s"];
    let open = tempdir("open-stall");
    let out = load_toy(
        &["--rates", "50/s", "--duration", "3s", "--settle", "200ms"],
        &server,
        &open,
    );
    // (Not the exit code: on a machine busy enough to make witness late, the level says so and
    // fails, and the latencies below still hold the stall.)
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", stderr(&out));
    let report = json(&open.join("r.json"));
    let level = &report["levels"][0];
    assert_eq!(level["rate"]["rate_per_s"], 50.0);
    assert_eq!(level["counts"]["ok"], 150, "{level:#}");
    assert_eq!(level["restarted"], false);
    let reqs = requests(&open.join("j.jsonl"));
    assert_eq!(reqs.len(), 150);
    assert!(reqs.iter().all(|r| r.ok && r.scheduled));
    // The stall: the request that opened it waited all of it, from its start to its end.
    let stalled: Vec<&Req> = reqs
        .iter()
        .filter(|r| r.latency() >= STALL_S / 2.0)
        .collect();
    let opener = reqs
        .iter()
        .max_by(|a, b| a.duration.total_cmp(&b.duration))
        .unwrap();
    let (from, to) = (opener.start, opener.start + opener.duration);
    // The open loop kept sending through the stall, on schedule: about 50 requests per second of
    // it went while the server stalled (a half-stall's worth asked for), and each waited for it.
    let due_during: Vec<&Req> = reqs
        .iter()
        .filter(|r| r.start > from && r.start < to)
        .collect();
    assert!(
        due_during.len() >= 40,
        "{} sent during the stall",
        due_during.len()
    );
    assert!(
        due_during.iter().all(|r| r.start + r.duration >= to - 0.05),
        "every request sent during the stall was answered only when it ended"
    );
    assert!(stalled.len() >= 20, "{} held half the stall", stalled.len());
    // Ordering: the later a request was due in the stall, the less of it it waited.
    let mut by_due = due_during.clone();
    by_due.sort_by(|a, b| a.due.total_cmp(&b.due));
    let (head, tail) = by_due.split_at(by_due.len() / 2);
    let mean = |v: &[&Req]| v.iter().map(|r| r.latency()).sum::<f64>() / v.len() as f64;
    assert!(mean(head) > mean(tail));

    // The closed loop against the same stall: its 4 workers each wait once, and the stall is one
    // slow request per worker among thousands.
    let closed = tempdir("closed-stall");
    let out = load_toy(
        &["--levels", "4", "--duration", "3s", "--settle", "200ms"],
        &server,
        &closed,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let reqs = requests(&closed.join("j.jsonl"));
    assert!(reqs.iter().all(|r| !r.scheduled));
    let slow = reqs.iter().filter(|r| r.latency() >= STALL_S / 2.0).count();
    assert!((1..=4).contains(&slow), "{slow} slow of {}", reqs.len());
    assert!(
        reqs.len() > 10 * stalled.len(),
        "the closed loop sent on after the stall"
    );
}

#[test]
fn witness_falling_behind_is_said_with_its_figures_when_the_in_flight_cap_is_too_low() {
    // 100 ms per answer at 20/s needs about 2 in flight; a cap of 1 leaves every other send late.
    let server = ["--call", "sleep:100ms"];
    let low = tempdir("open-behind");
    let args = ["--rates", "20/s", "--duration", "2s", "--settle", "200ms"];
    let out = load_toy(
        &[&args[..], &["--max-in-flight", "1"]].concat(),
        &server,
        &low,
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = json(&low.join("r.json"));
    let level = &report["levels"][0];
    assert_eq!(level["verdict"], "fail");
    let rate = &level["rate"];
    assert_eq!(rate["max_in_flight"], 1);
    let (late, sent) = (
        rate["late"].as_u64().unwrap(),
        rate["sent"].as_u64().unwrap(),
    );
    assert!(late * 2 >= sent, "{late} late of {sent}");
    let behind = rate["behind"].as_str().expect("said");
    assert!(behind.starts_with("witness fell behind: "), "{behind}");
    assert!(
        behind.contains("% of sends more than 10ms late"),
        "{behind}"
    );
    assert!(behind.contains("partly the harness's"), "{behind}");
    assert!(level["reasons"][0]
        .as_str()
        .unwrap()
        .starts_with("witness fell behind"));
    assert!(stderr(&out).contains("witness fell behind"));
    // Every answer was ok: the level fails on witness's lateness, never on the server's.
    assert_eq!(level["counts"]["ok"].as_u64(), Some(sent));
    // The level's percentiles count from each intended send, late sends' wait included: far above
    // the requests' own durations, and what the journal's requests say counted that way.
    let reqs = requests(&low.join("j.jsonl"));
    let mut durations: Vec<f64> = reqs.iter().map(|r| r.duration).collect();
    durations.sort_by(f64::total_cmp);
    let own_p50 = durations[durations.len() / 2];
    let mut from_due: Vec<f64> = reqs.iter().map(Req::latency).collect();
    from_due.sort_by(f64::total_cmp);
    let journal_p50 = from_due[from_due.len() / 2];
    let p50 = level["latency"]["p50"].as_f64().unwrap();
    let p99 = level["latency"]["p99"].as_f64().unwrap();
    assert!(
        p50 > 3.0 * own_p50 && p99 > 0.5,
        "p50 {p50}, p99 {p99}: the report counted from the sends (their own p50: {own_p50})"
    );
    assert!(
        (p50 - journal_p50).abs() <= 0.1 * journal_p50 + 0.02,
        "the report's p50 {p50}, the journal's from the intended sends {journal_p50}"
    );

    // With room to send on schedule, the same server and rate: witness kept up (a busy machine
    // may make a few sends late, never most).
    let room = tempdir("open-room");
    let out = load_toy(&args, &server, &room);
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", stderr(&out));
    let report = json(&room.join("r.json"));
    let rate = &report["levels"][0]["rate"];
    assert!(
        rate["late"].as_u64().unwrap() * 4 < rate["sent"].as_u64().unwrap(),
        "{rate:#}"
    );
    assert_eq!(report["levels"][0]["counts"]["ok"], 40);
}

/// gunicorn, or (outside CI) a reason to skip.
fn gunicorn() -> Option<PathBuf> {
    have("gunicorn", "python3 -m gunicorn --version").then(|| PathBuf::from("python3"))
}

#[test]
fn the_limit_search_finds_a_single_sync_gunicorn_worker_s_capacity_within_the_resolution() {
    let Some(python) = gunicorn() else { return };
    // One sync worker answering in 100 ms serves 10 requests/s, however many arrive.
    let dir = tempdir("open-limit");
    let port = free_port().to_string();
    let out = run_bounded(
        Command::new(witness())
            .args(["load", "--url", &format!("http://127.0.0.1:{port}/call")])
            .args(["--rates", "2/s", "--find-limit", "--resolution", "10%"])
            .args([
                "--duration",
                "3s",
                "--settle",
                "200ms",
                "--ready-timeout",
                "20s",
            ])
            .arg("--report")
            .arg(dir.join("r.json"))
            .arg("--journal")
            .arg(dir.join("j.jsonl"))
            .arg("--")
            .arg(python)
            .args(["-m", "gunicorn", "-w", "1", "-b"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("--chdir")
            .arg(repo().join("examples/py"))
            .arg("slow_wsgi:app")
            .env("SLOW_S", "0.1"),
        Duration::from_secs(150),
    );
    let report = json(&dir.join("r.json"));
    let limit = &report["limit"];
    // On a busy machine the search may end where witness itself fell behind: the limit is then
    // said to be witness's own, and the run is not a pass; the figures below hold either way.
    match out.status.code() {
        Some(0) => assert_eq!(report["verdict"], "pass"),
        Some(1) => assert_eq!(limit["witness_bound"], true, "{limit:#}\n{}", stderr(&out)),
        c => panic!("exit {c:?}: {}", stderr(&out)),
    }
    let holds = limit["holds"].as_f64().expect("a limit");
    let fails = limit["fails_at"].as_f64().expect("a fail above it");
    assert!((8.0..=11.0).contains(&holds), "{limit:#}");
    assert!(
        fails > holds && (fails - holds) / holds <= 0.1 + 1e-9,
        "{limit:#}"
    );
    let words = limit["words"].as_str().unwrap();
    assert!(words.starts_with("holds "), "{words}");
    assert!(words.contains("the server did not keep up"), "{words}");
    // Each probe is a normal level: doubling from 2/s until 16/s failed, then bisecting.
    let lv = report["levels"].as_array().unwrap();
    let rates: Vec<f64> = lv
        .iter()
        .map(|l| l["rate"]["rate_per_s"].as_f64().unwrap())
        .collect();
    assert_eq!(rates[..4], [2.0, 4.0, 8.0, 16.0], "{rates:?}");
    let starts = journal_lines(&dir.join("j.jsonl"))
        .iter()
        .filter(|e| e["kind"] == "level_start")
        .count();
    assert_eq!(starts, lv.len());
    for l in lv {
        let r = l["rate"]["rate_per_s"].as_f64().unwrap();
        assert_eq!(l["verdict"] == "pass", r <= holds, "{l:#}");
    }
}

#[test]
fn a_search_that_meets_a_dying_server_ends_saying_so_never_with_a_limit() {
    // The server exits for good 4.5 s after it starts: during the second probe.
    let dir = tempdir("open-dies");
    let out = load_toy(
        &[
            "--rates",
            "5/s",
            "--find-limit",
            "--duration",
            "3s",
            "--settle",
            "200ms",
        ],
        &["--die-after", "4500ms"],
        &dir,
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = json(&dir.join("r.json"));
    assert_eq!(report["verdict"], "fail");
    let limit = &report["limit"];
    assert!(limit["holds"].is_null(), "{limit:#}");
    let ended = limit["ended"].as_str().expect("why it ended");
    assert!(ended.contains("died"), "{ended}");
    assert!(limit["words"].as_str().unwrap().starts_with("no limit: "));
    // The search stopped at the level the server died in: no probe after it.
    let lv = report["levels"].as_array().unwrap();
    assert_eq!(lv.len(), 2, "{lv:#?}");
    assert_eq!(lv[0]["verdict"], "pass");
    assert!(stderr(&out).contains("limit: no limit: the search ended because"));
}

fn mcp_server() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_mcp_server"))
}

#[test]
fn rate_levels_call_an_mcp_tool_over_stdio_and_streamable_http() {
    for http in [false, true] {
        let dir = tempdir("open-mcp");
        let port = free_port().to_string();
        let mut cmd = Command::new(witness());
        cmd.args([
            "load",
            "--mcp",
            "search",
            "--rates",
            "20/s",
            "--duration",
            "1s",
        ])
        .args(["--settle", "100ms", "--arrivals", "poisson", "--seed", "7"]);
        if http {
            cmd.args(["--url", &format!("http://127.0.0.1:{port}/mcp")]);
        }
        cmd.arg("--report")
            .arg(dir.join("r.json"))
            .arg("--journal")
            .arg(dir.join("j.jsonl"))
            .arg("--")
            .arg(mcp_server())
            .args(["--lock", "5ms"]);
        if http {
            cmd.args(["--http", &port]);
        }
        let out = run_bounded(&mut cmd, Duration::from_secs(60));
        // On a busy machine witness may fall behind its own schedule: the level then fails as the
        // harness's, said so, never the server's.
        let err = stderr(&out);
        match out.status.code() {
            Some(0) => {}
            Some(1) => assert!(
                err.contains("witness fell behind") && !err.contains("the server did not keep up"),
                "http={http}: {err}"
            ),
            c => panic!("http={http}: exit {c:?}: {err}"),
        }
        let report = json(&dir.join("r.json"));
        let level = &report["levels"][0];
        assert_eq!(level["rate"]["arrivals"], "poisson");
        assert_eq!(level["rate"]["seed"], 7);
        let reqs = requests(&dir.join("j.jsonl"));
        assert!(!reqs.is_empty() && reqs.iter().all(|r| r.ok && r.scheduled));
        assert_eq!(level["counts"]["ok"].as_u64(), Some(reqs.len() as u64));
    }
}

#[test]
fn the_limit_search_over_concurrency_levels_bisects_to_adjacent_levels() {
    // One lock held 400 ms per request: n workers wait up to n × 400 ms, and witness's own 1 s
    // limit fails the level from 3 workers on (its third request would wait 1.2 s).
    let dir = tempdir("closed-limit");
    let out = load_toy(
        &[
            "--levels",
            "1",
            "--find-limit",
            "--rounds",
            "1",
            "--timeout",
            "1s",
            "--settle",
            "100ms",
        ],
        &["--call", "lock:400ms"],
        &dir,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = json(&dir.join("r.json"));
    let tried: Vec<u64> = report["levels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["concurrency"].as_u64().unwrap())
        .collect();
    assert_eq!(tried, [1, 2, 4, 3]);
    let limit = &report["limit"];
    assert_eq!(
        (limit["holds"].as_f64(), limit["fails_at"].as_f64()),
        (Some(2.0), Some(3.0))
    );
    let words = limit["words"].as_str().unwrap();
    assert!(
        words.starts_with("holds 2 concurrent requests; at 3 "),
        "{words}"
    );
    assert!(words.contains("timeout"), "{words}");
}

#[test]
fn a_search_that_meets_a_restart_ends_saying_so() {
    // The server exits 3 s after each start and witness restarts it: during the second probe.
    let dir = tempdir("open-restart");
    let out = load_toy(
        &[
            "--rates",
            "5/s",
            "--find-limit",
            "--duration",
            "2s",
            "--settle",
            "100ms",
            "--restart",
            "always",
        ],
        &["--die-after", "3s"],
        &dir,
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = json(&dir.join("r.json"));
    let limit = &report["limit"];
    assert!(limit["holds"].is_null(), "{limit:#}");
    let ended = limit["ended"].as_str().expect("why it ended");
    assert!(
        ended.starts_with("the server restarted during level "),
        "{ended}"
    );
    let lv = report["levels"].as_array().unwrap();
    assert_eq!(lv.last().unwrap()["restarted"], true, "{lv:#?}");
    assert!(lv[..lv.len() - 1].iter().all(|l| l["verdict"] == "pass"));
}

/// What tests/peers/count_server.py counted: (connections accepted, those that carried a request).
fn server_counts(file: &Path) -> (u64, u64) {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let get = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    (get("accepted "), get("used "))
}

#[test]
fn an_open_loop_level_sends_on_kept_connections_as_the_server_counts_them() {
    if !have("python3", "python3 -c 'import http.server'") {
        return;
    }
    let dir = tempdir("open-reuse");
    let port = free_port();
    let counts = dir.join("counts.txt");
    let journal = dir.join("j.jsonl");
    let out = run_bounded(
        Command::new(witness())
            .args(["load", "--url", &format!("http://127.0.0.1:{port}/")])
            .args(["--rates", "50/s", "--duration", "3s", "--settle", "200ms"])
            .arg("--journal")
            .arg(&journal)
            .args(["--", "python3"])
            .arg(repo().join("tests/peers/count_server.py"))
            .arg(port.to_string())
            .arg(&counts),
        Duration::from_secs(60),
    );
    // (Not the exit code alone: a machine busy enough to make witness late fails the level.)
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", stderr(&out));
    let sent = requests(&journal)
        .iter()
        .filter(|r| r.scheduled && r.ok)
        .count() as u64;
    let (accepted, used) = server_counts(&counts);
    eprintln!("{sent} requests on {used} connections ({accepted} accepted)");
    assert!(sent >= 140, "{sent} ok requests of 150");
    // A connection goes back to the level's idle ones after its answer: a handful carry requests
    // (the sends that overlapped, the health checks'), never one per request. (The connect floor's
    // probes and the readiness wait connect and send nothing: accepted, not used.)
    assert!(
        used <= 12,
        "the server was sent requests on {used} connections for {sent} requests"
    );
}
