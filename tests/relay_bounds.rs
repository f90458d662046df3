//! The stdio relay's bounds against a server that floods its stdout: a client that does not read
//! holds witness back at bounded memory (never a queue that grows with the bytes), a client whose
//! pipes are non-blocking and tiny (so every write is short, or refused for now) still gets every
//! byte in order, and a client that closes its end mid-stream ends the session: no hang, no panic,
//! the server ended and its exit journalled.
//!
//! Needs python3 (`.ci/run` installs it). Missing, a test says SKIPPED, and fails on CI.

use crate::common;

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
use sha2::{Digest, Sha256};

fn flood() -> PathBuf {
    repo().join("tests/peers/stdout_flood.py")
}

const BLOCK: usize = 64 * 1024;

/// What `stdout_flood.py` writes from byte `at` on: block k is the alphabet from letter k % 26.
struct Pattern {
    base: Vec<u8>,
    at: usize,
}

impl Pattern {
    fn new() -> Self {
        Pattern {
            base: b"abcdefghijklmnopqrstuvwxyz"
                .iter()
                .copied()
                .cycle()
                .take(BLOCK + 26)
                .collect(),
            at: 0,
        }
    }

    /// Whether `got` is what comes next (compared a block's piece at a time: no hashing, which a
    /// debug build does at a few MB/s).
    fn next_is(&mut self, mut got: &[u8]) -> bool {
        let mut same = true;
        while !got.is_empty() {
            let (k, off) = (self.at / BLOCK, self.at % BLOCK);
            let n = got.len().min(BLOCK - off);
            let start = k % 26 + off;
            same &= got[..n] == self.base[start..start + n];
            got = &got[n..];
            self.at += n;
        }
        same
    }
}

