//! Open-loop levels and the limit search, from the journal alone. A rate level's latency counts
//! from each request's intended send (its `scheduled_s`); how late witness itself sent is counted
//! apart, and when it fell behind its schedule the level says so with the figures and its
//! latencies are marked as partly the harness's. A rate level passes when the ladder's rules hold
//! (every non-rejected request ok, health after, no restart) and the server served, from the first
//! intended send to its last ok answer, within [`SERVED_TOLERANCE`] of the offered rate.
//!
//! `--find-limit`: the highest level that passed below the lowest that failed, with what failed
//! just above it; a search that met a dead or restarted server says that instead of a limit.

pub use super::rate::*;
use super::verdict::{LevelRow, LoadAnalysis};
use crate::journal::{rate_words, secs, Event, Record};

fn value(l: &LevelRow) -> f64 {
    l.rate
        .as_ref()
        .map_or(l.concurrency as f64, |r| r.speed.unwrap_or(r.rate_per_s))
}

fn name(over: &str, v: f64) -> String {
    match over {
        "rates" => rate_words(v),
        "speeds" => crate::journal::speed_words(v),
        _ => format!("{v}"),
    }
}

/// What failed at a level, against the level that held: latency, refusals, the served rate.
fn what_failed(held: Option<&LevelRow>, f: &LevelRow) -> String {
    let mut parts = Vec::new();
    match (held.and_then(|h| h.latency.as_ref()), f.latency.as_ref()) {
        (Some(a), Some(b)) => {
            parts.push(format!("p99 went from {} to {}", secs(a.p99), secs(b.p99)))
        }
        (None, Some(b)) => parts.push(format!("p99 was {}", secs(b.p99))),
        _ => {}
    }
    let c = &f.counts;
    let all = c.ok + c.timeout + c.error + c.rejected + c.no_listener;
    if c.rejected > 0 && all > 0 {
        parts.push(format!(
            "{:.0} % were refused",
            100.0 * c.rejected as f64 / all as f64
        ));
    }
    // The level's own reasons say the rest (timeouts, errors, the served rate, witness behind).
    parts.extend(f.reasons.iter().take(2).cloned());
    parts.join("; ")
}

/// Reads the search's finding from its levels into `load.limit`; the run's verdict is then the
/// search's: pass when it found a limit on a server that stayed up, fail otherwise.
pub fn limit(recs: &[Record], load: &mut LoadAnalysis) {
    let Some((over, resolution, max_levels)) = recs.iter().find_map(|r| match &r.event {
        Event::Search {
            over,
            resolution,
            max_levels,
        } => Some((over.clone(), *resolution, *max_levels)),
        _ => None,
    }) else {
        return;
    };
    let levels = &load.levels;
    let ended = levels.iter().find_map(|l| {
        let n = name(&over, value(l));
        if l.restarted {
            Some(format!("the server restarted during level {n}"))
        } else if let Some(d) = &l.died {
            Some(format!("the server died during level {n}: {d}"))
        } else if let Some(s) = &l.stopped {
            Some(format!("level {n}: {s}"))
        } else if l.verdict == "skipped" {
            Some(format!("level {n} was skipped: {}", l.reasons.join("; ")))
        } else {
            None
        }
    });
    let fail = levels
        .iter()
        .filter(|l| l.verdict == "fail")
        .min_by(|a, b| value(a).total_cmp(&value(b)));
    let fails_at = fail.map(value);
    let held = levels
        .iter()
        .filter(|l| l.verdict == "pass" && fails_at.is_none_or(|f| value(l) < f))
        .max_by(|a, b| value(a).total_cmp(&value(b)));
    let holds = held.map(value);
    let unit = |v: f64| match over.as_str() {
        "rates" => format!("{} requests/s", rate_words(v).trim_end_matches("/s")),
        "speeds" => format!("the recording at {}", crate::journal::speed_words(v)),
        _ => format!("{v} concurrent requests"),
    };
    let witness_bound = fail.is_some_and(|f| f.rate.as_ref().is_some_and(|r| r.behind.is_some()));
    let words = match (&ended, holds, fail) {
        (None, Some(h), Some(f)) if witness_bound => format!(
            "holds at least {}; witness's own limit, not the server's: at {} {}",
            unit(h),
            name(&over, value(f)),
            what_failed(held, f)
        ),
        (Some(e), _, _) => format!(
            "no limit: the search ended because {e}{}",
            holds
                .map(|h| format!(" (it had held {} before)", unit(h)))
                .unwrap_or_default()
        ),
        (None, Some(h), Some(f)) => format!(
            "holds {}; at {} {}",
            unit(h),
            name(&over, value(f)),
            what_failed(held, f)
        ),
        (None, Some(h), None) => format!(
            "holds at least {}: every level tried passed (--max-levels {max_levels} or the ceiling ended the search)",
            unit(h)
        ),
        (None, None, Some(f)) => format!(
            "no level held: the first, {}, failed ({}); start lower",
            name(&over, value(f)),
            what_failed(None, f)
        ),
        (None, None, None) => "no level ran".into(),
    };
    if matches!(load.verdict.as_str(), "pass" | "fail") {
        load.verdict = if ended.is_none() && holds.is_some() && !witness_bound {
            "pass"
        } else {
            "fail"
        }
        .into();
    }
    // A search that ended on the server claims no limit: what it held before is in the words.
    let claimed = ended.is_none();
    load.limit = Some(Limit {
        over,
        resolution,
        max_levels,
        holds: holds.filter(|_| claimed),
        fails_at: fails_at.filter(|_| claimed),
        ended,
        witness_bound,
        words,
    });
}

