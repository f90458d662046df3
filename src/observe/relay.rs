//! The stdio relay: an MCP client launched `witness wrap -- SERVER`, so witness stands between the
//! client's pipes and the server's. Every byte the client writes goes to the server's stdin and every
//! byte the server writes on stdout goes to the client, unchanged, in order, chunk by chunk as it
//! arrives (never held back for a newline); EOF from the client closes the server's stdin.
//!
//! Relay first, read second: each chunk is copied into a bounded line reader per direction, and each
//! complete line is read as newline-delimited JSON-RPC (a batch array too). Requests, their answers
//! and the notifications that matter (`notifications/cancelled`, `notifications/progress`) become
//! one exchange record per call, in the same compact form `load` writes, with one outcome by the
//! rules `load --mcp` uses: the start is when the request's last byte was read from the client (or,
//! when no server ran then, when it reached the restarted one: the harness's wait is never the
//! server's latency), the end when the answer's last byte was read from the server. A call still in
//! flight when the server's stdout closes is journalled then as `connection closed`; one the client
//! cancels is `cancelled`. `initialize` is journalled apart, as load does. Requests the server sends
//! the client (sampling, elicitation, roots) are kept too, named as going the other way.
//!
//! Back-pressure both ways comes from blocking writes: while the server does not read its stdin,
//! the reader of witness's stdin waits on its write and reads no more; while the client does not read
//! witness's stdout, the reader of the server's stdout waits likewise. Memory is bounded: one read
//! buffer per direction, a line copy of at most [`MAX_LINE`] (a longer line passes through, and only
//! its start is read), and at most [`MAX_PENDING`] calls in flight tracked.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::Value;

use crate::journal::observed::{Observed, Via};
use crate::journal::{ErrorKind, Event, Journal, Outcome};
use crate::load::outcome::Rejection;
use crate::observe::record::StdioRecorder;
use crate::server::logs::{LineSink, PassThrough, Patterns};
use crate::server::process::{ExitNotice, StdioPipes};

/// A line longer than this passes through whole, but only its first [`OVERLONG_KEEP`] bytes are
/// read (for the answer's id).
pub const MAX_LINE: usize = 4 * 1024 * 1024;
const OVERLONG_KEEP: usize = 64 * 1024;
/// What is kept of a line that cannot be JSON-RPC: enough to quote a banner.
const JUNK_KEEP: usize = 120;
/// Calls in flight that are tracked; more are passed through and counted, not timed.
pub const MAX_PENDING: usize = 4096;
/// One read of either side.
const READ_BYTES: usize = 64 * 1024;
/// How much of a text a detail keeps.
const DETAIL: usize = 200;
/// The longest `initialize` (or `notifications/initialized`) line kept for a replay after a restart.
pub const MAX_HANDSHAKE: usize = 64 * 1024;
/// The first revision without a session (no `initialize`): nothing to replay to a new process.
const SESSIONLESS_SINCE: &str = "2026-07-28";
/// The JSON-RPC error code witness answers a call with when its server died under it.
pub const RESTART_ERROR_CODE: i64 = -32000;

/// Which way a line went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    FromClient,
    FromServer,
}

impl Dir {
    fn index(self) -> usize {
        match self {
            Dir::FromClient => 0,
            Dir::FromServer => 1,
        }
    }
    fn words(self) -> &'static str {
        match self {
            Dir::FromClient => "from the client",
            Dir::FromServer => "on the server's stdout",
        }
    }
}

// ---- reading lines (pure) ------------------------------------------------------------------------

/// Splits one direction's bytes into lines, on a bounded copy. A line whose first byte (past
/// blanks) opens no JSON object or array is never copied: it is counted, not read.
#[derive(Default)]
pub struct LineReader {
    line: Vec<u8>,
    /// Bytes of the current line beyond what is kept.
    over: u64,
    /// The current line cannot be JSON-RPC (its first byte says so).
    junk: bool,
    /// The current line's first byte past blanks has been seen.
    decided: bool,
}

/// A complete line as read: its bytes (all of it, or its start when it was longer than
/// [`MAX_LINE`]; none when it cannot be JSON) and its whole length.
pub struct Line<'a> {
    pub bytes: &'a [u8],
    pub len: u64,
    pub cut: bool,
    pub junk: bool,
}

impl LineReader {
    /// Feeds a chunk; `each` gets every line it completes, without the newline.
    pub fn push(&mut self, mut chunk: &[u8], mut each: impl FnMut(Line<'_>)) {
        while let Some(i) = memchr::memchr(b'\n', chunk) {
            self.keep(&chunk[..i]);
            each(Line {
                bytes: &self.line,
                len: self.line.len() as u64 + self.over,
                cut: self.over > 0 && !self.junk,
                junk: self.junk,
            });
            self.line.clear();
            self.over = 0;
            self.junk = false;
            self.decided = false;
            chunk = &chunk[i + 1..];
        }
        self.keep(chunk);
    }

    /// A line has begun and not ended.
    pub fn open(&self) -> bool {
        !self.line.is_empty() || self.over > 0
    }

    fn keep(&mut self, part: &[u8]) {
        if !self.decided {
            if let Some(first) = part.iter().find(|c| !c.is_ascii_whitespace()) {
                self.decided = true;
                self.junk = *first != b'{' && *first != b'[';
            }
        }
        if self.junk {
            // Only its start is kept, for the note that quotes a banner.
            let room = JUNK_KEEP.saturating_sub(self.line.len()).min(part.len());
            self.line.extend_from_slice(&part[..room]);
            self.over += (part.len() - room) as u64;
            return;
        }
        if self.over > 0 {
            self.over += part.len() as u64;
            return;
        }
        let room = MAX_LINE - self.line.len();
        if part.len() <= room {
            self.line.extend_from_slice(part);
        } else {
            // Too long to read whole: keep its start, count the rest.
            self.line.extend_from_slice(&part[..room]);
            self.line.truncate(OVERLONG_KEEP);
            self.line.shrink_to(OVERLONG_KEEP);
            self.over = (part.len() - room) as u64 + (MAX_LINE - OVERLONG_KEEP) as u64;
        }
    }
}

// ---- reading JSON-RPC (pure) ---------------------------------------------------------------------

/// Only what the tracker needs of a message: never the arguments' values (they are skipped, not
/// kept), and the answer's body only as present or not.
#[derive(Deserialize)]
struct Msg {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    params: Option<Params>,
    #[serde(default)]
    result: Option<IgnoredAny>,
    #[serde(default)]
    error: Option<RpcError>,
}

/// The few parameters witness reads: a call's tool and progress token, a cancel's request, a
/// progress notification's token.
#[derive(Deserialize, Default)]
struct Params {
    #[serde(default)]
    name: Option<Value>,
    #[serde(default, rename = "_meta")]
    meta: Option<Meta>,
    #[serde(default, rename = "requestId")]
    request_id: Option<Value>,
    #[serde(default)]
    reason: Option<Value>,
    #[serde(default, rename = "progressToken")]
    progress_token: Option<Value>,
}

#[derive(Deserialize, Default)]
struct Meta {
    #[serde(default, rename = "progressToken")]
    progress_token: Option<Value>,
}

#[derive(Deserialize, Default)]
struct RpcError {
    #[serde(default)]
    code: Option<Value>,
    #[serde(default)]
    message: Option<Value>,
}

/// A JSON id as a key: numbers and strings kept apart (`1` and `"1"` are different ids).
fn key(id: &Value) -> String {
    id.to_string()
}

fn clip(s: &str, n: usize) -> String {
    let s = s.trim();
    match s.char_indices().nth(n) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// One call in flight.
struct Pending {
    group: String,
    initialize: bool,
    tool_call: bool,
    start: Instant,
    /// The server process it was written to (client → server calls).
    pid: Option<u32>,
    progress: u32,
    /// It reached a restarted server only after witness waited for it (seconds waited).
    waited_s: Option<f64>,
    /// Its progress token, while it is in flight.
    token: Option<String>,
    /// Its JSON-RPC id as the client wrote it (`7`, `"abc"`).
    rpc_id: String,
}

/// A call that ended, to be journalled.
#[derive(Debug, PartialEq)]
pub enum Finished {
    Exchange {
        group: String,
        /// The call's JSON-RPC id as the client wrote it.
        rpc_id: Option<String>,
        start: Instant,
        end: Instant,
        outcome: Outcome,
        detail: Option<String>,
        /// The answer's size in bytes.
        bytes: Option<u64>,
    },
    /// The `initialize` handshake, journalled apart.
    Session {
        start: Instant,
        end: Instant,
        ok: bool,
        version: Option<String>,
        detail: Option<String>,
    },
}

/// What the relay could not read, and what it read, per direction.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counts {
    pub messages: [u64; 2],
    pub not_jsonrpc_lines: [u64; 2],
    pub not_jsonrpc_bytes: [u64; 2],
    pub overlong_lines: [u64; 2],
    pub overlong_bytes: [u64; 2],
    /// The start of the first line on the server's stdout that was not JSON-RPC (a banner).
    pub first_not_jsonrpc: Option<String>,
    pub notifications: [u64; 2],
    pub progress: u64,
    pub untracked: u64,
    /// Answers for no call in flight (after a cancel, or an unknown id).
    pub unmatched_answers: u64,
    pub batches: u64,
}

/// What a replay writes: the `initialize` line, its id (as a key), the `notifications/initialized`
/// line.
pub type HandshakeLines = (Vec<u8>, String, Option<Vec<u8>>);

/// The client's handshake, kept (bounded) to be replayed to a restarted server.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Handshake {
    /// The client's last `initialize` request, whole, and its id as a key.
    pub initialize: Option<(Vec<u8>, String)>,
    /// The client's `notifications/initialized`, whole.
    pub initialized: Option<Vec<u8>>,
    /// What the server answered to it: the protocol version and the capabilities (as JSON text).
    pub answer: Option<(Option<String>, Option<String>)>,
}

