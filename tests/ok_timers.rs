//! Timers in the answers that came back, against real servers: an async endpoint whose backend hangs
//! one call in four and is answered by an `asyncio.wait_for` fallback after 2 s (uvicorn and
//! starlette, PyPI), nginx's `limit_req` in front of a fast backend (Debian's nginx), a handler whose
//! own 2 s timeout answers 503, and the false alarms: a constant delay, a spread, no limit. Also an
//! MCP stdio run's words: a ping that answered is "answered", and a stdio note says nothing of
//! connects. uvicorn, starlette and nginx are installed by `.ci/run`; without them a test says it
//! skipped (and fails under CI=true).

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;

/// An ASGI app with one route per behaviour: `/call` waits on a backend that hangs one call in
/// four, answered after 2 s by `asyncio.wait_for`'s fallback with 200; `/slow503` answers 503 when
/// its own 2 s timeout fires; `/spread` sleeps a seeded random 0.8–1.2 s (through a round 1 s).
const APP: &str = r#"
import asyncio, itertools, random, sys
import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

calls = itertools.count()
# `--backend-timeout S`: how long /call waits on its backend before the fallback (default 2 s).
wait = float(sys.argv[sys.argv.index("--backend-timeout") + 1]) if "--backend-timeout" in sys.argv else 2.0
rng = random.Random(7)

async def backend(hang):
    if hang:
        await asyncio.sleep(3600)
    await asyncio.sleep(0.003)
    return {"ok": True}

async def call(request):
    n = next(calls)
    try:
        return JSONResponse(await asyncio.wait_for(backend(n % 4 == 3), wait))
    except asyncio.TimeoutError:
        return JSONResponse({"ok": True, "fallback": True})

async def slow503(request):
    try:
        await asyncio.wait_for(asyncio.sleep(3600), 2.0)
    except asyncio.TimeoutError:
        return PlainTextResponse("handler timed out", status_code=503)

async def spread(request):
    await asyncio.sleep(0.8 + 0.4 * rng.random())
    return JSONResponse({"ok": True})

async def health(request):
    return PlainTextResponse("ok")

app = Starlette(routes=[
    Route("/call", call, methods=["GET", "POST"]),
    Route("/slow503", slow503, methods=["GET", "POST"]),
    Route("/spread", spread, methods=["GET", "POST"]),
    Route("/health", health),
])
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"#;

/// uvicorn and starlette, or (outside CI) a reason to skip.
fn asgi() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import uvicorn, starlette"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            !on_ci(),
            "uvicorn and starlette are missing: .ci/run installs them"
        );
        skipped("uvicorn or starlette is not installed (.ci/run installs them)");
    }
    ok
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn levels(report: &serde_json::Value) -> &Vec<serde_json::Value> {
    report["levels"].as_array().expect("levels")
}

