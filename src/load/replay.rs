//! `witness replay`'s load: a recording (`wrap --record`: MCP over stdio as JSONL, HTTP as HAR)
//! turned into an open-loop schedule. Each recorded call goes at its recorded offset ÷ the level's
//! speed, through the open loop of `--rates` ([`super::open::drive`]): a call that cannot go on time
//! is late, and its latency counts from its intended send. Each answer is compared with the
//! recorded one as it comes in (analyze/answers.rs), and the level's counts are journalled at its end.
//!
//! Over stdio one server process serves one client: the calls of every session go over the one
//! session witness holds (opened with the recorded `initialize`), each with witness's own request id.
//! Over HTTP each request goes to `--url`'s scheme, host and port with the recorded path, query,
//! headers and body.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{HeaderMap, Method, Uri};
use serde_json::Value;
use tokio::sync::watch;

use super::client::{self, Limits, Sent};
use super::mcp::{McpTarget, Session};
use super::open::{drive, interrupted, Timing};
use super::outcome::Rejection;
use super::progress::Tally;
use super::settings::{stopped, LadderConfig};
use crate::analyze::answers::{compare, Body, Compare, Said, Tally as Answers, NAMES_KEPT};
use crate::journal::{group_of_level, Event, Journal, Outcome, ReplayName};
use crate::observe::record::stdio::AnswerOutcome;
use crate::observe::record::{Har, Recording, StdioRecording};
use crate::server::Target;

/// How many buckets the recording's pacing is drawn in.
const PACING_BUCKETS: usize = 50;

/// What a replayed call sends.
#[derive(Debug)]
pub enum Send {
    /// A JSON-RPC request over the stdio session.
    Mcp { method: String, params: Value },
    /// An HTTP request.
    Http {
        method: Method,
        uri: Uri,
        headers: HeaderMap,
        body: Bytes,
    },
}

/// One recorded call: when it went (seconds after the first call), its kind (index into
/// [`Replay::names`]), what it sends and what the recording says it got.
#[derive(Debug)]
pub struct Call {
    pub offset_s: f64,
    pub name: usize,
    pub send: Send,
    /// None: no answer was recorded (the recording was cut), so none is compared.
    pub recorded: Option<Said>,
}

/// A recording made ready to play.
#[derive(Debug)]
pub struct Replay {
    pub calls: Vec<Call>,
    pub names: Vec<ReplayName>,
    /// `stdio` or `http`.
    pub transport: &'static str,
    pub sessions: u32,
    pub compare: Compare,
    /// From the first call's send to the last's, as recorded.
    pub span_s: f64,
    pub max_in_flight: u32,
    /// The recorded `initialize` params (stdio), sent as recorded to open the session.
    pub initialize: Option<Value>,
    /// What of the recording is not replayed, in words.
    pub notes: Vec<String>,
}

/// What [`Replay::new`] is told besides the recording.
pub struct Options<'a> {
    /// `--url` (HTTP): its scheme, host and port replace the recorded ones.
    pub base: Option<&'a Uri>,
    /// `--header`s: added to every HTTP request, in place of a recorded header of that name.
    pub headers: &'a HeaderMap,
    pub sessions: u32,
    pub compare: Compare,
    pub max_in_flight: u32,
}

impl Replay {
    /// The calls of a recording, ready to play; Err: why it cannot be replayed, in words.
    pub fn new(rec: &Recording, o: &Options) -> Result<Self, String> {
        let mut names = Names::default();
        let mut notes = Vec::new();
        let (mut calls, transport, initialize) = match rec {
            Recording::Stdio(s) => {
                let (calls, init) = stdio_calls(s, &mut names, &mut notes);
                (calls, "stdio", init)
            }
            Recording::Http(h) => {
                let base = o
                    .base
                    .ok_or("an HTTP recording (HAR) replays against --url (its scheme, host and port replace the recorded ones)")?;
                (
                    http_calls(h, base, o.headers, &mut names, &mut notes)?,
                    "http",
                    None,
                )
            }
        };
        if calls.is_empty() {
            return Err("it holds no request to replay".into());
        }
        calls.sort_by(|a, b| a.offset_s.total_cmp(&b.offset_s));
        let first = calls[0].offset_s;
        for c in calls.iter_mut() {
            c.offset_s -= first;
        }
        let span_s = calls.last().map_or(0.0, |c| c.offset_s);
        Ok(Replay {
            calls,
            names: names.finish(),
            transport,
            sessions: o.sessions,
            compare: o.compare,
            span_s,
            max_in_flight: o.max_in_flight,
            initialize,
            notes,
        })
    }

