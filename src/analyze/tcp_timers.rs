//! TCP's own timers in a request's phases: the connect that waited for a SYN retransmission, and
//! the body that waited for a delayed ACK. Both are the network stack's timers, not the server's
//! work and not the harness's: a connect that took 1.0x s is a SYN the server's kernel dropped
//! (its listen queue was full) and the client's TCP sent again after its initial 1 s RTO (then 2,
//! 3 … s with Linux's linear SYN timeouts, 3, 7, 15 s with the classic doubling); a body that arrives
//! ~40 ms (or ~200 ms) after its headers is Nagle's algorithm on the server holding the body's small
//! write until the headers' ACK, which the client's TCP delays. Folded per level in bounded state:
//! the phases' HDR summaries and a few counters.

use super::{Subject, SuspicionKind};
use std::collections::BTreeMap;

use serde::Serialize;

use super::timers::TimerSource;
use super::Suspicion;
use crate::journal::{Event, Outcome, Record};
use crate::stats::{Latency, Summary};

/// The connect times a SYN retransmission lands at: the initial 1 s RTO, then each further try —
/// 1 s apart for Linux's first `tcp_syn_linear_timeouts` (4 by default since 6.x), doubling after
/// them and on older kernels (3, 7, 15, 31 s).
pub const SYN_RETRANSMIT_S: &[f64] = &[1.0, 2.0, 3.0, 4.0, 5.0, 7.0, 11.0, 15.0, 19.0, 31.0];

/// The connects just below a retransmission's step, where none wait for its timer: from the step
/// before it (or half the first) to just under it. A SYN sent again puts its connect at the step,
/// with a gap below it; a spread that runs smoothly up to the step and past it is a queue's
/// (witness's or the kernel's), and a slice of it cut at the step is no retransmission.
fn below_retransmission(connect_s: f64) -> Option<usize> {
    SYN_RETRANSMIT_S.iter().enumerate().position(|(i, &k)| {
        let lo = match i {
            0 => k * 0.5,
            _ => SYN_RETRANSMIT_S[i - 1] + 0.2,
        };
        connect_s >= lo && connect_s < k - 0.02
    })
}

/// At most this share of the connects at a step may lie in the gap below it.
const GAP_SHARE: f64 = 0.1;

/// A level's connects whose fastest took this many times the connect floor (and at least
/// [`ABOVE_FLOOR_MIN_S`]) all waited in a queue before the server's kernel answered.
const ABOVE_FLOOR_FACTOR: f64 = 10.0;
const ABOVE_FLOOR_MIN_S: f64 = 0.001;

/// A connect is "at" a retransmission from just under it (the timer's own jitter) to a little
/// after it (the handshake that follows, on a busy host).
fn at_retransmission(connect_s: f64) -> Option<usize> {
    SYN_RETRANSMIT_S
        .iter()
        .position(|&k| connect_s >= k - 0.02 && connect_s <= k + 0.2)
}

/// A delayed ACK's timer: Linux's 40 ms minimum (the ACK timer of a connection in ping-pong mode;
/// measured 40–44 ms), and the 200 ms maximum most stacks use. A body gap in one of these windows.
/// Never before the timer (less a jiffy), and not long after it: a body streamed for 180 ms (three
/// chunks 60 ms apart) is not a 200 ms delayed ACK.
pub const DELAYED_ACK_S: &[(f64, f64, f64)] = &[(0.040, 0.038, 0.060), (0.200, 0.196, 0.250)];

/// At least this many ok requests with phases before "most of them" means anything.
pub const MIN_BODIES: u64 = 5;

/// A request's phases over a level, as every view shows them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Phases {
    /// How many requests opened a new connection (any outcome, once connected).
    pub new_connections: u64,
    /// Connect times of the new connections.
    pub connect: Option<Latency>,
    /// TLS handshake times of the new connections (https only), after their TCP connect.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handshake: Option<Latency>,
    /// From a request's start to its response's headers (connect included), ok requests.
    pub headers: Option<Latency>,
    /// From the headers to the body's end, ok requests.
    pub body: Option<Latency>,
    /// witness's own wait before each request left it (from when it was due to its first system
    /// call): never inside the connect, the headers or the request's duration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lag: Option<Latency>,
    /// What the connects' spread says when even the fastest took far longer than the connect
    /// floor: a queue's wait (witness's or the kernel's), not the server's work.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connect_note: Option<String>,
}

