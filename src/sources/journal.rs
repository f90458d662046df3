//! A witness journal read record by record (plain or gzipped), tolerating a last line cut off
//! mid-write as [`crate::journal::read`] does, but never holding more than one line.

use std::io::BufRead;
use std::path::Path;

use anyhow::Context;

use crate::journal::{Header, Record};

/// At most this many unreadable lines are named; the rest are counted.
const SKIPS_NAMED: usize = 5;

pub struct JournalStream {
    input: Box<dyn BufRead + Send>,
    pub header: Header,
    lineno: u64,
    buf: Vec<u8>,
    /// Set when the last line was cut off mid-write.
    pub truncated: Option<String>,
    /// The first unreadable lines, named; `skipped_count` counts them all.
    pub skipped: Vec<String>,
    pub skipped_count: u64,
    /// A read error that ended the stream early.
    pub error: Option<String>,
}

impl JournalStream {
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        let mut input = super::open_maybe_gz(path)
            .with_context(|| format!("opening the journal {}", path.display()))?;
        let mut first = String::new();
        input
            .read_line(&mut first)
            .with_context(|| format!("reading the journal {}", path.display()))?;
        let header: Header = serde_json::from_str(first.trim_end()).map_err(|e| {
            anyhow::anyhow!(
                "{}: its first line is not a witness journal header ({e}); is this a journal? (k6 results go with --k6)",
                path.display()
            )
        })?;
        Ok(Self {
            input,
            header,
            lineno: 1,
            buf: Vec::new(),
            truncated: None,
            skipped: Vec::new(),
            skipped_count: 0,
            error: None,
        })
    }
}

impl Iterator for JournalStream {
    type Item = Record;

    fn next(&mut self) -> Option<Record> {
        loop {
            self.buf.clear();
            let n = match self.input.read_until(b'\n', &mut self.buf) {
                Ok(n) => n,
                Err(e) => {
                    self.error = Some(format!("read error after line {}: {e}", self.lineno));
                    return None;
                }
            };
            if n == 0 {
                return None;
            }
            self.lineno += 1;
            let complete = self.buf.last() == Some(&b'\n');
            // Valid UTF-8 (every line witness writes) is checked at its fast pace and borrowed;
            // only a line that is not gets the slower replacing conversion.
            let text = match std::str::from_utf8(&self.buf) {
                Ok(t) => std::borrow::Cow::Borrowed(t),
                Err(_) => String::from_utf8_lossy(&self.buf),
            };
            let text = text.trim_end();
            if text.is_empty() {
                continue;
            }
            match crate::journal::codec::decode(text.as_bytes()) {
                Ok(r) => return Some(r),
                Err(_) if !complete => {
                    self.truncated = Some(format!(
                        "line {} was cut off mid-write ({} bytes kept out); witness was probably killed",
                        self.lineno,
                        self.buf.len()
                    ));
                }
                Err(e) => {
                    self.skipped_count += 1;
                    if self.skipped.len() < SKIPS_NAMED {
                        self.skipped.push(format!("line {}: {e}", self.lineno));
                    }
                }
            }
        }
    }
}

impl crate::journal::RecordPass for JournalStream {
    fn state(&self) -> crate::journal::ReadState {
        let mut skipped = self.skipped.clone();
        if self.skipped_count > self.skipped.len() as u64 {
            skipped.push(format!(
                "… and {} more unreadable line(s)",
                self.skipped_count - self.skipped.len() as u64
            ));
        }
        crate::journal::ReadState {
            truncated: self.truncated.clone().or_else(|| self.error.clone()),
            skipped,
            warnings: vec![],
        }
    }
}

/// A journal file analysed in passes: each pass opens it again and streams it, so nothing but the
/// header stays in memory between passes. A pass never reads past the records the first pass saw
/// (a journal still being written does not grow under the analysis).
pub struct JournalFile {
    path: std::path::PathBuf,
    header: Header,
    /// Records the first pass yielded; later passes stop there.
    seen: std::cell::Cell<Option<u64>>,
}

impl JournalFile {
    /// Opens the journal and reads its header; a file that is not a journal is an error here.
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        let s = JournalStream::open(path)?;
        Ok(Self {
            path: path.to_path_buf(),
            header: s.header,
            seen: std::cell::Cell::new(None),
        })
    }
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A pass that counts what it yields, so that later passes can stop at the same record.
struct Counted<'a> {
    inner: JournalStream,
    n: u64,
    limit: Option<u64>,
    seen: &'a std::cell::Cell<Option<u64>>,
}

impl Iterator for Counted<'_> {
    type Item = Record;
    fn next(&mut self) -> Option<Record> {
        if self.limit.is_some_and(|l| self.n >= l) {
            return None;
        }
        match self.inner.next() {
            Some(r) => {
                self.n += 1;
                Some(r)
            }
            None => {
                if self.limit.is_none() {
                    self.seen.set(Some(self.n));
                }
                None
            }
        }
    }
}

impl crate::journal::RecordPass for Counted<'_> {
    fn state(&self) -> crate::journal::ReadState {
        crate::journal::RecordPass::state(&self.inner)
    }
}

impl crate::journal::Replay for JournalFile {
    fn header(&self) -> &Header {
        &self.header
    }
    fn pass(&self) -> Box<dyn crate::journal::RecordPass + '_> {
        match JournalStream::open(&self.path) {
            Ok(s) => Box::new(Counted {
                inner: s,
                n: 0,
                limit: self.seen.get(),
                seen: &self.seen,
            }),
            Err(e) => Box::new(crate::journal::replay::Failed(format!(
                "reading {} again failed: {e:#}",
                self.path.display()
            ))),
        }
    }
}
