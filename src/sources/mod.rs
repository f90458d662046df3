//! Sources: other journals and foreign results (k6 JSON output) put on one clock, as one stream of
//! records that analysis reads like any journal.
//!
//! [`merge`] opens every input, reads each witness journal once ahead for the little it must know
//! before the first record goes out (settings, the server processes it supervised, how many ladder
//! levels and request ids it used), then yields records in time order by a k-way merge of the
//! inputs' heads: one record per input in memory, however long the inputs. The result is an iterator
//! (the shape a streaming analysis takes) and a [`Header`] naming every source, the shift that put it
//! on the merged clock and how far that shift can be trusted; written out, it is a journal like any
//! other and `witness report` re-renders it.
//!
//! What the merge changes, and why:
//! - `t_s`, and a request's `start_s`/`scheduled_s`, move by the source's shift (anchor difference
//!   plus any `--clock-offset`); every record carries its source as `origin`.
//! - Ladder levels and request ids are renumbered past the previous sources' so two load runs stay
//!   two sets of levels; k6 requests get ids after every journal's.
//! - A load run attached to a server that a wrap (or a supervising load) also journalled saw the same
//!   processes from outside (exit status unknown): its copies of their spawns and exits are dropped,
//!   the supervisor's (with the real exit code) kept.
//! - Each source's settings are folded into one (timers joined; the first ladder's settings), and each
//!   source's end into one end record, partial if any source was.

pub mod journal;
pub mod k6;

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use crate::journal::clock::{self, SourceInfo};
use crate::journal::{micros, Event, Header, Loaded, Record, Settings};

/// One input of a merge.
#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    pub path: PathBuf,
    pub kind: Kind,
    /// `--clock-offset FILE=±D`: seconds added to this source's clock.
    pub user_offset_s: Option<f64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Journal,
    K6,
}

/// Opens a file, gunzipping it when it starts with gzip's magic bytes (whatever its name).
pub fn open_maybe_gz(path: &Path) -> std::io::Result<Box<dyn BufRead + Send>> {
    let mut file = BufReader::with_capacity(256 * 1024, std::fs::File::open(path)?);
    let head = file.fill_buf()?;
    if head.starts_with(&[0x1f, 0x8b]) {
        let gz: Box<dyn Read + Send> = Box::new(flate2::bufread::MultiGzDecoder::new(file));
        Ok(Box::new(BufReader::with_capacity(256 * 1024, gz)))
    } else {
        Ok(Box::new(file))
    }
}

// One stream per input of a merge (a handful): the size of the larger variant costs nothing.
#[allow(clippy::large_enum_variant)]
enum Stream {
    Journal(journal::JournalStream),
    K6(k6::K6Stream),
}

impl Stream {
    fn next_record(&mut self) -> Option<Record> {
        match self {
            Stream::Journal(j) => j.next(),
            Stream::K6(k) => k.next_record(),
        }
    }
    /// Whether it ended early (cut off, or a read error), not merely with unreadable lines.
    fn ended_early(&self) -> bool {
        match self {
            Stream::Journal(j) => j.truncated.is_some() || j.error.is_some(),
            Stream::K6(k) => k.ended_early(),
        }
    }
    /// Why the input ended early or had unreadable lines, if it did.
    fn trouble(&self) -> Vec<String> {
        let (truncated, skipped, count, error) = match self {
            Stream::Journal(j) => (&j.truncated, &j.skipped, j.skipped_count, &j.error),
            Stream::K6(k) => (&k.truncated, &k.skipped, k.skipped_count, &k.error),
        };
        let mut out: Vec<String> = truncated.iter().chain(error.iter()).cloned().collect();
        if count > 0 {
            out.push(format!(
                "skipped {count} unreadable line(s): {}",
                skipped.join("; ")
            ));
        }
        out
    }
}

struct Source {
    info: SourceInfo,
    stream: Stream,
    head: Option<Record>,
    level_offset: u32,
    id_offset: u64,
    /// Server processes a supervising source journalled: (pid, start_time).
    dropped: HashSet<u32>,
    end: Option<(String, bool, Option<i32>)>,
}

