//! Analysis keeps bounded state: the memory it holds does not grow with the number of requests in
//! the journal (issue 14). A counting allocator measures the peak of live heap bytes while a
//! journal of synthetic requests is analysed — 100 k and 1 M requests generated on the fly, and a
//! journal file of 110 k and 330 k requests written by witness's own writer and read back from disk.
//! No timings are asserted: only bytes.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use witness::journal::{
    ErrorKind, Event, Header, Identity, LoadSettings, Outcome, Probe, ReadState, Record,
    RecordPass, Replay, Settings, TimeoutPhase,
};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                let now = LIVE.fetch_add(new_size - layout.size(), Ordering::Relaxed) + new_size
                    - layout.size();
                PEAK.fetch_max(now, Ordering::Relaxed);
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Tests in this file measure one at a time (the counters are global).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

const LEVELS: [u32; 3] = [1, 8, 64];

/// The records of a three-level ladder with `n` requests in all: one in 50 a timeout at 2 s, one in
/// 97 a reset, the rest ok between 1 and 9 ms; the server restarts once, in the last level.
fn record(i: u64, n: u64) -> Record {
    let per_level = n / LEVELS.len() as u64;
    let level = (i / per_level).min(LEVELS.len() as u64 - 1) as u32;
    let start = 1.0 + i as f64 * 1e-4;
    let (duration, outcome) = if i % 50 == 7 {
        (
            2.0,
            Outcome::Timeout {
                phase: TimeoutPhase::Request,
                limit_s: 2.0,
            },
        )
    } else if i % 97 == 3 {
        (
            0.003,
            Outcome::Error {
                error: ErrorKind::Reset,
                status: None,
            },
        )
    } else {
        (0.001 + (i % 9) as f64 * 0.001, Outcome::Ok)
    };
    Record {
        t_s: start + duration,
        event: Event::Request {
            id: i,
            group: format!("level{level}"),
            worker: (i % LEVELS[level as usize] as u64) as u32,
            start_s: start,
            duration_s: duration,
            outcome,
            status: Some(200),
            scheduled_s: None,
            detail: None,
            body_bytes: Some(2),
            body_cut: false,
        },
        origin: None,
    }
}

fn probe() -> Probe {
    Probe {
        status: Some(200),
        error: None,
        duration_s: 0.0005,
    }
}

fn identity() -> Option<Identity> {
    Some(Identity {
        pid: 4242,
        start_time: 99,
        container_id: None,
        container_started_at: None,
        socket_inode: None,
    })
}

/// The whole synthetic run in order: settings, spawn, levels with their requests, a restart, end.
fn run(n: u64) -> impl Iterator<Item = Record> {
    let per_level = n / LEVELS.len() as u64;
    let rec = |t_s: f64, event: Event| Record {
        t_s,
        event,
        origin: None,
    };
    let head = vec![
        rec(
            0.0,
            Event::Settings(Settings {
                load: Some(LoadSettings {
                    url: "http://127.0.0.1:1/".into(),
                    method: "GET".into(),
                    levels: LEVELS.to_vec(),
                    timeout_s: 2.0,
                    factor: 1.5,
                    cliff_slack_s: 0.05,
                    ..Default::default()
                }),
                ..Default::default()
            }),
        ),
        rec(
            0.01,
            Event::Spawn {
                pid: 4242,
                start_time: 99,
                command: vec!["server".into()],
                attempt: 0,
                container_id: None,
            },
        ),
    ];
    let levels = (0..LEVELS.len() as u64).flat_map(move |l| {
        let first = l * per_level;
        let last = if l + 1 == LEVELS.len() as u64 {
            n
        } else {
            first + per_level
        };
        let t0 = 1.0 + first as f64 * 1e-4;
        let t1 = 1.0 + last as f64 * 1e-4 + 2.1;
        let start = rec(
            t0 - 0.001,
            Event::LevelStart {
                index: l as u32,
                concurrency: LEVELS[l as usize],
                health: probe(),
                identity: identity(),
                skipped: None,
            },
        );
        let end = rec(
            t1,
            Event::LevelEnd {
                index: l as u32,
                concurrency: LEVELS[l as usize],
                health: probe(),
                identity: identity(),
                stopped: None,
                not_sent: None,
            },
        );
        std::iter::once(start)
            .chain((first..last).map(move |i| record(i, n)))
            .chain(std::iter::once(end))
    });
    let end_t = 1.0 + n as f64 * 1e-4 + 3.0;
    let tail = vec![rec(
        end_t,
        Event::End {
            reason: "done".into(),
            partial: false,
            exit_code: Some(1),
        },
    )];
    head.into_iter().chain(levels).chain(tail)
}