impl Handshake {
    /// What to write to a new server process, and the id of its answer to swallow; None when
    /// there is nothing to replay (no `initialize` seen, or a sessionless revision).
    pub fn replay(&self) -> Option<HandshakeLines> {
        let (line, id) = self.initialize.clone()?;
        if let Some((Some(v), _)) = &self.answer {
            if v.as_str() >= SESSIONLESS_SINCE {
                return None;
            }
        }
        Some((line, id, self.initialized.clone()))
    }
}

/// What an answer to `initialize` says that a replay compares: its version and capabilities.
fn handshake_answer(whole: &[u8]) -> Option<(Option<String>, Option<String>)> {
    let v: Value = serde_json::from_slice(whole).ok()?;
    let r = v.get("result")?;
    Some((
        r["protocolVersion"].as_str().map(String::from),
        r.get("capabilities")
            .map(|c| clip(&c.to_string(), MAX_HANDSHAKE)),
    ))
}

/// What a restart took with the old process, for the client: the answers witness gives (each id's
/// JSON text with its record) and what is lost besides.
#[derive(Debug, Default, PartialEq)]
pub struct Cut {
    /// The ids (as JSON text) of the calls witness answers, with what the journal records of each.
    pub answered: Vec<(String, Finished)>,
    /// The requests the server had sent the client, by method, journalled as closed.
    pub asks: Vec<Finished>,
    pub ask_methods: Vec<String>,
    /// The client's resource subscriptions the old process held.
    pub subscriptions: u64,
}

/// The calls in flight, both ways, from the lines that passed. Pure: instants come in with the
/// lines, records go out as [`Finished`].
pub struct Tracker {
    calls: HashMap<String, Pending>,
    asks: HashMap<String, Pending>,
    progress_of: HashMap<String, String>,
    rejection: Rejection,
    pub counts: Counts,
    pub handshake: Handshake,
    /// `resources/subscribe` calls the client made, less `resources/unsubscribe` ones.
    subscriptions: u64,
}

impl Default for Tracker {
    fn default() -> Self {
        Self::new(Rejection::default())
    }
}

impl Tracker {
    pub fn new(rejection: Rejection) -> Self {
        Self {
            calls: HashMap::new(),
            asks: HashMap::new(),
            progress_of: HashMap::new(),
            rejection,
            counts: Counts::default(),
            handshake: Handshake::default(),
            subscriptions: 0,
        }
    }

    /// A call that ended no longer takes progress notifications.
    fn forget(&mut self, p: &Pending) {
        if let Some(t) = &p.token {
            self.progress_of.remove(t);
        }
    }