/// What a look ahead over one journal learns.
#[derive(Default)]
struct Ahead {
    settings: Option<Settings>,
    spawns: Vec<(u32, u64)>,
    levels: u32,
    max_id: u64,
}

fn look_ahead(path: &Path) -> anyhow::Result<Ahead> {
    let mut a = Ahead::default();
    for r in journal::JournalStream::open(path)? {
        match r.event {
            Event::Settings(s) if a.settings.is_none() => a.settings = Some(s),
            Event::Spawn {
                pid, start_time, ..
            } => a.spawns.push((pid, start_time)),
            Event::LevelStart { index, .. } => a.levels = a.levels.max(index + 1),
            Event::Request { id, .. } => a.max_id = a.max_id.max(id),
            _ => {}
        }
    }
    Ok(a)
}

/// Whether a journal's writer supervised the server (rather than attaching to one).
fn supervises(h: &Header) -> bool {
    h.mode == "wrap" || h.command.iter().any(|a| a == "--" || a == "--image")
}

/// Several inputs as one journal on one clock: a header and a time-ordered iterator of records.
pub struct Merged {
    pub header: Header,
    sources: Vec<Source>,
    settings: Option<Settings>,
    owned: HashSet<(u32, u64)>,
    next_k6_id: u64,
    last_t: f64,
    finished: bool,
}

