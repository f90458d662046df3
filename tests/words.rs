//! Words a person reads (issue 41): what witness did and did not do, the limits it was given, the
//! addresses it refused, and how a run that ended well looks — each as the person would say it.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::*;

const LIMIT: Duration = Duration::from_secs(60);

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Attached to a server someone else started, witness started nothing: the timeline says the
/// server was found already running, never "started", in the terminal and in the HTML.
#[test]
fn an_attached_load_says_the_server_was_found_running_not_started() {
    let port = free_port();
    let _server = Bg::start(Command::new(toy()).args(["--port", &port.to_string()]));
    wait_listening(port);
    let dir = tempdir("words-attached");
    let out = run_bounded(
        Command::new(witness())
            .args(["load", "--url", &format!("http://127.0.0.1:{port}/call")])
            .args([
                "--levels", "1", "--rounds", "3", "--settle", "50ms", "--gpu", "off",
            ])
            .arg("--html")
            .arg(dir.join("r.html")),
        LIMIT,
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let line = err
        .lines()
        .find(|l| l.contains(" found "))
        .unwrap_or_else(|| panic!("no 'found' row in the timeline: {err}"));
    assert!(
        line.contains("already running, started by someone else"),
        "{line}"
    );
    assert!(!err.contains(" spawn "), "{err}");
    assert!(
        !err.contains(&format!("started {}", toy().display())),
        "{err}"
    );
}

/// A connect limit longer than the whole request's, which includes the connect, could never fire:
/// refused, naming both and the fix.
#[test]
fn a_connect_timeout_above_the_timeout_is_refused_with_the_fix() {
    let out = run_bounded(
        Command::new(witness()).args([
            "load",
            "--url",
            "http://127.0.0.1:9/",
            "--timeout",
            "10s",
            "--connect-timeout",
            "20s",
        ]),
        LIMIT,
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--connect-timeout 20s is longer than --timeout 10s, which includes the connect, so it could never fire: give --connect-timeout at most 10s"),
        "{err}"
    );
}

/// An address given as one is not said twice ("10.1.2.3 is 10.1.2.3").
#[test]
fn a_remote_address_is_refused_in_plain_words() {
    let out = run_bounded(
        Command::new(witness()).args(["load", "--url", "http://10.1.2.3:8000/"]),
        LIMIT,
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("10.1.2.3 is not a loopback address"), "{err}");
    assert!(!err.contains("10.1.2.3 is 10.1.2.3"), "{err}");
}

/// A server that never listens: the refusal says in words what the health probe met and after
/// which limit — never an error's internal name.
#[test]
fn a_server_that_never_listens_is_refused_in_words_not_an_error_name() {
    let port = free_port();
    let out = run_bounded(
        Command::new(witness())
            .args(["load", "--url", &format!("http://127.0.0.1:{port}/")])
            .args(["--ready-timeout", "1s", "--gpu", "off", "--", "sleep", "30"]),
        LIMIT,
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains(&format!(
            "http://127.0.0.1:{port}/health was refused (nothing listens) after --ready-timeout 1s"
        )),
        "{err}"
    );
    assert!(!err.contains("ConnectionRefused"), "{err}");
}

/// A stdio server that exits 0 once its client closed stdin ended well: the HTML draws its end as
/// asked for, not as a failure (no red exit line, no band of a process that died).
#[test]
fn a_clean_end_of_a_wrapped_server_is_not_painted_as_a_failure() {
    let dir = tempdir("words-clean-end");
    let html = dir.join("r.html");
    let out = run_bounded(
        Command::new(witness())
            .args(["wrap", "--gpu", "off", "--html"])
            .arg(&html)
            .args(["--", "sh", "-c", "cat >/dev/null; exit 0"])
            .stdin(std::process::Stdio::null()),
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<line class=\"exit asked\""), "{page}");
    assert!(!page.contains("<line class=\"exit\""), "a red exit line");
    assert!(!page.contains("class=\"band gone\""), "a band of a death");
    // An exit 1 that nobody asked for is still drawn as one.
    let out = run_bounded(
        Command::new(witness())
            .args(["wrap", "--gpu", "off", "--html"])
            .arg(&html)
            .args(["--", "sh", "-c", "exit 1"])
            .stdin(std::process::Stdio::null()),
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(1));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<line class=\"exit\""), "{page}");
}

