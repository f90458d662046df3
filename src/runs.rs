//! Finding past runs: `witness report` with no journal opens the latest run's, `--last N` the N-th,
//! `--list` lists the recent ones — for a run started by an MCP host that swallowed witness's
//! stderr, where the journal's path was printed.
//!
//! A run's journal is found in two places: the default journal folder
//! ([`crate::files::state_dir`]), where every run without `--journal` writes, and a small index in
//! that folder ([`INDEX`]) where every run (with `--journal FILE` anywhere too) records its start
//! and its journal's path. The index is what makes a host's `--journal FILE` findable; the folder
//! scan finds journals written before the index existed. Reading a run for the listing takes its
//! journal's first line (the header) and its last [`TAIL_BYTES`], never the whole file: journals
//! can be huge.

use std::io::{BufRead, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::journal::Header;

/// The index's file name in the journal folder: one run a line, `START_UNIX_S<TAB>PATH`.
pub const INDEX: &str = "runs.tsv";
/// How many runs `--list` shows.
pub const LIST: usize = 20;
/// The index is cut back to its last [`INDEX_KEEP`] lines once it grows past this.
const INDEX_MAX_BYTES: u64 = 256 * 1024;
const INDEX_KEEP: usize = 1000;
/// How much of a journal's end is read to find how the run ended.
const TAIL_BYTES: u64 = 64 * 1024;
/// A header line longer than this is not read (a journal's header is a few hundred bytes).
const HEADER_MAX: u64 = 1 << 20;

/// Records a run's journal in the index (best effort: a run never fails for its index).
pub fn record(dir: &Path, journal: &Path, started_unix_s: f64) {
    let Ok(path) = std::path::absolute(journal) else {
        return;
    };
    let Some(text) = path.to_str().filter(|t| !t.contains(['\n', '\t', '\r'])) else {
        return;
    };
    if crate::files::ensure_state_dir(dir).is_err() {
        return;
    }
    let index = dir.join(INDEX);
    let line = format!("{started_unix_s:.6}\t{text}\n");
    let appended = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&index)
        .and_then(|mut f| {
            f.write_all(line.as_bytes())?;
            f.metadata()
        });
    if appended.is_ok_and(|m| m.len() > INDEX_MAX_BYTES) {
        // Cut back to the latest lines (a line appended meanwhile by another run may be lost: it
        // is an index, and its journal is still in the folder if it is a default one).
        if let Ok(all) = std::fs::read_to_string(&index) {
            let lines: Vec<&str> = all.lines().collect();
            let keep = lines[lines.len().saturating_sub(INDEX_KEEP)..].join("\n") + "\n";
            let _ = crate::files::replace(&index, keep.as_bytes());
        }
    }
}

/// The runs in `dir`'s index and folder whose journal still exists, newest first (by start).
pub fn recent(dir: &Path) -> Vec<PathBuf> {
    let mut runs: Vec<(f64, PathBuf)> = Vec::new();
    if let Ok(text) = std::fs::read_to_string(dir.join(INDEX)) {
        for line in text.lines() {
            let Some((t, p)) = line.split_once('\t') else {
                continue;
            };
            if let Ok(t) = t.parse::<f64>() {
                runs.push((t, PathBuf::from(p)));
            }
        }
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            if let Some(t) = default_name_start(name) {
                runs.push((t, e.path()));
            }
        }
    }
    // One entry a path: the index's (sub-second) start wins over the name's.
    runs.sort_by(|a, b| a.1.cmp(&b.1).then(b.0.total_cmp(&a.0)));
    let mut seen: Option<PathBuf> = None;
    runs.retain(|(_, p)| {
        let dup = seen.as_ref() == Some(p);
        seen = Some(p.clone());
        !dup
    });
    runs.retain(|(_, p)| p.is_file());
    runs.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)));
    runs.into_iter().map(|(_, p)| p).collect()
}

