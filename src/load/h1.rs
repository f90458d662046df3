//! The plain-HTTP/1.1 hot path of the ladder's and the rate levels' workers: a worker's own
//! keep-alive connection, the level's request written as bytes made once, each response's head
//! parsed with httparse (the parser hyper itself uses) and its body framed as RFC 9112 §6.3 says
//! (and as hyper's client does: HEAD, 1xx, 204 and 304 bodiless; Transfer-Encoding's last coding
//! chunked, else read to the close; one agreed Content-Length; else read to the close). No task
//! per connection, no header map per response, no request object per send: that is what a request
//! costs wrk, and what it cost witness on top (issue 22's profile: hyper's client was half of it).
//!
//! Everything else stays on hyper: https, HTTP/2, CONNECT and upgrades, a request whose framing the
//! user set (`Transfer-Encoding`), probes, MCP and the proxy. `tests/h1_diff.rs` holds this path
//! to hyper's answers over a corpus of responses, split at every byte, well-formed and malformed.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

use bytes::Bytes;
use hyper::{Method, Uri};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use super::client::{Counted, Counting, Io, Limits, Phases, Prepared, Sent};
use super::outcome::Rejection;
use crate::journal::ErrorKind;

/// hyper's limits: at most 100 header lines, a head of at most ~400 KiB.
const MAX_HEADERS: usize = 100;
const MAX_HEAD: usize = 8192 + 4096 * 100;
/// A chunk-size line (with its extensions) or a trailer section longer than this is refused.
const MAX_CHUNK_LINE: usize = 16 * 1024;
const MAX_TRAILERS: usize = 64 * 1024;
/// Reads go into this much room at a time.
const READ_ROOM: usize = 16 * 1024;

/// A level's request as the bytes witness writes for it, made once.
#[derive(Clone, Debug)]
pub struct Wire {
    pub(super) bytes: Bytes,
    /// A HEAD's answer has no body, whatever its head says.
    head: bool,
}

impl Wire {
    /// The request's bytes, as hyper writes them (its header order, `content-length` for a body);
    /// None where this path does not apply and hyper sends it: https, CONNECT, a request asking
    /// for an upgrade, or one whose framing the user set.
    pub fn new(p: &Prepared) -> Option<Self> {
        if p.target.scheme_str() != Some("http") || p.method == Method::CONNECT {
            return None;
        }
        let h = &p.headers;
        if h.contains_key(hyper::header::TRANSFER_ENCODING)
            || h.contains_key(hyper::header::UPGRADE)
            || h.contains_key(hyper::header::EXPECT)
        {
            return None;
        }
        let mut b = Vec::with_capacity(128 + p.body.len());
        b.extend_from_slice(p.method.as_str().as_bytes());
        b.push(b' ');
        b.extend_from_slice(p.line.to_string().as_bytes());
        b.extend_from_slice(b" HTTP/1.1\r\n");
        for (name, value) in h {
            b.extend_from_slice(name.as_str().as_bytes());
            b.extend_from_slice(b": ");
            b.extend_from_slice(value.as_bytes());
            b.extend_from_slice(b"\r\n");
        }
        if !p.body.is_empty() && !h.contains_key(hyper::header::CONTENT_LENGTH) {
            b.extend_from_slice(format!("content-length: {}\r\n", p.body.len()).as_bytes());
        }
        b.extend_from_slice(b"\r\n");
        b.extend_from_slice(&p.body);
        Some(Self {
            bytes: b.into(),
            head: p.method == Method::HEAD,
        })
    }
}

/// A load worker's HTTP/1.1 connection: the raw path where the level's request allows it, hyper's
/// own connection elsewhere (https, CONNECT, upgrades, a framing the user set), or everywhere when
/// `WITNESS_HTTP1=hyper` is set (to compare the two, as `scripts/bench.sh` does).
pub enum Http1 {
    Raw(Conn, Wire),
    Hyper(super::client::Conn),
}

impl Http1 {
    pub fn new(req: &Prepared, limits: Limits) -> Self {
        match Wire::new(req) {
            Some(wire) if !hyper_asked() => Http1::Raw(Conn::new(limits), wire),
            _ => Http1::Hyper(super::client::Conn::new(limits)),
        }
    }

