//! `witness wrap --record FILE`: a real client's session through wrap, written as it goes: MCP over
//! stdio as JSONL (the official Python SDK's client, and a raw JSON-RPC client written here), HTTP
//! through `--proxy` as HAR 1.2 (curl, checked by haralyzer from PyPI). Masked, bounded, and whole up
//! to the last flush when witness is killed with SIGKILL.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

fn need_sdk() -> bool {
    have(
        "the MCP Python SDK (mcp)",
        "python3 -c 'import mcp.client.stdio, mcp.server.mcpserver'",
    )
}

/// The recording's lines, each parsed (a line that is not JSON fails the test).
fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn client_msgs(lines: &[Value]) -> Vec<&Value> {
    lines.iter().filter(|l| l["from"] == "client").collect()
}

fn answers(lines: &[Value]) -> Vec<&Value> {
    lines
        .iter()
        .filter(|l| l["from"] == "server" && l.get("outcome").is_some())
        .collect()
}

/// (a) The official SDK's client through `wrap --record`: initialize, tools/list and 20 calls with
/// pauses to a server whose `work` serialises on a lock. The client prints exactly what it prints
/// against the server alone; the file holds every message the client sent with increasing offsets
/// that keep the pauses, and every answer.
#[test]
fn an_sdk_session_is_recorded_whole_and_the_client_sees_no_difference() {
    if !need_sdk() {
        return;
    }
    let dir = tempdir("record-sdk");
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
            .arg(py("lock_server.py")),
        Duration::from_secs(120),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // What the client prints against the server alone (session_client.py's lines are fixed).
    let mut expected = vec!["init lock-server".to_string(), "tools echo,work".into()];
    for n in 1..=20 {
        expected.push(if n % 2 == 0 {
            format!("call {n} work: worked 50 ms")
        } else {
            format!("call {n} echo: hello {n}")
        });
    }
    expected.push("done 20".into());
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        expected,
        "stderr:\n{stderr}"
    );
    assert!(out.status.success(), "{stderr}");
    let said = stderr
        .lines()
        .find(|l| l.starts_with("witness: recording in"))
        .unwrap_or_else(|| panic!("wrap says where the recording is:\n{stderr}"));
    assert!(
        said.contains(rec.to_str().unwrap())
            && said.contains("45 messages")
            && said.contains("nothing was cut"),
        "{said}"
    );

    let l = lines(&rec);
    assert_eq!(l[0]["witness_recording"], 1);
    assert_eq!(l[0]["transport"], "stdio");
    assert_eq!(l[0]["command"][0], "python3");
    assert!(l[0]["started_unix_ms"].as_u64().unwrap() > 1_700_000_000_000);
    let sent = client_msgs(&l);
    let methods: Vec<&str> = sent
        .iter()
        .map(|m| m["msg"]["method"].as_str().unwrap())
        .collect();
    assert_eq!(
        &methods[..3],
        ["initialize", "notifications/initialized", "tools/list"]
    );
    assert_eq!(methods.len(), 23, "{methods:?}");
    let calls = &sent[3..];
    let mut last_t = sent[2]["t"].as_f64().unwrap();
    for (i, c) in calls.iter().enumerate() {
        let n = i + 1;
        assert_eq!(c["msg"]["method"], "tools/call");
        let (tool, args) = if n % 2 == 0 {
            ("work", json!({"ms": 50}))
        } else {
            ("echo", json!({"text": format!("hello {n}")}))
        };
        assert_eq!(c["msg"]["params"]["name"], tool);
        assert_eq!(c["msg"]["params"]["arguments"], args);
        // The client pauses 100 ms after each answer: the offsets keep the pacing.
        let t = c["t"].as_f64().unwrap();
        assert!(
            t - last_t >= 0.09,
            "call {n} at {t} s, the previous at {last_t} s"
        );
        last_t = t;
    }
    let ans = answers(&l);
    assert_eq!(
        ans.len(),
        22,
        "initialize, tools/list and 20 calls are answered"
    );
    for c in sent.iter().filter(|m| m["msg"].get("id").is_some()) {
        let id = &c["msg"]["id"];
        let a = ans
            .iter()
            .find(|a| a["id"] == *id)
            .unwrap_or_else(|| panic!("no answer to {id}"));
        assert_eq!(a["outcome"], "ok", "{a}");
        assert_eq!(a["result_cut"], false);
        assert!(a["t"].as_f64().unwrap() >= c["t"].as_f64().unwrap());
        if c["msg"]["method"] == "tools/call" {
            let text = a["result"]["content"][0]["text"].as_str().unwrap();
            match c["msg"]["params"]["name"].as_str().unwrap() {
                "work" => {
                    assert_eq!(text, "worked 50 ms");
                    assert!(a["t"].as_f64().unwrap() - c["t"].as_f64().unwrap() >= 0.045);
                }
                _ => assert_eq!(
                    text,
                    c["msg"]["params"]["arguments"]["text"].as_str().unwrap()
                ),
            }
        }
    }
    assert_eq!(ans[0]["result"]["serverInfo"]["name"], "lock-server");
    let last = l.last().unwrap();
    assert_eq!(last["not_kept"], 0, "{last}");
    assert!(last["note"].as_str().unwrap().contains("ended"), "{last}");
}

