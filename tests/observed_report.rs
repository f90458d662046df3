//! `witness report` of a wrap journal with the calls a real MCP client made through the stdio relay:
//! the acceptance's shape (five ok calls of a 1 s tool, a sixth cut off when the server's 6 s
//! watchdog ends it with 124), written as JSONL and read by the real binary, in the terminal's words
//! and the JSON report's keys.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;

const WATCHDOG: &str = "[slow] watchdog: no progress after 6s, exiting (exit 124)";

/// The journal wrap writes for that story, in the long form (the decoder reads both).
fn watchdog_journal(path: &Path) {
    let mut lines = vec![
        r#"{"kind":"header","witness_version":"0.1.0","command":["witness","wrap","--","python","slow_server.py"],"started_at":"2026-12-01T21:00:00Z","started_unix_s":1796158800.0,"hostname":"box","pid":99,"mode":"wrap"}"#.to_string(),
        r#"{"t_s":0.0,"kind":"spawn","pid":4242,"start_time":777,"command":["python","slow_server.py"],"attempt":0}"#.into(),
        r#"{"t_s":0.06,"kind":"mcp_session","worker":0,"transport":"stdio","protocol_version":"2025-06-18","session":false,"duration_s":0.015,"ok":true}"#.into(),
    ];
    for i in 0..5u32 {
        let start = 0.1 + f64::from(i) * 1.012;
        let d = 1.001 + 0.001 * f64::from(i);
        lines.push(format!(
            r#"{{"t_s":{:.6},"kind":"request","id":{},"group":"stdio tools/call slow","worker":0,"start_s":{start:.6},"duration_s":{d},"outcome":{{"kind":"ok"}}}}"#,
            start + d,
            i + 1
        ));
    }
    lines.push(format!(
        r#"{{"t_s":5.999,"kind":"log","pid":4242,"stream":"stderr","line":"{WATCHDOG}","label":"watchdog","timer_s":6.0}}"#
    ));
    lines.push(r#"{"t_s":6.0,"kind":"request","id":6,"group":"stdio tools/call slow","worker":0,"start_s":5.16,"duration_s":0.84,"outcome":{"kind":"error","error":"closed"},"detail":"connection closed: the server exited"}"#.into());
    lines.push(r#"{"t_s":6.002,"kind":"exit","pid":4242,"code":124,"signal":null,"core_dumped":false,"age_s":6.002,"status":124,"requested":false,"meaning":"exited 124: a timeout or watchdog fired"}"#.into());
    lines.push(
        r#"{"t_s":6.01,"kind":"end","reason":"the server exited","partial":false,"exit_code":124}"#
            .into(),
    );
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

fn report(journal: &Path, args: &[&str]) -> String {
    let out = run_bounded(
        Command::new(witness())
            .arg("report")
            .arg(journal)
            .args(args),
        Duration::from_secs(30),
    );
    assert!(
        out.status.success(),
        "witness report failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_report_of_a_wrap_journal_tables_the_calls_and_ties_the_cut_off_one_to_the_watchdog_exit() {
    let dir = tempdir("observed-report");
    let journal = dir.join("wrap.jsonl");
    watchdog_journal(&journal);
    // Every view tells the same calls.
    crate::one_truth::views_agree(&journal);

    let text = report(&journal, &[]);
    assert!(
        text.contains("calls seen by wrap (stdio), per method or tool"),
        "{text}"
    );
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with("tools/call slow"))
        .unwrap_or_else(|| panic!("no row for the tool:\n{text}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    // call (two words), calls, ok, error, rejected, cancelled, p50, p99, max, then the failed ones.
    assert_eq!(&cells[2..7], ["6", "5", "1", "0", "0"], "{row}");
    assert_eq!(cells[7], "1.003s", "p50 of the ok calls: {row}");
    assert_eq!(
        cells[9], "1.005s",
        "max of the ok calls, not the cut-off one: {row}"
    );
    assert!(row.ends_with("connection closed 1 after 840ms"), "{row}");
    assert!(
        text.contains(&format!(
            "call 6 tools/call slow: connection closed after 840ms: server pid 4242 exited with 124 (after log line '{WATCHDOG}')"
        )),
        "{text}"
    );
    assert!(
        text.contains("handshake: 1 MCP initialize, ok, in 15.0ms (protocol 2025-06-18)"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "! pid 4242 exited at age 6.00 s — at the 6s timer named in its log line '{WATCHDOG}'"
        )),
        "{text}"
    );

    let json: serde_json::Value =
        serde_json::from_str(&report(&journal, &["--format", "json"])).unwrap();
    let calls = json["observed"]["calls"]
        .as_array()
        .expect("the observed section");
    assert_eq!(calls.len(), 1);
    let c = &calls[0];
    assert_eq!(c["group"], "stdio tools/call slow");
    assert_eq!(
        (c["via"].as_str(), c["label"].as_str()),
        (Some("stdio"), Some("tools/call slow"))
    );
    assert_eq!(c["counts"]["ok"], 5);
    assert_eq!(c["counts"]["error"], 1);
    assert_eq!(c["latency"]["count"], 5);
    assert_eq!(c["latency"]["max"], 1.005);
    assert_eq!(c["failed_by_kind"][0]["kind"], "closed");
    assert_eq!(c["failed_by_kind"][0]["max_s"], 0.84);
    let f = &c["failures"][0];
    assert_eq!(
        (f["id"].as_u64(), f["outcome"].as_str()),
        (Some(6), Some("connection closed"))
    );
    assert!(
        f["annotation"]
            .as_str()
            .unwrap()
            .starts_with("server pid 4242 exited with 124 (after log line"),
        "{f}"
    );
    assert_eq!(json["observed"]["handshakes"]["ok"], 1);
    let sus = json["suspicions"].as_array().unwrap();
    assert!(
        sus.iter()
            .any(|s| s["subject"] == "process_exit" && s["timer_s"] == 6.0 && s["pid"] == 4242),
        "{sus:?}"
    );
}
