//! The annotated lifecycle timeline: each spawn, matched log line, exit (with its meaning), signal and
//! restart, with the run time and the process's age, in words. Views only lay it out.

use serde::Serialize;

use super::ProcessLife;
use crate::journal::{secs, Event, Record};

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Entry {
    pub t_s: f64,
    /// Age of the process the entry is about, when there is one.
    pub age_s: Option<f64>,
    pub kind: String,
    pub pid: Option<u32>,
    pub text: String,
    /// "info", "warn" or "bad": how a view may colour it.
    pub severity: String,
}

pub fn build(recs: &[Record], lives: &[ProcessLife]) -> Vec<Entry> {
    let age_of = |pid: u32, t: f64| {
        lives
            .iter()
            .rev()
            .find(|l| l.pid == pid && l.spawn_t_s <= t)
            .map(|l| t - l.spawn_t_s)
    };
    let mut out = Vec::new();
    for r in recs {
        let t = r.t_s;
        let (pid, text, severity) = match &r.event {
            Event::Spawn {
                pid,
                command,
                attempt,
                container_id,
                ..
            } => {
                let what = match container_id {
                    Some(id) => format!("container {}", &id[..id.len().min(12)]),
                    None => command.join(" "),
                };
                let again = if *attempt > 0 {
                    format!(" (restart #{attempt})")
                } else {
                    String::new()
                };
                (Some(*pid), format!("started {what}{again}"), "info")
            }
            Event::Log {
                pid,
                stream,
                line,
                label,
                truncated,
                ..
            } => (
                *pid,
                format!(
                    "[{label}] {stream}: {line}{}",
                    if *truncated { " …(truncated)" } else { "" }
                ),
                "warn",
            ),
            Event::Exit {
                pid,
                meaning,
                requested,
                age_s,
                ..
            } => (
                Some(*pid),
                format!(
                    "{meaning} after {}{}",
                    secs(*age_s),
                    if *requested {
                        " (witness asked it to stop)"
                    } else {
                        ""
                    }
                ),
                if *requested { "info" } else { "bad" },
            ),
            Event::SignalSent {
                pid,
                signal,
                reason,
            } => (
                Some(*pid),
                format!("sent {signal} to process group {pid}: {reason}"),
                "info",
            ),
            Event::Restart {
                attempt,
                backoff_s,
                reason,
                engine_restart_count,
            } => (
                None,
                match engine_restart_count {
                    Some(n) => {
                        format!("restart #{attempt} by the engine (RestartCount {n}): {reason}")
                    }
                    None => format!("restart #{attempt} in {}: {reason}", secs(*backoff_s)),
                },
                "warn",
            ),
            Event::Leak { pid, detail } => (Some(*pid), detail.clone(), "warn"),
            Event::Ready {
                ok,
                waited_s,
                url,
                detail,
            } => (
                None,
                if *ok {
                    format!("ready: {url} answered 200 after {}", secs(*waited_s))
                } else {
                    format!(
                        "never ready: {url} {} after {}",
                        detail.as_deref().unwrap_or("did not answer 200"),
                        secs(*waited_s)
                    )
                },
                if *ok { "info" } else { "bad" },
            ),
            Event::Fault {
                action,
                pid,
                detail,
            } => (Some(*pid), fault_words(action, detail), "warn"),
            Event::Note { level, text } if level != "info" => (None, text.clone(), "warn"),
            Event::LevelStart {
                concurrency,
                skipped,
                ..
            } => (
                None,
                match skipped {
                    Some(why) => format!("level {concurrency} skipped: {why}"),
                    None => format!("level {concurrency} begins"),
                },
                if skipped.is_some() { "bad" } else { "info" },
            ),
            Event::LevelEnd {
                concurrency,
                health,
                stopped,
                not_sent,
                ..
            } => (
                None,
                match stopped {
                    Some(why) => format!(
                        "level {concurrency} ends early: {why} ({} requests not sent); health after: {}",
                        not_sent.unwrap_or(0),
                        health.text()
                    ),
                    None => format!("level {concurrency} ends; health after: {}", health.text()),
                },
                if health.healthy() { "info" } else { "bad" },
            ),
            Event::End {
                reason, partial, ..
            } => (
                None,
                format!(
                    "run ends: {reason}{}",
                    if *partial { " (partial)" } else { "" }
                ),
                if *partial { "warn" } else { "info" },
            ),
            _ => continue,
        };
        out.push(Entry {
            t_s: t,
            age_s: pid.and_then(|p| age_of(p, t)),
            kind: r.event.kind().into(),
            pid,
            text,
            severity: severity.into(),
        });
    }
    out
}

/// A fault event in words: witness's own action ("INJECTED kill: …"), or what followed it (the
/// SIGCONT that ends a stop, the server seen back).
pub fn fault_words(action: &str, detail: &str) -> String {
    match action {
        "recovered" | "cont" => format!("fault {action}: {detail}"),
        _ => format!("INJECTED {action}: {detail}"),
    }
}