/// A raw JSON-RPC client written here, on `witness wrap ARGS -- python3 lock_server.py`'s stdio.
struct Raw {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    next_id: u64,
}

impl Raw {
    fn start(dir: &Path, args: &[&str]) -> Raw {
        let mut child = Command::new(witness())
            .args(["wrap", "--journal"])
            .arg(dir.join("j.jsonl"))
            .args(args)
            .args(["--", "python3"])
            .arg(py("lock_server.py"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.join("wrap.err")).unwrap())
            .spawn()
            .expect("spawn witness wrap");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines() {
                let Ok(l) = l else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let mut r = Raw {
            stdin: child.stdin.take(),
            child,
            lines: rx,
            next_id: 0,
        };
        let init = r.call(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "1"}}),
        );
        assert!(init.get("result").is_some(), "{init}");
        r.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        r
    }

    fn send(&mut self, v: Value) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{v}").unwrap();
        stdin.flush().unwrap();
    }

    /// Sends a request and waits (bounded) for its answer.
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    let v: Value = serde_json::from_str(&l).unwrap_or(Value::Null);
                    if v["id"] == json!(id) {
                        return v;
                    }
                }
                Err(RecvTimeoutError::Timeout) => panic!("no answer to {method} within 60 s"),
                Err(RecvTimeoutError::Disconnected) => panic!("witness closed its stdout"),
            }
        }
    }

    fn echo(&mut self, text: &str) -> Value {
        self.call(
            "tools/call",
            json!({"name": "echo", "arguments": {"text": text}}),
        )
    }

    /// Closes stdin (the session is over) and waits for witness to end.
    fn end(mut self) -> std::process::Output {
        drop(self.stdin.take());
        wait_bounded(self.child, Duration::from_secs(30))
    }
}

/// Masking over stdio: the values of keys naming a secret (default names, as a part of a longer
/// key, and a name given with --record-mask-key) never reach the file; other arguments are kept
/// as sent.
#[test]
fn secret_keys_in_messages_are_masked_and_the_rest_kept_as_sent() {
    if !need_sdk() {
        return;
    }
    let dir = tempdir("record-mask");
    let rec = dir.join("r.jsonl");
    let secrets = [
        "pw-81f3-record",
        "tok-77c1-record",
        "key-4410-record",
        "pin-9932-record",
    ];
    let mut raw = Raw::start(
        &dir,
        &[
            "--record",
            rec.to_str().unwrap(),
            "--record-mask-key",
            "pin",
        ],
    );
    let a = raw.call(
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "kept words", "password": secrets[0],
               "auth": {"accessToken": secrets[1], "X-Api-Key": secrets[2]},
               "user_pin": secrets[3], "max_tokens": 5}}),
    );
    assert!(a.get("result").is_some(), "{a}");
    let out = raw.end();
    assert!(out.status.success());
    let text = std::fs::read_to_string(&rec).unwrap();
    for s in secrets {
        assert!(!text.contains(s), "{s} is in the recording:\n{text}");
    }
    let l = lines(&rec);
    let call = client_msgs(&l)
        .into_iter()
        .find(|m| m["msg"]["method"] == "tools/call")
        .unwrap();
    let args = &call["msg"]["params"]["arguments"];
    assert_eq!(args["text"], "kept words");
    assert_eq!(args["password"], "***");
    assert_eq!(args["auth"], "***");
    assert_eq!(args["user_pin"], "***");
    assert_eq!(
        args["max_tokens"], 5,
        "a key that only looks like a secret is kept"
    );
}