/// The start (Unix seconds, to the second) a default journal's name carries:
/// `witness-MODE-YYYYMMDDTHHMMSS-PID[-N].jsonl` ([`crate::journal::default_path`]).
fn default_name_start(name: &str) -> Option<f64> {
    let rest = name.strip_prefix("witness-")?.strip_suffix(".jsonl")?;
    let stamp = rest
        .split('-')
        .find(|p| p.len() == 15 && p.as_bytes()[8] == b'T')?;
    let iso = format!(
        "{}-{}-{}T{}:{}:{}Z",
        &stamp[0..4],
        &stamp[4..6],
        &stamp[6..8],
        &stamp[9..11],
        &stamp[11..13],
        &stamp[13..15]
    );
    let t = humantime::parse_rfc3339(&iso).ok()?;
    t.duration_since(std::time::UNIX_EPOCH)
        .ok()
        .map(|d| d.as_secs_f64())
}

/// What the listing says of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSummary {
    pub path: PathBuf,
    /// The journal's header (None: its first line is not one).
    pub header: Option<Header>,
    /// How it ended: the `end` row's reason and exit code, or why there is none.
    pub ended: String,
}

/// Reads a run's header and the end of its journal.
pub fn summary(path: &Path) -> RunSummary {
    let header = read_header(path);
    let ended = match read_end(path) {
        Some(end) => end,
        None => match &header {
            Some(h) if running(h) => format!("running (witness pid {})", h.pid),
            _ => {
                "no end recorded: cut off (witness was killed, or its journal could not be written)"
                    .into()
            }
        },
    };
    RunSummary {
        path: path.to_path_buf(),
        header,
        ended,
    }
}

pub fn read_header(path: &Path) -> Option<Header> {
    let f = std::fs::File::open(path).ok()?;
    let mut line = String::new();
    std::io::BufReader::new(f.take(HEADER_MAX))
        .read_line(&mut line)
        .ok()?;
    serde_json::from_str(line.trim_end()).ok()
}

/// The last `end` row within the journal's last [`TAIL_BYTES`]: "REASON (exit N)".
fn read_end(path: &Path) -> Option<String> {
    let mut f = std::fs::File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    let from = len.saturating_sub(TAIL_BYTES);
    f.seek(SeekFrom::Start(from)).ok()?;
    let mut tail = Vec::new();
    f.read_to_end(&mut tail).ok()?;
    let text = String::from_utf8_lossy(&tail);
    text.lines().rev().find_map(|line| {
        if !line.contains("\"end\"") {
            return None;
        }
        let v: serde_json::Value = serde_json::from_str(line).ok()?;
        if v.get("kind")?.as_str()? != "end" {
            return None;
        }
        let reason = v.get("reason")?.as_str()?.to_string();
        let partial = v.get("partial").and_then(|p| p.as_bool()) == Some(true);
        let mut s = reason;
        if let Some(code) = v.get("exit_code").and_then(|c| c.as_i64()) {
            s.push_str(&format!(" (exit {code})"));
        }
        if partial {
            s.push_str(" [partial]");
        }
        Some(s)
    })
}

/// The witness pid of a run still going: its journal has no end yet and the witness that wrote it
/// still runs.
pub fn live(path: &Path) -> Option<u32> {
    let h = read_header(path)?;
    (read_end(path).is_none() && running(&h)).then_some(h.pid)
}

/// Of `runs`, those this user started from this directory, as their headers say (in order).
pub fn from_here(runs: &[PathBuf]) -> Vec<PathBuf> {
    let cwd = std::env::current_dir()
        .ok()
        .and_then(|d| d.to_str().map(str::to_string));
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    runs.iter()
        .filter(|p| {
            read_header(p).is_some_and(|h| h.uid == Some(uid) && h.cwd.is_some() && h.cwd == cwd)
        })
        .cloned()
        .collect()
}

/// Whether the witness that wrote the header still runs (same host, its pid still a witness).
fn running(h: &Header) -> bool {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok());
    if host.as_deref() != Some(h.hostname.as_str()) {
        return false;
    }
    std::fs::read(format!("/proc/{}/cmdline", h.pid))
        .ok()
        .and_then(|c| {
            c.split(|b| *b == 0)
                .next()
                .map(|a| String::from_utf8_lossy(a).into_owned())
        })
        .is_some_and(|argv0| {
            Path::new(&argv0)
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("witness"))
        })
}

