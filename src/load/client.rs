//! The hot path: sending one request with hyper's pooled client and turning whatever happens into
//! exactly one [`Outcome`] and one duration. The harness's own limits (connect, whole request) are
//! told apart from the server's failures, so a timeout is never reported as the server's latency.
//! witness's own failures (out of file descriptors or ports) are `local`, never the server's. Bodies
//! are read streaming: the whole body is counted, only a bounded prefix is kept, and a body that
//! stalls after the status keeps the status on the record.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{HeaderMap, Method, Uri};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;

use super::outcome::{classify_response, Rejection};
use crate::journal::{ErrorKind, Outcome, TimeoutPhase};

/// What to send, validated.
#[derive(Clone, Debug)]
pub struct RequestSpec {
    pub method: Method,
    pub uri: Uri,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// The limits of one request: the harness's own.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub connect: Duration,
    pub whole: Duration,
    /// At most this much of a response body is kept in memory (the rest is read and counted).
    pub max_body: usize,
}

/// The default of `--max-body`: a few MiB, plenty for a refusal marker or an error page.
pub const DEFAULT_MAX_BODY: usize = 4 * 1024 * 1024;

/// What one request came to.
#[derive(Clone, Debug)]
pub struct Sent {
    pub start: Instant,
    pub end: Instant,
    pub outcome: Outcome,
    pub status: Option<u16>,
    pub detail: Option<String>,
    /// Body bytes read (all of them, kept or not), once a status arrived.
    pub body_bytes: Option<u64>,
    /// The body was longer than `Limits::max_body`: counted, not kept.
    pub body_cut: bool,
    /// How long opening a new connection took (None: the request went on a kept-alive one).
    pub connect_s: Option<f64>,
    /// From `start` to the response's headers.
    pub headers_s: Option<f64>,
    /// How long the new connection's TLS handshake took (None: plain HTTP, or a kept-alive one).
    pub handshake_s: Option<f64>,
    /// witness's own wait before `start`: from when it meant to send the request to its first
    /// system call for it (None: not measured).
    pub lag_s: Option<f64>,
}

impl Sent {
    /// An exchange with no HTTP phases to tell apart (an MCP call over stdio or a session): its
    /// span and what it came to.
    pub fn whole(
        start: Instant,
        end: Instant,
        outcome: Outcome,
        status: Option<u16>,
        detail: Option<String>,
    ) -> Sent {
        Sent {
            start,
            end,
            outcome,
            status,
            detail,
            body_bytes: None,
            body_cut: false,
            connect_s: None,
            headers_s: None,
            handshake_s: None,
            lag_s: None,
        }
    }
}

pub type HttpClient = Client<Counting, Full<Bytes>>;

/// The TCP connector with witness's resolver: a host name goes to the addresses resolved once for
/// the run ([`super::resolve`]), never through a lookup inside a connect.
pub type Tcp = HttpConnector<super::resolve::Pinned>;

/// The connector the client uses; the connect floor times the very same one.
pub fn connector(connect_timeout: Duration) -> Tcp {
    let mut c = HttpConnector::new_with_resolver(super::resolve::Pinned);
    c.set_nodelay(true);
    // https:// too: the TLS handshake is [`Counting`]'s, after the TCP connect.
    c.enforce_http(false);
    c.set_connect_timeout(Some(connect_timeout));
    c
}

/// The connector the client uses, each connection it makes counted in [`held`] while it is open.
pub fn counted(connect_timeout: Duration) -> Counting {
    Counting {
        tcp: connector(connect_timeout),
        h2: false,
        count: true,
    }
}

/// [`counted`] without the count: for what is not a connection to the server under test's load
/// (the soak's gauges and checks), https:// included.
pub fn uncounted(connect_timeout: Duration) -> Counting {
    Counting {
        tcp: connector(connect_timeout),
        h2: false,
        count: false,
    }
}

/// [`counted`], offering HTTP/2 by ALPN on an https:// connection (`--http2`).
pub fn counted_h2(connect_timeout: Duration) -> Counting {
    Counting {
        tcp: connector(connect_timeout),
        h2: true,
        count: true,
    }
}

/// One pooled keep-alive client for all workers (one connection per concurrent worker).
pub fn client(limits: Limits, pool: usize) -> HttpClient {
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(pool.max(1))
        .pool_idle_timeout(Duration::from_secs(90))
        .build(counted(limits.connect))
}

/// The connections to the server witness itself holds open right now (the load's, the probes'),
/// and the most it held at once since [`held::mark`]: "never be the load", counted. One atomic add
/// per connection opened or closed, nothing per request.
pub mod held {
    use std::sync::atomic::{AtomicU32, Ordering};

    static OPEN: AtomicU32 = AtomicU32::new(0);
    static PEAK: AtomicU32 = AtomicU32::new(0);

    pub(super) fn opened() {
        let now = OPEN.fetch_add(1, Ordering::SeqCst) + 1;
        PEAK.fetch_max(now, Ordering::SeqCst);
    }