/// The suspicions' kinds and words.
fn suspicions(report: &serde_json::Value) -> Vec<(String, String)> {
    report["suspicions"]
        .as_array()
        .expect("suspicions")
        .iter()
        .map(|s| {
            (
                s["kind"].as_str().unwrap_or("").to_string(),
                s["detail"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// None of the kinds this file is about.
fn none_of_ours(report: &serde_json::Value) {
    let s = suspicions(report);
    assert!(
        s.iter()
            .all(|(k, _)| !["ok_timer", "refusal_timer", "rate_limit"].contains(&k.as_str())),
        "{s:?}"
    );
    for l in levels(report) {
        for r in l["reasons"].as_array().unwrap() {
            assert!(!r.as_str().unwrap().contains("refused most"), "{l:#}");
        }
    }
}

/// `witness load --url http://127.0.0.1:PORT/ROUTE ARGS --report R -- python3 app.py PORT`.
fn load_asgi(dir: &Path, route: &str, args: &[&str]) -> (std::process::Output, serde_json::Value) {
    load_asgi_with(dir, route, args, &[])
}

/// [`load_asgi`], with more arguments for the app.
fn load_asgi_with(
    dir: &Path,
    route: &str,
    args: &[&str],
    app_args: &[&str],
) -> (std::process::Output, serde_json::Value) {
    let app = dir.join("app.py");
    std::fs::write(&app, APP).unwrap();
    let port = free_port().to_string();
    let r = dir.join("r.json");
    let out = run_bounded(
        Command::new(witness())
            .args(["load", "--url", &format!("http://127.0.0.1:{port}{route}")])
            .args(args)
            .args(["--settle", "100ms", "--report"])
            .arg(&r)
            .arg("--")
            .arg("python3")
            .arg(&app)
            .arg(&port)
            .args(app_args),
        Duration::from_secs(90),
    );
    let report = json(&r);
    (out, report)
}

#[test]
fn a_quarter_of_ok_requests_answered_by_a_2s_fallback_is_a_timer_not_latency() {
    if !asgi() {
        return;
    }
    let dir = tempdir("ok-timer");
    let (out, report) = load_asgi(&dir, "/call", &["--levels", "1,4", "--rounds", "12"]);
    let err = stderr(&out);
    let s = suspicions(&report);
    for (l, n) in levels(&report).iter().zip([1, 4]) {
        assert_eq!(l["counts"]["ok"], 12 * n, "{l:#}");
        let ok = 12 * n;
        let slow = ok / 4;
        let words = s
            .iter()
            .find(|(k, d)| k == "ok_timer" && d.starts_with(&format!("level {n}: ")))
            .unwrap_or_else(|| panic!("no ok-timer suspicion at level {n} in {s:?}\n{err}"));
        assert!(
            words
                .1
                .starts_with(&format!("level {n}: {slow} of {ok} ok requests took 2.0")),
            "{}",
            words.1
        );
        assert!(
            words
                .1
                .contains("a 2 s timer answered them (a fallback after a timeout? a retry?)"),
            "{}",
            words.1
        );
    }
    // The terminal says it too.
    assert!(err.contains("a 2 s timer answered them"), "{err}");
}

#[test]
fn a_fallback_at_a_timer_the_server_s_command_line_names_is_named_by_it() {
    if !asgi() {
        return;
    }
    let dir = tempdir("ok-timer-named");
    // 1.5 s is no round number: only the command line makes it a timer.
    let (out, report) = load_asgi_with(
        &dir,
        "/call",
        &["--levels", "4", "--rounds", "4"],
        &["--backend-timeout", "1.5"],
    );
    let s = suspicions(&report);
    let words = s
        .iter()
        .find(|(k, _)| k == "ok_timer")
        .unwrap_or_else(|| panic!("no ok-timer suspicion in {s:?}\n{}", stderr(&out)));
    assert!(
        words.1.starts_with("level 4: 4 of 16 ok requests took 1.5"),
        "{}",
        words.1
    );
    assert!(
        words.1.contains(
            "a 1.5 s timer answered them (a fallback after a timeout? a retry?) (the 1.5s timer in its command line '--backend-timeout 1.5')"
        ),
        "{}",
        words.1
    );
}

#[test]
fn nginx_s_limit_req_is_named_a_rate_limit_with_served_and_refused_counts() {
    let Some(nginx) = nginx() else { return };
    let dir = tempdir("rate-limit");
    let (out, report) = behind_nginx(&nginx, &dir, true);
    let s = suspicions(&report);
    let limit = s
        .iter()
        .find(|(k, _)| k == "rate_limit")
        .unwrap_or_else(|| panic!("no rate limit in {s:?}\n{}", stderr(&out)));
    assert!(
        limit
            .1
            .starts_with("a rate limit: about 20 requests/s served at every level"),
        "{}",
        limit.1
    );
    assert!(
        limit.1.contains("the rest refused (HTTP 429)"),
        "{}",
        limit.1
    );
    for l in levels(&report) {
        let (ok, no) = (
            l["counts"]["ok"].as_u64().unwrap(),
            l["counts"]["rejected"].as_u64().unwrap(),
        );
        assert!(ok > 0 && no > ok, "{l:#}");
        let said = l["reasons"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|r| r.as_str())
            .find(|r| r.starts_with("refused most of its requests"))
            .unwrap_or_else(|| panic!("no word of the refusals in {l:#}"));
        assert!(
            said.contains(&format!("{ok} served ("))
                && said.contains(&format!("{no} refused (HTTP 429)")),
            "{said}"
        );
    }
    assert!(stderr(&out).contains("a rate limit: about 20 requests/s"));
    assert!(stdout(&out).contains("refused most of its requests"));
}

#[test]
fn nginx_with_no_limit_raises_none_of_these() {
    let Some(nginx) = nginx() else { return };
    let dir = tempdir("no-limit");
    let (_out, report) = behind_nginx(&nginx, &dir, false);
    for l in levels(&report) {
        assert_eq!(l["counts"]["rejected"], 0, "{l:#}");
    }
    none_of_ours(&report);
}

/// nginx in front of a fast toy_server, with or without `limit_req` at 20 requests/s, loaded at
/// two levels for 1.5 s each.
fn behind_nginx(
    nginx: &Path,
    dir: &Path,
    limited: bool,
) -> (std::process::Output, serde_json::Value) {
    let upstream = free_port().to_string();
    let _fast = Bg::start(Command::new(toy()).args(["--port", &upstream]));
    wait_listening(upstream.parse().unwrap());
    let port = free_port().to_string();
    let d = dir.display();
    let (zone, limit) = if limited {
        (
            "limit_req_zone $binary_remote_addr zone=per_ip:1m rate=20r/s;",
            "limit_req zone=per_ip; limit_req_status 429; limit_req_log_level info;",
        )
    } else {
        ("", "")
    };
    let conf = format!(
        r#"
daemon off;
worker_processes 1;
pid {d}/nginx.pid;
error_log stderr error;
events {{ worker_connections 256; }}
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
      {limit}
      proxy_pass http://127.0.0.1:{upstream};
    }}
    location / {{
      proxy_pass http://127.0.0.1:{upstream};
    }}
  }}
}}
"#
    );
    let c = dir.join("nginx.conf");
    std::fs::write(&c, conf).unwrap();
    let r = dir.join("r.json");
    let out = run_bounded(
        Command::new(witness())
            .args(["load", "--url", &format!("http://127.0.0.1:{port}/call")])
            .args([
                "--levels",
                "1,4",
                "--duration",
                "1500ms",
                "--settle",
                "100ms",
            ])
            .arg("--report")
            .arg(&r)
            .arg("--")
            .arg(nginx)
            .args(["-e", "stderr", "-c"])
            .arg(&c),
        Duration::from_secs(90),
    );
    let report = json(&r);
    (out, report)
}