    /// One complete line. `pid`: the server process it came from or went to.
    pub fn line(
        &mut self,
        dir: Dir,
        line: Line<'_>,
        at: Instant,
        pid: Option<u32>,
        waited_s: Option<f64>,
        out: &mut Vec<Finished>,
    ) {
        let d = dir.index();
        if line.junk {
            self.counts.not_jsonrpc_lines[d] += 1;
            self.counts.not_jsonrpc_bytes[d] += line.len;
            if dir == Dir::FromServer && self.counts.first_not_jsonrpc.is_none() {
                self.counts.first_not_jsonrpc =
                    Some(clip(&String::from_utf8_lossy(trim(line.bytes)), 80));
            }
            return;
        }
        if line.cut {
            self.counts.overlong_lines[d] += 1;
            self.counts.overlong_bytes[d] += line.len;
            if dir == Dir::FromServer {
                self.overlong_answer(line, at, out);
            }
            return;
        }
        let text = trim(line.bytes);
        if text.is_empty() {
            return;
        }
        let parsed = match text[0] {
            b'{' => serde_json::from_slice::<Msg>(text).map(|m| vec![m]),
            b'[' => serde_json::from_slice::<Vec<Msg>>(text),
            _ => Err(serde::de::Error::custom("not JSON")),
        };
        let Ok(msgs) = parsed.map_err(|_: serde_json::Error| ()) else {
            self.counts.not_jsonrpc_lines[d] += 1;
            self.counts.not_jsonrpc_bytes[d] += line.len;
            if dir == Dir::FromServer && self.counts.first_not_jsonrpc.is_none() {
                self.counts.first_not_jsonrpc = Some(clip(&String::from_utf8_lossy(text), 80));
            }
            return;
        };
        if text[0] == b'[' {
            self.counts.batches += 1;
        }
        for m in msgs {
            self.counts.messages[d] += 1;
            self.message(dir, m, text, line.len, at, pid, waited_s, out);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn message(
        &mut self,
        dir: Dir,
        m: Msg,
        whole: &[u8],
        len: u64,
        at: Instant,
        pid: Option<u32>,
        waited_s: Option<f64>,
        out: &mut Vec<Finished>,
    ) {
        let id = m.id.filter(|v| !v.is_null());
        let params = m.params.unwrap_or_default();
        match (m.method, id) {
            // A request: from the client, a call; from the server, a question for the client.
            (Some(method), Some(id)) => {
                let tool_call = dir == Dir::FromClient && method == "tools/call";
                if dir == Dir::FromClient {
                    match method.as_str() {
                        // Only a line that is this request alone can be replayed as it was.
                        "initialize"
                            if whole.first() == Some(&b'{') && whole.len() <= MAX_HANDSHAKE =>
                        {
                            self.handshake.initialize = Some((whole.to_vec(), key(&id)));
                            self.handshake.answer = None;
                        }
                        "resources/subscribe" => self.subscriptions += 1,
                        "resources/unsubscribe" => {
                            self.subscriptions = self.subscriptions.saturating_sub(1)
                        }
                        _ => {}
                    }
                }
                let group = Observed {
                    via: Via::Stdio,
                    to_client: dir == Dir::FromServer,
                    name: if tool_call {
                        Some(match &params.name {
                            Some(Value::String(n)) => n.clone(),
                            _ => "-".into(),
                        })
                    } else {
                        None
                    },
                    method: method.clone(),
                }
                .group();
                let map = match dir {
                    Dir::FromClient => &mut self.calls,
                    Dir::FromServer => &mut self.asks,
                };
                if map.len() >= MAX_PENDING {
                    self.counts.untracked += 1;
                    return;
                }
                let k = key(&id);
                let token = params.meta.and_then(|m| m.progress_token).map(|t| key(&t));
                if let Some(t) = &token {
                    if self.progress_of.len() < MAX_PENDING {
                        self.progress_of.insert(t.clone(), k.clone());
                    }
                }
                map.insert(
                    k.clone(),
                    Pending {
                        rpc_id: k,
                        token,
                        group,
                        initialize: dir == Dir::FromClient && method == "initialize",
                        tool_call,
                        start: at,
                        pid: (dir == Dir::FromClient).then_some(pid).flatten(),
                        progress: 0,
                        waited_s,
                    },
                );
            }
            // A notification.
            (Some(method), None) => {
                self.counts.notifications[dir.index()] += 1;
                if dir == Dir::FromClient
                    && method == "notifications/initialized"
                    && whole.first() == Some(&b'{')
                    && whole.len() <= MAX_HANDSHAKE
                {
                    self.handshake.initialized = Some(whole.to_vec());
                }
                match method.as_str() {
                    "notifications/cancelled" => {
                        let Some(request) = params.request_id else {
                            return;
                        };
                        // The client cancels its call; the server, its question to the client.
                        let map = match dir {
                            Dir::FromClient => &mut self.calls,
                            Dir::FromServer => &mut self.asks,
                        };
                        if let Some(p) = map.remove(&key(&request)) {
                            self.forget(&p);
                            let waited = at.saturating_duration_since(p.start).as_secs_f64();
                            let who = match dir {
                                Dir::FromClient => "the client",
                                Dir::FromServer => "the server",
                            };
                            let mut detail = format!("cancelled by {who} after {waited:.3}s");
                            if let Some(Value::String(r)) = &params.reason {
                                if !r.is_empty() {
                                    detail.push_str(&format!(": {}", clip(r, DETAIL)));
                                }
                            }
                            out.push(Finished::Exchange {
                                rpc_id: Some(p.rpc_id.clone()),
                                group: p.group,
                                start: p.start,
                                end: at,
                                outcome: Outcome::Error {
                                    error: ErrorKind::Cancelled,
                                    status: None,
                                },
                                detail: Some(detail),
                                bytes: None,
                            });
                        }
                    }
                    "notifications/progress" => {
                        self.counts.progress += 1;
                        let token = params.progress_token.as_ref().map(key);
                        if let Some(call) = token.and_then(|t| self.progress_of.get(&t)) {
                            if let Some(p) = self.calls.get_mut(call) {
                                p.progress += 1;
                            }
                        }
                    }
                    _ => {}
                }
            }
            // An answer: from the server to a call, from the client to a question.
            (None, Some(id)) => {
                let map = match dir {
                    Dir::FromServer => &mut self.calls,
                    Dir::FromClient => &mut self.asks,
                };
                let Some(p) = map.remove(&key(&id)) else {
                    self.counts.unmatched_answers += 1;
                    return;
                };
                self.forget(&p);
                if p.initialize && m.result.is_some() && whole.first() == Some(&b'{') {
                    self.handshake.answer = handshake_answer(whole);
                }
                out.push(self.answered(p, m.result.is_some(), m.error, whole, len, at));
            }
            (None, None) => {
                // A JSON object that is no JSON-RPC message.
                self.counts.messages[dir.index()] -= 1;
                self.counts.not_jsonrpc_lines[dir.index()] += 1;
                self.counts.not_jsonrpc_bytes[dir.index()] += len;
            }
        }
    }

    fn answered(
        &self,
        p: Pending,
        result: bool,
        error: Option<RpcError>,
        whole: &[u8],
        len: u64,
        at: Instant,
    ) -> Finished {
        if p.initialize {
            let version = result
                .then(|| serde_json::from_slice::<Value>(whole).ok())
                .flatten()
                .and_then(|v| v["result"]["protocolVersion"].as_str().map(String::from));
            return Finished::Session {
                start: p.start,
                end: at,
                ok: result,
                version,
                detail: error.map(|e| rpc_words(&e)),
            };
        }
        let (outcome, mut detail) = if p.tool_call && error.is_none() && !says_is_error(whole) {
            // A result that never says `"isError": true` is ok by load's rules whatever else it
            // holds: no need to build it (the common case, and the relay's hot path).
            (Outcome::Ok, None)
        } else if p.tool_call {
            // The whole message, as load reads a tools/call answer (isError, its text, refusals).
            match serde_json::from_slice::<Value>(whole) {
                Ok(v) => {
                    // A batch line: the answer is the element with this id.
                    let v = match v {
                        Value::Array(items) => items
                            .into_iter()
                            .find(|i| i.get("result").is_some() || i.get("error").is_some())
                            .unwrap_or(Value::Null),
                        v => v,
                    };
                    crate::load::mcp::classify_reply(&v, &self.rejection)
                }
                Err(_) => (Outcome::Ok, None),
            }
        } else if let Some(e) = error {
            (
                Outcome::Error {
                    error: ErrorKind::Rpc,
                    status: None,
                },
                Some(rpc_words(&e)),
            )
        } else {
            (Outcome::Ok, None)
        };
        let mut extra = Vec::new();
        if let Some(w) = p.waited_s {
            extra.push(waited_words(w));
        }
        if p.progress > 0 {
            extra.push(format!("{} progress notification(s)", p.progress));
        }
        if !extra.is_empty() {
            let mut d = detail.take().map(|d| vec![d]).unwrap_or_default();
            d.extend(extra);
            detail = Some(d.join("; "));
        }
        Finished::Exchange {
            rpc_id: Some(p.rpc_id.clone()),
            group: p.group,
            start: p.start,
            end: at,
            outcome,
            detail,
            bytes: Some(len),
        }
    }

    /// An answer too long to read whole: its id is looked for in its start, and it counts as ok
    /// unless its start says otherwise.
    fn overlong_answer(&mut self, line: Line<'_>, at: Instant, out: &mut Vec<Finished>) {
        let Some(id) = id_in_start(line.bytes) else {
            return;
        };
        let Some(p) = self.calls.remove(&id) else {
            self.counts.unmatched_answers += 1;
            return;
        };
        self.forget(&p);
        let start = String::from_utf8_lossy(line.bytes);
        let failed = start.contains("\"isError\":true") || start.contains("\"error\":{");
        let outcome = if failed {
            Outcome::Error {
                error: if start.contains("\"isError\":true") {
                    ErrorKind::ToolError
                } else {
                    ErrorKind::Rpc
                },
                status: None,
            }
        } else {
            Outcome::Ok
        };
        out.push(Finished::Exchange {
            rpc_id: Some(p.rpc_id.clone()),
            group: p.group,
            start: p.start,
            end: at,
            outcome,
            detail: Some(format!(
                "an answer of {} bytes, longer than witness reads ({} MiB): passed through whole, its outcome read from its start",
                line.len,
                MAX_LINE >> 20
            )),
            bytes: Some(line.len),
        });
    }

    /// The server process `pid` closed its stdout: every call written to it and not answered was
    /// cut off now.
    pub fn server_closed(&mut self, pid: u32, at: Instant, out: &mut Vec<Finished>) {
        let cut: Vec<String> = self
            .calls
            .iter()
            .filter(|(_, p)| p.pid == Some(pid))
            .map(|(k, _)| k.clone())
            .collect();
        for k in cut {
            let p = self.calls.remove(&k).expect("listed above");
            self.forget(&p);
            out.push(closed(
                p,
                at,
                format!("the server's stdout closed with the call in flight (pid {pid})"),
            ));
        }
        // Its questions to the client can no longer be answered.
        let asks: Vec<Pending> = self.asks.drain().map(|(_, p)| p).collect();
        for p in asks {
            self.forget(&p);
            out.push(closed(
                p,
                at,
                format!("the server (pid {pid}) closed its stdout before the client answered"),
            ));
        }
    }

    /// The server process `pid` is gone and a new one will take its place: every call written to it
    /// and not answered is answered by witness now with `message` (what the client sees), the
    /// server's questions to the client are closed, and what else is lost is said.
    pub fn server_restarting(&mut self, pid: u32, at: Instant, message: &str) -> Cut {
        let mut cut = Cut::default();
        let mut ids: Vec<String> = self
            .calls
            .iter()
            .filter(|(_, p)| p.pid == Some(pid))
            .map(|(k, _)| k.clone())
            .collect();
        ids.sort();
        for k in ids {
            let p = self.calls.remove(&k).expect("listed above");
            self.forget(&p);
            let why = format!(
                "the server's stdout closed with the call in flight (pid {pid}); witness answered the client at once: JSON-RPC error {RESTART_ERROR_CODE}: {}",
                clip(message, DETAIL)
            );
            cut.answered.push((k, closed(p, at, why)));
        }
        let mut asks: Vec<Pending> = self.asks.drain().map(|(_, p)| p).collect();
        asks.sort_by_key(|p| p.start);
        for p in asks {
            self.forget(&p);
            cut.ask_methods.push(
                p.group
                    .strip_prefix("stdio <- ")
                    .unwrap_or(&p.group)
                    .to_string(),
            );
            cut.asks.push(closed(
                p,
                at,
                format!("lost with the server (pid {pid}), which witness is restarting, before the client answered"),
            ));
        }
        cut.subscriptions = std::mem::take(&mut self.subscriptions);
        cut
    }

    /// The relay ends: whatever is still in flight was never answered.
    pub fn finish(&mut self, at: Instant, out: &mut Vec<Finished>) {
        self.progress_of.clear();
        for (_, p) in self.calls.drain().chain(self.asks.drain()) {
            let why = match p.pid {
                Some(pid) => {
                    format!("never answered: the relay ended with the call in flight (pid {pid})")
                }
                None => "never delivered: no server was running to take it".into(),
            };
            out.push(closed(p, at, why));
        }
    }
}

/// Said of a call that reached a restarted server only after witness waited for it.
fn waited_words(w: f64) -> String {
    format!(
        "sent once the restarted server was up (the request waited {w:.3}s for it, not counted)"
    )
}

/// A JSON-RPC error as load words it: "JSON-RPC error -32602: Unknown tool".
fn rpc_words(e: &RpcError) -> String {
    let code = e.code.as_ref().map(Value::to_string).unwrap_or_default();
    let message = match &e.message {
        Some(Value::String(m)) => m.clone(),
        Some(v) => v.to_string(),
        None => String::new(),
    };
    format!("JSON-RPC error {code}: {}", clip(&message, DETAIL))
}

fn closed(p: Pending, at: Instant, mut why: String) -> Finished {
    if let Some(w) = p.waited_s {
        why.push_str(&format!("; {}", waited_words(w)));
    }
    if p.initialize {
        return Finished::Session {
            start: p.start,
            end: at,
            ok: false,
            version: None,
            detail: Some(why),
        };
    }
    Finished::Exchange {
        rpc_id: Some(p.rpc_id.clone()),
        group: p.group,
        start: p.start,
        end: at,
        outcome: Outcome::Error {
            error: ErrorKind::Closed,
            status: None,
        },
        detail: Some(why),
        bytes: None,
    }
}

/// Whether a message holds the key `"isError"` with the value `true` anywhere (a key, since a quote
/// inside a JSON string is escaped). False means the result is surely not a tool error; true sends
/// it to the exact reading.
fn says_is_error(b: &[u8]) -> bool {
    memchr::memmem::find_iter(b, b"\"isError\"").any(|at| {
        let rest = trim(&b[at + 9..]);
        rest.strip_prefix(b":")
            .is_some_and(|v| trim(v).starts_with(b"true"))
    })
}

fn trim(b: &[u8]) -> &[u8] {
    let start = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(b.len());
    let end = b
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(start, |i| i + 1);
    &b[start..end]
}

/// The first `"id":` value in the start of a message (SDKs write `jsonrpc` and `id` first), as a key.
fn id_in_start(b: &[u8]) -> Option<String> {
    let at = memchr::memmem::find(b, b"\"id\"")?;
    let mut rest = trim(&b[at + 4..]);
    rest = trim(rest.strip_prefix(b":")?);
    let mut de = serde_json::Deserializer::from_slice(rest).into_iter::<Value>();
    de.next()?
        .ok()
        .filter(|v| v.is_number() || v.is_string())
        .map(|v| key(&v))
}

// ---- the relay (threads) ---------------------------------------------------------------------------

/// A server process's pid and the write end of its stdin.
type ServerStdin = (u32, Arc<File>);

/// Where the client's bytes go now: the running server's stdin, if any.
#[derive(Default)]
struct Slot {
    child: Option<ServerStdin>,
    client_eof: bool,
    /// The server is gone for good: nothing more will take the client's bytes.
    gone: bool,
    /// A restarted server being given the client's handshake: the client's bytes wait until it
    /// has answered the replayed `initialize`.
    replaying: Option<ServerStdin>,
    /// Servers attached so far.
    attached: u64,
}

/// How long a reader that met its server's EOF waits for the supervisor's word on the exit (it
/// comes once the process is reaped, milliseconds later); a process that closed its stdout and
/// lives on is not waited for longer.
const EXIT_WORD_WAIT: Duration = Duration::from_secs(1);
/// How long a restarted server may take to answer the replayed `initialize` before the client's
/// calls go to it anyway.
const REPLAY_WAIT: Duration = Duration::from_secs(10);
/// Exit notices kept for readers still to end.
const MAX_NOTICES: usize = 64;

struct Shared {
    journal: Journal,
    /// The server's watch patterns: the lines on its stdout that are not JSON-RPC are its log too.
    patterns: Arc<Patterns>,
    tracker: Mutex<Tracker>,
    slot: Mutex<Slot>,
    changed: Condvar,
    stdout: Mutex<File>,
    client_gone: AtomicBool,
    /// Set at the client's EOF, for the supervisor (no restart into a closed session).
    input_closed: Arc<AtomicBool>,
    undelivered: AtomicU64,
    /// Readers of a server's stdout still running.
    readers: Mutex<usize>,
    readers_done: Condvar,
    /// The supervisor's word on each exit, until the pid's reader takes it.
    exits: Mutex<HashMap<u32, ExitNotice>>,
    exits_changed: Condvar,
    /// `wrap --record`: each complete line both ways is handed to it (never waited on).
    recorder: Option<Arc<StdioRecorder>>,
}

/// The running relay. Started before the server, fed each spawn's pipes, stopped after the server
/// is gone for good.
pub struct Relay {
    shared: Arc<Shared>,
}

impl Relay {
    /// Starts reading witness's stdin. Fails only when witness's own stdin or stdout cannot be
    /// duplicated.
    pub fn start(
        journal: Journal,
        patterns: Arc<Patterns>,
        input_closed: Arc<AtomicBool>,
        recorder: Option<Arc<StdioRecorder>>,
    ) -> std::io::Result<Self> {
        let stdin = dup(0)?;
        let stdout = dup(1)?;
        let shared = Arc::new(Shared {
            journal,
            patterns,
            tracker: Mutex::new(Tracker::default()),
            slot: Mutex::new(Slot::default()),
            changed: Condvar::new(),
            stdout: Mutex::new(stdout),
            client_gone: AtomicBool::new(false),
            input_closed,
            undelivered: AtomicU64::new(0),
            readers: Mutex::new(0),
            readers_done: Condvar::new(),
            exits: Mutex::new(HashMap::new()),
            exits_changed: Condvar::new(),
            recorder,
        });
        let s = shared.clone();
        std::thread::Builder::new()
            .name("relay-client".into())
            .spawn(move || client_to_server(s, stdin))?;
        Ok(Self { shared })
    }

    /// A new server process's pipes (the first spawn, or a restart): the client's bytes go to it
    /// from now on, and its stdout is relayed to the client.
    pub fn attach(&self, pipes: StdioPipes) {
        let StdioPipes { pid, stdin, stdout } = pipes;
        crate::server::logs::widen_pipe(std::os::fd::AsFd::as_fd(&stdout));
        let mut replay = None;
        {
            let mut slot = self.shared.slot.lock().expect("relay slot");
            slot.attached += 1;
            // After the client's EOF, a new server gets EOF at once, as the old one did.
            let stdin = (!slot.client_eof).then(|| (pid, Arc::new(File::from(stdin))));
            // A restarted server is given the client's handshake first; the client's bytes wait.
            let handshake = (slot.attached > 1)
                .then(|| {
                    self.shared
                        .tracker
                        .lock()
                        .expect("relay tracker")
                        .handshake
                        .replay()
                })
                .flatten();
            match (stdin, handshake) {
                (Some(c), Some(h)) => {
                    slot.replaying = Some(c.clone());
                    replay = Some((c.1, h));
                }
                (c, _) => slot.child = c,
            }
            self.shared.changed.notify_all();
        }
        *self.shared.readers.lock().expect("relay readers") += 1;
        let s = self.shared.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("relay-server-{pid}"))
            .spawn(move || server_to_client(s, pid, File::from(stdout), replay));
        if spawned.is_err() {
            *self.shared.readers.lock().expect("relay readers") -= 1;
            self.shared.release(pid);
        }
    }

    /// The supervisor's word on an exit: whether a restart follows decides what the client is told
    /// of the calls the process took with it.
    pub fn exited(&self, notice: ExitNotice) {
        let mut exits = self.shared.exits.lock().expect("relay exits");
        if exits.len() >= MAX_NOTICES {
            // Readers that never ended (a grandchild holds the pipe): their word is stale.
            let oldest = exits.keys().min().copied();
            if let Some(k) = oldest {
                exits.remove(&k);
            }
        }
        exits.insert(notice.pid, notice);
        self.shared.exits_changed.notify_all();
    }

    /// The server is gone for good: waits up to `linger` for the last server's stdout to be relayed
    /// to its end (a grandchild holding it open is not waited for longer), journals the calls left
    /// in flight and what the relay could not read.
    pub fn stop(&self, linger: Duration) {
        {
            let mut slot = self.shared.slot.lock().expect("relay slot");
            slot.gone = true;
            slot.child = None;
            slot.replaying = None;
            self.shared.changed.notify_all();
        }
        let deadline = Instant::now() + linger;
        let mut readers = self.shared.readers.lock().expect("relay readers");
        while *readers > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            readers = self
                .shared
                .readers_done
                .wait_timeout(readers, left)
                .expect("relay readers")
                .0;
        }
        drop(readers);
        let mut out = Vec::new();
        let counts = {
            let mut t = self.shared.tracker.lock().expect("relay tracker");
            t.finish(Instant::now(), &mut out);
            t.counts.clone()
        };
        self.shared.record(out);
        for note in notes(&counts, self.shared.undelivered.load(Ordering::Relaxed)) {
            self.shared.journal.emit(note);
        }
        let _ = self.shared.stdout.lock().map(|mut o| o.flush());
    }
}

