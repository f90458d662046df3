//! The views `witness mcp serve` gives an agent: a run's story and one exchange explained, as
//! bounded JSON data (structured tool output) in the report's words. Pure: an analysis (and the
//! exchanges a pass over the journal found) in, a value out.

use serde_json::{json, Value};

use crate::analyze::Analysis;
use crate::journal::{Event, Record};
use crate::stats::Latency;
use crate::units::took;

/// How many items of each part a story gives (more with `detail` naming that part).
pub const PART: usize = 20;
/// How many items of the part `detail` names.
pub const DETAIL: usize = 200;

/// The parts of a story `detail` may name.
pub const PARTS: [&str; 5] = ["levels", "suspicions", "lifecycle", "failures", "calls"];

fn latency(l: Option<&Latency>) -> Value {
    match l {
        None => Value::Null,
        Some(l) => json!({
            "count": l.count,
            "p50_s": l.p50,
            "p95_s": l.p95,
            "p99_s": l.p99,
            "max_s": l.max,
            // Percentiles from too few requests: a p99 of 5 requests is their max, not a p99.
            "too_few_for": l.too_few_for,
        }),
    }
}

/// At most `n` of `items`, and how many more there were.
fn capped(
    items: Vec<Value>,
    n: usize,
    part: &str,
    more: &mut serde_json::Map<String, Value>,
) -> Value {
    let total = items.len();
    if total > n {
        more.insert(part.into(), json!(total - n));
    }
    Value::Array(items.into_iter().take(n).collect())
}

/// The run's verdict in a word and its reasons.
fn verdict(a: &Analysis) -> (String, Vec<String>) {
    if let Some(l) = &a.load {
        let mut reasons: Vec<String> = l
            .levels
            .iter()
            .filter(|r| r.verdict != "pass")
            .flat_map(|r| {
                r.reasons
                    .iter()
                    .map(move |x| format!("level {}: {x}", r.name()))
            })
            .collect();
        if let Some(r) = &l.refused {
            reasons.insert(0, format!("refused: {r}"));
        }
        return (l.verdict.clone(), reasons);
    }
    if let Some(s) = &a.soak {
        return (s.verdict.clone(), s.reasons.clone());
    }
    (crate::analyze::compare::run_verdict(a), Vec::new())
}

/// A suspicion as data: what, where, its value and the evidence in the report's words.
fn suspicion(s: &crate::analyze::Suspicion) -> Value {
    json!({
        "kind": s.kind.as_str(),
        "subject": s.subject,
        "timer_s": s.timer_s,
        "timer": took(s.timer_s),
        "seconds": s.seconds,
        "t_s": s.t_s,
        "pid": s.pid,
        "group": s.group,
        "evidence": s.detail,
        // Who named the timer, in the report's words ("the 6s timer named in its log line …").
        "named_by": s.timer_source.describe(s.timer_s),
    })
}

/// A run's story: verdict and reasons, levels (or soak kinds, or calls) with their counts and
/// figures, suspicions with their evidence, the lifecycle, failures with the server's words. Each
/// part holds at most [`PART`] items ([`DETAIL`] for the part `detail` names); `more` says how many
/// were left out of each.
pub fn story(a: &Analysis, run: &str, detail: Option<&str>) -> Value {
    let n = |part: &str| if detail == Some(part) { DETAIL } else { PART };
    let mut more = serde_json::Map::new();
    let (verdict, reasons) = verdict(a);
    let mut levels = Vec::new();
    let mut failures = Vec::new();
    if let Some(l) = &a.load {
        for r in &l.levels {
            levels.push(json!({
                "name": r.name(),
                "verdict": r.verdict,
                "ok": r.counts.ok,
                "failed": r.counts.timeout + r.counts.error,
                "rejected": r.counts.rejected,
                "max_s": r.max_s,
                "latency": latency(r.latency.as_ref()),
                "restarted": r.restarted,
                "died": r.died,
                "reasons": r.reasons,
            }));
            for f in &r.failures {
                failures.push(json!({
                    "at": format!("level {}", r.name()),
                    "id": f.id,
                    "outcome": f.outcome,
                    "duration_s": f.duration_s,
                    "said": f.detail,
                    "meanwhile": f.annotation,
                }));
            }
        }
    }
    if let Some(s) = &a.soak {
        for k in &s.kinds {
            levels.push(json!({
                "name": k.name,
                "verdict": Value::Null,
                "ok": k.ok,
                "failed": k.errors + k.timeouts,
                "rejected": k.rejected,
                "max_s": k.latency.as_ref().map(|l| l.max),
                "latency": latency(k.latency.as_ref()),
                "restarted": false,
                "died": Value::Null,
                "reasons": Vec::<String>::new(),
            }));
            for (status, said) in &k.said {
                failures.push(json!({
                    "at": format!("kind {}", k.name),
                    "id": Value::Null,
                    "outcome": status,
                    "duration_s": Value::Null,
                    "said": said,
                    "meanwhile": "",
                }));
            }
        }
    }
    let mut calls = Vec::new();
    if let Some(o) = &a.observed {
        for r in &o.calls {
            calls.push(json!({
                "call": r.label,
                "calls": r.calls,
                "ok": r.counts.ok,
                "failed": r.counts.error + r.counts.timeout,
                "cancelled": r.counts.cancelled,
                "latency": latency(r.latency.as_ref()),
            }));
            for f in &r.failures {
                failures.push(json!({
                    "at": r.label,
                    "id": f.id,
                    "outcome": f.outcome,
                    "duration_s": f.duration_s,
                    "said": f.detail,
                    "meanwhile": f.annotation,
                }));
            }
        }
    }
    let suspicions: Vec<Value> = a.suspicions.iter().map(suspicion).collect();
    let lifecycle: Vec<Value> = a
        .timeline
        .iter()
        .map(|e| json!({"t_s": e.t_s, "event": e.kind, "pid": e.pid, "what": e.text}))
        .collect();
    let exits: Vec<Value> = a
        .processes
        .iter()
        .filter(|p| p.exit_t_s.is_some())
        .map(|p| {
            json!({
                "pid": p.pid,
                "at_s": p.exit_t_s,
                "age_s": p.age_s,
                "status": p.status,
                "signal": p.signal,
                "meaning": p.meaning,
                "asked_by_witness": p.requested,
                "oom_killed": p.oom_killed,
                "last_line": p.last_line,
            })
        })
        .collect();
    json!({
        "run": run,
        "mode": a.mode,
        "command": a.command,
        "started_at": a.started_at,
        "live": a.live.is_some(),
        "partial": a.partial,
        "verdict": verdict,
        "reasons": reasons,
        "witness_exit_code": a.exit_code,
        "restarts": a.restarts,
        "levels": capped(levels, n("levels"), "levels", &mut more),
        "calls": capped(calls, n("calls"), "calls", &mut more),
        "suspicions": capped(suspicions, n("suspicions"), "suspicions", &mut more),
        "exits": capped(exits, PART, "exits", &mut more),
        "lifecycle": capped(lifecycle, n("lifecycle"), "lifecycle", &mut more),
        "failures": capped(failures, n("failures"), "failures", &mut more),
        "thresholds": a.asserts,
        "more": Value::Object(more),
    })
}

