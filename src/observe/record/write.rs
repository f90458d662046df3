//! The recording's writers. Each runs on a thread of its own behind a bounded channel: the relay's
//! and the proxy's hot paths copy what passed and hand it over without waiting (a full channel
//! counts the message as not kept rather than slow the session). The thread masks, encodes and
//! writes; it flushes at most [`FLUSH`] after a write and at the end, so a `kill -9` of witness
//! loses at most the last [`FLUSH`]. A cap bounds the file: past it, messages are counted, not kept,
//! and a note says how many.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;

use super::har::{self, Content, Creator, NameValue, PostData, Timings};
use super::mask::Masker;
use super::stdio::{self, AnswerOutcome, ClientMessage, Header};

/// Written data reaches the file at most this long after it was handed over.
pub const FLUSH: Duration = Duration::from_millis(200);
/// Messages waiting for the writer; more are counted, not kept.
const QUEUE: usize = 8192;
/// Default cap on the file.
pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;
/// Default bound on one answer's result (stdio) or one body (HAR).
pub const DEFAULT_BODY_BYTES: u64 = 256 << 10;

/// `wrap --record FILE` and its bounds, validated.
#[derive(Debug, Clone)]
pub struct Settings {
    pub path: PathBuf,
    /// The file's cap (bytes).
    pub max_bytes: u64,
    /// An answer's result (stdio) or a body (HAR) longer than this is not kept whole.
    pub body_bytes: u64,
    /// Key names masked besides the default ones.
    pub mask_keys: Vec<String>,
}

/// What a recording kept, for wrap's last line.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    pub path: PathBuf,
    /// `messages` (stdio) or `exchanges` (HAR).
    pub unit: &'static str,
    pub kept: u64,
    pub not_kept: u64,
    /// Answers' results or bodies not kept whole (over the per-item bound).
    pub cut: u64,
    pub bytes: u64,
    /// Why nothing more was written, when the file failed.
    pub failed: Option<String>,
}

impl Summary {
    /// wrap's line on stderr.
    pub fn line(&self) -> String {
        let mut s = format!(
            "witness: recording in {} ({} {}, {} bytes)",
            self.path.display(),
            self.kept,
            self.unit,
            self.bytes
        );
        if self.not_kept > 0 {
            s.push_str(&format!(
                "; {} {} not kept (past the cap, --record-max)",
                self.not_kept, self.unit
            ));
        }
        if self.cut > 0 {
            s.push_str(&format!(
                "; {} {} cut (over --record-body-max)",
                self.cut,
                if self.unit == "messages" {
                    "results"
                } else {
                    "bodies"
                }
            ));
        }
        if self.not_kept == 0 && self.cut == 0 {
            s.push_str("; nothing was cut");
        }
        if let Some(f) = &self.failed {
            s.push_str(&format!("; writing failed: {f}"));
        }
        s
    }
}

/// Creates the recording's file (never through a symlink; 0600 when the run carries secrets). A
/// failure names `--record` and the path: a usage error.
fn create(path: &std::path::Path) -> anyhow::Result<File> {
    crate::files::create_named(path).map_err(|e| {
        crate::error::usage(format!(
            "--record {}: witness cannot write the recording there: {e}; name a file in a folder that exists and you can write",
            path.display()
        ))
    })
}

/// The recording's first write failed: a usage error naming `--record` and the path.
fn write_failed(path: &std::path::Path, e: std::io::Error) -> anyhow::Error {
    crate::error::usage(format!(
        "--record {}: writing the recording failed: {e}",
        path.display()
    ))
}

fn secs(d: Duration) -> f64 {
    (d.as_micros() as f64) / 1e6
}

/// The hand-over and its counts, shared by both writers.
struct Feed<T> {
    tx: SyncSender<T>,
    /// Messages the queue had no room for.
    dropped: std::sync::Arc<AtomicU64>,
    thread: Mutex<Option<JoinHandle<Summary>>>,
}

