//! The recording HTTP proxy (`wrap --proxy LISTEN=UPSTREAM`): any client's HTTP/1.1 requests,
//! forwarded unchanged to the server witness supervises and journalled as exchanges by load's rules.
//!
//! - **Transparent.** Methods, headers (their case too: hyper's `preserve_header_case` both ways),
//!   bodies and their framing (`Content-Length` or chunked, as the sender chose) pass unchanged;
//!   nothing is added (no `Via`, no `X-Forwarded-For`). Each downstream connection gets its own
//!   upstream connection, opened on its first request and again after the server closed it, so
//!   keep-alive maps 1:1 and `Connection`/`Keep-Alive` mean to the server what the client meant.
//!   Upgrades (websocket) are passed: the 101 is journalled, then the two connections are joined
//!   and their bytes copied both ways, unread.
//! - **Streamed, bounded.** Bodies pass frame by frame with hyper's back-pressure both ways; what
//!   witness reads is a bounded copy (the start of a response for the refusal marker and an error's
//!   text; up to 1 MiB of a JSON-RPC body), so a 1 GiB body each way costs a few buffers.
//! - **Never the server's latency when no server ran.** While nothing listens on UPSTREAM (between
//!   an exit and a restart) the proxy answers 502 at once, saying so, and journals a failure whose
//!   detail says the server was down; it never waits for a restart on the client's clock.
//! - **MCP streamable HTTP** (a POST whose JSON body is a JSON-RPC request, answered with JSON or
//!   an SSE stream) is read as JSON-RPC: grouped `http tools/call TOOL`, classified like the load
//!   driver's calls. Only `id`, `method` and `params.name` are read; argument values never are.
//! - **A restart ends MCP sessions.** A streamable HTTP session (`Mcp-Session-Id`, issued in an
//!   answer's header) belongs to the server process that issued it; a request carrying the id of a
//!   process that has since exited is answered 404 by the proxy itself (what the MCP specification
//!   says a server answers for a session it no longer has), so the client initializes again; it is
//!   journalled as the restart's consequence (`session_gone`), never as the server's failure. An id
//!   witness never saw issued passes unchanged: the server answers it.
//! - **No credentials on record.** The journal holds no header; a detail quoting an error body is
//!   masked by load's rules and scrubbed of the request's own credential header values.

use std::collections::HashSet;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::sync::watch;

use crate::journal::observed::{Observed, Via, PROXY_ANSWERED};
use crate::journal::{ErrorKind, Event, Journal, Outcome, TimeoutPhase};
use crate::load::outcome::{body_start, classify_response, Rejection};
use crate::observe::record::write::Draft;
use crate::observe::record::HarRecorder;
use crate::secrets::is_credential;
use crate::units::ProxySpec;

/// At most this much of a JSON-RPC request or answer is copied to be read (the bytes all pass).
const RPC_COPY: usize = 1024 * 1024;
/// At most this much of any other response is copied: the refusal marker's scan and an error's text.
const PLAIN_COPY: usize = 64 * 1024;
/// Distinct groups kept apart; further paths share one group per method, so the analysis's
/// per-group state does not grow with distinct URLs.
const MAX_GROUPS: usize = 64;
/// A path longer than this is cut in its group.
const MAX_PATH: usize = 200;
/// The proxy's own limit on connecting to UPSTREAM (loopback answers or refuses at once; this
/// fires only for a server whose accept queue is full).
const CONNECT_LIMIT: Duration = Duration::from_secs(10);
/// When the server is gone for good, exchanges still in flight get this long to end on their own.
const GRACE: Duration = Duration::from_secs(1);

/// Session ids remembered with the process that issued them; the oldest are forgotten beyond this.
const SESSIONS_KEPT: usize = 4096;
/// The MCP streamable HTTP session header.
const SESSION_HEADER: &str = "mcp-session-id";

/// LISTEN, bound before the server starts, so a client never finds nothing there.
pub struct Bound {
    listener: std::net::TcpListener,
    spec: ProxySpec,
}

/// Binds LISTEN (`None` without `--proxy`). A failure is a usage error naming `--proxy`.
pub fn bind(spec: Option<ProxySpec>) -> anyhow::Result<Option<Bound>> {
    let Some(spec) = spec else { return Ok(None) };
    let flag = format!("--proxy {}={}", spec.listen, spec.upstream);
    let listener = std::net::TcpListener::bind(spec.listen).map_err(|e| {
        let hint = match e.kind() {
            std::io::ErrorKind::AddrInUse => {
                "; another process listens there: choose another LISTEN port"
            }
            std::io::ErrorKind::AddrNotAvailable => "; that address is not this host's",
            std::io::ErrorKind::PermissionDenied => "; ports below 1024 need privileges",
            _ => "",
        };
        crate::error::usage(format!(
            "{flag}: witness cannot listen on {}: {e}{hint}",
            spec.listen
        ))
    })?;
    listener
        .set_nonblocking(true)
        .map_err(|e| crate::error::usage(format!("{flag}: {e}")))?;
    Ok(Some(Bound { listener, spec }))
}

/// The running proxy; [`stop`] ends it once the server is gone for good.
pub struct Proxy {
    stop: watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // The proxy's thread sees this and ends by itself.
        let _ = self.stop.send(true);
    }
}

/// The server process running now (its pid), None while none runs: a session id issued by
/// another process is no longer the server's.
pub type Current = crate::sample::PidSource;