impl Shared {
    /// The restarted server `pid` has its handshake (or will never answer it): the client's bytes
    /// go to it from now on.
    fn release(&self, pid: u32) -> bool {
        let mut slot = self.slot.lock().expect("relay slot");
        if slot.replaying.as_ref().is_none_or(|(p, _)| *p != pid) {
            return false;
        }
        let c = slot.replaying.take();
        if !slot.client_eof && !slot.gone {
            slot.child = c;
        }
        self.changed.notify_all();
        true
    }

    /// The reader of `pid` met its EOF: with the supervisor's word (waited for briefly), either a
    /// restart follows and witness answers the calls left in flight, or they are closed as the
    /// client will see them close.
    fn settle(&self, pid: u32, eof_at: Instant) {
        let notice = {
            let mut exits = self.exits.lock().expect("relay exits");
            let deadline = Instant::now() + EXIT_WORD_WAIT;
            loop {
                if let Some(n) = exits.remove(&pid) {
                    break Some(n);
                }
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() || self.slot.lock().expect("relay slot").gone {
                    break None;
                }
                exits = self
                    .exits_changed
                    .wait_timeout(exits, left.min(Duration::from_millis(100)))
                    .expect("relay exits")
                    .0;
            }
        };
        let mut out = Vec::new();
        let Some(n) = notice.filter(|n| n.restarting) else {
            self.tracker
                .lock()
                .expect("relay tracker")
                .server_closed(pid, eof_at, &mut out);
            self.record(out);
            return;
        };
        let message = restart_message(&n);
        let mut o = self.stdout.lock().expect("relay stdout");
        let at = Instant::now();
        let cut = self
            .tracker
            .lock()
            .expect("relay tracker")
            .server_restarting(pid, at, &message);
        let mut answers = Vec::new();
        for (id, _) in &cut.answered {
            // The id as the client wrote it (its JSON text), so `1` and `"1"` stay apart.
            answers.extend_from_slice(
                format!(
                    "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"error\":{{\"code\":{RESTART_ERROR_CODE},\"message\":{}}}}}",
                    Value::String(message.clone())
                )
                .as_bytes(),
            );
            answers.push(b'\n');
        }
        if !answers.is_empty() && !self.client_gone.load(Ordering::Relaxed) {
            let _ = write_all_waiting(&mut o, &answers).and_then(|_| o.flush());
        }
        drop(o);
        let calls = cut.answered.len();
        out.extend(cut.answered.into_iter().map(|(_, f)| f));
        out.extend(cut.asks);
        self.record(out);
        if calls > 0 {
            self.journal.emit(Event::Note {
                level: "notice".into(),
                text: format!(
                    "relay: witness answered {calls} call(s) in flight to pid {pid} with JSON-RPC error {RESTART_ERROR_CODE} \"{message}\" (what the client saw)"
                ),
            });
        }
        let mut lost = Vec::new();
        if !cut.ask_methods.is_empty() {
            lost.push(format!(
                "{} request(s) the server had sent the client ({}), which the client's answer can no longer reach",
                cut.ask_methods.len(),
                cut.ask_methods.join(", ")
            ));
        }
        if cut.subscriptions > 0 {
            lost.push(format!(
                "the client's {} resource subscription(s): the restarted server does not know them",
                cut.subscriptions
            ));
        }
        if !lost.is_empty() {
            self.journal.emit(Event::Note {
                level: "warn".into(),
                text: format!("relay: lost with pid {pid}: {}", lost.join("; ")),
            });
        }
    }

