//! A journal as analysis reads it: a header and records **streamed**, one pass at a time, never
//! collected. Analysis makes two passes (the lifecycle context, then the requests through bounded
//! accumulators), so a day-long run costs the same memory to analyse as a minute-long one.
//!
//! Three sources implement [`Replay`]: a journal file (re-read from disk on each pass, plain or
//! gzipped; `sources::journal::JournalFile`), several inputs merged onto one clock
//! (`sources::MergedReplay`), and a journal already in memory ([`Loaded`], for tests and small
//! hand-built journals).

use super::{Header, Loaded, Record};

/// What a pass learnt about its input besides the records: a cut-off last line, unreadable lines,
/// and anything else worth a warning (an input of a merge that ended early).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReadState {
    /// Set when the last line was cut off mid-write (witness was killed): says where.
    pub truncated: Option<String>,
    /// Lines that could not be read, named (the first few) and counted.
    pub skipped: Vec<String>,
    pub warnings: Vec<String>,
}

/// One pass over a journal's records, in order.
pub trait RecordPass: Iterator<Item = Record> {
    /// What the pass found about its input so far (complete once the iterator is exhausted).
    fn state(&self) -> ReadState;
}

/// A journal that can be read more than once, each time from its first record.
pub trait Replay {
    fn header(&self) -> &Header;
    /// A new pass from the first record after the header.
    fn pass(&self) -> Box<dyn RecordPass + '_>;
}

/// A pass over records in memory.
struct InMemory<'a> {
    records: std::slice::Iter<'a, Record>,
    state: ReadState,
}

impl Iterator for InMemory<'_> {
    type Item = Record;
    fn next(&mut self) -> Option<Record> {
        self.records.next().cloned()
    }
}

impl RecordPass for InMemory<'_> {
    fn state(&self) -> ReadState {
        self.state.clone()
    }
}

impl Replay for Loaded {
    fn header(&self) -> &Header {
        &self.header
    }
    fn pass(&self) -> Box<dyn RecordPass + '_> {
        Box::new(InMemory {
            records: self.records.iter(),
            state: ReadState {
                truncated: self.truncated.clone(),
                skipped: self.skipped.clone(),
                warnings: vec![],
            },
        })
    }
}

/// A pass that yields nothing and says why (an input that could not be opened again).
pub struct Failed(pub String);

impl Iterator for Failed {
    type Item = Record;
    fn next(&mut self) -> Option<Record> {
        None
    }
}

impl RecordPass for Failed {
    fn state(&self) -> ReadState {
        ReadState {
            warnings: vec![self.0.clone()],
            ..Default::default()
        }
    }
}