/// Opens every input and puts them on one clock (see the module's notes).
pub fn merge(specs: &[Spec], command: Vec<String>) -> anyhow::Result<Merged> {
    anyhow::ensure!(
        !specs.is_empty(),
        "nothing to report: give a journal, or k6 results with --k6"
    );
    let mut sources = Vec::new();
    let mut settings: Option<Settings> = None;
    let mut owned = HashSet::new();
    let (mut levels, mut ids) = (0u32, 0u64);
    let mut anchors = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        let label = spec
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| spec.path.display().to_string());
        let index = u16::try_from(i)
            .map_err(|_| anyhow::anyhow!("more than {} inputs to merge", u16::MAX))?;
        let (stream, info, clock_state, anchor) = match spec.kind {
            Kind::Journal => {
                let ahead = look_ahead(&spec.path)?;
                let j = journal::JournalStream::open(&spec.path)?;
                let h = j.header.clone();
                let sup = supervises(&h);
                if sup {
                    owned.extend(ahead.spawns.iter().copied());
                }
                let level_offset = levels;
                levels += ahead.levels;
                let id_offset = ids;
                ids += ahead.max_id;
                fold_settings(&mut settings, ahead.settings);
                let info = SourceInfo {
                    index,
                    label,
                    kind: "journal".into(),
                    mode: h.mode.clone(),
                    hostname: Some(h.hostname.clone()),
                    started_at: h.started_at.clone(),
                    supervises: sup,
                    ..SourceInfo::default()
                };
                sources.push(Source {
                    info: info.clone(),
                    stream: Stream::Journal(j),
                    head: None,
                    level_offset,
                    id_offset,
                    dropped: HashSet::new(),
                    end: None,
                });
                (None, info, h.clock.clone(), h.started_unix_s)
            }
            Kind::K6 => {
                let k = k6::K6Stream::open(&spec.path)?;
                let info = SourceInfo {
                    index,
                    label,
                    kind: "k6".into(),
                    mode: "k6".into(),
                    hostname: None,
                    started_at: k.started_at.clone(),
                    supervises: false,
                    ..SourceInfo::default()
                };
                let anchor = k.anchor_unix_s;
                (Some(Stream::K6(k)), info, None, anchor)
            }
        };
        if let Some(stream) = stream {
            sources.push(Source {
                info,
                stream,
                head: None,
                level_offset: 0,
                id_offset: 0,
                dropped: HashSet::new(),
                end: None,
            });
        }
        anchors.push((anchor + spec.user_offset_s.unwrap_or(0.0), clock_state));
    }
    let base = anchors.iter().map(|a| a.0).fold(f64::INFINITY, f64::min);
    // The reference clock: the server's (the first supervising journal), else the first journal.
    let reference = sources
        .iter()
        .position(|s| s.info.supervises)
        .or_else(|| sources.iter().position(|s| s.info.kind == "journal"))
        .unwrap_or(0);
    let ref_host = sources[reference]
        .info
        .hostname
        .clone()
        .unwrap_or_else(|| "k6's host".into());
    let ref_clock = anchors[reference].1.clone();
    for (i, (s, spec)) in sources.iter_mut().zip(specs).enumerate() {
        s.info.shift_s = micros(anchors[i].0 - base);
        s.info.user_offset_s = spec.user_offset_s;
        let rel = if i == reference {
            clock::Relation {
                clock: format!("the reference clock ({ref_host})"),
                uncertainty_s: Some(0.0),
                correlation: String::new(),
            }
        } else if s.info.kind == "k6" && spec.user_offset_s.is_none() {
            let one = format!("±{} ms", (clock::ONE_HOST_S * 1e3).round());
            clock::Relation {
                clock: format!(
                    "k6 records no host or clock state: taken as {ref_host}'s clock (agreeing within {one} if k6 ran there); if it ran elsewhere the skew is unknown: pass --clock-offset {}=±D",
                    s.info.label
                ),
                uncertainty_s: Some(clock::ONE_HOST_S),
                correlation: format!("within {one} if k6 ran on {ref_host} (k6 records no host)"),
            }
        } else {
            clock::relate(
                (&ref_host, ref_clock.as_ref()),
                (
                    s.info.hostname.as_deref().unwrap_or("k6's host"),
                    anchors[i].1.as_ref(),
                ),
                spec.user_offset_s,
            )
        };
        s.info.clock = rel.clock;
        s.info.uncertainty_s = rel.uncertainty_s;
        s.info.correlation = rel.correlation;
    }
    for s in sources.iter_mut() {
        s.head = s.stream.next_record();
    }
    let now = std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64(base.max(0.0));
    let header = Header {
        kind: "header".into(),
        witness_version: env!("CARGO_PKG_VERSION").into(),
        command,
        started_at: humantime::format_rfc3339_micros(now).to_string(),
        started_unix_s: base,
        hostname: ref_host,
        pid: std::process::id(),
        mode: "merged".into(),
        clock: ref_clock,
        sources: sources.iter().map(|s| s.info.clone()).collect(),
        cwd: None,
        uid: None,
        name: None,
    };
    Ok(Merged {
        header,
        sources,
        settings,
        owned,
        next_k6_id: ids + 1,
        last_t: 0.0,
        finished: false,
    })
}

fn fold_settings(into: &mut Option<Settings>, more: Option<Settings>) {
    let Some(more) = more else { return };
    match into {
        None => *into = Some(more),
        Some(s) => {
            for t in more.timers_s {
                if !s.timers_s.contains(&t) {
                    s.timers_s.push(t);
                }
            }
            if s.load.is_none() {
                s.load = more.load;
            }
            if s.extra.is_null() {
                s.extra = more.extra;
            }
        }
    }
}

impl Merged {
    /// Warnings about inputs that ended early or had unreadable lines (known once iteration ends).
    pub fn warnings(&self) -> Vec<String> {
        self.sources
            .iter()
            .flat_map(|s| {
                s.stream
                    .trouble()
                    .into_iter()
                    .map(move |t| format!("{}: {t}", s.info.label))
            })
            .collect()
    }

    /// Collects the merged stream into memory (tests and small inputs; analysis streams instead,
    /// through [`MergedReplay`]).
    pub fn into_loaded(mut self) -> (Loaded, Vec<String>) {
        let records: Vec<Record> = self.by_ref().collect();
        let warnings = self.warnings();
        (
            Loaded {
                header: self.header,
                records,
                truncated: None,
                skipped: vec![],
            },
            warnings,
        )
    }