#[test]
fn a_handler_s_own_2s_timeout_answering_503_is_a_timer_not_a_capacity_refusal() {
    if !asgi() {
        return;
    }
    let dir = tempdir("refusal-timer");
    let (out, report) = load_asgi(&dir, "/slow503", &["--levels", "4", "--rounds", "1"]);
    let l = &levels(&report)[0];
    // Failures at the timer, not refusals (tests/classify.rs has the rest of that story).
    assert_eq!(l["counts"]["rejected"], 0, "{l:#}");
    assert_eq!(l["counts"]["error"], 4, "{l:#}");
    // Their durations are kept: how long they took to give up, never latency.
    let t = &l["time_to_give_up"];
    assert!(t["min"].as_f64().unwrap() >= 2.0, "{l:#}");
    assert!(t["max"].as_f64().unwrap() < 2.1, "{l:#}");
    assert!(l["latency"].is_null());
    let reasons: Vec<&str> = l["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r.as_str())
        .collect();
    assert!(
        reasons.iter().any(|r| r.starts_with(
            "4 requests failed at a 2 s timer inside the server: answered HTTP 503 after 2.0"
        ) && r.ends_with("each, not a capacity refusal")),
        "{reasons:?}"
    );
    assert!(
        reasons.iter().all(|r| !r.contains("refused every request")),
        "{reasons:?}"
    );
    let s = suspicions(&report);
    assert!(
        s.iter().any(|(k, d)| k == "refusal_timer"
            && d.starts_with("level 4: 4 requests were answered HTTP 503 after 2.0")),
        "{s:?}"
    );
    let all = format!("{}{}", stdout(&out), stderr(&out));
    assert!(!all.contains("refused every request"), "{all}");
    assert!(all.contains("a 2 s timer inside the server, not a capacity refusal"));
    // The level's row shows how long they took to fail, in its "gave up" column.
    // (2.00–2.02 s: how late the handler's own timer fires on a busy machine.)
    assert!(
        stdout(&out).contains("  2.0") && stdout(&out).contains("–2.0"),
        "{all}"
    );
}

#[test]
fn a_spread_of_latencies_through_round_seconds_raises_none_of_these() {
    if !asgi() {
        return;
    }
    let dir = tempdir("spread");
    let (_out, report) = load_asgi(&dir, "/spread", &["--levels", "4", "--rounds", "8"]);
    let l = &levels(&report)[0];
    assert_eq!(l["counts"]["ok"], 32, "{l:#}");
    // The spread passes through a round 1 s, densely: a window there holds several.
    let lat = &l["latency"];
    let (p50, max) = (lat["p50"].as_f64().unwrap(), lat["max"].as_f64().unwrap());
    assert!(p50 > 0.8 && p50 < 1.2 && max > 1.0, "{l:#}");
    none_of_ours(&report);
}

#[test]
fn a_constant_delay_stays_a_fixed_delay_and_raises_none_of_these() {
    let dir = tempdir("constant");
    let port = free_port().to_string();
    let r = dir.join("r.json");
    let out = run_bounded(
        Command::new(witness())
            .args(["load", "--url", &format!("http://127.0.0.1:{port}/call")])
            .args(["--levels", "1,2", "--rounds", "3", "--settle", "100ms"])
            .arg("--report")
            .arg(&r)
            .arg("--")
            .arg(toy())
            .args(["--port", &port, "--call", "sleep:2s"]),
        Duration::from_secs(60),
    );
    let report = json(&r);
    none_of_ours(&report);
    let notes: Vec<String> = levels(&report)
        .iter()
        .flat_map(|l| l["notes"].as_array().cloned().unwrap_or_default())
        .filter_map(|n| n.as_str().map(str::to_string))
        .collect();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("a fixed delay inside this endpoint")),
        "{notes:?}\n{}",
        stderr(&out)
    );
    // An HTTP run has connects to speak of.
    assert!(
        notes.iter().any(|n| n.contains(" and connects in ")),
        "{notes:?}"
    );
}

