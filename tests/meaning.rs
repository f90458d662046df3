//! One meaning everywhere, said once: real servers whose ends the lifecycle knows. A gunicorn that
//! cannot import its app is refused once, quoting the exception; the watchdog's identical failures
//! are one line; a refused soak tells no memory trend; a server killed by a signal with nothing to
//! restart it "died", never "restarted".

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::*;

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_server_that_cannot_import_its_app_is_refused_once_quoting_the_exception() {
    if !have("gunicorn (PyPI)", "python3 -m gunicorn --version") {
        return;
    }
    let dir = tempdir("import-refused");
    std::fs::write(
        dir.join("app.py"),
        "import witness_no_such_module_here\ndef app(environ, start_response):\n    pass\n",
    )
    .unwrap();
    let port = free_port().to_string();
    let report = dir.join("r.json");
    let out = run_bounded(
        Command::new(witness())
            .arg("load")
            .args(["--url", &format!("http://127.0.0.1:{port}/")])
            .arg("--report")
            .arg(&report)
            .arg("--journal")
            .arg(dir.join("j.jsonl"))
            .args(["--", "python3", "-m", "gunicorn", "--chdir"])
            .arg(&dir)
            .args(["-b", &format!("127.0.0.1:{port}"), "app:app"]),
        Duration::from_secs(60),
    );
    let err = stderr(&out);
    let text = format!("{err}{}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(out.status.code(), Some(3), "{text}");
    let why = "ModuleNotFoundError: No module named 'witness_no_such_module_here'";
    // Said once as the refusal's reason; the log reader's own row of that line is the journal's.
    let reasons: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(why) && !l.contains("[traceback]"))
        .collect();
    assert_eq!(reasons.len(), 1, "{text}");
    assert!(reasons[0].starts_with("REFUSED: "), "{text}");
    assert!(
        reasons[0].contains("exited with 3 before it was ready: ModuleNotFoundError"),
        "{text}"
    );
    // Never the traceback's frame lines nor gunicorn's last words in its place.
    assert!(!text.contains("its last output"), "{text}");
    // The last lines are kept in the report.
    let r = json(&report);
    let ready = r["lifecycle"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "ready")
        .expect("ready")
        .clone();
    let kept = ready["output"].as_array().expect("output kept");
    assert!(
        kept.iter().any(|l| l.as_str().unwrap().contains(why)),
        "{ready:#}"
    );
}

#[test]
fn the_watchdog_s_identical_failures_are_one_line_and_the_json_keeps_each() {
    let dir = tempdir("grouped");
    let port = free_port().to_string();
    let report = dir.join("r.json");
    let html = dir.join("r.html");
    let out = run_bounded(
        Command::new(witness())
            .arg("load")
            .args(["--url", &format!("http://127.0.0.1:{port}/call")])
            .args(["--restart", "always", "--backoff", "200ms"])
            .args(["--levels", "1,8", "--rounds", "1", "--settle", "300ms"])
            .arg("--report")
            .arg(&report)
            .arg("--html")
            .arg(&html)
            .arg("--journal")
            .arg(dir.join("j.jsonl"))
            .arg("--")
            .arg(toy())
            .args(["--port", &port, "--call", "lock:500ms", "--watchdog", "3s"]),
        Duration::from_secs(90),
    );
    let err = stderr(&out);
    let r = json(&report);
    let level = r["levels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["concurrency"] == 8)
        .expect("level 8")
        .clone();
    let failures = level["failures"].as_array().unwrap();
    assert!(failures.len() >= 2, "{level:#}\n{err}");
    // The JSON keeps each failure; the terminal says them once, with their ids and count.
    // The JSON lists them as they ended; the terminal names them by their lowest id.
    let first = failures
        .iter()
        .filter_map(|f| f["id"].as_u64())
        .min()
        .unwrap();
    let grouped = format!("requests {first}–");
    let line = err
        .lines()
        .find(|l| l.trim_start().starts_with(&grouped))
        .unwrap_or_else(|| panic!("no grouped line {grouped}: {err}"));
    assert!(
        line.contains(&format!("({})", failures.len())),
        "{line}\n{err}"
    );
    assert!(line.contains("exited with 124 (after log line"), "{line}");
    for f in failures {
        assert!(
            !err.contains(&format!("      request {} ", f["id"])),
            "listed alone too: {err}"
        );
    }
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains(&format!("level 8: {grouped}")),
        "the HTML groups them too"
    );
}

#[test]
fn a_refused_soak_tells_no_memory_trend() {
    let dir = tempdir("soak-refused");
    let port = free_port().to_string();
    let out = run_bounded(
        Command::new(witness())
            .arg("soak")
            .arg("--plan")
            .arg(repo().join("examples/plans/quick.toml"))
            .args(["--base-url", &format!("http://127.0.0.1:{port}")])
            .args(["--gpu", "off"])
            .arg("--journal")
            .arg(dir.join("j.jsonl"))
            .arg("--html")
            .arg(dir.join("r.html"))
            .arg("--")
            .arg(toy())
            .args(["--port", &port, "--die-after", "1ms"]),
        Duration::from_secs(60),
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("REFUSED: "), "{err}");
    assert!(!err.contains("memory:"), "{err}");
    let page = std::fs::read_to_string(dir.join("r.html")).unwrap();
    assert!(
        !page.contains("server memory:"),
        "the HTML tells none either"
    );
}

/// A plain server that the kernel kills with SIGKILL 2 s after it starts; nothing restarts it.
const KILLED: &str = r#"
import http.server, os, signal, sys, threading
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
threading.Timer(2.0, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"#;

#[test]
fn a_server_killed_with_nothing_to_restart_it_died_and_was_not_restarted() {
    let dir = tempdir("died");
    let port = free_port().to_string();
    let server = dir.join("killed.py");
    std::fs::write(&server, KILLED).unwrap();
    let report = dir.join("r.json");
    let out = run_bounded(
        Command::new(witness())
            .arg("load")
            .args(["--url", &format!("http://127.0.0.1:{port}/")])
            .args(["--method", "GET", "--levels", "1,4,8", "--rounds", "1"])
            .arg("--report")
            .arg(&report)
            .arg("--journal")
            .arg(dir.join("j.jsonl"))
            .args(["--", "python3"])
            .arg(&server)
            .arg(&port),
        Duration::from_secs(60),
    );
    let err = stderr(&out);
    let r = json(&report);
    let levels = r["levels"].as_array().unwrap();
    let died = levels
        .iter()
        .find(|l| !l["died"].is_null())
        .unwrap_or_else(|| panic!("no level says died: {levels:#?}\n{err}"));
    assert_eq!(died["restarted"], false, "{died:#}");
    assert!(
        died["died"]
            .as_str()
            .unwrap()
            .ends_with("was killed by SIGKILL (exit 137)"),
        "{died:#}"
    );
    for l in levels {
        assert_eq!(l["restarted"], false, "nothing restarted it: {l:#}");
        let reasons = l["reasons"].to_string();
        assert!(!reasons.contains("exit status 137"), "{reasons}");
    }
    assert!(
        died["reasons"][0]
            .as_str()
            .unwrap()
            .starts_with("the server died: pid"),
        "{died:#}"
    );
    assert!(err.contains("no, died"), "{err}");
    assert!(!err.contains(" yes "), "{err}");
}