    /// The requests one level sends: every call of every session.
    pub fn sends(&self) -> u64 {
        self.calls.len() as u64 * self.sessions as u64
    }

    /// How the sessions are played, in words.
    pub fn sessions_how(&self) -> String {
        match (self.transport, self.sessions) {
            ("stdio", 1) => "one session over stdio, opened with the recorded initialize; request ids are witness's own".into(),
            ("stdio", n) => format!(
                "{n} sessions multiplexed on witness's one stdio session (one server process serves one client), request ids rewritten"
            ),
            (_, 1) => "one session".into(),
            (_, n) => format!("{n} copies of the session at once, on witness's pooled connections"),
        }
    }

    /// The journal's record of the recording played.
    pub fn event(&self, file: &str) -> Event {
        let buckets = if self.span_s > 0.0 { PACING_BUCKETS } else { 1 };
        let bucket_s = if self.span_s > 0.0 {
            self.span_s / PACING_BUCKETS as f64
        } else {
            1.0
        };
        let mut pacing = vec![0u32; buckets];
        for c in &self.calls {
            let at = ((c.offset_s / bucket_s) as usize).min(buckets - 1);
            pacing[at] += self.sessions;
        }
        Event::Replay {
            file: file.into(),
            transport: self.transport.into(),
            sessions: self.sessions,
            sessions_how: self.sessions_how(),
            compare: self.compare.name().into(),
            calls: self.calls.len() as u64,
            span_s: self.span_s,
            names: self.names.clone(),
            pacing,
            bucket_s,
            notes: self.notes.clone(),
        }
    }
}

/// The kinds of call, in the order first sent, with their recorded durations.
#[derive(Default)]
struct Names {
    names: Vec<(String, u64, Vec<f64>)>,
}

impl Names {
    fn index(&mut self, name: &str, took: Option<f64>) -> usize {
        let i = match self.names.iter().position(|(n, ..)| n == name) {
            Some(i) => i,
            None if self.names.len() < NAMES_KEPT => {
                self.names.push((name.to_string(), 0, Vec::new()));
                self.names.len() - 1
            }
            // Past the cap: one kind for the rest.
            None => match self.names.iter().position(|(n, ..)| n == "(other)") {
                Some(i) => i,
                None => {
                    self.names.push(("(other)".into(), 0, Vec::new()));
                    self.names.len() - 1
                }
            },
        };
        self.names[i].1 += 1;
        if let Some(t) = took.filter(|t| t.is_finite() && *t >= 0.0) {
            self.names[i].2.push(t);
        }
        i
    }

    fn finish(self) -> Vec<ReplayName> {
        self.names
            .into_iter()
            .map(|(name, calls, took)| ReplayName {
                name,
                calls,
                recorded_p99_s: crate::stats::latency_of(took).map(|l| l.p99),
            })
            .collect()
    }
}

/// A recorded JSON-RPC answer as the comparison sees it.
fn said_recorded(a: &crate::observe::record::stdio::Answer) -> Said {
    let body = || a.result.clone().filter(|_| !a.result_cut).map(Body::Json);
    match a.outcome {
        AnswerOutcome::Ok => Said {
            outcome: "ok".into(),
            body: body(),
        },
        AnswerOutcome::ToolError => Said {
            outcome: "tool error".into(),
            body: body(),
        },
        AnswerOutcome::Error => Said {
            outcome: format!("JSON-RPC error {}", a.code.unwrap_or(0)),
            body: None,
        },
    }
}

