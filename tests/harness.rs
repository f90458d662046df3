//! Whatever witness prints must be a measurement of the server, never of the harness: no ok
//! request's latency holds time when no server process ran (issue 20, part 5), witness itself never
//! takes a connection the server needs (part 6), and a GET carries no body it did not ask for
//! (part 7). Real servers, restarted under load where it matters; every check reads the journal.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;

fn mcp_server() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_mcp_server"))
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Clock reads around an exit or a spawn (the supervisor's wait returning, the pipes handed over)
/// are not the server's; anything longer inside a span with no server process is the harness's.
const TOLERANCE_S: f64 = 0.02;

/// The spans of the run when no server process ran: from each exit to the next spawn (or the end).
fn no_server_spans(j: &[serde_json::Value]) -> Vec<(f64, f64)> {
    let t = |e: &serde_json::Value| e["t_s"].as_f64().unwrap();
    let spawns: Vec<f64> = j.iter().filter(|e| e["kind"] == "spawn").map(t).collect();
    j.iter()
        .filter(|e| e["kind"] == "exit")
        .map(|e| {
            let exit = t(e);
            let back = spawns
                .iter()
                .copied()
                .find(|s| *s >= exit)
                .unwrap_or(f64::INFINITY);
            (exit, back)
        })
        .collect()
}

/// Every ok request against the spans with no server: the worst overlap, and the request. A late
/// soak send's latency counts from when it was due (`scheduled_s`), so its span starts there.
fn worst_overlap(j: &[serde_json::Value]) -> (f64, Option<serde_json::Value>, usize) {
    let spans = no_server_spans(j);
    let mut worst = (0.0, None, 0);
    for r in j
        .iter()
        .filter(|e| e["kind"] == "request" && e["outcome"]["kind"] == "ok")
    {
        worst.2 += 1;
        let start = r["start_s"].as_f64().unwrap();
        let from = r["scheduled_s"].as_f64().unwrap_or(start).min(start);
        let end = start + r["duration_s"].as_f64().unwrap();
        for &(down, up) in &spans {
            let overlap = end.min(up) - from.max(down);
            if overlap > worst.0 {
                worst = (overlap, Some(r.clone()), worst.2);
            }
        }
    }
    worst
}

/// The invariant, with what the journal holds around a violation in the message.
fn assert_never_the_harness_s_wait(journal: &Path, restarts_at_least: usize) {
    let j = journal_lines(journal);
    let spans = no_server_spans(&j);
    assert!(
        spans.len() >= restarts_at_least,
        "the run was to restart the server at least {restarts_at_least} times: {spans:?}"
    );
    let (overlap, req, ok) = worst_overlap(&j);
    assert!(ok > 0, "no ok request at all: nothing was checked");
    eprintln!(
        "{ok} ok requests checked against {} spans with no server {spans:?}; worst overlap {:.4} s",
        spans.len(),
        overlap
    );
    assert!(
        overlap <= TOLERANCE_S,
        "an ok request's latency holds {overlap:.3} s when no server process ran (spans {spans:?}): {:#}",
        req.unwrap_or_default()
    );
}

/// `witness load … --journal J --report R -- SERVER…`, bounded.
fn load(args: &[&str], server: &[&str], dir: &Path) -> std::process::Output {
    run_bounded(
        Command::new(witness())
            .arg("load")
            .args(args)
            .arg("--report")
            .arg(dir.join("r.json"))
            .arg("--journal")
            .arg(dir.join("j.jsonl"))
            .arg("--")
            .args(server),
        Duration::from_secs(90),
    )
}

#[test]
fn mcp_stdio_calls_waiting_for_a_restart_are_timed_from_the_new_process() {
    let dir = tempdir("harness-mcp-stdio");
    // The watchdog ends the server every 1.5 s; each restart waits 400 ms. Four callers keep calls
    // queued on the 20 ms lock, so calls are always waiting when it dies.
    let out = load(
        &[
            "--mcp",
            "search",
            "--args",
            r#"{"query":"x"}"#,
            "--levels",
            "4,4,4",
            "--duration",
            "2s",
            "--settle",
            "100ms",
            "--timeout",
            "5s",
            "--restart",
            "always",
            "--backoff",
            "400ms",
            "--healthy-after",
            "1s",
        ],
        &[
            mcp_server().to_str().unwrap(),
            "--lock",
            "20ms",
            "--watchdog",
            "1500ms",
        ],
        &dir,
    );
    assert!(out.status.code().is_some(), "{}", stderr(&out));
    assert_never_the_harness_s_wait(&dir.join("j.jsonl"), 2);
}

#[test]
fn mcp_http_calls_waiting_for_a_restart_are_timed_from_the_new_process() {
    let dir = tempdir("harness-mcp-http");
    let port = free_port().to_string();
    let out = load(
        &[
            "--mcp",
            "search",
            "--args",
            r#"{"query":"x"}"#,
            "--url",
            &format!("http://127.0.0.1:{port}/mcp"),
            "--levels",
            "4,4,4",
            "--duration",
            "2s",
            "--settle",
            "100ms",
            "--timeout",
            "5s",
            "--restart",
            "always",
            "--backoff",
            "400ms",
            "--healthy-after",
            "1s",
        ],
        &[
            mcp_server().to_str().unwrap(),
            "--http",
            &port,
            "--lock",
            "20ms",
            "--watchdog",
            "1500ms",
        ],
        &dir,
    );
    assert!(out.status.code().is_some(), "{}", stderr(&out));
    assert_never_the_harness_s_wait(&dir.join("j.jsonl"), 2);
    // After each restart every worker opens a new session on the new process: calls on the dead
    // one's session id would only be refused (HTTP 400 or 404), witness's doing, not the server's.
    let report = json(&dir.join("r.json"));
    for l in report["levels"].as_array().unwrap() {
        let stale: u64 = ["error: HTTP 400", "error: HTTP 404"]
            .iter()
            .filter_map(|k| l["errors_by_kind"][*k].as_u64())
            .sum();
        assert!(stale <= 16, "{stale} calls on a dead session: {l:#}");
    }
}

#[test]
fn http_requests_waiting_for_a_restart_are_timed_from_the_new_process() {
    let dir = tempdir("harness-http");
    let port = free_port().to_string();
    let out = load(
        &[
            "--url",
            &format!("http://127.0.0.1:{port}/call"),
            "--levels",
            "4,4,4",
            "--duration",
            "2s",
            "--settle",
            "100ms",
            "--timeout",
            "5s",
            "--restart",
            "always",
            "--backoff",
            "400ms",
            "--healthy-after",
            "1s",
        ],
        &[
            toy().to_str().unwrap(),
            "--port",
            &port,
            "--call",
            "lock:5ms",
            "--watchdog",
            "1500ms",
        ],
        &dir,
    );
    assert!(out.status.code().is_some(), "{}", stderr(&out));
    assert_never_the_harness_s_wait(&dir.join("j.jsonl"), 2);
}

#[test]
fn a_stdio_soak_s_calls_waiting_for_a_restart_are_timed_from_the_new_process() {
    let dir = tempdir("harness-soak");
    let out = run_bounded(
        Command::new(witness())
            .args(["soak", "--plan"])
            .arg(repo().join("examples/plans/mcp-stdio.toml"))
            .args(["--gpu", "off", "--duration", "5s"])
            .args(["--inject", "kill@1s", "--inject", "kill@3s"])
            .args(["--restart", "always", "--backoff", "500ms"])
            .arg("--report")
            .arg(dir.join("r.json"))
            .arg("--journal")
            .arg(dir.join("j.jsonl"))
            .arg("--")
            .args([mcp_server().to_str().unwrap(), "--lock", "20ms"]),
        Duration::from_secs(90),
    );
    assert!(out.status.code().is_some(), "{}", stderr(&out));
    assert_never_the_harness_s_wait(&dir.join("j.jsonl"), 2);
}

// ---- witness is never the load, counted (part 6) --------------------------------------------------

#[test]
fn a_server_limited_to_3_connections_serves_levels_1_2_3_because_witness_lets_go_of_its_own() {
    let dir = tempdir("harness-held");
    let port = free_port().to_string();
    // toy_server answers 503 on every request of a connection beyond its third.
    let out = load(
        &[
            "--url",
            &format!("http://127.0.0.1:{port}/call"),
            "--levels",
            "1,2,3",
            "--rounds",
            "30",
            "--settle",
            "100ms",
            "--timeout",
            "5s",
        ],
        &[
            toy().to_str().unwrap(),
            "--port",
            &port,
            "--call",
            "sleep:2ms",
            "--max-conns",
            "3",
        ],
        &dir,
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let report = json(&dir.join("r.json"));
    let levels = report["levels"].as_array().unwrap();
    assert_eq!(levels.len(), 3);
    // First what the server saw (no refusal), then witness's own count.
    for (l, n) in levels.iter().zip(1..) {
        assert_eq!(l["counts"]["rejected"], 0, "{l:#}");
        assert_eq!(l["verdict"], "pass", "{l:#}");
        assert_eq!(l["counts"]["ok"], 30 * n, "{l:#}");
    }
    for (l, n) in levels.iter().zip(1..) {
        assert_eq!(
            l["held"], n,
            "level {n} held its workers' connections only: {l:#}"
        );
    }
    assert_eq!(report["held"]["at_most"], 3);
    let words = "witness itself held at most 3 connections to the server at once (level n=3: one per worker; its health probe's connection is closed during each level)";
    assert_eq!(report["held"]["words"], words);
    assert!(err.contains(words), "{err}");
    // The journal has it per level, and the health probes still ran before and after each.
    let j = journal_lines(&dir.join("j.jsonl"));
    let ends: Vec<_> = j.iter().filter(|e| e["kind"] == "level_end").collect();
    assert_eq!(ends.len(), 3);
    assert!(
        ends.iter().zip(1..).all(|(e, n)| e["held"] == n),
        "{ends:#?}"
    );
    let probes = j.iter().filter(|e| e["kind"] == "health").count();
    assert!(probes >= 6, "{probes} health probes");
}

#[test]
fn mcp_over_http_holds_one_connection_per_worker_and_none_for_its_ping_during_a_level() {
    let dir = tempdir("harness-held-mcp");
    let port = free_port().to_string();
    let out = load(
        &[
            "--mcp",
            "sleep",
            "--args",
            r#"{"ms":2}"#,
            "--url",
            &format!("http://127.0.0.1:{port}/mcp"),
            "--levels",
            "1,4",
            "--rounds",
            "30",
            "--settle",
            "100ms",
        ],
        &[mcp_server().to_str().unwrap(), "--http", &port],
        &dir,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = json(&dir.join("r.json"));
    for (l, n) in report["levels"].as_array().unwrap().iter().zip([1, 4]) {
        assert_eq!(l["counts"]["ok"], 30 * n, "{l:#}");
        assert_eq!(l["held"], n, "one connection per worker's session: {l:#}");
    }
}

// ---- GET, HEAD, DELETE and OPTIONS carry no body (part 7) -----------------------------------------

/// Python's standard HTTP server, on HTTP/1.1 keep-alive: it reads no body of a GET, so a stray one
/// is the start of the next request (501).
#[test]
fn a_get_carries_no_body_and_python_s_http_server_answers_every_request() {
    if !have("python3", "python3 -c 'import http.server'") {
        return;
    }
    let dir = tempdir("harness-pyget");
    let port = free_port().to_string();
    let url = format!("http://127.0.0.1:{port}/");
    let out = load(
        &[
            "--url",
            &url,
            "--method",
            "GET",
            "--health-url",
            &url,
            "--levels",
            "1,2",
            "--rounds",
            "10",
            "--settle",
            "100ms",
        ],
        &[
            "python3",
            "-m",
            "http.server",
            &port,
            "--bind",
            "127.0.0.1",
            "--protocol",
            "HTTP/1.1",
            "--directory",
            dir.to_str().unwrap(),
        ],
        &dir,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = json(&dir.join("r.json"));
    for l in report["levels"].as_array().unwrap() {
        assert_eq!(l["counts"]["error"], 0, "{l:#}");
        assert_eq!(l["verdict"], "pass", "{l:#}");
    }
}

/// A server that writes down every request it reads (method, headers, body) as a JSON line.
const CAPTURE: &str = r#"
import json, socketserver, sys
log = open(sys.argv[2], "a", buffering=1)
class H(socketserver.StreamRequestHandler):
    def handle(self):
        while True:
            line = self.rfile.readline()
            if not line:
                return
            method = line.split(b" ")[0].decode()
            headers = {}
            while True:
                h = self.rfile.readline()
                if h in (b"\r\n", b"\n", b""):
                    break
                k, _, v = h.decode().partition(":")
                headers[k.strip().lower()] = v.strip()
            n = int(headers.get("content-length", "0"))
            body = self.rfile.read(n).decode() if n else ""
            if not line.split(b" ")[1].startswith(b"/health"):
                log.write(json.dumps({"method": method, "headers": headers, "body": body}) + "\n")
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n" + (b"" if method == "HEAD" else b"ok"))
class S(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True
S(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"#;

/// What the capture server read from one `witness load --method METHOD [--body BODY]`.
fn captured(method: &str, body: Option<&str>) -> Vec<serde_json::Value> {
    let dir = tempdir(&format!("harness-capture-{method}"));
    let script = dir.join("capture.py");
    std::fs::write(&script, CAPTURE).unwrap();
    let log = dir.join("requests.jsonl");
    let port = free_port().to_string();
    let mut args = vec![
        "--url".to_string(),
        format!("http://127.0.0.1:{port}/x"),
        "--method".into(),
        method.into(),
        "--levels".into(),
        "1".into(),
        "--rounds".into(),
        "3".into(),
        "--settle".into(),
        "50ms".into(),
    ];
    if let Some(b) = body {
        args.extend(["--body".into(), b.into()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = load(
        &args,
        &[
            "python3",
            script.to_str().unwrap(),
            &port,
            log.to_str().unwrap(),
        ],
        &dir,
    );
    assert_eq!(out.status.code(), Some(0), "{method}: {}", stderr(&out));
    std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn get_head_delete_and_options_carry_no_body_unless_asked_and_post_keeps_its_default() {
    if !have("python3", "python3 -c 'import socketserver'") {
        return;
    }
    for method in ["GET", "HEAD", "DELETE", "OPTIONS"] {
        let reqs = captured(method, None);
        assert_eq!(reqs.len(), 3, "{method}: {reqs:#?}");
        for r in &reqs {
            assert_eq!(r["method"], method);
            assert!(
                r["headers"].get("content-length").is_none(),
                "{method} sent a content-length: {r:#}"
            );
            assert_eq!(r["body"], "", "{r:#}");
        }
    }
    for r in captured("GET", Some(r#"{"q":1}"#)) {
        assert_eq!(r["headers"]["content-length"], "7", "{r:#}");
        assert_eq!(
            r["body"], r#"{"q":1}"#,
            "--body on a GET is still sent: {r:#}"
        );
    }
    for r in captured("POST", None) {
        assert_eq!(r["headers"]["content-length"], "2", "{r:#}");
        assert_eq!(r["body"], "{}", "{r:#}");
    }
}