/// Starts serving on the bound LISTEN, journalling into `journal` (a note says both addresses).
pub fn start(
    bound: Option<Bound>,
    journal: &Journal,
    current: Current,
    recorder: Option<Arc<HarRecorder>>,
) -> anyhow::Result<Option<Proxy>> {
    let Some(Bound { listener, spec }) = bound else {
        return Ok(None);
    };
    // One thread and a runtime of its own: a client's connection and the server's connection of
    // one exchange are driven on the same thread, never waking each other across threads (the
    // per-request cost on loopback), and never competing with wrap's own tasks.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            anyhow::anyhow!("--proxy: witness could not start the proxy's runtime: {e}")
        })?;
    let listener = {
        let _inside = runtime.enter();
        tokio::net::TcpListener::from_std(listener)
            .map_err(|e| crate::error::usage(format!("--proxy {}: {e}", spec.listen)))?
    };
    journal.emit(Event::Note {
        level: "info".into(),
        text: format!(
            "proxy: witness listens on {} and forwards every request to {} (where the server listens); each exchange is journalled",
            spec.listen, spec.upstream
        ),
    });
    let (stop, rx) = watch::channel(false);
    let shared = Arc::new(Shared::new(
        journal.clone(),
        spec.upstream,
        spec.upstream_tls,
        current,
        recorder,
    ));
    let thread = std::thread::Builder::new()
        .name("proxy".into())
        .spawn(move || runtime.block_on(serve(listener, shared, rx)))
        .map_err(|e| anyhow::anyhow!("--proxy: witness could not start the proxy's thread: {e}"))?;
    Ok(Some(Proxy {
        stop,
        thread: Some(thread),
    }))
}

/// Stops accepting, lets exchanges in flight end (at most [`GRACE`]), and journals the rest as
/// interrupted.
pub async fn stop(proxy: Option<Proxy>) {
    let Some(mut p) = proxy else { return };
    let _ = p.stop.send(true);
    if let Some(t) = p.thread.take() {
        let _ = tokio::task::spawn_blocking(move || t.join()).await;
    }
}

/// What every connection shares.
struct Shared {
    journal: Journal,
    upstream: SocketAddr,
    /// TLS to the server (`UPSTREAM` written `https://…`).
    upstream_tls: bool,
    rejection: Rejection,
    groups: Groups,
    /// Set when witness stops the proxy: an exchange dropped then was interrupted, not cancelled.
    stopping: AtomicBool,
    /// The server process running now.
    current: Current,
    /// MCP session ids and the process that issued each.
    sessions: Mutex<Sessions>,
    /// `wrap --record`: each exchange, once it ended, as a HAR entry.
    recorder: Option<Arc<HarRecorder>>,
}

/// MCP session ids (`Mcp-Session-Id`) and the pid of the server process that issued each, bounded:
/// the oldest are forgotten (a forgotten id passes to the server, which answers it itself).
#[derive(Default)]
struct Sessions {
    by_id: std::collections::HashMap<String, u32>,
    order: std::collections::VecDeque<String>,
}

impl Sessions {
    /// An answer of process `pid` carried session id `id`.
    fn issued(&mut self, id: &str, pid: u32) {
        if self.by_id.contains_key(id) {
            return;
        }
        if self.order.len() >= SESSIONS_KEPT {
            if let Some(old) = self.order.pop_front() {
                self.by_id.remove(&old);
            }
        }
        self.by_id.insert(id.to_string(), pid);
        self.order.push_back(id.to_string());
    }

    /// The pid that issued `id`, when it is not the process running now (`now`): the session
    /// ended with that process.
    fn gone(&self, id: &str, now: Option<u32>) -> Option<u32> {
        let pid = *self.by_id.get(id)?;
        (now != Some(pid)).then_some(pid)
    }
}

impl Shared {
    fn new(
        journal: Journal,
        upstream: SocketAddr,
        upstream_tls: bool,
        current: Current,
        recorder: Option<Arc<HarRecorder>>,
    ) -> Self {
        Self {
            journal,
            upstream,
            upstream_tls,
            // Load's rules, but a 3xx is the server's answer: an observed client follows its own
            // redirects and revalidates its cache (304), which are not failures.
            rejection: Rejection {
                accepted: vec![301, 302, 303, 304, 307, 308],
                ..Rejection::default()
            },
            groups: Groups::default(),
            stopping: AtomicBool::new(false),
            current,
            sessions: Mutex::default(),
            recorder,
        }
    }
}

/// The groups seen so far, bounded.
#[derive(Default)]
struct Groups(Mutex<HashSet<String>>);

impl Groups {
    /// The group for an exchange, bounded: the first [`MAX_GROUPS`] distinct ones are kept apart,
    /// later ones share `http METHOD (other_paths)`.
    fn group(&self, o: Observed, http_method: &Method) -> String {
        let g = o.group();
        let mut seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if seen.contains(&g) {
            return g;
        }
        if seen.len() < MAX_GROUPS {
            seen.insert(g.clone());
            return g;
        }
        Observed {
            via: Via::Http,
            to_client: false,
            method: standard_method(http_method).into(),
            name: Some("(other paths)".into()),
        }
        .group()
    }
}

/// A standard method's name, else `OTHER` (a made-up method must not make groups without bound).
fn standard_method(m: &Method) -> &'static str {
    match *m {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        _ => "OTHER",
    }
}