/// A JSON-RPC answer that came back, as the comparison sees it.
fn said_reply(v: &Value) -> Said {
    if let Some(e) = v.get("error") {
        return Said {
            outcome: format!(
                "JSON-RPC error {}",
                e.get("code").and_then(Value::as_i64).unwrap_or(0)
            ),
            body: None,
        };
    }
    let result = v.get("result").cloned();
    let tool_error = result
        .as_ref()
        .and_then(|r| r.get("isError"))
        .and_then(Value::as_bool)
        == Some(true);
    Said {
        outcome: if tool_error { "tool error" } else { "ok" }.into(),
        body: result.map(Body::Json),
    }
}

fn stdio_calls(
    s: &StdioRecording,
    names: &mut Names,
    notes: &mut Vec<String>,
) -> (Vec<Call>, Option<Value>) {
    let mut initialize = None;
    let mut calls = Vec::new();
    let mut skipped = 0u64;
    for m in &s.client {
        match (m.method(), m.id()) {
            (Some("initialize"), Some(_)) if initialize.is_none() => {
                initialize = Some(m.msg.get("params").cloned().unwrap_or(Value::Null));
            }
            (Some(method), Some(id)) => {
                let name = match m.tool() {
                    Some(t) => format!("{method} {t}"),
                    None => method.to_string(),
                };
                let answer = s.answer_to(id);
                let took = answer.map(|a| a.t - m.t);
                calls.push(Call {
                    offset_s: m.t,
                    name: names.index(&name, took),
                    send: Send::Mcp {
                        method: method.to_string(),
                        params: m.msg.get("params").cloned().unwrap_or(Value::Null),
                    },
                    recorded: answer.map(said_recorded),
                });
            }
            (Some("notifications/initialized"), None) => {}
            _ => skipped += 1,
        }
    }
    if skipped > 0 {
        notes.push(format!(
            "{skipped} client message{} not replayed (notifications after the handshake, answers to the server's requests)",
            if skipped == 1 { "" } else { "s" }
        ));
    }
    if let Some(n) = &s.note {
        if n.not_kept > 0 {
            notes.push(format!(
                "the recording did not keep {} message{} ({}): they are not replayed",
                n.not_kept,
                if n.not_kept == 1 { "" } else { "s" },
                n.note
            ));
        }
    }
    let masked = s
        .client
        .iter()
        .filter(|m| {
            m.msg
                .to_string()
                .contains(&format!("\"{}\"", crate::secrets::MASK))
        })
        .count();
    if masked > 0 {
        notes.push(format!(
            "{masked} recorded call{} held masked values (\"{}\"): replayed as masked",
            if masked == 1 { "" } else { "s" },
            crate::secrets::MASK
        ));
    }
    (calls, initialize)
}

/// Headers never replayed: the connection's own, the HTTP/2 pseudo-headers, and an encoding the
/// comparison could not read.
fn replayable(name: &str) -> bool {
    const DROP: [&str; 11] = [
        "host",
        "content-length",
        "connection",
        "keep-alive",
        "transfer-encoding",
        "accept-encoding",
        "upgrade",
        "proxy-connection",
        "te",
        "trailer",
        "http2-settings",
    ];
    !name.starts_with(':') && !DROP.contains(&name.to_ascii_lowercase().as_str())
}

