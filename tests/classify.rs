//! One classification per request, against real servers: refusals a timer inside the server
//! answered (a handler's own 2 s timeout under uvicorn answering 503, nginx answering 503 when its
//! `proxy_read_timeout 2s` fires) are failures at that timer — in the level's counts, its verdict,
//! the exit code, the JSON report, the HTML, the terminal and the trace — and a lone 503 at the same
//! status and duration in another level is that same timer. The false alarm: nginx's `limit_conn`
//! answering 503 at once is a capacity refusal and stays `rejected`. And a timer armed after its
//! process started is drawn, in the HTML, where its words put it.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::*;

/// A handler with its own 2 s timeout: `/call` answers 200 at once, or — for every third request
/// (`--every 3`) or the requests numbered in `--hang 0,1,2` (counted from 0) — waits on a backend
/// that never answers and, when `asyncio.wait_for`'s 2 s fire, answers 503 "handler timed out".
/// `--upstream`: the slow requests just sleep 30 s and answer 200 (a slow upstream for nginx).
const APP: &str = r#"
import asyncio, itertools, sys
import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

calls = itertools.count()
args = sys.argv[2:]
every = int(args[args.index("--every") + 1]) if "--every" in args else 0
hang = {int(x) for x in args[args.index("--hang") + 1].split(",")} if "--hang" in args else set()
upstream = "--upstream" in args

async def call(request):
    n = next(calls)
    if (every and n % every == every - 1) or n in hang:
        if upstream:
            await asyncio.sleep(30)
            return JSONResponse({"ok": True, "late": True})
        try:
            await asyncio.wait_for(asyncio.sleep(3600), 2.0)
        except asyncio.TimeoutError:
            return PlainTextResponse("handler timed out", status_code=503)
    return JSONResponse({"ok": True})

async def health(request):
    return PlainTextResponse("ok")

app = Starlette(routes=[
    Route("/call", call, methods=["GET", "POST"]),
    Route("/health", health),
])
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"#;

