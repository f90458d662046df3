//! The JSON report: the analysis, with the keys users script against.

use super::View;
use crate::analyze::soak::SoakAnalysis;
use crate::analyze::Analysis;

pub struct Json;

impl View for Json {
    fn render(&self, a: &Analysis) -> anyhow::Result<Vec<u8>> {
        let mut v = serde_json::to_vec_pretty(&value(a))?;
        v.push(b'\n');
        Ok(v)
    }
}

pub fn value(a: &Analysis) -> serde_json::Value {
    let mut v = serde_json::json!({
        "mode": a.mode,
        "command": a.command,
        "started_at": a.started_at,
        "hostname": a.hostname,
        "duration_s": a.end_s,
        "partial": a.partial.is_some(),
        // The pid of the witness still writing a run that is still going (null once it ended).
        "live_witness_pid": a.live,
        "partial_reason": a.partial,
        "lifecycle": a.lifecycle,
        "suspicions": a.suspicions,
        "restarts": a.restarts,
        "processes": a.processes,
        // The status of the last server process to exit (wrap exits with it), and witness's own
        // exit code (docs/report.md).
        "exit_status": a.last_status,
        "witness_exit_code": a.exit_code,
        // The run's thresholds (`--assert`), each with whether it held and what it measured.
        "asserts": a.asserts,
        "gpu": a.gpu,
        "resolution": a.resolution,
        "notes": a.notes.iter().map(|(t, level, text)| serde_json::json!({"t_s": t, "level": level, "text": text})).collect::<Vec<_>>(),
    });
    if let (Some(l), Some(o)) = (&a.load, v.as_object_mut()) {
        o.insert("verdict".into(), l.verdict.clone().into());
        o.insert(
            "connect_floor_ms".into(),
            serde_json::json!(l.connect_floor_ms),
        );
        o.insert("connect_floor".into(), serde_json::json!(l.floor));
        o.insert("refused".into(), serde_json::json!(l.refused));
        o.insert("levels_not_run".into(), serde_json::json!(l.levels_not_run));
        if !l.rates_not_run.is_empty() {
            o.insert("rates_not_run".into(), serde_json::json!(l.rates_not_run));
        }
        o.insert("limit".into(), serde_json::json!(l.limit));
        o.insert(
            "held".into(),
            serde_json::json!({
                "at_most": l.levels.iter().filter_map(|r| r.held).max(),
                "words": l.held,
            }),
        );
        if let Some(c) = &l.cost {
            o.insert("witness_cost".into(), serde_json::json!(c));
        }
        o.insert(
            "time_to_ready_s".into(),
            serde_json::json!(l.ready.map(|r| r.1)),
        );
        o.insert(
            "levels".into(),
            l.levels
                .iter()
                .map(|r| {
                    serde_json::json!({
                        "index": r.index,
                        // The level as every view names it: workers ("8"), a rate ("200/s"), a
                        // replay's speed ("4×"); an open-loop level has no concurrency (its cap
                        // on requests in flight is `rate.max_in_flight`).
                        "name": r.name(),
                        "concurrency": r.rate.is_none().then_some(r.concurrency),
                        "verdict": r.verdict,
                        "counts": r.counts,
                        "max_s": r.max_s,
                        // The figures as analysis made them, too_few_for included when a
                        // percentile rests on too few requests.
                        "latency": r.latency,
                        "time_to_give_up": r.time_to_give_up,
                        "errors_by_kind": r.errors_by_kind,
                        "health_before": r.health_before.shown(),
                        "health_after": r.health_after.as_ref().map(|h| h.shown()),
                        "restarted": r.restarted,
                        "died": r.died,
                        "identity_before": r.identity_before,
                        "identity_after": r.identity_after,
                        "reasons": r.reasons,
                        "identity_unread": r.identity_unread,
                        "start_t_s": r.start_t_s,
                        "end_t_s": r.end_t_s,
                        "failures": r.failures,
                        "notes": r.notes,
                        "time_to_refuse": r.time_to_refuse,
                        "phases": r.phases,
                        "held": r.held,
                        "witness_cpu_s": r.witness_cpu_s,
                        "protocol": r.protocol,
                        "rate": r.rate,
                        "connections": r.connections,
                    })
                })
                .collect::<Vec<_>>()
                .into(),
        );
    }
    if let (Some(s), Some(o)) = (&a.soak, v.as_object_mut()) {
        soak(s, o);
    }
    if let (Some(w), Some(o)) = (&a.observed, v.as_object_mut()) {
        o.insert("observed".into(), serde_json::json!(w));
    }
    if let (Some(r), Some(o)) = (&a.replay, v.as_object_mut()) {
        o.insert("replay".into(), serde_json::json!(r));
    }
    if let (Some(m), Some(o)) = (&a.merged, v.as_object_mut()) {
        o.insert("merge".into(), serde_json::json!(m));
    }
    v
}

/// The soak's keys: what a script reads to tell a clean soak from a leaking, aborted or faulted one.
fn soak(s: &SoakAnalysis, o: &mut serde_json::Map<String, serde_json::Value>) {
    use serde_json::json;
    let kinds: serde_json::Map<String, serde_json::Value> =
        s.kinds.iter().map(|k| (k.name.clone(), json!(k))).collect();
    let entries = [
        ("verdict", json!(s.verdict)),
        ("verdict_reasons", json!(s.reasons)),
        ("partial", json!(s.partial)),
        ("aborted_reason", json!(s.aborted_reason)),
        ("aborted_interval", json!(s.aborted_interval)),
        ("duration_planned_s", json!(s.duration_planned_s)),
        ("duration_achieved_s", json!(s.duration_achieved_s)),
        ("interval_s", json!(s.interval_s)),
        ("seed", json!(s.seed)),
        ("connect_floor_ms", json!(s.connect_floor_ms)),
        ("refused", json!(s.refused)),
        ("totals", json!(s.totals)),
        ("kinds", serde_json::Value::Object(kinds)),
        ("resources", json!(s.resources)),
        ("gauges", json!(s.gauges)),
        ("invariants", json!(s.invariants)),
        ("intervals", json!(s.intervals)),
        ("injected", json!(s.injected)),
        ("restarts", json!(s.restarts)),
        ("warnings", json!(s.warnings)),
    ];
    for (k, v) in entries {
        o.insert(k.into(), v);
    }
}