async fn serve(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    let mut conns = tokio::task::JoinSet::new();
    let mut number: u32 = 0;
    let mut said_accept_error = false;
    loop {
        tokio::select! {
            _ = crate::load::ladder::stopped(&mut stop) => break,
            r = listener.accept() => match r {
                Ok((sock, _)) => {
                    let _ = sock.set_nodelay(true);
                    conns.spawn(connection(sock, number, shared.clone(), stop.clone()));
                    number = number.wrapping_add(1);
                }
                Err(e) => {
                    // Out of descriptors, most likely: witness's own trouble, said once; the
                    // client's connect waits in the backlog meanwhile.
                    if !said_accept_error {
                        said_accept_error = true;
                        shared.journal.emit(Event::Note {
                            level: "warn".into(),
                            text: format!("proxy: accepting a connection failed (witness's own failure): {e}"),
                        });
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drop(listener);
    let _ = tokio::time::timeout(GRACE, async { while conns.join_next().await.is_some() {} }).await;
    shared.stopping.store(true, Ordering::SeqCst);
    conns.abort_all();
    while conns.join_next().await.is_some() {}
}

/// One downstream connection: its requests in order, each forwarded on its own upstream connection.
async fn connection(
    sock: tokio::net::TcpStream,
    worker: u32,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    let upstream: Arc<tokio::sync::Mutex<Option<Upstream>>> = Arc::default();
    let svc = hyper::service::service_fn(move |req| {
        let shared = shared.clone();
        let upstream = upstream.clone();
        async move {
            let mut up = upstream.lock().await;
            Ok::<_, Infallible>(exchange(req, worker, &mut up, &shared).await)
        }
    });
    // No Date header of hyper's own: the client gets the server's headers, nothing added.
    let conn = hyper::server::conn::http1::Builder::new()
        .preserve_header_case(true)
        .auto_date_header(false)
        .serve_connection(TokioIo::new(sock), svc)
        .with_upgrades();
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = crate::load::ladder::stopped(&mut stop) => {
            // Idle connections close now; one with an exchange in flight finishes it first.
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

type Sender = hyper::client::conn::http1::SendRequest<ReqBody>;

struct Upstream {
    sender: Sender,
}

/// Why no upstream connection could be had.
enum NoConn {
    /// Nothing listens on UPSTREAM: the server is down.
    Refused,
    Failed(Outcome, String),
}

/// The connection's upstream, ready for a request (a new one when the server closed the last), and
/// whether it served one before.
async fn ready<'a>(
    up: &'a mut Option<Upstream>,
    shared: &Shared,
) -> Result<(&'a mut Sender, bool), NoConn> {
    let mut reused = false;
    if let Some(u) = up.as_mut() {
        reused = u.sender.ready().await.is_ok();
    }
    if !reused {
        *up = None;
        let connect = tokio::net::TcpStream::connect(shared.upstream);
        let sock = match tokio::time::timeout(CONNECT_LIMIT, connect).await {
            Err(_) => {
                return Err(NoConn::Failed(
                    Outcome::Timeout {
                        phase: TimeoutPhase::Connect,
                        limit_s: CONNECT_LIMIT.as_secs_f64(),
                    },
                    format!(
                        "the server at {} did not accept a connection within {} (its accept queue full?); {PROXY_ANSWERED} 504",
                        shared.upstream,
                        crate::journal::secs(CONNECT_LIMIT.as_secs_f64())
                    ),
                ))
            }
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                return Err(NoConn::Refused)
            }
            Ok(Err(e)) => {
                let kind = if crate::load::client::is_local(&e) {
                    ErrorKind::Local
                } else {
                    ErrorKind::Connect
                };
                return Err(NoConn::Failed(
                    Outcome::Error {
                        error: kind,
                        status: None,
                    },
                    format!(
                        "connecting to the server at {} failed: {e}; {PROXY_ANSWERED} 502",
                        shared.upstream
                    ),
                ));
            }
            Ok(Ok(s)) => s,
        };
        let _ = sock.set_nodelay(true);
        let io = if shared.upstream_tls {
            let host = shared.upstream.ip().to_string();
            match crate::load::tls::handshake(sock, &host, false).await {
                Ok(s) => crate::load::tls::Io::Tls(Box::new(TokioIo::new(s))),
                Err(e) => {
                    return Err(NoConn::Failed(
                        Outcome::Error {
                            error: ErrorKind::Tls,
                            status: None,
                        },
                        format!("{}; {PROXY_ANSWERED} 502", e.refusal()),
                    ))
                }
            }
        } else {
            crate::load::tls::Io::Plain(TokioIo::new(sock))
        };
        let (sender, conn) = hyper::client::conn::http1::Builder::new()
            .preserve_header_case(true)
            .handshake(io)
            .await
            .map_err(|e| {
                NoConn::Failed(
                    Outcome::Error {
                        error: ErrorKind::Connect,
                        status: None,
                    },
                    format!("the connection to the server failed at once: {e}"),
                )
            })?;
        tokio::spawn(async move {
            let _ = conn.with_upgrades().await;
        });
        *up = Some(Upstream { sender });
    }
    let u = up.as_mut().expect("set above");
    if !reused {
        u.sender.ready().await.map_err(|e| {
            NoConn::Failed(
                Outcome::Error {
                    error: ErrorKind::ClosedBeforeResponse,
                    status: None,
                },
                format!("the server closed the connection at once: {e}"),
            )
        })?;
    }
    Ok((&mut u.sender, reused))
}

/// One request: forwarded, its answer passed back, its record made when the answer's last byte has
/// gone (or the exchange failed).
async fn exchange(
    req: Request<Incoming>,
    worker: u32,
    up: &mut Option<Upstream>,
    shared: &Arc<Shared>,
) -> Response<Out> {
    let mut ex = Exchange::new(&req, worker, shared.clone());
    let req = match session_gone(req, &mut ex, shared).await {
        Ok(r) => r,
        Err(said) => return said,
    };
    let mut req = req;
    let upgrade = req
        .headers()
        .contains_key(hyper::header::UPGRADE)
        .then(|| hyper::upgrade::on(&mut req));
    let client_gone = Arc::new(AtomicBool::new(false));
    let (parts, body) = req.into_parts();
    let mut req = Some(Request::from_parts(
        parts,
        ReqBody {
            inner: body,
            copy: ex.rpc_request.clone(),
            recorded: ex.recorded_request.clone(),
            client_gone: client_gone.clone(),
        },
    ));
    let mut retried = false;
    let sent = loop {
        let (sender, reused) = match ready(up, shared).await {
            Ok(s) => s,
            Err(NoConn::Refused) => {
                let detail = format!(
                    "the server was down (nothing listening on {}); {PROXY_ANSWERED} 502",
                    shared.upstream
                );
                ex.failed(
                    Outcome::Error {
                        error: ErrorKind::ConnectRefused,
                        status: None,
                    },
                    detail,
                );
                return said(
                    StatusCode::BAD_GATEWAY,
                    format!(
                        "witness proxy: no server is listening on {} (it is down or restarting); this 502 is witness's, not the server's\n",
                        shared.upstream
                    ),
                );
            }
            Err(NoConn::Failed(outcome, detail)) => {
                let code = if matches!(outcome, Outcome::Timeout { .. }) {
                    StatusCode::GATEWAY_TIMEOUT
                } else {
                    StatusCode::BAD_GATEWAY
                };
                let text = format!("witness proxy: {detail}\n");
                ex.failed(outcome, detail);
                return said(code, text);
            }
        };
        let Some(r) = req.take() else {
            break Err(None);
        };
        match sender.try_send_request(r).await {
            Ok(resp) => break Ok(resp),
            Err(mut e) => {
                // Not written at all, on a kept-alive connection the server was closing: sent again
                // on a new one (once), as a pooled client would.
                if let Some(r) = e.take_message() {
                    if reused && !retried {
                        retried = true;
                        req = Some(r);
                        *up = None;
                        continue;
                    }
                }
                *up = None;
                break Err(Some(e.into_error()));
            }
        }
    };
    let resp = match sent {
        Ok(r) => r,
        Err(e) => {
            let (outcome, detail) = match e {
                _ if client_gone.load(Ordering::SeqCst) => (
                    Outcome::Error {
                        error: ErrorKind::Cancelled,
                        status: None,
                    },
                    "the client stopped sending the request body (it went away)".to_string(),
                ),
                Some(e) => {
                    let io = crate::load::client::io_kind(&e);
                    let kind = crate::load::client::hyper_kind(&e, io);
                    let text = crate::load::client::chain(&e);
                    (
                        Outcome::Error {
                            error: kind,
                            status: None,
                        },
                        format!("the server closed the connection before answering: {text}; {PROXY_ANSWERED} 502"),
                    )
                }
                None => (
                    Outcome::Error {
                        error: ErrorKind::Other,
                        status: None,
                    },
                    "the request could not be sent".to_string(),
                ),
            };
            let text = format!("witness proxy: {detail}\n");
            ex.failed(outcome, detail);
            return said(StatusCode::BAD_GATEWAY, text);
        }
    };
    let mut resp = resp;
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        // The connection becomes the server's: joined to the client's once both sides upgraded.
        *up = None;
        let theirs = hyper::upgrade::on(&mut resp);
        if let Some(ours) = upgrade {
            tokio::spawn(async move {
                if let (Ok(a), Ok(b)) = (ours.await, theirs.await) {
                    let _ =
                        tokio::io::copy_bidirectional(&mut TokioIo::new(a), &mut TokioIo::new(b))
                            .await;
                }
            });
        }
    }
    if let Some(id) = resp
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
    {
        if let Some(pid) = (shared.current)() {
            shared
                .sessions
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .issued(id, pid);
        }
    }
    ex.answered(&resp);
    let (parts, body) = resp.into_parts();
    Response::from_parts(parts, Out::Passed(Box::new(Tap { inner: body, ex })))
}

/// A request carrying the session id of a server process that has exited: answered 404 by the
/// proxy (the MCP specification's answer for a session the server no longer has, on which a
/// client initializes again), journalled as the restart's consequence. None: it goes on.
async fn session_gone(
    req: Request<Incoming>,
    ex: &mut Exchange,
    shared: &Arc<Shared>,
) -> Result<Request<Incoming>, Response<Out>> {
    let Some(id) = req
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
    else {
        return Ok(req);
    };
    let now = (shared.current)();
    let gone = shared
        .sessions
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .gone(id, now);
    let Some(pid) = gone else {
        return Ok(req);
    };
    // The request's JSON-RPC body is read (a bounded copy) so the journal names the call the
    // restart cost; the rest is drained unread.
    if let Some(copy) = ex.rpc_request.clone() {
        use http_body_util::BodyExt;
        let mut body = req.into_body();
        while let Some(Ok(f)) = body.frame().await {
            if let Some(d) = f.data_ref() {
                let mut c = copy.lock().unwrap_or_else(|p| p.into_inner());
                if c.bytes.len() < RPC_COPY {
                    c.take(d, RPC_COPY);
                } else {
                    c.cut = true;
                }
            }
        }
    }
    let now_words = match now {
        Some(n) => format!("the server runs now as pid {n}"),
        None => "no server process runs now".to_string(),
    };
    // The request's body is not read: what it was is unknown (a POST's JSON-RPC method included).
    ex.failed(
        Outcome::Error {
            error: ErrorKind::SessionGone,
            status: None,
        },
        format!(
            "the MCP session was issued by server pid {pid}, which has exited ({now_words}): the restart ended it; {} 404 so the client initializes again",
            PROXY_ANSWERED
        ),
    );
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {
            "code": -32600,
            "message": format!("Session not found: the server process that held this session (pid {pid}) has exited and {now_words}; initialize a new session (witness proxy)"),
        }
    });
    let mut r = said(StatusCode::NOT_FOUND, format!("{body}\n"));
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    Err(r)
}

/// witness's own short answer (the server was down, or failed before answering).
fn said(status: StatusCode, text: String) -> Response<Out> {
    let mut r = Response::new(Out::Said(Some(Bytes::from(text))));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(
        "witness-proxy",
        hyper::header::HeaderValue::from_static("answered-by-witness"),
    );
    r
}

/// A bounded copy of a body as it passed.
#[derive(Default)]
struct Copy {
    bytes: Vec<u8>,
    /// More passed than was copied.
    cut: bool,
    /// All that passed (bytes).
    total: u64,
}

impl Copy {
    fn take(&mut self, data: &[u8], cap: usize) {
        self.total += data.len() as u64;
        let room = cap.saturating_sub(self.bytes.len());
        if data.len() > room {
            self.cut = true;
        }
        self.bytes.extend_from_slice(&data[..data.len().min(room)]);
    }
}

/// The request body on its way upstream: passed frame by frame, copied (bounded) when it may be
/// JSON-RPC, and noting when the client's side of it failed.
struct ReqBody {
    inner: Incoming,
    copy: Option<Arc<Mutex<Copy>>>,
    /// `wrap --record`'s copy (bounded by `--record-body-max`).
    recorded: Option<(Arc<Mutex<Copy>>, usize)>,
    client_gone: Arc<AtomicBool>,
}

impl Body for ReqBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let r = std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx));
        match &r {
            Some(Ok(f)) => {
                if let (Some(d), Some(c)) = (f.data_ref(), &this.copy) {
                    c.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .take(d, RPC_COPY);
                }
                if let (Some(d), Some((c, cap))) = (f.data_ref(), &this.recorded) {
                    c.lock().unwrap_or_else(|p| p.into_inner()).take(d, *cap);
                }
            }
            Some(Err(_)) => this.client_gone.store(true, Ordering::SeqCst),
            None => {}
        }
        Poll::Ready(r)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// What goes back to the client: the server's answer passing through, or witness's own.