#[cfg(test)]
mod tests {
    use crate::analyze::analyze;
    use crate::analyze::tests::{loaded, spawn};
    use crate::journal::{group_of_level, Event, Identity, LoadSettings, Outcome, Probe, Settings};

    fn probe() -> Probe {
        Probe {
            status: Some(200),
            error: None,
            duration_s: 0.001,
            connected: false,
        }
    }

    fn id() -> Option<Identity> {
        Some(Identity {
            pid: 7,
            start_time: 1007,
            container_id: None,
            container_started_at: None,
            socket_inode: None,
        })
    }

    /// A rate level at `rate` from `t`: `n` sends, each `late` behind its schedule, answered in
    /// `service` s, at most one at a time served every `gap` s (a server's capacity).
    fn level(ev: &mut Vec<(f64, Event)>, index: u32, t: f64, rate: f64, late: f64, gap: f64) {
        let start = Event::LevelStart {
            index,
            concurrency: 100,
            health: probe(),
            identity: id(),
            skipped: None,
        };
        ev.push((t, start));
        ev.push((
            t,
            Event::RateLevel {
                index,
                rate_per_s: rate,
                arrivals: "constant".into(),
                seed: 1,
                max_in_flight: 100,
                duration_s: 2.0,
            },
        ));
        let n = (rate * 2.0) as u64;
        let mut free = t;
        let mut end = t;
        for k in 0..n {
            let due = t + k as f64 / rate;
            let start_s = due + late;
            // Served in turn: a request waits for the one before it.
            free = free.max(start_s) + gap;
            end = free;
            ev.push((
                free,
                Event::Request {
                    id: index as u64 * 1000 + k,
                    group: group_of_level(index),
                    worker: 0,
                    start_s,
                    duration_s: free - start_s,
                    outcome: Outcome::Ok,
                    status: Some(200),
                    scheduled_s: Some(due),
                    detail: None,
                    body_bytes: None,
                    body_cut: false,
                    connect_s: None,
                    headers_s: None,
                    handshake_s: None,
                    lag_s: None,
                    rpc_id: None,
                },
            ));
        }
        ev.push((
            end + 0.1,
            Event::LevelEnd {
                index,
                concurrency: 100,
                health: probe(),
                identity: id(),
                stopped: None,
                not_sent: None,
                held: Some(3),
                witness_cpu_s: None,
                protocol: None,
            },
        ));
    }

    fn settings(search: bool) -> Vec<(f64, Event)> {
        let mut ev = vec![(
            0.0,
            Event::Settings(Settings {
                load: Some(LoadSettings {
                    factor: 1.5,
                    ..Default::default()
                }),
                ..Default::default()
            }),
        )];
        if search {
            ev.push((
                0.0,
                Event::Search {
                    over: "rates".into(),
                    resolution: 0.1,
                    max_levels: 12,
                },
            ));
        }
        ev.push((0.0, spawn(7)));
        ev
    }

