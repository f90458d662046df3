//! One classification per request, beyond the ladder: refusals a timer inside the server answered
//! (a handler's own 2 s timeout under uvicorn answering 503) are failures at that timer in a soak
//! kind's row, the soak's verdict and exit code, the JSON report, the terminal, the HTML and the
//! trace — and in the rows of the calls `witness wrap --proxy` observed. The false alarm: a server
//! answering 503 at once (capacity) keeps its refusals `rejected`, and the soak passes.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::*;

/// `/call` answers 200 at once, or — every third request (`--every 3`) — waits on a backend that
/// never answers and, when `asyncio.wait_for`'s 2 s fire, answers 503 "handler timed out".
/// `--now`: those requests are answered 503 "busy" at once instead (a capacity refusal).
const APP: &str = r#"
import asyncio, itertools, sys
import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

calls = itertools.count()
args = sys.argv[2:]
every = int(args[args.index("--every") + 1]) if "--every" in args else 0
now = "--now" in args

async def call(request):
    n = next(calls)
    if every and n % every == every - 1:
        if now:
            return PlainTextResponse("busy", status_code=503)
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

const AT_TIMER: &str = "error: HTTP 503 at a 2 s timer inside the server";

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

fn app(dir: &Path) -> PathBuf {
    let p = dir.join("app.py");
    std::fs::write(&p, APP).unwrap();
    p
}

struct Soak {
    out: Output,
    report: serde_json::Value,
    html: String,
    trace: serde_json::Value,
}

/// A soak of one kind (`call`, GET /call) by four steady workers for `duration`, against the app
/// started with `app_args`; every view written.
fn soak(tag: &str, duration: &str, app_args: &[&str]) -> Soak {
    let dir = tempdir(tag);
    let port = free_port().to_string();
    let plan = dir.join("plan.toml");
    std::fs::write(
        &plan,
        format!(
            r#"duration = "{duration}"
interval = "1s"
timeout = "5s"

[target]
base_url = "http://127.0.0.1:{port}"

[kinds.call]
method = "GET"
path = "/call"

[[drivers]]
count = 4
cycle = ["steady"]
steady = {{ requests = 5, gap = ["20ms", "50ms"] }}
"#
        ),
    )
    .unwrap();
    let (r, h, t) = (dir.join("r.json"), dir.join("r.html"), dir.join("t.json"));
    let out = run_bounded(
        Command::new(witness())
            .args(["soak", "--seed", "7", "--gpu", "off", "--plan"])
            .arg(&plan)
            .arg("--report")
            .arg(&r)
            .arg("--html")
            .arg(&h)
            .arg("--trace")
            .arg(&t)
            .arg("--")
            .arg("python3")
            .arg(app(&dir))
            .arg(&port)
            .args(app_args),
        Duration::from_secs(120),
    );
    let (so, se) = text(&out);
    eprintln!("stdout:\n{so}\nstderr:\n{se}");
    Soak {
        report: json(&r),
        html: std::fs::read_to_string(&h).unwrap(),
        trace: json(&t),
        out,
    }
}

/// The terminal's line for soak kind `name`: its figures by key.
fn kind_line(said: &str, name: &str) -> (String, std::collections::BTreeMap<String, u64>) {
    let line = said
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{name} ")) && l.contains("requests="))
        .unwrap_or_else(|| panic!("no line for kind {name} in:\n{said}"))
        .to_string();
    let figures = line
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
        .collect();
    (line, figures)
}

/// The HTML's per-kind table row of kind `name`: its cells' text (kind, requests, ok, rejected,
/// timeouts, errors, …).
fn html_kind(html: &str, name: &str) -> (String, Vec<String>) {
    let cell = format!("<td>{name}</td>");
    let at = html
        .find(&cell)
        .unwrap_or_else(|| panic!("no row for kind {name} in the HTML"));
    let open = html[..at].rfind("<tr").unwrap();
    let row = &html[open..];
    let row = &row[..row.find("</tr>").unwrap()];
    let cells = row
        .split("<td")
        .skip(1)
        .map(|c| {
            let inner = c.split_once('>').unwrap().1;
            inner.split("</td>").next().unwrap().to_string()
        })
        .collect();
    (row.to_string(), cells)
}

