//! `witness replay FILE`: a recording played again as load, against real processes. An MCP session
//! from the official Python SDK's client, recorded through `wrap --record` against a server whose
//! `work` holds one lock, replayed at 1×, 2×, 4×, 8× (the speed where its calls queue fails and is
//! named) and searched with --find-limit; a browser-style HAR written by hand replayed with --url
//! against python's http.server; bad input said and exit 2.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

use common::*;
use serde_json::Value;

fn need_sdk() -> bool {
    have(
        "the MCP Python SDK (mcp)",
        "python3 -c 'import mcp.client.stdio, mcp.server.mcpserver'",
    )
}

/// One SDK session through `wrap --record`, made once for the tests of this file: 20 calls, 200 ms
/// pauses, `work` holding the lock for 200 ms. Its `work` calls are about 600 ms apart as
/// recorded: at 2× 300 ms (the lock is free again), at 4× 150 ms (each waits for the one before:
/// the tenth about 450 ms).
fn recording() -> &'static PathBuf {
    static REC: OnceLock<PathBuf> = OnceLock::new();
    REC.get_or_init(|| {
        let dir = tempdir("replay-rec");
        let rec = dir.join("session.jsonl");
        let out = run_bounded(
            Command::new("python3")
                .arg(py("session_client.py"))
                .args(["20", "--"])
                .arg(witness())
                .args(["wrap", "--journal"])
                .arg(dir.join("j.jsonl"))
                .arg("--record")
                .arg(&rec)
                .args(["--", "python3"])
                .arg(py("lock_server.py"))
                .env("PAUSE_MS", "200")
                .env("WORK_MS", "200"),
            Duration::from_secs(120),
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("done 20"),
            "the recorded session did not finish:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        rec
    })
}

fn replay(dir: &Path, args: &[&str], tail: &[&str]) -> (Output, Value) {
    replay_env(dir, args, tail, &[])
}

fn replay_env(dir: &Path, args: &[&str], tail: &[&str], env: &[(&str, &str)]) -> (Output, Value) {
    let report = dir.join("r.json");
    let out = run_bounded(
        Command::new(witness())
            .arg("replay")
            .args(args)
            .args(["--settle", "100ms", "--gpu", "off", "--journal"])
            .arg(dir.join("j.jsonl"))
            .arg("--report")
            .arg(&report)
            .arg("--html")
            .arg(dir.join("r.html"))
            .args(tail)
            .envs(env.iter().copied()),
        Duration::from_secs(120),
    );
    eprintln!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, json(&report))
}

/// The lock server after `--`, with a health limit for its first answer (the SDK's import alone
/// takes seconds on a busy machine, and a handshake past --health-timeout is never ready) and a
/// slack that a busy machine's scheduling stays within (an `echo` recorded in 3 ms took 80 ms
/// while other builds ran), far below the queue at 4×.
fn lock_server() -> Vec<&'static str> {
    static SERVER: OnceLock<String> = OnceLock::new();
    let path = SERVER.get_or_init(|| py("lock_server.py").to_str().unwrap().to_string());
    vec![
        "--health-timeout",
        "30s",
        "--cliff-slack",
        "150ms",
        "--",
        "python3",
        path,
    ]
}

