//! MCP as an exchange protocol: a tool call over stdio (the server witness started, its pipes) or
//! streamable HTTP, turned into exactly one [`Outcome`] and one duration, like a plain HTTP request.
//!
//! The wire client is witness's own, not the SDK's: a load generator needs its own request ids
//! (unique per run, so concurrent calls can never take each other's answers), its own limit per call
//! (and a `notifications/cancelled` when it fires), the exact instants of each exchange, and one
//! session per worker opened once and timed apart. The official SDK (`rmcp`) gives the protocol's
//! types: the version to ask for, tool results, error objects and tool listings are read with them.
//!
//! Outcomes: a result → ok; `isError: true` → error `tool_error` (start of the text in the detail);
//! a JSON-RPC error → error `rpc` (code and message); no answer within the limit → timeout; the pipe
//! or stream closed → error `closed`; HTTP 429/503, or the refusal marker in an error's text →
//! rejected.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Uri;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot, Mutex};

use super::client::{Limits, Sent};
use super::outcome::{classify_response, Rejection};
use crate::journal::{ErrorKind, Event, Journal, Outcome, Probe, TimeoutPhase};
use crate::server::process::StdioPipes;

/// How much of a tool's or error's text goes into a failure's detail.
const DETAIL: usize = 200;
/// How long an event stream's end is waited for after its answer (streamable HTTP), so its
/// connection can be kept.
const STREAM_END: Duration = Duration::from_millis(50);
/// A protocol line longer than this (stdio) closes the connection instead of growing without bound.
const MAX_LINE: usize = 64 * 1024 * 1024;

/// What every worker calls, validated.
#[derive(Clone, Debug)]
pub struct ToolCall {
    pub tool: String,
    pub arguments: Value,
    pub limits: Limits,
    pub rejection: Rejection,
    /// `--mcp-protocol`: a 2026-era revision (2026-07-28) spoken without `initialize` or protocol
    /// sessions: `server/discover` to open, the envelope in every request's `_meta`. None: the
    /// `initialize` handshake, at the newest revision that has one (the server may negotiate down).
    pub modern: Option<String>,
    /// Extra headers on every streamable HTTP request (`--header`, a soak kind's headers: an
    /// `Authorization` the server wants). Never journalled.
    pub headers: hyper::HeaderMap,
    /// `--http2`: streamable HTTP over HTTP/2 (ALPN over TLS, prior knowledge in cleartext), one
    /// connection per session.
    pub http2: bool,
}

/// `--mcp-protocol`: None for the `initialize` revisions, the version for the sessionless one.
pub fn revision(flag: Option<&str>) -> Result<Option<String>, String> {
    const SESSIONLESS: &str = "2026-07-28";
    let initialize = rmcp::model::ProtocolVersion::LATEST_WITH_INITIALIZE.to_string();
    match flag {
        None => Ok(None),
        Some(v) if v == SESSIONLESS => Ok(Some(v.to_string())),
        Some(v) if v == initialize => Ok(None),
        Some(v) => Err(format!(
            "--mcp-protocol {v:?} is not a revision witness speaks: give {initialize} (initialize, sessions when the server keeps them) or {SESSIONLESS} (no initialize, no sessions)"
        )),
    }
}

/// The request envelope of the sessionless revisions (SEP-2575): who we are on every request.
fn stamp(mut params: Value, modern: Option<&str>) -> Value {
    let Some(v) = modern else { return params };
    if !params.is_object() {
        params = json!({});
    }
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": v,
        "io.modelcontextprotocol/clientInfo": {"name": "witness", "version": env!("CARGO_PKG_VERSION")},
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    params
}

/// Request ids unique in the whole run (every session, every worker).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// Why an exchange produced no JSON-RPC answer.
#[derive(Debug)]
enum Fail {
    /// witness's own limit fired.
    Timeout,
    /// The pipe or stream closed before the answer.
    Closed(String),
    /// Not the server's answer: an HTTP status outside 2xx, already classified.
    Http(Outcome, u16, String),
    /// Could not connect, or the server sent something that is not MCP.
    Other(ErrorKind, String),
}

/// One JSON-RPC exchange: when it went, when it ended, and the answer (the whole message).
struct Exchange {
    start: Instant,
    end: Instant,
    reply: Result<Value, Fail>,
}

// ---- outcomes (pure) -----------------------------------------------------------------------------

