//! `wrap --proxy` promises the other proxy tests leave unwatched, against a raw upstream that keeps
//! each request head as its bytes came (tests/peers/raw_upstream.py): header case kept both ways, a
//! websocket upgrade joined and its bytes copied, a client that hangs up journalled `cancelled`, and
//! an `https://` upstream refused while untrusted and passed with `--insecure`.
//!
//! Needs python3 (and openssl for the TLS case): `.ci/run` installs them; missing, a test says
//! SKIPPED, and fails on CI.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;

struct Wrap {
    child: Child,
    listen: u16,
    journal: PathBuf,
    heads: PathBuf,
    dir: PathBuf,
}

/// `witness wrap --proxy LISTEN=[https://]127.0.0.1:UP [extra] -- python3 raw_upstream.py UP HEADS [tls]`.
fn wrap(tag: &str, https: bool, extra: &[&str], tls: &[&str]) -> Wrap {
    let dir = tempdir(tag);
    let (listen, up) = (free_port(), free_port());
    let journal = dir.join("j.jsonl");
    let heads = dir.join("heads.bin");
    let scheme = if https { "https://" } else { "" };
    let child = Command::new(witness())
        .args(["wrap", "--journal"])
        .arg(&journal)
        .arg("--proxy")
        .arg(format!("127.0.0.1:{listen}={scheme}127.0.0.1:{up}"))
        .args(extra)
        .args(["--", "python3"])
        .arg(repo().join("tests/peers/raw_upstream.py"))
        .arg(up.to_string())
        .arg(&heads)
        .args(tls)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.join("wrap.out")).unwrap())
        .stderr(std::fs::File::create(dir.join("wrap.err")).unwrap())
        .spawn()
        .unwrap();
    wait_until("the upstream listening", Duration::from_secs(15), || {
        TcpStream::connect(("127.0.0.1", up)).is_ok()
    });
    Wrap {
        child,
        listen,
        journal,
        heads,
        dir,
    }
}

impl Wrap {
    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", self.listen)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s
    }

    /// Stops witness (SIGTERM) and returns the journal's request records.
    fn stop(self) -> (Vec<serde_json::Value>, String) {
        kill(self.child.id() as i32, 15);
        let out = wait_bounded(self.child, Duration::from_secs(20));
        let err = std::fs::read_to_string(self.dir.join("wrap.err")).unwrap_or_default();
        assert!(!err.contains("panicked"), "{err} {:?}", out.status.code());
        let recs = journal_lines(&self.journal)
            .into_iter()
            .filter(|l| l["kind"] == "request")
            .collect();
        (recs, err)
    }

    /// The request heads the upstream read, as their bytes came.
    fn heads(&self) -> Vec<String> {
        let all = std::fs::read(&self.heads).unwrap_or_default();
        String::from_utf8_lossy(&all)
            .split_inclusive("\r\n\r\n")
            .map(String::from)
            .collect()
    }
}

/// Reads one response's head (through its blank line) and then `body` bytes.
fn response(s: &mut TcpStream, body: usize) -> (String, Vec<u8>) {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = s.read(&mut b).unwrap();
        assert_eq!(n, 1, "closed after {:?}", String::from_utf8_lossy(&head));
        head.push(b[0]);
    }
    let mut rest = vec![0u8; body];
    s.read_exact(&mut rest).unwrap();
    (String::from_utf8_lossy(&head).into_owned(), rest)
}

/// A GET through the proxy: its status line, head and body (read to the end of its length).
fn get(w: &Wrap, path: &str) -> (String, String) {
    let mut s = w.connect();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut all = Vec::new();
    let _ = s.read_to_end(&mut all);
    let text = String::from_utf8_lossy(&all).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (head.to_string(), body.to_string())
}

fn python() -> bool {
    have("python3", "python3 -c 'import ssl'")
}

#[test]
fn header_case_is_kept_both_ways_through_the_proxy() {
    if !python() {
        return;
    }
    let w = wrap("proxy-case", false, &[], &[]);
    let mut s = w.connect();
    s.write_all(b"GET /case HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Mixed-Case: One\r\nx-lower-only: two\r\nCONTENT-TYPE: text/plain\r\n\r\n")
        .unwrap();
    let (head, body) = response(&mut s, 2);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(body, b"ok");
    // At the client: the server's own spelling.
    assert!(head.contains("\r\nX-Reply-Case: Kept\r\n"), "{head:?}");
    assert!(head.contains("\r\ncontent-LENGTH: 2\r\n"), "{head:?}");
    // At the server: the client's own spelling.
    let heads = w.heads();
    let sent = heads
        .iter()
        .find(|h| h.starts_with("GET /case "))
        .unwrap_or_else(|| panic!("{heads:?}"));
    for h in [
        "\r\nX-Mixed-Case: One\r\n",
        "\r\nx-lower-only: two\r\n",
        "\r\nCONTENT-TYPE: text/plain\r\n",
    ] {
        assert!(sent.contains(h), "{h:?} not in {sent:?}");
    }
    drop(s);
    let (recs, _) = w.stop();
    assert!(
        recs.iter().any(|r| r["group"] == "http GET /case"),
        "{recs:?}"
    );
}