    /// The raw path, where the request allows it (tests compare it with [`Http1::hyper`]).
    pub fn raw(req: &Prepared, limits: Limits) -> Option<Self> {
        Wire::new(req).map(|wire| Http1::Raw(Conn::new(limits), wire))
    }

    /// hyper's own connection.
    pub fn hyper(limits: Limits) -> Self {
        Http1::Hyper(super::client::Conn::new(limits))
    }

    pub async fn send(
        &mut self,
        req: &Prepared,
        limits: Limits,
        rej: &Rejection,
        start: Instant,
    ) -> Sent {
        match self {
            Http1::Raw(conn, wire) => send(conn, req, wire, limits, rej, start).await,
            Http1::Hyper(conn) => super::client::send_on(conn, req, limits, rej, start).await,
        }
    }
}

fn hyper_asked() -> bool {
    static ASKED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ASKED.get_or_init(|| std::env::var("WITNESS_HTTP1").is_ok_and(|v| v == "hyper"))
}

/// A worker's own connection for the raw path: connected on first use and again after the server
/// closed it (said so, or was found closed before a send) or a request on it failed.
pub struct Conn {
    connector: Counting,
    /// The connect's own limit, for [`super::client::connect_direct`].
    limit: std::time::Duration,
    live: Option<Counted<Io>>,
    buf: Buf,
}

impl Conn {
    pub fn new(limits: Limits) -> Self {
        Self {
            connector: super::client::counted(limits.connect),
            limit: limits.connect,
            live: None,
            buf: Buf::default(),
        }
    }

    /// A connection ready to be written, and whether it carried a request before. A kept-alive
    /// one the server closed while it sat (its FIN or RST already here) is replaced, as hyper's
    /// connection task would have found it closed: the request was never written to it.
    async fn ready(&mut self, target: &Uri, phases: &Phases) -> Result<bool, Fail> {
        use tower_service::Service;
        if let Some(live) = self.live.as_mut() {
            // No system call unless the socket was seen readable since the last read.
            let mut probe = [0u8; 1];
            match live.tcp().try_read(&mut probe) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(true),
                // Closed (0), broken, or bytes nobody asked for: not usable.
                _ => self.live = None,
            }
        }
        self.buf.clear();
        // An address (no name to fall back across): connected directly, written in the same turn
        // when the kernel finished the handshake within the connect.
        let literal = target
            .host()
            .and_then(|h| h.trim_matches(['[', ']']).parse::<std::net::IpAddr>().ok());
        let io = match literal {
            Some(ip) => {
                let port = target.port_u16().unwrap_or(80);
                super::client::connect_direct(std::net::SocketAddr::new(ip, port), self.limit).await
            }
            None => self.connector.call(target.clone()).await,
        }
        .map_err(Fail::Connect)?;
        phases.opened(&io);
        self.live = Some(io);
        Ok(false)
    }
}

/// Sends one request on the worker's own connection and records its single outcome: the same
/// outcomes, limits, phases and body handling as [`super::client::send_on`], which hyper serves.
pub async fn send(
    conn: &mut Conn,
    req: &Prepared,
    wire: &Wire,
    limits: Limits,
    rej: &Rejection,
    start: Instant,
) -> Sent {
    let seen_status = AtomicU32::new(0);
    let seen_bytes = AtomicU64::new(0);
    let phases = Phases::default();
    let mut reusable = false;
    let work = async {
        conn.ready(&req.target, &phases).await?;
        let Conn { live, buf, .. } = conn;
        let Some(live) = live.as_mut() else {
            return Err(Fail::Incomplete);
        };
        let stream = live.tcp();
        stream.write_all(&wire.bytes).await.map_err(Fail::Write)?;
        let r = read_response(
            stream,
            buf,
            wire.head,
            limits.max_body,
            &seen_status,
            &seen_bytes,
            || phases.headers(start),
        )
        .await?;
        reusable = r.keep_alive;
        Ok((r.status, r.kept, r.total))
    };
    let res = tokio::time::timeout(limits.whole, work).await;
    let end = Instant::now();
    let res = match res {
        Ok(r) => Ok(r.map_err(Fail::into_failure)),
        Err(e) => Err(e),
    };
    if !reusable {
        // Closed by the server's word, or whatever is left on it (a late answer, a half-read
        // body) is nobody's: a new one next.
        conn.live = None;
    }
    let mut s = super::client::finish(start, end, res, &seen_status, &seen_bytes, limits, rej);
    (s.connect_s, s.headers_s) = (phases.connect_s(), phases.headers_s());
    s
}

