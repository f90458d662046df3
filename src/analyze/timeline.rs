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

/// The last line process `pid` wrote in its life (`from`..`to`, and the moment after as pipes are
/// read late), matched by a pattern or not: its last words.
pub fn last_line(recs: &[Record], pid: u32, from: f64, to: f64) -> Option<String> {
    recs.iter()
        .filter(|r| r.t_s >= from - 0.001 && r.t_s <= to + 0.25)
        .filter_map(|r| match &r.event {
            Event::Log {
                pid: Some(p), line, ..
            }
            | Event::Output {
                pid: Some(p), line, ..
            } if *p == pid => Some(line),
            _ => None,
        })
        .next_back()
        .map(|l| super::inflight::short_line(l))
}

pub fn build(recs: &[Record], lives: &[ProcessLife]) -> Vec<Entry> {
    let mcp = super::mcp_pings(recs);
    let age_of = |pid: u32, t: f64| {
        lives
            .iter()
            .rev()
            .find(|l| l.pid == pid && l.spawn_t_s <= t)
            .map(|l| t - l.spawn_t_s)
    };
    // Open-loop levels are named by their rate, not their in-flight cap.
    let rates: std::collections::BTreeMap<u32, f64> = recs
        .iter()
        .filter_map(|r| match &r.event {
            Event::RateLevel {
                index, rate_per_s, ..
            } => Some((*index, *rate_per_s)),
            _ => None,
        })
        .collect();
    // A replay's levels by their speed.
    let speeds: std::collections::BTreeMap<u32, f64> = recs
        .iter()
        .filter_map(|r| match &r.event {
            Event::ReplayLevel { index, speed, .. } => Some((*index, *speed)),
            _ => None,
        })
        .collect();
    let name = |index: &u32, n: &u32| match speeds.get(index) {
        Some(s) => crate::journal::speed_words(*s),
        None => crate::journal::level_name(*n, rates.get(index).copied()),
    };
    let refused = recs
        .iter()
        .any(|r| matches!(r.event, Event::Ready { ok: false, .. }));
    // Attached: the first server process was there before witness.
    let attached = recs
        .iter()
        .find(|r| matches!(r.event, Event::Spawn { .. }))
        .is_some_and(|r| r.t_s < 0.0);
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
                // A process that predates witness (a spawn before t=0) was found, not started: an
                // attached run's server, and each later listener of that run, are someone else's.
                let text = if t < 0.0 {
                    format!("already running, started by someone else {} before witness attached: {what}", crate::journal::secs(-t))
                } else if attached {
                    format!("now listens, started by someone else: {what}{again}")
                } else {
                    format!("started {what}{again}")
                };
                (Some(*pid), text, "info")
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
                    "[{label}] {stream}: {}{}",
                    crate::journal::logline::shown(line),
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
                    "{meaning} after {}{}{}",
                    secs(*age_s),
                    if *requested {
                        " (witness asked it to stop)"
                    } else {
                        ""
                    },
                    match last_line(recs, *pid, t - age_s, t) {
                        // A start-up failure's refusal quotes it already: said once.
                        Some(l) if !*requested && !refused => format!(": its last line '{l}'"),
                        _ => String::new(),
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
            Event::Helpers {
                command,
                count,
                lived_min_s,
                lived_median_s,
                lived_max_s,
                ends,
                ..
            } => (
                None,
                helpers_words(
                    command,
                    *count,
                    [*lived_min_s, *lived_median_s, *lived_max_s],
                    ends,
                ),
                if ends.keys().all(|e| e == "exit 0" || e == "unknown") {
                    "info"
                } else {
                    "warn"
                },
            ),
            Event::Ready {
                ok,
                waited_s,
                url,
                detail,
                ..
            } => (
                None,
                if *ok {
                    let said = match detail {
                        Some(d) => d.as_str(),
                        None if mcp => "answered",
                        None => "answered 200",
                    };
                    format!("ready: {url} {said} after {}", secs(*waited_s))
                } else {
                    // The reason is the refusal's, said once there (journals from before kept it here).
                    match detail {
                        Some(d) => format!("never ready: {url} {d} after {}", secs(*waited_s)),
                        None => format!("never ready: {url} after {}", secs(*waited_s)),
                    }
                },
                if *ok { "info" } else { "bad" },
            ),
            Event::Fault {
                action,
                pid,
                detail,
            } => (Some(*pid), fault_words(action, detail), "warn"),
            // A refusal is the report's REFUSED line: said once, there.
            Event::Note { level, text } if level != "info" && level != "refused" => {
                (None, text.clone(), "warn")
            }
            Event::LevelStart {
                index,
                concurrency,
                skipped,
                ..
            } => (
                None,
                match skipped {
                    Some(why) => format!("level {} skipped: {why}", name(index, concurrency)),
                    None => format!("level {} begins", name(index, concurrency)),
                },
                if skipped.is_some() { "bad" } else { "info" },
            ),
            Event::LevelEnd {
                index,
                concurrency,
                health,
                stopped,
                not_sent,
                ..
            } => (
                None,
                match stopped {
                    Some(why) => format!(
                        "level {} ends early: {why} ({} requests not sent); health after: {}",
                        name(index, concurrency),
                        not_sent.unwrap_or(0),
                        health.said(mcp)
                    ),
                    None => format!(
                        "level {} ends; health after: {}",
                        name(index, concurrency),
                        health.said(mcp)
                    ),
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
            // witness started nothing in an attached run: its server's processes were found.
            kind: match &r.event {
                Event::Spawn { .. } if attached => "found".into(),
                e => e.kind().into(),
            },
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

/// One command's helpers in one line: "git cat-file --batch-check: 695 helpers, lived 3–40 ms
/// (median 9 ms), all exited 0".
pub fn helpers_words(
    command: &str,
    count: u64,
    [min, median, max]: [f64; 3],
    ends: &std::collections::BTreeMap<String, u64>,
) -> String {
    let ms = |s: f64| {
        let ms = s * 1e3;
        if ms < 10.0 {
            format!("{ms:.1}")
        } else {
            format!("{ms:.0}")
        }
    };
    let lived = if max < 1.0 {
        format!("{}–{} ms (median {} ms)", ms(min), ms(max), ms(median))
    } else {
        format!("{}–{} (median {})", secs(min), secs(max), secs(median))
    };
    let ended = match ends.len() {
        0 => String::new(),
        1 => {
            let end = ends.keys().next().expect("one end");
            match end.strip_prefix("exit ") {
                Some(c) => format!(", all exited {c}"),
                None if end == "unknown" => ", how they ended unknown".to_string(),
                None => format!(", all killed by {end}"),
            }
        }
        _ => {
            let mut by: Vec<(&String, &u64)> = ends.iter().collect();
            by.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            let said: Vec<String> = by.iter().map(|(e, n)| format!("{e} ×{n}")).collect();
            format!(", ended {}", said.join(", "))
        }
    };
    let noun = if count == 1 { "helper" } else { "helpers" };
    format!("{command}: {count} {noun}, lived {lived}{ended}")
}

#[cfg(test)]
mod helper_tests {
    use super::*;

    #[test]
    fn a_commands_helpers_in_one_line() {
        let ends = [("exit 0".to_string(), 695)].into_iter().collect();
        assert_eq!(
            helpers_words(
                "git cat-file --batch-check",
                695,
                [0.003, 0.009, 0.040],
                &ends
            ),
            "git cat-file --batch-check: 695 helpers, lived 3.0–40 ms (median 9.0 ms), all exited 0"
        );
        let ends = [("exit 0".to_string(), 9), ("SIGKILL".to_string(), 1)]
            .into_iter()
            .collect();
        assert_eq!(
            helpers_words("true", 10, [0.002, 0.002, 0.011], &ends),
            "true: 10 helpers, lived 2.0–11 ms (median 2.0 ms), ended exit 0 ×9, SIGKILL ×1"
        );
    }
}