/// A soak's failed requests say what the server answered (as load's failures do), once per status;
/// a memory trend from too few readings prints no slope beside the words that call it meaningless.
#[test]
fn a_soak_says_what_its_failures_answered_and_no_slope_from_too_few_readings() {
    let (_, err) = soak(
        "words-soak",
        r#"
duration = "2s"
interval = "1s"
timeout = "5s"
check_timeout = "1s"
max_error_rate = 1.0

[target]
base_url = "http://127.0.0.1:8080"

[kinds.missing]
method = "GET"
path = "/nothing-here"

[[drivers]]
count = 1
burst = { requests = [2, 3], gap = ["20ms", "50ms"] }
steady = { requests = [2, 3], gap = ["50ms", "100ms"] }
idle = { for = ["100ms", "200ms"] }
"#,
        &[],
    );
    let row = err
        .lines()
        .find(|l| l.trim_start().starts_with("missing "))
        .unwrap_or_else(|| panic!("no row for the kind: {err}"));
    assert!(!row.contains(" errors=0"), "{row}");
    assert!(
        err.lines()
            .any(|l| l.trim_start().contains("× HTTP 404: the server said: ")),
        "{err}"
    );
    assert!(err.contains("memory: too few samples: "), "{err}");
    assert!(!err.contains("too few samples ("), "{err}");
}

/// Requests still in flight at the soak's last interval finish after its line: the run says how
/// many, so the last progress line and the summary's total do not disagree unexplained.
#[test]
fn a_soak_says_what_finished_after_its_last_interval() {
    let (code, err) = soak(
        "words-soak-after",
        r#"
duration = "2s"
interval = "1s"
timeout = "5s"

[target]
base_url = "http://127.0.0.1:8080"

[kinds.slow]
path = "/call"

[[drivers]]
count = 3
burst = { requests = [1, 1], gap = ["10ms", "20ms"] }
steady = { requests = [1, 1], gap = ["10ms", "20ms"] }
idle = { for = ["10ms", "20ms"] }
"#,
        &["--call", "sleep:900ms"],
    );
    assert_eq!(code, Some(0), "{err}");
    let count = |line: &str| -> u64 {
        line.split("requests=")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no count in {line}"))
    };
    let last = err
        .lines()
        .rfind(|l| l.starts_with("witness: soak ") && l.contains("interval "))
        .unwrap_or_else(|| panic!("no progress line: {err}"));
    let all = err
        .lines()
        .find(|l| l.trim_start().starts_with("all "))
        .unwrap_or_else(|| panic!("no totals row: {err}"));
    let (shown, total) = (count(last), count(all));
    assert!(
        shown < total,
        "three 900 ms calls are in flight at the last interval: {err}"
    );
    assert!(
        err.contains(&format!(
            "soak: {} more request(s), in flight at the last interval, finished after it: {total} in all",
            total - shown
        )),
        "{err}"
    );
}

/// A soak of `plan` (TOML text) against a toy_server started with `server` args; its exit code and
/// stderr.
fn soak(tag: &str, plan: &str, server: &[&str]) -> (Option<i32>, String) {
    let file = tempdir(tag).join("p.toml");
    std::fs::write(&file, plan).unwrap();
    let port = free_port().to_string();
    let out = run_bounded(
        Command::new(witness())
            .args(["soak", "--plan"])
            .arg(&file)
            .args([
                "--gpu",
                "off",
                "--base-url",
                &format!("http://127.0.0.1:{port}"),
            ])
            .args(["--", toy().to_str().unwrap(), "--port", &port])
            .args(server),
        LIMIT,
    );
    (out.status.code(), text(&out.stderr))
}

