//! `witness replay`: answers compared with the recorded ones, and the replay's levels judged and
//! summed up from the journal. Pure: the comparison of one answer with its recording is a function
//! of the two (the load driver calls it as each answer comes in and journals the counts per level,
//! `Event::Answers`); everything else reads the journal's `replay`, `replay_level`, `answers` and
//! request records, in bounded state (one histogram per level and kind of call).
//!
//! A replay level is held to the recording: every call ok (an error the recording also got, the
//! same JSON-RPC code or the same HTTP status, counts as ok), every answer as recorded, and each
//! kind of call's p99 (from its intended send) within `--factor` × its recorded p99 + the slack:
//! calls that waited behind each other (a lock, a single worker) fail that rule first.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use super::verdict::LoadAnalysis;
use crate::journal::{latency_s, secs, speed_words, AnswerCount, Event, Record, ReplayName};
use crate::stats::Summary;

/// What of an answer is compared with the recorded one (`--compare`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compare {
    /// The outcome only: ok, the JSON-RPC error code, a tool error, the HTTP status.
    Outcome,
    /// The outcome and the shape of the result: object keys and value types, recursively.
    Shape,
    /// The outcome and the result's exact text.
    Exact,
}

impl Compare {
    pub fn name(self) -> &'static str {
        match self {
            Compare::Outcome => "outcome",
            Compare::Shape => "shape",
            Compare::Exact => "exact",
        }
    }
}

/// One answer as the comparison sees it: its outcome in words ("ok", "JSON-RPC error -32602",
/// "tool error", "status 404") and its result (None: not kept, so not compared).
#[derive(Clone, Debug, PartialEq)]
pub struct Said {
    pub outcome: String,
    pub body: Option<Body>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Body {
    Json(Value),
    Text(String),
}

impl Body {
    /// A body as text, read as JSON when it is JSON.
    pub fn of_text(text: &str) -> Body {
        match serde_json::from_str::<Value>(text) {
            Ok(v) if v.is_object() || v.is_array() => Body::Json(v),
            _ => Body::Text(text.to_string()),
        }
    }
}

/// At most this many differences are said of one answer.
const SAID_PER_ANSWER: usize = 3;

/// How `got` differs from `recorded`, in words; None when it does not (as far as `mode` looks).
pub fn compare(recorded: &Said, got: &Said, mode: Compare) -> Option<String> {
    if recorded.outcome != got.outcome {
        return Some(format!(
            "recorded {}, replayed {}",
            recorded.outcome, got.outcome
        ));
    }
    if mode == Compare::Outcome {
        return None;
    }
    let (Some(r), Some(g)) = (&recorded.body, &got.body) else {
        return None;
    };
    match (r, g, mode) {
        (Body::Json(a), Body::Json(b), Compare::Exact) => (a != b).then(|| {
            format!(
                "the result's text differs: recorded {}, replayed {}",
                clip(&a.to_string()),
                clip(&b.to_string())
            )
        }),
        (Body::Text(a), Body::Text(b), Compare::Exact) => (a != b).then(|| {
            format!(
                "the body's text differs: recorded {}, replayed {}",
                clip(a),
                clip(b)
            )
        }),
        (Body::Json(a), Body::Json(b), _) => {
            let mut out = Vec::new();
            shape_differences(a, b, "$", &mut out);
            (!out.is_empty()).then(|| out.join("; "))
        }
        (Body::Text(_), Body::Text(_), _) => None,
        (Body::Json(_), Body::Text(_), _) => Some("JSON was recorded, text came back".into()),
        (Body::Text(_), Body::Json(_), _) => Some("text was recorded, JSON came back".into()),
    }
}

fn clip(s: &str) -> String {
    match s.char_indices().nth(80) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The shape of `got` against `recorded`: a value of another type, a key missing or not recorded,
/// recursively (an array's items against the recorded ones). At most [`SAID_PER_ANSWER`].
pub fn shape_differences(recorded: &Value, got: &Value, path: &str, out: &mut Vec<String>) {
    if out.len() >= SAID_PER_ANSWER {
        return;
    }
    match (recorded, got) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, va) in a {
                let p = format!("{path}.{k}");
                match b.get(k) {
                    Some(vb) => shape_differences(va, vb, &p, out),
                    None if out.len() < SAID_PER_ANSWER => out.push(format!("{p} is missing")),
                    None => return,
                }
            }
            for k in b.keys().filter(|k| !a.contains_key(*k)) {
                if out.len() >= SAID_PER_ANSWER {
                    return;
                }
                out.push(format!("{path}.{k} was not recorded"));
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            // Item i against the recorded item i (a list of unlike items, such as tools), or
            // against the first recorded one when the list grew.
            if let Some(first) = a.first() {
                for (i, vb) in b.iter().enumerate() {
                    let va = a.get(i).unwrap_or(first);
                    shape_differences(va, vb, &format!("{path}[{i}]"), out);
                    if out.len() >= SAID_PER_ANSWER {
                        return;
                    }
                }
            }
        }
        (a, b) if type_name(a) != type_name(b) => out.push(format!(
            "{path} was {} in the recording, {} now",
            type_name(a),
            type_name(b)
        )),
        _ => {}
    }
}