/// Why the raw path's exchange failed, in the words and kinds hyper's would have said.
#[derive(Debug)]
pub enum Fail {
    Connect(Box<dyn std::error::Error + Send + Sync>),
    /// The request could not be written.
    Write(std::io::Error),
    /// Reading the head failed (no status yet).
    Read(std::io::Error),
    /// The connection closed before a whole head arrived.
    Incomplete,
    /// The head was not HTTP/1.x as hyper reads it.
    Parse(String),
    /// The body failed after the status.
    Body(u16, BodyFail),
}

#[derive(Debug)]
pub enum BodyFail {
    Io(std::io::Error),
    /// The connection closed before the body's announced end.
    Eof,
    Parse(String),
}

impl Fail {
    fn into_failure(self) -> super::client::Failure {
        match self {
            Fail::Connect(e) => super::client::Failure::Connect(e),
            f => {
                let (error, status, text) = f.words();
                super::client::Failure::Said {
                    error,
                    status,
                    text,
                }
            }
        }
    }

    /// (the error's kind, the status seen before it, the detail line). A connect failure reaches
    /// the report through [`super::client`]'s own words for it ([`Fail::into_failure`]).
    pub(super) fn words(&self) -> (ErrorKind, Option<u16>, String) {
        match self {
            Fail::Connect(e) => (ErrorKind::Connect, None, e.to_string()),
            Fail::Write(e) | Fail::Read(e) => (io_error_kind(e), None, io_words(e)),
            Fail::Incomplete => (
                ErrorKind::ClosedBeforeResponse,
                None,
                "connection closed before message completed".into(),
            ),
            Fail::Parse(why) => (
                ErrorKind::Protocol,
                None,
                format!("invalid HTTP response: {why}"),
            ),
            Fail::Body(status, b) => {
                let (kind, text) = match b {
                    BodyFail::Io(e) => (io_error_kind(e), io_words(e)),
                    BodyFail::Eof => (
                        ErrorKind::ClosedBeforeResponse,
                        "the connection closed before the body's end".into(),
                    ),
                    BodyFail::Parse(why) => (ErrorKind::Protocol, format!("invalid body: {why}")),
                };
                (
                    kind,
                    Some(*status),
                    format!("status {status}, then the body failed: {text}"),
                )
            }
        }
    }
}

fn io_error_kind(e: &std::io::Error) -> ErrorKind {
    use std::io::ErrorKind as Io;
    if super::client::is_local(e) {
        return ErrorKind::Local;
    }
    match e.kind() {
        Io::ConnectionReset | Io::BrokenPipe | Io::ConnectionAborted => ErrorKind::Reset,
        Io::UnexpectedEof => ErrorKind::ClosedBeforeResponse,
        _ => ErrorKind::Other,
    }
}

fn io_words(e: &std::io::Error) -> String {
    format!("connection error: {e}")
}

/// A connection's read buffer: bytes `[at, end)` are read and not yet used.
#[derive(Default)]
pub struct Buf {
    bytes: Vec<u8>,
    at: usize,
    end: usize,
}

impl Buf {
    fn clear(&mut self) {
        (self.at, self.end) = (0, 0);
    }

    fn ready(&self) -> &[u8] {
        &self.bytes[self.at..self.end]
    }

    fn consume(&mut self, n: usize) {
        self.at += n;
        if self.at == self.end {
            self.clear();
        }
    }