fn clip(s: &str) -> String {
    let s = s.trim();
    match s.char_indices().nth(DETAIL) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

fn names_marker(text: &str, rej: &Rejection) -> bool {
    rej.body_marker
        .as_deref()
        .is_some_and(|m| !m.is_empty() && text.contains(m))
}

/// A `tools/call` answer (the whole JSON-RPC message) as one outcome and its detail.
pub fn classify_reply(msg: &Value, rej: &Rejection) -> (Outcome, Option<String>) {
    if let Some(err) = msg.get("error") {
        let e: Result<rmcp::ErrorData, _> = serde_json::from_value(err.clone());
        let (code, message) = match e {
            Ok(e) => (e.code.0, e.message.to_string()),
            Err(_) => (0, err.to_string()),
        };
        if names_marker(&message, rej) {
            return (
                Outcome::Rejected {
                    status: None,
                    reason: format!(
                        "JSON-RPC error names {}",
                        rej.body_marker.as_deref().unwrap_or("")
                    ),
                },
                Some(format!("JSON-RPC error {code}: {}", clip(&message))),
            );
        }
        return (
            Outcome::Error {
                error: ErrorKind::Rpc,
                status: None,
            },
            Some(format!("JSON-RPC error {code}: {}", clip(&message))),
        );
    }
    let Some(result) = msg.get("result") else {
        return (
            Outcome::Error {
                error: ErrorKind::Protocol,
                status: None,
            },
            Some(format!(
                "an answer with neither result nor error: {}",
                clip(&msg.to_string())
            )),
        );
    };
    let parsed: Result<rmcp::model::CallToolResult, _> = serde_json::from_value(result.clone());
    let (is_error, text) = match parsed {
        Ok(r) => (
            r.is_error == Some(true),
            r.content
                .iter()
                .filter_map(|c| c.as_text().map(|t| t.text.clone()))
                .collect::<Vec<_>>()
                .join(" "),
        ),
        // Not a CallToolResult as the SDK reads it: look for the flag itself.
        Err(_) => (
            result.get("isError").and_then(Value::as_bool) == Some(true),
            result.to_string(),
        ),
    };
    if !is_error {
        return (Outcome::Ok, None);
    }
    if names_marker(&text, rej) {
        return (
            Outcome::Rejected {
                status: None,
                reason: format!(
                    "tool error names {}",
                    rej.body_marker.as_deref().unwrap_or("")
                ),
            },
            Some(format!("tool error: {}", clip(&text))),
        );
    }
    (
        Outcome::Error {
            error: ErrorKind::ToolError,
            status: None,
        },
        Some(format!("tool error: {}", clip(&text))),
    )
}

fn fail_outcome(f: Fail, limits: Limits) -> (Outcome, Option<u16>, Option<String>) {
    match f {
        Fail::Timeout => (
            Outcome::Timeout {
                phase: TimeoutPhase::Request,
                limit_s: limits.whole.as_secs_f64(),
            },
            None,
            Some("no answer within --timeout; witness sent notifications/cancelled".into()),
        ),
        Fail::Closed(why) => (
            Outcome::Error {
                error: ErrorKind::Closed,
                status: None,
            },
            None,
            Some(why),
        ),
        Fail::Http(o, status, why) => (o, Some(status), Some(why)),
        Fail::Other(kind, why) => (
            Outcome::Error {
                error: kind,
                status: None,
            },
            None,
            Some(why),
        ),
    }
}

fn request(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// How a session opens: `initialize`, or `server/discover` for the sessionless revisions.
fn handshake(modern: Option<&str>) -> (&'static str, Value) {
    match modern {
        Some(_) => ("server/discover", stamp(json!({}), modern)),
        None => ("initialize", initialize_params()),
    }
}

fn initialize_params() -> Value {
    json!({
        "protocolVersion": rmcp::model::ProtocolVersion::LATEST_WITH_INITIALIZE,
        "capabilities": {},
        "clientInfo": {"name": "witness", "version": env!("CARGO_PKG_VERSION")},
    })
}

// ---- stdio ---------------------------------------------------------------------------------------

type Pending = std::sync::Mutex<HashMap<u64, oneshot::Sender<Value>>>;

/// One connection to one server process over its pipes. Calls are multiplexed by id: level n is n
/// calls outstanding on this one connection, as one agent with n calls in flight.
pub struct StdioConn {
    pid: u32,
    stdin: Mutex<tokio::net::unix::pipe::Sender>,
    pending: Arc<Pending>,
    closed: Arc<AtomicBool>,
}

impl StdioConn {
    fn start(p: StdioPipes) -> std::io::Result<Arc<Self>> {
        let pending: Arc<Pending> = Arc::default();
        let closed = Arc::new(AtomicBool::new(false));
        let stdout = tokio::net::unix::pipe::Receiver::from_owned_fd(p.stdout)?;
        let conn = Arc::new(Self {
            pid: p.pid,
            stdin: Mutex::new(tokio::net::unix::pipe::Sender::from_owned_fd(p.stdin)?),
            pending: pending.clone(),
            closed: closed.clone(),
        });
        let weak = Arc::downgrade(&conn);
        tokio::spawn(async move {
            let mut r = BufReader::new(stdout);
            let mut line = Vec::new();
            loop {
                line.clear();
                match r.read_until(b'\n', &mut line).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) if line.len() > MAX_LINE => break,
                    Ok(_) => {}
                }
                let Ok(msg) = serde_json::from_slice::<Value>(&line) else {
                    continue; // not a protocol message (a stray print): not ours to answer
                };
                let is_answer = msg.get("result").is_some() || msg.get("error").is_some();
                match (msg.get("id").and_then(Value::as_u64), is_answer) {
                    (Some(id), true) => {
                        let tx = pending.lock().ok().and_then(|mut p| p.remove(&id));
                        if let Some(tx) = tx {
                            let _ = tx.send(msg);
                        }
                    }
                    // The server asks something of the client (a ping): answer it, so it never
                    // waits on witness.
                    _ if msg.get("method").is_some() && msg.get("id").is_some() => {
                        let Some(conn) = weak.upgrade() else { break };
                        let reply = if msg["method"] == "ping" {
                            json!({"jsonrpc": "2.0", "id": msg["id"], "result": {}})
                        } else {
                            json!({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "witness does not serve this method"}})
                        };
                        let _ = conn.write(&reply).await;
                    }
                    _ => {}
                }
            }
            closed.store(true, Ordering::SeqCst);
            // Every call still waiting learns the pipe closed.
            if let Ok(mut p) = pending.lock() {
                p.clear();
            }
        });
        Ok(conn)
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    async fn write(&self, msg: &Value) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(msg).map_err(std::io::Error::other)?;
        line.push(b'\n');
        let mut w = self.stdin.lock().await;
        w.write_all(&line).await?;
        w.flush().await
    }

    async fn notify(&self, method: &str, params: Value) {
        let _ = self
            .write(&json!({"jsonrpc": "2.0", "method": method, "params": params}))
            .await;
    }

    async fn exchange(&self, method: &str, params: Value, limit: Duration) -> Exchange {
        let id = next_id();
        let (tx, rx) = oneshot::channel();
        let start = Instant::now();
        if self.is_closed() {
            return Exchange {
                start,
                end: Instant::now(),
                reply: Err(Fail::Closed(self.closed_text())),
            };
        }
        if let Ok(mut p) = self.pending.lock() {
            p.insert(id, tx);
        }
        let sent = self.write(&request(id, method, params)).await;
        let reply = match sent {
            Err(e) => {
                self.forget(id);
                Err(Fail::Closed(format!(
                    "writing to pid {}'s stdin failed: {e}",
                    self.pid
                )))
            }
            Ok(()) => match tokio::time::timeout(limit.saturating_sub(start.elapsed()), rx).await {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(_)) => Err(Fail::Closed(self.closed_text())),
                Err(_) => {
                    self.forget(id);
                    Err(Fail::Timeout)
                }
            },
        };
        let end = Instant::now();
        if matches!(reply, Err(Fail::Timeout)) {
            self.notify("notifications/cancelled", cancel_params(id, limit))
                .await;
        }
        Exchange { start, end, reply }
    }

    fn forget(&self, id: u64) {
        if let Ok(mut p) = self.pending.lock() {
            p.remove(&id);
        }
    }

    fn closed_text(&self) -> String {
        format!(
            "pid {}'s stdout closed before the answer (the server exited?)",
            self.pid
        )
    }
}

