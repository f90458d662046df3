//! `witness replay`'s load: a recording made ready to play ([`super::settings::Replay`]) as an
//! open-loop schedule. Each recorded call goes at its recorded offset ÷ the level's speed, through
//! the open loop of `--rates` ([`super::open::drive`]): a call that cannot go on time is late, and
//! its latency counts from its intended send. Each answer is compared with the recorded one as it
//! comes in (analyze/answers.rs), and the level's counts are journalled at its end.
//!
//! Over stdio one server process serves one client: the calls of every session go over the one
//! session witness holds (opened with the recorded `initialize`), each with witness's own request id.
//! Over HTTP each request goes to `--url`'s scheme, host and port with the recorded path, query,
//! headers and body, on a pooled client.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{HeaderMap, Method, Uri};
use serde_json::Value;
use tokio::sync::watch;

use super::client::{self, Limits, Sent};
use super::mcp::{McpTarget, Session};
use super::open::{drive, interrupted, Timing};
use super::outcome::Rejection;
use super::progress::Tally;
use super::settings::{stopped, LadderConfig, Replay, Send};
use crate::analyze::answers::{compare, Body, Said, Tally as Answers};
use crate::journal::{group_of_level, Event, Journal, Outcome};
use crate::server::Target;

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
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        super::open::journal_scheduled(&self.journal, id, &self.group, name, s, due);
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