/// A journal generated anew on every pass: nothing of it is ever held in memory.
struct Synthetic {
    header: Header,
    n: u64,
}

struct Pass<I>(I);

impl<I: Iterator<Item = Record>> Iterator for Pass<I> {
    type Item = Record;
    fn next(&mut self) -> Option<Record> {
        self.0.next()
    }
}

impl<I: Iterator<Item = Record>> RecordPass for Pass<I> {
    fn state(&self) -> ReadState {
        ReadState::default()
    }
}

impl Replay for Synthetic {
    fn header(&self) -> &Header {
        &self.header
    }
    fn pass(&self) -> Box<dyn RecordPass + '_> {
        Box::new(Pass(run(self.n)))
    }
}

/// The peak of live heap bytes above what was live before, while `f` runs; and its result.
fn peak_of<T>(f: impl FnOnce() -> T) -> (usize, T) {
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let out = f();
    (PEAK.load(Ordering::Relaxed).saturating_sub(before), out)
}

const MB: usize = 1 << 20;

/// Whatever the request count, analysis holds about the same: within 10 % (+1 MB for the
/// allocator's rounding) between the smaller journal and the larger, and far under the 50 MB bound.
fn flat(small: usize, large: usize, what: &str) {
    eprintln!(
        "{what}: peak live heap {:.1} MB for the smaller journal, {:.1} MB for the larger one",
        small as f64 / MB as f64,
        large as f64 / MB as f64
    );
    assert!(
        large <= small + small / 10 + MB,
        "{what}: analysis held {large} bytes for the larger journal against {small}: it grows with the request count"
    );
    assert!(
        large < 25 * MB,
        "{what}: analysis held {large} bytes, not well under the 50 MB bound"
    );
}

#[test]
fn analysing_a_million_requests_holds_what_a_hundred_thousand_do() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let header = Header::new("load", vec!["witness".into(), "load".into()]);
    let journal = |n| Synthetic {
        header: header.clone(),
        n,
    };
    let (small, a) = peak_of(|| witness::analyze::analyze(&journal(100_000)));
    let (large, b) = peak_of(|| witness::analyze::analyze(&journal(1_000_000)));
    // The analysis saw every request: counts are exact, not sampled.
    let total = |a: &witness::analyze::Analysis| -> u64 {
        a.load
            .as_ref()
            .expect("a load run")
            .levels
            .iter()
            .map(|l| l.counts.ok + l.counts.timeout + l.counts.error + l.counts.rejected)
            .sum()
    };
    assert_eq!(total(&a), 100_000);
    assert_eq!(total(&b), 1_000_000);
    let timeouts: u64 = b
        .load
        .as_ref()
        .unwrap()
        .levels
        .iter()
        .map(|l| l.counts.timeout)
        .sum();
    assert_eq!(
        timeouts,
        (0..1_000_000u64).filter(|i| i % 50 == 7).count() as u64
    );
    // Percentiles come from every ok request: ok durations are 1..9 ms evenly, so p50 is 5 ms.
    let p50 = b.load.as_ref().unwrap().levels[1]
        .latency
        .as_ref()
        .expect("latency")
        .p50;
    assert!((p50 - 0.005).abs() < 0.0001, "p50 {p50}");
    flat(small, large, "synthetic ladder");
}

#[test]
fn reporting_a_journal_file_streams_it_from_disk() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = std::env::temp_dir().join(format!("witness-bounded-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |n: u64| {
        let path = dir.join(format!("{n}.jsonl"));
        let _ = std::fs::remove_file(&path);
        let header = Header::new("load", vec!["witness".into(), "load".into()]);
        let j = witness::journal::Journal::create(&path, &header).expect("journal");
        for r in run(n) {
            j.emit_at(r.t_s, r.event);
        }
        j.flush().expect("flush");
        path
    };
    // Both beyond the spans the picture keeps one by one (100 k): what is left must not grow.
    let small_path = write(110_000);
    let large_path = write(330_000);
    let analyse = |p: &std::path::Path| {
        let f = witness::sources::journal::JournalFile::open(p).expect("open");
        witness::analyze::analyze(&f)
    };
    let (small, a) = peak_of(|| analyse(&small_path));
    let (large, b) = peak_of(|| analyse(&large_path));
    assert_eq!(
        a.load.as_ref().unwrap().verdict,
        b.load.as_ref().unwrap().verdict
    );
    let ok: u64 = b
        .load
        .as_ref()
        .unwrap()
        .levels
        .iter()
        .map(|l| l.counts.ok)
        .sum();
    assert_eq!(
        ok,
        (0..330_000u64)
            .filter(|i| i % 50 != 7 && i % 97 != 3)
            .count() as u64
    );
    let _ = std::fs::remove_dir_all(&dir);
    flat(small, large, "journal file");
}