fn cancel_params(id: u64, limit: Duration) -> Value {
    json!({"requestId": id, "reason": format!("witness: no answer within --timeout {}", crate::journal::secs(limit.as_secs_f64()))})
}

/// The stdio server's connections over its lifetime: each spawn (a restart) hands over new pipes,
/// and the next caller opens a new session on them.
pub struct StdioLink {
    pipes: Mutex<mpsc::UnboundedReceiver<StdioPipes>>,
    current: Mutex<Option<Opening>>,
    journal: Journal,
    modern: Option<String>,
    /// `witness replay`: the recorded `initialize` params, sent in place of witness's own.
    initialize: std::sync::OnceLock<Value>,
    /// How long a new process is given to answer the handshake (the run's ready timeout), whatever
    /// any one caller's own limit: a Python server may take seconds to import, and a caller that
    /// gives up (a 2 s health ping) must not close the pipes of a server still starting.
    handshake: Duration,
}

/// A session being opened, or open, on one process's pipes.
#[derive(Clone)]
struct Opening {
    conn: Arc<StdioConn>,
    method: &'static str,
    asked: Instant,
    /// `None` while the handshake is asked; then whether it was answered.
    done: tokio::sync::watch::Receiver<Option<bool>>,
}

impl Opening {
    fn failed(&self) -> bool {
        *self.done.borrow() == Some(false)
    }
}

impl StdioLink {
    /// `modern`: the sessionless revision to speak (see [`ToolCall::modern`]); `handshake`: how long
    /// each new process is given to answer its session's handshake.
    pub fn new(
        pipes: mpsc::UnboundedReceiver<StdioPipes>,
        journal: Journal,
        modern: Option<String>,
        handshake: Duration,
    ) -> Arc<Self> {
        Arc::new(Self {
            pipes: Mutex::new(pipes),
            current: Mutex::new(None),
            journal,
            modern,
            initialize: std::sync::OnceLock::new(),
            handshake,
        })
    }

    /// Opens every session with these `initialize` params (a recorded session's, as recorded)
    /// instead of witness's own.
    pub fn initialize_as(&self, params: Value) {
        let _ = self.initialize.set(params);
    }

    /// Asks a new process for its session, on a task of its own bounded by `handshake`: the
    /// callers only wait for its answer, each up to its own limit.
    fn open(&self, conn: Arc<StdioConn>) -> Opening {
        let modern = self.modern.clone();
        let (method, params) = match (modern.as_deref(), self.initialize.get()) {
            (None, Some(recorded)) => ("initialize", recorded.clone()),
            _ => handshake(modern.as_deref()),
        };
        let (tx, done) = tokio::sync::watch::channel(None);
        let (c, journal, limit) = (conn.clone(), self.journal.clone(), self.handshake);
        tokio::spawn(async move {
            let ex = c.exchange(method, params, limit).await;
            let ok = session_journal(&journal, 0, "stdio", &ex, false, modern.as_deref());
            if ok && modern.is_none() {
                c.notify("notifications/initialized", json!({})).await;
            }
            let _ = tx.send(Some(ok));
        });
        Opening {
            conn,
            method,
            asked: Instant::now(),
            done,
        }
    }