/// The trace's requests (or, `observed`, the calls wrap saw) as (outcome, what).
fn traced_as(trace: &serde_json::Value, cat: &str) -> Vec<(String, String)> {
    trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "b" && e["cat"] == cat)
        .map(|e| {
            (
                e["args"]["outcome"].as_str().unwrap().to_string(),
                e["args"]["what"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn traced(trace: &serde_json::Value) -> Vec<(String, String)> {
    traced_as(trace, "request")
}

fn refusal_timers(report: &serde_json::Value) -> Vec<String> {
    report["suspicions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["kind"] == "refusal_timer")
        .map(|s| s["detail"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_soak_kind_whose_503s_a_2s_handler_timeout_answered_counts_them_as_errors_and_fails() {
    if !asgi() {
        return;
    }
    let r = soak("classify-soak-timer", "6s", &["--every", "3"]);
    // The soak fails, and says why: exit 1.
    assert_eq!(r.out.status.code(), Some(1));
    assert_eq!(r.report["verdict"], "fail", "{:#}", r.report);
    let k = &r.report["kinds"]["call"];
    let n = |f: &str| k[f].as_u64().unwrap_or_else(|| panic!("{f} in {k:#}"));
    let errors = n("errors");
    // Every third request waited 2 s: a few of them at least, all errors, none rejected.
    assert!(errors >= 3, "{k:#}");
    assert_eq!(n("rejected"), 0, "{k:#}");
    assert_eq!(k["errors_by_kind"][AT_TIMER], errors, "{k:#}");
    // The status is what the server said; the class is what the run found it to be.
    assert_eq!(k["statuses"]["503"], errors, "{k:#}");
    assert_eq!(n("failed_outside_faults"), errors, "{k:#}");
    assert_eq!(r.report["totals"]["rejected"], 0);
    let reasons: Vec<&str> = r.report["verdict_reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap())
        .collect();
    assert!(
        reasons.iter().any(|x| x.starts_with(&format!(
            "{errors} request(s) failed outside injected faults"
        ))),
        "{reasons:?}"
    );
    let named = reasons
        .iter()
        .find(|x| x.starts_with("soak kind call: "))
        .unwrap_or_else(|| panic!("no reason names the timer: {reasons:?}"));
    assert!(
        named.starts_with(&format!(
            "soak kind call: {errors} requests failed at a 2 s timer inside the server: answered HTTP 503 after 2."
        )) && named.ends_with("not a capacity refusal"),
        "{named}"
    );
    // The finding, said once, with where it counted.
    let found = refusal_timers(&r.report);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("soak kind call: ")
            && found[0].ends_with(
                "not a capacity refusal; counted as failures at that timer, not refusals (soak kind call)"
            ),
        "{}",
        found[0]
    );
    // The terminal agrees with the JSON.
    let (stdout, stderr) = text(&r.out);
    let said = format!("{stdout}\n{stderr}");
    let (line, figures) = kind_line(&said, "call");
    assert_eq!(figures["rejected"], 0, "{line}");
    assert_eq!(figures["errors"], errors, "{line}");
    assert!(said.contains(named), "the reason on the terminal:\n{said}");
    // The HTML's row too (kind, requests, ok, rejected, timeouts, errors).
    let (row, cells) = html_kind(&r.html, "call");
    assert!(row.contains("class=\"bad\""), "{row}");
    assert_eq!(cells[3], "0", "{cells:?}");
    assert_eq!(cells[5], errors.to_string(), "{cells:?}");
    assert!(
        r.html.contains("failed at a 2 s timer inside the server"),
        "the reason in the HTML"
    );
    // The trace: the same requests, as failures at the timer.
    let t = traced(&r.trace);
    let at = t
        .iter()
        .filter(|(o, w)| o == "error" && w == AT_TIMER)
        .count();
    assert_eq!(at as u64, errors, "{t:?}");
    assert!(t.iter().all(|(o, _)| o != "rejected"), "{t:?}");
}

#[test]
fn a_soak_kind_refused_503_at_once_keeps_its_refusals_and_passes() {
    if !asgi() {
        return;
    }
    let r = soak("classify-soak-capacity", "4s", &["--every", "3", "--now"]);
    let k = &r.report["kinds"]["call"];
    let n = |f: &str| k[f].as_u64().unwrap_or_else(|| panic!("{f} in {k:#}"));
    assert!(n("rejected") >= 3, "{k:#}");
    assert_eq!(k["statuses"]["503"], n("rejected"), "{k:#}");
    assert_eq!(n("errors"), 0, "{k:#}");
    assert!(k.get("errors_by_kind").is_none(), "{k:#}");
    assert_eq!(
        r.report["verdict"], "pass",
        "{:#}",
        r.report["verdict_reasons"]
    );
    assert_eq!(r.out.status.code(), Some(0));
    assert!(refusal_timers(&r.report).is_empty(), "{:#}", r.report);
    let (stdout, stderr) = text(&r.out);
    let (line, figures) = kind_line(&format!("{stdout}\n{stderr}"), "call");
    assert_eq!(figures["errors"], 0, "{line}");
    assert_eq!(figures["rejected"], n("rejected"), "{line}");
    assert!(!r.html.contains("timer inside the server"));
    let t = traced(&r.trace);
    assert!(t.iter().any(|(o, _)| o == "rejected"), "{t:?}");
    assert!(t.iter().all(|(o, _)| o != "error"), "{t:?}");
}

/// One plain HTTP/1.1 GET through `port`, on its own connection: the status.
fn get(port: u16, path: &str) -> u16 {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut r = String::new();
    let _ = s.read_to_string(&mut r);
    r.split_whitespace()
        .nth(1)
        .and_then(|x| x.parse().ok())
        .unwrap_or(0)
}

/// What a client's calls through `wrap --proxy` left: the statuses it saw, the JSON report, the
/// terminal, and the trace.
struct Proxied {
    statuses: Vec<u16>,
    report: serde_json::Value,
    said: String,
    trace: serde_json::Value,
}

/// `witness wrap --proxy` in front of the app (started with `app_args`), a plain client making
/// nine calls of GET /call through it one after another; the views once wrap is stopped.
fn proxied(tag: &str, app_args: &[&str]) -> Proxied {
    let dir = tempdir(tag);
    let (listen, up) = (free_port(), free_port());
    let (report, trace) = (dir.join("r.json"), dir.join("t.json"));
    let mut cmd = Command::new(witness());
    cmd.args(["wrap", "--report"])
        .arg(&report)
        .arg("--trace")
        .arg(&trace)
        .arg("--proxy")
        .arg(format!("127.0.0.1:{listen}=127.0.0.1:{up}"))
        .arg("--")
        .arg("python3")
        .arg(app(&dir))
        .arg(up.to_string())
        .args(app_args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let wrap = cmd.spawn().expect("spawn witness wrap");
    wait_until(
        "the app answering through the proxy",
        Duration::from_secs(30),
        || TcpStream::connect(("127.0.0.1", up)).is_ok() && get(listen, "/health") == 200,
    );
    let statuses: Vec<u16> = (0..9).map(|_| get(listen, "/call")).collect();
    kill(wrap.id() as i32, 15);
    let out = wait_bounded(wrap, Duration::from_secs(30));
    let (so, se) = text(&out);
    eprintln!("stdout:\n{so}\nstderr:\n{se}");
    Proxied {
        statuses,
        report: json(&report),
        said: format!("{so}\n{se}"),
        trace: json(&trace),
    }
}

fn call_row<'a>(report: &'a serde_json::Value, group: &str) -> &'a serde_json::Value {
    report["observed"]["calls"]
        .as_array()
        .unwrap_or_else(|| panic!("no observed calls in {report:#}"))
        .iter()
        .find(|c| c["group"] == group)
        .unwrap_or_else(|| panic!("no row {group} in {report:#}"))
}

#[test]
fn calls_through_wrap_s_proxy_answered_503_by_a_2s_handler_timeout_are_errors_at_the_timer() {
    if !asgi() {
        return;
    }
    let Proxied {
        statuses,
        report,
        said,
        trace,
    } = proxied("classify-proxy-timer", &["--every", "3"]);
    assert_eq!(
        statuses.iter().filter(|&&s| s == 503).count(),
        3,
        "{statuses:?}"
    );
    let c = call_row(&report, "http GET /call");
    let counts = &c["counts"];
    assert_eq!(counts["ok"], 6, "{c:#}");
    assert_eq!(counts["error"], 3, "{c:#}");
    assert_eq!(counts["rejected"], 0, "{c:#}");
    let kinds = c["failed_by_kind"].as_array().unwrap();
    assert_eq!(kinds.len(), 1, "{c:#}");
    assert_eq!(kinds[0]["outcome"], AT_TIMER, "{c:#}");
    assert_eq!(kinds[0]["count"], 3, "{c:#}");
    assert!(kinds[0]["min_s"].as_f64().unwrap() >= 1.9, "{c:#}");
    let failures = c["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 3, "{c:#}");
    assert!(failures.iter().all(|f| f["outcome"] == AT_TIMER), "{c:#}");
    let found = refusal_timers(&report);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("calls seen by wrap (proxy) GET /call: 3 requests were answered HTTP 503 after 2.")
            && found[0].ends_with(
                "; counted as failures at that timer, not refusals (calls seen by wrap (proxy) GET /call)"
            ),
        "{}",
        found[0]
    );
    assert!(
        said.contains(AT_TIMER),
        "the terminal names the failures:\n{said}"
    );
    let t = traced_as(&trace, "observed");
    let at = t
        .iter()
        .filter(|(o, w)| o == "error" && w == AT_TIMER)
        .count();
    assert_eq!(at, 3, "{t:?}");
    assert!(t.iter().all(|(o, _)| o != "rejected"), "{t:?}");
}

#[test]
fn calls_through_wrap_s_proxy_refused_503_at_once_stay_rejected() {
    if !asgi() {
        return;
    }
    let Proxied {
        statuses,
        report,
        said,
        trace,
    } = proxied("classify-proxy-capacity", &["--every", "3", "--now"]);
    assert_eq!(
        statuses.iter().filter(|&&s| s == 503).count(),
        3,
        "{statuses:?}"
    );
    let c = call_row(&report, "http GET /call");
    let counts = &c["counts"];
    assert_eq!(
        (&counts["ok"], &counts["error"], &counts["rejected"]),
        (&6.into(), &0.into(), &3.into()),
        "{c:#}"
    );
    assert!(refusal_timers(&report).is_empty(), "{report:#}");
    assert!(!said.contains("timer inside the server"), "{said}");
    let t = traced_as(&trace, "observed");
    assert_eq!(
        t.iter().filter(|(o, _)| o == "rejected").count(),
        3,
        "{t:?}"
    );
    assert!(t.iter().all(|(o, _)| o != "error"), "{t:?}");
}