    fn record(&self, finished: Vec<Finished>) {
        let clock = self.journal.clock();
        for f in finished {
            match f {
                Finished::Exchange {
                    group,
                    rpc_id,
                    start,
                    end,
                    outcome,
                    detail,
                    bytes,
                } => self.journal.emit_at(
                    clock.at(end),
                    Event::Request {
                        id: super::next_exchange_id(),
                        group,
                        worker: 0,
                        start_s: clock.at(start),
                        duration_s: end.saturating_duration_since(start).as_secs_f64(),
                        outcome,
                        status: None,
                        scheduled_s: None,
                        detail,
                        body_bytes: bytes,
                        body_cut: false,
                        connect_s: None,
                        headers_s: None,
                        handshake_s: None,
                        lag_s: None,
                        rpc_id,
                    },
                ),
                Finished::Session {
                    start,
                    end,
                    ok,
                    version,
                    detail,
                } => self.journal.emit_at(
                    clock.at(end),
                    Event::McpSession {
                        worker: 0,
                        transport: "stdio".into(),
                        protocol_version: version,
                        session: false,
                        duration_s: end.saturating_duration_since(start).as_secs_f64(),
                        ok,
                        detail,
                    },
                ),
            }
        }
    }

    /// Waits for a server to take the client's bytes. Returns it and how long witness waited for
    /// one (None when one was running), or None when there will be none.
    fn server(&self) -> Option<(ServerStdin, Option<f64>)> {
        let mut slot = self.slot.lock().expect("relay slot");
        let asked = Instant::now();
        let mut waited = false;
        loop {
            if let Some(c) = &slot.child {
                let w = waited.then(|| asked.elapsed().as_secs_f64());
                return Some((c.clone(), w));
            }
            if slot.gone {
                return None;
            }
            waited = true;
            slot = self.changed.wait(slot).expect("relay slot");
        }
    }
}

fn client_to_server(s: Arc<Shared>, mut stdin: File) {
    let mut buf = vec![0u8; READ_BYTES];
    let mut lines = LineReader::default();
    let mut out = Vec::new();
    let mut carried: Option<f64> = None;
    loop {
        let n = read_some(&mut stdin, &mut buf);
        let at = Instant::now();
        if n == 0 {
            // EOF as EOF: the server's stdin closes (the slot held its only descriptor).
            let mut slot = s.slot.lock().expect("relay slot");
            slot.client_eof = true;
            // An MCP client that closed its session: a restart would only meet a closed pipe. A
            // stdin that held no JSON-RPC (/dev/null, a script's input) leaves the restart policy
            // as it is.
            let spoke = s.tracker.lock().expect("relay tracker").counts.messages[0] > 0;
            s.input_closed.store(spoke, Ordering::SeqCst);
            if spoke {
                // When: how the run ended reads it (the client ended its session first).
                s.journal.emit(Event::Note {
                    level: "info".into(),
                    text: CLIENT_CLOSED.into(),
                });
            }
            slot.child = None;
            s.changed.notify_all();
            return;
        }
        let chunk = &buf[..n];
        let Some(((pid, child), waited)) = s.server() else {
            // Nothing will ever read it: count it, keep reading so the client never blocks.
            s.undelivered.fetch_add(n as u64, Ordering::Relaxed);
            continue;
        };
        // Read before it is written, so an answer can never arrive before its call is known.
        let start = if waited.is_some() { Instant::now() } else { at };
        // A line begun in a chunk that waited for the server and ended in a later one waited too.
        let mut begun_waiting = carried.take();
        {
            let mut t = s.tracker.lock().expect("relay tracker");
            lines.push(chunk, |line| {
                let w = waited.or_else(|| begun_waiting.take());
                if let Some(r) = &s.recorder {
                    record(r, &line, at, true);
                }
                t.line(Dir::FromClient, line, start, Some(pid), w, &mut out)
            });
        }
        if lines.open() {
            carried = waited.or(begun_waiting);
        }
        if (&*child).write_all(chunk).is_err() {
            // The server closed its stdin or died: these bytes are lost with it.
            s.undelivered.fetch_add(n as u64, Ordering::Relaxed);
            let mut slot = s.slot.lock().expect("relay slot");
            if slot.child.as_ref().is_some_and(|(p, _)| *p == pid) {
                slot.child = None;
            }
        }
        // Journalled once the server has the bytes: the call is known (above), and its record
        // waits on nothing the server does.
        s.record(std::mem::take(&mut out));
    }
}

/// What the client is told of a call its server took with it when witness restarts the server.
pub fn restart_message(n: &ExitNotice) -> String {
    // The meaning's first clause: "exited 124: a timeout or watchdog fired".
    let short = n.meaning.split(" (").next().unwrap_or(&n.meaning);
    let short = short.split("; ").next().unwrap_or(short);
    format!(
        "the server (pid {}) {short}, at age {:.2} s; witness is restarting it, so this call will get no answer",
        n.pid, n.age_s
    )
}