enum Out {
    Passed(Box<Tap>),
    Said(Option<Bytes>),
}

/// The server's answer on its way to the client; the exchange is journalled when its last byte
/// has been passed on, when it fails, or when it is dropped unfinished.
struct Tap {
    inner: Incoming,
    ex: Exchange,
}

impl Body for Out {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let tap = match self.get_mut() {
            Out::Said(b) => return Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            Out::Passed(t) => t,
        };
        let r = std::task::ready!(Pin::new(&mut tap.inner).poll_frame(cx));
        match &r {
            Some(Ok(f)) => {
                if let Some(d) = f.data_ref() {
                    tap.ex.passed(d);
                }
                if tap.inner.is_end_stream() {
                    tap.ex.complete(None);
                }
            }
            Some(Err(e)) => {
                let io = crate::load::client::io_kind(e);
                let kind = crate::load::client::hyper_kind(e, io);
                let detail = format!(
                    "status {}, then the body failed after {} bytes: {}",
                    tap.ex.status.unwrap_or(0),
                    tap.ex.bytes,
                    crate::load::client::chain(e)
                );
                tap.ex.complete(Some((
                    Outcome::Error {
                        error: kind,
                        status: None,
                    },
                    detail,
                )));
            }
            None => tap.ex.complete(None),
        }
        Poll::Ready(r)
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Out::Said(b) => b.is_none(),
            Out::Passed(t) => t.inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Out::Said(Some(b)) => SizeHint::with_exact(b.len() as u64),
            Out::Said(None) => SizeHint::with_exact(0),
            Out::Passed(t) => t.inner.size_hint(),
        }
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        // hyper drops an empty body (HEAD, 204, Content-Length: 0) without polling it.
        if !self.ex.done && self.inner.is_end_stream() {
            self.ex.complete(None);
        }
    }
}

