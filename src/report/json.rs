//! The JSON report: the analysis, with the keys users script against.

use super::View;
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
        "partial_reason": a.partial,
        "lifecycle": a.lifecycle,
        "suspicions": a.suspicions,
        "restarts": a.restarts,
        "processes": a.processes,
        "exit_status": a.last_status,
        "gpu": a.gpu,
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
                        "concurrency": r.concurrency,
                        "verdict": r.verdict,
                        "counts": r.counts,
                        "max_s": r.max_s,
                        "latency": r.latency.as_ref().map(|x| serde_json::json!({
                            "p50": x.p50, "p95": x.p95, "p99": x.p99, "max": x.max, "mean": x.mean, "count": x.count,
                        })),
                        "time_to_give_up": r.time_to_give_up,
                        "errors_by_kind": r.errors_by_kind,
                        "health_before": r.health_before.shown(),
                        "health_after": r.health_after.as_ref().map(|h| h.shown()),
                        "restarted": r.restarted,
                        "identity_before": r.identity_before,
                        "identity_after": r.identity_after,
                        "reasons": r.reasons,
                        "start_t_s": r.start_t_s,
                        "end_t_s": r.end_t_s,
                        "failures": r.failures,
                    })
                })
                .collect::<Vec<_>>()
                .into(),
        );
    }
    v
}