/// A restarted server being given the client's handshake: the bytes of its stdout until it has
/// answered the replayed `initialize`, read by line so that answer alone is kept from the client.
struct Replay {
    stdin: Arc<File>,
    id: String,
    initialized: Option<Vec<u8>>,
    sent: Instant,
    held: Vec<u8>,
}

impl Replay {
    /// Takes a chunk; returns what goes on to the client, and the answer when it came.
    fn push(&mut self, chunk: &[u8]) -> (Vec<u8>, Option<Vec<u8>>) {
        self.held.extend_from_slice(chunk);
        let mut on = Vec::new();
        let mut rest = &self.held[..];
        while let Some(i) = memchr::memchr(b'\n', rest) {
            let line = &rest[..i];
            rest = &rest[i + 1..];
            let answer = serde_json::from_slice::<Msg>(trim(line))
                .ok()
                .is_some_and(|m| {
                    m.method.is_none() && m.id.as_ref().is_some_and(|v| key(v) == self.id)
                });
            if answer {
                let a = line.to_vec();
                on.extend_from_slice(rest);
                self.held.clear();
                return (on, Some(a));
            }
            on.extend_from_slice(line);
            on.push(b'\n');
        }
        let rest = rest.to_vec();
        self.held = rest;
        if self.held.len() > MAX_HANDSHAKE {
            // A line this long is no answer to read here: it passes on.
            on.append(&mut self.held);
        }
        (on, None)
    }
}

/// The words of a replayed handshake's answer, against the first.
fn replay_words(
    pid: u32,
    took: f64,
    answer: &[u8],
    first: Option<&(Option<String>, Option<String>)>,
) -> (String, &'static str) {
    let v: Value = serde_json::from_slice(trim(answer)).unwrap_or(Value::Null);
    if let Some(e) = v.get("error") {
        let e = RpcError {
            code: e.get("code").cloned(),
            message: e.get("message").cloned(),
        };
        return (
            format!(
                "relay: the restarted server (pid {pid}) refused the client's replayed initialize after {took:.3}s ({}); the client's calls go to it anyway",
                rpc_words(&e)
            ),
            "warn",
        );
    }
    let now = handshake_answer(trim(answer)).unwrap_or((None, None));
    let mut said = vec![format!(
        "protocol {}",
        now.0.as_deref().unwrap_or("not said")
    )];
    let mut level = "notice";
    if let Some((version, caps)) = first {
        if version != &now.0 {
            level = "warn";
            said.push(format!(
                "the client negotiated {} with the first server",
                version.as_deref().unwrap_or("no version")
            ));
        }
        if caps != &now.1 {
            level = "warn";
            said.push(format!(
                "capabilities differ from the first answer: now {}, first {}",
                clip(now.1.as_deref().unwrap_or("none"), DETAIL),
                clip(caps.as_deref().unwrap_or("none"), DETAIL)
            ));
        } else {
            said.push("capabilities as in the first answer".into());
        }
    }
    (
        format!(
            "relay: replayed the client's initialize and notifications/initialized to the restarted server (pid {pid}); it answered in {took:.3}s, not forwarded to the client ({})",
            said.join("; ")
        ),
        level,
    )
}

fn server_to_client(
    s: Arc<Shared>,
    pid: u32,
    mut stdout: File,
    replay: Option<(Arc<File>, HandshakeLines)>,
) {
    let mut buf = vec![0u8; READ_BYTES];
    let mut lines = LineReader::default();
    let mut out = Vec::new();
    let first = s
        .tracker
        .lock()
        .expect("relay tracker")
        .handshake
        .answer
        .clone();
    let mut replay = replay.and_then(|(stdin, (init, id, initialized))| {
        let mut line = init;
        line.push(b'\n');
        if (&*stdin).write_all(&line).is_err() {
            s.release(pid);
            return None;
        }
        // A server that never answers does not keep the client waiting for ever.
        let w = s.clone();
        let _ = std::thread::Builder::new()
            .name(format!("relay-replay-{pid}"))
            .spawn(move || {
                std::thread::sleep(REPLAY_WAIT);
                if w.release(pid) {
                    w.journal.emit(Event::Note {
                        level: "warn".into(),
                        text: format!(
                            "relay: the restarted server (pid {pid}) did not answer the client's replayed initialize within {}s; the client's calls go to it anyway",
                            REPLAY_WAIT.as_secs()
                        ),
                    });
                }
            });
        Some(Replay {
            stdin,
            id,
            initialized,
            sent: Instant::now(),
            held: Vec::new(),
        })
    });
    // What is not JSON-RPC on the server's stdout is its log, matched as any output is.
    let mut log = LineSink::new(
        crate::journal::Stream::Stdout,
        PassThrough::Discard,
        Some(pid),
        s.patterns.clone(),
        s.journal.clone(),
    )
    .skipping_jsonrpc();
    loop {
        let n = read_some(&mut stdout, &mut buf);
        let at = Instant::now();
        if n == 0 {
            break;
        }
        let mut chunk = &buf[..n];
        let passed;
        if let Some(r) = &mut replay {
            let (on, answer) = r.push(chunk);
            passed = on;
            chunk = &passed;
            if let Some(a) = answer {
                let took = at.saturating_duration_since(r.sent).as_secs_f64();
                let delivered = match &r.initialized {
                    Some(n) => {
                        let mut line = n.clone();
                        line.push(b'\n');
                        (&*r.stdin).write_all(&line).is_ok()
                    }
                    None => true,
                };
                let (text, level) = replay_words(pid, took, &a, first.as_ref());
                s.journal.emit(Event::Note {
                    level: level.into(),
                    text: if delivered {
                        text
                    } else {
                        format!("{text}; notifications/initialized could not be delivered")
                    },
                });
                replay = None;
                s.release(pid);
            }
            if chunk.is_empty() {
                continue;
            }
        }
        // The client has the bytes first; reading them for the journal follows (the time of each
        // answer is `at`, when it was read). Calls still in flight at the server's exit are settled
        // only after this loop ends, so an answer passed on here is always counted first.
        if !s.client_gone.load(Ordering::Relaxed) {
            let mut o = s.stdout.lock().expect("relay stdout");
            if write_all_waiting(&mut o, chunk).is_err() {
                // The client stopped reading for good: drain on, so the server is never blocked.
                s.client_gone.store(true, Ordering::Relaxed);
                s.journal.emit(Event::Note {
                    level: "warn".into(),
                    text: "relay: the client closed witness's stdout; the server's further output is read and dropped".into(),
                });
            }
        }
        {
            let mut t = s.tracker.lock().expect("relay tracker");
            lines.push(chunk, |line| {
                if let Some(r) = &s.recorder {
                    record(r, &line, at, false);
                }
                t.line(Dir::FromServer, line, at, Some(pid), None, &mut out)
            });
        }
        log.push(chunk);
        s.record(std::mem::take(&mut out));
    }
    log.finish();
    let eof_at = Instant::now();
    drop(replay);
    {
        // The process is gone with its stdout: the client's next bytes wait for a new one rather
        // than go into a dead pipe.
        let mut slot = s.slot.lock().expect("relay slot");
        if slot.child.as_ref().is_some_and(|(p, _)| *p == pid) {
            slot.child = None;
        }
        if slot.replaying.as_ref().is_some_and(|(p, _)| *p == pid) {
            slot.replaying = None;
        }
    }
    s.settle(pid, eof_at);
    let mut readers = s.readers.lock().expect("relay readers");
    *readers -= 1;
    s.readers_done.notify_all();
}

/// Hands a complete line to the recording: a copy of a line read whole, a count for one too long
/// to read; a line that cannot be JSON-RPC (a banner, a log line) is not the session's.
fn record(r: &StdioRecorder, line: &Line<'_>, at: Instant, from_client: bool) {
    if line.junk {
        return;
    }
    if line.cut {
        r.lost();
    } else if !trim(line.bytes).is_empty() {
        r.line(at, from_client, line.bytes);
    }
}

/// One read of a pipe; 0 at its end (or on an error, which ends a pipe the same way). A client's
/// descriptor may be non-blocking (O_NONBLOCK set on a pipe or terminal it shares with another
/// process): nothing to read yet is waited for, never taken for the end.
fn read_some(f: &mut File, buf: &mut [u8]) -> usize {
    loop {
        match f.read(buf) {
            Ok(n) => return n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => wait_ready(f, libc::POLLIN),
            Err(_) => return 0,
        }
    }
}