/// How the answer is read as it passes.
enum Reading {
    /// The start of a plain answer.
    Plain(Copy),
    /// A JSON-RPC answer as one JSON body.
    Json(Copy),
    /// A JSON-RPC answer as server-sent events: the answers among them (at most a few), parsed as
    /// they pass, up to [`RPC_COPY`] bytes.
    Sse {
        events: crate::load::mcp::SseBuffer,
        fed: usize,
        answers: Vec<Value>,
        /// The request's id, when it was read by the time the answer began: the exchange ends
        /// with the event that answers it, as the client's call does (the stream may go on, or
        /// the client close it, after that).
        want: Option<Value>,
    },
}

/// One exchange until it is journalled: journalled exactly once, when it ends or is dropped.
struct Exchange {
    shared: Arc<Shared>,
    worker: u32,
    start: Instant,
    method: Method,
    path: String,
    /// The request body's copy, when it may be a JSON-RPC request (a POST of JSON).
    rpc_request: Option<Arc<Mutex<Copy>>>,
    /// The request's credential header values (and their parts), scrubbed from any detail.
    credentials: Vec<String>,
    status: Option<u16>,
    reading: Reading,
    bytes: u64,
    done: bool,
    /// `wrap --record`: the exchange as the HAR entry will say it, and the bodies' copies.
    draft: Option<Box<Draft>>,
    recorded_request: Option<(Arc<Mutex<Copy>>, usize)>,
    recorded_response: Copy,
}

