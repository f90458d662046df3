//! Tailing the server's output: pass every byte through unchanged, read every line with a timestamp,
//! and journal the lines that match a watch pattern (watchdog, timeout, panic, OOM, kill, exit, or the
//! user's own `--watch`).
//!
//! The child must never be slowed by witness, so each stream is drained by its own thread, from a
//! pipe widened to [`PIPE_BYTES`] in reads of up to [`READ_BYTES`]; a line is kept for matching up to
//! [`MAX_LINE`] bytes and the rest of a longer line is counted and dropped (the pass-through still
//! gets every byte). Most of a busy server's output matches nothing, so a read is searched once for
//! what every pattern needs (a prefilter) and only the lines around its hits are split out and
//! matched. Invalid UTF-8 is kept lossily, and a last line with no newline is still matched. A
//! container's output arrives as frames of the engine's log stream instead of pipe reads;
//! [`LineSink`] serves both the same way.
//!
//! A structured line (a JSON object, logfmt) is read by [`crate::journal::logline`], the parser the
//! views share: the user's patterns match the raw line, the built-in ones only its message and
//! error, and a duration field is its timer where those words say a timer fired. The raw line is
//! what is journalled.

use std::io::{Read, Write};
use std::sync::Arc;

use regex::bytes::RegexSet;
use regex::Regex;

use crate::journal::{Event, Journal, Stream};

/// The most of one line kept for matching and journalling.
pub const MAX_LINE: usize = 16 * 1024;

/// Built-in watch patterns: (label, case-insensitive regex). The first that matches names the line.
pub const BUILTIN: &[(&str, &str)] = &[
    ("watchdog", r"watchdog|force[- ]?exit"),
    (
        "timeout",
        r"timed out|deadline exceeded|worker timeout|\btimeouts?\b",
    ),
    // A Python traceback is not a crash of the process: often a request's error, logged and served.
    ("traceback", r"traceback \(most recent call last\)"),
    (
        "panic",
        r"panicked at|\bpanic:|fatal error|segmentation fault|\bsigsegv\b|uncaught exception",
    ),
    (
        "oom",
        r"out of memory|\boom\b|oom-kill|cannot allocate memory|memory allocation of \d+ bytes failed|outofmemoryerror",
    ),
    (
        "killed",
        r"\bkilled\b|terminated by signal|received signal|\bsigkill\b|\bsigterm\b",
    ),
    (
        "exit",
        r"\bexit(ing|ed)?\b.*\b(code|status)\b|\bexiting\b|shutting down",
    ),
];

/// Lowercase substrings of which every built-in pattern needs one: the prefilter for whole reads.
/// `builtin_patterns_need_a_needle` keeps the two lists honest.
pub const NEEDLES: &[&str] = &[
    "watchdog",
    "force",
    "timed out",
    "deadline exceeded",
    "timeout",
    "panic",
    "traceback",
    "fatal error",
    "segmentation fault",
    "sigsegv",
    "uncaught exception",
    "out of memory",
    "oom",
    "cannot allocate memory",
    "memory allocation of",
    "outofmemoryerror",
    "killed",
    "terminated by signal",
    "received signal",
    "sigkill",
    "sigterm",
    "exit",
    "shutting down",
];

/// Lines of output that match no pattern, kept per stream in all: what a failure or an exit quotes
/// as the server's words at its instant ([`Event::Output`]). A server that writes a line per request
/// spends its budget at once; the journal and memory stay bounded whatever it writes.
pub const OUTPUT_KEPT: u64 = 2000;

/// How unmatched lines are let through: only lines in an error's words ("error", "failed",
/// "exception" …), a burst, then a few a second, at most [`OUTPUT_KEPT`] in all. A server's everyday
/// lines (an access log) are not journalled: the journal and the analysis's context stay the same size
/// whatever the request count; an exit's own last line is kept apart, from the output's tail.
#[derive(Debug)]
struct OutputBudget {
    errors: Bucket,
    kept: u64,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    burst: f64,
    per_s: f64,
    at: std::time::Instant,
}

impl Bucket {
    fn new(burst: f64, per_s: f64) -> Self {
        Self {
            tokens: burst,
            burst,
            per_s,
            at: std::time::Instant::now(),
        }
    }

    fn refill(&mut self) {
        let now = std::time::Instant::now();
        let dt = now.duration_since(self.at).as_secs_f64();
        self.at = now;
        self.tokens = (self.tokens + dt * self.per_s).min(self.burst);
    }

    fn any(&mut self) -> bool {
        self.refill();
        self.tokens >= 1.0
    }