    pub(super) fn closed() {
        let _ = OPEN.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
    }

    /// How many are open now.
    pub fn now() -> u32 {
        OPEN.load(Ordering::SeqCst)
    }

    /// Starts a new span (a level): its peak begins at what is open now.
    pub fn mark() {
        PEAK.store(now(), Ordering::SeqCst);
    }

    /// The most held at once since the last [`mark`].
    pub fn peak() -> u32 {
        PEAK.load(Ordering::SeqCst)
    }
}

/// [`connector`], counting every connection it makes while it stays open; for an https:// URL it
/// also makes the TLS handshake, timed apart from the TCP connect.
#[derive(Clone)]
pub struct Counting {
    tcp: Tcp,
    /// Offer HTTP/2 first by ALPN.
    h2: bool,
    /// Counted in [`held`].
    count: bool,
}

pub type Io = super::tls::Io;
type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower_service::Service<Uri> for Counting {
    type Response = Counted<Io>;
    type Error = BoxError;
    type Future =
        std::pin::Pin<Box<dyn std::future::Future<Output = Result<Counted<Io>, BoxError>> + Send>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), BoxError>> {
        tower_service::Service::poll_ready(&mut self.tcp, cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let https = uri.scheme_str() == Some("https");
        let host = uri.host().unwrap_or("").to_string();
        let h2 = self.h2;
        let count = self.count;
        let first = first_address(&host);
        let opening = Instant::now();
        let connecting = tower_service::Service::call(&mut self.tcp, uri);
        Box::pin(async move {
            let io = match connecting.await {
                Ok(io) => io,
                Err(e) => {
                    // No pinned address answered: the name may have moved (looked up again, apart).
                    if super::resolve::is_name(&host) && !is_local(&e) {
                        super::resolve::unanswered(&host);
                    }
                    return Err(e.into());
                }
            };
            // The kernel's own handshake time, without witness's wait to notice it.
            let connect = kernel_connect(io.inner(), opening.elapsed(), first);
            if count {
                held::opened();
            }
            if !https {
                return Ok(Counted {
                    io: Io::Plain(io),
                    connect,
                    handshake: None,
                    count,
                });
            }
            let shaking = Instant::now();
            match super::tls::handshake(io.into_inner(), &host, h2).await {
                Ok(s) => Ok(Counted {
                    io: Io::Tls(Box::new(hyper_util::rt::TokioIo::new(s))),
                    connect,
                    handshake: Some(shaking.elapsed()),
                    count,
                }),
                Err(e) => {
                    if count {
                        held::closed();
                    }
                    Err(e.into())
                }
            }
        })
    }
}

/// How long a connect took as the kernel saw it: its round trip from the SYN to the SYN-ACK
/// (TCP_INFO's `tcpi_rtt`, the handshake's one sample), when no SYN was sent again. `took` — from
/// the connect's system call to witness's task running again — also holds however long witness
/// was busy with other connections before it looked (a thousand connects at once on two cores:
/// a hundred milliseconds), which is witness's, not the server's. A SYN sent again (its timer, 1 s
/// and more) keeps `took`: the kernel's sample is then the last SYN's alone. So does a connection
/// to another address than `first`, the one tried first (an address that did not answer came
/// before it, and that wait is the connect's).
pub fn kernel_connect(
    stream: &tokio::net::TcpStream,
    took: Duration,
    first: Option<std::net::IpAddr>,
) -> Duration {
    if first.is_none() || stream.peer_addr().ok().map(|a| a.ip()) != first {
        return took;
    }
    match handshake_info(stream) {
        Some((rtt_us, 0)) if rtt_us > 0 => took.min(Duration::from_micros(rtt_us as u64)),
        _ => took,
    }
}

/// Linux's TCP_ESTABLISHED (include/net/tcp_states.h).
const TCP_ESTABLISHED: u8 = 1;