#[derive(Clone, Copy, Debug, Default)]
struct Bin {
    n: u64,
    min: f64,
    max: f64,
}

impl Bin {
    fn add(&mut self, x: f64) {
        if self.n == 0 {
            (self.min, self.max) = (x, x);
        }
        self.n += 1;
        self.min = self.min.min(x);
        self.max = self.max.max(x);
    }

    /// "1.02 s", or "1.01–1.03 s" when they differ at the shown precision.
    fn span(&self) -> String {
        let (a, b) = (format!("{:.2}", self.min), format!("{:.2}", self.max));
        if a == b {
            format!("{a} s")
        } else {
            format!("{a}–{b} s")
        }
    }

    fn span_ms(&self) -> String {
        let (a, b) = (self.min * 1000.0, self.max * 1000.0);
        if a.round() == b.round() {
            format!("{a:.0} ms")
        } else {
            format!("{a:.0}–{b:.0} ms")
        }
    }
}

#[derive(Default)]
struct Level {
    connect: Summary,
    handshake: Summary,
    headers: Summary,
    body: Summary,
    new_connections: u64,
    lag: Summary,
    /// The fastest connect.
    fastest: Option<f64>,
    syn: [Bin; SYN_RETRANSMIT_S.len()],
    /// Connects in the gap below each step (see [`below_retransmission`]).
    below: [u64; SYN_RETRANSMIT_S.len()],
    /// Ok requests whose phases are known, and their body gaps at each delayed-ACK timer.
    bodies: u64,
    delayed: [Bin; DELAYED_ACK_S.len()],
    /// When the level's first request ended (for the suspicion's place on the clock).
    last_t_s: f64,
}

/// One `listen` reading's figures.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Listen {
    port: u16,
    overflows: Option<u64>,
    drops: Option<u64>,
    backlog: Option<u64>,
    queued: Option<u64>,
    syn_retrans: Option<u64>,
}

/// The phases and TCP-timer findings of the ladder, folded request by request.
#[derive(Default)]
pub struct Acc {
    levels: BTreeMap<u32, Level>,
    /// The listen readings before and after each level.
    listen: BTreeMap<u32, (Option<Listen>, Option<Listen>)>,
    /// The connect floor measured before the ladder (its median), in seconds.
    floor_s: Option<f64>,
}

impl Acc {
    /// `recs`: the run's context (the `listen` readings are read from it).
    pub fn new(recs: &[Record]) -> Self {
        let mut listen: BTreeMap<u32, (Option<Listen>, Option<Listen>)> = BTreeMap::new();
        let mut floor_s = None;
        for r in recs {
            if let Event::ConnectFloor {
                median_ms: Some(ms),
                ..
            } = &r.event
            {
                floor_s = Some(ms / 1000.0);
            }
            if let Event::Listen {
                level,
                when,
                port,
                overflows,
                drops,
                backlog,
                queued,
                syn_retrans,
            } = &r.event
            {
                let l = Listen {
                    port: *port,
                    overflows: *overflows,
                    drops: *drops,
                    backlog: *backlog,
                    queued: *queued,
                    syn_retrans: *syn_retrans,
                };
                let e = listen.entry(*level).or_default();
                match when.as_str() {
                    "before" => e.0 = Some(l),
                    "after" => e.1 = Some(l),
                    _ => {}
                }
            }
        }
        Self {
            levels: BTreeMap::new(),
            listen,
            floor_s,
        }
    }

