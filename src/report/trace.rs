//! The trace export: Chrome Trace Event Format JSON, which Perfetto (ui.perfetto.dev) and
//! chrome://tracing open. One clock with the journal: `ts` is the journal's `t_s` in microseconds.
//!
//! Layout: process "server" holds the process lifetimes as complete slices (one thread per band row),
//! lifecycle markers and log matches as instants, and resource samples as counters; process "load"
//! holds the levels as slices, health probes as instants, and every request as an async slice on a
//! track per worker (async because a worker's request may outlive the thread model: they pair by id,
//! not by nesting). Calls a real client made through wrap are not the load's: they sit in a process of
//! their own, "calls seen by wrap (stdio)" or "(proxy)", one track per client or connection. Exits
//! witness did not ask for and suspected timer deadlines are global instants, a line across every
//! track.

use serde_json::{json, Value};

use super::View;
use crate::analyze::picture::{MarkerKind, Unit};
use crate::analyze::Analysis;
use crate::journal::observed::Via;

pub struct Trace;

impl View for Trace {
    fn render(&self, a: &Analysis) -> anyhow::Result<Vec<u8>> {
        let mut v = serde_json::to_vec(&value(a))?;
        v.push(b'\n');
        Ok(v)
    }
}

const SERVER: u32 = 1;
const LOAD: u32 = 2;
/// Calls seen by wrap's stdio relay, and by its proxy.
const SEEN_STDIO: u32 = 3;
const SEEN_PROXY: u32 = 4;
/// Server threads: lifecycle instants on 1, process bands from 100 on.
const LIFECYCLE_TID: u32 = 1;
const BAND_TID: u32 = 100;
const LEVELS_TID: u32 = 0;
const HEALTH_TID: u32 = 1;
/// Requests' thread ids are the worker's, offset past the load process's own threads.
const WORKER_TID: u32 = 10;

/// Seconds on the run's clock to trace microseconds.
fn us(t_s: f64) -> i64 {
    (t_s * 1e6).round() as i64
}

