//! The raw HTTP/1.1 path (`src/load/h1.rs`) against hyper's: one real TCP server per case answers
//! with canned bytes (whole, or a byte at a time), and both clients must come to the same outcome,
//! status, body count and connection reuse. Each malformed answer is an error of the same kind.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::{HeaderMap, Method};
use witness::journal::{ErrorKind, Outcome};
use witness::load::client::{Limits, Prepared, RequestSpec};
use witness::load::h1::Http1;
use witness::load::outcome::Rejection;

/// How the server writes each answer.
#[derive(Clone, Copy, PartialEq)]
enum Pace {
    Whole,
    /// One byte per write, with TCP_NODELAY and a pause: every split the client's reads can see.
    ByteByByte,
    /// Whole, then [`STRAY`] 50 ms later: bytes no request asked for, on a kept connection.
    ThenStray,
}

/// An answer nobody asked for.
const STRAY: &[u8] = b"HTTP/1.1 500 Stray\r\nContent-Length: 0\r\n\r\n";

/// What the server does after answering.
#[derive(Clone, Copy, PartialEq)]
enum After {
    /// Keeps the connection for the next request.
    Keep,
    /// Closes it (FIN).
    Close,
    /// Resets it (SO_LINGER 0) without answering at all.
    Reset,
}

/// The request heads a server read, in the order read.
type Heads = Arc<Mutex<Vec<String>>>;

/// A server answering every request on a connection with `answer`; `After` decides the connection.
/// Every request head it reads is kept, to check what each client sent.
fn server(answer: &'static [u8], pace: Pace, after: After) -> (u16, Heads) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let heads: Heads = Arc::default();
    let seen = heads.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            let seen = seen.clone();
            std::thread::spawn(move || {
                s.set_nodelay(true).unwrap();
                loop {
                    // The request's head (no bodies are sent in these tests).
                    let mut head = Vec::new();
                    let mut b = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        match s.read(&mut b) {
                            Ok(1) => head.push(b[0]),
                            _ => return,
                        }
                    }
                    seen.lock()
                        .unwrap()
                        .push(String::from_utf8_lossy(&head).into_owned());
                    if after == After::Reset {
                        use std::os::fd::AsRawFd;
                        let linger = libc::linger {
                            l_onoff: 1,
                            l_linger: 0,
                        };
                        // SAFETY: a valid socket and a linger struct of the size given.
                        unsafe {
                            libc::setsockopt(
                                s.as_raw_fd(),
                                libc::SOL_SOCKET,
                                libc::SO_LINGER,
                                (&linger as *const libc::linger).cast(),
                                std::mem::size_of::<libc::linger>() as libc::socklen_t,
                            );
                        }
                        return;
                    }
                    match pace {
                        Pace::Whole => {
                            let _ = s.write_all(answer);
                        }
                        Pace::ByteByByte => {
                            for b in answer {
                                let _ = s.write_all(&[*b]);
                                std::thread::sleep(Duration::from_micros(300));
                            }
                        }
                        Pace::ThenStray => {
                            let _ = s.write_all(answer);
                            std::thread::sleep(Duration::from_millis(50));
                            let _ = s.write_all(STRAY);
                        }
                    }
                    if after == After::Close {
                        return;
                    }
                }
            });
        }
    });
    (port, heads)
}

fn limits() -> Limits {
    Limits {
        connect: Duration::from_secs(5),
        whole: Duration::from_secs(5),
        max_body: 8,
    }
}

/// What a user sees of one request: its outcome (an error's kind, not its words), status, body
/// count, whether the body was cut, and whether it opened a new connection.
#[derive(Debug, PartialEq)]
struct Seen {
    outcome: Outcome,
    status: Option<u16>,
    body_bytes: Option<u64>,
    body_cut: bool,
    new_connection: bool,
}

/// The request both clients send: a path with a query string, which must reach the server whole.
fn spec(port: u16, method: Method) -> RequestSpec {
    RequestSpec {
        method,
        uri: format!("http://127.0.0.1:{port}/x?y=1&z=%41")
            .parse()
            .unwrap(),
        headers: HeaderMap::new(),
        body: Bytes::new(),
    }
}

async fn three(req: &Prepared, mut conn: Http1) -> Vec<Seen> {
    let mut out = Vec::new();
    for _ in 0..3 {
        let s = conn
            .send(req, limits(), &Rejection::default(), Instant::now())
            .await;
        out.push(Seen {
            outcome: s.outcome,
            status: s.status,
            body_bytes: s.body_bytes,
            body_cut: s.body_cut,
            new_connection: s.connect_s.is_some(),
        });
    }
    out
}