    #[test]
    fn a_rate_level_fails_when_the_server_falls_short_or_witness_falls_behind() {
        // A server that serves one request each 0.1 s: 10/s holds, 20/s does not.
        let mut ev = settings(false);
        level(&mut ev, 0, 1.0, 10.0, 0.001, 0.1);
        level(&mut ev, 1, 5.0, 20.0, 0.001, 0.1);
        // 5/s from a witness that sent every request 50 ms late.
        level(&mut ev, 2, 12.0, 5.0, 0.05, 0.01);
        let a = analyze(&loaded(ev));
        let l = a.load.unwrap();
        let [ok, short, behind] = &l.levels[..] else {
            panic!("{:?}", l.levels)
        };
        assert_eq!(ok.verdict, "pass", "{:?}", ok.reasons);
        assert!(ok.rate.as_ref().unwrap().behind.is_none());
        assert_eq!(short.verdict, "fail");
        assert!(
            short.reasons[0].starts_with("served 10/s of the 20/s offered"),
            "{:?}",
            short.reasons
        );
        // Latency counts from the intended send: the queue's wait is in it.
        assert!(short.latency.as_ref().unwrap().max > 1.5);
        assert_eq!(behind.verdict, "fail");
        let b = behind.rate.as_ref().unwrap();
        assert_eq!((b.late, b.sent), (10, 10));
        // Each waited 50 ms for witness and 10 ms for the server: its latency holds both.
        let lat = behind.latency.as_ref().unwrap();
        assert!(lat.min >= 0.059 && lat.max < 0.061, "{lat:?}");
        assert!(b.behind.as_ref().unwrap().starts_with(
            "witness fell behind: 100 % of sends more than 10ms late (the latest 50ms late"
        ));
        // No cliff rule on rate levels: their concurrency is the cap, not a load.
        assert!(l
            .levels
            .iter()
            .all(|r| r.reasons.iter().all(|x| !x.contains("cliff"))));
        assert!(l.limit.is_none());
    }

    #[test]
    fn the_limit_is_the_highest_pass_below_the_lowest_fail_with_what_failed_above_it() {
        let mut ev = settings(true);
        level(&mut ev, 0, 1.0, 5.0, 0.001, 0.1);
        level(&mut ev, 1, 4.0, 20.0, 0.001, 0.1);
        level(&mut ev, 2, 9.0, 10.0, 0.001, 0.1);
        let l = analyze(&loaded(ev)).load.unwrap();
        let lim = l.limit.unwrap();
        assert_eq!((lim.holds, lim.fails_at), (Some(10.0), Some(20.0)));
        assert!(
            lim.words
                .starts_with("holds 10 requests/s; at 20/s p99 went from "),
            "{}",
            lim.words
        );
        assert!(lim.words.contains("the server did not keep up"));
        // The search's run passes: it found what it looked for.
        assert_eq!(l.verdict, "pass");
    }

    #[test]
    fn a_poisson_level_is_held_to_the_rate_its_schedule_drew() {
        let e = Event::RateLevel {
            index: 0,
            rate_per_s: 5.0,
            arrivals: "poisson".into(),
            seed: 3,
            max_in_flight: 10,
            duration_s: 2.0,
        };
        let mut row = super::RateRow::new(&e).unwrap();
        // The draw gave 8 sends in 2 s (4/s), each answered at once: the server kept up.
        for k in 0..8 {
            let due = 0.25 * k as f64;
            row.request(&crate::journal::Record {
                t_s: due + 0.002,
                event: Event::Request {
                    id: k,
                    group: group_of_level(0),
                    worker: 0,
                    start_s: due + 0.001,
                    duration_s: 0.001,
                    outcome: Outcome::Ok,
                    status: Some(200),
                    scheduled_s: Some(due),
                    detail: None,
                    body_bytes: None,
                    body_cut: false,
                    connect_s: None,
                    headers_s: None,
                    handshake_s: None,
                    lag_s: None,
                    rpc_id: None,
                },
                origin: None,
            });
        }
        assert_eq!(row.finish(8, 0), Vec::<String>::new());
        // Half of them answered: short of the 4/s drawn, said with both rates.
        let mut half = row.clone();
        let r = half.finish(4, 0);
        assert_eq!(
            r,
            ["served 2/s of the 5/s (4/s as drawn) offered (more than 10 % short): the server did not keep up"]
        );
    }

    #[test]
    fn a_limit_where_witness_fell_behind_is_witness_s_own_and_does_not_pass() {
        let mut ev = settings(true);
        level(&mut ev, 0, 1.0, 5.0, 0.001, 0.01);
        // At 10/s every send went 50 ms late: witness's limit, the server answered each in 10 ms.
        level(&mut ev, 1, 4.0, 10.0, 0.05, 0.01);
        let l = analyze(&loaded(ev)).load.unwrap();
        let lim = l.limit.unwrap();
        assert!(lim.witness_bound);
        assert!(
            lim.words.starts_with(
                "holds at least 5 requests/s; witness's own limit, not the server's: at 10/s "
            ),
            "{}",
            lim.words
        );
        assert_eq!(l.verdict, "fail");
    }
}