    /// Reads once more (at least one byte, or 0 at the end of the stream).
    async fn fill<R: AsyncRead + Unpin>(&mut self, r: &mut R) -> std::io::Result<usize> {
        if self.at > 0 && self.bytes.len() - self.end < READ_ROOM / 2 {
            // Move what is left to the front rather than grow.
            self.bytes.copy_within(self.at..self.end, 0);
            (self.at, self.end) = (0, self.end - self.at);
        }
        if self.bytes.len() - self.end < READ_ROOM / 2 {
            self.bytes.resize(self.end + READ_ROOM, 0);
        }
        let n = r.read(&mut self.bytes[self.end..]).await?;
        self.end += n;
        Ok(n)
    }
}

/// One response, as far as the hot path needs it.
#[derive(Debug, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// At most `max_body` bytes of the body.
    pub kept: Vec<u8>,
    /// The body's length, all of it.
    pub total: u64,
    /// The connection may carry the next request.
    pub keep_alive: bool,
}

enum Framing {
    None,
    Length(u64),
    Chunked,
    Close,
}

/// Reads one response from `r` (its head, skipping 1xx informational ones, then its body), keeping
/// at most `max_body` bytes of the body, counting all of it; `seen_*` follow the status and the
/// count as they arrive, and `headers` is called when the head is in.
pub async fn read_response<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Buf,
    head_request: bool,
    max_body: usize,
    seen_status: &AtomicU32,
    seen_bytes: &AtomicU64,
    headers: impl FnOnce(),
) -> Result<Response, Fail> {
    let (status, framing, keep_alive) = loop {
        let parsed = parse_head(buf.ready(), head_request)?;
        match parsed {
            Some((len, Head::Informational)) => buf.consume(len),
            Some((len, Head::Final(status, framing, keep_alive))) => {
                buf.consume(len);
                break (status, framing, keep_alive);
            }
            None => {
                if buf.end - buf.at >= MAX_HEAD {
                    return Err(Fail::Parse("message head is too large".into()));
                }
                match buf.fill(r).await {
                    Ok(0) => return Err(Fail::Incomplete),
                    Ok(_) => {}
                    Err(e) => return Err(Fail::Read(e)),
                }
            }
        }
    };
    headers();
    seen_status.store(status as u32, Ordering::Relaxed);
    let mut body = Body {
        kept: Vec::new(),
        total: 0,
        max: max_body,
        seen: seen_bytes,
    };
    let fail = |b| Fail::Body(status, b);
    let keep_alive = match framing {
        Framing::None => keep_alive,
        Framing::Length(n) => {
            let mut left = n;
            while left > 0 {
                if buf.ready().is_empty() {
                    match buf.fill(r).await {
                        Ok(0) => return Err(fail(BodyFail::Eof)),
                        Ok(_) => {}
                        Err(e) => return Err(fail(BodyFail::Io(e))),
                    }
                }
                let take = (buf.ready().len() as u64).min(left) as usize;
                body.take(&buf.ready()[..take]);
                buf.consume(take);
                left -= take as u64;
            }
            keep_alive
        }
        Framing::Close => {
            loop {
                if !buf.ready().is_empty() {
                    let n = buf.ready().len();
                    body.take(buf.ready());
                    buf.consume(n);
                }
                match buf.fill(r).await {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) => return Err(fail(BodyFail::Io(e))),
                }
            }
            false
        }
        Framing::Chunked => {
            read_chunked(r, buf, &mut body).await.map_err(fail)?;
            keep_alive
        }
    };
    // Bytes after the answer that nobody asked for: the connection is not trusted again.
    let keep_alive = keep_alive && buf.ready().is_empty();
    Ok(Response {
        status,
        kept: body.kept,
        total: body.total,
        keep_alive,
    })
}

struct Body<'a> {
    kept: Vec<u8>,
    total: u64,
    max: usize,
    seen: &'a AtomicU64,
}

impl Body<'_> {
    fn take(&mut self, data: &[u8]) {
        self.total += data.len() as u64;
        self.seen.store(self.total, Ordering::Relaxed);
        let room = self.max.saturating_sub(self.kept.len());
        self.kept.extend_from_slice(&data[..data.len().min(room)]);
    }
}

async fn more<R: AsyncRead + Unpin>(r: &mut R, buf: &mut Buf) -> Result<(), BodyFail> {
    match buf.fill(r).await {
        Ok(0) => Err(BodyFail::Eof),
        Ok(_) => Ok(()),
        Err(e) => Err(BodyFail::Io(e)),
    }
}