/// At most this many differences are kept per kind of call and level.
pub const FIRST_KEPT: usize = 3;
/// At most this many kinds of call are told apart; the rest are counted as one.
pub const NAMES_KEPT: usize = 64;

/// A level's comparisons as they come in, per kind of call (bounded): what `Event::Answers` holds.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    by_name: BTreeMap<usize, AnswerCount>,
}

impl Tally {
    /// One answer of the kind `index` (named `name`) compared: `diff` is how it differed, if it did.
    pub fn add(&mut self, index: usize, name: &str, diff: Option<String>) {
        let c = self.by_name.entry(index).or_insert_with(|| AnswerCount {
            name: name.to_string(),
            compared: 0,
            differed: 0,
            first: Vec::new(),
        });
        c.compared += 1;
        if let Some(d) = diff {
            c.differed += 1;
            if c.first.len() < FIRST_KEPT {
                c.first.push(d);
            }
        }
    }

    pub fn counts(&self) -> Vec<AnswerCount> {
        self.by_name.values().cloned().collect()
    }
}

/// A replay level, as the report shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SpeedRow {
    pub index: u32,
    pub speed: f64,
    pub verdict: String,
    /// Per kind of call: its p99 from the intended send (the max, with fewer than 100), ok calls.
    pub latency: Vec<NameLatency>,
    pub answers: Vec<AnswerCount>,
    /// Answers that differed from the recording, all kinds.
    pub differed: u64,
    /// The level's sends per recorded bucket (`ReplayAnalysis::bucket_s` of the recording's time,
    /// so the recording's pacing and this speed's line up).
    pub pacing: Vec<u32>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NameLatency {
    pub name: String,
    pub ok: u64,
    pub p99_s: Option<f64>,
    pub recorded_p99_s: Option<f64>,
    /// Its p99 broke the rule: the calls of this kind waited (for a lock, a worker, each other).
    pub queued: bool,
}

/// What a replay found.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReplayAnalysis {
    pub file: String,
    pub transport: String,
    pub sessions: u32,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub sessions_how: String,
    pub compare: String,
    pub calls: u64,
    pub span_s: f64,
    pub names: Vec<ReplayName>,
    pub pacing: Vec<u32>,
    pub bucket_s: f64,
    pub notes: Vec<String>,
    pub speeds: Vec<SpeedRow>,
    /// The highest speed that held below the lowest that failed.
    pub held: Option<f64>,
    /// The lowest speed that failed.
    pub failed_at: Option<f64>,
    /// The finding in one sentence: the speed that held and why the next failed.
    pub words: String,
}

struct LevelFold {
    speed: f64,
    start_s: f64,
    by_name: BTreeMap<u32, (u64, Summary)>,
    pacing: Vec<u32>,
    answers: Vec<AnswerCount>,
}