/// The request's credential header values and their parts (a bearer token, each cookie's value),
/// longest first; empty (no allocation) for a request that carries none.
fn credential_values(headers: &hyper::HeaderMap) -> Vec<String> {
    let mut found = Vec::new();
    for (name, value) in headers {
        if !is_credential(name.as_str()) {
            continue;
        }
        let v = String::from_utf8_lossy(value.as_bytes()).into_owned();
        // Each item's secret: a scheme's token after its word (`Bearer T`, `Basic dXM=`), a
        // cookie's value after its `=`.
        for item in v.split([';', ',']) {
            let item = item.trim();
            let part = match (item.rsplit_once(' '), item.split_once('=')) {
                (Some((_, token)), _) => token,
                (None, Some((_, value))) => value,
                (None, None) => item,
            };
            if part.len() >= crate::secrets::MIN_LEN && part != v {
                found.push(part.to_string());
            }
        }
        if v.len() >= crate::secrets::MIN_LEN {
            found.push(v);
        }
    }
    found.sort_by_key(|c| std::cmp::Reverse(c.len()));
    found
}

/// `detail` with each of the request's credential values masked.
fn scrub(detail: String, credentials: &[String]) -> String {
    let mut d = detail;
    for c in credentials {
        if d.contains(c.as_str()) {
            d = d.replace(c.as_str(), crate::secrets::MASK);
        }
    }
    d
}

/// A header map as (name, value) pairs in order, for the recording (masked by its writer).
fn header_list(h: &hyper::HeaderMap) -> Vec<(String, Vec<u8>)> {
    h.iter()
        .map(|(n, v)| (n.as_str().to_string(), v.as_bytes().to_vec()))
        .collect()
}

impl Exchange {
    fn new(req: &Request<Incoming>, worker: u32, shared: Arc<Shared>) -> Self {
        let start = Instant::now();
        let mut path: String = req.uri().path().to_string();
        if path.len() > MAX_PATH {
            let mut cut = MAX_PATH;
            while !path.is_char_boundary(cut) {
                cut -= 1;
            }
            path.truncate(cut);
            path.push('…');
        }
        let json = |h: &hyper::HeaderMap| {
            h.get(hyper::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|c| c.to_ascii_lowercase().contains("json"))
        };
        let rpc_request = (req.method() == Method::POST && json(req.headers())).then(Arc::default);
        let credentials = credential_values(req.headers());
        let draft = shared.recorder.as_ref().map(|r| {
            let target = req
                .uri()
                .path_and_query()
                .map(|p| p.as_str())
                .unwrap_or("/");
            let url = if req.uri().scheme().is_some() {
                req.uri().to_string()
            } else {
                let host = req
                    .headers()
                    .get(hyper::header::HOST)
                    .and_then(|h| h.to_str().ok())
                    .unwrap_or("localhost");
                format!("http://{host}{target}")
            };
            Box::new(Draft {
                seq: r.begin(),
                start: Some(start),
                method: req.method().as_str().to_string(),
                url,
                http_version: format!("{:?}", req.version()),
                request_headers: header_list(req.headers()),
                ..Default::default()
            })
        });
        let recorded_request = shared
            .recorder
            .as_ref()
            .map(|r| (Arc::default(), r.body_bytes() + 1));
        Self {
            shared,
            worker,
            start,
            method: req.method().clone(),
            path,
            rpc_request,
            credentials,
            status: None,
            reading: Reading::Plain(Copy::default()),
            bytes: 0,
            done: false,
            draft,
            recorded_request,
            recorded_response: Copy::default(),
        }
    }