/// (c) SIGKILL of witness mid-session: the file holds every message up to the last flush (a flush
/// is at most 200 ms after a message), as whole lines.
#[test]
fn a_stdio_recording_survives_sigkill_up_to_its_last_flush() {
    if !need_sdk() {
        return;
    }
    let dir = tempdir("record-kill");
    let rec = dir.join("r.jsonl");
    let mut raw = Raw::start(&dir, &["--record", rec.to_str().unwrap()]);
    for n in 0..10 {
        let a = raw.echo(&format!("before the kill {n}"));
        assert!(a.get("result").is_some(), "{a}");
    }
    // A flush comes at most 200 ms after a message: the answers reach the file while the session
    // is idle (not only at its end). The deadline is generous for a busy machine.
    wait_until("the flushed answers", Duration::from_secs(10), || {
        let text = std::fs::read_to_string(&rec).unwrap_or_default();
        text.lines().filter(|l| l.contains("\"outcome\"")).count() == 11
    });
    kill(raw.child.id() as i32, 9);
    let _ = raw.end();
    let text = std::fs::read_to_string(&rec).unwrap();
    assert!(text.ends_with('\n'), "whole lines only");
    let l = lines(&rec);
    let calls: Vec<_> = client_msgs(&l)
        .into_iter()
        .filter(|m| m["msg"]["method"] == "tools/call")
        .collect();
    assert_eq!(calls.len(), 10);
    for (n, c) in calls.iter().enumerate() {
        assert_eq!(
            c["msg"]["params"]["arguments"]["text"],
            format!("before the kill {n}")
        );
    }
    assert_eq!(
        answers(&l).len(),
        11,
        "initialize and the 10 calls are answered"
    );
    assert!(
        l.iter().all(|v| v.get("note").is_none()),
        "witness was killed before its end note"
    );
}