impl<T: Send + 'static> Feed<T> {
    /// The writer's thread, fed through a bounded queue; `dropped` counts what found it full.
    fn start(
        dropped: std::sync::Arc<AtomicU64>,
        run: impl FnOnce(Receiver<T>) -> Summary + Send + 'static,
    ) -> std::io::Result<Self> {
        let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE);
        let thread = std::thread::Builder::new()
            .name("record".into())
            .spawn(move || run(rx))?;
        Ok(Feed {
            tx,
            dropped,
            thread: Mutex::new(Some(thread)),
        })
    }

    fn send(&self, item: T) {
        match self.tx.try_send(item) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Waits for the next item, returning early when a flush is due. `None`: the feed ended.
fn next<T>(rx: &Receiver<T>, dirty_since: Option<Instant>) -> Option<Option<T>> {
    let wait = match dirty_since {
        Some(at) => FLUSH.saturating_sub(at.elapsed()),
        None => Duration::from_secs(3600),
    };
    match rx.recv_timeout(wait) {
        Ok(item) => Some(Some(item)),
        Err(RecvTimeoutError::Timeout) => Some(None),
        Err(RecvTimeoutError::Disconnected) => None,
    }
}

// ---- MCP over stdio ------------------------------------------------------------------------------

enum StdioItem {
    Line {
        at: Instant,
        from_client: bool,
        bytes: Vec<u8>,
    },
    /// A line too long to read whole (it passed; only its start was read).
    Lost,
    End,
}

/// The stdio relay's recorder (JSONL, stdio.rs).
pub struct StdioRecorder {
    feed: Feed<StdioItem>,
}

impl StdioRecorder {
    /// Creates the file and writes its header; the session's clock starts now.
    pub fn create(settings: &Settings, command: &[String]) -> anyhow::Result<Self> {
        let file = create(&settings.path)?;
        let masker = Masker::new(&settings.mask_keys, crate::secrets::values());
        let start = Instant::now();
        let started_unix_ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let header = Header {
            witness_recording: stdio::VERSION,
            transport: "stdio".into(),
            started_unix_ms,
            command: masker.argv(command),
            max_bytes: settings.max_bytes,
            answer_bytes: settings.body_bytes,
        };
        let mut w = StdioWriter {
            file: std::io::BufWriter::with_capacity(64 << 10, file),
            masker,
            start,
            max_bytes: settings.max_bytes,
            answer_bytes: settings.body_bytes,
            summary: Summary {
                path: settings.path.clone(),
                unit: "messages",
                ..Default::default()
            },
            capped: false,
            dropped: Default::default(),
        };
        let h = stdio::line(&header);
        w.file
            .write_all(&h)
            .and_then(|_| w.file.flush())
            .map_err(|e| write_failed(&settings.path, e))?;
        w.summary.bytes = h.len() as u64;
        let feed = Feed::start(w.dropped.clone(), move |rx| w.run(rx))?;
        Ok(Self { feed })
    }

    /// A complete line that passed (`from_client`: the client sent it), read at `at`. Never waits.
    pub fn line(&self, at: Instant, from_client: bool, bytes: &[u8]) {
        self.feed.send(StdioItem::Line {
            at,
            from_client,
            bytes: bytes.to_vec(),
        });
    }

    /// A line that passed but was too long to be read whole: counted, not kept.
    pub fn lost(&self) {
        self.feed.send(StdioItem::Lost);
    }

    /// Writes the last note, flushes and says what was kept. Later lines are not kept.
    pub fn finish(&self) -> Option<Summary> {
        // The end goes in line after what was handed over, waiting for room if need be.
        let _ = self.feed.tx.send(StdioItem::End);
        let t = self.feed.thread.lock().ok()?.take()?;
        t.join().ok()
    }
}

struct StdioWriter {
    file: std::io::BufWriter<File>,
    masker: Masker,
    start: Instant,
    max_bytes: u64,
    answer_bytes: u64,
    summary: Summary,
    capped: bool,
    dropped: std::sync::Arc<AtomicU64>,
}

impl StdioWriter {
    fn run(mut self, rx: Receiver<StdioItem>) -> Summary {
        let mut dirty_since: Option<Instant> = None;
        while let Some(item) = next(&rx, dirty_since) {
            match item {
                Some(StdioItem::Line {
                    at,
                    from_client,
                    bytes,
                }) => {
                    let t = secs(at.saturating_duration_since(self.start));
                    for line in self.encode(t, from_client, &bytes) {
                        self.keep(t, &line);
                    }
                    dirty_since.get_or_insert_with(Instant::now);
                }
                Some(StdioItem::Lost) => self.summary.not_kept += 1,
                Some(StdioItem::End) => break,
                None => {}
            }
            if dirty_since.is_some_and(|d| d.elapsed() >= FLUSH) {
                self.flush();
                dirty_since = None;
            }
        }
        let not_kept = self.summary.not_kept + self.dropped.load(Ordering::Relaxed);
        self.summary.not_kept = not_kept;
        let note = stdio::Note {
            t: secs(self.start.elapsed()),
            note: if not_kept == 0 {
                format!(
                    "the session ended; all {} messages were kept",
                    self.summary.kept
                )
            } else {
                format!(
                    "the session ended; {} messages were kept and {not_kept} were not (the cap of {} bytes, --record-max, or a line too long to read, or the recorder falling behind)",
                    self.summary.kept, self.max_bytes
                )
            },
            not_kept,
        };
        self.raw(&stdio::line(&note));
        self.flush();
        self.summary
    }

    /// The recording's lines for one line that passed (a batch is one line per message).
    fn encode(&mut self, t: f64, from_client: bool, bytes: &[u8]) -> Vec<Vec<u8>> {
        let Ok(v) = serde_json::from_slice::<Value>(bytes) else {
            return Vec::new();
        };
        let msgs = match v {
            Value::Array(items) => items,
            v @ Value::Object(_) => vec![v],
            _ => return Vec::new(),
        };
        msgs.into_iter()
            .filter(Value::is_object)
            .map(|mut m| {
                if from_client {
                    self.masker.value(&mut m);
                    return stdio::line(&ClientMessage::new(t, m));
                }
                let answer = m.get("method").is_none()
                    && m.get("id").is_some_and(|i| !i.is_null())
                    && (m.get("result").is_some() || m.get("error").is_some());
                if !answer {
                    self.masker.value(&mut m);
                    return stdio::line(&stdio::ServerMessage {
                        t,
                        from: "server".into(),
                        msg: m,
                    });
                }
                stdio::line(&self.answer(t, m))
            })
            .collect()
    }

    fn answer(&mut self, t: f64, mut m: Value) -> stdio::Answer {
        let id = m.get("id").cloned().unwrap_or(Value::Null);
        if let Some(e) = m.get("error") {
            return stdio::Answer {
                t,
                from: "server".into(),
                id,
                outcome: AnswerOutcome::Error,
                code: e.get("code").and_then(Value::as_i64),
                message: e
                    .get("message")
                    .and_then(Value::as_str)
                    .map(|s| self.masker.text(s)),
                result: None,
                result_cut: false,
            };
        }
        let mut result = m.get_mut("result").map(Value::take).unwrap_or(Value::Null);
        let outcome = if result.get("isError").and_then(Value::as_bool) == Some(true) {
            AnswerOutcome::ToolError
        } else {
            AnswerOutcome::Ok
        };
        self.masker.value(&mut result);
        let size = serde_json::to_vec(&result).map(|v| v.len()).unwrap_or(0) as u64;
        let cut = size > self.answer_bytes;
        if cut {
            self.summary.cut += 1;
        }
        stdio::Answer {
            t,
            from: "server".into(),
            id,
            outcome,
            code: None,
            message: None,
            result: (!cut).then_some(result),
            result_cut: cut,
        }
    }

    /// Writes one message's line unless the cap is reached (then it is counted, and the first time
    /// a note says so: the file says why it stops even if witness is killed later).
    fn keep(&mut self, t: f64, line: &[u8]) {
        if self.capped || self.summary.bytes + line.len() as u64 > self.max_bytes {
            self.summary.not_kept += 1;
            if !self.capped {
                self.capped = true;
                let note = stdio::Note {
                    t,
                    note: format!(
                        "the recording reached its cap of {} bytes (--record-max): later messages are counted, not kept",
                        self.max_bytes
                    ),
                    not_kept: 1,
                };
                self.raw(&stdio::line(&note));
            }
            return;
        }
        if self.raw(line) {
            self.summary.kept += 1;
        }
    }

    fn raw(&mut self, line: &[u8]) -> bool {
        if self.summary.failed.is_some() {
            return false;
        }
        match self.file.write_all(line) {
            Ok(()) => {
                self.summary.bytes += line.len() as u64;
                true
            }
            Err(e) => {
                self.summary.failed = Some(e.to_string());
                false
            }
        }
    }

    fn flush(&mut self) {
        if let Err(e) = self.file.flush() {
            self.summary.failed.get_or_insert(e.to_string());
        }
    }
}

// ---- HTTP as HAR ---------------------------------------------------------------------------------

/// One exchange as the proxy saw it, unmasked; the writer masks it. Bodies are bounded copies.
#[derive(Debug, Clone, Default)]
pub struct Draft {
    /// Start order (the proxy's count of exchanges begun).
    pub seq: u64,
    pub start: Option<Instant>,
    pub method: String,
    pub url: String,
    pub http_version: String,
    pub request_headers: Vec<(String, Vec<u8>)>,
    pub request_body: Vec<u8>,
    /// The request body was longer than what was copied.
    pub request_cut: bool,
    pub request_bytes: u64,
    /// None: no answer reached the proxy.
    pub status: Option<u16>,
    pub status_text: String,
    pub response_version: String,
    pub response_headers: Vec<(String, Vec<u8>)>,
    /// When the answer's head arrived.
    pub headers_at: Option<Instant>,
    pub end: Option<Instant>,
    pub response_body: Vec<u8>,
    pub response_cut: bool,
    pub response_bytes: u64,
    /// What went wrong (already scrubbed of the request's credentials).
    pub failure: Option<String>,
}

enum HarItem {
    Entry(Box<Draft>),
    End,
}

/// The proxy's recorder (HAR 1.2). The file is a valid HAR after every flush: entries are written,
/// then the closing bytes; the next flush writes over the closing bytes, in one write.
pub struct HarRecorder {
    feed: Feed<HarItem>,
    seq: AtomicU64,
    body_bytes: usize,
}

/// How long a finished exchange waits for the exchanges begun before it to finish, so entries go
/// in start order; one that waited longer is written out of order (a long stream must not hold the
/// rest back from the file).
const REORDER: Duration = Duration::from_secs(1);

impl HarRecorder {
    pub fn create(settings: &Settings) -> anyhow::Result<Self> {
        let file = create(&settings.path)?;
        let masker = Masker::new(&settings.mask_keys, crate::secrets::values());
        let mut w = HarWriter {
            file,
            masker,
            base: (Instant::now(), SystemTime::now()),
            max_bytes: settings.max_bytes,
            body_bytes: settings.body_bytes as usize,
            end: 0,
            entries: 0,
            summary: Summary {
                path: settings.path.clone(),
                unit: "exchanges",
                ..Default::default()
            },
            waiting: std::collections::BTreeMap::new(),
            next: 0,
            dropped: Default::default(),
            pending: Vec::new(),
        };
        let head = serde_json::json!({"log": {"version": "1.2", "creator": Creator::witness()}})
            .to_string();
        // `{"log":{"version":"1.2","creator":{…}` + `,"entries":[`.
        let mut start = head.as_bytes()[..head.len() - 2].to_vec();
        start.extend_from_slice(b",\"entries\":[\n");
        w.end = start.len() as u64;
        start.extend_from_slice(&w.closing());
        w.file
            .write_all_at(&start, 0)
            .map_err(|e| write_failed(&settings.path, e))?;
        w.summary.bytes = start.len() as u64;
        let feed = Feed::start(w.dropped.clone(), move |rx| w.run(rx))?;
        Ok(Self {
            feed,
            seq: AtomicU64::new(0),
            body_bytes: settings.body_bytes as usize,
        })
    }

    /// The next exchange's place in start order.
    pub fn begin(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    /// How much of a body the proxy copies (one byte more than kept, to know it was cut).
    pub fn body_bytes(&self) -> usize {
        self.body_bytes
    }

    /// A finished exchange. Never waits.
    pub fn entry(&self, d: Draft) {
        self.feed.send(HarItem::Entry(Box::new(d)));
    }

    /// Writes what is left, the closing note, and says what was kept.
    pub fn finish(&self) -> Option<Summary> {
        let _ = self.feed.tx.send(HarItem::End);
        let t = self.feed.thread.lock().ok()?.take()?;
        t.join().ok()
    }
}

struct HarWriter {
    file: File,
    masker: Masker,
    /// One instant and the wall-clock time it was.
    base: (Instant, SystemTime),
    max_bytes: u64,
    body_bytes: usize,
    /// Where the closing bytes begin.
    end: u64,
    entries: u64,
    summary: Summary,
    /// Finished exchanges waiting for earlier ones, by start order, with when they arrived.
    waiting: std::collections::BTreeMap<u64, (Instant, Box<Draft>)>,
    next: u64,
    dropped: std::sync::Arc<AtomicU64>,
    /// Encoded entries not yet written.
    pending: Vec<u8>,
}

impl HarWriter {
    fn run(mut self, rx: Receiver<HarItem>) -> Summary {
        let mut dirty_since: Option<Instant> = None;
        loop {
            let wait_for = match (dirty_since, self.waiting.is_empty()) {
                (Some(d), _) => Some(d),
                (None, false) => Some(Instant::now()),
                (None, true) => None,
            };
            match next(&rx, wait_for) {
                None | Some(Some(HarItem::End)) => break,
                Some(Some(HarItem::Entry(d))) => {
                    self.waiting.insert(d.seq, (Instant::now(), d));
                }
                Some(None) => {}
            }
            if self.release(false) {
                dirty_since.get_or_insert_with(Instant::now);
            }
            if dirty_since.is_some_and(|d| d.elapsed() >= FLUSH) {
                self.flush();
                dirty_since = None;
            }
        }
        self.release(true);
        self.summary.not_kept += self.dropped.load(Ordering::Relaxed);
        self.flush();
        self.summary
    }

    /// Encodes the exchanges whose turn has come (all of them with `all`). Whether any was.
    fn release(&mut self, all: bool) -> bool {
        let mut any = false;
        while let Some((&seq, (arrived, _))) = self.waiting.iter().next() {
            if !(all || seq <= self.next || arrived.elapsed() >= REORDER) {
                break;
            }
            let (_, d) = self.waiting.remove(&seq).expect("first key");
            self.next = self.next.max(seq + 1);
            self.encode(&d);
            any = true;
        }
        any
    }

    fn encode(&mut self, d: &Draft) {
        let entry = self.entry(d);
        let text = match serde_json::to_vec(&entry) {
            Ok(t) => t,
            Err(_) => return,
        };
        let sep = if self.summary.kept == 0 { 0 } else { 2 };
        let size = self.end + self.pending.len() as u64 + sep + text.len() as u64;
        if self.summary.not_kept > 0 || size + self.closing().len() as u64 > self.max_bytes {
            self.summary.not_kept += 1;
            return;
        }
        if sep > 0 {
            self.pending.extend_from_slice(b",\n");
        }
        self.pending.extend_from_slice(&text);
        self.summary.kept += 1;
    }

    /// `]` and the log's closing, with a comment when exchanges were not kept.
    fn closing(&self) -> Vec<u8> {
        let not_kept = self.summary.not_kept + self.dropped.load(Ordering::Relaxed);
        let mut c = b"\n]".to_vec();
        if not_kept > 0 {
            let comment = format!(
                "witness: {not_kept} exchanges were not kept (the cap of {} bytes, --record-max, was reached, or the recorder fell behind)",
                self.max_bytes
            );
            c.extend_from_slice(b",\"comment\":");
            c.extend_from_slice(&serde_json::to_vec(&comment).expect("a string"));
        }
        c.extend_from_slice(b"}}\n");
        c
    }

    /// Writes the pending entries and the closing bytes over the old closing bytes, in one write.
    fn flush(&mut self) {
        if self.summary.failed.is_some() {
            return;
        }
        let mut buf = std::mem::take(&mut self.pending);
        let body = buf.len() as u64;
        let closing = self.closing();
        buf.extend_from_slice(&closing);
        match self.file.write_all_at(&buf, self.end) {
            Ok(()) => {
                self.end += body;
                self.entries = self.summary.kept;
                self.summary.bytes = self.end + closing.len() as u64;
                // A shorter closing than before leaves no old bytes after it.
                let _ = self.file.set_len(self.summary.bytes);
            }
            Err(e) => self.summary.failed = Some(e.to_string()),
        }
    }

    fn time(&self, at: Option<Instant>) -> Option<SystemTime> {
        let at = at?;
        Some(match at.checked_duration_since(self.base.0) {
            Some(d) => self.base.1 + d,
            None => self.base.1 - self.base.0.duration_since(at),
        })
    }

    fn headers(&self, hs: &[(String, Vec<u8>)]) -> Vec<NameValue> {
        hs.iter()
            .map(|(n, v)| {
                let value = if self.masker.is_credential_header(n) {
                    crate::secrets::MASK.to_string()
                } else {
                    self.masker.text(&String::from_utf8_lossy(v))
                };
                NameValue::new(n.clone(), value)
            })
            .collect()
    }

    /// A body as HAR text: masked when it can be read whole; a cut JSON body is not kept (its
    /// secrets could not be found in part of it); binary as base64.
    fn body(
        &mut self,
        bytes: &[u8],
        cut: bool,
        total: u64,
        mime: &str,
    ) -> (Option<String>, Option<String>, Option<String>) {
        if bytes.is_empty() {
            return (None, None, None);
        }
        let json = mime.to_ascii_lowercase().contains("json")
            || bytes
                .iter()
                .find(|c| !c.is_ascii_whitespace())
                .is_some_and(|c| *c == b'{' || *c == b'[');
        let over = cut || bytes.len() > self.body_bytes;
        if over {
            self.summary.cut += 1;
        }
        let Ok(text) =
            std::str::from_utf8(&bytes[..bytes.len().min(self.body_bytes)]).or_else(|e| {
                // A cut that fell inside a character keeps the whole characters before it.
                if over && e.error_len().is_none() {
                    std::str::from_utf8(&bytes[..e.valid_up_to()])
                } else {
                    Err(e)
                }
            })
        else {
            if over {
                return (None, None, Some(format!("a binary body of {total} bytes, over the bound of {} bytes (--record-body-max): not kept", self.body_bytes)));
            }
            use base64::Engine;
            let b = base64::engine::general_purpose::STANDARD.encode(bytes);
            return (Some(self.masker.text(&b)), Some("base64".into()), None);
        };
        if !over {
            return (Some(self.masker.body(text)), None, None);
        }
        if json {
            return (None, None, Some(format!("a JSON body of {total} bytes, over the bound of {} bytes (--record-body-max): not kept (its secrets could not be masked in part of it)", self.body_bytes)));
        }
        let kept = if mime.contains("x-www-form-urlencoded") {
            self.masker.pairs(text, '&')
        } else {
            self.masker.text(text)
        };
        (
            Some(kept),
            None,
            Some(format!(
                "cut: the first {} of {total} bytes (--record-body-max)",
                text.len()
            )),
        )
    }

    fn entry(&mut self, d: &Draft) -> har::Entry {
        let started = self
            .time(d.start)
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let ms = |a: Option<Instant>, b: Option<Instant>| match (a, b) {
            (Some(a), Some(b)) => {
                (b.saturating_duration_since(a).as_secs_f64() * 1e6).round() / 1e3
            }
            _ => -1.0,
        };
        let wait = ms(d.start, d.headers_at);
        let receive = ms(d.headers_at, d.end);
        let total = ms(d.start, d.end);
        let mime = |hs: &[(String, Vec<u8>)]| {
            hs.iter()
                .find(|(n, _)| n.eq_ignore_ascii_case("content-type"))
                .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default()
        };
        let req_mime = mime(&d.request_headers);
        let resp_mime = mime(&d.response_headers);
        let url = self.masker.url(&d.url);
        let query_string = url
            .split_once('?')
            .map(|(_, q)| {
                q.split('&')
                    .filter(|p| !p.is_empty())
                    .map(|p| match p.split_once('=') {
                        Some((k, v)) => NameValue::new(k, v),
                        None => NameValue::new(p, ""),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let (req_text, _, req_comment) = {
            let (t, enc, c) = self.body(&d.request_body, d.request_cut, d.request_bytes, &req_mime);
            // HAR's postData has no encoding: a binary request body is not kept.
            match enc {
                Some(_) => (
                    None,
                    None,
                    Some(format!(
                        "a binary body of {} bytes: not kept",
                        d.request_bytes
                    )),
                ),
                None => (t, None::<String>, c),
            }
        };
        let post_data = (d.request_bytes > 0).then(|| PostData {
            mime_type: req_mime.clone(),
            text: req_text.unwrap_or_default(),
            params: Vec::new(),
            comment: req_comment,
        });
        let (resp_text, encoding, resp_comment) = self.body(
            &d.response_body,
            d.response_cut,
            d.response_bytes,
            &resp_mime,
        );
        let response = match d.status {
            Some(status) => har::Response {
                status,
                status_text: d.status_text.clone(),
                http_version: d.response_version.clone(),
                headers: self.headers(&d.response_headers),
                content: Content {
                    size: d.response_bytes as i64,
                    compression: None,
                    mime_type: resp_mime,
                    text: resp_text,
                    encoding,
                    comment: resp_comment,
                },
                body_size: d.response_bytes as i64,
                comment: d.failure.as_ref().map(|f| self.masker.text(f)),
                ..Default::default()
            },
            None => har::Response {
                comment: Some(
                    self.masker.text(
                        d.failure
                            .as_deref()
                            .unwrap_or("no answer reached witness's proxy"),
                    ),
                ),
                ..Default::default()
            },
        };
        har::Entry {
            pageref: None,
            started_date_time: har::rfc3339_ms(started),
            time: total.max(0.0),
            request: har::Request {
                method: d.method.clone(),
                url,
                http_version: d.http_version.clone(),
                cookies: Vec::new(),
                headers: self.headers(&d.request_headers),
                query_string,
                post_data,
                headers_size: -1,
                body_size: d.request_bytes as i64,
                comment: None,
            },
            response,
            cache: serde_json::json!({}),
            timings: Timings {
                send: 0.0,
                wait: wait.max(0.0),
                receive: receive.max(0.0),
                ..Default::default()
            },
            server_ip_address: None,
            connection: None,
            comment: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::record::{open, Recording};

    fn settings(name: &str, max_bytes: u64, body_bytes: u64) -> Settings {
        let dir = std::env::temp_dir().join(format!("witness-write-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Settings {
            path: dir.join(name),
            max_bytes,
            body_bytes,
            mask_keys: vec![],
        }
    }

    fn draft(seq: u64, body: &[u8], resp: &[u8]) -> Draft {
        let now = Instant::now();
        Draft {
            seq,
            start: Some(now),
            method: "POST".into(),
            url: format!("http://127.0.0.1:1/p/{seq}?token=abc1"),
            http_version: "HTTP/1.1".into(),
            request_headers: vec![
                ("authorization".into(), b"Bearer tok-1234".to_vec()),
                ("content-type".into(), b"application/json".to_vec()),
            ],
            request_body: body.to_vec(),
            request_bytes: body.len() as u64,
            status: Some(200),
            status_text: "OK".into(),
            response_version: "HTTP/1.1".into(),
            response_headers: vec![("content-type".into(), b"text/plain".to_vec())],
            headers_at: Some(now),
            end: Some(now),
            response_body: resp.to_vec(),
            response_bytes: resp.len() as u64,
            ..Default::default()
        }
    }

    #[test]
    fn a_har_keeps_start_order_masks_and_cuts_bodies_with_a_comment() {
        let s = settings("a.har", 1 << 20, 64);
        let r = HarRecorder::create(&s).unwrap();
        // Finished out of start order: written in start order.
        r.entry(draft(1, br#"{"password":"pw-1","n":1}"#, b"second"));
        r.entry(draft(0, br#"{"n":0}"#, &[b'x'; 100]));
        let big = format!(r#"{{"password":"pw-2","pad":"{}"}}"#, "y".repeat(100));
        r.entry(draft(2, big.as_bytes(), b"third"));
        let sum = r.finish().unwrap();
        assert_eq!((sum.kept, sum.not_kept, sum.cut), (3, 0, 2));
        let text = std::fs::read_to_string(&s.path).unwrap();
        assert!(!text.contains("pw-") && !text.contains("tok-1234") && !text.contains("abc1"));
        let Recording::Http(har) = open(&s.path).unwrap() else {
            panic!("a HAR")
        };
        let e = &har.log.entries;
        assert!(e[0].request.url.ends_with("/p/0?token=***"));
        assert_eq!(e[0].request.post_data.as_ref().unwrap().text, r#"{"n":0}"#);
        assert_eq!(
            e[0].response.content.text.as_deref(),
            Some(&"x".repeat(64)[..])
        );
        assert!(e[0]
            .response
            .content
            .comment
            .as_ref()
            .unwrap()
            .contains("cut"));
        assert_eq!(e[1].request.header("authorization"), Some("***"));
        assert_eq!(
            e[1].request.post_data.as_ref().unwrap().text,
            r#"{"n":1,"password":"***"}"#
        );
        // A JSON body over the bound is not kept: its secrets could not be found in part of it.
        let p = e[2].request.post_data.as_ref().unwrap();
        assert_eq!(p.text, "");
        assert!(p.comment.as_ref().unwrap().contains("not kept"));
    }

    #[test]
    fn a_har_past_its_cap_says_in_the_log_how_many_were_not_kept() {
        let s = settings("cap.har", 1500, 1024);
        let r = HarRecorder::create(&s).unwrap();
        for i in 0..10 {
            r.entry(draft(i, b"{}", b"ok"));
        }
        let sum = r.finish().unwrap();
        assert!(sum.kept >= 1 && sum.kept + sum.not_kept == 10, "{sum:?}");
        assert!(std::fs::metadata(&s.path).unwrap().len() <= 1500 + 200);
        let Recording::Http(har) = open(&s.path).unwrap() else {
            panic!("a HAR")
        };
        assert_eq!(har.log.entries.len() as u64, sum.kept);
        let c = har.log.comment.unwrap();
        assert!(
            c.contains(&format!("{} exchanges were not kept", sum.not_kept)),
            "{c}"
        );
    }

    #[test]
    fn stdio_batches_errors_tool_errors_and_long_results_are_recorded_as_the_format_says() {
        let s = settings("s.jsonl", 1 << 20, 40);
        let r = StdioRecorder::create(&s, &["srv".into(), "--token".into(), "t-9".into()]).unwrap();
        let at = Instant::now();
        r.line(at, true, br#"[{"jsonrpc":"2.0","id":1,"method":"a"},{"jsonrpc":"2.0","id":"x","method":"b","params":{"secret":"s-1"}}]"#);
        r.line(
            at,
            false,
            br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no a"}}"#,
        );
        r.line(
            at,
            false,
            br#"{"jsonrpc":"2.0","id":"x","result":{"isError":true,"content":[]}}"#,
        );
        r.line(at, false, br#"{"jsonrpc":"2.0","id":2,"result":{"text":"a long result, longer than forty bytes"}}"#);
        r.line(
            at,
            false,
            br#"{"jsonrpc":"2.0","method":"notifications/progress"}"#,
        );
        r.lost();
        let sum = r.finish().unwrap();
        assert_eq!((sum.kept, sum.not_kept, sum.cut), (6, 1, 1));
        let Recording::Stdio(rec) = open(&s.path).unwrap() else {
            panic!("stdio")
        };
        assert_eq!(rec.header.command, ["srv", "--token", "***"]);
        assert_eq!(rec.client.len(), 2);
        assert_eq!(rec.client[1].msg["params"]["secret"], "***");
        let e = rec.answer_to(&serde_json::json!(1)).unwrap();
        assert_eq!((e.outcome, e.code), (AnswerOutcome::Error, Some(-32601)));
        assert_eq!(e.message.as_deref(), Some("no a"));
        let t = rec.answer_to(&serde_json::json!("x")).unwrap();
        assert_eq!(t.outcome, AnswerOutcome::ToolError);
        let long = rec.answer_to(&serde_json::json!(2)).unwrap();
        assert!(long.result_cut && long.result.is_none());
        assert_eq!(rec.server.len(), 1);
        assert_eq!(rec.note.unwrap().not_kept, 1);
    }
}
