//! Analysis: a pure function of the journal. It performs no I/O and reads no clock, so `witness report`
//! re-renders any past run exactly, and every finding is unit-tested on hand-built event lists.

pub mod answers;
pub mod asserts;
pub mod classify;
pub mod compare;
pub mod cuts;
pub mod evidence;
pub mod gpu;
pub mod inflight;
pub mod merged;
pub mod observed;
pub mod ok_timers;
pub mod open;
pub mod picture;
pub mod rate;
pub mod request_timers;
pub mod resolution;
pub mod soak;
pub use crate::stats;
pub mod tcp_timers;
pub mod timeline;
pub mod timers;
pub mod trend;
pub mod verdict;

use serde::Serialize;

use crate::journal::{secs, Event, Record, Replay, Settings};
use timers::TimerSource;

/// What a suspicion found: a closed set, so a new one is added here once (serialised as the
/// snake_case names the JSON report has always carried).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SuspicionKind {
    /// A value (a process's age at exit, a failed request's duration) at a timer.
    RoundTimer,
    /// Failed requests giving up together at one value.
    RequestTimer,
    /// Ok requests answered by a timer (a mode apart from the rest, or a max just under one).
    OkTimer,
    /// Refusals clustered at one duration: a timer inside the server, not capacity.
    RefusalTimer,
    /// The served rate flat across levels while the rest are refused.
    RateLimit,
    /// Connects at TCP's SYN retransmission timeouts.
    SynRetransmit,
    /// Bodies one delayed ACK after their headers: Nagle's algorithm on the server.
    NagleDelayedAck,
}

impl SuspicionKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SuspicionKind::RoundTimer => "round_timer",
            SuspicionKind::RequestTimer => "request_timer",
            SuspicionKind::OkTimer => "ok_timer",
            SuspicionKind::RefusalTimer => "refusal_timer",
            SuspicionKind::RateLimit => "rate_limit",
            SuspicionKind::SynRetransmit => "syn_retransmit",
            SuspicionKind::NagleDelayedAck => "nagle_delayed_ack",
        }
    }
}

impl std::fmt::Display for SuspicionKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a suspicion is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Subject {
    /// A server process's life, up to its exit.
    ProcessExit,
    /// Requests (or calls), whole.
    Request,
    /// The connects of requests.
    Connect,
    /// The bodies of responses, after their headers.
    ResponseBody,
}

/// A finding worth a person's attention: a number that may be a timer rather than the server's work.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Suspicion {
    pub kind: SuspicionKind,
    pub subject: Subject,
    /// The lifetime or duration that sits at the timer.
    pub seconds: f64,
    pub timer_s: f64,
    pub timer_source: TimerSource,
    /// When on the run's clock (the exit, or the request's end).
    pub t_s: f64,
    /// A process's timer armed after the process started: how long after (the figure its words
    /// give). The timer fires at the start plus this plus `timer_s`; None: armed at the start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub armed_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// The journal group (a level, a soak kind, an observed method) whose requests it is about.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    pub detail: String,
}

/// One server process from spawn to exit (or to the journal's end).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProcessLife {
    pub pid: u32,
    pub start_time: u64,
    pub spawn_t_s: f64,
    pub exit_t_s: Option<f64>,
    pub age_s: Option<f64>,
    pub status: Option<i32>,
    pub meaning: Option<String>,
    pub requested: bool,
    /// The engine said the kernel OOM killer ended it (containers only).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub oom_killed: bool,
    /// The signal that killed it, as the lifecycle named it ("SIGKILL").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// Log lines of this process that matched a pattern.
    pub log_lines: Vec<LogLine>,
    /// Its command line.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// A process of the server's tree, not witness's own child: the one that held the listening
    /// socket under a shell loop, `timeout` or a process manager. Its parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ppid: Option<u32>,
    /// It held the server's listening socket: it served.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub listened: bool,
    /// The last line it wrote before it exited, matched by a pattern or not: its last words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_line: Option<String>,
}

