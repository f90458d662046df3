//! `fuzz`: a bounded, dependency-free mutation fuzzer for the three readers of untrusted input —
//! the journal reader (and everything `witness report` does with what it reads: analysis and every
//! view), the soak plan parser/resolver, and the server log-line reader (line splitting, the
//! pattern labels, timer extraction, secret masking at the cut). Run through `scripts/fuzz.sh`; not
//! part of CI, since its worth is in running long.
//!
//! usage: fuzz --seconds N [--seed S] [--out DIR] SEED_FILE…
//!
//! Seed files ending in `.jsonl` feed the journal target, `.toml` the plan target; every seed also
//! feeds the log-line target. Each input is mutated (byte flips, splices, extreme numbers, and for
//! journals a JSON-aware leaf rewrite), run under `catch_unwind`, and a panicking input is written to
//! `DIR/crash-TARGET-N` with its panic message. Exits 1 if anything panicked.

use std::io::Cursor;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

const EXTREMES: &[&str] = &[
    "0",
    "-1",
    "-0.0",
    "1e308",
    "-1e308",
    "1e-320",
    "18446744073709551616",
    "4294967296",
    "9007199254740993",
    "99999999999999999999999",
    "null",
    "true",
    "\"\"",
    "[]",
    "{}",
    "\"720h\"",
    "\"-1s\"",
    "\"1y\"",
    "\"99999999999999999999s\"",
    "\"\\u0000\"",
    "\"\\ud800\"",
    "fuzz-secret-value",
    "fuzz-secret-",
    "-value",
];

fn mutate_bytes(rng: &mut Rng, input: &[u8], corpus: &[Vec<u8>]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = v.len();
        match rng.below(8) {
            0 if len > 0 => {
                let i = rng.below(len);
                v[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                v[i] = b"\"{}[]:,\n\\-.0123456789eE \t\r\xff\x00"[rng.below(25)];
            }
            2 if len > 0 => {
                let a = rng.below(len);
                let b = (a + rng.below(64)).min(len);
                v.drain(a..b);
            }
            3 => {
                let at = rng.below(len + 1);
                let e = EXTREMES[rng.below(EXTREMES.len())].as_bytes();
                v.splice(at..at, e.iter().copied());
            }
            4 if len > 0 => {
                // Duplicate a chunk somewhere else (repeated lines, nested values).
                let a = rng.below(len);
                let b = (a + 1 + rng.below(256)).min(len);
                let chunk = v[a..b].to_vec();
                let at = rng.below(v.len() + 1);
                v.splice(at..at, chunk);
            }
            5 if !corpus.is_empty() => {
                // Splice with another seed.
                let other = &corpus[rng.below(corpus.len())];
                if !other.is_empty() {
                    let a = rng.below(other.len());
                    let b = (a + rng.below(512)).min(other.len());
                    let at = rng.below(v.len() + 1);
                    v.splice(at..at, other[a..b].iter().copied());
                }
            }
            6 if len > 0 => v.truncate(rng.below(len)),
            _ => {
                // Replace a run of digits with an extreme number.
                if let Some(start) = (0..8)
                    .map(|_| rng.below(len.max(1)))
                    .find(|&i| v.get(i).is_some_and(u8::is_ascii_digit))
                {
                    let mut end = start;
                    while end < v.len() && (v[end].is_ascii_digit() || v[end] == b'.') {
                        end += 1;
                    }
                    let e = EXTREMES[rng.below(8)].as_bytes();
                    v.splice(start..end, e.iter().copied());
                }
            }
        }
    }
    v
}