    /// The live connection, opening a session on the newest pipes when the last one closed. Waits
    /// up to `limit` for a process (one restarting gets its backoff) and its session.
    async fn conn(&self, limit: Duration) -> Result<Arc<StdioConn>, Fail> {
        let deadline = tokio::time::Instant::now() + limit;
        // Another caller may hold the link while it waits (up to its own, longer limit) for a
        // restarted process: that wait counts against this caller's limit too, so a health ping
        // answers within its own (a dead server is unhealthy now, not when a call gives up).
        let none = || {
            Fail::Closed(format!(
                "no running server to talk to within {}",
                crate::journal::secs(limit.as_secs_f64())
            ))
        };
        loop {
            let opening = {
                let mut cur = tokio::time::timeout_at(deadline, self.current.lock())
                    .await
                    .map_err(|_| none())?;
                match cur.as_ref() {
                    Some(o) if !o.conn.is_closed() && !o.failed() => o.clone(),
                    _ => {
                        // A closed or refused session lets go of its pipes; the newest process's
                        // come next (older pipes whose process already died are skipped).
                        *cur = None;
                        let mut rx = tokio::time::timeout_at(deadline, self.pipes.lock())
                            .await
                            .map_err(|_| none())?;
                        let p = match tokio::time::timeout_at(deadline, rx.recv()).await {
                            Ok(Some(p)) => p,
                            Ok(None) => {
                                return Err(Fail::Closed("the server is gone for good".into()))
                            }
                            Err(_) => return Err(none()),
                        };
                        let pid = p.pid;
                        let conn = StdioConn::start(p).map_err(|e| {
                            Fail::Closed(format!(
                                "could not read the pipes of server pid {pid}: {e}"
                            ))
                        })?;
                        cur.insert(self.open(conn)).clone()
                    }
                }
            };
            let mut done = opening.done.clone();
            let answered = tokio::time::timeout_at(deadline, done.wait_for(Option::is_some))
                .await
                .map(|r| r.map(|v| *v == Some(true)));
            match answered {
                Ok(Ok(true)) => return Ok(opening.conn),
                // Refused or unanswered within the handshake's own limit: the next process's.
                Ok(_) if tokio::time::Instant::now() < deadline => continue,
                Ok(_) => {
                    return Err(Fail::Closed(format!(
                        "server pid {} did not answer {} within {}",
                        opening.conn.pid,
                        opening.method,
                        crate::journal::secs(self.handshake.as_secs_f64())
                    )))
                }
                Err(_) => {
                    return Err(Fail::Closed(format!(
                        "server pid {} had not answered {} yet ({} after it was asked; witness waits up to {})",
                        opening.conn.pid,
                        opening.method,
                        crate::journal::secs(opening.asked.elapsed().as_secs_f64()),
                        crate::journal::secs(self.handshake.as_secs_f64())
                    )))
                }
            }
        }
    }
}

/// Journals a session's handshake; true when it succeeded.
fn session_journal(
    journal: &Journal,
    worker: u32,
    transport: &str,
    ex: &Exchange,
    sid: bool,
    modern: Option<&str>,
) -> bool {
    let clock = journal.clock();
    let (ok, version, detail) = match &ex.reply {
        // The version the server answered with, never the one witness asked for: `initialize`'s
        // `protocolVersion`, or the asked revision when `server/discover` lists it among its
        // `supportedVersions`.
        Ok(v) if v.get("result").is_some() => (
            true,
            match modern {
                Some(m) => v["result"]["supportedVersions"]
                    .as_array()
                    .and_then(|a| a.iter().filter_map(|x| x.as_str()).find(|x| *x == m))
                    .map(String::from),
                None => v["result"]["protocolVersion"].as_str().map(String::from),
            },
            None,
        ),
        Ok(v) => (false, None, Some(clip(&v.to_string()))),
        Err(f) => (false, None, Some(format!("{f:?}"))),
    };
    journal.emit_at(
        clock.at(ex.end),
        Event::McpSession {
            worker,
            transport: transport.into(),
            protocol_version: version,
            session: sid,
            duration_s: ex.end.duration_since(ex.start).as_secs_f64(),
            ok,
            detail,
        },
    );
    ok
}

// ---- streamable HTTP -----------------------------------------------------------------------------

/// A session's own HTTP/1 connection. Not a pool: a pooled client hands a connection back on
/// another task after its response ends, so a call sent at once found none idle and opened a second
/// (witness counted up to two per worker).
struct OwnConn {
    sender: Sender,
    driver: tokio::task::JoinHandle<()>,
}

/// A session's connection speaks HTTP/1.1, or HTTP/2 (`--http2`).
enum Sender {
    H1(hyper::client::conn::http1::SendRequest<Full<Bytes>>),
    H2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

type Tried = Result<
    hyper::Response<hyper::body::Incoming>,
    hyper::client::conn::TrySendError<hyper::Request<Full<Bytes>>>,
>;

impl Sender {
    async fn ready(&mut self) -> hyper::Result<()> {
        match self {
            Sender::H1(s) => s.ready().await,
            Sender::H2(s) => s.ready().await,
        }
    }

    async fn try_send(&mut self, req: hyper::Request<Full<Bytes>>) -> Tried {
        match self {
            Sender::H1(s) => s.try_send_request(req).await,
            Sender::H2(s) => s.try_send_request(req).await,
        }
    }
}

impl Drop for OwnConn {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// One streamable HTTP session: its own connection, its `Mcp-Session-Id` (when the server keeps
/// sessions) and the negotiated revision, sent as `MCP-Protocol-Version` on every later request.
pub struct HttpSession {
    connector: super::client::Counting,
    conn: Mutex<Option<OwnConn>>,
    url: Uri,
    session_id: Option<String>,
    version: Option<String>,
    limits: Limits,
    rejection: Rejection,
    /// The sessionless revision, when spoken: also the `MCP-Protocol-Version` from the start.
    modern: Option<String>,
    headers: hyper::HeaderMap,
    /// Its handshake was answered (a failed one is tried again by the caller).
    opened: bool,
    /// HTTP/2 (`--http2`).
    h2: bool,
}

impl HttpSession {
    fn new(url: Uri, call: &ToolCall) -> Self {
        let (limits, rejection, modern) =
            (call.limits, call.rejection.clone(), call.modern.clone());
        Self {
            connector: if call.http2 {
                super::client::counted_h2(limits.connect)
            } else {
                super::client::counted(limits.connect)
            },
            h2: call.http2,
            conn: Mutex::new(None),
            url,
            session_id: None,
            version: modern.clone(),
            limits,
            rejection,
            modern,
            headers: call.headers.clone(),
            opened: false,
        }
    }

