//! witness's own words on stdout and stderr, never a panic and never an error of the run.
//!
//! Rust ignores SIGPIPE, so a write to a closed pipe (an MCP host that stopped reading witness's
//! stderr, `witness load … | head -1`) returns EPIPE, and `println!`/`eprintln!` panic on it (exit
//! 101). Every line witness prints goes through here instead: the first failed write marks the
//! stream gone, and from then on its lines are dropped while the run goes on — the journal, the
//! report and the exit code are what they would have been. (A descriptor that was closed before
//! witness started, `2>&-`, is reopened on /dev/null by Rust's runtime, so it never gets here.)
//!
//! `outln!`/`out!` write to stdout, `errln!`/`err!` to stderr, with `format!`'s syntax; [`Sink`]
//! is a `Write` for a stream that never fails, for code that writes through `std::io::Write`.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// One of witness's two output streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum To {
    Stdout,
    Stderr,
}

static STDOUT_GONE: AtomicBool = AtomicBool::new(false);
static STDERR_GONE: AtomicBool = AtomicBool::new(false);

impl To {
    fn gone(self) -> &'static AtomicBool {
        match self {
            To::Stdout => &STDOUT_GONE,
            To::Stderr => &STDERR_GONE,
        }
    }

    /// Whether a write to this stream has failed (its reader is gone): nothing more is written.
    pub fn is_gone(self) -> bool {
        self.gone().load(Ordering::Relaxed)
    }
}

/// Writes `bytes` whole to the stream (and flushes), or marks the stream gone; true when written.
pub fn write_bytes(to: To, bytes: &[u8]) -> bool {
    if to.is_gone() {
        return false;
    }
    let written = match to {
        To::Stdout => {
            let mut o = std::io::stdout().lock();
            o.write_all(bytes).and_then(|_| o.flush())
        }
        To::Stderr => {
            let mut e = std::io::stderr().lock();
            e.write_all(bytes).and_then(|_| e.flush())
        }
    };
    if written.is_err() {
        to.gone().store(true, Ordering::Relaxed);
    }
    written.is_ok()
}

/// Writes formatted text to the stream, with a newline when `line`; what `outln!` and `errln!` call.
pub fn write_fmt(to: To, args: std::fmt::Arguments<'_>, line: bool) -> bool {
    if to.is_gone() {
        return false;
    }
    // One write for the whole line, so lines from several threads do not interleave.
    let mut text = match args.as_str() {
        Some(s) => s.to_string(),
        None => args.to_string(),
    };
    if line {
        text.push('\n');
    }
    write_bytes(to, text.as_bytes())
}

/// A `Write` on stdout or stderr that never fails: once the reader is gone, bytes are dropped and
/// reported written, so a renderer writing through it finishes as if they had been read.
pub struct Sink(pub To);

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        write_bytes(self.0, buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A line on stdout, never a panic (see the module's doc).
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {{
        $crate::out::write_fmt($crate::out::To::Stdout, format_args!($($arg)*), true);
    }};
}

/// Text on stdout without a newline, never a panic.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {{
        $crate::out::write_fmt($crate::out::To::Stdout, format_args!($($arg)*), false);
    }};
}

/// A line on stderr, never a panic (see the module's doc).
#[macro_export]
macro_rules! errln {
    ($($arg:tt)*) => {{
        $crate::out::write_fmt($crate::out::To::Stderr, format_args!($($arg)*), true);
    }};
}

/// Text on stderr without a newline, never a panic.
#[macro_export]
macro_rules! err {
    ($($arg:tt)*) => {{
        $crate::out::write_fmt($crate::out::To::Stderr, format_args!($($arg)*), false);
    }};
}