    /// The answer's head arrived: how to read its body.
    fn answered(&mut self, resp: &Response<Incoming>) {
        self.status = Some(resp.status().as_u16());
        if let Some(d) = &mut self.draft {
            d.status = Some(resp.status().as_u16());
            d.status_text = resp
                .status()
                .canonical_reason()
                .unwrap_or_default()
                .to_string();
            d.response_version = format!("{:?}", resp.version());
            d.response_headers = header_list(resp.headers());
            d.headers_at = Some(Instant::now());
        }
        if self.rpc_request.is_some() {
            let ct = resp
                .headers()
                .get(hyper::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_ascii_lowercase();
            if ct.starts_with("text/event-stream") {
                self.reading = Reading::Sse {
                    events: Default::default(),
                    fed: 0,
                    answers: Vec::new(),
                    want: self.rpc_call().and_then(|c| c.id),
                };
            } else if ct.contains("json") {
                self.reading = Reading::Json(Copy::default());
            }
        }
    }

    /// Bytes of the answer passed on to the client.
    fn passed(&mut self, d: &[u8]) {
        self.bytes += d.len() as u64;
        if let Some(r) = &self.recorded_request {
            self.recorded_response.take(d, r.1);
        }
        match &mut self.reading {
            Reading::Plain(c) => {
                if c.bytes.len() < PLAIN_COPY {
                    c.take(d, PLAIN_COPY)
                } else {
                    c.cut = true
                }
            }
            Reading::Json(c) => c.take(d, RPC_COPY),
            Reading::Sse {
                events,
                fed,
                answers,
                want,
            } => {
                let room = RPC_COPY.saturating_sub(*fed);
                if room == 0 || answers.len() >= 4 || self.done {
                    return;
                }
                let d = &d[..d.len().min(room)];
                *fed += d.len();
                let mut answered = false;
                for m in events.push(d) {
                    if answers.len() < 4 && m.get("id").is_some() {
                        answered |= want.is_some() && m.get("id") == want.as_ref();
                        answers.push(m);
                    }
                }
                if answered {
                    self.complete(None);
                }
            }
        }
    }

    /// Failed before any answer came.
    fn failed(&mut self, outcome: Outcome, detail: String) {
        let rpc = self.rpc_call();
        self.journal(Instant::now(), outcome, None, Some(detail), rpc);
    }

    /// The answer ended (`None`: completely) or failed.
    fn complete(&mut self, failure: Option<(Outcome, String)>) {
        let end = Instant::now();
        let rpc = self.rpc_call();
        if let Some((outcome, detail)) = failure {
            let status = self.status;
            return self.journal(end, outcome, status, Some(detail), rpc);
        }
        let status = self.status.unwrap_or(0);
        let (outcome, detail) = match (&rpc, &self.reading) {
            (Some(call), _) if (200..300).contains(&status) => self.rpc_outcome(call),
            _ => {
                let prefix: &[u8] = match &self.reading {
                    Reading::Plain(c) | Reading::Json(c) => &c.bytes,
                    Reading::Sse { .. } => &[],
                };
                let o = classify_response(status, prefix, &self.shared.rejection);
                let d = (status >= 400).then(|| body_start(status, prefix));
                (o, d)
            }
        };
        self.journal(end, outcome, self.status, detail, rpc);
    }

    /// The JSON-RPC request this exchange carried, if it was one.
    fn rpc_call(&self) -> Option<RpcCall> {
        let copy = self.rpc_request.as_ref()?;
        let c = copy.lock().unwrap_or_else(|p| p.into_inner());
        if c.cut {
            return None;
        }
        #[derive(serde::Deserialize)]
        struct Params {
            name: Option<String>,
        }
        #[derive(serde::Deserialize)]
        struct Rpc {
            jsonrpc: Option<String>,
            id: Option<Value>,
            method: Option<String>,
            // Only `name` is read; the arguments are skipped unread.
            params: Option<Params>,
        }
        let r: Rpc = serde_json::from_slice(&c.bytes).ok()?;
        r.jsonrpc.as_deref().filter(|v| *v == "2.0")?;
        let method = r.method?;
        let tool = match method.as_str() {
            "tools/call" => r.params.and_then(|p| p.name),
            _ => None,
        };
        Some(RpcCall {
            id: r.id,
            method,
            tool,
        })
    }

    fn rpc_outcome(&self, call: &RpcCall) -> (Outcome, Option<String>) {
        let Some(id) = &call.id else {
            // A notification: its 202 is the whole answer.
            return (Outcome::Ok, None);
        };
        let find = |v: &Value| -> Option<Value> {
            match v {
                Value::Array(items) => items.iter().find(|m| m.get("id") == Some(id)).cloned(),
                m if m.get("id") == Some(id) => Some(m.clone()),
                _ => None,
            }
        };
        let (answer, unread) = match &self.reading {
            Reading::Json(c) => (
                serde_json::from_slice::<Value>(&c.bytes)
                    .ok()
                    .and_then(|v| find(&v)),
                c.cut,
            ),
            Reading::Sse { answers, fed, .. } => (
                answers.iter().find_map(find),
                *fed >= RPC_COPY || answers.len() >= 4,
            ),
            Reading::Plain(_) => (None, true),
        };
        match answer {
            Some(a) => crate::load::mcp::classify_reply(&a, &self.shared.rejection),
            // More than witness reads, or not JSON-RPC after all: the HTTP status is all it knows.
            None if unread => (Outcome::Ok, None),
            None => (
                Outcome::Error {
                    error: ErrorKind::Protocol,
                    status: None,
                },
                Some("the response held no answer for this request's id".into()),
            ),
        }
    }

    fn journal(
        &mut self,
        end: Instant,
        outcome: Outcome,
        status: Option<u16>,
        detail: Option<String>,
        rpc: Option<RpcCall>,
    ) {
        if self.done {
            return;
        }
        self.done = true;
        // The call's JSON-RPC id as the client wrote it (none for a notification or plain HTTP).
        let rpc_id = rpc
            .as_ref()
            .and_then(|c| c.id.as_ref())
            .map(|id| id.to_string());
        let group = match rpc {
            Some(call) => Observed {
                via: Via::Http,
                to_client: false,
                method: call.method,
                name: call.tool,
            },
            None => Observed {
                via: Via::Http,
                to_client: false,
                method: self.method.as_str().into(),
                name: Some(std::mem::take(&mut self.path)),
            },
        };
        let group = self.shared.groups.group(group, &self.method);
        let detail = detail.map(|d| scrub(d, &self.credentials));
        if let (Some(mut d), Some(r)) = (self.draft.take(), &self.shared.recorder) {
            d.end = Some(end);
            if let Some((c, _)) = &self.recorded_request {
                let c = std::mem::take(&mut *c.lock().unwrap_or_else(|p| p.into_inner()));
                d.request_bytes = c.total;
                d.request_cut = c.cut;
                d.request_body = c.bytes;
            }
            let c = std::mem::take(&mut self.recorded_response);
            d.response_bytes = self.bytes;
            d.response_cut = c.cut;
            d.response_body = c.bytes;
            if status.is_none() {
                d.status = None;
                d.failure = detail.clone();
            }
            r.entry(*d);
        }
        let (body_bytes, body_cut) = match (status, &self.reading) {
            (None, _) => (None, false),
            (Some(_), Reading::Plain(c) | Reading::Json(c)) => (Some(self.bytes), c.cut),
            (Some(_), Reading::Sse { fed, .. }) => (Some(self.bytes), self.bytes > *fed as u64),
        };
        let clock = self.shared.journal.clock();
        self.shared.journal.emit_at(
            clock.at(end),
            Event::Request {
                id: super::next_exchange_id(),
                group,
                worker: self.worker,
                start_s: clock.at(self.start),
                duration_s: end.duration_since(self.start).as_secs_f64(),
                outcome,
                status,
                scheduled_s: None,
                detail,
                body_bytes,
                body_cut,
                connect_s: None,
                headers_s: None,
                handshake_s: None,
                lag_s: None,
                rpc_id,
            },
        );
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let (outcome, detail) = if self.shared.stopping.load(Ordering::SeqCst) {
            (
                ErrorKind::Interrupted,
                "witness stopped while this exchange was in flight (the server was gone for good)"
                    .to_string(),
            )
        } else if self.status.is_some() {
            (
                ErrorKind::Cancelled,
                format!(
                    "the client closed its connection after {} bytes of the answer",
                    self.bytes
                ),
            )
        } else {
            (
                ErrorKind::Cancelled,
                "the client closed its connection before the server answered".to_string(),
            )
        };
        let status = self.status;
        let rpc = self.rpc_call();
        self.journal(
            Instant::now(),
            Outcome::Error {
                error: outcome,
                status: None,
            },
            status,
            Some(detail),
            rpc,
        );
    }
}

struct RpcCall {
    id: Option<Value>,
    method: String,
    tool: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_headers_are_known_by_name() {
        for n in [
            "Authorization",
            "proxy-authorization",
            "Cookie",
            "X-Api-Key",
            "X-Auth-Token",
            "x-session-id",
        ] {
            assert!(is_credential(n), "{n}");
        }
        for n in ["Content-Type", "Accept", "Host", "User-Agent"] {
            assert!(!is_credential(n), "{n}");
        }
    }