    fn post(&self, msg: &Value) -> Result<hyper::Request<Full<Bytes>>, Fail> {
        let mut b = hyper::Request::post(self.url.clone())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        // The sessionless revisions route by headers that must match the body.
        if self.modern.is_some() {
            if let Some(m) = msg["method"].as_str() {
                b = b.header("mcp-method", m);
            }
            if let Some(n) = msg["params"]["name"].as_str().filter(|n| n.is_ascii()) {
                b = b.header("mcp-name", n);
            }
        }
        if let Some(s) = &self.session_id {
            b = b.header("mcp-session-id", s);
        }
        if let Some(v) = &self.version {
            b = b.header("mcp-protocol-version", v);
        }
        if let Some(h) = b.headers_mut() {
            for (k, v) in &self.headers {
                h.append(k, v.clone());
            }
        }
        let body = serde_json::to_vec(msg).unwrap_or_default();
        b.body(Full::new(Bytes::from(body))).map_err(|e| {
            Fail::Other(
                ErrorKind::Local,
                format!("could not build the request: {e}"),
            )
        })
    }

    /// Sends one request on the session's connection (a new one when it is closed or broken; a
    /// request the server's closing keep-alive connection never took is sent once more on a new
    /// one, as a pool would).
    async fn send(
        &self,
        mut req: hyper::Request<Full<Bytes>>,
    ) -> Result<hyper::Response<hyper::body::Incoming>, Fail> {
        use tower_service::Service;
        let text = |e: &(dyn std::error::Error + 'static)| super::client::chain(e);
        if self.h2 {
            // HTTP/2 carries the scheme and authority as pseudo-headers: the whole URI, no Host.
            *req.uri_mut() = self.url.clone();
            req.headers_mut().remove(hyper::header::HOST);
        } else {
            super::client::origin_form(&mut req, &self.url);
        }
        let mut slot = self.conn.lock().await;
        let mut retried = false;
        loop {
            let reused = match slot.as_mut() {
                Some(c) => c.sender.ready().await.is_ok(),
                None => false,
            };
            if !reused {
                *slot = None;
                let io = self
                    .connector
                    .clone()
                    .call(self.url.clone())
                    .await
                    .map_err(|e| {
                        let kind = if super::tls::is_tls(&*e) {
                            ErrorKind::Tls
                        } else {
                            ErrorKind::Connect
                        };
                        Fail::Other(kind, text(&*e))
                    })?;
                let (mut sender, driver) = if self.h2 {
                    if self.url.scheme_str() == Some("https") && !io.h2() {
                        return Err(Fail::Other(
                            ErrorKind::Protocol,
                            "the server did not agree to HTTP/2 by ALPN (it answers HTTP/1.1 only): run without --http2".into(),
                        ));
                    }
                    let (sender, conn) = hyper::client::conn::http2::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .handshake(io)
                    .await
                    .map_err(|e| Fail::Closed(text(&e)))?;
                    let driver = tokio::spawn(async move {
                        let _ = conn.await;
                    });
                    (Sender::H2(sender), driver)
                } else {
                    let (sender, conn) = hyper::client::conn::http1::handshake(io)
                        .await
                        .map_err(|e| Fail::Closed(text(&e)))?;
                    let driver = tokio::spawn(async move {
                        let _ = conn.await;
                    });
                    (Sender::H1(sender), driver)
                };
                sender.ready().await.map_err(|e| Fail::Closed(text(&e)))?;
                *slot = Some(OwnConn { sender, driver });
            }
            let c = slot.as_mut().expect("connected");
            match c.sender.try_send(req).await {
                Ok(resp) => return Ok(resp),
                Err(mut e) => {
                    *slot = None;
                    match e.take_message() {
                        Some(back) if reused && !retried => {
                            retried = true;
                            req = back;
                        }
                        _ => return Err(Fail::Closed(text(e.error()))),
                    }
                }
            }
        }
    }

    async fn notify(&self, method: &str, params: Value) {
        let msg = json!({"jsonrpc": "2.0", "method": method, "params": params});
        if let Ok(req) = self.post(&msg) {
            let work = async {
                if let Ok(resp) = self.send(req).await {
                    let _ = resp.into_body().collect().await;
                }
            };
            let _ =
                tokio::time::timeout(self.limits.connect.max(Duration::from_secs(1)), work).await;
        }
    }

    async fn exchange(&mut self, method: &str, params: Value, limit: Duration) -> Exchange {
        let id = next_id();
        let start = Instant::now();
        let params = stamp(params, self.modern.as_deref());
        let req = match self.post(&request(id, method, params)) {
            Ok(r) => r,
            Err(f) => {
                return Exchange {
                    start,
                    end: Instant::now(),
                    reply: Err(f),
                }
            }
        };
        let res = tokio::time::timeout(limit, self.answer(req, id)).await;
        let end = Instant::now();
        let reply = match res {
            Err(_) => Err(Fail::Timeout),
            Ok(Ok((v, sid, rest))) => {
                // The stream's end usually follows its answer at once: read it (after the clock
                // stopped), so the connection is kept for the next call instead of a second one
                // opened while this one closes.
                if let Some(mut rest) = rest {
                    let _ = tokio::time::timeout(STREAM_END, async {
                        while let Some(Ok(_)) = rest.frame().await {}
                    })
                    .await;
                }
                if method == "initialize" && self.modern.is_none() {
                    self.session_id = sid;
                    self.version = v["result"]["protocolVersion"].as_str().map(String::from);
                }
                Ok(v)
            }
            Ok(Err(f)) => Err(f),
        };
        if matches!(reply, Err(Fail::Timeout)) {
            self.notify("notifications/cancelled", cancel_params(id, limit))
                .await;
        }
        Exchange { start, end, reply }
    }

    /// Sends the request and reads the response (JSON, or an SSE stream read up to the answer for
    /// this id; other messages on the stream are not this call's).
    async fn answer(
        &self,
        req: hyper::Request<Full<Bytes>>,
        id: u64,
    ) -> Result<(Value, Option<String>, Option<hyper::body::Incoming>), Fail> {
        let resp = self.send(req).await?;
        let status = resp.status().as_u16();
        let sid = resp
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(String::from);
        let sse = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|c| c.starts_with("text/event-stream"));
        let mut body = resp.into_body();
        if !(200..300).contains(&status) {
            let bytes = body
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let o = classify_response(status, &bytes, &self.rejection);
            let o = if o.is_ok() {
                Outcome::Error {
                    error: ErrorKind::Protocol,
                    status: Some(status),
                }
            } else {
                o
            };
            return Err(Fail::Http(
                o,
                status,
                format!("HTTP {status}: {}", clip(&String::from_utf8_lossy(&bytes))),
            ));
        }
        if !sse {
            let bytes = body
                .collect()
                .await
                .map_err(|e| Fail::Closed(format!("the response body failed: {e}")))?
                .to_bytes();
            let v: Value = serde_json::from_slice(&bytes).map_err(|_| {
                Fail::Other(
                    ErrorKind::Protocol,
                    format!(
                        "HTTP {status} with a body that is not JSON-RPC: {}",
                        clip(&String::from_utf8_lossy(&bytes))
                    ),
                )
            })?;
            return find_answer(v, id).map(|v| (v, sid, None)).ok_or_else(|| {
                Fail::Other(
                    ErrorKind::Protocol,
                    "the response held no answer for this request's id".into(),
                )
            });
        }
        let mut sse_buf = SseBuffer::default();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| Fail::Closed(format!("the event stream failed: {e}")))?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            for msg in sse_buf.push(&data) {
                if let Some(v) = find_answer(msg, id) {
                    return Ok((v, sid, Some(body)));
                }
            }
        }
        Err(Fail::Closed(
            "the event stream ended before the answer for this request's id".into(),
        ))
    }
}