/// Writes all of `buf` to witness's stdout: a short write goes on from where it stopped, and a
/// full non-blocking descriptor is waited on (back-pressure), never taken for a client gone.
fn write_all_waiting(f: &mut File, mut buf: &[u8]) -> std::io::Result<()> {
    while !buf.is_empty() {
        match f.write(buf) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => wait_ready(f, libc::POLLOUT),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Waits (a second at most, then the caller tries again) for a descriptor to be ready.
fn wait_ready(f: &File, events: libc::c_short) {
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd {
        fd: f.as_raw_fd(),
        events,
        revents: 0,
    };
    // SAFETY: one valid pollfd, for the length given.
    unsafe { libc::poll(&mut p, 1, 1000) };
}

fn dup(fd: i32) -> std::io::Result<File> {
    use std::os::fd::{AsRawFd, FromRawFd};
    // SAFETY: fcntl(F_DUPFD_CLOEXEC) on witness's own standard descriptor; the new one is owned.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if new < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let f = unsafe { File::from_raw_fd(new) };
    debug_assert!(f.as_raw_fd() >= 3);
    Ok(f)
}

/// The note the relay writes when an MCP client closes witness's stdin (EOF after JSON-RPC).
pub const CLIENT_CLOSED: &str = "relay: the client closed its stdin (EOF): its session is over";

/// What the relay says at the end: what it could not read, and how much.
pub fn notes(c: &Counts, undelivered: u64) -> Vec<Event> {
    let mut notes = Vec::new();
    let mut said = Vec::new();
    // Lines that are not JSON-RPC are news only where stdio carried MCP; else they are the log of
    // a server that does not speak it (an HTTP server behind --proxy), matched as its log anyway.
    let carried_mcp = c.messages[0] + c.messages[1] > 0;
    for dir in [Dir::FromClient, Dir::FromServer] {
        let d = dir.index();
        if c.not_jsonrpc_lines[d] > 0 && carried_mcp {
            let mut s = format!(
                "{} line(s) {} were not JSON-RPC ({} bytes), passed through unread",
                c.not_jsonrpc_lines[d],
                dir.words(),
                c.not_jsonrpc_bytes[d]
            );
            if let (Dir::FromServer, Some(first)) = (dir, &c.first_not_jsonrpc) {
                s.push_str(&format!(" (the first: {first:?})"));
            }
            said.push(s);
        }
        if c.overlong_lines[d] > 0 {
            said.push(format!(
                "{} line(s) {} were longer than {} MiB ({} bytes), passed through whole and read only in part",
                c.overlong_lines[d],
                dir.words(),
                MAX_LINE >> 20,
                c.overlong_bytes[d]
            ));
        }
    }
    if c.untracked > 0 {
        said.push(format!(
            "{} call(s) passed while {MAX_PENDING} were already in flight: relayed, not timed",
            c.untracked
        ));
    }
    if undelivered > 0 {
        said.push(format!(
            "{undelivered} byte(s) from the client could not be delivered (the server had closed its stdin or was gone)"
        ));
    }
    if !said.is_empty() {
        notes.push(Event::Note {
            level: "warn".into(),
            text: format!("relay: {}", said.join("; ")),
        });
    }
    notes.push(Event::Note {
        level: "info".into(),
        text: format!(
            "relay: {} message(s) from the client, {} from the server ({} notification(s), {} progress, {} batch(es), {} answer(s) for no call in flight)",
            c.messages[0],
            c.messages[1],
            c.notifications[0] + c.notifications[1],
            c.progress,
            c.batches,
            c.unmatched_answers
        ),
    });
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(t: &mut Tracker, dir: Dir, text: &str, at: Instant, pid: u32) -> Vec<Finished> {
        let mut out = Vec::new();
        let mut r = LineReader::default();
        r.push(text.as_bytes(), |l| {
            t.line(dir, l, at, Some(pid), None, &mut out)
        });
        out
    }

    fn exchange(f: &Finished) -> (&str, &Outcome, Duration, Option<&str>) {
        match f {
            Finished::Exchange {
                group,
                start,
                end,
                outcome,
                detail,
                ..
            } => (group, outcome, *end - *start, detail.as_deref()),
            other => panic!("not an exchange: {other:?}"),
        }
    }

    #[test]
    fn a_tool_call_is_one_exchange_from_the_requests_read_to_the_answers_read() {
        let t0 = Instant::now();
        let mut t = Tracker::default();
        assert!(feed(&mut t, Dir::FromClient, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":\"search\",\"arguments\":{\"q\":\"secret\"}}}\n", t0, 1).is_empty());
        let out = feed(
            &mut t,
            Dir::FromServer,
            "{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"x\"}]}}\n",
            t0 + Duration::from_millis(1000),
            1,
        );
        let (group, outcome, d, detail) = exchange(&out[0]);
        assert_eq!(group, "stdio tools/call search");
        assert_eq!(outcome, &Outcome::Ok);
        assert_eq!(d, Duration::from_millis(1000));
        assert_eq!(detail, None);
        // The arguments' values are never kept.
        assert!(!format!("{out:?}").contains("secret"));
    }

    #[test]
    fn tool_errors_rpc_errors_and_refusals_follow_loads_rules() {
        let t0 = Instant::now();
        let mut t = Tracker::default();
        for id in 1..=3 {
            feed(&mut t, Dir::FromClient, &format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/call\",\"params\":{{\"name\":\"fail\"}}}}\n"), t0, 1);
        }
        let answers = "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"disk full\"}],\"isError\":true}}\n{\"jsonrpc\":\"2.0\",\"id\":2,\"error\":{\"code\":-32602,\"message\":\"Unknown tool: fail\"}}\n{\"jsonrpc\":\"2.0\",\"id\":3,\"error\":{\"code\":-32000,\"message\":\"QUEUE_FULL: try later\"}}\n";
        let out = feed(&mut t, Dir::FromServer, answers, t0, 1);
        let kinds: Vec<_> = out.iter().map(|f| exchange(f).1.describe()).collect();
        assert_eq!(kinds[0], "error: tool error");
        assert_eq!(kinds[1], "error: JSON-RPC error");
        assert!(kinds[2].starts_with("rejected"), "{kinds:?}");
        assert_eq!(exchange(&out[0]).3, Some("tool error: disk full"));
    }

    #[test]
    fn only_a_result_that_says_is_error_true_is_read_whole() {
        assert!(!says_is_error(
            br#"{"result":{"content":[],"isError":false}}"#
        ));
        assert!(!says_is_error(
            br#"{"result":{"content":[{"type":"text","text":"\"isError\":true"}]}}"#
        ));
        assert!(says_is_error(br#"{"result":{"isError" : true}}"#));
        assert!(says_is_error(
            br#"{"result":{"structuredContent":{"isError":true},"isError":false}}"#
        ));
    }

    #[test]
    fn initialize_is_a_session_apart_and_other_requests_are_named_by_method() {
        let t0 = Instant::now();
        let mut t = Tracker::default();
        feed(&mut t, Dir::FromClient, "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{}}\n{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"resources/read\",\"params\":{\"uri\":\"x\"}}\n", t0, 1);
        let out = feed(&mut t, Dir::FromServer, "{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{\"protocolVersion\":\"2025-11-25\"}}\n{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"result\":{}}\n", t0, 1);
        assert!(
            matches!(&out[0], Finished::Session { ok: true, version: Some(v), .. } if v == "2025-11-25")
        );
        assert_eq!(exchange(&out[1]).0, "stdio resources/read");
    }

    #[test]
    fn a_call_in_flight_when_the_server_closes_is_closed_and_other_servers_calls_are_not() {
        let t0 = Instant::now();
        let mut t = Tracker::default();
        feed(&mut t, Dir::FromClient, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\"}}\n", t0, 10);
        feed(&mut t, Dir::FromClient, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\"}}\n", t0, 11);
        let mut out = Vec::new();
        t.server_closed(10, t0 + Duration::from_millis(840), &mut out);
        assert_eq!(out.len(), 1);
        let (_, outcome, d, detail) = exchange(&out[0]);
        assert_eq!(outcome.describe(), "error: connection closed");
        assert_eq!(d, Duration::from_millis(840));
        assert!(detail.unwrap().contains("pid 10"));
        let mut rest = Vec::new();
        t.finish(t0, &mut rest);
        assert_eq!(
            rest.len(),
            1,
            "the call to pid 11 is still in flight until the end"
        );
    }

    #[test]
    fn on_a_restart_only_the_dead_servers_calls_are_answered_with_their_own_ids() {
        let t0 = Instant::now();
        let mut t = Tracker::default();
        feed(&mut t, Dir::FromClient, "{\"jsonrpc\":\"2.0\",\"id\":\"7\",\"method\":\"tools/call\",\"params\":{\"name\":\"slow\"}}\n{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"resources/subscribe\",\"params\":{\"uri\":\"x\"}}\n", t0, 10);
        feed(&mut t, Dir::FromClient, "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\"}}\n", t0, 11);
        feed(&mut t, Dir::FromServer, "{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n{\"jsonrpc\":\"2.0\",\"id\":50,\"method\":\"roots/list\"}\n", t0, 10);
        let cut = t.server_restarting(10, t0 + Duration::from_secs(6), "the server exited 124");
        let ids: Vec<&str> = cut.answered.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(
            ids,
            ["\"7\""],
            "the string id 7, not the number 7 (answered) nor pid 11's 8"
        );
        let (_, outcome, d, detail) = exchange(&cut.answered[0].1);
        assert_eq!(outcome.describe(), "error: connection closed");
        assert_eq!(d, Duration::from_secs(6));
        assert!(detail.unwrap().contains(
            "witness answered the client at once: JSON-RPC error -32000: the server exited 124"
        ));
        assert_eq!(cut.ask_methods, ["roots/list"]);
        assert_eq!(cut.subscriptions, 1);
        let mut rest = Vec::new();
        t.finish(t0, &mut rest);
        assert_eq!(rest.len(), 1, "pid 11's call is still in flight");
    }

    #[test]
    fn the_handshake_is_kept_for_a_replay_unless_the_revision_is_sessionless() {
        let t0 = Instant::now();
        let mut t = Tracker::default();
        assert_eq!(t.handshake.replay(), None);
        let init = "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-11-25\"}}";
        let done = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}";
        feed(&mut t, Dir::FromClient, &format!("{init}\n{done}\n"), t0, 1);
        feed(&mut t, Dir::FromServer, "{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{\"tools\":{}}}}\n", t0, 1);
        let (line, id, initialized) = t.handshake.replay().unwrap();
        assert_eq!(line, init.as_bytes());
        assert_eq!(id, "0");
        assert_eq!(initialized.unwrap(), done.as_bytes());
        let first = t.handshake.answer.clone().unwrap();
        assert_eq!(first.0.as_deref(), Some("2025-11-25"));
        // A sessionless revision has nothing to replay.
        let mut s = Tracker::default();
        feed(&mut s, Dir::FromClient, &format!("{init}\n"), t0, 1);
        feed(
            &mut s,
            Dir::FromServer,
            "{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{\"protocolVersion\":\"2026-07-28\"}}\n",
            t0,
            1,
        );
        assert_eq!(s.handshake.replay(), None);
        // The replayed answer's words: the same, or what differs.
        let same = replay_words(9, 0.1, br#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}}}}"#, Some(&first));
        assert!(
            same.0.contains("capabilities as in the first answer"),
            "{same:?}"
        );
        let other = replay_words(9, 0.1, br#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18","capabilities":{}}}"#, Some(&first));
        assert_eq!(other.1, "warn");
        assert!(other.0.contains("protocol 2025-06-18; the client negotiated 2025-11-25 with the first server; capabilities differ"), "{other:?}");
    }

    #[test]
    fn a_replay_keeps_only_the_answer_to_the_replayed_initialize_from_the_client() {
        let (w, _r) = std::io::pipe().map(|(r, w)| (w, r)).unwrap();
        let mut r = Replay {
            stdin: Arc::new(File::from(std::os::fd::OwnedFd::from(w))),
            id: "0".into(),
            initialized: None,
            sent: Instant::now(),
            held: Vec::new(),
        };
        let (on, answer) = r.push(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\"}\n{\"jsonrpc\":\"2.0\",\"id\":0,\"res");
        assert_eq!(
            on,
            b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\"}\n"
        );
        assert!(answer.is_none());
        let (on, answer) =
            r.push(b"ult\":{}}\n{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{}}\npartial");
        assert_eq!(
            answer.unwrap(),
            b"{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{}}"
        );
        assert_eq!(on, b"{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{}}\npartial");
    }

    #[test]
    fn the_clients_error_says_what_ended_the_server_and_that_it_restarts() {
        let m = restart_message(&ExitNotice {
            pid: 42,
            meaning: "exited 124: a timeout or watchdog fired (coreutils `timeout` and many watchdogs use 124)".into(),
            age_s: 6.012,
            restarting: true,
        });
        assert_eq!(m, "the server (pid 42) exited 124: a timeout or watchdog fired, at age 6.01 s; witness is restarting it, so this call will get no answer");
    }

    #[test]
    fn a_cancelled_call_is_its_own_outcome_and_a_late_answer_is_not_counted() {
        let t0 = Instant::now();
        let mut t = Tracker::default();
        feed(&mut t, Dir::FromClient, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{\"name\":\"hang\",\"_meta\":{\"progressToken\":9}}}\n", t0, 1);
        assert!(feed(&mut t, Dir::FromServer, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":9,\"progress\":1}}\n", t0, 1).is_empty());
        let out = feed(&mut t, Dir::FromClient, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":5,\"reason\":\"user\"}}\n", t0 + Duration::from_secs(2), 1);
        let (_, outcome, d, detail) = exchange(&out[0]);
        assert_eq!(outcome.describe(), "error: cancelled by the client");
        assert!(!outcome.is_ok());
        assert_eq!(d, Duration::from_secs(2));
        assert!(detail.unwrap().contains("user"));
        assert!(feed(
            &mut t,
            Dir::FromServer,
            "{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{}}\n",
            t0,
            1
        )
        .is_empty());
        assert_eq!(t.counts.unmatched_answers, 1);
        assert_eq!(t.counts.progress, 1);
    }

    #[test]
    fn questions_the_server_asks_the_client_go_the_other_way() {
        let t0 = Instant::now();
        let mut t = Tracker::default();
        feed(&mut t, Dir::FromServer, "{\"jsonrpc\":\"2.0\",\"id\":100,\"method\":\"sampling/createMessage\",\"params\":{}}\n", t0, 1);
        let out = feed(
            &mut t,
            Dir::FromClient,
            "{\"jsonrpc\":\"2.0\",\"id\":100,\"result\":{\"role\":\"assistant\"}}\n",
            t0 + Duration::from_millis(5),
            1,
        );
        assert_eq!(exchange(&out[0]).0, "stdio <- sampling/createMessage");
    }

    #[test]
    fn banners_binary_and_batches_are_counted_and_split_lines_are_read_whole() {
        let t0 = Instant::now();
        let mut t = Tracker::default();
        let mut out = Vec::new();
        let mut r = LineReader::default();
        let call = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"a\"}}\n[{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}]\n";
        for b in call.as_bytes().chunks(3) {
            r.push(b, |l| {
                t.line(Dir::FromClient, l, t0, Some(1), None, &mut out)
            });
        }
        let mut rs = LineReader::default();
        rs.push(b"server ready on stdio\n\xff\xfe\x00\n", |l| {
            t.line(Dir::FromServer, l, t0, Some(1), None, &mut out)
        });
        assert_eq!(t.counts.messages[0], 2);
        assert_eq!(t.counts.batches, 1);
        assert_eq!(t.counts.not_jsonrpc_lines[1], 2);
        assert_eq!(
            t.counts.first_not_jsonrpc.as_deref(),
            Some("server ready on stdio")
        );
        assert!(out.is_empty());
        let notes = notes(&t.counts, 0);
        assert!(
            matches!(&notes[0], Event::Note { text, .. } if text.contains("2 line(s) on the server's stdout were not JSON-RPC"))
        );
    }

    #[test]
    fn a_line_longer_than_the_reader_keeps_is_read_in_part_and_memory_stays_bounded() {
        let t0 = Instant::now();
        let mut t = Tracker::default();
        feed(&mut t, Dir::FromClient, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"big\"}}\n", t0, 1);
        let mut r = LineReader::default();
        let mut out = Vec::new();
        r.push(b"{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"", |l| {
            t.line(Dir::FromServer, l, t0, Some(1), None, &mut out)
        });
        let block = vec![b'x'; 1 << 20];
        for _ in 0..10 {
            r.push(&block, |_| unreachable!());
            assert!(r.line.capacity() <= MAX_LINE + READ_BYTES.max(1 << 20));
        }
        r.push(b"\"}]}}\n", |l| {
            t.line(Dir::FromServer, l, t0, Some(1), None, &mut out)
        });
        assert!(r.line.capacity() <= MAX_LINE + (1 << 20));
        let (_, outcome, _, detail) = exchange(&out[0]);
        assert_eq!(outcome, &Outcome::Ok);
        assert!(detail.unwrap().contains("longer than witness reads"));
        assert_eq!(t.counts.overlong_lines[1], 1);
        assert!(t.counts.overlong_bytes[1] > 10 << 20);
    }
}