    #[test]
    fn a_detail_is_scrubbed_of_the_request_s_own_credential_values() {
        let mut h = hyper::HeaderMap::new();
        h.insert("authorization", "Bearer sk-live-123456".parse().unwrap());
        h.insert("cookie", "session=abcdef99; theme=dark".parse().unwrap());
        h.insert(
            "content-type",
            "application/json-secretless".parse().unwrap(),
        );
        let creds = credential_values(&h);
        let d = scrub(
            "HTTP 401 'token sk-live-123456 refused for session abcdef99 (Bearer scheme)'".into(),
            &creds,
        );
        assert_eq!(
            d,
            "HTTP 401 'token *** refused for session *** (Bearer scheme)'"
        );
        assert!(credential_values(&hyper::HeaderMap::new()).is_empty());
    }

    #[test]
    fn distinct_paths_beyond_the_bound_share_one_group_per_method() {
        let g = Groups::default();
        let path = |p: String| Observed {
            via: Via::Http,
            to_client: false,
            method: "GET".into(),
            name: Some(p),
        };
        for i in 0..MAX_GROUPS {
            assert_eq!(
                g.group(path(format!("/p{i}")), &Method::GET),
                format!("http GET /p{i}")
            );
        }
        assert_eq!(
            g.group(path("/new".into()), &Method::GET),
            "http GET (other_paths)"
        );
        // One already kept stays itself; a made-up method does not make a group of its own.
        assert_eq!(g.group(path("/p3".into()), &Method::GET), "http GET /p3");
        let odd = Method::from_bytes(b"FROB").unwrap();
        assert_eq!(g.group(path("/x".into()), &odd), "http OTHER (other_paths)");
        assert_eq!(g.0.lock().unwrap().len(), MAX_GROUPS);
    }

    #[test]
    fn a_session_is_gone_only_once_the_process_that_issued_it_is_not_the_one_running() {
        let mut s = Sessions::default();
        s.issued("a", 7);
        // The same id seen again in a later answer keeps its first process.
        s.issued("a", 8);
        assert_eq!(s.gone("a", Some(7)), None);
        assert_eq!(s.gone("a", Some(8)), Some(7));
        assert_eq!(s.gone("a", None), Some(7));
        // An id witness never saw issued is the server's to answer.
        assert_eq!(s.gone("never-issued", Some(8)), None);
        for i in 0..SESSIONS_KEPT {
            s.issued(&format!("s{i}"), 8);
        }
        assert_eq!(s.by_id.len(), SESSIONS_KEPT);
        assert_eq!(s.gone("a", Some(9)), None, "the oldest is forgotten");
    }

    #[test]
    fn a_copy_keeps_at_most_its_cap_and_says_it_was_cut() {
        let mut c = Copy::default();
        c.take(b"abcdef", 4);
        c.take(b"gh", 4);
        assert_eq!(c.bytes, b"abcd");
        assert!(c.cut);
    }
}