/// Rewrites one leaf of one JSON line to an extreme or wrongly typed value: the reader must take
/// any well-formed line that its types accept, and the analysis must not panic on what it takes.
fn mutate_journal(rng: &mut Rng, input: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(input);
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    if lines.len() < 2 {
        return input.to_vec();
    }
    for _ in 0..1 + rng.below(3) {
        let i = 1 + rng.below(lines.len() - 1);
        let Ok(mut v) = serde_json::from_str::<serde_json::Value>(&lines[i]) else {
            continue;
        };
        let leaves = leaf_paths(&v);
        if leaves.is_empty() {
            continue;
        }
        let path = &leaves[rng.below(leaves.len())];
        if path.last().map(String::as_str) == Some("kind") {
            continue; // an unknown kind is a skipped line; keep the events typed
        }
        let new: serde_json::Value = match rng.below(10) {
            0 => serde_json::json!(-1.0),
            1 => serde_json::json!(1e300),
            2 => serde_json::json!(-1e300),
            3 => serde_json::json!(u64::MAX),
            4 => serde_json::json!(0),
            5 => serde_json::json!(""),
            6 => serde_json::json!(i64::MIN),
            7 => serde_json::json!(4_294_967_295u64),
            8 => serde_json::json!(1e-310),
            _ => serde_json::json!("x".repeat(rng.below(70_000))),
        };
        set_path(&mut v, path, new);
        lines[i] = v.to_string();
    }
    // Sometimes reorder lines: events out of time order.
    if rng.below(4) == 0 && lines.len() > 3 {
        let a = 1 + rng.below(lines.len() - 1);
        let b = 1 + rng.below(lines.len() - 1);
        lines.swap(a, b);
    }
    let mut out = lines.join("\n").into_bytes();
    out.push(b'\n');
    out
}

fn leaf_paths(v: &serde_json::Value) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    fn walk(v: &serde_json::Value, path: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, x) in m {
                    path.push(k.clone());
                    walk(x, path, out);
                    path.pop();
                }
            }
            serde_json::Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    path.push(i.to_string());
                    walk(x, path, out);
                    path.pop();
                }
            }
            _ => out.push(path.clone()),
        }
    }
    walk(v, &mut Vec::new(), &mut out);
    out
}

fn set_path(v: &mut serde_json::Value, path: &[String], new: serde_json::Value) {
    let mut cur = v;
    for p in path {
        cur = match cur {
            serde_json::Value::Object(m) => m.get_mut(p).unwrap(),
            serde_json::Value::Array(a) => &mut a[p.parse::<usize>().unwrap()],
            _ => return,
        };
    }
    *cur = new;
}

/// The journal target: read it, analyse it, render every view (what `witness report` does).
fn journal_target(input: &[u8]) {
    use witness::report::View;
    let Ok(loaded) = witness::journal::read_from(Cursor::new(input)) else {
        return;
    };
    let a = witness::analyze::analyze(&loaded);
    let views: [&dyn View; 4] = [
        &witness::report::terminal::Terminal {
            colour: false,
            ..Default::default()
        },
        &witness::report::json::Json,
        &witness::report::html::Html,
        &witness::report::trace::Trace,
    ];
    for v in views {
        let _ = v.render(&a);
    }
}

struct NoSecrets;
impl witness::soak::plan::SecretSource for NoSecrets {
    fn env(&self, _: &str) -> Option<String> {
        Some("fuzz-secret-value".into())
    }
    fn file(&self, _: &Path) -> std::io::Result<String> {
        Ok("fuzz-secret-file".into())
    }
}

/// The plan target: parse and resolve, then what the soak does first with a plan (its summary).
fn plan_target(input: &[u8]) {
    let Ok(src) = std::str::from_utf8(input) else {
        return;
    };
    let file = Path::new("fuzz.toml");
    let Ok(p) = witness::soak::plan::parse(src, file) else {
        return;
    };
    let o = witness::soak::plan::Overrides::default();
    if let Ok(plan) = witness::soak::plan::resolve(p, src, file, &o, &NoSecrets) {
        let _ = witness::soak::plan::summary(&plan);
        let _ = plan.workers();
    }
}

/// The log-line target: split in random chunks, label each line, find timers, mask and cut.
fn log_target(rng_seed: u64, input: &[u8]) {
    use witness::server::logs::{LineSplitter, Patterns, MAX_LINE};
    thread_local! {
        static PATTERNS: Patterns = Patterns::new(&[
            "fatal=(?i)data corruption".to_string(),
            "lease lost".to_string(),
        ])
        .unwrap();
    }
    let mut rng = Rng(rng_seed | 1);
    let secrets = vec![b"fuzz-secret-value".to_vec(), b"tok".to_vec()];
    let mut splitter = LineSplitter::with_limit(MAX_LINE + 64);
    let mut on_line = |l: &[u8], _t: bool, _c: bool| {
        let (kept, _) = witness::secrets::scrub_and_cut(l, MAX_LINE, &secrets);
        // A property, not just "no panic": no kept line holds a secret.
        assert!(
            memchr::memmem::find(&kept, &secrets[0]).is_none(),
            "a secret survived scrub_and_cut"
        );
        PATTERNS.with(|p| {
            let _ = p.label_bytes(&kept);
            let _ = p.timer_in(&String::from_utf8_lossy(&kept));
            let mut scratch = Vec::new();
            let _ = p.may_match(&kept, &mut scratch);
        });
    };
    // The pass-through scrubber, fed the same chunks: the whole output never holds a secret.
    let mut stream = witness::secrets::StreamScrubber::new(&["fuzz-secret-value".to_string()]);
    let mut passed = Vec::new();
    let mut rest = input;
    while !rest.is_empty() {
        let n = 1 + rng.below(rest.len().min(4096));
        splitter.push(&rest[..n], &mut on_line);
        passed.extend(stream.push(&rest[..n]));
        rest = &rest[n..];
    }
    splitter.finish(&mut on_line);
    passed.extend(stream.finish());
    assert!(
        memchr::memmem::find(&passed, b"fuzz-secret-value").is_none(),
        "a secret survived the stream scrubber"
    );
}