/// The command a header recorded, as a user typed it: argv[0] by its file name. The header was
/// scrubbed of the run's secrets when it was written (`Journal::create`), so it is shown as kept.
pub fn command_words(h: &Header) -> String {
    let mut words: Vec<String> = h.command.clone();
    if let Some(first) = words.first_mut() {
        if let Some(name) = Path::new(first.as_str()).file_name() {
            *first = name.to_string_lossy().into_owned();
        }
    }
    words
        .iter()
        .map(|w| {
            if w.is_empty() || w.contains(|c: char| c.is_whitespace() || "\"'$`\\".contains(c)) {
                format!("{w:?}")
            } else {
                w.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The listing of `runs` (newest first), for stdout.
pub fn render_list(dir: &Path, runs: &[RunSummary], total: usize) -> String {
    let mut out = format!(
        "recent runs, newest first ({} of {total}; journal folder {}; `witness report --last N` opens the N-th):\n",
        runs.len(),
        dir.display()
    );
    for (i, r) in runs.iter().enumerate() {
        let (started, mode, command) = match &r.header {
            Some(h) => (
                h.started_at
                    .split('.')
                    .next()
                    .unwrap_or(&h.started_at)
                    .trim_end_matches('Z')
                    .replace('T', " ")
                    + " UTC",
                h.mode.clone(),
                command_words(h),
            ),
            None => (
                "?".into(),
                "?".into(),
                "(not a witness journal: no header)".into(),
            ),
        };
        let name = r
            .header
            .as_ref()
            .and_then(|h| h.name.as_deref())
            .map(|n| format!("     name: {n}\n"))
            .unwrap_or_default();
        out.push_str(&format!(
            "{:>3}  {started}  {mode}  {command}\n{name}     ended: {}\n     journal: {}\n",
            i + 1,
            r.ended,
            r.path.display()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_default_name_carries_its_start() {
        let t = default_name_start("witness-wrap-20261203T185436-7465.jsonl").unwrap();
        assert_eq!(t, 1796324076.0);
        assert_eq!(
            default_name_start("witness-load-20261203T185436-7465-2.jsonl"),
            Some(t)
        );
        assert_eq!(default_name_start("runs.tsv"), None);
        assert_eq!(default_name_start("notes.jsonl"), None);
    }

    #[test]
    fn the_index_and_the_folder_meet_newest_first_once_each() {
        let dir = std::env::temp_dir().join(format!("witness-runs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let old = dir.join("witness-wrap-20261203T185436-1.jsonl");
        let new = dir.join("witness-wrap-20261203T185437-2.jsonl");
        let elsewhere = dir.join("sub").join("mine.jsonl");
        std::fs::create_dir_all(elsewhere.parent().unwrap()).unwrap();
        for p in [&old, &new, &elsewhere] {
            std::fs::write(p, "{}\n").unwrap();
        }
        record(&dir, &new, 1796324077.25);
        record(&dir, &elsewhere, 1796324076.5);
        record(&dir, &dir.join("gone.jsonl"), 1796324099.0);
        assert_eq!(recent(&dir), vec![new, elsewhere, old]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_summary_reads_the_header_and_the_end_or_says_why_there_is_none() {
        let dir = std::env::temp_dir().join(format!("witness-runs-end-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut h = Header::new("wrap", vec!["/usr/bin/witness".into(), "wrap".into()]);
        // Far more than the tail read: only the end is read.
        let filler =
            "{\"t_s\":1.0,\"kind\":\"note\",\"level\":\"info\",\"text\":\"x\"}\n".repeat(4000);
        let ended = dir.join("ended.jsonl");
        std::fs::write(
            &ended,
            format!(
                "{}\n{filler}{{\"t_s\":2.0,\"kind\":\"end\",\"reason\":\"the server exited with 3\",\"partial\":false,\"exit_code\":3}}\n",
                serde_json::to_string(&h).unwrap()
            ),
        )
        .unwrap();
        let s = summary(&ended);
        assert_eq!(s.ended, "the server exited with 3 (exit 3)");
        assert_eq!(command_words(s.header.as_ref().unwrap()), "witness wrap");
        // No end row: still running (this process is a witness test binary) or cut off.
        let open = dir.join("open.jsonl");
        std::fs::write(&open, format!("{}\n", serde_json::to_string(&h).unwrap())).unwrap();
        assert_eq!(
            summary(&open).ended,
            format!("running (witness pid {})", std::process::id())
        );
        h.pid = u32::MAX - 1;
        std::fs::write(&open, format!("{}\n", serde_json::to_string(&h).unwrap())).unwrap();
        assert!(summary(&open).ended.starts_with("no end recorded"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