/// A short text for a story (the tool's text content beside its structured content).
pub fn story_text(v: &Value) -> String {
    let mut t = format!(
        "{} run {}: {}",
        v["mode"].as_str().unwrap_or("?"),
        v["run"].as_str().unwrap_or("?"),
        v["verdict"].as_str().unwrap_or("?").to_uppercase()
    );
    for r in v["reasons"].as_array().into_iter().flatten().take(5) {
        t.push_str(&format!("\n- {}", r.as_str().unwrap_or_default()));
    }
    for s in v["suspicions"].as_array().into_iter().flatten().take(5) {
        t.push_str(&format!(
            "\nsuspicion: {}",
            s["evidence"].as_str().unwrap_or_default()
        ));
    }
    t
}

/// One exchange found in the journal, with everything the journal ties to it.
pub fn exchange(a: &Analysis, r: &Record) -> Option<Value> {
    let Event::Request {
        id,
        group,
        start_s,
        duration_s,
        outcome,
        status,
        scheduled_s,
        detail,
        connect_s,
        headers_s,
        lag_s,
        rpc_id,
        ..
    } = &r.event
    else {
        return None;
    };
    let end = r.t_s;
    let at = place(a, group);
    // What the report said of it, if it is one of the failures it annotated.
    let annotated = a
        .load
        .iter()
        .flat_map(|l| l.levels.iter().flat_map(|x| x.failures.iter()))
        .find(|f| f.id == *id)
        .map(|f| f.annotation.clone())
        .or_else(|| {
            a.observed
                .iter()
                .flat_map(|o| o.calls.iter())
                .find_map(|c| {
                    c.failures
                        .iter()
                        .find(|f| f.id == *id && c.group == *group)
                        .map(|f| f.annotation.clone())
                })
        });
    let from = scheduled_s.unwrap_or(*start_s);
    let lifecycle: Vec<Value> = a
        .timeline
        .iter()
        .filter(|e| e.t_s >= from - 0.5 && e.t_s <= end + 0.5)
        .filter(|e| !matches!(e.kind.as_str(), "level_start" | "level_end"))
        .take(PART)
        .map(|e| json!({"t_s": e.t_s, "event": e.kind, "pid": e.pid, "what": e.text}))
        .collect();
    let suspicions: Vec<Value> = a
        .suspicions
        .iter()
        .filter(|s| {
            s.group.as_deref() == Some(group.as_str())
                || (s.t_s >= from - 0.5 && s.t_s <= end + 0.5)
        })
        .take(PART)
        .map(suspicion)
        .collect();
    let ok = matches!(outcome, crate::journal::Outcome::Ok);
    Some(json!({
        "id": id,
        // A relayed call's JSON-RPC id as the client wrote it (JSON text: 7, "abc").
        "rpc_id": rpc_id,
        "at": at,
        "ok": ok,
        "outcome": if ok { "ok".to_string() } else { outcome.describe() },
        "status": status,
        "start_s": start_s,
        "end_s": end,
        "duration_s": duration_s,
        "took": took(*duration_s),
        "said": detail,
        "phases": {
            "connect_s": connect_s,
            "headers_s": headers_s,
            // witness's own wait before the request left it: never in its duration.
            "witness_lag_s": lag_s,
            "late_by_s": scheduled_s.map(|s| start_s - s),
        },
        "meanwhile": annotated,
        "lifecycle": lifecycle,
        "suspicions": suspicions,
    }))
}

/// Where an exchange was, as the report names it: "level 8", "kind GET /api", "tools/call echo".
pub fn place(a: &Analysis, group: &str) -> String {
    if let Some(l) = &a.load {
        if let Some(r) = l
            .levels
            .iter()
            .find(|r| crate::journal::group_of_level(r.index) == group)
        {
            return format!("level {}", r.name());
        }
    }
    if let Some(o) = &a.observed {
        if let Some(c) = o.calls.iter().find(|c| c.group == group) {
            return c.label.clone();
        }
    }
    if a.soak.is_some() {
        return format!("kind {group}");
    }
    group.to_string()
}