/// The replay's state over the journal: the context from `new`, the requests folded by `request`.
pub struct Acc {
    file: String,
    transport: String,
    sessions: u32,
    sessions_how: String,
    compare: String,
    calls: u64,
    span_s: f64,
    names: Vec<ReplayName>,
    pacing: Vec<u32>,
    bucket_s: f64,
    notes: Vec<String>,
    levels: BTreeMap<u32, LevelFold>,
}

impl Acc {
    /// None when the journal is not a replay's.
    pub fn new(recs: &[Record]) -> Option<Self> {
        let mut acc = recs.iter().find_map(|r| match &r.event {
            Event::Replay {
                file,
                transport,
                sessions,
                sessions_how,
                compare,
                calls,
                span_s,
                names,
                pacing,
                bucket_s,
                notes,
            } => Some(Acc {
                file: file.clone(),
                transport: transport.clone(),
                sessions: *sessions,
                sessions_how: sessions_how.clone(),
                compare: compare.clone(),
                calls: *calls,
                span_s: *span_s,
                names: names.clone(),
                pacing: pacing.clone(),
                bucket_s: *bucket_s,
                notes: notes.clone(),
                levels: BTreeMap::new(),
            }),
            _ => None,
        })?;
        for r in recs {
            match &r.event {
                Event::ReplayLevel {
                    index,
                    speed,
                    start_s,
                } => {
                    acc.levels.insert(
                        *index,
                        LevelFold {
                            speed: *speed,
                            start_s: *start_s,
                            by_name: BTreeMap::new(),
                            pacing: vec![0; acc.pacing.len()],
                            answers: Vec::new(),
                        },
                    );
                }
                Event::Answers { level, by_name } => {
                    if let Some(l) = acc.levels.get_mut(level) {
                        l.answers = by_name.clone();
                    }
                }
                _ => {}
            }
        }
        Some(acc)
    }

    /// Folds one request in: a replay level's ok latency per kind of call, and when it was sent.
    pub fn request(&mut self, r: &Record) {
        let Event::Request {
            group,
            worker,
            start_s,
            duration_s,
            scheduled_s,
            outcome,
            ..
        } = &r.event
        else {
            return;
        };
        let Some(index) = group
            .strip_prefix("level")
            .and_then(|n| n.parse::<u32>().ok())
        else {
            return;
        };
        let Some(l) = self.levels.get_mut(&index) else {
            return;
        };
        let e = l.by_name.entry(*worker).or_default();
        if outcome.is_ok() {
            e.0 += 1;
            e.1.record(latency_s(*start_s, *duration_s, *scheduled_s));
        }
        // On the recording's clock: a send at 1 s of a 4× level is at 4 s of the recording.
        if self.bucket_s > 0.0 && !l.pacing.is_empty() {
            let at = ((start_s - l.start_s).max(0.0) * l.speed / self.bucket_s) as usize;
            let last = l.pacing.len() - 1;
            l.pacing[at.min(last)] += 1;
        }
    }

