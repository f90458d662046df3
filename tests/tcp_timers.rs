//! TCP's own timers in a request's phases, against real servers on loopback: a server with a small
//! listen backlog that accepts slowly (connects that waited for a SYN retransmission), Python's
//! standard http.server writing headers and body apart (Nagle meeting the client's delayed ACK),
//! and the false alarms: a body streamed in slow chunks, a healthy server under bursts of new
//! connections. Every run is bounded in requests and time.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;

fn peer(name: &str) -> PathBuf {
    repo().join("tests/peers").join(name)
}

/// Starts `python3 tests/peers/SCRIPT PORT ARGS…` and waits until it accepts.
fn python_server(script: &str, args: &[&str]) -> (Bg, u16) {
    have("python3", "python3 -c 'import http.server'");
    let port = free_port();
    let bg = Bg::start(
        Command::new("python3")
            .arg(peer(script))
            .arg(port.to_string())
            .args(args),
    );
    wait_until("the server to listen", Duration::from_secs(10), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    (bg, port)
}

/// `witness load` attached to the server on `port`; returns the report and the journal's path.
fn load(tag: &str, port: u16, args: &[&str]) -> (serde_json::Value, PathBuf) {
    let dir = tempdir(tag);
    let (j, r) = (dir.join("j.jsonl"), dir.join("r.json"));
    let url = format!("http://127.0.0.1:{port}/");
    let out = run_bounded(
        Command::new(witness())
            .args([
                "load",
                "--url",
                &url,
                "--settle",
                "100ms",
                "--timeout",
                "10s",
            ])
            .args(args)
            .args(per_worker(args))
            .arg("--journal")
            .arg(&j)
            .arg("--report")
            .arg(&r),
        Duration::from_secs(60),
    );
    assert!(
        r.exists(),
        "no report; stderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (json(&r), j)
}

fn suspicions<'a>(report: &'a serde_json::Value, kind: &str) -> Vec<&'a str> {
    report["suspicions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["kind"] == kind)
        .map(|s| s["detail"].as_str().unwrap())
        .collect()
}

/// Connect times of a level's new connections, from the journal.
fn connects(journal: &Path, level: u32) -> Vec<f64> {
    journal_lines(journal)
        .iter()
        .filter(|v| v["kind"] == "request" && v["group"] == format!("level{level}"))
        .filter_map(|v| v["connect_s"].as_f64())
        .collect()
}

#[test]
fn connects_dropped_by_a_full_listen_queue_are_named_syn_retransmissions_with_the_kernel_s_counters(
) {
    // Backlog 7 (8 connections fit), taken every 300 ms: a burst of 16 or 32 new connections
    // overflows it and the rest connect when their SYN is sent again, 1 s later.
    let (_server, port) = python_server("slow_accept.py", &["7", "0.3"]);
    let (report, journal) = load("syn", port, &["--levels", "16,32", "--rounds", "3"]);
    let found = suspicions(&report, "syn_retransmit");
    assert!(!found.is_empty(), "{:#}", report["suspicions"]);
    for (level, n) in [(0u32, 16u32), (1, 32)] {
        let c = connects(&journal, level);
        assert_eq!(c.len(), n as usize, "one new connection per worker: {c:?}");
        // Those that waited for a retransmitted SYN: 1 s, then 2, 3 … s (linear SYN timeouts) or 3,
        // 7 s (doubling). No connect on loopback takes a second otherwise.
        let retransmitted = c.iter().filter(|&&x| x >= 0.98).count();
        let named = found
            .iter()
            .find(|d| d.starts_with(&format!("level {n}: ")));
        // 32 connects in a burst always overflow 8 places. 16 do unless a busy machine spread
        // witness's workers' connects over the server's accepts (seen under CI's load and with two
        // CPU hogs): then few waited, and those are named with their count or not at all — many
        // never go unnamed.
        if n == 16 && named.is_none() {
            assert!(retransmitted < (n / 4) as usize, "level {n} unnamed: {c:?}");
            continue;
        }
        if n == 32 {
            assert!(retransmitted >= (n / 4) as usize, "level {n}: {c:?}");
        }
        let d = named.unwrap_or_else(|| panic!("no suspicion for level {n}: {found:?}"));
        // "8 connects took 1.00 s, 16 took 2.06 s (of 32 …": the counts are the journal's.
        let counts = d[format!("level {n}: ").len()..d.find(" (of ").unwrap()]
            .split(", ")
            .map(|part| part.split(' ').next().unwrap().parse::<usize>().unwrap())
            .sum::<usize>();
        assert_eq!(counts, retransmitted, "{d}\n{c:?}");
        assert!(
            d.contains(" connects took 1.0") || d.contains(" connects took 2.0"),
            "{d}"
        );
        assert!(d.contains(&format!("(of {n} new connections): SYN retransmission — the server's listen backlog overflowed (it accepts too slowly, or its backlog is small)")), "{d}");
        assert!(
            d.contains("ListenOverflows") && d.contains("(system-wide"),
            "{d}"
        );
        assert!(
            d.contains(&format!("the listener on port {port} has a backlog of 7")),
            "{d}"
        );
        let phases = &report["levels"][level as usize]["phases"];
        assert_eq!(phases["new_connections"], n, "{phases:#}");
        assert!(
            phases["connect"]["max"].as_f64().unwrap() >= 0.98,
            "{phases:#}"
        );
    }
    // The evidence is journalled: a reading before and after each level, the backlog as listen() set it.
    let listens: Vec<serde_json::Value> = journal_lines(&journal)
        .into_iter()
        .filter(|v| v["kind"] == "listen")
        .collect();
    assert_eq!(listens.len(), 4, "{listens:?}");
    for (i, l) in listens.iter().enumerate() {
        assert_eq!(l["when"], if i % 2 == 0 { "before" } else { "after" });
        assert_eq!(l["port"], port);
        assert_eq!(l["backlog"], 7, "{l}");
        assert!(l["overflows"].as_u64().is_some(), "{l}");
    }
    let grew = |i: usize| listens[i + 1]["overflows"].as_u64() > listens[i]["overflows"].as_u64();
    assert!(grew(0) && grew(2), "{listens:?}");
}

#[test]
fn python_s_standard_http_server_pays_nagle_meeting_the_delayed_ack_and_it_is_named() {
    let (_server, port) = python_server("split_write.py", &["split"]);
    let (report, _) = load("nagle", port, &["--levels", "1,4", "--rounds", "20"]);
    let found = suspicions(&report, "nagle_delayed_ack");
    assert_eq!(found.len(), 2, "{:#}", report["suspicions"]);
    for d in &found {
        // The delayed ACK's ~40 ms, read 38 ms at the shortest (the window is 38–60 ms).
        assert!(
            d.contains("ok responses' bodies arrived 4")
                || d.contains("ok responses' bodies arrived 38"),
            "{d}"
        );
        assert!(d.contains("ms after their headers: Nagle's algorithm on the server meeting the client's delayed ACK"), "{d}");
        assert!(d.contains("A real cost every client of this server pays (wrk, oha, browsers), not the harness's: set TCP_NODELAY on the server's sockets, or write the response in one write"), "{d}");
    }
    for l in report["levels"].as_array().unwrap() {
        // The measurement itself: ~40 ms for a handler that answers at once, all of it the body's.
        let p50 = l["latency"]["p50"].as_f64().unwrap();
        assert!((0.038..0.065).contains(&p50), "{l:#}");
        let body = l["phases"]["body"]["p50"].as_f64().unwrap();
        let headers = l["phases"]["headers"]["p50"].as_f64().unwrap();
        assert!(body >= 0.038 && headers < 0.01, "{:#}", l["phases"]);
    }
}

#[test]
fn a_body_streamed_in_slow_chunks_is_not_nagle() {
    // One chunk 400 ms after the headers: the body takes ~400 ms, and that is the server's stream,
    // not a delayed ACK. Far from both delayed-ACK windows (38-60 ms, 196-250 ms), so a busy
    // machine's delays move it nowhere near one, and a window that grew past its timer would take
    // it in.
    let (_server, port) = python_server("split_write.py", &["chunks", "1", "0.4"]);
    let (report, _) = load("stream", port, &["--levels", "1,4", "--rounds", "5"]);
    assert!(
        suspicions(&report, "nagle_delayed_ack").is_empty(),
        "{:#}",
        report["suspicions"]
    );
    for l in report["levels"].as_array().unwrap() {
        let body = l["phases"]["body"]["p50"].as_f64().unwrap();
        assert!(body >= 0.38, "{:#}", l["phases"]);
    }
}

#[test]
fn a_healthy_server_under_bursts_of_new_connections_raises_neither() {
    let (_server, port) = python_server("split_write.py", &["one"]);
    let (report, journal) = load("healthy", port, &["--levels", "1,16,32", "--rounds", "5"]);
    assert_eq!(
        report["suspicions"].as_array().unwrap().len(),
        0,
        "{:#}",
        report["suspicions"]
    );
    for level in 0..3 {
        let c = connects(&journal, level);
        assert!(!c.is_empty() && c.iter().all(|&x| x < 0.5), "{c:?}");
    }
    for l in report["levels"].as_array().unwrap() {
        assert!(
            l["phases"]["connect"]["count"].as_u64().unwrap() >= 1,
            "{l:#}"
        );
    }
}

#[test]
fn a_journal_written_before_phases_existed_still_reads_and_shows_no_phases() {
    let (_server, port) = python_server("split_write.py", &["one"]);
    let (_, journal) = load("oldjournal", port, &["--levels", "2", "--rounds", "5"]);
    // The same journal as an older witness wrote it: no phase keys, no listen readings.
    let text = std::fs::read_to_string(&journal).unwrap();
    let strip = |line: &str| -> String {
        let mut out = line.to_string();
        for key in [",\"pc\":", ",\"ph\":", ",\"wl\":"] {
            while let Some(at) = out.find(key) {
                let rest = &out[at + key.len()..];
                let end = rest.find([',', '}']).unwrap();
                out = format!("{}{}", &out[..at], &rest[end..]);
            }
        }
        out
    };
    let old: Vec<String> = text
        .lines()
        .filter(|l| !l.contains("\"kind\":\"listen\""))
        .map(strip)
        .collect();
    assert!(text.contains("\"ph\":") && !old.iter().any(|l| l.contains("\"ph\":")));
    let dir = tempdir("oldjournal-report");
    let (j, r) = (dir.join("old.jsonl"), dir.join("r.json"));
    std::fs::write(&j, old.join("\n") + "\n").unwrap();
    let out = run_bounded(
        Command::new(witness())
            .arg("report")
            .arg(&j)
            .args(["--format", "json", "-o"])
            .arg(&r),
        Duration::from_secs(30),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = json(&r);
    let l = &report["levels"][0];
    assert_eq!(l["counts"]["ok"], 10, "{l:#}");
    assert!(l.get("phases").is_none_or(|p| p.is_null()), "{l:#}");
    // Each compact request line reads with its phases absent.
    let first = old.iter().find(|l| l.contains("\"g\":\"level0\"")).unwrap();
    let rec = witness::journal::codec::decode(first.as_bytes()).unwrap();
    match rec.event {
        witness::journal::Event::Request {
            connect_s,
            headers_s,
            ..
        } => assert_eq!((connect_s, headers_s), (None, None)),
        e => panic!("not a request: {e:?}"),
    }
}