    fn take(&mut self) -> bool {
        self.refill();
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

impl OutputBudget {
    fn new() -> Self {
        Self {
            errors: Bucket::new(100.0, 10.0),
            kept: 0,
        }
    }

    /// Whether any line of the next read may be kept at all (the cheap check before splitting).
    fn open(&mut self) -> bool {
        self.kept < OUTPUT_KEPT && self.errors.any()
    }

    fn take(&mut self, line: &[u8]) -> bool {
        if self.kept >= OUTPUT_KEPT || !says_error(line) {
            return false;
        }
        let ok = self.errors.take();
        self.kept += ok as u64;
        ok
    }
}

/// A line in an error's words: what a failure's instant most likely quotes.
fn says_error(line: &[u8]) -> bool {
    static WORDS: std::sync::LazyLock<aho_corasick::AhoCorasick> = std::sync::LazyLock::new(|| {
        aho_corasick::AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .build([
                "error",
                "fail",
                "exception",
                "critical",
                "fatal",
                "refused",
                "denied",
            ])
            .expect("plain words")
    });
    WORDS.is_match(line)
}

/// Compiled watch patterns.
#[derive(Debug)]
pub struct Patterns {
    labels: Vec<String>,
    set: Compiled<RegexSet>,
    /// Most reads of a busy server's output match nothing, and then no line in them needs a look of
    /// its own. The built-in patterns each need one of [`NEEDLES`], found with a SIMD multi-substring
    /// search over the lowercased read; the user's patterns, if any, run once over the whole read.
    needles: Compiled<aho_corasick::AhoCorasick>,
    user_chunk: Option<regex_automata::meta::Regex>,
    /// How many of `labels` (the first ones) are the user's `--watch` patterns.
    user: usize,
}

/// A searcher the user's patterns are part of (compiled up front, so a bad one is refused before
/// anything runs), or the built-ins' alone: compiled on first use and shared by the process. The
/// built-ins take milliseconds to compile, which `wrap -- true` would otherwise spend before its
/// child starts, for a server whose output may never hold a candidate line.
#[derive(Debug)]
enum Compiled<T: 'static> {
    Own(T),
    Builtin(&'static std::sync::LazyLock<T>),
}

impl<T> std::ops::Deref for Compiled<T> {
    type Target = T;
    fn deref(&self) -> &T {
        match self {
            Compiled::Own(t) => t,
            Compiled::Builtin(lazy) => lazy,
        }
    }
}

/// The built-in patterns' set, case-insensitive, in [`BUILTIN`]'s order.
static BUILTIN_SET: std::sync::LazyLock<RegexSet> = std::sync::LazyLock::new(|| {
    RegexSet::new(BUILTIN.iter().map(|(_, re)| format!("(?i){re}")))
        .expect("the built-in patterns compile (every test of Patterns builds them)")
});

/// [`NEEDLES`] alone.
static BUILTIN_NEEDLES: std::sync::LazyLock<aho_corasick::AhoCorasick> =
    std::sync::LazyLock::new(|| needle_searcher(NEEDLES.iter().map(|n| n.as_bytes().to_vec())));

/// Leftmost semantics: only then may the SIMD (Teddy) searcher serve as the prefilter.
fn needle_searcher(needles: impl IntoIterator<Item = Vec<u8>>) -> aho_corasick::AhoCorasick {
    aho_corasick::AhoCorasick::builder()
        .match_kind(aho_corasick::MatchKind::LeftmostFirst)
        .build(needles)
        .expect("the needles are plain strings")
}

pub use crate::error::BadPattern;

impl Patterns {
    /// Built-ins plus the user's `--watch` values (`REGEX` or `LABEL=REGEX`). User patterns come first,
    /// so a user's label wins over a built-in one for the same line.
    pub fn new(user: &[String]) -> Result<Self, BadPattern> {
        let mut labels = Vec::new();
        let mut sources = Vec::new();
        for given in user {
            let (label, re) = match given.split_once('=') {
                Some((l, r))
                    if !l.is_empty()
                        && l.chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') =>
                {
                    (l.to_string(), r.to_string())
                }
                _ => ("watch".to_string(), given.clone()),
            };
            Regex::new(&re).map_err(|e| BadPattern {
                given: given.clone(),
                why: e
                    .to_string()
                    .lines()
                    .last()
                    .unwrap_or("")
                    .trim()
                    .to_string(),
            })?;
            labels.push(label);
            sources.push(re);
        }
        labels.extend(BUILTIN.iter().map(|(label, _)| label.to_string()));
        if user.is_empty() {
            return Ok(Self {
                labels,
                set: Compiled::Builtin(&BUILTIN_SET),
                needles: Compiled::Builtin(&BUILTIN_NEEDLES),
                user_chunk: None,
                user: 0,
            });
        }
        sources.extend(BUILTIN.iter().map(|(_, re)| format!("(?i){re}")));
        let set = RegexSet::new(&sources).map_err(|e| BadPattern {
            given: user.join(" "),
            why: e.to_string(),
        })?;
        // A user pattern whose matches all begin with one of a few literals joins the needles,
        // folded like them (a literal in the text is its fold in the folded text): one search of
        // the read serves it. The rest run once over the read as one regex.
        let mut needles: Vec<Vec<u8>> = NEEDLES.iter().map(|n| n.as_bytes().to_vec()).collect();
        let mut rest = Vec::new();
        for s in &sources[..user.len()] {
            match folded_prefixes(s) {
                Some(lits) if needles.len() + lits.len() <= MAX_NEEDLES => needles.extend(lits),
                _ => rest.push(format!("(?m){s}")),
            }
        }
        let user_chunk = if rest.is_empty() {
            None
        } else {
            Some(
                regex_automata::meta::Regex::builder()
                    .build_many(&rest)
                    .map_err(|e| BadPattern {
                        given: user.join(" "),
                        why: e.to_string(),
                    })?,
            )
        };
        Ok(Self {
            labels,
            set: Compiled::Own(set),
            needles: Compiled::Own(needle_searcher(needles)),
            user_chunk,
            user: user.len(),
        })
    }

    /// The label of the first pattern the line matches.
    pub fn label(&self, line: &str) -> Option<&str> {
        self.label_bytes(line.as_bytes())
    }

    pub fn label_bytes(&self, line: &[u8]) -> Option<&str> {
        self.set
            .matches(line)
            .iter()
            .map(|i| self.labels[i].as_str())
            // "Perhaps out of memory?" is a guess (gunicorn's, after any SIGKILL), not an OOM.
            .find(|l| *l != "oom" || !only_a_guess_at_oom(line))
    }

    /// The label of a structured line (JSON, logfmt): the user's patterns match the raw line, as
    /// they always do; the built-in ones only the words it says (its message and error), so a
    /// field's name (`"signal":"SIGTERM"` in an info line) labels nothing.
    pub fn label_structured(&self, raw: &[u8], words: &str) -> Option<&str> {
        if let Some(i) = self.set.matches(raw).iter().find(|i| *i < self.user) {
            return Some(self.labels[i].as_str());
        }
        let w = words.as_bytes();
        self.set
            .matches(w)
            .iter()
            .filter(|i| *i >= self.user)
            .map(|i| self.labels[i].as_str())
            .find(|l| *l != "oom" || !only_a_guess_at_oom(w))
    }

    /// What a line is journalled as: its label and the timer it names. A structured line is
    /// labelled from its words, and a duration field is its timer where its words say a timer
    /// fired ("timeout", "deadline", "timed out").
    pub fn read(&self, raw: &[u8], text: &str) -> Option<(String, Option<f64>)> {
        let label = self.label_bytes(raw)?;
        match crate::journal::logline::parse(text) {
            None => Some((label.to_string(), self.timer_in(text))),
            Some(s) => {
                let words = s.words();
                let label = self.label_structured(raw, &words)?;
                let timer = self
                    .timer_in(&words)
                    .or(s.duration_s.filter(|d| *d > 0.0 && s.says_timeout()));
                Some((label.to_string(), timer))
            }
        }
    }

    /// What a line of quoted code (a stack frame, the source line under it, any line inside a
    /// traceback) is journalled as: only the user's own patterns label it. A built-in label needs
    /// the event word in a message, and `poll(timeout)` in a traceback's source line is none.
    pub fn read_code(&self, raw: &[u8]) -> Option<(String, Option<f64>)> {
        self.set
            .matches(raw)
            .iter()
            .find(|i| *i < self.user)
            .map(|i| (self.labels[i].clone(), None))
    }

    /// Whether any line wholly inside `chunk` could match (never false when one does). `scratch`
    /// holds the case-folded copy between calls.
    pub fn may_match(&self, chunk: &[u8], scratch: &mut Vec<u8>) -> bool {
        fold_into(chunk, scratch);
        Candidates::new(self, chunk, scratch).next(0).is_some()
    }

    /// A duration the line names ("after 90s", "timeout=30", "deadline of 2m"): a known timer.
    pub fn timer_in(&self, line: &str) -> Option<f64> {
        for (re, has_unit) in TIMERS.iter() {
            for c in re.captures_iter(line) {
                let n: f64 = c[1].parse().ok()?;
                let s = if *has_unit {
                    n * unit_seconds(c.get(2).map_or("s", |m| m.as_str()))
                } else {
                    n
                };
                if s > 0.0 {
                    return Some(s);
                }
            }
        }
        None
    }
}

/// The most needles, built-in and from user patterns, searched together: beyond this the SIMD
/// (Teddy) searcher gives way to a slower one, and a user pattern is better served by its own regex.
const MAX_NEEDLES: usize = 64;

/// The literals, folded, of which one begins every match of the user pattern `re`; None when its
/// matches have no such set (`\d+`, `.*x`), or one shorter than 3 bytes would let most of a read
/// through.
fn folded_prefixes(re: &str) -> Option<Vec<Vec<u8>>> {
    use regex_syntax::hir::literal::{ExtractKind, Extractor};
    let hir = regex_syntax::ParserBuilder::new().build().parse(re).ok()?;
    let mut seq = Extractor::new().kind(ExtractKind::Prefix).extract(&hir);
    seq.optimize_for_prefix_by_preference();
    let mut lits: Vec<Vec<u8>> = seq
        .literals()?
        .iter()
        .map(|l| l.as_bytes().iter().map(|b| b | 0x20).collect())
        .collect();
    if lits.iter().any(|l| l.len() < 3) {
        return None;
    }
    lits.sort();
    lits.dedup();
    Some(lits)
}

/// `chunk` case-folded for the needles into `out`: every byte with bit 5 set, which maps `A`-`Z`
/// to `a`-`z` and keeps `a`-`z` and the space, the only bytes a needle holds. It also maps a few
/// other bytes onto them (control bytes onto the space), which only lets more through the
/// prefilter; one branch-free pass, unlike a lowercase that tests each byte's range.
fn fold_into(chunk: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.extend(chunk.iter().map(|b| b | 0x20));
}

/// Where in one chunk a line may match: the next hit of either prefilter (a built-in's needle in the
/// folded copy, a user pattern in the chunk itself) at or after a given offset. Each searcher's
/// next hit is kept until the caller moves past it, so a chunk is scanned about once however many
/// hits it holds.
struct Candidates<'a> {
    patterns: &'a Patterns,
    chunk: &'a [u8],
    folded: &'a [u8],
    /// The next hit per searcher: None before its first search, `usize::MAX` for none left in the
    /// chunk. Leftmost search means no hit lies before it, so it stands while callers ask from
    /// offsets up to it.
    needle: Option<usize>,
    user: Option<usize>,
}

impl<'a> Candidates<'a> {
    fn new(patterns: &'a Patterns, chunk: &'a [u8], folded: &'a [u8]) -> Self {
        Self {
            patterns,
            chunk,
            folded,
            needle: None,
            user: None,
        }
    }

