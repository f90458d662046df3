//! `witness wrap --proxy` in front of an MCP server over streamable HTTP that restarts: the official
//! Python SDK's server (tests/peers/session_http_mcp.py) and its streamable HTTP client
//! (tests/peers/session_http_client.py). A session belongs to the server process that issued it:
//! after a restart the client's old `Mcp-Session-Id` gets 404 (what the MCP specification says for
//! a session the server no longer has), the client initializes again and its calls succeed, and the
//! journal names the 404 as the restart's consequence. Without a restart an unknown session id
//! passes to the server unchanged; the proxy's own 502 while nothing listens keeps its words in
//! every view.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;

fn peer(name: &str) -> PathBuf {
    repo().join("tests/peers").join(name)
}

/// The official SDK (PyPI `mcp`, with uvicorn), or (outside CI) a reason to skip.
fn have_sdk() -> bool {
    have("the MCP Python SDK", "python3 -c 'import mcp, uvicorn'")
}

/// One request on its own connection (`Connection: close`), std only so nothing hides what is
/// sent: the whole answer as text, head and body.
fn http(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).to_string()
}

/// `witness wrap --proxy 127.0.0.1:LISTEN=127.0.0.1:UP ARGS -- SERVER…` (`{UP}` in the server's
/// command is UP); its terminal report goes to DIR/wrap.err, the JSON and HTML reports beside it.
fn spawn_wrap(dir: &Path, listen: u16, up: u16, args: &[&str], server: &[String]) -> Child {
    Command::new(witness())
        .args(["wrap", "--journal"])
        .arg(dir.join("j.jsonl"))
        .arg("--report")
        .arg(dir.join("r.json"))
        .arg("--html")
        .arg(dir.join("r.html"))
        .arg("--proxy")
        .arg(format!("127.0.0.1:{listen}=127.0.0.1:{up}"))
        .args(args)
        .arg("--")
        .args(server.iter().map(|a| a.replace("{UP}", &up.to_string())))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.join("wrap.out")).unwrap())
        .stderr(std::fs::File::create(dir.join("wrap.err")).unwrap())
        .spawn()
        .expect("spawn witness wrap")
}

fn stop_wrap(child: Child) {
    kill(child.id() as i32, 15);
    wait_bounded(child, Duration::from_secs(30));
}

fn kinds(journal: &Path, kind: &str) -> usize {
    journal_lines(journal)
        .iter()
        .filter(|l| l["kind"] == kind)
        .count()
}

fn requests(journal: &Path) -> Vec<serde_json::Value> {
    journal_lines(journal)
        .into_iter()
        .filter(|l| l["kind"] == "request")
        .collect()
}

fn server(extra: &[&str]) -> Vec<String> {
    let mut v = vec![
        "python3".to_string(),
        peer("session_http_mcp.py").display().to_string(),
        "{UP}".to_string(),
    ];
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

/// The observed row of `group` in the JSON report.
fn row<'a>(report: &'a serde_json::Value, group: &str) -> &'a serde_json::Value {
    report["observed"]["calls"]
        .as_array()
        .and_then(|c| c.iter().find(|r| r["group"] == group))
        .unwrap_or_else(|| panic!("no row {group} in {:#}", report["observed"]))
}