/// The answer to `id` in a message or a batch.
fn find_answer(v: Value, id: u64) -> Option<Value> {
    match v {
        Value::Array(items) => items.into_iter().find_map(|m| find_answer(m, id)),
        m if m.get("id").and_then(Value::as_u64) == Some(id)
            && (m.get("result").is_some() || m.get("error").is_some()) =>
        {
            Some(m)
        }
        _ => None,
    }
}

/// Server-sent events, split as they arrive: each event's `data:` lines joined, parsed as JSON.
#[derive(Default)]
pub(crate) struct SseBuffer {
    buf: Vec<u8>,
}

impl SseBuffer {
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Vec<Value> {
        self.buf.extend_from_slice(chunk);
        let mut out = Vec::new();
        loop {
            let text = &self.buf;
            let end = find_blank(text);
            let Some((at, len)) = end else { break };
            let event: Vec<u8> = self.buf.drain(..at + len).collect();
            let event = String::from_utf8_lossy(&event[..at]);
            let data: Vec<&str> = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            if data.is_empty() {
                continue;
            }
            if let Ok(v) = serde_json::from_str(&data.join("\n")) {
                out.push(v);
            }
        }
        out
    }
}

/// Where an event ends: the first blank line (`\n\n` or `\r\n\r\n`), and its length.
fn find_blank(b: &[u8]) -> Option<(usize, usize)> {
    let lf = b.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2));
    let crlf = b.windows(4).position(|w| w == b"\r\n\r\n").map(|i| (i, 4));
    match (lf, crlf) {
        (Some(a), Some(c)) => Some(if a.0 <= c.0 { a } else { c }),
        (a, c) => a.or(c),
    }
}

// ---- sessions, whatever the transport ------------------------------------------------------------

/// Where the MCP server is.
#[derive(Clone)]
pub enum McpTarget {
    Stdio(Arc<StdioLink>),
    Http(Uri),
}

impl std::fmt::Debug for McpTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            McpTarget::Stdio(_) => f.write_str("Stdio"),
            McpTarget::Http(u) => write!(f, "Http({u})"),
        }
    }
}

impl McpTarget {
    pub fn transport(&self) -> &'static str {
        match self {
            McpTarget::Stdio(_) => "stdio",
            McpTarget::Http(_) => "http",
        }
    }

    /// A worker's session, opened once (the handshake journalled apart). Over stdio every worker
    /// shares the process's one connection; over HTTP each worker is its own client.
    /// `journal`: where the handshake goes (none for the health pinger's own session, which
    /// retries while a server starts).
    pub async fn open(&self, worker: u32, call: &ToolCall, journal: Option<&Journal>) -> Session {
        match self {
            McpTarget::Stdio(link) => Session::Stdio(link.clone()),
            McpTarget::Http(url) => {
                let modern = call.modern.as_deref();
                let mut s = HttpSession::new(url.clone(), call);
                let (method, params) = handshake(modern);
                // The handshake's envelope is stamped by the session itself.
                let params = if modern.is_some() { json!({}) } else { params };
                let ex = s.exchange(method, params, call.limits.whole).await;
                let ok = match journal {
                    Some(j) => {
                        session_journal(j, worker, "http", &ex, s.session_id.is_some(), modern)
                    }
                    None => matches!(&ex.reply, Ok(v) if v.get("result").is_some()),
                };
                if ok && modern.is_none() {
                    s.notify("notifications/initialized", json!({})).await;
                }
                s.opened = ok;
                Session::Http(Box::new(s))
            }
        }
    }
}