    /// The first offset at or after `from` where a watch pattern may match; None when no line that
    /// starts at or after `from`'s line can match.
    fn next(&mut self, from: usize) -> Option<usize> {
        let stale = |c: Option<usize>| c.is_none_or(|at| at < from);
        if stale(self.needle) {
            let input = aho_corasick::Input::new(self.folded).range(from..);
            let found = self.patterns.needles.find(input);
            self.needle = Some(found.map_or(usize::MAX, |m| m.start()));
        }
        if let Some(re) = &self.patterns.user_chunk {
            if stale(self.user) {
                let input = regex_automata::Input::new(self.chunk).range(from..);
                self.user = Some(re.find(input).map_or(usize::MAX, |m| m.start()));
            }
        }
        let at = [self.needle, self.user].into_iter().flatten().min()?;
        (at != usize::MAX).then_some(at)
    }
}

/// The line's only word of memory is a guess: "Perhaps out of memory?".
fn only_a_guess_at_oom(line: &[u8]) -> bool {
    let lower = line.to_ascii_lowercase();
    let has = |n: &str| lower.windows(n.len()).any(|w| w == n.as_bytes());
    has("perhaps out of memory")
        && !has("oom")
        && !has("cannot allocate")
        && !has("memory allocation of")
        && !has("outofmemoryerror")
}

/// The durations a line may name, with whether the match carries its unit; compiled on first use.
static TIMERS: std::sync::LazyLock<[(Regex, bool); 2]> = std::sync::LazyLock::new(|| {
    [
        (
            Regex::new(r"(?i)(\d+(?:\.\d+)?)\s*(ms|milliseconds?|secs?|seconds?|s|mins?|minutes?|m|h|hours?)\b")
                .unwrap(),
            true,
        ),
        (
            Regex::new(r"(?i)\b(?:timeout|deadline|after|limit|watchdog)\s*[=:]?\s*(\d+(?:\.\d+)?)\b")
                .unwrap(),
            false,
        ),
    ]
});

fn unit_seconds(u: &str) -> f64 {
    let u = u.to_ascii_lowercase();
    if u.starts_with("ms") || u.starts_with("milli") {
        0.001
    } else if u.starts_with('h') {
        3600.0
    } else if u == "m" || u.starts_with("min") {
        60.0
    } else {
        1.0
    }
}

/// Where a drained stream's bytes go besides the line reader.
pub enum PassThrough {
    /// witness's own stdout or stderr (the transparent default).
    Own(Stream),
    /// Nowhere: the output is read and matched only.
    Discard,
}

/// What one read of a child's pipe may take: with a pipe of [`PIPE_BYTES`], a flooding child is
/// drained in a few reads per buffer rather than one per 64 KiB.
pub const READ_BYTES: usize = 256 * 1024;

/// The capacity asked for a child's output pipe (the kernel's default is 64 KiB; an unprivileged
/// process may have up to /proc/sys/fs/pipe-max-size, 1 MiB by default). A bigger pipe lets a
/// child that floods its output write on while witness reads, instead of the two taking turns
/// every 64 KiB, which on two cores costs more than the copies.
pub const PIPE_BYTES: usize = 1024 * 1024;

/// Asks for a [`PIPE_BYTES`] pipe; where that is refused (a user over its pipe quota), the pipe
/// keeps its size, which is only slower.
pub fn widen_pipe(fd: std::os::fd::BorrowedFd<'_>) {
    use std::os::fd::AsRawFd;
    // SAFETY: F_SETPIPE_SZ on a descriptor we hold; it fails harmlessly on anything but a pipe.
    unsafe {
        libc::fcntl(
            fd.as_raw_fd(),
            libc::F_SETPIPE_SZ,
            PIPE_BYTES as libc::c_int,
        );
    }
}

/// Drains one stream until EOF on the calling thread. Returns the number of bytes read.
pub fn drain(
    mut src: impl Read,
    stream: Stream,
    pass: PassThrough,
    pid: Option<u32>,
    patterns: Arc<Patterns>,
    journal: Journal,
) -> u64 {
    let mut sink = LineSink::new(stream, pass, pid, patterns, journal);
    let mut buf = vec![0u8; READ_BYTES];
    let mut total = 0u64;
    loop {
        let n = match src.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        total += n as u64;
        sink.push(&buf[..n]);
    }
    sink.finish();
    total
}

/// One output stream of the server, fed in chunks however they arrive (a pipe read by a thread, or
/// the frames of a container's log stream): every byte is passed through, every line is read, and
/// the lines that match a pattern are journalled.
pub struct LineSink {
    out: Option<Box<dyn Write + Send>>,
    lines: LineSplitter,
    /// The case-folded copy of a chunk for the prefilter, kept between chunks.
    scratch: Vec<u8>,
    stream: Stream,
    pid: Option<u32>,
    patterns: Arc<Patterns>,
    journal: Journal,
    /// Inside a Python traceback: every line is looked at until its last one (the exception).
    traceback: bool,
    /// The last whole line read was a stack frame: an indented line after it is the source it
    /// quotes (lines are looked at only around a hit, so this is kept from one read to the next).
    after_frame: bool,
    /// Set when the run carries secrets: the pass-through is scrubbed of them.
    scrubber: Option<crate::secrets::StreamScrubber>,
    /// The run's secret values, masked in a line before it is cut and journalled.
    secrets: Vec<Vec<u8>>,
    /// The stream carries JSON-RPC (wrap's stdio relay): its messages are the protocol, never log
    /// lines, whatever words a tool's answer holds.
    skip_jsonrpc: bool,
    /// Lines that match no pattern, kept while the budget lasts ([`Event::Output`]).
    output: OutputBudget,
}

impl LineSink {
    pub fn new(
        stream: Stream,
        pass: PassThrough,
        pid: Option<u32>,
        patterns: Arc<Patterns>,
        journal: Journal,
    ) -> Self {
        let out: Option<Box<dyn Write + Send>> = match pass {
            // witness's own streams, shared with its own lines: once a reader is gone, neither
            // the server's output nor witness's is written there again (crate::out).
            PassThrough::Own(Stream::Stdout) => {
                Some(Box::new(crate::out::Sink(crate::out::To::Stdout)))
            }
            PassThrough::Own(Stream::Stderr) => {
                Some(Box::new(crate::out::Sink(crate::out::To::Stderr)))
            }
            PassThrough::Discard => None,
        };
        Self {
            out,
            lines: LineSplitter::with_limit(MAX_LINE + SECRET_SLACK),
            scratch: Vec::new(),
            stream,
            pid,
            patterns,
            journal,
            traceback: false,
            after_frame: false,
            scrubber: crate::secrets::carried()
                .then(|| crate::secrets::StreamScrubber::new(crate::secrets::values())),
            secrets: crate::secrets::values()
                .iter()
                .map(|s| s.as_bytes().to_vec())
                .collect(),
            skip_jsonrpc: false,
            output: OutputBudget::new(),
        }
    }