/// The SDK's client across a restart: its next request on the old session gets 404, it initializes
/// again, and its call succeeds; the journal and every view name the 404 as the restart's.
#[test]
fn an_sdk_client_s_old_session_gets_404_after_a_restart_and_its_new_session_works() {
    if !have_sdk() {
        return;
    }
    let dir = tempdir("proxy404");
    let (listen, up) = (free_port(), free_port());
    let marker = dir.join("watchdog-fired-once");
    let go = dir.join("go");
    let wrap = spawn_wrap(
        &dir,
        listen,
        up,
        &["--restart", "always"],
        &server(&["--watchdog", "1", &marker.display().to_string()]),
    );
    let journal = dir.join("j.jsonl");
    wait_listening(listen);
    wait_listening(up);
    let client = Command::new("python3")
        .arg(peer("session_http_client.py"))
        .arg(format!("http://127.0.0.1:{listen}/mcp"))
        .arg(&go)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The first process's watchdog fires (exit 124), witness starts a second one: once it listens,
    // the client calls again on its old session.
    wait_until(
        "the server restarted by witness",
        Duration::from_secs(60),
        || kinds(&journal, "spawn") >= 2,
    );
    wait_listening(up);
    std::fs::write(&go, "").unwrap();
    let out = wait_bounded(client, Duration::from_secs(90));
    stop_wrap(wrap);
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    let terminal = std::fs::read_to_string(dir.join("wrap.err")).unwrap();
    eprintln!(
        "client:\n{said}\n{}\nwitness:\n{terminal}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0));
    // What the client saw: its call on the old session failed as "session not found" (the 404),
    // it initialized again, and the new session's call was answered.
    assert!(said.contains("call 1 ok: echo call 1"), "{said}");
    assert!(
        said.contains("call 2 error: -32600 Session not found"),
        "{said}"
    );
    assert!(
        said.contains("reinitialized\ncall 3 ok: echo call 3"),
        "{said}"
    );

    // The journal: the 404 is the restart's consequence, naming the process that issued the
    // session; never a server error, never an ok latency.
    let recs = requests(&journal);
    let spawns: Vec<u64> = journal_lines(&journal)
        .iter()
        .filter(|l| l["kind"] == "spawn")
        .filter_map(|l| l["pid"].as_u64())
        .collect();
    let echo: Vec<_> = recs
        .iter()
        .filter(|r| r["group"] == "http tools/call echo")
        .collect();
    assert_eq!(echo.len(), 3, "{echo:#?}");
    assert_eq!(echo[0]["outcome"]["kind"], "ok");
    assert_eq!(echo[1]["outcome"]["error"], "session_gone", "{:#}", echo[1]);
    let d = echo[1]["detail"].as_str().unwrap();
    assert!(
        d.contains(&format!(
            "the MCP session was issued by server pid {}, which has exited (the server runs now as pid {})",
            spawns[0], spawns[1]
        )) && d.contains("the restart ended it; witness's proxy answered 404"),
        "{d}"
    );
    assert_eq!(echo[2]["outcome"]["kind"], "ok");
    assert_eq!(
        recs.iter()
            .filter(|r| r["group"] == "http initialize" && r["outcome"]["kind"] == "ok")
            .count(),
        2,
        "{recs:#?}"
    );

    // Every view: counted apart from the server's errors, annotated in the journal's words.
    let report = json(&dir.join("r.json"));
    let r = row(&report, "http tools/call echo");
    assert_eq!(
        (
            &r["counts"]["ok"],
            &r["counts"]["error"],
            &r["counts"]["session_gone"]
        ),
        (&2.into(), &0.into(), &1.into()),
        "{r:#}"
    );
    let f = &r["failures"][0];
    assert_eq!(f["outcome"], "session ended by a restart (404)");
    assert!(
        f["annotation"].as_str().unwrap().starts_with(&format!(
            "the MCP session was issued by server pid {}",
            spawns[0]
        )),
        "{f:#}"
    );
    assert!(terminal.contains("session_gone=1"), "{terminal}");
    assert!(
        terminal.contains("tools/call echo: session ended by a restart (404) after"),
        "{terminal}"
    );
    let html = std::fs::read_to_string(dir.join("r.html")).unwrap();
    assert!(
        html.contains("the restart ended it; witness&#39;s proxy answered 404")
            || html.contains("the restart ended it; witness's proxy answered 404"),
        "{html}"
    );
}

/// The twin: with no restart, a request carrying a session id the server never issued goes to the
/// live server unchanged, and the server's own answer comes back (witness invents no 404); the
/// session the live process issued keeps working.
#[test]
fn an_unknown_session_id_to_a_live_server_is_the_server_s_to_answer() {
    if !have_sdk() {
        return;
    }
    let dir = tempdir("proxy404-twin");
    let (listen, up) = (free_port(), free_port());
    let wrap = spawn_wrap(&dir, listen, up, &[], &server(&[]));
    wait_listening(listen);
    wait_listening(up);
    let post = |session: Option<&str>, body: &str| -> String {
        let mut h = vec![
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", "2025-06-18"),
        ];
        if let Some(s) = session {
            h.push(("Mcp-Session-Id", s));
        }
        http(listen, "POST", "/mcp", &h, body)
    };
    let init = post(
        None,
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#,
    );
    let session = init
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .starts_with("mcp-session-id:")
                .then(|| l.split_once(':').unwrap().1.trim().to_string())
        })
        .unwrap_or_else(|| panic!("no session id in {init}"));
    post(
        Some(&session),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    let call = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}"#;
    let garbage = post(Some("0123456789abcdef-not-a-session"), call);
    let fine = post(Some(&session), call);
    stop_wrap(wrap);
    eprintln!("garbage:\n{garbage}\nfine:\n{fine}");
    // The server's own 404, its own words, nothing of witness's.
    assert!(garbage.starts_with("HTTP/1.1 404"), "{garbage}");
    assert!(garbage.contains("Session not found"), "{garbage}");
    assert!(
        !garbage.to_ascii_lowercase().contains("witness"),
        "{garbage}"
    );
    assert!(fine.starts_with("HTTP/1.1 200"), "{fine}");
    assert!(fine.contains("echo hi"), "{fine}");
    let recs = requests(&dir.join("j.jsonl"));
    let echo: Vec<_> = recs
        .iter()
        .filter(|r| r["group"] == "http tools/call echo")
        .collect();
    assert_eq!(echo.len(), 2, "{recs:#?}");
    assert_eq!(echo[0]["outcome"]["error"], "http4xx", "{:#}", echo[0]);
    assert_eq!(echo[0]["status"], 404);
    assert_eq!(echo[1]["outcome"]["kind"], "ok");
    assert!(recs.iter().all(|r| r["outcome"]["error"] != "session_gone"));
    let report = json(&dir.join("r.json"));
    assert_eq!(
        row(&report, "http tools/call echo")["counts"]["session_gone"],
        0
    );
}