/// One client's session.
pub enum Session {
    Stdio(Arc<StdioLink>),
    Http(Box<HttpSession>),
}

impl Session {
    /// Whether the session's handshake was answered (over stdio the link opens its own, always).
    pub fn opened(&self) -> bool {
        match self {
            Session::Stdio(_) => true,
            Session::Http(s) => s.opened,
        }
    }

    async fn exchange(&mut self, method: &str, params: Value, limit: Duration) -> Exchange {
        match self {
            Session::Stdio(link) => {
                let start = Instant::now();
                match link.conn(limit).await {
                    // Never the harness's wait: the call's clock starts when it is written to the
                    // live process, not while witness waited for a restarted one and opened its
                    // session (that wait is bounded by the limit, and the handshake journalled
                    // apart). The call then has its own whole limit.
                    Ok(c) => {
                        let params = stamp(params, link.modern.as_deref());
                        c.exchange(method, params, limit).await
                    }
                    Err(f) => Exchange {
                        start,
                        end: Instant::now(),
                        reply: Err(f),
                    },
                }
            }
            Session::Http(s) => s.exchange(method, params, limit).await,
        }
    }

    /// Any request (`witness replay` sends what was recorded), as one outcome and one duration,
    /// with the whole answer when one came.
    pub async fn request(
        &mut self,
        method: &str,
        params: Value,
        limits: Limits,
        rej: &super::outcome::Rejection,
    ) -> (Sent, Option<Value>) {
        let ex = self.exchange(method, params, limits.whole).await;
        let (outcome, status, detail, reply) = match ex.reply {
            Ok(v) => {
                let (o, d) = classify_reply(&v, rej);
                (o, None, d, Some(v))
            }
            Err(f) => {
                let (o, s, d) = fail_outcome(f, limits);
                (o, s, d, None)
            }
        };
        let sent = Sent::whole(ex.start, ex.end, outcome, status, detail);
        (sent, reply)
    }

    /// One `tools/call`, as one outcome and one duration.
    pub async fn call_tool(&mut self, call: &ToolCall) -> Sent {
        let params = json!({"name": call.tool, "arguments": call.arguments});
        let ex = self.exchange("tools/call", params, call.limits.whole).await;
        let (outcome, status, detail) = match ex.reply {
            Ok(v) => {
                let (o, d) = classify_reply(&v, &call.rejection);
                (o, None, d)
            }
            Err(f) => fail_outcome(f, call.limits),
        };
        Sent::whole(ex.start, ex.end, outcome, status, detail)
    }

    /// MCP's `ping` as a health probe: an answer is reported as 200, anything else by its name.
    /// The sessionless revision has no `ping`: `server/discover` is its cheap question.
    pub async fn ping(&mut self, limit: Duration) -> Probe {
        self.ping_with_reason(limit).await.0
    }

    /// [`Session::ping`], with why a failed one failed, in words ("pid 7's stdout closed before
    /// the answer (the server exited?)").
    pub async fn ping_with_reason(&mut self, limit: Duration) -> (Probe, Option<String>) {
        let modern = match self {
            Session::Stdio(link) => link.modern.is_some(),
            Session::Http(s) => s.modern.is_some(),
        };
        let method = if modern { "server/discover" } else { "ping" };
        let ex = self.exchange(method, json!({}), limit).await;
        let duration_s = ex.end.duration_since(ex.start).as_secs_f64();
        let name = |n: &str| Some(n.to_string());
        let (status, error, reason) = match ex.reply {
            Ok(v) if v.get("result").is_some() => (Some(200), None, None),
            Ok(v) => (
                None,
                name("PingError"),
                Some(format!(
                    "{method} answered without a result: {}",
                    clip(&v.get("error").unwrap_or(&v).to_string())
                )),
            ),
            Err(Fail::Timeout) => (
                None,
                name("TimeoutError"),
                Some(format!(
                    "no answer to {method} within {}",
                    crate::journal::secs(limit.as_secs_f64())
                )),
            ),
            Err(Fail::Closed(why)) => (None, name("Closed"), Some(why)),
            Err(Fail::Http(_, s, why)) => (Some(s), None, Some(why)),
            Err(Fail::Other(ErrorKind::Connect, why)) => (None, name("ConnectError"), Some(why)),
            Err(Fail::Other(_, why)) => (None, name("ProtocolError"), Some(why)),
        };
        let p = Probe {
            status,
            error,
            duration_s,
            connected: false,
        };
        (p, reason)
    }

    /// `tools/list`, every page.
    pub async fn list_tools(&mut self, limit: Duration) -> anyhow::Result<Vec<Value>> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let params = match &cursor {
                Some(c) => json!({"cursor": c}),
                None => json!({}),
            };
            let ex = self.exchange("tools/list", params, limit).await;
            let v = match ex.reply {
                Ok(v) => v,
                Err(f) => anyhow::bail!(
                    "tools/list failed: {}",
                    fail_outcome(
                        f,
                        Limits {
                            connect: limit,
                            whole: limit,
                            max_body: crate::load::client::DEFAULT_MAX_BODY,
                        }
                    )
                    .2
                    .unwrap_or_default()
                ),
            };
            if let Some(e) = v.get("error") {
                anyhow::bail!("tools/list answered a JSON-RPC error: {e}");
            }
            let page: rmcp::model::ListToolsResult = serde_json::from_value(v["result"].clone())
                .map_err(|e| {
                    anyhow::anyhow!("tools/list answered something that is not a tool list: {e}")
                })?;
            tools.extend(
                page.tools
                    .iter()
                    .map(|t| serde_json::to_value(t).unwrap_or_default()),
            );
            match page.next_cursor {
                Some(c) if !c.is_empty() => cursor = Some(c.to_string()),
                _ => return Ok(tools),
            }
        }
    }
}