    /// Lines that are JSON-RPC messages are not matched (a stdio MCP server's stdout).
    pub fn skipping_jsonrpc(mut self) -> Self {
        self.skip_jsonrpc = true;
        self
    }

    pub fn push(&mut self, chunk: &[u8]) {
        if let Some(w) = self.out.as_mut() {
            // A run that carries secrets passes the server's output through scrubbed.
            let scrubbed;
            let pass = match self.scrubber.as_mut() {
                Some(s) => {
                    scrubbed = s.push(chunk);
                    &scrubbed[..]
                }
                None => chunk,
            };
            // A closed stdout (EPIPE) must not stop the draining, only the pass-through.
            if w.write_all(pass).and_then(|_| w.flush()).is_err() {
                self.out = None;
            }
        }
        self.keep_tail(chunk);
        self.keep_output(chunk);
        self.read_lines(chunk);
    }

    /// Keeps the whole lines of `chunk` that no pattern matches, while the budget lasts: the
    /// server's own words, for a failure or an exit at their instant to quote. A line carried over
    /// from the last read, code quoted in a traceback, and JSON-RPC messages are not kept.
    fn keep_output(&mut self, chunk: &[u8]) {
        // One search of the whole read first: most reads hold no error's words at all.
        if !self.output.open() || !says_error(chunk) {
            return;
        }
        let mut rest = match memchr::memchr(b'\n', chunk) {
            // The first line began in an earlier read (or is one): only lines whole in this read.
            Some(i) if self.lines.open() => &chunk[i + 1..],
            Some(_) => chunk,
            None => return,
        };
        while let Some(end) = memchr::memchr(b'\n', rest) {
            let line = &rest[..end];
            rest = &rest[end + 1..];
            self.quiet_line(line);
            if !self.output.open() {
                return;
            }
        }
    }

    fn quiet_line(&mut self, line: &[u8]) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let text_start = line.iter().position(|c| !c.is_ascii_whitespace());
        // Blank lines, indented lines (a traceback's frames and code), protocol messages, and
        // lines in no error's words.
        if text_start != Some(0)
            || self.traceback
            || !says_error(line)
            || (self.skip_jsonrpc && is_jsonrpc(line))
        {
            return;
        }
        let text = String::from_utf8_lossy(line);
        if self.patterns.read(line, &text).is_some() || text.starts_with("Traceback (") {
            return;
        }
        if !self.output.take(line) {
            return;
        }
        let line = if self.secrets.is_empty() {
            String::from_utf8_lossy(&line[..line.len().min(MAX_LINE)]).into_owned()
        } else {
            let (kept, _) = crate::secrets::scrub_and_cut(line, MAX_LINE, &self.secrets);
            String::from_utf8_lossy(&kept).into_owned()
        };
        self.journal.emit(Event::Output {
            pid: self.pid,
            stream: self.stream,
            line,
        });
    }

    /// Looks at the lines of `chunk` that may match, and only those: the line carried over from
    /// the last chunk (its start was never searched with the rest of it), each line holding a
    /// prefilter hit, and every line inside a Python traceback. Lines with no hit are never split
    /// out one by one: the next hit is searched for, and its line found around it.
    fn read_lines(&mut self, chunk: &[u8]) {
        fold_into(chunk, &mut self.scratch);
        let Self {
            lines,
            scratch,
            stream,
            pid,
            patterns,
            journal,
            traceback,
            after_frame,
            secrets,
            skip_jsonrpc,
            ..
        } = self;
        let look = |line: &[u8], truncated: bool, traceback: &mut bool, after: bool| {
            if *skip_jsonrpc && is_jsonrpc(line) {
                return;
            }
            on_line(
                patterns, journal, *stream, *pid, secrets, line, truncated, traceback, after,
            )
        };
        let mut pos = 0;
        // Whether the line that ends at this chunk's first newline is a frame, when it began in an
        // earlier read (then this chunk holds only its end).
        let mut carried_frame = None;
        if lines.open() {
            let Some(end) = memchr::memchr(b'\n', chunk) else {
                lines.keep(chunk);
                return;
            };
            lines.keep(&chunk[..end]);
            look(&lines.cur, lines.truncated, traceback, *after_frame);
            carried_frame = Some(is_frame(&lines.cur));
            lines.reset();
            pos = end + 1;
        }
        // Whether the whole line before the one starting at `start` is a frame.
        let frame_before = |start: usize| -> bool {
            if start == 0 {
                return *after_frame;
            }
            let from = memchr::memrchr(b'\n', &chunk[..start - 1]).map_or(0, |i| i + 1);
            match carried_frame {
                Some(f) if from == 0 => f,
                _ => is_frame(&chunk[from..start - 1]),
            }
        };
        let mut hits = Candidates::new(patterns, chunk, scratch);
        while pos < chunk.len() {
            // Where the next line worth a look starts, and where to look for its newline.
            let (start, from) = if *traceback {
                (pos, pos)
            } else {
                let Some(hit) = hits.next(pos) else { break };
                let start = memchr::memrchr(b'\n', &chunk[pos..hit]).map_or(pos, |i| pos + i + 1);
                (start, hit)
            };
            // A hit in the unfinished last line: that line is looked at once it is whole.
            let Some(end) = memchr::memchr(b'\n', &chunk[from..]).map(|i| from + i) else {
                break;
            };
            let line = &chunk[start..end];
            let limit = lines.limit;
            look(
                &line[..line.len().min(limit)],
                line.len() > limit,
                traceback,
                frame_before(start),
            );
            pos = end + 1;
        }
        let rest = memchr::memrchr(b'\n', &chunk[pos..]).map_or(pos, |i| pos + i + 1);
        if rest > 0 {
            *after_frame = frame_before(rest);
        }
        lines.keep(&chunk[rest..]);
    }