fn main() {
    let mut seconds = 60u64;
    let mut seed = 0x5eed_u64;
    let mut out = PathBuf::from("target/fuzz");
    let mut files = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seconds" => seconds = args.next().and_then(|v| v.parse().ok()).unwrap_or(60),
            "--seed" => seed = args.next().and_then(|v| v.parse().ok()).unwrap_or(seed),
            "--out" => out = args.next().map(PathBuf::from).unwrap_or(out),
            f => files.push(PathBuf::from(f)),
        }
    }
    let read = |ext: &str| -> Vec<Vec<u8>> {
        files
            .iter()
            .filter(|f| f.extension().is_some_and(|e| e == ext))
            .filter_map(|f| std::fs::read(f).ok())
            .collect()
    };
    let journals = read("jsonl");
    let plans = read("toml");
    let all: Vec<Vec<u8>> = journals.iter().chain(plans.iter()).cloned().collect();
    if journals.is_empty() || plans.is_empty() {
        eprintln!("fuzz: give at least one .jsonl and one .toml seed");
        std::process::exit(2);
    }
    std::fs::create_dir_all(&out).unwrap();
    // Panics are caught and counted; the hook keeps the message for the crash file.
    let last_panic: Arc<Mutex<String>> = Arc::default();
    {
        let last = last_panic.clone();
        std::panic::set_hook(Box::new(move |info| {
            let loc = info
                .location()
                .map(|l| format!("{}:{}", l.file(), l.line()))
                .unwrap_or_default();
            *last.lock().unwrap() = format!("{info} at {loc}");
        }));
    }
    let mut rng = Rng(seed | 1);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut runs = [0u64; 3];
    let mut crashes: Vec<(String, String)> = Vec::new();
    let names = ["journal", "plan", "log"];
    while Instant::now() < deadline {
        let target = rng.below(3);
        let input = match target {
            0 => {
                let s = &journals[rng.below(journals.len())];
                if rng.below(2) == 0 {
                    mutate_journal(&mut rng, s)
                } else {
                    mutate_bytes(&mut rng, s, &all)
                }
            }
            1 => {
                let i = rng.below(plans.len());
                mutate_bytes(&mut rng, &plans[i], &all)
            }
            _ => {
                let i = rng.below(all.len());
                mutate_bytes(&mut rng, &all[i], &all)
            }
        };
        let log_seed = rng.next();
        let r = catch_unwind(AssertUnwindSafe(|| match target {
            0 => journal_target(&input),
            1 => plan_target(&input),
            _ => log_target(log_seed, &input),
        }));
        runs[target] += 1;
        if r.is_err() {
            let msg = last_panic.lock().unwrap().clone();
            // One file per distinct panic site.
            if !crashes.iter().any(|(t, m)| t == names[target] && *m == msg) {
                let path = out.join(format!("crash-{}-{}", names[target], crashes.len()));
                std::fs::write(&path, &input).unwrap();
                std::fs::write(path.with_extension("txt"), &msg).unwrap();
                eprintln!(
                    "fuzz: {} panicked: {msg} (input: {})",
                    names[target],
                    path.display()
                );
                crashes.push((names[target].to_string(), msg));
            }
        }
    }
    println!(
        "fuzz: {seconds}s, seed {seed}: journal {} runs, plan {} runs, log {} runs; {} distinct panic(s)",
        runs[0],
        runs[1],
        runs[2],
        crashes.len()
    );
    if !crashes.is_empty() {
        std::process::exit(1);
    }
}