fn speeds(r: &Value) -> Vec<(f64, String, u64, u64)> {
    r["replay"]["speeds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let compared = s["answers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a["compared"].as_u64().unwrap())
                .sum();
            (
                s["speed"].as_f64().unwrap(),
                s["verdict"].as_str().unwrap().to_string(),
                compared,
                s["differed"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// The SDK session at 1×, 2×, 4×, 8×: 1× and 2× pass with every answer as recorded; at 4× the calls
/// of `work` queue on the lock and the level fails, named with its p99 against the speed that held.
#[test]
fn a_recorded_sdk_session_holds_at_1x_and_fails_where_its_calls_queue() {
    if !need_sdk() {
        return;
    }
    let rec = recording().to_str().unwrap().to_string();
    let dir = tempdir("replay-speeds");
    let (out, r) = replay(&dir, &[&rec, "--speeds", "1x,2x,4x,8x"], &lock_server());
    assert_eq!(out.status.code(), Some(1), "a speed failed: exit 1");
    let s = speeds(&r);
    assert_eq!(s.len(), 4, "{s:?}");
    // 21 calls a session: tools/list and the 20 tool calls, every answer compared.
    for (speed, verdict, compared, differed) in &s[..2] {
        assert_eq!(verdict, "pass", "{speed}×: {s:?}");
        assert_eq!((*compared, *differed), (21, 0), "{speed}×: {s:?}");
    }
    assert_eq!(s[2].1, "fail", "4×: the work calls queue: {s:?}");
    assert_eq!(s[3].1, "fail", "8×: {s:?}");
    let words = r["replay"]["words"].as_str().unwrap();
    assert!(
        words.starts_with("holds 2×; at 4× the calls of `tools/call work` queued: p99 "),
        "{words}"
    );
    let level = &r["levels"][2];
    assert!(
        level["reasons"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x.as_str().unwrap().contains("`tools/call work` queued")),
        "{level}"
    );
    // The echo calls never wait for the lock: their answers still match at every speed.
    assert!(s.iter().all(|x| x.3 == 0), "{s:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("replay: holds 2×; at 4×"), "{stderr}");
    assert!(
        stderr.contains("opened with the recorded initialize"),
        "{stderr}"
    );
    // Each speed is named as a speed in every view, never by its arrival rate or a cap on requests
    // in flight; its max is never below its ok latency's.
    let stdout = String::from_utf8_lossy(&out.stdout);
    for (i, name) in ["1×", "2×", "4×", "8×"].iter().enumerate() {
        let level = &r["levels"][i];
        assert_eq!(level["name"], *name, "{level:#}");
        assert!(level["concurrency"].is_null(), "{level:#}");
        if let (Some(max), Some(lat)) = (level["max_s"].as_f64(), level["latency"]["max"].as_f64())
        {
            assert!(max >= lat, "max_s {max} < latency.max {lat}: {level:#}");
        }
        assert!(
            stdout
                .lines()
                .any(|l| l.split_whitespace().next() == Some(*name)),
            "no row for {name} on stdout:\n{stdout}"
        );
    }
    assert!(
        !stderr.contains("--duration or --rounds"),
        "replay has neither flag: {stderr}"
    );
    assert!(
        stderr.contains("--sessions plays more copies of the session at each speed"),
        "the legend names replay's own flag: {stderr}"
    );
    let html = std::fs::read_to_string(dir.join("r.html")).unwrap();
    assert!(html.contains("speed 4×"), "the HTML names the speed");
    // Each level's band, where it is wide enough for a label, is labelled with its speed.
    let mut labelled = 0;
    for band in html.split("<g><title>level ").skip(1) {
        let band = band.split("</g>").next().unwrap();
        let name = band.split(' ').next().unwrap();
        if let Some(label) = band.split("\">").last().filter(|_| band.contains("<text")) {
            assert_eq!(label.trim_end_matches("</text>"), name, "{band}");
            labelled += 1;
        }
    }
    assert!(labelled > 0, "no band wide enough for its label");
    for l in html.split("<title>level ").skip(1) {
        let head: String = l.chars().take(40).collect();
        assert!(
            head.contains("(speed "),
            "a level named by its rate: {head}"
        );
    }
    assert!(
        html.contains("id=\"replay\""),
        "the HTML has the replay section"
    );
    assert!(
        html.contains("class=\"replay-pacing\""),
        "and the pacing rows"
    );
    // `witness report` re-renders the replay from its journal alone.
    let again = run_bounded(
        Command::new(witness())
            .args(["report", "--format", "json"])
            .arg(dir.join("j.jsonl")),
        Duration::from_secs(30),
    );
    let again: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(again["replay"]["words"], r["replay"]["words"]);
    crate::one_truth::views_agree(&dir.join("j.jsonl"));
}

/// --find-limit searches the speed: from 1×, doubling until a speed fails, then bisecting; the
/// highest speed that holds is at least 2× and below 4×.
#[test]
fn find_limit_reports_the_highest_speed_that_holds() {
    if !need_sdk() {
        return;
    }
    let rec = recording().to_str().unwrap().to_string();
    let dir = tempdir("replay-limit");
    let (out, r) = replay(
        &dir,
        &[&rec, "--find-limit", "--resolution", "30%"],
        &lock_server(),
    );
    // A limit was found: exit 0; on a busy machine the search may end where witness itself fell
    // behind its schedule, a limit then said to be witness's own (exit 1), never the server's.
    match out.status.code() {
        Some(0) => {}
        Some(1) => assert_eq!(r["limit"]["witness_bound"], true, "{}", r["limit"]),
        c => panic!("exit {c:?}: {}", r["limit"]),
    }
    assert_eq!(r["limit"]["over"], "speeds");
    let holds = r["limit"]["holds"].as_f64().unwrap();
    assert!((2.0..4.0).contains(&holds), "{}", r["limit"]);
    if out.status.code() == Some(0) {
        let words = r["limit"]["words"].as_str().unwrap();
        assert!(words.starts_with("holds the recording at "), "{words}");
        assert_eq!(r["replay"]["held"].as_f64(), Some(holds));
        let words = r["replay"]["words"].as_str().unwrap();
        assert!(
            words.contains("the calls of `tools/call work` queued"),
            "{words}"
        );
    }
}

/// A HAR as a browser writes one (HTTP/2 pseudo-headers, an encoding, timings, a 404), replayed
/// with --url against python's http.server: every answer as recorded. The same HAR with one
/// recorded body of another shape, played as two sessions at once: that answer differs each time,
/// and the speed fails.
#[test]
fn a_browser_style_har_replays_against_the_url_with_no_difference() {
    if !have("python3", "python3 -c 'import http.server'") {
        return;
    }
    let dir = tempdir("replay-har");
    let site = dir.join("site");
    std::fs::create_dir_all(&site).unwrap();
    std::fs::write(
        site.join("a.json"),
        r#"{"items":[{"id":1,"name":"x"}],"total":1}"#,
    )
    .unwrap();
    std::fs::write(site.join("b.txt"), "plain words\n").unwrap();
    let entry = |at: &str, path: &str, status: u16, mime: &str, text: &str| {
        serde_json::json!({
            "startedDateTime": at, "time": 3.2,
            "request": {"method": "GET", "url": format!("https://shop.example:8443{path}"),
                "httpVersion": "h2",
                "headers": [{"name": ":authority", "value": "shop.example:8443"},
                            {"name": "accept-encoding", "value": "gzip, br"},
                            {"name": "user-agent", "value": "Mozilla/5.0"}],
                "queryString": [], "cookies": [], "headersSize": -1, "bodySize": 0},
            "response": {"status": status, "statusText": "", "httpVersion": "h2", "headers": [],
                "cookies": [], "content": {"size": text.len(), "mimeType": mime, "text": text},
                "redirectURL": "", "headersSize": -1, "bodySize": -1},
            "cache": {}, "timings": {"blocked": -1, "dns": -1, "connect": -1, "send": 0, "wait": 3, "receive": 0.2},
            "_priority": "High"
        })
    };
    let har = |a_json: &str| {
        serde_json::json!({"log": {"version": "1.2",
        "creator": {"name": "Firefox", "version": "132.0"},
        "browser": {"name": "Firefox", "version": "132.0"},
        "pages": [{"startedDateTime": "2026-11-02T10:00:00.000+01:00", "id": "page_1", "title": "shop", "pageTimings": {}}],
        "entries": [
            entry("2026-11-02T10:00:00.100+01:00", "/a.json", 200, "application/json", a_json),
            entry("2026-11-02T10:00:00.350+01:00", "/b.txt", 200, "text/plain", "plain words\n"),
            entry("2026-11-02T10:00:00.600+01:00", "/missing?x=1", 404, "text/html", "<html>not found</html>"),
        ]}})
    };
    let file = dir.join("browser.har");
    let same = r#"{"items":[{"id":7,"name":"y"}],"total":3}"#;
    std::fs::write(&file, serde_json::to_vec_pretty(&har(same)).unwrap()).unwrap();
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/");
    let server = [
        "--",
        "python3",
        "-m",
        "http.server",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--directory",
        site.to_str().unwrap(),
    ];
    let (out, r) = replay(
        &dir,
        &[file.to_str().unwrap(), "--url", &url, "--speeds", "1x,2x"],
        &server,
    );
    assert_eq!(out.status.code(), Some(0), "every speed held");
    assert_eq!(r["replay"]["transport"], "http");
    crate::one_truth::views_agree(&dir.join("j.jsonl"));
    for (speed, verdict, compared, differed) in speeds(&r) {
        assert_eq!(
            (verdict.as_str(), compared, differed),
            ("pass", 3, 0),
            "{speed}×"
        );
    }
    // The same body with a value of another type: that answer differs, and says where.
    let dir2 = tempdir("replay-har-diff");
    let other = r#"{"items":[{"id":"7","name":"y"}],"total":3}"#;
    let file2 = dir2.join("browser.har");
    std::fs::write(&file2, serde_json::to_vec_pretty(&har(other)).unwrap()).unwrap();
    let args = [file2.to_str().unwrap(), "--url", &url, "--sessions", "2"];
    let (out, r) = replay(&dir2, &args, &server);
    assert_eq!(
        out.status.code(),
        Some(1),
        "an answer differed: the speed fails"
    );
    // Two copies of the session at once: every answer compared, the one kind differing twice.
    let s = speeds(&r);
    assert_eq!((s[0].2, s[0].3), (6, 2), "{s:?}");
    let how = r["replay"]["sessions_how"].as_str().unwrap();
    assert!(how.starts_with("2 copies of the session at once"), "{how}");
    let first = &r["replay"]["speeds"][0]["answers"][0];
    assert_eq!(first["name"], "GET /a.json");
    assert!(
        first["first"][0]
            .as_str()
            .unwrap()
            .contains("$.items[0].id was string in the recording, number now"),
        "{first}"
    );
}

/// What cannot be replayed is said, with how to fix it, and exit 2: a file that is not a
/// recording, a stdio recording given --url and no command, a speed of 0x.
#[test]
fn bad_input_is_said_and_exits_2() {
    let dir = tempdir("replay-bad");
    let junk = dir.join("notes.txt");
    std::fs::write(&junk, "hello, not a recording\n").unwrap();
    let stdio = dir.join("s.jsonl");
    std::fs::write(
        &stdio,
        "{\"witness_recording\":1,\"transport\":\"stdio\",\"started_unix_ms\":5,\"command\":[\"x\"],\"max_bytes\":9,\"answer_bytes\":9}\n\
         {\"t\":0.5,\"from\":\"client\",\"msg\":{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{}}}\n\
         {\"t\":0.9,\"from\":\"client\",\"msg\":{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}}\n",
    )
    .unwrap();
    let run = |args: &[&str]| {
        let out = run_bounded(
            Command::new(witness()).arg("replay").args(args),
            Duration::from_secs(30),
        );
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, err) = run(&[junk.to_str().unwrap(), "--url", "http://127.0.0.1:9/"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("is not a HAR file") && err.contains("wrap --record"),
        "{err}"
    );
    let (code, err) = run(&[stdio.to_str().unwrap(), "--url", "http://127.0.0.1:9/"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("recorded over stdio") && err.contains("not --url"),
        "{err}"
    );
    let (code, err) = run(&[stdio.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("give the server's command after `--`"),
        "{err}"
    );
    let (code, err) = run(&[stdio.to_str().unwrap(), "--speeds", "1x,0x", "--", "true"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("a speed must be above 0"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// An HTTP session recorded through `wrap --proxy --record` (curl with an `Authorization` header, to
/// a server that requires it) replays against the same server with 0 differences: the masked
/// credential is not sent, the one given with --header is, and it is in no artifact.
#[test]
fn a_har_recorded_through_the_proxy_replays_with_no_difference() {
    let Some(curl) = tool("curl", &[]) else {
        return;
    };
    let dir = tempdir("replay-proxy");
    let har = dir.join("session.har");
    let token = "tok-replay-31-bearer";
    let (listen, up) = (free_port(), free_port());
    let mut wrap = Command::new(witness());
    wrap.args(["wrap", "--journal"])
        .arg(dir.join("wrap.jsonl"))
        .arg("--proxy")
        .arg(format!("127.0.0.1:{listen}=127.0.0.1:{up}"))
        .arg("--record")
        .arg(&har)
        .arg("--")
        .arg(toy())
        .args([
            "--port",
            &up.to_string(),
            "--require-secret-env",
            "REPLAY_SECRET",
        ])
        .env("REPLAY_SECRET", token)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let wrap = wrap.spawn().unwrap();
    let call = |path: &str, auth: bool| {
        let mut c = Command::new(&curl);
        c.args(["-sS", "-o", "/dev/null", "-w", "%{http_code}"]);
        if auth {
            c.args(["-H", &format!("Authorization: Bearer {token}")]);
            c.args(["-H", "Content-Type: application/json", "--data-binary"]);
            c.arg(r#"{"q":"x"}"#);
        }
        let out = run_bounded(
            c.arg(format!("http://127.0.0.1:{listen}{path}")),
            Duration::from_secs(20),
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    wait_until(
        "the server through the proxy",
        Duration::from_secs(15),
        || call("/health", false) == "200",
    );
    for _ in 0..3 {
        assert_eq!(call("/call", true), "200");
        std::thread::sleep(Duration::from_millis(100));
    }
    kill(wrap.id() as i32, 15);
    let _ = wait_bounded(wrap, Duration::from_secs(20));
    let port = free_port();
    let (out, r) = replay_env(
        &dir,
        &[
            har.to_str().unwrap(),
            "--url",
            &format!("http://127.0.0.1:{port}/"),
            "--header",
            &format!("Authorization: Bearer {token}"),
        ],
        &[
            "--",
            toy().to_str().unwrap(),
            "--port",
            &port.to_string(),
            "--require-secret-env",
            "REPLAY_SECRET",
        ],
        &[("REPLAY_SECRET", token)],
    );
    assert_eq!(out.status.code(), Some(0), "the replay held");
    let s = speeds(&r);
    assert!(
        s[0].2 >= 4,
        "the health checks and the 3 calls compared: {s:?}"
    );
    assert_eq!(s[0].3, 0, "{s:?}");
    let notes = r["replay"]["notes"].to_string();
    assert!(notes.contains("masked"), "{notes}");
    for f in ["j.jsonl", "r.json", "r.html"] {
        let text = std::fs::read_to_string(dir.join(f)).unwrap();
        assert!(!text.contains(token), "the token is in {f}");
    }
    assert!(!String::from_utf8_lossy(&out.stderr).contains(token));
}

/// `--sessions 3` over stdio: one server process serves one client, so the three copies of the
/// session go over witness's one session with its own request ids. Every call of every copy is
/// answered with its own answer (the same ids sent three times over would leave two copies
/// unanswered or answered with another call's text), and the report says how it was played.
#[test]
fn three_sessions_of_a_stdio_recording_share_one_server_session_with_ids_rewritten() {
    let dir = tempdir("replay-sessions");
    let server = env!("CARGO_BIN_EXE_mcp_server");
    // The client's session: the handshake, then five echo calls with distinct texts, 50 ms apart.
    let mut calls = vec![
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#.to_string(),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_string(),
    ];
    for i in 0..5 {
        calls.push(format!(
            r#"{{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"call {i}"}}}}}}"#,
            i + 2
        ));
    }
    let rec = dir.join("session.jsonl");
    let mut wrap = Command::new(witness())
        .args(["wrap", "--gpu", "off", "--journal"])
        .arg(dir.join("wrap.jsonl"))
        .arg("--record")
        .arg(&rec)
        .args(["--", server])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = wrap.stdin.take().unwrap();
        for c in &calls {
            writeln!(stdin, "{c}").unwrap();
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let recorded = wait_bounded(wrap, Duration::from_secs(30));
    assert_eq!(
        recorded.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&recorded.stderr)
    );
    let (out, r) = replay(
        &dir,
        &[
            rec.to_str().unwrap(),
            "--speeds",
            "1x,2x",
            "--sessions",
            "3",
        ],
        &["--", server],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(
            "3 sessions multiplexed on witness's one stdio session (one server process serves one client), request ids rewritten"
        ),
        "{stderr}"
    );
    // Each speed: 3 copies × 5 calls, every one ok and answered as recorded.
    assert_eq!(
        speeds(&r),
        vec![
            (1.0, "pass".to_string(), 15, 0),
            (2.0, "pass".to_string(), 15, 0)
        ],
        "{:#}",
        r["replay"]
    );
    for l in r["levels"].as_array().unwrap() {
        assert_eq!(l["counts"]["ok"], 15, "{l:#}");
    }
}