    /// The end of the output, matched or not, kept for a start-up failure's words.
    fn keep_tail(&mut self, chunk: &[u8]) {
        self.journal.keep_tail(self.stream, chunk);
    }

    /// The end of the stream: a last line with no newline is still matched.
    pub fn finish(&mut self) {
        if let (Some(w), Some(s)) = (self.out.as_mut(), self.scrubber.as_mut()) {
            let _ = w.write_all(&s.finish()).and_then(|_| w.flush());
        }
        let Self {
            lines,
            stream,
            pid,
            patterns,
            journal,
            traceback,
            after_frame,
            secrets,
            skip_jsonrpc,
            ..
        } = self;
        lines.finish(&mut |l, t, _| {
            if !(*skip_jsonrpc && is_jsonrpc(l)) {
                on_line(
                    patterns,
                    journal,
                    *stream,
                    *pid,
                    secrets,
                    l,
                    t,
                    traceback,
                    *after_frame,
                )
            }
        });
    }
}

/// A JSON-RPC message (or batch) as newline-delimited JSON-RPC frames it: an object or array naming
/// `"jsonrpc"` near its start.
fn is_jsonrpc(line: &[u8]) -> bool {
    let start = line.iter().position(|c| !c.is_ascii_whitespace());
    start.is_some_and(|i| {
        matches!(line[i], b'{' | b'[')
            && memchr::memmem::find(&line[i..line.len().min(i + 256)], b"\"jsonrpc\"").is_some()
    })
}

/// Looks at one line: journals it when it matches a watch pattern (or ends a traceback).
/// `secrets`: the run's secret values, masked before the line is cut to [`MAX_LINE`].
/// `after_frame`: the line before it was a stack frame (see [`is_frame`]).
#[allow(clippy::too_many_arguments)]
fn on_line(
    patterns: &Patterns,
    journal: &Journal,
    stream: Stream,
    pid: Option<u32>,
    secrets: &[Vec<u8>],
    line: &[u8],
    truncated: bool,
    traceback: &mut bool,
    after_frame: bool,
) {
    // Secrets are masked before the cut to MAX_LINE, so no secret's first bytes survive it.
    let scrubbed;
    let (line, truncated) = if secrets.is_empty() {
        (
            &line[..line.len().min(MAX_LINE)],
            truncated || line.len() > MAX_LINE,
        )
    } else {
        let (kept, cut) = crate::secrets::scrub_and_cut(line, MAX_LINE, secrets);
        scrubbed = kept;
        (&scrubbed[..], truncated || cut)
    };
    if *traceback {
        if let Some(last) = traceback_end(line) {
            // The traceback's last line names the exception: the line worth keeping.
            *traceback = false;
            journal.emit(Event::Log {
                pid,
                stream,
                line: last,
                label: "traceback".into(),
                truncated,
                timer_s: None,
            });
            return;
        }
    }
    let text = String::from_utf8_lossy(line);
    let text = text.trim_end_matches('\r');
    // Inside a traceback, or a frame and the source under it: code quoted, not an event.
    let read = if *traceback || crate::journal::logline::is_quoted_code(text, after_frame) {
        patterns.read_code(line)
    } else {
        patterns.read(line, text)
    };
    let Some((label, timer_s)) = read else {
        return;
    };
    // A structured line holds its whole traceback: the lines after it are not inside one.
    if label == "traceback" && crate::journal::logline::parse(text).is_none() {
        *traceback = true;
    }
    journal.emit(Event::Log {
        pid,
        stream,
        line: text.to_string(),
        label,
        truncated,
        timer_s,
    });
}

/// [`crate::journal::logline::is_frame`] of raw bytes.
fn is_frame(line: &[u8]) -> bool {
    crate::journal::logline::is_frame(String::from_utf8_lossy(line).trim_end_matches('\r'))
}

/// The exception line that ends a Python traceback ("ValueError: boom"), or None for a line inside
/// it (indented frames, the chained-exception banners, the next "Traceback" header). A logger's prefix
/// before the exception ("[ERROR] ValueError: boom") is kept as it is.
fn traceback_end(line: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(line);
    let t = text.trim_end_matches('\r');
    let inside = t.is_empty()
        || t.starts_with(' ')
        || t.starts_with('\t')
        || t.starts_with('^')
        || t.starts_with("Traceback (most recent call last)")
        || t.starts_with("During handling of the above exception")
        || t.starts_with("The above exception was the direct cause");
    (!inside).then(|| format!("{t} (the exception ending a Python traceback)"))
}

/// Splits a byte stream into lines with a bounded buffer.
pub struct LineSplitter {
    cur: Vec<u8>,
    truncated: bool,
    /// Bytes kept of one line.
    limit: usize,
}

impl Default for LineSplitter {
    fn default() -> Self {
        Self::with_limit(MAX_LINE)
    }
}

/// Bytes a server's line keeps past [`MAX_LINE`] until it is scrubbed of secrets, so a secret
/// the cut would fall inside is seen whole and masked before the line is cut to [`MAX_LINE`].
pub const SECRET_SLACK: usize = 4096;

impl LineSplitter {
    /// A splitter that keeps at most `limit` bytes of a line.
    pub fn with_limit(limit: usize) -> Self {
        Self {
            cur: Vec::new(),
            truncated: false,
            limit,
        }
    }

    /// Calls `on_line(line, truncated, carried)` for each complete line; `carried` says the line began
    /// in an earlier chunk.
    pub fn push(&mut self, mut chunk: &[u8], on_line: &mut impl FnMut(&[u8], bool, bool)) {
        while let Some(i) = memchr::memchr(b'\n', chunk) {
            let part = &chunk[..i];
            if self.cur.is_empty() && !self.truncated {
                on_line(
                    &part[..part.len().min(self.limit)],
                    part.len() > self.limit,
                    false,
                );
            } else {
                self.keep(part);
                on_line(&self.cur, self.truncated, true);
                self.cur.clear();
                self.truncated = false;
            }
            chunk = &chunk[i + 1..];
        }
        self.keep(chunk);
    }

    /// A line begun in an earlier chunk waits for its newline.
    fn open(&self) -> bool {
        !self.cur.is_empty() || self.truncated
    }

    fn reset(&mut self) {
        self.cur.clear();
        self.truncated = false;
    }

    fn keep(&mut self, part: &[u8]) {
        let room = self.limit - self.cur.len();
        if part.len() > room {
            self.truncated = true;
        }
        self.cur.extend_from_slice(&part[..part.len().min(room)]);
    }