/// A plain TCP connect to one address, made without waiting for the runtime when the kernel has
/// already finished the handshake by the time `connect(2)` returns (on loopback it has, unless the
/// listener dropped the SYN): the request is written in the same turn, so witness's own wait to
/// notice a finished connect — behind every other connection its thread is opening — is in no
/// phase. Otherwise it waits for the socket to be writable, as any connector does. Counted in
/// [`held`] while open; `limit`: the connect's own timeout.
pub async fn connect_direct(
    addr: std::net::SocketAddr,
    limit: Duration,
) -> Result<Counted<Io>, BoxError> {
    use std::os::fd::{FromRawFd, OwnedFd};
    let opening = Instant::now();
    let family = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: plain system calls on a descriptor this function owns from here on.
    let fd = unsafe {
        libc::socket(
            family,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let one: libc::c_int = 1;
    unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
    let (storage, len) = sockaddr(addr);
    let rc = unsafe { libc::connect(fd, (&storage as *const libc::sockaddr_storage).cast(), len) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINPROGRESS) {
            return Err(e.into());
        }
    }
    let std = std::net::TcpStream::from(owned);
    let established = tcp_state(&std) == Some(TCP_ESTABLISHED);
    let stream = tokio::net::TcpStream::from_std(std)?;
    let connect = if established {
        // Done within the system call: the kernel's round trip of the SYN is the connect.
        kernel_connect(&stream, opening.elapsed(), Some(addr.ip()))
    } else {
        match tokio::time::timeout(limit, stream.writable()).await {
            Err(_) => {
                return Err(
                    std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timeout").into(),
                )
            }
            Ok(r) => r?,
        }
        if let Some(e) = stream.take_error()? {
            return Err(e.into());
        }
        stream.peer_addr()?;
        kernel_connect(&stream, opening.elapsed(), Some(addr.ip()))
    };
    held::opened();
    Ok(Counted {
        io: Io::Plain(hyper_util::rt::TokioIo::new(stream)),
        connect,
        handshake: None,
        count: true,
    })
}

/// `addr` as the C socket address connect(2) takes.
fn sockaddr(addr: std::net::SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: an all-zero sockaddr_storage is valid, and big enough for either family.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        std::net::SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        std::net::SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

/// A socket's TCP state (TCP_INFO's `tcpi_state`).
fn tcp_state(s: &impl std::os::fd::AsRawFd) -> Option<u8> {
    // SAFETY: as in [`handshake_info`].
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    (rc == 0).then_some(info.tcpi_state)
}

/// The address a connect to `host` tries first: the literal itself, or the first of the addresses
/// resolved for the run.
pub fn first_address(host: &str) -> Option<std::net::IpAddr> {
    let bare = host.trim_matches(['[', ']']);
    bare.parse()
        .ok()
        .or_else(|| super::resolve::pinned(bare)?.first().copied())
}

/// A connected socket's (smoothed round trip in µs, segments sent again), from TCP_INFO.
pub fn handshake_info(stream: &tokio::net::TcpStream) -> Option<(u32, u32)> {
    use std::os::fd::AsRawFd;
    // SAFETY: getsockopt writes at most `len` bytes into a zeroed tcp_info, a plain C struct.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    (rc == 0).then_some((info.tcpi_rtt, info.tcpi_total_retrans))
}

/// A connection witness holds, counted in [`held`] until it is dropped; with how long its TCP
/// connect and its TLS handshake (https only) took.
pub struct Counted<T> {
    io: T,
    pub connect: Duration,
    pub handshake: Option<Duration>,
    count: bool,
}

impl Counted<Io> {
    /// The TCP stream itself (to close it gracefully).
    pub fn tcp(&mut self) -> &mut tokio::net::TcpStream {
        self.io.tcp()
    }

    /// Whether HTTP/2 was agreed by ALPN.
    pub fn h2(&self) -> bool {
        self.io.h2()
    }
}

impl<T> Drop for Counted<T> {
    fn drop(&mut self) {
        if self.count {
            held::closed();
        }
    }
}

impl<T: hyper::rt::Read + Unpin> hyper::rt::Read for Counted<T> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

super::write_through!(Counted);

impl<T: hyper_util::client::legacy::connect::Connection>
    hyper_util::client::legacy::connect::Connection for Counted<T>
{
    fn connected(&self) -> hyper_util::client::legacy::connect::Connected {
        self.io.connected()
    }
}

/// Sends one request and records its single outcome.
pub async fn send(
    client: &HttpClient,
    spec: &RequestSpec,
    limits: Limits,
    rej: &Rejection,
) -> Sent {
    let start = Instant::now();
    let mut req = hyper::Request::builder()
        .method(spec.method.clone())
        .uri(spec.uri.clone());
    if let Some(h) = req.headers_mut() {
        h.extend(spec.headers.clone());
    }
    let req = match req.body(Full::new(spec.body.clone())) {
        Ok(r) => r,
        Err(e) => {
            return Sent {
                start,
                end: Instant::now(),
                outcome: Outcome::Error {
                    error: ErrorKind::Other,
                    status: None,
                },
                status: None,
                detail: Some(format!("could not build the request: {e}")),
                body_bytes: None,
                body_cut: false,
                connect_s: None,
                headers_s: None,
                handshake_s: None,
                lag_s: None,
            }
        }
    };
    // What arrived before a timeout dropped the work: the status, and how much body.
    let seen_status = AtomicU32::new(0);
    let seen_bytes = AtomicU64::new(0);
    let phases = Phases::default();
    let work = async {
        let resp = client.request(req).await.map_err(Failure::Client)?;
        phases.headers(start);
        take_response(resp, limits, &seen_status, &seen_bytes).await
    };
    let res = tokio::time::timeout(limits.whole, work).await;
    let end = Instant::now();
    let mut s = finish(start, end, res, &seen_status, &seen_bytes, limits, rej);
    // The pool hides whether it opened a connection: only the time to headers is known.
    (s.connect_s, s.headers_s) = (None, phases.headers_s());
    s
}

/// A request's phases as they happen, kept where a timeout dropping the work still finds them
/// (atomics, so the future stays `Send`): the connect when a new connection was opened, the time
/// from the start to the response's headers. Zero bits: not reached.
#[derive(Default)]
pub struct Phases {
    connect: AtomicU64,
    headers: AtomicU64,
    handshake: AtomicU64,
}

impl Phases {
    fn set(cell: &AtomicU64, d: Duration) {
        // At least 1 µs, so that a phase reached is never read back as "not reached".
        let s = crate::journal::micros(d.as_secs_f64()).max(1e-6);
        cell.store(s.to_bits(), Ordering::Relaxed);
    }

    fn get(cell: &AtomicU64) -> Option<f64> {
        match cell.load(Ordering::Relaxed) {
            0 => None,
            b => Some(f64::from_bits(b)),
        }
    }

    pub fn connected(&self, took: Duration) {
        Self::set(&self.connect, took);
    }

    /// A new connection's phases: its TCP connect and (https) its TLS handshake.
    pub fn opened<T>(&self, c: &Counted<T>) {
        self.connected(c.connect);
        if let Some(h) = c.handshake {
            Self::set(&self.handshake, h);
        }
    }

    pub fn handshake_s(&self) -> Option<f64> {
        Self::get(&self.handshake)
    }

    pub fn headers(&self, start: Instant) {
        Self::set(&self.headers, start.elapsed());
    }

    pub fn connect_s(&self) -> Option<f64> {
        Self::get(&self.connect)
    }

    pub fn headers_s(&self) -> Option<f64> {
        Self::get(&self.headers)
    }
}

pub(super) type Work = Result<Result<(u16, Vec<u8>, u64), Failure>, tokio::time::error::Elapsed>;

/// One outcome from what the work came to: the harness's timeout, the server's answer, or a
/// failure (with the status and body count seen before it).
pub(super) fn finish(
    start: Instant,
    end: Instant,
    res: Work,
    seen_status: &AtomicU32,
    seen_bytes: &AtomicU64,
    limits: Limits,
    rej: &Rejection,
) -> Sent {
    let got_status = match seen_status.load(Ordering::Relaxed) {
        0 => None,
        s => Some(s as u16),
    };
    let bytes = got_status.map(|_| seen_bytes.load(Ordering::Relaxed));
    let (outcome, status, detail, body_cut) = match res {
        Err(_) => (
            Outcome::Timeout {
                phase: TimeoutPhase::Request,
                limit_s: limits.whole.as_secs_f64(),
            },
            got_status,
            got_status.map(|s| {
                format!(
                    "status {s} arrived, then the body stalled after {} bytes",
                    bytes.unwrap_or(0)
                )
            }),
            false,
        ),
        Ok(Ok((status, kept, total))) => (
            classify_response(status, &kept, rej),
            Some(status),
            // The server's reason, for the annotations: the start of an error answer's body.
            (status >= 400).then(|| super::outcome::body_start(status, &kept)),
            total > kept.len() as u64,
        ),
        Ok(Err(f)) => {
            let (o, status, d) = f.classify(limits);
            (o, status, Some(d), false)
        }
    };
    Sent {
        start,
        end,
        outcome,
        status,
        detail,
        body_bytes: bytes,
        body_cut,
        connect_s: None,
        headers_s: None,
        handshake_s: None,
        lag_s: None,
    }
}

/// Points a request made for a connection of witness's own at `url` in origin form: the path and
/// query on the request line, the authority in `Host` (unless the request already has one).
pub fn origin_form<B>(req: &mut hyper::Request<B>, url: &Uri) {
    *req.uri_mut() = url
        .path_and_query()
        .and_then(|p| Uri::try_from(p.as_str()).ok())
        .unwrap_or_else(|| Uri::from_static("/"));
    if let Some(host) = url.authority() {
        if let Ok(v) = hyper::header::HeaderValue::from_str(host.as_str()) {
            req.headers_mut().entry(hyper::header::HOST).or_insert(v);
        }
    }
}

/// The request of a level, made once: the target in origin form with its `Host` header (what
/// hyper's pooled client makes of it per request), so each send is a cheap copy.
#[derive(Clone, Debug)]
pub struct Prepared {
    pub(super) method: Method,
    /// Where to connect: the spec's URI (scheme and authority).
    pub(super) target: Uri,
    /// What the request line carries: the path and query (the authority for CONNECT).
    pub(super) line: Uri,
    pub(super) headers: HeaderMap,
    pub(super) body: Bytes,
}

impl Prepared {
    pub fn new(spec: &RequestSpec) -> Self {
        let mut headers = spec.headers.clone();
        if let Some(host) = spec.uri.host() {
            headers.entry(hyper::header::HOST).or_insert_with(|| {
                let value = match spec.uri.port_u16() {
                    Some(p) if !(p == 80 && spec.uri.scheme_str() != Some("https")) => {
                        format!("{host}:{p}")
                    }
                    _ => host.to_string(),
                };
                hyper::header::HeaderValue::from_maybe_shared(Bytes::from(value))
                    .unwrap_or_else(|_| hyper::header::HeaderValue::from_static(""))
            });
        }
        let line = if spec.method == Method::CONNECT {
            spec.uri
                .authority()
                .and_then(|a| Uri::try_from(a.as_str()).ok())
                .unwrap_or_default()
        } else {
            match spec.uri.path_and_query() {
                Some(p) if p.as_str() != "/" => Uri::try_from(p.as_str()).unwrap_or_default(),
                _ => Uri::default(),
            }
        };
        Self {
            method: spec.method.clone(),
            target: spec.uri.clone(),
            line,
            headers,
            body: spec.body.clone(),
        }
    }

    /// The request as HTTP/2 sends it: the whole URI (its scheme and authority become the
    /// `:scheme` and `:authority` pseudo-headers), no `Host` header.
    pub(super) fn request_h2(&self) -> hyper::Request<Full<Bytes>> {
        let mut req = self.request();
        *req.uri_mut() = self.target.clone();
        req.headers_mut().remove(hyper::header::HOST);
        req
    }

    fn request(&self) -> hyper::Request<Full<Bytes>> {
        let mut req = hyper::Request::new(Full::new(self.body.clone()));
        *req.method_mut() = self.method.clone();
        *req.uri_mut() = self.line.clone();
        *req.headers_mut() = self.headers.clone();
        req
    }
}

/// A load worker's own keep-alive connection: hyper's HTTP/1 connection driven on the worker's
/// runtime, no pool to check out of per request. Connected on first use, and again after the
/// server closed it or a request on it failed or timed out (what the pooled client does too).
pub struct Conn {
    connector: Counting,
    live: Option<Live>,
}

struct Live {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    driver: tokio::task::JoinHandle<()>,
}

impl Drop for Live {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

impl Conn {
    pub fn new(limits: Limits) -> Self {
        Self {
            connector: counted(limits.connect),
            live: None,
        }
    }

    /// A connection ready for a request, and whether it served one before.
    /// A new connection's connect time goes into `phases`.
    async fn ready(&mut self, target: &Uri, phases: &Phases) -> Result<(&mut Live, bool), Failure> {
        use tower_service::Service;
        let mut reused = false;
        if let Some(live) = self.live.as_mut() {
            // Closed by the server (keep-alive ended) or broken: a new one, as the pool would.
            reused = live.sender.ready().await.is_ok();
        }
        if !reused {
            self.live = None;
            let io = self
                .connector
                .call(target.clone())
                .await
                .map_err(Failure::Connect)?;
            phases.opened(&io);
            let (sender, conn) = hyper::client::conn::http1::handshake(io)
                .await
                .map_err(Failure::Request)?;
            let driver = tokio::spawn(async move {
                let _ = conn.await;
            });
            let live = Live { sender, driver };
            self.live = Some(live);
            let live = self.live.as_mut().expect("just set");
            live.sender.ready().await.map_err(Failure::Request)?;
        }
        Ok((self.live.as_mut().expect("ready"), reused))
    }
}

/// Sends one request on the worker's own connection and records its single outcome: the same
/// outcomes, limits and body handling as [`send`].
/// `start`: when the caller began it (read just before).
pub async fn send_on(
    conn: &mut Conn,
    req: &Prepared,
    limits: Limits,
    rej: &Rejection,
    start: Instant,
) -> Sent {
    let seen_status = AtomicU32::new(0);
    let seen_bytes = AtomicU64::new(0);
    let phases = Phases::default();
    let work = async {
        let mut retried = false;
        let resp = loop {
            let (live, reused) = conn.ready(&req.target, &phases).await?;
            match live.sender.try_send_request(req.request()).await {
                Ok(resp) => {
                    phases.headers(start);
                    break resp;
                }
                Err(mut e) => {
                    conn.live = None;
                    // Canceled before it was written on a kept-alive connection the server was
                    // closing: not sent, so sent again on a new one (once), as the pool does.
                    if e.take_message().is_some() && reused && !retried {
                        retried = true;
                        continue;
                    }
                    return Err(Failure::Request(e.into_error()));
                }
            }
        };
        take_response(resp, limits, &seen_status, &seen_bytes).await
    };
    let res = tokio::time::timeout(limits.whole, work).await;
    let end = Instant::now();
    if !matches!(res, Ok(Ok(_))) {
        // Whatever is left on it (a late answer, a half-read body) is nobody's: a new one next.
        conn.live = None;
    }
    let mut s = finish(start, end, res, &seen_status, &seen_bytes, limits, rej);
    (s.connect_s, s.headers_s) = (phases.connect_s(), phases.headers_s());
    s.handshake_s = phases.handshake_s();
    s
}

/// A response's status and body (at most `limits.max_body` kept, all of it counted), noting both in
/// `seen_*` as they arrive so that a timeout dropping this still knows how far it got.
pub(super) async fn take_response(
    resp: hyper::Response<hyper::body::Incoming>,
    limits: Limits,
    seen_status: &AtomicU32,
    seen_bytes: &AtomicU64,
) -> Result<(u16, Vec<u8>, u64), Failure> {
    let status = resp.status().as_u16();
    seen_status.store(status as u32, Ordering::Relaxed);
    let (kept, total) = read_body(resp.into_body(), limits.max_body, seen_bytes)
        .await
        .map_err(|e| Failure::Body(e, status))?;
    Ok((status, kept, total))
}

/// Reads a body to its end, keeping at most `max` bytes; returns the kept prefix and the total.
/// `seen` follows the count, so a caller whose timeout drops this still knows how far it got.
pub async fn read_body<B>(
    mut body: B,
    max: usize,
    seen: &AtomicU64,
) -> Result<(Vec<u8>, u64), B::Error>
where
    B: hyper::body::Body + Unpin,
    B::Data: bytes::Buf,
{
    use bytes::Buf;
    let mut kept = Vec::new();
    let mut total = 0u64;
    while let Some(frame) = body.frame().await {
        let Ok(mut data) = frame?.into_data() else {
            continue;
        };
        total += data.remaining() as u64;
        seen.store(total, Ordering::Relaxed);
        let mut room = max.saturating_sub(kept.len());
        while room > 0 && data.has_remaining() {
            let chunk = data.chunk();
            let take = chunk.len().min(room);
            kept.extend_from_slice(&chunk[..take]);
            data.advance(take);
            room -= take;
        }
    }
    Ok((kept, total))
}

pub(super) enum Failure {
    /// The pooled client's error (connect and request alike).
    Client(hyper_util::client::legacy::Error),
    /// A worker's own connection could not be made.
    Connect(Box<dyn std::error::Error + Send + Sync>),
    /// A worker's own connection failed the request.
    Request(hyper::Error),
    Body(hyper::Error, u16),
    /// A failure already told in the words and kind hyper's would have (the raw HTTP/1.1 path's).
    Said {
        error: ErrorKind,
        status: Option<u16>,
        text: String,
    },
}

impl Failure {
    fn classify(self, limits: Limits) -> (Outcome, Option<u16>, String) {
        match self {
            Failure::Client(e) => {
                let connect = e.is_connect();
                client_failure(&e, connect, limits)
            }
            Failure::Connect(e) => client_failure(&*e, true, limits),
            Failure::Said {
                error,
                status,
                text,
            } => (
                Outcome::Error {
                    error,
                    status: None,
                },
                status,
                text,
            ),
            Failure::Request(e) => client_failure(&e, false, limits),
            Failure::Body(e, status) => {
                let io = io_kind(&e);
                let text = chain(&e);
                (
                    Outcome::Error {
                        error: hyper_kind(&e, io),
                        status: None,
                    },
                    Some(status),
                    format!("status {status}, then the body failed: {text}"),
                )
            }
        }
    }
}

/// A request that got no status: witness's own failure, the connect's, or the exchange's.
fn client_failure(
    e: &(dyn std::error::Error + 'static),
    connect: bool,
    limits: Limits,
) -> (Outcome, Option<u16>, String) {
    let text = chain(e);
    let io = io_kind(e);
    let outcome = if is_local(e) {
        Outcome::Error {
            error: ErrorKind::Local,
            status: None,
        }
    } else if super::tls::is_tls(e) {
        Outcome::Error {
            error: ErrorKind::Tls,
            status: None,
        }
    } else if connect {
        match io {
            Some(std::io::ErrorKind::TimedOut) => Outcome::Timeout {
                phase: TimeoutPhase::Connect,
                limit_s: limits.connect.as_secs_f64(),
            },
            Some(std::io::ErrorKind::ConnectionRefused) => Outcome::Error {
                error: ErrorKind::ConnectRefused,
                status: None,
            },
            _ if text.contains("timed out") || text.contains("timeout") => Outcome::Timeout {
                phase: TimeoutPhase::Connect,
                limit_s: limits.connect.as_secs_f64(),
            },
            _ => Outcome::Error {
                error: ErrorKind::Connect,
                status: None,
            },
        }
    } else {
        Outcome::Error {
            error: hyper_kind(e, io),
            status: None,
        }
    };
    (outcome, None, h2_words(e).unwrap_or(text))
}

pub(crate) fn hyper_kind(
    e: &(dyn std::error::Error + 'static),
    io: Option<std::io::ErrorKind>,
) -> ErrorKind {
    use std::io::ErrorKind as Io;
    if super::tls::is_tls(e) {
        return ErrorKind::Tls;
    }
    if let Some(kind) = h2_kind(e) {
        return kind;
    }
    if matches!(
        io,
        Some(Io::ConnectionReset | Io::BrokenPipe | Io::ConnectionAborted)
    ) {
        return ErrorKind::Reset;
    }
    // The connection closed before the body's announced end (hyper's IncompleteBody).
    if io == Some(Io::UnexpectedEof) {
        return ErrorKind::ClosedBeforeResponse;
    }
    // A body hyper could not decode (a chunk-size line that is not hex).
    if matches!(io, Some(Io::InvalidData | Io::InvalidInput)) {
        return ErrorKind::Protocol;
    }
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cur {
        if let Some(h) = c.downcast_ref::<hyper::Error>() {
            if h.is_incomplete_message() || h.is_closed() || h.is_canceled() {
                return ErrorKind::ClosedBeforeResponse;
            }
            if h.is_parse() || h.is_parse_status() || h.is_user() {
                return ErrorKind::Protocol;
            }
        }
        cur = c.source();
    }
    ErrorKind::Other
}

/// HTTP/2: the server's GOAWAY or RST_STREAM, each an error of its own kind.
fn h2_kind(e: &(dyn std::error::Error + 'static)) -> Option<ErrorKind> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cur {
        if let Some(h) = c.downcast_ref::<h2::Error>() {
            if h.is_go_away() && h.is_remote() {
                return Some(ErrorKind::Goaway);
            }
            if h.is_reset() && h.is_remote() {
                return Some(ErrorKind::StreamReset);
            }
        }
        cur = c.source();
    }
    None
}

/// What the server did, in words, when it was HTTP/2's GOAWAY or RST_STREAM (with its reason).
fn h2_words(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cur {
        if let Some(h) = c.downcast_ref::<h2::Error>() {
            let reason = h.reason().map(|r| format!("{r:?}")).unwrap_or_default();
            if h.is_go_away() && h.is_remote() {
                let why = if h.reason() == Some(h2::Reason::NO_ERROR) {
                    "it is closing the connection gracefully (nginx does after keepalive_requests)"
                } else {
                    "it ended the connection on an error (the request's frames or headers, or a limit of its own)"
                };
                return Some(format!(
                    "the server sent GOAWAY ({reason}) before it processed this stream: {why}; the stream was not answered"
                ));
            }
            if h.is_reset() && h.is_remote() {
                return Some(format!(
                    "the server reset this stream (RST_STREAM: {reason})"
                ));
            }
        }
        cur = c.source();
    }
    None
}

/// witness's own resources ran out (file descriptors, memory, local ports): its failure, never the
/// server's, whatever phase it happened in.
pub fn is_local(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cur {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            if let Some(code) = io.raw_os_error() {
                return matches!(
                    code,
                    libc::EMFILE
                        | libc::ENFILE
                        | libc::ENOBUFS
                        | libc::ENOMEM
                        | libc::EADDRNOTAVAIL
                );
            }
            // An io::Error wrapping another error: look inside it.
            if let Some(inner) = io.get_ref() {
                if is_local(inner) {
                    return true;
                }
            }
        }
        cur = c.source();
    }
    false
}

pub(crate) fn io_kind(e: &(dyn std::error::Error + 'static)) -> Option<std::io::ErrorKind> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cur {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        cur = c.source();
    }
    None
}

/// The whole cause chain in one line.
pub(crate) fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(c) = cur {
        let s = c.to_string();
        if !parts.iter().any(|p| p.contains(&s)) {
            parts.push(s);
        }
        cur = c.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tls_failure_is_its_own_error_kind_never_a_timeout_or_a_connect_failure() {
        // A handshake that failed on the certificate, as the connector hands it over.
        let shake: BoxError = Box::new(super::super::tls::TlsFailure {
            host: "127.0.0.1".into(),
            why: "the TLS certificate of 127.0.0.1 is not trusted: unknown issuer".into(),
            certificate: true,
            plain_http: false,
        });
        let (o, _, text) = client_failure(&*shake, true, test_limits());
        assert_eq!(
            o,
            Outcome::Error {
                error: ErrorKind::Tls,
                status: None
            }
        );
        assert!(
            text.contains("unknown issuer") && text.contains("--cacert"),
            "{text}"
        );
        // Mid-stream: rustls's error inside the I/O error the stream returned (a bad record, an
        // alert), even one whose words say "timed out".
        let mid = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::AlertReceived(rustls::AlertDescription::BadRecordMac),
        );
        assert_eq!(hyper_kind(&mid, io_kind(&mid)), ErrorKind::Tls);
        let (o, _, _) = client_failure(&mid, true, test_limits());
        assert!(
            matches!(
                o,
                Outcome::Error {
                    error: ErrorKind::Tls,
                    ..
                }
            ),
            "{o:?}"
        );
    }

    #[test]
    fn running_out_of_file_descriptors_is_witness_s_own_failure() {
        let emfile = std::io::Error::from_raw_os_error(libc::EMFILE);
        assert!(is_local(&emfile));
        let wrapped = std::io::Error::other(emfile);
        assert!(is_local(&wrapped));
        let refused = std::io::Error::from_raw_os_error(libc::ECONNREFUSED);
        assert!(!is_local(&refused));
    }

    /// A server that answers `per_conn` requests on each connection, then closes it: with
    /// `Connection: close` on the last answer (`polite`), or silently after it.
    fn closing_server(per_conn: usize, polite: bool) -> u16 {
        use std::io::{BufRead, BufReader, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(s) = s else { return };
                std::thread::spawn(move || {
                    let mut r = BufReader::new(s.try_clone().unwrap());
                    let mut w = s;
                    for n in 1..=per_conn {
                        let mut line = String::new();
                        // The request's head, up to its blank line (no bodies in this test).
                        loop {
                            line.clear();
                            if r.read_line(&mut line).unwrap_or(0) == 0 {
                                return;
                            }
                            if line == "\r\n" {
                                break;
                            }
                        }
                        let close = if polite && n == per_conn {
                            "Connection: close\r\n"
                        } else {
                            ""
                        };
                        let _ = write!(w, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n{close}\r\nok");
                    }
                });
            }
        });
        port
    }

    fn test_limits() -> Limits {
        Limits {
            connect: Duration::from_secs(5),
            whole: Duration::from_secs(10),
            max_body: 1024,
        }
    }

    /// A plain GET of `url`, no headers, no body.
    fn get(url: &str) -> RequestSpec {
        RequestSpec {
            method: Method::GET,
            uri: url.parse().unwrap(),
            headers: HeaderMap::new(),
            body: Bytes::new(),
        }
    }

    async fn ten_on_one_conn(port: u16) -> Vec<Outcome> {
        let limits = test_limits();
        let req = Prepared::new(&get(&format!("http://127.0.0.1:{port}/x?y=1")));
        let mut conn = Conn::new(limits);
        let mut out = Vec::new();
        for _ in 0..10 {
            let s = send_on(
                &mut conn,
                &req,
                limits,
                &Rejection::default(),
                Instant::now(),
            )
            .await;
            out.push(s.outcome);
        }
        out
    }

    #[tokio::test]
    async fn a_request_s_phases_name_its_new_connections_and_its_time_to_headers() {
        let port = closing_server(3, true);
        let limits = test_limits();
        let spec = get(&format!("http://127.0.0.1:{port}/"));
        let req = Prepared::new(&spec);
        let mut conn = Conn::new(limits);
        for i in 0..7 {
            let s = send_on(
                &mut conn,
                &req,
                limits,
                &Rejection::default(),
                Instant::now(),
            )
            .await;
            assert_eq!(s.outcome, Outcome::Ok);
            // Three answers per connection: the first of each three opened one.
            assert_eq!(s.connect_s.is_some(), i % 3 == 0, "request {i}: {s:?}");
            let d = s.end.duration_since(s.start).as_secs_f64();
            let h = s.headers_s.expect("headers arrived");
            assert!(h > 0.0 && h <= d + 1e-6, "{h} vs {d}");
            assert!(s.connect_s.unwrap_or(0.0) <= h, "{s:?}");
            assert_eq!(h, crate::journal::micros(h));
        }
        let pooled = client(limits, 1);
        let s = send(&pooled, &spec, limits, &Rejection::default()).await;
        assert_eq!(s.outcome, Outcome::Ok);
        assert!(s.headers_s.is_some() && s.connect_s.is_none(), "{s:?}");
    }

    #[tokio::test]
    async fn a_worker_s_connection_closed_by_the_server_is_replaced_without_a_failure() {
        let polite = ten_on_one_conn(closing_server(3, true)).await;
        assert!(polite.iter().all(|o| *o == Outcome::Ok), "{polite:?}");
    }

    #[test]
    fn the_prepared_request_is_what_the_pooled_client_sends() {
        let spec = |uri: &str| RequestSpec {
            method: Method::GET,
            uri: uri.parse().unwrap(),
            headers: HeaderMap::new(),
            body: Bytes::new(),
        };
        let p = Prepared::new(&spec("http://127.0.0.1:8080/a/b?c=d"));
        let r = p.request();
        assert_eq!(r.uri(), "/a/b?c=d");
        assert_eq!(r.headers()["host"], "127.0.0.1:8080");
        let p = Prepared::new(&spec("http://example.test"));
        let r = p.request();
        assert_eq!(r.uri(), "/");
        assert_eq!(r.headers()["host"], "example.test");
        let mut s = spec("http://example.test:80/");
        s.headers.insert("host", "other.test".parse().unwrap());
        assert_eq!(Prepared::new(&s).request().headers()["host"], "other.test");
    }

    #[tokio::test]
    async fn a_body_is_counted_whole_and_kept_only_up_to_the_bound() {
        let body = http_body_util::StreamBody::new(futures_util::stream::iter((0..10).map(|_| {
            Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(Bytes::from(vec![
                7u8;
                1000
            ])))
        })));
        let seen = AtomicU64::new(0);
        let (kept, total) = read_body(body, 2500, &seen).await.unwrap();
        assert_eq!(total, 10_000);
        assert_eq!(kept.len(), 2500);
        assert_eq!(seen.load(Ordering::Relaxed), 10_000);
    }
}