    /// Writes the merged journal, record by record.
    pub fn write_to(mut self, out: &mut impl std::io::Write) -> anyhow::Result<Vec<String>> {
        serde_json::to_writer(&mut *out, &self.header)?;
        out.write_all(b"\n")?;
        let mut line = Vec::new();
        for r in self.by_ref() {
            line.clear();
            crate::journal::codec::encode(&r, &mut line)?;
            line.push(b'\n');
            out.write_all(&line)?;
        }
        out.flush()?;
        Ok(self.warnings())
    }

    /// One source's record, moved onto the merged clock; None when the merge drops it.
    fn place(&mut self, i: usize, mut r: Record) -> Option<Record> {
        let s = &mut self.sources[i];
        let shift = s.info.shift_s;
        r.t_s = micros(r.t_s + shift);
        r.origin = Some(s.info.index);
        match &mut r.event {
            Event::Settings(_) => return None,
            Event::End {
                reason,
                partial,
                exit_code,
            } => {
                s.end = Some((reason.clone(), *partial, *exit_code));
                return None;
            }
            Event::Request {
                id,
                group,
                start_s,
                scheduled_s,
                ..
            } => {
                *start_s = micros(*start_s + shift);
                if let Some(d) = scheduled_s {
                    *d = micros(*d + shift);
                }
                if s.info.kind == "k6" {
                    *id = self.next_k6_id;
                    self.next_k6_id += 1;
                } else {
                    *id += s.id_offset;
                    if s.level_offset > 0 {
                        if let Some(n) = group
                            .strip_prefix("level")
                            .and_then(|n| n.parse::<u32>().ok())
                        {
                            *group = crate::journal::group_of_level(n + s.level_offset);
                        }
                    }
                }
            }
            Event::LevelStart { index, .. }
            | Event::LevelEnd { index, .. }
            | Event::Connections { level: index, .. } => *index += s.level_offset,
            Event::Spawn {
                pid, start_time, ..
            } if !s.info.supervises && self.owned.contains(&(*pid, *start_time)) => {
                s.dropped.insert(*pid);
                return None;
            }
            Event::Exit { pid, .. } if s.dropped.remove(pid) => return None,
            _ => {}
        }
        Some(r)
    }

    /// The one end record of the merged run.
    fn end(&self) -> Record {
        let mut partial = false;
        let mut reasons = Vec::new();
        let mut exit_code = None;
        for s in &self.sources {
            let ended = match (&s.end, s.info.kind.as_str()) {
                (Some((reason, p, code)), _) => {
                    partial |= *p;
                    if s.info.supervises || exit_code.is_none() {
                        exit_code = exit_code.or(*code);
                    }
                    reason.clone()
                }
                (None, "k6") => "k6 results read to the end".into(),
                (None, _) => {
                    partial = true;
                    "no end record (witness was stopped or crashed)".into()
                }
            };
            partial |= s.stream.ended_early();
            reasons.push(format!("{}: {ended}", s.info.label));
        }
        Record {
            t_s: self.last_t,
            event: Event::End {
                reason: format!(
                    "merged {} source{} ({})",
                    self.sources.len(),
                    if self.sources.len() == 1 { "" } else { "s" },
                    reasons.join("; ")
                ),
                partial,
                exit_code,
            },
            origin: None,
        }
    }
}

impl crate::journal::RecordPass for Merged {
    fn state(&self) -> crate::journal::ReadState {
        crate::journal::ReadState {
            warnings: self.warnings(),
            ..Default::default()
        }
    }
}

/// Several inputs merged onto one clock, analysed in passes: each pass merges them again from the
/// files, so the merged run is never held in memory.
pub struct MergedReplay {
    specs: Vec<Spec>,
    command: Vec<String>,
    header: Header,
    /// The merge `open` made to check the inputs: the first pass, not merged twice.
    first: std::cell::RefCell<Option<Merged>>,
}

