//! A report the user can find, and a run's end in a supervisor's words (issue 30, items 4 and 5):
//! `witness report` with no journal opens the latest run's (`--last N` the N-th, `--list` lists
//! them) from the journal folder ($XDG_STATE_HOME/witness, here each test's own); the `end` row
//! says how the run ended (the client closed stdin, the server exited with N and the policy did not
//! restart it, a signal witness forwarded); a `--proxy` run whose server does not speak JSON-RPC on
//! stdout has no "not JSON-RPC" note. Real processes throughout.

use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::*;

const LIMIT: Duration = Duration::from_secs(60);

/// `witness ARGS` with the journal folder under `state` (XDG_STATE_HOME).
fn witness_in(state: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(witness());
    c.env("XDG_STATE_HOME", state).env_remove("CI").args(args);
    c
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The journal path a finished run named on its last lines.
fn journal_of(out: &Output) -> PathBuf {
    let err = text(&out.stderr);
    let line = err
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("witness: journal: "))
        .unwrap_or_else(|| panic!("no journal line in {err}"));
    PathBuf::from(line.trim())
}

/// The `end` row of a journal.
fn end_reason(journal: &Path) -> String {
    let lines = journal_lines(journal);
    let end = lines
        .iter()
        .rev()
        .find(|l| l["kind"] == "end")
        .unwrap_or_else(|| panic!("no end row in {}", journal.display()));
    end["reason"].as_str().unwrap().to_string()
}