impl ProcessLife {
    /// A life as it begins: started at `t_s`, not yet ended.
    fn started(
        pid: u32,
        start_time: u64,
        t_s: f64,
        command: &[String],
        ppid: Option<u32>,
        listened: bool,
    ) -> Self {
        ProcessLife {
            pid,
            start_time,
            spawn_t_s: t_s,
            exit_t_s: None,
            age_s: None,
            status: None,
            meaning: None,
            requested: false,
            oom_killed: false,
            signal: None,
            log_lines: Vec::new(),
            command: command.to_vec(),
            ppid,
            listened,
            last_line: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LogLine {
    pub t_s: f64,
    pub label: String,
    pub line: String,
    pub timer_s: Option<f64>,
}

/// Everything the views show about a run's lifecycle.
#[derive(Clone, Debug, Serialize)]
pub struct Analysis {
    pub mode: String,
    pub command: Vec<String>,
    pub started_at: String,
    pub hostname: String,
    /// The last timestamp in the journal.
    pub end_s: f64,
    /// Set when the journal ends without a clean end (crash, kill): "partial: journal ends at t=…";
    /// or, for a run still going, "live: …" (see [`still_running`]).
    pub partial: Option<String>,
    /// The pid of the witness still writing this run's journal (see [`still_running`]).
    pub live: Option<u32>,
    pub settings: Settings,
    pub processes: Vec<ProcessLife>,
    /// Lifecycle events as the report shows them (each with t_s, kind, pid).
    pub lifecycle: Vec<serde_json::Value>,
    pub timeline: Vec<timeline::Entry>,
    pub suspicions: Vec<Suspicion>,
    pub restarts: u32,
    /// The status of the last process to exit (wrap's own exit code).
    pub last_status: Option<i32>,
    /// The code witness itself exited with, as its end record says (None: no end record).
    pub exit_code: Option<i32>,
    /// The run's thresholds (`--assert`), each judged from this analysis.
    pub asserts: Vec<asserts::Judged>,
    /// Warnings and errors the run noted.
    pub notes: Vec<(f64, String, String)>,
    /// GPU readings per device, or why there are none.
    pub gpu: gpu::GpuSection,
    /// The host names witness resolved: once each, timed, never inside any figure.
    pub resolution: Vec<resolution::Resolved>,
    /// The load ladder's levels and verdicts, for `load` runs.
    pub load: Option<verdict::LoadAnalysis>,
    /// The soak's figures, invariants, faults and verdict, for `soak` runs.
    pub soak: Option<soak::SoakAnalysis>,
    /// The calls a real client made through `wrap` (stdio relay, proxy), per method or tool.
    pub observed: Option<observed::ObservedAnalysis>,
    /// `witness replay`: the recording played, its speeds and how the answers compared.
    pub replay: Option<answers::ReplayAnalysis>,
    /// The run laid out for the HTML timeline and the trace export.
    pub picture: picture::Picture,
    /// For a journal merged from several sources: the sources, their clocks, and requests grouped
    /// as each source is shaped.
    pub merged: Option<merged::MergedAnalysis>,
}

/// How a note about reading the journal (a cut-off line, an unreadable one, an input of a merge that
/// ended early) begins; `witness report` also says these on stderr.
pub const READING: &str = "reading the journal: ";

const LIFECYCLE_KINDS: &[&str] = &[
    "spawn",
    "exit",
    "log",
    "signal_sent",
    "restart",
    "leak",
    "ready",
    "fault",
    "helpers",
];

/// Analyses a journal in two streaming passes with bounded state: the first keeps the run's context
/// (every record but the requests: lifecycle, probes, levels, samples — bounded by the run's events,
/// not by its request count), the second folds the requests into per-level, per-kind and per-bucket
/// accumulators (counts, HDR summaries, the first failures, at most [`picture::SPAN_KEEP`] spans).
/// A merged journal's requests take a third pass, once the ladder's verdicts are known (its
/// annotations add words about clocks to the ladder's failures). Memory does not grow with the
/// number of requests.
pub fn analyze(journal: &(impl Replay + ?Sized)) -> Analysis {
    let header = journal.header();
    // Pass 1: the context.
    let mut pass = journal.pass();
    let mut context: Vec<Record> = Vec::new();
    let mut end_s = 0.0f64;
    let mut spans = merged::RequestSpans::default();
    let merging = !header.sources.is_empty();
    for r in pass.by_ref() {
        end_s = end_s.max(r.t_s);
        if matches!(r.event, Event::Request { .. }) {
            if merging {
                spans.add(&r);
            }
        } else {
            context.push(r);
        }
    }
    let read = pass.state();
    drop(pass);
    let recs = &context[..];
    // Pass 2 (and a third for a merged journal): the requests, each through bounded state.
    let requests_pass = || {
        journal
            .pass()
            .filter(|r| matches!(r.event, Event::Request { .. }))
    };

    let settings = recs
        .iter()
        .find_map(|r| match &r.event {
            Event::Settings(s) => Some(s.clone()),
            _ => None,
        })
        .unwrap_or_default();
    let processes = process_lives(recs);
    let restarts = recs
        .iter()
        .filter(|r| matches!(r.event, Event::Restart { .. }))
        .count() as u32;
    let last_status = recs.iter().rev().find_map(|r| match r.event {
        Event::Exit { status, .. } => Some(status),
        _ => None,
    });
    let exit_code = recs.iter().rev().find_map(|r| match r.event {
        Event::End { exit_code, .. } => Some(exit_code),
        _ => None,
    });
    let partial = partial_reason(recs, end_s, read.truncated.as_deref());
    let mut notes: Vec<(f64, String, String)> = recs
        .iter()
        .filter_map(|r| match &r.event {
            Event::Note { level, text } => Some((r.t_s, level.clone(), text.clone())),
            _ => None,
        })
        .collect();
    for w in read.skipped.iter().chain(&read.warnings) {
        notes.push((end_s, "warning".into(), format!("{READING}{w}")));
    }
    let mut suspicions = evidence::exit_claims(recs, &processes, &settings);
    let named: Vec<(f64, TimerSource)> = settings
        .timers_s
        .iter()
        .map(|&t| (t, TimerSource::Flag))
        .collect();
    // Timers that start with each request: --timer, then the server's own command line.
    let mut request_named = named.clone();
    request_named.extend(request_timers::command_line_timers(&server_command(recs)));

    let mut ladder = settings
        .load
        .as_ref()
        .map(|_| verdict::LoadAcc::new(recs, &processes, &named));
    let mut observed = observed::Acc::new(header, recs, &processes, &named);
    let observed_scope = observed.as_ref().map(|o| o.scope().clone());
    // Failed requests giving up together at a timer: load's, and the calls a client made through
    // wrap (a wrap journal's requests are all observed calls; a merged one's wrap sources too).
    let mut failures = (settings.load.is_some() || observed.is_some())
        .then(|| request_timers::Failures::new(recs));
    let mut picture_requests = picture::Requests::new(end_s, observed_scope.clone());
    // The requests each exit cut, told once with the exit, whichever journal they came from.
    let mut cuts = cuts::Cuts::new(header, recs, &processes);
    let mut replay = answers::Acc::new(recs);
    let soak = {
        let mut fold = requests_pass().inspect(|r| {
            cuts.request(r);
            if let Some(x) = replay.as_mut() {
                x.request(r);
            }
            if let Some(l) = ladder.as_mut() {
                l.request(r);
            }
            let seen_by_wrap = observed.as_mut().is_some_and(|o| o.request(r));
            // Without a ladder, only the calls wrap saw are searched for a request timer (a k6
            // source merged beside a wrap journal is not, as it is not without one).
            if let (Some(f), true) = (failures.as_mut(), settings.load.is_some() || seen_by_wrap) {
                f.request(r);
            }
            picture_requests.request(r);
        });
        // A soak's own figures are folded from the same pass; whatever it leaves unread (all of
        // it, when this is not a soak) is read to the end for the others.
        let soak = soak::analyze_soak(recs, &mut fold, &settings, end_s, &Default::default());
        fold.for_each(drop);
        soak
    };
    // One classification per request: refusals a timer answered, found in the refusal histograms
    // of the levels, the soak's kinds and the calls wrap observed, are failures at that timer in
    // every one of them. When the run has any, the ladder, the soak, the observed calls and the
    // picture fold the requests once more, each request classified by the same rules.
    let mut rules = ladder
        .as_ref()
        .map(|l| l.classes().rules().to_vec())
        .unwrap_or_default();
    rules.extend(soak.iter().flat_map(|s| s.rules.iter().cloned()));
    rules.extend(observed.iter().flat_map(|o| o.rules()));
    let classes = classify::Classes::new(rules)
        .applying_to(
            soak.iter()
                .flat_map(|s| s.kinds.iter().map(|k| k.name.clone())),
        )
        .applying_to(observed.iter().flat_map(|o| o.groups().collect::<Vec<_>>()));
    let mut soak = soak;
    if !classes.is_empty() {
        // The first fold's state goes before the second's is built: memory is one fold's.
        let had_ladder = ladder.take().is_some();
        let had_observed = observed.take().is_some();
        let had_soak = soak.take().is_some();
        picture_requests = picture::Requests::new(end_s, observed_scope);
        let mut again = had_ladder
            .then(|| verdict::LoadAcc::new(recs, &processes, &named).classified(classes.clone()));
        let mut seen = had_observed
            .then(|| observed::Acc::new(header, recs, &processes, &named))
            .flatten()
            .map(|o| o.classified(classes.clone()));
        picture_requests = picture_requests.classified(classes.clone());
        let mut fold = requests_pass().inspect(|r| {
            if let Some(l) = again.as_mut() {
                l.request(r);
            }
            if let Some(o) = seen.as_mut() {
                o.request(r);
            }
            picture_requests.request(r);
        });
        if had_soak {
            soak = soak::analyze_soak(recs, &mut fold, &settings, end_s, &classes);
        }
        fold.for_each(drop);
        ladder = again;
        observed = seen;
    }
    if let Some(s) = soak.as_mut() {
        suspicions.append(&mut s.suspicions);
    }
    let mut replay_found = None;
    let mut load = settings.load.as_ref().zip(ladder).map(|(ls, acc)| {
        let (mut load, more) = acc.finish(ls.factor, ls.cliff_slack_s);
        suspicions.extend(more);
        replay_found = replay
            .take()
            .map(|x| x.finish(&mut load, ls.factor, ls.cliff_slack_s));
        if partial.is_some() {
            verdict::stopped_early(
                &mut load,
                &ls.levels,
                &ls.rates_per_s,
                end_reason(recs).as_deref(),
            );
        }
        open::limit(recs, &mut load);
        load
    });
    if let Some(f) = failures.take() {
        suspicions.extend(f.finish(recs, &request_named));
    }
    let observed = observed.map(|acc| {
        let (o, more) = acc.finish();
        suspicions.extend(more);
        o
    });
    let observed = observed.flatten();
    let merged = if merging {
        merged::analyze(
            header,
            recs,
            &mut requests_pass(),
            &spans,
            &processes,
            load.as_mut(),
            &classes,
        )
    } else {
        None
    };
    cuts.finish(&mut suspicions, &named);
    suspicions.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
    let mut a = Analysis {
        live: None,
        mode: header.mode.clone(),
        command: header.command.clone(),
        started_at: header.started_at.clone(),
        hostname: header.hostname.clone(),
        end_s,
        partial,
        picture: picture::build(recs, &processes, &suspicions, picture_requests),
        suspicions,
        resolution: resolution::rows(recs),
        load,
        replay: replay_found,
        soak,
        observed,
        lifecycle: lifecycle_json(recs),
        timeline: timeline::build(recs, &processes),
        settings,
        processes,
        restarts,
        last_status,
        exit_code: exit_code.flatten(),
        asserts: Vec::new(),
        notes,
        gpu: gpu::section(recs),
        merged,
    };
    // The thresholds, judged from everything above (one decision each).
    a.asserts = asserts::judge_texts(&a.settings.asserts, &a);
    // A run whose end record does not carry witness's exit code (load, replay and soak decide it
    // from this very analysis): the code its rules give, as the command exits with it.
    if a.exit_code.is_none() {
        a.exit_code = decided_exit_code(&a, end_reason(recs).as_deref());
    }
    a
}

/// Whether the run's health probes were MCP pings (a load over MCP, or a ping journalled as one).
pub fn mcp_pings(recs: &[Record]) -> bool {
    recs.iter().any(|r| match &r.event {
        Event::Settings(s) => s.load.as_ref().is_some_and(|l| l.mcp.is_some()),
        Event::Health { url, .. } => url.starts_with("mcp ping"),
        _ => false,
    })
}

/// The command line of the first server process witness started (empty when it attached).
fn server_command(recs: &[Record]) -> Vec<String> {
    recs.iter()
        .find_map(|r| match &r.event {
            Event::Spawn { command, .. } => Some(command.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

/// The code `load`, `replay` and `soak` exit with, from the run's verdicts and thresholds (None
/// with no end record: the run did not end, or its witness died): 0 pass, 1 a failed verdict or a
/// broken threshold, 3 refused, 130 interrupted by a signal.
fn decided_exit_code(a: &Analysis, end: Option<&str>) -> Option<i32> {
    let end = end?;
    let verdict = a
        .load
        .as_ref()
        .map(|l| l.verdict.as_str())
        .or(a.soak.as_ref().map(|s| s.verdict.as_str()))?;
    let held = a.asserts.iter().all(|j| j.ok);
    Some(match verdict {
        "refused" => 3,
        _ if end.starts_with("interrupted by") => 130,
        "pass" if held => 0,
        _ => 1,
    })
}

/// The end record's reason, if the run wrote one.
fn end_reason(recs: &[Record]) -> Option<String> {
    recs.iter().rev().find_map(|r| match &r.event {
        Event::End { reason, .. } => Some(reason.clone()),
        _ => None,
    })
}

/// The run is still going (the witness that writes its journal runs, pid `pid`): the journal so far
/// is live, not cut off. Every view says so where it would have said "no end record": the run's
/// and the soak's verdict are "running", and a level under way is "running", not "interrupted".
pub fn still_running(a: &mut Analysis, pid: u32) {
    let so_far = format!("t={:.3}s", a.end_s);
    a.live = Some(pid);
    a.partial = Some(format!(
        "live: the run is still going (witness pid {pid}); this is its journal up to {so_far}"
    ));
    if let Some(l) = a.load.as_mut() {
        verdict::still_running(l);
    }
    if let Some(s) = a.soak.as_mut() {
        if s.verdict == "incomplete" {
            s.verdict = "running".into();
            s.reasons.clear();
            s.reasons
                .push(format!("still going: no violation seen up to {so_far}"));
        }
        s.aborted_reason = Some(format!(
            "still going (witness pid {pid}): its journal up to {so_far}"
        ));
    }
}

/// Why the run is partial, in the words every view uses, or None if it ended cleanly. `end`: the
/// journal's last timestamp; `truncated`: how its last line was cut off, if it was.
pub fn partial_reason(recs: &[Record], end: f64, truncated: Option<&str>) -> Option<String> {
    if let Some(t) = truncated {
        return Some(format!("partial: journal ends at t={end:.3}s ({t})"));
    }
    match recs.iter().rev().find_map(|r| match &r.event {
        Event::End {
            partial, reason, ..
        } => Some((*partial, reason.clone())),
        _ => None,
    }) {
        None => Some(format!(
            "partial: journal ends at t={end:.3}s with no end record (witness was stopped or crashed)"
        )),
        Some((true, reason)) => Some(format!("partial: stopped early at t={end:.3}s: {reason}")),
        Some((false, _)) => None,
    }
}

fn lifecycle_json(recs: &[Record]) -> Vec<serde_json::Value> {
    recs.iter()
        .filter(|r| LIFECYCLE_KINDS.contains(&r.event.kind()))
        .filter_map(|r| {
            let mut v = serde_json::to_value(r).ok()?;
            if let Some(o) = v.as_object_mut() {
                o.entry("pid").or_insert(serde_json::Value::Null);
                // An exit's last words, as the timeline says them.
                if let Event::Exit {
                    pid,
                    age_s,
                    requested: false,
                    ..
                } = &r.event
                {
                    if let Some(l) = timeline::last_line(recs, *pid, r.t_s - age_s, r.t_s) {
                        o.insert("last_line".into(), l.into());
                    }
                }
                // A command's helpers in the words the terminal and the HTML use.
                if let Event::Helpers {
                    command,
                    count,
                    lived_min_s,
                    lived_median_s,
                    lived_max_s,
                    ends,
                    ..
                } = &r.event
                {
                    let text = timeline::helpers_words(
                        command,
                        *count,
                        [*lived_min_s, *lived_median_s, *lived_max_s],
                        ends,
                    );
                    o.insert("text".into(), text.into());
                }
            }
            Some(v)
        })
        .collect()
}

/// Pairs spawns with exits by pid, in order.
pub fn process_lives(recs: &[Record]) -> Vec<ProcessLife> {
    let mut lives: Vec<ProcessLife> = Vec::new();
    // The processes seen holding the server's listening socket.
    let listening: Vec<u32> = recs
        .iter()
        .filter_map(|r| match &r.event {
            Event::Listening { pid, .. } => Some(*pid),
            _ => None,
        })
        .collect();
    // When witness began to stop the server (its own signal): exits after it were asked for.
    let end_t = recs.iter().find_map(|r| match &r.event {
        Event::SignalSent { .. } => Some(r.t_s),
        _ => None,
    });
    for r in recs {
        match &r.event {
            Event::Spawn {
                pid,
                start_time,
                command,
                ..
            } => lives.push(ProcessLife::started(
                *pid,
                *start_time,
                r.t_s,
                command,
                None,
                listening.contains(pid),
            )),
            // A process of the tree that served (under a shell loop or `timeout`): a life of the
            // server's like the root's.
            Event::WorkerStart {
                pid,
                ppid,
                start_time,
                command,
            } if listening.contains(pid) && !lives.iter().any(|l| l.pid == *pid) => lives.push(
                ProcessLife::started(*pid, *start_time, r.t_s, command, Some(*ppid), true),
            ),
            Event::WorkerExit {
                pid,
                age_s,
                code,
                signal,
                how,
                ..
            } => {
                if let Some(l) = lives
                    .iter_mut()
                    .rev()
                    .find(|l| l.pid == *pid && l.ppid.is_some() && l.exit_t_s.is_none())
                {
                    let status = match (code, signal) {
                        (Some(c), _) => *c,
                        (None, Some(s)) => {
                            128 + s
                                .parse::<nix::sys::signal::Signal>()
                                .map_or(0, |g| g as i32)
                        }
                        _ => -1,
                    };
                    l.exit_t_s = Some(r.t_s);
                    l.age_s = Some(*age_s);
                    l.status = Some(status);
                    l.meaning = Some(how.clone());
                    // witness's own stop of the tree at the end is asked for; before it, not.
                    l.requested = end_t.is_some_and(|e| r.t_s >= e);
                    l.signal = signal.clone();
                }
            }
            Event::Exit {
                pid,
                age_s,
                status,
                meaning,
                requested,
                oom_killed,
                signal,
                ..
            } => {
                if let Some(l) = lives
                    .iter_mut()
                    .rev()
                    .find(|l| l.pid == *pid && l.exit_t_s.is_none())
                {
                    l.exit_t_s = Some(r.t_s);
                    l.age_s = Some(*age_s);
                    l.status = Some(*status);
                    l.meaning = Some(meaning.clone());
                    l.requested = *requested;
                    l.oom_killed = *oom_killed == Some(true);
                    l.signal = signal.clone();
                }
            }
            Event::Log {
                pid: Some(pid),
                label,
                line,
                timer_s,
                ..
            } => {
                if let Some(l) = lives.iter_mut().rev().find(|l| l.pid == *pid) {
                    l.log_lines.push(LogLine {
                        t_s: r.t_s,
                        label: label.clone(),
                        // What views quote: a structured line's level and message first.
                        line: crate::journal::logline::shown(line).into_owned(),
                        timer_s: *timer_s,
                    });
                }
            }
            _ => {}
        }
    }
    for l in lives.iter_mut() {
        if let (Some(x), Some(age), false) = (l.exit_t_s, l.age_s, l.requested) {
            l.last_line = timeline::last_line(recs, l.pid, x - age, x);
        }
    }
    lives
}

/// Timers a process's own log lines named, with the line.
pub fn named_timers(recs: &[Record], pid: u32) -> Vec<(f64, TimerSource)> {
    recs.iter()
        .filter_map(|r| match &r.event {
            Event::Log {
                pid: Some(p),
                line,
                timer_s: Some(t),
                ..
            } if *p == pid => Some((*t, TimerSource::LogLine(inflight::short_line(line)))),
            _ => None,
        })
        .collect()
}

/// "3.00 s" style for ages in the words of findings.
pub fn age_words(s: f64) -> String {
    secs(s)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::journal::{Header, Loaded, Stream};

    pub fn loaded(events: Vec<(f64, Event)>) -> Loaded {
        Loaded {
            header: Header::new("wrap", vec!["witness".into(), "wrap".into()]),
            records: events
                .into_iter()
                .map(|(t_s, event)| Record {
                    t_s,
                    event,
                    origin: None,
                })
                .collect(),
            truncated: None,
            skipped: vec![],
        }
    }

    pub fn spawn(pid: u32) -> Event {
        Event::Spawn {
            pid,
            start_time: 1000 + pid as u64,
            command: vec!["srv".into()],
            attempt: 0,
            container_id: None,
        }
    }

    pub fn exit(pid: u32, code: i32, age: f64, requested: bool) -> Event {
        Event::Exit {
            pid,
            code: Some(code),
            signal: None,
            core_dumped: false,
            age_s: age,
            status: code,
            requested,
            meaning: crate::journal::meaning::code_meaning(code),
            oom_killed: None,
        }
    }

    pub fn end() -> Event {
        Event::End {
            reason: "done".into(),
            partial: false,
            exit_code: Some(0),
        }
    }

    #[test]
    fn a_watchdog_exit_is_suspected_at_the_timer_its_log_line_names() {
        let a = analyze(&loaded(vec![
            (0.0, spawn(7)),
            (
                6.0,
                Event::Log {
                    pid: Some(7),
                    stream: Stream::Stderr,
                    line: "[oi] process watchdog: force-exiting after 6s (exit 124)".into(),
                    label: "watchdog".into(),
                    truncated: false,
                    timer_s: Some(6.0),
                },
            ),
            (6.01, exit(7, 124, 6.01, false)),
            (6.1, end()),
        ]));
        assert_eq!(a.suspicions.len(), 1);
        let s = &a.suspicions[0];
        assert_eq!(s.timer_s, 6.0);
        assert!(matches!(s.timer_source, TimerSource::LogLine(_)));
        assert!(s.detail.contains("exited at age 6.01 s"), "{}", s.detail);
        assert_eq!(a.last_status, Some(124));
        assert!(a.partial.is_none());
    }

    #[test]
    fn a_timer_armed_after_the_start_is_named_with_how_far_age_and_timer_differ() {
        let watchdog = |t: f64| Event::Log {
            pid: Some(7),
            stream: Stream::Stderr,
            line: "watchdog: no shutdown after 6s, force-exiting".into(),
            label: "watchdog".into(),
            truncated: false,
            timer_s: Some(t),
        };
        let a = analyze(&loaded(vec![
            (0.0, spawn(7)),
            (15.2, watchdog(6.0)),
            (15.25, exit(7, 124, 15.25, false)),
            (15.3, end()),
        ]));
        assert_eq!(a.suspicions.len(), 1, "{:?}", a.suspicions);
        let s = &a.suspicions[0];
        assert_eq!((s.timer_s, s.seconds), (6.0, 15.25));
        assert!(s.detail.contains("differ by 9.25 s"), "{}", s.detail);
        assert!(
            s.detail
                .contains("armed about 9.25 s after the process started"),
            "{}",
            s.detail
        );
        assert!(s.detail.contains("no shutdown after 6s"), "{}", s.detail);
        // The figure the words give is carried, so its deadline is drawn where they put it.
        assert_eq!(s.armed_s, Some(9.25));
        // A clean exit, or a line long before the exit, is not that.
        let clean = analyze(&loaded(vec![
            (0.0, spawn(7)),
            (15.2, watchdog(6.0)),
            (15.25, exit(7, 0, 15.25, false)),
            (15.3, end()),
        ]));
        assert!(clean.suspicions.is_empty());
        let early = analyze(&loaded(vec![
            (0.0, spawn(7)),
            (3.0, watchdog(6.0)),
            (13.7, exit(7, 1, 13.7, false)),
            (13.8, end()),
        ]));
        assert!(early.suspicions.is_empty(), "{:?}", early.suspicions);
    }

    #[test]
    fn an_exit_witness_asked_for_is_not_suspicious() {
        let a = analyze(&loaded(vec![
            (0.0, spawn(7)),
            (30.0, exit(7, 143, 30.0, true)),
            (30.1, end()),
        ]));
        assert!(a.suspicions.is_empty());
    }

    #[test]
    fn an_exit_the_engine_calls_an_oom_kill_is_not_a_timer() {
        let oom = Event::Exit {
            pid: 7,
            code: None,
            signal: Some("SIGKILL".into()),
            core_dumped: false,
            age_s: 1.01,
            status: 137,
            requested: false,
            meaning: "killed by the kernel OOM killer (OOMKilled)".into(),
            oom_killed: Some(true),
        };
        let a = analyze(&loaded(vec![(0.0, spawn(7)), (1.01, oom), (1.1, end())]));
        assert!(a.suspicions.is_empty(), "{:?}", a.suspicions);
        assert!(a.processes[0].oom_killed);
        // The same age without the engine's word: an age near a round number is no evidence.
        let a = analyze(&loaded(vec![
            (0.0, spawn(7)),
            (1.01, exit(7, 137, 1.01, false)),
            (1.1, end()),
        ]));
        assert!(a.suspicions.is_empty(), "{:?}", a.suspicions);
    }

    #[test]
    fn a_journal_with_no_end_is_partial() {
        let a = analyze(&loaded(vec![(0.0, spawn(7))]));
        assert!(a
            .partial
            .unwrap()
            .starts_with("partial: journal ends at t=0.000s"));
    }

    #[test]
    fn every_lifecycle_entry_has_t_s_kind_and_pid() {
        let a = analyze(&loaded(vec![
            (0.0, spawn(7)),
            (
                1.0,
                Event::Restart {
                    attempt: 1,
                    backoff_s: 0.1,
                    reason: "x".into(),
                    engine_restart_count: None,
                },
            ),
        ]));
        for e in &a.lifecycle {
            assert!(e.get("t_s").is_some() && e.get("kind").is_some() && e.get("pid").is_some());
        }
        assert_eq!(a.restarts, 1);
    }
}