/// A journal merged on its own says "1 source", not "1 sources".
#[test]
fn one_journal_merged_is_one_source() {
    let dir = tempdir("words-merged-one");
    let j = dir.join("j.jsonl");
    let out = run_bounded(
        Command::new(witness())
            .args(["wrap", "--gpu", "off", "--journal"])
            .arg(&j)
            .args(["--", "sh", "-c", "exit 0"])
            .stdin(std::process::Stdio::null()),
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let merged = dir.join("m.jsonl");
    let out = run_bounded(
        Command::new(witness())
            .arg("report")
            .arg(&j)
            .arg("-o")
            .arg(&merged),
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let end = journal_lines(&merged)
        .into_iter()
        .rfind(|l| l["kind"] == "end")
        .unwrap();
    let reason = end["reason"].as_str().unwrap();
    assert!(reason.starts_with("merged 1 source ("), "{reason}");
}

/// More failures than the summary lists: it says where every one is, whether or not a --report
/// was asked for, and the JSON says witness's own exit code beside the server's status.
#[test]
fn more_failures_than_listed_say_where_each_is_and_the_exit_code_is_witness_s() {
    let dir = tempdir("words-more-failures");
    let port = free_port();
    let p = port.to_string();
    let out = run_bounded(
        Command::new(witness())
            .args(["load", "--url", &format!("http://127.0.0.1:{port}/call")])
            .args(["--levels", "4", "--rounds", "10", "--timeout", "100ms"])
            .args(["--settle", "50ms", "--gpu", "off", "--journal"])
            .arg(dir.join("j.jsonl"))
            .args([
                "--",
                toy().to_str().unwrap(),
                "--port",
                &p,
                "--call",
                "hang",
            ]),
        LIMIT,
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("more failed requests: `witness report --format json` lists each"),
        "{err}"
    );
    assert!(!err.contains("in the report"), "{err}");
    let json = run_bounded(
        Command::new(witness())
            .args(["report", "--format", "json"])
            .arg(dir.join("j.jsonl")),
        LIMIT,
    );
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["witness_exit_code"], 1, "{}", v["witness_exit_code"]);
}

/// An IPv6 address and its port are written as a URL writes them: `[::1]:P`, never `::1:P` (here
/// in the refusal of a TLS handshake that a silent listener on ::1 never answers).
#[test]
fn an_ipv6_address_and_its_port_are_written_in_brackets() {
    let listener = std::net::TcpListener::bind("[::1]:0").expect("::1 on this machine");
    let port = listener.local_addr().unwrap().port();
    // Accepts and says nothing: a TLS handshake with it never finishes.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in listener.incoming().flatten() {
            held.push(s);
        }
    });
    let out = run_bounded(
        Command::new(witness()).args([
            "load",
            "--url",
            &format!("https://[::1]:{port}/"),
            "--levels",
            "1",
            "--rounds",
            "1",
            "--gpu",
            "off",
        ]),
        LIMIT,
    );
    let err = text(&out.stderr);
    assert!(err.contains(&format!("[::1]:{port}")), "{err}");
    assert!(!err.contains(&format!(" ::1:{port}")), "{err}");
}

/// Views alone print: the engines that produce a run's evidence (the load driver, the soak engine,
/// the analysis) write nothing to the terminal themselves.
#[test]
fn producers_print_nothing_themselves() {
    let mut printing = Vec::new();
    let mut stack: Vec<std::path::PathBuf> = ["src/load", "src/soak", "src/analyze"]
        .iter()
        .map(|d| repo().join(d))
        .collect();
    while let Some(p) = stack.pop() {
        if p.is_dir() {
            stack.extend(std::fs::read_dir(&p).unwrap().flatten().map(|e| e.path()));
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            if ["errln!", "outln!", "eprintln!", "println!"]
                .iter()
                .any(|m| code.contains(m))
            {
                printing.push(format!("{}:{}: {}", p.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(printing.is_empty(), "{printing:#?}");
}