fn http_calls(
    h: &Har,
    base: &Uri,
    extra: &HeaderMap,
    names: &mut Names,
    notes: &mut Vec<String>,
) -> Result<Vec<Call>, String> {
    let mut calls = Vec::new();
    let mut masked = 0u64;
    let scheme = base.scheme_str().unwrap_or("http");
    let authority = base.authority().map(|a| a.as_str()).unwrap_or("");
    for (i, e) in h.log.entries.iter().enumerate() {
        let at = e.started_unix_ms().ok_or_else(|| {
            format!(
                "entry {i}: startedDateTime {:?} is not an RFC 3339 time",
                e.started_date_time
            )
        })?;
        let recorded: Uri = e
            .request
            .url
            .parse()
            .map_err(|err| format!("entry {i}: url {:?} is not a URL: {err}", e.request.url))?;
        let path = recorded.path_and_query().map_or("/", |p| p.as_str());
        let uri: Uri = format!("{scheme}://{authority}{path}")
            .parse()
            .map_err(|err| format!("entry {i}: {path:?} does not make a URL with --url: {err}"))?;
        let method = Method::from_bytes(e.request.method.as_bytes())
            .map_err(|_| format!("entry {i}: {:?} is not an HTTP method", e.request.method))?;
        let mut headers = HeaderMap::new();
        for nv in e.request.headers.iter().filter(|nv| replayable(&nv.name)) {
            if nv.value.contains(crate::secrets::MASK) {
                masked += 1;
                continue;
            }
            let (Ok(k), Ok(v)) = (
                HeaderName::from_bytes(nv.name.as_bytes()),
                HeaderValue::from_str(&nv.value),
            ) else {
                continue;
            };
            if !extra.contains_key(&k) {
                headers.append(k, v);
            }
        }
        for (k, v) in extra {
            headers.append(k.clone(), v.clone());
        }
        let body = e
            .request
            .post_data
            .as_ref()
            .map(|p| Bytes::from(p.text.clone()))
            .unwrap_or_default();
        let name = format!("{} {}", method, recorded.path());
        let took = (e.time >= 0.0).then_some(e.time / 1000.0);
        let content = &e.response.content;
        // A body kept as it was sent (not base64, not cut) is compared; else the status only.
        let kept = content
            .text
            .as_ref()
            .filter(|_| content.encoding.is_none() && content.comment.is_none());
        let recorded_said = (e.response.status > 0).then(|| Said {
            outcome: format!("status {}", e.response.status),
            body: kept.map(|t| Body::of_text(t)),
        });
        calls.push(Call {
            offset_s: at / 1000.0,
            name: names.index(&name, took),
            send: Send::Http {
                method,
                uri,
                headers,
                body,
            },
            recorded: recorded_said,
        });
    }
    if masked > 0 {
        notes.push(format!(
            "{masked} recorded header{} masked (credentials): not replayed; give --header to send your own",
            if masked == 1 { " was" } else { "s were" }
        ));
    }
    Ok(calls)
}

/// What every send of a replay level shares.
struct Level {
    replay: Arc<Replay>,
    limits: Limits,
    rej: Rejection,
    mcp: Option<McpTarget>,
    http: Option<client::HttpClient>,
    journal: Journal,
    ids: Arc<AtomicU64>,
    group: String,
    tally: Option<Arc<Tally>>,
    answers: Mutex<Answers>,
}

impl Level {
    async fn send_one(&self, i: usize, due: Instant, mut stop: watch::Receiver<bool>) {
        let call = &self.replay.calls[i];
        if let Some(t) = &self.tally {
            t.started();
        }
        let started = Instant::now();
        let (mut s, got) = tokio::select! {
            biased;
            r = self.exchange(&call.send, started) => r,
            _ = stopped(&mut stop) => (interrupted(started), None),
        };
        if let (Some(got), Some(rec)) = (&got, &call.recorded) {
            let diff = compare(rec, got, self.replay.compare);
            // An error the recording got too is the server answering as recorded.
            if !s.outcome.is_ok() && rec.outcome == got.outcome {
                s.outcome = Outcome::Ok;
                s.detail = Some(format!("{} as recorded", got.outcome));
            }
            let name = &self.replay.names[call.name].name;
            self.answers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .add(call.name, name, diff);
        }
        if let Some(t) = &self.tally {
            t.finished(&s.outcome);
        }
        self.record(call.name as u32, s, due);
    }

    async fn exchange(&self, send: &Send, started: Instant) -> (Sent, Option<Said>) {
        match send {
            Send::Mcp { method, params } => {
                let Some(target) = &self.mcp else {
                    unreachable!("a stdio replay has its MCP target");
                };
                let mut session = match target {
                    McpTarget::Stdio(link) => Session::Stdio(link.clone()),
                    McpTarget::Http(_) => unreachable!("a stdio recording replays over stdio"),
                };
                let (s, reply) = session
                    .request(method, params.clone(), self.limits, &self.rej)
                    .await;
                (s, reply.as_ref().map(said_reply))
            }
            Send::Http {
                method,
                uri,
                headers,
                body,
            } => self.http(method, uri, headers, body, started).await,
        }
    }