fn notes(journal: &Path) -> Vec<String> {
    journal_lines(journal)
        .iter()
        .filter(|l| l["kind"] == "note")
        .map(|l| l["text"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn report_with_no_journal_opens_the_latest_run_and_last_2_the_one_before() {
    let dir = tempdir("report-last");
    let state = dir.join("state");
    // The first run writes its journal in the folder; the second names its own elsewhere
    // (`--journal`, as an MCP host's configuration does), found through the folder's index.
    let first = run_bounded(
        &mut witness_in(&state, &["wrap", "--", "sh", "-c", "exit 3"]),
        LIMIT,
    );
    assert_eq!(first.status.code(), Some(3), "{}", text(&first.stderr));
    let first_journal = journal_of(&first);
    assert!(
        first_journal.starts_with(state.join("witness")),
        "{}",
        first_journal.display()
    );
    let second_journal = dir.join("elsewhere").join("second.jsonl");
    std::fs::create_dir_all(second_journal.parent().unwrap()).unwrap();
    let second = run_bounded(
        &mut witness_in(
            &state,
            &[
                "wrap",
                "--journal",
                second_journal.to_str().unwrap(),
                "--",
                "sh",
                "-c",
                "exit 0",
            ],
        ),
        LIMIT,
    );
    assert_eq!(second.status.code(), Some(0), "{}", text(&second.stderr));

    // No argument: the latest, named on stderr; its content on stdout.
    let latest = run_bounded(&mut witness_in(&state, &["report"]), LIMIT);
    let (out, err) = (text(&latest.stdout), text(&latest.stderr));
    assert_eq!(latest.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!(
            "witness: reading the latest run started from this directory by you: {}",
            second_journal.display()
        )),
        "{err}"
    );
    assert!(
        out.contains("run ends: the server exited with 0 and was not restarted (--restart never)"),
        "{out}"
    );
    assert!(!out.contains("exited with 3"), "{out}");

    // --last 2: the one before.
    let before = run_bounded(&mut witness_in(&state, &["report", "--last", "2"]), LIMIT);
    let (out, err) = (text(&before.stdout), text(&before.stderr));
    assert_eq!(before.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!(
            "witness: reading run 2 back (--last 2) started from this directory by you: {}",
            first_journal.display()
        )),
        "{err}"
    );
    assert!(
        out.contains("run ends: the server exited with 3 and was not restarted (--restart never)"),
        "{out}"
    );

    // --list: both, newest first, with command, how each ended and its path.
    let list = run_bounded(&mut witness_in(&state, &["report", "--list"]), LIMIT);
    let out = text(&list.stdout);
    assert_eq!(list.status.code(), Some(0), "{}", text(&list.stderr));
    assert!(out.contains("(2 of 2;"), "{out}");
    let at = |needle: &str| {
        out.find(needle)
            .unwrap_or_else(|| panic!("{needle:?} not in {out}"))
    };
    let one = at("  1  ");
    let two = at("  2  ");
    assert!(one < two);
    let (row1, row2) = (&out[one..two], &out[two..]);
    assert!(row1.contains("wrap  witness wrap --journal"), "{row1}");
    assert!(row1.contains("-- sh -c \"exit 0\""), "{row1}");
    assert!(
        row1.contains(
            "ended: the server exited with 0 and was not restarted (--restart never) (exit 0)"
        ),
        "{row1}"
    );
    assert!(
        row1.contains(&format!("journal: {}", second_journal.display())),
        "{row1}"
    );
    assert!(
        row2.contains("wrap  witness wrap -- sh -c \"exit 3\""),
        "{row2}"
    );
    assert!(row2.contains("(exit 3)"), "{row2}");
    assert!(
        row2.contains(&format!("journal: {}", first_journal.display())),
        "{row2}"
    );
    assert!(row1.contains(" UTC "), "a start time: {row1}");

    // --last past the runs there are: a usage error naming how many there are.
    let past = run_bounded(&mut witness_in(&state, &["report", "--last", "3"]), LIMIT);
    assert_eq!(past.status.code(), Some(2));
    assert!(
        text(&past.stderr).contains("--last 3: only 2 run(s) are recorded"),
        "{}",
        text(&past.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn no_journal_in_the_folder_is_exit_2_naming_the_folder_and_journal() {
    let dir = tempdir("report-none");
    let state = dir.join("state");
    for args in [
        &["report"][..],
        &["report", "--list"],
        &["report", "--last", "2"],
    ] {
        let out = run_bounded(&mut witness_in(&state, args), LIMIT);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(&format!(
                "no journal found in {}",
                state.join("witness").display()
            )),
            "{args:?}: {err}"
        );
        assert!(err.contains("--journal"), "{err}");
        assert!(err.contains("witness report JOURNAL"), "{err}");
    }
    // An explicit journal is read whatever the folder holds.
    let j = dir.join("j.jsonl");
    let run = run_bounded(
        &mut witness_in(
            &dir.join("other"),
            &["wrap", "--journal", j.to_str().unwrap(), "--", "true"],
        ),
        LIMIT,
    );
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    let out = run_bounded(
        &mut witness_in(&state, &["report", j.to_str().unwrap()]),
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}

/// witness wrap with the client's stdin piped: `lines` are sent, then stdin is closed (`close`) or
/// held open until witness ends.
fn wrap_with_client(state: &Path, server: &str, lines: &str, close: bool) -> Output {
    let mut child = witness_in(
        state,
        &["wrap", "--stdin", "relay", "--", "sh", "-c", server],
    )
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(lines.as_bytes()).unwrap();
    stdin.flush().unwrap();
    let held = if close {
        drop(stdin);
        None
    } else {
        Some(stdin)
    };
    let out = wait_bounded(child, LIMIT);
    drop(held);
    out
}

const PING: &str = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n";

#[test]
fn a_client_closing_stdin_is_said_in_the_end_row() {
    let dir = tempdir("end-eof");
    // An MCP-ish server: a banner, then it answers by echoing until its stdin closes.
    let out = wrap_with_client(&dir, "echo banner; cat >/dev/null", PING, true);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let journal = journal_of(&out);
    let reason = end_reason(&journal);
    assert_eq!(
        reason,
        "the client closed its stdin (its session is over) and the server then exited with 0"
    );
    assert!(
        text(&out.stderr).contains("run ends: the client closed its stdin"),
        "{}",
        text(&out.stderr)
    );
    // stdio carried MCP: the banner is news (the twin of the --proxy run's silence).
    assert!(
        notes(&journal)
            .iter()
            .any(|n| n.contains("1 line(s) on the server's stdout were not JSON-RPC")),
        "{:?}",
        notes(&journal)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_server_exiting_3_names_the_policy_that_did_not_restart_it() {
    let dir = tempdir("end-exit3");
    // The client keeps its stdin open: the server ends on its own, not because the client left.
    let out = wrap_with_client(&dir, "read line; exit 3", PING, false);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let reason = end_reason(&journal_of(&out));
    assert_eq!(
        reason,
        "the server exited with 3 and was not restarted (--restart never)"
    );
    // on-failure and a clean exit: the policy's own words.
    let out = run_bounded(
        &mut witness_in(
            &dir,
            &[
                "wrap",
                "--restart",
                "on-failure",
                "--",
                "sh",
                "-c",
                "exit 0",
            ],
        ),
        LIMIT,
    );
    assert_eq!(
        end_reason(&journal_of(&out)),
        "the server exited with 0 and was not restarted (--restart on-failure restarts only a failure)"
    );
    // on-failure with --max-restarts 1: it was restarted once, then given up on.
    let out = run_bounded(
        &mut witness_in(
            &dir,
            &[
                "wrap",
                "--restart",
                "on-failure",
                "--max-restarts",
                "1",
                "--backoff",
                "0s",
                "--",
                "sh",
                "-c",
                "exit 4",
            ],
        ),
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    assert_eq!(
        end_reason(&journal_of(&out)),
        "the server exited with 4 and was not restarted again (--max-restarts 1 was reached after 1 restart(s))"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_proxy_run_with_a_plain_http_server_has_no_json_rpc_note_and_ends_by_the_forwarded_signal() {
    if !have("python3", "python3 --version") {
        return;
    }
    let dir = tempdir("end-proxy");
    let (listen, upstream) = (free_port(), free_port());
    let proxy = format!("127.0.0.1:{listen}=127.0.0.1:{upstream}");
    let upstream_s = upstream.to_string();
    // python's http.server says "Serving HTTP on …" on its stdout: a log line, not JSON-RPC.
    let child = witness_in(
        &dir,
        &[
            "wrap",
            "--proxy",
            &proxy,
            "--",
            "python3",
            "-u",
            "-m",
            "http.server",
            "--bind",
            "127.0.0.1",
            &upstream_s,
        ],
    )
    .current_dir(&dir)
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    wait_listening(upstream);
    let mut s = std::net::TcpStream::connect(("127.0.0.1", listen)).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut s, &mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.0 200"), "{answer}");
    kill(child.id() as i32, 15);
    let out = wait_bounded(child, LIMIT);
    let (stdout, err) = (text(&out.stdout), text(&out.stderr));
    assert!(
        stdout.contains("Serving HTTP on"),
        "passed through: {stdout}"
    );
    let journal = journal_of(&out);
    assert!(!err.contains("not JSON-RPC"), "{err}");
    assert!(
        !notes(&journal).iter().any(|n| n.contains("not JSON-RPC")),
        "{:?}",
        notes(&journal)
    );
    assert_eq!(
        end_reason(&journal),
        "witness received SIGTERM (from its parent, e.g. the MCP host, or another process) and forwarded it; the server was killed by SIGTERM"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_listing_masks_a_credential_as_the_journal_does() {
    let dir = tempdir("report-secret");
    let port = free_port().to_string();
    let url = format!("http://127.0.0.1:{port}/");
    // Nothing listens: refused (3), but the run and its journal exist.
    let run = run_bounded(
        &mut witness_in(
            &dir,
            &[
                "load",
                "--url",
                &url,
                "--header",
                "Authorization: Bearer sekrit-token-4711",
                "--levels",
                "1",
            ],
        ),
        LIMIT,
    );
    assert_eq!(run.status.code(), Some(3), "{}", text(&run.stderr));
    let list = run_bounded(&mut witness_in(&dir, &["report", "--list"]), LIMIT);
    let out = text(&list.stdout);
    assert_eq!(list.status.code(), Some(0), "{}", text(&list.stderr));
    assert!(!out.contains("sekrit"), "{out}");
    assert!(
        out.contains(&format!(
            "load  witness load --url {url} --header \"Authorization: ***\" --levels 1"
        )),
        "{out}"
    );
    assert!(out.contains("ended: refused"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A bare `witness report` prefers the runs started from the same directory: a newer run from
/// another directory (another project's, or another user's sharing the folder) is not opened.
#[test]
fn a_bare_report_opens_the_latest_run_from_this_directory_not_a_newer_one_from_elsewhere() {
    let dir = tempdir("report-here");
    let state = dir.join("state");
    let (here, there) = (dir.join("here"), dir.join("there"));
    std::fs::create_dir_all(&here).unwrap();
    std::fs::create_dir_all(&there).unwrap();
    let mine = run_bounded(
        witness_in(&state, &["wrap", "--", "sh", "-c", "exit 3"]).current_dir(&here),
        LIMIT,
    );
    assert_eq!(mine.status.code(), Some(3), "{}", text(&mine.stderr));
    let newer = run_bounded(
        witness_in(&state, &["wrap", "--", "sh", "-c", "exit 5"]).current_dir(&there),
        LIMIT,
    );
    assert_eq!(newer.status.code(), Some(5), "{}", text(&newer.stderr));
    let report = run_bounded(witness_in(&state, &["report"]).current_dir(&here), LIMIT);
    let (out, err) = (text(&report.stdout), text(&report.stderr));
    assert_eq!(report.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!(
            "witness: reading the latest run started from this directory by you: {}",
            journal_of(&mine).display()
        )),
        "{err}"
    );
    assert!(out.contains("exited with 3"), "{out}");
    // From a directory no run started in: the newest of all, said as such.
    let report = run_bounded(witness_in(&state, &["report"]).current_dir(&dir), LIMIT);
    let err = text(&report.stderr);
    assert!(
        err.contains(&format!(
            "witness: reading the latest run of any directory (none was started from this one by you): {}",
            journal_of(&newer).display()
        )),
        "{err}"
    );
}

/// `witness report` of a run still going says it is live (not cut off, not interrupted), and
/// `--follow` waits for its end and reports the whole run.
#[test]
fn a_report_of_a_run_still_going_says_it_is_live_and_follow_waits_for_its_end() {
    let dir = tempdir("report-live");
    let state = dir.join("state");
    let journal = dir.join("live.jsonl");
    let mut run = witness_in(
        &state,
        &[
            "wrap",
            "--journal",
            journal.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "echo up; sleep 3; exit 4",
        ],
    );
    run.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = run.spawn().unwrap();
    wait_until("the server's first line journalled", LIMIT, || {
        std::fs::read_to_string(&journal).is_ok_and(|t| t.contains("\"spawn\""))
    });
    let live = run_bounded(
        &mut witness_in(&state, &["report", journal.to_str().unwrap()]),
        LIMIT,
    );
    let (out, err) = (text(&live.stdout), text(&live.stderr));
    assert_eq!(live.status.code(), Some(0), "{err}");
    assert!(err.contains("is a run still going (witness pid"), "{err}");
    assert!(
        out.contains("live: the run is still going (witness pid"),
        "{out}"
    );
    assert!(!out.contains("no end record"), "{out}");
    assert!(!out.contains("stopped or crashed"), "{out}");
    let json = run_bounded(
        &mut witness_in(
            &state,
            &["report", journal.to_str().unwrap(), "--format", "json"],
        ),
        LIMIT,
    );
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["live_witness_pid"], child.id(), "{v:#}");
    // --follow: the report comes once the run ended, whole.
    let followed = run_bounded(
        &mut witness_in(&state, &["report", "--follow", journal.to_str().unwrap()]),
        LIMIT,
    );
    let (out, err) = (text(&followed.stdout), text(&followed.stderr));
    assert_eq!(followed.status.code(), Some(0), "{err}");
    assert!(err.contains("following"), "{err}");
    assert!(out.contains("exited with 4"), "{out}");
    assert!(!out.contains("live:"), "{out}");
    let done = wait_bounded(child, LIMIT);
    assert_eq!(done.status.code(), Some(4));
}