#[test]
fn an_mcp_stdio_run_says_answered_for_pings_and_nothing_of_connects() {
    let dir = tempdir("mcp-words");
    let r = dir.join("r.json");
    let html = dir.join("t.html");
    let out = run_bounded(
        Command::new(witness())
            // 2 s calls: the fixed-delay note wants a spread under 5 % of the median, which a
            // 1 s call lost once on a busy 2-core CI machine (one call 60 ms late).
            .args(["load", "--mcp", "sleep", "--args", r#"{"ms":2000}"#])
            .args(["--levels", "1", "--rounds", "3", "--settle", "100ms"])
            .arg("--report")
            .arg(&r)
            .arg("--html")
            .arg(&html)
            .arg("--")
            .arg(env!("CARGO_BIN_EXE_mcp_server")),
        Duration::from_secs(60),
    );
    let report = json(&r);
    let l = &levels(&report)[0];
    assert_eq!(l["counts"]["ok"], 3, "{l:#}\n{}", stderr(&out));
    let notes: Vec<&str> = l["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n.as_str())
        .collect();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("a fixed delay inside this endpoint")),
        "{notes:?}"
    );
    let all = format!("{}{}", stdout(&out), stderr(&out));
    assert!(!all.contains("connects in"), "{all}");
    // Nowhere is an MCP ping's answer a "200".
    assert!(!all.contains("answered 200"), "{all}");
    // The level's row: health after an MCP ping that answered.
    let row = stdout(&out)
        .lines()
        .find(|l| l.trim_start().starts_with("1 "))
        .unwrap_or_else(|| panic!("no level row in {all}"))
        .to_string();
    assert!(row.contains("answered"), "{row}");
    assert!(!row.split_whitespace().any(|w| w == "200"), "{row}");
    // The HTML's level table and the picture's labels say the same.
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("<td>answered</td>"),
        "no 'answered' cell in the HTML"
    );
    assert!(
        !page.contains("<td>200</td>"),
        "a ping shown as 200 in the HTML"
    );
    // Each probe's mark on the timeline.
    assert!(
        page.contains("): answered in "),
        "no probe mark says 'answered'"
    );
    assert!(!page.contains("): 200 in "), "a probe mark says 200");
}