/// (d) A long session with a small cap: the file stays under the cap (plus its notes), keeps a
/// whole prefix of the session, and the last note counts exactly what was not kept.
#[test]
fn a_long_session_stays_under_the_cap_and_the_note_counts_what_was_not_kept() {
    if !need_sdk() {
        return;
    }
    let dir = tempdir("record-cap");
    let rec = dir.join("r.jsonl");
    let cap = 8192;
    let mut raw = Raw::start(
        &dir,
        &["--record", rec.to_str().unwrap(), "--record-max", "8KiB"],
    );
    let calls = 150;
    for n in 0..calls {
        let a = raw.echo(&format!("message number {n} of a long session"));
        assert!(a.get("result").is_some(), "{a}");
    }
    let out = raw.end();
    assert!(out.status.success());
    let size = std::fs::metadata(&rec).unwrap().len();
    let l = lines(&rec);
    let notes: Vec<&Value> = l.iter().filter(|v| v.get("note").is_some()).collect();
    let notes_len: usize = notes.iter().map(|n| n.to_string().len() + 1).sum();
    assert!(
        size - notes_len as u64 <= cap,
        "{size} bytes, {notes_len} of them notes, over the cap of {cap}"
    );
    // Sent: initialize, initialized and the calls; answered: initialize and the calls.
    let total = (2 + calls) + (1 + calls);
    let kept = l.iter().filter(|v| v.get("from").is_some()).count();
    assert!(kept > 10 && kept < total, "{kept} of {total} kept");
    let last = l.last().unwrap();
    assert_eq!(
        last["not_kept"].as_u64().unwrap() as usize,
        total - kept,
        "{last}"
    );
    assert!(
        notes[0]["note"].as_str().unwrap().contains("cap"),
        "{}",
        notes[0]
    );
    // A prefix: the kept calls are the first ones, in order.
    let texts: Vec<String> = client_msgs(&l)
        .iter()
        .filter(|m| m["msg"]["method"] == "tools/call")
        .map(|m| {
            m["msg"]["params"]["arguments"]["text"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    for (n, t) in texts.iter().enumerate() {
        assert_eq!(*t, format!("message number {n} of a long session"));
    }
    let err = std::fs::read_to_string(dir.join("wrap.err")).unwrap();
    assert!(
        err.contains(&format!("{} messages not kept", total - kept)),
        "{err}"
    );
}

/// The upstream port in `{UP}` of the toy server's command, wrapped with the proxy on `listen`.
fn spawn_proxy_wrap(
    dir: &Path,
    listen: u16,
    rec: &Path,
    env: &[(&str, &str)],
    server_args: &[&str],
) -> Child {
    let up = free_port();
    Command::new(witness())
        .args(["wrap", "--journal"])
        .arg(dir.join("j.jsonl"))
        .arg("--proxy")
        .arg(format!("127.0.0.1:{listen}=127.0.0.1:{up}"))
        .arg("--record")
        .arg(rec)
        .arg("--")
        .arg(toy())
        .args(["--port", &up.to_string()])
        .args(server_args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.join("wrap.out")).unwrap())
        .stderr(std::fs::File::create(dir.join("wrap.err")).unwrap())
        .spawn()
        .expect("spawn witness wrap --proxy")
}

/// One request on a fresh connection (`Connection: close`); the status.
fn get(port: u16, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.split_whitespace().nth(1)?.parse().ok()
}

fn wait_proxied(port: u16) {
    wait_until(
        "the server answering through the proxy",
        Duration::from_secs(15),
        || get(port, "/health") == Some(200),
    );
}

/// Reads a HAR with haralyzer (a HAR reader from PyPI nobody here wrote) and checks every field HAR
/// 1.2 requires; prints one line per entry: `METHOD URL STATUS`.
fn haralyzer(har: &Path) -> Vec<String> {
    let script = r#"
import json, sys
from haralyzer import HarParser, HarPage
data = json.load(open(sys.argv[1]))
log = data["log"]
assert log["version"] == "1.2", log["version"]
assert log["creator"]["name"] == "witness" and log["creator"]["version"]
parser = HarParser(data)
entries = [e for p in parser.pages for e in p.entries]
assert len(entries) == len(log["entries"]), (len(entries), len(log["entries"]))
for raw, e in zip(log["entries"], entries):
    for k in ("startedDateTime", "time", "request", "response", "cache", "timings"):
        assert k in raw, k
    for k in ("method", "url", "httpVersion", "cookies", "headers", "queryString", "headersSize", "bodySize"):
        assert k in raw["request"], k
    for k in ("status", "statusText", "httpVersion", "cookies", "headers", "content", "redirectURL", "headersSize", "bodySize"):
        assert k in raw["response"], k
    assert "size" in raw["response"]["content"] and "mimeType" in raw["response"]["content"]
    for k in ("send", "wait", "receive"):
        assert raw["timings"][k] >= 0, k
    assert e.startTime is not None and e.time >= 0
    assert e.request.method and e.request.url
    print(e.request.method, e.request.url, e.response.status)
"#;
    let out = run_bounded(
        Command::new("python3").args(["-c", script]).arg(har),
        Duration::from_secs(30),
    );
    assert!(
        out.status.success(),
        "haralyzer could not read {}: {}",
        har.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect()
}

fn need_haralyzer() -> bool {
    have("haralyzer (PyPI)", "python3 -c 'import haralyzer'")
}

/// (b) curl with a bearer token and a JSON body holding a password, through `wrap --proxy …
/// --record F.har`: valid HAR 1.2 (haralyzer reads it), the exchange whole, and neither the
/// token, the password nor a token in the query string anywhere in the file.
#[test]
fn curl_through_the_proxy_is_recorded_as_valid_har_without_its_secrets() {
    let Some(curl) = tool("curl", &[]) else {
        return;
    };
    if !need_haralyzer() {
        return;
    }
    let dir = tempdir("record-har");
    let har = dir.join("session.har");
    let listen = free_port();
    let token = "tok-5e3a-record-bearer";
    let password = "pw-record-31337";
    let query = "qs-record-4242";
    let wrap = spawn_proxy_wrap(
        &dir,
        listen,
        &har,
        &[("RECORD_TEST_SECRET", token)],
        // The server requires the token: a 200 says it got it unchanged.
        &["--require-secret-env", "RECORD_TEST_SECRET"],
    );
    wait_proxied(listen);
    let body = format!(r#"{{"user":"ann","password":"{password}","note":"hello"}}"#);
    let out = run_bounded(
        Command::new(&curl)
            .args(["-sS", "-o", "-", "-w", "\n%{http_code}", "-H"])
            .arg(format!("Authorization: Bearer {token}"))
            .args(["-H", "Content-Type: application/json", "--data-binary"])
            .arg(&body)
            .arg(format!(
                "http://127.0.0.1:{listen}/call?x=1&access_token={query}"
            )),
        Duration::from_secs(20),
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.ends_with("200"), "{said}");
    kill(wrap.id() as i32, 15);
    let _ = wait_bounded(wrap, Duration::from_secs(20));
    let text = std::fs::read_to_string(&har).unwrap();
    for s in [token, password, query] {
        assert!(!text.contains(s), "{s} is in the HAR:\n{text}");
    }
    let seen = haralyzer(&har);
    let post = format!("POST http://127.0.0.1:{listen}/call?x=1&access_token=*** 200");
    assert!(seen.contains(&post), "{seen:?}");
    let v: Value = serde_json::from_str(&text).unwrap();
    let e = v["log"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["request"]["method"] == "POST")
        .unwrap();
    let auth = e["request"]["headers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| {
            h["name"]
                .as_str()
                .unwrap()
                .eq_ignore_ascii_case("authorization")
        })
        .expect("the Authorization header is kept, masked");
    assert_eq!(auth["value"], "***");
    let posted: Value =
        serde_json::from_str(e["request"]["postData"]["text"].as_str().unwrap()).unwrap();
    assert_eq!(
        posted,
        json!({"user": "ann", "password": "***", "note": "hello"})
    );
    assert_eq!(e["request"]["postData"]["mimeType"], "application/json");
    assert_eq!(e["response"]["content"]["text"], r#"{"ok":true}"#);
    assert!(e["startedDateTime"].as_str().unwrap().ends_with('Z'));
    let err = std::fs::read_to_string(dir.join("wrap.err")).unwrap();
    assert!(
        err.contains(&format!("witness: recording in {}", har.display())),
        "{err}"
    );
}

/// (c) SIGKILL of witness with a HAR open: the file still parses as HAR 1.2 and holds every
/// exchange up to the last flush.
#[test]
fn a_har_survives_sigkill_as_valid_har_up_to_its_last_flush() {
    if !need_haralyzer() {
        return;
    }
    let dir = tempdir("record-har-kill");
    let har = dir.join("r.har");
    let listen = free_port();
    let wrap = spawn_proxy_wrap(&dir, listen, &har, &[], &[]);
    wait_proxied(listen);
    for n in 0..10 {
        assert_eq!(get(listen, &format!("/call?n={n}")), Some(200));
    }
    wait_until("the flushed exchanges", Duration::from_secs(10), || {
        let text = std::fs::read_to_string(&har).unwrap_or_default();
        serde_json::from_str::<Value>(&text).is_ok_and(|v| {
            v["log"]["entries"].as_array().is_some_and(|e| {
                e.iter()
                    .filter(|e| {
                        e["request"]["url"]
                            .as_str()
                            .unwrap_or("")
                            .contains("/call?n=")
                    })
                    .count()
                    == 10
            })
        })
    });
    kill(wrap.id() as i32, 9);
    let _ = wait_bounded(wrap, Duration::from_secs(10));
    let seen = haralyzer(&har);
    for n in 0..10 {
        let want = format!("GET http://127.0.0.1:{listen}/call?n={n} 200");
        assert!(seen.contains(&want), "{want} not in {seen:?}");
    }
}

/// Bad input is said before anything runs: a recording that cannot be written, or one with no
/// traffic to record.
#[test]
fn a_recording_that_cannot_be_written_is_a_usage_error() {
    let dir = tempdir("record-bad");
    let bad: PathBuf = dir.join("no-such-folder").join("r.jsonl");
    let out = run_bounded(
        Command::new(witness())
            .args(["wrap", "--stdin", "relay", "--journal"])
            .arg(dir.join("j.jsonl"))
            .arg("--record")
            .arg(&bad)
            .args(["--", "true"]),
        Duration::from_secs(20),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--record") && err.contains(bad.to_str().unwrap()),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    // No client to record: stdin handed over, or /dev/null on it (run_bounded's), no client either.
    for (n, stdin) in [["--stdin", "inherit"], ["--stdin", "auto"]]
        .iter()
        .enumerate()
    {
        let out = run_bounded(
            Command::new(witness())
                .arg("wrap")
                .args(stdin)
                .arg("--journal")
                .arg(dir.join(format!("j{n}.jsonl")))
                .arg("--record")
                .arg(dir.join("r.jsonl"))
                .args(["--", "true"]),
            Duration::from_secs(20),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains("--record needs") && err.contains("/dev/null"),
            "{err}"
        );
    }
    let out = run_bounded(
        Command::new(witness())
            .args(["wrap", "--record-max", "1KiB", "--record"])
            .arg(dir.join("r.jsonl"))
            .args(["--", "true"]),
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--record-max"));
}