    async fn http(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        body: &Bytes,
        start: Instant,
    ) -> (Sent, Option<Said>) {
        let client = self.http.as_ref().expect("an HTTP replay has its client");
        let mut req = hyper::Request::new(Full::new(body.clone()));
        *req.method_mut() = method.clone();
        *req.uri_mut() = uri.clone();
        *req.headers_mut() = headers.clone();
        let seen_status = AtomicU32::new(0);
        let seen_bytes = AtomicU64::new(0);
        let limits = self.limits;
        let work = async {
            let resp = client.request(req).await.map_err(client::Failure::Client)?;
            client::take_response(resp, limits, &seen_status, &seen_bytes).await
        };
        let res = tokio::time::timeout(limits.whole, work).await;
        let end = Instant::now();
        let got = match &res {
            Ok(Ok((status, kept, total))) => Some(Said {
                outcome: format!("status {status}"),
                body: (*total == kept.len() as u64)
                    .then(|| Body::of_text(&String::from_utf8_lossy(kept))),
            }),
            _ => None,
        };
        let s = client::finish(
            start,
            end,
            res,
            &seen_status,
            &seen_bytes,
            limits,
            &self.rej,
        );
        (s, got)
    }

    fn record(&self, name: u32, s: Sent, due: Instant) {
        let clock = self.journal.clock();
        self.journal.emit_at(
            clock.at(s.end),
            Event::Request {
                id: self.ids.fetch_add(1, Ordering::Relaxed),
                group: self.group.clone(),
                worker: name,
                start_s: clock.at(s.start),
                duration_s: s.end.duration_since(s.start).as_secs_f64(),
                outcome: s.outcome,
                status: s.status,
                scheduled_s: Some(clock.at(due)),
                detail: s.detail,
                body_bytes: s.body_bytes,
                body_cut: s.body_cut,
                connect_s: s.connect_s,
                headers_s: s.headers_s,
                handshake_s: s.handshake_s,
            },
        );
    }
}