/// The mission's case: an MCP client (the official Python SDK) launches `witness wrap -- SERVER`
/// and calls a tool whose backend hangs one call in four, answered from a fallback after a 2 s
/// `asyncio.wait_for`. The calls witness read as they passed are searched for a timer per method,
/// as a load level's are: the report names the 2 s timer and the HTML draws it on the tool's lane.
#[test]
fn a_clients_calls_through_wrap_answered_by_a_2s_fallback_are_named_per_tool() {
    if !have("the MCP Python SDK", "python3 -c 'import mcp.client.stdio'") {
        return;
    }
    let (said, journal, report) = sdk_session("observed-fallback", 12, &[("TOOL", "fallback")]);
    assert_eq!(
        said.lines().filter(|l| l.contains(" ok ")).count(),
        12,
        "{said}"
    );
    let report = json(&report);
    let s = suspicions(&report);
    let found: Vec<_> = s.iter().filter(|(k, _)| k == "ok_timer").collect();
    assert_eq!(found.len(), 1, "{s:?}");
    let words = &found[0].1;
    assert!(
        words.starts_with(
            "calls seen by wrap (stdio) tools/call fallback: 3 of 12 ok requests took 2.0"
        ),
        "{words}"
    );
    assert!(words.contains("a 2 s timer answered them"), "{words}");
    // The same journal re-rendered: the timer on the tool's distribution.
    let out = run_bounded(
        Command::new(witness())
            .arg("report")
            .arg(&journal)
            .args(["--format", "html"]),
        Duration::from_secs(30),
    );
    let page = stdout(&out);
    let dist = &page[page
        .find("id=\"distributions\"")
        .expect("the distributions")..];
    assert!(
        dist.contains("data-lane=\"stdio tools/call fallback\""),
        "no lane for the tool"
    );
    assert!(dist.contains(">2s timer</text>"), "the timer is not drawn");
}

/// A soak kind's ok latencies are searched for a timer as a level's are: the same 2 s fallback,
/// driven by a soak's steady workers.
#[test]
fn a_soak_kind_answered_by_a_2s_fallback_is_named() {
    if !asgi() {
        return;
    }
    let dir = tempdir("soak-fallback");
    let app = dir.join("app.py");
    std::fs::write(&app, APP).unwrap();
    let port = free_port().to_string();
    let plan = dir.join("plan.toml");
    std::fs::write(
        &plan,
        format!(
            r#"duration = "8s"
interval = "1s"
timeout = "5s"

[target]
base_url = "http://127.0.0.1:{port}"

[kinds.call]
method = "GET"
path = "/call"

[[drivers]]
count = 4
burst = {{ requests = [2, 3], gap = ["10ms", "20ms"] }}
steady = {{ requests = [4, 8], gap = ["10ms", "30ms"] }}
idle = {{ for = ["20ms", "50ms"] }}
"#
        ),
    )
    .unwrap();
    let r = dir.join("r.json");
    let out = run_bounded(
        Command::new(witness())
            .args(["soak", "--seed", "7", "--plan"])
            .arg(&plan)
            .arg("--report")
            .arg(&r)
            .arg("--")
            .arg("python3")
            .arg(&app)
            .arg(&port),
        Duration::from_secs(60),
    );
    let report = json(&r);
    let s = suspicions(&report);
    let found: Vec<_> = s.iter().filter(|(k, _)| k == "ok_timer").collect();
    assert_eq!(found.len(), 1, "{s:?}\n{}", stderr(&out));
    assert!(found[0].1.starts_with("soak kind call: "), "{}", found[0].1);
    assert!(
        found[0].1.contains("took 2.0") && found[0].1.contains("a 2 s timer answered them"),
        "{}",
        found[0].1
    );
}