    /// Folds one request of level `index` in.
    pub fn request(&mut self, index: u32, r: &Record) {
        let Event::Request {
            duration_s,
            outcome,
            connect_s,
            headers_s,
            handshake_s,
            lag_s,
            ..
        } = &r.event
        else {
            return;
        };
        if connect_s.is_none() && headers_s.is_none() && lag_s.is_none() {
            return;
        }
        let l = self.levels.entry(index).or_default();
        l.last_t_s = l.last_t_s.max(r.t_s);
        if let Some(w) = lag_s {
            l.lag.record(*w);
        }
        if let Some(c) = connect_s {
            l.new_connections += 1;
            l.connect.record(*c);
            l.fastest = Some(l.fastest.map_or(*c, |f: f64| f.min(*c)));
            if let Some(i) = at_retransmission(*c) {
                l.syn[i].add(*c);
            }
            if let Some(i) = below_retransmission(*c) {
                l.below[i] += 1;
            }
        }
        if let Some(h) = handshake_s {
            l.handshake.record(*h);
        }
        if let (Outcome::Ok, Some(h)) = (outcome, headers_s) {
            let body = (duration_s - h).max(0.0);
            l.headers.record(*h);
            l.body.record(body);
            l.bodies += 1;
            for (i, &(_, lo, hi)) in DELAYED_ACK_S.iter().enumerate() {
                if body >= lo && body <= hi {
                    l.delayed[i].add(body);
                }
            }
        }
    }

    /// Each level's phases (by level index) and the suspicions. `rows`: what the findings say of
    /// each level (the ladder's rows, as [`LevelOf`]; the last with an index wins).
    pub fn finish(self, rows: &[LevelOf]) -> (Vec<(u32, Phases)>, Vec<Suspicion>) {
        let mut phases = Vec::new();
        let mut out = Vec::new();
        for (index, l) in &self.levels {
            let Some(row) = rows.iter().rev().find(|r| r.index == *index) else {
                continue;
            };
            phases.push((
                *index,
                Phases {
                    new_connections: l.new_connections,
                    connect: l.connect.latency(),
                    handshake: l.handshake.latency(),
                    headers: l.headers.latency(),
                    body: l.body.latency(),
                    lag: l.lag.latency(),
                    connect_note: above_floor(l, self.floor_s),
                },
            ));
            let listen = self.listen.get(index).copied().unwrap_or_default();
            out.extend(syn_retransmission(row, l, listen));
            out.extend(nagle(row, l));
        }
        (phases, out)
    }
}

/// What the findings say of a level: which one, at what concurrency, and when it ended.
#[derive(Clone, Copy, Debug)]
pub struct LevelOf {
    pub index: u32,
    pub concurrency: u32,
    pub end_t_s: Option<f64>,
}

/// A level whose fastest connect took far longer than the connect floor: every one of them waited
/// in a queue before its handshake, and the spread is that queue's, in words.
fn above_floor(l: &Level, floor_s: Option<f64>) -> Option<String> {
    let (fastest, floor) = (l.fastest?, floor_s?);
    if fastest < ABOVE_FLOOR_MIN_S || fastest < ABOVE_FLOOR_FACTOR * floor {
        return None;
    }
    Some(format!(
        "the fastest of {} took {}, {:.0}× the connect floor ({}): every connect waited in a queue before its handshake — witness's own (its workers reaching or noticing their connects late) or the kernel's (the listener's SYN or accept queue) — not the server's work",
        connections(l.new_connections),
        duration_words(fastest),
        fastest / floor,
        duration_words(floor),
    ))
}

/// A duration in the unit that fits it: 85 µs, 1.3 ms, 1.02 s.
fn duration_words(s: f64) -> String {
    match s {
        // Under a millisecond in whole µs: two decimals of a ms would round 4.5 µs and 5 µs apart.
        s if s < 0.001 => format!("{:.0} µs", s * 1e6),
        s if s < 1.0 => format!("{:.1} ms", s * 1000.0),
        s => format!("{s:.2} s"),
    }
}

