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
            let text = String::from_utf8_lossy(&self.buf);
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