impl MergedReplay {
    /// Opens the inputs once to check them and learn the merged header.
    pub fn open(specs: &[Spec], command: Vec<String>) -> anyhow::Result<Self> {
        let first = merge(specs, command.clone())?;
        Ok(Self {
            specs: specs.to_vec(),
            command,
            header: first.header.clone(),
            first: std::cell::RefCell::new(Some(first)),
        })
    }
}

impl crate::journal::Replay for MergedReplay {
    fn header(&self) -> &Header {
        &self.header
    }
    fn pass(&self) -> Box<dyn crate::journal::RecordPass + '_> {
        if let Some(first) = self.first.borrow_mut().take() {
            return Box::new(first);
        }
        match merge(&self.specs, self.command.clone()) {
            Ok(m) => Box::new(m),
            Err(e) => Box::new(crate::journal::replay::Failed(format!(
                "merging the inputs again failed: {e:#}"
            ))),
        }
    }
}

impl Iterator for Merged {
    type Item = Record;

    fn next(&mut self) -> Option<Record> {
        if let Some(s) = self.settings.take() {
            return Some(Record {
                t_s: 0.0,
                event: Event::Settings(s),
                origin: None,
            });
        }
        loop {
            // The input whose next record is earliest on the merged clock (few inputs: a scan).
            let i = self
                .sources
                .iter()
                .enumerate()
                .filter_map(|(i, s)| Some((i, s.head.as_ref()?.t_s + s.info.shift_s)))
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .map(|(i, _)| i);
            let Some(i) = i else {
                if self.finished {
                    return None;
                }
                self.finished = true;
                return Some(self.end());
            };
            let r = self.sources[i].head.take().expect("chosen for its head");
            self.sources[i].head = self.sources[i].stream.next_record();
            if let Some(r) = self.place(i, r) {
                self.last_t = self.last_t.max(r.t_s);
                return Some(r);
            }
        }
    }
}