/// Connects at a SYN retransmission, with the kernel's listen counters beside them. Only connects
/// AT a step with a gap below it (a SYN sent again waits the whole timer; a queue's spread runs up
/// to the step and past it), and never when the kernel counted no SYN sent again during the level.
fn syn_retransmission(
    row: &LevelOf,
    l: &Level,
    (before, after): (Option<Listen>, Option<Listen>),
) -> Option<Suspicion> {
    let bins: Vec<(usize, &Bin)> = l.syn.iter().enumerate().filter(|(_, b)| b.n > 0).collect();
    let &(first, _) = bins.first()?;
    if l.below[first] as f64 > GAP_SHARE * l.syn[first].n as f64 {
        return None;
    }
    let retransmitted: u64 = bins.iter().map(|(_, b)| b.n).sum();
    let took: Vec<String> = bins
        .iter()
        .enumerate()
        .map(|(i, (_, b))| {
            let what = if i == 0 { " connects" } else { "" };
            let what = if b.n == 1 && i == 0 { " connect" } else { what };
            format!("{}{what} took {}", b.n, b.span())
        })
        .collect();
    let delta = |f: fn(&Listen) -> Option<u64>| match (before.as_ref(), after.as_ref()) {
        (Some(b), Some(a)) => Some(f(a)?.saturating_sub(f(b)?)),
        _ => None,
    };
    let (overflows, drops) = (delta(|x| x.overflows), delta(|x| x.drops));
    let resent = delta(|x| x.syn_retrans);
    if resent == Some(0) {
        // The kernel sent no SYN again while the level ran: whatever held these connects, it was
        // not TCP's retransmission timer.
        return None;
    }
    let cause = match overflows {
        Some(0) => "SYN retransmission — a SYN went unanswered, though this host's kernel counted no ListenOverflows during the level (system-wide): the listener is in another network namespace or host, or the SYN was lost on the way".to_string(),
        _ => "SYN retransmission — the server's listen backlog overflowed (it accepts too slowly, or its backlog is small)".to_string(),
    };
    let mut evidence = Vec::new();
    if let Some(n) = resent {
        evidence.push(format!(
            "the kernel sent {n} SYN{} again during the level (TCPSynRetrans, system-wide: SYN-ACKs and every connection on this host count)",
            if n == 1 { "" } else { "s" }
        ));
    }
    if let (Some(o), Some(d)) = (overflows.filter(|&o| o > 0), drops) {
        evidence.push(format!(
            "the kernel counted {o} ListenOverflows and {d} ListenDrops during the level (system-wide: every listener on this host counts, not only this server's)"
        ));
    } else if overflows.is_none() {
        evidence.push("the kernel's listen counters were not read for this level".to_string());
    }
    let port = after.or(before).map(|x| x.port);
    let backlog = before
        .and_then(|x| x.backlog)
        .or(after.and_then(|x| x.backlog));
    let queued = after.and_then(|x| x.queued);
    match (port, backlog, queued) {
        (Some(p), Some(b), q) => evidence.push(format!(
            "the listener on port {p} has a backlog of {b}{}",
            q.map(|q| format!(" ({q} waiting in its accept queue after the level)"))
                .unwrap_or_default()
        )),
        (Some(p), None, Some(q)) => evidence.push(format!(
            "the listener on port {p} had {q} connections waiting in its accept queue after the level (its backlog could not be read)"
        )),
        _ => {}
    }
    let evidence = if evidence.is_empty() {
        String::new()
    } else {
        format!("; {}", evidence.join("; "))
    };
    let k = SYN_RETRANSMIT_S[first];
    Some(Suspicion {
        armed_s: None,
        kind: SuspicionKind::SynRetransmit,
        subject: Subject::Connect,
        seconds: l.syn[first].min,
        timer_s: k,
        timer_source: TimerSource::Tcp("initial SYN retransmission timeout".into()),
        t_s: row.end_t_s.unwrap_or(l.last_t_s),
        pid: None,
        group: Some(crate::journal::group_of_level(row.index)),
        detail: format!(
            "level {}: {} (of {}): {cause}{evidence}",
            row.concurrency,
            took.join(", "),
            connections(l.new_connections.max(retransmitted)),
        ),
    })
}