    /// A last line with no newline is not lost.
    pub fn finish(&mut self, on_line: &mut impl FnMut(&[u8], bool, bool)) {
        if !self.cur.is_empty() || self.truncated {
            on_line(&self.cur, self.truncated, true);
        }
        self.cur.clear();
        self.truncated = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(chunks: &[&[u8]]) -> Vec<(String, bool)> {
        let mut got = Vec::new();
        let mut s = LineSplitter::default();
        let mut f =
            |l: &[u8], t: bool, _: bool| got.push((String::from_utf8_lossy(l).into_owned(), t));
        for c in chunks {
            s.push(c, &mut f);
        }
        s.finish(&mut f);
        got
    }

    #[test]
    fn lines_split_across_chunks_and_a_last_line_without_newline_is_kept() {
        let got = split(&[b"ab", b"c\nde", b"f\ng"]);
        assert_eq!(
            got,
            vec![
                ("abc".into(), false),
                ("def".into(), false),
                ("g".into(), false)
            ]
        );
    }

    #[test]
    fn a_huge_line_is_truncated_and_marked_with_bounded_memory() {
        let big = vec![b'x'; MAX_LINE * 3];
        let mut s = LineSplitter::default();
        let mut got = Vec::new();
        let mut f = |l: &[u8], t: bool, _: bool| got.push((l.len(), t));
        for _ in 0..10 {
            s.push(&big, &mut f);
            assert!(s.cur.capacity() <= MAX_LINE * 2);
        }
        s.push(b"\nnext\n", &mut f);
        assert_eq!(got, vec![(MAX_LINE, true), (4, false)]);
    }

    /// A journal in a fresh folder, and a sink journalling pid 5's stderr lines into it with the
    /// built-in patterns.
    fn stderr_sink_of_pid_5() -> (std::path::PathBuf, crate::journal::Journal, LineSink) {
        use crate::journal::{Header, Journal};
        let dir = std::env::temp_dir().join(format!(
            "witness-logs-test-{}-{}",
            std::process::id(),
            rand::random::<u64>()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("j.jsonl");
        let journal = Journal::create(&path, &Header::new("wrap", vec![])).unwrap();
        let patterns = Arc::new(Patterns::new(&[]).unwrap());
        let sink = LineSink::new(
            Stream::Stderr,
            PassThrough::Discard,
            Some(5),
            patterns,
            journal.clone(),
        );
        (path, journal, sink)
    }

    #[test]
    fn a_sink_fed_in_chunks_journals_the_lines_that_match() {
        let (path, journal, mut sink) = stderr_sink_of_pid_5();
        // Frames from a container's log stream cut lines anywhere.
        sink.push(b"[oi] process watch");
        sink.push(b"dog: force-exiting after 3s\r\nGET /health 200\nthread 'main' pan");
        sink.push(b"icked at src/main.rs:1:1");
        sink.finish();
        journal.flush().unwrap();
        let logs: Vec<_> = crate::journal::read(&path)
            .unwrap()
            .records
            .into_iter()
            .filter_map(|r| match r.event {
                Event::Log {
                    pid,
                    stream,
                    line,
                    label,
                    timer_s,
                    ..
                } => Some((pid, stream, line, label, timer_s)),
                _ => None,
            })
            .collect();
        assert_eq!(
            logs,
            vec![
                (
                    Some(5),
                    Stream::Stderr,
                    "[oi] process watchdog: force-exiting after 3s".to_string(),
                    "watchdog".to_string(),
                    Some(3.0)
                ),
                (
                    Some(5),
                    Stream::Stderr,
                    "thread 'main' panicked at src/main.rs:1:1".to_string(),
                    "panic".to_string(),
                    None
                ),
            ]
        );
    }

    #[test]
    fn a_json_line_holding_a_traceback_opens_no_traceback() {
        let (path, journal, mut sink) = stderr_sink_of_pid_5();
        sink.push(b"{\"levelname\": \"ERROR\", \"message\": \"request failed\", \"exc_info\": \"Traceback (most recent call last):\\n  File \\\"a.py\\\", line 1\\nValueError: boom\"}\n");
        sink.push(b"{\"levelname\": \"INFO\", \"message\": \"GET /health 200\"}\n");
        sink.finish();
        journal.flush().unwrap();
        let got = logged(&path);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].1, "traceback");
        assert!(
            got[0].0.starts_with("{\"levelname\""),
            "the raw line is journalled"
        );
    }

    /// A traceback's source lines say `timeout` as code does (a real Python 3.11 traceback of a
    /// selector interrupted in `poll`, and the same frames under logging's `stack_info`, with no
    /// "Traceback" header, split across reads): no `[timeout]`. The server's own timeout lines,
    /// before and after, keep their label.
    #[test]
    fn a_traceback_s_source_lines_are_code_not_a_timeout() {
        let (path, journal, mut sink) = stderr_sink_of_pid_5();
        sink.push(b"[2026-12-03 18:00:25 +0000] [2156] [CRITICAL] WORKER TIMEOUT (pid:2199)\n");
        sink.push(
            b"Traceback (most recent call last):\n  File \"<string>\", line 8, in <module>\n",
        );
        sink.push(b"  File \"/root/.pyenv/versions/3.11.7/lib/python3.11/selectors.py\", line 468, in select\n");
        sink.push(b"    fd_event_list = self._selector.poll(timeout, max_ev)\n");
        sink.push(b"                    ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n");
        sink.push(b"  File \"/srv/gunicorn/workers/base.py\", line 204, in handle_abort\n    sys.exit(1)\nSystemExit: 1\n");
        // logging's stack_info: frames with no header, the source line in a read of its own.
        sink.push(b"Stack (most recent call last):\n  File \"/srv/gunicorn/arbiter.py\", line 360, in sleep\n");
        sink.push(b"    ready = select.select([self.PIPE[0]], [], [], timeout)\n    at");
        sink.push(b" Timeout._onTimeout (/app/index.js:5:11)\n");
        sink.push(
            b"upstream timed out (110: Connection timed out) while reading response header\n",
        );
        sink.finish();
        journal.flush().unwrap();
        let got: Vec<(String, String)> = logged(&path)
            .into_iter()
            .map(|(line, label, _)| (label, line))
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "timeout".to_string(),
                    "[2026-12-03 18:00:25 +0000] [2156] [CRITICAL] WORKER TIMEOUT (pid:2199)"
                        .to_string()
                ),
                (
                    "traceback".to_string(),
                    "Traceback (most recent call last):".to_string()
                ),
                (
                    "traceback".to_string(),
                    "SystemExit: 1 (the exception ending a Python traceback)".to_string()
                ),
                (
                    "timeout".to_string(),
                    "upstream timed out (110: Connection timed out) while reading response header"
                        .to_string()
                ),
            ]
        );
    }

    /// The Log events of a journal: (line, label, truncated).
    fn logged(path: &std::path::Path) -> Vec<(String, String, bool)> {
        crate::journal::read(path)
            .unwrap()
            .records
            .into_iter()
            .filter_map(|r| match r.event {
                Event::Log {
                    line,
                    label,
                    truncated,
                    ..
                } => Some((line, label, truncated)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn only_the_lines_with_a_hit_are_looked_at_and_none_is_missed() {
        // Lines that match (any case, built-in or user, a traceback and its end), near misses,
        // long lines cut at the limit with a hit before or after the cut, a hit in a line split
        // across chunks, a last line with no newline; fed whole and in random chunks. Every line
        // looked at one by one is the reference: the sink must journal exactly the same.
        use rand::{Rng, SeedableRng};
        let dir = std::env::temp_dir().join(format!(
            "witness-logs-hits-{}-{}",
            std::process::id(),
            rand::random::<u64>()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        // Literal prefixes that join the needles (any case, anchored), one that is too short and
        // one with none: those two run as a regex over the read.
        let user: Vec<String> = [
            "lease=lease (lost|expired)",
            "^ZAP!$",
            "fatal=(?i)data corruption",
            "slow=\\d+ ms$",
            "queue=[qQ]\\w* full",
        ]
        .map(String::from)
        .to_vec();
        let patterns = Arc::new(Patterns::new(&user).unwrap());
        let pieces: Vec<Vec<u8>> = vec![
            b"GET /health 200".to_vec(),
            b"[WARN] Worker TIMEOUT (pid:3)".to_vec(),
            b"process Watchdog: force-exiting after 90s".to_vec(),
            b"lease expired for shard 3".to_vec(),
            b"ZAP!".to_vec(),
            b"no ZAP! here".to_vec(),
            b"the exits are on the left".to_vec(),
            b"Traceback (most recent call last):".to_vec(),
            b"  File \"app.py\", line 3, in app".to_vec(),
            b"    fd_event_list = self._selector.poll(timeout)".to_vec(),
            b"  File \"/usr/lib/python3.11/timeouts.py\", line 9, in wait".to_vec(),
            b"ValueError: boom".to_vec(),
            b"    at Timeout._onTimeout (/app/index.js:5:11)".to_vec(),
            b"fatal\x00error in \xff\xfe bytes".to_vec(),
            [vec![b'x'; MAX_LINE - 3], b"oom killer".to_vec()].concat(),
            [b"OOM first ".to_vec(), vec![b'y'; MAX_LINE + 100]].concat(),
            b"abcdefghijklmnopqrstuvwxyz".to_vec(),
            b"found DATA Corruption in block 7".to_vec(),
            b"GET / took 350 ms".to_vec(),
            b"GET / took 350 ms, then 20".to_vec(),
            b"Queue is full".to_vec(),
            Vec::new(),
        ];
        let mut rng = rand::rngs::StdRng::seed_from_u64(14);
        let mut seen = 0;
        for round in 0..40 {
            let mut input = Vec::new();
            for _ in 0..rng.gen_range(1..60) {
                input.extend_from_slice(&pieces[rng.gen_range(0..pieces.len())]);
                input.push(b'\n');
            }
            if rng.gen_bool(0.5) {
                input.extend_from_slice(b"last words: shutting down");
            }
            let make = |name: &str| {
                let path = dir.join(format!("{name}-{round}.jsonl"));
                let j =
                    Journal::create(&path, &crate::journal::Header::new("wrap", vec![])).unwrap();
                (path, j)
            };
            // The reference: every line looked at.
            let (ref_path, ref_j) = make("ref");
            let mut splitter = LineSplitter::with_limit(MAX_LINE + SECRET_SLACK);
            let mut tb = false;
            let mut after_frame = false;
            let mut every = |l: &[u8], t: bool, _: bool| {
                on_line(
                    &patterns,
                    &ref_j,
                    Stream::Stdout,
                    Some(1),
                    &[],
                    l,
                    t,
                    &mut tb,
                    after_frame,
                );
                after_frame = is_frame(l);
            };
            splitter.push(&input, &mut every);
            splitter.finish(&mut every);
            ref_j.flush().unwrap();
            let want = logged(&ref_path);
            seen += want.len();
            // The sink, fed in random chunks (whole in round 0).
            let (path, j) = make("sink");
            let mut sink = LineSink::new(
                Stream::Stdout,
                PassThrough::Discard,
                Some(1),
                patterns.clone(),
                j.clone(),
            );
            let mut rest = &input[..];
            while !rest.is_empty() {
                let n = if round == 0 {
                    rest.len()
                } else {
                    rng.gen_range(1..=rest.len().min(MAX_LINE / 2))
                };
                sink.push(&rest[..n]);
                rest = &rest[n..];
            }
            sink.finish();
            j.flush().unwrap();
            assert_eq!(logged(&path), want, "round {round}");
        }
        assert!(seen > 100, "the lines matched: {seen}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn user_patterns_with_literal_prefixes_join_the_needles() {
        let lits = |re: &str| folded_prefixes(re);
        assert_eq!(lits("lease (lost|expired)"), Some(vec![b"lease ".to_vec()]));
        assert_eq!(
            lits("(Lease|GRANT) lost"),
            Some(vec![b"grant lost".to_vec(), b"lease lost".to_vec()])
        );
        assert_eq!(lits("^BOOM$"), Some(vec![b"boom".to_vec()]));
        assert_eq!(lits("\\d+ ms"), None, "no literal: a regex of its own");
        assert_eq!(lits("ab|c"), None, "too short a literal");
        assert_eq!(lits("(unclosed"), None);
        let p = Patterns::new(&["boom=ERROR|FATAL".into()]).unwrap();
        assert!(
            p.user_chunk.is_none(),
            "ERROR|FATAL is served by the needles"
        );
        let mut scratch = Vec::new();
        assert!(p.may_match(b"GET / 200\nan ERROR here\n", &mut scratch));
        assert!(!p.may_match(b"GET / 200\n", &mut scratch));
        let p = Patterns::new(&["\\d+ ms".into()]).unwrap();
        assert!(p.user_chunk.is_some());
        assert!(p.may_match(b"took 30 ms\n", &mut scratch));
    }

    #[test]
    fn a_structured_line_is_labelled_from_its_level_and_message_never_its_fields() {
        let p = Patterns::new(&["sig=SIGTERM".into()]).unwrap();
        let builtin = Patterns::new(&[]).unwrap();
        let read = |p: &Patterns, l: &str| p.read(l.as_bytes(), l);
        let shutdown = r#"{"level":"info","ts":1.5,"msg":"shutting down apps, then terminating","signal":"SIGTERM"}"#;
        assert_eq!(read(&builtin, shutdown), Some(("exit".into(), None)));
        // The user's patterns still match the raw line, fields and all.
        assert_eq!(read(&p, shutdown), Some(("sig".into(), None)));
        let proxy = r#"{"level":"error","ts":1796148050.752073,"logger":"http.log.error","msg":"net/http: timeout awaiting response headers","duration":2.001,"status":504}"#;
        assert_eq!(read(&builtin, proxy), Some(("timeout".into(), Some(2.001))));
        // A duration is a timer's evidence only where the words say a timer fired.
        let served =
            r#"{"level":"info","msg":"handled request, worker killed later","duration":2.001}"#;
        assert_eq!(read(&builtin, served), Some(("killed".into(), None)));
        // A timeout in a field's name or value labels nothing.
        let config = r#"{"level":"info","msg":"listening","read_timeout":"30s","addr":":8080"}"#;
        assert_eq!(read(&builtin, config), None);
        // A field named `timeout` is a whole word the timeout pattern matches in the raw line:
        // only reading the message, never the line, keeps it from labelling this one.
        let named = r#"{"level":"info","msg":"listening","timeout":30,"retry":"timeouts"}"#;
        assert!(Patterns::new(&[])
            .unwrap()
            .label_bytes(named.as_bytes())
            .is_some());
        assert_eq!(read(&builtin, named), None);
        let logfmt_named = r#"level=info msg="listening" timeout=30s"#;
        assert_eq!(read(&builtin, logfmt_named), None);
        let logfmt = r#"level=error msg="upstream request timed out" duration=2.001s status=504"#;
        assert_eq!(
            read(&builtin, logfmt),
            Some(("timeout".into(), Some(2.001)))
        );
        let logfmt_stop = r#"level=info msg="shutting down" signal=SIGTERM"#;
        assert_eq!(read(&builtin, logfmt_stop), Some(("exit".into(), None)));
        // The message's own words name the timer before a duration field does.
        let named = r#"{"level":"warn","msg":"upstream timed out after 5s","elapsed_ms":5004}"#;
        assert_eq!(read(&builtin, named), Some(("timeout".into(), Some(5.0))));
        // Plain lines read as they always have.
        let plain = "[7] [CRITICAL] WORKER TIMEOUT (pid:9) after 30s";
        assert_eq!(read(&builtin, plain), Some(("timeout".into(), Some(30.0))));
        assert_eq!(
            read(&builtin, "received signal SIGTERM"),
            Some(("killed".into(), None))
        );
    }

    #[test]
    fn invalid_utf8_is_kept_lossily() {
        let got = split(&[b"bad \xff byte\n"]);
        assert_eq!(got[0].0, "bad \u{fffd} byte");
    }

    #[test]
    fn builtin_patterns_label_the_seed_lines() {
        let p = Patterns::new(&[]).unwrap();
        let l = "[oi] process watchdog: force-exiting after 90s (exit 124)";
        assert_eq!(p.label(l), Some("watchdog"));
        assert_eq!(p.timer_in(l), Some(90.0));
        assert_eq!(
            p.label("[2024] [CRITICAL] WORKER TIMEOUT (pid:12)"),
            Some("timeout")
        );
        assert_eq!(
            p.label("thread 'main' panicked at src/main.rs:3:5"),
            Some("panic")
        );
        assert_eq!(
            p.label("Traceback (most recent call last):"),
            Some("traceback")
        );
        // gunicorn's guess after any SIGKILL is a kill, not an OOM.
        assert_eq!(
            p.label("[ERROR] Worker (pid:7) was sent SIGKILL! Perhaps out of memory?"),
            Some("killed")
        );
        assert_eq!(p.label("fatal: Out of memory"), Some("oom"));
        assert_eq!(p.label("GET /health 200"), None);
        assert_eq!(p.timer_in("request timeout=30"), Some(30.0));
        assert_eq!(p.timer_in("deadline exceeded after 1500ms"), Some(1.5));
        assert_eq!(p.timer_in("exit 124"), None);
    }

    #[test]
    fn a_python_traceback_is_labelled_a_traceback_with_its_last_line() {
        let dir = std::env::temp_dir().join(format!("witness-tb-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("j.jsonl");
        let j = Journal::create(&path, &crate::journal::Header::new("wrap", vec![])).unwrap();
        let p = Arc::new(Patterns::new(&[]).unwrap());
        let mut sink = LineSink::new(Stream::Stderr, PassThrough::Discard, Some(7), p, j.clone());
        sink.push(b"Traceback (most recent call last):\n  File \"app.py\", line 3, in app\n");
        // The exception arrives in a later read that holds no watch word at all.
        sink.push(b"    raise ValueError(\"boom\")\nValueError: boom\nGET / 200\n");
        sink.finish();
        j.flush().unwrap();
        let logs: Vec<(String, String)> = crate::journal::read(&path)
            .unwrap()
            .records
            .into_iter()
            .filter_map(|r| match r.event {
                Event::Log { line, label, .. } => Some((label, line)),
                _ => None,
            })
            .collect();
        assert_eq!(
            logs,
            vec![
                (
                    "traceback".to_string(),
                    "Traceback (most recent call last):".to_string()
                ),
                (
                    "traceback".to_string(),
                    "ValueError: boom (the exception ending a Python traceback)".to_string()
                ),
            ]
        );
    }

    #[test]
    fn builtin_patterns_need_a_needle() {
        // Each alternative of each built-in, as the shortest line it matches: the prefilter must
        // let every one through, or a watchdog line could go unseen.
        let p = Patterns::new(&[]).unwrap();
        // The fold (bit 5 set) is a lowercase only for these bytes.
        for n in NEEDLES {
            assert!(
                n.bytes().all(|b| b.is_ascii_lowercase() || b == b' '),
                "{n:?}"
            );
        }
        let lines = [
            "watchdog",
            "force-exit",
            "forceexit",
            "timed out",
            "deadline exceeded",
            "worker timeout",
            "timeouts",
            "panicked at",
            "panic:",
            "Traceback (most recent call last)",
            "FATAL ERROR",
            "segmentation fault",
            "SIGSEGV",
            "uncaught exception",
            "Out Of Memory",
            "OOM",
            "oom-kill",
            "cannot allocate memory",
            "memory allocation of 8 bytes failed",
            "OutOfMemoryError",
            "Killed",
            "terminated by signal",
            "received signal",
            "SIGKILL",
            "SIGTERM",
            "exited with code 1",
            "exiting",
            "shutting down",
        ];
        let mut scratch = Vec::new();
        for l in lines {
            assert!(p.label(l).is_some(), "{l:?} should match a built-in");
            assert!(
                p.may_match(l.as_bytes(), &mut scratch),
                "{l:?} must pass the prefilter"
            );
        }
        assert!(!p.may_match(b"GET /health 200\nPOST /call 200\n", &mut scratch));
    }

    #[test]
    fn user_patterns_take_a_label_and_bad_ones_are_named() {
        let p = Patterns::new(&["lease=lease expired".into(), "boom".into()]).unwrap();
        assert_eq!(p.label("the lease expired"), Some("lease"));
        assert_eq!(p.label("boom!"), Some("watch"));
        let Err(e) = Patterns::new(&["(unclosed".into()]) else {
            panic!("an unclosed group must be refused")
        };
        assert!(e.to_string().contains("--watch \"(unclosed\""), "{e}");
    }

    #[test]
    fn the_tail_joins_a_line_and_its_newline_from_two_reads() {
        let dir = std::env::temp_dir().join(format!("witness-tail-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let j = Journal::create(
            &dir.join("j.jsonl"),
            &crate::journal::Header::new("wrap", vec![]),
        )
        .unwrap();
        let p = Arc::new(Patterns::new(&[]).unwrap());
        let mut sink = LineSink::new(Stream::Stderr, PassThrough::Discard, Some(7), p, j.clone());
        sink.push(b"toy_server: --call: invalid value 'bogus'");
        sink.push(b"\n");
        sink.push(b"no newline at the end");
        sink.finish();
        let tail = j.tail();
        assert_eq!(
            tail[0].1,
            vec![
                "toy_server: --call: invalid value 'bogus'".to_string(),
                "no newline at the end".to_string()
            ]
        );
    }
}