/// Which records each source contributed, for reports: counts by kind.
pub fn counts_by_origin(recs: &[Record]) -> HashMap<u16, HashMap<&'static str, u64>> {
    let mut out: HashMap<u16, HashMap<&'static str, u64>> = HashMap::new();
    for r in recs {
        if let Some(o) = r.origin {
            *out.entry(o).or_default().entry(r.event.kind()).or_default() += 1;
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::journal::{Journal, Outcome};

    pub fn tempdir() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "witness-sources-{}-{}",
            std::process::id(),
            rand::random::<u64>()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn write(path: &Path, mut header: Header, recs: &[(f64, Event)]) {
        header.pid = 1;
        let mut text = serde_json::to_string(&header).unwrap() + "\n";
        for (t, e) in recs {
            let r = Record {
                t_s: *t,
                event: e.clone(),
                origin: None,
            };
            text += &(serde_json::to_string(&r).unwrap() + "\n");
        }
        std::fs::write(path, text).unwrap();
    }

    fn header(mode: &str, command: &[&str], unix: f64) -> Header {
        let mut h = Header::new(mode, command.iter().map(|s| s.to_string()).collect());
        h.started_unix_s = unix;
        h
    }

    fn request(id: u64, group: &str, start: f64, dur: f64) -> Event {
        Event::Request {
            id,
            group: group.into(),
            worker: 0,
            start_s: start,
            duration_s: dur,
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
        }
    }

    fn spawn(pid: u32, st: u64) -> Event {
        Event::Spawn {
            pid,
            start_time: st,
            command: vec![],
            attempt: 0,
            container_id: None,
        }
    }

    fn exit(pid: u32, status: i32) -> Event {
        Event::Exit {
            pid,
            code: Some(status),
            signal: None,
            core_dumped: false,
            age_s: 1.0,
            status,
            requested: false,
            meaning: String::new(),
            oom_killed: None,
        }
    }

    fn end() -> Event {
        Event::End {
            reason: "done".into(),
            partial: false,
            exit_code: Some(0),
        }
    }

    fn level(index: u32) -> Event {
        Event::LevelStart {
            index,
            concurrency: 1,
            health: crate::journal::Probe {
                status: Some(200),
                error: None,
                duration_s: 0.0,
                connected: false,
            },
            identity: None,
            skipped: None,
        }
    }

    #[test]
    fn two_journals_go_on_one_clock_in_time_order_with_levels_and_ids_kept_apart() {
        let d = tempdir();
        let (w, a, b) = (d.join("w.jsonl"), d.join("a.jsonl"), d.join("b.jsonl"));
        write(
            &w,
            header("wrap", &["witness", "wrap", "--", "srv"], 1000.0),
            &[(0.0, spawn(7, 70)), (3.0, exit(7, 124)), (3.1, end())],
        );
        // Attached 0.5 s later: its own view of pid 7 duplicates the wrap's and is dropped.
        write(
            &a,
            header("load", &["witness", "load", "--url", "u"], 1000.5),
            &[
                (-0.5, spawn(7, 70)),
                (0.1, level(0)),
                (0.3, request(1, "level0", 0.1, 0.2)),
                (2.6, exit(7, -1)),
                (2.7, end()),
            ],
        );
        write(
            &b,
            header("load", &["witness", "load", "--url", "u"], 1001.0),
            &[
                (0.1, level(0)),
                (0.2, request(1, "level0", 0.1, 0.1)),
                (0.5, end()),
            ],
        );
        let specs: Vec<Spec> = [&w, &a, &b]
            .iter()
            .map(|p| Spec {
                path: p.to_path_buf(),
                kind: Kind::Journal,
                user_offset_s: None,
            })
            .collect();
        let m = merge(&specs, vec!["witness".into()]).unwrap();
        assert_eq!(m.header.sources.len(), 3);
        assert_eq!(m.header.sources[1].shift_s, 0.5);
        assert!(m.header.sources[1].correlation.contains("on one host"));
        let (loaded, warnings) = m.into_loaded();
        assert!(warnings.is_empty(), "{warnings:?}");
        let ts: Vec<f64> = loaded.records.iter().skip(1).map(|r| r.t_s).collect();
        assert!(ts.windows(2).all(|w| w[0] <= w[1]), "time order: {ts:?}");
        let spawns = loaded
            .records
            .iter()
            .filter(|r| matches!(r.event, Event::Spawn { .. }))
            .count();
        let exits: Vec<_> = loaded
            .records
            .iter()
            .filter_map(|r| match r.event {
                Event::Exit { status, .. } => Some(status),
                _ => None,
            })
            .collect();
        assert_eq!(
            (spawns, exits),
            (1, vec![124]),
            "the supervisor's view only"
        );
        let reqs: Vec<(u64, String, f64, Option<u16>)> = loaded
            .records
            .iter()
            .filter_map(|r| match &r.event {
                Event::Request {
                    id, group, start_s, ..
                } => Some((*id, group.clone(), *start_s, r.origin)),
                _ => None,
            })
            .collect();
        assert_eq!(
            reqs,
            vec![
                (1, "level0".into(), 0.6, Some(1)),
                (2, "level1".into(), 1.1, Some(2))
            ]
        );
        let Event::End { partial, .. } = &loaded.records.last().unwrap().event else {
            panic!("ends with the merged end")
        };
        assert!(!partial);
        assert_eq!(
            loaded
                .records
                .iter()
                .filter(|r| matches!(r.event, Event::Settings(_) | Event::End { .. }))
                .count(),
            1,
            "one end; no settings were recorded"
        );
    }

    #[test]
    fn a_wrap_journal_s_observed_calls_stay_their_own_source_in_a_merge_with_a_load_run() {
        let d = tempdir();
        let (w, a) = (d.join("w.jsonl"), d.join("a.jsonl"));
        let mut closed = request(2, "stdio tools/call slow", 1.0, 1.99);
        if let Event::Request {
            outcome, status, ..
        } = &mut closed
        {
            *outcome = Outcome::Error {
                error: crate::journal::ErrorKind::Closed,
                status: None,
            };
            *status = None;
        }
        write(
            &w,
            header("wrap", &["witness", "wrap", "--", "srv"], 1000.0),
            &[
                (0.0, spawn(7, 70)),
                (0.5, request(1, "stdio tools/call slow", 0.1, 0.4)),
                (2.99, closed),
                (3.0, exit(7, 124)),
                (3.1, end()),
            ],
        );
        // A load run beside it, whose level's requests are not the client's calls.
        write(
            &a,
            header("load", &["witness", "load", "--url", "u"], 1000.0),
            &[
                (
                    0.0,
                    crate::journal::Event::Settings(crate::journal::Settings {
                        load: Some(crate::journal::LoadSettings {
                            levels: vec![1],
                            factor: 1.5,
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                ),
                (0.1, level(0)),
                (0.3, request(1, "level0", 0.1, 0.2)),
                (2.7, end()),
            ],
        );
        let specs: Vec<Spec> = [&w, &a]
            .iter()
            .map(|p| Spec {
                path: p.to_path_buf(),
                kind: Kind::Journal,
                user_offset_s: None,
            })
            .collect();
        let replay = MergedReplay::open(&specs, vec!["witness".into()]).unwrap();
        let an = crate::analyze::analyze(&replay);
        let o = an.observed.as_ref().expect("the wrap source's calls");
        assert_eq!(o.calls.len(), 1, "{:?}", o.calls);
        let row = &o.calls[0];
        assert_eq!(row.source.as_deref(), Some("w.jsonl"));
        assert_eq!((row.calls, row.counts.ok, row.counts.error), (2, 1, 1));
        assert!(row.failures[0]
            .annotation
            .starts_with("server pid 7 exited with 124"));
        let load = an.load.as_ref().expect("the load source's ladder");
        assert_eq!(
            load.levels[0].counts.ok, 1,
            "the level counts its own request only"
        );
        let m = an.merged.as_ref().unwrap();
        let shapes: Vec<(&str, &str, &str)> = m
            .groups
            .iter()
            .map(|g| (g.source.as_str(), g.group.as_str(), g.shape.as_str()))
            .collect();
        assert!(
            shapes.contains(&(
                "w.jsonl",
                "stdio tools/call slow",
                "calls seen by wrap (stdio)"
            )),
            "{shapes:?}"
        );
        assert!(
            m.structure[0].starts_with("w.jsonl: 2 calls a client made through wrap"),
            "{:?}",
            m.structure
        );
        // The terminal tables them once, under their own heading, not again as a load group.
        let text = String::from_utf8(
            crate::report::View::render(&crate::report::terminal::Terminal::default(), &an)
                .unwrap(),
        )
        .unwrap();
        assert!(
            text.contains("calls seen by wrap (stdio) in w.jsonl, per method or tool"),
            "{text}"
        );
        assert!(!text.contains("w.jsonl stdio tools/call slow"), "{text}");
        assert!(
            text.contains("level0"),
            "the load's group still listed: {text}"
        );
        // Two lanes: the level's, and the calls', named as such.
        let lanes: Vec<(&str, bool)> = an
            .picture
            .groups
            .iter()
            .map(|g| (g.name.as_str(), g.observed.is_some()))
            .collect();
        assert_eq!(lanes.len(), 2, "{lanes:?}");
        assert!(
            lanes.contains(&("level0", false)) && lanes.contains(&("stdio tools/call slow", true))
        );
    }

    #[test]
    fn a_clock_offset_moves_one_source_and_is_named() {
        let d = tempdir();
        let (w, a) = (d.join("w.jsonl"), d.join("a.jsonl"));
        write(
            &w,
            header("wrap", &["witness", "wrap", "--", "s"], 1000.0),
            &[(1.0, spawn(1, 1))],
        );
        write(
            &a,
            header("load", &["witness", "load"], 1000.0),
            &[(1.0, request(1, "x", 0.5, 0.5))],
        );
        let specs = vec![
            Spec {
                path: w,
                kind: Kind::Journal,
                user_offset_s: None,
            },
            Spec {
                path: a,
                kind: Kind::Journal,
                user_offset_s: Some(2.0),
            },
        ];
        let (l, _) = merge(&specs, vec![]).unwrap().into_loaded();
        let r = l
            .records
            .iter()
            .find(|r| matches!(r.event, Event::Request { .. }))
            .unwrap();
        assert_eq!(r.t_s, 3.0);
        assert!(l.header.sources[1]
            .correlation
            .contains("--clock-offset +2s"));
        // A journal without an end is partial in the merge too.
        let Event::End { partial, .. } = l.records.last().unwrap().event else {
            panic!()
        };
        assert!(partial);
    }

    fn k6_file(path: &Path, times: &[(&str, f64)]) {
        let tags = r#"{"expected_response":"true","method":"GET","name":"http://127.0.0.1:1/call","scenario":"default","status":"200"}"#;
        let text: String = times
            .iter()
            .map(|(t, ms)| {
                format!(
                    r#"{{"metric":"http_req_duration","type":"Point","data":{{"time":"{t}","value":{ms},"tags":{tags}}}}}"#
                ) + "\n"
            })
            .collect();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn several_k6_outputs_merge_in_time_order_with_ids_of_their_own() {
        let d = tempdir();
        let (a, b) = (d.join("k6-a.json"), d.join("k6-b.json"));
        k6_file(
            &a,
            &[
                ("2026-12-01T10:00:01Z", 100.0),
                ("2026-12-01T10:00:03Z", 100.0),
            ],
        );
        k6_file(&b, &[("2026-12-01T10:00:02Z", 100.0)]);
        let specs: Vec<Spec> = [a, b]
            .into_iter()
            .map(|path| Spec {
                path,
                kind: Kind::K6,
                user_offset_s: None,
            })
            .collect();
        let (l, _) = merge(&specs, vec![]).unwrap().into_loaded();
        let reqs: Vec<(f64, u64, Option<u16>)> = l
            .records
            .iter()
            .filter_map(|r| match r.event {
                Event::Request { id, .. } => Some((r.t_s, id, r.origin)),
                _ => None,
            })
            .collect();
        assert_eq!(
            reqs,
            vec![(0.1, 1, Some(0)), (1.1, 2, Some(1)), (2.1, 3, Some(0))]
        );
        assert_eq!(l.header.sources[1].shift_s, 1.0);
        assert!(!l.is_partial(), "k6 results read to the end are complete");
    }

    #[test]
    fn clock_offsets_parse_with_a_sign_or_say_how() {
        assert_eq!(
            crate::units::parse_clock_offset("r.json=+1.5s").unwrap(),
            (PathBuf::from("r.json"), 1.5)
        );
        assert_eq!(
            crate::units::parse_clock_offset("a=b.jsonl=-250ms")
                .unwrap()
                .1,
            -0.25
        );
        assert!(crate::units::parse_clock_offset("r.json")
            .unwrap_err()
            .contains("FILE=±DURATION"));
        assert!(crate::units::parse_clock_offset("r.json=1s")
            .unwrap_err()
            .contains("needs a sign"));
        assert!(crate::units::parse_clock_offset("r.json=+soon").is_err());
    }

    #[test]
    fn a_merged_journal_written_out_reads_back_as_a_journal() {
        let d = tempdir();
        let w = d.join("w.jsonl");
        let j = Journal::create(
            &w,
            &Header::new("wrap", vec!["witness".into(), "wrap".into()]),
        )
        .unwrap();
        j.emit(spawn(3, 30));
        j.emit(end());
        j.flush().unwrap();
        let spec = [Spec {
            path: w,
            kind: Kind::Journal,
            user_offset_s: None,
        }];
        let mut out = Vec::new();
        merge(&spec, vec![]).unwrap().write_to(&mut out).unwrap();
        let back = crate::journal::read_from(out.as_slice()).unwrap();
        assert_eq!(back.header.mode, "merged");
        assert_eq!(back.header.sources.len(), 1);
        assert!(back
            .records
            .iter()
            .all(|r| r.origin.is_some() || matches!(r.event, Event::End { .. })));
        assert!(!back.is_partial());
    }
}