async fn read_chunked<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Buf,
    body: &mut Body<'_>,
) -> Result<(), BodyFail> {
    loop {
        // The chunk-size line, with any extensions.
        let size = loop {
            let ready = buf.ready();
            if !ready.is_empty() && !ready[0].is_ascii_hexdigit() {
                return Err(BodyFail::Parse("invalid chunk size line".into()));
            }
            match httparse::parse_chunk_size(ready) {
                Ok(httparse::Status::Complete((n, size))) => {
                    buf.consume(n);
                    break size;
                }
                Ok(httparse::Status::Partial) => {
                    if ready.len() > MAX_CHUNK_LINE {
                        return Err(BodyFail::Parse("chunk extensions over limit".into()));
                    }
                    more(r, buf).await?
                }
                Err(_) => return Err(BodyFail::Parse("invalid chunk size line".into())),
            }
        };
        if size == 0 {
            break;
        }
        let mut left = size;
        while left > 0 {
            if buf.ready().is_empty() {
                more(r, buf).await?;
            }
            let take = (buf.ready().len() as u64).min(left) as usize;
            body.take(&buf.ready()[..take]);
            buf.consume(take);
            left -= take as u64;
        }
        // The chunk's CRLF.
        while buf.ready().len() < 2 {
            more(r, buf).await?;
        }
        if &buf.ready()[..2] != b"\r\n" {
            return Err(BodyFail::Parse("invalid chunk body CRLF".into()));
        }
        buf.consume(2);
    }
    // Trailers: header lines up to an empty one.
    loop {
        let ready = buf.ready();
        if ready.starts_with(b"\r\n") {
            buf.consume(2);
            return Ok(());
        }
        if let Some(i) = ready.windows(4).position(|w| w == b"\r\n\r\n") {
            let mut h = [httparse::EMPTY_HEADER; MAX_HEADERS];
            match httparse::parse_headers(&ready[..i + 4], &mut h) {
                Ok(httparse::Status::Complete(_)) => {}
                _ => return Err(BodyFail::Parse("invalid trailer section".into())),
            }
            buf.consume(i + 4);
            return Ok(());
        }
        if ready.len() > MAX_TRAILERS {
            return Err(BodyFail::Parse("trailer section too large".into()));
        }
        more(r, buf).await?;
    }
}

enum Head {
    Informational,
    Final(u16, Framing, bool),
}

/// A whole head at the start of `bytes` (its length and what it says), or None for "read more".
fn parse_head(bytes: &[u8], head_request: bool) -> Result<Option<(usize, Head)>, Fail> {
    if bytes.is_empty() {
        return Ok(None);
    }
    let mut h = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut res = httparse::Response::new(&mut h);
    let len = match res.parse(bytes) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(Fail::Parse(e.to_string())),
    };
    let status = res.code.unwrap_or(0);
    if !(100..=999).contains(&status) {
        return Err(Fail::Parse("invalid HTTP status-code parsed".into()));
    }
    match status {
        101 => {
            return Err(Fail::Parse(
                "the server switched protocols (101) though no upgrade was asked for".into(),
            ))
        }
        100..=199 => return Ok(Some((len, Head::Informational))),
        _ => {}
    }
    let http11 = res.version == Some(1);
    let mut keep_alive = http11;
    let mut close = false;
    let mut chunked = None;
    let mut lengths: Option<Result<u64, ()>> = None;
    for hd in res.headers.iter() {
        let name = hd.name;
        if name.eq_ignore_ascii_case("connection") {
            if has_token(hd.value, "close") || close {
                close = true;
                keep_alive = false;
            } else if !keep_alive {
                keep_alive = has_token(hd.value, "keep-alive");
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            // The last coding of the last line decides.
            chunked = Some(
                std::str::from_utf8(hd.value)
                    .ok()
                    .and_then(|s| s.rsplit(',').next())
                    .is_some_and(|c| c.trim().eq_ignore_ascii_case("chunked")),
            );
        } else if name.eq_ignore_ascii_case("content-length") {
            let each = std::str::from_utf8(hd.value).map_err(|_| ()).and_then(|s| {
                let mut one: Option<u64> = None;
                for v in s.split(',') {
                    let v = v.trim();
                    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
                        return Err(());
                    }
                    let n: u64 = v.parse().map_err(|_| ())?;
                    if one.is_some_and(|o| o != n) {
                        return Err(());
                    }
                    one = Some(n);
                }
                one.ok_or(())
            });
            lengths = Some(match (lengths, each) {
                (None, e) => e,
                (Some(Ok(a)), Ok(b)) if a == b => Ok(a),
                _ => Err(()),
            });
        }
    }
    let framing = if head_request || status == 204 || status == 304 {
        Framing::None
    } else if let Some(chunked) = chunked {
        if !http11 {
            return Err(Fail::Parse(
                "HTTP/1.0 cannot have Transfer-Encoding header".into(),
            ));
        }
        if chunked {
            Framing::Chunked
        } else {
            Framing::Close
        }
    } else {
        match lengths {
            Some(Ok(0)) => Framing::None,
            Some(Ok(n)) => Framing::Length(n),
            Some(Err(())) => return Err(Fail::Parse("invalid content-length parsed".into())),
            None => Framing::Close,
        }
    };
    Ok(Some((len, Head::Final(status, framing, keep_alive))))
}