/// The proxy's own 502 while nothing listens on UPSTREAM keeps the journal's words ("the server
/// was down … witness's proxy answered 502") in the terminal, JSON and HTML reports, never "the
/// server did not exit or restart while it was in flight".
#[test]
fn the_proxy_s_502_while_nothing_listens_keeps_its_words_in_every_view() {
    let dir = tempdir("proxy502");
    let (listen, up) = (free_port(), free_port());
    // A server that never listens.
    let never = vec![
        "python3".to_string(),
        "-c".to_string(),
        "import time; time.sleep(120)".to_string(),
    ];
    let wrap = spawn_wrap(&dir, listen, up, &[], &never);
    wait_listening(listen);
    let said = http(listen, "GET", "/api/items", &[], "");
    // The exchange is journalled as the proxy finishes it, a moment after the client has its
    // answer: on a busy machine that moment can come after a stop sent at once.
    wait_until(
        "the proxy's exchange journalled",
        Duration::from_secs(10),
        || requests(&dir.join("j.jsonl")).len() == 1,
    );
    stop_wrap(wrap);
    assert!(said.starts_with("HTTP/1.1 502"), "{said}");
    assert!(
        said.contains("this 502 is witness's, not the server's"),
        "{said}"
    );
    let words = format!(
        "the server was down (nothing listening on 127.0.0.1:{up}); witness's proxy answered 502"
    );
    let recs = requests(&dir.join("j.jsonl"));
    assert_eq!(recs.len(), 1, "{recs:#?}");
    assert_eq!(recs[0]["detail"], words.as_str());
    let terminal = std::fs::read_to_string(dir.join("wrap.err")).unwrap();
    eprintln!("{terminal}");
    assert!(
        terminal.contains("GET /api/items: connect refused after "),
        "{terminal}"
    );
    assert!(terminal.contains(&words), "{terminal}");
    let report = json(&dir.join("r.json"));
    let f = &row(&report, "http GET /api/items")["failures"][0];
    assert_eq!(f["annotation"], words.as_str(), "{f:#}");
    let html = std::fs::read_to_string(dir.join("r.html")).unwrap();
    assert!(
        html.contains("the server was down (nothing listening on"),
        "{html}"
    );
    assert!(html.contains("proxy answered 502"), "{html}");
    for view in [&terminal, &html, &report.to_string()] {
        assert!(
            !view.contains("did not exit or restart while it was in flight"),
            "{view}"
        );
    }
}