pub fn value(a: &Analysis) -> Value {
    let p = &a.picture;
    let mut ev: Vec<Value> = Vec::with_capacity(p.spans.len() * 2 + 256);
    let meta = |pid: u32, tid: Option<u32>, name: &str, what: &str| {
        let mut m = json!({"ph": "M", "pid": pid, "name": what, "args": {"name": name}});
        if let Some(t) = tid {
            m["tid"] = json!(t);
        }
        m
    };
    ev.push(meta(SERVER, None, "server", "process_name"));
    ev.push(meta(LOAD, None, "load", "process_name"));
    ev.push(
        json!({"ph": "M", "pid": SERVER, "name": "process_sort_index", "args": {"sort_index": 0}}),
    );
    ev.push(
        json!({"ph": "M", "pid": LOAD, "name": "process_sort_index", "args": {"sort_index": 1}}),
    );
    ev.push(meta(
        SERVER,
        Some(LIFECYCLE_TID),
        "lifecycle",
        "thread_name",
    ));
    let rows = p.bands.iter().map(|b| b.row + 1).max().unwrap_or(0);
    for r in 0..rows {
        ev.push(meta(
            SERVER,
            Some(BAND_TID.saturating_add(r)),
            "processes",
            "thread_name",
        ));
    }

    for b in &p.bands {
        let end = b.end_s.unwrap_or(p.end_s);
        ev.push(json!({
            "ph": "X", "pid": SERVER, "tid": BAND_TID.saturating_add(b.row), "cat": "process",
            "name": format!("pid {}", b.pid),
            "ts": us(b.start_s), "dur": us(end).saturating_sub(us(b.start_s)),
            "args": {
                "pid": b.pid, "status": b.status, "meaning": b.meaning,
                "witness_asked_it_to_stop": b.requested,
                "still_running_at_journal_end": b.end_s.is_none(),
            },
        }));
    }
    for m in &p.markers {
        let global = match m.kind {
            MarkerKind::TimerDeadline => true,
            MarkerKind::Exit => m.severity == "bad",
            _ => false,
        };
        ev.push(json!({
            "ph": "i", "pid": SERVER, "tid": LIFECYCLE_TID, "cat": marker_cat(m.kind),
            "name": m.label, "ts": us(m.t_s), "s": if global { "g" } else { "p" },
            "args": {"what": m.text, "pid": m.pid},
        }));
    }
    for s in &p.series {
        let (key, scale) = match s.unit {
            Unit::Bytes => ("MiB", 1.0 / (1024.0 * 1024.0)),
            Unit::Percent => ("percent", 1.0),
            Unit::Count => ("count", 1.0),
            Unit::Celsius => ("celsius", 1.0),
            Unit::Watts => ("watts", 1.0),
            Unit::Plain => ("value", 1.0),
        };
        for &(t, v) in s.points() {
            ev.push(json!({
                "ph": "C", "pid": SERVER, "name": s.name, "ts": us(t),
                "args": {key: v * scale},
            }));
        }
    }

    ev.push(meta(LOAD, Some(LEVELS_TID), "levels", "thread_name"));
    if !p.probes.is_empty() {
        ev.push(meta(LOAD, Some(HEALTH_TID), "health", "thread_name"));
    }
    for l in &p.levels {
        let end = l.end_s.unwrap_or(p.end_s);
        ev.push(json!({
            "ph": "X", "pid": LOAD, "tid": LEVELS_TID, "cat": "level",
            "name": format!("level {} (concurrency {})", l.index, l.concurrency),
            "ts": us(l.start_s), "dur": us(end).saturating_sub(us(l.start_s)),
            "args": {
                "health_before": l.health_before, "health_after": l.health_after,
                "restarted_under_it": l.identity_changed, "skipped": l.skipped,
            },
        }));
    }
    for h in &p.probes {
        ev.push(json!({
            "ph": "i", "pid": LOAD, "tid": HEALTH_TID, "cat": "health", "s": "t",
            "name": format!("health {}", h.result), "ts": us(h.t_s),
            "args": {"purpose": h.purpose, "healthy": h.healthy, "duration_ms": h.duration_s * 1e3},
        }));
    }
    let mut named = std::collections::HashSet::new();
    let mut seen_by = std::collections::HashSet::new();
    for s in &p.spans {
        let group = &p.groups[s.group as usize];
        let (pid, g, worker) = match &group.observed {
            Some(o) => {
                let pid = match o.via {
                    Via::Stdio => SEEN_STDIO,
                    Via::Http => SEEN_PROXY,
                };
                if seen_by.insert(pid) {
                    ev.push(meta(pid, None, &o.heading, "process_name"));
                    ev.push(json!({"ph": "M", "pid": pid, "name": "process_sort_index", "args": {"sort_index": pid}}));
                }
                // The stdio relay has one client; the proxy's rows are its connections.
                let row = match o.via {
                    Via::Stdio => o.row_is.clone(),
                    Via::Http => format!("{} {}", o.row_is, s.worker),
                };
                (pid, &o.label, row)
            }
            None => (LOAD, &group.name, format!("worker {}", s.worker)),
        };
        // A journal is input: a worker number or a time out of any sane range must not overflow.
        let tid = WORKER_TID.saturating_add(s.worker);
        if named.insert((pid, s.worker)) {
            ev.push(meta(pid, Some(tid), &worker, "thread_name"));
        }
        // One async track per (group, worker): a worker sends one request at a time.
        let track = ((s.group as u64) << 32) | s.worker as u64;
        let args = json!({
            "request": s.id, "worker": s.worker, "outcome": s.class.label(),
            "what": if s.what.is_empty() { "ok" } else { &*s.what },
            "duration_ms": (s.end_s - s.start_s) * 1e3,
        });
        let cat = if group.observed.is_some() {
            "observed"
        } else {
            "request"
        };
        ev.push(json!({
            "ph": "b", "pid": pid, "tid": tid, "cat": cat, "name": g,
            "id": track, "ts": us(s.start_s), "args": args,
        }));
        ev.push(json!({
            "ph": "e", "pid": pid, "tid": tid, "cat": cat, "name": g,
            "id": track, "ts": us(s.end_s),
        }));
    }
    if let Some(why) = &a.partial {
        ev.push(json!({
            "ph": "i", "pid": SERVER, "tid": LIFECYCLE_TID, "cat": "journal", "s": "g",
            "name": "partial: journal ends here", "ts": us(a.end_s), "args": {"what": why},
        }));
    }
    json!({
        "traceEvents": ev,
        "displayTimeUnit": "ms",
        "otherData": {
            "generator": format!("witness {}", env!("CARGO_PKG_VERSION")),
            "mode": a.mode,
            "command": a.command.join(" "),
            "started_at": a.started_at,
            "hostname": a.hostname,
            "clock": "ts is microseconds since the run's start: the journal's t_s x 1e6",
            "partial": a.partial,
            "requests_not_kept": p.spans_dropped,
        },
    })
}