fn has_token(value: &[u8], token: &str) -> bool {
    std::str::from_utf8(value)
        .map(|s| s.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that gives its bytes in the pieces asked for.
    struct Pieces(std::collections::VecDeque<Vec<u8>>);

    impl AsyncRead for Pieces {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            out: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            if let Some(mut p) = self.0.pop_front() {
                let n = p.len().min(out.remaining());
                out.put_slice(&p[..n]);
                if n < p.len() {
                    self.0.push_front(p.split_off(n));
                }
            }
            std::task::Poll::Ready(Ok(()))
        }
    }

    async fn read(pieces: Vec<Vec<u8>>, head: bool, max: usize) -> Result<Response, String> {
        let mut r = Pieces(pieces.into());
        let mut buf = Buf::default();
        let (s, b) = (AtomicU32::new(0), AtomicU64::new(0));
        read_response(&mut r, &mut buf, head, max, &s, &b, || {})
            .await
            .map_err(|e| format!("{:?}", e.words().0))
    }

    fn corpus() -> Vec<(&'static str, &'static [u8], bool)> {
        vec![
            ("length", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", false),
            (
                "chunked",
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nx-t: 1\r\n\r\n",
                false,
            ),
            ("close", b"HTTP/1.1 200 OK\r\n\r\nto the end", false),
            ("head", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", true),
            ("1xx", b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n", false),
            ("bad length", b"HTTP/1.1 200 OK\r\nContent-Length: 5x\r\n\r\nhello", false),
            ("short", b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nhello", false),
            ("garbage", b"SSH-2.0-OpenSSH\r\n\r\n", false),
        ]
    }

    /// Every response of the corpus gives the same answer whole and split at every byte.
    #[tokio::test]
    async fn a_response_split_at_every_byte_reads_as_the_whole_one() {
        for (name, bytes, head) in corpus() {
            let whole = read(vec![bytes.to_vec()], head, 3).await;
            for at in 1..bytes.len() {
                let split = read(vec![bytes[..at].to_vec(), bytes[at..].to_vec()], head, 3).await;
                assert_eq!(split, whole, "{name} split at {at}");
            }
            let ones = read(bytes.iter().map(|b| vec![*b]).collect(), head, 3).await;
            assert_eq!(ones, whole, "{name} a byte at a time");
        }
    }

    #[tokio::test]
    async fn the_body_is_counted_whole_and_kept_to_the_bound() {
        let r = read(
            corpus()[1].1.chunks(7).map(|c| c.to_vec()).collect(),
            false,
            3,
        )
        .await
        .unwrap();
        assert_eq!((r.status, r.kept, r.total), (200, b"hel".to_vec(), 11));
        assert!(r.keep_alive);
        let r = read(vec![corpus()[2].1.to_vec()], false, 100)
            .await
            .unwrap();
        assert_eq!(
            (r.kept.as_slice(), r.keep_alive),
            (&b"to the end"[..], false)
        );
    }
}