/// Plays the recording once at `speed` (every session's calls), through the open loop; returns how
/// many calls were not sent. The level's answer counts are journalled once its last answer is in.
#[allow(clippy::too_many_arguments)]
pub async fn run_speed_level(
    cfg: &LadderConfig,
    replay: &Arc<Replay>,
    speed: f64,
    index: u32,
    target: &Target,
    journal: &Journal,
    ids: &Arc<AtomicU64>,
    tally: Option<Arc<Tally>>,
    stop: &watch::Receiver<bool>,
) -> u64 {
    let level = Arc::new(Level {
        replay: replay.clone(),
        limits: cfg.limits,
        rej: cfg.rejection.clone(),
        mcp: cfg.mcp.as_ref().map(|(t, _)| t.clone()),
        http: (replay.transport == "http")
            .then(|| client::client(cfg.limits, replay.max_in_flight as usize)),
        journal: journal.clone(),
        ids: ids.clone(),
        group: group_of_level(index),
        tally,
        answers: Mutex::new(Answers::default()),
    });
    let start = Instant::now();
    journal.emit(Event::ReplayLevel {
        index,
        speed,
        start_s: journal.clock().at(start),
    });
    let timing = Timing {
        start,
        deadline: start + Duration::from_secs_f64(replay.span_s / speed),
        max_in_flight: replay.max_in_flight,
        whole: cfg.limits.whole,
    };
    let sessions = replay.sessions;
    let schedule = replay
        .calls
        .iter()
        .enumerate()
        .flat_map(move |(i, c)| (0..sessions).map(move |_| (c.offset_s / speed, i)));
    let not_sent = drive(schedule, timing, target, stop, |i, due, stop| {
        let l = level.clone();
        async move { l.send_one(i, due, stop).await }
    })
    .await;
    let counts = level
        .answers
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .counts();
    journal.emit(Event::Answers {
        level: index,
        by_name: counts,
    });
    not_sent
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stdio(lines: &[&str]) -> Recording {
        let header = serde_json::from_str(
            r#"{"witness_recording":1,"transport":"stdio","started_unix_ms":1,"command":["x"],"max_bytes":9,"answer_bytes":9}"#,
        )
        .unwrap();
        Recording::Stdio(StdioRecording::read(
            header,
            lines.iter().map(|l| l.to_string()),
        ))
    }

    fn options(h: &HeaderMap) -> Options<'_> {
        Options {
            base: None,
            headers: h,
            sessions: 2,
            compare: Compare::Shape,
            max_in_flight: 10,
        }
    }

    #[test]
    fn a_stdio_recording_opens_as_recorded_and_its_calls_start_at_zero() {
        let r = stdio(&[
            r#"{"t":0.1,"from":"client","msg":{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"clientInfo":{"name":"py"}}}}"#,
            r#"{"t":0.2,"from":"client","msg":{"jsonrpc":"2.0","method":"notifications/initialized"}}"#,
            r#"{"t":1.0,"from":"client","msg":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"work","arguments":{"ms":5}}}}"#,
            r#"{"t":1.25,"from":"server","id":1,"outcome":"ok","result":{"content":[]}}"#,
            r#"{"t":3.0,"from":"client","msg":{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{}}}}"#,
            r#"{"t":3.5,"from":"server","id":2,"outcome":"error","code":-32602,"message":"bad"}"#,
        ]);
        let h = HeaderMap::new();
        let p = Replay::new(&r, &options(&h)).unwrap();
        assert_eq!(p.initialize.as_ref().unwrap()["clientInfo"]["name"], "py");
        assert_eq!(p.calls.len(), 2);
        assert_eq!((p.calls[0].offset_s, p.calls[1].offset_s), (0.0, 2.0));
        assert_eq!(p.span_s, 2.0);
        assert_eq!(p.sends(), 4);
        assert_eq!(p.names[0].name, "tools/call work");
        assert_eq!(p.names[0].recorded_p99_s, Some(0.25));
        assert_eq!(
            p.calls[1].recorded.as_ref().unwrap().outcome,
            "JSON-RPC error -32602"
        );
        assert!(p.sessions_how().contains("multiplexed"));
        let Event::Replay { pacing, .. } = p.event("f") else {
            panic!()
        };
        assert_eq!(
            (pacing[0], pacing[49], pacing.iter().sum::<u32>()),
            (2, 2, 4)
        );
        let empty = stdio(&[]);
        assert!(Replay::new(&empty, &options(&h))
            .unwrap_err()
            .contains("no request"));
    }

    #[test]
    fn a_har_goes_to_the_url_given_without_masked_or_connection_headers() {
        let har: Har = serde_json::from_str(
            r#"{"log":{"version":"1.2","entries":[
            {"startedDateTime":"2026-01-02T03:04:05.500Z","time":20,"request":{"method":"GET","url":"https://example.com:8443/a?x=1",
             "headers":[{"name":":authority","value":"example.com"},{"name":"Accept-Encoding","value":"gzip"},{"name":"Authorization","value":"Bearer ***"},{"name":"X-Kind","value":"k"}]},
             "response":{"status":200,"content":{"mimeType":"application/json","text":"{\"a\":1}"}}}]}}"#,
        )
        .unwrap();
        let base: Uri = "http://127.0.0.1:9/ignored".parse().unwrap();
        let h = HeaderMap::new();
        let mut o = options(&h);
        o.base = Some(&base);
        let p = Replay::new(&Recording::Http(har.clone()), &o).unwrap();
        let Send::Http { uri, headers, .. } = &p.calls[0].send else {
            panic!()
        };
        assert_eq!(uri.to_string(), "http://127.0.0.1:9/a?x=1");
        assert_eq!(headers.len(), 1, "{headers:?}");
        assert_eq!(p.names[0].name, "GET /a");
        assert!(p.notes[0].contains("masked"), "{:?}", p.notes);
        o.base = None;
        assert!(Replay::new(&Recording::Http(har), &o)
            .unwrap_err()
            .contains("--url"));
    }
}