/// Most ok bodies arriving one delayed-ACK timer after their headers.
fn nagle(row: &LevelOf, l: &Level) -> Option<Suspicion> {
    if l.bodies < MIN_BODIES {
        return None;
    }
    let (i, b) = l
        .delayed
        .iter()
        .enumerate()
        .max_by_key(|(_, b)| b.n)
        .filter(|(_, b)| b.n * 2 > l.bodies)?;
    let timer = DELAYED_ACK_S[i].0;
    Some(Suspicion {
        armed_s: None,
        kind: SuspicionKind::NagleDelayedAck,
        subject: Subject::ResponseBody,
        seconds: b.min,
        timer_s: timer,
        timer_source: TimerSource::Tcp("delayed ACK".into()),
        t_s: row.end_t_s.unwrap_or(l.last_t_s),
        pid: None,
        group: Some(crate::journal::group_of_level(row.index)),
        detail: format!(
            "level {}: {} of {} ok responses' bodies arrived {} after their headers: Nagle's algorithm on the server meeting the client's delayed ACK — the server sends its headers and its body in separate small writes without TCP_NODELAY, so the body waits for the headers' ACK, which the client's TCP delays ~{} ms. A real cost every client of this server pays (wrk, oha, browsers), not the harness's: set TCP_NODELAY on the server's sockets, or write the response in one write",
            row.concurrency,
            b.n,
            l.bodies,
            b.span_ms(),
            (timer * 1000.0).round(),
        ),
    })
}

fn connections(n: u64) -> String {
    match n {
        1 => "1 new connection".into(),
        n => format!("{n} new connections"),
    }
}