fn hex(d: impl AsRef<[u8]>) -> String {
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// The largest resident size the process has had (its high-water mark), in KiB.
fn vm_hwm_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

fn wrap(journal: &Path, server: &[&str]) -> Command {
    let mut c = Command::new(witness());
    c.args(["wrap", "--stdin", "relay", "--journal"])
        .arg(journal)
        .args(["--", "python3"])
        .arg(flood())
        .args(server);
    c
}

/// Reads `n` bytes (or to the end) and checks each against the pattern: (bytes read, all in order).
fn read_checked(r: &mut impl Read, n: usize, chunk: usize, pause_every: usize) -> (usize, bool) {
    let mut p = Pattern::new();
    let mut buf = vec![0u8; chunk];
    let (mut got, mut reads, mut same) = (0, 0usize, true);
    while got < n {
        let want = chunk.min(n - got);
        let k = r.read(&mut buf[..want]).unwrap();
        if k == 0 {
            break;
        }
        same &= p.next_is(&buf[..k]);
        got += k;
        reads += 1;
        if pause_every > 0 && reads.is_multiple_of(pause_every) {
            // A slow reader: the pipe fills, and witness's writes are refused for now.
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    (got, same)
}

/// How long a test may wait on witness before it is killed (with its server) and the test fails:
/// several times what a relay that loses no byte takes on a busy machine.
const DEADLINE: Duration = Duration::from_secs(90);

fn finish(child: Child) -> std::process::Output {
    wait_bounded(child, Duration::from_secs(30))
}

#[test]
fn a_client_that_does_not_read_a_flood_holds_witness_back_at_bounded_memory() {
    if !have("python3", "python3 -c 'import hashlib'") {
        return;
    }
    let dir = tempdir("relay-flood");
    let journal = dir.join("j.jsonl");
    const TOTAL: usize = 256 << 20;
    let mut child = wrap(
        &journal,
        &[
            "total",
            &TOTAL.to_string(),
            dir.join("r.txt").to_str().unwrap(),
        ],
    )
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let pid = child.id();
    // Bytes lost on the way would leave the read below waiting forever for the rest.
    let _deadline = kill_after(pid as i32, DEADLINE);
    let stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    // The client reads nothing for a while: the server writes as fast as it is let.
    std::thread::sleep(Duration::from_secs(3));
    let stalled = vm_hwm_kib(pid);
    let (got, in_order) = read_checked(&mut stdout, TOTAL, 1 << 20, 0);
    assert_eq!(
        got, TOTAL,
        "witness passed on {got} of {TOTAL} bytes, then nothing more (bytes lost on the way: the \
         read waited for the rest until the deadline)"
    );
    let after = vm_hwm_kib(pid);
    drop(stdin);
    let mut rest = Vec::new();
    stdout.read_to_end(&mut rest).unwrap();
    let out = finish(child);
    eprintln!("witness's peak RSS: {stalled} KiB after the stall, {after} KiB after {got} bytes");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!((got, rest.len()), (TOTAL, 0));
    assert!(in_order, "the bytes came out changed or out of order");
    // witness runs in about 15-20 MiB; a queue of what the client has not read would be 256 MiB.
    assert!(
        after < 100 * 1024,
        "witness's peak RSS grew to {after} KiB relaying {TOTAL} bytes"
    );
}

/// A pipe whose writes are refused while it is full (O_NONBLOCK) and that holds one page: every
/// write of witness's is short or refused for now. Returns (read end, write end).
fn tiny_pipe(nonblocking_end: usize) -> (OwnedFd, OwnedFd) {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 fills two descriptors, owned from here on.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    unsafe {
        libc::fcntl(r.as_raw_fd(), libc::F_SETPIPE_SZ, 4096);
        let fd = [r.as_raw_fd(), w.as_raw_fd()][nonblocking_end];
        let flags = libc::fcntl(fd, libc::F_GETFL);
        assert!(libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) >= 0);
    }
    (r, w)
}

#[test]
fn a_client_with_tiny_non_blocking_pipes_gets_every_byte_in_order_both_ways() {
    if !have("python3", "python3 -c 'import hashlib'") {
        return;
    }
    let dir = tempdir("relay-short-writes");
    let journal = dir.join("j.jsonl");
    let report = dir.join("r.txt");
    const TOTAL: usize = 8 << 20;
    const SENT: usize = 2 << 20;
    // witness's stdout: non-blocking, one page; its stdin: non-blocking too.
    let (out_r, out_w) = tiny_pipe(1);
    let (in_r, in_w) = tiny_pipe(0);
    let child = wrap(
        &journal,
        &["total", &TOTAL.to_string(), report.to_str().unwrap()],
    )
    .stdin(Stdio::from(in_r))
    .stdout(Stdio::from(out_w))
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let _deadline = kill_after(child.id() as i32, DEADLINE);
    // The parent's copies go, so EOF is EOF. A writer thread sends the client's bytes (blocking).
    let mut to_witness = std::fs::File::from(in_w);
    let writer = std::thread::spawn(move || {
        let data: Vec<u8> = (0..SENT).map(|i| (i % 251) as u8).collect();
        for (i, piece) in data.chunks(3000).enumerate() {
            if let Err(e) = to_witness.write_all(piece) {
                return Err(format!(
                    "witness stopped reading its stdin after {} bytes: {e}",
                    i * 3000
                ));
            }
        }
        Ok(hex(Sha256::digest(&data)))
    });
    let mut from_witness = std::fs::File::from(out_r);
    let (got, in_order) = read_checked(&mut from_witness, TOTAL, 4096, 8);
    let sent_sha = writer.join().unwrap();
    let sent_sha = sent_sha.unwrap_or_else(|e| panic!("{e}"));
    let mut rest = Vec::new();
    from_witness.read_to_end(&mut rest).unwrap();
    let out = finish(child);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!((got, rest.len()), (TOTAL, 0), "{err}");
    assert!(
        in_order,
        "the server's bytes came out changed or out of order"
    );
    let read = std::fs::read_to_string(&report).unwrap();
    assert_eq!(
        read.trim(),
        format!("read {SENT} {sent_sha}"),
        "the server did not read what the client wrote"
    );
    let text = std::fs::read_to_string(&journal).unwrap();
    assert!(
        !text.contains("closed witness's stdout"),
        "a full pipe is not a client gone: {text}"
    );
}

#[test]
fn a_client_that_closes_its_end_mid_stream_ends_the_session_without_a_hang() {
    if !have("python3", "python3 -c 'import hashlib'") {
        return;
    }
    let dir = tempdir("relay-client-cuts");
    let journal = dir.join("j.jsonl");
    let mut child = wrap(&journal, &["forever"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _deadline = kill_after(child.id() as i32, DEADLINE);
    let stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let (got, _) = read_checked(&mut stdout, 4 << 20, 1 << 16, 0);
    assert_eq!(got, 4 << 20);
    // The client goes mid-stream: its reading end first, then its writing end.
    drop(stdout);
    std::thread::sleep(Duration::from_millis(200));
    drop(stdin);
    let out = finish(child);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(3), "the server's own status: {err}");
    let lines = journal_lines(&journal);
    let exits: Vec<_> = lines.iter().filter(|l| l["kind"] == "exit").collect();
    assert_eq!(exits.len(), 1, "{lines:?}");
    assert_eq!(exits[0]["code"], 3, "{:?}", exits[0]);
    assert!(!alive(exits[0]["pid"].as_i64().unwrap() as i32));
    let text = std::fs::read_to_string(&journal).unwrap();
    assert!(
        text.contains("the client closed witness's stdout"),
        "the cut is said: {text}"
    );
}