/// Both clients against the same server, with the same request: the raw path's three requests and
/// hyper's. Each request the server read named the path and query asked for, whichever client sent it.
async fn both(answer: &'static [u8], pace: Pace, after: After, method: Method) -> [Vec<Seen>; 2] {
    let (port, heads) = server(answer, pace, after);
    let req = Prepared::new(&spec(port, method.clone()));
    let raw = Http1::raw(&req, limits()).expect("plain http takes the raw path");
    let raw = three(&req, raw).await;
    let hyper = three(&req, Http1::hyper(limits())).await;
    // The version is left out: hyper asks an HTTP/1.0 server in HTTP/1.0 after its first answer.
    let line = format!("{method} /x?y=1&z=%41 HTTP/1.");
    let heads = heads.lock().unwrap();
    assert!(!heads.is_empty(), "the server read no request");
    for head in heads.iter() {
        assert!(
            head.starts_with(&line),
            "the server read {head:?}, not {line:?}"
        );
        assert!(
            head.to_ascii_lowercase()
                .contains(&format!("\r\nhost: 127.0.0.1:{port}\r\n")),
            "{head:?}"
        );
    }
    [raw, hyper]
}

fn error(kind: ErrorKind) -> Outcome {
    Outcome::Error {
        error: kind,
        status: None,
    }
}

const CASES: &[(&str, &[u8], After, Method)] = &[
    (
        "content-length",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
        After::Keep,
        Method::GET,
    ),
    (
        "chunked with extensions and trailers, longer than the kept bound",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;name=value\r\nhello\r\n7\r\n, world\r\n0\r\nx-trailer: 1\r\n\r\n",
        After::Keep,
        Method::GET,
    ),
    (
        "gzip then chunked",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n",
        After::Keep,
        Method::GET,
    ),
    (
        "close-delimited",
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end",
        After::Close,
        Method::GET,
    ),
    (
        "HEAD with a content-length",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n",
        After::Keep,
        Method::HEAD,
    ),
    (
        "1xx before the answer",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        After::Keep,
        Method::GET,
    ),
    (
        "204 with a stray content-length",
        b"HTTP/1.1 204 No Content\r\nContent-Length: 10\r\n\r\n",
        After::Keep,
        Method::GET,
    ),
    (
        "304",
        b"HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n",
        After::Keep,
        Method::GET,
    ),
    (
        "Connection: close",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
        After::Close,
        Method::GET,
    ),
    (
        "HTTP/1.0 without keep-alive",
        b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
        After::Close,
        Method::GET,
    ),
    (
        "HTTP/1.0 with keep-alive",
        b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok",
        After::Keep,
        Method::GET,
    ),
    (
        "404 with a body",
        b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found",
        After::Keep,
        Method::GET,
    ),
    (
        "503",
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy",
        After::Keep,
        Method::GET,
    ),
    (
        "same content-length twice",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok",
        After::Keep,
        Method::GET,
    ),
];