/// uvicorn and starlette, or (outside CI) a reason to skip.
fn asgi() -> bool {
    have(
        "uvicorn and starlette",
        "python3 -c 'import uvicorn, starlette'",
    )
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What one run left: its output, JSON report, HTML and trace.
struct Run {
    out: Output,
    report: serde_json::Value,
    html: String,
    trace: serde_json::Value,
}

/// `witness load --url http://127.0.0.1:PORT/call ARGS` with every view written, the server
/// being `server` (its port given).
fn load(dir: &Path, port: u16, args: &[&str], server: &[&str]) -> Run {
    let (r, h, t) = (dir.join("r.json"), dir.join("r.html"), dir.join("t.json"));
    let out = run_bounded(
        Command::new(witness())
            .args(["load", "--url", &format!("http://127.0.0.1:{port}/call")])
            .args(args)
            .args(["--settle", "100ms", "--report"])
            .arg(&r)
            .arg("--html")
            .arg(&h)
            .arg("--trace")
            .arg(&t)
            .arg("--")
            .args(server),
        Duration::from_secs(120),
    );
    let (so, se) = text(&out);
    eprintln!("stdout:\n{so}\nstderr:\n{se}");
    Run {
        report: json(&r),
        html: std::fs::read_to_string(&h).unwrap(),
        trace: json(&t),
        out,
    }
}

/// The app, written to `dir`, as a command for `port` with `app_args`.
fn app(dir: &Path, port: u16, app_args: &[&str]) -> Vec<String> {
    let p = dir.join("app.py");
    std::fs::write(&p, APP).unwrap();
    let mut cmd = vec![
        "python3".to_string(),
        p.display().to_string(),
        port.to_string(),
    ];
    cmd.extend(app_args.iter().map(|s| s.to_string()));
    cmd
}

fn level(report: &serde_json::Value, concurrency: u64) -> &serde_json::Value {
    report["levels"]
        .as_array()
        .expect("levels")
        .iter()
        .find(|l| l["concurrency"] == concurrency)
        .unwrap_or_else(|| panic!("no level {concurrency} in {report:#}"))
}

fn reasons(l: &serde_json::Value) -> Vec<String> {
    l["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_string())
        .collect()
}

/// (ok, timeout, error, rejected) of a level.
fn counts(l: &serde_json::Value) -> (u64, u64, u64, u64) {
    let c = &l["counts"];
    let n = |k: &str| c[k].as_u64().unwrap();
    (n("ok"), n("timeout"), n("error"), n("rejected"))
}

/// The terminal row of level `n` in `table` (its first five columns are n, ok, timeout, error,
/// rejected), and the whole row.
fn row(table: &str, n: u64) -> (Vec<u64>, String) {
    let line = table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(&n.to_string()))
        .unwrap_or_else(|| panic!("no row for level {n} in {table}"));
    let figures = line
        .split_whitespace()
        .take(5)
        .map(|x| x.parse().unwrap())
        .collect();
    (figures, line.to_string())
}

/// The HTML verdict table's row of level `n`: its cells' text (concurrency, verdict, ok, timeout,
/// error, rejected, …, why).
fn html_row(html: &str, n: u64) -> Vec<String> {
    let start = format!("<tr class=\"bad\"><td class=\"n\">{n}</td>");
    let row = html
        .split(&start)
        .nth(1)
        .unwrap_or_else(|| panic!("no failed row for level {n} in the HTML"))
        .split("</tr>")
        .next()
        .unwrap();
    let mut cells = vec![n.to_string()];
    cells.extend(row.split("<td").skip(1).map(|c| {
        let inner = c.split_once('>').unwrap().1;
        inner
            .split("</td>")
            .next()
            .unwrap()
            .replace("<b>", "")
            .replace("</b>", "")
            .replace("&#39;", "'")
    }));
    cells
}

/// The trace's requests as (outcome, what).
fn traced(trace: &serde_json::Value) -> Vec<(String, String)> {
    trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "b" && e["cat"] == "request")
        .map(|e| {
            (
                e["args"]["outcome"].as_str().unwrap().to_string(),
                e["args"]["what"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

const AT_TIMER: &str = "error: HTTP 503 at a 2 s timer inside the server";

/// Everything a user reads of a level whose `n` requests failed at the 2 s timer (and `ok` were
/// served): counts, verdict, words, the failures listed, and the HTML's row.
fn failed_at_the_timer(run: &Run, concurrency: u64, ok: u64, n: u64) {
    let l = level(&run.report, concurrency);
    assert_eq!(counts(l), (ok, 0, n, 0), "{l:#}");
    assert_eq!(l["verdict"], "fail", "{l:#}");
    assert_eq!(l["errors_by_kind"][AT_TIMER], n, "{l:#}");
    let failures = l["failures"].as_array().unwrap();
    assert_eq!(failures.len() as u64, n, "{l:#}");
    for f in failures {
        assert_eq!(f["outcome"], AT_TIMER, "{f:#}");
        let d = f["duration_s"].as_f64().unwrap();
        // nginx reads its clock coarsely: its 2 s may end a hair early.
        assert!((1.9..2.5).contains(&d), "{f:#}");
    }
    let cells = html_row(&run.html, concurrency);
    assert_eq!(cells[1], "FAIL", "{cells:?}");
    assert_eq!(
        cells[2..6],
        [ok.to_string(), "0".into(), n.to_string(), "0".into()],
        "{cells:?}"
    );
    let why = cells.last().unwrap();
    assert!(
        why.contains("failed at a 2 s timer inside the server: answered HTTP 503 after 2."),
        "{why}"
    );
    assert!(why.ends_with("not a capacity refusal"), "{why}");
}

#[test]
fn a_handler_timeout_answering_503_at_2s_to_one_request_in_three_fails_its_level_everywhere() {
    if !asgi() {
        return;
    }
    let dir = tempdir("classify-third");
    let port = free_port();
    let server = app(&dir, port, &["--every", "3"]);
    let server: Vec<&str> = server.iter().map(String::as_str).collect();
    let run = load(&dir, port, &["--levels", "4", "--rounds", "3"], &server);
    // The level fails, and so does the run: exit 1.
    assert_eq!(run.out.status.code(), Some(1));
    assert_eq!(run.report["verdict"], "fail");
    // 12 requests, every third answered 503 by the handler's own 2 s timeout.
    failed_at_the_timer(&run, 4, 8, 4);
    let l = level(&run.report, 4);
    assert!(
        reasons(l).iter().any(|r| r.starts_with(
            "4 requests failed at a 2 s timer inside the server: answered HTTP 503 after 2."
        )),
        "{l:#}"
    );
    // How long they took is time to give up, not refusing.
    assert!(l["time_to_refuse"].is_null(), "{l:#}");
    assert!(l["time_to_give_up"]["min"].as_f64().unwrap() >= 1.9);
    // The finding itself, said once, with where it counted.
    let s = run.report["suspicions"].as_array().unwrap();
    let found: Vec<&str> = s
        .iter()
        .filter(|s| s["kind"] == "refusal_timer")
        .map(|s| s["detail"].as_str().unwrap())
        .collect();
    assert_eq!(found.len(), 1, "{s:#?}");
    assert!(
        found[0].starts_with("level 4: 4 requests were answered HTTP 503 after 2.")
            && found[0].ends_with(
                "a 2 s timer inside the server, not a capacity refusal; counted as failures at that timer, not refusals (level 4)"
            ),
        "{}",
        found[0]
    );
    // The terminal: the level's row counts them as errors, none rejected.
    let (stdout, stderr) = text(&run.out);
    let (figures, line) = row(&stdout, 4);
    assert_eq!(figures, [4, 8, 0, 4, 0], "{line}");
    assert!(
        line.contains("FAIL (4 requests failed at a 2 s timer"),
        "{line}"
    );
    assert!(!stdout.contains("refused_after"), "{stdout}");
    assert!(stderr.contains("verdict: FAIL"), "{stderr}");
    // The trace: the same four requests, as failures at the timer.
    let t = traced(&run.trace);
    assert_eq!(t.len(), 12, "{t:?}");
    assert_eq!(
        t.iter()
            .filter(|(o, w)| o == "error" && w == AT_TIMER)
            .count(),
        4,
        "{t:?}"
    );
    assert_eq!(t.iter().filter(|(o, _)| o == "ok").count(), 8, "{t:?}");
    assert!(t.iter().all(|(o, _)| o != "rejected"), "{t:?}");
}

#[test]
fn a_single_503_at_level_1_is_the_2s_timer_level_4_found_not_a_refusal_of_every_request() {
    if !asgi() {
        return;
    }
    let dir = tempdir("classify-lone");
    let port = free_port();
    // Level 1 sends request 0 (a 503 at 2 s, alone); level 4 sends 1–4, three of them 503 at 2 s.
    let server = app(&dir, port, &["--hang", "0,1,2,3"]);
    let server: Vec<&str> = server.iter().map(String::as_str).collect();
    let run = load(&dir, port, &["--levels", "1,4", "--rounds", "1"], &server);
    assert_eq!(run.out.status.code(), Some(1));
    failed_at_the_timer(&run, 1, 0, 1);
    failed_at_the_timer(&run, 4, 1, 3);
    let one = level(&run.report, 1);
    let r = reasons(one);
    assert_eq!(r.len(), 1, "{r:?}");
    assert!(
        r[0].starts_with(
            "1 request failed at a 2 s timer inside the server: answered HTTP 503 after 2."
        ) && r[0].ends_with(", as level 4's refusals were, not a capacity refusal"),
        "{r:?}"
    );
    // Never the story of a capacity refusal, in any view.
    let (stdout, stderr) = text(&run.out);
    for (view, said) in [
        ("stdout", stdout.as_str()),
        ("stderr", stderr.as_str()),
        ("html", run.html.as_str()),
    ] {
        assert!(!said.contains("refused every request"), "{view}: {said}");
    }
    assert!(!run.report.to_string().contains("refused every request"));
    // Level 1's row printed live could not know level 4's finding; the last table on stdout says
    // the final decision, as the report does.
    let (_, last) = stdout
        .rsplit_once("final verdicts:\n")
        .unwrap_or_else(|| panic!("no final table on stdout:\n{stdout}"));
    let (figures, line) = row(last, 1);
    assert_eq!(figures, [1, 0, 0, 1, 0], "{line}");
    assert!(line.contains("as level 4's refusals were"), "{line}");
    let t = traced(&run.trace);
    assert_eq!(
        t.iter()
            .filter(|(o, w)| o == "error" && w == AT_TIMER)
            .count(),
        4,
        "{t:?}"
    );
    assert!(t.iter().all(|(o, _)| o != "rejected"), "{t:?}");
}

/// nginx on a fresh port in front of `upstream` (a port), with `location /call` set as `call` says;
/// its config in `dir`.
fn nginx_conf(dir: &Path, port: u16, zone: &str, call: &str) -> PathBuf {
    let d = dir.display();
    let conf = format!(
        r#"
daemon off;
worker_processes 1;
pid {d}/nginx.pid;
error_log stderr error;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  {zone}
  server {{
    listen 127.0.0.1:{port};
    location /call {{
      {call}
    }}
    location @timed_out {{ return 503 "upstream timed out\n"; }}
    location /health {{ return 200 "ok\n"; }}
  }}
}}
"#
    );
    let c = dir.join("nginx.conf");
    std::fs::write(&c, conf).unwrap();
    c
}

#[test]
fn nginx_answering_503_when_its_2s_proxy_read_timeout_fires_fails_the_level() {
    let Some(nginx) = nginx() else { return };
    if !asgi() {
        return;
    }
    let dir = tempdir("classify-nginx");
    // Upstream: every third request takes 30 s; nginx gives up after 2 s and answers 503.
    let up = free_port();
    let upstream = app(&dir, up, &["--every", "3", "--upstream"]);
    let _up = Bg::start(Command::new(&upstream[0]).args(&upstream[1..]));
    wait_listening(up);
    let port = free_port();
    let conf = nginx_conf(
        &dir,
        port,
        "",
        &format!(
            "proxy_pass http://127.0.0.1:{up}; proxy_read_timeout 2s; proxy_intercept_errors on; error_page 504 =503 @timed_out;"
        ),
    );
    let nginx = nginx.display().to_string();
    let conf = conf.display().to_string();
    // Level 1 sends requests 0–2 (the third at the timer, alone there); level 4 sends 3–14.
    let run = load(
        &dir,
        port,
        &["--levels", "1,4", "--rounds", "3"],
        &[&nginx, "-e", "stderr", "-c", &conf],
    );
    assert_eq!(run.out.status.code(), Some(1));
    failed_at_the_timer(&run, 1, 2, 1);
    failed_at_the_timer(&run, 4, 8, 4);
    let f = &level(&run.report, 4)["failures"][0];
    assert!(
        f["annotation"]
            .as_str()
            .unwrap()
            .starts_with("answered HTTP 503 'upstream timed out'"),
        "{f:#}"
    );
    let (stdout, _) = text(&run.out);
    // Level 1's row, printed before level 4 ran, waits for it; the final table says the decision.
    let (figures, live) = row(&stdout, 1);
    assert_eq!(figures, [1, 2, 0, 0, 1], "{live}");
    assert!(
        live.contains("PENDING (refusals here took up to 2."),
        "{live}"
    );
    let (_, last) = stdout
        .rsplit_once("final verdicts:\n")
        .unwrap_or_else(|| panic!("no final table on stdout:\n{stdout}"));
    let (figures, line) = row(last, 1);
    assert_eq!(figures, [1, 2, 0, 1, 0], "{line}");
    assert!(
        line.contains("FAIL (1 request failed at a 2 s timer"),
        "{line}"
    );
    let (figures, _) = row(&stdout, 4);
    assert_eq!(figures, [4, 8, 0, 4, 0]);
    let t = traced(&run.trace);
    let at = t.iter().filter(|(o, w)| o == "error" && w == AT_TIMER);
    assert_eq!(at.count(), 5, "{t:?}");
    assert!(t.iter().all(|(o, _)| o != "rejected"), "{t:?}");
}

#[test]
fn nginx_limit_conn_answering_503_at_once_stays_a_capacity_refusal() {
    let Some(nginx) = nginx() else { return };
    let dir = tempdir("classify-limit-conn");
    // One connection at a time to a slow upstream: the other workers' requests are refused at once.
    let up = free_port();
    let _up =
        Bg::start(Command::new(toy()).args(["--port", &up.to_string(), "--call", "sleep:200ms"]));
    wait_listening(up);
    let port = free_port();
    let conf = nginx_conf(
        &dir,
        port,
        "limit_conn_zone $server_addr zone=per_server:1m;",
        &format!("limit_conn per_server 1; proxy_pass http://127.0.0.1:{up};"),
    );
    let nginx = nginx.display().to_string();
    let conf = conf.display().to_string();
    let run = load(
        &dir,
        port,
        &["--levels", "4", "--duration", "1s"],
        &[&nginx, "-e", "stderr", "-c", &conf],
    );
    let l = level(&run.report, 4);
    let (ok, timeout, error, rejected) = counts(l);
    assert!(ok > 0 && rejected > ok, "{l:#}");
    assert_eq!((timeout, error), (0, 0), "{l:#}");
    assert_eq!(l["verdict"], "pass", "{l:#}");
    let r = reasons(l);
    assert!(
        r.len() == 1
            && r[0].starts_with("refused most of its requests")
            && r[0].ends_with(" refused (HTTP 503)"),
        "{r:?}"
    );
    assert_eq!(run.out.status.code(), Some(0));
    let s = run.report["suspicions"].as_array().unwrap();
    assert!(s.iter().all(|s| s["kind"] != "refusal_timer"), "{s:#?}");
    let (stdout, _) = text(&run.out);
    assert!(!stdout.contains("timer"), "{stdout}");
    let t = traced(&run.trace);
    assert!(t.iter().any(|(o, _)| o == "rejected"), "{t:?}");
    assert!(t.iter().all(|(o, _)| o != "error"), "{t:?}");
}

#[test]
fn a_watchdog_armed_after_its_process_started_is_drawn_where_its_words_put_it() {
    let dir = tempdir("classify-armed");
    let (r, h) = (dir.join("r.json"), dir.join("r.html"));
    let port = free_port();
    // The process starts, and only a second later becomes toy_server and arms its 6 s watchdog.
    let line = format!(
        "sleep 1; exec {} --port {port} --watchdog 6s",
        toy().display()
    );
    let out = run_bounded(
        Command::new(witness())
            .args(["wrap", "--report"])
            .arg(&r)
            .arg("--html")
            .arg(&h)
            .args(["--", "sh", "-c", &line]),
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(124), "{}", text(&out).1);
    let report = json(&r);
    let s = report["suspicions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["subject"] == "process_exit")
        .unwrap_or_else(|| panic!("no exit suspicion in {report:#}"));
    let detail = s["detail"].as_str().unwrap();
    assert!(
        detail.contains("armed about 1.") || detail.contains("armed at its first output line, 1."),
        "{detail}"
    );
    let armed = s["armed_s"].as_f64().unwrap();
    assert!(armed >= 1.0, "{s:#}");
    // The HTML: the dashed deadline stands on the exit (start + armed + 6 s), not at start + 6 s.
    let html = std::fs::read_to_string(&h).unwrap();
    let x = |tag: &str| -> f64 {
        html.split(tag)
            .nth(1)
            .unwrap_or_else(|| panic!("no {tag} in the HTML"))
            .split(" x1=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap()
            .parse()
            .unwrap()
    };
    let (deadline, exit) = (x("<line class=\"deadline\""), x("<line class=\"exit\""));
    assert!(
        (deadline - exit).abs() < 1.0,
        "the deadline at x={deadline}, the exit at x={exit}"
    );
    assert!(
        html.contains("a 6s timer armed at t="),
        "the deadline's words"
    );
    assert!(html.contains("after pid "), "the deadline's words");
}
