//! Structured log lines from real servers (tests/peers/structured_log_server.py), one JSON object
//! per line as Go's zap writes them, and logfmt: the timeline shows the level and message, not the
//! raw object; an info line with a `signal` field is not `[killed]`; a timeout line's duration
//! field names the timer the process died at. The journal keeps the raw line.

use crate::common;

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::*;

fn server() -> std::path::PathBuf {
    repo().join("tests/peers/structured_log_server.py")
}

fn logs_of(journal: &std::path::Path) -> Vec<serde_json::Value> {
    journal_lines(journal)
        .into_iter()
        .filter(|l| l["kind"] == "log")
        .collect()
}

/// `witness wrap` around the server, which gives up after 1.7 s (a timer nobody would call round)
/// with an error line naming `duration`, and exits 1.
fn gives_up(format: &str) -> (Output, Vec<serde_json::Value>) {
    let dir = tempdir(&format!("slog-{format}"));
    let j = dir.join("j.jsonl");
    let out = run_bounded(
        Command::new(witness())
            .args(["wrap", "--journal"])
            .arg(&j)
            .args(["--", "python3"])
            .arg(server())
            .args(["--format", format, "--port", &free_port().to_string()])
            .args(["--give-up-after", "1.7"]),
        Duration::from_secs(30),
    );
    (out, logs_of(&j))
}

fn the_timeline_shows_the_level_and_message_and_the_journal_the_raw_line(format: &str) {
    if !have("python3", "python3 -c 'import http.server'") {
        return;
    }
    let (out, logs) = gives_up(format);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{format}: {stderr}");
    let row = stderr
        .lines()
        .find(|l| l.contains("[timeout]"))
        .unwrap_or_else(|| panic!("{format}: no timeout row in the timeline:\n{stderr}"));
    assert!(
        row.contains("error: net/http: timeout awaiting response headers (status=504 duration=1.7"),
        "{format}: {row}"
    );
    assert!(
        !row.contains("\"level\"") && !row.contains("level="),
        "{format}: {row}"
    );
    // The journal keeps the line as the server wrote it.
    let timeout = logs.iter().find(|l| l["label"] == "timeout").unwrap();
    let raw = timeout["line"].as_str().unwrap();
    let opens = if format == "json" {
        "{\"level\""
    } else {
        "ts="
    };
    assert!(raw.starts_with(opens), "{format}: {raw}");
    // The start-up line names a read timeout in a field: that is no timeout.
    assert!(
        !logs
            .iter()
            .any(|l| l["line"].as_str().unwrap().contains("listening")),
        "{format}: {logs:#?}"
    );
}

fn a_timeout_lines_duration_field_names_the_timer_the_process_died_at(format: &str) {
    if !have("python3", "python3 -c 'import http.server'") {
        return;
    }
    let (out, logs) = gives_up(format);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let timeout = logs.iter().find(|l| l["label"] == "timeout").unwrap();
    assert_eq!(timeout["timer_s"], 1.7, "{format}: {timeout}");
    assert!(
            stderr.contains(
                "the 1.7s timer named in its log line 'error: net/http: timeout awaiting response headers"
            ),
            "{format}: {stderr}"
        );
}

fn a_shutdown_line_with_a_signal_field_is_not_killed(format: &str) {
    if !have("python3", "python3 -c 'import http.server'") {
        return;
    }
    let dir = tempdir(&format!("slog-term-{format}"));
    let j = dir.join("j.jsonl");
    let port = free_port();
    let child = Command::new(witness())
        .args(["wrap", "--journal"])
        .arg(&j)
        .args(["--", "python3"])
        .arg(server())
        .args(["--format", format, "--port", &port.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_listening(port);
    kill(child.id() as i32, 15);
    let out = wait_bounded(child, Duration::from_secs(15));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let logs = logs_of(&j);
    let shutdown = logs
        .iter()
        .find(|l| {
            l["line"]
                .as_str()
                .unwrap()
                .contains("shutting down apps, then terminating")
        })
        .unwrap_or_else(|| panic!("{format}: the shutdown line was not journalled: {logs:#?}"));
    assert_eq!(shutdown["label"], "exit", "{format}: {shutdown}");
    let row = stderr
        .lines()
        // A timeline row, not the server's own line that witness passes through.
        .find(|l| l.contains("stderr: ") && l.contains("shutting down apps"))
        .unwrap_or_else(|| panic!("{format}: no shutdown row:\n{stderr}"));
    assert!(!row.contains("[killed]"), "{format}: {row}");
    assert!(
        row.contains("[exit] stderr: info: shutting down apps, then terminating"),
        "{format}: {row}"
    );
}

// One test per format, so a break in one reader turns its own tests red.
#[test]
fn json_the_timeline_shows_the_level_and_message_and_the_journal_the_raw_line() {
    the_timeline_shows_the_level_and_message_and_the_journal_the_raw_line("json")
}

#[test]
fn logfmt_the_timeline_shows_the_level_and_message_and_the_journal_the_raw_line() {
    the_timeline_shows_the_level_and_message_and_the_journal_the_raw_line("logfmt")
}

#[test]
fn json_a_timeout_lines_duration_field_names_the_timer_the_process_died_at() {
    a_timeout_lines_duration_field_names_the_timer_the_process_died_at("json")
}

#[test]
fn logfmt_a_timeout_lines_duration_field_names_the_timer_the_process_died_at() {
    a_timeout_lines_duration_field_names_the_timer_the_process_died_at("logfmt")
}

#[test]
fn json_a_shutdown_line_with_a_signal_field_is_not_killed() {
    a_shutdown_line_with_a_signal_field_is_not_killed("json")
}

#[test]
fn logfmt_a_shutdown_line_with_a_signal_field_is_not_killed() {
    a_shutdown_line_with_a_signal_field_is_not_killed("logfmt")
}