/// Health by MCP `ping`: over the stdio connection (it shares the pipe with the calls), or over its
/// own HTTP session (never one of the load's).
pub struct Pinger {
    session: Mutex<Option<Session>>,
    target: McpTarget,
    call: ToolCall,
    limit: Duration,
}

impl Pinger {
    pub fn new(target: McpTarget, call: ToolCall, limit: Duration) -> Self {
        Self {
            session: Mutex::new(None),
            target,
            call,
            limit,
        }
    }

    pub fn describe(&self) -> String {
        match &self.target {
            McpTarget::Stdio(_) => "mcp ping (stdio)".into(),
            McpTarget::Http(u) => format!("mcp ping {u}"),
        }
    }

    pub async fn probe(&self) -> Probe {
        self.probe_with_reason().await.0
    }

    /// Lets go of the ping's own HTTP session and its connection (before a level: witness is never
    /// the load); the next ping opens a new one. Over stdio the pipe is the calls' too: nothing to close.
    pub async fn close(&self) {
        if !matches!(self.target, McpTarget::Http(_)) {
            return;
        }
        let held = super::client::held::now();
        if self.session.lock().await.take().is_none() || held == 0 {
            return;
        }
        // The session's pooled connection closes on its own task: wait (briefly) until it has.
        let deadline = Instant::now() + Duration::from_millis(200);
        while super::client::held::now() >= held && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// [`Pinger::probe`], with why a failed ping failed, in words.
    pub async fn probe_with_reason(&self) -> (Probe, Option<String>) {
        let mut s = self.session.lock().await;
        let sess = match s.take() {
            Some(sess) => s.insert(sess),
            None => {
                let mut call = self.call.clone();
                call.limits.whole = self.limit;
                s.insert(self.target.open(u32::MAX, &call, None).await)
            }
        };
        let (p, why) = sess.ping_with_reason(self.limit).await;
        // An HTTP session that failed is opened afresh next time (the server may have restarted).
        if !p.healthy() && matches!(self.target, McpTarget::Http(_)) {
            *s = None;
        }
        (p, why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rej() -> Rejection {
        Rejection::default()
    }

    #[test]
    fn a_result_is_ok_and_is_error_is_a_tool_error_with_its_text() {
        let ok =
            json!({"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"fine"}]}});
        assert_eq!(classify_reply(&ok, &rej()).0, Outcome::Ok);
        let bad = json!({"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"backend down"}],"isError":true}});
        let (o, d) = classify_reply(&bad, &rej());
        assert_eq!(
            o,
            Outcome::Error {
                error: ErrorKind::ToolError,
                status: None
            }
        );
        assert_eq!(d.as_deref(), Some("tool error: backend down"));
    }

    #[test]
    fn a_json_rpc_error_is_rpc_with_code_and_message_and_the_marker_is_rejected() {
        let e =
            json!({"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found"}});
        let (o, d) = classify_reply(&e, &rej());
        assert_eq!(
            o,
            Outcome::Error {
                error: ErrorKind::Rpc,
                status: None
            }
        );
        assert_eq!(
            d.as_deref(),
            Some("JSON-RPC error -32601: Method not found")
        );
        let q = json!({"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"QUEUE_FULL: 9 in flight"}});
        assert_eq!(classify_reply(&q, &rej()).0.label(), "rejected");
    }

    #[test]
    fn sse_events_split_across_chunks_are_read_whole_and_the_answer_found_by_id() {
        let mut b = SseBuffer::default();
        assert!(b
            .push(b"event: message\ndata: {\"jsonrpc\":\"2.0\",")
            .is_empty());
        let got = b.push(b"\"id\":7,\"result\":{}}\n\ndata: {\"id\":8,\"result\":{}}\r\n\r\n");
        assert_eq!(got.len(), 2);
        assert!(find_answer(got[0].clone(), 7).is_some());
        assert!(find_answer(got[1].clone(), 7).is_none());
        let batch =
            json!([{"id": 3, "result": {}}, {"id": 4, "error": {"code": 1, "message": "x"}}]);
        assert_eq!(find_answer(batch, 4).unwrap()["id"], 4);
    }

    #[test]
    fn the_sessionless_revision_stamps_every_request_and_others_are_named() {
        assert_eq!(revision(None), Ok(None));
        assert_eq!(revision(Some("2025-11-25")), Ok(None));
        assert_eq!(revision(Some("2026-07-28")), Ok(Some("2026-07-28".into())));
        assert!(revision(Some("2027-01-01"))
            .unwrap_err()
            .contains("2026-07-28"));
        let p = stamp(json!({"name": "search"}), Some("2026-07-28"));
        assert_eq!(p["name"], "search");
        assert_eq!(
            p["_meta"]["io.modelcontextprotocol/protocolVersion"],
            "2026-07-28"
        );
        assert_eq!(stamp(json!({}), None), json!({}));
    }

    #[test]
    fn ids_are_unique() {
        let a = next_id();
        let b = next_id();
        assert_ne!(a, b);
    }
}