    /// Judges each replay level against the recording (its reasons join the level's, and a level
    /// that passed fails on them), names the levels by speed, and sums the replay up.
    pub fn finish(self, load: &mut LoadAnalysis, factor: f64, slack_s: f64) -> ReplayAnalysis {
        let mut speeds = Vec::new();
        for l in load.levels.iter_mut() {
            let Some(f) = self.levels.get(&l.index) else {
                continue;
            };
            if let Some(rate) = l.rate.as_mut() {
                rate.speed = Some(f.speed);
            }
            let mut latency: Vec<NameLatency> = self
                .names
                .iter()
                .enumerate()
                .map(|(i, n)| {
                    let (ok, s) = f
                        .by_name
                        .get(&(i as u32))
                        .map(|(ok, s)| (*ok, s.latency()))
                        .unwrap_or((0, None));
                    NameLatency {
                        name: n.name.clone(),
                        ok,
                        p99_s: s.map(|x| x.p99),
                        recorded_p99_s: n.recorded_p99_s,
                        queued: false,
                    }
                })
                .collect();
            let differed: u64 = f.answers.iter().map(|a| a.differed).sum();
            if l.verdict != "skipped" {
                let mut reasons = Vec::new();
                for n in latency.iter_mut() {
                    let (Some(p), Some(rec)) = (n.p99_s, n.recorded_p99_s) else {
                        continue;
                    };
                    let allowed = factor * rec + slack_s;
                    if p > allowed * (1.0 + 1e-9) {
                        n.queued = true;
                        reasons.push(format!(
                            "the calls of `{}` queued: p99 {} > {factor} × {} recorded + {} slack",
                            n.name,
                            secs(p),
                            secs(rec),
                            secs(slack_s)
                        ));
                    }
                }
                if differed > 0 {
                    let which: Vec<String> = f
                        .answers
                        .iter()
                        .filter(|a| a.differed > 0)
                        .map(|a| format!("{}: {} of {}", a.name, a.differed, a.compared))
                        .collect();
                    reasons.push(format!(
                        "{differed} answer{} differed from the recording ({})",
                        if differed == 1 { "" } else { "s" },
                        which.join(", ")
                    ));
                }
                if !reasons.is_empty() && matches!(l.verdict.as_str(), "pass" | "pending") {
                    l.verdict = "fail".into();
                }
                l.reasons.extend(reasons);
            }
            speeds.push(SpeedRow {
                index: l.index,
                speed: f.speed,
                verdict: l.verdict.clone(),
                latency,
                answers: f.answers.clone(),
                differed,
                pacing: f.pacing.clone(),
            });
        }
        // The cost line names its level, now known by its speed.
        load.cost = super::verdict::cost_words(&load.levels);
        if load.verdict == "pass" && load.levels.iter().any(|l| l.verdict != "pass") {
            load.verdict = "fail".into();
        }
        let failed = speeds
            .iter()
            .filter(|s| s.verdict == "fail")
            .min_by(|a, b| a.speed.total_cmp(&b.speed));
        let failed_at = failed.map(|s| s.speed);
        let held = speeds
            .iter()
            .filter(|s| s.verdict == "pass" && failed_at.is_none_or(|f| s.speed < f))
            .max_by(|a, b| a.speed.total_cmp(&b.speed));
        let why = |f: &SpeedRow| -> String {
            let row = load.levels.iter().find(|l| l.index == f.index);
            // Of the kinds of call that queued, the one whose p99 grew the most from the speed
            // that held.
            let grew = f
                .latency
                .iter()
                .filter(|n| n.queued)
                .filter_map(|n| {
                    let p = n.p99_s?;
                    let base = held
                        .and_then(|h| h.latency.iter().find(|x| x.name == n.name)?.p99_s)
                        .or(n.recorded_p99_s)?;
                    Some((p / base.max(1e-6), n.name.as_str(), base, p))
                })
                .max_by(|a, b| a.0.total_cmp(&b.0));
            match grew {
                Some((_, name, base, p)) => format!(
                    "the calls of `{name}` queued: p99 {} → {}",
                    secs(base),
                    secs(p)
                ),
                None => row
                    .and_then(|r| r.reasons.first().cloned())
                    .unwrap_or_else(|| "it failed".into()),
            }
        };
        let words = match (held, failed) {
            (Some(h), Some(f)) => format!(
                "holds {}; at {} {}",
                speed_words(h.speed),
                speed_words(f.speed),
                why(f)
            ),
            (Some(h), None) => format!("every speed tried held, up to {}", speed_words(h.speed)),
            (None, Some(f)) => format!("no speed held: at {} {}", speed_words(f.speed), why(f)),
            (None, None) => "no speed was judged".into(),
        };
        ReplayAnalysis {
            file: self.file,
            transport: self.transport,
            sessions: self.sessions,
            sessions_how: self.sessions_how,
            compare: self.compare,
            calls: self.calls,
            span_s: self.span_s,
            names: self.names,
            pacing: self.pacing,
            bucket_s: self.bucket_s,
            notes: self.notes,
            held: held.map(|h| h.speed),
            failed_at,
            speeds,
            words,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn said(outcome: &str, body: Value) -> Said {
        Said {
            outcome: outcome.into(),
            body: Some(Body::Json(body)),
        }
    }

    #[test]
    fn the_same_shape_with_other_values_matches_unless_exact() {
        let a = said(
            "ok",
            json!({"content": [{"type": "text", "text": "a"}], "n": 1}),
        );
        let b = said(
            "ok",
            json!({"content": [{"type": "text", "text": "b"}], "n": 2}),
        );
        assert_eq!(compare(&a, &b, Compare::Shape), None);
        assert!(compare(&a, &b, Compare::Exact)
            .unwrap()
            .contains("text differs"));
        assert_eq!(compare(&a, &a.clone(), Compare::Exact), None);
    }

    #[test]
    fn types_keys_and_outcomes_that_differ_are_said_with_their_path() {
        let a = said(
            "ok",
            json!({"content": [{"type": "text", "text": "a"}], "n": 1}),
        );
        let b = said(
            "ok",
            json!({"content": [{"type": "text", "text": 5}], "extra": true}),
        );
        let d = compare(&a, &b, Compare::Shape).unwrap();
        assert!(
            d.contains("$.content[0].text was string in the recording, number now"),
            "{d}"
        );
        assert!(d.contains("$.n is missing"), "{d}");
        assert!(d.contains("$.extra was not recorded"), "{d}");
        let e = Said {
            outcome: "JSON-RPC error -32602".into(),
            body: None,
        };
        assert_eq!(
            compare(&a, &e, Compare::Outcome).unwrap(),
            "recorded ok, replayed JSON-RPC error -32602"
        );
        // An answer not kept in the recording is compared by its outcome only.
        let cut = Said {
            outcome: "ok".into(),
            body: None,
        };
        assert_eq!(compare(&cut, &b, Compare::Exact), None);
    }

    /// A replay level at `speed` from `t`: `n` calls of kind 0 every `gap` s, each answered in
    /// `took` s after its intended send; `differed` of them differed from the recording.
    fn level(ev: &mut Vec<(f64, Event)>, index: u32, t: f64, speed: f64, took: f64, differed: u64) {
        use crate::journal::{group_of_level, Identity, Outcome, Probe};
        let probe = Probe {
            status: Some(200),
            error: None,
            duration_s: 0.001,
            connected: false,
        };
        let id = Some(Identity {
            pid: 7,
            start_time: 1007,
            container_id: None,
            container_started_at: None,
            socket_inode: None,
        });
        ev.push((
            t,
            Event::LevelStart {
                index,
                concurrency: 100,
                health: probe.clone(),
                identity: id.clone(),
                skipped: None,
            },
        ));
        ev.push((
            t,
            Event::RateLevel {
                index,
                rate_per_s: 10.0 * speed,
                arrivals: "replay".into(),
                seed: 0,
                max_in_flight: 100,
                duration_s: 1.0 / speed,
            },
        ));
        ev.push((
            t,
            Event::ReplayLevel {
                index,
                speed,
                start_s: t,
            },
        ));
        let mut end = t;
        for k in 0..10u64 {
            let due = t + k as f64 * 0.1 / speed;
            end = due + took;
            let mut e = Event::bare_request(
                k + 100 * index as u64,
                &group_of_level(index),
                due,
                took,
                Outcome::Ok,
            );
            if let Event::Request { scheduled_s, .. } = &mut e {
                *scheduled_s = Some(due);
            }
            ev.push((end, e));
        }
        ev.push((
            end,
            Event::Answers {
                level: index,
                by_name: vec![AnswerCount {
                    name: "tools/call work".into(),
                    compared: 10,
                    differed,
                    first: (differed > 0)
                        .then(|| "$.n is missing".to_string())
                        .into_iter()
                        .collect(),
                }],
            },
        ));
        ev.push((
            end + 0.1,
            Event::LevelEnd {
                index,
                concurrency: 100,
                health: probe,
                identity: id,
                stopped: None,
                not_sent: None,
                held: None,
                witness_cpu_s: None,
                protocol: None,
            },
        ));
    }

    #[test]
    fn a_speed_fails_when_its_calls_queue_or_its_answers_differ_and_the_sentence_says_which() {
        use crate::analyze::tests::{loaded, spawn};
        use crate::journal::{LoadSettings, Settings};
        let mut ev = vec![
            (
                0.0,
                Event::Settings(Settings {
                    load: Some(LoadSettings {
                        factor: 1.5,
                        cliff_slack_s: 0.05,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
            ),
            (0.0, spawn(7)),
            (
                0.0,
                Event::Replay {
                    file: "s.jsonl".into(),
                    transport: "stdio".into(),
                    sessions: 1,
                    sessions_how: String::new(),
                    compare: "shape".into(),
                    calls: 10,
                    span_s: 0.9,
                    names: vec![ReplayName {
                        name: "tools/call work".into(),
                        calls: 10,
                        recorded_p99_s: Some(0.1),
                    }],
                    pacing: vec![1; 10],
                    bucket_s: 0.09,
                    notes: vec![],
                },
            ),
        ];
        // 1×: as recorded; 2×: 0.2 s is within 1.5 × 0.1 + 0.05; 4×: queued; 8×: as fast as
        // recorded, but an answer differed.
        level(&mut ev, 0, 1.0, 1.0, 0.1, 0);
        level(&mut ev, 1, 3.0, 2.0, 0.2, 0);
        level(&mut ev, 2, 5.0, 4.0, 0.5, 0);
        level(&mut ev, 3, 7.0, 8.0, 0.1, 1);
        let a = crate::analyze::analyze(&loaded(ev));
        let l = a.load.unwrap();
        let v: Vec<&str> = l.levels.iter().map(|x| x.verdict.as_str()).collect();
        assert_eq!(v, ["pass", "pass", "fail", "fail"], "{:?}", l.levels);
        assert_eq!(l.verdict, "fail");
        assert!(
            l.levels[2].reasons[0].starts_with(
                "the calls of `tools/call work` queued: p99 500ms > 1.5 × 100ms recorded"
            ),
            "{:?}",
            l.levels[2].reasons
        );
        assert!(
            l.levels[3].reasons[0]
                .starts_with("1 answer differed from the recording (tools/call work: 1 of 10)"),
            "{:?}",
            l.levels[3].reasons
        );
        assert_eq!(l.levels[2].rate.as_ref().unwrap().speed, Some(4.0));
        let r = a.replay.unwrap();
        assert_eq!((r.held, r.failed_at), (Some(2.0), Some(4.0)));
        assert_eq!(
            r.words,
            "holds 2×; at 4× the calls of `tools/call work` queued: p99 200ms → 500ms"
        );
        // Pacing on the recording's clock: at 4× the ten sends fill the recording's ten buckets.
        assert_eq!(r.speeds[2].pacing.iter().sum::<u32>(), 10);
        assert!(
            r.speeds[2].pacing.iter().all(|&c| c == 1),
            "{:?}",
            r.speeds[2].pacing
        );
    }

    #[test]
    fn a_tally_counts_per_kind_and_keeps_the_first_few() {
        let mut t = Tally::default();
        for i in 0..5 {
            t.add(1, "tools/call echo", (i % 2 == 0).then(|| format!("d{i}")));
        }
        t.add(0, "tools/call work", None);
        let c = t.counts();
        assert_eq!(c[0].name, "tools/call work");
        assert_eq!((c[1].compared, c[1].differed), (5, 3));
        assert_eq!(c[1].first, ["d0", "d2", "d4"]);
    }
}
