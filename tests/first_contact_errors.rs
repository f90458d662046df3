//! The first minutes with witness: what a slip costs and what it says. A closed stdout or stderr
//! (an MCP host that stopped reading, `| head -1`) costs nothing: no panic, the documented exit
//! code, the journal and the report whole. A URL without `http://`, `https://` for a plain-HTTP
//! server, a server command that is not there and a mistyped flag are each said once, naming the
//! fix. `--cacert` trusts the self-signed certificate it names (the `CA:TRUE` one OpenSSL 3 makes)
//! with its validity and names still checked. Real processes on loopback: witness, the example
//! toy_server, python3's ssl server with certificates made by `openssl` (skipped without them, and
//! failing under CI=true).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::*;

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs `cmd` with its stdout and/or stderr a pipe whose reading end is closed at once (as a reader
/// that went away leaves it): every write there fails with EPIPE. The other stream is read.
fn with_closed(cmd: &mut Command, stdout: bool, stderr: bool, limit: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    if stdout {
        drop(child.stdout.take());
    }
    if stderr {
        drop(child.stderr.take());
    }
    wait_bounded(child, limit)
}

fn end_of(journal: &Path) -> serde_json::Value {
    let lines = journal_lines(journal);
    let last = lines.last().cloned().unwrap_or_default();
    assert_eq!(last["kind"], "end", "the journal is cut short: {lines:?}");
    last
}

#[test]
fn wrap_exits_with_the_child_s_code_whichever_of_its_streams_is_closed() {
    let dir = tempdir("closed-wrap");
    for (i, (out, err)) in [(false, true), (true, false), (true, true)]
        .into_iter()
        .enumerate()
    {
        let journal = dir.join(format!("w{i}.jsonl"));
        // The child writes enough on stdout for the relay to meet the closed pipe, then on stderr.
        let got = with_closed(
            Command::new(witness())
                .args(["wrap", "--gpu", "off", "--journal"])
                .arg(&journal)
                .args(["--", "sh", "-c", "seq 1 20000; echo hi >&2; exit 7"]),
            out,
            err,
            Duration::from_secs(30),
        );
        let said = stderr(&got);
        assert_eq!(
            got.status.code(),
            Some(7),
            "stdout closed {out}, stderr closed {err}: {said}"
        );
        assert!(!said.contains("panicked"), "{said}");
        assert_eq!(end_of(&journal)["exit_code"], 7);
    }
    // The plainest case of all.
    let got = with_closed(
        Command::new(witness())
            .args(["wrap", "--gpu", "off", "--journal"])
            .arg(dir.join("plain.jsonl"))
            .args(["--", "sh", "-c", "exit 7"]),
        true,
        true,
        Duration::from_secs(30),
    );
    assert_eq!(got.status.code(), Some(7));
}

#[test]
fn load_with_stdout_and_stderr_closed_writes_its_journal_and_report_and_exits_as_documented() {
    let dir = tempdir("closed-load");
    let port = free_port();
    let (journal, report) = (dir.join("j.jsonl"), dir.join("r.json"));
    let got = with_closed(
        Command::new(witness())
            .args(["load", "--url", &format!("http://127.0.0.1:{port}/call")])
            .args(["--levels", "1,2", "--rounds", "5", "--settle", "100ms"])
            .args(["--gpu", "off", "--journal"])
            .arg(&journal)
            .arg("--report")
            .arg(&report)
            .arg("--")
            .arg(toy())
            .args(["--port", &port.to_string()]),
        true,
        true,
        Duration::from_secs(60),
    );
    assert_eq!(got.status.code(), Some(0), "{got:?}");
    let r = json(&report);
    assert_eq!(r["levels"][0]["counts"]["ok"], 5, "{r:#}");
    assert_eq!(r["levels"][1]["counts"]["ok"], 10, "{r:#}");
    assert_eq!(end_of(&journal)["reason"], "every level ran");
}

/// The stderr of a run expected to exit `code`, with no panic.
fn fails(args: &[&str], code: i32) -> String {
    let out = run_bounded(Command::new(witness()).args(args), Duration::from_secs(30));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    err
}

#[test]
fn a_url_without_its_scheme_says_to_add_http_once_naming_the_flag() {
    let port = free_port();
    let bare = format!("127.0.0.1:{port}/call");
    let err = fails(&["load", "--url", &bare], 2);
    assert!(
        err.contains(&format!(
            "--url {bare} has no scheme: add http:// (or https://), e.g. http://{bare}"
        )),
        "{err}"
    );
    assert_eq!(err.matches("has no scheme").count(), 1, "{err}");
    let url = format!("http://{bare}");
    let health = format!("127.0.0.1:{port}/health");
    let err = fails(&["load", "--url", &url, "--health-url", &health], 2);
    assert!(
        err.contains(&format!(
            "--health-url {health} has no scheme: add http:// (or https://), e.g. http://{health}"
        )),
        "{err}"
    );
    let err = fails(
        &["mcp", "tools", "--url", &format!("127.0.0.1:{port}/mcp")],
        2,
    );
    assert!(
        err.contains("--url") && err.contains(&format!("e.g. http://127.0.0.1:{port}/mcp")),
        "{err}"
    );
    let plan = repo().join("examples/plans/quick.toml");
    let err = fails(
        &[
            "soak",
            "--plan",
            plan.to_str().unwrap(),
            "--base-url",
            &format!("127.0.0.1:{port}"),
        ],
        2,
    );
    assert!(
        err.contains(&format!(
            "--base-url 127.0.0.1:{port} has no scheme: add http:// (or https://), e.g. http://127.0.0.1:{port}"
        )),
        "{err}"
    );
}

#[test]
fn https_to_a_plain_http_server_names_the_http_url_to_use_once() {
    let port = free_port();
    let _toy = Bg::start(Command::new(toy()).args(["--port", &port.to_string()]));
    wait_listening(port);
    let dir = tempdir("plain");
    let journal = dir.join("j.jsonl");
    let err = fails(
        &[
            "load",
            "--url",
            &format!("https://127.0.0.1:{port}/call"),
            "--levels",
            "1",
            "--rounds",
            "2",
            "--journal",
            journal.to_str().unwrap(),
        ],
        3,
    );
    let fix = format!("it speaks plain HTTP: use http://127.0.0.1:{port}/call");
    assert_eq!(err.matches(&fix).count(), 1, "{err}");
    assert_eq!(err.matches("plain HTTP").count(), 1, "{err}");
    assert!(!err.contains("InvalidContentType"), "{err}");
    // Refused before any load.
    let lines = journal_lines(&journal);
    assert!(lines.iter().all(|l| l["kind"] != "request"), "{lines:?}");
}

#[test]
fn a_server_command_that_is_not_there_is_said_once_before_anything_starts() {
    let dir = tempdir("nocmd");
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/call");
    let plan = repo().join("examples/plans/quick.toml");
    let base = format!("http://127.0.0.1:{port}");
    let runs: [(&str, Vec<&str>, i32); 3] = [
        ("load", vec!["load", "--url", &url], 2),
        (
            "soak",
            vec![
                "soak",
                "--plan",
                plan.to_str().unwrap(),
                "--base-url",
                &base,
            ],
            2,
        ),
        ("wrap", vec!["wrap"], 127),
    ];
    for (mode, args, code) in runs {
        let journal = dir.join(format!("{mode}.jsonl"));
        let mut all = args.clone();
        all.extend(["--gpu", "off", "--journal", journal.to_str().unwrap()]);
        all.extend(["--", "/nonexistent/server", "--port", "1"]);
        let err = fails(&all, code);
        assert_eq!(
            err.matches("/nonexistent/server").count(),
            1,
            "{mode}: {err}"
        );
        assert!(
            err.contains("could not start \"/nonexistent/server\": no such file; give the path of the server's program after `--`"),
            "{mode}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{mode}: {err}");
        assert!(!journal.exists(), "{mode}: nothing was started or written");
    }
    // A bare name says where it was looked for.
    let err = fails(
        &["load", "--url", &url, "--", "witness-surely-not-a-command"],
        2,
    );
    assert_eq!(err.matches("no such command in PATH").count(), 1, "{err}");
}

#[test]
fn a_mistyped_flag_gets_a_tip_that_fits_witness_not_clap_s_dash_dash_one() {
    let err = fails(&["load", "--urll", "http://127.0.0.1:9/"], 2);
    assert!(!err.contains("'-- --urll'"), "{err}");
    assert!(err.contains("a similar argument exists: '--url'"), "{err}");
    // No `--` was typed: no tip about it, but where the flags are listed.
    assert!(!err.contains("after `--`"), "{err}");
    assert!(
        err.contains("`witness load --help` lists its flags"),
        "{err}"
    );
    let err = fails(&["wrap", "--restrat", "always", "--", "true"], 2);
    assert!(!err.contains("'-- --restrat'"), "{err}");
    assert!(err.contains("'--restart'"), "{err}");
    assert!(
        err.contains("everything after `--` is the server's command"),
        "{err}"
    );
    // A flag replay does not have: no tip about a `--` nobody typed.
    let err = fails(&["replay", "calls.jsonl", "--rounds", "3"], 2);
    assert!(!err.contains("`--`"), "{err}");
    assert!(
        err.contains("`witness replay --help` lists its flags"),
        "{err}"
    );
}

/// The commonest slip, a server's command without `--` before it, is answered with the command
/// line as it should have been typed.
#[test]
fn a_server_command_without_dash_dash_is_answered_with_the_line_that_has_it() {
    let err = fails(
        &[
            "wrap",
            "--restart",
            "on-failure",
            "python3",
            "-m",
            "http.server",
        ],
        2,
    );
    assert!(
        err.contains(
            "the server's command goes after `--`, witness's own flags before it: `witness wrap --restart on-failure -- python3 -m http.server`"
        ),
        "{err}"
    );
    let err = fails(&["load", "--url", "http://127.0.0.1:9/", "toy_server"], 2);
    assert!(
        err.contains("`witness load --url http://127.0.0.1:9/ -- toy_server`"),
        "{err}"
    );
}

// ---- --cacert and a self-signed certificate ------------------------------------------------------

fn sh(dir: &Path, script: &str) {
    let out = Command::new("sh")
        .args(["-ec", script])
        .current_dir(dir)
        .output()
        .expect("sh");
    assert!(
        out.status.success(),
        "{script}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// In `dir`: `c.pem`/`k.pem` self-signed the usual way (OpenSSL 3 marks it CA:TRUE) for 127.0.0.1;
/// `other.pem`/`other.key` another such certificate; `expired.pem`/`expired.key` self-signed CA:TRUE
/// for 127.0.0.1, valid only on 1 January 2020. None without openssl or python3's ssl.
fn certificates(tag: &str) -> Option<PathBuf> {
    if !have("openssl", "command -v openssl") || !have("python3's ssl", "python3 -c 'import ssl'") {
        return None;
    }
    let dir = tempdir(tag);
    sh(
        &dir,
        r#"
openssl req -x509 -newkey rsa:2048 -nodes -keyout k.pem -out c.pem -days 2 -subj /CN=localhost -addext subjectAltName=IP:127.0.0.1 2>/dev/null
openssl req -x509 -newkey rsa:2048 -nodes -keyout other.key -out other.pem -days 2 -subj /CN=localhost -addext subjectAltName=IP:127.0.0.1 2>/dev/null
openssl x509 -in c.pem -noout -text | grep -q 'CA:TRUE'
# A validity in the past: openssl 3.0's req and x509 cannot set one, its `ca` can.
openssl req -newkey rsa:2048 -nodes -keyout expired.key -out expired.csr -subj /CN=localhost 2>/dev/null
mkdir -p ca && : > ca/index.txt && echo 01 > ca/serial
printf '[ca]\ndefault_ca=t\n[t]\ndir=ca\ndatabase=ca/index.txt\nnew_certs_dir=ca\nserial=ca/serial\ndefault_md=sha256\npolicy=p\nunique_subject=no\n[p]\ncommonName=supplied\n' > ca.cnf
printf 'basicConstraints=critical,CA:TRUE\nsubjectAltName=IP:127.0.0.1\n' > ext.cnf
openssl ca -batch -selfsign -config ca.cnf -keyfile expired.key -in expired.csr -out expired.pem \
  -startdate 20200101000000Z -enddate 20200102000000Z -extfile ext.cnf -notext 2>/dev/null
"#,
    );
    Some(dir)
}

/// python3's http.server wrapped in TLS with `cert`/`key` from `dir`, answering `ok` to any GET or
/// POST, on a free port.
fn https_server(dir: &Path, cert: &str, key: &str) -> (Bg, u16) {
    let script = dir.join("serve.py");
    std::fs::write(
        &script,
        r#"
import http.server, ssl, sys
port, cert, key = int(sys.argv[1]), sys.argv[2], sys.argv[3]
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        self.send_response(200)
        self.send_header("Content-Length", "3")
        self.end_headers()
        self.wfile.write(b"ok\n")
    do_GET = do_POST = do_HEAD = answer
    def log_message(self, *a):
        pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
s.socket = ctx.wrap_socket(s.socket, server_side=True)
s.serve_forever()
"#,
    )
    .unwrap();
    let port = free_port();
    let bg = Bg::start(
        Command::new("python3")
            .arg(&script)
            .arg(port.to_string())
            .arg(dir.join(cert))
            .arg(dir.join(key)),
    );
    wait_listening(port);
    (bg, port)
}

fn load_tls(dir: &Path, tag: &str, url: &str, cacert: &str) -> (Output, PathBuf) {
    let report = dir.join(format!("{tag}.json"));
    let out = run_bounded(
        Command::new(witness())
            .args(["load", "--url", url, "--levels", "1,2", "--rounds", "3"])
            .args(["--settle", "100ms", "--gpu", "off", "--journal"])
            .arg(dir.join(format!("{tag}.jsonl")))
            .arg("--report")
            .arg(&report)
            .arg("--cacert")
            .arg(dir.join(cacert)),
        Duration::from_secs(60),
    );
    (out, report)
}

#[test]
fn cacert_trusts_the_self_signed_certificate_it_names_with_its_dates_and_names_still_checked() {
    let Some(dir) = certificates("cacert-self") else {
        return;
    };
    let (_server, port) = https_server(&dir, "c.pem", "k.pem");
    let url = format!("https://127.0.0.1:{port}/call");

    // The very certificate the server presents: trusted.
    let (out, report) = load_tls(&dir, "same", &url, "c.pem");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r = json(&report);
    assert_eq!(r["levels"][0]["counts"]["ok"], 3, "{r:#}");
    assert_eq!(r["levels"][1]["counts"]["ok"], 6, "{r:#}");

    // Another self-signed certificate: refused, naming the file given.
    let (out, _) = load_tls(&dir, "other", &url, "other.pem");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    let other = dir.join("other.pem");
    assert!(
        err.contains(&format!(
            "it is not the certificate in --cacert {}",
            other.display()
        )),
        "{err}"
    );

    // The right certificate under a name it does not hold: refused.
    let (out, _) = load_tls(
        &dir,
        "name",
        &format!("https://localhost:{port}/call"),
        "c.pem",
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("wrong name: it is for 127.0.0.1 (the names it holds), not for localhost"),
        "{err}"
    );

    // The exact certificate, expired: refused.
    let (_expired, p2) = https_server(&dir, "expired.pem", "expired.key");
    let (out, _) = load_tls(
        &dir,
        "expired",
        &format!("https://127.0.0.1:{p2}/call"),
        "expired.pem",
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("it has expired: it was valid until 2020-01-02T00:00:00Z"),
        "{err}"
    );
}

#[test]
fn wrap_s_proxy_trusts_the_self_signed_upstream_its_cacert_names() {
    let Some(dir) = certificates("cacert-proxy") else {
        return;
    };
    let (_server, port) = https_server(&dir, "c.pem", "k.pem");
    // 200 through the proxy with the server's own certificate; 502 with another one.
    for (cacert, status) in [("c.pem", "200"), ("other.pem", "502")] {
        let listen = free_port();
        let journal = dir.join(format!("wrap-{cacert}.jsonl"));
        let child = Command::new(witness())
            .args(["wrap", "--gpu", "off", "--journal"])
            .arg(&journal)
            .arg("--proxy")
            .arg(format!("127.0.0.1:{listen}=https://127.0.0.1:{port}"))
            .arg("--cacert")
            .arg(dir.join(cacert))
            .args(["--", "sleep", "30"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_listening(listen);
        let got = {
            use std::io::{Read, Write};
            let mut s = std::net::TcpStream::connect(("127.0.0.1", listen)).unwrap();
            s.write_all(b"GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                .unwrap();
            let mut got = String::new();
            let _ = s.read_to_string(&mut got);
            got
        };
        kill(child.id() as i32, 15);
        let out = wait_bounded(child, Duration::from_secs(20));
        assert!(
            got.starts_with(&format!("HTTP/1.1 {status}")),
            "--cacert {cacert}: {got}\n{}",
            stderr(&out)
        );
        if status == "502" {
            let text = std::fs::read_to_string(&journal).unwrap();
            assert!(
                text.contains("it is not the certificate in --cacert"),
                "{text}"
            );
        }
    }
}