fn marker_cat(k: MarkerKind) -> &'static str {
    match k {
        MarkerKind::Spawn => "spawn",
        MarkerKind::Exit => "exit",
        MarkerKind::Restart => "restart",
        MarkerKind::Log => "log",
        MarkerKind::Signal => "signal",
        MarkerKind::Fault => "fault",
        MarkerKind::Ready => "ready",
        MarkerKind::Leak => "leak",
        MarkerKind::Note => "note",
        MarkerKind::TimerDeadline => "suspicion",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyze::analyze;
    use crate::analyze::tests::{exit, loaded, spawn};
    use crate::journal::{Event, Outcome};

    #[test]
    fn requests_pair_on_one_track_per_worker_and_exits_are_global_instants() {
        let req = |id, worker, start: f64, end: f64| {
            (
                end,
                Event::Request {
                    id,
                    group: "L2".into(),
                    worker,
                    start_s: start,
                    duration_s: end - start,
                    outcome: Outcome::Ok,
                    status: Some(200),
                    scheduled_s: None,
                    detail: None,
                    body_bytes: None,
                    body_cut: false,
                    connect_s: None,
                    headers_s: None,
                    handshake_s: None,
                    lag_s: None,
                    rpc_id: None,
                },
            )
        };
        let a = analyze(&loaded(vec![
            (0.0, spawn(7)),
            req(1, 0, 0.1, 0.2),
            req(2, 1, 0.1, 0.25),
            req(3, 0, 0.2, 0.3),
            (1.5, exit(7, 124, 1.5, false)),
        ]));
        let v = value(&a);
        let ev = v["traceEvents"].as_array().unwrap();
        let begins: Vec<_> = ev.iter().filter(|e| e["ph"] == "b").collect();
        let ends: Vec<_> = ev.iter().filter(|e| e["ph"] == "e").collect();
        assert_eq!((begins.len(), ends.len()), (3, 3));
        assert_eq!(
            begins[0]["id"], begins[2]["id"],
            "worker 0's requests share a track"
        );
        assert_ne!(begins[0]["id"], begins[1]["id"]);
        assert_eq!(begins[0]["ts"], 100_000);
        assert_eq!(ends[0]["ts"], 200_000);
        let exit = ev.iter().find(|e| e["cat"] == "exit").unwrap();
        assert_eq!(
            (exit["ph"].as_str(), exit["s"].as_str()),
            (Some("i"), Some("g"))
        );
        assert_eq!(exit["ts"], 1_500_000);
        let band = ev.iter().find(|e| e["cat"] == "process").unwrap();
        assert_eq!(
            (band["ph"].as_str(), &band["dur"]),
            (Some("X"), &json!(1_500_000))
        );
        // The journal has no end record, so the trace says it is partial.
        assert!(v["otherData"]["partial"]
            .as_str()
            .unwrap()
            .starts_with("partial:"));
        assert!(ev.iter().any(|e| e["cat"] == "journal"));
    }

    #[test]
    fn calls_seen_by_wrap_are_a_process_of_their_own_not_the_load() {
        let a = analyze(&loaded(crate::analyze::observed::tests::watchdog_story()));
        let v = value(&a);
        let ev = v["traceEvents"].as_array().unwrap();
        let name = ev
            .iter()
            .find(|e| e["name"] == "process_name" && e["pid"] == SEEN_STDIO)
            .expect("a process for the stdio relay's calls");
        assert_eq!(name["args"]["name"], "calls seen by wrap (stdio)");
        let begins: Vec<_> = ev.iter().filter(|e| e["ph"] == "b").collect();
        assert_eq!(begins.len(), 6);
        assert!(begins
            .iter()
            .all(|b| b["pid"] == SEEN_STDIO && b["name"] == "tools/call slow"));
        assert!(ev.iter().any(|e| e["name"] == "thread_name"
            && e["pid"] == SEEN_STDIO
            && e["args"]["name"] == "client"));
    }
}
