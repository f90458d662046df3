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
    serde_json::json!({
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
    })
}