#[test]
fn a_websocket_upgrade_is_joined_and_its_bytes_pass_both_ways() {
    if !python() {
        return;
    }
    let w = wrap("proxy-upgrade", false, &[], &[]);
    let mut s = w.connect();
    s.write_all(b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
        .unwrap();
    let (head, _) = response(&mut s, 0);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    // After the 101 the connection is the server's: frames go both ways, unread.
    for msg in [
        &b"\x81\x05hello"[..],
        &[0x82, 0x03, 0, 1, 2],
        b"a last frame",
    ] {
        s.write_all(msg).unwrap();
        let mut back = vec![0u8; msg.len()];
        s.read_exact(&mut back).unwrap();
        assert_eq!(back, msg);
    }
    drop(s);
    let (recs, _) = w.stop();
    let up = recs
        .iter()
        .find(|r| r["group"] == "http GET /ws")
        .unwrap_or_else(|| panic!("{recs:?}"));
    assert_eq!(up["status"], 101, "{up}");
}

#[test]
fn a_client_that_hangs_up_before_the_answer_is_journalled_cancelled() {
    if !python() {
        return;
    }
    let w = wrap("proxy-hangup", false, &[], &[]);
    let mut s = w.connect();
    s.write_all(b"GET /slow HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .unwrap();
    wait_until(
        "the upstream reading /slow",
        Duration::from_secs(10),
        || w.heads().iter().any(|h| h.starts_with("GET /slow ")),
    );
    // The client goes before the server's answer (2 s later).
    drop(s);
    wait_until("the hang-up journalled", Duration::from_secs(10), || {
        std::fs::read_to_string(&w.journal).is_ok_and(|j| j.contains("http GET /slow"))
    });
    let (recs, _) = w.stop();
    let slow: Vec<_> = recs
        .iter()
        .filter(|r| r["group"] == "http GET /slow")
        .collect();
    assert_eq!(slow.len(), 1, "{recs:?}");
    assert_eq!(slow[0]["outcome"]["kind"], "error", "{}", slow[0]);
    assert_eq!(slow[0]["outcome"]["error"], "cancelled", "{}", slow[0]);
}

/// A self-signed certificate for 127.0.0.1: (cert, key).
fn self_signed(dir: &Path) -> Option<(PathBuf, PathBuf)> {
    if !have("openssl", "command -v openssl") {
        return None;
    }
    let (cert, key) = (dir.join("self.pem"), dir.join("self.key"));
    let ok = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
        .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"])
        .args(["-subj", "/CN=witness proxy test", "-addext"])
        .args(["subjectAltName=IP:127.0.0.1", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "openssl could not make a certificate");
    Some((cert, key))
}

#[test]
fn an_https_upstream_is_refused_while_untrusted_and_passed_with_insecure() {
    if !python() {
        return;
    }
    let certs = tempdir("proxy-tls-certs");
    let Some((cert, key)) = self_signed(&certs) else {
        return;
    };
    let tls = [cert.to_str().unwrap(), key.to_str().unwrap()];
    // Trusted by nobody: the proxy refuses the server, says why, and answers 502 itself.
    let w = wrap("proxy-tls-refused", true, &[], &tls);
    let (head, body) = get(&w, "/");
    assert!(head.starts_with("HTTP/1.1 502"), "{head}\n{body}");
    assert!(
        head.contains("witness-proxy: answered-by-witness"),
        "{head}"
    );
    assert!(body.to_lowercase().contains("certificate"), "{body}");
    assert!(
        w.heads().is_empty(),
        "no request reached the untrusted server"
    );
    let (recs, _) = w.stop();
    assert!(!recs.is_empty());
    assert!(
        recs.iter().all(|r| r["outcome"]["error"] == "tls"),
        "{recs:?}"
    );
    // With --insecure: the same server, answered through.
    let w = wrap("proxy-tls-insecure", true, &["--insecure"], &tls);
    let (head, body) = get(&w, "/");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}\n{body}");
    assert!(head.contains("X-Reply-Case: Kept"), "{head}");
    assert_eq!(body, "ok");
    let (recs, _) = w.stop();
    assert!(
        recs.iter().any(|r| r["outcome"]["kind"] == "ok"),
        "{recs:?}"
    );
}