/// One line of a level's phase percentiles, for the terminal and the HTML (None when no request
/// had phases). `concurrency`: the level's.
pub fn phases_line(concurrency: u32, p: &Phases) -> Option<String> {
    let d = duration_words;
    let pct = |x: &Option<Latency>| {
        x.as_ref().map(|x| {
            format!(
                "p50 {} p99 {} max {}",
                d(x.p50.min(x.max)),
                d(x.p99.min(x.max)),
                d(x.max)
            )
        })
    };
    let mut parts = Vec::new();
    if let Some(c) = pct(&p.connect) {
        parts.push(format!("connect {c} ({})", connections(p.new_connections)));
    }
    if let Some(t) = pct(&p.handshake) {
        parts.push(format!("TLS handshake {t}"));
    }
    if let Some(h) = pct(&p.headers) {
        parts.push(format!("headers {h}"));
    }
    if let Some(b) = pct(&p.body) {
        parts.push(format!("body {b}"));
    }
    let mut line =
        (!parts.is_empty()).then(|| format!("phases (n={concurrency}): {}", parts.join(" · ")))?;
    if let Some(note) = &p.connect_note {
        line.push_str(&format!(" — connects: {note}"));
    }
    if let Some(w) = pct(&p.lag) {
        line.push_str(&format!(
            "; witness's own lag before sending (not in any phase): {w}"
        ));
    }
    Some(line)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::analyze::analyze;
    use crate::analyze::tests::loaded;
    use crate::journal::{Event, LoadSettings, Probe, Settings};

    fn probe() -> Probe {
        Probe {
            status: Some(200),
            error: None,
            duration_s: 0.001,
            connected: false,
        }
    }

    pub(crate) fn req(
        id: u64,
        t: f64,
        d: f64,
        connect: Option<f64>,
        headers: Option<f64>,
    ) -> (f64, Event) {
        (
            t,
            Event::Request {
                id,
                group: "level0".into(),
                worker: id as u32,
                start_s: t - d,
                duration_s: d,
                outcome: Outcome::Ok,
                status: Some(200),
                scheduled_s: None,
                detail: None,
                body_bytes: Some(2),
                body_cut: false,
                connect_s: connect,
                headers_s: headers,
                handshake_s: None,
                lag_s: None,
                rpc_id: None,
            },
        )
    }

    fn listen(t: f64, when: &str, overflows: u64) -> (f64, Event) {
        listen_resent(t, when, overflows, None)
    }

    /// A listen reading with the kernel's count of SYNs sent again.
    fn listen_resent(t: f64, when: &str, overflows: u64, resent: Option<u64>) -> (f64, Event) {
        (
            t,
            Event::Listen {
                level: 0,
                when: when.into(),
                port: 8080,
                overflows: Some(overflows),
                drops: Some(overflows),
                backlog: Some(7),
                queued: Some(0),
                syn_retrans: resent,
            },
        )
    }

    /// One level of n=16 with these requests between its listen readings.
    pub(crate) fn level(
        reqs: Vec<(f64, Event)>,
        overflows: (u64, u64),
    ) -> crate::analyze::Analysis {
        level_with(
            reqs,
            listen(0.1, "before", overflows.0),
            listen(9.0, "after", overflows.1),
            None,
        )
    }

    /// [`level`] with these listen readings and, where given, a connect floor (ms) before it.
    fn level_with(
        reqs: Vec<(f64, Event)>,
        before: (f64, Event),
        after: (f64, Event),
        floor_ms: Option<f64>,
    ) -> crate::analyze::Analysis {
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
            (
                0.1,
                Event::LevelStart {
                    index: 0,
                    concurrency: 16,
                    health: probe(),
                    identity: None,
                    skipped: None,
                },
            ),
            before,
        ];
        if let Some(ms) = floor_ms {
            ev.insert(
                1,
                (
                    0.05,
                    Event::ConnectFloor {
                        host: "127.0.0.1".into(),
                        port: 8080,
                        addrs: Vec::new(),
                        median_ms: Some(ms),
                        limit_ms: 100.0,
                        advice: None,
                        handshake_ms: None,
                    },
                ),
            );
        }
        ev.extend(reqs);
        ev.push(after);
        ev.push((
            9.1,
            Event::LevelEnd {
                index: 0,
                concurrency: 16,
                health: probe(),
                identity: None,
                stopped: None,
                not_sent: None,
                held: None,
                witness_cpu_s: None,
                protocol: None,
            },
        ));
        analyze(&loaded(ev))
    }

    fn kinds(a: &crate::analyze::Analysis) -> Vec<&str> {
        a.suspicions.iter().map(|s| s.kind.as_str()).collect()
    }

    #[test]
    fn connects_at_one_and_two_seconds_are_syn_retransmissions_with_the_listen_counters() {
        let mut reqs = Vec::new();
        for i in 0..8 {
            reqs.push(req(i, 1.0, 0.002, Some(0.0003), Some(0.0015)));
        }
        for i in 8..14 {
            reqs.push(req(i, 2.0, 1.2, Some(1.0081 + i as f64 * 1e-4), Some(1.2)));
        }
        for i in 14..16 {
            reqs.push(req(i, 3.0, 2.3, Some(2.0427), Some(2.3)));
        }
        // Kept-alive requests after them: no connect.
        for i in 16..40 {
            reqs.push(req(i, 4.0, 0.001, None, Some(0.0009)));
        }
        let a = level(reqs, (353, 364));
        assert_eq!(kinds(&a), ["syn_retransmit"], "{:?}", a.suspicions);
        let s = &a.suspicions[0];
        assert_eq!(s.timer_s, 1.0);
        assert!(
            s.detail.starts_with("level 16: 6 connects took 1.01 s, 2 took 2.04 s (of 16 new connections): SYN retransmission — the server's listen backlog overflowed (it accepts too slowly, or its backlog is small); the kernel counted 11 ListenOverflows and 11 ListenDrops during the level (system-wide"),
            "{}",
            s.detail
        );
        assert!(
            s.detail
                .contains("the listener on port 8080 has a backlog of 7"),
            "{}",
            s.detail
        );
        let p = a.load.unwrap().levels[0].phases.clone().unwrap();
        assert_eq!(p.new_connections, 16);
        assert_eq!(p.connect.unwrap().count, 16);
        assert_eq!(p.headers.unwrap().count, 40);
    }

    #[test]
    fn a_connect_is_at_a_retransmission_from_just_under_it_to_a_handshake_after_it() {
        let at = |c: f64| at_retransmission(c).map(|i| SYN_RETRANSMIT_S[i]);
        assert_eq!(at(0.97), None);
        assert_eq!(at(0.985), Some(1.0));
        assert_eq!(at(1.0081), Some(1.0));
        assert_eq!(at(1.2), Some(1.0));
        assert_eq!(at(1.25), None);
        assert_eq!(at(1.5), None);
        assert_eq!(at(2.0427), Some(2.0));
        assert_eq!(at(3.01), Some(3.0));
        assert_eq!(at(6.0), None);
        assert_eq!(at(7.1), Some(7.0));
        // Nothing a healthy connect takes.
        assert!((0..900).all(|ms| at(ms as f64 / 1000.0).is_none()));
    }

    #[test]
    fn no_overflow_counted_says_so_rather_than_blame_the_backlog() {
        let reqs = vec![req(0, 2.0, 1.1, Some(1.01), Some(1.1))];
        let a = level(reqs, (5, 5));
        assert_eq!(kinds(&a), ["syn_retransmit"]);
        assert!(
            a.suspicions[0].detail.contains("1 connect took 1.01 s (of 1 new connection): SYN retransmission — a SYN went unanswered, though this host's kernel counted no ListenOverflows"),
            "{}",
            a.suspicions[0].detail
        );
    }

    #[test]
    fn connects_between_the_retransmissions_and_fast_ones_are_not_flagged() {
        let reqs = (0..20)
            .map(|i| req(i, 1.0, 0.6, Some(0.0003 + (i as f64) * 0.03), Some(0.6)))
            .collect();
        let a = level(reqs, (0, 0));
        assert!(a.suspicions.is_empty(), "{:?}", a.suspicions);
    }

    /// A request with witness's own lag before it.
    fn lagged(id: u64, t: f64, connect: f64, lag: f64) -> (f64, Event) {
        let (t, mut e) = req(
            id,
            t,
            connect + 0.001,
            Some(connect),
            Some(connect + 0.0005),
        );
        if let Event::Request { lag_s, .. } = &mut e {
            *lag_s = Some(lag);
        }
        (t, e)
    }

    #[test]
    fn a_smooth_spread_of_connects_cut_at_one_second_is_a_queue_not_a_syn_retransmission() {
        // Level 5000 on two cores: the fastest connect 0.47 s, the rest spread evenly up to 1.18 s;
        // the slice at 0.98–1.18 s is no retransmission, and the spread is named a queue's.
        let reqs: Vec<_> = (0..200)
            .map(|i| lagged(i, 2.0, 0.47 + i as f64 * 0.00355, 0.01))
            .collect();
        assert!(reqs
            .iter()
            .any(|(_, e)| matches!(e, Event::Request { connect_s: Some(c), .. } if *c >= 0.99)));
        let a = level_with(
            reqs,
            listen(0.1, "before", 0),
            listen(9.0, "after", 0),
            Some(0.08),
        );
        assert!(a.suspicions.is_empty(), "{:?}", a.suspicions);
        let p = a.load.unwrap().levels[0].phases.clone().unwrap();
        let note = p.connect_note.as_deref().expect("a note on the connects");
        assert!(
            note.starts_with("the fastest of 200 new connections took 470.0 ms, 5875× the connect floor (80 µs): every connect waited in a queue before its handshake — witness's own (its workers reaching or noticing their connects late) or the kernel's (the listener's SYN or accept queue) — not the server's work"),
            "{note}"
        );
        let line = phases_line(5000, &p).unwrap();
        assert!(line.contains(" — connects: the fastest of 200"), "{line}");
    }

    #[test]
    fn connects_at_a_step_with_a_gap_below_are_no_retransmission_when_the_kernel_sent_no_syn_again()
    {
        let reqs = || {
            let mut r: Vec<_> = (0..8)
                .map(|i| req(i, 1.0, 0.002, Some(0.0003), Some(0.0015)))
                .collect();
            r.extend((8..16).map(|i| req(i, 2.0, 1.2, Some(1.01), Some(1.2))));
            r
        };
        // The kernel counted none sent again during the level: not TCP's timer.
        let none = level_with(
            reqs(),
            listen_resent(0.1, "before", 5, Some(40)),
            listen_resent(9.0, "after", 5, Some(40)),
            None,
        );
        assert!(kinds(&none).is_empty(), "{:?}", none.suspicions);
        // It counted eight: said as evidence beside the connects.
        let eight = level_with(
            reqs(),
            listen_resent(0.1, "before", 5, Some(40)),
            listen_resent(9.0, "after", 13, Some(48)),
            None,
        );
        assert_eq!(kinds(&eight), ["syn_retransmit"]);
        assert!(
            eight.suspicions[0].detail.contains(
                "the kernel sent 8 SYNs again during the level (TCPSynRetrans, system-wide"
            ),
            "{}",
            eight.suspicions[0].detail
        );
    }

    #[test]
    fn witness_s_own_lag_is_summed_up_apart_from_every_phase() {
        let reqs = (0..10)
            .map(|i| lagged(i, 1.0, 0.00002, 0.100 + i as f64 * 0.01))
            .collect();
        let a = level_with(
            reqs,
            listen(0.1, "before", 0),
            listen(9.0, "after", 0),
            Some(0.02),
        );
        let p = a.load.unwrap().levels[0].phases.clone().unwrap();
        let lag = p.lag.clone().expect("the lag");
        assert_eq!(lag.count, 10);
        assert!((0.09..0.2).contains(&lag.p50), "{lag:?}");
        // The connects are the kernel's, near the floor: nothing to say of them.
        assert!(p.connect_note.is_none(), "{p:?}");
        assert!(p.connect.as_ref().unwrap().max < 0.0001);
        let line = phases_line(10, &p).unwrap();
        assert!(
            line.starts_with("phases (n=10): connect p50 20 µs"),
            "{line}"
        );
        assert!(
            line.contains("; witness's own lag before sending (not in any phase): p50 1"),
            "{line}"
        );
    }

    #[test]
    fn bodies_forty_ms_after_their_headers_are_nagle_meeting_delayed_ack() {
        let reqs = (0..20)
            .map(|i| {
                let h = 0.0004;
                let body = if i < 2 {
                    0.0001
                } else {
                    0.0405 + i as f64 * 1e-4
                };
                req(i, 1.0 + i as f64 * 0.05, h + body, None, Some(h))
            })
            .collect();
        let a = level(reqs, (0, 0));
        assert_eq!(kinds(&a), ["nagle_delayed_ack"], "{:?}", a.suspicions);
        let d = &a.suspicions[0].detail;
        assert!(
            d.starts_with("level 16: 18 of 20 ok responses' bodies arrived 41–42 ms after their headers: Nagle's algorithm on the server meeting the client's delayed ACK"),
            "{d}"
        );
        assert!(d.contains("not the harness's: set TCP_NODELAY on the server's sockets, or write the response in one write"), "{d}");
        assert_eq!(a.suspicions[0].timer_s, 0.04);
    }

    #[test]
    fn a_body_streamed_in_slow_chunks_or_a_few_slow_bodies_are_not_nagle() {
        // Three chunks 60 ms apart: 120 ms after the headers.
        let streamed = (0..20)
            .map(|i| req(i, 1.0, 0.1205, None, Some(0.0005)))
            .collect();
        assert!(level(streamed, (0, 0)).suspicions.is_empty());
        // Half at 40 ms is no "most".
        let few = (0..20)
            .map(|i| {
                let body = if i < 10 { 0.041 } else { 0.0002 };
                req(i, 1.0, 0.0005 + body, None, Some(0.0005))
            })
            .collect();
        assert!(level(few, (0, 0)).suspicions.is_empty());
        // Five is enough to say "most"; four is too few.
        let five = (0..5)
            .map(|i| req(i, 1.0, 0.0415, None, Some(0.0005)))
            .collect();
        assert_eq!(kinds(&level(five, (0, 0))), ["nagle_delayed_ack"]);
        let tiny = (0..4)
            .map(|i| req(i, 1.0, 0.0415, None, Some(0.0005)))
            .collect();
        assert!(level(tiny, (0, 0)).suspicions.is_empty());
    }

    #[test]
    fn a_journal_without_phases_has_no_phases_and_no_tcp_suspicion() {
        let reqs = (0..20).map(|i| req(i, 1.0, 1.01, None, None)).collect();
        let a = level(reqs, (0, 0));
        assert!(a
            .suspicions
            .iter()
            .all(|s| s.kind != SuspicionKind::SynRetransmit
                && s.kind != SuspicionKind::NagleDelayedAck));
        assert!(a.load.unwrap().levels[0].phases.is_none());
    }
}