/// Malformed answers: each an error, of the kind hyper gives.
const MALFORMED: &[(&str, &[u8], ErrorKind)] = &[
    (
        "a content-length that is not a number",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5x\r\n\r\nhello",
        ErrorKind::Protocol,
    ),
    (
        "two content-lengths that disagree",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok!",
        ErrorKind::Protocol,
    ),
    (
        "not HTTP",
        b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
        ErrorKind::Protocol,
    ),
    (
        "a status out of range",
        b"HTTP/1.1 099 Odd\r\nContent-Length: 0\r\n\r\n",
        ErrorKind::Protocol,
    ),
    (
        "HTTP/1.0 with Transfer-Encoding",
        b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        ErrorKind::Protocol,
    ),
    (
        "a space before a header's colon",
        b"HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\nok",
        ErrorKind::Protocol,
    ),
    (
        "closed halfway through the head",
        b"HTTP/1.1 200 OK\r\nContent-Le",
        ErrorKind::ClosedBeforeResponse,
    ),
    (
        "closed with nothing said",
        b"",
        ErrorKind::ClosedBeforeResponse,
    ),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_raw_path_reads_every_well_formed_answer_as_hyper_does_whole_and_byte_by_byte() {
    for (name, answer, after, method) in CASES {
        for pace in [Pace::Whole, Pace::ByteByByte] {
            let [raw, hyper] = both(answer, pace, *after, method.clone()).await;
            let label = format!(
                "{name} ({})",
                if pace == Pace::Whole {
                    "whole"
                } else {
                    "byte by byte"
                }
            );
            assert_eq!(raw, hyper, "{label}");
            // A well-formed answer is never an error of the client's making.
            assert!(
                raw.iter().all(|s| !matches!(
                    s.outcome,
                    Outcome::Error {
                        error: ErrorKind::Protocol
                            | ErrorKind::Other
                            | ErrorKind::ClosedBeforeResponse,
                        ..
                    }
                )),
                "{label}: {raw:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_figures_a_user_reads_are_the_ones_the_server_sent() {
    // Spot checks that the agreement above is about the right answers, not a shared mistake.
    let [raw, _] = both(CASES[1].1, Pace::Whole, After::Keep, Method::GET).await;
    assert_eq!(raw[0].outcome, Outcome::Ok);
    assert_eq!((raw[0].body_bytes, raw[0].body_cut), (Some(12), true));
    assert_eq!(
        raw.iter().map(|s| s.new_connection).collect::<Vec<_>>(),
        [true, false, false],
        "a chunked answer keeps the connection"
    );
    let [raw, _] = both(CASES[3].1, Pace::Whole, After::Close, Method::GET).await;
    assert_eq!(raw[0].body_bytes, Some(13));
    assert!(
        raw.iter().all(|s| s.new_connection),
        "read to the close: a new connection each"
    );
    let [raw, _] = both(CASES[4].1, Pace::Whole, After::Keep, Method::HEAD).await;
    assert_eq!((raw[0].body_bytes, raw[2].new_connection), (Some(0), false));
    let [raw, _] = both(CASES[8].1, Pace::Whole, After::Close, Method::GET).await;
    assert!(
        raw.iter()
            .all(|s| s.outcome == Outcome::Ok && s.new_connection),
        "Connection: close is a new connection, never a failure: {raw:?}"
    );
    let [raw, _] = both(CASES[11].1, Pace::Whole, After::Keep, Method::GET).await;
    assert_eq!(
        raw[0].outcome,
        Outcome::Error {
            error: ErrorKind::Http4xx,
            status: Some(404)
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_malformed_answer_is_an_error_of_the_kind_hyper_gives() {
    for (name, answer, kind) in MALFORMED {
        for pace in [Pace::Whole, Pace::ByteByByte] {
            let [raw, hyper] = both(answer, pace, After::Close, Method::GET).await;
            assert_eq!(raw[0].outcome, error(*kind), "{name}: raw {raw:?}");
            assert_eq!(
                raw.iter().map(|s| &s.outcome).collect::<Vec<_>>(),
                hyper.iter().map(|s| &s.outcome).collect::<Vec<_>>(),
                "{name}"
            );
        }
    }
    // A reset instead of an answer.
    let [raw, hyper] = both(b"", Pace::Whole, After::Reset, Method::GET).await;
    assert_eq!(raw[0].outcome, error(ErrorKind::Reset), "{raw:?}");
    assert_eq!(raw, hyper);
}

/// A body cut short, a bad chunk: the status came, then the body failed, and the record keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_fails_after_the_status_keeps_the_status() {
    for (name, answer) in [
        (
            "closed before the content-length was read",
            &b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nhello"[..],
        ),
        (
            "a chunk size that is not hex",
            &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"[..],
        ),
        (
            "closed in the middle of a chunk",
            &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n9\r\nhel"[..],
        ),
    ] {
        let answer: &'static [u8] = Box::leak(answer.to_vec().into_boxed_slice());
        let [raw, hyper] = both(answer, Pace::Whole, After::Close, Method::GET).await;
        assert_eq!(raw[0].status, Some(200), "{name}: {raw:?}");
        assert!(
            matches!(raw[0].outcome, Outcome::Error { .. }),
            "{name}: {raw:?}"
        );
        assert_eq!(raw, hyper, "{name}");
    }
}

/// Bytes a server sends after a whole answer (in the same write, or a moment later, while the
/// connection sits idle) answer nothing: the raw path never reads them as the next request's
/// answer, and sends that request on a new connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_left_after_an_answer_are_never_the_next_answer() {
    const WITH_STRAY: &[u8] =
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 500 Stray\r\nContent-Length: 0\r\n\r\n";
    for (name, answer, pace) in [
        ("in the answer's own write", WITH_STRAY, Pace::Whole),
        (
            "50 ms after the answer",
            &b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"[..],
            Pace::ThenStray,
        ),
    ] {
        let answer: &'static [u8] = Box::leak(answer.to_vec().into_boxed_slice());
        let (port, heads) = server(answer, pace, After::Keep);
        let req = Prepared::new(&spec(port, Method::GET));
        let mut conn = Http1::raw(&req, limits()).expect("plain http takes the raw path");
        let mut seen = Vec::new();
        for _ in 0..3 {
            let s = conn
                .send(&req, limits(), &Rejection::default(), Instant::now())
                .await;
            seen.push((s.outcome, s.status, s.connect_s.is_some()));
            // Time for the late bytes to arrive while the connection sits idle.
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert_eq!(
            seen,
            vec![(Outcome::Ok, Some(200), true); 3],
            "{name}: each answer is the server's 200, each on a new connection"
        );
        assert_eq!(heads.lock().unwrap().len(), 3, "{name}");
    }
}
